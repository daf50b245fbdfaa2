//! Pacing for writes that run beside training (`[ssd] checkpoint_rest`):
//! after each chunk, rest a multiple of the time the chunk took, so that
//! training's reads keep a share of the disk; and a file writer that
//! bounds how much written data the kernel holds at once.

use std::fs::File;
use std::io::{self, Write};
use std::time::{Duration, Instant};

/// The most of a chunk's time a rest is proportional to: a chunk that
/// took longer mostly waited (for a lock the background merge held, for a
/// disk another writer filled), and resting `rest` times that wait would
/// only make the checkpoint longer.
const MAX_CHUNK: Duration = Duration::from_millis(100);

/// Rests after each chunk of work for `rest` times as long as the chunk
/// took (measured from the last rest, or from creation; at most
/// [`MAX_CHUNK`] of it).
#[derive(Debug)]
pub(crate) struct Pacer {
    rest: f64,
    since: Instant,
    /// Time spent resting so far.
    pub(crate) rested: Duration,
}

impl Pacer {
    /// A pacer resting `rest` times each chunk's time (0: never).
    pub(crate) fn new(rest: f64) -> Pacer {
        Pacer {
            rest: if rest.is_finite() { rest.max(0.0) } else { 0.0 },
            since: Instant::now(),
            rested: Duration::ZERO,
        }
    }

    /// A chunk ended: rest for its share.
    pub(crate) fn chunk_done(&mut self) {
        if self.rest > 0.0 {
            let d = self.since.elapsed().min(MAX_CHUNK).mul_f64(self.rest);
            std::thread::sleep(d);
            self.rested += d;
        }
        self.since = Instant::now();
    }
}

/// A file written in order, pushed to the disk every `chunk` bytes and
/// waited for (`sync_file_range` on Linux, no fsync: the data is not made
/// durable, only written), with a [`Pacer`]'s rest after each: the kernel
/// never holds more than a chunk of this file's data to write, so a large
/// file does not flood the disk's queue ahead of other readers when the
/// kernel's writeback (or the rename that replaces an older file) gets to
/// it.
pub(crate) struct PacedFile {
    file: File,
    chunk: u64,
    written: u64,
    pushed: u64,
    pacer: Pacer,
}

impl PacedFile {
    /// Write `file` from its current position (0), in chunks of `chunk`
    /// bytes, resting `rest` times each chunk's time.
    pub(crate) fn new(file: File, chunk: u64, rest: f64) -> PacedFile {
        PacedFile {
            file,
            chunk: chunk.max(1),
            written: 0,
            pushed: 0,
            pacer: Pacer::new(rest),
        }
    }

    /// Write out what is not pushed yet and wait for it.
    fn push(&mut self) -> io::Result<()> {
        if self.written == self.pushed {
            return Ok(());
        }
        write_out(&self.file, self.pushed, self.written - self.pushed)?;
        self.pushed = self.written;
        self.pacer.chunk_done();
        Ok(())
    }
}

impl Write for PacedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.pushed >= self.chunk {
            self.push()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()?;
        self.push()
    }
}

/// Start the write-out of `len` bytes of `file` from `at` and wait for it.
#[cfg(target_os = "linux")]
fn write_out(file: &File, at: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: sync_file_range only reads the descriptor, which `file` owns
    // and keeps open for the call; the offsets are plain integers (a range
    // past the end is allowed and ignored).
    let r = unsafe { libc::sync_file_range(file.as_raw_fd(), at as i64, len as i64, flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Elsewhere the kernel's writeback decides (no equivalent call).
#[cfg(not(target_os = "linux"))]
fn write_out(_file: &File, _at: u64, _len: u64) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Every byte arrives, in order, whatever the write sizes and chunk.
    #[test]
    fn paced_file_writes_every_byte_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = PacedFile::new(File::create(&path).unwrap(), 1000, 0.0);
        let mut want = Vec::new();
        for i in 0..200u32 {
            let piece: Vec<u8> = (0..(i * 37 % 301)).map(|j| (i + j) as u8).collect();
            f.write_all(&piece).unwrap();
            want.extend_from_slice(&piece);
        }
        f.flush().unwrap();
        assert!(f.pushed == want.len() as u64);
        let mut got = Vec::new();
        File::open(&path).unwrap().read_to_end(&mut got).unwrap();
        assert_eq!(got, want);
    }

    /// A pacer at rest 1 rests about as long as the work between rests.
    #[test]
    fn pacer_rests_in_proportion() {
        let mut p = Pacer::new(1.0);
        std::thread::sleep(Duration::from_millis(20));
        p.chunk_done();
        assert!(p.rested >= Duration::from_millis(20), "{:?}", p.rested);
        // A chunk that took long (it waited) rests at most rest x MAX_CHUNK.
        let mut long = Pacer::new(0.5);
        std::thread::sleep(MAX_CHUNK * 2);
        long.chunk_done();
        assert_eq!(long.rested, MAX_CHUNK / 2);
        let mut q = Pacer::new(0.0);
        std::thread::sleep(Duration::from_millis(5));
        q.chunk_done();
        assert_eq!(q.rested, Duration::ZERO);
    }
}
