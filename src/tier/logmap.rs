//! A cached table shard's row-log map: each row whose newest written copy
//! is in the row log, and its block (or [`MERGED`]).
//!
//! It grows with the log, not with the cache, so its bytes an entry
//! matter: W5 (`docs/benchmarks.md`) holds 5-7 million entries. A table of
//! fewer than 2^32 - 1 rows keys it by `u32` in [`Packed`], an
//! open-addressing table of `u64` slots (key and block in one word) that
//! stays 64-80% full by growing a quarter at a time: 10-12.5 bytes an
//! entry. A general-purpose map of `(u32, u32)` costs 9 bytes a bucket at
//! 44-88% full (10-20 bytes an entry), and doubles every shard's table at
//! about the same moment, since hashing spreads the rows evenly.

use std::collections::HashMap;

use crate::hash::mix64;

/// A log map entry meaning "logged, and since written home from its log
/// copy by the background merge": home holds the newest bytes, reads go
/// there, and the log's (committed) copy holds the same bytes. The entry
/// stays until the checkpoint that moves the log's start past that copy,
/// so that a write of the row home with a newer value meanwhile knows that
/// the log's copy has become stale.
pub(crate) const MERGED: u32 = u32::MAX - 1;

/// See the module's doc.
pub(crate) struct LogMap {
    keys: Keys,
    /// Entries that are [`MERGED`].
    merged: usize,
}

enum Keys {
    /// Ids below `u32::MAX`.
    Narrow(Packed),
    /// Any id.
    Wide(HashMap<u64, u32>),
}

impl LogMap {
    /// An empty map for a table of `rows` rows.
    pub fn new(rows: u64) -> LogMap {
        let keys = if rows < u32::MAX as u64 {
            Keys::Narrow(Packed::default())
        } else {
            Keys::Wide(HashMap::new())
        };
        LogMap { keys, merged: 0 }
    }

    /// A narrow map's key: every id of its table fits (`LogMap::new`).
    fn narrow(id: u64) -> u32 {
        debug_assert!(id < u32::MAX as u64, "id {id} in a narrow log map");
        id as u32
    }

    /// Entries, [`MERGED`] ones included.
    pub fn len(&self) -> usize {
        match &self.keys {
            Keys::Narrow(m) => m.len,
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
            Keys::Narrow(m) => m.find(Self::narrow(id)).map(|i| value(m.slots[i])),
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
            Keys::Narrow(m) => m.remove(Self::narrow(id)),
            Keys::Wide(m) => m.remove(&id),
        };
        if old == Some(MERGED) {
            self.merged -= 1;
        }
        old.is_some()
    }

    /// Make `id`'s entry [`MERGED`], if it has one that is not.
    pub fn mark_merged(&mut self, id: u64) {
        let changed = match &mut self.keys {
            Keys::Narrow(m) => {
                let key = Self::narrow(id);
                match m.find(key) {
                    Some(i) if value(m.slots[i]) != MERGED => {
                        m.slots[i] = slot(key, MERGED);
                        true
                    }
                    _ => false,
                }
            }
            Keys::Wide(m) => match m.get_mut(&id) {
                Some(b) if *b != MERGED => {
                    *b = MERGED;
                    true
                }
                _ => false,
            },
        };
        if changed {
            self.merged += 1;
        }
    }

    /// Every entry, `(id, block)`, in no order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (u64, u32)> + '_> {
        match &self.keys {
            Keys::Narrow(m) => Box::new(
                m.slots
                    .iter()
                    .filter(|&&s| s != EMPTY)
                    .map(|&s| (key(s) as u64, value(s))),
            ),
            Keys::Wide(m) => Box::new(m.iter().map(|(&id, &b)| (id, b))),
        }
    }

    /// Drop the [`MERGED`] entries (the log's start has moved past their
    /// copies), giving back the room of a map that shrank.
    pub fn drop_merged(&mut self) {
        if self.merged == 0 {
            return;
        }
        match &mut self.keys {
            Keys::Narrow(m) => m.retain_not(MERGED),
            Keys::Wide(m) => {
                m.retain(|_, b| *b != MERGED);
                if m.capacity() > 4 * m.len() {
                    m.shrink_to(2 * m.len());
                }
            }
        }
        self.merged = 0;
    }

    /// Drop every entry and give the memory back.
    pub fn clear(&mut self) {
        self.keys = match self.keys {
            Keys::Narrow(_) => Keys::Narrow(Packed::default()),
            Keys::Wide(_) => Keys::Wide(HashMap::new()),
        };
        self.merged = 0;
    }

    /// The heap bytes the map holds, from its capacity and entry size
    /// (for the wide map, hashbrown's: a power-of-two count of buckets at
    /// most 7/8 full, each an entry and a control byte, and one group of
    /// control bytes more).
    pub fn heap_bytes(&self) -> usize {
        match &self.keys {
            Keys::Narrow(m) => m.slots.capacity() * std::mem::size_of::<u64>(),
            Keys::Wide(m) => {
                let cap = m.capacity();
                if cap == 0 {
                    return 0;
                }
                let buckets = if cap < 8 {
                    (cap + 1).next_power_of_two()
                } else {
                    (cap * 8 / 7).next_power_of_two()
                };
                buckets * (std::mem::size_of::<(u64, u32)>() + 1) + 16
            }
        }
    }
}

