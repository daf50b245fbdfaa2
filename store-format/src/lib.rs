//! Every byte layout that embtier writes, each with its reader and writer.
//!
//! The byte-level specification is `store-format/FORMAT.md`; every offset it
//! names is a constant here, and `tests/format.rs` in this crate pins them.
//! All integers are little-endian. All checksums are CRC-32C (Castagnoli).
//!
//! Layouts:
//! - [`Superblock`]: blocks 0 and 1 of the metadata file `embtier.meta`
//!   (two copies; the checkpoint commit record).
//! - [`Catalog`] of [`TableEntry`]: the tables, right after the superblocks.
//! - Data blocks: 4 KiB blocks of the SSD data file, each sealed with a
//!   trailer ([`seal_block`], [`check_block`]); rows are placed in them by a
//!   [`RowLayout`].
//! - [`journal`]: the undo journal of the checkpoint protocol.
//! - [`rowlog`]: blocks of the row log, the region of the data file after
//!   the tables where written-back rows are appended packed.

#![forbid(unsafe_code)]

use thiserror::Error;

pub mod hotset;
pub mod journal;
pub mod rowlog;
pub mod trace;

/// Size of every on-disk block, in bytes. Data-file offsets are multiples of it.
pub const BLOCK_SIZE: usize = 4096;
/// Bytes of a data block that hold row data; the rest is the trailer.
pub const BLOCK_PAYLOAD: usize = 4072;

/// Offset of the write epoch (u64) in a data block's trailer: the epoch of
/// the checkpoint protocol during which the block was written.
pub const TRAILER_EPOCH: usize = 4072;
/// Offset of the block number (u64) in a data block's trailer.
pub const TRAILER_BLOCK_NO: usize = 4080;
/// Offset of the block magic (u32) in a data block's trailer.
pub const TRAILER_MAGIC: usize = 4088;
/// Offset of the CRC-32C (u32) of bytes `[0, TRAILER_CRC)` of a data block.
pub const TRAILER_CRC: usize = 4092;
/// Magic of a sealed data block: the bytes `EBLK` read as a little-endian u32.
pub const BLOCK_MAGIC: u32 = u32::from_le_bytes(*b"EBLK");

/// Magic at offset 0 of the metadata file.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"EMBTIER\0";

/// Byte offsets of the two copies of the superblock in the metadata file.
pub const SUPERBLOCK_SLOTS: [u64; 2] = [0, BLOCK_SIZE as u64];
/// Byte offset of the catalog in the metadata file.
pub const CATALOG_OFFSET: u64 = 2 * BLOCK_SIZE as u64;
/// Most dead epoch ranges a superblock holds (see [`sb::DEAD_RANGES`]).
pub const MAX_DEAD_RANGES: usize = 128;
/// Magic of a call-counter slot: `"ECNT"`.
pub const COUNTERS_MAGIC: u32 = u32::from_le_bytes(*b"ECNT");

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
    /// `u32` zero.
    pub const RESERVED: usize = 132;
    /// `u64` (version 4) groups in that list: block groups the last
    /// checkpoint's epoch wrote in place.
    pub const WRITTEN_GROUPS: usize = 136;
    /// Dead epoch ranges (version 4): `dead_count` pairs of `u64` (first,
    /// last), inclusive, ascending and disjoint. A sealed block of a dead
    /// epoch was written by an epoch that never committed and was not
    /// undone: it is never read as row values.
    pub const DEAD_RANGES: usize = 144;
    /// `u32` CRC-32C of bytes `[0, CRC)` of the superblock.
    pub const CRC: usize = 4092;
}

/// Catalog entry field offsets, relative to the entry (see FORMAT.md, "Catalog").
pub mod te {
    /// `[u8; 64]` table name, UTF-8, zero padded.
    pub const NAME: usize = 0;
    /// `u64` number of rows.
    pub const ROWS: usize = 64;
    /// `u32` elements per row.
    pub const DIM: usize = 72;
    /// `u8` element type ([`super::ElemType`]).
    pub const ELEM: usize = 76;
    /// `u8` initialiser kind ([`super::InitKind`]).
    pub const INIT: usize = 77;
    /// `u8` optimizer kind ([`super::OptimizerCode`]); 0 when not recorded.
    pub const OPTIMIZER: usize = 78;
    /// `u8` row map ([`super::RowMap`]): how row ids map to places in the
    /// table's block groups; 0 (dense) is the only one this build writes.
    pub const ROW_MAP: usize = 79;
    /// `u32` bytes of optimizer state stored after the weights of each row.
    pub const STATE_BYTES: usize = 80;
    /// `f32` initialiser scale `s` of uniform(-s, s).
    pub const INIT_SCALE: usize = 84;
    /// `u64` initialiser seed.
    pub const SEED: usize = 88;
    /// `u64` first data block of the table.
    pub const BASE_BLOCK: usize = 96;
    /// `u64` number of data blocks of the table.
    pub const BLOCK_COUNT: usize = 104;
    /// `u32` bytes per row (weights + state, rounded up to 4).
    pub const ROW_BYTES: usize = 112;
    /// `u32` rows per block group.
    pub const ROWS_PER_GROUP: usize = 116;
    /// `u32` blocks per block group.
    pub const BLOCKS_PER_GROUP: usize = 120;
    /// `u32` reserved, zero.
    pub const RESERVED2: usize = 124;
    /// Size of one entry.
    pub const SIZE: usize = 128;
}

