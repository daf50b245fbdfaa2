//! The row-log index (`log-index.emb`; FORMAT.md, "Row-log index"): for
//! each block of the row log's ring, the ids its last append put there, so
//! that an open after a crash in the same boot of the machine can rebuild
//! the log's map from a few percent of the log's bytes instead of reading
//! the whole committed log.
//!
//! The file is a 4096-byte header block, then one [`IndexHeader::slot_bytes`]
//! slot per ring block, slot `b` at [`SLOTS_AT`]` + b * slot_bytes`. The
//! header's last 8 bytes are the *kept-through* word (outside its CRC): the
//! last checkpoint generation through whose commit every appended block's
//! slot was written (0: none).
//!
//! Header, little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `EMBLIDX1` |
//! | 8 | 8 | store id (the superblock's) |
//! | 16 | 40 | boot id, ASCII, zero-padded (Linux: `/proc/sys/kernel/random/boot_id`) |
//! | 56 | 4 | slot bytes |
//! | 60 | 4 | reserved, zero |
//! | 64 | 8 | ring: the row log's blocks |
//! | 72 | 8 | the data-file block of ring block 0 |
//! | 80 | 4 | CRC-32C of bytes 0..80 |
//! | 4088 | 8 | kept-through generation |
//!
//! Slot, little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | CRC-32C of bytes 4 .. 24 + 8 n |
//! | 4 | 4 | the ring block |
//! | 8 | 8 | the epoch the block was sealed with |
//! | 16 | 4 | table (catalog index) |
//! | 20 | 4 | row count `n`, at least 1 |
//! | 24 | 8 n | the block's row ids, in block order |
//!
//! A slot never written reads as zeros, which fails its CRC (a CRC of 0
//! over 20 zero bytes would need the block, epoch, table and count 0, and
//! a count of 0 is refused).

use crate::{check_crc, check_len, check_magic};
use crate::{get_u32, get_u64, padded_boot_id, put_u32, put_u64, FormatError};

/// Magic of an index file.
pub const INDEX_MAGIC: [u8; 8] = *b"EMBLIDX1";
/// Offset of the store id.
pub const INDEX_STORE_ID: usize = 8;
/// Offset of the boot id.
pub const INDEX_BOOT_ID: usize = 16;
/// Bytes of the boot id field.
pub const INDEX_BOOT_ID_BYTES: usize = 40;
/// Offset of the slot size.
pub const INDEX_SLOT_BYTES: usize = 56;
/// Offset of the reserved word.
pub const INDEX_RESERVED: usize = 60;
/// Offset of the ring's block count.
pub const INDEX_RING: usize = 64;
/// Offset of the data-file block of ring block 0.
pub const INDEX_LOG_BASE: usize = 72;
/// Offset of the header's CRC.
pub const INDEX_CRC: usize = 80;
/// Offset of the kept-through word.
pub const INDEX_KEPT_THROUGH: usize = 4088;
/// Where the first slot begins (the header block's length).
pub const SLOTS_AT: u64 = 4096;

/// Offset in a slot of its CRC.
pub const SLOT_CRC: usize = 0;
/// Offset in a slot of the ring block.
pub const SLOT_BLOCK: usize = 4;
/// Offset in a slot of the epoch.
pub const SLOT_EPOCH: usize = 8;
/// Offset in a slot of the table.
pub const SLOT_TABLE: usize = 16;
/// Offset in a slot of the row count.
pub const SLOT_COUNT: usize = 20;
/// Offset in a slot of the first id.
pub const SLOT_IDS: usize = 24;

/// Bytes of a slot that holds up to `max_rows` ids.
pub fn slot_bytes_for(max_rows: usize) -> usize {
    SLOT_IDS + 8 * max_rows
}

/// A decoded index header.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexHeader {
    /// The superblock's store id.
    pub store_id: u64,
    /// The boot of the machine the slots were written in (at most 40
    /// bytes, no NUL).
    pub boot_id: Vec<u8>,
    /// Bytes of each slot: [`slot_bytes_for`] the most rows a log block of
    /// the store holds.
    pub slot_bytes: u32,
    /// The row log's ring, in blocks: the index has a slot for each.
    pub ring: u64,
    /// The data-file block of ring block 0.
    pub log_base: u64,
}

fn bad(field: &'static str, offset: u64, value: String) -> FormatError {
    FormatError::InvalidField {
        field,
        offset,
        value,
    }
}

impl IndexHeader {
    /// Byte offset of ring block `b`'s slot.
    pub fn slot_offset(&self, b: u64) -> u64 {
        SLOTS_AT + b * self.slot_bytes as u64
    }

