//! Train a click-through-rate model whose embeddings live in embtier:
//! logistic regression with a factorization-machine term (Rendle, 2010),
//!
//! ```text
//! logit = b + Σ_f w_f + ½ Σ_k [ (Σ_f v_fk)² − Σ_f v_fk² ]
//! ```
//!
//! where field `f` of a sample selects one row of table `f`, holding the
//! linear weight `w_f` (element 0) and the factor vector `v_f` (elements
//! 1..=K). The gradient of the log loss with respect to the logit is
//! `p − y`; the rows get `d(p−y)·1` and `(p−y)·(S_k − v_fk)` with
//! `S_k = Σ_f v_fk`, and `Store::step` applies the tables' row-wise Adagrad
//! in place. While batch `i` is computed and stepped, a second thread reads
//! batch `i+1`'s rows, so that its SSD reads overlap the compute and its
//! lookups hit DRAM.
//!
//! ```text
//! cargo run --release --example train              # synthetic data, then Criteo if present
//! cargo run --release --example train -- --tiny    # tiny DRAM/PMem caches over SSD
//! cargo run --release --example train -- --tiny --no-prefetch
//! ```
//!
//! The loss per epoch is printed and must fall. `tests/train.rs` runs the same
//! code pinned to DRAM and over tiny caches and checks that the final weights
//! are bit-identical.

use embtier::MemoryKind;
use std::path::Path;

use embtier::{Init, Optimizer, Placement, PolicyKind, Store, StoreConfig, TableConfig};

/// Factor dimension.
pub const K: usize = 8;
/// Row width: the linear weight, then the factors.
pub const DIM: usize = 1 + K;

/// A dataset: per sample one row id per field, and a 0/1 label.
pub struct Data {
    /// Name, for printing.
    pub name: String,
    /// Fields (= tables).
    pub fields: usize,
    /// Rows of each table.
    pub rows: u64,
    /// `ids[s * fields + f]`: the row of field `f` in sample `s`.
    pub ids: Vec<u64>,
    /// Labels.
    pub labels: Vec<f32>,
}

/// SplitMix64: a small deterministic generator.
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        embtier::init::mix64(self.0)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Synthetic data with a planted signal: every (field, row) has a hidden
/// weight, ids are skewed (`rows · u³`, so a few rows are hot, as in real
/// embedding traffic), and a sample is clicked with probability
/// `sigmoid(Σ hidden − 1)`.
pub fn synthetic(seed: u64, samples: usize, fields: usize, rows: u64) -> Data {
    let mut rng = Rng(seed);
    let hidden: Vec<f64> = (0..fields as u64 * rows)
        .map(|_| (rng.unit() - 0.5) * 3.0)
        .collect();
    let mut ids = Vec::with_capacity(samples * fields);
    let mut labels = Vec::with_capacity(samples);
    for _ in 0..samples {
        let mut z = -1.0;
        for f in 0..fields {
            let u = rng.unit();
            let id = ((rows as f64 * u * u * u) as u64).min(rows - 1);
            z += hidden[f * rows as usize + id as usize];
            ids.push(id);
        }
        let p = 1.0 / (1.0 + (-z).exp());
        labels.push(if rng.unit() < p { 1.0 } else { 0.0 });
    }
    Data {
        name: "synthetic".into(),
        fields,
        rows,
        ids,
        labels,
    }
}

/// The 26 categorical fields of a Criteo TSV (label, 13 integers, 26 hex
/// hashes); a value is hashed into rows `1..rows`, a missing one is row 0.
pub fn criteo(path: &Path, rows: u64) -> Result<Data, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let fields = 26;
    let mut ids = Vec::new();
    let mut labels = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut cols: Vec<&str> = line.split('\t').collect();
        // Trailing empty fields are sometimes cut off.
        if cols.len() < 15 || cols.len() > 40 {
            return Err(format!(
                "{}: line {}: {} columns, expected 15 to 40",
                path.display(),
                n + 1,
                cols.len()
            ));
        }
        cols.resize(40, "");
        labels.push(match cols[0] {
            "0" => 0.0,
            "1" => 1.0,
            l => return Err(format!("{}: line {}: label {l:?}", path.display(), n + 1)),
        });
        for (f, v) in cols[14..].iter().enumerate() {
            ids.push(if v.is_empty() {
                0
            } else {
                let h = u64::from_str_radix(v, 16).map_err(|_| {
                    format!(
                        "{}: line {}: field C{}: {v:?}",
                        path.display(),
                        n + 1,
                        f + 1
                    )
                })?;
                1 + Rng(h ^ ((f as u64) << 32)).next_u64() % (rows - 1)
            });
        }
    }
    Ok(Data {
        name: format!("criteo ({})", path.display()),
        fields,
        rows,
        ids,
        labels,
    })
}