/// Longest table name, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// Errors of decoding or validating a layout. The caller adds the file path.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum FormatError {
    /// The magic bytes are not embtier's.
    #[error("bad magic at offset {offset}: found {found:02x?}, expected {expected:02x?}")]
    BadMagic {
        /// Byte offset of the magic.
        offset: u64,
        /// What was found.
        found: Vec<u8>,
        /// What was expected.
        expected: Vec<u8>,
    },
    /// The format version is not one this build reads.
    #[error("unsupported format version {found} (this build reads versions 2 to {supported})")]
    UnsupportedVersion {
        /// Version found on disk.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// A checksum does not match its bytes.
    #[error(
        "checksum mismatch at offset {offset}: stored {stored:#010x}, computed {computed:#010x}"
    )]
    ChecksumMismatch {
        /// Byte offset of the checksummed region.
        offset: u64,
        /// Checksum stored on disk.
        stored: u32,
        /// Checksum of the bytes read.
        computed: u32,
    },
    /// A data block carries another block's number (a misdirected write).
    #[error("block at offset {offset} says it is block {found}, expected {expected}")]
    MisplacedBlock {
        /// Byte offset of the block.
        offset: u64,
        /// Block number in the trailer.
        found: u64,
        /// Block number of the position.
        expected: u64,
    },
    /// Fewer bytes than the layout needs.
    #[error("truncated at offset {offset}: need {needed} bytes, have {have}")]
    Truncated {
        /// Byte offset where the structure starts.
        offset: u64,
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        have: u64,
    },
    /// A field holds a value outside its domain.
    #[error("invalid {field} at offset {offset}: {value}")]
    InvalidField {
        /// Field name.
        field: &'static str,
        /// Byte offset of the field.
        offset: u64,
        /// The value found, rendered.
        value: String,
    },
}

impl FormatError {
    /// The byte offset the error names, if it names one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            FormatError::BadMagic { offset, .. }
            | FormatError::ChecksumMismatch { offset, .. }
            | FormatError::MisplacedBlock { offset, .. }
            | FormatError::Truncated { offset, .. }
            | FormatError::InvalidField { offset, .. } => Some(*offset),
            FormatError::UnsupportedVersion { .. } => None,
        }
    }
}

/// Store format versions this build reads. Version 1 (no checkpoint
/// protocol) is no longer read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatVersion {
    /// Two superblock copies, epochs in data-block trailers, the undo journal.
    V2 = 2,
    /// Version 2 and the row log: the superblock's `rowlog_blocks`, and
    /// row-log blocks after the tables in the data file. A version 2 store
    /// reads as one with an empty row log.
    V3 = 3,
    /// Version 3, dead epoch ranges and the persisted call counters in the
    /// superblock, and the counter slots after the catalog. Versions 2 and
    /// 3 read as stores with no dead epochs and counters at zero.
    V4 = 4,
}

impl FormatVersion {
    /// The version this build writes.
    pub const CURRENT: FormatVersion = FormatVersion::V4;

    /// Whether the superblock carries version 4's fields (dead epochs,
    /// call counters, `rowlog_from`, the written-group list).
    pub fn has_v4_fields(self) -> bool {
        !matches!(self, FormatVersion::V2 | FormatVersion::V3)
    }
}

impl TryFrom<u32> for FormatVersion {
    type Error = FormatError;
    fn try_from(v: u32) -> Result<Self, FormatError> {
        match v {
            2 => Ok(FormatVersion::V2),
            3 => Ok(FormatVersion::V3),
            4 => Ok(FormatVersion::V4),
            found => Err(FormatError::UnsupportedVersion {
                found,
                supported: FormatVersion::CURRENT as u32,
            }),
        }
    }
}

/// Element type of the weights of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ElemType {
    /// IEEE 754 binary32.
    F32 = 0,
    /// IEEE 754 binary16.
    F16 = 1,
    /// bfloat16.
    Bf16 = 2,
    /// int8 with a per-row f32 scale and bias.
    Int8 = 3,
}

impl ElemType {
    /// Bytes of the weights of a row of `dim` elements, including per-row
    /// quantisation parameters.
    pub fn weight_bytes(self, dim: u32) -> u64 {
        let d = dim as u64;
        match self {
            ElemType::F32 => 4 * d,
            ElemType::F16 | ElemType::Bf16 => 2 * d,
            ElemType::Int8 => d + 8,
        }
    }
}

