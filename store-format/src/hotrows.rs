//! The hot rows (`hot-rows.emb`; see FORMAT.md, "Hot rows"): the bytes of
//! every row each cached table held in memory at the last checkpoint, so
//! that an open at that checkpoint can put them back into the cache tiers
//! with sequential reads instead of one random read per row (a warm
//! restart).
//!
//! It is a hint, valid only for the checkpoint that wrote it: a reader
//! uses its rows only when the file's generation is the store's committed
//! one, and only the chunks that pass their own checks (each chunk carries
//! the generation and a CRC-32C, so a chunk torn by a crash, or a stale
//! chunk of an older file left in a reused block, is refused alone).
//!
//! Layout: a 32-byte file header, then chunks, then an end chunk.
//!
//! File header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `EMBROWS1` |
//! | 8 | 8 | generation of the checkpoint that wrote it |
//! | 16 | 8 | reserved, zero |
//! | 24 | 4 | CRC-32C of bytes 0..24 |
//! | 28 | 4 | reserved, zero |
//!
//! Chunk header (then `count` ids as `u64`, then `count` rows of
//! `row_bytes` each, in the same order):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `ROWS` (`END\0` for the end chunk) |
//! | 4 | 4 | CRC-32C of header bytes 8..32 and the payload |
//! | 8 | 8 | generation (the file header's) |
//! | 16 | 4 | catalog index of the table |
//! | 20 | 4 | cache tier (the store's index) |
//! | 24 | 4 | row bytes |
//! | 28 | 4 | row count |
//!
//! The end chunk has no payload: its table field is the chunk count before
//! it, its count field zero. A file without one was cut short.

use crate::{check_crc, check_len, check_magic};
use crate::{get_u32, get_u64, put_u32, put_u64, FormatError};

/// Magic of a hot-rows file.
pub const ROWS_MAGIC: [u8; 8] = *b"EMBROWS1";
/// Bytes of the file header.
pub const FILE_HEADER: usize = 32;
/// Offset of the generation in the file header.
pub const FILE_GENERATION: usize = 8;
/// Offset of the reserved word after the generation.
pub const FILE_RESERVED: usize = 16;
/// Offset of the file header's CRC.
pub const FILE_CRC: usize = 24;
/// Offset of the file header's second reserved word.
pub const FILE_RESERVED2: usize = 28;

/// Magic of a chunk of rows.
pub const CHUNK_MAGIC: [u8; 4] = *b"ROWS";
/// Magic of the end chunk.
pub const END_MAGIC: [u8; 4] = *b"END\0";
/// Bytes of a chunk header.
pub const CHUNK_HEADER: usize = 32;
/// Offset of a chunk's CRC.
pub const CHUNK_CRC: usize = 4;
/// Offset of a chunk's generation.
pub const CHUNK_GENERATION: usize = 8;
/// Offset of a chunk's table index (the end chunk: chunks before it).
pub const CHUNK_TABLE: usize = 16;
/// Offset of a chunk's tier.
pub const CHUNK_TIER: usize = 20;
/// Offset of a chunk's row bytes.
pub const CHUNK_ROW_BYTES: usize = 24;
/// Offset of a chunk's row count.
pub const CHUNK_COUNT: usize = 28;

/// Largest row a chunk may declare (a reader allocates for what it reads).
pub const MAX_ROW_BYTES: u32 = 1 << 20;
/// Largest payload a chunk may declare, ids and rows together.
pub const MAX_PAYLOAD: u64 = 64 << 20;

/// The file header's bytes for `generation`.
pub fn encode_file_header(generation: u64) -> [u8; FILE_HEADER] {
    let mut h = [0u8; FILE_HEADER];
    h[..8].copy_from_slice(&ROWS_MAGIC);
    put_u64(&mut h, FILE_GENERATION, generation);
    let crc = crc32c::crc32c(&h[..FILE_CRC]);
    put_u32(&mut h, FILE_CRC, crc);
    h
}

