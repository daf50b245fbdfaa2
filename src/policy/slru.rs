//! Segmented LRU with libCacheSim's defaults (`SLRU.c`): four segments of
//! ⌊C/4⌋ each, segment 3 the hottest.
//! - a new slot enters the lowest segment with room, or segment 0;
//! - a hit promotes a slot one segment up (in segment 3, to its head); an
//!   overfull segment demotes its tail to the head of the segment below, and
//!   demoting out of segment 0 evicts, so a hit can evict (reported through
//!   `overflow`);
//! - eviction takes the tail of the lowest non-empty segment.

use super::chains::{Chains, Ends};
use super::{EvictionPolicy, Link};

/// SLRU over slots.
#[derive(Debug, Clone)]
pub struct Slru<L: Link> {
    chains: Chains<L>,
    segs: Vec<Ends<L>>,
    caps: Vec<usize>,
    seg_of: Vec<u8>,
    extra: Vec<usize>,
}

impl<L: Link> Slru<L> {
    /// SLRU over `capacity` slots with libCacheSim's default: four segments
    /// of ⌊C/4⌋.
    pub fn new(capacity: usize) -> Slru<L> {
        Slru::with_segments(capacity, vec![capacity / 4; 4])
    }

    /// SLRU whose segment `i` (0 the coldest) holds `caps[i]` slots.
    pub fn with_segments(capacity: usize, caps: Vec<usize>) -> Slru<L> {
        Slru {
            chains: Chains::new(capacity),
            segs: vec![Ends::default(); caps.len()],
            caps,
            seg_of: vec![0; capacity],
            extra: Vec::new(),
        }
    }

    /// Resident slots.
    pub fn len(&self) -> usize {
        self.segs.iter().map(|s| s.len()).sum()
    }

    /// Whether no slot is resident.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slot `evict` would take.
    pub fn peek_victim(&self) -> Option<usize> {
        self.segs
            .iter()
            .find(|s| !s.is_empty())
            .and_then(|s| s.tail())
    }

    fn evict_lowest(&mut self) -> usize {
        let i = (0..self.segs.len())
            .find(|&i| !self.segs[i].is_empty())
            .expect("a non-empty segment");
        self.chains.pop_tail(&mut self.segs[i]).expect("non-empty")
    }

    fn cool(&mut self, id: usize) {
        if id == 0 {
            let v = self.evict_lowest();
            self.extra.push(v);
            return;
        }
        let t = self.segs[id].tail().expect("overfull segment is non-empty");
        self.chains.unlink(&mut self.segs[id], t);
        self.chains.push_head(&mut self.segs[id - 1], t);
        self.seg_of[t] = (id - 1) as u8;
        while self.segs[id - 1].len() > self.caps[id - 1] {
            self.cool(id - 1);
        }
    }
}

impl<L: Link> EvictionPolicy for Slru<L> {
    fn miss(&mut self, _key: u64) -> bool {
        self.caps[0] >= 1
    }

    fn insert(&mut self, slot: usize, _key: u64) {
        let i = (0..self.segs.len())
            .find(|&i| self.segs[i].len() < self.caps[i])
            .unwrap_or(0);
        self.seg_of[slot] = i as u8;
        self.chains.push_head(&mut self.segs[i], slot);
    }

    fn hit(&mut self, slot: usize) {
        let s = self.seg_of[slot] as usize;
        self.chains.unlink(&mut self.segs[s], slot);
        if s == self.segs.len() - 1 {
            self.chains.push_head(&mut self.segs[s], slot);
            return;
        }
        self.chains.push_head(&mut self.segs[s + 1], slot);
        self.seg_of[slot] = (s + 1) as u8;
        while self.segs[s + 1].len() > self.caps[s + 1] {
            self.cool(s + 1);
        }
    }

    fn evict(&mut self) -> usize {
        self.evict_lowest()
    }

    fn overflow(&mut self) -> Option<usize> {
        self.extra.pop()
    }

    fn remove(&mut self, slot: usize) {
        let s = self.seg_of[slot] as usize;
        self.chains.unlink(&mut self.segs[s], slot);
    }

    fn meta_bytes(&self) -> usize {
        self.chains.meta_bytes() + self.seg_of.capacity()
    }
}
