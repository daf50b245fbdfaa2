//! Slot stamps (`<tier file>.stamps`; FORMAT.md, "Slot stamps"): for a
//! file-backed cache tier, which row each slot holds and the first
//! checkpoint generation that holds the slot's bytes, kept up to date as
//! training changes the slots, so that an open after a crash (or a store
//! dropped without a close) in the same boot of the machine can take the
//! rows whose bytes the recovered checkpoint holds where they lie.
//!
//! The file is a header, zero padding, the *kept-through* word (the `u64`
//! just before the stamps: the commit id, the superblock's `commit_id`, of
//! the last commit the stamps were kept up to date through, outside the
//! header's CRC, rewritten after each commit), then, from a multiple of [`STAMP_ALIGN`], one
//! [`STAMP_BYTES`]-byte stamp per slot of each region in the header's
//! order: a `u64` generation ([`NO_ROW`]: the slot holds no row the
//! store may take), then the `u64` row id.
//!
//! Header, little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `EMBSTMP2` |
//! | 8 | 8 | store id (the superblock's) |
//! | 16 | 40 | boot id, ASCII, zero-padded (Linux: `/proc/sys/kernel/random/boot_id`) |
//! | 56 | 4 | tier index |
//! | 60 | 4 | region count |
//! | 64 | 8 | the tier file's length |
//! | 72 | 8 | offset of the first stamp |
//!
//! Each region, 24 bytes: `u32` table (catalog index), `u32` shard, `u64`
//! byte offset in the tier file, `u32` capacity in rows, `u32` row bytes.
//! Then a CRC-32C of every header byte before it.

use crate::{check_crc, check_len, check_magic};
use crate::{get_u32, get_u64, padded_boot_id, put_u32, put_u64, FormatError};

/// Magic of a stamps file.
pub const STAMPS_MAGIC: [u8; 8] = *b"EMBSTMP2";
/// Offset of the store id.
pub const STAMPS_STORE_ID: usize = 8;
/// Offset of the boot id.
pub const STAMPS_BOOT_ID: usize = 16;
/// Bytes of the boot id field.
pub const STAMPS_BOOT_ID_BYTES: usize = 40;
/// Offset of the tier index.
pub const STAMPS_TIER: usize = 56;
/// Offset of the region count.
pub const STAMPS_REGIONS: usize = 60;
/// Offset of the tier file's length.
pub const STAMPS_FILE_LEN: usize = 64;
/// Offset of the field giving where the stamps begin.
pub const STAMPS_AT: usize = 72;
/// Bytes of the header before the regions.
pub const STAMPS_HEADER: usize = 80;
/// Bytes of a region's record.
pub const STAMP_REGION: usize = 24;
/// The stamps begin at a multiple of this.
pub const STAMP_ALIGN: u64 = 4096;
/// Bytes of one slot's stamp: generation, then id.
pub const STAMP_BYTES: u64 = 16;
/// The generation of a slot that holds no row the store may take.
pub const NO_ROW: u64 = 0;

/// One region of the tier: a cache shard's slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StampRegion {
    /// The table's catalog index.
    pub table: u32,
    /// The shard of the table.
    pub shard: u32,
    /// Byte offset of the region's rows in the tier file.
    pub offset: u64,
    /// Slots (rows) of the region.
    pub capacity: u32,
    /// Bytes of a row.
    pub row_bytes: u32,
}

/// A decoded stamps header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StampHeader {
    /// The superblock's store id.
    pub store_id: u64,
    /// The boot of the machine the stamps were written in (at most 40
    /// bytes, no NUL).
    pub boot_id: Vec<u8>,
    /// The tier's index in the store's configuration.
    pub tier: u32,
    /// The tier file's length.
    pub file_len: u64,
    /// The regions, in the order their stamps follow.
    pub regions: Vec<StampRegion>,
}

fn bad(field: &'static str, offset: usize, value: String) -> FormatError {
    FormatError::InvalidField {
        field,
        offset: offset as u64,
        value,
    }
}

impl StampHeader {
    /// Bytes of the encoded header, CRC included.
    pub fn len(&self) -> usize {
        STAMPS_HEADER + STAMP_REGION * self.regions.len() + 4
    }

