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

/// The system allocator that, while turned on, asks for every block of
/// [`HugePageAlloc::MIN_BLOCK`] or more to be backed by transparent huge
/// pages where the kernel gives them on request
/// (`/sys/kernel/mm/transparent_hugepage/enabled` set to `madvise` or
/// `always`), for a process whose memory is a few large arrays it fills:
/// the trace tools' held traces, id tables and per-row records.
///
/// A fresh 4 KiB page costs a fault (a trap, a memory-cgroup charge, the
/// zeroing); a 2 MiB page costs one for 512 of them, and a TLB entry
/// covers 512 times the memory. `emb-replay simulate` of a 5.3 M-request
/// trace took 60,000 faults and half its time in the kernel without it
/// (`docs/benchmarks.md`, "2026-11-28: huge pages for the tools").
///
/// Install it with `#[global_allocator]`, then turn it on where the
/// process's memory is a few large arrays that it fills
/// ([`HugePageAlloc::set_enabled`]; it starts off, as the system
/// allocator):
///
/// ```
/// #[global_allocator]
/// static ALLOC: embtier::memory::HugePageAlloc = embtier::memory::HugePageAlloc;
///
/// embtier::memory::HugePageAlloc::set_enabled(true);
/// ```
///
/// Blocks are the system allocator's; this only asks the kernel
/// (`madvise(MADV_HUGEPAGE)`) to back the whole 2 MiB pages inside a large
/// block with huge pages when they are first touched. Elsewhere than Linux
/// it is the system allocator. The cost: a block's memory is resident in
/// 2 MiB steps, so a large block touched sparsely holds more than its
/// touched 4 KiB pages would: `emb-locality analyze --sample` of 800
/// tables peaked at 1.90 GB with it against 1.44 GB without, no faster,
/// which is why it is a switch.
#[derive(Debug, Clone, Copy, Default)]
pub struct HugePageAlloc;

impl HugePageAlloc {
    /// The smallest block asked to be backed by huge pages (4 MiB: at
    /// least one whole 2 MiB page inside it wherever it starts).
    pub const MIN_BLOCK: usize = 4 << 20;

