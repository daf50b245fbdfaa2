//! SHARDS spatial sampling (Waldspurger, Park, Garthwaite, Ahmad; FAST '15):
//! approximate LRU miss-ratio curves from a hash-sampled subset of the keys.
//!
//! A key is sampled iff `hash(key) mod P < T`, so every access of a sampled
//! key is kept and the sampled subsequence has exact stack distances among
//! sampled keys; a distance `d` among them estimates `d / R` overall, with
//! `R = T / P`.
//! - **Fixed rate**: `T` fixed. The SHARDS_adj correction adds the difference
//!   between the expected (`N·R`) and actual sampled reference counts to the
//!   smallest distance bucket.
//! - **Fixed size**: at most `s_max` sampled keys are tracked; when a new key
//!   would exceed it, the key with the largest hash is dropped and `T`
//!   lowered to that hash. Each sampled reference weighs `1/R` at the rate
//!   then in force, which rescales earlier weights by `R_new / R_old`
//!   relative to later ones, as the paper prescribes, without a rewrite.
//!
//! Both modes apply the SHARDS_adj correction: the difference between the
//! trace's reference count and the total weight goes to distance 0.

use std::collections::{BinaryHeap, HashMap};

use super::{Log2Hist, MrcPoint};
use embtier::init::mix64;

const P: u64 = 1 << 24;

/// How to sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// A fixed rate in (0, 1].
    Rate(f64),
    /// At most this many sampled keys, starting at rate 1 (lowered as needed).
    FixedSize(usize),
}

/// The outcome of a sampled pass.
#[derive(Debug, Clone, Default)]
pub struct Sampled {
    /// (estimated distance, weight) of every sampled reuse, sorted by distance.
    reuses: Vec<(f64, f64)>,
    /// Total weight (reuses + first accesses + adjustment).
    total: f64,
    /// The final sampling rate.
    pub rate: f64,
    /// Sampled references.
    pub sampled: u64,
    /// Estimated stack distances, log2-binned (estimated counts).
    pub reuse_distance: Log2Hist,
}

impl Sampled {
    /// Miss ratio of an LRU cache of each size.
    pub fn mrc(&self, sizes: &[u64]) -> Vec<MrcPoint> {
        let mut prefix = Vec::with_capacity(self.reuses.len() + 1);
        prefix.push(0.0f64);
        for (_, w) in &self.reuses {
            prefix.push(prefix.last().expect("non-empty") + w);
        }
        sizes
            .iter()
            .map(|&c| {
                // Reuses with estimated distance < c hit.
                let k = self.reuses.partition_point(|(d, _)| *d < c as f64);
                let hits = prefix[k];
                MrcPoint {
                    cache_rows: c,
                    cache_bytes: None,
                    miss_ratio: if self.total > 0.0 {
                        (1.0 - hits / self.total).clamp(0.0, 1.0)
                    } else {
                        0.0
                    },
                }
            })
            .collect()
    }
}

/// The sampling hash of `key`, in `0..P`: a key is sampled at threshold
/// `T` iff its hash is below `T`.
fn key_hash(key: u64) -> u64 {
    mix64(key ^ 0x2545_f491_4f6c_dd1d) % P
}

/// The rate [`spatial_sample`] samples at when asked for `rate`: its hash
/// threshold over the hash's modulus (2^24).
pub fn exact_rate(rate: f64) -> f64 {
    (rate.clamp(0.0, 1.0) * P as f64).round() / P as f64
}

/// The accesses of `keys` whose key SHARDS samples at `rate` (every access
/// of a sampled key, in order): the input of a miniature simulation
/// (Waldspurger et al., ATC '17), a cache of `size x rate` over them
/// estimating a cache of `size` over all.
pub fn spatial_sample(keys: &[u64], rate: f64) -> Vec<u64> {
    let t = (rate.clamp(0.0, 1.0) * P as f64).round() as u64;
    keys.iter().copied().filter(|&k| key_hash(k) < t).collect()
}

/// A growable Fenwick tree over 0/1 point values.
#[derive(Default)]
struct Fenwick {
    tree: Vec<i32>,
    vals: Vec<i8>,
}

