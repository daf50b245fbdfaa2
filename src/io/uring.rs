//! The io_uring engine: every extent of a batch in flight at once, up to the
//! queue depth, on a file opened with O_DIRECT.
//!
//! Rings are pooled: a call takes a ring (or makes one), runs the batch to
//! completion and returns it, so concurrent callers never share a ring and no
//! thread ever polls an idle one.
//!
//! Buffer lifetime: a call returns only after every submitted operation has
//! completed, including on error paths, so the kernel never writes into a
//! buffer the caller has got back. If the ring itself fails while operations
//! are in flight the process aborts rather than risk that.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};
use parking_lot::Mutex;

use super::{check_extents, AlignedBuf, EngineFile, IoEngine, IoFailure};

pub(crate) fn probe() -> io::Result<()> {
    let mut ring = IoUring::new(4)?;
    let nop = opcode::Nop::new().build().user_data(42);
    // SAFETY: a no-op references no memory.
    unsafe { ring.submission().push(&nop) }
        .map_err(|_| io::Error::other("submission queue full"))?;
    ring.submit_and_wait(1)?;
    let cqe = ring
        .completion()
        .next()
        .ok_or_else(|| io::Error::other("no completion for the probe"))?;
    if cqe.result() < 0 {
        return Err(io::Error::from_raw_os_error(-cqe.result()));
    }
    Ok(())
}

pub(crate) struct UringEngine {
    f: EngineFile,
    qd: u32,
    rings: Mutex<Vec<IoUring>>,
}

impl UringEngine {
    pub(crate) fn new(file: File, direct: bool, qd: u32) -> io::Result<UringEngine> {
        let first = IoUring::new(qd.next_power_of_two())?;
        Ok(UringEngine {
            f: EngineFile::new(file, direct),
            qd,
            rings: Mutex::new(vec![first]),
        })
    }

    fn take_ring(&self) -> io::Result<IoUring> {
        if let Some(r) = self.rings.lock().pop() {
            return Ok(r);
        }
        IoUring::new(self.qd.next_power_of_two())
    }

