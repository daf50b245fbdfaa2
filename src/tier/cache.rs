//! A fixed-capacity row cache: the shard of the DRAM and PMem tiers.
//!
//! Per cached row it keeps, beyond the row payload:
//! - `keys`: 8 bytes, the row id with a dirty bit (bit 63);
//! - `index`: an open-addressing table of u16 slot numbers, 1.25 entries
//!   per row (80% full at capacity), reduced by multiply-high rather than a
//!   power-of-two mask so that its size is exact: 2.5 bytes per row; linear
//!   probing with backward-shift deletion, so no tombstones;
//! - the policy's links: 4 bytes (u16 prev/next), plus a visited bit for SIEVE.
//!
//! That is 14.5 bytes per row (14.625 with SIEVE), measured and printed by
//! `tests/bookkeeping.rs`.
//!
//! Slots are u16, so a shard holds at most [`MAX_SHARD_ROWS`] rows; the store
//! shards tables accordingly.

use crate::hash::mix64;
use crate::hint::prefetch;
use crate::policy::{AnyPolicy, EvictionPolicy, PolicyKind};

use super::slab::Slab;
use super::stamps::Stamps;

/// Most rows one shard can hold (u16 slot numbers, one value reserved).
pub(crate) const MAX_SHARD_ROWS: usize = 52_428; // 80% of 65536
const DIRTY: u64 = 1 << 63;
const FREE: u64 = 1 << 62;
const ID_MASK: u64 = !(DIRTY | FREE);
const NIL: u16 = u16::MAX;
const NO_SLOT: u64 = ID_MASK;

/// Index table size for `cap` rows: 80% full at capacity.
fn index_len(cap: usize) -> usize {
    (cap * 5).div_ceil(4).max(2)
}

/// Home position of an id in an index of `n` entries (independent of the
/// shard choice, which hashes `id` without this salt).
#[inline]
fn home(id: u64, n: usize) -> usize {
    ((mix64(id ^ 0x5851_f42d_4c95_7f2d) as u128 * n as u128) >> 64) as usize
}

/// What a row leaving a cache (evicted or taken) holds that the SSD does
/// not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dirt {
    /// Nothing: the SSD (or the pending map) has these bytes.
    Clean,
    /// Newer bytes than any written copy.
    Dirty,
    /// Dirty since before the checkpoint being written began (see
    /// [`SlotCache::mark_old`]), and not yet handed to it: these bytes are
    /// the ones it must write.
    Old,
}

impl Dirt {
    /// Whether the row must be written before it is dropped.
    pub fn is_dirty(self) -> bool {
        self != Dirt::Clean
    }
}

/// Rows evicted by an insert: ids with their state, and their bytes back to back.
#[derive(Debug, Default)]
pub(crate) struct Spill {
    pub rows: Vec<(u64, Dirt)>,
    pub bytes: Vec<u8>,
    /// Each row's stamp generation in the cache it left (0: none), which
    /// its bytes carry to the next tier (`crate::tier::stamps`).
    pub gens: Vec<u64>,
}

impl Spill {
    pub fn clear(&mut self) {
        self.rows.clear();
        self.bytes.clear();
        self.gens.clear();
    }
}

