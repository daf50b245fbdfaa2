//! Block I/O engines of the SSD tier.
//!
//! An [`IoEngine`] reads and writes batches of equal-sized extents (multiples
//! of 4 KiB at 4 KiB-aligned offsets) between a file and an [`AlignedBuf`].
//! Two engines exist:
//! - `uring` (Linux only): io_uring, O_DIRECT, every extent of a batch in
//!   flight at once up to the queue depth.
//! - `psync`: `pread`/`pwrite` split over a few threads. Always compiled.
//!
//! [`open_engine`] picks one: `EMBTIER_IO_ENGINE=auto|uring|psync` overrides
//! the config; `auto` probes io_uring once (a ring and a no-op) and falls back
//! to psync with a single log line. If O_DIRECT is refused by the file system
//! the file is opened buffered instead.

mod aligned;
#[cfg(any(test, feature = "testing"))]
pub mod fault;

/// The faults a test injects into the files the store reads and writes
/// through the page cache (see `OpenOptionsExt::faults`): the fault plan,
/// with the `testing` feature.
#[cfg(any(test, feature = "testing"))]
pub type Faults = fault::FaultPlan;

/// The faults a test injects into the files the store reads and writes
/// through the page cache (see `OpenOptionsExt::faults`): none can be made
/// without the `testing` feature.
#[cfg(not(any(test, feature = "testing")))]
#[derive(Debug)]
pub enum Faults {}

#[cfg(not(any(test, feature = "testing")))]
impl Faults {
    /// Never called: no value exists.
    pub fn write_file_at(&self, _: &Path, _: &File, _: &[u8], _: u64) -> std::io::Result<()> {
        match *self {}
    }
    /// Never called: no value exists.
    pub fn read_file_at(&self, _: &Path, _: &File, _: &mut [u8], _: u64) -> std::io::Result<()> {
        match *self {}
    }
    /// Never called: no value exists.
    pub fn sync_file(&self, _: &Path, _: &File) -> std::io::Result<()> {
        match *self {}
    }
    /// Never called: no value exists.
    pub fn set_file_len(&self, _: &Path, _: &File, _: u64) -> std::io::Result<()> {
        match *self {}
    }
}
mod latency;
pub(crate) mod pace;
mod psync;
pub mod reserve;
#[cfg(target_os = "linux")]
mod uring;

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::Once;

pub use aligned::AlignedBuf;
pub use latency::LatencyRecorder;

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Which I/O engine the SSD tier uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum IoEngineKind {
    /// io_uring when a probe at open succeeds, psync otherwise.
    #[default]
    Auto,
    /// io_uring with O_DIRECT; an error where it is refused.
    Uring,
    /// pread/pwrite on a few threads.
    Psync,
}

impl FromStr for IoEngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(IoEngineKind::Auto),
            "uring" | "io_uring" | "io-uring" => Ok(IoEngineKind::Uring),
            "psync" => Ok(IoEngineKind::Psync),
            other => Err(format!(
                "unknown I/O engine {other:?} (expected auto, uring or psync)"
            )),
        }
    }
}

/// How to open an engine (the SSD tier's settings the I/O layer reads; see
/// `SsdConfig::engine_options`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// The engine asked for; `EMBTIER_IO_ENGINE` overrides it.
    pub kind: IoEngineKind,
    /// io_uring queue depth: reads in flight per batch.
    pub queue_depth: u32,
    /// Threads of the psync engine.
    pub psync_threads: usize,
    /// Open with O_DIRECT (falls back to buffered I/O where refused).
    pub direct_io: bool,
}

/// A failed I/O operation: what, where, and the OS error.
#[derive(Debug)]
pub struct IoFailure {
    /// `read`, `write` or `fsync`.
    pub op: &'static str,
    /// Byte offset of the failed extent.
    pub offset: u64,
    /// The OS error.
    pub error: io::Error,
}

impl IoFailure {
    /// The error of this failure on `path`: a full disk is
    /// [`Error::DiskFull`], anything else [`Error::Io`].
    pub fn into_error(self, path: &Path) -> Error {
        if self.error.raw_os_error() == Some(libc::ENOSPC) {
            Error::DiskFull {
                path: path.into(),
                offset: self.offset,
            }
        } else {
            Error::Io {
                path: path.into(),
                op: self.op,
                offset: self.offset,
                source: self.error,
            }
        }
    }
}

