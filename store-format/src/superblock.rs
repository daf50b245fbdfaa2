//! The superblock: the two commit-record copies at the head of
//! `embtier.meta` (FORMAT.md, "Superblock").

use crate::*;

/// Superblock field offsets (see FORMAT.md, "Superblock").
pub mod sb {
    /// `[u8; 8]` magic, [`super::SUPERBLOCK_MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u32` format version.
    pub const VERSION: usize = 8;
    /// `u32` flags, zero.
    pub const FLAGS: usize = 12;
    /// `u64` random store identifier chosen at creation.
    pub const STORE_ID: usize = 16;
    /// `u64` creation time, seconds since the Unix epoch.
    pub const CREATED: usize = 24;
    /// `u32` block size, 4096.
    pub const BLOCK_SIZE: usize = 32;
    /// `u32` number of catalog entries.
    pub const TABLE_COUNT: usize = 36;
    /// `u64` byte offset of the catalog in the metadata file.
    pub const CATALOG_OFFSET: usize = 40;
    /// `u64` byte length of the catalog.
    pub const CATALOG_LEN: usize = 48;
    /// `u32` CRC-32C of the catalog bytes.
    pub const CATALOG_CRC: usize = 56;
    /// `u64` number of blocks the data file spans.
    pub const DATA_BLOCKS: usize = 64;
    /// `u64` checkpoint generation: checkpoints committed since create.
    pub const GENERATION: usize = 72;
    /// `u64` superblock sequence number: incremented by every superblock
    /// write; of two valid copies the higher one is current.
    pub const SEQ: usize = 80;
    /// `u64` epoch committed by the last checkpoint (0: none yet).
    pub const COMMITTED_EPOCH: usize = 88;
    /// `u64` the lowest epoch not yet handed out.
    pub const NEXT_EPOCH: usize = 96;
    /// `u64` row-log blocks the last checkpoint committed (version 3; zero
    /// in version 2): blocks `data_blocks..data_blocks + rowlog_blocks` of
    /// the data file are the committed row log.
    pub const ROWLOG_BLOCKS: usize = 104;
    /// `u64` the generation whose commit wrote the call counters (version
    /// 4; 0: none written, every counter is 0): the counter slot
    /// `counters_generation % 2` after the catalog holds them.
    pub const COUNTERS_GENERATION: usize = 112;
    /// `u32` dead epoch ranges that follow (version 4), at most
    /// [`super::MAX_DEAD_RANGES`].
    pub const DEAD_COUNT: usize = 120;
    /// `u32` (version 4) the first row-log block the last checkpoint
    /// appended: blocks `rowlog_from..rowlog_blocks` carry its epoch, the
    /// blocks before it older ones.
    pub const ROWLOG_FROM: usize = 124;
    /// `u32` (version 4) CRC-32C of the written-group list the last
    /// checkpoint wrote (0 when it wrote no group in place).
    pub const WRITTEN_CRC: usize = 128;
    /// `u32` (version 5; zero before) the row-log block where the committed
    /// log begins: the log is a ring of `rowlog_ring` blocks, and its
    /// `rowlog_blocks` committed blocks are `(rowlog_start + i) mod
    /// rowlog_ring` for `i` in `0..rowlog_blocks`, oldest first.
    pub const ROWLOG_START: usize = 132;
    /// `u64` (version 4) groups in that list: block groups the last
    /// checkpoint's epoch wrote in place.
    pub const WRITTEN_GROUPS: usize = 136;
    /// Dead epoch ranges (version 4): `dead_count` pairs of `u64` (first,
    /// last), inclusive, ascending and disjoint. A sealed block of a dead
    /// epoch was written by an epoch that never committed and was not
    /// undone: it is never read as row values.
    pub const DEAD_RANGES: usize = 144;
    /// `u64` a random number drawn for each commit (0 where none was:
    /// written by a build before it, whose decoder ignores it). Files
    /// outside the store's directory that hold rows of one checkpoint (kept
    /// tiers, slot stamps) name it, so that a copy of the store that parted
    /// from it and committed the same generation is not taken for it.
    pub const COMMIT_ID: usize = 4072;
    /// `u64` (version 5; zero before) the blocks of the ring the row log
    /// wraps in (0: it does not wrap, as in older versions, where the log
    /// always starts at block 0).
    pub const ROWLOG_RING: usize = 4080;
    /// `u32` CRC-32C of bytes `[0, CRC)` of the superblock.
    pub const CRC: usize = 4092;
}

