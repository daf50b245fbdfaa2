//! The undo journal of the checkpoint protocol (`journal.emb`).
//!
//! Before a data-file block group is overwritten for the first time in an
//! epoch, its old image (the bytes of the last checkpoint) is appended here
//! and made durable. The journal is a sequence of *batches*: a header block
//! listing up to [`MAX_ENTRIES`] groups, followed by their old images, block
//! after block. FORMAT.md ("Journal") gives the layout and the protocol.

use crate::{get_u32, get_u64, put_u32, put_u64, FormatError, BLOCK_SIZE};

/// Magic at offset 0 of a batch header: `EJOURNAL`.
pub const JOURNAL_MAGIC: [u8; 8] = *b"EJOURNAL";
/// Batch header field offsets.
pub mod jh {
    /// `[u8; 8]` magic, [`super::JOURNAL_MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u64` the epoch whose writes the images undo.
    pub const EPOCH: usize = 8;
    /// `u64` batch number within the epoch, from 0.
    pub const SEQ: usize = 16;
    /// `u32` number of entries (1 ..= 253).
    pub const COUNT: usize = 24;
    /// `u32` image blocks after the header: the sum of the entries' `nblocks`.
    pub const IMAGE_BLOCKS: usize = 28;
    /// First entry; entries are 16 bytes each.
    pub const ENTRIES: usize = 32;
    /// Entry: `u64` first data-file block of the group.
    pub const E_FIRST_BLOCK: usize = 0;
    /// Entry: `u32` blocks of the group, with [`HOLE`] set for a group
    /// that was never written (no image follows).
    pub const E_NBLOCKS: usize = 8;
    /// Flag in an entry's `nblocks`: the group was a hole (never written);
    /// undoing it writes zeros, and no image follows in the batch.
    pub const HOLE: u32 = 1 << 31;
    /// Entry: `u32` CRC-32C of the group's old image.
    pub const E_IMAGE_CRC: usize = 12;
    /// Entry size.
    pub const ENTRY_SIZE: usize = 16;
    /// `u32` CRC-32C of bytes `[0, CRC)` of the header.
    pub const CRC: usize = 4092;
}

/// Most entries in one batch header.
pub const MAX_ENTRIES: usize = (jh::CRC - jh::ENTRIES) / jh::ENTRY_SIZE;
/// Most blocks of one group (a row of 2^20 f32 elements with Adam state is
/// under 3,100 blocks).
pub const MAX_GROUP_BLOCKS: u32 = 1 << 16;

/// One group's old image in a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalEntry {
    /// First block of the group in the data file.
    pub first_block: u64,
    /// Blocks of the group.
    pub nblocks: u32,
    /// CRC-32C of the `nblocks * 4096` bytes of the old image (0 for a
    /// hole, which has no image).
    pub image_crc: u32,
    /// The group was never written: its old image is all zeros, and the
    /// batch carries none for it.
    pub hole: bool,
}

/// A batch header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchHeader {
    /// The epoch whose writes the images undo.
    pub epoch: u64,
    /// Batch number within the epoch.
    pub seq: u64,
    /// The groups whose images follow, in order.
    pub entries: Vec<JournalEntry>,
}

impl BatchHeader {
    /// Image blocks that follow the header (holes have none).
    pub fn image_blocks(&self) -> u64 {
        self.entries
            .iter()
            .filter(|e| !e.hole)
            .map(|e| e.nblocks as u64)
            .sum()
    }

