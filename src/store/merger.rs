//! The background merge of the row log (`[ssd] merge_in_background`):
//! once the log is more than half full (`[ssd] merge_start`), a thread
//! writes home every row whose newest copy is in the log as it stood when
//! the pass began, table
//! by table in place order, one chunk at a time, each under the store's
//! shared gate and the table's write-back lock (and never while a
//! snapshot checkpoint syncs and commits: `Ssd::merge_pause`), and then rests as long as
//! the chunk took while the log is at most half full, less and less up to
//! three quarters (`RowLog::merge_rest`), so that training keeps at least
//! half of the disk and of the lock until the log runs short. A row
//! written home from its log copy keeps a `MERGED` entry, and the log is
//! not stale for it: checkpoints during the pass commit the log as it is.
//! The checkpoint after the pass moves the log's start past the pass's
//! blocks (the ring's appends then reuse them) and merges nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::worker::Worker;
use super::*;

/// How often the thread looks at the log's fill while it has no work.
const POLL: Duration = Duration::from_millis(200);

/// Bytes of logged rows a pass holds at once when it reads them by walking
/// the log's blocks in order (`Table::read_logged_in_span`): a table's ids
/// are taken in ranges of about this many logged bytes, one walk each.
/// With `[ssd] overhead_in_budget`, a 24th of the first tier's bytes of
/// the cached tables, between 1 and 64 MiB ([`MergeLimits`]).
const SCAN_BYTES: usize = 64 << 20;

/// What bounds a pass's memory, and when the log's map alone begins one.
#[derive(Clone, Copy, Debug)]
struct MergeLimits {
    /// Bytes of logged rows a pass holds at once (see [`SCAN_BYTES`]); its
    /// spill files' buffers share them too.
    scan_bytes: usize,
    /// With `[ssd] overhead_in_budget`: a pass begins when the log's maps
    /// hold more than this many bytes (a 24th of the first tier's bytes of
    /// the cached tables), whatever the log's fill.
    map_bytes: Option<u64>,
}

impl MergeLimits {
    fn new(config: &StoreConfig, tables: &[Arc<Table>]) -> MergeLimits {
        if !config.ssd.overhead_in_budget {
            return MergeLimits {
                scan_bytes: SCAN_BYTES,
                map_bytes: None,
            };
        }
        let cached: u64 = tables.iter().map(|t| t.first_tier_bytes()).sum();
        MergeLimits {
            scan_bytes: (crate::config::overhead_part(cached) as usize).clamp(1 << 20, SCAN_BYTES),
            map_bytes: Some(crate::config::overhead_part(cached).max(1)),
        }
    }

    /// Whether the log's maps are past their share (never without one).
    fn map_full(&self, tables: &[Arc<Table>]) -> bool {
        self.map_bytes
            .is_some_and(|m| tables.iter().map(|t| t.log_map_bytes()).sum::<u64>() > m)
    }
}

/// A range's rows are read by walking the pass's blocks in order when it
/// holds at least one row per this many blocks: a sequential read of a
/// block costs about this fraction of a random one (2 GB/s against 60-90 k
/// random 4 KiB reads a second on the machine measured).
const SCAN_DENSITY: u64 = 8;

impl Store {
    /// Start the background merge, if the config asks for it and the
    /// store has a row log.
    pub(super) fn start_merger(&self) -> Result<()> {
        // Spill files a pass that a crash cut short left behind.
        crate::table::remove_spills(&self.dir);
        if !self.config.ssd.merge_in_background || self.ssd.log().capacity == 0 {
            return Ok(());
        }
        let ssd = Arc::clone(&self.ssd);
        let tables: Vec<Arc<Table>> = self.tables.iter().map(Arc::clone).collect();
        let scan = self.config.ssd.merge_scan;
        let spill = scan && self.config.ssd.merge_spill;
        let dir = self.dir.clone();
        let limits = MergeLimits::new(&self.config, &tables);
        let w = Worker::spawn(
            &self.dir,
            "embtier-merge",
            "spawn row-log merge thread",
            move |stop| {
                while !stop.load(Ordering::Relaxed) {
                    // The log past its start, or (with the overhead in the
                    // budget) its map past its share and blocks to merge.
                    let due = ssd.log().wants_merge()
                        || (limits.map_full(&tables) && ssd.log().pass_span().0.blocks() > 0);
                    if !due || merge_cycle(&ssd, &tables, &dir, scan, spill, limits, stop).is_err()
                    {
                        // Nothing to do, or a failed write (it left the
                        // rows logged; the checkpoint's merge reports it).
                        std::thread::park_timeout(POLL);
                    }
                }
            },
        )?;
        if let Some(t) = w.thread() {
            self.ssd.log().set_merger(t.clone());
        }
        *self.merger.lock() = Some(w);
        Ok(())
    }
}

/// Rest after `work` of the pass, as `RowLog::merge_rest` says, through
/// the store's [`DiskShare`](crate::io::pace::DiskShare): while the pass is
/// not behind (a full rest), it also waits for a snapshot checkpoint's
/// rests, so that the two writers together leave training half of the
/// disk; once it must catch up, it sleeps its own rest only, and the
/// checkpoint waits for it instead.
fn merge_rest(ssd: &Ssd, work: Duration) {
    let r = ssd.log().merge_rest();
    ssd.disk_share().rest(work.mul_f64(r), r >= 1.0);
}

