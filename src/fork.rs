//! Which process a store belongs to. A child forked while a store is open
//! (a PyTorch DataLoader worker, `os.fork`, `multiprocessing` with the fork
//! start method) has a copy of the store's memory but none of its threads,
//! and shares its io_uring rings' queues with the parent: a call there
//! took the parent's completions (the parent's lookup then waited for
//! ever), joined threads that do not exist (a panic), or wrote the
//! parent's superblock. So a store knows the fork generation it was opened
//! in, every call from a later one is refused ([`crate::Error::Forked`]),
//! and its drop there does nothing but free memory.
//!
//! The generation is a counter a `pthread_atfork` child handler bumps:
//! checking it is one relaxed load, no system call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// Forks since the handler was registered, as this process counts them.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

extern "C" fn forked_child() {
    // Async-signal-safe: an atomic add, nothing else.
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The fork generation of this process, the handler registered first
/// (a store calls this when it opens, before any fork it must notice).
pub(crate) fn generation() -> u64 {
    REGISTER.call_once(|| {
        // SAFETY: registers a child handler that only bumps an atomic
        // (async-signal-safe, as a handler run after fork must be); the
        // function is 'static, and there is no prepare or parent handler.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
        // ENOMEM only: then forks go unnoticed, as before this check.
        debug_assert_eq!(rc, 0, "pthread_atfork");
    });
    GENERATION.load(Ordering::Relaxed)
}

/// Whether this process was forked since generation `opened` was read.
pub(crate) fn forked_since(opened: u64) -> bool {
    GENERATION.load(Ordering::Relaxed) != opened
}
