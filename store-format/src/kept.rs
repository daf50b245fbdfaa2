//! A kept tier (`<tier file>.keep`; FORMAT.md, "Kept tier"): what a
//! file-backed cache tier held when its store was closed, so that the next
//! open can take the rows where they lie instead of reading them back (a
//! warm restart at the speed of a mapping, as CacheLib keeps its DRAM
//! cache in shared memory across a restart).
//!
//! At [`crate`]'s level it is a list of the tier's regions (one per cache
//! shard of a cached table, in the order they were carved from the file)
//! and, for each, the row id in each of its slots. The rows' bytes are the
//! tier file's own, at `offset + slot * row_bytes` of the region.
//!
//! Layout: a 56-byte header, the regions, and a CRC-32C of everything
//! before it.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `EMBKEPT2` |
//! | 8 | 8 | store id (the superblock's) |
//! | 16 | 8 | generation of the checkpoint committed at the close |
//! | 24 | 8 | the epoch that commit committed |
//! | 32 | 4 | tier index |
//! | 36 | 4 | region count |
//! | 40 | 8 | the tier file's length |
//! | 48 | 8 | the commit id of that checkpoint (the superblock's) |
//!
//! Each region: `u32` table (catalog index), `u32` shard, `u64` byte
//! offset in the file, `u32` capacity in rows, `u32` row bytes, `u32`
//! slots `n` (at most the capacity), `u32` reserved (zero), then `n`
//! `u64` ids, [`FREE_SLOT`] for a slot that holds no row.

use crate::{check_crc, check_len, check_magic};
use crate::{get_u32, get_u64, put_u32, put_u64, FormatError};

/// Magic of a kept-tier file.
pub const KEPT_MAGIC: [u8; 8] = *b"EMBKEPT2";
/// Offset of the store id.
pub const KEPT_STORE_ID: usize = 8;
/// Offset of the generation.
pub const KEPT_GENERATION: usize = 16;
/// Offset of the committed epoch.
pub const KEPT_EPOCH: usize = 24;
/// Offset of the tier index.
pub const KEPT_TIER: usize = 32;
/// Offset of the region count.
pub const KEPT_REGIONS: usize = 36;
/// Offset of the tier file's length.
pub const KEPT_FILE_LEN: usize = 40;
/// Offset of the commit id (the superblock's `commit_id`; version 2 of the
/// file, `EMBKEPT2`).
pub const KEPT_COMMIT: usize = 48;
/// Bytes of the header.
pub const KEPT_HEADER: usize = 56;
/// Bytes of a region's record before its ids.
pub const REGION_HEADER: usize = 32;
/// The id of a slot that holds no row.
pub const FREE_SLOT: u64 = u64::MAX;
/// Ids below this are rows (the store's ids are below 2^62).
pub const ID_LIMIT: u64 = 1 << 62;

/// One region of the tier: a cache shard's rows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeptRegion {
    /// The table's catalog index.
    pub table: u32,
    /// The shard of the table.
    pub shard: u32,
    /// Byte offset of the region in the tier file.
    pub offset: u64,
    /// Rows the region holds at most.
    pub capacity: u32,
    /// Bytes of a row.
    pub row_bytes: u32,
    /// The id in each slot from slot 0 ([`FREE_SLOT`]: none); the slots
    /// past the last are unused.
    pub slots: Vec<u64>,
}

/// A decoded kept tier.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeptTier {
    /// The superblock's store id.
    pub store_id: u64,
    /// The generation committed when the store was closed.
    pub generation: u64,
    /// The epoch that commit committed (the superblock's `committed_epoch`).
    pub epoch: u64,
    /// That commit's id (the superblock's `commit_id`).
    pub commit_id: u64,
    /// The tier's index in the store's configuration.
    pub tier: u32,
    /// The tier file's length.
    pub file_len: u64,
    /// The regions, in the order they were carved.
    pub regions: Vec<KeptRegion>,
}

fn bad(field: &'static str, offset: usize, value: String) -> FormatError {
    FormatError::InvalidField {
        field,
        offset: offset as u64,
        value,
    }
}

