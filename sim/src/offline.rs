//! Policies that do not fit the slot interface: Belady's MIN, which needs
//! the future, and FBGEMM-style set-associative caches, which pick their own
//! slot from the key.

use std::collections::{BinaryHeap, HashMap};

use crate::densify::FastHash;

use crate::SimResult;
use embtier::init::mix64;

/// The index of the next access of each position (`u64::MAX`: none).
pub fn next_accesses(ids: &[u64]) -> Vec<u64> {
    let mut next = vec![u64::MAX; ids.len()];
    let mut last: HashMap<u64, u64, FastHash> =
        HashMap::with_capacity_and_hasher(ids.len() / 4, FastHash::default());
    for (i, id) in ids.iter().enumerate().rev() {
        if let Some(&j) = last.get(id) {
            next[i] = j;
        }
        last.insert(*id, i as u64);
    }
    next
}

/// Belady's MIN: on a miss in a full cache, evict the object whose next
/// access is farthest in the future (never accessed again counts as
/// infinitely far). Every miss is admitted, as in libCacheSim's `Belady`.
pub fn belady(ids: &[u64], capacity: usize) -> SimResult {
    let next = next_accesses(ids);
    let capacity = capacity.max(1);
    // Room for what can be resident: at most every object of the trace.
    let room = capacity.min(ids.len().max(1));
    // Resident objects and the next-access time their heap entry carries.
    let mut resident: HashMap<u64, u64, FastHash> =
        HashMap::with_capacity_and_hasher(room, FastHash::default());
    let mut heap: BinaryHeap<(u64, u64)> = BinaryHeap::with_capacity(room * 2);
    let mut r = SimResult::default();
    for (i, &id) in ids.iter().enumerate() {
        let n = next[i];
        if let Some(t) = resident.get_mut(&id) {
            *t = n;
            heap.push((n, id));
            r.hits += 1;
            continue;
        }
        r.misses += 1;
        if resident.len() == capacity {
            // Pop until an entry is current (lazy deletion of stale times).
            while let Some((t, victim)) = heap.pop() {
                if resident.get(&victim) == Some(&t) {
                    resident.remove(&victim);
                    break;
                }
            }
        }
        resident.insert(id, n);
        heap.push((n, id));
        if heap.len() > 4 * capacity + 64 {
            heap.retain(|(t, k)| resident.get(k) == Some(t));
        }
    }
    r
}

/// Replacement within a set of a set-associative cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetPolicy {
    /// Least recently used way.
    Lru,
    /// Least frequently used way (frequency since insertion), ties to the
    /// least recently used.
    Lfu,
}

