//! Row payload storage: a DRAM vector, or a region of the PMem mapping.
//!
//! [`TierMemory`] is one tier's memory, which hands out a [`Slab`] per cache
//! shard or pinned chunk. A new kind of memory is a variant of each (and of
//! `config::MemoryKind`); nothing above this file names the kinds.

use std::path::Path;
use std::sync::Arc;

use memmap2::{MmapMut, MmapRaw};

use crate::config::{MemoryKind, TierConfig};
use crate::error::{Error, Result};

/// Bytes that hold rows of a cache shard or a pinned chunk.
pub(crate) enum Slab {
    /// Ordinary heap memory (a small slab).
    Dram(Vec<u8>),
    /// DRAM of a mapping of its own, backed by transparent huge pages where
    /// the kernel gives them (a slab of [`HUGE_SLAB`] or more).
    Anon(MmapMut),
    /// A region of the PMem file mapping.
    Pmem(PmemRegion),
}

/// The smallest DRAM slab given a mapping of its own with huge pages asked
/// for: two 2 MiB pages. A cache's rows are reached at random over the
/// whole slab, so with 4 KiB pages nearly every row touched costs a TLB
/// miss (a walk of the page tables), and the first touch of each 4 KiB
/// costs a fault; a 2 MiB page costs one fault for 512 of them and a TLB
/// entry covers 512 times the memory (`docs/benchmarks.md`, "Huge pages
/// for the caches"). A slab is filled whole by the cache it backs, so
/// the 2 MiB steps in which it becomes resident cost no memory a full
/// cache would not hold. The price is paid once, in the fill: each 2 MiB
/// fault zeroes (and may first compact memory for) a whole page, and a
/// cold cache filled 10-45% slower in four runs of five.
pub(crate) const HUGE_SLAB: usize = 4 << 20;

impl Slab {
    /// `len` bytes of zeroed DRAM; with `huge`, a slab of [`HUGE_SLAB`]
    /// or more gets a mapping of its own with huge pages asked for.
    pub fn dram(len: usize, huge: bool) -> Slab {
        if huge && len >= HUGE_SLAB {
            if let Ok(m) = MmapMut::map_anon(len) {
                // Where the kernel gives no huge pages (THP off, not
                // Linux), the mapping's ordinary pages serve as well.
                #[cfg(target_os = "linux")]
                let _ = m.advise(memmap2::Advice::HugePage);
                return Slab::Anon(m);
            }
        }
        Slab::Dram(vec![0; len])
    }

    pub fn len(&self) -> usize {
        match self {
            Slab::Dram(v) => v.len(),
            Slab::Anon(m) => m.len(),
            Slab::Pmem(r) => r.len,
        }
    }

    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match self {
            Slab::Dram(v) => v,
            Slab::Anon(m) => m,
            Slab::Pmem(r) => r.bytes(),
        }
    }

    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Slab::Dram(v) => v,
            Slab::Anon(m) => m,
            Slab::Pmem(r) => r.bytes_mut(),
        }
    }
}

/// A disjoint byte range of the PMem mapping, owned by one shard or chunk.
pub(crate) struct PmemRegion {
    map: Arc<MmapRaw>,
    offset: usize,
    len: usize,
}

impl PmemRegion {
    #[inline]
    fn bytes(&self) -> &[u8] {
        // SAFETY: [offset, offset+len) lies inside the mapping (checked by
        // PmemFile::region), the Arc keeps the mapping alive for as long as
        // this region exists, and regions handed out by PmemFile never
        // overlap, so no other Rust reference aliases these bytes; the region
        // is owned by one shard behind its mutex. The file is private to the
        // store (created and locked by it), so nothing else writes it.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(self.offset), self.len) }
    }

    #[inline]
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; &mut self makes this the only live reference
        // to the region.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(self.offset), self.len) }
    }
}

// SAFETY: a PmemRegion is a unique owner of its byte range (like a Box<[u8]>);
// the shared mapping is only reached through disjoint ranges.
unsafe impl Send for PmemRegion {}
// SAFETY: &PmemRegion only reads its own range.
unsafe impl Sync for PmemRegion {}

/// The PMem tier's file, mapped once and carved into regions.
pub(crate) struct PmemFile {
    map: Arc<MmapRaw>,
    next: usize,
}