impl TryFrom<u8> for ElemType {
    type Error = u8;
    fn try_from(v: u8) -> Result<Self, u8> {
        Ok(match v {
            0 => ElemType::F32,
            1 => ElemType::F16,
            2 => ElemType::Bf16,
            3 => ElemType::Int8,
            other => return Err(other),
        })
    }
}

/// How a row that was never written is initialised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InitKind {
    /// All zeros.
    Zeros = 0,
    /// Uniform in `[-scale, scale)`, a function of (seed, row, element).
    Uniform = 1,
}

impl TryFrom<u8> for InitKind {
    type Error = u8;
    fn try_from(v: u8) -> Result<Self, u8> {
        Ok(match v {
            0 => InitKind::Zeros,
            1 => InitKind::Uniform,
            other => return Err(other),
        })
    }
}

/// How a table's row ids map to places in its block groups (catalog entry
/// byte 79). The engine asks only [`RowLayout::locate`] and
/// [`RowLayout::rows_of`] where a row is, so a new map (a co-access-aware
/// one, a hot region) is a variant here and its arms in those two methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
#[non_exhaustive]
pub enum RowMap {
    /// Row `r` is slot `r % rows_per_group` of group `r / rows_per_group`.
    #[default]
    Dense = 0,
}

impl TryFrom<u8> for RowMap {
    type Error = u8;
    fn try_from(v: u8) -> Result<Self, u8> {
        Ok(match v {
            0 => RowMap::Dense,
            other => return Err(other),
        })
    }
}

/// Where one row is: its block group, and the byte offset of its bytes in
/// the group's concatenated payload. Ordered by group, then offset: the
/// order in which a write-back visits rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowPlace {
    /// The block group.
    pub group: u64,
    /// Byte offset in the group's payload.
    pub offset: usize,
}

/// Where rows sit in the data file: rows are packed into *groups*; a group is
/// either several rows in one block, or one row spread over several blocks.
/// Which row is where is the [`RowMap`]'s; only [`RowLayout::locate`] and
/// [`RowLayout::rows_of`] answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLayout {
    /// Bytes per row.
    pub row_bytes: u32,
    /// Rows per group (1 when a row needs more than one block).
    pub rows_per_group: u32,
    /// Blocks per group (1 when rows fit in one block).
    pub blocks_per_group: u32,
    /// Which row is in which slot of which group.
    pub map: RowMap,
}

impl RowLayout {
    /// The layout for rows of `row_bytes` bytes (`row_bytes > 0`).
    pub fn for_row_bytes(row_bytes: u32) -> RowLayout {
        let rb = row_bytes.max(1) as usize;
        if rb <= BLOCK_PAYLOAD {
            RowLayout {
                row_bytes,
                rows_per_group: (BLOCK_PAYLOAD / rb) as u32,
                blocks_per_group: 1,
                map: RowMap::Dense,
            }
        } else {
            RowLayout {
                row_bytes,
                rows_per_group: 1,
                blocks_per_group: rb.div_ceil(BLOCK_PAYLOAD) as u32,
                map: RowMap::Dense,
            }
        }
    }

    /// Where `row` is: its group and its offset in the group's payload.
    #[inline]
    pub fn locate(&self, row: u64) -> RowPlace {
        match self.map {
            RowMap::Dense => {
                let rpg = self.rows_per_group.max(1) as u64;
                RowPlace {
                    group: row / rpg,
                    offset: (row % rpg) as usize * self.row_bytes as usize,
                }
            }
        }
    }

    /// The rows of `group` in a table of `table_rows` rows, in slot order.
    pub fn rows_of(&self, group: u64, table_rows: u64) -> std::ops::Range<u64> {
        match self.map {
            RowMap::Dense => {
                let rpg = self.rows_per_group.max(1) as u64;
                let first = group.saturating_mul(rpg).min(table_rows);
                first..first.saturating_add(rpg).min(table_rows)
            }
        }
    }

    /// Rows in `group` of a table of `table_rows` rows.
    pub fn rows_in_group(&self, group: u64, table_rows: u64) -> usize {
        let r = self.rows_of(group, table_rows);
        (r.end - r.start) as usize
    }

    /// Groups of a table of `table_rows` rows.
    pub fn groups_for(&self, table_rows: u64) -> u64 {
        table_rows.div_ceil(self.rows_per_group.max(1) as u64)
    }

    /// Payload bytes of one group's row slots (`rows_per_group` rows).
    pub fn slot_bytes(&self) -> usize {
        self.rows_per_group as usize * self.row_bytes as usize
    }

    /// Data blocks needed for `rows` rows (saturating at `u64::MAX`).
    pub fn blocks_for(&self, rows: u64) -> u64 {
        self.checked_blocks_for(rows).unwrap_or(u64::MAX)
    }