    /// Bytes of the whole file: the header block and a slot per ring block.
    pub fn file_len(&self) -> u64 {
        self.slot_offset(self.ring)
    }

    /// The header block (4096 bytes, kept-through 0); None when the boot
    /// id does not fit its field.
    pub fn encode(&self) -> Option<Vec<u8>> {
        if self.boot_id.len() > INDEX_BOOT_ID_BYTES || self.boot_id.contains(&0) {
            return None;
        }
        let mut out = vec![0u8; SLOTS_AT as usize];
        out[..8].copy_from_slice(&INDEX_MAGIC);
        put_u64(&mut out, INDEX_STORE_ID, self.store_id);
        out[INDEX_BOOT_ID..INDEX_BOOT_ID + self.boot_id.len()].copy_from_slice(&self.boot_id);
        put_u32(&mut out, INDEX_SLOT_BYTES, self.slot_bytes);
        put_u64(&mut out, INDEX_RING, self.ring);
        put_u64(&mut out, INDEX_LOG_BASE, self.log_base);
        let crc = crc32c::crc32c(&out[..INDEX_CRC]);
        put_u32(&mut out, INDEX_CRC, crc);
        Some(out)
    }

    /// Decode and check the header block `b` (at least its first 4096
    /// bytes): the magic, the CRC, the boot id's padding, the reserved
    /// word, a slot size that holds at least one id in whole 8-byte words,
    /// and a ring of at least one block. Returns the header and the
    /// kept-through generation.
    pub fn decode(b: &[u8]) -> Result<(IndexHeader, u64), FormatError> {
        check_len(b, SLOTS_AT as usize)?;
        check_magic(b, &INDEX_MAGIC)?;
        check_crc(b, INDEX_CRC)?;
        let boot_id = padded_boot_id(
            &b[INDEX_BOOT_ID..INDEX_BOOT_ID + INDEX_BOOT_ID_BYTES],
            INDEX_BOOT_ID as u64,
        )?;
        let reserved = get_u32(b, INDEX_RESERVED);
        if reserved != 0 {
            return Err(bad("reserved", INDEX_RESERVED as u64, reserved.to_string()));
        }
        let slot_bytes = get_u32(b, INDEX_SLOT_BYTES);
        if (slot_bytes as usize) < slot_bytes_for(1) || slot_bytes % 8 != 0 {
            return Err(bad(
                "slot bytes",
                INDEX_SLOT_BYTES as u64,
                slot_bytes.to_string(),
            ));
        }
        let ring = get_u64(b, INDEX_RING);
        if ring == 0 || ring > u32::MAX as u64 {
            return Err(bad("ring", INDEX_RING as u64, ring.to_string()));
        }
        let h = IndexHeader {
            store_id: get_u64(b, INDEX_STORE_ID),
            boot_id: boot_id.to_vec(),
            slot_bytes,
            ring,
            log_base: get_u64(b, INDEX_LOG_BASE),
        };
        Ok((h, get_u64(b, INDEX_KEPT_THROUGH)))
    }
}

/// Fill `out` (one slot, [`IndexHeader::slot_bytes`] long) with ring block
/// `block`'s entry: sealed by `epoch`, holding `ids` of table `table`.
///
/// # Panics
/// If `ids` is empty or does not fit the slot (caller bugs).
pub fn encode_slot(out: &mut [u8], block: u32, epoch: u64, table: u32, ids: &[u64]) {
    let n = ids.len();
    assert!(
        n >= 1 && slot_bytes_for(n) <= out.len(),
        "{n} ids in a slot of {} bytes",
        out.len()
    );
    out.fill(0);
    put_u32(out, SLOT_BLOCK, block);
    put_u64(out, SLOT_EPOCH, epoch);
    put_u32(out, SLOT_TABLE, table);
    put_u32(out, SLOT_COUNT, n as u32);
    for (i, &id) in ids.iter().enumerate() {
        put_u64(out, SLOT_IDS + 8 * i, id);
    }
    let crc = crc32c::crc32c(&out[SLOT_BLOCK..slot_bytes_for(n)]);
    put_u32(out, SLOT_CRC, crc);
}

/// A decoded slot: a ring block's table, epoch and ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot<'a> {
    /// The epoch the block was sealed with.
    pub epoch: u64,
    /// The table's catalog index.
    pub table: u32,
    ids: &'a [u8],
}

impl Slot<'_> {
    /// Rows the block holds.
    pub fn count(&self) -> usize {
        self.ids.len() / 8
    }

    /// The block's row ids, in block order.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.ids
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
    }
}