impl PmemFile {
    /// Map `file` of `len` bytes, already sized with its blocks allocated
    /// (`crate::io::reserve::create_reserved`): a store into a page of a
    /// sparse file on a full file system would raise SIGBUS.
    pub fn map(file: &std::fs::File, len: usize) -> std::io::Result<PmemFile> {
        let map = memmap2::MmapOptions::new().len(len.max(1)).map_raw(file)?;
        Ok(PmemFile {
            map: Arc::new(map),
            next: 0,
        })
    }

    /// The next `len` bytes as a region, if they fit.
    pub fn region(&mut self, len: usize) -> Option<PmemRegion> {
        let end = self.next.checked_add(len)?;
        if end > self.map.len() {
            return None;
        }
        let r = PmemRegion {
            map: self.map.clone(),
            offset: self.next,
            len,
        };
        self.next = end;
        Some(r)
    }
}

/// The memory of one cache tier: where its shards' slabs come from.
pub(crate) enum TierMemory {
    /// DRAM, allocated per slab; large slabs asked to be backed by huge
    /// pages when `huge_pages` ([`Slab::dram`]).
    Dram { huge_pages: bool },
    /// A mapped file, carved into consecutive regions.
    File(PmemFile),
}

impl TierMemory {
    /// Open tier `t`'s memory; `path` is its file for a file-backed kind
    /// (`MemoryKind::file_backed`).
    pub fn open(t: &TierConfig, path: Option<&Path>) -> Result<TierMemory> {
        match (t.kind, path) {
            (MemoryKind::Dram, _) => Ok(TierMemory::Dram {
                huge_pages: t.huge_pages,
            }),
            (MemoryKind::Pmem, Some(path)) => {
                // A file-backed tier is a cache: its contents do not outlive
                // the process. Its blocks are reserved now: a store into an
                // unallocated page of the mapping on a full file system is a
                // SIGBUS.
                let f = crate::io::reserve::create_reserved(path, t.capacity.0)?;
                Ok(TierMemory::File(
                    PmemFile::map(&f, t.capacity.0 as usize)
                        .map_err(|e| Error::io(path, "mmap", e))?,
                ))
            }
            (MemoryKind::Pmem, None) => Err(Error::config("a pmem tier needs a file")),
        }
    }

    /// The kind's name, for errors.
    pub fn name(&self) -> &'static str {
        match self {
            TierMemory::Dram { .. } => MemoryKind::Dram.name(),
            TierMemory::File(_) => MemoryKind::Pmem.name(),
        }
    }

    /// A slab of `len` bytes, or None when the tier's file is full.
    pub fn slab(&mut self, len: usize) -> Option<Slab> {
        match self {
            TierMemory::Dram { huge_pages } => Some(Slab::dram(len, *huge_pages)),
            TierMemory::File(f) => f.region(len).map(Slab::Pmem),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_dram_slab_is_a_zeroed_mapping_of_its_own() {
        let len = HUGE_SLAB + 4096 * 3 + 100;
        let mut s = Slab::dram(len, true);
        assert!(matches!(s, Slab::Anon(_)), "a mapping of its own");
        assert_eq!(s.len(), len);
        assert_eq!(s.bytes().len(), len);
        assert!(s.bytes().iter().all(|&b| b == 0), "zeroed");
        // Rows written at both ends and across a 2 MiB boundary read back.
        let at = [0, (2 << 20) - 3, len - 7];
        for (k, &i) in at.iter().enumerate() {
            s.bytes_mut()[i..i + 7].copy_from_slice(&[k as u8 + 1; 7]);
        }
        for (k, &i) in at.iter().enumerate() {
            assert_eq!(&s.bytes()[i..i + 7], &[k as u8 + 1; 7]);
        }
        let set = s.bytes().iter().filter(|&&b| b != 0).count();
        assert_eq!(set, 21, "nothing else changed");
    }

    #[test]
    fn small_slabs_and_slabs_without_huge_pages_are_heap_vectors() {
        assert!(matches!(Slab::dram(HUGE_SLAB - 1, true), Slab::Dram(_)));
        assert!(matches!(Slab::dram(HUGE_SLAB * 2, false), Slab::Dram(_)));
        assert!(matches!(Slab::dram(0, true), Slab::Dram(_)));
        let t = TierConfig::dram(1 << 30, crate::policy::PolicyKind::Lru);
        assert!(t.huge_pages, "on by default");
        let mut m = TierMemory::open(&t.clone().with_huge_pages(false), None).unwrap();
        assert!(matches!(m.slab(HUGE_SLAB * 2), Some(Slab::Dram(_))));
        let mut m = TierMemory::open(&t, None).unwrap();
        assert!(matches!(m.slab(HUGE_SLAB * 2), Some(Slab::Anon(_))));
    }
}
