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
//! checking it is one relaxed load, no system call. The same handler
//! closes, in the child, the descriptors of the stores' lock files
//! ([`lock_fd`]): their open-file-description locks would otherwise stay
//! held for as long as the child lives, after the opener closed the store.

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Once;

/// Forks since the handler was registered, as this process counts them.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

/// Lock-file descriptors a forked child closes; -1 is a free slot.
const LOCK_SLOTS: usize = 1024;
static LOCK_FDS: [AtomicI32; LOCK_SLOTS] = [const { AtomicI32::new(-1) }; LOCK_SLOTS];

extern "C" fn forked_child() {
    // Async-signal-safe: atomics and close(2), nothing else.
    GENERATION.fetch_add(1, Ordering::Relaxed);
    for slot in &LOCK_FDS {
        let fd = slot.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: `fd` is a lock file's descriptor the child inherited;
            // the child's copy of the store never closes it again (its
            // drop leaks the `File`, see `LockFile`'s drop).
            unsafe { libc::close(fd) };
        }
    }
}

/// Register `fd`, a lock file's descriptor, to be closed in every child
/// forked while it is held: the slot to [`unlock_fd`] it with, or None
/// when every slot is taken (a child then keeps that lock while it lives).
pub(crate) fn lock_fd(fd: i32) -> Option<usize> {
    generation(); // the handler registered
    LOCK_FDS.iter().position(|s| {
        s.compare_exchange(-1, fd, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    })
}

/// Free `slot` of [`lock_fd`], before its descriptor is closed.
pub(crate) fn unlock_fd(slot: usize) {
    LOCK_FDS[slot].store(-1, Ordering::Relaxed);
}

/// The fork generation of this process, the handler registered first
/// (a store calls this when it opens, before any fork it must notice).
pub(crate) fn generation() -> u64 {
    REGISTER.call_once(|| {
        // SAFETY: registers a child handler that only uses atomics and
        // close(2) (async-signal-safe, as a handler run after fork must
        // be); the
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
