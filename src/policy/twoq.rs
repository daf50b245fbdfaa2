//! 2Q (Johnson and Shasha, VLDB '94), with libCacheSim's defaults
//! (`TwoQ.c`): Ain, a FIFO of ⌊0.25·C⌋; Aout, a ghost FIFO of ⌊0.5·C⌋ keys;
//! Am, an LRU of the rest.
//! - a miss in Aout goes to Am (evicting Am's LRU if Am is full: a second
//!   eviction, reported through `overflow`); any other miss goes to Ain;
//! - a hit in Ain changes nothing; a hit in Am moves to its head;
//! - eviction takes Ain's oldest into Aout while Ain is over its share,
//!   else Am's least recently used.

use super::chains::{Chains, Ends, Ghost};
use super::{EvictionPolicy, Link};

/// 2Q over slots.
#[derive(Debug, Clone)]
pub struct TwoQ<L: Link> {
    chains: Chains<L>,
    ain: Ends<L>,
    am: Ends<L>,
    in_am: Vec<bool>,
    keys: Vec<u64>,
    aout: Ghost,
    ain_cap: usize,
    am_cap: usize,
    hit_on_ghost: bool,
    extra: Option<usize>,
}

impl<L: Link> TwoQ<L> {
    /// 2Q over `capacity` slots.
    pub fn new(capacity: usize) -> TwoQ<L> {
        let ain_cap = (capacity as f64 * 0.25) as usize;
        TwoQ {
            chains: Chains::new(capacity),
            ain: Ends::default(),
            am: Ends::default(),
            in_am: vec![false; capacity],
            keys: vec![0; capacity],
            aout: Ghost::new((capacity as f64 * 0.5) as usize),
            ain_cap,
            am_cap: capacity - ain_cap,
            hit_on_ghost: false,
            extra: None,
        }
    }
}

impl<L: Link> EvictionPolicy for TwoQ<L> {
    fn miss(&mut self, key: u64) -> bool {
        self.hit_on_ghost = self.aout.remove(key);
        self.ain_cap >= 1
    }

    fn insert(&mut self, slot: usize, key: u64) {
        self.keys[slot] = key;
        if std::mem::take(&mut self.hit_on_ghost) {
            // Am makes room for itself first, as an LRU of its own size.
            if self.am.len() >= self.am_cap {
                let v = self.chains.pop_tail(&mut self.am).expect("Am is full");
                self.in_am[v] = false;
                self.extra = Some(v);
            }
            self.in_am[slot] = true;
            self.chains.push_head(&mut self.am, slot);
        } else {
            self.in_am[slot] = false;
            self.chains.push_head(&mut self.ain, slot);
        }
    }

    fn hit(&mut self, slot: usize) {
        if self.in_am[slot] {
            self.chains.unlink(&mut self.am, slot);
            self.chains.push_head(&mut self.am, slot);
        }
    }

    fn evict(&mut self) -> usize {
        if self.ain.len() > self.ain_cap || self.am.is_empty() {
            let v = self
                .chains
                .pop_tail(&mut self.ain)
                .expect("Ain is non-empty");
            self.aout.add(self.keys[v]);
            v
        } else {
            let v = self.chains.pop_tail(&mut self.am).expect("Am is non-empty");
            self.in_am[v] = false;
            v
        }
    }

    fn overflow(&mut self) -> Option<usize> {
        self.extra.take()
    }

    fn remove(&mut self, slot: usize) {
        if self.in_am[slot] {
            self.chains.unlink(&mut self.am, slot);
        } else {
            self.chains.unlink(&mut self.ain, slot);
        }
        self.in_am[slot] = false;
    }

    fn prefetch(&self, key: u64) {
        self.aout.prefetch(key);
    }

    fn dense_keys(&mut self, n_keys: usize) {
        self.aout.dense_keys(n_keys);
    }

    fn meta_bytes(&self) -> usize {
        self.chains.meta_bytes()
            + self.in_am.capacity()
            + self.keys.capacity() * 8
            + self.aout.heap_bytes()
    }
}
