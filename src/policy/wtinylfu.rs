//! W-TinyLFU (Einziger, Friedman, Manes; TOS '17), as libCacheSim's
//! `WTinyLFU.c` with its defaults:
//! - a window LRU of ⌊0.01·C⌋ and a main SLRU of the rest, in two segments
//!   of ⌊0.2·main⌋ and ⌊0.8·main⌋;
//! - new keys enter the window; a cache with an empty window share (C < 100)
//!   admits nothing;
//! - eviction takes the window's LRU as the candidate: while main has room
//!   it moves there; otherwise it enters main only if the frequency sketch
//!   rates it above main's victim (which is then evicted), else it is
//!   evicted itself; with an empty window, main evicts;
//! - the sketch is a counting Bloom filter sized for `main` entries at a
//!   0.001 error (libCacheSim's `minimalIncrementCBF`: XXH64 of the 8-byte
//!   key with seeds 0x12345678 and 0x12344321, k = ⌈ln 2 · bpe⌉ counters
//!   at (a + i·b) mod m, all incremented on an add); it counts main hits,
//!   inserts and each eviction candidate, and halves every 32·main main hits.
//!
//! The sketch hashes key *values*, so a simulation matches libCacheSim only
//! when it is given the trace's own ids (see `PolicyKind::hashes_keys`).

use xxhash_rust::xxh64::xxh64;

use super::chains::{Chains, Ends};
use super::slru::Slru;
use super::{EvictionPolicy, Link};

/// The counting Bloom filter of libCacheSim's W-TinyLFU.
#[derive(Debug, Clone)]
struct Sketch {
    counters: Vec<u32>,
    /// `⌊(2^64 - 1) / m⌋ + 1` for `m` counters: `x mod m` by two multiplies
    /// (Lemire, Kaser, Kurz, "Faster remainder by direct computation", 2019;
    /// exact for every 32-bit `x` and `m`).
    m_inv: u64,
}

/// `m`'s inverse for [`positions`]: `⌊(2^64 - 1) / m⌋ + 1`.
fn inverse(m: u32) -> u64 {
    (u64::MAX / m as u64).wrapping_add(1)
}

/// The counter positions `(a + i·b) mod m` (u32 arithmetic) of the key
/// hashed to `h` ([`Sketch::hash`]) in a sketch of `m` counters, whose
/// [`inverse`] is `m_inv`.
#[inline]
fn positions(h: u64, m: u32, m_inv: u64) -> [usize; HASHES] {
    let (a, b) = ((h >> 32) as u32, h as u32);
    std::array::from_fn(|i| {
        let x = a.wrapping_add((i as u32).wrapping_mul(b));
        let low = m_inv.wrapping_mul(x as u64);
        ((low as u128 * m as u128) >> 64) as usize
    })
}

/// A key's two sketch hashes, packed ([`PolicyKind::key_digest`] of
/// W-TinyLFU).
///
/// [`PolicyKind::key_digest`]: super::PolicyKind::key_digest
pub(super) fn digest(key: u64) -> u64 {
    Sketch::hash(key)
}

/// The sketch's counters per key at its 0.001 error (`⌈ln 2 · bpe⌉`).
const HASHES: usize = 10;

impl Sketch {
    // libCacheSim's literals (not std's LN_2), to reproduce its sizing exactly.
    #[allow(clippy::approx_constant)]
    fn new(entries: usize) -> Sketch {
        let bpe = -(0.001f64).ln() / 0.480453013918201;
        let hashes = (0.693147180559945 * bpe).ceil() as u32;
        let mut m = (bpe * entries as f64).ceil().min(i32::MAX as f64) as u32;
        if m < hashes {
            m = hashes * 2;
        }
        assert_eq!(
            hashes as usize, HASHES,
            "the error fixes the counters per key"
        );
        Sketch {
            counters: vec![0; m as usize],
            m_inv: inverse(m),
        }
    }

    /// A key's two hashes, packed (`a` high, `b` low): its counters sit at
    /// `(a + i·b) mod m`, whatever the sketch's size, so a key is hashed
    /// once and its hash kept.
    #[inline]
    fn hash(key: u64) -> u64 {
        let k = key.to_le_bytes();
        let a = xxh64(&k, 0x1234_5678) as u32;
        let b = xxh64(&k, 0x1234_4321) as u32;
        (a as u64) << 32 | b as u64
    }

    /// The counter positions of the key hashed to `h` ([`Sketch::hash`]):
    /// `(a + i·b) mod m` for `i` below [`HASHES`], in u32 arithmetic.
    #[inline]
    fn positions(&self, h: u64) -> [usize; HASHES] {
        positions(h, self.counters.len() as u32, self.m_inv)
    }

    fn estimate(&self, h: u64) -> u32 {
        self.positions(h)
            .iter()
            .map(|&x| self.counters[x])
            .min()
            .unwrap_or(u32::MAX)
    }

    /// Count the key hashed to `h` once in each of its counters (a position
    /// that repeats is counted again), unless one is saturated.
    fn add(&mut self, h: u64) {
        let pos = self.positions(h);
        if pos.iter().all(|&x| self.counters[x] < u32::MAX) {
            for x in pos {
                self.counters[x] += 1;
            }
        }
    }

    /// Ask for the cache lines of the counters of the key hashed to `h`
    /// (see [`EvictionPolicy::prefetch`]).
    fn prefetch(&self, h: u64) {
        for x in self.positions(h) {
            crate::hint::prefetch(self.counters.as_ptr().wrapping_add(x));
        }
    }