/// Batch block I/O on one file.
///
/// Every call is synchronous: it returns only when every operation it started
/// has completed, so the buffers outlive all in-flight I/O.
pub trait IoEngine: Send + Sync {
    /// Read extent `i` (`len` bytes at byte offset `offsets[i]`) into
    /// `buf[i * len..(i + 1) * len]`. `len` and every offset are multiples
    /// of 4096, and `buf.len() >= offsets.len() * len`.
    fn read_extents(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
    ) -> Result<(), IoFailure>;
    /// Read like [`IoEngine::read_extents`], and call `done(i, bytes)` for
    /// each extent once it has been read, so that the caller can use early
    /// extents while later ones are still in flight. Extents may complete in
    /// any order; a failed extent is never passed to `done`. The call still
    /// returns only after every operation it started has completed. The
    /// default reads everything, then calls `done` in order.
    fn read_extents_each(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
        done: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<(), IoFailure> {
        self.read_extents(offsets, len, buf)?;
        each_extent(offsets.len(), len, buf, done);
        Ok(())
    }
    /// Write extent `i` from `buf[i * len..]` to byte offset `offsets[i]`.
    fn write_extents(&self, offsets: &[u64], len: usize, buf: &AlignedBuf)
        -> Result<(), IoFailure>;
    /// `uring` or `psync` (wrappers may add to it).
    fn name(&self) -> String;
    /// The file the engine reads and writes, with its O_DIRECT flag and
    /// read latencies (a wrapper returns its inner engine's).
    fn file(&self) -> &EngineFile;
    /// Make every completed write durable (fdatasync).
    fn sync(&self) -> Result<(), IoFailure> {
        self.file().sync()
    }
    /// Whether the file is open with O_DIRECT.
    fn direct(&self) -> bool {
        self.file().direct()
    }
    /// Latency of single read operations since open.
    fn read_latency(&self) -> &LatencyRecorder {
        self.file().read_latency()
    }
}

/// What every engine holds whatever its way of issuing I/O: the open file,
/// whether it was opened with O_DIRECT, and the latencies of its reads.
#[derive(Debug)]
pub struct EngineFile {
    file: File,
    direct: bool,
    lat: LatencyRecorder,
}

impl EngineFile {
    pub(crate) fn new(file: File, direct: bool) -> EngineFile {
        EngineFile {
            file,
            direct,
            lat: LatencyRecorder::default(),
        }
    }

    /// The open file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether the file is open with O_DIRECT.
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// Latency of single read operations since open.
    pub fn read_latency(&self) -> &LatencyRecorder {
        &self.lat
    }

    /// fdatasync the file.
    pub fn sync(&self) -> Result<(), IoFailure> {
        self.file.sync_data().map_err(|error| IoFailure {
            op: "fsync",
            offset: 0,
            error,
        })
    }
}

/// Hand each of the `n` extents of a completed read in `buf` to `done`, in
/// order.
pub(crate) fn each_extent(
    n: usize,
    len: usize,
    buf: &AlignedBuf,
    done: &mut dyn FnMut(usize, &[u8]),
) {
    for i in 0..n {
        done(i, &buf.as_slice()[i * len..(i + 1) * len]);
    }
}

pub(crate) fn check_extents(offsets: &[u64], len: usize, buf_len: usize) {
    assert!(len > 0 && len % 4096 == 0, "extent length {len}");
    assert!(buf_len >= offsets.len() * len, "buffer too small");
    debug_assert!(offsets.iter().all(|o| o % 4096 == 0), "unaligned offset");
}

/// What [`open_engine`] chose.
#[derive(Debug, Clone)]
pub struct EngineChoice {
    /// The engine's name.
    pub engine: String,
    /// Whether O_DIRECT is in use.
    pub direct: bool,
    /// Why this engine (for logs and stats).
    pub reason: String,
}

/// A single-threaded psync engine on `file`.
pub(crate) fn psync_engine(file: File) -> Box<dyn IoEngine> {
    Box::new(psync::PsyncEngine::new(file, false, 1))
}

/// Open `path` (created if missing) for block I/O, honouring O_DIRECT where the
/// file system allows it. Returns the file and whether O_DIRECT is on.
pub(crate) fn open_file(path: &Path, direct: bool) -> Result<(File, bool)> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    if direct {
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut d = opts.clone();
            d.custom_flags(libc::O_DIRECT);
            match d.open(path) {
                Ok(f) => return Ok((f, true)),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    log_once(&format!(
                        "embtier: {}: O_DIRECT refused by the file system, using buffered I/O",
                        path.display()
                    ));
                }
                Err(e) => return Err(Error::io(path, "open", e)),
            }
        }
    }
    let f = opts.open(path).map_err(|e| Error::io(path, "open", e))?;
    Ok((f, false))
}