/// Check a file header; its generation.
pub fn decode_file_header(h: &[u8]) -> Result<u64, FormatError> {
    check_len(h, FILE_HEADER)?;
    check_magic(h, &ROWS_MAGIC)?;
    check_crc(h, FILE_CRC)?;
    let reserved = [
        (FILE_RESERVED, get_u64(h, FILE_RESERVED)),
        (FILE_RESERVED2, get_u32(h, FILE_RESERVED2) as u64),
    ];
    for (at, v) in reserved {
        if v != 0 {
            return Err(FormatError::InvalidField {
                field: "reserved",
                offset: at as u64,
                value: v.to_string(),
            });
        }
    }
    Ok(get_u64(h, FILE_GENERATION))
}

/// A chunk's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// The generation of the file it belongs to.
    pub generation: u64,
    /// Catalog index of the table (the end chunk: the chunks before it).
    pub table: u32,
    /// The cache tier the rows were in.
    pub tier: u32,
    /// Bytes of each row.
    pub row_bytes: u32,
    /// Rows in the chunk (0 for the end chunk).
    pub count: u32,
    /// Whether this is the end chunk.
    pub end: bool,
}

impl Chunk {
    /// Bytes of the payload after the header: the ids, then the rows.
    pub fn payload_bytes(&self) -> u64 {
        self.count as u64 * (8 + self.row_bytes as u64)
    }

    /// The header's bytes for this chunk over `payload` (the ids as
    /// little-endian `u64`, then the rows), its CRC included.
    pub fn encode(&self, payload: &[&[u8]]) -> [u8; CHUNK_HEADER] {
        let mut h = [0u8; CHUNK_HEADER];
        h[..4].copy_from_slice(if self.end { &END_MAGIC } else { &CHUNK_MAGIC });
        put_u64(&mut h, CHUNK_GENERATION, self.generation);
        put_u32(&mut h, CHUNK_TABLE, self.table);
        put_u32(&mut h, CHUNK_TIER, self.tier);
        put_u32(&mut h, CHUNK_ROW_BYTES, self.row_bytes);
        put_u32(&mut h, CHUNK_COUNT, self.count);
        let crc = payload_crc(&h, payload);
        put_u32(&mut h, CHUNK_CRC, crc);
        h
    }

    /// Decode a chunk header read at byte `offset` of the file: its magic
    /// and bounds (the CRC needs the payload: [`Chunk::check`]).
    pub fn decode(h: &[u8], offset: u64) -> Result<Chunk, FormatError> {
        if h.len() < CHUNK_HEADER {
            return Err(FormatError::Truncated {
                offset,
                needed: CHUNK_HEADER as u64,
                have: h.len() as u64,
            });
        }
        let end = h[..4] == END_MAGIC;
        if !end && h[..4] != CHUNK_MAGIC {
            return Err(FormatError::BadMagic {
                offset,
                found: h[..4].to_vec(),
                expected: CHUNK_MAGIC.to_vec(),
            });
        }
        let c = Chunk {
            generation: get_u64(h, CHUNK_GENERATION),
            table: get_u32(h, CHUNK_TABLE),
            tier: get_u32(h, CHUNK_TIER),
            row_bytes: get_u32(h, CHUNK_ROW_BYTES),
            count: get_u32(h, CHUNK_COUNT),
            end,
        };
        let bad = |field: &'static str, at: usize, value: String| FormatError::InvalidField {
            field,
            offset: offset + at as u64,
            value,
        };
        if end && c.count != 0 {
            return Err(bad("count", CHUNK_COUNT, c.count.to_string()));
        }
        if !end && (c.row_bytes == 0 || c.row_bytes > MAX_ROW_BYTES) {
            return Err(bad("row bytes", CHUNK_ROW_BYTES, c.row_bytes.to_string()));
        }
        if c.payload_bytes() > MAX_PAYLOAD {
            return Err(bad("count", CHUNK_COUNT, c.count.to_string()));
        }
        Ok(c)
    }

    /// Check the CRC of the header `h` (as read) over `payload`.
    pub fn check(h: &[u8], payload: &[u8], offset: u64) -> Result<(), FormatError> {
        let stored = get_u32(h, CHUNK_CRC);
        let computed = payload_crc(h, &[payload]);
        if stored != computed {
            return Err(FormatError::ChecksumMismatch {
                offset: offset + CHUNK_CRC as u64,
                stored,
                computed,
            });
        }
        Ok(())
    }
}

