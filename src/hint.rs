//! Hints to the processor, shared by the engine's caches and the
//! simulator's analyses.

/// A prefetch hint for the cache line at `p`; never faults, whatever the
/// address (callers compute it with `wrapping_add`).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads no memory architecturally and
    // cannot fault, even for an invalid address; SSE is baseline on x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ask for every cache line of `s` ([`prefetch_bytes`] of its bytes).
#[inline]
pub fn prefetch_slice<T>(s: &[T]) {
    prefetch_bytes(s.as_ptr() as usize, std::mem::size_of_val(s));
}

/// Ask for every cache line of the `len` bytes at address `at` (an
/// address only: nothing is read, and none need be valid).
#[inline]
pub fn prefetch_bytes(at: usize, len: usize) {
    for line in (at & !63..at + len).step_by(64) {
        prefetch(line as *const u8);
    }
}
