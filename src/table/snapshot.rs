//! Checkpoints that do not stop training (`[ssd] snapshot_checkpoints`):
//! a cached table's side of them.
//!
//! With the store's gate held exclusively, [`Table::open_snapshot`] marks
//! every dirty row of every cache tier *old* (a scan of the tiers' keys,
//! no copy) and opens the table's window. The gate is then let go, and
//! [`Table::flush_snapshot`] hands the old rows, shard by shard, to the
//! pending map and writes them back, while lookups and updates go on
//! under these rules:
//! - a write to an old row hands its bytes to the pending map first
//!   (`Shard::before_write`), and so does an old row's move between tiers
//!   (it then moves as clean): the pending map holds the row as it was
//!   when the checkpoint began, and the cache the newer bytes;
//! - a dirty row that is not old and leaves the last tier waits in the
//!   shard's `later` map, not in `pending`, and no call writes back: the
//!   only rows written while the window is open are the snapshot's, so the
//!   data file holds nothing newer than the checkpoint's moment;
//! - a read of a row the snapshot holds in `pending` copies it up clean
//!   and leaves it for the checkpoint to write; `later` is read before
//!   `pending`, being newer.
//!
//! After the commit, [`Table::close_snapshot`] moves `later` into
//! `pending` and closes the window. Updates wait ([`Table::throttle`])
//! while `later` holds more than the table's pending limit. Every clean
//! row in the tiers when the window closes holds the bytes the commit
//! holds, and keeps them while it stays; a row inserted after may not, so
//! the tiers mark those *fresh* until the checkpoint has written the hot
//! rows, which leave them out.

use super::writeback::PENDING_SLACK;
use super::*;
use crate::io::pace::Pacer;

impl Table {
    /// A checkpoint begins; the caller holds the store's gate exclusively,
    /// so no call is in the middle of a shard. Marks the dirty rows old and
    /// opens the window (see the module's doc). Returns the rows the
    /// snapshot holds: old rows and pending ones.
    pub(crate) fn open_snapshot(&self) -> u64 {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return 0;
        };
        let mut rows = 0;
        self.snapshot_open.store(true, Ordering::Relaxed);
        for sh in shards {
            let mut guard = sh.lock();
            let sh = &mut *guard;
            debug_assert!(!sh.window && sh.later.is_empty());
            rows += sh.top.mark_old() as u64;
            for (_, c) in &mut sh.lower {
                rows += c.mark_old() as u64;
            }
            rows += sh.pending.len() as u64;
            sh.window = true;
        }
        rows
    }

    /// Write the snapshot the checkpoint began with: every old row still in
    /// the tiers is handed to the pending map, shard by shard, and written
    /// back (no fsync) with the pending rows, in chunks that bound the
    /// memory as [`Table::flush`] does. Rows handed over by the calls meanwhile
    /// go with them. The store's gate is not held.
    pub(crate) fn flush_snapshot(&self, ssd: &Ssd, pacer: &mut Pacer) -> Result<()> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Ok(());
        };
        // From now on the window closes without the calls' help: updates
        // may wait for it (`Table::throttle`).
        *self.snapshot.lock() = true;
        self.flush_shards(ssd, shards, true, pacer)
    }

    /// The checkpoint ended, committed or not: the old rows left (after a
    /// failure) go to the pending map, where the next write-back takes
    /// them, the rows that waited in `later` join them (newer, they replace
    /// a pending copy of the same row), and the window closes. With
    /// `fresh`, every cache tier starts marking the rows inserted from now
    /// on (in the same hold of each shard's lock), so that the hot rows
    /// written next leave out any whose bytes are newer than the commit;
    /// [`Table::end_fresh`] stops it.
    pub(crate) fn close_snapshot(&self, fresh: bool) {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return;
        };
        let mut ctx = Ctx::new();
        for sh in shards {
            let mut guard = sh.lock();
            guard.take_dirty(true, &mut ctx);
            let Shard {
                top,
                lower,
                pending,
                later,
                window,
                next_gen,
                ..
            } = &mut *guard;
            for (id, mut row) in later.drain() {
                ctx.later_delta -= row.bytes.len() as isize;
                *next_gen += 1;
                row.gen = *next_gen;
                let len = row.bytes.len() as isize;
                if pending.insert(id, row).is_none() {
                    ctx.pending_delta += len;
                }
                ctx.new_pending += 1;
            }
            if later.capacity() > PENDING_SLACK {
                *later = HashMap::new();
            }
            if fresh {
                top.track_fresh();
                for (_, c) in lower.iter_mut() {
                    c.track_fresh();
                }
            }
            *window = false;
        }
        self.publish_pending(&mut ctx);
        self.snapshot_open.store(false, Ordering::Relaxed);
        *self.snapshot.lock() = false;
        self.snapshot_ended.notify_all();
    }

    /// The hot rows are written: stop marking fresh rows.
    pub(crate) fn end_fresh(&self) {
        if let TableKind::Cached { shards, .. } = &self.kind {
            for sh in shards {
                let mut sh = sh.lock();
                sh.top.untrack_fresh();
                for (_, c) in &mut sh.lower {
                    c.untrack_fresh();
                }
            }
        }
    }

    /// Before an update, with no gate held: while a checkpoint is being
    /// finished and more than the table's pending limit of evicted rows
    /// waits for its commit, wait for it to end. (A checkpoint begun and
    /// not yet being finished holds nobody back: the thread that began it
    /// may be the one updating.)
    pub(crate) fn throttle(&self) {
        if !self.snapshot_open.load(Ordering::Relaxed)
            || self.later_bytes.load(Ordering::Relaxed) <= self.pending_limit as i64
        {
            return;
        }
        let mut open = self.snapshot.lock();
        while *open {
            self.snapshot_ended.wait(&mut open);
        }
    }
}