fn payload_crc(h: &[u8], payload: &[&[u8]]) -> u32 {
    let mut crc = crc32c::crc32c(&h[CHUNK_GENERATION..CHUNK_HEADER]);
    for p in payload {
        crc = crc32c::crc32c_append(crc, p);
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk() -> (Chunk, Vec<u8>) {
        let ids: Vec<u8> = [3u64, 9].iter().flat_map(|i| i.to_le_bytes()).collect();
        let rows = vec![7u8; 2 * 12];
        let c = Chunk {
            generation: 5,
            table: 1,
            tier: 0,
            row_bytes: 12,
            count: 2,
            end: false,
        };
        let h = c.encode(&[&ids, &rows]);
        let mut b = h.to_vec();
        b.extend_from_slice(&ids);
        b.extend_from_slice(&rows);
        (c, b)
    }

    #[test]
    fn headers_round_trip() {
        assert_eq!(decode_file_header(&encode_file_header(42)).unwrap(), 42);
        let (c, b) = chunk();
        let d = Chunk::decode(&b[..CHUNK_HEADER], 32).unwrap();
        assert_eq!(d, c);
        Chunk::check(&b[..CHUNK_HEADER], &b[CHUNK_HEADER..], 32).unwrap();
        let end = Chunk {
            generation: 5,
            table: 3,
            tier: 0,
            row_bytes: 0,
            count: 0,
            end: true,
        };
        let h = end.encode(&[]);
        assert_eq!(Chunk::decode(&h, 0).unwrap(), end);
        Chunk::check(&h, &[], 0).unwrap();
    }

    /// Every single-bit flip of a chunk, header or payload, is refused by
    /// its decode or its CRC; so is every flip of the file header.
    #[test]
    fn every_flip_is_refused() {
        let (_, b) = chunk();
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut c = b.clone();
                c[i] ^= 1 << bit;
                let ok = Chunk::decode(&c[..CHUNK_HEADER], 0).is_ok()
                    && Chunk::check(&c[..CHUNK_HEADER], &c[CHUNK_HEADER..], 0).is_ok();
                assert!(!ok, "flip {i}:{bit}");
            }
        }
        let h = encode_file_header(9);
        for i in 0..h.len() {
            for bit in 0..8 {
                let mut c = h;
                c[i] ^= 1 << bit;
                assert!(decode_file_header(&c).is_err(), "flip {i}:{bit}");
            }
        }
        assert!(decode_file_header(&h[..FILE_HEADER - 1]).is_err());
    }

    /// Declared sizes past the bounds are refused before anything is
    /// allocated for them.
    #[test]
    fn oversized_chunks_are_refused() {
        let mut c = Chunk {
            generation: 1,
            table: 0,
            tier: 0,
            row_bytes: MAX_ROW_BYTES + 1,
            count: 1,
            end: false,
        };
        let e = Chunk::decode(&c.encode(&[]), 0).unwrap_err();
        assert!(
            matches!(
                e,
                FormatError::InvalidField {
                    field: "row bytes",
                    ..
                }
            ),
            "{e}"
        );
        c.row_bytes = 256;
        c.count = u32::MAX;
        let e = Chunk::decode(&c.encode(&[]), 0).unwrap_err();
        assert!(
            matches!(e, FormatError::InvalidField { field: "count", .. }),
            "{e}"
        );
    }
}
