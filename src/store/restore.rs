//! What open checks and restores before the store serves: the data file's
//! length, the row log's capacity, and the row log's map.

use embtier_format::logindex::{
    decode_slot, encode_slot, slot_bytes_for, IndexHeader, SLOTS_AT, SLOT_IDS,
};

use super::*;
use crate::io::Faults;
use crate::table::HotIds;
use crate::tier::logindex::LogIndex;

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

/// How an open rebuilt the row log's map ([`Store::row_log_at_open`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct RowLogAtOpen {
    /// Blocks of the committed row log.
    pub blocks: u64,
    /// Whether the map came from the row-log index
    /// ([`crate::LOG_INDEX_FILE`]) without reading the log: an open after
    /// a crash, or after a close that left the log unmerged, in the boot
    /// of the machine that wrote it.
    pub from_index: bool,
    /// Why the index was not used, where the log had blocks and the open
    /// read them instead (another boot, a checkpoint the index was not
    /// kept through, a damaged slot, or the hot set's rows to bring back,
    /// which the read of the log brings).
    pub index_refused: Option<String>,
    /// Seconds the map took to rebuild (reading the index or the log).
    pub seconds: f64,
}

/// Recovery of the row log: map every row of its committed blocks to the
/// newest block holding it (blocks later in the log, which wraps in its
/// ring, are newer). Blocks past the committed length were written after
/// the last checkpoint and are ignored.
///
/// The map comes from the row-log index where the index is true for
/// this checkpoint in this boot of the machine and every slot of the
/// committed log checks out ([`map_from_index`]), unless the hot set has
/// `need` rows to bring back, at least one per [`HOT_LOG_SHARE`] log
/// blocks; otherwise from a read of the whole log ([`read_log`]), which
/// writes the index anew as it goes where it was not true. Either way
/// the index is then kept up to date by the appends.
///
/// The rows of `hot` (by table index: the ids of the hot set a warm open
/// brings back) that a read of the log finds are put in memory from its
/// reads; with the index, the warm restart reads them after the open, in
/// log order (`Store::read_hot_set`). Returns how many the open put, with
/// what it did.
pub(super) fn restore_row_log(
    dir: &Path,
    ssd: &Ssd,
    tables: &[Arc<Table>],
    sb: &Superblock,
    hot: &mut [HotIds],
    need: u64,
    faults: Option<&Arc<Faults>>,
) -> Result<(u64, RowLogAtOpen)> {
    let t0 = std::time::Instant::now();
    let mut at_open = RowLogAtOpen {
        blocks: sb.rowlog_blocks,
        ..RowLogAtOpen::default()
    };
    let (mut index, found) = match open_index(dir, ssd, tables, sb, faults) {
        Ok((ix, found)) => (Some(ix), found),
        Err(why) => (None, Err(why)),
    };
    let mut put = 0;
    if sb.rowlog_blocks > 0 {
        let plan = match (&index, found) {
            (_, Err(why)) => Plan::ReadRemake(why),
            (None, Ok(())) => Plan::ReadRemake("no index".into()),
            (Some(_), Ok(())) if need * HOT_LOG_SHARE >= sb.rowlog_blocks => {
                Plan::ReadKeep(format!(
                    "{need} rows of the hot set to bring back, for a log of {} blocks: the \
                     log was read for them",
                    sb.rowlog_blocks
                ))
            }
            (Some(ix), Ok(())) => match map_from_index(ix, ssd, tables, sb) {
                Ok(()) => Plan::Mapped,
                Err(why) => {
                    // A map half made from it: none, before the read.
                    for t in tables {
                        t.clear_log_map();
                    }
                    Plan::ReadRemake(why)
                }
            },
        };
        match plan {
            Plan::Mapped => at_open.from_index = true,
            Plan::ReadKeep(why) => {
                at_open.index_refused = Some(why);
                // The index is true: its slots stay as they are.
                put = read_log(ssd, tables, sb, hot, None)?;
            }
            Plan::ReadRemake(why) => {
                at_open.index_refused = Some(why);
                // Made anew (if it was not already), its slots rewritten
                // by the read.
                if index.as_ref().is_some_and(|ix| ix.remake().is_err()) {
                    index = None;
                }
                put = read_log(ssd, tables, sb, hot, index.as_ref())?;
            }
        }
    }
    if let Some(ix) = index.as_mut() {
        let ring = ix.ring();
        ix.committed(sb.generation, ring);
    }
    ssd.log().set_index(index);
    at_open.seconds = t0.elapsed().as_secs_f64();
    Ok((put, at_open))
}

