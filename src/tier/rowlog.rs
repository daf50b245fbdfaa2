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
//! When some row of it was written home with a newer value after being
//! logged (its log copy is then stale), or the log is full enough, the next
//! checkpoint merges it: every logged row is written to its home group
//! (journaled like any in-place write), and the commit empties the log.
//! With the background merge, "full enough" is "the merge thread has been
//! through it" (or seven eighths full, if it falls behind): its copies of
//! logged rows written home are not stale (home holds the same bytes), so
//! checkpoints commit the log as it is until the thread is done.
//! `store-format/FORMAT.md` ("Row log") is the specification.

use std::collections::HashMap;

use parking_lot::Mutex;

/// A log block index meaning "not in the log".
pub(crate) const NOT_LOGGED: u32 = u32::MAX;

/// A log map entry meaning "logged, and since written home from its log
/// copy by the background merge": home holds the newest bytes, reads go
/// there, and the log's (committed) copy holds the same bytes. The entry
/// stays so that a later write of the row home with a newer value knows
/// that the log's copy has become stale.
pub(crate) const MERGED: u32 = u32::MAX - 1;

/// The log's place in the data file and its append point.
pub(crate) struct RowLog {
    /// First block of the log in the data file (where the tables end).
    pub base: u64,
    /// Blocks the log may hold (0: no log).
    pub capacity: u64,
    /// Live logged rows a merge lists at once (`[ssd] merge_list_rows`).
    pub merge_list_rows: usize,
    state: Mutex<LogState>,
    /// The background merge's thread, woken when an append takes the log
    /// past half full.
    merger: Mutex<Option<std::thread::Thread>>,
}

struct LogState {
    /// Blocks appended (the next one goes here).
    head: u64,
    /// Some logged row was since written home with newer bytes: the next
    /// checkpoint merges.
    stale: bool,
    /// Appends are refused until the next merge (a failed log write).
    closed: bool,
    /// The background merge has written home every row logged before its
    /// pass began: the next checkpoint merges the rest and empties the log.
    swept: bool,
    /// Times the log was emptied since open (a pass that began before an
    /// emptying did not sweep the log that followed it).
    resets: u64,
}