fn log_once(msg: &str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| eprintln!("{msg}"));
}

/// The engine kind asked for: `EMBTIER_IO_ENGINE` if set, else the config.
pub fn requested_engine(configured: IoEngineKind) -> Result<IoEngineKind> {
    match std::env::var("EMBTIER_IO_ENGINE") {
        Ok(v) if !v.trim().is_empty() => v
            .parse()
            .map_err(|e: String| Error::config(format!("EMBTIER_IO_ENGINE: {e}"))),
        _ => Ok(configured),
    }
}

/// Probe io_uring: set up a ring and complete a no-op. `Err` says why not.
pub fn probe_uring() -> std::result::Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        uring::probe().map_err(|e| e.to_string())
    }
    #[cfg(not(target_os = "linux"))]
    {
        Err("io_uring exists only on Linux".into())
    }
}

/// Open the engine for `path` as `cfg` and the environment ask.
pub fn open_engine(path: &Path, cfg: &EngineOptions) -> Result<(Box<dyn IoEngine>, EngineChoice)> {
    let kind = requested_engine(cfg.kind)?;
    let (file, direct) = open_file(path, cfg.direct_io)?;
    let use_uring = match kind {
        IoEngineKind::Psync => Err("psync requested".to_string()),
        IoEngineKind::Uring => {
            probe_uring().map_err(|why| {
                Error::config(format!("io_uring requested but unavailable: {why}"))
            })?;
            Ok("uring requested".to_string())
        }
        IoEngineKind::Auto => match probe_uring() {
            Ok(()) => Ok("auto: io_uring probe succeeded".to_string()),
            Err(why) => {
                log_once(&format!(
                    "embtier: io_uring unavailable ({why}); using the psync engine"
                ));
                Err(format!("auto: io_uring unavailable ({why})"))
            }
        },
    };
    match use_uring {
        #[cfg(target_os = "linux")]
        Ok(reason) => {
            let e = uring::UringEngine::new(file, direct, cfg.queue_depth)
                .map_err(|e| Error::io("io_uring", "setup", e))?;
            Ok((
                Box::new(e),
                EngineChoice {
                    engine: "uring".into(),
                    direct,
                    reason,
                },
            ))
        }
        #[cfg(not(target_os = "linux"))]
        Ok(_) => unreachable!("the probe fails off Linux"),
        Err(reason) => Ok((
            Box::new(psync::PsyncEngine::new(file, direct, cfg.psync_threads)),
            EngineChoice {
                engine: "psync".into(),
                direct,
                reason,
            },
        )),
    }
}

/// Largest extent [`read_coalesced`] and [`write_coalesced`] make of
/// contiguous ones.
const COALESCE_MAX: usize = 1 << 30;

/// Whether extents of `len` bytes at `offsets` lie end to end, in order,
/// and together fit one operation.
fn contiguous(offsets: &[u64], len: usize) -> bool {
    offsets.len() > 1
        && offsets.len().saturating_mul(len) <= COALESCE_MAX
        && offsets
            .windows(2)
            .all(|w| w[1] == w[0].wrapping_add(len as u64))
}

/// [`IoEngine::read_extents`], as one large read when the extents lie end
/// to end (a bulk load's groups, a journal batch): the disk then sees a
/// sequential read instead of many small ones.
pub(crate) fn read_coalesced(
    e: &dyn IoEngine,
    offsets: &[u64],
    len: usize,
    buf: &mut AlignedBuf,
) -> Result<(), IoFailure> {
    if contiguous(offsets, len) {
        e.read_extents(&offsets[..1], offsets.len() * len, buf)
    } else {
        e.read_extents(offsets, len, buf)
    }
}

/// [`IoEngine::write_extents`], as one large write when the extents lie
/// end to end.
pub(crate) fn write_coalesced(
    e: &dyn IoEngine,
    offsets: &[u64],
    len: usize,
    buf: &AlignedBuf,
) -> Result<(), IoFailure> {
    if contiguous(offsets, len) {
        e.write_extents(&offsets[..1], offsets.len() * len, buf)
    } else {
        e.write_extents(offsets, len, buf)
    }
}

/// The largest read of a dense window ([`read_windowed`]).
const SPAN_WINDOW: usize = 4 << 20;

