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

use std::collections::HashMap;
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
    /// Groups the last checkpoint wrote in place whose arrival on disk this
    /// open checked (FORMAT.md, "Written-group list").
    pub written_checked: u64,
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
}

struct State {
    /// Epoch of the writes now being made.
    epoch: u64,
    /// First block (and blocks) of every group journaled in `epoch`: every
    /// group written in place in it.
    journaled: HashMap<u64, u32>,
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
    /// Open the protocol's files and recover: undo every write of epochs after
    /// the committed one, then start a fresh epoch. `fresh`: just created.
    pub(crate) fn open(
        dir: &Path,
        sb: Superblock,
        data: &dyn IoEngine,
        data_path: &Path,
        wrap: &WrapFn<'_>,
    ) -> Result<(Durable, Recovery)> {
        let journal_path = dir.join(JOURNAL_FILE);
        let meta_path = dir.join(crate::files::META_FILE);
        let (jf, _) = crate::io::open_file(&journal_path, false)?;
        let journal_file = jf
            .try_clone()
            .map_err(|e| Error::io(&journal_path, "dup", e))?;
        let journal = wrap(&journal_path, crate::io::psync_engine(jf));
        let (mf, _) = crate::io::open_file(&meta_path, false)?;
        let meta = wrap(&meta_path, crate::io::psync_engine(mf));
        // Mapped, not read: the journal can be as large as the groups one
        // checkpoint interval overwrote. Read only, so a full file system
        // cannot fault it (only a store into an unallocated page of a
        // mapping needs a block; the PMem tier's writable mapping has its
        // blocks reserved, see `crate::io::reserve`); its holes read zeros.
        let map = if journal_file.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
            None
        } else {
            // SAFETY: the mapping is read only and private to this call, and
            // nothing writes or truncates the journal while it lives: this
            // process holds the store's lock, and the journal is written
            // only after recovery, through `self`, once `map` is dropped.
            Some(
                unsafe { memmap2::Mmap::map(&journal_file) }
                    .map_err(|e| Error::io(&journal_path, "mmap", e))?,
            )
        };
        let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
        let mut rec = Recovery {
            generation: sb.generation,
            ..Recovery::default()
        };
        let (batches, tail) = journal::scan(bytes).map_err(|source| Error::Format {
            path: journal_path.clone(),
            source,
        })?;
        rec.torn_tail = matches!(tail, journal::JournalTail::Torn { .. });
        let mut buf = AlignedBuf::new(BLOCK_SIZE);
        for b in &batches {
            let h = &b.header;
            if h.epoch <= sb.committed_epoch {
                continue; // committed: the journal was not yet reset
            }
            if h.epoch >= sb.next_epoch {
                return Err(Error::Format {
                    path: journal_path.clone(),
                    source: FormatError::InvalidField {
                        field: "epoch",
                        offset: b.offset + journal::jh::EPOCH as u64,
                        value: format!(
                            "{}, never handed out (the superblock's next epoch is {})",
                            h.epoch, sb.next_epoch
                        ),
                    },
                });
            }
            rec.rolled_back_epoch = h.epoch;
            let mut img = b.offset + BLOCK_SIZE as u64;
            for (e, &ok) in h.entries.iter().zip(&b.image_ok) {
                let len = e.nblocks as usize * BLOCK_SIZE;
                let at = e.first_block.saturating_mul(BLOCK_SIZE as u64);
                if at.saturating_add(len as u64) > sb.data_blocks * BLOCK_SIZE as u64 {
                    return Err(Error::Format {
                        path: journal_path.clone(),
                        source: FormatError::InvalidField {
                            field: "first_block",
                            offset: b.offset,
                            value: format!("{} is past the data file", e.first_block),
                        },
                    });
                }
                buf.ensure(len);
                if ok {
                    buf.as_mut_slice()[..len]
                        .copy_from_slice(&bytes[img as usize..img as usize + len]);
                    data.write_extents(&[at], len, &buf)
                        .map_err(|f| f.into_error(data_path))?;
                    rec.groups_restored += 1;
                } else {
                    // The last batch, torn: its in-place writes cannot have
                    // begun (they wait for the journal's fsync), unless the
                    // image decayed after the fact. The group's epoch tells.
                    buf.poison(BLOCK_SIZE);
                    data.read_extents(&[at], BLOCK_SIZE, &mut buf)
                        .map_err(|f| f.into_error(data_path))?;
                    let blk = &buf.as_slice()[..BLOCK_SIZE];
                    if check_block(blk, e.first_block) == Ok(BlockState::Sealed)
                        && block_epoch(blk) == h.epoch
                    {
                        return Err(Error::Format {
                            path: journal_path.clone(),
                            source: FormatError::ChecksumMismatch {
                                offset: img,
                                stored: e.image_crc,
                                computed: crc32c::crc32c(&bytes[img as usize..img as usize + len]),
                            },
                        });
                    }
                }
                img += len as u64;
            }
        }
        if rec.groups_restored > 0 {
            data.sync().map_err(|f| f.into_error(data_path))?;
        }
        drop(map);
        rec.written_checked = check_written(dir, data, data_path, &sb)?;
        // Every epoch between the committed one and the next is dead: it
        // was handed out and never committed. Recovery has undone what the
        // journal holds of them; whatever it missed (a lost or damaged
        // record) still carries its dead epoch, and stays unreadable even
        // after later checkpoints commit higher epochs.
        let mut sb = sb;
        if !sb.add_dead(sb.committed_epoch + 1, sb.next_epoch - 1) {
            let (dead, read, found) = scrub(data, data_path, &sb)?;
            rec.scrubbed = Some((read, found));
            sb.dead_epochs = dead;
        }
        rec.dead_epochs = sb.dead_epochs.clone();
        let counters = read_counters(&*meta, &meta_path, &sb)?;
        let d = Durable {
            journal,
            journal_file,
            journal_path,
            meta,
            meta_path,
            floor: sb.committed_epoch,
            dead: sb.dead_epochs.clone(),
            wrote: false.into(),
            counters,
            start: sb.next_epoch,
            current: sb.next_epoch.into(),
            state: Mutex::new(State {
                epoch: sb.next_epoch,
                journaled: HashMap::new(),
                len: 0,
                batch: 0,
                sb: sb.clone(),
            }),
            poisoned: Mutex::new(None),
        };
        // Hand out this session's epoch before writing with it, then drop
        // the undone journal.
        {
            let mut st = d.state.lock();
            let next = Superblock {
                version: embtier_format::FormatVersion::CURRENT,
                seq: sb.seq + 1,
                next_epoch: sb.next_epoch + 1,
                ..sb
            };
            d.write_superblock(&next)?;
            st.sb = next;
            d.reset_journal()?;
        }
        Ok((d, rec))
    }

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

    /// Whether a sealed block of epoch `e` may be read: committed before
    /// this process opened, or written by this process. Anything else was
    /// written by an epoch that never committed and was not undone.
    pub(crate) fn epoch_ok(&self, e: u64) -> bool {
        (e <= self.floor && !is_dead(&self.dead, e)) || (self.start <= e && e <= self.epoch())
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
    pub(crate) fn before_write(
        &self,
        firsts: &[u64],
        nblocks: u32,
        known: Option<&[u8]>,
        data: &dyn IoEngine,
        data_path: &Path,
    ) -> Result<()> {
        self.check_writable()?;
        let mut st = self.state.lock();
        let gb = nblocks as usize * BLOCK_SIZE;
        let fresh: Vec<usize> = (0..firsts.len())
            .filter(|&i| !st.journaled.contains_key(&firsts[i]))
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let mut old = AlignedBuf::new(BLOCK_SIZE);
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
                data.read_extents(&offsets, gb, &mut old)
                    .map_err(|f| f.into_error(data_path))?;
            }
        }
        let fresh: Vec<u64> = fresh.into_iter().map(|i| firsts[i]).collect();
        // Journal only images that are what they claim: a hole or a sealed
        // block of that number. An unreadable one is reported, not copied.
        for (i, &first) in fresh.iter().enumerate() {
            for k in 0..nblocks as usize {
                let at = (i * nblocks as usize + k) * BLOCK_SIZE;
                let no = first + k as u64;
                check_block(&old.as_slice()[at..at + BLOCK_SIZE], no).map_err(|source| {
                    Error::Format {
                        path: data_path.into(),
                        source,
                    }
                })?;
            }
        }
        // Batches of at most MAX_ENTRIES groups: header block, then images.
        let per = MAX_ENTRIES.min((u32::MAX as usize / nblocks as usize).max(1));
        let batches = fresh.len().div_ceil(per);
        let total = batches * BLOCK_SIZE + fresh.len() * gb;
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
                    image_crc: crc32c::crc32c(
                        &old.as_slice()[(base + i) * gb..(base + i + 1) * gb],
                    ),
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
            let n = chunk.len() * gb;
            out.as_mut_slice()[pos..pos + n]
                .copy_from_slice(&old.as_slice()[base * gb..base * gb + n]);
            pos += n;
        }
        let offsets: Vec<u64> = (0..total / BLOCK_SIZE)
            .map(|i| st.len + (i * BLOCK_SIZE) as u64)
            .collect();
        self.journal
            .write_extents(&offsets, BLOCK_SIZE, &out)
            .map_err(|f| f.into_error(&self.journal_path))?;
        self.journal
            .sync()
            .map_err(|f| self.poison(f.into_error(&self.journal_path)))?;
        st.len += total as u64;
        st.batch = seq;
        st.journaled.extend(fresh.into_iter().map(|f| (f, nblocks)));
        Ok(())
    }

    /// Commit the current epoch (the caller has flushed every dirty row and
    /// fsynced the data file, and holds the store's checkpoint gate), then
    /// start the next one. Any failure here poisons the store: the commit
    /// record's state on disk is unknown until a reopen recovers it.
    /// `rowlog_blocks` is the row log's length, every block of which the
    /// caller has written and fsynced.
    /// `merged`: the log was merged (its blocks are no longer committed).
    /// `counters` are the tables' call counters, in catalog order.
    pub(crate) fn commit(
        &self,
        rowlog_blocks: u64,
        merged: bool,
        counters: &[u64],
    ) -> Result<Checkpoint> {
        self.check_writable()?;
        let mut st = self.state.lock();
        let next = Superblock {
            seq: st.sb.seq + 1,
            generation: st.sb.generation + 1,
            committed_epoch: st.epoch,
            next_epoch: st.sb.next_epoch + 1,
            rowlog_blocks,
            // Appends since the last commit start where it ended; a merge
            // (or a log that shrank) starts again at 0.
            rowlog_from: if rowlog_blocks >= st.sb.rowlog_blocks && !merged {
                st.sb.rowlog_blocks as u32
            } else {
                0
            },
            counters_generation: st.sb.generation + 1,
            ..st.sb.clone()
        };
        // The groups this epoch wrote in place, listed and durable before
        // the commit record, so that open can check they reached the disk.
        let mut groups: Vec<(u64, u32)> = st.journaled.iter().map(|(&f, &n)| (f, n)).collect();
        groups.sort_unstable();
        let next = if groups.is_empty() {
            Superblock {
                written_groups: 0,
                written_crc: 0,
                ..next
            }
        } else {
            let count = groups.len() as u64;
            let list = WrittenList {
                epoch: next.committed_epoch,
                generation: next.generation,
                groups,
            }
            .encode();
            let path = self
                .journal_path
                .with_file_name(WrittenList::file_name(next.generation));
            write_durably(&path, &list).map_err(|e| self.poison(e))?;
            Superblock {
                written_groups: count,
                written_crc: WrittenList::crc_of(&list),
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
            row_log_blocks: rowlog_blocks,
        };
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
        Ok(done)
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

/// The call counters committed by the checkpoint `sb` names: zeros before
/// the first counted commit (or in a store of version 3 and before).
fn read_counters(meta: &dyn IoEngine, meta_path: &Path, sb: &Superblock) -> Result<Vec<u64>> {
    let n = sb.table_count as usize;
    if sb.counters_generation == 0 {
        return Ok(vec![0; n]);
    }
    let len = CounterSlot::slot_len(n) as usize;
    let at = CounterSlot::offset(sb, sb.counters_generation % 2);
    let mut buf = AlignedBuf::new(len);
    buf.poison(len);
    meta.read_extents(&[at], len, &mut buf)
        .map_err(|f| f.into_error(meta_path))?;
    CounterSlot::decode_at(&buf.as_slice()[..len], at, n, sb.counters_generation)
        .map(|s| s.counters)
        .map_err(|source| Error::Format {
            path: meta_path.into(),
            source,
        })
}

/// Read every sealed block of the data file (tables and committed row
/// log; holes are skipped) and find those of dead epochs. Run at open when
/// the dead epoch list no longer fits the superblock: the dead epochs that
/// no block carries any more are forgotten. Returns the new list (the
/// epochs of dead blocks found, each its own range), the blocks read and
/// the dead blocks found. More dead epochs with blocks than a superblock
/// holds is an error naming the first such block.
fn scrub(data: &dyn IoEngine, data_path: &Path, sb: &Superblock) -> Result<(DeadRanges, u64, u64)> {
    const CHUNK: u64 = 256; // blocks a read
    let end = sb.data_blocks + sb.rowlog_blocks;
    let segments = data_segments(data_path, end)?;
    let mut buf = AlignedBuf::new(CHUNK as usize * BLOCK_SIZE);
    let (mut read, mut found) = (0u64, 0u64);
    let mut epochs: Vec<(u64, u64)> = Vec::new(); // (epoch, first block seen)
    for (lo, hi) in segments {
        let mut b = lo;
        while b < hi {
            let n = (hi - b).min(CHUNK);
            let len = n as usize * BLOCK_SIZE;
            buf.poison(len);
            data.read_extents(&[b * BLOCK_SIZE as u64], len, &mut buf)
                .map_err(|f| f.into_error(data_path))?;
            for k in 0..n {
                let blk = &buf.as_slice()[k as usize * BLOCK_SIZE..(k as usize + 1) * BLOCK_SIZE];
                read += 1;
                // Damaged blocks are reported when read; only a sealed
                // block's epoch is evidence here.
                if check_block(blk, b + k) != Ok(BlockState::Sealed) {
                    continue;
                }
                let e = block_epoch(blk);
                if sb.is_dead(e) {
                    found += 1;
                    if !epochs.iter().any(|&(x, _)| x == e) {
                        epochs.push((e, b + k));
                    }
                }
            }
            b += n;
        }
    }
    epochs.sort_unstable();
    if epochs.len() > MAX_DEAD_RANGES {
        let (e, blk) = epochs[0];
        return Err(Error::Format {
            path: data_path.into(),
            source: FormatError::InvalidField {
                field: "epoch",
                offset: blk * BLOCK_SIZE as u64 + TRAILER_EPOCH as u64,
                value: format!(
                    "{e}: a dead epoch, one of {} with blocks recovery could not undo \
                     (more than a superblock can list)",
                    epochs.len()
                ),
            },
        });
    }
    Ok((epochs.iter().map(|&(e, _)| (e, e)).collect(), read, found))
}

/// The ranges `[lo, hi)` of blocks below `end` that hold data (holes
/// skipped with `SEEK_DATA`/`SEEK_HOLE`; the whole range where the file
/// system cannot say).
fn data_segments(path: &Path, end: u64) -> Result<Vec<(u64, u64)>> {
    use std::os::fd::AsRawFd;
    let bs = BLOCK_SIZE as u64;
    let f = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut at = 0u64;
    let limit = end * bs;
    while at < limit {
        // SAFETY: lseek on a descriptor this function owns; no memory is
        // passed to the kernel.
        let d = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if d < 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENXIO) => Ok(out), // no data past `at`
                Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => {
                    out.push((at / bs, end));
                    Ok(out)
                }
                _ => Err(Error::io(path, "lseek", err)),
            };
        }
        // SAFETY: as above.
        let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
        let h = if h < 0 { limit as i64 } else { h };
        let (lo, hi) = (d as u64 / bs, (h as u64).div_ceil(bs).min(end));
        if lo >= end {
            break;
        }
        out.push((lo, hi));
        at = hi * bs;
    }
    Ok(out)
}

