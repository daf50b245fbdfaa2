//! The SSD tier: the home of every row, direct-mapped.
//!
//! A row's place is its group and its offset in the group's payload, which
//! only `RowLayout::locate` answers (the catalog records the table's row
//! map); a group's first block is `TableEntry::first_block_of`. No per-row
//! index exists in memory.

use std::path::PathBuf;

use embtier_format::{
    block_epoch, check_block, read_group_payload, seal_block, BlockState, FormatError, TableEntry,
    BLOCK_SIZE,
};

use crate::durable::Durable;
use crate::error::{Error, Result};
use crate::init::init_row_bytes;
use crate::io::{AlignedBuf, EngineChoice, IoEngine, IoFailure};

/// The data file, its engine, and the checkpoint protocol guarding its writes.
pub(crate) struct Ssd {
    engine: Box<dyn IoEngine>,
    path: PathBuf,
    choice: EngineChoice,
    dur: Durable,
    /// Held shared by every operation that may write the data file, and
    /// exclusively by a checkpoint, so that an epoch's writes all precede
    /// its commit.
    gate: parking_lot::RwLock<()>,
    /// Held by a checkpoint from start to end (a snapshot checkpoint lets
    /// go of the gate while it writes), by a bulk import, and by the
    /// background merge while it takes a pass's span: one at a time.
    checkpointing: parking_lot::Mutex<Busy>,
    /// Held shared by the background merge while it writes a chunk, and
    /// exclusively by a snapshot checkpoint while it syncs and commits
    /// (which it does without the gate).
    merge_pause: parking_lot::RwLock<()>,
    checkpoint_ended: parking_lot::Condvar,
    /// The rests owed to training by the writers that run beside it.
    share: std::sync::Arc<crate::io::pace::DiskShare>,
    /// The row log after the tables.
    log: crate::tier::rowlog::RowLog,
    /// Read buffers kept between batches: a fresh 16 MiB buffer per batch
    /// cost its page faults and zeroing every time.
    bufs: parking_lot::Mutex<Vec<AlignedBuf>>,
}

/// Where a miss reads a row: its home block group, or a row-log block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Loc {
    /// Block group `g` of the table.
    Home(u64),
    /// Block `b` of the row log.
    Log(u32),
}

/// Read buffers [`Ssd`] keeps at most.
const KEPT_BUFS: usize = 4;
/// The largest read buffer [`Ssd`] keeps.
const KEPT_BUF_BYTES: usize = 64 << 20;
/// [`Ssd::read_extents_each`] reads a batch past [`KEPT_BUF_BYTES`] at
/// most this many bytes at a time (8 extents at least), reusing the buffer: a batch of many misses no
/// longer allocates, faults in and drops a buffer of all of them.
pub(crate) const READ_CHUNK_BYTES: usize = 16 << 20;
/// The fewest extents a chunk of [`Ssd::read_extents_each`] holds.
const READ_CHUNK_MIN_EXTENTS: usize = 8;

impl Ssd {
    /// The SSD tier over `engine` (the data file at `path`, opened as
    /// `choice` says), with its durability state and row log.
    pub fn new(
        engine: Box<dyn IoEngine>,
        path: PathBuf,
        choice: EngineChoice,
        dur: Durable,
        log: crate::tier::rowlog::RowLog,
    ) -> Ssd {
        Ssd {
            engine,
            path,
            choice,
            dur,
            gate: parking_lot::RwLock::new(()),
            checkpointing: parking_lot::Mutex::new(Busy::default()),
            merge_pause: parking_lot::RwLock::new(()),
            checkpoint_ended: parking_lot::Condvar::new(),
            share: Default::default(),
            log,
            bufs: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// The data file (or block device).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The engine that reads and writes the data file.
    pub fn engine(&self) -> &dyn IoEngine {
        &*self.engine
    }

    /// Which engine was chosen, and why.
    pub fn choice(&self) -> &EngineChoice {
        &self.choice
    }

    /// Epochs, the journal and checkpoint commits.
    pub fn durable(&self) -> &Durable {
        &self.dur
    }

    /// The row log after the tables.
    pub fn log(&self) -> &crate::tier::rowlog::RowLog {
        &self.log
    }

    /// Admission for an operation that only reads the data file: it may
    /// run beside others, never inside a checkpoint.
    pub fn read_gate(&self) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.gate.read()
    }

    /// Admission for an operation that may write the data file: refused
    /// once a failed commit poisoned the store, then shared like
    /// [`Ssd::read_gate`].
    pub fn write_gate(&self) -> Result<parking_lot::RwLockReadGuard<'_, ()>> {
        self.dur.check_writable()?;
        Ok(self.gate.read())
    }

