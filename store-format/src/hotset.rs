//! The hot set (`hot.emb`; see FORMAT.md, "Hot set"): which rows each
//! cached table held in each cache tier at the last checkpoint, so that an
//! open can read them back before training asks for them (a warm restart).
//!
//! It is a hint. Rows are always read from the data file after recovery, so
//! a stale, torn or missing hot set can cost time, never correctness; a
//! reader refuses anything that fails its checks and the store then starts
//! cold.
//!
//! Layout: a 24-byte header, the tables, and a CRC-32C of everything before
//! it.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `EMBHOT1\0` |
//! | 8 | 8 | generation of the checkpoint that wrote it |
//! | 16 | 4 | table count |
//! | 20 | 4 | reserved, zero |
//!
//! Each table: `u32` catalog index, `u32` tier count, then per tier a `u64`
//! row count `n` and `n` ids, strictly ascending, as LEB128 varints: the
//! first id, then each id minus the one before it.

use crate::{check_crc, check_len, check_magic};
use crate::{get_u32, get_u64, put_u32, put_u64, FormatError};

/// Magic of a hot-set file.
pub const HOT_MAGIC: [u8; 8] = *b"EMBHOT1\0";
/// Offset of the generation.
pub const GENERATION: usize = 8;
/// Offset of the table count.
pub const TABLE_COUNT: usize = 16;
/// Offset of the reserved word.
pub const RESERVED: usize = 20;
/// Bytes of the header.
pub const HEADER: usize = 24;

/// The rows one table held in each tier, ascending.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HotTable {
    /// The table's index in the catalog.
    pub table: u32,
    /// Per cache tier, in the store's order: the ids resident there.
    pub tiers: Vec<Vec<u64>>,
}

/// A decoded hot set.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HotSet {
    /// The checkpoint generation it was written at.
    pub generation: u64,
    /// The tables.
    pub tables: Vec<HotTable>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn bad(field: &'static str, offset: usize, value: String) -> FormatError {
    FormatError::InvalidField {
        field,
        offset: offset as u64,
        value,
    }
}

/// A reader over the bytes before the CRC.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn need(&self, n: usize) -> Result<(), FormatError> {
        if self.b.len() - self.at < n {
            return Err(FormatError::Truncated {
                offset: self.at as u64,
                needed: n as u64,
                have: (self.b.len() - self.at) as u64,
            });
        }
        Ok(())
    }
    fn u32(&mut self) -> Result<u32, FormatError> {
        self.need(4)?;
        self.at += 4;
        Ok(get_u32(self.b, self.at - 4))
    }
    fn u64(&mut self) -> Result<u64, FormatError> {
        self.need(8)?;
        self.at += 8;
        Ok(get_u64(self.b, self.at - 8))
    }
    fn varint(&mut self) -> Result<u64, FormatError> {
        let start = self.at;
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            self.need(1)?;
            let byte = self.b[self.at];
            self.at += 1;
            let bits = (byte & 0x7f) as u64;
            if shift == 63 && bits > 1 {
                break;
            }
            v |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad("id", start, "a varint longer than 64 bits".into()))
    }
}