    /// Data blocks needed for `rows` rows, or `None` past `u64::MAX`.
    pub fn checked_blocks_for(&self, rows: u64) -> Option<u64> {
        self.groups_for(rows)
            .checked_mul(self.blocks_per_group as u64)
    }

    /// Bytes of one group's blocks.
    pub fn group_bytes(&self) -> usize {
        self.blocks_per_group as usize * BLOCK_SIZE
    }
}

/// Copy `out.len()` bytes starting at `offset` of a group's concatenated
/// payload out of its raw blocks (`blocks.len()` is a multiple of
/// [`BLOCK_SIZE`]), skipping the trailers.
pub fn read_group_payload(blocks: &[u8], mut offset: usize, out: &mut [u8]) {
    let mut done = 0;
    while done < out.len() {
        let blk = offset / BLOCK_PAYLOAD;
        let within = offset % BLOCK_PAYLOAD;
        let n = (BLOCK_PAYLOAD - within).min(out.len() - done);
        let src = blk * BLOCK_SIZE + within;
        out[done..done + n].copy_from_slice(&blocks[src..src + n]);
        done += n;
        offset += n;
    }
}

/// Write `data` at `offset` of a group's concatenated payload into its raw
/// blocks, skipping the trailers. The inverse of [`read_group_payload`].
pub fn write_group_payload(blocks: &mut [u8], mut offset: usize, data: &[u8]) {
    let mut done = 0;
    while done < data.len() {
        let blk = offset / BLOCK_PAYLOAD;
        let within = offset % BLOCK_PAYLOAD;
        let n = (BLOCK_PAYLOAD - within).min(data.len() - done);
        let dst = blk * BLOCK_SIZE + within;
        blocks[dst..dst + n].copy_from_slice(&data[done..done + n]);
        done += n;
        offset += n;
    }
}