pub(crate) struct SlotCache {
    keys: Vec<u64>,
    index: Vec<u16>,
    n: usize,
    policy: AnyPolicy<u16>,
    free_head: u64,
    next_unused: usize,
    len: usize,
    cap: usize,
    row_bytes: usize,
    slab: Slab,
    /// Pin counts of pinned slots (rows a prefetch holds until its step).
    /// A map, so that a cache without prefetches pays nothing per row.
    pins: std::collections::HashMap<u16, u32>,
    /// At most this many slots are pinned: half the capacity, so that an
    /// insert always finds an unpinned victim.
    pin_limit: usize,
    /// While a checkpoint writes its snapshot: one bit per slot, set for
    /// the rows dirty when it began ([`SlotCache::mark_old`]) until they
    /// are handed to it. Empty otherwise, so a cache pays nothing per row
    /// between checkpoints.
    old: Vec<u64>,
    /// While a snapshot checkpoint writes its hot rows after its window
    /// closed: one bit per slot, set for every row inserted since (its
    /// bytes may be newer than the commit), so that
    /// [`SlotCache::clean_rows`] leaves it out. Empty otherwise.
    fresh: Vec<u64>,
    /// For a cache in a file-backed tier: each slot's row and the
    /// generation whose commit first holds its bytes, in the tier's stamps
    /// file (`crate::tier::stamps`), kept as the slots change. Boxed: a
    /// store has a cache per shard, and most caches have none.
    stamps: Option<Box<Stamping>>,
}

/// A cache's stamps, and which of them it stamped in the current
/// generation.
struct Stamping {
    stamps: Stamps,
    /// One bit per slot, set once the slot's stamp holds generation
    /// `gen`, so that a row written again and again in one generation
    /// stamps it once (a stamp is a random line of memory). Cleared when
    /// the generation moves.
    stamped: Vec<u64>,
    gen: u64,
}

impl SlotCache {
    /// A cache of `cap` rows (1..=MAX_SHARD_ROWS) of `row_bytes` over `slab`.
    pub fn new(cap: usize, row_bytes: usize, policy: PolicyKind, slab: Slab) -> SlotCache {
        assert!((1..=MAX_SHARD_ROWS).contains(&cap), "shard capacity {cap}");
        assert!(slab.len() >= cap * row_bytes, "slab too small");
        let il = index_len(cap);
        SlotCache {
            keys: vec![0; cap],
            index: vec![NIL; il],
            n: il,
            policy: AnyPolicy::new(policy, cap),
            free_head: NO_SLOT,
            next_unused: 0,
            len: 0,
            cap,
            row_bytes,
            slab,
            pins: std::collections::HashMap::new(),
            pin_limit: cap / 2,
            old: Vec::new(),
            fresh: Vec::new(),
            stamps: None,
        }
    }

    /// Keep `stamps` (one per slot) up to date from now on. The cache must
    /// be new: its slots hold nothing yet.
    pub fn attach_stamps(&mut self, stamps: Stamps) {
        assert_eq!(stamps.len(), self.cap, "a stamp per slot");
        assert!(
            self.len == 0 && self.next_unused == 0,
            "stamps for a used cache"
        );
        self.stamps = Some(Box::new(Stamping {
            stamps,
            stamped: vec![0; self.cap.div_ceil(64)],
            gen: 0,
        }));
    }

    /// The stamps, if the cache has them.
    #[inline]
    fn st(&self) -> Option<&Stamps> {
        self.stamps.as_deref().map(|s| &s.stamps)
    }

    /// `slot`'s stamp no longer holds the current generation (or may not).
    #[inline]
    fn unstamped(&mut self, slot: usize) {
        if let Some(s) = self.stamps.as_deref_mut() {
            s.stamped[slot / 64] &= !(1 << (slot % 64));
        }
    }

    /// What the stamps say the slots hold with bytes that checkpoint
    /// `generation` holds: each slot's id where its stamp's generation is
    /// from 1 to `generation`, else `free`, up to the last such slot (the
    /// `slots` of [`SlotCache::adopt`]); and how many slots hold a row
    /// whose bytes changed after that checkpoint. Empty without stamps.
    pub fn stamped_slots(&self, generation: u64, free: u64) -> (Vec<u64>, u64) {
        let Some(st) = self.st() else {
            return (Vec::new(), 0);
        };
        let mut slots = Vec::new();
        let mut changed = 0;
        for slot in 0..self.cap {
            let (g, id) = st.read(slot);
            if (1..=generation).contains(&g) && id <= ID_MASK {
                slots.resize(slot, free);
                slots.push(id);
            } else if g > generation && id <= ID_MASK {
                changed += 1;
            }
        }
        (slots, changed)
    }