/// A free slot: key `u32::MAX`, which no narrow id is.
const EMPTY: u64 = u64::MAX;
/// The fewest slots a non-empty table has.
const MIN_SLOTS: usize = 16;

#[inline]
fn slot(key: u32, value: u32) -> u64 {
    ((key as u64) << 32) | value as u64
}

#[inline]
fn key(s: u64) -> u32 {
    (s >> 32) as u32
}

#[inline]
fn value(s: u64) -> u32 {
    s as u32
}

/// Slots for `len` entries at 80% full.
fn slots_for(len: usize) -> usize {
    (len * 5).div_ceil(4).max(MIN_SLOTS)
}

/// Slots of a table rebuilt for `len` entries: 64% full, so that it
/// neither grows nor shrinks again soon.
fn rebuilt_slots(len: usize) -> usize {
    slots_for(len) * 5 / 4
}

/// Linear probing over `u64` slots, each a key and its value, reduced by
/// multiply-high so that the table's size need not be a power of two
/// (it grows a quarter at a time); deletion shifts the run back, so there
/// are no tombstones. At most 80% full; a grown table is 64% full.
#[derive(Default)]
struct Packed {
    slots: Vec<u64>,
    len: usize,
}

impl Packed {
    #[inline]
    fn home(&self, k: u32) -> usize {
        ((mix64(k as u64 ^ 0x9e37_79b9_7f4a_7c15) as u128 * self.slots.len() as u128) >> 64)
            as usize
    }

    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    /// The slot holding `k`.
    fn find(&self, k: u32) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mut i = self.home(k);
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if key(s) == k {
                return Some(i);
            }
            i = self.next(i);
        }
    }

    /// Set `k` to `v`; the old value, if any.
    fn insert(&mut self, k: u32, v: u32) -> Option<u32> {
        if let Some(i) = self.find(k) {
            let old = value(self.slots[i]);
            self.slots[i] = slot(k, v);
            return Some(old);
        }
        if (self.len + 1) * 5 > self.slots.len() * 4 {
            self.resize(slots_for(self.len + 1).max(self.slots.len() + self.slots.len() / 4));
        }
        self.place(slot(k, v));
        self.len += 1;
        None
    }

    /// Put a slot whose key is not in the table at its probe position.
    fn place(&mut self, s: u64) {
        let mut i = self.home(key(s));
        while self.slots[i] != EMPTY {
            i = self.next(i);
        }
        self.slots[i] = s;
    }

    /// Drop `k`; its value, if it had one.
    fn remove(&mut self, k: u32) -> Option<u32> {
        let mut hole = self.find(k)?;
        let old = value(self.slots[hole]);
        // Backward-shift deletion: move back every later slot of the run
        // whose home does not lie cyclically in (hole, j].
        let mut j = self.next(hole);
        while self.slots[j] != EMPTY {
            let h = self.home(key(self.slots[j]));
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
            j = self.next(j);
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
        if self.len == 0 {
            *self = Packed::default();
        } else if self.len * 4 < self.slots.len() && self.slots.len() > MIN_SLOTS {
            self.resize(rebuilt_slots(self.len));
        }
        Some(old)
    }

    /// Keep the entries whose value is not `v`, in a table sized for them.
    fn retain_not(&mut self, v: u32) {
        // Emptied slots break probe runs, but the rebuild places every
        // kept slot afresh.
        for s in self
            .slots
            .iter_mut()
            .filter(|s| **s != EMPTY && value(**s) == v)
        {
            *s = EMPTY;
        }
        self.len = self.slots.iter().filter(|&&s| s != EMPTY).count();
        if self.len == 0 {
            *self = Packed::default();
        } else {
            self.resize(rebuilt_slots(self.len));
        }
    }

    /// Rebuild in `n` slots (at least `len / 0.8`).
    fn resize(&mut self, n: usize) {
        let n = n.max(slots_for(self.len));
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; n]);
        for s in old {
            if s != EMPTY {
                self.place(s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packed table at its limits: key 0, the largest narrow key,
    /// growth from empty, removal down to empty, and its load.
    #[test]
    fn the_packed_table_holds_its_extremes_and_its_load() {
        let mut m = Packed::default();
        let top = u32::MAX - 1;
        for k in (0..50_000u32).chain([top]) {
            assert_eq!(m.insert(k, k ^ 7), None);
        }
        assert_eq!(m.len, 50_001);
        assert!(m.slots.len() * 4 >= m.len * 5, "at most 80% full");
        assert!(
            m.slots.len() * 16 <= m.len * 25 + 16 * 25,
            "at least 64% full"
        );
        assert_eq!(m.find(top).map(|i| value(m.slots[i])), Some(top ^ 7));
        assert_eq!(m.insert(0, 3), Some(7));
        for k in (0..50_000u32).chain([top]) {
            assert!(m.remove(k).is_some(), "key {k}");
        }
        assert_eq!(
            (m.len, m.slots.len()),
            (0, 0),
            "an empty table gives its room back"
        );
        assert_eq!(m.remove(5), None);
    }

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
        for (rows, span) in [
            (1u64 << 20, 300u64),
            (1 << 20, 1 << 20),
            (u32::MAX as u64 - 1, 1 << 20),
            (1 << 40, 5000),
        ] {
            let base = if rows > 1 << 32 {
                1 << 35
            } else {
                rows.saturating_sub(span)
            };
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
}