    /// One checkpoint at a time (see the field): taken before the gate,
    /// held until the guard is dropped, from any thread. Waits while
    /// another holds it, unless this thread began the checkpoint in
    /// progress and has not handed it on (see [`Ssd::set_holder`]): that
    /// wait would never end, so `None` is returned instead.
    pub fn checkpointing_unless_mine(&self) -> Option<Checkpointing<'_>> {
        let me = std::thread::current().id();
        let mut busy = self.checkpointing.lock();
        while busy.busy {
            if busy.holder == Some(me) {
                return None;
            }
            self.checkpoint_ended.wait(&mut busy);
        }
        busy.busy = true;
        busy.holder = None;
        Some(Checkpointing(self))
    }

    /// [`Ssd::checkpointing_unless_mine`] for a caller that must have it:
    /// a checkpoint this thread began and has not finished is an error
    /// naming `what` was asked for.
    pub fn checkpointing(&self, what: &'static str) -> Result<Checkpointing<'_>> {
        self.checkpointing_unless_mine()
            .ok_or(Error::CheckpointInProgress { what })
    }

    /// The rests owed to training by the writers that run beside it (a
    /// snapshot checkpoint's and the background merge's), as one budget.
    pub fn disk_share(&self) -> &std::sync::Arc<crate::io::pace::DiskShare> {
        &self.share
    }

    /// A pacer for a writer beside training that rests `rest` times each
    /// chunk's time, through [`Ssd::disk_share`].
    pub fn pacer(&self, rest: f64) -> crate::io::pace::Pacer {
        crate::io::pace::Pacer::shared(rest, std::sync::Arc::clone(&self.share))
    }

    /// See the field.
    pub fn merge_pause(&self) -> &parking_lot::RwLock<()> {
        &self.merge_pause
    }

    /// The thread that began the checkpoint in progress and holds it
    /// unfinished (`None` once its `finish` runs, wherever).
    pub fn set_holder(&self, holder: Option<std::thread::ThreadId>) {
        self.checkpointing.lock().holder = holder;
    }

    /// Admission for a checkpoint: refused once poisoned, then exclusive.
    pub fn checkpoint_gate(&self) -> Result<parking_lot::RwLockWriteGuard<'_, ()>> {
        self.dur.check_writable()?;
        Ok(self.gate.write())
    }

    /// A read buffer, reused from an earlier batch when one is free.
    pub fn take_buf(&self) -> AlignedBuf {
        self.bufs
            .lock()
            .pop()
            .unwrap_or_else(|| AlignedBuf::new(BLOCK_SIZE))
    }

    /// Bytes of the buffers kept for the next [`Ssd::take_buf`].
    #[cfg(test)]
    pub fn pooled_bytes(&self) -> usize {
        self.bufs.lock().iter().map(|b| b.len()).sum()
    }

    /// Give back a buffer from [`Ssd::take_buf`].
    pub fn put_buf(&self, buf: AlignedBuf) {
        let mut bufs = self.bufs.lock();
        if bufs.len() < KEPT_BUFS && buf.len() <= KEPT_BUF_BYTES {
            bufs.push(buf);
        }
    }

    pub fn err(&self, f: IoFailure) -> Error {
        f.into_error(&self.path)
    }

    fn offsets(e: &TableEntry, groups: &[u64]) -> Vec<u64> {
        groups
            .iter()
            .map(|&g| e.first_block_of(g) * BLOCK_SIZE as u64)
            .collect()
    }

    /// Read the blocks of `groups` of table `e` into `buf`, group after group.
    pub fn read_groups(&self, e: &TableEntry, groups: &[u64], buf: &mut AlignedBuf) -> Result<()> {
        let gb = e.layout.group_bytes();
        buf.poison(groups.len() * gb);
        crate::io::read_coalesced(&*self.engine, &Self::offsets(e, groups), gb, buf)
            .map_err(|f| self.err(f))
    }

    /// The byte offset of `loc` of table `e` in the data file.
    pub fn loc_offset(&self, e: &TableEntry, loc: Loc) -> u64 {
        match loc {
            Loc::Home(g) => e.first_block_of(g) * BLOCK_SIZE as u64,
            Loc::Log(b) => self.log_block(b) * BLOCK_SIZE as u64,
        }
    }

    /// Row-log block `b` as read into `raw`: sealed with its number, by an
    /// epoch that may be read (see [`Ssd::check_group`]), then decoded.
    /// Which table it names is the caller's to check.
    pub fn check_log_block<'b>(
        &self,
        b: u32,
        raw: &'b [u8],
    ) -> Result<embtier_format::rowlog::LogBlock<'b>, FormatError> {
        let no = self.log_block(b);
        let offset = no * BLOCK_SIZE as u64;
        let blk = &raw[..BLOCK_SIZE];
        if check_block(blk, no)? != BlockState::Sealed || !self.dur.epoch_ok(block_epoch(blk)) {
            return Err(FormatError::InvalidField {
                field: "row log block",
                offset,
                value: "a hole, or written by an epoch that never committed".into(),
            });
        }
        embtier_format::rowlog::decode(blk, offset)
    }

    /// The data-file block number of row-log block `b`.
    pub fn log_block(&self, b: u32) -> u64 {
        self.log.base + b as u64
    }

    /// Read `len` bytes at each of `offsets` into `buf` (poisoned first),
    /// calling `done(i, bytes)` for each extent as soon as it has been read.
    /// A batch past what the pool keeps is read [`READ_CHUNK_BYTES`] at a
    /// time (at least [`READ_CHUNK_MIN_EXTENTS`] extents, so that large
    /// rows still fill the queue), so that `buf` stays small enough for the
    /// pool to keep. Each chunk's reads fill the engine's queue; only its
    /// last few wait for the next chunk to start.
    pub fn read_extents_each(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
        done: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        let per = match offsets.len().saturating_mul(len) <= KEPT_BUF_BYTES {
            true => offsets.len().max(1),
            false => (READ_CHUNK_BYTES / len.max(1)).max(READ_CHUNK_MIN_EXTENTS),
        };
        for (c, chunk) in offsets.chunks(per).enumerate() {
            buf.poison(chunk.len() * len);
            self.engine
                .read_extents_each(chunk, len, buf, &mut |i, b| done(c * per + i, b))
                .map_err(|f| self.err(f))?;
        }
        Ok(())
    }

    /// A round of misses: [`Ssd::read_extents_windowed`] when `windowed`
    /// (a warm restart), else [`Ssd::read_extents_each`]. Ordinary misses
    /// keep one read per extent: reading windows changed which neighbours
    /// a cold fill installs, and `emb-locality plan`'s prediction of the
    /// store's hits (tools/tests/plan_meets_run.rs) drifted past 1%.
    pub fn read_misses(
        &self,
        windowed: bool,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
        done: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        if windowed {
            self.read_extents_windowed(offsets, len, buf, done)
        } else {
            self.read_extents_each(offsets, len, buf, done)
        }
    }

    /// [`Ssd::read_extents_each`], in windows of sequential reads where
    /// many ascending extents lie close (a warm restart, a merge's log
    /// blocks): [`crate::io::read_windowed`].
    pub fn read_extents_windowed(
        &self,
        offsets: &[u64],
        len: usize,
        buf: &mut AlignedBuf,
        done: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        buf.poison(offsets.len() * len);
        crate::io::read_windowed(&*self.engine, offsets, len, buf, done).map_err(|f| self.err(f))
    }

    /// Seal the first `groups.len()` groups of `buf` with their block
    /// numbers and the current epoch, and write them to their places, after
    /// the journal holds the old image of each group first written in this
    /// epoch. The caller holds `gate` shared.
    pub fn write_groups(&self, e: &TableEntry, groups: &[u64], buf: &mut AlignedBuf) -> Result<()> {
        let bpg = e.layout.blocks_per_group;
        let offsets = Self::offsets(e, groups);
        let firsts: Vec<u64> = offsets.iter().map(|o| o / BLOCK_SIZE as u64).collect();
        self.dur
            .before_write(&firsts, bpg, None, false, &*self.engine, &self.path)?;
        let epoch = self.dur.seal_epoch();
        for (gi, &first) in firsts.iter().enumerate() {
            for k in 0..bpg as usize {
                let at = (gi * bpg as usize + k) * BLOCK_SIZE;
                seal_block(
                    &mut buf.as_mut_slice()[at..at + BLOCK_SIZE],
                    first + k as u64,
                    epoch,
                );
            }
        }
        crate::io::write_coalesced(&*self.engine, &offsets, e.layout.group_bytes(), buf).map_err(
            |f| {
                // A full disk refuses the write and leaves the block as it
                // was, so the rows stay pending and a retry can succeed.
                // Any other failure leaves the group unknown (torn, or
                // half-written): this session can no longer trust its
                // blocks, so it takes no more writes. A reopen undoes the
                // group from the journal.
                let enospc = f.error.raw_os_error() == Some(libc::ENOSPC);
                let err = self.err(f);
                if enospc {
                    err
                } else {
                    self.dur.poison(err)
                }
            },
        )
    }

    /// Journal `groups`, those not yet journaled in this epoch, ahead of
    /// writes that will cover them, in one journal write and sync: with
    /// `images`, their current on-disk bytes (which the caller has just
    /// read), which [`Ssd::write_groups`] would otherwise read again;
    /// without, read from the file as it would, or journaled as holes
    /// where the file holds no data there (a bulk load journals a call's
    /// groups once instead of once per chunk it writes).
    /// With `whole`, the caller overwrites every row of `groups`: a damaged
    /// image is journaled as it is instead of refused (an import of a
    /// damaged group's rows repairs it).
    pub fn journal(
        &self,
        e: &TableEntry,
        groups: &[u64],
        images: Option<&[u8]>,
        whole: bool,
    ) -> Result<()> {
        if groups.is_empty() {
            return Ok(());
        }
        let firsts: Vec<u64> = Self::offsets(e, groups)
            .iter()
            .map(|o| o / BLOCK_SIZE as u64)
            .collect();
        let bpg = e.layout.blocks_per_group;
        self.dur
            .before_write(&firsts, bpg, images, whole, &*self.engine, &self.path)
    }

    /// [`check_group`], and that every sealed block was written by a
    /// committed epoch or by this process.
    pub fn check_group(
        &self,
        e: &TableEntry,
        g: u64,
        blocks: &[u8],
    ) -> Result<BlockState, FormatError> {
        let state = check_group(e, g, blocks)?;
        self.dur
            .check_written(e.first_block_of(g), &blocks[..BLOCK_SIZE])?;
        if state == BlockState::Sealed {
            let ep = block_epoch(blocks);
            if !self.dur.epoch_ok(ep) {
                let first = e.first_block_of(g);
                return Err(FormatError::InvalidField {
                    field: "epoch",
                    offset: first * BLOCK_SIZE as u64 + embtier_format::TRAILER_EPOCH as u64,
                    value: format!(
                        "{ep}: written by an epoch that never committed and was not undone \
                         (a lost journal record)"
                    ),
                });
            }
        }
        Ok(state)
    }

    /// One step of the check of the last checkpoint's written groups
    /// (see `durable/written.rs`); whether it is done.
    pub fn sweep_written(&self) -> Result<bool> {
        self.dur.sweep_written(&*self.engine, &self.path)
    }

    /// Finish that check: a checkpoint must not commit, and so drop the
    /// list, before every listed group was checked.
    pub fn finish_written(&self) -> Result<()> {
        while !self.sweep_written()? {}
        Ok(())
    }

    pub fn sync(&self) -> Result<()> {
        self.engine.sync().map_err(|f| self.err(f))
    }
}

