//! The row log: dirty rows written back are appended, packed, to the
//! region of the data file after the tables, instead of read-modify-writing
//! each row's block group in place.
//!
//! A cached table keeps, per shard, a map from each row whose newest
//! written copy is in the log to its log block; a miss reads that block
//! instead of the row's home group. The log is a ring: appends go at its
//! end, wrapping to the region's first block, and never into the blocks
//! from its start on. A checkpoint commits the log's start and length in
//! the superblock, so recovery rebuilds the maps by scanning the committed
//! blocks, oldest first, and blocks written after the last commit are
//! ignored (they need no undo journal).
//!
//! Once the log is more than half full, the background merge writes home
//! every row whose newest copy lies in the log as it was when its pass
//! began (journaled like any in-place write); each such row keeps a
//! [`MERGED`] entry (home and the log hold the same bytes, so checkpoints
//! meanwhile commit the log as it is). The checkpoint after the pass moves
//! the log's start past those blocks and drops the [`MERGED`] entries:
//! nothing is merged inside the checkpoint, and the blocks are appended to
//! again. Without the background merge, or when the log holds stale copies
//! (a logged row written home with newer bytes, or a failed append) or has
//! filled to seven eighths before a pass ends, the checkpoint merges every
//! logged row itself and the commit empties the log.
//! `store-format/FORMAT.md` ("Row log") is the specification.

use parking_lot::Mutex;

use super::logindex::LogIndex;
use super::logmap::MERGED;

/// A log block index meaning "not in the log".
pub(crate) const NOT_LOGGED: u32 = u32::MAX;

/// The blocks of the ring that one background pass merges: those from
/// ring block `first` on, `len` of them, wrapping at `ring`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogSpan {
    first: u64,
    len: u64,
    ring: u64,
}

impl LogSpan {
    /// Every block of the log (a checkpoint's merge).
    pub fn all() -> LogSpan {
        LogSpan {
            first: 0,
            len: u64::MAX,
            ring: 1,
        }
    }

    /// Whether ring block `b` is in the span.
    pub fn contains(&self, b: u32) -> bool {
        self.len == u64::MAX || (b as u64 + self.ring - self.first) % self.ring < self.len
    }

    /// Blocks in the span (not for [`LogSpan::all`]).
    pub fn blocks(&self) -> u64 {
        self.len
    }

    /// The span as at most two runs of ring blocks `(first, blocks)`, in
    /// log order (not for [`LogSpan::all`]).
    pub fn runs(&self) -> Vec<(u64, u64)> {
        let head = self.len.min(self.ring - self.first);
        let mut v = vec![(self.first, head)];
        if self.len > head {
            v.push((0, self.len - head));
        }
        v.retain(|r| r.1 > 0);
        v
    }

    /// The span's blocks as windows `(first, blocks)` of at most `w`
    /// blocks, in log order, none across the ring's end (not for
    /// [`LogSpan::all`]).
    pub fn windows(&self, w: u64) -> impl Iterator<Item = (u64, u64)> {
        let w = w.max(1);
        self.runs().into_iter().flat_map(move |(first, len)| {
            (first..first + len)
                .step_by(w as usize)
                .map(move |at| (at, w.min(first + len - at)))
        })
    }
}

/// What a checkpoint commits of the log (see [`RowLog::commit_point`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogCommit {
    /// The ring block of the committed log's first block.
    pub start: u32,
    /// Committed blocks.
    pub blocks: u64,
    /// Of them, the first one this commit appended, counted from `start`.
    pub from: u32,
    /// The blocks of the ring.
    pub ring: u64,
}

/// The log's place in the data file and its state.
pub(crate) struct RowLog {
    /// First block of the log in the data file (where the tables end).
    pub base: u64,
    /// Blocks the config gives the log (0: no log). The ring takes this
    /// size whenever the log is emptied.
    pub capacity: u64,
    /// Live logged rows a merge lists at once (`[ssd] merge_list_rows`).
    pub merge_list_rows: usize,
    /// The fill, as a fraction of the ring, past which the background
    /// merge begins a pass (`[ssd] merge_start`).
    pub merge_start: f64,
    state: Mutex<LogState>,
    /// The background merge's thread, woken when an append takes the log
    /// past `merge_start`.
    merger: Mutex<Option<std::thread::Thread>>,
    /// The index of the ring's blocks, written beside each append (none
    /// when the machine has no boot id, or no table uses the log).
    index: parking_lot::RwLock<Option<LogIndex>>,
}

/// Positions in the log count blocks appended since open from the ring
/// block the log then started at: position `p` is ring block `p % ring`.
struct LogState {
    /// The blocks of the ring: `capacity`, or the size a committed log was
    /// written with, until that log is emptied.
    ring: u64,
    /// Position of the log's first block.
    start: u64,
    /// Position of the next append.
    end: u64,
    /// `end` at the last commit (or the open).
    committed: u64,
    /// Some logged row was since written home with newer bytes: the next
    /// checkpoint merges.
    stale: bool,
    /// Appends are refused until the next merge (a failed log write).
    closed: bool,
    /// The background merge has written home every row whose newest copy
    /// is before this position: the next checkpoint moves the start there.
    swept: Option<u64>,
    /// Times the log's start moved since open (emptied, or moved past a
    /// pass's blocks): a pass that began before cannot be finished.
    resets: u64,
}

