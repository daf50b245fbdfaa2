//! An intrusive doubly linked list over slot numbers, the queue under LRU,
//! FIFO and SIEVE.

use std::fmt::Debug;

/// A slot index type for policy links. `NIL` marks "no slot".
pub trait Link: Copy + Eq + Debug + Send + Sync + 'static {
    /// The "no slot" value.
    const NIL: Self;
    /// Most slots a list of this width can index.
    const MAX_SLOTS: usize;
    /// From a slot number (`< MAX_SLOTS`).
    fn from_slot(i: usize) -> Self;
    /// To a slot number.
    fn slot(self) -> usize;
}

impl Link for u16 {
    const NIL: u16 = u16::MAX;
    const MAX_SLOTS: usize = u16::MAX as usize;
    #[inline]
    fn from_slot(i: usize) -> u16 {
        debug_assert!(i < Self::MAX_SLOTS);
        i as u16
    }
    #[inline]
    fn slot(self) -> usize {
        self as usize
    }
}

impl Link for u32 {
    const NIL: u32 = u32::MAX;
    const MAX_SLOTS: usize = u32::MAX as usize;
    #[inline]
    fn from_slot(i: usize) -> u32 {
        debug_assert!(i < Self::MAX_SLOTS);
        i as u32
    }
    #[inline]
    fn slot(self) -> usize {
        self as usize
    }
}

/// A doubly linked list of slots, `head` the most recent end.
/// Costs `2 * size_of::<L>()` bytes per slot.
#[derive(Debug, Clone)]
pub struct List<L: Link> {
    /// `[prev, next]` per slot; prev points towards the head.
    links: Vec<[L; 2]>,
    head: L,
    tail: L,
    len: usize,
}

impl<L: Link> List<L> {
    /// An empty list over `capacity` slots.
    ///
    /// # Panics
    /// If `capacity > L::MAX_SLOTS` (a sizing bug in the caller).
    pub fn new(capacity: usize) -> List<L> {
        assert!(
            capacity <= L::MAX_SLOTS,
            "{capacity} slots exceed the link width"
        );
        List {
            links: vec![[L::NIL, L::NIL]; capacity],
            head: L::NIL,
            tail: L::NIL,
            len: 0,
        }
    }

    /// Slots in the list.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most recently pushed slot.
    pub fn head(&self) -> Option<usize> {
        (self.head != L::NIL).then(|| self.head.slot())
    }

    /// The oldest slot.
    pub fn tail(&self) -> Option<usize> {
        (self.tail != L::NIL).then(|| self.tail.slot())
    }

    /// The slot one step towards the head from `slot`.
    pub fn prev(&self, slot: usize) -> Option<usize> {
        let p = self.links[slot][0];
        (p != L::NIL).then(|| p.slot())
    }

    /// Push `slot` (not in the list) at the head.
    #[inline]
    pub fn push_front(&mut self, slot: usize) {
        let s = L::from_slot(slot);
        self.links[slot] = [L::NIL, self.head];
        if self.head != L::NIL {
            self.links[self.head.slot()][0] = s;
        } else {
            self.tail = s;
        }
        self.head = s;
        self.len += 1;
    }

    /// Unlink `slot` (in the list).
    #[inline]
    pub fn remove(&mut self, slot: usize) {
        let [prev, next] = self.links[slot];
        if prev != L::NIL {
            self.links[prev.slot()][1] = next;
        } else {
            self.head = next;
        }
        if next != L::NIL {
            self.links[next.slot()][0] = prev;
        } else {
            self.tail = prev;
        }
        self.links[slot] = [L::NIL, L::NIL];
        self.len -= 1;
    }

    /// Move `slot` (in the list) to the head.
    #[inline]
    pub fn move_to_front(&mut self, slot: usize) {
        if self.head.slot() != slot {
            self.remove(slot);
            self.push_front(slot);
        }
    }

    /// Remove and return the tail.
    #[inline]
    pub fn pop_back(&mut self) -> Option<usize> {
        let t = self.tail()?;
        self.remove(t);
        Some(t)
    }

    /// Heap bytes.
    pub fn meta_bytes(&self) -> usize {
        self.links.capacity() * std::mem::size_of::<[L; 2]>()
    }
}
