//! Row-log blocks (FORMAT.md, "Row log"): the payload decoder on arbitrary
//! bytes, then the checks the store applies to a committed log block at
//! open (`restore_row_log`) and on a miss (`Ssd::check_log_block`): sealed
//! with its own block number by a readable epoch, a table of the catalog
//! with that table's `row_bytes`, ids below the table's `rows`.
//!
//! Input: byte 0 is the mode, bytes 1..9 a small catalog of two tables
//! (`u16 row_bytes`, `u16 rows` each), bytes 9..11 the log block's number,
//! the rest the block (zero-padded or cut to 4096 bytes). Mode bit 0 stamps
//! the `ELOG` magic, bit 1 seals the block (its number, `EBLK`, the CRC) so
//! that the store's checks behind the seal are reached; bits 2..4 pick the
//! committed epoch relative to the block's.
//!
//! Every block that decodes must satisfy the documented invariants: a
//! count of 1 ..= `rows_per_block(row_bytes)`, ids and rows inside the
//! payload, each id at most once (this target's first finding: `decode`
//! accepted a repeated id until ef945db; seed `regression-duplicate-row-id`).
#![no_main]
use std::collections::HashSet;

use embtier_format::rowlog::{self, decode, encode, rows_per_block, LogBlock};
use embtier_format::{
    block_epoch, check_block, le_u32, seal_block, BlockState, BLOCK_PAYLOAD, BLOCK_SIZE,
};
use libfuzzer_sys::fuzz_target;

/// What the store's catalog says of a table, as far as the log cares.
struct Table {
    row_bytes: usize,
    rows: u64,
}

/// The invariants of a decoded block, on the bytes it came from.
fn check_decoded(lb: &LogBlock<'_>, raw: &[u8]) {
    let n = lb.ids.len();
    assert!(lb.row_bytes >= 1, "row_bytes 0 decoded");
    let cap = rows_per_block(lb.row_bytes);
    assert!(n >= 1 && n <= cap, "{n} rows of {} bytes", lb.row_bytes);
    assert_eq!(le_u32(raw, rowlog::COUNT) as usize, n);
    assert_eq!(le_u32(raw, rowlog::TABLE), lb.table);
    assert_eq!(le_u32(raw, rowlog::ROW_BYTES) as usize, lb.row_bytes);
    assert_eq!(lb.rows.len(), n * lb.row_bytes);
    // Ids, then rows, all inside the payload (never the trailer).
    let rows_at = rowlog::IDS + 8 * n;
    assert!(rows_at + lb.rows.len() <= BLOCK_PAYLOAD);
    assert_eq!(lb.rows, &raw[rows_at..rows_at + n * lb.row_bytes]);
    for (i, id) in lb.ids.iter().enumerate() {
        let at = rowlog::IDS + 8 * i;
        assert_eq!(u64::from_le_bytes(raw[at..at + 8].try_into().unwrap()), *id);
    }
    let mut seen = HashSet::with_capacity(n);
    for id in &lb.ids {
        assert!(seen.insert(*id), "row id {id} twice in one log block");
    }
    // What decodes re-encodes to a block that decodes to the same.
    let mut again = vec![0u8; BLOCK_SIZE];
    encode(&mut again, lb.table, lb.row_bytes, &lb.ids, lb.rows);
    assert_eq!(decode(&again, 0).as_ref(), Ok(lb));
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 11 {
        return;
    }
    let mode = data[0];
    let u16_at = |at: usize| u16::from_le_bytes([data[at], data[at + 1]]);
    let tables = [
        Table {
            row_bytes: u16_at(1) as usize,
            rows: u16_at(3) as u64,
        },
        Table {
            row_bytes: u16_at(5) as usize,
            rows: u16_at(7) as u64,
        },
    ];
    // The log starts after the tables; any block number will do here.
    let no = 4 + u16_at(9) as u64;
    let mut blk = vec![0u8; BLOCK_SIZE];
    let body = &data[11..];
    let k = body.len().min(BLOCK_SIZE);
    blk[..k].copy_from_slice(&body[..k]);
    if mode & 1 == 1 {
        blk[..4].copy_from_slice(&rowlog::LOG_MAGIC.to_le_bytes());
    }
    if mode & 2 == 2 {
        let epoch = block_epoch(&blk);
        seal_block(&mut blk, no, epoch);
    }

    // The decoder alone, whatever the seal says.
    if let Ok(lb) = decode(&blk, no * BLOCK_SIZE as u64) {
        check_decoded(&lb, &blk);
    }

    // The store's path: the seal, the epoch, then the decode, the table.
    let Ok(BlockState::Sealed) = check_block(&blk, no) else {
        return;
    };
    let epoch = block_epoch(&blk);
    let committed = match (mode >> 2) & 7 {
        0 => epoch.saturating_sub(1),
        1 => epoch,
        2 => epoch.saturating_add(1),
        _ => u64::MAX,
    };
    if epoch > committed {
        return; // never committed: the store refuses it before decoding
    }
    let Ok(lb) = decode(&blk, no * BLOCK_SIZE as u64) else {
        return;
    };
    let Some(t) = tables.get(lb.table as usize) else {
        return;
    };
    if lb.row_bytes != t.row_bytes || lb.ids.iter().any(|&id| id >= t.rows) {
        return;
    }
    // Accepted: every id is a row of the table, and the row a miss finds
    // for it (the first position holding the id) is inside the block.
    for &id in &lb.ids {
        assert!(id < t.rows);
        let k = lb.ids.iter().position(|&x| x == id).unwrap();
        assert_eq!(lb.row(k).len(), t.row_bytes);
    }
});
