//! A background thread of the store (the written-group sweep, the row-log
//! merge): spawned with a stop flag, stopped and joined when dropped.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

/// A running background thread.
pub(super) struct Worker {
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Spawn `name` running `body(stop)`; `body` returns once `stop` is set.
    /// `what` names the thread in the error if it cannot be spawned.
    pub(super) fn spawn(
        dir: &Path,
        name: &str,
        what: &'static str,
        body: impl FnOnce(&AtomicBool) + Send + 'static,
    ) -> Result<Worker> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&flag))
            .map_err(|e| Error::io(dir, what, e))?;
        Ok(Worker {
            stop,
            handle: Some(handle),
        })
    }

    /// The thread, to wake it (`unpark`).
    pub(super) fn thread(&self) -> Option<&std::thread::Thread> {
        self.handle.as_ref().map(|h| h.thread())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}
