//! Simulated caches: the store's eviction policies over ids with no
//! payload. [`SimCache`] takes any u64 id; [`DenseCache`] takes dense ids
//! `0..n` (see [`crate::densify()`]) and no hashing per request, and tracks
//! dirty rows for the tier hierarchies of [`crate::replay`].

use std::collections::HashMap;

use embtier::policy::{AnyPolicy, EvictionPolicy, PolicyKind};

/// A fixed-capacity cache of u64 ids driven by one of the store's policies.
#[derive(Debug, Clone)]
pub struct SimCache {
    policy: AnyPolicy<u32>,
    index: HashMap<u64, u32, crate::densify::FastHash>,
    keys: Vec<u64>,
    free: Vec<u32>,
    capacity: usize,
}

impl SimCache {
    /// A cache of `capacity` ids (at least 1).
    ///
    /// # Panics
    /// If `capacity` is 0 or does not fit in a u32.
    pub fn new(kind: PolicyKind, capacity: usize) -> SimCache {
        assert!(
            capacity > 0 && capacity < u32::MAX as usize,
            "capacity {capacity}"
        );
        SimCache {
            policy: AnyPolicy::new(kind, capacity),
            index: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            keys: Vec::with_capacity(capacity),
            free: Vec::new(),
            capacity,
        }
    }

    /// Access `id`: true on a hit. A miss inserts it, evicting if full.
    pub fn access(&mut self, id: u64) -> bool {
        if let Some(&slot) = self.index.get(&id) {
            self.policy.hit(slot as usize);
            self.drain_overflow();
            return true;
        }
        let admit = self.policy.miss(id);
        self.drain_overflow();
        if !admit {
            return false;
        }
        let slot = if self.index.len() == self.capacity {
            let victim = self.policy.evict();
            self.index.remove(&self.keys[victim]);
            victim
        } else if let Some(s) = self.free.pop() {
            s as usize
        } else {
            self.keys.push(0);
            self.keys.len() - 1
        };
        self.keys[slot] = id;
        self.index.insert(id, slot as u32);
        self.policy.insert(slot, id);
        self.drain_overflow();
        false
    }

    /// Free the slots the policy dropped by itself.
    fn drain_overflow(&mut self) {
        while let Some(v) = self.policy.overflow() {
            self.index.remove(&self.keys[v]);
            self.free.push(v as u32);
        }
    }

    /// Whether `id` is resident (does not count as an access).
    pub fn contains(&self, id: u64) -> bool {
        self.index.contains_key(&id)
    }

    /// Resident ids.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether nothing is resident.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

/// Hits and misses of a simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimResult {
    /// Accesses that hit.
    pub hits: u64,
    /// Accesses that missed.
    pub misses: u64,
}

impl SimResult {
    /// Count one access.
    #[inline]
    pub fn record(&mut self, hit: bool) {
        if hit {
            self.hits += 1;
        } else {
            self.misses += 1;
        }
    }

    /// misses / accesses.
    pub fn miss_ratio(&self) -> f64 {
        let n = self.hits + self.misses;
        if n == 0 {
            0.0
        } else {
            self.misses as f64 / n as f64
        }
    }
}

/// Run `ids` through a cache of `capacity` objects under `kind` (ids are
/// densified once, then simulated without hashing).
pub fn simulate(kind: PolicyKind, capacity: usize, ids: &[u64]) -> SimResult {
    let (dense, n) = crate::densify(ids);
    if kind.hashes_keys() {
        // The policy hashes key values: it sees the caller's ids.
        return simulate_dense_keyed(kind, capacity, &dense, ids, n);
    }
    simulate_dense(kind, capacity, &dense, n)
}

/// A cache of dense ids `0..n_objects`: the same policies as [`SimCache`],
/// with a vector instead of a hash map from id to slot, so the per-request
/// path does no hashing. Each resident id carries a dirty bit, for the
/// write-back hierarchies of [`crate::replay`]; [`DenseCache::access`]
/// leaves it clear.
#[derive(Debug, Clone)]
pub struct DenseCache {
    policy: AnyPolicy<u32>,
    slot_of: Vec<u32>,
    keys: Vec<u32>,
    dirty: Vec<bool>,
    free: Vec<u32>,
    len: usize,
    capacity: usize,
    /// Whether the policy hashes key values, and so is told the caller's
    /// keys ([`DenseCache::access_keyed`]) rather than the dense ids.
    keyed: bool,
}

