//! The background check of the last checkpoint's written groups (see
//! `durable/written.rs`): started by open, so that open itself reads none
//! of them; finished by the next checkpoint if still running.

use std::sync::atomic::Ordering;

use super::worker::Worker;
use super::*;

/// The sweep rests this many times as long as each step took.
const SWEEP_REST: u32 = 3;

impl Store {
    /// Start the sweep when the last checkpoint's list has groups left.
    /// Each step holds the read gate, so a checkpoint (which finishes the
    /// sweep itself) waits for at most one step; between steps it rests
    /// three times as long as the step took. A write that never
    /// reached the disk poisons the store; a read of its group fails.
    pub(super) fn start_sweep(&self) -> Result<()> {
        if self.ssd.durable().written_unchecked() == 0 {
            return Ok(());
        }
        let ssd = Arc::clone(&self.ssd);
        let w = Worker::spawn(
            &self.dir,
            "embtier-written",
            "spawn written-group check thread",
            move |stop| {
                while !stop.load(Ordering::Relaxed) {
                    let began = std::time::Instant::now();
                    let done = {
                        let _gate = ssd.read_gate();
                        ssd.sweep_written()
                    };
                    match done {
                        Ok(false) => {}
                        Ok(true) | Err(_) => break,
                    }
                    // Rest: the sweep takes at most a quarter of the disk's
                    // time, leaving the rest to the reads of a store that
                    // has just opened (after a merge or a load, the list is
                    // the whole data file). A drop wakes it.
                    std::thread::park_timeout(began.elapsed() * SWEEP_REST);
                }
            },
        )?;
        *self.sweep.lock() = Some(w);
        Ok(())
    }

    /// Finish checking that every group the last checkpoint wrote in
    /// place reached the disk (open defers it: a read of such a group
    /// checks it first, and a thread checks the rest in sequential reads).
    /// Returns the groups left unchecked, 0 unless some block failed its
    /// own checks (a read of it reports that). An error is a write the
    /// checkpoint counted on that never reached the disk (a dropped
    /// fsync): the store is then poisoned, and a read of that group fails.
    pub fn check_written(&self) -> Result<u64> {
        self.check_process()?;
        let _gate = self.ssd.read_gate();
        self.ssd.finish_written()?;
        Ok(self.ssd.durable().written_unchecked())
    }
}