    /// Start marking the rows inserted from now on as *fresh* (see the
    /// field), until [`SlotCache::untrack_fresh`].
    pub fn track_fresh(&mut self) {
        self.fresh = vec![0; self.cap.div_ceil(64)];
    }

    /// Stop marking fresh rows, and forget the marks.
    pub fn untrack_fresh(&mut self) {
        self.fresh = Vec::new();
    }

    #[inline]
    fn is_fresh(&self, slot: usize) -> bool {
        !self.fresh.is_empty() && self.fresh[slot / 64] >> (slot % 64) & 1 == 1
    }

    /// A checkpoint begins: every dirty row becomes *old*, the bytes the
    /// checkpoint must write. Until [`SlotCache::drain_old`] hands an old
    /// row over (or a move or a write hands it over first: see
    /// [`Dirt::Old`] and [`SlotCache::take_old`]), the row keeps those
    /// bytes. Returns the rows marked.
    pub fn mark_old(&mut self) -> usize {
        self.old = vec![0; self.cap.div_ceil(64)];
        let mut n = 0;
        for slot in 0..self.next_unused {
            let k = self.keys[slot];
            if k & FREE == 0 && k & DIRTY != 0 {
                self.old[slot / 64] |= 1 << (slot % 64);
                n += 1;
            }
        }
        n
    }

    /// Whether `slot` holds an old row (see [`SlotCache::mark_old`]).
    #[inline]
    pub fn is_old(&self, slot: usize) -> bool {
        !self.old.is_empty() && self.old[slot / 64] >> (slot % 64) & 1 == 1
    }

    /// Clear `slot`'s old bit; returns whether it was set.
    #[inline]
    fn clear_old(&mut self, slot: usize) -> bool {
        let was = self.is_old(slot);
        if was {
            self.old[slot / 64] &= !(1 << (slot % 64));
        }
        was
    }

    /// If `slot` holds an old row, hand it over: the row becomes clean (the
    /// caller keeps its bytes, where reads find them, until the checkpoint
    /// has written them) and true is returned.
    #[inline]
    pub fn take_old(&mut self, slot: usize) -> bool {
        let was = self.clear_old(slot);
        if was {
            self.keys[slot] &= !DIRTY;
        }
        was
    }

    /// Call `f(id, bytes)` for every old row and mark it clean; the cache
    /// then has no old row, and pays nothing for them.
    pub fn drain_old(&mut self, mut f: impl FnMut(u64, &[u8])) {
        if self.old.is_empty() {
            return;
        }
        for w in 0..self.old.len() {
            while self.old[w] != 0 {
                let slot = w * 64 + self.old[w].trailing_zeros() as usize;
                self.old[w] &= self.old[w] - 1;
                let k = self.keys[slot];
                debug_assert!(k & FREE == 0 && k & DIRTY != 0, "old slot {slot}");
                self.keys[slot] = k & !DIRTY;
                f(k & ID_MASK, self.row(slot));
            }
        }
        self.old = Vec::new();
    }

    /// The id resident in `slot`.
    #[inline]
    pub fn id_of(&self, slot: usize) -> u64 {
        self.keys[slot] & ID_MASK
    }

    /// Pin `slot` (resident) against eviction; false when the pin limit is
    /// reached and the slot was not already pinned.
    pub fn pin(&mut self, slot: usize) -> bool {
        if let Some(c) = self.pins.get_mut(&(slot as u16)) {
            *c += 1;
            return true;
        }
        if self.pins.len() >= self.pin_limit {
            return false;
        }
        self.pins.insert(slot as u16, 1);
        true
    }

    /// Drop one pin of row `id`, if it is resident and pinned.
    pub fn unpin(&mut self, id: u64) {
        let Some(slot) = self.get(id) else { return };
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.pins.entry(slot as u16) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }

    /// Slots pinned now.
    pub fn pinned(&self) -> usize {
        self.pins.len()
    }

    /// Whether a row can be inserted without evicting one.
    pub fn has_room(&self) -> bool {
        self.len < self.cap
    }

    /// Free slots.
    pub fn room(&self) -> usize {
        self.cap - self.len
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes of bookkeeping: keys, index and policy.
    pub fn meta_bytes(&self) -> usize {
        self.keys.capacity() * 8
            + self.index.capacity() * 2
            + self.stamps.as_ref().map_or(0, |s| s.stamped.capacity() * 8)
            + self.policy.meta_bytes()
    }

    #[inline]
    fn next(&self, p: usize) -> usize {
        if p + 1 == self.n {
            0
        } else {
            p + 1
        }
    }

    #[inline]
    fn find_pos(&self, id: u64) -> Option<usize> {
        let mut p = home(id, self.n);
        loop {
            let e = self.index[p];
            if e == NIL {
                return None;
            }
            if self.keys[e as usize] & ID_MASK == id {
                return Some(p);
            }
            p = self.next(p);
        }
    }

    /// Hint the CPU to fetch `id`'s index entry (first stage of a
    /// pipelined batch lookup).
    #[inline]
    pub fn prefetch_index(&self, id: u64) {
        prefetch(self.index.as_ptr().wrapping_add(home(id, self.n)));
    }

    /// Second stage: fetch the keys of the slots in `id`'s first index
    /// entries (the index entry should already be cached).
    #[inline]
    pub fn prefetch_keys(&self, id: u64) {
        let h = home(id, self.n);
        for p in [h, self.next(h)] {
            let e = self.index[p];
            if e == NIL {
                break;
            }
            prefetch(self.keys.as_ptr().wrapping_add(e as usize));
        }
    }

    /// Third stage: find `id` (index and keys should be cached by now) and
    /// fetch its row.
    #[inline]
    pub fn prefetch_row(&self, id: u64) {
        if let Some(slot) = self.get(id) {
            let rb = self.row_bytes;
            let row = self.slab.bytes().as_ptr().wrapping_add(slot * rb);
            let mut off = 0;
            while off < rb {
                prefetch(row.wrapping_add(off));
                off += 64;
            }
        }
    }

    /// The slot holding `id`, if resident.
    #[inline]
    pub fn get(&self, id: u64) -> Option<usize> {
        self.find_pos(id).map(|p| self.index[p] as usize)
    }

    /// Record an access to a resident slot.
    #[inline]
    pub fn touch(&mut self, slot: usize) {
        self.policy.hit(slot);
    }

    #[inline]
    pub fn row(&self, slot: usize) -> &[u8] {
        &self.slab.bytes()[slot * self.row_bytes..(slot + 1) * self.row_bytes]
    }

    /// The bytes of `slot`, to change (its stamp says so first).
    #[inline]
    pub fn row_mut(&mut self, slot: usize) -> &mut [u8] {
        if let Some(s) = self.stamps.as_deref_mut() {
            let now = s.stamps.now();
            if now != s.gen {
                s.stamped.fill(0);
                s.gen = now;
            }
            let (w, bit) = (slot / 64, 1u64 << (slot % 64));
            if s.stamped[w] & bit == 0 {
                s.stamps.change(slot);
                s.stamped[w] |= bit;
            }
        }
        let rb = self.row_bytes;
        &mut self.slab.bytes_mut()[slot * rb..(slot + 1) * rb]
    }

    #[inline]
    pub fn set_dirty(&mut self, slot: usize) {
        self.keys[slot] |= DIRTY;
    }

    fn index_insert(&mut self, id: u64, slot: usize) {
        let mut p = home(id, self.n);
        while self.index[p] != NIL {
            p = self.next(p);
        }
        self.index[p] = slot as u16;
    }

    /// Remove index position `p`, shifting later entries of the probe run back.
    fn index_remove_at(&mut self, mut hole: usize) {
        let mut j = hole;
        loop {
            j = self.next(j);
            let e = self.index[j];
            if e == NIL {
                break;
            }
            let h = home(self.keys[e as usize] & ID_MASK, self.n);
            // Move e into the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < h && h <= j
            } else {
                hole < h || h <= j
            };
            if !stays {
                self.index[hole] = e;
                hole = j;
            }
        }
        self.index[hole] = NIL;
    }

