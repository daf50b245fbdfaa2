//! The background check of the last checkpoint's written groups (see
//! `durable/written.rs`): started by open, so that open itself reads none
//! of them; finished by the next checkpoint if still running.

use std::sync::atomic::Ordering;

use super::worker::Worker;
use super::*;

impl Store {
    /// Start the sweep when the last checkpoint's list has groups left.
    /// Each step holds the read gate, so a checkpoint (which finishes the
    /// sweep itself) waits for at most one step. A write that never
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
                    let _gate = ssd.read_gate();
                    match ssd.sweep_written() {
                        Ok(false) => {}
                        Ok(true) | Err(_) => break,
                    }
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
        let _gate = self.ssd.read_gate();
        self.ssd.finish_written()?;
        Ok(self.ssd.durable().written_unchecked())
    }
}
