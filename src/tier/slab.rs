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
    /// A region of a mapping shared by several slabs: the PMem file's, or
    /// a pinned table's DRAM ([`TierMemory::slabs`]).
    Region(Region),
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
            Slab::Region(r) => r.len,
        }
    }

    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match self {
            Slab::Dram(v) => v,
            Slab::Anon(m) => m,
            Slab::Region(r) => r.bytes(),
        }
    }

    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Slab::Dram(v) => v,
            Slab::Anon(m) => m,
            Slab::Region(r) => r.bytes_mut(),
        }
    }

    /// Where a region of a tier's file begins in it (None for memory of
    /// its own): what a kept tier records of a cache's slab.
    pub fn file_offset(&self) -> Option<u64> {
        match self {
            Slab::Region(r) => Some(r.offset as u64),
            Slab::Dram(_) | Slab::Anon(_) => None,
        }
    }

    /// Write a region's bytes through to its file (`msync`), so that a
    /// kept tier on a persistent file system holds them after a power
    /// loss; nothing for memory of its own.
    pub fn flush(&self) -> std::io::Result<()> {
        match self {
            Slab::Region(r) if r.len > 0 => r.map.flush_range(r.offset, r.len),
            _ => Ok(()),
        }
    }
}

/// A disjoint byte range of a shared mapping (the PMem file's, or a
/// pinned table's anonymous DRAM), owned by one shard or chunk.
pub(crate) struct Region {
    map: Arc<MmapRaw>,
    offset: usize,
    len: usize,
}

impl Region {
    #[inline]
    fn bytes(&self) -> &[u8] {
        // SAFETY: [offset, offset+len) lies inside the mapping (checked by
        // PmemFile::region and TierMemory::slabs), the Arc keeps the mapping
        // alive for as long as this region exists, and the regions of one
        // mapping never overlap, so no other Rust reference aliases these
        // bytes; the region is owned by one shard or chunk behind its mutex.
        // The mapping is private to the store (its PMem file, created and
        // locked by it, or an anonymous mapping), so nothing else writes it.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(self.offset), self.len) }
    }

    #[inline]
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; &mut self makes this the only live reference
        // to the region.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(self.offset), self.len) }
    }
}

