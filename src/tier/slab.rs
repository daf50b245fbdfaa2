//! Row payload storage: a DRAM vector, or a region of the PMem mapping.
//!
//! [`TierMemory`] is one tier's memory, which hands out a [`Slab`] per cache
//! shard or pinned chunk. A new kind of memory is a variant of each (and of
//! `config::MemoryKind`); nothing above this file names the kinds.

use std::path::Path;
use std::sync::Arc;

use memmap2::MmapRaw;

use crate::config::{MemoryKind, TierConfig};
use crate::error::{Error, Result};

/// Bytes that hold rows of a cache shard or a pinned chunk.
pub(crate) enum Slab {
    /// Ordinary heap memory.
    Dram(Vec<u8>),
    /// A region of the PMem file mapping.
    Pmem(PmemRegion),
}

impl Slab {
    pub fn dram(len: usize) -> Slab {
        Slab::Dram(vec![0; len])
    }

    pub fn len(&self) -> usize {
        match self {
            Slab::Dram(v) => v.len(),
            Slab::Pmem(r) => r.len,
        }
    }

    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match self {
            Slab::Dram(v) => v,
            Slab::Pmem(r) => r.bytes(),
        }
    }

    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Slab::Dram(v) => v,
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
    /// Heap memory, allocated per slab.
    Dram,
    /// A mapped file, carved into consecutive regions.
    File(PmemFile),
}

impl TierMemory {
    /// Open tier `t`'s memory; `path` is its file for a file-backed kind
    /// (`MemoryKind::file_backed`).
    pub fn open(t: &TierConfig, path: Option<&Path>) -> Result<TierMemory> {
        match (t.kind, path) {
            (MemoryKind::Dram, _) => Ok(TierMemory::Dram),
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
            TierMemory::Dram => MemoryKind::Dram.name(),
            TierMemory::File(_) => MemoryKind::Pmem.name(),
        }
    }

    /// A slab of `len` bytes, or None when the tier's file is full.
    pub fn slab(&mut self, len: usize) -> Option<Slab> {
        match self {
            TierMemory::Dram => Some(Slab::dram(len)),
            TierMemory::File(f) => f.region(len).map(Slab::Pmem),
        }
    }
}