    /// Whether the header has no region.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Where the stamps begin: the header's length and the kept-through
    /// word rounded up to [`STAMP_ALIGN`].
    pub fn stamps_at(&self) -> u64 {
        (self.len() as u64 + 8).div_ceil(STAMP_ALIGN) * STAMP_ALIGN
    }

    /// Where the kept-through word lies: the 8 bytes before the stamps.
    pub fn kept_through_at(&self) -> u64 {
        self.stamps_at() - 8
    }

    /// Bytes of the whole file: the header, its padding, and a stamp per
    /// slot of every region.
    pub fn file_len_needed(&self) -> u64 {
        let slots: u64 = self.regions.iter().map(|r| r.capacity as u64).sum();
        self.stamps_at() + STAMP_BYTES * slots
    }

    /// The header's bytes, CRC included; None when the boot id is longer
    /// than its field.
    pub fn encode(&self) -> Option<Vec<u8>> {
        if self.boot_id.len() > STAMPS_BOOT_ID_BYTES || self.boot_id.contains(&0) {
            return None;
        }
        let mut out = vec![0u8; STAMPS_HEADER];
        out[..8].copy_from_slice(&STAMPS_MAGIC);
        put_u64(&mut out, STAMPS_STORE_ID, self.store_id);
        out[STAMPS_BOOT_ID..STAMPS_BOOT_ID + self.boot_id.len()].copy_from_slice(&self.boot_id);
        put_u32(&mut out, STAMPS_TIER, self.tier);
        put_u32(&mut out, STAMPS_REGIONS, self.regions.len() as u32);
        put_u64(&mut out, STAMPS_FILE_LEN, self.file_len);
        put_u64(&mut out, STAMPS_AT, self.stamps_at());
        for r in &self.regions {
            out.extend_from_slice(&r.table.to_le_bytes());
            out.extend_from_slice(&r.shard.to_le_bytes());
            out.extend_from_slice(&r.offset.to_le_bytes());
            out.extend_from_slice(&r.capacity.to_le_bytes());
            out.extend_from_slice(&r.row_bytes.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Some(out)
    }

    /// Decode and check the header at the start of `b` (the file's first
    /// bytes; what follows the header is not read): its magic, a region
    /// count that fits in `b`, the CRC, a boot id without a NUL before its
    /// padding, each region inside the tier file with rows of at least a
    /// byte, and the stamps' offset.
    pub fn decode(b: &[u8]) -> Result<StampHeader, FormatError> {
        check_len(b, STAMPS_HEADER + 4)?;
        check_magic(b, &STAMPS_MAGIC)?;
        let count = get_u32(b, STAMPS_REGIONS) as usize;
        let len = count
            .checked_mul(STAMP_REGION)
            .and_then(|r| r.checked_add(STAMPS_HEADER + 4))
            .filter(|&l| l <= b.len())
            .ok_or(FormatError::Truncated {
                offset: STAMPS_HEADER as u64,
                needed: (count as u64)
                    .saturating_mul(STAMP_REGION as u64)
                    .saturating_add((STAMPS_HEADER + 4) as u64),
                have: b.len() as u64,
            })?;
        check_crc(b, len - 4)?;
        let body = &b[..len - 4];
        let boot_id = padded_boot_id(
            &body[STAMPS_BOOT_ID..STAMPS_BOOT_ID + STAMPS_BOOT_ID_BYTES],
            STAMPS_BOOT_ID as u64,
        )?;
        let file_len = get_u64(body, STAMPS_FILE_LEN);
        let mut regions = Vec::with_capacity(count);
        for i in 0..count {
            let at = STAMPS_HEADER + STAMP_REGION * i;
            let r = StampRegion {
                table: get_u32(body, at),
                shard: get_u32(body, at + 4),
                offset: get_u64(body, at + 8),
                capacity: get_u32(body, at + 16),
                row_bytes: get_u32(body, at + 20),
            };
            let end = (r.capacity as u64)
                .checked_mul(r.row_bytes as u64)
                .and_then(|l| l.checked_add(r.offset));
            if r.row_bytes == 0 || end.is_none_or(|e| e > file_len) {
                return Err(bad(
                    "region",
                    at + 8,
                    format!(
                        "{} rows of {} bytes at {} in {file_len}",
                        r.capacity, r.row_bytes, r.offset
                    ),
                ));
            }
            regions.push(r);
        }
        let h = StampHeader {
            store_id: get_u64(body, STAMPS_STORE_ID),
            boot_id: boot_id.to_vec(),
            tier: get_u32(body, STAMPS_TIER),
            file_len,
            regions,
        };
        let at = get_u64(body, STAMPS_AT);
        if at != h.stamps_at() {
            return Err(bad("stamps offset", STAMPS_AT, at.to_string()));
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{refuses_flips_and_cuts, reseal};

    fn sample() -> StampHeader {
        StampHeader {
            store_id: 0x1234_5678_9abc,
            boot_id: b"0b5e4d2c-9f1a-4c3b-8e7d-6a5b4c3d2e1f".to_vec(),
            tier: 1,
            file_len: 1 << 20,
            regions: vec![
                StampRegion {
                    table: 0,
                    shard: 3,
                    offset: 0,
                    capacity: 4,
                    row_bytes: 256,
                },
                StampRegion {
                    table: 2,
                    shard: 0,
                    offset: 1024,
                    capacity: 10,
                    row_bytes: 64,
                },
            ],
        }
    }

    #[test]
    fn a_stamps_header_round_trips() {
        let h = sample();
        let b = h.encode().unwrap();
        assert_eq!(b.len(), STAMPS_HEADER + 2 * STAMP_REGION + 4);
        assert_eq!(b.len(), h.len());
        assert_eq!((h.stamps_at(), h.kept_through_at()), (4096, 4088));
        assert_eq!(h.file_len_needed(), 4096 + 14 * 16);
        assert_eq!(StampHeader::decode(&b).unwrap(), h);
        // What follows the header is not its business.
        let mut padded = b.clone();
        padded.resize(8192, 0xa5);
        assert_eq!(StampHeader::decode(&padded).unwrap(), h);
        let empty = StampHeader::default();
        assert_eq!(
            StampHeader::decode(&empty.encode().unwrap()).unwrap(),
            empty
        );
        let long = StampHeader {
            boot_id: vec![b'x'; STAMPS_BOOT_ID_BYTES + 1],
            ..StampHeader::default()
        };
        assert!(long.encode().is_none());
        // 200 regions: the stamps move past the first 4 KiB; 167 fill
        // it but for the kept-through word.
        let many = StampHeader {
            regions: vec![sample().regions[1]; 200],
            ..sample()
        };
        assert_eq!(many.stamps_at(), 8192);
        let edge = StampHeader {
            regions: vec![sample().regions[1]; 167],
            ..sample()
        };
        assert_eq!(edge.len(), 4092);
        assert_eq!((edge.stamps_at(), edge.kept_through_at()), (8192, 8184));
        assert_eq!(StampHeader::decode(&many.encode().unwrap()).unwrap(), many);
    }

    /// Every damage is refused: a flipped byte anywhere (the CRC), a cut,
    /// and, with the CRC mended, each field past its domain.
    #[test]
    fn a_damaged_stamps_header_is_refused() {
        let b = sample().encode().unwrap();
        refuses_flips_and_cuts(&b, StampHeader::decode);
        let r0 = STAMPS_HEADER;
        type Damage = Box<dyn Fn(&mut Vec<u8>)>;
        let cases: Vec<(&str, Damage)> = vec![
            (
                "region past the file",
                Box::new(|d| put_u64(d, STAMPS_FILE_LEN, 1000)),
            ),
            ("row bytes zero", Box::new(move |d| put_u32(d, r0 + 20, 0))),
            (
                "a byte after the boot id's padding",
                Box::new(|d| d[STAMPS_BOOT_ID + STAMPS_BOOT_ID_BYTES - 1] = b'x'),
            ),
            ("stamps offset", Box::new(|d| put_u64(d, STAMPS_AT, 8192))),
        ];
        for (what, f) in cases {
            let mut d = b.clone();
            f(&mut d);
            assert!(StampHeader::decode(&reseal(d)).is_err(), "{what}");
        }
        // A region count past the bytes there are.
        let mut d = b.clone();
        put_u32(&mut d, STAMPS_REGIONS, 3);
        assert!(StampHeader::decode(&d).is_err(), "region count");
    }
}
