//! The dataset every engine holds and the four workloads that read it.
//!
//! The dataset is `tables` tables whose sizes halve from one to the next
//! (8:4:2:1 for four), `rows` in all, `dim` f32 each. Row `r` of table `t`
//! holds [`value`]`(t, r, j)`, so any engine's answer can be checked.
//!
//! W1–W3 draw global ids over the concatenated id space; a Zipf rank is
//! scattered over it, so hot rows are not neighbours (neighbours would hand
//! the block-packing engines a locality the real traces do not have). W4
//! gives each table its share of the batch and draws it from [`DlrmGen`].

use std::ops::Range;

use embtier::init::mix64;
pub use embtier_sim::locality::dlrm::{
    dlrm_target, histogram, max_bin_error, DlrmGen, DLRM_FALLBACK,
};
use embtier_sim::trace::gen::{Sampler, Scatter, Xoshiro};

/// The shape of the dataset.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Dataset {
    /// Rows per table.
    pub rows: Vec<u64>,
    /// f32 elements per row.
    pub dim: u32,
}

impl Dataset {
    /// `total` rows over `tables` tables, halving in size.
    pub fn new(total: u64, tables: usize, dim: u32) -> Dataset {
        let weights: Vec<u64> = (0..tables).map(|i| 1u64 << (tables - 1 - i)).collect();
        let sum: u64 = weights.iter().sum();
        let mut rows: Vec<u64> = weights.iter().map(|w| (total * w / sum).max(1)).collect();
        let given: u64 = rows.iter().sum();
        rows[0] += total.saturating_sub(given);
        Dataset { rows, dim }
    }

    /// Rows in all.
    pub fn total_rows(&self) -> u64 {
        self.rows.iter().sum()
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> u64 {
        self.dim as u64 * 4
    }

    /// First global id of each table.
    pub fn offsets(&self) -> Vec<u64> {
        self.rows
            .iter()
            .scan(0, |base, &n| {
                let at = *base;
                *base += n;
                Some(at)
            })
            .collect()
    }

    /// Table and row of a global id.
    pub fn split(&self, mut g: u64) -> (u32, u64) {
        for (t, &n) in self.rows.iter().enumerate() {
            if g < n {
                return (t as u32, g);
            }
            g -= n;
        }
        unreachable!("global id past the dataset")
    }

    /// Table name as the stores know it.
    pub fn table_name(t: u32) -> String {
        format!("t{t}")
    }
}

/// Element `j` of row `r` of table `t`: distinct per row, exact in f32.
pub fn value(t: u32, r: u64, j: u32) -> f32 {
    let h = mix64(((t as u64) << 48) ^ r);
    ((h >> 40) as u32 + j) as f32 / (1u32 << 24) as f32
}

/// Fill `out` with row `r` of table `t`.
pub fn fill_row(t: u32, r: u64, out: &mut [f32]) {
    for (j, v) in out.iter_mut().enumerate() {
        *v = value(t, r, j as u32);
    }
}

/// One batch: the ids of each table, in draw order.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// `(table, ids)`, tables in increasing order, none empty.
    pub parts: Vec<(u32, Vec<u64>)>,
}

impl Batch {
    /// Ids in all.
    pub fn len(&self) -> usize {
        self.parts.iter().map(|(_, v)| v.len()).sum()
    }

    /// Distinct `(table, row)`s.
    pub fn unique_rows(&self) -> usize {
        self.parts
            .iter()
            .map(|(_, ids)| {
                let mut v = ids.clone();
                v.sort_unstable();
                v.dedup();
                v.len()
            })
            .sum()
    }

    /// `(table, row)` of every id, in batch order.
    pub fn ids(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.parts
            .iter()
            .flat_map(|(t, ids)| ids.iter().map(move |&r| (*t, r)))
    }

    /// Each part, with the range of its values in a `len() * dim` buffer.
    pub fn spans(&self, dim: usize) -> impl Iterator<Item = (u32, &[u64], Range<usize>)> + '_ {
        self.parts.iter().scan(0, move |k, (t, ids)| {
            let at = *k;
            *k += ids.len() * dim;
            Some((*t, ids.as_slice(), at..*k))
        })
    }
}

/// Which workload.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum Workload {
    /// W1: uniform lookups (miss-bound).
    #[value(alias = "uniform")]
    W1,
    /// W2: Zipf(1.05) lookups.
    #[value(alias = "zipf")]
    W2,
    /// W3: Zipf(1.05) lookup, then an SGD update of every row looked up.
    #[value(alias = "train")]
    W3,
    /// W4: multi-table, access-count histogram of dlrm_datasets.
    #[value(alias = "dlrm")]
    W4,
    /// W5: W3's loop sustained (ten minutes or more from the open), with a
    /// checkpoint every minute; then restarts of the store it leaves.
    #[value(alias = "sustained")]
    W5,
}

impl Workload {
    /// Short description for the report.
    pub fn describe(self) -> &'static str {
        match self {
            Workload::W1 => "uniform lookups",
            Workload::W2 => "Zipf(1.05) lookups",
            Workload::W3 => "Zipf(1.05) lookup + apply_sgd",
            Workload::W4 => "dlrm_datasets histogram, multi-table",
            Workload::W5 => "sustained training: W3 with a checkpoint every minute",
        }
    }

    /// Whether the workload writes.
    pub fn updates(self) -> bool {
        matches!(self, Workload::W3 | Workload::W5)
    }
}

/// Draws batches of a workload; deterministic per seed.
pub struct Generator {
    ds: Dataset,
    kind: Workload,
    batch: usize,
    rng: Xoshiro,
    zipf: Sampler,
    scatter: Scatter,
    dlrm: Vec<DlrmGen>,
}

