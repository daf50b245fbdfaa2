//! Reader of Meta's dlrm_datasets `locality_stats.txt`: per batch file, the
//! index count, unique rows, and the access-count histograms by rows and by
//! accesses in the bins of [`super::COUNT_BIN_EDGES`]; and [`DlrmGen`], a
//! generator of ids whose histogram matches them.

use std::path::Path;

use super::{count_bin, COUNT_BIN_EDGES};
use crate::trace::gen::{Scatter, Xoshiro};

/// One batch file's statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct DlrmStats {
    /// The batch file's name.
    pub file: String,
    /// Average number of indices (accesses).
    pub indices: f64,
    /// Average number of unique rows.
    pub unique: f64,
    /// Fraction of rows per count bin (17 bins).
    pub by_rows: Vec<f64>,
    /// Fraction of accesses per count bin (17 bins).
    pub by_accesses: Vec<f64>,
}

/// Parse a `locality_stats.txt`. Errors name the line.
pub fn parse(text: &str) -> Result<Vec<DlrmStats>, String> {
    let mut out: Vec<DlrmStats> = Vec::new();
    let mut target: Option<bool> = None; // Some(true): by rows, Some(false): by accesses
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        let bad = |what: &str| format!("line {}: {what}: {l:?}", i + 1);
        if l.ends_with(".pt") {
            out.push(DlrmStats {
                file: l.to_string(),
                indices: 0.0,
                unique: 0.0,
                by_rows: Vec::new(),
                by_accesses: Vec::new(),
            });
            target = None;
            continue;
        }
        let Some(cur) = out.last_mut() else { continue };
        if let Some(v) = l.strip_prefix("Avg # of indices:") {
            cur.indices = v.trim().parse().map_err(|_| bad("bad number"))?;
        } else if let Some(v) = l.strip_prefix("Avg # of unique cols:") {
            cur.unique = v.trim().parse().map_err(|_| bad("bad number"))?;
        } else if l.starts_with("Histogram of col sizes") {
            target = Some(true);
        } else if l.starts_with("Ratio of index distribution") {
            target = Some(false);
        } else if l.starts_with('(') {
            let v: f64 = l
                .rsplit(':')
                .next()
                .and_then(|x| x.trim().parse().ok())
                .ok_or_else(|| bad("bad bin"))?;
            match target {
                Some(true) => cur.by_rows.push(v),
                Some(false) => cur.by_accesses.push(v),
                None => return Err(bad("bin outside a histogram")),
            }
        }
    }
    for s in &out {
        if s.by_rows.len() != 17 || s.by_accesses.len() != 17 {
            return Err(format!(
                "{}: expected 17 bins by rows and by accesses",
                s.file
            ));
        }
    }
    if out.is_empty() {
        return Err("no batch files found".into());
    }
    Ok(out)
}

/// Parse the file at `path`.
pub fn read(path: &Path) -> Result<Vec<DlrmStats>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The mean histograms over all batch files: (by rows, by accesses).
pub fn mean(stats: &[DlrmStats]) -> (Vec<f64>, Vec<f64>) {
    let n = stats.len().max(1) as f64;
    let mut r = vec![0.0; 17];
    let mut a = vec![0.0; 17];
    for s in stats {
        for k in 0..17 {
            r[k] += s.by_rows[k] / n;
            a[k] += s.by_accesses[k] / n;
        }
    }
    (r, a)
}

/// The row-fraction histogram of `locality_stats.txt` (17 bins), averaged
/// over its batch files. `None` when the file is absent.
pub fn dlrm_target(path: &std::path::Path) -> Result<Option<Vec<f64>>, String> {
    if !path.exists() {
        return Ok(None);
    }
    let stats = read(path)?;
    let (rows, _) = mean(&stats);
    Ok(Some(rows))
}

/// The first batch file's histogram of `dlrm-2021-locality_stats.txt`
/// (fbgemm_t856_bs65536, three decimals), for machines without the traces.
pub const DLRM_FALLBACK: [f64; 17] = [
    0.473, 0.152, 0.139, 0.112, 0.072, 0.032, 0.011, 0.005, 0.002, 0.001, 0.0, 0.0, 0.0, 0.0, 0.0,
    0.0, 0.0,
];

/// A generator whose per-window access-count histogram matches a target.
///
/// Every window of `window` batches draws its multiset of accesses exactly:
/// `unique` rows, each given a count drawn from the target's bins (uniform
/// within a bin), then shuffled. Rows with counts above one come from a
/// stable hot set (the same ranks every window, scattered over the table),
/// so the reuse across windows that a cache feeds on is there; rows seen
/// once are drawn uniformly from the table, as one-off ids are in real
/// traces.
pub struct DlrmGen {
    rows: u64,
    per_batch: usize,
    window: usize,
    target: Vec<f64>,
    rng: Xoshiro,
    scatter: Scatter,
    pending: Vec<u64>,
    pos: usize,
}