    /// Encode into one block.
    ///
    /// # Panics
    /// With no entries or more than [`MAX_ENTRIES`] (a caller bug).
    pub fn encode(&self) -> [u8; BLOCK_SIZE] {
        assert!(!self.entries.is_empty() && self.entries.len() <= MAX_ENTRIES);
        let mut b = [0u8; BLOCK_SIZE];
        b[..8].copy_from_slice(&JOURNAL_MAGIC);
        put_u64(&mut b, jh::EPOCH, self.epoch);
        put_u64(&mut b, jh::SEQ, self.seq);
        put_u32(&mut b, jh::COUNT, self.entries.len() as u32);
        put_u32(&mut b, jh::IMAGE_BLOCKS, self.image_blocks() as u32);
        for (i, e) in self.entries.iter().enumerate() {
            let at = jh::ENTRIES + i * jh::ENTRY_SIZE;
            put_u64(&mut b, at + jh::E_FIRST_BLOCK, e.first_block);
            let flag = if e.hole { jh::HOLE } else { 0 };
            put_u32(&mut b, at + jh::E_NBLOCKS, e.nblocks | flag);
            put_u32(&mut b, at + jh::E_IMAGE_CRC, e.image_crc);
        }
        let crc = crc32c::crc32c(&b[..jh::CRC]);
        put_u32(&mut b, jh::CRC, crc);
        b
    }

    /// Decode and validate a header read from byte `at` of the journal.
    pub fn decode(b: &[u8], at: u64) -> Result<BatchHeader, FormatError> {
        if b.len() < BLOCK_SIZE {
            return Err(FormatError::Truncated {
                offset: at,
                needed: BLOCK_SIZE as u64,
                have: b.len() as u64,
            });
        }
        if b[..8] != JOURNAL_MAGIC {
            return Err(FormatError::BadMagic {
                offset: at,
                found: b[..8].to_vec(),
                expected: JOURNAL_MAGIC.to_vec(),
            });
        }
        let stored = get_u32(b, jh::CRC);
        let computed = crc32c::crc32c(&b[..jh::CRC]);
        if stored != computed {
            return Err(FormatError::ChecksumMismatch {
                offset: at,
                stored,
                computed,
            });
        }
        let count = get_u32(b, jh::COUNT) as usize;
        if count == 0 || count > MAX_ENTRIES {
            return Err(FormatError::InvalidField {
                field: "count",
                offset: at + jh::COUNT as u64,
                value: count.to_string(),
            });
        }
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let e = jh::ENTRIES + i * jh::ENTRY_SIZE;
            let raw = get_u32(b, e + jh::E_NBLOCKS);
            let hole = raw & jh::HOLE != 0;
            let nblocks = raw & !jh::HOLE;
            let image_crc = get_u32(b, e + jh::E_IMAGE_CRC);
            if hole && image_crc != 0 {
                return Err(FormatError::InvalidField {
                    field: "image_crc",
                    offset: at + (e + jh::E_IMAGE_CRC) as u64,
                    value: format!("{image_crc:#x} for a hole, which has no image"),
                });
            }
            if nblocks == 0 || nblocks > MAX_GROUP_BLOCKS {
                return Err(FormatError::InvalidField {
                    field: "nblocks",
                    offset: at + (e + jh::E_NBLOCKS) as u64,
                    value: nblocks.to_string(),
                });
            }
            entries.push(JournalEntry {
                first_block: get_u64(b, e + jh::E_FIRST_BLOCK),
                nblocks,
                image_crc,
                hole,
            });
        }
        let h = BatchHeader {
            epoch: get_u64(b, jh::EPOCH),
            seq: get_u64(b, jh::SEQ),
            entries,
        };
        let blocks = get_u32(b, jh::IMAGE_BLOCKS) as u64;
        if blocks != h.image_blocks() {
            return Err(FormatError::InvalidField {
                field: "image_blocks",
                offset: at + jh::IMAGE_BLOCKS as u64,
                value: format!("{blocks}, but the entries sum to {}", h.image_blocks()),
            });
        }
        Ok(h)
    }
}

/// What one batch of a journal holds, as [`scan`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedBatch {
    /// Byte offset of the header in the journal.
    pub offset: u64,
    /// The header.
    pub header: BatchHeader,
    /// For each entry, whether its image is whole (length and CRC).
    pub image_ok: Vec<bool>,
}

