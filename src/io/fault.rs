//! A fault-injecting [`IoEngine`] wrapper, for tests.
//!
//! [`FaultyEngine`] passes operations through to a real engine until a
//! shared [`FaultPlan`] says otherwise. A plan can, counting operations over
//! every file it wraps:
//! - fail every write, read or sync from the Nth one on, with any errno
//!   (EIO, ENOSPC);
//! - tear the failing writes instead: persist only the first sectors of the
//!   failing extent, then fail;
//! - return short reads: from the Nth read on, fill only the first sectors
//!   of each extent and report success (an engine that drops the rest of a
//!   short transfer);
//! - drop fsyncs: report success without making anything durable;
//! - record every write not yet made durable, so that [`FaultPlan::crash`]
//!   can turn the files into what a power cut could leave: any subset of
//!   those writes, in any order, each whole or torn at sector granularity.
//!
//! The plan is shared, so a test can arm and disarm it while the store runs.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{AlignedBuf, EngineFile, IoEngine, IoFailure};

/// Sector size of torn writes and short reads.
pub const SECTOR: usize = 512;

/// A write not yet made durable (see [`FaultPlan::track_unsynced`]).
#[derive(Debug, Clone)]
struct Unsynced {
    path: PathBuf,
    offset: u64,
    old: Vec<u8>,
    new: Vec<u8>,
}

/// What [`FaultPlan::crash`] did to the files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Unsynced writes that did not survive the crash.
    pub lost: u64,
    /// Unsynced writes that survived whole.
    pub kept: u64,
    /// Unsynced writes that survived in part (some sectors).
    pub torn: u64,
}

/// When and how a [`FaultyEngine`] fails. `u64::MAX` means never.
#[derive(Debug)]
pub struct FaultPlan {
    /// Writes (extents) done so far.
    pub writes: AtomicU64,
    /// Reads (extents) done so far.
    pub reads: AtomicU64,
    /// Syncs done so far.
    pub syncs: AtomicU64,
    /// Fail every write extent once `writes` reaches this.
    pub fail_writes_from: AtomicU64,
    /// Fail every read extent once `reads` reaches this.
    pub fail_reads_from: AtomicU64,
    /// Fail every sync once `syncs` reaches this.
    pub fail_syncs_from: AtomicU64,
    /// Fail every sync.
    pub fail_sync: AtomicBool,
    /// Failing writes persist their first sectors (a torn write).
    pub tear_failed_writes: AtomicBool,
    /// Reads from this one on are short: only the first sectors of each
    /// extent are filled, and success is reported.
    pub short_reads_from: AtomicU64,
    /// Drop every sync whose number is a multiple of this (0: none): it
    /// reports success and makes nothing durable.
    pub drop_sync_every: AtomicU64,
    /// The errno to fail with (ENOSPC, EIO, ...).
    pub errno: AtomicI32,
    /// Record unsynced writes for [`FaultPlan::crash`].
    pub track_unsynced: AtomicBool,
    /// Inject faults only into the file at this path (every file the plan
    /// sees when `None`); the others' operations are still counted.
    pub only_file: Mutex<Option<PathBuf>>,
    unsynced: Mutex<Vec<Unsynced>>,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan {
            writes: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            fail_writes_from: AtomicU64::new(u64::MAX),
            fail_reads_from: AtomicU64::new(u64::MAX),
            fail_syncs_from: AtomicU64::new(u64::MAX),
            fail_sync: Default::default(),
            tear_failed_writes: Default::default(),
            short_reads_from: AtomicU64::new(u64::MAX),
            drop_sync_every: AtomicU64::new(0),
            errno: AtomicI32::new(libc::EIO),
            track_unsynced: Default::default(),
            only_file: Mutex::new(None),
            unsynced: Mutex::new(Vec::new()),
        }
    }
}

impl FaultPlan {
    /// Fail writes from now on with `errno`.
    pub fn fail_writes_now(&self, errno: i32) {
        self.errno.store(errno, Ordering::SeqCst);
        self.fail_writes_from
            .store(self.writes.load(Ordering::SeqCst), Ordering::SeqCst);
    }
    /// Fail reads from now on with `errno`.
    pub fn fail_reads_now(&self, errno: i32) {
        self.errno.store(errno, Ordering::SeqCst);
        self.fail_reads_from
            .store(self.reads.load(Ordering::SeqCst), Ordering::SeqCst);
    }
    /// Stop failing (the counters and the unsynced record stay).
    pub fn heal(&self) {
        self.fail_writes_from.store(u64::MAX, Ordering::SeqCst);
        self.fail_reads_from.store(u64::MAX, Ordering::SeqCst);
        self.fail_syncs_from.store(u64::MAX, Ordering::SeqCst);
        self.short_reads_from.store(u64::MAX, Ordering::SeqCst);
        self.fail_sync.store(false, Ordering::SeqCst);
        self.drop_sync_every.store(0, Ordering::SeqCst);
    }

