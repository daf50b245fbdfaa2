//! Warm restarts: the hot set a checkpoint writes, and the background
//! read-back at open.
//!
//! At every checkpoint the store writes `hot.emb`: for each cached table,
//! the ids resident in each cache tier (`embtier_format::hotset`). An open
//! reads it and, on a background thread, reads those rows back through the
//! ordinary miss path: sorted by place, so the reads sweep the data file in
//! order, lowest tier first so that the first tier ends holding what it
//! held. Rows always come from the data file after recovery, so a stale
//! hot set (one a crash left from an earlier checkpoint) costs only time.

use std::sync::atomic::{AtomicBool, Ordering};

use embtier_format::hotset::{HotSet, HotTable};

use super::*;
use crate::files::HOT_FILE;

/// Ids read back per batch: one call's worth of reads in flight, and a
/// bound on how long a checkpoint waits for the warm-up's gate.
const WARM_BATCH: usize = 1 << 16;

/// The background read-back of a hot set.
pub(super) struct Warm {
    cancel: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Result<u64>>>,
    /// The outcome once joined.
    done: Option<std::result::Result<u64, String>>,
}

impl Warm {
    /// Wait for the read-back; the rows it read.
    fn join(&mut self) -> Result<u64> {
        if let Some(h) = self.handle.take() {
            self.done = Some(match h.join() {
                Ok(r) => r.map_err(|e| e.to_string()),
                Err(_) => Err("the warm-up thread panicked".into()),
            });
        }
        match &self.done {
            Some(Ok(n)) => Ok(*n),
            Some(Err(reason)) => Err(Error::Warm {
                reason: reason.clone(),
            }),
            None => Ok(0),
        }
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        let _ = self.join();
    }
}

impl Store {
    /// Write the hot set of this checkpoint (a hint: a failure is reported
    /// as 0 rows, and the previous file, if any, is removed so that it
    /// cannot outlive many checkpoints). Returns the ids written.
    pub(super) fn write_hot_set(&self, generation: u64) -> u64 {
        let tiers = self.config.tiers.len();
        let mut rows = 0;
        let tables = self
            .tables
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.is_pinned())
            .map(|(i, t)| {
                let ids = t.resident_ids(tiers);
                rows += ids.iter().map(|v| v.len() as u64).sum::<u64>();
                HotTable {
                    table: i as u32,
                    tiers: ids,
                }
            })
            .collect();
        let bytes = HotSet { generation, tables }.encode();
        let path = self.dir.join(HOT_FILE);
        let tmp = self.dir.join(format!("{HOT_FILE}.tmp"));
        // No fsync: a hot set lost or torn by a crash is refused by its
        // CRC, and the store starts cold.
        match fs::write(&tmp, &bytes).and_then(|()| fs::rename(&tmp, &path)) {
            Ok(()) => rows,
            Err(_) => {
                let _ = fs::remove_file(&tmp);
                let _ = fs::remove_file(&path);
                0
            }
        }
    }

    /// Read the hot set, if there is a valid one, and start reading its
    /// rows back on a background thread.
    pub(super) fn start_warm(&self) -> Result<()> {
        let path = self.dir.join(HOT_FILE);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(&path, "read", e)),
        };
        // A hot set that fails its checks is a hint lost, not an error.
        let Ok(hot) = HotSet::decode(&bytes) else {
            return Ok(());
        };
        let tiers = self.config.tiers.len();
        let mut plan: Vec<(Arc<Table>, Vec<u64>)> = Vec::new();
        for ht in hot.tables {
            let Some(t) = self.tables.get(ht.table as usize) else {
                continue;
            };
            if t.is_pinned() {
                continue;
            }
            // Lowest tier first, so the first tier ends with its own rows;
            // tiers the config no longer has are dropped.
            let mut ids: Vec<u64> = Vec::new();
            for tier in ht.tiers.iter().take(tiers).rev() {
                ids.extend(tier.iter().copied().filter(|&id| id < t.entry.rows));
            }
            if !ids.is_empty() {
                t.close_fill();
                plan.push((Arc::clone(t), ids));
            }
        }
        if plan.is_empty() {
            return Ok(());
        }
        let ssd = Arc::clone(&self.ssd);
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&cancel);
        let handle = std::thread::Builder::new()
            .name("embtier-warm".into())
            .spawn(move || {
                let mut read = 0;
                for (t, ids) in plan {
                    for batch in ids.chunks(WARM_BATCH) {
                        if stop.load(Ordering::Relaxed) {
                            return Ok(read);
                        }
                        let _gate = ssd.read_gate();
                        // In place order within the batch: the reads
                        // sweep the file (the miss path sorts by place).
                        read += t.warm(&ssd, batch)?;
                    }
                }
                Ok(read)
            })
            .map_err(|e| Error::io(&self.dir, "spawn warm-up thread", e))?;
        *self.warm.lock() = Some(Warm {
            cancel,
            handle: Some(handle),
            done: None,
        });
        Ok(())
    }

    /// Wait until the warm restart's read-back (started by [`Store::open`]
    /// from the hot set of the last checkpoint) has finished; returns the
    /// rows it read (0 when there was nothing to read back). The store
    /// serves lookups while it runs: waiting is only for a caller that
    /// wants a warm cache before it starts, or wants to measure it. An
    /// error is the read-back's (a failed or corrupt read): the rows
    /// concerned were not brought in, and a lookup of them reports it.
    pub fn wait_warm(&self) -> Result<u64> {
        match self.warm.lock().as_mut() {
            Some(w) => w.join(),
            None => Ok(0),
        }
    }
}
