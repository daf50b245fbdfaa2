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

use std::collections::HashMap;

use parking_lot::Mutex;

/// A log block index meaning "not in the log".
pub(crate) const NOT_LOGGED: u32 = u32::MAX;

/// A log map entry meaning "logged, and since written home from its log
/// copy by the background merge": home holds the newest bytes, reads go
/// there, and the log's (committed) copy holds the same bytes. The entry
/// stays until the checkpoint that moves the log's start past that copy,
/// so that a write of the row home with a newer value meanwhile knows that
/// the log's copy has become stale.
pub(crate) const MERGED: u32 = u32::MAX - 1;

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

/// A cached table shard's row-log map: each row whose newest written copy
/// is in the log, and its block (or [`MERGED`]). Live entries are a hash
/// map; the [`MERGED`] ones (a background pass's rows, kept until the
/// checkpoint after it) a compressed bitmap of ids, about a bit a row
/// where they are dense, not a hash entry each: after a pass they are
/// most of the map. A table of at most 2^32 rows keys it by `u32`: 8 bytes
/// an entry, where `(u64, u32)` entries are padded to 16. The map grows
/// with the log, not with the cache, and the cache budget does not count
/// it.
pub(crate) struct LogMap {
    inner: Inner,
}

enum Inner {
    /// Ids below 2^32.
    Narrow(Entries<u32, roaring::RoaringBitmap>),
    /// Any id.
    Wide(Entries<u64, roaring::RoaringTreemap>),
}

/// Dispatch to the map's entries, whichever their key.
macro_rules! entries {
    ($inner:expr, $e:ident => $body:expr) => {
        match $inner {
            Inner::Narrow($e) => $body,
            Inner::Wide($e) => $body,
        }
    };
}

/// A key of the live map.
trait Key: Copy + Eq + std::hash::Hash {
    fn of(id: u64) -> Self;
    fn id(self) -> u64;
}

impl Key for u32 {
    /// Every id of a narrow map's table fits (`LogMap::new`).
    fn of(id: u64) -> u32 {
        debug_assert!(id <= u32::MAX as u64, "id {id} in a narrow log map");
        id as u32
    }
    fn id(self) -> u64 {
        self as u64
    }
}

impl Key for u64 {
    fn of(id: u64) -> u64 {
        id
    }
    fn id(self) -> u64 {
        self
    }
}

/// The set of [`MERGED`] ids.
trait MergedSet<K>: Default {
    fn has(&self, k: K) -> bool;
    fn put(&mut self, k: K);
    /// Whether it held `k`.
    fn take(&mut self, k: K) -> bool;
    fn count(&self) -> u64;
    fn ids(&self) -> Box<dyn Iterator<Item = u64> + '_>;
    /// About its heap bytes (its serialised size: the containers' data).
    fn bytes(&self) -> usize;
}

/// [`MergedSet`] for a roaring set of `$k`.
macro_rules! roaring_merged_set {
    ($set:ty, $k:ty) => {
        impl MergedSet<$k> for $set {
            fn has(&self, k: $k) -> bool {
                self.contains(k)
            }
            fn put(&mut self, k: $k) {
                self.insert(k);
            }
            fn take(&mut self, k: $k) -> bool {
                self.remove(k)
            }
            fn count(&self) -> u64 {
                self.len()
            }
            fn ids(&self) -> Box<dyn Iterator<Item = u64> + '_> {
                Box::new(self.iter().map(u64::from))
            }
            fn bytes(&self) -> usize {
                if self.is_empty() {
                    0
                } else {
                    self.serialized_size()
                }
            }
        }
    };
}

roaring_merged_set!(roaring::RoaringBitmap, u32);
roaring_merged_set!(roaring::RoaringTreemap, u64);

/// A map's entries: live ones by key, [`MERGED`] ones in a set. An id is
/// in at most one of them.
struct Entries<K, S> {
    live: HashMap<K, u32>,
    merged: S,
}

impl<K: Key, S: MergedSet<K>> Entries<K, S> {
    fn new() -> Self {
        Entries {
            live: HashMap::new(),
            merged: S::default(),
        }
    }
    fn get(&self, id: u64) -> Option<u32> {
        let k = K::of(id);
        match self.live.get(&k) {
            Some(&b) => Some(b),
            None if self.merged.count() > 0 && self.merged.has(k) => Some(MERGED),
            None => None,
        }
    }
    fn insert(&mut self, id: u64, b: u32) {
        let k = K::of(id);
        if self.live.insert(k, b).is_none() && self.merged.count() > 0 {
            self.merged.take(k);
        }
    }
    fn remove(&mut self, id: u64) -> bool {
        let k = K::of(id);
        self.live.remove(&k).is_some() || (self.merged.count() > 0 && self.merged.take(k))
    }
    fn mark_merged(&mut self, id: u64) {
        let k = K::of(id);
        if self.live.remove(&k).is_some() {
            self.merged.put(k);
        }
    }
    fn iter(&self) -> Box<dyn Iterator<Item = (u64, u32)> + '_> {
        Box::new(
            self.live
                .iter()
                .map(|(&k, &b)| (k.id(), b))
                .chain(self.merged.ids().map(|id| (id, MERGED))),
        )
    }
    fn drop_merged(&mut self) {
        self.merged = S::default();
        // A pass moved its entries out of the live map, which keeps the
        // room they had: give it back once the map is a quarter full.
        if self.live.capacity() > 4 * self.live.len() {
            self.live.shrink_to(2 * self.live.len());
        }
    }
    /// The live map's heap bytes, from its capacity and entry size
    /// (hashbrown: a power-of-two count of buckets at most 7/8 full, each
    /// an entry and a control byte, and one group of control bytes more),
    /// and the merged set's.
    fn heap_bytes(&self) -> usize {
        let cap = self.live.capacity();
        let live = if cap == 0 {
            0
        } else {
            let buckets = if cap < 8 {
                (cap + 1).next_power_of_two()
            } else {
                (cap * 8 / 7).next_power_of_two()
            };
            buckets * (std::mem::size_of::<(K, u32)>() + 1) + 16
        };
        live + self.merged.bytes()
    }
}

