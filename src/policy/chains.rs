//! Several doubly linked queues over one slot space, sharing one links array
//! (each slot is in at most one queue): the structure under LFU's frequency
//! buckets and the queues of S3-FIFO, 2Q, SLRU and ARC.

use super::Link;

/// A queue's ends and length. `head` is the newest end.
#[derive(Debug, Clone, Copy)]
pub struct Ends<L: Link> {
    head: L,
    tail: L,
    len: usize,
}

impl<L: Link> Default for Ends<L> {
    fn default() -> Self {
        Ends {
            head: L::NIL,
            tail: L::NIL,
            len: 0,
        }
    }
}

impl<L: Link> Ends<L> {
    /// Slots in the queue.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The oldest slot.
    pub fn tail(&self) -> Option<usize> {
        (self.tail != L::NIL).then(|| self.tail.slot())
    }
    /// The newest slot.
    pub fn head(&self) -> Option<usize> {
        (self.head != L::NIL).then(|| self.head.slot())
    }
}

/// Shared links of several queues.
#[derive(Debug, Clone)]
pub struct Chains<L: Link> {
    links: Vec<[L; 2]>, // [towards head, towards tail]
}

impl<L: Link> Chains<L> {
    /// Links for `capacity` slots.
    pub fn new(capacity: usize) -> Chains<L> {
        assert!(
            capacity <= L::MAX_SLOTS,
            "{capacity} slots exceed the link width"
        );
        Chains {
            links: vec![[L::NIL, L::NIL]; capacity],
        }
    }

    /// Push `slot` at the head (newest end) of `q`.
    #[inline]
    pub fn push_head(&mut self, q: &mut Ends<L>, slot: usize) {
        let s = L::from_slot(slot);
        self.links[slot] = [L::NIL, q.head];
        if q.head != L::NIL {
            self.links[q.head.slot()][0] = s;
        } else {
            q.tail = s;
        }
        q.head = s;
        q.len += 1;
    }

    /// Unlink `slot` from `q`.
    #[inline]
    pub fn unlink(&mut self, q: &mut Ends<L>, slot: usize) {
        let [prev, next] = self.links[slot];
        if prev != L::NIL {
            self.links[prev.slot()][1] = next;
        } else {
            q.head = next;
        }
        if next != L::NIL {
            self.links[next.slot()][0] = prev;
        } else {
            q.tail = prev;
        }
        self.links[slot] = [L::NIL, L::NIL];
        q.len -= 1;
    }

    /// Remove and return the tail (oldest) of `q`.
    #[inline]
    pub fn pop_tail(&mut self, q: &mut Ends<L>) -> Option<usize> {
        let t = q.tail()?;
        self.unlink(q, t);
        Some(t)
    }

    /// The slot one step towards the head from `slot`.
    #[inline]
    pub fn newer(&self, slot: usize) -> Option<usize> {
        let p = self.links[slot][0];
        (p != L::NIL).then(|| p.slot())
    }

    /// Heap bytes.
    pub fn meta_bytes(&self) -> usize {
        self.links.capacity() * std::mem::size_of::<[L; 2]>()
    }
}

/// A FIFO of keys with set membership: the ghost queues of S3-FIFO, 2Q and ARC.
#[derive(Debug, Clone, Default)]
pub struct Ghost {
    queue: std::collections::VecDeque<(u64, u64)>, // (key, generation)
    members: Members,
    len: usize,
    gen: u64,
    cap: usize,
}

/// Which keys a [`Ghost`] remembers, and the generation of each one's entry
/// in the queue (an entry whose generation differs is stale).
#[derive(Debug, Clone)]
enum Members {
    /// Any key, hashed.
    Hashed(rustc_hash::FxHashMap<u64, u64>),
    /// Keys below the vector's length, indexed (0: not remembered; the
    /// generations start at 1).
    Dense(Vec<u64>),
}

impl Default for Members {
    fn default() -> Self {
        Members::Hashed(Default::default())
    }
}

impl Members {
    #[inline]
    fn get(&self, key: u64) -> Option<u64> {
        match self {
            Members::Hashed(m) => m.get(&key).copied(),
            Members::Dense(v) => match v[key as usize] {
                0 => None,
                g => Some(g),
            },
        }
    }

    #[inline]
    fn remove(&mut self, key: u64) -> bool {
        match self {
            Members::Hashed(m) => m.remove(&key).is_some(),
            Members::Dense(v) => std::mem::take(&mut v[key as usize]) != 0,
        }
    }

