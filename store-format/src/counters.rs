//! The persisted call counters after the catalog (FORMAT.md, "Call
//! counters").

use crate::*;

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
