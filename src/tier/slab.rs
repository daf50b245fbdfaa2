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
/// cache would not hold.
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

    /// The address and length of a slab that is a mapping of its own
    /// (page-aligned), to populate it ([`populate`]); None for the others.
    pub fn own_mapping(&self) -> Option<(usize, usize)> {
        match self {
            Slab::Anon(m) => Some((m.as_ptr() as usize, m.len())),
            _ => None,
        }
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

/// Fault in, writable, the pages of `ranges` (slabs' own mappings,
/// [`Slab::own_mapping`]) without touching their bytes, 2 MiB at a time
/// until `stop` is set: the kernel's zeroing of a fresh cache's memory,
/// done on a thread of its own while the open reads the disk, instead of
/// inside the lookups and the warm restart's installs that would first
/// write each page (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14 or later;
/// elsewhere, or where the kernel refuses it, nothing is done). Returns
/// the bytes populated.
pub(crate) fn populate(ranges: &[(usize, usize)], stop: &std::sync::atomic::AtomicBool) -> u64 {
    #[cfg(target_os = "linux")]
    {
        const STEP: usize = 2 << 20;
        let mut done = 0u64;
        for &(addr, len) in ranges {
            let mut at = 0;
            while at < len {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return done;
                }
                let n = STEP.min(len - at);
                // SAFETY: madvise is given an address range and reads or
                // writes no byte of it: MADV_POPULATE_WRITE only faults the
                // pages in as a write would, leaving their contents as they
                // are, so a shard writing rows in the same pages meanwhile
                // sees its bytes unchanged, and no Rust reference is made.
                // A range no longer mapped (the store dropped meanwhile:
                // it joins this thread first, so only on a bug) fails with
                // ENOMEM, which ends the work.
                let r = unsafe {
                    libc::madvise(
                        (addr + at) as *mut libc::c_void,
                        n,
                        libc::MADV_POPULATE_WRITE,
                    )
                };
                if r != 0 {
                    return done;
                }
                done += n as u64;
                at += n;
            }
        }
        done
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (ranges, stop);
        0
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
    /// DRAM, allocated per slab; huge pages asked for.
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

    /// Resident 4 KiB pages of `len` bytes at `addr`, by `mincore`.
    #[cfg(target_os = "linux")]
    fn resident_pages(addr: usize, len: usize) -> usize {
        let pages = len.div_ceil(4096);
        let mut v = vec![0u8; pages];
        // SAFETY: `addr..addr+len` is a live mapping of the caller's (page
        // aligned), and `v` has a byte for each of its pages.
        let r = unsafe { libc::mincore(addr as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
        v.iter().filter(|&&b| b & 1 == 1).count()
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn populate_faults_a_slab_in_and_keeps_its_bytes() {
        let len = 3 * HUGE_SLAB;
        let mut s = Slab::dram(len, false);
        let mut s_own = Slab::dram(len, true);
        assert_eq!(s.own_mapping(), None, "a heap vector is not populated");
        let (addr, n) = s_own.own_mapping().expect("a mapping of its own");
        assert_eq!(n, len);
        s.bytes_mut()[5] = 1;
        s_own.bytes_mut()[len - 1] = 7;
        s_own.bytes_mut()[HUGE_SLAB + 3] = 9;
        let before = resident_pages(addr, len);
        assert!(before < len / 4096 / 2, "{before} pages resident before");
        let stop = std::sync::atomic::AtomicBool::new(false);
        let done = populate(&[(addr, len)], &stop);
        if done == 0 {
            // MADV_POPULATE_WRITE is Linux 5.14 or later.
            eprintln!("skipped: the kernel refused MADV_POPULATE_WRITE");
            return;
        }
        assert_eq!(done, len as u64);
        assert_eq!(
            resident_pages(addr, len),
            len.div_ceil(4096),
            "every page in"
        );
        let b = s_own.bytes();
        assert_eq!((b[len - 1], b[HUGE_SLAB + 3]), (7, 9), "bytes kept");
        assert_eq!(b.iter().filter(|&&x| x != 0).count(), 2, "the rest zero");
        // A stop already set does nothing.
        let stop = std::sync::atomic::AtomicBool::new(true);
        let s2 = Slab::dram(len, true);
        let (a2, _) = s2.own_mapping().unwrap();
        assert_eq!(populate(&[(a2, len)], &stop), 0);
        assert!(resident_pages(a2, len) < len / 4096 / 2);
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