/// How a journal ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalTail {
    /// Every batch is whole.
    Clean,
    /// The last batch's header is unreadable or its images run past the end:
    /// an append that a crash cut short. It starts at this offset.
    Torn {
        /// Byte offset of the torn batch.
        offset: u64,
    },
}

/// Parse a whole journal. Batches must be whole except the last, which
/// may be torn (a crash during its append). A bad header or image that is
/// followed by more batches is corruption, reported with its offset.
pub fn scan(bytes: &[u8]) -> Result<(Vec<ScannedBatch>, JournalTail), FormatError> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let header = match BatchHeader::decode(rest, at as u64) {
            Ok(h) => h,
            Err(e) => {
                return if next_header_after(bytes, at) {
                    Err(e)
                } else {
                    Ok((out, JournalTail::Torn { offset: at as u64 }))
                }
            }
        };
        let end = (at as u64)
            .saturating_add(BLOCK_SIZE as u64)
            .saturating_add(header.image_blocks().saturating_mul(BLOCK_SIZE as u64));
        if end > bytes.len() as u64 {
            return Ok((out, JournalTail::Torn { offset: at as u64 }));
        }
        let mut pos = at + BLOCK_SIZE;
        let mut image_ok = Vec::with_capacity(header.entries.len());
        for e in &header.entries {
            if e.hole {
                image_ok.push(true);
                continue;
            }
            let len = e.nblocks as usize * BLOCK_SIZE;
            image_ok.push(crc32c::crc32c(&bytes[pos..pos + len]) == e.image_crc);
            pos += len;
        }
        if image_ok.iter().any(|ok| !ok) && pos < bytes.len() {
            let bad = image_ok.iter().position(|ok| !ok).unwrap_or(0);
            let mut img = at + BLOCK_SIZE;
            for e in header.entries[..bad].iter().filter(|e| !e.hole) {
                img += e.nblocks as usize * BLOCK_SIZE;
            }
            return Err(FormatError::ChecksumMismatch {
                offset: img as u64,
                stored: header.entries[bad].image_crc,
                computed: crc32c::crc32c(
                    &bytes[img..img + header.entries[bad].nblocks as usize * BLOCK_SIZE],
                ),
            });
        }
        out.push(ScannedBatch {
            offset: at as u64,
            header,
            image_ok,
        });
        at = pos;
    }
    Ok((out, JournalTail::Clean))
}

