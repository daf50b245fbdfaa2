//! Slot stamps (`<tier file>.stamps`; FORMAT.md, "Slot stamps"): for each
//! slot of a file-backed tier's caches, the row it holds and the first
//! checkpoint generation whose commit holds its bytes, kept in a shared
//! mapping as the caches change, so that an open after a crash in the
//! same boot takes the rows the recovered checkpoint holds where they lie
//! (`crate::store::kept`).
//!
//! The rules that make a stamp true (each cache's shard lock orders the
//! stores to its slots; a crash stops a thread between two stores but
//! loses none before):
//! - [`Gen`] is the generation of the first commit that can hold a write
//!   made now. It moves only while a checkpoint holds training back, and
//!   every write to a slot is made with training admitted, so a write
//!   never straddles a checkpoint's moment.
//! - A row put in a slot: [`Stamps::begin`] stores generation 0, then the
//!   id, before the bytes; [`Stamps::finish`] the generation after them:
//!   the current one, or the one its bytes carried from the slot they
//!   moved from (a row moving between tiers keeps its bytes).
//!   [`Stamps::change`] (bytes about to change in place) stores the
//!   current generation before them; [`Stamps::clear`] (a row leaving)
//!   stores 0. A torn stamp holds 0 or the current generation, which no
//!   open of an earlier checkpoint takes, or a carried one over bytes
//!   already written.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use embtier_format::stamps::{StampHeader, NO_ROW, STAMPS_HEADER, STAMPS_REGIONS, STAMP_BYTES};
use memmap2::MmapRaw;

use crate::error::{Error, Result};

/// The generation a write made now is first committed in, shared by a
/// store's stamps and moved by its checkpoints.
pub(crate) type Gen = Arc<AtomicU64>;

/// The header of the stamps file at `path`, if there is one and it is
/// valid; any doubt (no file, a short or damaged header) is None.
pub(crate) fn read_header(path: &Path) -> Option<StampHeader> {
    let mut f = File::open(path).ok()?;
    let mut b = vec![0u8; STAMPS_HEADER];
    f.read_exact(&mut b).ok()?;
    let count = u32::from_le_bytes(b[STAMPS_REGIONS..STAMPS_REGIONS + 4].try_into().ok()?);
    let len = StampHeader {
        regions: vec![Default::default(); count as usize],
        ..Default::default()
    }
    .len();
    // A count past the file is a damaged header, not an allocation.
    if len as u64 > f.metadata().ok()?.len() {
        return None;
    }
    b.resize(len, 0);
    f.read_exact(&mut b[STAMPS_HEADER..]).ok()?;
    StampHeader::decode(&b).ok()
}

/// A tier's stamps file, mapped, handing out each region's stamps in the
/// header's order.
pub(crate) struct StampFile {
    map: Arc<MmapRaw>,
    /// Byte offset of the next region's stamps.
    next: usize,
    /// Byte offset of the kept-through word.
    through: usize,
}

/// The kept-through word of a tier's stamps (FORMAT.md, "Slot stamps"):
/// the commit id of the last commit the stamps were kept up to date
/// through.
pub(crate) struct KeptThrough {
    map: Arc<MmapRaw>,
    at: usize,
}

impl KeptThrough {
    fn word(&self) -> &AtomicU64 {
        // SAFETY: `at + 8 <= map.len()` (`StampFile::map` mapped the whole
        // file, whose header puts the word 8 bytes before the stamps), and
        // `at` is a multiple of 8 on a page-aligned mapping; the Arc keeps
        // the mapping alive. Only atomics reach these bytes in this
        // process.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(self.at) as *mut u64) }
    }

    /// The commit id recorded.
    pub fn get(&self) -> u64 {
        self.word().load(Ordering::Acquire)
    }

    /// Record that the stamps are true through the commit of id `id`.
    pub fn set(&self, id: u64) {
        self.word().store(id, Ordering::Release);
    }
}