/// Where the tables live.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tiering {
    /// Every table pinned in DRAM.
    Pinned,
    /// Each table cached: DRAM for 16 rows, PMem for 32, the rest on SSD.
    Tiny,
}

/// Hyper-parameters.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Passes over the data.
    pub epochs: usize,
    /// Samples per step.
    pub batch: usize,
    /// Row-wise Adagrad learning rate.
    pub lr: f32,
    /// Read batch `i+1` on a second thread while batch `i` computes.
    pub prefetch: bool,
    /// Samples at the end of the data held out for validation.
    pub holdout: usize,
}

/// What a run produced.
pub struct Run {
    /// Mean log loss of each epoch (online: before each batch's step).
    pub losses: Vec<f64>,
    /// Mean log loss on the held-out samples after each epoch.
    pub val_losses: Vec<f64>,
    /// Every row of every table after training, table by table.
    pub weights: Vec<f32>,
    /// The global bias.
    pub bias: f32,
    /// Rows read from SSD over all tables.
    pub ssd_rows_read: u64,
}

fn config(data: &Data, tiering: Tiering, lr: f32) -> StoreConfig {
    let opt = Optimizer::RowwiseAdagrad {
        lr,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    let placement = match tiering {
        Tiering::Pinned => Placement::Pinned(MemoryKind::Dram),
        Tiering::Tiny => Placement::Cached,
    };
    let mut b = StoreConfig::builder();
    let mut rb = 0;
    for f in 0..data.fields {
        let t = TableConfig::new(format!("f{f}"), data.rows, DIM as u32)
            .init(Init::Uniform { scale: 0.01 })
            .seed(f as u64)
            .optimizer(opt)
            .placement(placement);
        rb = t.row_bytes();
        b = b.table(t);
    }
    let n = data.fields as u64;
    match tiering {
        Tiering::Pinned => b.dram_capacity(n * data.rows * rb + (1 << 20)).build(),
        Tiering::Tiny => b
            .dram_capacity(n * 16 * rb)
            .dram_shards(1)
            .dram_policy(PolicyKind::Lru)
            .pmem(None, n * 32 * rb, PolicyKind::Sieve)
            .build(),
    }
}

fn lookup_batch(store: &Store, data: &Data, samples: std::ops::Range<usize>) -> Vec<Vec<f32>> {
    let f_n = data.fields;
    (0..f_n)
        .map(|f| {
            let ids: Vec<u64> = samples.clone().map(|s| data.ids[s * f_n + f]).collect();
            let mut out = vec![0f32; ids.len() * DIM];
            store
                .lookup(&format!("f{f}"), &ids, &mut out)
                .expect("lookup");
            out
        })
        .collect()
}

/// Start reading (and pinning) a batch's rows, one prefetch per table.
fn prefetch_batch<'s>(
    store: &'s Store,
    data: &Data,
    samples: std::ops::Range<usize>,
) -> Result<Vec<embtier::Prefetch<'s>>, embtier::Error> {
    (0..data.fields)
        .map(|f| {
            let ids: Vec<u64> = samples
                .clone()
                .map(|s| data.ids[s * data.fields + f])
                .collect();
            store.prefetch(&format!("f{f}"), &ids)
        })
        .collect()
}

/// The click probability of one sample and the factor sums `S_k`, from
/// its rows (`row(f)` is field `f`'s row).
fn forward<'a>(bias: f32, fields: usize, row: impl Fn(usize) -> &'a [f32]) -> (f32, [f32; K]) {
    let mut sum = [0f32; K];
    let mut sq = 0f32;
    let mut z = bias;
    for f in 0..fields {
        let r = row(f);
        z += r[0];
        for k in 0..K {
            sum[k] += r[1 + k];
            sq += r[1 + k] * r[1 + k];
        }
    }
    z += 0.5 * (sum.iter().map(|x| x * x).sum::<f32>() - sq);
    (1.0 / (1.0 + (-z).exp()), sum)
}

fn log_loss(p: f32, y: f32) -> f64 {
    let pc = (p as f64).clamp(1e-7, 1.0 - 1e-7);
    if y > 0.5 {
        -pc.ln()
    } else {
        -(1.0 - pc).ln()
    }
}

