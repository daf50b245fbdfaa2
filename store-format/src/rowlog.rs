//! Row-log blocks (see FORMAT.md, "Row log").
//!
//! The row log is the region of the data file after the last table's
//! blocks. Each block holds up to [`rows_per_block`] rows of one table,
//! packed, with their row ids, and ends in the data-block trailer
//! ([`crate::seal_block`]) carrying its absolute block number and the epoch
//! that wrote it.
//!
//! Payload layout (offsets in the block):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `ELOG` |
//! | 4 | 4 | table index in the catalog |
//! | 8 | 4 | row count `n` (1 ..= [`rows_per_block`]) |
//! | 12 | 4 | row bytes |
//! | 16 | 8 n | row ids (u64) |
//! | 16 + 8 n | rb n | the rows, in the order of the ids |

use crate::{get_u32, get_u64, put_u32, put_u64, FormatError, BLOCK_PAYLOAD};

/// Magic of a row-log block's payload: `ELOG` read as a little-endian u32.
pub const LOG_MAGIC: u32 = u32::from_le_bytes(*b"ELOG");
/// Offset of the magic.
pub const MAGIC: usize = 0;
/// Offset of the table index.
pub const TABLE: usize = 4;
/// Offset of the row count.
pub const COUNT: usize = 8;
/// Offset of the row size.
pub const ROW_BYTES: usize = 12;
/// Offset of the first row id.
pub const IDS: usize = 16;

/// Rows of `row_bytes` bytes that one row-log block holds (0: none fits).
pub fn rows_per_block(row_bytes: usize) -> usize {
    (BLOCK_PAYLOAD - IDS) / (8 + row_bytes)
}

/// Fill the payload of `block` (a 4 KiB block, sealed afterwards by the
/// caller) with the rows `rows` (`ids.len() * row_bytes` bytes) of table
/// `table`.
///
/// # Panics
/// If more rows are given than [`rows_per_block`] allows, or `rows` has the
/// wrong length (caller bugs).
pub fn encode(block: &mut [u8], table: u32, row_bytes: usize, ids: &[u64], rows: &[u8]) {
    let n = ids.len();
    assert!(
        n >= 1 && n <= rows_per_block(row_bytes),
        "{n} rows in a log block"
    );
    assert_eq!(rows.len(), n * row_bytes, "row bytes");
    block[..BLOCK_PAYLOAD].fill(0);
    put_u32(block, MAGIC, LOG_MAGIC);
    put_u32(block, TABLE, table);
    put_u32(block, COUNT, n as u32);
    put_u32(block, ROW_BYTES, row_bytes as u32);
    for (i, &id) in ids.iter().enumerate() {
        put_u64(block, IDS + 8 * i, id);
    }
    let at = IDS + 8 * n;
    block[at..at + rows.len()].copy_from_slice(rows);
}

/// A decoded row-log block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBlock<'a> {
    /// The table's index in the catalog.
    pub table: u32,
    /// Bytes of each row.
    pub row_bytes: usize,
    /// The row ids, in block order.
    pub ids: Vec<u64>,
    /// The rows, `ids.len() * row_bytes` bytes.
    pub rows: &'a [u8],
}

impl LogBlock<'_> {
    /// The bytes of row `i` of the block.
    pub fn row(&self, i: usize) -> &[u8] {
        &self.rows[i * self.row_bytes..(i + 1) * self.row_bytes]
    }
}

/// Decode the payload of a row-log block that [`crate::check_block`] found
/// sealed; `offset` is its byte offset in the data file, for errors.
pub fn decode(block: &[u8], offset: u64) -> Result<LogBlock<'_>, FormatError> {
    let field = |field: &'static str, at: usize, value: String| FormatError::InvalidField {
        field,
        offset: offset + at as u64,
        value,
    };
    let magic = get_u32(block, MAGIC);
    if magic != LOG_MAGIC {
        return Err(FormatError::BadMagic {
            offset: offset + MAGIC as u64,
            found: magic.to_le_bytes().to_vec(),
            expected: LOG_MAGIC.to_le_bytes().to_vec(),
        });
    }
    let row_bytes = get_u32(block, ROW_BYTES) as usize;
    let cap = rows_per_block(row_bytes);
    if row_bytes == 0 || cap == 0 {
        return Err(field("row_bytes", ROW_BYTES, row_bytes.to_string()));
    }
    let n = get_u32(block, COUNT) as usize;
    if n == 0 || n > cap {
        return Err(field(
            "count",
            COUNT,
            format!("{n}, not 1 to {cap} rows of {row_bytes} bytes"),
        ));
    }
    let ids: Vec<u64> = (0..n).map(|i| get_u64(block, IDS + 8 * i)).collect();
    // Each id at most once: with two copies, which one is newest would
    // depend on the reader.
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        let i = ids.iter().rposition(|&x| x == w[0]).unwrap_or(0);
        return Err(field(
            "row id",
            IDS + 8 * i,
            format!("{} appears more than once in the block", w[0]),
        ));
    }
    let at = IDS + 8 * n;
    Ok(LogBlock {
        table: get_u32(block, TABLE),
        row_bytes,
        ids,
        rows: &block[at..at + n * row_bytes],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BLOCK_SIZE;

    #[test]
    fn round_trip_and_capacity() {
        assert_eq!(rows_per_block(256), 15);
        assert_eq!(rows_per_block(4056), 0);
        let ids = [9u64, 3, 700];
        let rows: Vec<u8> = (0..3 * 256).map(|i| i as u8).collect();
        let mut b = vec![0u8; BLOCK_SIZE];
        encode(&mut b, 2, 256, &ids, &rows);
        let d = decode(&b, 0).unwrap();
        assert_eq!((d.table, d.row_bytes, d.ids.as_slice()), (2, 256, &ids[..]));
        assert_eq!(d.row(2), &rows[512..]);
    }

    /// Found by the `rowlog` fuzz target: a sealed block holding one id
    /// twice was accepted (a miss read the first copy, a pinned table's
    /// load the last).
    #[test]
    fn a_duplicate_id_is_refused_naming_it() {
        let mut b = vec![0u8; BLOCK_SIZE];
        encode(&mut b, 0, 256, &[4, 9, 4], &[0; 3 * 256]);
        let e = decode(&b, 8192).unwrap_err();
        match e {
            FormatError::InvalidField {
                field: "row id",
                offset,
                ..
            } => assert_eq!(offset, 8192 + (IDS + 16) as u64),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let mut b = vec![0u8; BLOCK_SIZE];
        encode(&mut b, 0, 256, &[1], &[0; 256]);
        put_u32(&mut b, COUNT, 16);
        let e = decode(&b, 4096).unwrap_err().to_string();
        assert!(e.contains("count") && e.contains("4104"), "{e}");
        put_u32(&mut b, MAGIC, 7);
        assert!(matches!(decode(&b, 0), Err(FormatError::BadMagic { .. })));
    }
}