    /// Writes recorded as not yet durable.
    pub fn unsynced_writes(&self) -> usize {
        self.unsynced.lock().len()
    }

    /// Whether faults apply to the file at `path` ([`FaultPlan::only_file`]).
    fn targets(&self, path: &Path) -> bool {
        self.only_file.lock().as_deref().is_none_or(|p| p == path)
    }

    fn error(&self) -> io::Error {
        io::Error::from_raw_os_error(self.errno.load(Ordering::SeqCst))
    }

    /// Count `n` write extents to the file at `path`: the index among them
    /// of the first that must fail, if one must.
    /// Extents before it are written, as a real device that fills up
    /// part-way through a batch would.
    fn failing_write(&self, path: &Path, n: usize) -> Option<usize> {
        let before = self.writes.fetch_add(n as u64, Ordering::SeqCst);
        let from = self.fail_writes_from.load(Ordering::SeqCst);
        (n > 0 && before + n as u64 > from && self.targets(path))
            .then(|| (from.saturating_sub(before) as usize).min(n - 1))
    }

    /// Count a read of `n` extents of the file at `path`: the index among
    /// them of the first that must fail, if one must.
    /// Also returns the reads counted before these.
    fn failing_read(&self, path: &Path, n: usize) -> (u64, Option<usize>) {
        let before = self.reads.fetch_add(n as u64, Ordering::SeqCst);
        let from = self.fail_reads_from.load(Ordering::SeqCst);
        let fail = (n > 0 && before + n as u64 > from && self.targets(path))
            .then(|| (from.saturating_sub(before) as usize).min(n - 1));
        (before, fail)
    }

    /// Count a sync of the file at `path` and say what it does.
    fn sync_fate(&self, path: &Path) -> SyncFate {
        let n = self.syncs.fetch_add(1, Ordering::SeqCst);
        if !self.targets(path) {
            return SyncFate::Sync;
        }
        if self.fail_sync.load(Ordering::SeqCst) || n >= self.fail_syncs_from.load(Ordering::SeqCst)
        {
            return SyncFate::Fail;
        }
        let every = self.drop_sync_every.load(Ordering::SeqCst);
        if every > 0 && n % every == 0 {
            return SyncFate::Drop;
        }
        SyncFate::Sync
    }

    /// Record a write of `new` over `old` at `offset` of the file at
    /// `path`, if the plan tracks unsynced writes.
    fn track(&self, path: &Path, offset: u64, old: Vec<u8>, new: Vec<u8>) {
        self.unsynced.lock().push(Unsynced {
            path: path.to_path_buf(),
            offset,
            old,
            new,
        });
    }

    /// The file at `path` was synced: its writes are durable.
    fn synced(&self, path: &Path) {
        self.unsynced.lock().retain(|w| w.path != path);
    }

    /// Write `buf` at `offset` of `file` (the file at `path`), a file the
    /// store writes through the page cache rather than an [`IoEngine`], as
    /// a [`FaultyEngine`] would: one write, failed (after its first sector,
    /// when the plan tears failing writes) where the plan says so, and
    /// recorded for [`FaultPlan::crash`] while not synced.
    pub fn write_file_at(
        &self,
        path: &Path,
        file: &std::fs::File,
        buf: &[u8],
        offset: u64,
    ) -> io::Result<()> {
        let fail = self.failing_write(path, 1).is_some();
        let tear = fail && self.tear_failed_writes.load(Ordering::SeqCst);
        if fail && !tear {
            return Err(self.error());
        }
        let new = if tear {
            &buf[..buf.len().min(SECTOR)]
        } else {
            buf
        };
        if self.track_unsynced.load(Ordering::SeqCst) {
            let mut old = vec![0u8; new.len()];
            // Beyond the end of the file the old bytes are zeros.
            let _ = file.read_at(&mut old, offset);
            self.track(path, offset, old, new.to_vec());
        }
        file.write_all_at(new, offset)?;
        if fail {
            return Err(self.error());
        }
        Ok(())
    }

