//! The row log: dirty rows written back are appended, packed, to the
//! region of the data file after the tables, instead of read-modify-writing
//! each row's block group in place.
//!
//! A cached table keeps, per shard, a map from each row whose newest
//! written copy is in the log to its log block; a miss reads that block
//! instead of the row's home group. The log only grows between
//! checkpoints; a checkpoint commits its length in the superblock, so
//! recovery rebuilds the maps by scanning the committed blocks, and blocks
//! written after the last commit are ignored (they need no undo journal).
//! When the log is more than half full, or when some row of it was written
//! home after being logged (its log copy is then stale), the next
//! checkpoint merges it: every logged row is written to its home group
//! (journaled like any in-place write), and the commit empties the log.
//! `store-format/FORMAT.md` ("Row log") is the specification.

use parking_lot::Mutex;

/// A log block index meaning "not in the log".
pub(crate) const NOT_LOGGED: u32 = u32::MAX;

/// The log's place in the data file and its append point.
pub(crate) struct RowLog {
    /// First block of the log in the data file (where the tables end).
    pub base: u64,
    /// Blocks the log may hold (0: no log).
    pub capacity: u64,
    state: Mutex<LogState>,
    /// The background merge's thread, woken when an append takes the log
    /// past half full.
    merger: Mutex<Option<std::thread::Thread>>,
}

struct LogState {
    /// Blocks appended (the next one goes here).
    head: u64,
    /// Some logged row was since written home: the next checkpoint merges.
    stale: bool,
    /// Appends are refused until the next merge (a failed log write).
    closed: bool,
}

impl RowLog {
    /// A log of `capacity` blocks from block `base`, `head` of them
    /// committed.
    pub fn new(base: u64, capacity: u64, head: u64) -> RowLog {
        RowLog {
            base,
            capacity: capacity.min(NOT_LOGGED as u64),
            state: Mutex::new(LogState {
                head,
                stale: false,
                closed: false,
            }),
            merger: Mutex::new(None),
        }
    }

    /// Wake `t` when an append takes the log past half full.
    pub fn set_merger(&self, t: std::thread::Thread) {
        *self.merger.lock() = Some(t);
    }

    /// Reserve up to `n` blocks for an append: the first one's index and
    /// how many, or `None` when the log is off, closed or full.
    pub fn reserve(&self, n: u64) -> Option<(u32, u64)> {
        let mut st = self.state.lock();
        let got = n.min(self.capacity.saturating_sub(st.head));
        if st.closed || got == 0 {
            return None;
        }
        let at = st.head;
        st.head += got;
        if at * 2 <= self.capacity && st.head * 2 > self.capacity {
            if let Some(t) = &*self.merger.lock() {
                t.unpark();
            }
        }
        Some((at as u32, got))
    }

    /// Blocks appended so far.
    pub fn head(&self) -> u64 {
        self.state.lock().head
    }

    /// A logged row was written home: its log copy must not outlive the
    /// next checkpoint.
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

    /// Whether the next checkpoint should merge the log into the tables.
    pub fn wants_merge(&self) -> bool {
        let st = self.state.lock();
        st.head > 0 && (st.stale || st.closed || st.head * 2 > self.capacity)
    }

    /// Whether the log holds copies that must not be committed: some
    /// logged row was since written home (stale), or an append failed
    /// (closed). Unlike [`RowLog::wants_merge`], the log's fill is no
    /// reason: a checkpoint checks this again after its own flush.
    pub fn must_merge(&self) -> bool {
        let st = self.state.lock();
        st.head > 0 && (st.stale || st.closed)
    }

    /// Start appends from the log's beginning (the merge has made every
    /// logged row's home current, and its commit is durable).
    pub fn reset(&self) {
        let mut st = self.state.lock();
        *st = LogState {
            head: 0,
            stale: false,
            closed: false,
        };
    }
}
