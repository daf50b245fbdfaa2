//! Dense ids: trace ids (any u64, table names, categorical values) mapped
//! to `0..n` in order of first appearance, so that simulated caches and
//! analyses index vectors instead of hashing per request.

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

/// Whether [`densify`] can number the distinct ids of `ids` (at most
/// [`IdTable::MAX_IDS`] of them): `Err(limit)` when not. Free for fewer
/// ids than the limit, which cannot hold more distinct ones; past it, one
/// numbering pass. The tools ask before they densify a trace's keys, and
/// refuse with an error rather than panic.
pub fn check_dense(ids: &[u64]) -> Result<(), u64> {
    check_dense_within(ids, IdTable::MAX_IDS)
}

/// [`check_dense`] with a limit of `limit` distinct ids (tests).
#[doc(hidden)]
pub fn check_dense_within(ids: &[u64], limit: u32) -> Result<(), u64> {
    if ids.len() as u64 <= limit as u64 {
        return Ok(());
    }
    let mut t = IdTable::with_limit(limit);
    for &id in ids {
        t.id(id);
        if t.overflowed() {
            return Err(limit as u64);
        }
    }
    Ok(())
}

/// Dense ids `0..n` for `ids`, in order of first appearance, and `n`.
/// Ids that already are (each a repeat or the next new number, as the
/// importers write them) are copied without hashing.
///
/// # Panics
/// Past [`IdTable::MAX_IDS`] distinct ids (the dense ids are u32), rather
/// than give two of them one dense id: ask [`check_dense`] first.
pub fn densify(ids: &[u64]) -> (Vec<u32>, usize) {
    let mut next = 0u64;
    let already = ids.iter().all(|&id| {
        if id == next {
            next += 1;
        }
        id < next
    });
    if already && next <= IdTable::MAX_IDS as u64 {
        return (ids.iter().map(|&id| id as u32).collect(), next as usize);
    }
    let mut t = IdTable::with_capacity(ids.len() / 4);
    let dense = ids.iter().map(|&id| t.id(id)).collect();
    assert!(
        !t.overflowed(),
        "more than {} distinct ids to densify",
        IdTable::MAX_IDS
    );
    (dense, t.len())
}

/// Dense ids for u64 keys in order of first appearance: an open-addressing
/// table (linear probing, SplitMix64 hash, at most three quarters full),
/// the hot path of every importer of integer ids.
///
/// Three quarters rather than half: a probe's cost is its first cache
/// miss, not the few slots after it in the same line, and a Criteo file's
/// 26 tables of 13 M values took 250 MB less (582 against 833 MB of peak
/// RSS for `analyze --sample`) in the same time; a 5.3 M-record
/// oracleGeneral file numbered as fast.
///
/// A slot is 12 bytes, `[key low, key high, id + 1]` (id 0 marks an empty
/// slot), not a 16-byte `(u64, u32)` with 4 bytes of padding: the table is
/// random memory, and a quarter less of it keeps more of it in cache (a
/// 5.3 M-record oracleGeneral file numbered 20-25% faster).
///
/// Dense ids are u32: past [`IdTable::MAX_IDS`] keys the table numbers
/// no more ([`IdTable::overflowed`]), and a reader must say so rather
/// than use the ids.
#[derive(Debug, Clone)]
pub struct IdTable {
    slots: Vec<[u32; 3]>,
    len: u32,
    shift: u32,
    /// The keys it numbers at most ([`IdTable::MAX_IDS`] but in tests).
    limit: u32,
    overflowed: bool,
}

impl Default for IdTable {
    fn default() -> IdTable {
        IdTable::with_capacity(0)
    }
}

/// A slot's key.
#[inline(always)]
fn slot_key(s: &[u32; 3]) -> u64 {
    s[0] as u64 | (s[1] as u64) << 32
}

impl IdTable {
    /// The distinct keys a table numbers: dense ids are u32, and an
    /// empty slot is marked by id + 1 = 0.
    pub const MAX_IDS: u32 = u32::MAX - 1;

    /// A table for about `n` keys before it grows.
    pub fn with_capacity(n: usize) -> IdTable {
        let cap = (4 * n).div_ceil(3).next_power_of_two().max(1024);
        IdTable {
            slots: vec![[0; 3]; cap],
            len: 0,
            shift: 64 - cap.trailing_zeros(),
            limit: IdTable::MAX_IDS,
            overflowed: false,
        }
    }

    /// A table that numbers at most `limit` keys (at least 1), to test
    /// what its users do past [`IdTable::MAX_IDS`].
    #[doc(hidden)]
    pub fn with_limit(limit: u32) -> IdTable {
        IdTable {
            limit: limit.clamp(1, IdTable::MAX_IDS),
            ..IdTable::with_capacity(0)
        }
    }

    /// Whether more distinct keys came than it numbers: the ids it gave
    /// since then are wrong (the last id given, again), and the caller
    /// must not use them.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// The hash that [`IdTable::prefetch_hashed`] and
    /// [`IdTable::id_hashed`] take, for a caller that asks for a key's
    /// slot ahead and would otherwise hash the key twice.
    #[inline(always)]
    pub fn hash(key: u64) -> u64 {
        mix64(key)
    }

    /// Ask for the cache line of the slot of the key whose
    /// [`IdTable::hash`] is `h`, ahead of [`IdTable::id_hashed`].
    #[inline(always)]
    pub fn prefetch_hashed(&self, h: u64) {
        let i = (h >> self.shift) as usize;
        embtier::hint::prefetch(self.slots.as_ptr().wrapping_add(i));
    }

