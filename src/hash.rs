//! Leaf helpers (no dependency inside the crate but the prefetch hint):
//! the 64-bit mixer that initial values, shard placement, stochastic
//! rounding and the generators derive from, the name normaliser of the
//! parsers, and the numbering of a batch's distinct ids.

/// The SplitMix64 finaliser: a bijective 64-bit mixer. Initial values
/// (FORMAT.md), shard placement and stochastic rounding all derive from it;
/// tests and examples use it for their deterministic generators.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A random, non-zero 64-bit number: the store id drawn at create, the
/// commit id drawn at each commit. Keyed by the operating system's
/// randomness (through the standard library's per-process hash keys), the
/// time in nanoseconds, the process id and a counter, so that two draws
/// differ within a process and across processes and machines.
pub(crate) fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static DRAWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(DRAWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish().max(1)
}

/// A name as the parsers of this crate compare it: lower case, with `-` and
/// `_` dropped, so that `S3-FIFO`, `s3_fifo` and `s3fifo` are one name.
pub fn canonical_name(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The most ids one call of the store takes: a call numbers its ids'
/// positions and its distinct ids in 32 bits (`u32::MAX` is left free).
pub(crate) const MAX_CALL_IDS: usize = u32::MAX as usize - 1;

/// The distinct ids of `indices` in the order of their first occurrence,
/// for each index its id's position in that list, and how often each
/// distinct id occurs.
///
/// An open-addressing table at most half full (linear probing, keys
/// mixed by [`mix64`]), whose slot for the index 16 ahead is
/// asked for before each probe: a batch's ids are random, so each probe
/// is a cache miss, and a general map paid them one after another (a
/// quarter of a cached table's pooled forward).
///
/// # Panics
/// Past [`MAX_CALL_IDS`] indices (positions are u32; the store's calls
/// refuse larger batches first).
pub(crate) fn distinct(indices: &[u64]) -> (Vec<u64>, Vec<u32>, Vec<u32>) {
    const AHEAD: usize = 16;
    assert!(
        indices.len() <= MAX_CALL_IDS,
        "distinct: {} indices, at most {MAX_CALL_IDS}",
        indices.len()
    );
    let bits = (2 * indices.len())
        .max(16)
        .next_power_of_two()
        .trailing_zeros();
    let mask = (1usize << bits) - 1;
    let home = |id: u64| (mix64(id) >> (64 - bits)) as usize;
    // (id, its position + 1): 0 marks an empty slot.
    let mut table: Vec<(u64, u32)> = vec![(0, 0); mask + 1];
    let (mut ids, mut occurrences) = (Vec::new(), Vec::new());
    let mut slots = Vec::with_capacity(indices.len());
    // The homes of the ids ahead, computed once: asked for AHEAD ahead,
    // kept until their probe.
    let mut homes = [0usize; AHEAD];
    for (i, &id) in indices.iter().enumerate().take(AHEAD) {
        homes[i] = home(id);
        crate::hint::prefetch(table.as_ptr().wrapping_add(homes[i]));
    }
    for (i, &id) in indices.iter().enumerate() {
        let mut p = homes[i % AHEAD];
        if let Some(&next) = indices.get(i + AHEAD) {
            let h = home(next);
            homes[i % AHEAD] = h;
            crate::hint::prefetch(table.as_ptr().wrapping_add(h));
        }
        let k = loop {
            let (key, v) = table[p];
            if v == 0 {
                ids.push(id);
                occurrences.push(0);
                table[p] = (id, ids.len() as u32);
                break ids.len() - 1;
            }
            if key == id {
                break v as usize - 1;
            }
            p = (p + 1) & mask;
        };
        occurrences[k] += 1;
        slots.push(k as u32);
    }
    (ids, slots, occurrences)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `distinct` numbers ids as a plain map does, over batches of
    /// random, repeated, clustered and extreme ids, empty to large
    /// (tables that wrap and probe long runs).
    #[test]
    fn distinct_numbers_ids_as_a_map_does() {
        let mut x = 3u64;
        let mut rnd = || {
            x = mix64(x);
            x
        };
        for (n, span) in [
            (0usize, 1u64),
            (1, 1),
            (7, 3),
            (100, 50),
            (5_000, 1_000),
            (40_000, u64::MAX),
            (40_000, 64),
        ] {
            let mut indices: Vec<u64> = (0..n).map(|_| rnd() % span.max(1)).collect();
            if n > 10 {
                indices[3] = u64::MAX;
                indices[n - 1] = 0;
                indices[n / 2] = u64::MAX;
            }
            let mut pos = std::collections::HashMap::new();
            let (mut ids, mut occ, mut slots) = (Vec::new(), Vec::new(), Vec::new());
            for &id in &indices {
                let k = *pos.entry(id).or_insert_with(|| {
                    ids.push(id);
                    occ.push(0u32);
                    ids.len() as u32 - 1
                });
                occ[k as usize] += 1;
                slots.push(k);
            }
            assert_eq!(distinct(&indices), (ids, slots, occ), "{n} ids in {span}");
        }
    }

    #[test]
    fn distinct_keeps_first_occurrence_order() {
        let (ids, slots, occurrences) = distinct(&[5, 3, 5, 9, 3]);
        assert_eq!(occurrences, vec![2, 2, 1]);
        assert_eq!(ids, vec![5, 3, 9]);
        assert_eq!(slots, vec![0, 1, 0, 2, 1]);
    }
}