    fn alloc_slot(&mut self) -> usize {
        if self.free_head != NO_SLOT {
            let s = self.free_head as usize;
            self.free_head = self.keys[s] & ID_MASK;
            s
        } else {
            self.next_unused += 1;
            self.next_unused - 1
        }
    }

    fn free_slot(&mut self, slot: usize) {
        if let Some(st) = self.st() {
            st.clear(slot);
        }
        self.unstamped(slot);
        self.keys[slot] = FREE | self.free_head;
        self.free_head = slot as u64;
    }

    /// Insert `id` (not resident) with `src` bytes, which carry stamp
    /// generation `gen` from the slot they left (0: none, bytes new to the
    /// tiers; see `crate::tier::stamps`). When full, the policy's victim is
    /// evicted first and appended to `spill`. Returns the slot.
    pub fn insert(
        &mut self,
        id: u64,
        src: &[u8],
        dirty: bool,
        gen: u64,
        spill: &mut Spill,
    ) -> usize {
        debug_assert!(id <= ID_MASK);
        debug_assert!(self.get(id).is_none());
        // The store must hold the row it serves, so a policy's refusal to
        // admit is not honoured here; the call still lets ghost-based
        // policies see the miss before the eviction.
        let _ = self.policy.miss(id);
        let slot = if self.len == self.cap {
            let mut victim = self.policy.evict();
            if !self.pins.is_empty() && self.pins.contains_key(&(victim as u16)) {
                // Set pinned victims aside and put them back afterwards;
                // fewer than half the slots are pinned, so this ends.
                let mut aside = Vec::new();
                while self.pins.contains_key(&(victim as u16)) {
                    aside.push(victim);
                    victim = self.policy.evict();
                }
                for a in aside {
                    self.policy.insert(a, self.keys[a] & ID_MASK);
                }
            }
            let key = self.keys[victim];
            let vid = key & ID_MASK;
            let pos = self.find_pos(vid).expect("victim is indexed");
            self.index_remove_at(pos);
            let dirt = match (self.clear_old(victim), key & DIRTY != 0) {
                (true, _) => Dirt::Old,
                (false, true) => Dirt::Dirty,
                (false, false) => Dirt::Clean,
            };
            spill.rows.push((vid, dirt));
            spill.bytes.extend_from_slice(self.row(victim));
            spill.gens.push(self.st().map_or(0, |st| st.read(victim).0));
            self.len -= 1;
            victim
        } else {
            self.alloc_slot()
        };
        self.keys[slot] = id | if dirty { DIRTY } else { 0 };
        if !self.fresh.is_empty() {
            self.fresh[slot / 64] |= 1 << (slot % 64);
        }
        let rb = self.row_bytes;
        if let Some(st) = self.st() {
            st.begin(slot, id);
        }
        self.slab.bytes_mut()[slot * rb..(slot + 1) * rb].copy_from_slice(src);
        if let Some(st) = self.st() {
            st.finish(slot, gen);
        }
        self.unstamped(slot);
        self.index_insert(id, slot);
        self.policy.insert(slot, id);
        self.len += 1;
        slot
    }