impl DlrmGen {
    /// `per_batch` ids a batch from a table of `rows`, windows of `window`
    /// batches.
    pub fn new(rows: u64, per_batch: usize, window: usize, target: &[f64], seed: u64) -> DlrmGen {
        let sum: f64 = target.iter().sum();
        DlrmGen {
            rows,
            per_batch,
            window,
            target: target
                .iter()
                .map(|p| p / sum.max(f64::MIN_POSITIVE))
                .collect(),
            rng: Xoshiro::new(seed),
            scatter: Scatter::new(rows, seed ^ 0xd1),
            pending: Vec::new(),
            pos: 0,
        }
    }

    fn bin_of(&mut self) -> usize {
        let u = self.rng.f64();
        let mut acc = 0.0;
        for (b, p) in self.target.iter().enumerate() {
            acc += p;
            if u < acc {
                return b;
            }
        }
        0
    }

    fn count_in(&mut self, bin: usize) -> u64 {
        let lo = if bin == 0 {
            0
        } else {
            COUNT_BIN_EDGES[bin - 1]
        };
        let hi = if bin < COUNT_BIN_EDGES.len() {
            COUNT_BIN_EDGES[bin]
        } else {
            2 * COUNT_BIN_EDGES[COUNT_BIN_EDGES.len() - 1]
        };
        lo + 1 + self.rng.next_u64() % (hi - lo)
    }

    fn refill(&mut self) {
        let want = self.per_batch * self.window;
        let mut counts: Vec<u64> = Vec::new();
        let mut total = 0u64;
        while (total as usize) < want {
            let b = self.bin_of();
            let c = self.count_in(b).min((want - total as usize) as u64);
            counts.push(c);
            total += c;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let hot = counts.iter().filter(|&&c| c > 1).count() as u64;
        let mut out = Vec::with_capacity(want);
        for (rank, &c) in counts.iter().enumerate() {
            let row = if c > 1 || hot >= self.rows {
                self.scatter.map(rank as u64 % self.rows)
            } else {
                // A one-off id: anywhere outside the hot ranks.
                let span = self.rows - hot;
                self.scatter.map(hot + self.rng.next_u64() % span)
            };
            out.extend(std::iter::repeat_n(row, c as usize));
        }
        // Fisher–Yates.
        for i in (1..out.len()).rev() {
            let j = (self.rng.next_u64() % (i as u64 + 1)) as usize;
            out.swap(i, j);
        }
        self.pending = out;
        self.pos = 0;
    }

    /// Append the next batch's ids.
    pub fn next_into(&mut self, out: &mut Vec<u64>) {
        for _ in 0..self.per_batch {
            if self.pos == self.pending.len() {
                self.refill();
            }
            out.push(self.pending[self.pos]);
            self.pos += 1;
        }
    }

    /// The ids of one window.
    pub fn window_ids(&mut self) -> Vec<u64> {
        let mut v = Vec::new();
        for _ in 0..self.window {
            self.next_into(&mut v);
        }
        v
    }
}

/// Row-fraction histogram of a multiset of ids (17 bins).
pub fn histogram(ids: &[u64]) -> Vec<f64> {
    let mut counts = std::collections::HashMap::<u64, u64>::new();
    for &i in ids {
        *counts.entry(i).or_default() += 1;
    }
    let mut h = vec![0.0; 17];
    for &c in counts.values() {
        h[count_bin(c)] += 1.0;
    }
    let n = counts.len().max(1) as f64;
    h.iter_mut().for_each(|x| *x /= n);
    h
}

/// Largest absolute difference per bin, in fraction points.
pub fn max_bin_error(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dlrm_generator_matches_target_histogram() {
        let mut g = DlrmGen::new(5_000_000, 1024, 64, &DLRM_FALLBACK, 3);
        for _ in 0..3 {
            let h = histogram(&g.window_ids());
            let err = max_bin_error(&h, &DLRM_FALLBACK);
            assert!(err < 0.02, "{h:?} vs {DLRM_FALLBACK:?}: {err}");
        }
    }

    #[test]
    fn dlrm_generator_reuses_hot_rows_across_windows() {
        let mut g = DlrmGen::new(5_000_000, 1024, 16, &DLRM_FALLBACK, 4);
        let a: std::collections::HashSet<u64> = g.window_ids().into_iter().collect();
        let b: Vec<u64> = g.window_ids();
        let reused = b.iter().filter(|i| a.contains(i)).count() as f64 / b.len() as f64;
        assert!(reused > 0.5, "{reused}");
    }

    #[test]
    fn parses_the_shared_files() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/traces/dlrm-2021-locality_stats.txt");
        if !p.exists() {
            eprintln!("SKIP: {} is absent", p.display());
            return;
        }
        let s = read(&p).unwrap();
        assert_eq!(s.len(), 17);
        assert_eq!(s[0].file, "fbgemm_t856_bs65536.pt");
        assert_eq!((s[0].by_rows[0], s[0].by_accesses[0]), (0.473, 0.069));
        assert_eq!(s[0].indices, 887017990.0);
        let (r, a) = mean(&s);
        assert!(
            (r.iter().sum::<f64>() - 1.0).abs() < 0.02
                && (a.iter().sum::<f64>() - 1.0).abs() < 0.02
        );
        assert!(parse("x.pt\n(0, 1]: 0.5\n").is_err());
    }
}
