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
    let (mut threshold, s_max) = match sampling {
        Sampling::Rate(r) => (
            ((r.clamp(0.0, 1.0)) * P as f64).round().max(1.0) as u64,
            usize::MAX,
        ),
        Sampling::FixedSize(n) => (P, n.max(1)),
    };
    // Sampled keys: dense slot, last sampled position, hash.
    let mut slot_of: HashMap<u64, u32> = HashMap::new();
    let mut last: Vec<u32> = Vec::new();
    let mut free: Vec<u32> = Vec::new();
    let mut heap: BinaryHeap<(u64, u64)> = BinaryHeap::new(); // (hash, key)
    let mut bit = Fenwick::default();
    let mut reuses: Vec<(f64, f64)> = Vec::new();
    let mut hist = Log2Hist::default();
    let mut cold_w = 0.0f64;
    let mut pos = 0usize;
    let mut sampled = 0u64;
    for key in keys {
        let h = key_hash(key);
        if h >= threshold {
            continue;
        }
        sampled += 1;
        let rate = threshold as f64 / P as f64;
        // Each sampled reference stands for 1/R references at the rate in
        // force (for fixed size, older weights are thereby relatively
        // rescaled by R_new / R_old, as the paper prescribes).
        let w = 1.0 / rate;
        match slot_of.get(&key) {
            Some(&s) => {
                let p = last[s as usize] as usize;
                let d = (bit.prefix(pos) - bit.prefix(p + 1)) as f64 / rate;
                reuses.push((d, w));
                hist.add(d as u64);
                bit.add(p, -1);
                last[s as usize] = pos as u32;
            }
            None => {
                cold_w += w;
                hist.cold += 1;
                let s = free.pop().unwrap_or_else(|| {
                    last.push(0);
                    (last.len() - 1) as u32
                });
                last[s as usize] = pos as u32;
                slot_of.insert(key, s);
                if s_max != usize::MAX {
                    heap.push((h, key));
                    if slot_of.len() > s_max {
                        // Drop the largest-hash key and lower the threshold.
                        let (hmax, kmax) = heap.pop().expect("non-empty");
                        threshold = hmax;
                        let ks = slot_of.remove(&kmax).expect("tracked");
                        bit.add(last[ks as usize] as usize, -1);
                        free.push(ks);
                        if kmax == key {
                            pos += 1;
                            continue;
                        }
                    }
                }
            }
        }
        bit.add(pos, 1);
        pos += 1;
    }
    let rate = threshold as f64 / P as f64;
    let mut total_w = cold_w + reuses.iter().map(|r| r.1).sum::<f64>();
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
        sampled,
        reuse_distance: hist,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_one_is_exact() {
        let mut x = 3u64;
        let seq: Vec<u64> = (0..20_000)
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