impl RowLog {
    /// A log of `capacity` blocks from block `base`, `head` of them
    /// committed; merges list `merge_list_rows` live rows at once.
    pub fn new(base: u64, capacity: u64, head: u64, merge_list_rows: usize) -> RowLog {
        RowLog {
            base,
            capacity: capacity.min(MERGED as u64),
            merge_list_rows: merge_list_rows.max(1),
            state: Mutex::new(LogState {
                head,
                stale: false,
                closed: false,
                swept: false,
                resets: 0,
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

    /// Whether the log wants merging: it holds stale or uncommittable
    /// copies, or is more than half full. Without the background merge,
    /// the next checkpoint merges when this holds; with it, this wakes the
    /// merge thread, and [`RowLog::checkpoint_merges`] decides.
    pub fn wants_merge(&self) -> bool {
        let st = self.state.lock();
        st.head > 0 && (st.stale || st.closed || st.head * 2 > self.capacity)
    }

    /// Whether a checkpoint should merge the log into the tables. With the
    /// background merge (`background`), a fill past half is the thread's
    /// work, not the checkpoint's: the checkpoint merges once the thread
    /// has swept the log (what is left is what was logged since), or when
    /// it has fallen behind to seven eighths full.
    pub fn checkpoint_merges(&self, background: bool) -> bool {
        let st = self.state.lock();
        let full = if background {
            st.swept || st.head * 8 > self.capacity * 7
        } else {
            st.head * 2 > self.capacity
        };
        st.head > 0 && (st.stale || st.closed || full)
    }

    /// The number of times the log was emptied (a background pass notes it
    /// when it begins, and hands it to [`RowLog::set_swept`]).
    pub fn resets(&self) -> u64 {
        self.state.lock().resets
    }

    /// The background merge has written home every row logged before the
    /// pass that began when the log had been emptied `resets` times.
    pub fn set_swept(&self, resets: u64) {
        let mut st = self.state.lock();
        if st.resets == resets && st.head > 0 {
            st.swept = true;
        }
    }

    /// How long the background merge rests after a chunk, as a fraction
    /// of the chunk's time: as long as it took (training keeps half of
    /// the disk) up to half full, then less and less, down to no rest at
    /// three quarters full, so that the pass ends before a checkpoint
    /// must merge a log that has filled up.
    pub fn merge_rest(&self) -> f64 {
        let fill = self.head() as f64 / self.capacity.max(1) as f64;
        ((0.75 - fill) / 0.25).clamp(0.0, 1.0)
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
            swept: false,
            resets: st.resets + 1,
        };
    }
}

/// A cached table shard's row-log map: each row whose newest written copy
/// is in the log, and its block (or [`MERGED`]), with a count of the
/// [`MERGED`] entries. A table of at most 2^32 rows keys it by `u32`: 8
/// bytes an entry, where `(u64, u32)` entries are padded to 16, so the map
/// costs about half the DRAM (it grows with the log, not with the cache,
/// and the cache budget does not count it).
pub(crate) struct LogMap {
    keys: Keys,
    /// Entries that are [`MERGED`].
    merged: usize,
}

enum Keys {
    /// Ids below 2^32.
    Narrow(HashMap<u32, u32>),
    /// Any id.
    Wide(HashMap<u64, u32>),
}

impl LogMap {
    /// An empty map for a table of `rows` rows.
    pub fn new(rows: u64) -> LogMap {
        let keys = if rows <= 1 << 32 {
            Keys::Narrow(HashMap::new())
        } else {
            Keys::Wide(HashMap::new())
        };
        LogMap { keys, merged: 0 }
    }

    /// A narrow map's key: every id of its table fits (`LogMap::new`).
    fn narrow(id: u64) -> u32 {
        debug_assert!(id <= u32::MAX as u64, "id {id} in a narrow log map");
        id as u32
    }

    /// Entries, [`MERGED`] ones included.
    pub fn len(&self) -> usize {
        match &self.keys {
            Keys::Narrow(m) => m.len(),
            Keys::Wide(m) => m.len(),
        }
    }

    /// Entries that are not [`MERGED`]: rows whose newest written copy is
    /// in the log only.
    pub fn live(&self) -> usize {
        self.len() - self.merged
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `id`'s entry.
    pub fn get(&self, id: u64) -> Option<u32> {
        match &self.keys {
            Keys::Narrow(m) => m.get(&Self::narrow(id)).copied(),
            Keys::Wide(m) => m.get(&id).copied(),
        }
    }

    /// Set `id`'s entry to block `b` (not [`MERGED`]).
    pub fn insert(&mut self, id: u64, b: u32) {
        debug_assert_ne!(b, MERGED);
        let old = match &mut self.keys {
            Keys::Narrow(m) => m.insert(Self::narrow(id), b),
            Keys::Wide(m) => m.insert(id, b),
        };
        if old == Some(MERGED) {
            self.merged -= 1;
        }
    }

    /// Drop `id`'s entry; whether it had one.
    pub fn remove(&mut self, id: u64) -> bool {
        let old = match &mut self.keys {
            Keys::Narrow(m) => m.remove(&Self::narrow(id)),
            Keys::Wide(m) => m.remove(&id),
        };
        if old == Some(MERGED) {
            self.merged -= 1;
        }
        old.is_some()
    }

    /// Make `id`'s entry [`MERGED`], if it has one that is not.
    pub fn mark_merged(&mut self, id: u64) {
        let b = match &mut self.keys {
            Keys::Narrow(m) => m.get_mut(&Self::narrow(id)),
            Keys::Wide(m) => m.get_mut(&id),
        };
        if let Some(b) = b.filter(|b| **b != MERGED) {
            *b = MERGED;
            self.merged += 1;
        }
    }

    /// Every entry, `(id, block)`, in no order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (u64, u32)> + '_> {
        match &self.keys {
            Keys::Narrow(m) => Box::new(m.iter().map(|(&id, &b)| (id as u64, b))),
            Keys::Wide(m) => Box::new(m.iter().map(|(&id, &b)| (id, b))),
        }
    }

    /// Drop every entry and give the memory back.
    pub fn clear(&mut self) {
        self.keys = match self.keys {
            Keys::Narrow(_) => Keys::Narrow(HashMap::new()),
            Keys::Wide(_) => Keys::Wide(HashMap::new()),
        };
        self.merged = 0;
    }

    /// The heap bytes the map holds, from its capacity and entry size
    /// (hashbrown: a power-of-two count of buckets at most 7/8 full, each
    /// an entry and a control byte, and one group of control bytes more).
    pub fn heap_bytes(&self) -> usize {
        let (cap, entry) = match &self.keys {
            Keys::Narrow(m) => (m.capacity(), std::mem::size_of::<(u32, u32)>()),
            Keys::Wide(m) => (m.capacity(), std::mem::size_of::<(u64, u32)>()),
        };
        if cap == 0 {
            return 0;
        }
        let buckets = if cap < 8 {
            (cap + 1).next_power_of_two()
        } else {
            (cap * 8 / 7).next_power_of_two()
        };
        buckets * (entry + 1) + 16
    }
}
