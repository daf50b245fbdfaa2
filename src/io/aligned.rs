//! A heap buffer whose address and length are multiples of 4096: the O_DIRECT
//! invariant, owned by a type so that no caller has to remember it.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

const ALIGN: usize = 4096;

/// A zero-initialised, 4096-aligned byte buffer whose length is a multiple of 4096.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like a Vec<u8>); moving
// it to another thread moves that ownership, and &AlignedBuf only gives &[u8].
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads of plain bytes.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of at least `len` bytes, rounded up to a multiple of 4096.
    pub fn new(len: usize) -> AlignedBuf {
        let len = len.next_multiple_of(ALIGN).max(ALIGN);
        let layout = Layout::from_size_align(len, ALIGN).expect("valid layout");
        // SAFETY: the layout has a non-zero size (at least 4096).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        AlignedBuf { ptr, len }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: the buffer holds at least one block.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Size the buffer to `n` bytes and poison the trailer of every 4 KiB
    /// block in them (its magic and CRC) with a pattern that is neither a
    /// hole's (zeros) nor a sealed block's, so that a block an engine failed
    /// to fill reads as corruption, never as an old block left in the buffer
    /// or as the initial values. (Every block read is checked by its
    /// trailer before use; filling whole buffers cost a 16 MiB memset per
    /// batch of misses.)
    pub(crate) fn poison(&mut self, n: usize) {
        self.ensure(n);
        for blk in self.as_mut_slice()[..n].chunks_mut(embtier_format::BLOCK_SIZE) {
            let at = blk.len().saturating_sub(8);
            blk[at..].fill(0xA5);
        }
    }

    /// Grow to at least `len` bytes (contents are not preserved).
    pub fn ensure(&mut self, len: usize) {
        if len > self.len {
            *self = AlignedBuf::new(len.max(self.len * 2));
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr points to `len` initialised (zeroed at allocation) bytes
        // owned by self; the borrow of self bounds the slice's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Raw pointer, for I/O submission.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Raw pointer, for I/O submission.
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len, ALIGN).expect("valid layout");
        // SAFETY: ptr was allocated by `alloc_zeroed` with exactly this layout
        // and is freed once, here.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_rounded() {
        let mut b = AlignedBuf::new(100);
        assert_eq!(b.len(), 4096);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[4095] = 7;
        b.ensure(3 * 4096);
        assert!(b.len() >= 3 * 4096);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
    }
}