/// Seed of the Zipf workloads' rank-to-row scatter (see [`Generator::new`]).
const SCATTER_SEED: u64 = 0xb0a7 ^ 0x5eed;

impl Generator {
    /// A generator of `kind` over `ds`, `batch` ids a batch.
    pub fn new(ds: &Dataset, kind: Workload, batch: usize, seed: u64, target: &[f64]) -> Generator {
        let n = ds.total_rows();
        // W4: each table's share of the batch falls with its index, as a
        // model's big sparse features are looked up more than its small ones.
        let shares = shares(ds.rows.len(), batch);
        let dlrm = if kind == Workload::W4 {
            ds.rows
                .iter()
                .zip(&shares)
                .enumerate()
                .map(|(t, (&rows, &share))| {
                    DlrmGen::new(rows, share, 64, target, seed ^ mix64(t as u64 + 1))
                })
                .collect()
        } else {
            Vec::new()
        };
        Generator {
            ds: ds.clone(),
            kind,
            batch,
            rng: Xoshiro::new(seed),
            zipf: Sampler::new(n, 1.05),
            // The dataset's popularity, not the run's: W2, W3 and W5 rank
            // the same rows hot, as a model's features keep their
            // popularity across a restart (a restart's W2 after W5 then
            // finds the hot set training left; with a scatter per
            // workload it found none, in every engine).
            scatter: Scatter::new(n, SCATTER_SEED),
            dlrm,
        }
    }

    /// The next batch.
    pub fn next_batch(&mut self) -> Batch {
        let mut per: Vec<Vec<u64>> = vec![Vec::new(); self.ds.rows.len()];
        match self.kind {
            Workload::W1 => {
                let n = self.ds.total_rows();
                for _ in 0..self.batch {
                    let (t, r) = self.ds.split(self.rng.next_u64() % n);
                    per[t as usize].push(r);
                }
            }
            Workload::W2 | Workload::W3 | Workload::W5 => {
                for _ in 0..self.batch {
                    let rank = self.zipf.sample(&mut self.rng) - 1;
                    let (t, r) = self.ds.split(self.scatter.map(rank));
                    per[t as usize].push(r);
                }
            }
            Workload::W4 => {
                for (t, g) in self.dlrm.iter_mut().enumerate() {
                    g.next_into(&mut per[t]);
                }
            }
        }
        Batch {
            parts: per
                .into_iter()
                .enumerate()
                .filter(|(_, v)| !v.is_empty())
                .map(|(t, v)| (t as u32, v))
                .collect(),
        }
    }
}

/// Table `t`'s ids per batch in W4: proportional to `tables - t`.
pub fn shares(tables: usize, batch: usize) -> Vec<usize> {
    let w: Vec<usize> = (0..tables).map(|t| tables - t).collect();
    let sum: usize = w.iter().sum();
    let mut s: Vec<usize> = w.iter().map(|x| batch * x / sum).collect();
    let given: usize = s.iter().sum();
    s[0] += batch - given;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_split_covers_every_id() {
        let ds = Dataset::new(1000, 4, 8);
        assert_eq!(ds.total_rows(), 1000);
        assert_eq!(ds.rows, vec![535, 266, 133, 66]);
        assert_eq!(ds.split(0), (0, 0));
        assert_eq!(ds.split(535), (1, 0));
        assert_eq!(ds.split(999), (3, 65));
        assert_eq!(ds.offsets(), vec![0, 535, 801, 934]);
        let b = Batch {
            parts: vec![(0, vec![5, 1, 5]), (2, vec![5])],
        };
        assert_eq!(b.unique_rows(), 3);
        assert_eq!(
            b.ids().collect::<Vec<_>>(),
            [(0, 5), (0, 1), (0, 5), (2, 5)]
        );
        let spans: Vec<_> = b.spans(2).map(|(t, _, r)| (t, r)).collect();
        assert_eq!(spans, [(0, 0..6), (2, 6..8)]);
    }

    #[test]
    fn batches_have_the_batch_size() {
        let ds = Dataset::new(100_000, 4, 8);
        for w in [Workload::W1, Workload::W2, Workload::W3, Workload::W4] {
            let mut g = Generator::new(&ds, w, 4096, 1, &DLRM_FALLBACK);
            let b = g.next_batch();
            assert_eq!(b.len(), 4096, "{w:?}");
            for (t, ids) in &b.parts {
                assert!(ids.iter().all(|&r| r < ds.rows[*t as usize]));
            }
        }
    }

    /// A restart's W2 after W5 must find the rows training made hot: the
    /// Zipf workloads rank the same rows hot whatever their seeds.
    #[test]
    fn zipf_workloads_share_their_hot_rows() {
        let ds = Dataset::new(1_000_000, 4, 8);
        let top = |w: Workload, seed: u64| {
            let mut g = Generator::new(&ds, w, 4096, seed, &DLRM_FALLBACK);
            let mut count = std::collections::HashMap::<(u32, u64), u32>::new();
            for _ in 0..50 {
                for (t, r) in g.next_batch().ids() {
                    *count.entry((t, r)).or_default() += 1;
                }
            }
            let mut v: Vec<_> = count.into_iter().collect();
            v.sort_by_key(|&(k, c)| (std::cmp::Reverse(c), k));
            v.into_iter()
                .take(100)
                .map(|(k, _)| k)
                .collect::<std::collections::HashSet<_>>()
        };
        let (w2, w5) = (top(Workload::W2, 0xb0a7 ^ 2), top(Workload::W5, 0xb0a7 ^ 5));
        let shared = w2.intersection(&w5).count();
        assert!(shared >= 80, "{shared} of the 100 hottest rows shared");
    }
}
