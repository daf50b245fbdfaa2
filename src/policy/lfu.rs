//! LFU with FIFO order among equal frequencies, as libCacheSim's `LFU`: a
//! slot enters with frequency 1; a hit moves it to the newest end of the next
//! frequency's queue; the victim is the oldest slot of the lowest non-empty
//! frequency. Frequencies are forgotten on eviction.

use rustc_hash::FxHashMap as HashMap;

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
            buckets: HashMap::default(),
            min_freq: 1,
            max_freq: 1,
        }
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
        let b = self.buckets.entry(1).or_default();
        self.chains.push_head(b, slot);
    }

    fn hit(&mut self, slot: usize) {
        let f = self.freq[slot];
        let old = self.buckets.entry(f).or_default();
        self.chains.unlink(old, slot);
        let emptied = old.is_empty();
        self.freq[slot] = f + 1;
        self.max_freq = self.max_freq.max(f + 1);
        let new = self.buckets.entry(f + 1).or_default();
        self.chains.push_head(new, slot);
        if f == self.min_freq && emptied {
            // The slot itself now holds the next frequency: no scan.
            self.min_freq = f + 1;
        }
    }

    fn evict(&mut self) -> usize {
        let f = self.min_freq;
        let b = self.buckets.entry(f).or_default();
        let victim = self
            .chains
            .pop_tail(b)
            .expect("min-frequency queue is non-empty");
        if b.is_empty() {
            self.raise_min();
        }
        victim
    }

    fn remove(&mut self, slot: usize) {
        let f = self.freq[slot];
        let b = self.buckets.entry(f).or_default();
        self.chains.unlink(b, slot);
        if f == self.min_freq && b.is_empty() {
            self.raise_min();
        }
    }

    fn meta_bytes(&self) -> usize {
        self.chains.meta_bytes() + self.freq.capacity() * 4 + self.buckets.capacity() * 24
    }
}