impl KeptTier {
    /// The file's bytes, CRC included.
    pub fn encode(&self) -> Vec<u8> {
        let ids: usize = self.regions.iter().map(|r| r.slots.len()).sum();
        let mut out = Vec::with_capacity(KEPT_HEADER + 32 * self.regions.len() + 8 * ids + 4);
        out.resize(KEPT_HEADER, 0);
        out[..8].copy_from_slice(&KEPT_MAGIC);
        put_u64(&mut out, KEPT_STORE_ID, self.store_id);
        put_u64(&mut out, KEPT_GENERATION, self.generation);
        put_u64(&mut out, KEPT_EPOCH, self.epoch);
        put_u32(&mut out, KEPT_TIER, self.tier);
        put_u32(&mut out, KEPT_REGIONS, self.regions.len() as u32);
        put_u64(&mut out, KEPT_FILE_LEN, self.file_len);
        put_u64(&mut out, KEPT_COMMIT, self.commit_id);
        for r in &self.regions {
            out.extend_from_slice(&r.table.to_le_bytes());
            out.extend_from_slice(&r.shard.to_le_bytes());
            out.extend_from_slice(&r.offset.to_le_bytes());
            out.extend_from_slice(&r.capacity.to_le_bytes());
            out.extend_from_slice(&r.row_bytes.to_le_bytes());
            out.extend_from_slice(&(r.slots.len() as u32).to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            for &id in &r.slots {
                out.extend_from_slice(&id.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decode and check a kept-tier file: its magic, CRC, counts that fit
    /// in its length, slots at most the capacity, each region inside the
    /// file, ids below [`ID_LIMIT`] or [`FREE_SLOT`], reserved words zero,
    /// no bytes after the last region.
    pub fn decode(b: &[u8]) -> Result<KeptTier, FormatError> {
        check_len(b, KEPT_HEADER + 4)?;
        check_magic(b, &KEPT_MAGIC)?;
        check_crc(b, b.len() - 4)?;
        let body = &b[..b.len() - 4];
        let file_len = get_u64(body, KEPT_FILE_LEN);
        let count = get_u32(body, KEPT_REGIONS) as usize;
        let mut at = KEPT_HEADER;
        if count > (body.len() - at) / REGION_HEADER {
            return Err(bad("region count", KEPT_REGIONS, count.to_string()));
        }
        let mut regions = Vec::with_capacity(count);
        for _ in 0..count {
            if body.len() - at < REGION_HEADER {
                return Err(FormatError::Truncated {
                    offset: at as u64,
                    needed: REGION_HEADER as u64,
                    have: (body.len() - at) as u64,
                });
            }
            let (table, shard) = (get_u32(body, at), get_u32(body, at + 4));
            let offset = get_u64(body, at + 8);
            let (capacity, row_bytes) = (get_u32(body, at + 16), get_u32(body, at + 20));
            let n = get_u32(body, at + 24) as usize;
            if get_u32(body, at + 28) != 0 {
                return Err(bad("reserved", at + 28, get_u32(body, at + 28).to_string()));
            }
            if n > capacity as usize {
                return Err(bad("slots", at + 24, format!("{n} of {capacity}")));
            }
            let end = (capacity as u64)
                .checked_mul(row_bytes as u64)
                .and_then(|len| len.checked_add(offset));
            if row_bytes == 0 || end.is_none_or(|e| e > file_len) {
                return Err(bad(
                    "region",
                    at + 8,
                    format!("{capacity} rows of {row_bytes} bytes at {offset} in {file_len}"),
                ));
            }
            at += REGION_HEADER;
            if n > (body.len() - at) / 8 {
                return Err(FormatError::Truncated {
                    offset: at as u64,
                    needed: 8 * n as u64,
                    have: (body.len() - at) as u64,
                });
            }
            let mut slots = Vec::with_capacity(n);
            for i in 0..n {
                let id = get_u64(body, at + 8 * i);
                if id >= ID_LIMIT && id != FREE_SLOT {
                    return Err(bad("id", at + 8 * i, id.to_string()));
                }
                slots.push(id);
            }
            at += 8 * n;
            regions.push(KeptRegion {
                table,
                shard,
                offset,
                capacity,
                row_bytes,
                slots,
            });
        }
        if at != body.len() {
            return Err(bad(
                "length",
                at,
                format!("{} bytes after the last region", body.len() - at),
            ));
        }
        Ok(KeptTier {
            store_id: get_u64(body, KEPT_STORE_ID),
            generation: get_u64(body, KEPT_GENERATION),
            epoch: get_u64(body, KEPT_EPOCH),
            commit_id: get_u64(body, KEPT_COMMIT),
            tier: get_u32(body, KEPT_TIER),
            file_len,
            regions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{refuses_flips_and_cuts, reseal};

    fn sample() -> KeptTier {
        KeptTier {
            store_id: 0x1234_5678_9abc,
            generation: 7,
            epoch: 15,
            commit_id: 0xfeed_beef,
            tier: 1,
            file_len: 1 << 20,
            regions: vec![
                KeptRegion {
                    table: 0,
                    shard: 3,
                    offset: 0,
                    capacity: 4,
                    row_bytes: 256,
                    slots: vec![9, FREE_SLOT, (1 << 62) - 1],
                },
                KeptRegion {
                    table: 2,
                    shard: 0,
                    offset: 1024,
                    capacity: 10,
                    row_bytes: 64,
                    slots: vec![],
                },
            ],
        }
    }

    #[test]
    fn a_kept_tier_round_trips() {
        let k = sample();
        let b = k.encode();
        assert_eq!(b.len(), KEPT_HEADER + 2 * REGION_HEADER + 3 * 8 + 4);
        assert_eq!(KeptTier::decode(&b).unwrap(), k);
        assert_eq!(
            KeptTier::decode(&KeptTier::default().encode()).unwrap(),
            KeptTier::default()
        );
    }

    /// Every damage is refused: a flipped byte anywhere (the CRC), a cut,
    /// and, with the CRC mended, each field past its domain.
    #[test]
    fn a_damaged_kept_tier_is_refused() {
        let b = sample().encode();
        refuses_flips_and_cuts(&b, KeptTier::decode);
        let r0 = KEPT_HEADER;
        type Damage = Box<dyn Fn(&mut Vec<u8>)>;
        let cases: Vec<(&str, Damage)> = vec![
            (
                "slots past capacity",
                Box::new(move |d| put_u32(d, r0 + 16, 2)),
            ),
            ("reserved", Box::new(move |d| put_u32(d, r0 + 28, 1))),
            (
                "region past the file",
                Box::new(move |d| put_u64(d, KEPT_FILE_LEN, 1000)),
            ),
            ("row bytes zero", Box::new(move |d| put_u32(d, r0 + 20, 0))),
            (
                "id past the limit",
                Box::new(move |d| put_u64(d, r0 + 32, 1 << 62)),
            ),
            (
                "region count",
                Box::new(move |d| put_u32(d, KEPT_REGIONS, 3)),
            ),
            (
                "trailing bytes",
                Box::new(move |d| d.insert(d.len() - 4, 0)),
            ),
        ];
        for (what, f) in cases {
            let mut d = b.clone();
            f(&mut d);
            assert!(KeptTier::decode(&reseal(d)).is_err(), "{what}");
        }
    }
}