/// The superblock: blocks 0 and 1 of the metadata file hold one copy each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    /// Format version.
    pub version: FormatVersion,
    /// Random identifier chosen at creation.
    pub store_id: u64,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix: u64,
    /// Number of catalog entries.
    pub table_count: u32,
    /// Byte offset of the catalog in the metadata file.
    pub catalog_offset: u64,
    /// Byte length of the catalog.
    pub catalog_len: u64,
    /// CRC-32C of the catalog bytes.
    pub catalog_crc: u32,
    /// Number of blocks the data file spans.
    pub data_blocks: u64,
    /// Checkpoints committed since create.
    pub generation: u64,
    /// Superblock writes since create; the higher of two valid copies wins.
    pub seq: u64,
    /// Epoch whose writes the last checkpoint committed (0: none).
    pub committed_epoch: u64,
    /// Lowest epoch never handed out: the next session or checkpoint
    /// interval writes with it.
    pub next_epoch: u64,
    /// Row-log blocks committed by the last checkpoint (0: an empty log).
    pub rowlog_blocks: u64,
    /// The first row-log block the last checkpoint appended, counted from
    /// the log's start (version 4; 0 in older versions, where it is not
    /// checked).
    pub rowlog_from: u32,
    /// The row-log block where the committed log begins (version 5; 0 in
    /// older versions).
    pub rowlog_start: u32,
    /// The blocks of the ring the row log wraps in (version 5; 0: it does
    /// not wrap).
    pub rowlog_ring: u64,
    /// A random number drawn for the commit that wrote this generation (0:
    /// none, a commit of a build before it). Kept tiers and slot stamps
    /// name it: a copy of the store that parted from this one at an earlier
    /// checkpoint commits the same generation with another.
    pub commit_id: u64,
    /// Groups the last checkpoint's epoch wrote in place, listed in its
    /// [`WrittenList`] (version 4; 0: none, or an older version).
    pub written_groups: u64,
    /// CRC-32C of that list's bytes.
    pub written_crc: u32,
    /// The generation whose commit wrote the call counters (0: none; every
    /// counter is 0). See [`CounterSlot`].
    pub counters_generation: u64,
    /// Dead epochs: inclusive ranges, ascending and disjoint, of epochs
    /// that were handed out and never committed. A sealed block carrying
    /// one was not undone by recovery and is never read as row values, at
    /// this open or any later one.
    pub dead_epochs: Vec<(u64, u64)>,
}

impl Superblock {
    /// The row-log block (counted from the log's first block in the data
    /// file) of the committed log's `i`-th block, oldest first.
    pub fn rowlog_block(&self, i: u64) -> u64 {
        let at = self.rowlog_start as u64 + i;
        if self.rowlog_ring == 0 {
            at
        } else {
            at % self.rowlog_ring
        }
    }

    /// Row-log blocks from the log's first block up to the last committed
    /// one that the committed log spans: the whole ring once it wraps.
    pub fn rowlog_extent(&self) -> u64 {
        if self.rowlog_blocks == 0 {
            return 0;
        }
        let end = self.rowlog_start as u64 + self.rowlog_blocks;
        if self.rowlog_ring == 0 {
            end
        } else {
            end.min(self.rowlog_ring)
        }
    }

    /// Whether epoch `e` is dead: handed out, never committed.
    pub fn is_dead(&self, e: u64) -> bool {
        let i = self.dead_epochs.partition_point(|&(_, last)| last < e);
        self.dead_epochs
            .get(i)
            .is_some_and(|&(first, _)| first <= e)
    }

