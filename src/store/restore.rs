//! What open checks and restores before the store serves: the data file's
//! length, the row log's capacity, and the row log's map.

use super::*;
use crate::table::HotIds;

/// Refuse a data file shorter than the blocks the superblock commits (the
/// tables and the committed row log). A block past the end reads as a hole,
/// that is as a never-written row, so a truncated file would otherwise
/// serve its lost rows as their initial values. A block device is not
/// checked: its length is not the file's.
pub(super) fn check_data_len(data_path: &Path, sb: &Superblock) -> Result<()> {
    let meta = match std::fs::metadata(data_path) {
        Ok(m) => m,
        // A missing file is an error too: the engine's open would create
        // it, all holes.
        Err(e) => return Err(Error::io(data_path, "stat", e)),
    };
    let needed = (sb.data_blocks + sb.rowlog_extent()).saturating_mul(BLOCK_SIZE as u64);
    if meta.is_file() && meta.len() < needed {
        return Err(Error::Format {
            path: data_path.into(),
            source: FormatError::Truncated {
                offset: 0,
                needed,
                have: meta.len(),
            },
        });
    }
    Ok(())
}

/// The row log's capacity in blocks: the config's, or by default the bytes
/// of the cached tables (at least 16 MiB); none unless the data file
/// is a regular file (a block device has no room after the tables).
pub(super) fn row_log_blocks(config: &StoreConfig, catalog: &Catalog, data_path: &Path) -> u64 {
    let regular = fs::metadata(data_path)
        .map(|m| m.is_file())
        .unwrap_or(false);
    if !regular {
        return 0;
    }
    let bytes = match config.ssd.row_log {
        Some(b) => b.0,
        None => {
            let cached: u64 = catalog
                .tables
                .iter()
                .zip(&config.tables)
                .filter(|(_, t)| t.placement == Placement::Cached)
                .map(|(e, _)| e.block_count * BLOCK_SIZE as u64)
                .sum();
            cached.max(16 << 20)
        }
    };
    bytes / BLOCK_SIZE as u64
}

/// Recovery of the row log: map every row of its `committed` blocks to the
/// newest block holding it (blocks later in the log, which wraps in its
/// ring, are newer). Blocks past the committed length were written after
/// the last checkpoint and are ignored. Any block that is not a sealed, committed row-log block of a
/// table of this store, holding ids in range, is an error naming it.
///
/// The log is read in large sequential reads on a second thread, one
/// ahead of the checks and the map ([`read_ahead`]): read and checked
/// one after the other, a SIGKILLed W5 store's 800 MB of log took 2.1-2.3
/// s to restore, about 1.4 s of it the reads and the rest the CPU's; read
/// ahead, 1.4 s.
///
/// The rows of `hot` (by table index: the ids of the hot set a warm open
/// brings back) that the log holds are put in memory from these reads,
/// each as its newest copy; returns how many were not in memory. After a
/// crash, they are most of the rows a warm open would otherwise read back
/// one block each (the hot rows leave out those training wrote after a
/// snapshot checkpoint's moment; after a SIGKILLed W5, 252 k of those
/// 339 k rows had their newest copy in the log).
pub(super) fn restore_row_log(
    ssd: &Ssd,
    tables: &[Arc<Table>],
    sb: &Superblock,
    hot: &mut [HotIds],
) -> Result<u64> {
    let committed = sb.rowlog_blocks;
    let mut last_epoch = 0u64;
    let mut pinned = false;
    let mut put = 0u64;
    read_ahead(ssd, &log_chunks(sb), |&(at, first, n), buf| {
        for i in 0..n {
            let b = (first + i) as u32;
            // The block's place in the log, oldest first.
            let pos = at + i;
            let offset = ssd.log_block(b) * BLOCK_SIZE as u64;
            let raw = &buf[i as usize * BLOCK_SIZE..(i as usize + 1) * BLOCK_SIZE];
            let fmt = |source| Error::Format {
                path: ssd.path().to_path_buf(),
                source,
            };
            let invalid = |field, at: usize, value: String| {
                fmt(FormatError::InvalidField {
                    field,
                    offset: offset + at as u64,
                    value,
                })
            };
            let lb = ssd.check_log_block(b, raw).map_err(fmt)?;
            // Appends carry their checkpoint's epoch, in log order: an
            // older block where a newer append belongs is a lost write.
            let e = embtier_format::block_epoch(raw);
            let want_last = sb.version.has_v4_fields();
            let bad = e < last_epoch
                || (want_last && (pos >= sb.rowlog_from as u64) != (e == sb.committed_epoch))
                || (want_last && pos < sb.rowlog_from as u64 && e > sb.committed_epoch);
            if bad {
                return Err(invalid(
                    "row log block epoch",
                    embtier_format::BLOCK_SIZE - 24,
                    format!(
                        "{e}: out of order for block {pos} of a log whose last checkpoint \
                             (epoch {}) appended its blocks {}..{} (an append that never \
                             reached the disk)",
                        sb.committed_epoch, sb.rowlog_from, committed
                    ),
                ));
            }
            last_epoch = e;
            let Some(t) = tables.get(lb.table as usize) else {
                return Err(invalid(
                    "table",
                    embtier_format::rowlog::TABLE,
                    format!("{}, but the store has {} tables", lb.table, tables.len()),
                ));
            };
            if lb.row_bytes != t.row_bytes {
                return Err(invalid(
                    "row_bytes",
                    embtier_format::rowlog::ROW_BYTES,
                    format!(
                        "{}, but table {:?} has rows of {}",
                        lb.row_bytes, t.name, t.row_bytes
                    ),
                ));
            }
            if let Some(k) = lb.ids.iter().position(|&id| id >= t.entry.rows) {
                return Err(invalid(
                    "row id",
                    embtier_format::rowlog::IDS + 8 * k,
                    format!(
                        "{}, but table {:?} has {} rows",
                        lb.ids[k], t.name, t.entry.rows
                    ),
                ));
            }
            let mut none = HotIds::None;
            let cache = hot.get_mut(lb.table as usize).unwrap_or(&mut none);
            let (p, n) = t.restore_logged_block(b, &lb.ids, lb.rows, cache);
            pinned |= p;
            put += n;
        }
        Ok(())
    })?;
    if pinned || (committed > 0 && ssd.log().capacity == 0) {
        ssd.log().mark_stale();
    }
    Ok(put)
}

