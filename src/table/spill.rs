//! A background pass's one walk of the log: the live rows of a table's
//! pass blocks, spilled to a file per range of ids.
//!
//! A pass writes a table's logged rows home a range of ids at a time, in
//! place order, holding at most `SCAN_BYTES` of rows (`store/merger.rs`).
//! Read straight from the log, each range is a walk of every block of the
//! pass: a table whose live rows need twenty ranges reads the pass's
//! blocks twenty times. Instead, one walk reads them once and appends
//! each live row, with its id, its block and a CRC, to its range's spill
//! file (`merge-spill-<table>-<range>.tmp` in the store directory, direct
//! I/O where the file system allows it); each range then reads its own
//! file back, sequentially. A spill is a hint, never the only copy: a
//! record that fails its CRC, a row missing from its file, or a spill
//! file that cannot be written or read sends that part of the pass back
//! to reading the log, and a row is written home only if the log map
//! still names the block its record came from
//! ([`Table::merge_chunk_from`]). The files are removed when the pass is
//! done with them, and by the next open after a crash.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::*;
use crate::files::MERGE_SPILL_PREFIX;

/// Most bytes a range's file buffers before writing (a multiple of 4096):
/// the pass's buffer bytes shared among its ranges, between
/// [`SPILL_BUF_MIN`] and this.
pub(crate) const SPILL_BUF: usize = 1 << 20;
/// Fewest bytes a range's file buffers before writing.
pub(crate) const SPILL_BUF_MIN: usize = 64 << 10;

/// Bytes of a spill file read back at a time (a multiple of 4096).
const SPILL_READ: usize = 4 << 20;

/// Bytes of a record before the row: id (u64), block (u32), CRC (u32).
const RECORD_HEADER: usize = 16;

/// The spill files of one table's pass, one per range of ids.
pub(crate) struct PassSpill {
    files: Vec<SpillFile>,
}

struct SpillFile {
    path: PathBuf,
    file: File,
    /// Records not yet written: `buf[..used]`.
    buf: AlignedBuf,
    used: usize,
    /// Bytes written to the file so far (whole 4 KiB blocks).
    written: u64,
    /// Bytes of records in the file once finished (the last block is
    /// padded with zeros).
    len: u64,
}

/// Remove every spill file in `dir` (a pass a crash cut short left them): every open and create does, whether or not it starts the merge thread.
pub(crate) fn remove_spills(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(MERGE_SPILL_PREFIX) && n.ends_with(".tmp"))
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The CRC of a record: its id, block and row.
fn record_crc(id: u64, block: u32, row: &[u8]) -> u32 {
    let c = crc32c::crc32c(&id.to_le_bytes());
    let c = crc32c::crc32c_append(c, &block.to_le_bytes());
    crc32c::crc32c_append(c, row)
}

impl SpillFile {
    fn create(path: PathBuf, buf_bytes: usize) -> io::Result<SpillFile> {
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(true).create(true).truncate(true);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(&path)
        };
        // Direct I/O keeps the spill out of the page cache; a file system
        // without it (tmpfs) takes buffered writes.
        let file = open(true).or_else(|_| open(false))?;
        Ok(SpillFile {
            path,
            file,
            buf: AlignedBuf::new(buf_bytes.clamp(SPILL_BUF_MIN, SPILL_BUF)),
            used: 0,
            written: 0,
            len: 0,
        })
    }

    fn push(&mut self, id: u64, block: u32, row: &[u8]) -> io::Result<u64> {
        let n = RECORD_HEADER + row.len();
        let mut wrote = 0;
        if self.used + n > self.buf.len() {
            wrote = self.flush(false)?;
        }
        if self.used + n > self.buf.len() {
            // A row larger than the buffer: grow it (contents kept).
            let mut b = AlignedBuf::new(self.used + n);
            b.as_mut_slice()[..self.used].copy_from_slice(&self.buf.as_slice()[..self.used]);
            self.buf = b;
        }
        let at = &mut self.buf.as_mut_slice()[self.used..self.used + n];
        at[..8].copy_from_slice(&id.to_le_bytes());
        at[8..12].copy_from_slice(&block.to_le_bytes());
        at[12..16].copy_from_slice(&record_crc(id, block, row).to_le_bytes());
        at[16..].copy_from_slice(row);
        self.used += n;
        self.len += n as u64;
        Ok(wrote)
    }

    /// Write the buffer's whole blocks (all of it, zero-padded, with
    /// `last`), keeping the rest at its start. Returns the bytes written.
    fn flush(&mut self, last: bool) -> io::Result<u64> {
        let whole = if last {
            self.used.next_multiple_of(BLOCK_SIZE)
        } else {
            self.used / BLOCK_SIZE * BLOCK_SIZE
        };
        if whole == 0 {
            return Ok(0);
        }
        if whole > self.used {
            self.buf.as_mut_slice()[self.used..whole].fill(0);
        }
        self.file
            .write_all_at(&self.buf.as_slice()[..whole], self.written)?;
        self.written += whole as u64;
        let rest = self.used.saturating_sub(whole);
        self.buf.as_mut_slice().copy_within(whole..whole + rest, 0);
        self.used = rest;
        Ok(whole as u64)
    }
}

