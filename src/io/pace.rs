//! Pacing for writes that run beside training (`[ssd] checkpoint_rest`):
//! after each chunk, rest a multiple of the time the chunk took, so that
//! training's reads keep a share of the disk; and a file writer that
//! bounds how much written data the kernel holds at once.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most of a chunk's time a rest is proportional to: a chunk that
/// took longer mostly waited (for a lock the background merge held, for a
/// disk another writer filled), and resting `rest` times that wait would
/// only make the checkpoint longer.
const MAX_CHUNK: Duration = Duration::from_millis(100);

/// The quiet time owed to training by every writer that runs beside it
/// (a snapshot checkpoint's flush, hot rows and punches; the background
/// merge), as one budget: each writer, after a chunk, owes its rest, and
/// waits until the disk has had every rest owed so far, its own and the
/// others'. Two writers that each rest as long as they write then still
/// leave training half of the disk together, where resting on their own
/// they could take all of it between them.
#[derive(Debug, Default)]
pub(crate) struct DiskShare {
    /// When the rests owed so far end (`None`: nothing owed yet).
    free_at: parking_lot::Mutex<Option<Instant>>,
}

impl DiskShare {
    /// A chunk of work just ended, owing `rest` of quiet time: add it to
    /// the rests owed, and sleep until they have all passed (`all`), or
    /// for this rest alone (a writer that must catch up: the others then
    /// wait for its rest too). Returns the time slept.
    pub(crate) fn rest(&self, rest: Duration, all: bool) -> Duration {
        let began = Instant::now();
        let mut until = {
            let mut f = self.free_at.lock();
            let u = f.map_or(began, |t| t.max(began)) + rest;
            *f = Some(u);
            u
        };
        if !all {
            std::thread::sleep(rest);
            return began.elapsed();
        }
        // Another writer's chunk may end while this one sleeps, owing more:
        // wait for that too, so that no writer starts right after another
        // one's chunk.
        loop {
            let now = Instant::now();
            if now >= until {
                return began.elapsed();
            }
            std::thread::sleep(until - now);
            until = self.free_at.lock().unwrap_or(until);
        }
    }
}

/// Rests after each chunk of work for `rest` times as long as the chunk
/// took (measured from the last rest, or from creation; at most
/// [`MAX_CHUNK`] of it), sharing its rests with other writers through a
/// [`DiskShare`] if it has one.
#[derive(Debug)]
pub(crate) struct Pacer {
    rest: f64,
    since: Instant,
    share: Option<Arc<DiskShare>>,
    /// Time spent resting so far.
    pub(crate) rested: Duration,
}

impl Pacer {
    /// A pacer resting `rest` times each chunk's time (0: never).
    pub(crate) fn new(rest: f64) -> Pacer {
        Pacer {
            rest: if rest.is_finite() { rest.max(0.0) } else { 0.0 },
            since: Instant::now(),
            share: None,
            rested: Duration::ZERO,
        }
    }

    /// A pacer resting `rest` times each chunk's time, and as long as
    /// `share` says the other writers' rests still last (0: never rests,
    /// not even for the others).
    pub(crate) fn shared(rest: f64, share: Arc<DiskShare>) -> Pacer {
        let mut p = Pacer::new(rest);
        if p.rest > 0.0 {
            p.share = Some(share);
        }
        p
    }

    /// A chunk ended: rest for its share.
    pub(crate) fn chunk_done(&mut self) {
        if self.rest > 0.0 {
            let d = self.since.elapsed().min(MAX_CHUNK).mul_f64(self.rest);
            match &self.share {
                Some(s) => self.rested += s.rest(d, true),
                None => {
                    std::thread::sleep(d);
                    self.rested += d;
                }
            }
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
    /// bytes, resting after each as `pacer` says.
    pub(crate) fn new(file: File, chunk: u64, pacer: Pacer) -> PacedFile {
        PacedFile {
            file,
            chunk: chunk.max(1),
            written: 0,
            pushed: 0,
            pacer,
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
        let mut f = PacedFile::new(File::create(&path).unwrap(), 1000, Pacer::new(0.0));
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

    /// A writer waits for the rests another writer owes, not only its own;
    /// one catching up (`all` false) sleeps only its own, and the next
    /// writer waits for that too.
    #[test]
    fn shared_rests_add_up() {
        let share = Arc::new(DiskShare::default());
        let t = Instant::now();
        let other = {
            let share = Arc::clone(&share);
            std::thread::spawn(move || share.rest(Duration::from_millis(60), true))
        };
        // Once the other writer's rest is owed, a rest of nothing waits for it.
        while share.free_at.lock().is_none() {
            std::thread::yield_now();
        }
        share.rest(Duration::ZERO, true);
        assert!(
            t.elapsed() >= Duration::from_millis(60),
            "{:?}",
            t.elapsed()
        );
        assert!(other.join().unwrap() >= Duration::from_millis(60));

        // Catching up: sleeps its own 5 ms, not the 10 s another owes...
        let share = DiskShare::default();
        let t = Instant::now();
        *share.free_at.lock() = Some(t + Duration::from_secs(10));
        share.rest(Duration::from_millis(5), false);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        // ...but owes it after them.
        let owed = share.free_at.lock().unwrap() - t;
        assert!(owed >= Duration::from_millis(10_005), "{owed:?}");

        // A shared pacer at rest 0 never waits for the others.
        let share = Arc::new(DiskShare::default());
        *share.free_at.lock() = Some(Instant::now() + Duration::from_secs(10));
        let mut p = Pacer::shared(0.0, Arc::clone(&share));
        let t = Instant::now();
        p.chunk_done();
        assert!(t.elapsed() < Duration::from_secs(5));
        // At rest 1 it does.
        let mut p = Pacer::shared(1.0, Arc::clone(&share));
        let t = Instant::now();
        *share.free_at.lock() = Some(t + Duration::from_millis(40));
        p.chunk_done();
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
    }
}