/// An id that left a [`DenseCache`], and whether it was dirty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Victim {
    /// The dense id.
    pub id: u32,
    /// Its dirty bit when it left.
    pub dirty: bool,
}

const NO_SLOT: u32 = u32::MAX;

impl DenseCache {
    /// A cache of `capacity` (at least 1) over ids `0..n_objects`.
    ///
    /// # Panics
    /// If `capacity` is 0, or `capacity` or `n_objects` does not fit in a u32.
    pub fn new(kind: PolicyKind, capacity: usize, n_objects: usize) -> DenseCache {
        assert!(capacity > 0 && capacity < u32::MAX as usize && n_objects < u32::MAX as usize);
        let mut policy = AnyPolicy::new(kind, capacity);
        if !kind.hashes_keys() {
            // The policy is told dense ids (`access`): its ghosts may index them.
            policy.dense_keys(n_objects);
        }
        DenseCache {
            policy,
            slot_of: vec![NO_SLOT; n_objects],
            keys: Vec::with_capacity(capacity.min(n_objects)),
            dirty: Vec::with_capacity(capacity.min(n_objects)),
            free: Vec::new(),
            len: 0,
            capacity,
            keyed: kind.hashes_keys(),
        }
    }

    /// Access `id`: true on a hit. A miss inserts it if the policy admits
    /// it, evicting if full; victims are dropped.
    #[inline]
    pub fn access(&mut self, id: u32) -> bool {
        self.access_keyed(id, id as u64)
    }

    /// [`DenseCache::access`] for a policy that hashes key values
    /// ([`PolicyKind::hashes_keys`]): it is told `key`, the trace's own id,
    /// instead of the dense id. Other policies are told `id` and `key` is
    /// ignored.
    #[inline]
    pub fn access_keyed(&mut self, id: u32, key: u64) -> bool {
        let key = if self.keyed { key } else { id as u64 };
        if self.contains(id) {
            self.hit_then(id, |_| {});
            return true;
        }
        let admit = self.policy.miss(key);
        self.drain_overflow(|_| {});
        if admit {
            self.install(id, key, false, |_| {});
        }
        false
    }

    /// A hint that `id` (with key `key`, as [`DenseCache::access_keyed`]
    /// takes it) comes soon: asks for its slot entry and the policy's
    /// memory for its key ([`EvictionPolicy::prefetch`]). Changes nothing.
    #[inline]
    pub fn prefetch(&self, id: u32, key: u64) {
        embtier::hint::prefetch(self.slot_of.as_ptr().wrapping_add(id as usize));
        self.policy
            .prefetch(if self.keyed { key } else { id as u64 });
    }