/// One pass over the log's blocks as they are when it begins: every
/// table's rows whose newest copy is there, in place order. Ends early when
/// the store is closing or the log's start moved since it began (a
/// checkpoint merged the whole log).
fn merge_cycle(
    ssd: &Ssd,
    tables: &[Arc<Table>],
    dir: &std::path::Path,
    scan: bool,
    spill: bool,
    limits: MergeLimits,
    stop: &AtomicBool,
) -> Result<()> {
    // Under the gate: a checkpoint that woke the thread (its flush took
    // the log past half full) commits first, and the pass takes its log.
    let (span, to, resets) = {
        // Not while a checkpoint writes: the pass takes the log it commits.
        let _one = ssd.checkpointing("the background merge")?;
        let _gate = ssd.read_gate();
        ssd.log().pass_span()
    };
    if span.blocks() == 0 {
        // Nothing committed to merge yet (the log filled since the last
        // checkpoint): wait for one rather than scan the maps for nothing.
        std::thread::park_timeout(POLL);
        return Ok(());
    }
    // Whether the pass must stop (the log's start moved, or the store is
    // closing), and its rest after each step of work.
    let moved = || ssd.log().resets() != resets || stop.load(Ordering::Relaxed);
    let mut rest_after = |d: Duration| merge_rest(ssd, d);
    for (ti, t) in tables.iter().enumerate() {
        let list_rows = match scan {
            true => ssd
                .log()
                .merge_list_rows
                .min((limits.scan_bytes / t.row_bytes).max(1)),
            false => ssd.log().merge_list_rows,
        };
        let ranges = t.merge_ranges(list_rows);
        let count = ranges.len();
        // Ranges dense enough that each would walk the pass's blocks:
        // walk them once, spilling each range's rows to its own file
        // (`table/spill.rs`), rather than once per range.
        let pass_spill = if spill
            && count > 1
            && (count as u64 - 1) * list_rows as u64 * SCAN_DENSITY >= span.blocks()
        {
            // The pass's buffer bytes shared among the ranges' files.
            let to = crate::table::SpillTo {
                dir,
                buf_bytes: (limits.scan_bytes / count) & !4095,
            };
            match t.spill_logged_in_span(ssd, span, &ranges, to, &moved, &mut rest_after)? {
                Some(s) => Some(s),
                None if moved() => return Ok(()),
                None => None,
            }
        } else {
            None
        };
        for (ri, ids) in ranges.into_iter().enumerate() {
            let last = ti + 1 == tables.len() && ri + 1 == count;
            // Under the gate: not in the middle of a checkpoint's flush.
            let logged = {
                let _gate = ssd.read_gate();
                if ssd.log().resets() != resets {
                    return Ok(());
                }
                t.logged_in_place_order(ids, span)
            };
            // Rows dense in the pass's blocks are read by walking them in
            // order, at most SCAN_BYTES (and `list_rows` rows) of them at a
            // time: a range that holds more than its share of the rows is
            // taken in parts. Sparse ones are read a block each.
            let rb = t.row_bytes;
            let part_rows = if scan { list_rows } else { logged.len().max(1) };
            let parts = logged.len().div_ceil(part_rows);
            for (pi, part) in logged.chunks(part_rows).enumerate() {
                let last = last && pi + 1 == parts;
                let spilled = pass_spill
                    .as_ref()
                    .and_then(|sp| t.read_spilled(sp, ri, part, &mut rest_after));
                let scanned = if spilled.is_some() {
                    spilled
                } else if scan && part.len() as u64 * SCAN_DENSITY >= span.blocks() {
                    match t.read_logged_in_span(ssd, part, span, &moved, &mut rest_after)? {
                        Some(bytes) => Some(bytes),
                        None => return Ok(()),
                    }
                } else {
                    None
                };
                let mut done = 0;
                let mut rest = part;
                while !rest.is_empty() {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    let n = t.merge_chunk_len_reading(rest, scanned.is_none());
                    let began;
                    {
                        // Not while a snapshot checkpoint syncs and
                        // commits: that then need not hold training back.
                        let _paused = ssd.merge_pause().read();
                        let _gate = ssd.write_gate()?;
                        // The log was emptied since the pass began (a
                        // checkpoint merged it), and its blocks may hold new
                        // rows: this pass's entries are gone; the next
                        // starts over. Checked under the gate, which a
                        // checkpoint holds to move the log's start.
                        if ssd.log().resets() != resets {
                            return Ok(());
                        }
                        // The chunk's own time, not the wait for a
                        // checkpoint to let go of the gate: the rest is
                        // proportional to it.
                        began = Instant::now();
                        match &scanned {
                            Some(bytes) => t.merge_chunk_from(
                                ssd,
                                &rest[..n],
                                &bytes[done * rb..(done + n) * rb],
                            )?,
                            None => t.merge_chunk(ssd, &rest[..n])?,
                        };
                        rest = &rest[n..];
                        done += n;
                        if rest.is_empty() && last {
                            // Every row whose newest copy was in the pass's
                            // blocks is home (set under the gate: a
                            // checkpoint that sees the last chunk's rows
                            // merged sees this too).
                            ssd.log().set_swept(resets, to);
                        }
                    }
                    rest_after(began.elapsed());
                }
            }
        }
    }
    for t in tables {
        t.release_write_buffer();
    }
    // The same when the last range had nothing to merge.
    let swept = {
        let _paused = ssd.merge_pause().read();
        let _gate = ssd.write_gate()?;
        ssd.log().set_swept(resets, to)
    };
    // Wait for the checkpoint that moves the log's start before another
    // pass (or, with nothing committed to merge yet, for one that commits
    // some).
    if !swept {
        std::thread::park_timeout(POLL);
    }
    while swept && !stop.load(Ordering::Relaxed) && ssd.log().resets() == resets {
        std::thread::park_timeout(POLL);
    }
    Ok(())
}