/// A set-associative cache as in FBGEMM's TBE cache: `ways` ways per set,
/// `ceil(capacity / ways)` sets, a row hashed to one set.
pub fn set_associative(ids: &[u64], capacity: usize, ways: usize, policy: SetPolicy) -> SimResult {
    let ways = ways.max(1);
    let sets = capacity.max(1).div_ceil(ways);
    // With more sets than requests (a cache far larger than the trace),
    // only the sets the trace touches are kept, numbered as first touched,
    // so that memory follows the trace rather than the cache.
    let sparse = sets > ids.len();
    let mut touched: HashMap<usize, usize, FastHash> = HashMap::default();
    let kept = if sparse { 0 } else { sets };
    // Per way: key, last access time, frequency. u64::MAX key = empty.
    let mut key = vec![u64::MAX; kept * ways];
    let mut time = vec![0u64; kept * ways];
    let mut freq = vec![0u64; kept * ways];
    let mut r = SimResult::default();
    for (t, &id) in ids.iter().enumerate() {
        let mut s = ((mix64(id ^ 0x9e37_79b9) as u128 * sets as u128) >> 64) as usize;
        if sparse {
            let fresh = touched.len();
            s = *touched.entry(s).or_insert(fresh);
            if s == fresh {
                key.resize(key.len() + ways, u64::MAX);
                time.resize(time.len() + ways, 0);
                freq.resize(freq.len() + ways, 0);
            }
        }
        let base = s * ways;
        let ways_of = base..base + ways;
        if let Some(w) = ways_of.clone().find(|&w| key[w] == id) {
            time[w] = t as u64;
            freq[w] += 1;
            r.hits += 1;
            continue;
        }
        r.misses += 1;
        let w = ways_of
            .clone()
            .find(|&w| key[w] == u64::MAX)
            .unwrap_or_else(|| match policy {
                SetPolicy::Lru => ways_of.clone().min_by_key(|&w| time[w]).expect("ways > 0"),
                SetPolicy::Lfu => ways_of
                    .clone()
                    .min_by_key(|&w| (freq[w], time[w]))
                    .expect("ways > 0"),
            });
        key[w] = id;
        time[w] = t as u64;
        freq[w] = 1;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate;
    use embtier::PolicyKind;

    fn trace() -> Vec<u64> {
        let mut x = 5u64;
        (0..20_000)
            .map(|_| {
                x = mix64(x);
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                (u * u * 2000.0) as u64
            })
            .collect()
    }

    /// MIN is a lower bound on every online policy, and exact by brute force
    /// on a small trace.
    #[test]
    fn belady_is_optimal() {
        let ids = trace();
        for cap in [1usize, 10, 100, 1000] {
            let b = belady(&ids, cap).misses;
            for k in PolicyKind::ALL {
                assert!(b <= simulate(*k, cap, &ids).misses, "{k} at {cap}");
            }
        }
        // Brute force: evict the farthest next use, recomputed each time.
        let ids: Vec<u64> = trace().into_iter().take(2000).map(|x| x % 50).collect();
        let cap = 7;
        let mut cache: Vec<u64> = Vec::new();
        let mut misses = 0;
        for (i, &id) in ids.iter().enumerate() {
            if cache.contains(&id) {
                continue;
            }
            misses += 1;
            if cache.len() == cap {
                let far = |k: u64| {
                    ids[i + 1..]
                        .iter()
                        .position(|&x| x == k)
                        .unwrap_or(usize::MAX)
                };
                let (j, _) = cache
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, &k)| far(k))
                    .unwrap();
                cache.remove(j);
            }
            cache.push(id);
        }
        assert_eq!(belady(&ids, cap).misses, misses);
    }

    #[test]
    fn a_set_associative_cache_larger_than_the_trace_keeps_only_its_sets() {
        // More sets than requests: the sets are kept as touched. The same
        // requests followed by enough repeats of one resident id to make
        // the sets fewer than the requests run on every set, and differ
        // by exactly those hits.
        let ids = trace();
        let cap = 32 * (ids.len() + 1);
        for p in [SetPolicy::Lru, SetPolicy::Lfu] {
            let sparse = set_associative(&ids, cap, 32, p);
            let mut longer = ids.clone();
            longer.extend(std::iter::repeat_n(ids[0], ids.len() + 2));
            let dense = set_associative(&longer, cap, 32, p);
            assert_eq!(dense.misses, sparse.misses, "{p:?}");
            assert_eq!(dense.hits, sparse.hits + ids.len() as u64 + 2, "{p:?}");
            // And a cache of 2^32 - 2 rows costs the trace's sets.
            assert_eq!(
                set_associative(&ids, u32::MAX as usize - 1, 32, p).misses,
                sparse.misses
            );
        }
    }

    #[test]
    fn set_associative_with_one_set_is_lru() {
        let ids = trace();
        let one_set = set_associative(&ids, 32, 32, SetPolicy::Lru);
        assert_eq!(one_set, simulate(PolicyKind::Lru, 32, &ids));
        let lfu = set_associative(&ids, 1024, 32, SetPolicy::Lfu);
        assert_eq!(lfu.hits + lfu.misses, ids.len() as u64);
    }
}
