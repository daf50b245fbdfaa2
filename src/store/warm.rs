//! Warm restarts: the hot set and hot rows a checkpoint writes, and what
//! an open does with them.
//!
//! At every checkpoint the store writes `hot.emb`: for each cached table,
//! the ids resident in each cache tier (`embtier_format::hotset`); and,
//! with `[ssd] warm_rows` (the default), `hot-rows.emb`: those rows' bytes
//! (`embtier_format::hotrows`), lowest tier first, right after its commit:
//! a checkpoint that stops training holds the gate while it writes them,
//! so every clean cached row holds the committed bytes; a snapshot
//! checkpoint writes them after its window closed, when every clean
//! cached row not inserted since (marked *fresh*) does. Only those rows
//! are written.
//!
//! An open whose committed generation is the hot rows' puts them back
//! before it returns, reading the file in order: a 512 MiB cache comes
//! back at the file system's sequential read speed, not one random read
//! per row. Beside it, the row log's restore puts back the hot set's rows
//! whose newest copy it reads (`restore_row_log`). Then it reads the hot
//! set's rows that are not in memory (without hot rows of that
//! generation, or after a chunk that fails its checks, those not in the
//! log; and those a snapshot checkpoint left out because training updated
//! them after its moment and that are not in the log; none, and no
//! thread, when the two held every row the hot set names) back on a
//! background thread
//! through the ordinary miss path: sorted by place, so the reads sweep
//! the data file in order, lowest tier first so that the first tier ends
//! holding what it held. Those rows come from the data file after
//! recovery, so a stale hot set (one a crash left from an earlier
//! checkpoint) costs only time.

use std::sync::atomic::{AtomicBool, Ordering};

use std::io::{Read, Write};

use embtier_format::hotrows::{self, Chunk, CHUNK_HEADER, FILE_HEADER};
use embtier_format::hotset::{HotSet, HotTable};

use super::*;
use crate::files::{HOT_FILE, HOT_ROWS_FILE};
use crate::io::pace::PacedFile;

/// Ids read back per batch at most: one call's worth of reads in flight,
/// and a bound on how long a checkpoint waits for the warm-up's gate.
const WARM_BATCH: usize = 1 << 13;

/// Places (block groups, or row-log blocks) a batch reads at most: a bound
/// on its read buffer. The plan leaves out the rows already held, so where
/// the ids are far apart each is a read of its own: 8192 of them filled
/// 32 MiB, and a SIGKILLed W5's restart peaked 60 MB higher than with
/// 2048 (`docs/benchmarks.md`, "The warm read-back's buffers"). Dense ids
/// share their places, and a batch of them stays long enough for its
/// reads to be merged into windows.
const WARM_PLACES: usize = 1 << 11;

/// `list` (sorted by `place`) cut into batches of at most [`WARM_BATCH`]
/// entries and [`WARM_PLACES`] distinct places.
fn warm_batches(list: &[u64], place: impl Fn(u64) -> u64) -> Vec<&[u64]> {
    let mut out = Vec::new();
    let (mut start, mut places, mut last) = (0, 0, None);
    for (i, &x) in list.iter().enumerate() {
        let p = place(x);
        if last != Some(p) {
            if places == WARM_PLACES {
                out.push(&list[start..i]);
                (start, places) = (i, 0);
            }
            places += 1;
            last = Some(p);
        }
        if i + 1 - start == WARM_BATCH {
            out.push(&list[start..=i]);
            (start, places, last) = (i + 1, 0, None);
        }
    }
    if start < list.len() {
        out.push(&list[start..]);
    }
    out
}

/// Payload bytes of a hot-rows chunk the writer aims at.
const ROWS_CHUNK: usize = 1 << 20;

/// Bytes of the hot-rows file written out (and waited for) at a time,
/// with `[ssd] checkpoint_rest`'s rest after each.
const HOT_ROWS_PUSH: u64 = 8 << 20;

/// The background read-back of a hot set.
pub(super) struct Warm {
    cancel: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<Result<u64>>>,
    /// The outcome once joined (an error as its text: the first wait
    /// returned the error itself).
    done: Option<std::result::Result<u64, String>>,
}

impl Warm {
    /// Wait for the read-back; the rows it read.
    fn join(&mut self) -> Result<u64> {
        if let Some(h) = self.handle.take() {
            self.done = Some(match h.join() {
                Ok(Ok(n)) => Ok(n),
                // The first wait gets the read's own error (a
                // `CorruptError` with its file, offset, table and row);
                // later ones its text.
                Ok(Err(e)) => {
                    self.done = Some(Err(e.to_string()));
                    return Err(e);
                }
                Err(_) => Err("the warm-up thread panicked".into()),
            });
        }
        match &self.done {
            Some(Ok(n)) => Ok(*n),
            Some(Err(reason)) => Err(Error::Warm {
                reason: reason.clone(),
            }),
            None => Ok(0),
        }
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        let _ = self.join();
    }
}

