//! The groups an epoch has journaled (written in place), kept compactly.
//!
//! A checkpoint that merges the row log home writes most of the data file's
//! groups in one epoch: 1.25 M groups for the harness's 5 GB of tables. A
//! `HashMap<u64, u32>` of them cost 17-34 bytes a group (with the table's
//! growth), was at its largest during the commit that lists them, and kept
//! its capacity after `clear` for the rest of the run. Here a group costs 8
//! bytes in a list plus a bit in a page of a bitmap, and a commit leaves
//! nothing of a large epoch behind.

use std::collections::HashMap;

/// Blocks a bitmap page covers (a page is 512 bytes).
const PAGE_BLOCKS: u64 = 4096;

/// Bits of a packed entry that hold the group's block count.
const NBLOCKS_BITS: u32 = 20;

/// Entries a cleared list may keep room for.
const KEEP_ENTRIES: usize = 1 << 16;

/// A set of groups, each `(first block, blocks)` with a distinct first
/// block.
#[derive(Default)]
pub(super) struct Groups {
    /// A bit per block that is some group's first, in pages of
    /// [`PAGE_BLOCKS`] blocks (only the pages that hold one).
    pages: HashMap<u64, Box<[u64; (PAGE_BLOCKS / 64) as usize]>>,
    /// The groups, `first << NBLOCKS_BITS | blocks`, in insertion order.
    packed: Vec<u64>,
    /// The groups too large to pack (none in a store of today's limits).
    wide: Vec<(u64, u32)>,
}

impl Groups {
    /// Whether a group begins at `first`.
    pub(super) fn contains(&self, first: u64) -> bool {
        self.pages
            .get(&(first / PAGE_BLOCKS))
            .is_some_and(|p| p[((first % PAGE_BLOCKS) / 64) as usize] >> (first % 64) & 1 == 1)
    }

    /// Add the group of `nblocks` blocks at `first`; nothing if a group
    /// begins there already.
    pub(super) fn insert(&mut self, first: u64, nblocks: u32) {
        if self.contains(first) {
            return;
        }
        let page = self
            .pages
            .entry(first / PAGE_BLOCKS)
            .or_insert_with(|| Box::new([0; (PAGE_BLOCKS / 64) as usize]));
        page[((first % PAGE_BLOCKS) / 64) as usize] |= 1 << (first % 64);
        if first < 1 << (64 - NBLOCKS_BITS) && nblocks < 1 << NBLOCKS_BITS {
            self.packed.push(first << NBLOCKS_BITS | nblocks as u64);
        } else {
            self.wide.push((first, nblocks));
        }
    }

    /// Groups in the set.
    pub(super) fn len(&self) -> usize {
        self.packed.len() + self.wide.len()
    }

    /// The groups by first block, ascending, without a copy of the set
    /// (it is sorted in place).
    pub(super) fn sorted(&mut self) -> Sorted<'_> {
        self.packed.sort_unstable();
        self.wide.sort_unstable();
        Sorted {
            packed: self.packed.iter().peekable(),
            wide: self.wide.iter().peekable(),
        }
    }

    /// Empty the set, giving back the memory of a large one.
    pub(super) fn clear(&mut self) {
        self.pages = HashMap::new();
        if self.packed.capacity() > KEEP_ENTRIES {
            self.packed = Vec::new();
        } else {
            self.packed.clear();
        }
        self.wide = Vec::new();
    }
}

/// [`Groups::sorted`]: the packed groups and the wide ones, merged.
pub(super) struct Sorted<'a> {
    packed: std::iter::Peekable<std::slice::Iter<'a, u64>>,
    wide: std::iter::Peekable<std::slice::Iter<'a, (u64, u32)>>,
}

impl Iterator for Sorted<'_> {
    type Item = (u64, u32);

    fn next(&mut self) -> Option<(u64, u32)> {
        let unpack = |p: u64| (p >> NBLOCKS_BITS, (p & ((1 << NBLOCKS_BITS) - 1)) as u32);
        match (self.packed.peek(), self.wide.peek()) {
            (Some(&&p), Some(&&w)) if w.0 < p >> NBLOCKS_BITS => {
                self.wide.next();
                Some(w)
            }
            (Some(&&p), _) => {
                self.packed.next();
                Some(unpack(p))
            }
            (None, _) => self.wide.next().copied(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.packed.len() + self.wide.len();
        (n, Some(n))
    }
}

impl ExactSizeIterator for Sorted<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Against a plain map: membership, length and the sorted list, over
    /// groups near the page and packing limits, through clears.
    #[test]
    fn groups_match_a_plain_map() {
        let mut s = Groups::default();
        let mut model: BTreeMap<u64, u32> = BTreeMap::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let edges = [
            0,
            63,
            64,
            PAGE_BLOCKS - 1,
            PAGE_BLOCKS,
            (1 << (64 - NBLOCKS_BITS)) - 1,
            1 << (64 - NBLOCKS_BITS),
            u64::MAX - 1,
        ];
        for round in 0..4 {
            for i in 0..20_000u64 {
                let first = match rand() % 4 {
                    0 => edges[(rand() % edges.len() as u64) as usize],
                    1 => rand(),
                    _ => rand() % 300_000,
                };
                let nblocks = match rand() % 8 {
                    0 => (1 << NBLOCKS_BITS) - 1 + (rand() % 2) as u32,
                    1 => u32::MAX,
                    _ => 1 + (rand() % 16) as u32,
                };
                assert_eq!(s.contains(first), model.contains_key(&first), "{first}");
                // A first block already there keeps its group.
                s.insert(first, nblocks);
                model.entry(first).or_insert(nblocks);
                if i % 5000 == 0 {
                    assert_eq!(s.len(), model.len());
                }
            }
            assert_eq!(s.len(), model.len());
            let want: Vec<(u64, u32)> = model.iter().map(|(&f, &n)| (f, n)).collect();
            assert_eq!(s.sorted().len(), want.len());
            assert_eq!(s.sorted().collect::<Vec<_>>(), want, "round {round}");
            // Sorting in place changes no membership.
            for &(f, _) in want.iter().step_by(97) {
                assert!(s.contains(f));
            }
            s.clear();
            model.clear();
            assert_eq!(s.len(), 0);
            assert!(want.iter().all(|&(f, _)| !s.contains(f)));
            assert_eq!(s.sorted().next(), None);
        }
    }

    #[test]
    fn a_cleared_large_set_gives_its_memory_back() {
        let mut s = Groups::default();
        for f in 0..200_000u64 {
            s.insert(f * 3, 3);
        }
        assert!(s.packed.capacity() >= 200_000);
        s.clear();
        assert_eq!(s.packed.capacity(), 0);
        assert_eq!(s.pages.capacity(), 0);
        s.insert(5, 1);
        assert_eq!(s.sorted().collect::<Vec<_>>(), vec![(5, 1)]);
    }
}