/// Blocks of the committed row log read at once.
const LOG_CHUNK: u64 = 1024;

/// The committed row log's reads, oldest first: `(position in the log,
/// first ring block, blocks)`, at most [`LOG_CHUNK`] blocks each and none
/// past the ring's last block.
fn log_chunks(sb: &Superblock) -> Vec<(u64, u64, u64)> {
    let committed = sb.rowlog_blocks;
    let mut chunks = Vec::new();
    let mut at = 0u64;
    while at < committed {
        let first = sb.rowlog_block(at);
        let to_wrap = match sb.rowlog_ring {
            0 => u64::MAX,
            r => r - first,
        };
        let n = LOG_CHUNK.min(committed - at).min(to_wrap);
        chunks.push((at, first, n));
        at += n;
    }
    chunks
}

/// Hand `each` the blocks of the row log's `chunks` ([`log_chunks`]) in
/// order, reading them on a second thread one chunk ahead (two buffers:
/// the one `each` checks, the one being read), so that the disk reads
/// the next chunk while `each` checks this one. The
/// first error, in log order, ends it: a chunk's failed read, or `each`'s
/// error, which stops the reads (the reader sees the channels close).
fn read_ahead(
    ssd: &Ssd,
    chunks: &[(u64, u64, u64)],
    mut each: impl FnMut(&(u64, u64, u64), &[u8]) -> Result<()>,
) -> Result<()> {
    let read = |&(_, first, n): &(u64, u64, u64), buf: &mut AlignedBuf| {
        let off = ssd.log_block(first as u32) * BLOCK_SIZE as u64;
        ssd.read_extents_each(&[off], n as usize * BLOCK_SIZE, buf, &mut |_, _| {})
    };
    if chunks.len() >= 2 {
        let ahead = std::thread::scope(|scope| {
            let (full_tx, full_rx) =
                std::sync::mpsc::sync_channel::<(usize, Result<AlignedBuf>)>(1);
            let (empty_tx, empty_rx) = std::sync::mpsc::channel::<AlignedBuf>();
            for _ in 0..2 {
                let _ = empty_tx.send(AlignedBuf::new(BLOCK_SIZE));
            }
            let reader = std::thread::Builder::new()
                .name("embtier-log-read".into())
                .spawn_scoped(scope, move || {
                    for (k, c) in chunks.iter().enumerate() {
                        // Gone: `each` failed, and the reads stop.
                        let Ok(mut buf) = empty_rx.recv() else {
                            return;
                        };
                        let r = read(c, &mut buf).map(|()| buf);
                        let failed = r.is_err();
                        if full_tx.send((k, r)).is_err() || failed {
                            return;
                        }
                    }
                });
            if reader.is_err() {
                // No thread to be had: the reads one after the other,
                // below (the channels went with the closure).
                return None;
            }
            let checked = || {
                for (k, r) in full_rx {
                    let buf = r?;
                    let c = &chunks[k];
                    each(c, &buf.as_slice()[..c.2 as usize * BLOCK_SIZE])?;
                    let _ = empty_tx.send(buf);
                }
                Ok(())
            };
            Some(checked())
        });
        if let Some(r) = ahead {
            return r;
        }
    }
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    for c in chunks {
        read(c, &mut buf)?;
        each(c, &buf.as_slice()[..c.2 as usize * BLOCK_SIZE])?;
    }
    Ok(())
}