    /// Ask (or stop asking) for huge pages for the large blocks allocated
    /// from now on, process-wide; blocks already allocated keep what they
    /// were given. Off until turned on. Does nothing unless
    /// [`HugePageAlloc`] is the global allocator.
    pub fn set_enabled(on: bool) {
        HUGE_PAGES_ON.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether large blocks are asked for huge pages now.
    pub fn enabled() -> bool {
        HUGE_PAGES_ON.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// [`HugePageAlloc::set_enabled`]'s switch.
static HUGE_PAGES_ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The size of a transparent huge page on x86-64 and (with 4 KiB base
/// pages) aarch64.
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// Ask for huge pages for the whole 2 MiB pages of the block at `p` of
/// `size` bytes, if it is large enough.
#[inline]
fn advise_huge(p: *mut u8, size: usize) {
    #[cfg(target_os = "linux")]
    if !p.is_null() && size >= HugePageAlloc::MIN_BLOCK && HugePageAlloc::enabled() {
        let start = (p as usize).next_multiple_of(HUGE_PAGE);
        let end = (p as usize + size) & !(HUGE_PAGE - 1);
        if end > start {
            // SAFETY: `start..end` lies inside the block just allocated
            // (rounded inwards to whole huge pages), which this process
            // owns; MADV_HUGEPAGE changes only how the kernel backs those
            // pages when they are touched, never their contents, so the
            // block's data (a realloc's copy included) is unchanged. A
            // refusal (THP off, an old kernel) leaves ordinary pages, so
            // its result is ignored.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, size);
}

// SAFETY: every block comes from `System` and goes back to it with the
// layout it was allocated with: `alloc`, `alloc_zeroed` and `dealloc`
// forward the caller's arguments unchanged, and `realloc` either forwards
// them or does what `realloc` is specified to do (a new block of the new
// size and the same alignment, the old contents copied, the old block
// freed, or the old block kept on failure), so the `GlobalAlloc` contract
// is `System`'s; `advise_huge` only changes how the kernel backs the
// returned block's pages.
unsafe impl std::alloc::GlobalAlloc for HugePageAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller keeps `alloc`'s contract, which is `System`'s.
        let p = unsafe { std::alloc::System.alloc(layout) };
        advise_huge(p, layout.size());
        p
    }
    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        advise_huge(p, layout.size());
        p
    }
    #[inline]
    unsafe fn dealloc(&self, p: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: `p` came from this allocator, i.e. from `System`, with
        // `layout`, as the caller guarantees.
        unsafe { std::alloc::System.dealloc(p, layout) }
    }
    /// A block that grows to [`HugePageAlloc::MIN_BLOCK`] or more moves
    /// to a new block asked for huge pages before the copy: `System`'s
    /// realloc would copy into fresh 4 KiB pages (a fault each) before
    /// the new block could be asked (the growth of a vector was most of
    /// `emb-locality analyze`'s faults).
    #[inline]
    unsafe fn realloc(&self, p: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        if new_size < HugePageAlloc::MIN_BLOCK
            || new_size <= layout.size()
            || !HugePageAlloc::enabled()
        {
            // SAFETY: as for `dealloc`, and the caller keeps `realloc`'s
            // contract for `new_size`.
            return unsafe { std::alloc::System.realloc(p, layout, new_size) };
        }
        // SAFETY: `realloc`'s contract makes `new_size` with the block's
        // alignment a valid layout (non-zero, not overflowing isize).
        let new =
            unsafe { std::alloc::Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new` is a valid, non-zero layout (above).
        let q = unsafe { self.alloc(new) };
        if !q.is_null() {
            // SAFETY: `p` holds `layout.size()` bytes, fewer than the
            // `new_size` of the fresh block `q`, which cannot overlap it;
            // `p` is then freed once, with its own layout, as `realloc`
            // does on success (on failure it is kept, as `realloc` keeps
            // it).
            unsafe {
                std::ptr::copy_nonoverlapping(p, q, layout.size());
                self.dealloc(p, layout);
            }
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::{GlobalAlloc, Layout};

    /// The tests that turn the process-wide switch, one at a time.
    static SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Blocks hold what is written to them through growth (past
    /// `MIN_BLOCK` too, which moves a block when on) and shrinking, at
    /// every alignment asked, small and large, off and on.
    #[test]
    fn huge_page_alloc_keeps_contents_and_alignment() {
        let _one = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
        for on in [false, true] {
            HugePageAlloc::set_enabled(on);
            keeps_contents_and_alignment();
        }
        HugePageAlloc::set_enabled(false);
    }

    fn keeps_contents_and_alignment() {
        let a = HugePageAlloc;
        for (size, align) in [
            (24, 8),
            (4096, 4096),
            (3 << 20, 8),
            (8 << 20, 64),
            (6 << 20, 1 << 21),
        ] {
            let l = Layout::from_size_align(size, align).unwrap();
            // SAFETY: `l` has a non-zero size; the block is written and
            // read within its size and freed once with its layout.
            unsafe {
                let p = a.alloc(l);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                for i in (0..size).step_by(997) {
                    *p.add(i) = (i % 251) as u8;
                }
                let big = size * 2 + 12345;
                let q = a.realloc(p, l, big);
                assert!(!q.is_null());
                for i in (0..size).step_by(997) {
                    assert_eq!(*q.add(i), (i % 251) as u8, "size {size} byte {i}");
                }
                let z = a.alloc_zeroed(l);
                assert!((0..size).step_by(4093).all(|i| *z.add(i) == 0));
                a.dealloc(z, l);
                a.dealloc(q, Layout::from_size_align(big, align).unwrap());
            }
        }
    }

    /// A large block's mapping is marked for huge pages (`hg` among its
    /// `VmFlags` in /proc/self/smaps) while the switch is on, and not
    /// while it is off. 64 MiB: above glibc's largest mapping threshold
    /// (32 MiB), so each block is a fresh mapping of its own, never a
    /// part of a heap that an earlier block had asked for.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_block_asks_for_huge_pages() {
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        match thp {
            Ok(s) if !s.contains("[never]") => {}
            other => {
                eprintln!("skipped: transparent huge pages are off or absent here ({other:?})");
                return;
            }
        }
        let _one = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
        let a = HugePageAlloc;
        let l = Layout::from_size_align(64 << 20, 64).unwrap();
        // Off (the start), then on.
        assert_eq!(vm_flags_of_a_block(&a, l), None, "off, not asked");
        HugePageAlloc::set_enabled(true);
        let on = vm_flags_of_a_block(&a, l);
        HugePageAlloc::set_enabled(false);
        assert_eq!(on, Some("hg"), "on, asked");
    }

    /// The `hg` flag (huge pages asked) of the mapping of a fresh block
    /// of layout `l`, if set.
    #[cfg(target_os = "linux")]
    fn vm_flags_of_a_block(a: &HugePageAlloc, l: Layout) -> Option<&'static str> {
        // SAFETY: a non-zero size; freed once with its layout below.
        let p = unsafe { a.alloc(l) };
        assert!(!p.is_null());
        let inside = (p as usize).next_multiple_of(HUGE_PAGE) + 4096;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        // The mapping that holds `inside`, and its flags.
        let mut flags = None;
        let mut within = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        within = (lo..hi).contains(&inside);
                        continue;
                    }
                }
            }
            if within {
                if let Some(f) = line.strip_prefix("VmFlags:") {
                    flags = Some(f.split_whitespace().map(str::to_owned).collect::<Vec<_>>());
                }
            }
        }
        // SAFETY: allocated above with `l`.
        unsafe { a.dealloc(p, l) };
        let flags = flags.expect("the block's mapping in /proc/self/smaps");
        flags.iter().any(|f| f == "hg").then_some("hg")
    }
}