impl HotSet {
    /// The file's bytes, CRC included.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; HEADER];
        out[..8].copy_from_slice(&HOT_MAGIC);
        put_u64(&mut out, GENERATION, self.generation);
        put_u32(&mut out, TABLE_COUNT, self.tables.len() as u32);
        for t in &self.tables {
            out.extend_from_slice(&t.table.to_le_bytes());
            out.extend_from_slice(&(t.tiers.len() as u32).to_le_bytes());
            for ids in &t.tiers {
                out.extend_from_slice(&(ids.len() as u64).to_le_bytes());
                let mut prev = 0u64;
                for (i, &id) in ids.iter().enumerate() {
                    debug_assert!(i == 0 || id > prev, "ids strictly ascending");
                    put_varint(&mut out, if i == 0 { id } else { id - prev });
                    prev = id;
                }
            }
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decode and check a hot-set file: its magic, CRC, counts that fit in
    /// its length, and ids strictly ascending below `2^62`.
    pub fn decode(b: &[u8]) -> Result<HotSet, FormatError> {
        check_len(b, HEADER + 4)?;
        check_magic(b, &HOT_MAGIC)?;
        check_crc(b, b.len() - 4)?;
        let body = &b[..b.len() - 4];
        if get_u32(body, RESERVED) != 0 {
            return Err(bad(
                "reserved",
                RESERVED,
                get_u32(body, RESERVED).to_string(),
            ));
        }
        let count = get_u32(body, TABLE_COUNT);
        let mut r = Reader {
            b: body,
            at: HEADER,
        };
        let mut tables = Vec::new();
        for _ in 0..count {
            let table = r.u32()?;
            let tiers_at = r.at;
            let ntiers = r.u32()?;
            if ntiers > 64 {
                return Err(bad("tier count", tiers_at, ntiers.to_string()));
            }
            let mut tiers = Vec::with_capacity(ntiers as usize);
            for _ in 0..ntiers {
                let n_at = r.at;
                let n = r.u64()?;
                // Each id takes at least one byte: a count past what is
                // left is a lie, refused before allocating for it.
                if n > (body.len() - r.at) as u64 {
                    return Err(bad("row count", n_at, n.to_string()));
                }
                let mut ids = Vec::with_capacity(n as usize);
                let mut prev = 0u64;
                for i in 0..n {
                    let at = r.at;
                    let d = r.varint()?;
                    let id = if i == 0 {
                        d
                    } else if d == 0 {
                        return Err(bad("id", at, "not above the one before it".into()));
                    } else {
                        prev.saturating_add(d)
                    };
                    if id >= 1 << 62 {
                        return Err(bad("id", at, id.to_string()));
                    }
                    ids.push(id);
                    prev = id;
                }
                tiers.push(ids);
            }
            tables.push(HotTable { table, tiers });
        }
        if r.at != body.len() {
            return Err(bad(
                "length",
                r.at,
                format!("{} bytes after the last table", body.len() - r.at),
            ));
        }
        Ok(HotSet {
            generation: get_u64(body, GENERATION),
            tables,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> HotSet {
        HotSet {
            generation: 7,
            tables: vec![
                HotTable {
                    table: 0,
                    tiers: vec![vec![0, 1, 2, 1000, 1 << 40], vec![5]],
                },
                HotTable {
                    table: 3,
                    tiers: vec![vec![], vec![(1 << 62) - 1]],
                },
            ],
        }
    }

    #[test]
    fn round_trips() {
        let h = sample();
        assert_eq!(HotSet::decode(&h.encode()).unwrap(), h);
        let empty = HotSet::default();
        assert_eq!(HotSet::decode(&empty.encode()).unwrap(), empty);
    }

    /// Every truncation and every single-bit flip is refused (the CRC sees
    /// each flip; truncations fail the CRC or the length checks).
    #[test]
    fn every_truncation_and_flip_is_refused() {
        let b = sample().encode();
        for n in 0..b.len() {
            assert!(HotSet::decode(&b[..n]).is_err(), "cut at {n}");
        }
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut c = b.clone();
                c[i] ^= 1 << bit;
                assert!(HotSet::decode(&c).is_err(), "flip {i}:{bit}");
            }
        }
    }

    /// A file with a valid CRC but lying contents is refused by name, not
    /// trusted: a huge count, ids out of order or out of range.
    #[test]
    fn lies_under_a_valid_crc_are_refused() {
        use crate::testing::reseal;
        // The first tier's count of table 0 (after its index and tier count).
        let mut b = sample().encode();
        b[HEADER + 8..HEADER + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = HotSet::decode(&reseal(b)).unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::InvalidField {
                    field: "row count",
                    ..
                }
            ),
            "{e}"
        );
        // A zero delta (the second id equal to the first).
        let mut b = sample().encode();
        b[HEADER + 17] = 0;
        let e = HotSet::decode(&reseal(b)).unwrap_err();
        assert!(
            matches!(e, FormatError::InvalidField { field: "id", .. }),
            "{e}"
        );
        // An id at 2^62.
        let h = HotSet {
            generation: 1,
            tables: vec![HotTable {
                table: 0,
                tiers: vec![vec![1 << 62]],
            }],
        };
        let e = HotSet::decode(&h.encode()).unwrap_err();
        assert!(
            matches!(e, FormatError::InvalidField { field: "id", .. }),
            "{e}"
        );
    }
}