    /// Whether `id` is resident (does not count as an access).
    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        self.slot_of[id as usize] != NO_SLOT
    }

    /// Resident ids.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The most ids it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Accept ids up to `n_objects - 1` from now on (no-op if it already
    /// does), for callers that number ids as they first see them.
    ///
    /// # Panics
    /// If `n_objects` does not fit in a u32.
    pub fn grow(&mut self, n_objects: usize) {
        assert!(n_objects < u32::MAX as usize);
        if n_objects > self.slot_of.len() {
            self.slot_of.resize(n_objects, NO_SLOT);
            if !self.keyed {
                self.policy.dense_keys(n_objects);
            }
        }
    }

    /// Whether nothing is resident.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A hit on the resident `id`. Ids the policy drops on its own (2Q,
    /// SLRU) are appended to `victims`.
    pub fn hit(&mut self, id: u32, victims: &mut Vec<Victim>) {
        self.hit_then(id, |v| victims.push(v));
    }

    /// Insert `id`, which is not resident, with dirty bit `dirty`; the
    /// ids that leave for it are appended to `victims`. The policy sees the
    /// miss (its ghost lists learn of it) but cannot refuse it: the store
    /// installs every row it reads.
    pub fn insert(&mut self, id: u32, dirty: bool, victims: &mut Vec<Victim>) {
        let _ = self.policy.miss(id as u64);
        self.drain_overflow(|v| victims.push(v));
        self.install(id, id as u64, dirty, |v| victims.push(v));
    }

    /// Mark the resident `id` dirty.
    pub fn set_dirty(&mut self, id: u32) {
        let s = self.slot_of[id as usize] as usize;
        self.dirty[s] = true;
    }

    /// Remove `id`; its dirty bit, or `None` if it was not resident.
    pub fn remove(&mut self, id: u32) -> Option<bool> {
        let s = self.slot_of[id as usize];
        if s == NO_SLOT {
            return None;
        }
        self.policy.remove(s as usize);
        self.free.push(s);
        Some(self.release(s as usize).dirty)
    }

    #[inline]
    fn hit_then(&mut self, id: u32, sink: impl FnMut(Victim)) {
        let s = self.slot_of[id as usize];
        self.policy.hit(s as usize);
        self.drain_overflow(sink);
    }

    /// Put `id` in a slot (the victim's when full) and tell the policy,
    /// as key `key`.
    #[inline]
    fn install(&mut self, id: u32, key: u64, dirty: bool, mut sink: impl FnMut(Victim)) {
        let slot = if self.len == self.capacity {
            let v = self.policy.evict();
            sink(self.release(v));
            v
        } else if let Some(f) = self.free.pop() {
            f as usize
        } else {
            self.keys.push(0);
            self.dirty.push(false);
            self.keys.len() - 1
        };
        self.keys[slot] = id;
        self.dirty[slot] = dirty;
        self.slot_of[id as usize] = slot as u32;
        self.len += 1;
        self.policy.insert(slot, key);
        self.drain_overflow(sink);
    }

    /// Free the slots the policy dropped by itself.
    #[inline]
    fn drain_overflow(&mut self, mut sink: impl FnMut(Victim)) {
        while let Some(v) = self.policy.overflow() {
            sink(self.release(v));
            self.free.push(v as u32);
        }
    }

    /// Empty `slot`, which the policy no longer tracks (the caller reuses
    /// it or puts it on the free list).
    #[inline]
    fn release(&mut self, slot: usize) -> Victim {
        let id = self.keys[slot];
        self.slot_of[id as usize] = NO_SLOT;
        self.len -= 1;
        Victim {
            id,
            dirty: self.dirty[slot],
        }
    }
}

/// The capacity to build a simulated cache of `capacity` rows with, over
/// ids `0..n_objects`: `capacity` itself (at least 1), or less where
/// that changes no hit. A cache that can hold every id never fills, so it
/// evicts nothing, and every policy admits every miss once each of its
/// parts holds a row (W-TinyLFU's window, 1% of the cache, is the
/// smallest: from 100 rows), so every capacity from
/// `max(n_objects, 4096)` up hits the same requests, rounded up to a
/// multiple of 4: SLRU's four segments of a quarter each (rounded down)
/// must hold every id, or the row past them is demoted out of the cache
/// before it is full. Built at that, a
/// cache costs the trace's memory, not the cache's: a policy keeps
/// arrays of its capacity, and a cache of 4 x 10^9 rows asked for tens
/// of GB.
pub fn sim_capacity(capacity: usize, n_objects: usize) -> usize {
    capacity.clamp(1, n_objects.max(ALWAYS_ADMITS).next_multiple_of(4))
}

/// A capacity at which every policy admits every miss (see
/// [`sim_capacity`]).
const ALWAYS_ADMITS: usize = 4096;

/// Run dense ids through a cache of `capacity` under `kind`.
pub fn simulate_dense(
    kind: PolicyKind,
    capacity: usize,
    ids: &[u32],
    n_objects: usize,
) -> SimResult {
    let mut c = DenseCache::new(kind, sim_capacity(capacity, n_objects), n_objects);
    let mut r = SimResult::default();
    for (i, &id) in ids.iter().enumerate() {
        if let Some(&next) = ids.get(i + AHEAD) {
            c.prefetch(next, next as u64);
        }
        r.record(c.access(id));
    }
    r
}