/// [`IoEngine::read_extents_each`] of extents that may lie close together
/// (a warm restart's hot set, a merge's log blocks, the written-group
/// check). Many ascending extents are cut into windows of at most 4 MiB of
/// the file; a window they fill at least half is read in one sequential
/// read, and the extents of the other windows in one batch of random
/// reads, as without windows. Each extent lands at its place in `buf`
/// (which the caller has poisoned) before `done` sees it.
pub(crate) fn read_windowed(
    e: &dyn IoEngine,
    offsets: &[u64],
    len: usize,
    buf: &mut AlignedBuf,
    done: &mut dyn FnMut(usize, &[u8]),
) -> Result<(), IoFailure> {
    if offsets.len() < 64 || !offsets.windows(2).all(|w| w[0] < w[1]) {
        return e.read_extents_each(offsets, len, buf, done);
    }
    let window = SPAN_WINDOW.max(len) as u64;
    let mut sparse: Vec<usize> = Vec::new();
    let mut win: Option<AlignedBuf> = None;
    let mut i = 0;
    while i < offsets.len() {
        let lo = offsets[i];
        let mut j = i + 1;
        while j < offsets.len() && offsets[j] + len as u64 - lo <= window {
            j += 1;
        }
        let span = (offsets[j - 1] + len as u64 - lo) as usize;
        if j - i < 8 || 2 * (j - i) * len < span {
            sparse.extend(i..j);
            i = j;
            continue;
        }
        let w = win.get_or_insert_with(|| AlignedBuf::new(window as usize));
        w.poison(span);
        e.read_extents(&[lo], span, w)?;
        for (k, &off) in offsets.iter().enumerate().take(j).skip(i) {
            let at = (off - lo) as usize;
            buf.as_mut_slice()[k * len..(k + 1) * len].copy_from_slice(&w.as_slice()[at..at + len]);
            done(k, &buf.as_slice()[k * len..(k + 1) * len]);
        }
        i = j;
    }
    if sparse.len() == offsets.len() {
        return e.read_extents_each(offsets, len, buf, done);
    }
    if sparse.is_empty() {
        return Ok(());
    }
    // The sparse extents through a bounce buffer of at most a window's
    // bytes, a window's worth at a time: one buffer for all of them (32
    // MiB for a warm-up batch in log order) showed in the peak RSS of a
    // restart whose warm-up read the log's rows first.
    let per = (window as usize / len).max(1);
    let mut tmp = AlignedBuf::new(per.min(sparse.len()) * len);
    let out = buf.as_mut_slice();
    for part in sparse.chunks(per) {
        let sub: Vec<u64> = part.iter().map(|&k| offsets[k]).collect();
        tmp.poison(sub.len() * len);
        e.read_extents_each(&sub, len, &mut tmp, &mut |x, bytes| {
            let k = part[x];
            out[k * len..(k + 1) * len].copy_from_slice(bytes);
            done(k, bytes);
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dense windows and more sparse extents than one bounce buffer
    /// holds: every extent lands at its place with its own bytes, and
    /// `done` sees each once.
    #[test]
    fn windowed_reads_put_every_extent_in_place() {
        let len = 4096usize;
        let blocks = 8192u64;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..blocks * len as u64)
            .map(|i| ((i / len as u64) as u8) ^ (i as u8))
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        let e = psync_engine(File::open(&path).unwrap());
        // A dense run of 600 blocks (a window read whole), then every
        // sixth block: sparse, more of them than a window's 1024.
        let mut blocks_read: Vec<u64> = (100..700).collect();
        blocks_read.extend((1000..blocks).step_by(6));
        let offsets: Vec<u64> = blocks_read.iter().map(|b| b * len as u64).collect();
        assert!(offsets.len() - 600 > SPAN_WINDOW / len);
        let mut buf = AlignedBuf::new(offsets.len() * len);
        buf.poison(offsets.len() * len);
        let mut seen = vec![0u32; offsets.len()];
        read_windowed(&*e, &offsets, len, &mut buf, &mut |k, b| {
            seen[k] += 1;
            let at = offsets[k] as usize;
            assert_eq!(b, &bytes[at..at + len], "extent {k} as given to done");
        })
        .unwrap();
        assert!(seen.iter().all(|&n| n == 1), "done once per extent");
        for (k, &off) in offsets.iter().enumerate() {
            let at = off as usize;
            assert_eq!(
                &buf.as_slice()[k * len..(k + 1) * len],
                &bytes[at..at + len],
                "extent {k} in place"
            );
        }
    }
}