/// Write `bytes` as the whole of the file at `path` and make it durable
/// (fdatasync; the directory too when the file is new).
fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let new = !path.exists();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::io(path, "create", e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_data())
        .map_err(|e| Error::io(path, "write", e))?;
    if new {
        if let Some(dir) = path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| Error::io(dir, "fsync", e))?;
        }
    }
    Ok(())
}

/// Check that every group the last checkpoint wrote in place holds its
/// epoch (FORMAT.md, "Written-group list"): a group holding an older,
/// committed epoch or a hole is a write that never reached the disk. A
/// group of a dead epoch is left to the read-time check. Returns the
/// groups checked.
fn check_written(
    dir: &Path,
    data: &dyn IoEngine,
    data_path: &Path,
    sb: &Superblock,
) -> Result<u64> {
    if sb.written_groups == 0 {
        return Ok(0);
    }
    let path = dir.join(WrittenList::file_name(sb.generation));
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, "read", e))?;
    let list = WrittenList::decode(&bytes, sb).map_err(|source| Error::Format {
        path: path.clone(),
        source,
    })?;
    const CHUNK: usize = 256;
    let mut buf = AlignedBuf::new(CHUNK * BLOCK_SIZE);
    for chunk in list.groups.chunks(CHUNK) {
        let offsets: Vec<u64> = chunk.iter().map(|&(f, _)| f * BLOCK_SIZE as u64).collect();
        if offsets
            .iter()
            .any(|&o| o >= sb.data_blocks * BLOCK_SIZE as u64)
        {
            return Err(Error::Format {
                path,
                source: FormatError::InvalidField {
                    field: "written group",
                    offset: 0,
                    value: "a group past the tables".into(),
                },
            });
        }
        buf.poison(offsets.len() * BLOCK_SIZE);
        data.read_extents(&offsets, BLOCK_SIZE, &mut buf)
            .map_err(|f| f.into_error(data_path))?;
        for (i, &(first, _)) in chunk.iter().enumerate() {
            let blk = &buf.as_slice()[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
            // A block that fails its own checks (torn, decayed) is
            // reported when read; a hole or an older sealed block would be
            // read as good values, so they are the ones to catch here.
            let sealed = match check_block(blk, first) {
                Ok(BlockState::Sealed) => true,
                Ok(BlockState::Hole) => false,
                Err(_) => continue,
            };
            let e = if sealed { block_epoch(blk) } else { 0 };
            if sealed && (e == sb.committed_epoch || sb.is_dead(e) || e > sb.committed_epoch) {
                continue;
            }
            return Err(Error::Format {
                path: data_path.into(),
                source: FormatError::InvalidField {
                    field: "epoch",
                    offset: first * BLOCK_SIZE as u64 + TRAILER_EPOCH as u64,
                    value: if sealed {
                        format!(
                            "{e}, but the last checkpoint (epoch {}) wrote this group: \
                             a write that never reached the disk",
                            sb.committed_epoch
                        )
                    } else {
                        format!(
                            "a hole, but the last checkpoint (epoch {}) wrote this group: \
                             a write that never reached the disk",
                            sb.committed_epoch
                        )
                    },
                },
            });
        }
    }
    Ok(list.groups.len() as u64)
}