/// How many requests ahead a simulation asks for the memory a request
/// will touch ([`DenseCache::prefetch`]): far enough for a miss to memory
/// to land, near enough that the lines are still cached when used. (Asking
/// for a resident slot's links too, in two stages, measured slower.)
const AHEAD: usize = 8;

/// [`simulate_dense`] for a policy that hashes key values
/// ([`PolicyKind::hashes_keys`]): dense ids index the cache, and the
/// policy sees `keys[i]`, the trace's own id of `ids[i]`.
///
/// # Panics
/// If `keys` and `ids` differ in length.
pub fn simulate_dense_keyed(
    kind: PolicyKind,
    capacity: usize,
    ids: &[u32],
    keys: &[u64],
    n_objects: usize,
) -> SimResult {
    assert_eq!(ids.len(), keys.len(), "one key per id");
    run_keyed(
        DenseCache::new(kind, sim_capacity(capacity, n_objects), n_objects),
        ids,
        keys,
    )
}

/// Run `c` over `ids`, its policy told `keys[i]` for `ids[i]`, each
/// request's memory asked for [`AHEAD`] requests ahead.
fn run_keyed(mut c: DenseCache, ids: &[u32], keys: &[u64]) -> SimResult {
    let mut r = SimResult::default();
    for (i, (&id, &key)) in ids.iter().zip(keys).enumerate() {
        if let (Some(&next), Some(&next_key)) = (ids.get(i + AHEAD), keys.get(i + AHEAD)) {
            c.prefetch(next, next_key);
        }
        r.record(c.access_keyed(id, key));
    }
    r
}

/// Each request's [`PolicyKind::key_digest`] under `kind`, for
/// [`simulate_dense_digested`]: `keys` are the requests' keys, `ids` their
/// dense ids `0..n_objects`; each distinct key is digested once.
pub fn digest_keys(kind: PolicyKind, keys: &[u64], ids: &[u32], n_objects: usize) -> Vec<u64> {
    digest_keys_by(kind, keys, ids, n_objects, |k| k)
}

/// [`digest_keys`] of `hashed(key)` for each request's key: the value a
/// policy hashes, where it is not the key itself (a trace's own ids, of
/// which its keys are dense numbers).
pub fn digest_keys_by(
    kind: PolicyKind,
    keys: &[u64],
    ids: &[u32],
    n_objects: usize,
    hashed: impl Fn(u64) -> u64,
) -> Vec<u64> {
    assert_eq!(ids.len(), keys.len(), "one key per id");
    let mut of = vec![None; n_objects];
    ids.iter()
        .zip(keys)
        .map(|(&id, &key)| *of[id as usize].get_or_insert_with(|| kind.key_digest(hashed(key))))
        .collect()
}

