//! CLOCK (second chance) with a 1-bit reference counter, as libCacheSim's
//! default `Clock`: new slots enter at the head unreferenced; a hit sets the
//! bit; eviction walks from the tail, giving referenced slots a second chance
//! (bit cleared, moved to the head) and evicting the first unreferenced one.

use super::{EvictionPolicy, Link, List};

/// CLOCK over slots.
#[derive(Debug, Clone)]
pub struct Clock<L: Link> {
    list: List<L>,
    referenced: Vec<u64>,
}

impl<L: Link> Clock<L> {
    /// CLOCK over `capacity` slots.
    pub fn new(capacity: usize) -> Clock<L> {
        Clock {
            list: List::new(capacity),
            referenced: vec![0; capacity.div_ceil(64)],
        }
    }

    fn bit(&self, s: usize) -> bool {
        self.referenced[s / 64] >> (s % 64) & 1 == 1
    }

    fn set(&mut self, s: usize, v: bool) {
        if v {
            self.referenced[s / 64] |= 1 << (s % 64);
        } else {
            self.referenced[s / 64] &= !(1 << (s % 64));
        }
    }
}

impl<L: Link> EvictionPolicy for Clock<L> {
    fn insert(&mut self, slot: usize, _key: u64) {
        self.set(slot, false);
        self.list.push_front(slot);
    }
    fn hit(&mut self, slot: usize) {
        self.set(slot, true);
    }
    fn evict(&mut self) -> usize {
        loop {
            let t = self.list.tail().expect("evict on an empty CLOCK");
            if self.bit(t) {
                self.set(t, false);
                self.list.move_to_front(t);
            } else {
                self.list.remove(t);
                return t;
            }
        }
    }
    fn remove(&mut self, slot: usize) {
        self.list.remove(slot);
        self.set(slot, false);
    }
    fn meta_bytes(&self) -> usize {
        self.list.meta_bytes() + self.referenced.capacity() * 8
    }
}