impl Fenwick {
    fn add(&mut self, i: usize, v: i32) {
        if i >= self.vals.len() {
            // Double, and rebuild the tree in O(n) from the point values.
            let n = ((i + 1) * 2).max(1024);
            self.vals.resize(n, 0);
            self.tree = vec![0; n + 1];
            for (j, &x) in self.vals.iter().enumerate() {
                self.tree[j + 1] += x as i32;
                let parent = (j + 1) + ((j + 1) & (j + 1).wrapping_neg());
                if parent <= n {
                    let t = self.tree[j + 1];
                    self.tree[parent] += t;
                }
            }
        }
        self.vals[i] += v as i8;
        let mut k = i + 1;
        while k < self.tree.len() {
            self.tree[k] += v;
            k += k & k.wrapping_neg();
        }
    }

    /// Sum of positions `0..i`.
    fn prefix(&self, i: usize) -> i64 {
        let mut i = i.min(self.vals.len());
        let mut s = 0i64;
        while i > 0 {
            s += self.tree[i] as i64;
            i &= i - 1;
        }
        s
    }
}

/// Run SHARDS over a key sequence of `total` references.
pub fn shards(keys: impl Iterator<Item = u64>, total: u64, sampling: Sampling) -> Sampled {
    let mut s = Shards::new(sampling);
    for key in keys {
        s.access_hashed(key, key_hash(key));
    }
    s.finish(total)
}

/// SHARDS, one reference at a time: memory grows with the sampled keys
/// (about `rate x` the distinct keys, or `s_max`), not with the trace.
#[derive(Default)]
pub struct Shards {
    threshold: u64,
    s_max: usize,
    /// Sampled keys: dense slot.
    slot_of: HashMap<u64, u32, crate::FastHash>,
    /// Last sampled position of each slot.
    last: Vec<u32>,
    free: Vec<u32>,
    /// (hash, key) of the tracked keys, for fixed size.
    heap: BinaryHeap<(u64, u64)>,
    bit: Fenwick,
    /// Positions at which the Fenwick tree is compacted next.
    compact_at: usize,
    /// Fixed rate: weight by sampled distance (bounded by the sampled keys).
    by_distance: Vec<f64>,
    /// Fixed size: (estimated distance, weight) of every sampled reuse.
    reuses: Vec<(f64, f64)>,
    hist: Log2Hist,
    cold_w: f64,
    pos: usize,
    sampled: u64,
}

impl Shards {
    /// An empty pass.
    pub fn new(sampling: Sampling) -> Shards {
        let (threshold, s_max) = match sampling {
            Sampling::Rate(r) => (
                ((r.clamp(0.0, 1.0)) * P as f64).round().max(1.0) as u64,
                usize::MAX,
            ),
            Sampling::FixedSize(n) => (P, n.max(1)),
        };
        Shards {
            threshold,
            s_max,
            compact_at: 1 << 16,
            ..Shards::default()
        }
    }

    /// The sampling hash of `key` (compare with [`Shards::threshold`]).
    #[inline]
    pub fn hash(key: u64) -> u64 {
        key_hash(key)
    }

