//! ARC (Megiddo and Modha, FAST '03), as libCacheSim's `ARC.c`: T1 and T2
//! hold data; B1 and B2 remember keys evicted from them; p (a float, as in
//! libCacheSim) is T1's target size.
//! - a hit in T1 or T2 moves the slot to T2's head;
//! - a miss found in B1 raises p by max(|B2| / |B1|, 1), one found in B2
//!   lowers it by max(|B1| / |B2|, 1); the key leaves the ghost and enters
//!   T2 (after REPLACE, if the cache is full); any other miss enters T1;
//! - REPLACE moves T1's LRU to B1 if (|T1| > 0 and (|T1| > p, or |T1| = p and
//!   the key was in B2)) or T2 is empty; otherwise T2's LRU to B2;
//! - evicting for any other miss: if |T1| + |B1| ≥ C, drop B1's LRU (if B1
//!   is not empty, then REPLACE) or else evict T1's LRU outright; otherwise,
//!   if the four lists hold 2C keys, drop B2's LRU, then REPLACE.

use super::chains::{Chains, Ends, Ghost};
use super::{EvictionPolicy, Link};

/// ARC over slots.
#[derive(Debug, Clone)]
pub struct Arc<L: Link> {
    chains: Chains<L>,
    t1: Ends<L>,
    t2: Ends<L>,
    in_t2: Vec<bool>,
    keys: Vec<u64>,
    b1: Ghost,
    b2: Ghost,
    p: f64,
    cap: usize,
    in_b1: bool,
    in_b2: bool,
}

impl<L: Link> Arc<L> {
    /// ARC over `capacity` slots.
    pub fn new(capacity: usize) -> Arc<L> {
        Arc {
            chains: Chains::new(capacity),
            t1: Ends::default(),
            t2: Ends::default(),
            in_t2: vec![false; capacity],
            keys: vec![0; capacity],
            // ARC itself bounds the ghosts (B1 <= C, all lists <= 2C).
            b1: Ghost::new(2 * capacity + 2),
            b2: Ghost::new(2 * capacity + 2),
            p: 0.0,
            cap: capacity,
            in_b1: false,
            in_b2: false,
        }
    }

    /// REPLACE: move one resident slot's key into a ghost list; returns the slot.
    fn replace(&mut self) -> Option<usize> {
        let t1 = self.t1.len() as f64;
        let to_b1 =
            (t1 > 0.0 && (t1 > self.p || (t1 == self.p && self.in_b2))) || self.t2.is_empty();
        if to_b1 {
            let v = self.chains.pop_tail(&mut self.t1)?;
            self.b1.add(self.keys[v]);
            Some(v)
        } else {
            let v = self.chains.pop_tail(&mut self.t2)?;
            self.in_t2[v] = false;
            self.b2.add(self.keys[v]);
            Some(v)
        }
    }
}

impl<L: Link> EvictionPolicy for Arc<L> {
    fn miss(&mut self, key: u64) -> bool {
        // The ratios are of the ghosts' lengths before `key` leaves.
        self.in_b1 = self.b1.remove(key);
        self.in_b2 = !self.in_b1 && self.b2.remove(key);
        if self.in_b1 {
            let delta = (self.b2.len() as f64 / (self.b1.len() + 1) as f64).max(1.0);
            self.p = (self.p + delta).min(self.cap as f64);
        } else if self.in_b2 {
            let delta = (self.b1.len() as f64 / (self.b2.len() + 1) as f64).max(1.0);
            self.p = (self.p - delta).max(0.0);
        }
        true
    }

    fn insert(&mut self, slot: usize, key: u64) {
        self.keys[slot] = key;
        let to_t2 = self.in_b1 || self.in_b2;
        self.in_b1 = false;
        self.in_b2 = false;
        self.in_t2[slot] = to_t2;
        if to_t2 {
            self.chains.push_head(&mut self.t2, slot);
        } else {
            self.chains.push_head(&mut self.t1, slot);
        }
    }

    fn hit(&mut self, slot: usize) {
        if self.in_t2[slot] {
            self.chains.unlink(&mut self.t2, slot);
        } else {
            self.chains.unlink(&mut self.t1, slot);
            self.in_t2[slot] = true;
        }
        self.chains.push_head(&mut self.t2, slot);
    }

    fn evict(&mut self) -> usize {
        if self.in_b1 || self.in_b2 {
            return self.replace().expect("a resident slot");
        }
        if self.t1.len() + self.b1.len() + 1 > self.cap {
            if !self.b1.is_empty() {
                self.b1.pop_oldest();
                return self.replace().expect("a resident slot");
            }
            return self.chains.pop_tail(&mut self.t1).expect("T1 is non-empty");
        }
        if self.t1.len() + self.b1.len() + self.t2.len() + self.b2.len() >= 2 * self.cap
            && !self.b2.is_empty()
        {
            self.b2.pop_oldest();
        }
        self.replace().expect("a resident slot")
    }

    fn remove(&mut self, slot: usize) {
        if self.in_t2[slot] {
            self.chains.unlink(&mut self.t2, slot);
        } else {
            self.chains.unlink(&mut self.t1, slot);
        }
        self.in_t2[slot] = false;
    }

    fn prefetch(&self, key: u64) {
        self.b1.prefetch(key);
        self.b2.prefetch(key);
    }

    fn dense_keys(&mut self, n_keys: usize) {
        self.b1.dense_keys(n_keys);
        self.b2.dense_keys(n_keys);
    }

    fn meta_bytes(&self) -> usize {
        self.chains.meta_bytes()
            + self.in_t2.capacity()
            + self.keys.capacity() * 8
            + self.b1.heap_bytes()
            + self.b2.heap_bytes()
    }
}