/// [`simulate_dense_keyed`] told each request's key digest
/// ([`digest_keys`]) instead of its key: the same decisions, without the
/// policy hashing a key per request (W-TinyLFU's two XXH64 a request, and
/// again for every size of a sweep).
///
/// # Panics
/// If `digests` and `ids` differ in length.
pub fn simulate_dense_digested(
    kind: PolicyKind,
    capacity: usize,
    ids: &[u32],
    digests: &[u64],
    n_objects: usize,
) -> SimResult {
    assert_eq!(ids.len(), digests.len(), "one digest per id");
    let mut c = DenseCache::new(kind, sim_capacity(capacity, n_objects), n_objects);
    c.policy.digested_keys();
    run_keyed(c, ids, digests)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(n: usize, seed: u64) -> Vec<u64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = embtier::init::mix64(x);
                // skewed: small ids more often
                let r = (x >> 11) as f64 / (1u64 << 53) as f64;
                (r * r * r * 500.0) as u64
            })
            .collect()
    }

    /// The dense paths (a vector instead of a hash map, requests looked
    /// ahead) decide exactly as [`SimCache`] over the raw ids, for every
    /// policy; a policy that hashes key values is told the raw ids.
    #[test]
    fn dense_paths_equal_the_hashed_cache() {
        // Scattered 64-bit ids, so that hashing a dense id instead of the
        // raw one would change W-TinyLFU's sketch.
        let raw: Vec<u64> = trace(60_000, 7)
            .into_iter()
            .map(|x| embtier::init::mix64(x + 1))
            .collect();
        let (dense, n) = crate::densify(&raw);
        for &kind in PolicyKind::ALL {
            for cap in [1usize, 3, 40, 200, 1000] {
                let mut reference = SimCache::new(kind, cap);
                let mut want = SimResult::default();
                let mut per_request = Vec::with_capacity(raw.len());
                for &id in &raw {
                    let hit = reference.access(id);
                    want.record(hit);
                    per_request.push(hit);
                }
                let keyed = simulate_dense_keyed(kind, cap, &dense, &raw, n);
                assert_eq!(keyed, want, "{kind:?} at {cap}, keyed");
                let digests = digest_keys(kind, &raw, &dense, n);
                let digested = simulate_dense_digested(kind, cap, &dense, &digests, n);
                assert_eq!(digested, want, "{kind:?} at {cap}, digested");
                assert_eq!(simulate(kind, cap, &raw), want, "{kind:?} at {cap}");
                if !kind.hashes_keys() {
                    assert_eq!(
                        simulate_dense(kind, cap, &dense, n),
                        want,
                        "{kind:?} at {cap}, dense"
                    );
                }
                // And request by request, not just in total.
                let mut c = DenseCache::new(kind, cap, n);
                for (i, (&d, &id)) in dense.iter().zip(&raw).enumerate() {
                    // Told the raw id, which only W-TinyLFU uses.
                    let key = id;
                    assert_eq!(
                        c.access_keyed(d, key),
                        per_request[i],
                        "{kind:?} at {cap}, request {i}"
                    );
                }
            }
        }
    }

    /// Caches larger than [`sim_capacity`]'s bound are built at it, and
    /// decide as a cache built at their own size: [`SimCache`] unbounded
    /// at 20,000 rows (500 ids) is the reference for the dense paths at
    /// 20,000 and at 2^31 rows, each built at 4,096; and W-TinyLFU, 2Q and
    /// SLRU at the bound admit as they would above it.
    #[test]
    fn caches_beyond_the_trace_decide_as_at_their_own_size() {
        let raw: Vec<u64> = trace(60_000, 11)
            .into_iter()
            .map(|x| embtier::init::mix64(x + 3))
            .collect();
        let (dense, n) = crate::densify(&raw);
        assert!(n < ALWAYS_ADMITS);
        // A cache built at its own size, `cap`: the reference.
        let unbounded = |kind: PolicyKind, cap: usize, raw: &[u64]| {
            let mut reference = SimCache::new(kind, cap);
            let mut want = SimResult::default();
            for &id in raw {
                want.record(reference.access(id));
            }
            want
        };
        for &kind in PolicyKind::ALL {
            let want = unbounded(kind, 20_000, &raw);
            assert_eq!(want.misses, n as u64, "{kind:?}: only cold misses");
            for cap in [20_000usize, 1 << 31] {
                assert_eq!(sim_capacity(cap, n), ALWAYS_ADMITS);
                let got = simulate_dense_keyed(kind, cap, &dense, &raw, n);
                assert_eq!(got, want, "{kind:?} at {cap}, keyed");
                let digests = digest_keys(kind, &raw, &dense, n);
                let got = simulate_dense_digested(kind, cap, &dense, &digests, n);
                assert_eq!(got, want, "{kind:?} at {cap}, digested");
                if !kind.hashes_keys() {
                    assert_eq!(
                        simulate_dense(kind, cap, &dense, n),
                        want,
                        "{kind:?} at {cap}"
                    );
                }
            }
            // Built at the bound itself, the cache admits every miss.
            let at_bound = simulate_dense_keyed(kind, ALWAYS_ADMITS, &dense, &raw, n);
            assert_eq!(at_bound, want, "{kind:?} at the bound");
        }
        // Past 4,096 ids, a number of ids that is not a multiple of 4 (so
        // that SLRU's quarters would not hold them all at that size): a
        // reused id of segment 0 demoted one row out of the cache.
        let raw: Vec<u64> = (0..4097u64)
            .chain([0, 1])
            .chain(trace(30_000, 13))
            .map(|x| embtier::init::mix64(x + 5))
            .collect();
        let (dense, n) = crate::densify(&raw);
        assert!(n > ALWAYS_ADMITS && n % 4 != 0, "{n}");
        for &kind in PolicyKind::ALL {
            let want = unbounded(kind, 3 * n, &raw);
            assert_eq!(want.misses, n as u64, "{kind:?}: only cold misses");
            for cap in [3 * n, 1 << 31] {
                let got = simulate_dense_keyed(kind, cap, &dense, &raw, n);
                assert_eq!(got, want, "{kind:?} at {cap} over {n} ids");
            }
        }
        // Past the bound, the capacity is kept where the trace has more ids.
        assert_eq!(sim_capacity(1 << 31, 10_000_000), 10_000_000);
        assert_eq!(sim_capacity(1 << 31, 10_000_001), 10_000_004);
        assert_eq!(sim_capacity(5_000, 10_000_000), 5_000);
        assert_eq!(sim_capacity(0, 10), 1);
    }

    /// Our LRU against the `lru` crate, an independent implementation.
    #[test]
    fn lru_matches_reference_crate() {
        for cap in [1usize, 2, 7, 64, 300] {
            let mut ours = SimCache::new(PolicyKind::Lru, cap);
            let mut theirs = lru::LruCache::new(std::num::NonZeroUsize::new(cap).unwrap());
            for id in trace(20_000, cap as u64) {
                let hit = theirs.get(&id).is_some();
                if !hit {
                    theirs.put(id, ());
                }
                assert_eq!(ours.access(id), hit, "cap {cap} id {id}");
            }
        }
    }

    /// FIFO against a VecDeque model.
    #[test]
    fn fifo_matches_model() {
        for cap in [1usize, 3, 50] {
            let mut ours = SimCache::new(PolicyKind::Fifo, cap);
            let mut q = std::collections::VecDeque::new();
            for id in trace(10_000, 99) {
                let hit = q.contains(&id);
                if !hit {
                    if q.len() == cap {
                        q.pop_front();
                    }
                    q.push_back(id);
                }
                assert_eq!(ours.access(id), hit);
            }
        }
    }

    /// SIEVE against a direct transcription of the paper's pseudocode on a Vec.
    #[test]
    fn sieve_matches_model() {
        for cap in [1usize, 2, 5, 40] {
            let mut ours = SimCache::new(PolicyKind::Sieve, cap);
            // queue: index 0 = tail (oldest), last = head.
            let mut q: Vec<(u64, bool)> = Vec::new();
            let mut hand: Option<usize> = None; // index into q
            for id in trace(10_000, 7 + cap as u64) {
                let pos = q.iter().position(|e| e.0 == id);
                let hit = pos.is_some();
                if let Some(p) = pos {
                    q[p].1 = true;
                } else {
                    if q.len() == cap {
                        let mut h = hand.unwrap_or(0);
                        while q[h].1 {
                            q[h].1 = false;
                            h = if h + 1 < q.len() { h + 1 } else { 0 };
                        }
                        q.remove(h);
                        // the hand moves to the next-newer element, which
                        // now sits at index h
                        hand = if h < q.len() { Some(h) } else { None };
                    }
                    q.push((id, false));
                }
                assert_eq!(ours.access(id), hit, "cap {cap}");
            }
        }
    }

    /// SIEVE keeps a frequently hit working set through a one-off scan; LRU does not.
    #[test]
    fn sieve_resists_scans() {
        let mut lru = SimCache::new(PolicyKind::Lru, 100);
        let mut sieve = SimCache::new(PolicyKind::Sieve, 100);
        for round in 0..20 {
            for id in 0..50u64 {
                lru.access(id);
                sieve.access(id);
            }
            if round == 10 {
                for id in 1000..1100u64 {
                    lru.access(id);
                    sieve.access(id);
                }
            }
        }
        let hot_after_scan = |c: &SimCache| (0..50u64).filter(|&i| c.contains(i)).count();
        let mut l2 = lru.clone();
        let mut s2 = sieve.clone();
        for id in 2000..2080u64 {
            l2.access(id);
            s2.access(id);
        }
        assert_eq!(hot_after_scan(&s2), 50);
        assert!(hot_after_scan(&l2) < 50);
    }
}