impl StampFile {
    /// Make the file at `path` anew for `h`: the header, then every stamp
    /// 0. Whatever was there is removed first.
    pub fn create(path: &Path, h: &StampHeader) -> Result<StampFile> {
        let bytes = h.encode().ok_or_else(|| {
            Error::io(
                path,
                "write",
                std::io::Error::other("a boot id longer than the header's 40 bytes"),
            )
        })?;
        match fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(path, "remove", e))
            }
            _ => {}
        }
        let mut f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io(path, "create", e))?;
        f.write_all(&bytes)
            .map_err(|e| Error::io(path, "write", e))?;
        // The stamps, zeros, their blocks reserved like the tier's own (a
        // store into an unallocated page on a full file system is a
        // SIGBUS).
        crate::io::reserve::reserve_blocks(&f, h.file_len_needed())
            .map_err(|e| Error::io(path, "fallocate", e))?;
        Self::map(&f, path, h)
    }

    /// Map the file at `path`, whose header is `h` (read and checked by
    /// the caller), as it is.
    pub fn open(path: &Path, h: &StampHeader) -> Result<StampFile> {
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::io(path, "open", e))?;
        let len = f.metadata().map_err(|e| Error::io(path, "stat", e))?.len();
        if len != h.file_len_needed() {
            return Err(Error::io(
                path,
                "open",
                std::io::Error::other(format!(
                    "{len} bytes, where its header needs {}",
                    h.file_len_needed()
                )),
            ));
        }
        Self::map(&f, path, h)
    }

    fn map(f: &File, path: &Path, h: &StampHeader) -> Result<StampFile> {
        let map = memmap2::MmapOptions::new()
            .len(h.file_len_needed() as usize)
            .map_raw(f)
            .map_err(|e| Error::io(path, "mmap", e))?;
        Ok(StampFile {
            map: Arc::new(map),
            next: h.stamps_at() as usize,
            through: h.kept_through_at() as usize,
        })
    }

    /// The file's kept-through word.
    pub fn kept_through(&self) -> KeptThrough {
        KeptThrough {
            map: self.map.clone(),
            at: self.through,
        }
    }

    /// The stamps of the next region, of `slots` slots, moved by `gen`.
    pub fn carve(&mut self, slots: usize, gen: &Gen) -> Stamps {
        let end = self.next + slots * STAMP_BYTES as usize;
        assert!(end <= self.map.len(), "stamps past the file");
        let s = Stamps {
            map: self.map.clone(),
            at: self.next,
            len: slots,
            gen: gen.clone(),
        };
        self.next = end;
        s
    }
}

/// One cache's stamps: a stamp per slot, in a region of a [`StampFile`].
pub(crate) struct Stamps {
    map: Arc<MmapRaw>,
    at: usize,
    len: usize,
    gen: Gen,
}

impl Stamps {
    /// The generation and id words of `slot`'s stamp.
    #[inline]
    fn cell(&self, slot: usize) -> (&AtomicU64, &AtomicU64) {
        assert!(slot < self.len, "stamp {slot} of {}", self.len);
        let off = self.at + slot * STAMP_BYTES as usize;
        // SAFETY: `off + 16 <= map.len()` (`StampFile::carve` checked the
        // region, and `slot < len`); the mapping starts on a page and
        // `stamps_at` and the stamp size are multiples of 8, so both words
        // are aligned for an AtomicU64. The Arc keeps the mapping alive as
        // long as `self`. The regions of one file never overlap, and only
        // the cache owning these stamps (behind its shard's lock) touches
        // them in this process; another process that maps the file (the
        // store's lock keeps a second store out) could only race with
        // atomics, never with a Rust reference to plain memory.
        unsafe {
            let p = self.map.as_mut_ptr().add(off) as *mut u64;
            (AtomicU64::from_ptr(p), AtomicU64::from_ptr(p.add(1)))
        }
    }

    /// Slots the stamps cover.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `slot` is about to hold row `id`: no generation (the slot holds
    /// nothing an open may take), then the id, before the bytes are
    /// written; [`Stamps::finish`] once they are.
    #[inline]
    pub fn begin(&self, slot: usize, id: u64) {
        let (g, i) = self.cell(slot);
        g.store(NO_ROW, Ordering::Relaxed);
        i.store(id, Ordering::Release);
    }

    /// `slot`'s bytes are written ([`Stamps::begin`]): stamped with
    /// `generation`, the one the bytes came with from another slot (0:
    /// none, or bytes new to the tiers: the current generation), after
    /// them.
    #[inline]
    pub fn finish(&self, slot: usize, generation: u64) {
        let (g, _) = self.cell(slot);
        let now = self.gen.load(Ordering::Relaxed);
        let stamp = match generation {
            NO_ROW => now,
            carried => carried.min(now),
        };
        fence(Ordering::Release);
        g.store(stamp, Ordering::Relaxed);
    }

    /// The current generation (see [`Gen`]).
    #[inline]
    pub fn now(&self) -> u64 {
        self.gen.load(Ordering::Relaxed)
    }

