//! Synthetic multi-table workloads: per table rows, dim, pooling factor,
//! Zipf α (0 = uniform) and an optional drift of the hot set.
//!
//! ```
//! use embtier_sim::trace::gen::{GenSpec, GenTable};
//! let spec = GenSpec {
//!     seed: 7,
//!     batches: 10,
//!     batch_size: 32,
//!     tables: vec![GenTable { name: "t".into(), rows: 1000, dim: 16, pooling: 4.0, alpha: 1.05, drift: 0.0 }],
//! };
//! let trace = spec.generate();
//! assert_eq!(trace.accesses.len(), 10 * 32 * 4);
//! assert_eq!(trace, spec.generate()); // deterministic
//! ```

use serde::{Deserialize, Serialize};

use super::{Access, AccessKind, Trace, TraceTable};
use embtier::init::mix64;

/// One generated table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenTable {
    /// Name.
    pub name: String,
    /// Rows.
    pub rows: u64,
    /// Elements per row (f32), for the catalog.
    #[serde(default = "default_dim")]
    pub dim: u32,
    /// Accesses per sample (pooling factor); fractional values are met on
    /// average.
    #[serde(default = "default_pooling")]
    pub pooling: f64,
    /// Zipf exponent; 0 is uniform.
    #[serde(default)]
    pub alpha: f64,
    /// Drift of the hot set: the fraction of the id space it moves per batch.
    #[serde(default)]
    pub drift: f64,
}

fn default_dim() -> u32 {
    64
}
fn default_pooling() -> f64 {
    1.0
}

/// A workload: tables, batches, samples per batch, seed. Reads from TOML:
///
/// ```toml
/// seed = 1
/// batches = 1000
/// batch_size = 512
/// [[tables]]
/// name = "user"
/// rows = 10000000
/// pooling = 1
/// alpha = 1.1
/// [[tables]]
/// name = "pages"
/// rows = 1000000
/// pooling = 20
/// alpha = 0.9
/// drift = 0.0001
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenSpec {
    /// Seed: the same spec and seed give the same trace.
    #[serde(default)]
    pub seed: u64,
    /// Batches to generate.
    pub batches: u64,
    /// Samples per batch.
    pub batch_size: u64,
    /// The tables.
    pub tables: Vec<GenTable>,
}