    /// Remove `id` if resident, copying its bytes into `out`; returns its
    /// state and the stamp generation the bytes carry (0: none; see
    /// [`SlotCache::insert`]).
    pub fn take(&mut self, id: u64, out: &mut Vec<u8>) -> Option<(Dirt, u64)> {
        let pos = self.find_pos(id)?;
        let slot = self.index[pos] as usize;
        let gen = self.st().map_or(0, |st| st.read(slot).0);
        let dirty = match (self.clear_old(slot), self.keys[slot] & DIRTY != 0) {
            (true, _) => Dirt::Old,
            (false, true) => Dirt::Dirty,
            (false, false) => Dirt::Clean,
        };
        self.pins.remove(&(slot as u16));
        out.clear();
        out.extend_from_slice(self.row(slot));
        self.index_remove_at(pos);
        self.policy.remove(slot);
        self.free_slot(slot);
        self.len -= 1;
        Some((dirty, gen))
    }

    /// Call `f(id, bytes)` for every dirty row (old ones included) and mark
    /// it clean.
    pub fn drain_dirty(&mut self, mut f: impl FnMut(u64, &[u8])) {
        self.old = Vec::new();
        for slot in 0..self.next_unused {
            let k = self.keys[slot];
            if k & FREE == 0 && k & DIRTY != 0 {
                self.keys[slot] = k & !DIRTY;
                f(k & ID_MASK, self.row(slot));
            }
        }
    }