/// Whether a checkpoint (or import, or merge chunk) holds
/// [`Ssd::checkpointing`], and which thread began a checkpoint that holds
/// it unfinished.
#[derive(Default)]
struct Busy {
    busy: bool,
    holder: Option<std::thread::ThreadId>,
}

/// [`Ssd::checkpointing`]'s hold; `Send`, so that a checkpoint begun on
/// one thread can finish on another.
pub(crate) struct Checkpointing<'a>(&'a Ssd);

impl Drop for Checkpointing<'_> {
    fn drop(&mut self) {
        *self.0.checkpointing.lock() = Busy::default();
        self.0.checkpoint_ended.notify_all();
    }
}

/// Validate the blocks of group `g`: all holes (never written) or all sealed.
fn check_group(e: &TableEntry, g: u64, blocks: &[u8]) -> Result<BlockState, FormatError> {
    let bpg = e.layout.blocks_per_group as u64;
    let first = e.first_block_of(g);
    let mut state = None;
    for k in 0..bpg {
        let b = &blocks[k as usize * BLOCK_SIZE..(k as usize + 1) * BLOCK_SIZE];
        let s = check_block(b, first + k)?;
        match state {
            None => state = Some(s),
            Some(prev) if prev != s => {
                return Err(FormatError::InvalidField {
                    field: "group",
                    offset: first * BLOCK_SIZE as u64,
                    value: format!("group {g} is partly written ({bpg} blocks, block {k} differs)"),
                })
            }
            _ => {}
        }
    }
    Ok(state.unwrap_or(BlockState::Hole))
}