impl LogState {
    fn len(&self) -> u64 {
        self.end - self.start
    }
}

impl RowLog {
    /// The log of `capacity` blocks from data-file block `base`, as the
    /// superblock `sb` committed it; merges list `merge_list_rows` live rows
    /// at once, and the background merge begins a pass past `merge_start`. A committed log keeps the ring it was written in (older
    /// versions' logs, which start at block 0 and do not wrap, a ring of at
    /// least their length) until it is emptied.
    pub fn new(
        base: u64,
        capacity: u64,
        sb: &embtier_format::Superblock,
        merge_list_rows: usize,
        merge_start: f64,
    ) -> RowLog {
        let capacity = capacity.min(MERGED as u64);
        let blocks = sb.rowlog_blocks;
        let ring = match (blocks, sb.rowlog_ring) {
            (0, _) => capacity,
            (_, 0) => capacity.max(blocks),
            (_, r) => r,
        };
        let start = sb.rowlog_start as u64;
        RowLog {
            base,
            capacity,
            merge_list_rows: merge_list_rows.max(1),
            merge_start,
            state: Mutex::new(LogState {
                ring,
                start,
                end: start + blocks,
                committed: start + blocks,
                stale: false,
                closed: false,
                swept: None,
                resets: 0,
            }),
            merger: Mutex::new(None),
            index: parking_lot::RwLock::new(None),
        }
    }

    /// Write the ring's slots beside the appends from now on with `ix`.
    pub fn set_index(&self, ix: Option<LogIndex>) {
        *self.index.write() = ix;
    }