    /// Set the length of `file` (the file at `path`), counted as one
    /// write: it fails, changing nothing, where the plan fails that write.
    /// [`FaultPlan::crash`] does not undo a length change (the file
    /// system's metadata is taken to be durable, as after `fdatasync`).
    pub fn set_file_len(&self, path: &Path, file: &std::fs::File, len: u64) -> io::Result<()> {
        if self.failing_write(path, 1).is_some() {
            return Err(self.error());
        }
        file.set_len(len)
    }

    /// Read `buf.len()` bytes at `offset` of `file` (the file at `path`),
    /// failing where the plan says so.
    pub fn read_file_at(
        &self,
        path: &Path,
        file: &std::fs::File,
        buf: &mut [u8],
        offset: u64,
    ) -> io::Result<()> {
        if self.failing_read(path, 1).1.is_some() {
            return Err(self.error());
        }
        file.read_exact_at(buf, offset)
    }

    /// fdatasync `file` (the file at `path`), or fail, or drop the sync
    /// (report success, make nothing durable), as the plan says.
    pub fn sync_file(&self, path: &Path, file: &std::fs::File) -> io::Result<()> {
        match self.sync_fate(path) {
            SyncFate::Fail => Err(self.error()),
            SyncFate::Drop => Ok(()),
            SyncFate::Sync => {
                file.sync_data()?;
                self.synced(path);
                Ok(())
            }
        }
    }

    /// Simulate a power cut, after the store is dropped: every write not
    /// made durable by an honest sync is undone, then each is redone whole,
    /// redone in part (a random subset of its sectors) or left undone, at
    /// random, in the order they were issued. The files then hold what a
    /// disk that reorders and tears unsynced writes could hold. `seed`
    /// drives the choices.
    pub fn crash(&self, seed: u64) -> io::Result<CrashReport> {
        let list = std::mem::take(&mut *self.unsynced.lock());
        let mut r = CrashReport::default();
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            crate::hash::mix64(state)
        };
        let open = |p: &Path| std::fs::OpenOptions::new().write(true).open(p);
        for w in list.iter().rev() {
            open(&w.path)?.write_all_at(&w.old, w.offset)?;
        }
        for w in &list {
            let f = open(&w.path)?;
            match next() % 4 {
                0 => r.lost += 1,
                1 => {
                    // Torn: each sector independently.
                    let mut any = false;
                    for (i, s) in w.new.chunks(SECTOR).enumerate() {
                        if next() % 2 == 0 {
                            f.write_all_at(s, w.offset + (i * SECTOR) as u64)?;
                            any = true;
                        }
                    }
                    if any {
                        r.torn += 1;
                    } else {
                        r.lost += 1;
                    }
                }
                _ => {
                    f.write_all_at(&w.new, w.offset)?;
                    r.kept += 1;
                }
            }
        }
        Ok(r)
    }
}

/// What a sync does under a plan.
enum SyncFate {
    /// Fails.
    Fail,
    /// Reports success and makes nothing durable.
    Drop,
    /// Syncs.
    Sync,
}

/// Wraps an engine and injects the faults of a shared [`FaultPlan`].
pub struct FaultyEngine {
    inner: Box<dyn IoEngine>,
    plan: Arc<FaultPlan>,
    path: PathBuf,
}

impl FaultyEngine {
    /// Wrap `inner`, the engine of the file at `path`.
    pub fn new(inner: Box<dyn IoEngine>, plan: Arc<FaultPlan>, path: &Path) -> FaultyEngine {
        FaultyEngine {
            inner,
            plan,
            path: path.into(),
        }
    }

    /// Count read extents; fail if the plan says so. Returns the count
    /// before these extents.
    fn count_reads(&self, offsets: &[u64]) -> Result<u64, IoFailure> {
        match self.plan.failing_read(&self.path, offsets.len()) {
            (_, Some(k)) => Err(self.fail("read", offsets[k])),
            (before, None) => Ok(before),
        }
    }

    /// Read through `inner`, then make the extents numbered from
    /// `short_reads_from` on short: keep only their first sector, as if the
    /// rest of the transfer never came. The rest of each such extent keeps
    /// what the caller's buffer held before.
    fn read_short(
        &self,
        before: u64,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
    ) -> Result<(), IoFailure> {
        let saved = buf.as_slice()[..offsets.len() * len].to_vec();
        self.inner.read_extents(offsets, len, buf)?;
        let from = self.plan.short_reads_from.load(Ordering::SeqCst);
        for i in 0..offsets.len() {
            if before + i as u64 >= from {
                let at = i * len;
                buf.as_mut_slice()[at + SECTOR..at + len]
                    .copy_from_slice(&saved[at + SECTOR..at + len]);
            }
        }
        Ok(())
    }