/// The bytes of `row` from its group's blocks.
pub(crate) fn row_from_group(
    e: &TableEntry,
    state: BlockState,
    blocks: &[u8],
    row: u64,
    out: &mut [u8],
) {
    match state {
        BlockState::Hole => init_row_bytes(
            e.init,
            e.init_scale,
            e.seed,
            row,
            crate::Elem::from_format(e.elem),
            e.dim as usize,
            out,
        ),
        BlockState::Sealed => read_group_payload(blocks, e.layout.locate(row).offset, out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use embtier_format::{check_block, seal_block};

    /// A buffer left holding a sealed block from an earlier read, or zeros,
    /// must not pass for either once poisoned: an extent an engine failed
    /// to fill reads as corruption.
    #[test]
    fn poisoned_blocks_are_neither_old_blocks_nor_holes() {
        let mut buf = AlignedBuf::new(3 * BLOCK_SIZE);
        seal_block(&mut buf.as_mut_slice()[..BLOCK_SIZE], 0, 1);
        assert_eq!(
            check_block(&buf.as_slice()[..BLOCK_SIZE], 0),
            Ok(BlockState::Sealed)
        );
        assert_eq!(
            check_block(&buf.as_slice()[BLOCK_SIZE..2 * BLOCK_SIZE], 1),
            Ok(BlockState::Hole)
        );
        buf.poison(2 * BLOCK_SIZE);
        for b in 0..2 {
            let blk = &buf.as_slice()[b * BLOCK_SIZE..(b + 1) * BLOCK_SIZE];
            assert!(check_block(blk, b as u64).is_err(), "block {b}");
        }
        // Past `n`, untouched.
        assert_eq!(
            check_block(&buf.as_slice()[2 * BLOCK_SIZE..], 2),
            Ok(BlockState::Hole)
        );
    }
}
