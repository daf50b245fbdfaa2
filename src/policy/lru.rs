//! LRU and FIFO: one queue, which a hit reorders (LRU) or not (FIFO).

use super::{EvictionPolicy, Link, List};

/// Least recently used: a hit moves the slot to the head, the tail is evicted.
#[derive(Debug, Clone)]
pub struct Lru<L: Link> {
    list: List<L>,
}

impl<L: Link> Lru<L> {
    /// LRU over `capacity` slots.
    pub fn new(capacity: usize) -> Lru<L> {
        Lru {
            list: List::new(capacity),
        }
    }
}

impl<L: Link> EvictionPolicy for Lru<L> {
    #[inline]
    fn insert(&mut self, slot: usize, _key: u64) {
        self.list.push_front(slot);
    }
    #[inline]
    fn hit(&mut self, slot: usize) {
        self.list.move_to_front(slot);
    }
    #[inline]
    fn evict(&mut self) -> usize {
        self.list.pop_back().expect("evict on an empty LRU")
    }
    #[inline]
    fn remove(&mut self, slot: usize) {
        self.list.remove(slot);
    }
    fn meta_bytes(&self) -> usize {
        self.list.meta_bytes()
    }
}

/// First in, first out: hits do not reorder.
#[derive(Debug, Clone)]
pub struct Fifo<L: Link> {
    list: List<L>,
}

impl<L: Link> Fifo<L> {
    /// FIFO over `capacity` slots.
    pub fn new(capacity: usize) -> Fifo<L> {
        Fifo {
            list: List::new(capacity),
        }
    }
}

impl<L: Link> EvictionPolicy for Fifo<L> {
    #[inline]
    fn insert(&mut self, slot: usize, _key: u64) {
        self.list.push_front(slot);
    }
    #[inline]
    fn hit(&mut self, _slot: usize) {}
    #[inline]
    fn evict(&mut self) -> usize {
        self.list.pop_back().expect("evict on an empty FIFO")
    }
    #[inline]
    fn remove(&mut self, slot: usize) {
        self.list.remove(slot);
    }
    fn meta_bytes(&self) -> usize {
        self.list.meta_bytes()
    }
}
