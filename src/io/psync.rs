//! The psync engine: `pread`/`pwrite`, a batch split over a few threads.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use super::{check_extents, AlignedBuf, EngineFile, IoEngine, IoFailure};

/// pread/pwrite on up to `threads` scoped threads per batch.
pub(crate) struct PsyncEngine {
    f: EngineFile,
    threads: usize,
}

impl PsyncEngine {
    pub(crate) fn new(file: File, direct: bool, threads: usize) -> PsyncEngine {
        PsyncEngine {
            f: EngineFile::new(file, direct),
            threads: threads.max(1),
        }
    }

    /// Run `op` over every (offset, chunk) pair, split over the threads.
    fn run<'b, B, F>(&self, offsets: &[u64], chunks: Vec<B>, op: F) -> Result<(), IoFailure>
    where
        B: Send + 'b,
        F: Fn(u64, B, &mut Vec<Duration>) -> Result<(), IoFailure> + Sync,
    {
        let n = offsets.len();
        let threads = self.threads.min(n);
        let mut lat = Vec::new();
        if threads <= 1 {
            for (off, c) in offsets.iter().zip(chunks) {
                op(*off, c, &mut lat)?;
            }
            self.f.read_latency().record_all(&lat);
            return Ok(());
        }
        let per = n.div_ceil(threads);
        let mut work: Vec<Vec<(u64, B)>> = (0..threads).map(|_| Vec::with_capacity(per)).collect();
        for (i, (off, c)) in offsets.iter().zip(chunks).enumerate() {
            work[i / per].push((*off, c));
        }
        let results: Vec<(Result<(), IoFailure>, Vec<Duration>)> = std::thread::scope(|s| {
            let handles: Vec<_> = work
                .into_iter()
                .map(|items| {
                    let op = &op;
                    s.spawn(move || {
                        let mut lat = Vec::with_capacity(items.len());
                        for (off, c) in items {
                            if let Err(e) = op(off, c, &mut lat) {
                                return (Err(e), lat);
                            }
                        }
                        (Ok(()), lat)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("psync worker does not panic"))
                .collect()
        });
        let mut first_err = None;
        for (r, l) in results {
            self.f.read_latency().record_all(&l);
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

fn read_full(file: &File, mut off: u64, mut buf: &mut [u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match file.read_at(buf, off) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "read past end of file",
                ))
            }
            Ok(n) => {
                buf = &mut buf[n..];
                off += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl IoEngine for PsyncEngine {
    fn read_extents(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
    ) -> Result<(), IoFailure> {
        check_extents(offsets, len, buf.len());
        let chunks: Vec<&mut [u8]> = buf
            .as_mut_slice()
            .chunks_mut(len)
            .take(offsets.len())
            .collect();
        let file = self.f.file();
        self.run(offsets, chunks, |off, chunk, lat| {
            let t = Instant::now();
            read_full(file, off, chunk).map_err(|error| IoFailure {
                op: "read",
                offset: off,
                error,
            })?;
            lat.push(t.elapsed());
            Ok(())
        })
    }

    fn write_extents(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &AlignedBuf,
    ) -> Result<(), IoFailure> {
        check_extents(offsets, len, buf.len());
        let chunks: Vec<&[u8]> = buf.as_slice().chunks(len).take(offsets.len()).collect();
        let file = self.f.file();
        self.run(offsets, chunks, |off, chunk, _| {
            file.write_all_at(chunk, off).map_err(|error| IoFailure {
                op: "write",
                offset: off,
                error,
            })
        })
    }

    fn name(&self) -> String {
        "psync".into()
    }

    fn file(&self) -> &EngineFile {
        &self.f
    }
}