    /// Keys whose hash is below this are sampled (it only falls).
    #[inline]
    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// The sampling rate in force.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / P as f64
    }

    /// One reference to `key`, whose [`Shards::hash`] is `h`.
    #[inline]
    pub fn access_hashed(&mut self, key: u64, h: u64) {
        if h >= self.threshold {
            return;
        }
        self.sampled += 1;
        // Each sampled reference stands for 1/R references at the rate in
        // force (for fixed size, older weights are thereby relatively
        // rescaled by R_new / R_old, as the paper prescribes).
        let rate = self.rate();
        let w = 1.0 / rate;
        if self.pos >= self.compact_at {
            self.compact();
        }
        let pos = self.pos;
        match self.slot_of.get(&key) {
            Some(&s) => {
                let p = self.last[s as usize] as usize;
                // Every tracked key has its one marker before `pos`: the
                // markers after `p` are the tracked keys minus those up to `p`.
                let ds = (self.slot_of.len() as i64 - self.bit.prefix(p + 1)) as u64;
                let d = ds as f64 / rate;
                if self.s_max == usize::MAX {
                    if ds as usize >= self.by_distance.len() {
                        self.by_distance.resize(ds as usize + 1, 0.0);
                    }
                    self.by_distance[ds as usize] += w;
                } else {
                    self.reuses.push((d, w));
                }
                self.hist.add(d as u64);
                self.bit.add(p, -1);
                self.last[s as usize] = pos as u32;
            }
            None => {
                self.cold_w += w;
                self.hist.cold += 1;
                let s = self.free.pop().unwrap_or_else(|| {
                    self.last.push(0);
                    (self.last.len() - 1) as u32
                });
                self.last[s as usize] = pos as u32;
                self.slot_of.insert(key, s);
                if self.s_max != usize::MAX {
                    self.heap.push((h, key));
                    if self.slot_of.len() > self.s_max {
                        // Drop the largest-hash key and lower the threshold.
                        let (hmax, kmax) = self.heap.pop().expect("non-empty");
                        self.threshold = hmax;
                        let ks = self.slot_of.remove(&kmax).expect("tracked");
                        self.bit.add(self.last[ks as usize] as usize, -1);
                        self.free.push(ks);
                        if kmax == key {
                            self.pos += 1;
                            return;
                        }
                    }
                }
            }
        }
        self.bit.add(pos, 1);
        self.pos += 1;
    }

    /// Renumber the tracked keys' last positions `0..live` in order, so
    /// that the Fenwick tree holds about twice the tracked keys, not every
    /// sampled reference.
    fn compact(&mut self) {
        let mut live: Vec<(u32, u32)> = self
            .slot_of
            .values()
            .map(|&s| (self.last[s as usize], s))
            .collect();
        live.sort_unstable();
        let mut bit = Fenwick::default();
        for (i, &(_, s)) in live.iter().enumerate() {
            self.last[s as usize] = i as u32;
            bit.add(i, 1);
        }
        self.bit = bit;
        self.pos = live.len();
        self.compact_at = (2 * live.len()).max(1 << 16);
    }

    /// The estimate for a trace of `total` references.
    pub fn finish(self, total: u64) -> Sampled {
        let rate = self.rate();
        let mut reuses = self.reuses;
        reuses.extend(
            self.by_distance
                .iter()
                .enumerate()
                .filter(|(_, &w)| w > 0.0)
                .map(|(d, &w)| (d as f64 / rate, w)),
        );
        let mut total_w = self.cold_w + reuses.iter().map(|r| r.1).sum::<f64>();
        // SHARDS_adj: the references the sample stands for fall short of (or
        // exceed) the trace's; the difference goes to the smallest distance.
        let adj = total as f64 - total_w;
        if adj != 0.0 {
            reuses.push((0.0, adj));
            total_w += adj;
        }
        reuses.sort_by(|a, b| a.0.total_cmp(&b.0));
        Sampled {
            reuses,
            total: total_w,
            rate,
            sampled: self.sampled,
            reuse_distance: self.hist,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_one_is_exact() {
        let mut x = 3u64;
        let seq: Vec<u64> = (0..200_000) // past the first compaction
            .map(|_| {
                x = mix64(x);
                (x % 1000) * (x % 7)
            })
            .collect();
        let dense: Vec<u32> = {
            let mut m = HashMap::new();
            seq.iter()
                .map(|k| {
                    let n = m.len() as u32;
                    *m.entry(*k).or_insert(n)
                })
                .collect()
        };
        let n = dense.iter().max().unwrap() + 1;
        let (d, _, _) = super::super::stack_distances(&dense, n as usize);
        let sizes: Vec<u64> = (1..=n as u64).step_by(7).collect();
        let exact = super::super::mrc_from_distances(&d, seq.len() as u64, &sizes);
        let s = shards(seq.iter().copied(), seq.len() as u64, Sampling::Rate(1.0));
        for (a, b) in exact.iter().zip(s.mrc(&sizes)) {
            assert!((a.miss_ratio - b.miss_ratio).abs() < 1e-9);
        }
        let f = shards(
            seq.iter().copied(),
            seq.len() as u64,
            Sampling::FixedSize(1 << 20),
        );
        for (a, b) in exact.iter().zip(f.mrc(&sizes)) {
            assert!((a.miss_ratio - b.miss_ratio).abs() < 1e-9);
        }
    }
}
