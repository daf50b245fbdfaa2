//! SIEVE (Zhang, Yang, Yue, Vigfusson, Rashmi; NSDI '24).
//!
//! New slots enter at the head with their visited bit clear; a hit sets the
//! bit. The hand walks from the tail towards the head: a visited slot has its
//! bit cleared and is kept, the first unvisited one is evicted, and the hand
//! stays where it stopped. This follows libCacheSim's `Sieve.c`.

use super::{EvictionPolicy, Link, List};

/// SIEVE over slots.
#[derive(Debug, Clone)]
pub struct Sieve<L: Link> {
    list: List<L>,
    visited: Vec<u64>,
    hand: Option<usize>,
}

impl<L: Link> Sieve<L> {
    /// SIEVE over `capacity` slots.
    pub fn new(capacity: usize) -> Sieve<L> {
        Sieve {
            list: List::new(capacity),
            visited: vec![0; capacity.div_ceil(64)],
            hand: None,
        }
    }

    #[inline]
    fn visited(&self, s: usize) -> bool {
        self.visited[s / 64] >> (s % 64) & 1 == 1
    }

    #[inline]
    fn set_visited(&mut self, s: usize, v: bool) {
        let bit = 1u64 << (s % 64);
        if v {
            self.visited[s / 64] |= bit;
        } else {
            self.visited[s / 64] &= !bit;
        }
    }
}

impl<L: Link> EvictionPolicy for Sieve<L> {
    #[inline]
    fn insert(&mut self, slot: usize, _key: u64) {
        self.set_visited(slot, false);
        self.list.push_front(slot);
    }

    #[inline]
    fn hit(&mut self, slot: usize) {
        self.set_visited(slot, true);
    }

    fn evict(&mut self) -> usize {
        let mut cur = self
            .hand
            .or(self.list.tail())
            .expect("evict on an empty SIEVE");
        while self.visited(cur) {
            self.set_visited(cur, false);
            cur = self
                .list
                .prev(cur)
                .or(self.list.tail())
                .expect("non-empty list has a tail");
        }
        self.hand = self.list.prev(cur);
        self.list.remove(cur);
        cur
    }

    fn remove(&mut self, slot: usize) {
        if self.hand == Some(slot) {
            self.hand = self.list.prev(slot);
        }
        self.list.remove(slot);
        self.set_visited(slot, false);
    }

    fn meta_bytes(&self) -> usize {
        self.list.meta_bytes() + self.visited.capacity() * 8
    }
}
