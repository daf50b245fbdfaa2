//! The training step of the PyTorch module (`embtier.torch`), without
//! Python: a forward (`lookup_pooled_many`) and a backward fused with SGD
//! (`step_pooled_many`) over two tables, as `python/bench/bench.py` runs
//! it (tables of 1,000,000 x 64 f32, 4,096 bags of 20 uniform ids each,
//! eight batches in turn).
//!
//! - **pinned**: the tables pinned in DRAM: the baseline, measured in the
//!   same run.
//! - **cached**: the same tables cached, with the DRAM capacity the
//!   bench gives the pinned ones (so most rows are in memory, some are
//!   evicted and written back), from a fresh store.
//!
//! Each round runs 80 steps of each, pinned first, and reports the median
//! forward and backward of the last 20 (the steady state, write-backs
//! included), then cached / pinned.
//!
//! `cargo bench --bench pooled` (`EMBTIER_BENCH_ROUNDS`, default 3;
//! `EMBTIER_BENCH_ROWS`, default 1000000; `EMBTIER_BENCH_DIR` for the
//! files).

mod common;

use std::time::Instant;

use common::bench_dir;
use embtier::{
    MemoryKind, Optimizer, Placement, PooledBatch, PooledGrad, PoolingMode, Store, StoreConfig,
    TableConfig,
};

const DIM: usize = 64;
const BAGS: usize = 4096;
const POOLING: usize = 20;
const TABLES: [&str; 2] = ["t0", "t1"];
const STEPS: usize = 80;
const MEASURED: usize = 20;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn store(dir: &std::path::Path, rows: u64, placement: Placement) -> Store {
    let mut b = StoreConfig::builder();
    for name in TABLES {
        b = b.table(
            TableConfig::new(name, rows, DIM as u32)
                .placement(placement)
                .optimizer(Optimizer::Sgd {
                    lr: 0.01,
                    weight_decay: 0.0,
                }),
        );
    }
    // The bench's DRAM: the rows and 4 bytes a row, and 64 MiB.
    let dram = TABLES.len() as u64 * rows * (DIM as u64 * 4 + 4) + (64 << 20);
    Store::create(dir, b.dram_capacity(dram).build()).expect("create")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median forward and backward milliseconds of the last [`MEASURED`] of
/// [`STEPS`] steps.
fn run(s: &Store, batches: &[Vec<u64>], offsets: &[u64], grad: &[f32]) -> (f64, f64) {
    let n = BAGS * POOLING;
    let mut outs = vec![vec![0f32; BAGS * DIM]; TABLES.len()];
    let (mut fwd, mut bwd) = (Vec::new(), Vec::new());
    for step in 0..STEPS {
        let idx = &batches[step % batches.len()];
        let t = Instant::now();
        let mut parts: Vec<PooledBatch<'_>> = TABLES
            .iter()
            .zip(outs.iter_mut())
            .enumerate()
            .map(|(k, (table, out))| PooledBatch {
                table,
                indices: &idx[k * n..(k + 1) * n],
                offsets,
                mode: PoolingMode::Sum,
                per_sample_weights: None,
                out,
            })
            .collect();
        s.lookup_pooled_many(&mut parts).expect("forward");
        let f = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let grads: Vec<PooledGrad<'_>> = TABLES
            .iter()
            .enumerate()
            .map(|(k, table)| PooledGrad {
                table,
                indices: &idx[k * n..(k + 1) * n],
                offsets,
                mode: PoolingMode::Sum,
                per_sample_weights: None,
                grad: &grad[k * BAGS * DIM..(k + 1) * BAGS * DIM],
            })
            .collect();
        s.step_pooled_many(&grads).expect("backward");
        let b = t.elapsed().as_secs_f64() * 1e3;
        if step >= STEPS - MEASURED {
            fwd.push(f);
            bwd.push(b);
        }
    }
    (median(fwd), median(bwd))
}

fn main() {
    let rounds = env("EMBTIER_BENCH_ROUNDS", 3);
    let rows = env("EMBTIER_BENCH_ROWS", 1_000_000);
    let n = BAGS * POOLING;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let batches: Vec<Vec<u64>> = (0..8)
        .map(|_| {
            (0..TABLES.len() * n)
                .map(|_| {
                    x = embtier::init::mix64(x);
                    x % rows
                })
                .collect()
        })
        .collect();
    let offsets: Vec<u64> = (0..=BAGS as u64).map(|b| b * POOLING as u64).collect();
    let grad: Vec<f32> = (0..TABLES.len() * BAGS * DIM)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect();
    println!(
        "{} tables of {rows} x {DIM} f32, {BAGS} bags of {POOLING}, SGD; median of the last {MEASURED} of {STEPS} steps, ms",
        TABLES.len()
    );
    println!("| round | pinned forward | pinned backward | cached forward | cached backward | cached / pinned, step |");
    println!("|---|---:|---:|---:|---:|---:|");
    for r in 1..=rounds {
        let dir = bench_dir();
        let pinned = {
            let s = store(
                &dir.path().join("pinned"),
                rows,
                Placement::Pinned(MemoryKind::Dram),
            );
            run(&s, &batches, &offsets, &grad)
        };
        let cached = {
            let s = store(&dir.path().join("cached"), rows, Placement::Cached);
            run(&s, &batches, &offsets, &grad)
        };
        println!(
            "| {r} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |",
            pinned.0,
            pinned.1,
            cached.0,
            cached.1,
            (cached.0 + cached.1) / (pinned.0 + pinned.1)
        );
    }
}
