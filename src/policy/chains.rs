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
    set: rustc_hash::FxHashMap<u64, u64>,          // key -> generation of its entry
    gen: u64,
    cap: usize,
}

impl Ghost {
    /// A ghost of at most `cap` keys.
    pub fn new(cap: usize) -> Ghost {
        Ghost {
            cap,
            ..Ghost::default()
        }
    }

    /// Whether `key` is remembered.
    pub fn contains(&self, key: u64) -> bool {
        self.set.contains_key(&key)
    }

    /// Forget `key`; true if it was remembered.
    pub fn remove(&mut self, key: u64) -> bool {
        self.set.remove(&key).is_some()
    }

    /// Remember `key` (no-op if present), forgetting the oldest when full.
    pub fn add(&mut self, key: u64) {
        if self.cap == 0 || self.set.contains_key(&key) {
            return;
        }
        while self.set.len() >= self.cap {
            self.pop_oldest();
        }
        self.gen += 1;
        self.set.insert(key, self.gen);
        self.queue.push_back((key, self.gen));
        // Drop stale entries (removed keys) now and then.
        if self.queue.len() > self.cap.saturating_mul(2).saturating_add(16) {
            let set = &self.set;
            self.queue.retain(|(k, g)| set.get(k) == Some(g));
        }
    }

    /// Forget the oldest remembered key; returns it.
    pub fn pop_oldest(&mut self) -> Option<u64> {
        while let Some((k, g)) = self.queue.pop_front() {
            if self.set.get(&k) == Some(&g) {
                self.set.remove(&k);
                return Some(k);
            }
        }
        None
    }

    /// Remembered keys.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}