/// Train on `data` with the store in `dir`.
pub fn train(data: &Data, tiering: Tiering, dir: &Path, p: Params) -> Result<Run, embtier::Error> {
    let store = Store::create(dir, config(data, tiering, p.lr))?;
    let n = data.labels.len() - p.holdout.min(data.labels.len() - 1);
    let f_n = data.fields;
    let mut val_losses = Vec::new();
    let mut bias = 0f32;
    let mut losses = Vec::new();
    let batches: Vec<std::ops::Range<usize>> = (0..n)
        .step_by(p.batch)
        .map(|s| s..(s + p.batch).min(n))
        .collect();
    let mut pending: Vec<embtier::Prefetch<'_>> = Vec::new();
    for _ in 0..p.epochs {
        let mut loss = 0f64;
        for (i, range) in batches.iter().enumerate() {
            // The prefetch pipeline: batch i's rows were prefetched (and
            // pinned) during batch i-1; start batch i+1's now, so its SSD
            // reads run while this batch computes and steps.
            let mut current = std::mem::take(&mut pending);
            for c in &mut current {
                c.wait()?; // this batch's reads, started a step ago
            }
            if let (true, Some(next)) = (p.prefetch, batches.get(i + 1)) {
                pending = prefetch_batch(&store, data, next.clone())?;
            }
            {
                let rows = lookup_batch(&store, data, range.clone());
                let b = range.len();
                let mut grads: Vec<Vec<f32>> = vec![vec![0f32; b * DIM]; f_n];
                let mut dbias = 0f32;
                for (j, s) in range.clone().enumerate() {
                    let row = |f: usize| &rows[f][j * DIM..(j + 1) * DIM];
                    let (pr, sum) = forward(bias, f_n, row);
                    let y = data.labels[s];
                    loss += log_loss(pr, y);
                    let d = (pr - y) / b as f32;
                    dbias += d;
                    for (f, gf) in grads.iter_mut().enumerate() {
                        let r = row(f);
                        let g = &mut gf[j * DIM..(j + 1) * DIM];
                        g[0] = d;
                        for k in 0..K {
                            g[1 + k] = d * (sum[k] - r[1 + k]);
                        }
                    }
                }
                bias -= p.lr * dbias;
                for (f, g) in grads.iter().enumerate() {
                    let ids: Vec<u64> = range.clone().map(|s| data.ids[s * f_n + f]).collect();
                    store.step(&format!("f{f}"), &ids, g)?;
                }
            }
            // This batch has stepped: release its pins.
            drop(current);
        }
        losses.push(loss / n as f64);
        if n < data.labels.len() {
            let rows = lookup_batch(&store, data, n..data.labels.len());
            let v: f64 = (n..data.labels.len())
                .enumerate()
                .map(|(j, s)| {
                    let (pr, _) = forward(bias, f_n, |f| &rows[f][j * DIM..(j + 1) * DIM]);
                    log_loss(pr, data.labels[s])
                })
                .sum();
            val_losses.push(v / (data.labels.len() - n) as f64);
        }
    }
    let all: Vec<u64> = (0..data.rows).collect();
    let mut weights = Vec::with_capacity(f_n * all.len() * DIM);
    for f in 0..f_n {
        let mut out = vec![0f32; all.len() * DIM];
        store.lookup(&format!("f{f}"), &all, &mut out)?;
        weights.extend_from_slice(&out);
    }
    store.flush()?;
    let ssd_rows_read = store.stats().tables.iter().map(|t| t.ssd.rows_read).sum();
    Ok(Run {
        losses,
        val_losses,
        weights,
        bias,
        ssd_rows_read,
    })
}

#[allow(dead_code)] // used by the example binary, not by tests/train.rs
fn main() {
    let tiny = std::env::args().any(|a| a == "--tiny");
    let prefetch = !std::env::args().any(|a| a == "--no-prefetch");
    let tiering = if tiny { Tiering::Tiny } else { Tiering::Pinned };
    let mut sets = vec![(synthetic(7, 50_000, 8, 1_000), 4)];
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/traces/criteo-train-head1000.tsv");
    if path.exists() {
        match criteo(&path, 1 << 12) {
            Ok(d) => sets.push((d, 4)),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
    } else {
        println!("(skipping Criteo: {} is absent)", path.display());
    }
    for (data, epochs) in sets {
        let dir = tempfile::tempdir().expect("temporary directory");
        let p = Params {
            epochs,
            batch: 256,
            lr: 0.02,
            prefetch,
            holdout: data.labels.len() / 5,
        };
        let t = std::time::Instant::now();
        let run = match train(&data, tiering, &dir.path().join("store"), p) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        };
        println!(
            "{}: {} samples x {} fields, {tiering:?}, {:.2}s, {} rows read from SSD",
            data.name,
            data.labels.len(),
            data.fields,
            t.elapsed().as_secs_f64(),
            run.ssd_rows_read
        );
        for (e, l) in run.losses.iter().enumerate() {
            println!(
                "  epoch {}: train log loss {l:.4}, held-out {:.4}",
                e + 1,
                run.val_losses[e]
            );
        }
        let (first, last) = (run.losses[0], *run.losses.last().expect("an epoch"));
        if last >= first {
            eprintln!(
                "error: {}: loss did not fall ({first:.4} -> {last:.4})",
                data.name
            );
            std::process::exit(1);
        }
    }
}