impl SpillFile {
    /// Each record of rows of `rb` bytes, in order: `each(id, block,
    /// row)`, reading `SPILL_READ` bytes at a time with `rest` after each.
    /// Returns the bytes read, or `None` at a record that fails its CRC,
    /// a cut record, or a read that fails.
    fn records(
        &self,
        rb: usize,
        rest: &mut dyn FnMut(std::time::Duration),
        each: &mut dyn FnMut(u64, u32, &[u8]),
    ) -> Option<u64> {
        let rec = RECORD_HEADER + rb;
        let mut buf = AlignedBuf::new(SPILL_READ);
        // A record cut by a read's end, carried to the next.
        let mut carry: Vec<u8> = Vec::with_capacity(rec);
        let take = |r: &[u8], each: &mut dyn FnMut(u64, u32, &[u8])| -> Option<()> {
            let id = u64::from_le_bytes(r[..8].try_into().expect("8 bytes"));
            let b = u32::from_le_bytes(r[8..12].try_into().expect("4 bytes"));
            let crc = u32::from_le_bytes(r[12..16].try_into().expect("4 bytes"));
            let row = &r[RECORD_HEADER..];
            (record_crc(id, b, row) == crc).then(|| each(id, b, row))
        };
        let (mut at, mut left) = (0u64, self.len);
        while left > 0 {
            let began = std::time::Instant::now();
            let want = (self.written - at).min(SPILL_READ as u64) as usize;
            if want == 0 {
                return None;
            }
            self.file
                .read_exact_at(&mut buf.as_mut_slice()[..want], at)
                .ok()?;
            at += want as u64;
            let mut data = &buf.as_slice()[..want.min(left as usize)];
            left -= data.len() as u64;
            if !carry.is_empty() {
                let need = (rec - carry.len()).min(data.len());
                carry.extend_from_slice(&data[..need]);
                data = &data[need..];
                if carry.len() == rec {
                    take(&carry, each)?;
                    carry.clear();
                }
            }
            let whole = data.len() / rec * rec;
            for r in data[..whole].chunks_exact(rec) {
                take(r, each)?;
            }
            carry.extend_from_slice(&data[whole..]);
            rest(began.elapsed());
        }
        carry.is_empty().then_some(at)
    }
}

/// Where a pass spills, and how much each range's file buffers.
#[derive(Clone, Copy)]
pub(crate) struct SpillTo<'a> {
    /// The store's directory.
    pub dir: &'a Path,
    /// About this many bytes a file (see [`SPILL_BUF`]).
    pub buf_bytes: usize,
}

impl Drop for PassSpill {
    fn drop(&mut self) {
        for f in &self.files {
            let _ = std::fs::remove_file(&f.path);
        }
    }
}