impl Store {
    /// Write the hot set of this checkpoint (a hint: a failure is reported
    /// as 0 rows, and the previous file, if any, is removed so that it
    /// cannot outlive many checkpoints). Returns the ids written.
    pub(super) fn write_hot_set(&self, generation: u64) -> u64 {
        let tiers = self.config.tiers.len();
        let mut rows = 0;
        let tables = self
            .tables
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.is_pinned())
            .map(|(i, t)| {
                let ids = t.resident_ids(tiers);
                rows += ids.iter().map(|v| v.len() as u64).sum::<u64>();
                HotTable {
                    table: i as u32,
                    tiers: ids,
                }
            })
            .collect();
        let bytes = HotSet { generation, tables }.encode();
        let path = self.dir.join(HOT_FILE);
        let tmp = self.dir.join(format!("{HOT_FILE}.tmp"));
        // No fsync: a hot set lost or torn by a crash is refused by its
        // CRC, and the store starts cold.
        match fs::write(&tmp, &bytes).and_then(|()| fs::rename(&tmp, &path)) {
            Ok(()) => rows,
            Err(_) => {
                let _ = fs::remove_file(&tmp);
                let _ = fs::remove_file(&path);
                0
            }
        }
    }

    /// Write the hot rows of this checkpoint (`[ssd] warm_rows`): the bytes
    /// of every clean row of every cache tier, lowest tier first, so that
    /// an open that puts them back in file order leaves each tier holding
    /// its own rows. Called right after the commit, under the gate or
    /// after a snapshot checkpoint's window closed: every clean cached row
    /// not marked fresh then holds committed bytes. A hint: a
    /// failure removes the file (an open then reads the ids back) and is
    /// reported as 0 bytes. Returns the bytes written.
    pub(super) fn write_hot_rows(&self, generation: u64, rest: f64) -> u64 {
        let path = self.dir.join(HOT_ROWS_FILE);
        let tmp = self.dir.join(format!("{HOT_ROWS_FILE}.tmp"));
        if !self.config.ssd.warm_rows {
            let _ = fs::remove_file(&path);
            return 0;
        }
        // No fsync, as for the hot set: each chunk carries the generation
        // and a CRC, so what a crash tears or leaves stale is refused.
        match self
            .hot_rows_to(&tmp, generation, rest)
            .and_then(|n| fs::rename(&tmp, &path).map(|()| n))
        {
            Ok(n) => n,
            Err(_) => {
                let _ = fs::remove_file(&tmp);
                let _ = fs::remove_file(&path);
                0
            }
        }
    }

    fn hot_rows_to(&self, tmp: &Path, generation: u64, rest: f64) -> std::io::Result<u64> {
        let file = PacedFile::new(fs::File::create(tmp)?, HOT_ROWS_PUSH, self.ssd.pacer(rest));
        let mut f = std::io::BufWriter::with_capacity(4 << 20, file);
        f.write_all(&hotrows::encode_file_header(generation))?;
        let mut bytes = FILE_HEADER as u64;
        let mut chunks = 0u32;
        let mut id_bytes: Vec<u8> = Vec::new();
        for tier in (0..self.config.tiers.len()).rev() {
            for (i, t) in self.tables.iter().enumerate() {
                if t.is_pinned() {
                    continue;
                }
                let per = ROWS_CHUNK / (8 + t.row_bytes);
                t.clean_rows_in(tier, per, &mut |ids, rows| {
                    id_bytes.clear();
                    id_bytes.extend(ids.iter().flat_map(|id| id.to_le_bytes()));
                    let c = Chunk {
                        generation,
                        table: i as u32,
                        tier: tier as u32,
                        row_bytes: t.row_bytes as u32,
                        count: ids.len() as u32,
                        end: false,
                    };
                    f.write_all(&c.encode(&[&id_bytes, rows]))?;
                    f.write_all(&id_bytes)?;
                    f.write_all(rows)?;
                    bytes += (CHUNK_HEADER + id_bytes.len() + rows.len()) as u64;
                    chunks += 1;
                    Ok(())
                })?;
            }
        }
        let end = Chunk {
            generation,
            table: chunks,
            tier: 0,
            row_bytes: 0,
            count: 0,
            end: true,
        };
        f.write_all(&end.encode(&[]))?;
        f.flush()?;
        Ok(bytes + CHUNK_HEADER as u64)
    }

    /// Put back the hot rows of the committed checkpoint, if `hot-rows.emb`
    /// is of that generation, reading it in order. Every chunk is checked
    /// (generation, bounds, CRC) before its rows go in; the first that
    /// fails ends the read. Returns the rows put back. The open runs it
    /// beside the row log's restore, which touches other state (the log
    /// maps, the pinned tables).
    pub(super) fn load_hot_rows(&self) -> u64 {
        if !self.config.ssd.warm_rows {
            return 0;
        }
        let Ok(file) = fs::File::open(self.dir.join(HOT_ROWS_FILE)) else {
            return 0;
        };
        let mut r = std::io::BufReader::with_capacity(4 << 20, file);
        let mut h = [0u8; FILE_HEADER];
        let generation = match r
            .read_exact(&mut h)
            .map(|()| hotrows::decode_file_header(&h))
        {
            Ok(Ok(g)) if g == self.generation() => g,
            _ => return 0,
        };
        let tiers = self.config.tiers.len();
        let (mut put, mut at) = (0u64, FILE_HEADER as u64);
        let mut ids: Vec<u64> = Vec::new();
        let mut payload: Vec<u8> = Vec::new();
        loop {
            let mut ch = [0u8; CHUNK_HEADER];
            if r.read_exact(&mut ch).is_err() {
                return put; // cut short
            }
            let c = match Chunk::decode(&ch, at) {
                Ok(c) if c.generation == generation => c,
                _ => return put,
            };
            payload.resize(c.payload_bytes() as usize, 0);
            if r.read_exact(&mut payload).is_err() || Chunk::check(&ch, &payload, at).is_err() {
                return put;
            }
            if c.end {
                return put;
            }
            at += (CHUNK_HEADER + payload.len()) as u64;
            let Some(t) = self.tables.get(c.table as usize) else {
                continue;
            };
            if t.is_pinned() || c.row_bytes as usize != t.row_bytes || c.tier as usize >= tiers {
                continue;
            }
            let n = c.count as usize;
            ids.clear();
            ids.extend(
                payload[..8 * n]
                    .chunks_exact(8)
                    .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))),
            );
            t.close_fill();
            put += t.install_rows(&ids, &payload[8 * n..]);
        }
    }

    /// Record a warm-up already done: `rows` put back.
    pub(super) fn set_warm_done(&self, rows: u64) {
        *self.warm.lock() = Some(Warm {
            cancel: Arc::new(AtomicBool::new(false)),
            handle: None,
            done: Some(Ok(rows)),
        });
    }

    /// The hot set the last checkpoint wrote (`hot.emb`), as the ids to
    /// bring back per table index (`Store::open` hands them to the row
    /// log's restore, then to [`Store::read_hot_set`]): lowest tier first,
    /// so that the first tier ends with its own rows; pinned tables, ids
    /// out of range and tiers the config no longer has are left out. Empty
    /// without the file; a file that fails its checks is a hint lost, not
    /// an error.
    pub(super) fn hot_plan(&self) -> Result<Vec<(usize, Vec<u64>)>> {
        let path = self.dir.join(HOT_FILE);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&path, "read", e)),
        };
        let Ok(hot) = HotSet::decode(&bytes) else {
            return Ok(Vec::new());
        };
        let tiers = self.config.tiers.len();
        let mut plan = Vec::new();
        for ht in hot.tables {
            let Some(t) = self.tables.get(ht.table as usize) else {
                continue;
            };
            if t.is_pinned() {
                continue;
            }
            let mut ids: Vec<u64> = Vec::new();
            for tier in ht.tiers.iter().take(tiers).rev() {
                ids.extend(tier.iter().copied().filter(|&id| id < t.entry.rows));
            }
            if !ids.is_empty() {
                plan.push((ht.table as usize, ids));
            }
        }
        Ok(plan)
    }

    /// Read the rows of `plan` ([`Store::hot_plan`]) back from the data
    /// file on a background thread (`already`: rows the hot rows and the
    /// row log's restore put back first, counted in the result; rows in
    /// memory are not read again): the rows those did not hold (all of
    /// them without the file, those after a bad chunk, and those a
    /// snapshot checkpoint left out because training updated them after
    /// its moment and whose newest copy is home, not in the log).
    pub(super) fn read_hot_set(&self, already: u64, plan: Vec<(usize, Vec<u64>)>) -> Result<()> {
        let plan: Vec<(Arc<Table>, Vec<u64>)> = plan
            .into_iter()
            .map(|(i, ids)| {
                let t = Arc::clone(&self.tables[i]);
                t.close_fill();
                (t, ids)
            })
            .collect();
        // The hot rows are a subset of the hot set of the same checkpoint
        // (written before them), and the log's rows put back are of it: as
        // many put back as it names means all of it is in memory (after a
        // close, every time), and a thread that would find each row held
        // is not started.
        let named: u64 = plan.iter().map(|(_, ids)| ids.len() as u64).sum();
        if plan.is_empty() || already >= named {
            self.set_warm_done(already);
            return Ok(());
        }
        let ssd = Arc::clone(&self.ssd);
        let cancel = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&cancel);
        let handle = std::thread::Builder::new()
            .name("embtier-warm".into())
            .spawn(move || {
                let mut read = already;
                for (t, mut ids) in plan {
                    // The rows in the log first, by log block, so that
                    // their reads are mostly sequential windows of the
                    // log; then the rest in id order.
                    let logged = t.split_for_warm(&mut ids);
                    let rpg = t.entry.layout.rows_per_group.max(1) as u64;
                    let batches = warm_batches(&logged, |x| x >> 32)
                        .into_iter()
                        .map(|b| (b, true))
                        .chain(
                            warm_batches(&ids, |id| id / rpg)
                                .into_iter()
                                .map(|b| (b, false)),
                        );
                    let mut unpacked = Vec::new();
                    for (batch, packed) in batches {
                        if stop.load(Ordering::Relaxed) {
                            return Ok(read);
                        }
                        let batch = if packed {
                            unpacked.clear();
                            unpacked.extend(batch.iter().map(|&x| x & u32::MAX as u64));
                            &unpacked[..]
                        } else {
                            batch
                        };
                        let _gate = ssd.read_gate();
                        // In place order within the batch: the reads
                        // sweep the file (the miss path sorts by place).
                        read += t.warm(&ssd, batch)?;
                        // Give back what the batch freed: its buffers
                        // (tens of MiB) come from glibc's heaps once it
                        // has raised its mapping threshold, and stayed
                        // resident there, batch after batch (up to 220
                        // MiB above the budget after a SIGKILLed W5).
                        crate::memory::trim();
                    }
                }
                Ok(read)
            })
            .map_err(|e| Error::io(&self.dir, "spawn warm-up thread", e))?;
        *self.warm.lock() = Some(Warm {
            cancel,
            handle: Some(handle),
            done: None,
        });
        Ok(())
    }

    /// Wait until the warm restart's read-back (started by [`Store::open`]
    /// from the hot set of the last checkpoint) has finished; returns the
    /// rows it read (0 when there was nothing to read back). The store
    /// serves lookups while it runs: waiting is only for a caller that
    /// wants a warm cache before it starts, or wants to measure it. An
    /// error is the read-back's (a failed or corrupt read): the rows
    /// concerned were not brought in, and a lookup of them reports it.
    pub fn wait_warm(&self) -> Result<u64> {
        self.check_process()?;
        match self.warm.lock().as_mut() {
            Some(w) => w.join(),
            None => Ok(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{warm_batches, WARM_BATCH, WARM_PLACES};

    /// Batches cover the list in order, each with at most `WARM_BATCH`
    /// entries and `WARM_PLACES` places, and are cut only where one of
    /// the two is full: sparse ids by places, dense ones by entries.
    #[test]
    fn warm_batches_are_bounded_by_entries_and_places() {
        for (n, per_place) in [(0u64, 1u64), (5, 1), (10_000, 1), (50_000, 37), (30_000, 3)] {
            let list: Vec<u64> = (0..n).collect();
            let place = |x: u64| x / per_place;
            let batches = warm_batches(&list, place);
            let joined: Vec<u64> = batches.iter().flat_map(|b| b.iter().copied()).collect();
            assert_eq!(joined, list, "n {n}, {per_place} a place");
            for (k, b) in batches.iter().enumerate() {
                let mut places: Vec<u64> = b.iter().map(|&x| place(x)).collect();
                places.dedup();
                assert!(b.len() <= WARM_BATCH && places.len() <= WARM_PLACES);
                if k + 1 < batches.len() {
                    // Full in one way, or the next would add a place past
                    // the limit.
                    let next = place(batches[k + 1][0]);
                    assert!(
                        b.len() == WARM_BATCH
                            || (places.len() == WARM_PLACES && next != *places.last().unwrap()),
                        "n {n}, {per_place} a place: batch {k} of {} cut early",
                        b.len()
                    );
                }
            }
            let want = match per_place {
                1 => (n as usize).div_ceil(WARM_PLACES),
                _ => (n as usize).div_ceil(WARM_BATCH.min(WARM_PLACES * per_place as usize)),
            };
            assert_eq!(batches.len(), want, "n {n}, {per_place} a place");
        }
    }
}