    fn halve(&mut self) {
        self.counters.iter_mut().for_each(|c| *c >>= 1);
    }
}

/// W-TinyLFU over slots.
#[derive(Debug, Clone)]
pub struct WTinyLfu<L: Link> {
    chains: Chains<L>,
    window: Ends<L>,
    main: Slru<L>,
    in_window: Vec<bool>,
    /// Each slot's key, hashed for the sketch ([`Sketch::hash`]): the
    /// policy needs keys only there.
    hashes: Vec<u64>,
    /// Whether keys come as their [`digest`]s
    /// ([`EvictionPolicy::digested_keys`]).
    digested: bool,
    sketch: Sketch,
    window_cap: usize,
    main_cap: usize,
    seg0_cap: usize,
    main_hits: usize,
    decay_every: usize,
}

impl<L: Link> WTinyLfu<L> {
    /// W-TinyLFU over `capacity` slots.
    pub fn new(capacity: usize) -> WTinyLfu<L> {
        let window_cap = (capacity as f64 * 0.01) as usize;
        let main_cap = capacity - window_cap;
        let seg0 = (1.0 / 5.0 * main_cap as f64) as usize;
        let seg1 = (4.0 / 5.0 * main_cap as f64) as usize;
        WTinyLfu {
            chains: Chains::new(capacity),
            window: Ends::default(),
            main: Slru::with_segments(capacity, vec![seg0, seg1]),
            in_window: vec![false; capacity],
            hashes: vec![0; capacity],
            digested: false,
            sketch: Sketch::new(main_cap.max(1)),
            window_cap,
            main_cap,
            seg0_cap: seg0,
            main_hits: 0,
            decay_every: 32 * main_cap,
        }
    }

    /// The sketch's hash of `key` as told.
    #[inline]
    fn hash_of(&self, key: u64) -> u64 {
        match self.digested {
            true => key,
            false => Sketch::hash(key),
        }
    }

    fn move_to_main(&mut self, slot: usize) {
        self.chains.unlink(&mut self.window, slot);
        self.in_window[slot] = false;
        self.main.insert(slot, self.hashes[slot]);
    }
}

impl<L: Link> EvictionPolicy for WTinyLfu<L> {
    fn miss(&mut self, _key: u64) -> bool {
        self.window_cap >= 1 && self.seg0_cap >= 1
    }

    fn insert(&mut self, slot: usize, key: u64) {
        let h = self.hash_of(key);
        self.hashes[slot] = h;
        self.in_window[slot] = true;
        self.chains.push_head(&mut self.window, slot);
        self.sketch.add(h);
    }

    fn hit(&mut self, slot: usize) {
        if self.in_window[slot] {
            self.chains.unlink(&mut self.window, slot);
            self.chains.push_head(&mut self.window, slot);
            return;
        }
        self.main.hit(slot);
        self.sketch.add(self.hashes[slot]);
        self.main_hits += 1;
        if self.main_hits >= self.decay_every {
            self.main_hits = 0;
            self.sketch.halve();
        }
    }

    fn evict(&mut self) -> usize {
        loop {
            let Some(cand) = self.window.tail() else {
                return self.main.evict();
            };
            let h = self.hashes[cand];
            if self.main.len() < self.main_cap {
                self.move_to_main(cand);
                self.sketch.add(h);
                continue;
            }
            let victim = self.main.peek_victim().expect("main is full, so non-empty");
            let evicted = if self.sketch.estimate(h) > self.sketch.estimate(self.hashes[victim]) {
                let v = self.main.evict();
                self.move_to_main(cand);
                v
            } else {
                self.chains.unlink(&mut self.window, cand);
                self.in_window[cand] = false;
                cand
            };
            self.sketch.add(h);
            return evicted;
        }
    }

    fn overflow(&mut self) -> Option<usize> {
        self.main.overflow()
    }

    fn remove(&mut self, slot: usize) {
        if self.in_window[slot] {
            self.chains.unlink(&mut self.window, slot);
            self.in_window[slot] = false;
        } else {
            self.main.remove(slot);
        }
    }

    fn prefetch(&self, key: u64) {
        self.sketch.prefetch(self.hash_of(key));
    }

    fn digested_keys(&mut self) {
        self.digested = true;
    }

    fn meta_bytes(&self) -> usize {
        self.chains.meta_bytes()
            + self.main.meta_bytes()
            + self.in_window.capacity()
            + self.hashes.capacity() * 8
            + self.sketch.counters.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The positions by multiply equal libCacheSim's `(a + i·b) % m`, for
    /// sketches of every size class, the smallest and the largest included.
    #[test]
    fn positions_are_the_remainders_of_division() {
        let mut x = 5u64;
        for m in [
            2u32,
            3,
            7,
            20,
            1000,
            14_379,
            1 << 20,
            10_063_771,
            i32::MAX as u32,
        ] {
            for _ in 0..2000 {
                x = crate::init::mix64(x);
                let (a, b) = ((x >> 32) as u32, x as u32);
                let want: Vec<usize> = (0..HASHES as u32)
                    .map(|i| (a.wrapping_add(i.wrapping_mul(b)) % m) as usize)
                    .collect();
                assert_eq!(
                    positions(x, m, inverse(m)).to_vec(),
                    want,
                    "m {m}, h {x:#x}"
                );
            }
        }
    }
}