impl GenSpec {
    /// Check the spec; the message names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        if self.tables.is_empty() {
            return Err("no tables".into());
        }
        if self.batches == 0 || self.batch_size == 0 {
            return Err("batches and batch_size must be positive".into());
        }
        for t in &self.tables {
            let bad = |what: &str| Err(format!("table {:?}: {what}", t.name));
            if t.name.is_empty() || t.name.len() > 255 {
                return bad("name must be 1 to 255 bytes");
            }
            if t.rows == 0 || t.rows > embtier::config::MAX_ROWS {
                return bad("rows must be in 1..=2^62 (the store's limit)");
            }
            if self.tables.iter().filter(|o| o.name == t.name).count() > 1 {
                return bad("two tables have this name");
            }
            if !(t.pooling.is_finite() && t.pooling > 0.0 && t.pooling <= 1e6) {
                return bad("pooling must be in (0, 1e6]");
            }
            if !(t.alpha.is_finite() && (0.0..=10.0).contains(&t.alpha)) {
                return bad("alpha must be in [0, 10]");
            }
            if !(t.drift.is_finite() && (0.0..=1.0).contains(&t.drift)) {
                return bad("drift must be in [0, 1]");
            }
        }
        Ok(())
    }

    /// The catalog.
    pub fn catalog(&self) -> Vec<TraceTable> {
        self.tables
            .iter()
            .map(|t| TraceTable {
                name: t.name.clone(),
                rows: t.rows,
                dim: t.dim,
                row_bytes: t.dim.saturating_mul(4),
            })
            .collect()
    }

    /// Generate batch `b` into `out` (appending).
    pub fn batch_into(&self, b: u64, samplers: &[(Sampler, Scatter)], out: &mut Vec<Access>) {
        for (ti, (t, (z, sc))) in self.tables.iter().zip(samplers).enumerate() {
            let mut rng =
                Xoshiro::new(self.seed ^ mix64(ti as u64 + 1) ^ mix64(b.wrapping_mul(0x9e37_79b9)));
            let whole = t.pooling.floor() as u64;
            let frac = t.pooling - whole as f64;
            let shift = (t.drift * b as f64 * t.rows as f64) as u64 % t.rows;
            for _ in 0..self.batch_size {
                let n = whole + u64::from(frac > 0.0 && rng.f64() < frac);
                for _ in 0..n {
                    let rank = z.sample(&mut rng) - 1; // 0-based
                    out.push(Access {
                        table: ti as u32,
                        row: sc.map((rank + shift) % t.rows),
                        kind: AccessKind::Lookup,
                    });
                }
            }
        }
    }

    /// Samplers and id scatterings for the tables, built once.
    pub fn samplers(&self) -> Vec<(Sampler, Scatter)> {
        self.tables
            .iter()
            .enumerate()
            .map(|(i, t)| {
                (
                    Sampler::new(t.rows, t.alpha),
                    Scatter::new(t.rows, self.seed ^ i as u64),
                )
            })
            .collect()
    }

    /// Accesses a batch holds on average (samples x the tables' pooling).
    pub fn accesses_per_batch(&self) -> f64 {
        self.batch_size as f64 * self.tables.iter().map(|t| t.pooling).sum::<f64>()
    }

    /// Generate the trace straight into a `.etrace` file, batches in
    /// parallel and written in order while the next ones are generated, in
    /// memory bounded by a few groups of batches (not by the trace). The
    /// file is the one [`GenSpec::generate`] + [`Trace::write_etrace`]
    /// write. `progress` is called after each group with the batches
    /// written so far. Returns the accesses, batches and bytes written.
    pub fn write_etrace(
        &self,
        path: &std::path::Path,
        progress: impl FnMut(u64),
    ) -> Result<(u64, u64, u64), super::TraceError> {
        // About 4 M accesses a group, at least two batches per thread.
        let group = ((4e6 / self.accesses_per_batch().max(1.0)) as u64)
            .max(2 * rayon::current_num_threads() as u64);
        self.write_etrace_grouped(path, group, progress)
    }

    /// [`GenSpec::write_etrace`] with `group` batches generated at a time.
    fn write_etrace_grouped(
        &self,
        path: &std::path::Path,
        group: u64,
        mut progress: impl FnMut(u64),
    ) -> Result<(u64, u64, u64), super::TraceError> {
        use rayon::prelude::*;
        use std::io::BufWriter;
        let io = |source| super::TraceError::Io {
            path: path.into(),
            source,
        };
        let samplers = self.samplers();
        let f = std::fs::File::create(path).map_err(io)?;
        let mut w = super::TraceWriter::new(BufWriter::with_capacity(1 << 20, f), self.catalog())
            .map_err(io)?;
        let group = group.max(1);
        let gen_group = |first: u64| -> Vec<Vec<Access>> {
            (first..(first + group).min(self.batches))
                .into_par_iter()
                .map(|b| {
                    let mut v = Vec::new();
                    self.batch_into(b, &samplers, &mut v);
                    v
                })
                .collect()
        };
        let write = |done: Vec<Vec<Access>>, w: &mut super::TraceWriter<_>| {
            let mut n = 0u64;
            for b in done.iter().filter(|b| !b.is_empty()) {
                for a in b {
                    w.access(a.table, a.row, a.kind)?;
                }
                w.end_batch()?;
                n += 1;
            }
            Ok::<u64, std::io::Error>(n)
        };
        let mut batches = 0u64;
        let mut next = gen_group(0);
        let mut first = 0u64;
        while !next.is_empty() {
            first += group;
            // Past the last batch the group is empty, which ends the loop.
            let (wrote, gen) = rayon::join(|| write(next, &mut w), || gen_group(first));
            batches += wrote.map_err(io)?;
            next = gen;
            progress(batches);
        }
        let (_, accesses, bytes) = w.finish().map_err(io)?;
        Ok((accesses, batches, bytes))
    }

    /// Generate the whole trace in memory.
    pub fn generate(&self) -> Trace {
        let samplers = self.samplers();
        let mut t = Trace {
            tables: self.catalog(),
            ..Trace::default()
        };
        for b in 0..self.batches {
            self.batch_into(b, &samplers, &mut t.accesses);
            if t.batch_ends.last().copied().unwrap_or(0) != t.accesses.len() {
                t.batch_ends.push(t.accesses.len());
            }
        }
        t
    }
}