/// What an open does with the row log's committed blocks.
enum Plan {
    /// Mapped from the index.
    Mapped,
    /// Read, the index true and kept (why it was read).
    ReadKeep(String),
    /// Read, the index made anew by the read (why it was not used).
    ReadRemake(String),
}

/// A warm open reads the whole log, index or not, where the hot set has
/// at least one row to bring back (not kept in place by its tier) for
/// this many blocks of the log: after a crash at a snapshot checkpoint,
/// the hottest rows are the ones training wrote after its moment, which
/// the hot rows leave out and the log holds. Read whole, the log comes at
/// the disk's sequential rate, its rows in memory before the first batch;
/// from the map of the index, each is a random read beside training.
/// Measured on SIGKILLed W5 stores (`docs/benchmarks.md`, "The row log's
/// map from its index"): with 82 k log blocks and 450 k rows to bring
/// back, the first ten seconds ran 10% slower from the index; with 648 k
/// blocks and 420 k rows, the open took 1.4 s against 2.7 s, but the
/// read-back 4.2-4.6 s against 2.0-2.3 s, and t90 came later.
const HOT_LOG_SHARE: u64 = 4;

/// The row-log index for this store's log, as found or made anew, with
/// whether its slots may be trusted; an error (the reason) where the log
/// keeps none: the machine has no boot id, no table uses the log, or the
/// file cannot be opened.
fn open_index(
    dir: &Path,
    ssd: &Ssd,
    tables: &[Arc<Table>],
    sb: &Superblock,
    faults: Option<&Arc<Faults>>,
) -> std::result::Result<(LogIndex, std::result::Result<(), String>), String> {
    let boot_id = crate::durable::boot::current().ok_or("the machine has no boot id")?;
    let rows = tables.iter().map(|t| t.log_rows()).max().unwrap_or(0);
    let ring = ssd.log().ring();
    if rows == 0 || ring == 0 {
        return Err("no table uses the row log".into());
    }
    let want = IndexHeader {
        store_id: sb.store_id,
        boot_id,
        slot_bytes: slot_bytes_for(rows) as u32,
        ring,
        log_base: ssd.log().base,
    };
    let path = dir.join(crate::files::LOG_INDEX_FILE);
    LogIndex::open(&path, want, sb.generation, faults.cloned())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The rule of the committed log's epochs (FORMAT.md, "Row log"): a
/// block's epoch `e`, at position `pos` of the log after a block of epoch
/// `last`, is not below it, and (version 4 on) equals `committed_epoch`
/// from `rowlog_from` on and is below it before. A block that breaks it is
/// an append the checkpoints counted on that never reached the disk.
fn epoch_in_order(sb: &Superblock, pos: u64, e: u64, last: u64) -> bool {
    let want_last = sb.version.has_v4_fields();
    let from = sb.rowlog_from as u64;
    !(e < last
        || (want_last && (pos >= from) != (e == sb.committed_epoch))
        || (want_last && pos < from && e > sb.committed_epoch))
}

/// Map the committed log's rows to their blocks from the index `ix`, in
/// log order, checking every slot as a read of the log checks its blocks:
/// each decodes as its ring block's slot, its epoch is in the log's order
/// and may be read, it names a table that uses the log now with no more
/// rows than the table's blocks hold, and its ids are in the table's
/// range, each once. The first that does not is the reason returned, with
/// the map half made (the caller clears it, and reads the log, which
/// names any block that is itself wrong).
///
/// The work is split by shard over up to four threads (each reads and
/// checks every slot, and maps the ids of its shards): a 648 k-block log's
/// 9.7 M ids took 1.3-1.45 s on one.
fn map_from_index(
    ix: &LogIndex,
    ssd: &Ssd,
    tables: &[Arc<Table>],
    sb: &Superblock,
) -> std::result::Result<(), String> {
    let chunks = log_chunks(sb);
    let parts = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 4);
    let part = |k: usize| map_part(ix, ssd, tables, sb, &chunks, k, parts);
    if parts == 1 {
        return part(0);
    }
    std::thread::scope(|scope| {
        let others: Vec<_> = (1..parts)
            .map(|k| {
                std::thread::Builder::new()
                    .name("embtier-log-index".into())
                    .spawn_scoped(scope, move || part(k))
            })
            .collect();
        let mut r = part(0);
        for (k, h) in others.into_iter().enumerate() {
            let got = match h {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                // No thread to be had: its part here.
                Err(_) => part(k + 1),
            };
            r = r.and(got);
        }
        r
    })
}