    /// Remember `key` at `gen` unless it is remembered: true if it was not.
    /// One probe.
    #[inline]
    fn insert_new(&mut self, key: u64, gen: u64) -> bool {
        match self {
            Members::Hashed(m) => match m.entry(key) {
                std::collections::hash_map::Entry::Occupied(_) => false,
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(gen);
                    true
                }
            },
            Members::Dense(v) => {
                let g = &mut v[key as usize];
                let new = *g == 0;
                if new {
                    *g = gen;
                }
                new
            }
        }
    }

    /// Forget `key` if its entry is generation `gen`: true if it was. One
    /// probe.
    #[inline]
    fn remove_if(&mut self, key: u64, gen: u64) -> bool {
        match self {
            Members::Hashed(m) => match m.entry(key) {
                std::collections::hash_map::Entry::Occupied(e) if *e.get() == gen => {
                    e.remove();
                    true
                }
                _ => false,
            },
            Members::Dense(v) => {
                let g = &mut v[key as usize];
                let hit = *g == gen;
                if hit {
                    *g = 0;
                }
                hit
            }
        }
    }
}

/// How many entries ahead of the oldest [`Ghost::pop_oldest`] asks for
/// the membership of.
const POP_AHEAD: usize = 8;

/// The most keys a [`Ghost`] indexes instead of hashing
/// ([`Ghost::dense_keys`]): 8 bytes a key, 128 MiB at most.
pub const MAX_DENSE_GHOST_KEYS: usize = 1 << 24;

/// The most keys a [`Ghost`] indexes per key it may remember
/// ([`Ghost::dense_keys`]): an index costs 8 bytes a key of the key space,
/// a hashed ghost about 24 bytes a key it holds.
pub const DENSE_KEYS_PER_ENTRY: usize = 16;

impl Ghost {
    /// A ghost of at most `cap` keys.
    pub fn new(cap: usize) -> Ghost {
        Ghost {
            cap,
            ..Ghost::default()
        }
    }

    /// Every key from now on is below `n_keys` (and every key remembered
    /// already is): index them in a vector of `n_keys` instead of hashing,
    /// if that is worth its memory, 8 bytes a key whatever the ghost holds:
    /// `n_keys` at most [`MAX_DENSE_GHOST_KEYS`] and at most
    /// [`DENSE_KEYS_PER_ENTRY`] times the ghost's capacity. Otherwise the
    /// keys are hashed (a ghost that indexed them goes back to hashing).
    /// Keys remembered stay remembered either way; a later call may raise
    /// `n_keys`.
    pub fn dense_keys(&mut self, n_keys: usize) {
        let worth = n_keys <= MAX_DENSE_GHOST_KEYS
            && n_keys <= DENSE_KEYS_PER_ENTRY.saturating_mul(self.cap.max(1));
        match &mut self.members {
            Members::Dense(v) if worth => {
                if v.len() < n_keys {
                    v.resize(n_keys, 0);
                }
            }
            Members::Dense(v) => {
                let m = v
                    .iter()
                    .enumerate()
                    .filter(|&(_, &g)| g != 0)
                    .map(|(k, &g)| (k as u64, g))
                    .collect();
                self.members = Members::Hashed(m);
            }
            Members::Hashed(m) if worth => {
                let mut v = vec![0; n_keys];
                for (&k, &g) in m.iter() {
                    v[k as usize] = g;
                }
                self.members = Members::Dense(v);
            }
            Members::Hashed(_) => {}
        }
    }

    /// Ask for the memory [`Ghost::remove`] of `key` reads, where the keys
    /// are indexed (a hint; a hashed ghost asks for nothing).
    #[inline]
    pub fn prefetch(&self, key: u64) {
        if let Members::Dense(v) = &self.members {
            crate::hint::prefetch(v.as_ptr().wrapping_add(key as usize));
        }
    }

    /// Whether `key` is remembered.
    pub fn contains(&self, key: u64) -> bool {
        self.members.get(key).is_some()
    }

    /// Forget `key`; true if it was remembered.
    pub fn remove(&mut self, key: u64) -> bool {
        let removed = self.members.remove(key);
        self.len -= removed as usize;
        removed
    }

    /// Remember `key` (no-op if present), forgetting the oldest when full.
    pub fn add(&mut self, key: u64) {
        if self.cap == 0 || !self.members.insert_new(key, self.gen + 1) {
            return;
        }
        self.gen += 1;
        self.len += 1;
        self.queue.push_back((key, self.gen));
        // The live entries before this one are the oldest, so this forgets
        // what forgetting before remembering would.
        while self.len > self.cap {
            self.pop_oldest();
        }
        // Drop stale entries (removed keys) now and then.
        if self.queue.len() > self.cap.saturating_mul(2).saturating_add(16) {
            let members = &self.members;
            self.queue.retain(|&(k, g)| members.get(k) == Some(g));
        }
    }

    /// Forget the oldest remembered key; returns it.
    pub fn pop_oldest(&mut self) -> Option<u64> {
        // The entries pop in queue order: ask for the membership of one
        // a few pops ahead.
        if let Some(&(k, _)) = self.queue.get(POP_AHEAD) {
            self.prefetch(k);
        }
        while let Some((k, g)) = self.queue.pop_front() {
            if self.members.remove_if(k, g) {
                self.len -= 1;
                return Some(k);
            }
        }
        None
    }

