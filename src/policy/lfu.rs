//! LFU with FIFO order among equal frequencies, as libCacheSim's `LFU`: a
//! slot enters with frequency 1; a hit moves it to the newest end of the next
//! frequency's queue; the victim is the oldest slot of the lowest non-empty
//! frequency. Frequencies are forgotten on eviction.

use std::collections::HashMap;

use super::chains::{Chains, Ends};
use super::{EvictionPolicy, Link};

/// LFU over slots.
#[derive(Debug, Clone)]
pub struct Lfu<L: Link> {
    chains: Chains<L>,
    freq: Vec<u32>,
    buckets: HashMap<u32, Ends<L>>,
    min_freq: u32,
    max_freq: u32,
}

impl<L: Link> Lfu<L> {
    /// LFU over `capacity` slots.
    pub fn new(capacity: usize) -> Lfu<L> {
        Lfu {
            chains: Chains::new(capacity),
            freq: vec![0; capacity],
            buckets: HashMap::new(),
            min_freq: 1,
            max_freq: 1,
        }
    }

    fn bucket(&mut self, f: u32) -> &mut Ends<L> {
        self.buckets.entry(f).or_default()
    }

    /// The lowest non-empty frequency above the current minimum.
    fn raise_min(&mut self) {
        let mut f = self.min_freq + 1;
        while f <= self.max_freq {
            if self.buckets.get(&f).is_some_and(|b| !b.is_empty()) {
                self.min_freq = f;
                return;
            }
            f += 1;
        }
    }
}

impl<L: Link> EvictionPolicy for Lfu<L> {
    fn insert(&mut self, slot: usize, _key: u64) {
        self.min_freq = 1;
        self.freq[slot] = 1;
        let mut b = *self.bucket(1);
        self.chains.push_head(&mut b, slot);
        self.buckets.insert(1, b);
    }

    fn hit(&mut self, slot: usize) {
        let f = self.freq[slot];
        let mut old = *self.bucket(f);
        self.chains.unlink(&mut old, slot);
        self.buckets.insert(f, old);
        self.freq[slot] = f + 1;
        self.max_freq = self.max_freq.max(f + 1);
        let mut new = *self.bucket(f + 1);
        self.chains.push_head(&mut new, slot);
        self.buckets.insert(f + 1, new);
        if f == self.min_freq && old.is_empty() {
            self.raise_min();
        }
    }

    fn evict(&mut self) -> usize {
        let f = self.min_freq;
        let mut b = *self.bucket(f);
        let victim = self
            .chains
            .pop_tail(&mut b)
            .expect("min-frequency queue is non-empty");
        self.buckets.insert(f, b);
        if b.is_empty() {
            self.raise_min();
        }
        victim
    }

    fn remove(&mut self, slot: usize) {
        let f = self.freq[slot];
        let mut b = *self.bucket(f);
        self.chains.unlink(&mut b, slot);
        self.buckets.insert(f, b);
        if f == self.min_freq && b.is_empty() {
            self.raise_min();
        }
    }

    fn meta_bytes(&self) -> usize {
        self.chains.meta_bytes() + self.freq.capacity() * 4 + self.buckets.capacity() * 24
    }
}