/// A bijection of `0..n`, `rank -> (a * rank + c) mod n` with gcd(a, n) = 1,
/// so that hot ranks land on scattered ids, as in real tables.
pub struct Scatter {
    n: u64,
    a: u64,
    c: u64,
}

impl Scatter {
    /// The bijection for `n` ids under `key`.
    pub fn new(n: u64, key: u64) -> Scatter {
        if n <= 1 {
            return Scatter { n: 1, a: 0, c: 0 };
        }
        let mut a = (mix64(key) | 1) % n;
        while gcd(a, n) != 1 {
            a += 1;
        }
        Scatter {
            n,
            a,
            c: mix64(key ^ 0x51) % n,
        }
    }

    /// The id of `rank`.
    #[inline]
    pub fn map(&self, rank: u64) -> u64 {
        if self.n <= u32::MAX as u64 {
            // a, rank, c < n < 2^32: a * rank + c < 2^64, no 128-bit division.
            return (self.a * rank + self.c) % self.n;
        }
        ((self.a as u128 * rank as u128 + self.c as u128) % self.n as u128) as u64
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// xoshiro256++ (Blackman and Vigna), seeded through SplitMix64.
pub struct Xoshiro([u64; 4]);

impl Xoshiro {
    /// Seeded generator.
    pub fn new(seed: u64) -> Xoshiro {
        let mut s = seed;
        let mut next = || {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix64(s)
        };
        Xoshiro([next(), next(), next(), next()])
    }
    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let r = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        r
    }
    /// Uniform in [0, 1).
    #[inline]
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Zipf(α) over ranks `1..=n` by rejection-inversion (Hörmann and Derflinger,
/// 1996), or uniform when α = 0. Exact for any α ≥ 0, O(1) expected time.
pub struct Sampler {
    n: u64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    sv: f64,
}

impl Sampler {
    /// A sampler over `1..=n`.
    pub fn new(n: u64, alpha: f64) -> Sampler {
        let mut z = Sampler {
            n,
            s: alpha,
            h_x1: 0.0,
            h_n: 0.0,
            sv: 0.0,
        };
        if alpha > 0.0 {
            z.h_x1 = z.h_int(1.5) - 1.0;
            z.h_n = z.h_int(n as f64 + 0.5);
            z.sv = 2.0 - z.h_int_inv(z.h_int(2.5) - z.h(2.0));
        }
        z
    }

    #[inline]
    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    #[inline]
    fn h_int(&self, x: f64) -> f64 {
        let lx = x.ln();
        helper2((1.0 - self.s) * lx) * lx
    }

    #[inline]
    fn h_int_inv(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }

    /// A rank in `1..=n`.
    #[inline]
    pub fn sample(&self, rng: &mut Xoshiro) -> u64 {
        if self.s == 0.0 {
            return 1 + ((rng.next_u64() as u128 * self.n as u128) >> 64) as u64;
        }
        loop {
            let u = self.h_n + rng.f64() * (self.h_x1 - self.h_n);
            let x = self.h_int_inv(u);
            let k = ((x + 0.5) as u64).clamp(1, self.n);
            let kf = k as f64;
            if kf - x <= self.sv || u >= self.h_int(kf + 0.5) - self.h(kf) {
                return k;
            }
        }
    }
}

#[inline]
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

#[inline]
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streamed, parallel writer writes the bytes of the in-memory
    /// trace, over groups of batches (many batches, uneven pooling,
    /// drift, tables past 2^32 rows on the 128-bit scatter path).
    #[test]
    fn streamed_file_is_the_in_memory_trace() {
        let t = |name: &str, rows: u64, pooling: f64, alpha: f64, drift: f64| GenTable {
            name: name.into(),
            rows,
            dim: 8,
            pooling,
            alpha,
            drift,
        };
        let spec = GenSpec {
            seed: 11,
            batches: 37,
            batch_size: 300,
            tables: vec![
                t("a", 1000, 2.5, 1.1, 0.0),
                t("b", 7, 0.3, 0.0, 0.01),
                t("c", 10_000_000_000, 1.0, 0.9, 0.001),
            ],
        };
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let whole = spec.generate();
        let bytes = whole.write_etrace(&a).unwrap();
        let mut seen = Vec::new();
        let got = spec.write_etrace_grouped(&b, 4, |n| seen.push(n)).unwrap();
        assert_eq!(
            got,
            (
                whole.accesses.len() as u64,
                whole.batch_ends.len() as u64,
                bytes
            )
        );
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert!(seen.len() > 1, "one group only: {seen:?}");
        assert_eq!(seen.last(), Some(&(whole.batch_ends.len() as u64)));
        assert!(seen.windows(2).all(|w| w[0] < w[1]));
        // The public entry (one group here) writes the same file.
        assert_eq!(spec.write_etrace(&b, |_| ()).unwrap(), got);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    }

    /// Sampled frequencies match the Zipf pmf.
    #[test]
    fn zipf_frequencies_match_the_pmf() {
        for alpha in [0.0, 0.5, 1.0, 1.05, 2.0] {
            let n = 50u64;
            let z = Sampler::new(n, alpha);
            let mut rng = Xoshiro::new(3);
            let draws = 400_000;
            let mut counts = vec![0u64; n as usize + 1];
            for _ in 0..draws {
                counts[z.sample(&mut rng) as usize] += 1;
            }
            let norm: f64 = (1..=n).map(|k| (k as f64).powf(-alpha)).sum();
            for k in [1u64, 2, 5, 20, 50] {
                let p = (k as f64).powf(-alpha) / norm;
                let got = counts[k as usize] as f64 / draws as f64;
                let sd = (p * (1.0 - p) / draws as f64).sqrt();
                assert!(
                    (got - p).abs() < 5.0 * sd + 1e-4,
                    "alpha {alpha} rank {k}: {got} vs {p}"
                );
            }
        }
    }

    #[test]
    fn scatter_is_a_bijection() {
        for n in [1u64, 2, 10, 97, 1000, 1024] {
            let mut seen = vec![false; n as usize];
            let sc = Scatter::new(n, 42);
            for r in 0..n {
                let v = sc.map(r) as usize;
                assert!(!seen[v]);
                seen[v] = true;
            }
        }
    }

    #[test]
    fn pooling_and_drift() {
        let spec = GenSpec {
            seed: 1,
            batches: 200,
            batch_size: 100,
            tables: vec![GenTable {
                name: "a".into(),
                rows: 10_000,
                dim: 8,
                pooling: 2.5,
                alpha: 1.2,
                drift: 0.01,
            }],
        };
        spec.validate().unwrap();
        let t = spec.generate();
        let per_sample = t.accesses.len() as f64 / 20_000.0;
        assert!((per_sample - 2.5).abs() < 0.05, "{per_sample}");
        // With drift, the hottest row of the first batch is not the hottest of the last.
        let hottest = |b: &[Access]| {
            let mut m = std::collections::HashMap::new();
            for a in b {
                *m.entry(a.row).or_insert(0) += 1;
            }
            m.into_iter().max_by_key(|e| e.1).unwrap().0
        };
        let batches: Vec<&[Access]> = t.batches().collect();
        assert_ne!(hottest(batches[0]), hottest(batches[199]));
        let mut bad = spec.clone();
        bad.tables[0].alpha = -1.0;
        assert!(bad.validate().unwrap_err().contains("alpha"));
    }
}