impl LogMap {
    /// An empty map for a table of `rows` rows.
    pub fn new(rows: u64) -> LogMap {
        let inner = if rows <= 1 << 32 {
            Inner::Narrow(Entries::new())
        } else {
            Inner::Wide(Entries::new())
        };
        LogMap { inner }
    }

    /// Entries, [`MERGED`] ones included.
    pub fn len(&self) -> usize {
        entries!(&self.inner, e => e.live.len() + e.merged.count() as usize)
    }

    /// Entries that are not [`MERGED`]: rows whose newest written copy is
    /// in the log only.
    pub fn live(&self) -> usize {
        entries!(&self.inner, e => e.live.len())
    }

    /// Whether it has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `id`'s entry.
    pub fn get(&self, id: u64) -> Option<u32> {
        entries!(&self.inner, e => e.get(id))
    }

    /// Set `id`'s entry to block `b` (not [`MERGED`]).
    pub fn insert(&mut self, id: u64, b: u32) {
        debug_assert_ne!(b, MERGED);
        entries!(&mut self.inner, e => e.insert(id, b))
    }

    /// Drop `id`'s entry; whether it had one.
    pub fn remove(&mut self, id: u64) -> bool {
        entries!(&mut self.inner, e => e.remove(id))
    }

    /// Make `id`'s entry [`MERGED`], if it has one that is not.
    pub fn mark_merged(&mut self, id: u64) {
        entries!(&mut self.inner, e => e.mark_merged(id))
    }

    /// Every entry, `(id, block)`, in no order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (u64, u32)> + '_> {
        entries!(&self.inner, e => e.iter())
    }

    /// Drop the [`MERGED`] entries (the log's start has moved past their
    /// copies), giving back the room of a live map that shrank to a
    /// quarter.
    pub fn drop_merged(&mut self) {
        entries!(&mut self.inner, e => e.drop_merged())
    }

    /// Drop every entry and give the memory back.
    pub fn clear(&mut self) {
        entries!(&mut self.inner, e => *e = Entries::new())
    }

    /// The heap bytes the map holds, about: the live map's from its
    /// capacity and entry size, the merged set's from its size.
    pub fn heap_bytes(&self) -> usize {
        entries!(&self.inner, e => e.heap_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The log map against a plain map of `(id, block or MERGED)`, under
    /// random appends, writes home, merges, a pass's end and clears, on
    /// both key widths; ids collide often (a small range) and spread
    /// (a large one).
    #[test]
    fn the_log_map_is_a_plain_map_of_its_entries() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for (rows, span) in [(1u64 << 20, 300u64), (1 << 20, 1 << 20), (1 << 40, 5000)] {
            let base = if rows > 1 << 32 { 1 << 35 } else { 0 };
            let mut m = LogMap::new(rows);
            let mut want: HashMap<u64, u32> = HashMap::new();
            for step in 0..200_000u64 {
                let id = base + next() % span;
                match next() % 100 {
                    0..=49 => {
                        let b = (next() % 1000) as u32;
                        m.insert(id, b);
                        want.insert(id, b);
                    }
                    50..=64 => assert_eq!(m.remove(id), want.remove(&id).is_some()),
                    65..=94 => {
                        m.mark_merged(id);
                        if let Some(b) = want.get_mut(&id) {
                            *b = MERGED;
                        }
                    }
                    95..=98 if step % 7 == 0 => {
                        m.drop_merged();
                        want.retain(|_, b| *b != MERGED);
                    }
                    99 if step % 50 == 0 => {
                        m.clear();
                        want.clear();
                    }
                    _ => {}
                }
                assert_eq!(m.get(id), want.get(&id).copied(), "id {id} at step {step}");
                if step % 10_000 == 0 {
                    let live = want.values().filter(|&&b| b != MERGED).count();
                    assert_eq!((m.len(), m.live()), (want.len(), live));
                    assert_eq!(m.is_empty(), want.is_empty());
                    let mut got: Vec<(u64, u32)> = m.iter().collect();
                    got.sort_unstable();
                    let mut all: Vec<(u64, u32)> = want.iter().map(|(&k, &v)| (k, v)).collect();
                    all.sort_unstable();
                    assert_eq!(got, all, "entries at step {step}");
                    assert!(want.is_empty() || m.heap_bytes() > 0);
                }
            }
        }
    }

    /// A pass's [`MERGED`] entries cost no hash slots: after 100,000 rows
    /// are merged and 100,000 others logged, the map holds the room of
    /// 100,000 hash entries and a bitmap, not of 200,000 entries (2.4 MB
    /// in hashbrown's buckets of 9 bytes).
    #[test]
    fn merged_entries_cost_a_bit_not_a_hash_entry() {
        let mut m = LogMap::new(1 << 20);
        for id in 0..100_000 {
            m.insert(id, 7);
        }
        for id in 0..100_000 {
            m.mark_merged(id);
        }
        for id in 100_000..200_000 {
            m.insert(id, 8);
        }
        assert_eq!((m.len(), m.live()), (200_000, 100_000));
        let bytes = m.heap_bytes();
        assert!(bytes < 1_400_000, "{bytes} heap bytes");
        m.drop_merged();
        assert_eq!(
            (m.len(), m.get(5), m.get(150_000)),
            (100_000, None, Some(8))
        );
    }
}
