//! The background merge of the row log (`[ssd] merge_in_background`):
//! once the log is more than half full, a thread writes its rows home,
//! table by table in place order, one chunk at a time, each under the
//! store's shared gate and the table's write-back lock, and then rests as
//! long as the chunk took while the log is at most half full, less and
//! less up to three quarters (`RowLog::merge_rest`), so that training
//! keeps at least half of the disk and of the lock until the log runs
//! short. A row written home from its log copy keeps a `MERGED` entry,
//! and the log is not stale for it: checkpoints during the pass commit the
//! log as it is, and merge nothing. Once the pass is through, the next
//! checkpoint merges the rows logged since and empties the log.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::worker::Worker;
use super::*;

/// How often the thread looks at the log's fill while it has no work.
const POLL: Duration = Duration::from_millis(200);

impl Store {
    /// Start the background merge, if the config asks for it and the
    /// store has a row log.
    pub(super) fn start_merger(&self) -> Result<()> {
        if !self.config.ssd.merge_in_background || self.ssd.log().capacity == 0 {
            return Ok(());
        }
        let ssd = Arc::clone(&self.ssd);
        let tables: Vec<Arc<Table>> = self.tables.iter().map(Arc::clone).collect();
        let w = Worker::spawn(
            &self.dir,
            "embtier-merge",
            "spawn row-log merge thread",
            move |stop| {
                while !stop.load(Ordering::Relaxed) {
                    if !ssd.log().wants_merge() || merge_cycle(&ssd, &tables, stop).is_err() {
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

/// One pass over every table's logged rows, in place order. Ends early
/// when the store is closing or the log was emptied since it began (a
/// checkpoint merged the rest), whatever was appended after.
fn merge_cycle(ssd: &Ssd, tables: &[Arc<Table>], stop: &AtomicBool) -> Result<()> {
    let resets = ssd.log().resets();
    for (ti, t) in tables.iter().enumerate() {
        let ranges = t.merge_ranges(ssd.log().merge_list_rows);
        for (ri, ids) in ranges.iter().enumerate() {
            let last = ti + 1 == tables.len() && ri + 1 == ranges.len();
            // Under the gate: not in the middle of a checkpoint's flush.
            let logged = {
                let _gate = ssd.read_gate();
                t.logged_in_place_order(ids.clone())
            };
            let mut rest = &logged[..];
            while !rest.is_empty() {
                // The log was emptied since the pass began (a checkpoint
                // merged it): this pass's entries are gone; the next starts
                // over on the new log.
                if stop.load(Ordering::Relaxed) || ssd.log().resets() != resets {
                    return Ok(());
                }
                let n = t.merge_chunk_len(rest);
                let began;
                {
                    let _gate = ssd.write_gate()?;
                    // The chunk's own time, not the wait for a checkpoint to
                    // let go of the gate: the rest is proportional to it.
                    began = Instant::now();
                    t.merge_chunk(ssd, &rest[..n])?;
                    rest = &rest[n..];
                    if rest.is_empty() && last {
                        // Every row logged before the pass began is home (set
                        // under the gate: a checkpoint that sees the last
                        // chunk's rows merged sees this too).
                        ssd.log().set_swept(resets);
                    }
                }
                std::thread::sleep(began.elapsed().mul_f64(ssd.log().merge_rest()));
            }
        }
    }
    // A pass over tables with nothing (left) to merge.
    {
        let _gate = ssd.read_gate();
        ssd.log().set_swept(resets);
    }
    // Wait for the checkpoint that empties the log before another pass.
    while !stop.load(Ordering::Relaxed)
        && ssd.log().resets() == resets
        && ssd.log().head() > 0
        && ssd.log().wants_merge()
    {
        std::thread::park_timeout(POLL);
    }
    Ok(())
}