    /// `slot`'s bytes are about to change in place: stamped with the
    /// current generation before they do.
    #[inline]
    pub fn change(&self, slot: usize) {
        let (g, _) = self.cell(slot);
        g.store(self.now(), Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// `slot` holds no row an open may take.
    #[inline]
    pub fn clear(&self, slot: usize) {
        let (g, _) = self.cell(slot);
        // Read first: most slots cleared hold nothing already.
        if g.load(Ordering::Relaxed) != NO_ROW {
            g.store(NO_ROW, Ordering::Relaxed);
        }
    }

    /// `slot` holds row `id` with the bytes checkpoint `generation`
    /// commits (an open taking it back): the id, then the generation.
    pub fn keep(&self, slot: usize, id: u64, generation: u64) {
        let (g, i) = self.cell(slot);
        if (g.load(Ordering::Relaxed), i.load(Ordering::Relaxed)) == (generation, id) {
            return;
        }
        g.store(NO_ROW, Ordering::Relaxed);
        i.store(id, Ordering::Release);
        g.store(generation, Ordering::Release);
    }

    /// `slot`'s stamp: (generation, id).
    pub fn read(&self, slot: usize) -> (u64, u64) {
        let (g, i) = self.cell(slot);
        (g.load(Ordering::Relaxed), i.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use embtier_format::stamps::StampRegion;

    fn header() -> StampHeader {
        StampHeader {
            store_id: 7,
            boot_id: b"boot".to_vec(),
            tier: 0,
            file_len: 1 << 20,
            regions: vec![
                StampRegion {
                    table: 0,
                    shard: 0,
                    offset: 0,
                    capacity: 5,
                    row_bytes: 64,
                },
                StampRegion {
                    table: 0,
                    shard: 1,
                    offset: 320,
                    capacity: 3,
                    row_bytes: 64,
                },
            ],
        }
    }

    /// Stamps written through one mapping are read back through another
    /// (the next open's), region by region; a made-anew file is all
    /// zeros; a damaged or short header reads as none.
    #[test]
    fn stamps_outlive_their_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.stamps");
        let h = header();
        let gen: Gen = Arc::new(AtomicU64::new(4));
        {
            let mut f = StampFile::create(&path, &h).unwrap();
            let (a, b) = (f.carve(5, &gen), f.carve(3, &gen));
            a.begin(0, 11);
            a.finish(0, 0);
            a.begin(4, 12);
            a.finish(4, 0);
            gen.store(5, Ordering::Relaxed);
            a.change(4);
            b.begin(2, 13);
            b.finish(2, 0);
            b.keep(1, 14, 3);
            a.begin(1, 15);
            a.finish(1, 0);
            a.clear(1);
            // Bytes moved from another slot keep their generation, never
            // past the current one.
            a.begin(2, 16);
            assert_eq!(a.read(2), (0, 16), "no generation before the bytes");
            a.finish(2, 2);
            a.begin(3, 17);
            a.finish(3, 9);
            assert_eq!(f.kept_through().get(), 0);
            f.kept_through().set(6);
        }
        assert_eq!(read_header(&path), Some(h.clone()));
        let mut f = StampFile::open(&path, &h).unwrap();
        assert_eq!(f.kept_through().get(), 6);
        let (a, b) = (f.carve(5, &gen), f.carve(3, &gen));
        let a: Vec<_> = (0..5).map(|s| a.read(s)).collect();
        assert_eq!(a, [(4, 11), (0, 15), (2, 16), (5, 17), (5, 12)]);
        let b: Vec<_> = (0..3).map(|s| b.read(s)).collect();
        assert_eq!(b, [(0, 0), (3, 14), (5, 13)]);
        drop(f);
        let mut f = StampFile::create(&path, &h).unwrap();
        let a = f.carve(5, &gen);
        assert!((0..5).all(|s| a.read(s) == (0, 0)));
        drop(f);
        // A header whose bytes changed, or a file cut inside it.
        let mut bytes = fs::read(&path).unwrap();
        bytes[20] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert_eq!(read_header(&path), None);
        fs::write(&path, &bytes[..40]).unwrap();
        assert_eq!(read_header(&path), None);
        assert_eq!(read_header(&dir.path().join("none")), None);
        // The file must have the header's length to be mapped as it is.
        fs::write(&path, h.encode().unwrap()).unwrap();
        assert!(StampFile::open(&path, &h).is_err());
    }
}