    /// The ids of the resident rows, in slot order.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.keys[..self.next_unused]
            .iter()
            .filter(|&&k| k & FREE == 0)
            .map(|&k| k & ID_MASK)
    }

    /// The resident clean rows, in slot order: each id and its bytes (a
    /// warm restart's hot rows; dirty rows are newer than any checkpoint,
    /// and so may be fresh ones).
    pub fn clean_rows(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.keys[..self.next_unused]
            .iter()
            .enumerate()
            .filter(|&(slot, &k)| k & (FREE | DIRTY) == 0 && !self.is_fresh(slot))
            .map(move |(slot, &k)| (k & ID_MASK, self.row(slot)))
    }

    /// Resident dirty rows.
    pub fn dirty_count(&self) -> usize {
        self.keys[..self.next_unused]
            .iter()
            .filter(|&&k| k & FREE == 0 && k & DIRTY != 0)
            .count()
    }

    /// The rows it holds at most.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The memory its rows lie in.
    pub fn slab(&self) -> &Slab {
        &self.slab
    }

    /// The id in each slot up to the last one ever used, `free` for a
    /// slot that holds no row: what a kept tier records
    /// (`embtier_format::kept`). None while a row is dirty (only a
    /// committed, clean cache may be kept).
    pub fn slots(&self, free: u64) -> Option<Vec<u64>> {
        self.keys[..self.next_unused]
            .iter()
            .map(|&k| match (k & FREE != 0, k & DIRTY != 0) {
                (true, _) => Some(free),
                (false, true) => None,
                (false, false) => Some(k & ID_MASK),
            })
            .collect()
    }

    /// Take the rows a kept tier recorded for this cache's slab: `slots[s]`
    /// is the id whose bytes slot `s` of the slab already holds, `free`
    /// for none. Each becomes a clean resident row (given to the policy
    /// from the last slot to the first) unless `skip(id)` (held
    /// elsewhere), it is not below `rows`, or a later slot named it; those
    /// slots are left free. The cache must be new and `slots` no longer
    /// than its capacity. With stamps, each row taken is stamped with
    /// `generation` (the checkpoint that holds its bytes) and every other
    /// slot's stamp cleared. Returns the rows taken.
    pub fn adopt(
        &mut self,
        slots: &[u64],
        free: u64,
        rows: u64,
        generation: u64,
        mut skip: impl FnMut(u64) -> bool,
    ) -> usize {
        assert!(
            self.len == 0 && self.next_unused == 0,
            "adopt into a used cache"
        );
        assert!(slots.len() <= self.cap, "more slots than the capacity");
        self.next_unused = slots.len();
        // Free slots chained from the last, so the lowest is used first.
        for (slot, &id) in slots.iter().enumerate().rev() {
            // The index is random memory: ask for the entry of an id a
            // few slots on.
            if let Some(&ahead) = slot.checked_sub(8).and_then(|s| slots.get(s)) {
                if ahead <= ID_MASK {
                    self.prefetch_index(ahead);
                }
            }
            if id == free || id >= rows || id > ID_MASK || skip(id) || self.get(id).is_some() {
                self.free_slot(slot);
                continue;
            }
            self.keys[slot] = id;
            if let Some(st) = self.st() {
                st.keep(slot, id, generation);
            }
            self.unstamped(slot);
            self.index_insert(id, slot);
            self.policy.insert(slot, id);
            self.len += 1;
        }
        if let Some(st) = self.st() {
            for slot in slots.len()..self.cap {
                st.clear(slot);
            }
        }
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random inserts, takes, lookups and a checkpoint's old rows (marked,
    /// handed over one by one, drained) against a HashMap model.
    #[test]
    fn matches_a_map() {
        for policy in PolicyKind::ALL.iter().filter(|p| p.store_supported()) {
            let cap = 37;
            let mut c = SlotCache::new(cap, 8, *policy, Slab::dram(cap * 8, false));
            // id -> (value, state)
            let mut model: HashMap<u64, (u64, Dirt)> = HashMap::new();
            let mut spill = Spill::default();
            let mut x = 1u64;
            let mut buf = Vec::new();
            let mut olds = 0u64;
            for step in 0..20_000u64 {
                x = mix64(x);
                let id = x % 100;
                match x >> 59 {
                    0..=19 => {
                        if let Some(s) = c.get(id) {
                            c.touch(s);
                            let v = u64::from_le_bytes(c.row(s).try_into().unwrap());
                            assert_eq!(v, model[&id].0);
                            assert_eq!(c.is_old(s), model[&id].1 == Dirt::Old);
                            if step % 5 == 0 {
                                // A write hands an old row over first.
                                let was = c.take_old(s);
                                assert_eq!(was, model[&id].1 == Dirt::Old);
                                olds += was as u64;
                                c.row_mut(s).copy_from_slice(&step.to_le_bytes());
                                c.set_dirty(s);
                                model.insert(id, (step, Dirt::Dirty));
                            }
                        } else {
                            assert!(!model.contains_key(&id));
                            spill.clear();
                            let dirty = step % 3 == 0;
                            c.insert(id, &step.to_le_bytes(), dirty, 0, &mut spill);
                            for (i, (vid, vd)) in spill.rows.iter().enumerate() {
                                let (val, md) = model.remove(vid).expect("victim was resident");
                                assert_eq!(*vd, md);
                                assert_eq!(spill.bytes[i * 8..i * 8 + 8], val.to_le_bytes());
                            }
                            let d = if dirty { Dirt::Dirty } else { Dirt::Clean };
                            model.insert(id, (step, d));
                        }
                    }
                    20..=29 => {
                        let got = c.take(id, &mut buf).map(|(d, _)| d);
                        let want = model.remove(&id);
                        assert_eq!(got, want.map(|w| w.1));
                        if let Some((v, _)) = want {
                            assert_eq!(buf, v.to_le_bytes());
                        }
                    }
                    30 => {
                        let n = c.mark_old();
                        let mut want = 0;
                        for v in model.values_mut() {
                            if v.1 != Dirt::Clean {
                                v.1 = Dirt::Old;
                                want += 1;
                            }
                        }
                        assert_eq!(n, want);
                    }
                    _ => {
                        let mut got = Vec::new();
                        c.drain_old(|id, b| {
                            got.push((id, u64::from_le_bytes(b.try_into().unwrap())))
                        });
                        got.sort_unstable();
                        let mut want: Vec<(u64, u64)> = model
                            .iter()
                            .filter(|(_, v)| v.1 == Dirt::Old)
                            .map(|(&id, v)| (id, v.0))
                            .collect();
                        want.sort_unstable();
                        assert_eq!(got, want);
                        olds += got.len() as u64;
                        for v in model.values_mut() {
                            if v.1 == Dirt::Old {
                                v.1 = Dirt::Clean;
                            }
                        }
                        assert_eq!(
                            c.dirty_count(),
                            model.values().filter(|v| v.1 != Dirt::Clean).count()
                        );
                    }
                }
                assert_eq!(c.len(), model.len());
                assert!(c.len() <= cap);
            }
            assert!(olds > 100, "{policy:?}: only {olds} old rows handed over");
        }
    }

    /// While fresh rows are tracked, `clean_rows` leaves out every row
    /// inserted since (whatever its way in), and only those.
    #[test]
    fn clean_rows_leave_out_fresh_ones() {
        let cap = 40;
        let mut c = SlotCache::new(cap, 8, PolicyKind::Lru, Slab::dram(cap * 8, false));
        let mut spill = Spill::default();
        for id in 0..30u64 {
            c.insert(id, &id.to_le_bytes(), id % 5 == 0, 0, &mut spill);
        }
        c.track_fresh();
        let mut buf = Vec::new();
        // Moved (taken and put back), new, and evicting ones are fresh.
        c.take(7, &mut buf);
        c.insert(7, &buf.clone(), false, 0, &mut spill);
        for id in 100..115u64 {
            c.insert(id, &id.to_le_bytes(), false, 0, &mut spill);
        }
        let clean: std::collections::HashSet<u64> = c.clean_rows().map(|(id, _)| id).collect();
        let resident: Vec<u64> = c.ids().collect();
        for id in resident {
            let old_clean = id < 30 && id % 5 != 0 && id != 7;
            assert_eq!(clean.contains(&id), old_clean, "row {id}");
        }
        c.untrack_fresh();
        assert!(c.clean_rows().any(|(id, _)| id == 100));
    }

    /// Adopted slots keep their bytes and ids; free, skipped, out-of-range
    /// and repeated ids leave their slots free, and later inserts fill
    /// those first without touching an adopted row.
    #[test]
    fn adopted_slots_serve_their_rows_and_free_the_rest() {
        const F: u64 = u64::MAX;
        let cap = 8;
        let mut slab = Slab::dram(cap * 8, false);
        for s in 0..cap {
            slab.bytes_mut()[s * 8..(s + 1) * 8].copy_from_slice(&[s as u8; 8]);
        }
        let mut c = SlotCache::new(cap, 8, PolicyKind::Lru, slab);
        // Slot 2 free, 3 skipped, 4 past the rows, 5 repeats slot 0's id.
        let slots = [10, 11, F, 12, 500, 10];
        let taken = c.adopt(&slots, F, 100, 1, |id| id == 12);
        assert_eq!(taken, 2);
        // The later slot of a repeated id wins.
        assert_eq!(c.get(10), Some(5));
        assert_eq!(c.row(5), &[5u8; 8]);
        assert_eq!(c.get(11), Some(1));
        assert_eq!(c.row(1), &[1u8; 8]);
        assert!(c.get(12).is_none() && c.get(500).is_none());
        assert_eq!(c.slots(F).unwrap(), vec![F, 11, F, F, F, 10]);
        // Six inserts fill the four free slots and the two never used,
        // evicting nothing; the adopted rows keep their bytes.
        let mut spill = Spill::default();
        for id in 20..26 {
            c.insert(id, &[id as u8; 8], false, 0, &mut spill);
        }
        assert!(spill.rows.is_empty(), "{:?}", spill.rows);
        assert_eq!(c.len(), 8);
        assert_eq!(c.row(c.get(10).unwrap()), &[5u8; 8]);
        assert_eq!(c.row(c.get(11).unwrap()), &[1u8; 8]);
    }
}