/// Decode and check `slot`, the slot of ring block `block` at byte
/// `offset` of the index (for errors): the CRC, the block number, and a
/// row count of at least one that fits the slot. Whether the ids are in
/// range and each appears once is the caller's to check, as for the
/// block itself.
pub fn decode_slot(slot: &[u8], block: u32, offset: u64) -> Result<Slot<'_>, FormatError> {
    let n = get_u32(slot, SLOT_COUNT) as usize;
    let cap = (slot.len() - SLOT_IDS) / 8;
    if n == 0 || n > cap {
        return Err(bad(
            "slot count",
            offset + SLOT_COUNT as u64,
            format!("{n}, not 1 to {cap}"),
        ));
    }
    let end = slot_bytes_for(n);
    let stored = get_u32(slot, SLOT_CRC);
    let computed = crc32c::crc32c(&slot[SLOT_BLOCK..end]);
    if stored != computed {
        return Err(FormatError::ChecksumMismatch {
            offset: offset + SLOT_CRC as u64,
            stored,
            computed,
        });
    }
    let b = get_u32(slot, SLOT_BLOCK);
    if b != block {
        return Err(bad(
            "slot block",
            offset + SLOT_BLOCK as u64,
            format!("{b}, in the slot of ring block {block}"),
        ));
    }
    Ok(Slot {
        epoch: get_u64(slot, SLOT_EPOCH),
        table: get_u32(slot, SLOT_TABLE),
        ids: &slot[SLOT_IDS..end],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::refuses_flips_and_cuts;

    fn sample() -> IndexHeader {
        IndexHeader {
            store_id: 0xfeed_beef,
            boot_id: b"0b5e4d2c-9f1a-4c3b-8e7d-6a5b4c3d2e1f".to_vec(),
            slot_bytes: slot_bytes_for(15) as u32,
            ring: 1000,
            log_base: 77,
        }
    }

    #[test]
    fn the_header_round_trips_with_its_kept_through_word() {
        let h = sample();
        let mut b = h.encode().unwrap();
        assert_eq!(b.len(), SLOTS_AT as usize);
        assert_eq!(IndexHeader::decode(&b).unwrap(), (h.clone(), 0));
        put_u64(&mut b, INDEX_KEPT_THROUGH, 41);
        assert_eq!(IndexHeader::decode(&b).unwrap(), (h.clone(), 41));
        assert_eq!(h.slot_offset(2), 4096 + 2 * 144);
        assert_eq!(h.file_len(), 4096 + 1000 * 144);
        let long = IndexHeader {
            boot_id: vec![b'x'; 41],
            ..h
        };
        assert!(long.encode().is_none());
    }

    /// A flipped bit anywhere in the CRC's span, or a cut, is refused.
    #[test]
    fn a_damaged_header_is_refused() {
        let b = sample().encode().unwrap();
        // Flips in the CRC's span, on the whole block; cuts of the span
        // are blocks cut short.
        refuses_flips_and_cuts(&b[..INDEX_CRC + 4], |x| {
            if x.len() < INDEX_CRC + 4 {
                return IndexHeader::decode(x).map(|_| ());
            }
            let mut full = b.clone();
            full[..x.len()].copy_from_slice(x);
            IndexHeader::decode(&full).map(|_| ())
        });
        assert!(IndexHeader::decode(&b[..SLOTS_AT as usize - 1]).is_err());
    }

    #[test]
    fn a_slot_round_trips_and_names_its_damage() {
        let mut s = vec![0xAAu8; slot_bytes_for(15)];
        encode_slot(&mut s, 7, 12, 3, &[5, 9, 1]);
        let d = decode_slot(&s, 7, 4096).unwrap();
        assert_eq!((d.epoch, d.table, d.count()), (12, 3, 3));
        assert_eq!(d.ids().collect::<Vec<_>>(), vec![5, 9, 1]);
        // The slot of another block.
        let e = decode_slot(&s, 8, 4096).unwrap_err().to_string();
        assert!(e.contains("slot block"), "{e}");
        // Never written: zeros.
        let zero = vec![0u8; slot_bytes_for(15)];
        assert!(decode_slot(&zero, 0, 0).is_err());
        // A flipped id bit fails the CRC, naming the slot's offset.
        let mut f = s.clone();
        f[SLOT_IDS + 3] ^= 1;
        match decode_slot(&f, 7, 4096) {
            Err(FormatError::ChecksumMismatch { offset, .. }) => assert_eq!(offset, 4096),
            other => panic!("{other:?}"),
        }
        // A count past the slot.
        let mut c = s.clone();
        put_u32(&mut c, SLOT_COUNT, 16);
        let e = decode_slot(&c, 7, 0).unwrap_err().to_string();
        assert!(e.contains("slot count"), "{e}");
    }
}