    /// The slot of `key` (whose [`IdTable::hash`] is `h`): its own, or
    /// the empty one where it would go.
    #[inline(always)]
    fn probe(&self, key: u64, h: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = (h >> self.shift) as usize;
        loop {
            let s = &self.slots[i];
            if s[2] == 0 || slot_key(s) == key {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    /// The dense id of `key` if it has one (a lookup that numbers
    /// nothing).
    pub fn get(&self, key: u64) -> Option<u32> {
        self.slots[self.probe(key, IdTable::hash(key))][2].checked_sub(1)
    }

    /// The dense id of `key`, a new one on its first appearance; past
    /// [`IdTable::MAX_IDS`] distinct keys, the last id given, and the
    /// table has [`IdTable::overflowed`].
    #[inline]
    pub fn id(&mut self, key: u64) -> u32 {
        self.id_hashed(key, IdTable::hash(key))
    }

    /// [`IdTable::id`] of `key`, whose [`IdTable::hash`] is `h`.
    #[inline(always)]
    pub fn id_hashed(&mut self, key: u64, h: u64) -> u32 {
        debug_assert_eq!(h, IdTable::hash(key));
        let i = self.probe(key, h);
        if self.slots[i][2] != 0 {
            return self.slots[i][2] - 1;
        }
        let id = self.len;
        if id >= self.limit {
            self.overflowed = true;
            return id - 1;
        }
        self.slots[i] = [key as u32, (key >> 32) as u32, id + 1];
        self.len += 1;
        if self.len as usize * 4 > self.slots.len() * 3 {
            self.grow();
        }
        id
    }

    fn grow(&mut self) {
        let old = std::mem::take(&mut self.slots);
        let cap = old.len() * 2;
        self.slots = vec![[0; 3]; cap];
        self.shift = 64 - cap.trailing_zeros();
        let mask = cap - 1;
        for s in old.into_iter().filter(|s| s[2] != 0) {
            let mut i = (mix64(slot_key(&s)) >> self.shift) as usize;
            while self.slots[i][2] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }

    /// Keys seen.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// The key of each id, in id order (`keys_by_id()[id(k)] == k`).
    pub fn keys_by_id(&self) -> Vec<u64> {
        let mut out = vec![0u64; self.len as usize];
        for s in &self.slots {
            if let Some(id) = s[2].checked_sub(1) {
                out[id as usize] = s[0] as u64 | (s[1] as u64) << 32;
            }
        }
        out
    }

    /// Whether no key was seen.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each id's key is the key numbered to it, across the table's growth
    /// (a thousand times its first capacity) and keys of every width.
    #[test]
    fn keys_by_id_inverts_the_numbering() {
        let mut t = IdTable::with_capacity(4);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut seen = Vec::new();
        for i in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = if i % 3 == 0 { x >> 40 } else { x };
            let id = t.id(k);
            if id as usize == seen.len() {
                seen.push(k);
            }
        }
        assert_eq!(t.keys_by_id(), seen);
    }

    /// The check refuses exactly the key sets with more distinct keys
    /// than the limit, however long, and passes short ones unread.
    #[test]
    fn check_dense_refuses_past_the_limit() {
        let ten: Vec<u64> = (0..1000u64).map(|i| (i * 7) % 10 + (1 << 40)).collect();
        assert_eq!(check_dense_within(&ten, 10), Ok(()));
        assert_eq!(check_dense_within(&ten, 9), Err(9));
        let mut eleven = ten.clone();
        eleven.push(u64::MAX);
        assert_eq!(check_dense_within(&eleven, 10), Err(10));
        assert_eq!(check_dense_within(&eleven, 11), Ok(()));
        assert_eq!(check_dense_within(&eleven[..5], 5), Ok(()));
        assert_eq!(check_dense_within(&[], 1), Ok(()));
        assert_eq!(check_dense(&eleven), Ok(()));
    }
    use std::collections::HashMap;

    /// First-appearance ids by a plain map: the reference.
    fn reference(ids: &[u64]) -> (Vec<u32>, usize) {
        let mut m: HashMap<u64, u32> = HashMap::new();
        let d = ids
            .iter()
            .map(|k| {
                let n = m.len() as u32;
                *m.entry(*k).or_insert(n)
            })
            .collect();
        (d, m.len())
    }

    #[test]
    fn id_table_and_densify_match_the_reference() {
        let mut x = 9u64;
        let mut next = || {
            x = mix64(x);
            x
        };
        // Colliding low bits, zero and u64::MAX keys, many growths.
        let wide: Vec<u64> = (0..300_000)
            .map(|_| {
                let r = next();
                match r % 4 {
                    0 => (r >> 40) << 20,
                    1 => r % 1000,
                    2 => u64::MAX - r % 3,
                    _ => r,
                }
            })
            .collect();
        assert_eq!(densify(&wide), reference(&wide));
        let mut t = IdTable::with_capacity(1);
        let got: Vec<u32> = wide.iter().map(|&k| t.id(k)).collect();
        assert_eq!((got, t.len()), reference(&wide));
        // Already dense (the importers' rows): copied, same answer.
        let (dense, n) = reference(&wide);
        let as_u64: Vec<u64> = dense.iter().map(|&d| d as u64).collect();
        assert_eq!(densify(&as_u64), (dense.clone(), n));
        // Dense but not in first-appearance order: hashed, not copied.
        let swapped = [1u64, 0, 1, 2];
        assert_eq!(densify(&swapped), (vec![0, 1, 0, 2], 3));
        assert_eq!(densify(&[]), (vec![], 0));
    }
}