    /// Remembered keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes: the queue's entries and the membership table (a hashed
    /// bucket is its key, its generation and a control byte).
    pub fn heap_bytes(&self) -> usize {
        self.queue.capacity() * std::mem::size_of::<(u64, u64)>()
            + match &self.members {
                Members::Hashed(m) => m.capacity() * (2 * std::mem::size_of::<u64>() + 1),
                Members::Dense(v) => v.capacity() * std::mem::size_of::<u64>(),
            }
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ghost, hashed or indexed, is a FIFO of distinct keys that forgets
    /// its oldest past `cap`: checked against a plain queue after every
    /// add, remove and pop.
    #[test]
    fn ghosts_are_bounded_queues_of_distinct_keys() {
        for cap in [0usize, 1, 3, 50] {
            for dense in [false, true] {
                let mut g = Ghost::new(cap);
                if dense {
                    g.dense_keys(120);
                }
                let mut model = std::collections::VecDeque::<u64>::new();
                let mut x = 7 + cap as u64;
                for step in 0..20_000 {
                    x = crate::init::mix64(x);
                    let key = (x >> 8) % 120;
                    match x % 6 {
                        0..=2 => {
                            g.add(key);
                            if cap > 0 && !model.contains(&key) {
                                model.push_back(key);
                                if model.len() > cap {
                                    model.pop_front();
                                }
                            }
                        }
                        3 | 4 => {
                            let at = model.iter().position(|&k| k == key);
                            if let Some(i) = at {
                                model.remove(i);
                            }
                            assert_eq!(g.remove(key), at.is_some(), "remove {key} at {step}");
                        }
                        _ => assert_eq!(g.pop_oldest(), model.pop_front(), "pop at {step}"),
                    }
                    assert_eq!(g.len(), model.len(), "len at {step}");
                    for k in 0..120 {
                        assert_eq!(g.contains(k), model.contains(&k), "{k} at {step}");
                    }
                }
            }
        }
    }

    /// A ghost that indexes keys answers every operation as one that
    /// hashes them, including one switched to indexing midway (with keys
    /// remembered) and one whose key space grows later.
    #[test]
    fn indexed_ghosts_equal_hashed_ones() {
        for cap in [0usize, 1, 5, 20, 64] {
            let mut hashed = Ghost::new(cap);
            let mut dense = Ghost::new(cap);
            dense.dense_keys(100);
            let mut switched = Ghost::new(cap);
            let mut x = cap as u64 + 1;
            for step in 0..20_000u64 {
                x = crate::init::mix64(x);
                // Keys below 100 at first, below 300 after the growth.
                let space = if step < 10_000 { 100 } else { 300 };
                if step == 3_000 {
                    switched.dense_keys(100);
                }
                if step == 10_000 {
                    dense.dense_keys(300);
                    switched.dense_keys(300);
                }
                let key = (x >> 8) % space;
                let op = x % 4;
                let want = match op {
                    0 | 1 => {
                        hashed.add(key);
                        dense.add(key);
                        switched.add(key);
                        None
                    }
                    2 => {
                        let r = hashed.remove(key);
                        assert_eq!(dense.remove(key), r, "remove {key} at {step}");
                        assert_eq!(switched.remove(key), r, "remove {key} at {step}");
                        None
                    }
                    _ => Some(hashed.pop_oldest()),
                };
                if let Some(w) = want {
                    assert_eq!(dense.pop_oldest(), w, "pop at {step}");
                    assert_eq!(switched.pop_oldest(), w, "pop at {step}");
                }
                for g in [&dense, &switched] {
                    assert_eq!(g.len(), hashed.len(), "len at {step}");
                    assert_eq!(g.contains(key), hashed.contains(key), "{key} at {step}");
                }
            }
            // Ghosts of 20 keys or more index 300 keys; smaller ones hash.
            for g in [&dense, &switched] {
                assert_eq!(
                    matches!(g.members, Members::Dense(_)),
                    cap >= 20,
                    "cap {cap}"
                );
            }
        }
    }

    /// A key space past the bounds keeps hashing (and still works); one
    /// that grows past them after indexing goes back to hashing, keeping
    /// what it remembers.
    #[test]
    fn a_key_space_past_the_bounds_hashes() {
        let mut g = Ghost::new(4);
        g.dense_keys(MAX_DENSE_GHOST_KEYS + 1);
        assert!(matches!(g.members, Members::Hashed(_)));
        g.add(u64::MAX);
        assert!(g.contains(u64::MAX));

        let mut g = Ghost::new(1 << 20);
        g.dense_keys(100);
        assert!(matches!(g.members, Members::Dense(_)));
        g.add(7);
        g.dense_keys(MAX_DENSE_GHOST_KEYS + 1);
        assert!(matches!(g.members, Members::Hashed(_)));
        assert!(g.contains(7));
        g.add(1 << 24);
        assert!(g.contains(1 << 24));
        assert_eq!(g.len(), 2);

        // Too many keys for what a small ghost holds: hashed.
        let mut g = Ghost::new(10);
        g.dense_keys(10 * DENSE_KEYS_PER_ENTRY + 1);
        assert!(matches!(g.members, Members::Hashed(_)));
    }
}
