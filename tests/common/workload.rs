//! A deterministic stream of updates, SGD steps, bulk loads and checkpoints over three
//! tables (cached, pinned, and cached with two-block rows), and a plain
//! in-memory model of what the store must hold at each checkpoint. Shared
//! by the crash, fault-injection and soak tests.

use embtier::MemoryKind;
use embtier::{Init, Placement, Store, StoreConfig, TableConfig};

use super::Rng;

/// (name, rows, dim, placement) of the workload's tables.
pub const TABLES: [(&str, u64, usize, Placement); 3] = [
    ("cached", 4000, 8, Placement::Cached),
    ("pinned", 300, 4, Placement::Pinned(MemoryKind::Dram)),
    ("wide", 120, 1100, Placement::Cached),
];

/// The store the workload runs on: small DRAM, so that dirty rows are
/// written back (and journaled) between checkpoints.
pub fn config() -> StoreConfig {
    let mut b = StoreConfig::builder();
    for (name, rows, dim, p) in TABLES {
        b = b.table(
            TableConfig::new(name, rows, dim as u32)
                .init(Init::Zeros)
                .placement(p),
        );
    }
    let mut c = b.dram_capacity(96 << 10).dram_shards(2).build();
    // A row log of 24 blocks: it fills between checkpoints, so write-backs
    // go to it and home, and checkpoints merge it, all under the tests.
    c.ssd.row_log = Some(embtier::ByteSize(24 * 4096));
    c
}

/// One operation.
#[derive(Debug, Clone)]
pub enum Op {
    /// Overwrite rows (last duplicate wins).
    Update {
        table: usize,
        ids: Vec<u64>,
        values: Vec<f32>,
    },
    /// SGD with lr 0.5 (duplicates summed in order).
    Sgd {
        table: usize,
        ids: Vec<u64>,
        grads: Vec<f32>,
    },
    /// A bulk load of rows `start ..` (`Store::import_rows`).
    Import {
        table: usize,
        start: u64,
        values: Vec<f32>,
    },
    /// A checkpoint.
    Checkpoint,
}

/// The op stream of `seed`: about one checkpoint per `every` ops.
pub fn ops(seed: u64, every: u64) -> impl Iterator<Item = Op> {
    let mut rng = Rng(seed);
    std::iter::from_fn(move || {
        if rng.below(every) == 0 {
            return Some(Op::Checkpoint);
        }
        let table = rng.below(TABLES.len() as u64) as usize;
        let (_, rows, dim, _) = TABLES[table];
        let n = 1 + rng.below(if dim > 100 { 6 } else { 48 }) as usize;
        // Skewed ids: half the batch from a hot tenth of the table.
        let ids: Vec<u64> = (0..n)
            .map(|_| {
                if rng.below(2) == 0 {
                    rng.below(rows / 10)
                } else {
                    rng.below(rows)
                }
            })
            .collect();
        if rng.below(8) == 0 {
            // A range of whole and partial groups, from anywhere.
            let start = rng.below(rows);
            let len = (1 + rng.below(if dim > 100 { 3 } else { 200 })).min(rows - start);
            let values = (0..len as usize * dim).map(|_| rng.small_f32()).collect();
            // Half of them as an update of the same ids: whole groups that
            // pass through the cache and are written home by a write-back.
            return Some(if rng.below(2) == 0 {
                Op::Update {
                    table,
                    ids: (start..start + len).collect(),
                    values,
                }
            } else {
                Op::Import {
                    table,
                    start,
                    values,
                }
            });
        }
        let vals: Vec<f32> = (0..n * dim).map(|_| rng.small_f32()).collect();
        Some(if rng.below(3) == 0 {
            Op::Update {
                table,
                ids,
                values: vals,
            }
        } else {
            Op::Sgd {
                table,
                ids,
                grads: vals,
            }
        })
    })
}

/// Every row of every table, as the store must hold them.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub rows: Vec<Vec<f32>>,
}

impl Default for Model {
    fn default() -> Self {
        Model::new()
    }
}

impl Model {
    /// All rows zero (the tables' initial values).
    pub fn new() -> Model {
        Model {
            rows: TABLES
                .iter()
                .map(|&(_, rows, dim, _)| vec![0f32; rows as usize * dim])
                .collect(),
        }
    }

    /// Apply a non-checkpoint op.
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::Update { table, ids, values } => {
                let dim = TABLES[*table].2;
                for (k, &id) in ids.iter().enumerate() {
                    let at = id as usize * dim;
                    self.rows[*table][at..at + dim]
                        .copy_from_slice(&values[k * dim..(k + 1) * dim]);
                }
            }
            Op::Sgd { table, ids, grads } => {
                let dim = TABLES[*table].2;
                for (id, g) in super::sum_in_order(ids, grads, dim) {
                    let at = id as usize * dim;
                    for (w, g) in self.rows[*table][at..at + dim].iter_mut().zip(&g) {
                        *w -= 0.5 * g;
                    }
                }
            }
            Op::Import {
                table,
                start,
                values,
            } => {
                let at = *start as usize * TABLES[*table].2;
                self.rows[*table][at..at + values.len()].copy_from_slice(values);
            }
            Op::Checkpoint => {}
        }
    }

    /// The model after the ops of `seed` up to its `k`-th checkpoint.
    pub fn advance(&mut self, seed: u64, every: u64, k: u64) {
        let mut seen = 0;
        for op in ops(seed, every) {
            if seen == k {
                return;
            }
            match op {
                Op::Checkpoint => seen += 1,
                op => self.apply(&op),
            }
        }
    }

    /// Compare every row of `store` with the model, bit for bit. `Err`
    /// names the first difference, or carries the store's error.
    pub fn check(&self, store: &Store) -> Result<(), String> {
        self.check_either(store, None)
    }

    /// [`Model::check`], where each row may instead equal `alt`'s (the
    /// model with a failed op applied, for an op that may apply in part).
    pub fn check_either(&self, store: &Store, alt: Option<&Model>) -> Result<(), String> {
        for (t, &(name, rows, dim, _)) in TABLES.iter().enumerate() {
            let ids: Vec<u64> = (0..rows).collect();
            let mut out = vec![0f32; rows as usize * dim];
            for (c, ids) in ids.chunks(1000).enumerate() {
                store
                    .lookup(name, ids, &mut out[c * 1000 * dim..][..ids.len() * dim])
                    .map_err(|e| format!("lookup {name}: {e}"))?;
            }
            let same = |m: &Model, i: usize| {
                let r = i / dim * dim..(i / dim + 1) * dim;
                out[r.clone()]
                    .iter()
                    .zip(&m.rows[t][r])
                    .all(|(a, b)| a.to_bits() == b.to_bits())
            };
            if let Some(i) = (0..out.len()).find(|&i| {
                out[i].to_bits() != self.rows[t][i].to_bits() && !alt.is_some_and(|a| same(a, i))
            }) {
                return Err(format!(
                    "table {name} row {} element {}: store {} model {}",
                    i / dim,
                    i % dim,
                    out[i],
                    self.rows[t][i]
                ));
            }
        }
        Ok(())
    }
}

/// Run a non-checkpoint op on the store.
pub fn run(store: &Store, op: &Op) -> embtier::Result<()> {
    match op {
        Op::Update { table, ids, values } => store.update(TABLES[*table].0, ids, values),
        Op::Sgd { table, ids, grads } => store.apply_sgd(TABLES[*table].0, ids, grads, 0.5),
        Op::Import {
            table,
            start,
            values,
        } => store.import_rows(TABLES[*table].0, *start, values),
        Op::Checkpoint => store.checkpoint().map(|_| ()),
    }
}
