//! The checkpoint protocol: an undo journal of block groups, epochs in the
//! data blocks, and a commit record written twice in the superblock.
//!
//! Between checkpoints the data file is written in place (write-backs of
//! evicted rows, and the checkpoint's own flush). Before a group is first
//! overwritten in an epoch, its old image (the last checkpoint's bytes) is
//! appended to `journal.emb` and fsynced. A checkpoint flushes every dirty
//! row, fsyncs the data file, then commits by writing the superblock with
//! the epoch it ends, to copy A then copy B, fsyncing each. Recovery at open
//! writes back the old images of every epoch after the committed one.
//! `store-format/FORMAT.md` ("Checkpoint protocol") is the specification.
//!
//! This file holds the protocol as a store runs (journaling before a write,
//! commits); `recover.rs` what open does before anything is read.

use std::fs::File;
use std::path::{Path, PathBuf};

use embtier_format::journal::{self, BatchHeader, JournalEntry, MAX_ENTRIES};
use embtier_format::{
    block_epoch, check_block, BlockState, CounterSlot, FormatError, Superblock, WrittenList,
    BLOCK_SIZE, MAX_DEAD_RANGES, SUPERBLOCK_SLOTS, TRAILER_EPOCH,
};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::io::{AlignedBuf, IoEngine};
use crate::tier::rowlog::LogCommit;

pub(crate) mod boot;
mod groups;
mod recover;
mod written;

/// Wraps the engine of a file (fault injection), given the file's path.
pub(crate) type WrapFn<'a> = dyn Fn(&Path, Box<dyn IoEngine>) -> Box<dyn IoEngine> + 'a;

pub use crate::files::JOURNAL_FILE;

/// What recovery found and did at open.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recovery {
    /// The checkpoint generation the store opened at.
    pub generation: u64,
    /// Epoch whose writes were undone (0: none).
    pub rolled_back_epoch: u64,
    /// Block groups restored from the journal.
    pub groups_restored: u64,
    /// Whether the journal ended in a batch cut short by a crash.
    pub torn_tail: bool,
    /// Epochs handed out and never committed, as inclusive ranges: a block
    /// of one of them that recovery did not undo is an error to read, at
    /// this open and every later one (see FORMAT.md, "Dead epochs").
    pub dead_epochs: Vec<(u64, u64)>,
    /// Whether this open scrubbed the data file because the dead epoch
    /// list was full (blocks read, and dead blocks found).
    pub scrubbed: Option<(u64, u64)>,
    /// Groups the last checkpoint wrote in place, whose arrival on disk is
    /// checked after open (FORMAT.md, "Written-group list"): a read of one
    /// checks it first, and a thread checks the rest in sequential reads
    /// ([`crate::Store::check_written`] waits for it).
    pub written_checked: u64,
    /// Groups of that list not checked, because the checkpoint committed
    /// in this boot of the machine (FORMAT.md, "Boot record"): no power
    /// loss or kernel crash can have lost an acknowledged write since.
    pub written_trusted: u64,
}

/// What one [`crate::Store::checkpoint`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The generation now durable (checkpoints since create).
    pub generation: u64,
    /// The epoch it committed.
    pub epoch: u64,
    /// Block groups whose old images the journal took in the epoch.
    pub groups_journaled: u64,
    /// Bytes appended to the journal in the epoch.
    pub journal_bytes: u64,
    /// Logged rows this checkpoint merged into their home groups (0: the
    /// row log was kept).
    pub row_log_merged_rows: u64,
    /// Row-log blocks committed (0 after a merge).
    pub row_log_blocks: u64,
    /// Rows recorded in the hot set for a warm restart (0 if it could not
    /// be written: the next open then starts cold).
    pub hot_rows: u64,
    /// Bytes of the hot rows written for a warm restart at this checkpoint
    /// (`hot-rows.emb`; 0 with `[ssd] warm_rows` off or on a failed write).
    pub hot_row_bytes: u64,
    /// Bytes of the row log given back to the file system: the whole log
    /// after a merge, the blocks the log's start moved past otherwise (0
    /// when the file system cannot punch holes).
    pub row_log_bytes_released: u64,
    /// Row-log blocks the log's start moved past without a merge in the
    /// checkpoint: the background merge had written their rows home, and
    /// the blocks are appended to again.
    pub row_log_blocks_freed: u64,
    /// How long lookups and updates were held back by this checkpoint: its
    /// time waiting for the store's gate (calls in flight finish, new ones
    /// queue) and holding it exclusively. All of it unless
    /// `[ssd] snapshot_checkpoints` let training go on while it wrote.
    pub paused: std::time::Duration,
    /// The most bytes of rows that waited in memory to be written at once
    /// while it ran, summed over the tables (whose peaks need not
    /// coincide: an upper bound): the dirty rows its flush had taken and
    /// not yet written, and, while a snapshot checkpoint wrote, the old
    /// rows copied before a write and the rows evicted meanwhile. Memory
    /// beyond the cache budget (each row also costs its map entry and
    /// allocation).
    pub pending_peak_bytes: u64,
}