/// State of a data block read from disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// All 4096 bytes are zero: the block was never written (a file hole),
    /// so its rows have their initial values.
    Hole,
    /// A sealed block whose checksum and block number match.
    Sealed,
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Seal a data block: write its trailer (write epoch, block number, magic,
/// CRC-32C).
///
/// # Panics
/// If `block.len() != BLOCK_SIZE` (a caller bug, never input-dependent).
pub fn seal_block(block: &mut [u8], block_no: u64, epoch: u64) {
    assert_eq!(block.len(), BLOCK_SIZE, "a data block is 4096 bytes");
    put_u64(block, TRAILER_EPOCH, epoch);
    put_u64(block, TRAILER_BLOCK_NO, block_no);
    put_u32(block, TRAILER_MAGIC, BLOCK_MAGIC);
    let crc = crc32c::crc32c(&block[..TRAILER_CRC]);
    put_u32(block, TRAILER_CRC, crc);
}

/// The write epoch in a sealed block's trailer (meaningful only for a block
/// that [`check_block`] found [`BlockState::Sealed`]).
///
/// # Panics
/// If `block.len() < BLOCK_SIZE` (a caller bug).
pub fn block_epoch(block: &[u8]) -> u64 {
    get_u64(block, TRAILER_EPOCH)
}

/// Check a data block read from block number `block_no` of the data file.
/// A slice of any other length than [`BLOCK_SIZE`] (a short read) is
/// reported as truncated.
pub fn check_block(block: &[u8], block_no: u64) -> Result<BlockState, FormatError> {
    let offset = block_no.saturating_mul(BLOCK_SIZE as u64);
    if block.len() != BLOCK_SIZE {
        return Err(FormatError::Truncated {
            offset,
            needed: BLOCK_SIZE as u64,
            have: block.len() as u64,
        });
    }
    let stored = get_u32(block, TRAILER_CRC);
    let magic = get_u32(block, TRAILER_MAGIC);
    if stored == 0 && magic == 0 && block.iter().all(|&b| b == 0) {
        return Ok(BlockState::Hole);
    }
    let computed = crc32c::crc32c(&block[..TRAILER_CRC]);
    if computed != stored {
        return Err(FormatError::ChecksumMismatch {
            offset,
            stored,
            computed,
        });
    }
    if magic != BLOCK_MAGIC {
        return Err(FormatError::BadMagic {
            offset: offset.saturating_add(TRAILER_MAGIC as u64),
            found: magic.to_le_bytes().to_vec(),
            expected: BLOCK_MAGIC.to_le_bytes().to_vec(),
        });
    }
    let found = get_u64(block, TRAILER_BLOCK_NO);
    if found != block_no {
        return Err(FormatError::MisplacedBlock {
            offset,
            found,
            expected: block_no,
        });
    }
    Ok(BlockState::Sealed)
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
    /// The first row-log block the last checkpoint appended (version 4;
    /// 0 in older versions, where it is not checked).
    pub rowlog_from: u32,
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

/// Call-counter slot field offsets (see FORMAT.md, "Call counters").
pub mod cs {
    /// `u32` [`super::COUNTERS_MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u32` counters in the slot: the catalog's table count.
    pub const COUNT: usize = 4;
    /// `u64` the generation whose commit wrote the slot.
    pub const GENERATION: usize = 8;
    /// `count` `u64` counters, one per table in catalog order.
    pub const COUNTERS: usize = 16;
}

/// The persisted per-table call counters (the stochastic rounding's
/// stream position), committed with each checkpoint. Two slots follow the
/// catalog in the metadata file; the commit of generation `g` writes slot
/// `g % 2`, so the previous checkpoint's slot is intact until the new
/// superblock is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSlot {
    /// The generation whose commit wrote it.
    pub generation: u64,
    /// One counter per table, in catalog order.
    pub counters: Vec<u64>,
}

impl CounterSlot {
    /// Bytes of one slot for `tables` tables: whole blocks.
    pub fn slot_len(tables: usize) -> u64 {
        ((cs::COUNTERS + 8 * tables + 4).div_ceil(BLOCK_SIZE) * BLOCK_SIZE) as u64
    }

    /// Byte offset in the metadata file of slot `k` (0 or 1) of a store
    /// whose superblock is `sb`: the slots start at the first block
    /// boundary after the catalog.
    pub fn offset(sb: &Superblock, k: u64) -> u64 {
        let start =
            (sb.catalog_offset + sb.catalog_len).div_ceil(BLOCK_SIZE as u64) * BLOCK_SIZE as u64;
        start + k * CounterSlot::slot_len(sb.table_count as usize)
    }

    /// Encode into `slot_len(counters.len())` bytes.
    pub fn encode(&self) -> Vec<u8> {
        let n = self.counters.len();
        let mut b = vec![0u8; CounterSlot::slot_len(n) as usize];
        put_u32(&mut b, cs::MAGIC, COUNTERS_MAGIC);
        put_u32(&mut b, cs::COUNT, n as u32);
        put_u64(&mut b, cs::GENERATION, self.generation);
        for (i, &c) in self.counters.iter().enumerate() {
            put_u64(&mut b, cs::COUNTERS + 8 * i, c);
        }
        let end = cs::COUNTERS + 8 * n;
        let crc = crc32c::crc32c(&b[..end]);
        put_u32(&mut b, end, crc);
        b
    }

    /// Decode the slot read from byte `at` of the metadata file, which
    /// must hold `tables` counters written by the commit of `generation`.
    pub fn decode_at(
        b: &[u8],
        at: u64,
        tables: usize,
        generation: u64,
    ) -> Result<CounterSlot, FormatError> {
        let end = cs::COUNTERS + 8 * tables;
        if b.len() < end + 4 {
            return Err(FormatError::Truncated {
                offset: at,
                needed: (end + 4) as u64,
                have: b.len() as u64,
            });
        }
        let magic = get_u32(b, cs::MAGIC);
        if magic != COUNTERS_MAGIC {
            return Err(FormatError::BadMagic {
                offset: at,
                found: b[..4].to_vec(),
                expected: COUNTERS_MAGIC.to_le_bytes().to_vec(),
            });
        }
        let (stored, computed) = (get_u32(b, end), crc32c::crc32c(&b[..end]));
        if stored != computed {
            return Err(FormatError::ChecksumMismatch {
                offset: at,
                stored,
                computed,
            });
        }
        let count = get_u32(b, cs::COUNT) as usize;
        if count != tables {
            return Err(FormatError::InvalidField {
                field: "counter count",
                offset: at + cs::COUNT as u64,
                value: format!("{count}, the catalog has {tables} tables"),
            });
        }
        let g = get_u64(b, cs::GENERATION);
        if g != generation {
            return Err(FormatError::InvalidField {
                field: "counter generation",
                offset: at + cs::GENERATION as u64,
                value: format!("{g}, the superblock names generation {generation}"),
            });
        }
        Ok(CounterSlot {
            generation,
            counters: (0..tables)
                .map(|i| get_u64(b, cs::COUNTERS + 8 * i))
                .collect(),
        })
    }
}

/// Written-group list field offsets (see FORMAT.md, "Written-group list").
pub mod wl {
    /// `u32` [`super::WRITTEN_MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u32` zero.
    pub const RESERVED: usize = 4;
    /// `u64` the epoch whose in-place writes are listed.
    pub const EPOCH: usize = 8;
    /// `u64` the generation whose commit wrote the list.
    pub const GENERATION: usize = 16;
    /// `u64` groups listed.
    pub const COUNT: usize = 24;
    /// First entry: `u64` first block, `u32` blocks of the group.
    pub const ENTRIES: usize = 32;
    /// Entry size.
    pub const ENTRY_SIZE: usize = 12;
}

/// Magic of a written-group list: `"EWRT"`.
pub const WRITTEN_MAGIC: u32 = u32::from_le_bytes(*b"EWRT");

/// The block groups a checkpoint's epoch wrote in place, written before
/// its commit record so that open can check that each one reached the
/// disk (a group still holding an older epoch is a write a dropped fsync
/// lost). The commit of generation `g` writes file `written-{g mod 2}.emb`,
/// so the list the current superblock names survives a crash inside the
/// next commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenList {
    /// The epoch whose writes are listed (the committed one).
    pub epoch: u64,
    /// The generation whose commit wrote the list.
    pub generation: u64,
    /// `(first block, blocks)` of each group, ascending.
    pub groups: Vec<(u64, u32)>,
}