/// Part `k` of `parts` of [`map_from_index`]: every slot read and checked,
/// the ids of the shards `k` of every `parts` mapped.
fn map_part(
    ix: &LogIndex,
    ssd: &Ssd,
    tables: &[Arc<Table>],
    sb: &Superblock,
    chunks: &[(u64, u64, u64)],
    k: usize,
    parts: usize,
) -> std::result::Result<(), String> {
    let sbytes = ix.slot_bytes();
    let mut buf = Vec::new();
    let (mut ids, mut sorted) = (Vec::new(), Vec::new());
    let mut last = 0u64;
    for &(at, first, n) in chunks {
        ix.read_slots(first, n, &mut buf)
            .map_err(|e| format!("{}: {e}", ix.path().display()))?;
        for i in 0..n {
            let b = (first + i) as u32;
            let offset = first * sbytes as u64 + i * sbytes as u64 + SLOTS_AT;
            let raw = &buf[i as usize * sbytes..(i as usize + 1) * sbytes];
            let slot = decode_slot(raw, b, offset).map_err(|e| format!("its slot {b}: {e}"))?;
            if !epoch_in_order(sb, at + i, slot.epoch, last) || !ssd.durable().epoch_ok(slot.epoch)
            {
                return Err(format!(
                    "its slot {b} has epoch {}, out of the log's order",
                    slot.epoch
                ));
            }
            last = slot.epoch;
            let t = tables
                .get(slot.table as usize)
                .filter(|t| slot.count() <= t.log_rows())
                .ok_or_else(|| {
                    format!(
                        "its slot {b} names {} rows of table {}, which the log does not hold \
                         now",
                        slot.count(),
                        slot.table
                    )
                })?;
            ids.clear();
            ids.extend(slot.ids());
            sorted.clear();
            sorted.extend_from_slice(&ids);
            sorted.sort_unstable();
            if sorted.last().is_some_and(|&id| id >= t.entry.rows)
                || sorted.windows(2).any(|w| w[0] == w[1])
            {
                return Err(format!("its slot {b} names ids out of range or twice"));
            }
            t.map_logged_block(b, &ids, k, parts);
        }
    }
    Ok(())
}

/// Read the whole committed log, oldest first: check every block (any
/// block that is not a sealed, committed row-log block of a table of this
/// store, holding ids in range, is an error naming it), map its rows, put
/// the rows of `hot` it holds in memory, and write its slot in `index`.
///
/// The log is read in large sequential reads on a second thread, one
/// ahead of the checks and the map ([`read_ahead`]): read and checked
/// one after the other, a SIGKILLed W5 store's 800 MB of log took 2.1-2.3
/// s to restore, about 1.4 s of it the reads and the rest the CPU's; read
/// ahead, 1.4 s. After a crash the hot rows are most of the rows a warm
/// open would otherwise read back one block each (the hot rows leave out
/// those training wrote after a snapshot checkpoint's moment; after a
/// SIGKILLed W5, 252 k of those 339 k rows had their newest copy in the
/// log).
fn read_log(
    ssd: &Ssd,
    tables: &[Arc<Table>],
    sb: &Superblock,
    hot: &mut [HotIds],
    index: Option<&LogIndex>,
) -> Result<u64> {
    let committed = sb.rowlog_blocks;
    let mut last_epoch = 0u64;
    let mut pinned = false;
    let mut put = 0u64;
    let sbytes = index.map_or(0, |ix| ix.slot_bytes());
    let mut slots = Vec::new();
    read_ahead(ssd, &log_chunks(sb), |&(at, first, n), buf| {
        slots.clear();
        slots.resize(n as usize * sbytes, 0);
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
            if !epoch_in_order(sb, pos, e, last_epoch) {
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
            if sbytes > 0 && lb.ids.len() * 8 + SLOT_IDS <= sbytes {
                let slot = &mut slots[i as usize * sbytes..(i as usize + 1) * sbytes];
                encode_slot(slot, b, e, lb.table, &lb.ids);
            }
            let mut none = HotIds::None;
            let cache = hot.get_mut(lb.table as usize).unwrap_or(&mut none);
            let (p, n) = t.restore_logged_block(b, &lb.ids, lb.rows, cache);
            pinned |= p;
            put += n;
        }
        if let Some(ix) = index {
            ix.write_slots(first, &slots);
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