impl Table {
    /// The live rows of the pass's blocks (`span`), spilled to a file per
    /// range of `ranges` in one walk of the log, 4 MiB at a time under the
    /// read gate, with `rest` after each step; each file buffers about
    /// `buf_bytes` (see [`SPILL_BUF`]). `None` when the log moved
    /// (`moved`) or a spill file could not be written (the pass then reads
    /// the log per range). An error is the log's: a read that failed.
    pub(crate) fn spill_logged_in_span(
        &self,
        ssd: &Ssd,
        span: LogSpan,
        ranges: &[std::ops::Range<u64>],
        to: SpillTo<'_>,
        moved: &dyn Fn() -> bool,
        rest: &mut dyn FnMut(std::time::Duration),
    ) -> Result<Option<PassSpill>> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Ok(None);
        };
        // Dropped on any way out, removing the files made so far.
        let mut spill = PassSpill {
            files: Vec::with_capacity(ranges.len()),
        };
        for k in 0..ranges.len() {
            let path = to
                .dir
                .join(format!("{MERGE_SPILL_PREFIX}{}-{k}.tmp", self.index));
            match SpillFile::create(path, to.buf_bytes) {
                Ok(f) => spill.files.push(f),
                Err(_) => return Ok(None),
            }
        }
        let c = &self.counters;
        let mut buf = AlignedBuf::new(BLOCK_SIZE);
        // (shard, id, block, the row's offset in `buf`) of a window's rows.
        let mut rows: Vec<(u32, u64, u32, u32)> = Vec::new();
        for (at, n) in span.windows(LOG_WINDOW_BLOCKS) {
            {
                let began = std::time::Instant::now();
                if !self.read_log_window(ssd, at, n, &mut buf, moved)? {
                    return Ok(None);
                }
                rows.clear();
                let base = buf.as_slice().as_ptr() as usize;
                for i in 0..n as usize {
                    let b = (at + i as u64) as u32;
                    let raw = &buf.as_slice()[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
                    // Another table's block, or one that fails its checks
                    // (its rows, if any are live, are read from the log by
                    // their range, which reports it).
                    let Ok(lb) = self.checked_log_block(ssd, b, raw) else {
                        continue;
                    };
                    for (k, &id) in lb.ids.iter().enumerate() {
                        let s = self.shard_of(id, shards.len()) as u32;
                        let off = (lb.row(k).as_ptr() as usize - base) as u32;
                        rows.push((s, id, b, off));
                    }
                }
                // Live rows only: each shard locked once a window.
                rows.sort_unstable_by_key(|r| r.0);
                let mut wrote = 0u64;
                let mut failed = false;
                for same in rows.chunk_by(|a, b| a.0 == b.0) {
                    let live: Vec<(u64, u32, u32)> = {
                        let sh = shards[same[0].0 as usize].lock();
                        same.iter()
                            .filter(|r| sh.logged_at(r.1) == r.2)
                            .map(|r| (r.1, r.2, r.3))
                            .collect()
                    };
                    for (id, b, off) in live {
                        let k = ranges.partition_point(|r| r.end <= id);
                        let Some(f) = spill.files.get_mut(k) else {
                            continue;
                        };
                        let row = &buf.as_slice()[off as usize..off as usize + self.row_bytes];
                        match f.push(id, b, row) {
                            Ok(w) => wrote += w,
                            Err(_) => failed = true,
                        }
                    }
                }
                c.ssd_bytes_written.fetch_add(wrote, Ordering::Relaxed);
                if failed {
                    return Ok(None);
                }
                rest(began.elapsed());
            }
        }
        let mut wrote = 0u64;
        for f in &mut spill.files {
            match f.flush(true) {
                Ok(w) => wrote += w,
                Err(_) => return Ok(None),
            }
            // Written out: the ranges read their files back with a buffer
            // of their own, so the write buffers (1 MiB a range) go now.
            f.buf = AlignedBuf::new(BLOCK_SIZE);
        }
        c.ssd_bytes_written.fetch_add(wrote, Ordering::Relaxed);
        Ok(Some(spill))
    }

    /// The bytes of `part`'s rows (entries of range `k`, in place order,
    /// as [`Table::logged_in_place_order`] lists them) from range `k`'s
    /// spill file, in `part`'s order, reading it `SPILL_READ` bytes at a
    /// time with `rest` after each. `None` when some row is not there
    /// with the same block, a record fails its CRC, or the file cannot be
    /// read: the caller then reads the log.
    pub(crate) fn read_spilled(
        &self,
        spill: &PassSpill,
        k: usize,
        part: &[(u64, u32)],
        rest: &mut dyn FnMut(std::time::Duration),
    ) -> Option<Vec<u8>> {
        let f = spill.files.get(k)?;
        let rb = self.row_bytes;
        let layout = self.entry.layout;
        let mut out = vec![0u8; part.len() * rb];
        let mut got = vec![false; part.len()];
        let mut found = 0usize;
        let read = f.records(rb, rest, &mut |id, b, row| {
            let key = layout.locate(id);
            if let Ok(i) = part.binary_search_by_key(&key, |&(id, _)| layout.locate(id)) {
                if part[i] == (id, b) && !got[i] {
                    out[i * rb..(i + 1) * rb].copy_from_slice(row);
                    got[i] = true;
                    found += 1;
                }
            }
        });
        if let Some(bytes) = read {
            self.counters
                .ssd_bytes_read
                .fetch_add(bytes, Ordering::Relaxed);
        }
        if read.is_none() || found != part.len() {
            return None;
        }
        self.counters
            .log_rows_spilled
            .fetch_add(found as u64, Ordering::Relaxed);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spill file gives back every record pushed, in order, across its
    /// write buffer's and its reads' ends (rows of an odd size), and
    /// refuses (None) once one byte of a record is changed on disk, or
    /// when the file is cut short.
    #[test]
    fn a_spill_file_gives_back_its_records_and_refuses_a_changed_one() {
        let dir = tempfile::tempdir().unwrap();
        let rb = 200;
        let n = 30_000u64; // 6.5 MB: past two reads of 4 MiB and six buffers
        let row = |i: u64| -> Vec<u8> { (0..rb).map(|k| (i as usize * 7 + k) as u8).collect() };
        let mut f = SpillFile::create(dir.path().join("x.tmp"), SPILL_BUF).unwrap();
        let mut wrote = 0;
        for i in 0..n {
            wrote += f.push(i * 3, (i % 1000) as u32, &row(i)).unwrap();
        }
        wrote += f.flush(true).unwrap();
        assert_eq!(wrote, f.written);
        assert_eq!(f.len, n * (RECORD_HEADER + rb) as u64);
        assert_eq!(f.written, f.len.next_multiple_of(4096));
        let mut next = 0u64;
        let mut rests = 0;
        let read = f.records(rb, &mut |_| rests += 1, &mut |id, b, r| {
            assert_eq!((id, b), (next * 3, (next % 1000) as u32));
            assert_eq!(r, &row(next)[..]);
            next += 1;
        });
        assert_eq!(read, Some(f.written));
        assert_eq!((next, rests), (n, 2));
        // One byte of the 20,000th record's row changed on disk.
        let at = 20_000 * (RECORD_HEADER + rb) as u64 + RECORD_HEADER as u64 + 5;
        let mut blk = AlignedBuf::new(4096);
        f.file
            .read_exact_at(blk.as_mut_slice(), at / 4096 * 4096)
            .unwrap();
        blk.as_mut_slice()[(at % 4096) as usize] ^= 0x40;
        f.file
            .write_all_at(blk.as_slice(), at / 4096 * 4096)
            .unwrap();
        let mut seen = 0u64;
        assert_eq!(f.records(rb, &mut |_| {}, &mut |_, _, _| seen += 1), None);
        assert_eq!(seen, 20_000, "the records before the changed one");
        // Cut short: a length past what was written.
        blk.as_mut_slice()[(at % 4096) as usize] ^= 0x40;
        f.file
            .write_all_at(blk.as_slice(), at / 4096 * 4096)
            .unwrap();
        assert!(f.records(rb, &mut |_| {}, &mut |_, _, _| {}).is_some());
        f.len += 4096;
        assert_eq!(f.records(rb, &mut |_| {}, &mut |_, _, _| {}), None);
    }
}