impl WrittenList {
    /// The file name of the list of generation `g`.
    pub fn file_name(generation: u64) -> String {
        format!("written-{}.emb", generation % 2)
    }

    /// Encode: header, entries, then the CRC-32C of everything before it.
    pub fn encode(&self) -> Vec<u8> {
        let n = self.groups.len();
        let mut b = vec![0u8; wl::ENTRIES + wl::ENTRY_SIZE * n + 4];
        put_u32(&mut b, wl::MAGIC, WRITTEN_MAGIC);
        put_u64(&mut b, wl::EPOCH, self.epoch);
        put_u64(&mut b, wl::GENERATION, self.generation);
        put_u64(&mut b, wl::COUNT, n as u64);
        for (i, &(first, nb)) in self.groups.iter().enumerate() {
            let at = wl::ENTRIES + wl::ENTRY_SIZE * i;
            put_u64(&mut b, at, first);
            put_u32(&mut b, at + 8, nb);
        }
        let end = b.len() - 4;
        let crc = crc32c::crc32c(&b[..end]);
        put_u32(&mut b, end, crc);
        b
    }

    /// The CRC an encoded list ends with (what the superblock records).
    pub fn crc_of(encoded: &[u8]) -> u32 {
        get_u32(encoded, encoded.len() - 4)
    }

    /// Decode the list the superblock `sb` names: its CRC, count, epoch and
    /// generation must be the ones the superblock says. Errors name
    /// offsets in the list's file.
    pub fn decode(b: &[u8], sb: &Superblock) -> Result<WrittenList, FormatError> {
        let n = sb.written_groups as usize;
        let len = n
            .checked_mul(wl::ENTRY_SIZE)
            .and_then(|x| x.checked_add(wl::ENTRIES + 4));
        match len {
            Some(len) if b.len() == len => {}
            _ => {
                return Err(FormatError::Truncated {
                    offset: 0,
                    needed: len.unwrap_or(usize::MAX) as u64,
                    have: b.len() as u64,
                })
            }
        }
        let end = b.len() - 4;
        let (stored, computed) = (get_u32(b, end), crc32c::crc32c(&b[..end]));
        if stored != computed || stored != sb.written_crc {
            return Err(FormatError::ChecksumMismatch {
                offset: end as u64,
                stored,
                computed: if stored != computed {
                    computed
                } else {
                    sb.written_crc
                },
            });
        }
        if get_u32(b, wl::MAGIC) != WRITTEN_MAGIC {
            return Err(FormatError::BadMagic {
                offset: 0,
                found: b[..4].to_vec(),
                expected: WRITTEN_MAGIC.to_le_bytes().to_vec(),
            });
        }
        for (field, at, want) in [
            ("written epoch", wl::EPOCH, sb.committed_epoch),
            ("written generation", wl::GENERATION, sb.generation),
            ("written count", wl::COUNT, sb.written_groups),
        ] {
            let v = get_u64(b, at);
            if v != want {
                return Err(FormatError::InvalidField {
                    field,
                    offset: at as u64,
                    value: format!("{v}, the superblock says {want}"),
                });
            }
        }
        Ok(WrittenList {
            epoch: sb.committed_epoch,
            generation: sb.generation,
            groups: (0..n)
                .map(|i| {
                    let at = wl::ENTRIES + wl::ENTRY_SIZE * i;
                    (get_u64(b, at), get_u32(b, at + 8))
                })
                .collect(),
        })
    }
}

/// One table of the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct TableEntry {
    /// Table name (1..=64 bytes of UTF-8, no NUL).
    pub name: String,
    /// Number of rows; ids are `0..rows`.
    pub rows: u64,
    /// Elements per row.
    pub dim: u32,
    /// Element type of the weights.
    pub elem: ElemType,
    /// Initialiser of never-written rows.
    pub init: InitKind,
    /// Scale of the uniform initialiser.
    pub init_scale: f32,
    /// Seed of the initialiser.
    pub seed: u64,
    /// Optimizer state bytes stored after the weights.
    pub state_bytes: u32,
    /// The optimizer whose state the rows hold.
    pub optimizer: OptimizerCode,
    /// First data block.
    pub base_block: u64,
    /// Data blocks of the table.
    pub block_count: u64,
    /// Placement of rows in blocks.
    pub layout: RowLayout,
}

