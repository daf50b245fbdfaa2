//! S3-FIFO (Yang, Zhang, Qiu, Yue, Rashmi; SOSP '23), with libCacheSim's
//! defaults and details (`S3FIFO.c`):
//! - a small FIFO of ⌊0.10·C⌋ slots, a main FIFO of the rest, and a ghost
//!   FIFO of ⌊0.90·C⌋ keys;
//! - a miss whose key is in the ghost goes to main; any other to small,
//!   except that before the first eviction a full small queue sends new
//!   slots to main;
//! - a hit increments the slot's frequency;
//! - leaving small, a slot accessed at least twice moves to main (frequency
//!   reset to 0); otherwise it is evicted and its key enters the ghost;
//! - main is a 2-bit CLOCK: a slot with frequency f ≥ 1 is reinserted with
//!   min(f, 3) − 1; one with 0 is evicted;
//! - nothing is admitted while small holds fewer than 2 slots (so a cache of
//!   fewer than 20 slots admits only ghost hits, and has none).

use super::chains::{Chains, Ends, Ghost};
use super::{EvictionPolicy, Link};

/// S3-FIFO over slots.
#[derive(Debug, Clone)]
pub struct S3Fifo<L: Link> {
    chains: Chains<L>,
    small: Ends<L>,
    main: Ends<L>,
    in_main: Vec<bool>,
    freq: Vec<u8>,
    keys: Vec<u64>,
    ghost: Ghost,
    small_cap: usize,
    main_cap: usize,
    has_evicted: bool,
    hit_on_ghost: bool,
}

impl<L: Link> S3Fifo<L> {
    /// S3-FIFO over `capacity` slots.
    pub fn new(capacity: usize) -> S3Fifo<L> {
        let small_cap = (capacity as f64 * 0.10) as usize;
        S3Fifo {
            chains: Chains::new(capacity),
            small: Ends::default(),
            main: Ends::default(),
            in_main: vec![false; capacity],
            freq: vec![0; capacity],
            keys: vec![0; capacity],
            ghost: Ghost::new((capacity as f64 * 0.90) as usize),
            small_cap,
            main_cap: capacity - small_cap,
            has_evicted: false,
            hit_on_ghost: false,
        }
    }

    fn evict_small(&mut self) -> Option<usize> {
        while let Some(t) = self.small.tail() {
            self.chains.unlink(&mut self.small, t);
            if self.freq[t] >= 2 {
                self.freq[t] = 0;
                self.in_main[t] = true;
                self.chains.push_head(&mut self.main, t);
            } else {
                self.ghost.add(self.keys[t]);
                return Some(t);
            }
        }
        None
    }

    fn evict_main(&mut self) -> usize {
        loop {
            let t = self.main.tail().expect("main is non-empty");
            self.chains.unlink(&mut self.main, t);
            let f = self.freq[t];
            if f >= 1 {
                self.freq[t] = f.min(3) - 1;
                self.chains.push_head(&mut self.main, t);
            } else {
                return t;
            }
        }
    }
}

impl<L: Link> EvictionPolicy for S3Fifo<L> {
    fn miss(&mut self, key: u64) -> bool {
        self.hit_on_ghost = self.ghost.remove(key);
        self.hit_on_ghost || self.small_cap >= 2
    }

    fn insert(&mut self, slot: usize, key: u64) {
        self.keys[slot] = key;
        self.freq[slot] = 0;
        let to_main = std::mem::take(&mut self.hit_on_ghost)
            || (!self.has_evicted && self.small.len() >= self.small_cap);
        self.in_main[slot] = to_main;
        if to_main {
            self.chains.push_head(&mut self.main, slot);
        } else {
            self.chains.push_head(&mut self.small, slot);
        }
    }

    fn hit(&mut self, slot: usize) {
        self.freq[slot] = self.freq[slot].saturating_add(1);
    }

    fn evict(&mut self) -> usize {
        self.has_evicted = true;
        loop {
            if self.main.len() > self.main_cap || self.small.is_empty() {
                let v = self.evict_main();
                self.in_main[v] = false;
                return v;
            }
            if let Some(v) = self.evict_small() {
                return v;
            }
        }
    }

    fn remove(&mut self, slot: usize) {
        if self.in_main[slot] {
            self.chains.unlink(&mut self.main, slot);
        } else {
            self.chains.unlink(&mut self.small, slot);
        }
        self.in_main[slot] = false;
    }

    fn prefetch(&self, key: u64) {
        self.ghost.prefetch(key);
    }

    fn dense_keys(&mut self, n_keys: usize) {
        self.ghost.dense_keys(n_keys);
    }

    fn meta_bytes(&self) -> usize {
        self.chains.meta_bytes()
            + self.in_main.capacity()
            + self.freq.capacity()
            + self.keys.capacity() * 8
            + self.ghost.heap_bytes()
    }
}