// SAFETY: a Region is a unique owner of its byte range (like a Box<[u8]>);
// the shared mapping is only reached through disjoint ranges.
unsafe impl Send for Region {}
// SAFETY: &Region only reads its own range.
unsafe impl Sync for Region {}

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
    pub fn region(&mut self, len: usize) -> Option<Region> {
        let end = self.next.checked_add(len)?;
        if end > self.map.len() {
            return None;
        }
        let r = Region {
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
    /// Open tier `t`'s memory; `path` is its file, for a file-backed kind
    /// (`MemoryKind::file_backed`) or a DRAM tier given one (shared
    /// memory, such as a file on `/dev/shm`). With `kept`, the file is
    /// one a close kept (`crate::store::kept`), renamed back to `path`
    /// already: it is mapped as it is, its rows in place. Otherwise it is
    /// made anew, empty.
    pub fn open(t: &TierConfig, path: Option<&Path>, kept: bool) -> Result<TierMemory> {
        match (t.kind, path) {
            (_, Some(path)) => {
                // Its blocks are reserved now: a store into an unallocated
                // page of the mapping on a full file system is a SIGBUS. A
                // kept file was reserved when it was made, and the close
                // checked its length.
                let f = if kept {
                    std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(path)
                        .map_err(|e| Error::io(path, "open", e))?
                } else {
                    crate::io::reserve::create_reserved(path, t.capacity.0)?
                };
                Ok(TierMemory::File(
                    PmemFile::map(&f, t.capacity.0 as usize)
                        .map_err(|e| Error::io(path, "mmap", e))?,
                ))
            }
            (MemoryKind::Dram, None) => Ok(TierMemory::Dram {
                huge_pages: t.huge_pages,
            }),
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
            TierMemory::File(f) => f.region(len).map(Slab::Region),
        }
    }

    /// Slabs of `lens` bytes for one table's chunks, or None when the
    /// tier's file is full. In DRAM with huge pages, a table of
    /// [`HUGE_SLAB`] or more gets one mapping of its own, huge pages asked
    /// for, carved into the chunks' regions: a chunk alone is too small
    /// for a huge page, and a pinned table's rows are read at random over
    /// all of it, so with 4 KiB pages every row read was a TLB miss (the
    /// prefetch ahead of it stalled on the page walk; `docs/benchmarks.md`,
    /// "Pinned tables: rows asked for ahead, on huge pages").
    pub fn slabs(&mut self, lens: &[usize]) -> Option<Vec<Slab>> {
        let total = lens.iter().try_fold(0usize, |a, &l| a.checked_add(l))?;
        if let TierMemory::Dram { huge_pages: true } = self {
            if total >= HUGE_SLAB {
                if let Ok(m) = MmapMut::map_anon(total) {
                    #[cfg(target_os = "linux")]
                    let _ = m.advise(memmap2::Advice::HugePage);
                    let map = Arc::new(MmapRaw::from(m));
                    let mut offset = 0;
                    return Some(
                        lens.iter()
                            .map(|&len| {
                                let r = Region {
                                    map: map.clone(),
                                    offset,
                                    len,
                                };
                                offset += len;
                                Slab::Region(r)
                            })
                            .collect(),
                    );
                }
            }
        }
        lens.iter().map(|&len| self.slab(len)).collect()
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
        let mut m = TierMemory::open(&t.clone().with_huge_pages(false), None, false).unwrap();
        assert!(matches!(m.slab(HUGE_SLAB * 2), Some(Slab::Dram(_))));
        let mut m = TierMemory::open(&t, None, false).unwrap();
        assert!(matches!(m.slab(HUGE_SLAB * 2), Some(Slab::Anon(_))));
    }

    /// A pinned table's chunks: regions of one mapping, in order, each of
    /// its length, disjoint (a write to one shows in no other), zeroed;
    /// per-chunk slabs where the table is small or huge pages are off.
    #[test]
    fn a_tables_slabs_are_disjoint_regions_of_one_mapping() {
        let t = TierConfig::dram(1 << 30, crate::policy::PolicyKind::Lru);
        let mut m = TierMemory::open(&t, None, false).unwrap();
        let lens = [HUGE_SLAB / 3, 4096, HUGE_SLAB, 100];
        let mut slabs = m.slabs(&lens).unwrap();
        assert_eq!(slabs.len(), lens.len());
        let mut end = None;
        for (s, &len) in slabs.iter().zip(&lens) {
            assert!(matches!(s, Slab::Region(_)), "a region of the mapping");
            assert_eq!((s.len(), s.bytes().len()), (len, len));
            assert!(s.bytes().iter().all(|&b| b == 0), "zeroed");
            let at = s.bytes().as_ptr() as usize;
            if let Some(e) = end {
                assert_eq!(at, e, "consecutive");
            }
            end = Some(at + len);
        }
        for (k, s) in slabs.iter_mut().enumerate() {
            s.bytes_mut().fill(k as u8 + 1);
        }
        for (k, s) in slabs.iter().enumerate() {
            assert!(s.bytes().iter().all(|&b| b == k as u8 + 1), "slab {k}");
        }
        // Small tables, and DRAM without huge pages: a slab each, as before.
        assert!(m
            .slabs(&[4096, 100])
            .unwrap()
            .iter()
            .all(|s| matches!(s, Slab::Dram(_))));
        let mut plain = TierMemory::open(&t.with_huge_pages(false), None, false).unwrap();
        let s = plain.slabs(&lens).unwrap();
        assert!(s.iter().all(|s| matches!(s, Slab::Dram(_))));
        assert_eq!(s.iter().map(Slab::len).collect::<Vec<_>>(), lens);
        assert!(m.slabs(&[]).unwrap().is_empty());
    }
}
