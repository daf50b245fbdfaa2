//! LFU with FIFO order among equal frequencies, as libCacheSim's `LFU`: a
//! slot enters with frequency 1; a hit moves it to the newest end of the next
//! frequency's queue; the victim is the oldest slot of the lowest non-empty
//! frequency. Frequencies are forgotten on eviction.

use super::chains::{Chains, Ends};
use super::{EvictionPolicy, Link};

/// LFU over slots.
#[derive(Debug, Clone)]
pub struct Lfu<L: Link> {
    chains: Chains<L>,
    freq: Vec<u32>,
    /// The queue of each frequency, indexed by it (0 unused). Every
    /// frequency up to the highest was some slot's on its way up, so a
    /// vector holds no more queues than a map of the ones seen would.
    buckets: Vec<Ends<L>>,
    min_freq: u32,
    max_freq: u32,
}

impl<L: Link> Lfu<L> {
    /// LFU over `capacity` slots.
    pub fn new(capacity: usize) -> Lfu<L> {
        Lfu {
            chains: Chains::new(capacity),
            freq: vec![0; capacity],
            buckets: vec![Ends::default(); 2],
            min_freq: 1,
            max_freq: 1,
        }
    }

    /// The lowest non-empty frequency above the current minimum.
    fn raise_min(&mut self) {
        let mut f = self.min_freq + 1;
        while f <= self.max_freq {
            if !self.buckets[f as usize].is_empty() {
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
        self.chains.push_head(&mut self.buckets[1], slot);
    }

    fn hit(&mut self, slot: usize) {
        let f = self.freq[slot];
        let old = &mut self.buckets[f as usize];
        self.chains.unlink(old, slot);
        let emptied = old.is_empty();
        self.freq[slot] = f + 1;
        if f + 1 > self.max_freq {
            self.max_freq = f + 1;
            self.buckets.push(Ends::default());
        }
        self.chains
            .push_head(&mut self.buckets[f as usize + 1], slot);
        if f == self.min_freq && emptied {
            // The slot itself now holds the next frequency: no scan.
            self.min_freq = f + 1;
        }
    }

    fn evict(&mut self) -> usize {
        let b = &mut self.buckets[self.min_freq as usize];
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
        let b = &mut self.buckets[f as usize];
        self.chains.unlink(b, slot);
        if f == self.min_freq && b.is_empty() {
            self.raise_min();
        }
    }

    fn meta_bytes(&self) -> usize {
        self.chains.meta_bytes()
            + self.freq.capacity() * 4
            + self.buckets.capacity() * std::mem::size_of::<Ends<L>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LFU evicts as a plain model does: the lowest frequency, oldest
    /// arrival at it first; slots removed at random on the way.
    #[test]
    fn evicts_the_oldest_of_the_lowest_frequency() {
        let cap = 40;
        let mut lfu = Lfu::<u32>::new(cap);
        // Per slot: (frequency, when it reached it), or None if free.
        let mut model: Vec<Option<(u32, u64)>> = vec![None; cap];
        let mut x = 11u64;
        for now in 0..50_000u64 {
            x = crate::init::mix64(x);
            let slot = (x >> 8) as usize % cap;
            let Some((f, _)) = model[slot] else {
                lfu.insert(slot, 0);
                model[slot] = Some((1, now));
                continue;
            };
            match x % 7 {
                0 => {
                    lfu.remove(slot);
                    model[slot] = None;
                }
                1 => {
                    let (_, _, want) = (0..cap)
                        .filter_map(|s| model[s].map(|(f, t)| (f, t, s)))
                        .min()
                        .expect("a slot is held");
                    assert_eq!(lfu.evict(), want, "evict at {now}");
                    model[want] = None;
                }
                _ => {
                    lfu.hit(slot);
                    model[slot] = Some((f + 1, now));
                }
            }
        }
    }
}