    /// The index, if the log keeps one.
    pub fn index(&self) -> parking_lot::RwLockReadGuard<'_, Option<LogIndex>> {
        self.index.read()
    }

    /// The blocks of the ring the log is in now.
    pub fn ring(&self) -> u64 {
        self.state.lock().ring
    }

    /// Before a commit, beside the data file's sync: the index's slots
    /// synced ([`LogIndex::sync`]).
    pub fn sync_index(&self) {
        if let Some(ix) = self.index.read().as_ref() {
            ix.sync();
        }
    }

    /// Checkpoint `generation` committed (after [`RowLog::committed`]):
    /// the index's slots are true through it.
    pub fn index_committed(&self, generation: u64) {
        let ring = self.ring();
        if let Some(ix) = self.index.write().as_mut() {
            ix.committed(generation, ring);
        }
    }

    /// Wake `t` when an append takes the log past `merge_start`.
    pub fn set_merger(&self, t: std::thread::Thread) {
        *self.merger.lock() = Some(t);
    }

    /// Reserve up to `n` contiguous ring blocks for an append: the first
    /// one's index and how many, or `None` when the log is off, closed or
    /// full. At the ring's last block it returns the blocks up to it; the
    /// next call goes on from the ring's first.
    pub fn reserve(&self, n: u64) -> Option<(u32, u64)> {
        let mut st = self.state.lock();
        if st.closed || st.ring == 0 {
            return None;
        }
        let at = st.end % st.ring;
        let got = n.min(st.ring - st.len()).min(st.ring - at);
        if got == 0 {
            return None;
        }
        let before = st.len();
        st.end += got;
        let past = |n: u64| n as f64 > self.merge_start * st.ring as f64;
        if !past(before) && past(st.len()) {
            if let Some(t) = &*self.merger.lock() {
                t.unpark();
            }
        }
        Some((at as u32, got))
    }

    /// Blocks in the log: committed and appended since.
    pub fn len(&self) -> u64 {
        self.state.lock().len()
    }

    /// A logged row was written home with newer bytes: its log copy must
    /// not outlive the next checkpoint.
    pub fn mark_stale(&self) {
        self.state.lock().stale = true;
    }

    /// Refuse appends until the next merge (after a failed append, whose
    /// blocks must never be committed).
    pub fn close(&self) {
        let mut st = self.state.lock();
        st.closed = true;
        st.stale = true;
    }

    /// Whether the background merge should begin a pass: the log holds
    /// stale or uncommittable copies, or is more than `merge_start` full.
    /// Checkpoints decide their own merges ([`RowLog::checkpoint_merges`]).
    pub fn wants_merge(&self) -> bool {
        let st = self.state.lock();
        let past = st.len() as f64 > self.merge_start * st.ring as f64;
        st.len() > 0 && (st.stale || st.closed || past)
    }

    /// Whether a checkpoint should merge every logged row into the tables
    /// and empty the log. With the background merge (`background`), a fill
    /// past half is the thread's work, not the checkpoint's (the
    /// checkpoint after its pass moves the log's start instead), unless
    /// the thread has fallen behind to seven eighths full.
    pub fn checkpoint_merges(&self, background: bool) -> bool {
        let st = self.state.lock();
        let full = if background {
            st.len() * 8 > st.ring * 7
        } else {
            st.len() * 2 > st.ring
        };
        st.len() > 0 && (st.stale || st.closed || full)
    }

    /// The number of times the log's start moved (a background pass notes
    /// it when it begins, and hands it to [`RowLog::set_swept`]).
    pub fn resets(&self) -> u64 {
        self.state.lock().resets
    }

    /// The blocks a background pass beginning now merges: the log as the
    /// last checkpoint committed it (rows appended since go after it), the
    /// position it ends at, and [`RowLog::resets`]. Not the blocks
    /// appended since: an append reserves its blocks before it writes them
    /// and maps its rows there, so a pass could list their rows before
    /// they are mapped; a checkpoint waits for every append to finish.
    pub fn pass_span(&self) -> (LogSpan, u64, u64) {
        let st = self.state.lock();
        let span = LogSpan {
            first: st.start % st.ring.max(1),
            len: st.committed - st.start,
            ring: st.ring.max(1),
        };
        (span, st.committed, st.resets)
    }

    /// The background pass that began when the start had moved `resets`
    /// times has written home every row whose newest copy is before
    /// position `to`: the next checkpoint moves the start there. Whether it
    /// was taken (not if the start has moved since).
    pub fn set_swept(&self, resets: u64, to: u64) -> bool {
        let mut st = self.state.lock();
        if st.resets == resets && to > st.start && to <= st.end {
            st.swept = Some(to);
            true
        } else {
            false
        }
    }

    /// How long the background merge rests after a chunk, as a fraction
    /// of the chunk's time: as long as it took (training keeps half of
    /// the disk) up to half full, then less and less, down to no rest at
    /// three quarters full, so that the pass ends before a checkpoint
    /// must merge a log that has filled up.
    pub fn merge_rest(&self) -> f64 {
        let st = self.state.lock();
        let fill = st.len() as f64 / st.ring.max(1) as f64;
        ((0.75 - fill) / 0.25).clamp(0.0, 1.0)
    }

    /// Whether the log holds copies that must not be committed: some
    /// logged row was since written home (stale), or an append failed
    /// (closed). Unlike [`RowLog::wants_merge`], the log's fill is no
    /// reason: a checkpoint checks this again after its own flush.
    pub fn must_merge(&self) -> bool {
        let st = self.state.lock();
        st.len() > 0 && (st.stale || st.closed)
    }

    /// What the checkpoint now committing records of the log: empty after
    /// its merge (`merged`), else every block appended, from the position
    /// a finished background pass reached (or the start, if none has).
    pub fn commit_point(&self, merged: bool) -> LogCommit {
        let st = self.state.lock();
        if merged {
            return LogCommit {
                start: 0,
                blocks: 0,
                from: 0,
                ring: self.capacity,
            };
        }
        let start = st.swept.unwrap_or(st.start);
        let ring = st.ring.max(1);
        LogCommit {
            start: (start % ring) as u32,
            blocks: st.end - start,
            from: st.committed.saturating_sub(start) as u32,
            ring: st.ring,
        }
    }

    /// The commit of [`RowLog::commit_point`]`(merged)` is durable. Returns
    /// the ring blocks it freed, as at most two runs `(first, blocks)`:
    /// after a merge, every block the log spanned; else the blocks a
    /// finished pass merged (their rows' [`MERGED`] entries are the
    /// caller's to drop).
    pub fn committed(&self, merged: bool) -> Vec<(u64, u64)> {
        let mut st = self.state.lock();
        let ring = st.ring.max(1);
        let (from, to) = if merged {
            (st.start, st.end)
        } else {
            (st.start, st.swept.unwrap_or(st.start))
        };
        // At most the ring's blocks: two runs, split where it wraps.
        let freed = LogSpan {
            first: from % ring,
            len: to - from,
            ring,
        }
        .runs();
        if merged {
            *st = LogState {
                ring: self.capacity,
                start: 0,
                end: 0,
                committed: 0,
                stale: false,
                closed: false,
                swept: None,
                resets: st.resets + 1,
            };
        } else {
            if to > from {
                st.start = to;
                st.resets += 1;
            }
            st.swept = None;
            st.committed = st.end;
        }
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A span's windows cover its blocks once, in log order, at most `w`
    /// each, and none runs across the ring's end.
    #[test]
    fn a_span_walks_in_windows_that_stop_at_the_rings_end() {
        let span = LogSpan {
            first: 7,
            len: 10,
            ring: 12,
        };
        let got: Vec<(u64, u64)> = span.windows(3).collect();
        assert_eq!(got, vec![(7, 3), (10, 2), (0, 3), (3, 2)]);
        let whole = LogSpan {
            first: 0,
            len: 6,
            ring: 12,
        };
        assert_eq!(whole.windows(4).collect::<Vec<_>>(), vec![(0, 4), (4, 2)]);
        assert_eq!(whole.windows(0).count(), 6, "a window of at least a block");
    }
}