    /// Run one batch. `make(i, done)` builds the SQE for the rest of extent `i`
    /// after `done` bytes.
    fn run(
        &self,
        op: &'static str,
        offsets: &[u64],
        len: usize,
        make: impl Fn(usize, usize) -> squeue::Entry,
        record_latency: bool,
        mut on_done: impl FnMut(usize),
    ) -> Result<(), IoFailure> {
        let mut ring = self.take_ring().map_err(|error| IoFailure {
            op,
            offset: 0,
            error,
        })?;
        let n = offsets.len();
        let mut done = vec![0usize; n];
        let mut started = vec![Instant::now(); if record_latency { n } else { 0 }];
        let mut lat: Vec<Duration> = Vec::with_capacity(if record_latency { n } else { 0 });
        let mut next = 0usize;
        let mut inflight = 0usize;
        let mut retry: Vec<usize> = Vec::new();
        let mut first_err: Option<IoFailure> = None;
        let mut completed = 0usize;
        let mut ready: Vec<usize> = Vec::new();
        // Push SQEs until the queue depth is reached: retries first, then new
        // extents (none once an error has been seen).
        macro_rules! fill {
            () => {{
                let mut sq = ring.submission();
                while inflight < self.qd as usize && !sq.is_full() {
                    let i = if let Some(i) = retry.pop() {
                        i
                    } else if next < n && first_err.is_none() {
                        next += 1;
                        if record_latency {
                            started[next - 1] = Instant::now();
                        }
                        next - 1
                    } else {
                        break;
                    };
                    let sqe = make(i, done[i]).user_data(i as u64);
                    // SAFETY: the SQE points into the caller's buffer at
                    // extent i, which stays borrowed until this function
                    // returns, and it returns only after every submitted
                    // entry has completed (see the loop condition and the
                    // abort below).
                    unsafe { sq.push(&sqe) }.expect("queue has room: checked is_full");
                    inflight += 1;
                }
            }};
        }
        while completed < n {
            fill!();
            if first_err.is_some() && inflight == 0 {
                // Nothing in flight; extents never submitted count as done.
                break;
            }
            loop {
                match ring.submit_and_wait(1) {
                    Ok(_) => break,
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                        ) =>
                    {
                        continue
                    }
                    Err(e) => {
                        if inflight > 0 {
                            eprintln!("embtier: io_uring wait failed with {inflight} operations in flight: {e}; aborting to protect their buffers");
                            std::process::abort();
                        }
                        return Err(IoFailure {
                            op,
                            offset: 0,
                            error: e,
                        });
                    }
                }
            }
            for cqe in ring.completion() {
                let i = cqe.user_data() as usize;
                inflight -= 1;
                let res = cqe.result();
                if res == -libc::EINTR || res == -libc::EAGAIN {
                    retry.push(i);
                    continue;
                }
                if res < 0 {
                    first_err.get_or_insert(IoFailure {
                        op,
                        offset: offsets[i] + done[i] as u64,
                        error: io::Error::from_raw_os_error(-res),
                    });
                    completed += 1;
                    continue;
                }
                if res == 0 {
                    first_err.get_or_insert(IoFailure {
                        op,
                        offset: offsets[i] + done[i] as u64,
                        error: io::Error::new(io::ErrorKind::UnexpectedEof, "zero-length transfer"),
                    });
                    completed += 1;
                    continue;
                }
                done[i] += res as usize;
                if done[i] < len {
                    retry.push(i); // short transfer: resubmit the rest
                } else {
                    completed += 1;
                    if record_latency {
                        lat.push(started[i].elapsed());
                    }
                    ready.push(i);
                }
            }
            if !ready.is_empty() {
                // Hand the kernel its next work before running callbacks, so
                // the device stays busy while the caller uses finished extents.
                fill!();
                match ring.submit() {
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.raw_os_error(),
                            Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                        ) => {}
                    Err(e) => {
                        if inflight > 0 {
                            eprintln!("embtier: io_uring submit failed with {inflight} operations in flight: {e}; aborting to protect their buffers");
                            std::process::abort();
                        }
                        return Err(IoFailure {
                            op,
                            offset: 0,
                            error: e,
                        });
                    }
                }
                for i in ready.drain(..) {
                    on_done(i);
                }
            }
        }
        self.rings.lock().push(ring);
        self.f.read_latency().record_all(&lat);
        first_err.map_or(Ok(()), Err)
    }
}

impl IoEngine for UringEngine {
    fn read_extents(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
    ) -> Result<(), IoFailure> {
        self.read_extents_each(offsets, len, buf, &mut |_, _| {})
    }

    fn read_extents_each(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
        done: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), IoFailure> {
        check_extents(offsets, len, buf.len());
        let fd = types::Fd(self.f.file().as_raw_fd());
        let base = buf.as_mut_ptr() as usize;
        self.run(
            "read",
            offsets,
            len,
            |i, done| {
                let ptr = (base + i * len + done) as *mut u8;
                opcode::Read::new(fd, ptr, (len - done) as u32)
                    .offset(offsets[i] + done as u64)
                    .build()
            },
            true,
            |i| {
                // SAFETY: extent i lies inside `buf` (checked by
                // check_extents), its read has completed, and no operation
                // still in flight targets it (extents are disjoint and each
                // is submitted until complete, then never again), so nothing
                // writes these bytes while the shared slice lives; `buf` is
                // exclusively borrowed by this call, so no other Rust
                // reference aliases them.
                let bytes =
                    unsafe { std::slice::from_raw_parts((base + i * len) as *const u8, len) };
                done(i, bytes)
            },
        )
    }

    fn write_extents(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &AlignedBuf,
    ) -> Result<(), IoFailure> {
        check_extents(offsets, len, buf.len());
        let fd = types::Fd(self.f.file().as_raw_fd());
        let base = buf.as_ptr() as usize;
        self.run(
            "write",
            offsets,
            len,
            |i, done| {
                let ptr = (base + i * len + done) as *const u8;
                opcode::Write::new(fd, ptr, (len - done) as u32)
                    .offset(offsets[i] + done as u64)
                    .build()
            },
            false,
            |_| {},
        )
    }

    fn name(&self) -> String {
        "uring".into()
    }

    fn file(&self) -> &EngineFile {
        &self.f
    }
}
