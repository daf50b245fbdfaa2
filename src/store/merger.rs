//! The background merge of the row log (`[ssd] merge_in_background`):
//! once the log is more than half full, a thread writes its rows home,
//! table by table in place order, one chunk at a time, each under the
//! store's shared gate and the table's write-back lock, and then rests as
//! long as the chunk took, so that training keeps at least half of the
//! disk and of the lock. The checkpoint that empties the log (it must
//! merge once a logged row was written home) then has only the rows logged
//! since to merge, instead of the whole log with training stopped.

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
/// when the store is closing or the log was emptied meanwhile (a
/// checkpoint merged the rest).
fn merge_cycle(ssd: &Ssd, tables: &[Arc<Table>], stop: &AtomicBool) -> Result<()> {
    for t in tables {
        // Under the gate: not in the middle of a checkpoint's flush.
        let logged = {
            let _gate = ssd.read_gate();
            t.logged_in_place_order()
        };
        let mut rest = &logged[..];
        while !rest.is_empty() {
            if stop.load(Ordering::Relaxed) || ssd.log().head() == 0 {
                return Ok(());
            }
            let n = t.merge_chunk_len(rest);
            let began = Instant::now();
            {
                let _gate = ssd.write_gate()?;
                t.merge_chunk(ssd, &rest[..n])?;
            }
            rest = &rest[n..];
            std::thread::sleep(began.elapsed());
        }
    }
    // Wait for the checkpoint that empties the log before another pass.
    while !stop.load(Ordering::Relaxed) && ssd.log().head() > 0 && ssd.log().wants_merge() {
        std::thread::park_timeout(POLL);
    }
    Ok(())
}
