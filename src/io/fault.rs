//! A fault-injecting [`IoEngine`] wrapper, for tests.
//!
//! [`FaultyEngine`] passes operations through to a real engine until a
//! [`FaultPlan`] says to fail: from the Nth write (or read, or sync) on, every
//! such operation returns the chosen errno and touches nothing. The plan is
//! shared, so a test can arm and disarm it while the store runs.

use std::io;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

use super::{AlignedBuf, IoEngine, IoFailure, LatencyRecorder};

/// When and how a [`FaultyEngine`] fails. `u64::MAX` means never.
#[derive(Debug)]
pub struct FaultPlan {
    /// Writes (extents) done so far.
    pub writes: AtomicU64,
    /// Reads (extents) done so far.
    pub reads: AtomicU64,
    /// Fail every write extent once `writes` reaches this.
    pub fail_writes_from: AtomicU64,
    /// Fail every read extent once `reads` reaches this.
    pub fail_reads_from: AtomicU64,
    /// Fail every sync.
    pub fail_sync: std::sync::atomic::AtomicBool,
    /// The errno to fail with (ENOSPC, EIO, ...).
    pub errno: AtomicI32,
}

impl Default for FaultPlan {
    fn default() -> Self {
        FaultPlan {
            writes: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            fail_writes_from: AtomicU64::new(u64::MAX),
            fail_reads_from: AtomicU64::new(u64::MAX),
            fail_sync: Default::default(),
            errno: AtomicI32::new(libc::EIO),
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
    /// Stop failing.
    pub fn heal(&self) {
        self.fail_writes_from.store(u64::MAX, Ordering::SeqCst);
        self.fail_reads_from.store(u64::MAX, Ordering::SeqCst);
        self.fail_sync.store(false, Ordering::SeqCst);
    }
}

/// Wraps an engine and injects the faults of a shared [`FaultPlan`].
pub struct FaultyEngine {
    inner: Box<dyn IoEngine>,
    plan: Arc<FaultPlan>,
}

impl FaultyEngine {
    /// Wrap `inner`.
    pub fn new(inner: Box<dyn IoEngine>, plan: Arc<FaultPlan>) -> FaultyEngine {
        FaultyEngine { inner, plan }
    }

    /// Count read extents; fail if the plan says so.
    fn count_reads(&self, offsets: &[u64]) -> Result<(), IoFailure> {
        let n = offsets.len() as u64;
        let before = self.plan.reads.fetch_add(n, Ordering::SeqCst);
        let from = self.plan.fail_reads_from.load(Ordering::SeqCst);
        if before + n > from {
            let k = from.saturating_sub(before) as usize;
            return Err(self.fail("read", offsets[k.min(offsets.len() - 1)]));
        }
        Ok(())
    }

    fn fail(&self, op: &'static str, offset: u64) -> IoFailure {
        IoFailure {
            op,
            offset,
            error: io::Error::from_raw_os_error(self.plan.errno.load(Ordering::SeqCst)),
        }
    }
}

impl IoEngine for FaultyEngine {
    fn read_extents(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
    ) -> Result<(), IoFailure> {
        self.count_reads(offsets)?;
        self.inner.read_extents(offsets, len, buf)
    }

    fn read_extents_each(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
        done: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), IoFailure> {
        self.count_reads(offsets)?;
        self.inner.read_extents_each(offsets, len, buf, done)
    }

    fn write_extents(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &AlignedBuf,
    ) -> Result<(), IoFailure> {
        let before = self
            .plan
            .writes
            .fetch_add(offsets.len() as u64, Ordering::SeqCst);
        let from = self.plan.fail_writes_from.load(Ordering::SeqCst);
        if before + offsets.len() as u64 > from {
            // Extents before the failing one are written, as a real device
            // that fills up part-way through a batch would.
            let k = from.saturating_sub(before) as usize;
            if k > 0 {
                self.inner.write_extents(&offsets[..k], len, buf)?;
            }
            return Err(self.fail("write", offsets[k.min(offsets.len() - 1)]));
        }
        self.inner.write_extents(offsets, len, buf)
    }

    fn sync(&self) -> Result<(), IoFailure> {
        if self.plan.fail_sync.load(Ordering::SeqCst) {
            return Err(self.fail("fsync", 0));
        }
        self.inner.sync()
    }

    fn name(&self) -> String {
        format!("faulty({})", self.inner.name())
    }

    fn direct(&self) -> bool {
        self.inner.direct()
    }

    fn read_latency(&self) -> &LatencyRecorder {
        self.inner.read_latency()
    }
}