    fn short_pending(&self, before: u64, n: usize) -> bool {
        before + n as u64 > self.plan.short_reads_from.load(Ordering::SeqCst)
            && self.plan.targets(&self.path)
    }

    fn fail(&self, op: &'static str, offset: u64) -> IoFailure {
        IoFailure {
            op,
            offset,
            error: self.plan.error(),
        }
    }

    /// Write through `inner`, recording the old bytes if the plan tracks
    /// unsynced writes.
    fn write_tracked(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &AlignedBuf,
    ) -> Result<(), IoFailure> {
        if self.plan.track_unsynced.load(Ordering::SeqCst) {
            let mut old = AlignedBuf::new(offsets.len() * len);
            // Beyond the end of the file the old bytes are zeros.
            if self.inner.read_extents(offsets, len, &mut old).is_err() {
                for (i, &o) in offsets.iter().enumerate() {
                    let s = &mut old.as_mut_slice()[i * len..(i + 1) * len];
                    s.fill(0);
                    if let Ok(f) = std::fs::File::open(&self.path) {
                        let _ = f.read_at(s, o);
                    }
                }
            }
            for (i, &o) in offsets.iter().enumerate() {
                let at = i * len..(i + 1) * len;
                self.plan.track(
                    &self.path,
                    o,
                    old.as_slice()[at.clone()].to_vec(),
                    buf.as_slice()[at].to_vec(),
                );
            }
        }
        self.inner.write_extents(offsets, len, buf)
    }
}

impl IoEngine for FaultyEngine {
    fn read_extents(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
    ) -> Result<(), IoFailure> {
        let before = self.count_reads(offsets)?;
        if self.short_pending(before, offsets.len()) {
            return self.read_short(before, offsets, len, buf);
        }
        self.inner.read_extents(offsets, len, buf)
    }

    fn read_extents_each(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
        done: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), IoFailure> {
        let before = self.count_reads(offsets)?;
        if self.short_pending(before, offsets.len()) {
            self.read_short(before, offsets, len, buf)?;
            super::each_extent(offsets.len(), len, buf, done);
            return Ok(());
        }
        self.inner.read_extents_each(offsets, len, buf, done)
    }

    fn write_extents(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &AlignedBuf,
    ) -> Result<(), IoFailure> {
        if let Some(k) = self.plan.failing_write(&self.path, offsets.len()) {
            if k > 0 {
                self.write_tracked(&offsets[..k], len, buf)?;
            }
            if self.plan.tear_failed_writes.load(Ordering::SeqCst) {
                // Persist the first sector of the failing extent only.
                let mut part = AlignedBuf::new(len);
                self.inner
                    .read_extents(&offsets[k..k + 1], len, &mut part)
                    .ok();
                part.as_mut_slice()[..SECTOR]
                    .copy_from_slice(&buf.as_slice()[k * len..k * len + SECTOR]);
                self.write_tracked(&offsets[k..k + 1], len, &part)?;
            }
            return Err(self.fail("write", offsets[k]));
        }
        self.write_tracked(offsets, len, buf)
    }

    fn sync(&self) -> Result<(), IoFailure> {
        match self.plan.sync_fate(&self.path) {
            SyncFate::Fail => Err(self.fail("fsync", 0)),
            SyncFate::Drop => Ok(()), // nothing becomes durable
            SyncFate::Sync => {
                self.inner.sync()?;
                self.plan.synced(&self.path);
                Ok(())
            }
        }
    }

    fn name(&self) -> String {
        format!("faulty({})", self.inner.name())
    }

    fn file(&self) -> &EngineFile {
        self.inner.file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Once the plan fails every write and read, a call of no extents
    /// fails nothing and counts nothing (it computed `n - 1` of zero,
    /// an overflow), while the calls around it fail at their first.
    #[test]
    fn a_call_of_no_extents_fails_nothing() {
        let plan = FaultPlan::default();
        plan.fail_writes_from.store(1, Ordering::SeqCst);
        plan.fail_reads_from.store(1, Ordering::SeqCst);
        let p = Path::new("/x");
        assert_eq!(plan.failing_write(p, 3), Some(1));
        assert_eq!(plan.failing_read(p, 2), (0, Some(1)));
        assert_eq!(plan.failing_write(p, 0), None);
        assert_eq!(plan.failing_read(p, 0), (2, None));
        assert_eq!(plan.failing_write(p, 1), Some(0));
        assert_eq!(plan.failing_read(p, 1), (2, Some(0)));
    }
}