/// Whether a valid batch header starts at some block boundary after `at`:
/// if so, the bad batch at `at` is not the last one, so it is corruption.
fn next_header_after(bytes: &[u8], at: usize) -> bool {
    let mut p = at + BLOCK_SIZE;
    while p + BLOCK_SIZE <= bytes.len() {
        if BatchHeader::decode(&bytes[p..], p as u64).is_ok() {
            return true;
        }
        p += BLOCK_SIZE;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(epoch: u64, seq: u64, groups: &[(u64, u32, u8)]) -> Vec<u8> {
        let mut images = Vec::new();
        let mut entries = Vec::new();
        for &(first_block, nblocks, fill) in groups {
            let img = vec![fill; nblocks as usize * BLOCK_SIZE];
            // Fill 0: a hole, with no image.
            if fill == 0 {
                entries.push(JournalEntry {
                    first_block,
                    nblocks,
                    image_crc: 0,
                    hole: true,
                });
                continue;
            }
            entries.push(JournalEntry {
                first_block,
                nblocks,
                image_crc: crc32c::crc32c(&img),
                hole: false,
            });
            images.extend_from_slice(&img);
        }
        let mut out = BatchHeader {
            epoch,
            seq,
            entries,
        }
        .encode()
        .to_vec();
        out.extend_from_slice(&images);
        out
    }

    #[test]
    fn scan_reads_back_what_was_written() {
        let mut j = batch(7, 0, &[(3, 1, 1), (9, 2, 2)]);
        j.extend(batch(7, 1, &[(20, 1, 3)]));
        let (b, tail) = scan(&j).unwrap();
        assert_eq!(tail, JournalTail::Clean);
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].header.entries[1].first_block, 9);
        assert_eq!(b[1].offset, 4 * BLOCK_SIZE as u64);
        assert!(b.iter().all(|b| b.image_ok.iter().all(|&ok| ok)));
    }

    #[test]
    fn a_cut_last_batch_is_torn_and_a_bad_middle_one_is_corrupt() {
        let mut j = batch(7, 0, &[(3, 1, 1)]);
        let second = batch(7, 1, &[(4, 2, 2)]);
        j.extend_from_slice(&second[..2 * BLOCK_SIZE]);
        let (b, tail) = scan(&j).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!(
            tail,
            JournalTail::Torn {
                offset: 2 * BLOCK_SIZE as u64
            }
        );
        // A flipped image byte in the last batch: reported per entry.
        let mut last = batch(7, 0, &[(3, 1, 1)]);
        last[BLOCK_SIZE + 5] ^= 1;
        let (b, _) = scan(&last).unwrap();
        assert_eq!(b[0].image_ok, vec![false]);
        // The same flip followed by another batch: corruption, with its offset.
        last.extend(batch(7, 1, &[(5, 1, 1)]));
        let err = scan(&last).unwrap_err();
        assert!(
            matches!(err, FormatError::ChecksumMismatch { offset: 4096, .. }),
            "{err}"
        );
        // A flipped header byte followed by another batch.
        let mut j = batch(7, 0, &[(3, 1, 1)]);
        j[40] ^= 4;
        j.extend(batch(7, 1, &[(5, 1, 1)]));
        assert!(matches!(
            scan(&j).unwrap_err(),
            FormatError::ChecksumMismatch { offset: 0, .. }
        ));
    }

    #[test]
    fn holes_carry_no_image_and_round_trip() {
        let mut j = batch(7, 0, &[(3, 1, 1), (4, 2, 0), (9, 2, 2)]);
        // Header, then the images of groups 3 and 9 only.
        assert_eq!(j.len(), 4 * BLOCK_SIZE);
        j.extend(batch(7, 1, &[(20, 1, 0)]));
        assert_eq!(j.len(), 5 * BLOCK_SIZE);
        let (b, tail) = scan(&j).unwrap();
        assert_eq!(tail, JournalTail::Clean);
        assert_eq!(b.len(), 2);
        let e = &b[0].header.entries;
        assert_eq!((e[1].first_block, e[1].nblocks, e[1].hole), (4, 2, true));
        assert!(!e[0].hole && !e[2].hole);
        assert_eq!(b[0].header.image_blocks(), 3);
        assert!(b[1].header.entries[0].hole);
        assert_eq!(b[1].offset, 4 * BLOCK_SIZE as u64);
        // A flipped byte in group 9's image is found past the hole.
        let mut bad = batch(7, 0, &[(3, 1, 1), (4, 2, 0), (9, 2, 2)]);
        bad[2 * BLOCK_SIZE + 7] ^= 1;
        let (b, _) = scan(&bad).unwrap();
        assert_eq!(b[0].image_ok, vec![true, true, false]);
        bad.extend(batch(7, 1, &[(5, 1, 1)]));
        assert!(matches!(
            scan(&bad).unwrap_err(),
            FormatError::ChecksumMismatch { offset: 8192, .. }
        ));
    }

    #[test]
    fn a_hole_with_an_image_crc_is_refused() {
        let mut h = BatchHeader {
            epoch: 1,
            seq: 0,
            entries: vec![JournalEntry {
                first_block: 3,
                nblocks: 1,
                image_crc: 0,
                hole: true,
            }],
        }
        .encode();
        let at = jh::ENTRIES + jh::E_IMAGE_CRC;
        h[at] = 1;
        let crc = crc32c::crc32c(&h[..jh::CRC]);
        h[jh::CRC..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            BatchHeader::decode(&h, 0),
            Err(FormatError::InvalidField {
                field: "image_crc",
                ..
            })
        ));
    }
}
