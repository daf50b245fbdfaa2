//! What open checks and restores before the store serves: the data file's
//! length, the row log's capacity, and the row log's map.

use super::*;

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
pub(super) fn restore_row_log(ssd: &Ssd, tables: &[Arc<Table>], sb: &Superblock) -> Result<()> {
    const CHUNK: u64 = 1024;
    let committed = sb.rowlog_blocks;
    let mut last_epoch = 0u64;
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let mut pinned = false;
    let mut at = 0u64;
    while at < committed {
        // A read does not run past the ring's last block.
        let first = sb.rowlog_block(at);
        let to_wrap = match sb.rowlog_ring {
            0 => u64::MAX,
            r => r - first,
        };
        let n = CHUNK.min(committed - at).min(to_wrap);
        let off = ssd.log_block(first as u32) * BLOCK_SIZE as u64;
        ssd.read_extents_each(&[off], n as usize * BLOCK_SIZE, &mut buf, &mut |_, _| {})?;
        for i in 0..n {
            let b = (first + i) as u32;
            // The block's place in the log, oldest first.
            let pos = at + i;
            let offset = ssd.log_block(b) * BLOCK_SIZE as u64;
            let raw = &buf.as_slice()[i as usize * BLOCK_SIZE..(i as usize + 1) * BLOCK_SIZE];
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
            for (k, &id) in lb.ids.iter().enumerate() {
                if id >= t.entry.rows {
                    return Err(invalid(
                        "row id",
                        embtier_format::rowlog::IDS + 8 * k,
                        format!("{id}, but table {:?} has {} rows", t.name, t.entry.rows),
                    ));
                }
                pinned |= t.restore_logged(id, b, lb.row(k));
            }
        }
        at += n;
    }
    if pinned || (committed > 0 && ssd.log().capacity == 0) {
        ssd.log().mark_stale();
    }
    Ok(())
}