    /// Add the inclusive range `first..=last` to the dead epochs, merging
    /// it with ranges it overlaps or touches. Returns whether the list
    /// still fits a superblock ([`MAX_DEAD_RANGES`]).
    pub fn add_dead(&mut self, first: u64, last: u64) -> bool {
        if first <= last {
            self.dead_epochs.push((first, last));
            self.dead_epochs.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.dead_epochs.len());
            for &(f, l) in &self.dead_epochs {
                match merged.last_mut() {
                    Some(m) if f <= m.1.saturating_add(1) => m.1 = m.1.max(l),
                    _ => merged.push((f, l)),
                }
            }
            self.dead_epochs = merged;
        }
        self.dead_epochs.len() <= MAX_DEAD_RANGES
    }

    /// Encode into one block.
    pub fn encode(&self) -> [u8; BLOCK_SIZE] {
        let mut b = [0u8; BLOCK_SIZE];
        b[sb::MAGIC..sb::MAGIC + 8].copy_from_slice(&SUPERBLOCK_MAGIC);
        put_u32(&mut b, sb::VERSION, self.version as u32);
        put_u32(&mut b, sb::FLAGS, 0);
        put_u64(&mut b, sb::STORE_ID, self.store_id);
        put_u64(&mut b, sb::CREATED, self.created_unix);
        put_u32(&mut b, sb::BLOCK_SIZE, BLOCK_SIZE as u32);
        put_u32(&mut b, sb::TABLE_COUNT, self.table_count);
        put_u64(&mut b, sb::CATALOG_OFFSET, self.catalog_offset);
        put_u64(&mut b, sb::CATALOG_LEN, self.catalog_len);
        put_u32(&mut b, sb::CATALOG_CRC, self.catalog_crc);
        put_u64(&mut b, sb::DATA_BLOCKS, self.data_blocks);
        put_u64(&mut b, sb::GENERATION, self.generation);
        put_u64(&mut b, sb::SEQ, self.seq);
        put_u64(&mut b, sb::COMMITTED_EPOCH, self.committed_epoch);
        put_u64(&mut b, sb::NEXT_EPOCH, self.next_epoch);
        put_u64(&mut b, sb::ROWLOG_BLOCKS, self.rowlog_blocks);
        put_u64(&mut b, sb::COUNTERS_GENERATION, self.counters_generation);
        assert!(
            self.dead_epochs.len() <= MAX_DEAD_RANGES,
            "more dead epoch ranges than a superblock holds"
        );
        put_u32(&mut b, sb::DEAD_COUNT, self.dead_epochs.len() as u32);
        put_u32(&mut b, sb::ROWLOG_FROM, self.rowlog_from);
        put_u32(&mut b, sb::ROWLOG_START, self.rowlog_start);
        put_u64(&mut b, sb::ROWLOG_RING, self.rowlog_ring);
        put_u64(&mut b, sb::COMMIT_ID, self.commit_id);
        put_u32(&mut b, sb::WRITTEN_CRC, self.written_crc);
        put_u64(&mut b, sb::WRITTEN_GROUPS, self.written_groups);
        for (i, &(first, last)) in self.dead_epochs.iter().enumerate() {
            put_u64(&mut b, sb::DEAD_RANGES + 16 * i, first);
            put_u64(&mut b, sb::DEAD_RANGES + 16 * i + 8, last);
        }
        let crc = crc32c::crc32c(&b[..sb::CRC]);
        put_u32(&mut b, sb::CRC, crc);
        b
    }

    /// Decode and validate the copy at offset 0. Magic is checked first, so
    /// a file that is not a store says so rather than reporting a checksum
    /// error.
    pub fn decode(b: &[u8]) -> Result<Superblock, FormatError> {
        Superblock::decode_at(b, 0)
    }

    /// Decode and validate a copy read from byte `at` of the metadata file
    /// (errors name offsets from there).
    pub fn decode_at(b: &[u8], at: u64) -> Result<Superblock, FormatError> {
        if b.len() < 8 || b[..8] != SUPERBLOCK_MAGIC {
            return Err(FormatError::BadMagic {
                offset: at,
                found: b[..b.len().min(8)].to_vec(),
                expected: SUPERBLOCK_MAGIC.to_vec(),
            });
        }
        if b.len() < BLOCK_SIZE {
            return Err(FormatError::Truncated {
                offset: at,
                needed: BLOCK_SIZE as u64,
                have: b.len() as u64,
            });
        }
        let stored = get_u32(b, sb::CRC);
        let computed = crc32c::crc32c(&b[..sb::CRC]);
        if stored != computed {
            return Err(FormatError::ChecksumMismatch {
                offset: at,
                stored,
                computed,
            });
        }
        let version = FormatVersion::try_from(get_u32(b, sb::VERSION))?;
        let bs = get_u32(b, sb::BLOCK_SIZE);
        if bs as usize != BLOCK_SIZE {
            return Err(FormatError::InvalidField {
                field: "block_size",
                offset: at + sb::BLOCK_SIZE as u64,
                value: bs.to_string(),
            });
        }
        let (committed_epoch, next_epoch) =
            (get_u64(b, sb::COMMITTED_EPOCH), get_u64(b, sb::NEXT_EPOCH));
        if next_epoch <= committed_epoch {
            return Err(FormatError::InvalidField {
                field: "next_epoch",
                offset: at + sb::NEXT_EPOCH as u64,
                value: format!("{next_epoch}, not above the committed epoch {committed_epoch}"),
            });
        }
        let v4 = version.has_v4_fields();
        let rowlog_from = get_u32(b, sb::ROWLOG_FROM);
        if v4 && rowlog_from as u64 > get_u64(b, sb::ROWLOG_BLOCKS) {
            return Err(FormatError::InvalidField {
                field: "rowlog_from",
                offset: at + sb::ROWLOG_FROM as u64,
                value: format!(
                    "{rowlog_from}, past the row log's {} blocks",
                    get_u64(b, sb::ROWLOG_BLOCKS)
                ),
            });
        }
        let v5 = version.has_v5_fields();
        let (rowlog_start, rowlog_ring) = if v5 {
            (get_u32(b, sb::ROWLOG_START), get_u64(b, sb::ROWLOG_RING))
        } else {
            (0, 0)
        };
        let blocks = get_u64(b, sb::ROWLOG_BLOCKS);
        if v5 && rowlog_ring != 0 && (blocks > rowlog_ring || rowlog_start as u64 >= rowlog_ring) {
            return Err(FormatError::InvalidField {
                field: "rowlog_start",
                offset: at + sb::ROWLOG_START as u64,
                value: format!(
                    "{rowlog_start} with {blocks} blocks committed: not inside the row log's \
                     ring of {rowlog_ring} blocks"
                ),
            });
        }
        // Ring blocks are u32 indices below the ring's size, and the two
        // highest u32 values mean "not logged" and "merged" in a reader's
        // map: the largest ring is u32::MAX - 1 blocks (2^32 - 2).
        if v5 && rowlog_ring > (u32::MAX - 1) as u64 {
            return Err(FormatError::InvalidField {
                field: "rowlog_ring",
                offset: at + sb::ROWLOG_RING as u64,
                value: format!("{rowlog_ring}, more than 2^32 - 2 blocks"),
            });
        }
        if v5 && rowlog_ring == 0 && rowlog_start != 0 {
            return Err(FormatError::InvalidField {
                field: "rowlog_start",
                offset: at + sb::ROWLOG_START as u64,
                value: format!("{rowlog_start}, in a row log that does not wrap"),
            });
        }
        let mut dead_epochs = Vec::new();
        if v4 {
            let n = get_u32(b, sb::DEAD_COUNT) as usize;
            if n > MAX_DEAD_RANGES {
                return Err(FormatError::InvalidField {
                    field: "dead_count",
                    offset: at + sb::DEAD_COUNT as u64,
                    value: format!("{n}, more than {MAX_DEAD_RANGES}"),
                });
            }
            for i in 0..n {
                let (first, last) = (
                    get_u64(b, sb::DEAD_RANGES + 16 * i),
                    get_u64(b, sb::DEAD_RANGES + 16 * i + 8),
                );
                let after = dead_epochs.last().map_or(0, |&(_, l): &(u64, u64)| l + 1);
                if first == 0
                    || first > last
                    || first < after
                    || last >= next_epoch
                    || (first..=last).contains(&committed_epoch)
                {
                    return Err(FormatError::InvalidField {
                        field: "dead epoch range",
                        offset: at + (sb::DEAD_RANGES + 16 * i) as u64,
                        value: format!(
                            "{first}..={last}: not ascending, disjoint, above 0 and below the \
                             next epoch {next_epoch}, or holding the committed epoch"
                        ),
                    });
                }
                dead_epochs.push((first, last));
            }
        }
        Ok(Superblock {
            version,
            store_id: get_u64(b, sb::STORE_ID),
            created_unix: get_u64(b, sb::CREATED),
            table_count: get_u32(b, sb::TABLE_COUNT),
            catalog_offset: get_u64(b, sb::CATALOG_OFFSET),
            catalog_len: get_u64(b, sb::CATALOG_LEN),
            catalog_crc: get_u32(b, sb::CATALOG_CRC),
            data_blocks: get_u64(b, sb::DATA_BLOCKS),
            generation: get_u64(b, sb::GENERATION),
            seq: get_u64(b, sb::SEQ),
            committed_epoch,
            next_epoch,
            // Zero in a version 2 block, which this field's bytes were.
            rowlog_blocks: match version {
                FormatVersion::V2 => 0,
                _ => get_u64(b, sb::ROWLOG_BLOCKS),
            },
            counters_generation: if v4 {
                get_u64(b, sb::COUNTERS_GENERATION)
            } else {
                0
            },
            rowlog_from: if v4 { rowlog_from } else { 0 },
            rowlog_start,
            rowlog_ring,
            commit_id: get_u64(b, sb::COMMIT_ID),
            written_groups: if v4 {
                get_u64(b, sb::WRITTEN_GROUPS)
            } else {
                0
            },
            written_crc: if v4 { get_u32(b, sb::WRITTEN_CRC) } else { 0 },
            dead_epochs,
        })
    }
}