impl TableEntry {
    /// The first data block of group `group` (its blocks follow it).
    #[inline]
    pub fn first_block_of(&self, group: u64) -> u64 {
        self.base_block + group * self.layout.blocks_per_group as u64
    }

    /// Row bytes for a table shape: weights + state, rounded up to 4.
    pub fn row_bytes_for(elem: ElemType, dim: u32, state_bytes: u32) -> u64 {
        (elem.weight_bytes(dim) + state_bytes as u64).next_multiple_of(4)
    }

    fn encode_into(&self, b: &mut [u8]) {
        let name = self.name.as_bytes();
        b[te::NAME..te::NAME + name.len()].copy_from_slice(name);
        put_u64(b, te::ROWS, self.rows);
        put_u32(b, te::DIM, self.dim);
        b[te::ELEM] = self.elem as u8;
        b[te::INIT] = self.init as u8;
        b[te::OPTIMIZER] = self.optimizer as u8;
        put_u32(b, te::STATE_BYTES, self.state_bytes);
        put_u32(b, te::INIT_SCALE, self.init_scale.to_bits());
        put_u64(b, te::SEED, self.seed);
        put_u64(b, te::BASE_BLOCK, self.base_block);
        put_u64(b, te::BLOCK_COUNT, self.block_count);
        put_u32(b, te::ROW_BYTES, self.layout.row_bytes);
        put_u32(b, te::ROWS_PER_GROUP, self.layout.rows_per_group);
        put_u32(b, te::BLOCKS_PER_GROUP, self.layout.blocks_per_group);
        b[te::ROW_MAP] = self.layout.map as u8;
    }

    fn decode_from(b: &[u8], at: u64) -> Result<TableEntry, FormatError> {
        let bad = |field: &'static str, off: usize, value: String| FormatError::InvalidField {
            field,
            offset: at + off as u64,
            value,
        };
        let raw = &b[te::NAME..te::NAME + MAX_NAME_LEN];
        let len = raw.iter().position(|&c| c == 0).unwrap_or(MAX_NAME_LEN);
        let name = std::str::from_utf8(&raw[..len])
            .map_err(|_| bad("name", te::NAME, format!("{:02x?}", &raw[..len])))?
            .to_string();
        if name.is_empty() {
            return Err(bad("name", te::NAME, "empty".into()));
        }
        let elem = ElemType::try_from(b[te::ELEM])
            .map_err(|v| bad("elem_type", te::ELEM, v.to_string()))?;
        let init =
            InitKind::try_from(b[te::INIT]).map_err(|v| bad("init", te::INIT, v.to_string()))?;
        let dim = get_u32(b, te::DIM);
        if dim == 0 {
            return Err(bad("dim", te::DIM, "0".into()));
        }
        let state_bytes = get_u32(b, te::STATE_BYTES);
        let optimizer = OptimizerCode::try_from(b[te::OPTIMIZER])
            .map_err(|v| bad("optimizer", te::OPTIMIZER, v.to_string()))?;
        if let Some(need) = optimizer.state_bytes(dim) {
            if need != state_bytes as u64 {
                return Err(bad(
                    "state_bytes",
                    te::STATE_BYTES,
                    format!("{state_bytes}, but {optimizer:?} at dim {dim} stores {need}"),
                ));
            }
        }
        let map = RowMap::try_from(b[te::ROW_MAP])
            .map_err(|v| bad("row_map", te::ROW_MAP, v.to_string()))?;
        let layout = RowLayout {
            row_bytes: get_u32(b, te::ROW_BYTES),
            rows_per_group: get_u32(b, te::ROWS_PER_GROUP),
            blocks_per_group: get_u32(b, te::BLOCKS_PER_GROUP),
            map,
        };
        let expect_rb = TableEntry::row_bytes_for(elem, dim, state_bytes);
        if layout.row_bytes as u64 != expect_rb
            || layout
                != (RowLayout {
                    map,
                    ..RowLayout::for_row_bytes(layout.row_bytes)
                })
        {
            return Err(bad("row_layout", te::ROW_BYTES, format!("{layout:?}")));
        }
        let rows = get_u64(b, te::ROWS);
        let block_count = get_u64(b, te::BLOCK_COUNT);
        // Checked: a crafted entry's rows x blocks_per_group can overflow
        // (found by the `catalog` fuzz target).
        if rows == 0 || layout.checked_blocks_for(rows) != Some(block_count) {
            return Err(bad(
                "block_count",
                te::BLOCK_COUNT,
                format!("{block_count} for {rows} rows"),
            ));
        }
        // A NaN or negative scale would give every never-written row
        // non-finite or nonsense values (found by the `catalog` fuzz target).
        let init_scale = f32::from_bits(get_u32(b, te::INIT_SCALE));
        if !(init_scale.is_finite() && init_scale >= 0.0) {
            return Err(bad("init_scale", te::INIT_SCALE, init_scale.to_string()));
        }
        Ok(TableEntry {
            name,
            rows,
            dim,
            elem,
            init,
            init_scale,
            seed: get_u64(b, te::SEED),
            state_bytes,
            optimizer,
            base_block: get_u64(b, te::BASE_BLOCK),
            block_count,
            layout,
        })
    }
}

