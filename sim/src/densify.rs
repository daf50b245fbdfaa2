//! Dense ids: trace ids (any u64, table names, categorical values) mapped
//! to `0..n` in order of first appearance, so that simulated caches and
//! analyses index vectors instead of hashing per request.

use std::collections::HashMap;

use embtier::init::mix64;

/// A fast hasher for integer keys (the SplitMix64 finaliser), for the hash
/// maps that densify trace ids. Not DoS-resistant: only for keys from traces
/// the user analyses, never for untrusted network input.
#[derive(Default, Clone, Copy)]
pub struct MixHasher(u64);

impl std::hash::Hasher for MixHasher {
    #[inline]
    fn finish(&self) -> u64 {
        mix64(self.0)
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.0 ^= n as u64;
    }
}

/// `BuildHasher` of [`MixHasher`].
pub type FastHash = std::hash::BuildHasherDefault<MixHasher>;

/// Dense ids `0..n` for `ids`, in order of first appearance, and `n`.
pub fn densify(ids: &[u64]) -> (Vec<u32>, usize) {
    let mut map: HashMap<u64, u32, FastHash> =
        HashMap::with_capacity_and_hasher(ids.len() / 4, Default::default());
    let dense = ids
        .iter()
        .map(|id| {
            let n = map.len() as u32;
            *map.entry(*id).or_insert(n)
        })
        .collect();
    (dense, map.len())
}

/// Dense ids in order of first appearance, one key at a time (the
/// importers' id maps).
#[derive(Debug, Default)]
pub(crate) struct Densify<K: std::hash::Hash + Eq> {
    map: HashMap<K, u64, FastHash>,
}

impl<K: std::hash::Hash + Eq> Densify<K> {
    /// The dense id of `key`, a new one on its first appearance.
    #[inline]
    pub fn id(&mut self, key: K) -> u64 {
        let n = self.map.len() as u64;
        *self.map.entry(key).or_insert(n)
    }

    /// Keys seen.
    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// The keys seen, indexed by their dense ids.
    pub fn into_keys(self) -> Vec<K> {
        let mut v: Vec<(K, u64)> = self.map.into_iter().collect();
        v.sort_unstable_by_key(|(_, i)| *i);
        v.into_iter().map(|(k, _)| k).collect()
    }
}
