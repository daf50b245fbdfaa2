//! The process's allocator, for a trainer that must keep to a memory
//! budget.
//!
//! A store allocates and frees tens of MiB at each checkpoint and merge, in
//! buffers of a few hundred KiB to a few MiB, on several threads. glibc's
//! malloc serves a buffer of 128 KiB or more with its own mapping only
//! until the first such mapping is freed; it then raises that threshold to
//! the freed size (up to 32 MiB), so later buffers come from its heaps and
//! stay resident after they are freed, until the top of a heap is free or
//! `malloc_trim` runs (a store trims after each checkpoint). In W5 (the
//! peers harness, 512 MiB budget, `overhead_in_budget` on) that is 80-110
//! MiB of resident memory at each checkpoint beyond what the heap holds.
//! [`give_back_freed_memory_promptly`] fixes the thresholds instead.

/// Make glibc's malloc map every allocation of 128 KiB or more on its own
/// and unmap it when freed, and give a heap's free top back past 128 KiB,
/// so that what a checkpoint or a merge frees leaves the process's
/// resident memory at once. **Process-wide**: it applies to every
/// allocation of the process, the trainer's own included: large,
/// short-lived buffers then cost a mapping and fresh pages each (in W5,
/// 8% of the rows/s, for 76-113 MiB less peak RSS; a 2 MiB threshold set
/// through `GLIBC_TUNABLES` kept the speed and gave back two thirds as
/// much: `docs/tuning.md`).
/// Meant for a process that turns on `[ssd] overhead_in_budget` to keep
/// within a hard memory limit. Returns whether it applied (glibc on Linux);
/// elsewhere it does nothing and returns `false`. Safe to call more than
/// once, from any thread, before or after stores open.
pub fn give_back_freed_memory_promptly() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const THRESHOLD: libc::c_int = 128 << 10;
        // SAFETY: mallopt only sets two of glibc's tuning parameters,
        // under its own lock; it touches no memory this process uses.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, THRESHOLD) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Return the heap memory a checkpoint freed to the operating system
/// (called after the checkpoint let go of the gate, so that training does
/// not wait for it). Without it the process's resident memory keeps what it
/// once needed at a checkpoint's peak (see the module's doc; W5's peak
/// RSS: 872 MB with it, 912 MB without).
pub(crate) fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's arenas under their own locks
    // and releases free pages; it touches no memory this process uses and
    // is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