struct State {
    /// Epoch of the writes now being made.
    epoch: u64,
    /// First block (and blocks) of every group journaled in `epoch`: every
    /// group written in place in it.
    journaled: groups::Groups,
    /// Journal bytes written (the append point).
    len: u64,
    /// Next batch number in `epoch`.
    batch: u64,
    /// The superblock last written.
    sb: Superblock,
}

/// One engine per file of the protocol, and its state.
pub(crate) struct Durable {
    journal: Box<dyn IoEngine>,
    journal_file: File,
    journal_path: PathBuf,
    meta: Box<dyn IoEngine>,
    meta_path: PathBuf,
    /// Epochs at or below this were committed before this process opened,
    /// but for the dead ones.
    floor: u64,
    /// Dead epochs (inclusive ranges, ascending): never committed.
    dead: Vec<(u64, u64)>,
    /// Whether anything was sealed with the current epoch (so it cannot be
    /// handed back at close).
    wrote: std::sync::atomic::AtomicBool,
    /// The call counters committed by the last checkpoint.
    counters: Vec<u64>,
    /// This process's first epoch: blocks from `start` on are its own.
    start: u64,
    state: Mutex<State>,
    poisoned: Mutex<Option<String>>,
    /// The last checkpoint's written groups not yet checked (see
    /// `written.rs`).
    unchecked: Option<written::Unchecked>,
    /// The epoch now being written, readable without the state lock.
    current: std::sync::atomic::AtomicU64,
}

