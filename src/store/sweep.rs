//! The background check of the last checkpoint's written groups (see
//! `durable/written.rs`): started by open, so that open itself reads none
//! of them; finished by the next checkpoint if still running.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// The thread that sweeps the written-group list.
pub(super) struct Sweep {
    cancel: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Sweep {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

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
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&cancel);
        let handle = std::thread::Builder::new()
            .name("embtier-written".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _gate = ssd.read_gate();
                    match ssd.sweep_written() {
                        Ok(false) => {}
                        Ok(true) | Err(_) => break,
                    }
                }
            })
            .map_err(|e| Error::io(&self.dir, "spawn written-group check thread", e))?;
        *self.sweep.lock() = Some(Sweep {
            cancel,
            handle: Some(handle),
        });
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