/// Which fused optimizer a table's rows hold state for. Its state size is
/// a function of `dim`, checked on read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum OptimizerCode {
    /// Not recorded (stores written before the field existed): only
    /// `state_bytes` is known.
    Unrecorded = 0,
    /// SGD: no state.
    Sgd = 1,
    /// Row-wise Adagrad: one f32.
    RowwiseAdagrad = 2,
    /// Adagrad: dim f32.
    Adagrad = 3,
    /// Adam: 2·dim f32 and a u32 step count.
    Adam = 4,
}

impl OptimizerCode {
    /// Bytes of state per row of `dim` elements (`None` when unrecorded).
    pub fn state_bytes(self, dim: u32) -> Option<u64> {
        let d = dim as u64;
        match self {
            OptimizerCode::Unrecorded => None,
            OptimizerCode::Sgd => Some(0),
            OptimizerCode::RowwiseAdagrad => Some(4),
            OptimizerCode::Adagrad => Some(4 * d),
            OptimizerCode::Adam => Some(8 * d + 4),
        }
    }
}

impl TryFrom<u8> for OptimizerCode {
    type Error = u8;
    fn try_from(v: u8) -> Result<Self, u8> {
        Ok(match v {
            0 => OptimizerCode::Unrecorded,
            1 => OptimizerCode::Sgd,
            2 => OptimizerCode::RowwiseAdagrad,
            3 => OptimizerCode::Adagrad,
            4 => OptimizerCode::Adam,
            v => return Err(v),
        })
    }
}

/// The table catalog: fixed 128-byte entries, in table-id order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Catalog {
    /// The tables; a table's id is its index.
    pub tables: Vec<TableEntry>,
}

impl Catalog {
    /// Encode all entries.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.tables.len() * te::SIZE];
        for (i, t) in self.tables.iter().enumerate() {
            t.encode_into(&mut out[i * te::SIZE..(i + 1) * te::SIZE]);
        }
        out
    }

    /// Decode `count` entries from `bytes`, which start at byte `offset` of
    /// the file and must have CRC-32C `crc`.
    pub fn decode(bytes: &[u8], count: u32, offset: u64, crc: u32) -> Result<Catalog, FormatError> {
        let needed = count as u64 * te::SIZE as u64;
        if (bytes.len() as u64) < needed {
            return Err(FormatError::Truncated {
                offset,
                needed,
                have: bytes.len() as u64,
            });
        }
        let bytes = &bytes[..needed as usize];
        let computed = crc32c::crc32c(bytes);
        if computed != crc {
            return Err(FormatError::ChecksumMismatch {
                offset,
                stored: crc,
                computed,
            });
        }
        let mut tables = Vec::with_capacity(count as usize);
        let mut next_block = 0u64;
        for i in 0..count as usize {
            let at = offset + (i * te::SIZE) as u64;
            let e = TableEntry::decode_from(&bytes[i * te::SIZE..(i + 1) * te::SIZE], at)?;
            if e.base_block != next_block {
                return Err(FormatError::InvalidField {
                    field: "base_block",
                    offset: at + te::BASE_BLOCK as u64,
                    value: format!("{} (expected {next_block})", e.base_block),
                });
            }
            next_block = e.base_block.checked_add(e.block_count).ok_or_else(|| {
                FormatError::InvalidField {
                    field: "block_count",
                    offset: at + te::BLOCK_COUNT as u64,
                    value: e.block_count.to_string(),
                }
            })?;
            if tables.iter().any(|t: &TableEntry| t.name == e.name) {
                return Err(FormatError::InvalidField {
                    field: "name",
                    offset: at,
                    value: format!("duplicate table {:?}", e.name),
                });
            }
            tables.push(e);
        }
        Ok(Catalog { tables })
    }

    /// Blocks spanned by all tables.
    pub fn data_blocks(&self) -> u64 {
        self.tables
            .last()
            .map(|t| t.base_block + t.block_count)
            .unwrap_or(0)
    }
}

/// Decode the little-endian u32 at `at` (for tests and tools).
pub fn le_u32(b: &[u8], at: usize) -> u32 {
    get_u32(b, at)
}

/// Decode the little-endian u64 at `at` (for tests and tools).
pub fn le_u64(b: &[u8], at: usize) -> u64 {
    get_u64(b, at)
}