/// Pick the current superblock of the two copies in `meta` (the whole
/// metadata file): the valid copy with the higher `seq`. One bad copy is
/// survivable (a torn commit, or decay); two are an error naming both.
pub(crate) fn pick_superblock(meta: &[u8]) -> std::result::Result<Superblock, FormatError> {
    let mut best: Option<Superblock> = None;
    let mut first_err = None;
    for at in SUPERBLOCK_SLOTS {
        let lo = (at as usize).min(meta.len());
        let hi = (at as usize + BLOCK_SIZE).min(meta.len());
        match Superblock::decode_at(&meta[lo..hi], at) {
            Ok(sb) => {
                if best.as_ref().is_none_or(|b| sb.seq > b.seq) {
                    best = Some(sb);
                }
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    best.ok_or_else(|| first_err.expect("two slots, both failed"))
}

impl Durable {
    /// The epoch now being written.
    pub(crate) fn epoch(&self) -> u64 {
        self.current.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The epoch to seal blocks with that are about to be written to the
    /// data file: the current one, which can then no longer be handed back
    /// at close.
    pub(crate) fn seal_epoch(&self) -> u64 {
        self.wrote.store(true, std::sync::atomic::Ordering::Release);
        self.epoch()
    }

    /// The call counters committed by the last checkpoint, one per table
    /// in catalog order.
    pub(crate) fn counters(&self) -> &[u64] {
        &self.counters
    }

    /// The checkpoint generation last committed.
    pub(crate) fn generation(&self) -> u64 {
        self.state.lock().sb.generation
    }

    /// The last commit: its generation and the epoch it committed, which
    /// the next open finds in the superblock whatever else is written to
    /// it before then (a close hands its unused epoch back with a later
    /// `seq`).
    pub(crate) fn committed(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.sb.generation, st.sb.committed_epoch)
    }

    /// The last commit's id (the superblock's `commit_id`): files outside
    /// the store's directory that hold its rows name it.
    pub(crate) fn commit_id(&self) -> u64 {
        self.state.lock().sb.commit_id
    }

    /// Whether a sealed block of epoch `e` may be read: committed before
    /// this process opened, or written by this process. Anything else was
    /// written by an epoch that never committed and was not undone.
    pub(crate) fn epoch_ok(&self, e: u64) -> bool {
        (e <= self.floor && !is_dead(&self.dead, e)) || (self.start <= e && e <= self.epoch())
    }

    /// Check the first block `blk` of the group at block `first`, as read,
    /// against the last checkpoint's written-group list (a no-op once the
    /// group passed).
    pub(crate) fn check_written(
        &self,
        first: u64,
        blk: &[u8],
    ) -> std::result::Result<(), FormatError> {
        match &self.unchecked {
            Some(u) => u.check(first, blk, &self.dead),
            None => Ok(()),
        }
    }

    /// One step of the sweep over the written-group list; whether it is
    /// done. A write that never reached the disk is an error, and poisons
    /// the store: its rows are older than the checkpoint promised. A
    /// failed read is returned, and the next step tries again.
    pub(crate) fn sweep_written(&self, data: &dyn IoEngine, data_path: &Path) -> Result<bool> {
        match &self.unchecked {
            // A failed read is only that: the sweep can be retried.
            Some(u) => u
                .sweep_step(data, data_path, &self.dead)
                .map_err(|e| match e {
                    Error::Format { .. } => self.poison(e),
                    e => e,
                }),
            None => Ok(true),
        }
    }

    /// Listed groups not yet checked (0 once the sweep is done, but for
    /// blocks that failed their own checks, which reads report).
    pub(crate) fn written_unchecked(&self) -> u64 {
        self.unchecked.as_ref().map_or(0, |u| u.left())
    }

    /// Refuse writes after a failed fsync.
    pub(crate) fn check_writable(&self) -> Result<()> {
        match &*self.poisoned.lock() {
            Some(reason) => Err(Error::Poisoned {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Refuse every later write, remembering `e` as the reason; returns `e`.
    pub(crate) fn poison(&self, e: Error) -> Error {
        self.poisoned.lock().get_or_insert_with(|| e.to_string());
        e
    }

    /// Before the groups at `firsts` (each `nblocks` blocks) are overwritten:
    /// journal the old image of those not yet journaled in this epoch, and
    /// make it durable. The images are `known` (the groups' current bytes,
    /// which the caller has read) or, without it, read through `data`.
    /// With `whole`, the caller overwrites every row of the groups: a
    /// damaged image is journaled as it is (a restore puts back what the
    /// committed checkpoint has, damage and all) rather than refused, so
    /// that importing a damaged group's rows repairs it.
    pub(crate) fn before_write(
        &self,
        firsts: &[u64],
        nblocks: u32,
        known: Option<&[u8]>,
        whole: bool,
        data: &dyn IoEngine,
        data_path: &Path,
    ) -> Result<()> {
        self.check_writable()?;
        let mut st = self.state.lock();
        let gb = nblocks as usize * BLOCK_SIZE;
        let fresh: Vec<usize> = (0..firsts.len())
            .filter(|&i| !st.journaled.contains(firsts[i]))
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        // Groups the caller has not read, in a span where the file system
        // holds no data (a bulk load of fresh tables), are holes without a
        // read: what a read would find, zeros, is journaled as hole
        // entries either way.
        let unread_holes = known.is_none() && {
            let lo = fresh.iter().map(|&i| firsts[i]).min().unwrap_or(0);
            let hi = fresh.iter().map(|&i| firsts[i]).max().unwrap_or(0) + nblocks as u64;
            crate::io::reserve::holds_no_data(
                data.file().file(),
                lo * BLOCK_SIZE as u64,
                (hi - lo) * BLOCK_SIZE as u64,
            )
        };
        // Journal only images that are what they claim: a hole or a sealed
        // block of that number. An unreadable one is reported, not copied,
        // unless the caller overwrites the group whole (`whole`).
        // A group whose every block is a hole (never written) is journaled
        // as a hole entry, without its image of zeros: a bulk load of
        // fresh tables journals a header block per 253 groups, not a copy
        // of the zeros it overwrites.
        let mut old = AlignedBuf::new(BLOCK_SIZE);
        let mut hole = vec![true; fresh.len()];
        if !unread_holes {
            old.poison(fresh.len() * gb);
            match known {
                Some(k) => {
                    for (j, &i) in fresh.iter().enumerate() {
                        old.as_mut_slice()[j * gb..(j + 1) * gb]
                            .copy_from_slice(&k[i * gb..(i + 1) * gb]);
                    }
                }
                None => {
                    let offsets: Vec<u64> = fresh
                        .iter()
                        .map(|&i| firsts[i] * BLOCK_SIZE as u64)
                        .collect();
                    crate::io::read_coalesced(data, &offsets, gb, &mut old)
                        .map_err(|f| f.into_error(data_path))?;
                }
            }
            for (j, &i) in fresh.iter().enumerate() {
                for k in 0..nblocks as usize {
                    let at = (j * nblocks as usize + k) * BLOCK_SIZE;
                    let no = firsts[i] + k as u64;
                    let state = match check_block(&old.as_slice()[at..at + BLOCK_SIZE], no) {
                        Ok(state) => state,
                        // Damaged, and overwritten whole: copied as it is.
                        Err(_) if whole => BlockState::Sealed,
                        Err(source) => {
                            return Err(Error::Format {
                                path: data_path.into(),
                                source,
                            })
                        }
                    };
                    hole[j] &= state == BlockState::Hole;
                }
            }
        }
        let fresh: Vec<u64> = fresh.into_iter().map(|i| firsts[i]).collect();
        // Batches of at most MAX_ENTRIES groups: header block, then images.
        let per = MAX_ENTRIES.min((u32::MAX as usize / nblocks as usize).max(1));
        let batches = fresh.len().div_ceil(per);
        let images = hole.iter().filter(|&&h| !h).count();
        let total = batches * BLOCK_SIZE + images * gb;
        let mut out = AlignedBuf::new(total);
        let mut pos = 0;
        let mut seq = st.batch;
        for (ci, chunk) in fresh.chunks(per).enumerate() {
            let base = ci * per;
            let entries: Vec<JournalEntry> = chunk
                .iter()
                .enumerate()
                .map(|(i, &first_block)| JournalEntry {
                    first_block,
                    nblocks,
                    image_crc: if hole[base + i] {
                        0
                    } else {
                        crc32c::crc32c(&old.as_slice()[(base + i) * gb..(base + i + 1) * gb])
                    },
                    hole: hole[base + i],
                })
                .collect();
            let h = BatchHeader {
                epoch: st.epoch,
                seq,
                entries,
            };
            seq += 1;
            out.as_mut_slice()[pos..pos + BLOCK_SIZE].copy_from_slice(&h.encode());
            pos += BLOCK_SIZE;
            for i in (base..base + chunk.len()).filter(|&i| !hole[i]) {
                out.as_mut_slice()[pos..pos + gb]
                    .copy_from_slice(&old.as_slice()[i * gb..(i + 1) * gb]);
                pos += gb;
            }
        }
        debug_assert_eq!(pos, total);
        let offsets: Vec<u64> = (0..total / BLOCK_SIZE)
            .map(|i| st.len + (i * BLOCK_SIZE) as u64)
            .collect();
        crate::io::write_coalesced(&*self.journal, &offsets, BLOCK_SIZE, &out)
            .map_err(|f| f.into_error(&self.journal_path))?;
        self.journal
            .sync()
            .map_err(|f| self.poison(f.into_error(&self.journal_path)))?;
        st.len += total as u64;
        st.batch = seq;
        for f in fresh {
            st.journaled.insert(f, nblocks);
        }
        Ok(())
    }

    /// Commit the current epoch (the caller has flushed every dirty row and
    /// fsynced the data file, and holds the store's checkpoint gate), then
    /// start the next one. Any failure here poisons the store: the commit
    /// record's state on disk is unknown until a reopen recovers it.
    /// `log` is what it commits of the row log, every block of which the
    /// caller has written and fsynced. `counters` are the tables' call
    /// counters, in catalog order. Returns the checkpoint and the commit's
    /// id (the superblock's `commit_id`), which files outside the store's
    /// directory that hold its rows are to name.
    pub(crate) fn commit(&self, log: LogCommit, counters: &[u64]) -> Result<(Checkpoint, u64)> {
        self.check_writable()?;
        let mut st = self.state.lock();
        let next = Superblock {
            seq: st.sb.seq + 1,
            generation: st.sb.generation + 1,
            committed_epoch: st.epoch,
            next_epoch: st.sb.next_epoch + 1,
            rowlog_blocks: log.blocks,
            rowlog_from: log.from,
            rowlog_start: log.start,
            rowlog_ring: log.ring,
            version: embtier_format::FormatVersion::CURRENT,
            counters_generation: st.sb.generation + 1,
            commit_id: crate::hash::random_u64(),
            ..st.sb.clone()
        };
        // The groups this epoch wrote in place, listed and durable before
        // the commit record, so that open can check they reached the disk.
        // Sorted in place and written as it is encoded: the list is never
        // held a second time, as pairs or as bytes.
        let count = st.journaled.len() as u64;
        let next = if count == 0 {
            Superblock {
                written_groups: 0,
                written_crc: 0,
                ..next
            }
        } else {
            let path = self
                .journal_path
                .with_file_name(WrittenList::file_name(next.generation));
            let (epoch, generation) = (next.committed_epoch, next.generation);
            let groups = st.journaled.sorted();
            let crc = write_durably(&path, |w| WrittenList::write(w, epoch, generation, groups))
                .map_err(|e| self.poison(e))?;
            Superblock {
                written_groups: count,
                written_crc: crc,
                ..next
            }
        };
        // The counters, in the slot the previous commit did not use,
        // durable before the superblock that names them.
        let slot = CounterSlot {
            generation: next.generation,
            counters: counters.to_vec(),
        };
        let at = CounterSlot::offset(&next, next.generation % 2);
        let bytes = slot.encode();
        let mut buf = AlignedBuf::new(bytes.len());
        buf.as_mut_slice()[..bytes.len()].copy_from_slice(&bytes);
        self.meta
            .write_extents(&[at], bytes.len(), &buf)
            .and_then(|()| self.meta.sync())
            .map_err(|f| self.poison(f.into_error(&self.meta_path)))?;
        self.write_superblock(&next).map_err(|e| self.poison(e))?;
        let done = Checkpoint {
            generation: next.generation,
            epoch: st.epoch,
            groups_journaled: st.journaled.len() as u64,
            journal_bytes: st.len,
            row_log_merged_rows: 0,
            row_log_blocks: log.blocks,
            hot_rows: 0,
            hot_row_bytes: 0,
            row_log_bytes_released: 0,
            row_log_blocks_freed: 0,
            paused: std::time::Duration::ZERO,
            pending_peak_bytes: 0,
        };
        let commit_id = next.commit_id;
        st.epoch = st.sb.next_epoch;
        self.current
            .store(st.epoch, std::sync::atomic::Ordering::Release);
        self.wrote
            .store(false, std::sync::atomic::Ordering::Release);
        st.sb = next;
        st.journaled.clear();
        st.len = 0;
        st.batch = 0;
        self.reset_journal().map_err(|e| self.poison(e))?;
        Ok((done, commit_id))
    }

    /// Write `sb` to copy A, fsync, then copy B, fsync. A crash leaves at
    /// least one whole copy; the higher `seq` of the valid ones is current.
    fn write_superblock(&self, sb: &Superblock) -> Result<()> {
        let mut buf = AlignedBuf::new(BLOCK_SIZE);
        buf.as_mut_slice().copy_from_slice(&sb.encode());
        for at in SUPERBLOCK_SLOTS {
            self.meta
                .write_extents(&[at], BLOCK_SIZE, &buf)
                .map_err(|f| f.into_error(&self.meta_path))?;
            self.meta
                .sync()
                .map_err(|f| f.into_error(&self.meta_path))?;
        }
        Ok(())
    }

    /// Empty the journal, durably (its records are no longer needed).
    fn reset_journal(&self) -> Result<()> {
        self.journal_file
            .set_len(0)
            .and_then(|()| self.journal_file.sync_data())
            .map_err(|e| Error::io(&self.journal_path, "truncate", e))
    }
}

impl Drop for Durable {
    /// Hand the current epoch back when nothing was sealed with it, so a
    /// clean close adds no dead epoch: the next open finds the committed
    /// epoch right below the next one. Best effort: a failure leaves the
    /// epoch dead, which is safe.
    fn drop(&mut self) {
        if self.wrote.load(std::sync::atomic::Ordering::Acquire) || self.check_writable().is_err() {
            return;
        }
        let st = self.state.lock();
        if st.len > 0 || st.sb.next_epoch != st.epoch + 1 {
            return;
        }
        let back = Superblock {
            seq: st.sb.seq + 1,
            next_epoch: st.epoch,
            ..st.sb.clone()
        };
        if back.next_epoch > back.committed_epoch {
            let _ = self.write_superblock(&back);
        }
    }
}

/// Dead epochs as inclusive ranges, ascending and disjoint.
type DeadRanges = Vec<(u64, u64)>;

/// Whether `e` lies in one of `dead`'s inclusive, ascending ranges.
fn is_dead(dead: &[(u64, u64)], e: u64) -> bool {
    let i = dead.partition_point(|&(_, last)| last < e);
    dead.get(i).is_some_and(|&(first, _)| first <= e)
}

/// Make what `write` writes the whole of the file at `path`, through a
/// buffer, and make it durable (fdatasync; the directory too when the file
/// is new). Returns what `write` returned.
fn write_durably<T>(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<&File>) -> std::io::Result<T>,
) -> Result<T> {
    use std::io::Write;
    let new = !path.exists();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::io(path, "create", e))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, &f);
    let out = write(&mut w)
        .and_then(|out| w.flush().map(|()| out))
        .and_then(|out| f.sync_data().map(|()| out))
        .map_err(|e| Error::io(path, "write", e))?;
    if new {
        if let Some(dir) = path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| Error::io(dir, "fsync", e))?;
        }
    }
    Ok(out)
}
