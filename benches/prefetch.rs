//! The prefetch pipeline on a training loop: Zipf(1.05) batches of 4096 ids
//! over a table ten times the DRAM cache, each batch `lookup` → compute →
//! `step`, with a fixed compute time standing in for the dense model.
//!
//! - **no prefetch**: the batch's misses stall the loop.
//! - **prefetch**: batch i+1's `prefetch` runs while batch i computes and
//!   steps; its handle is dropped after batch i+1's step.
//! - **DRAM baseline**: the same loop with the whole table cached in DRAM
//!   (no stall at all), measured in the same run.
//!
//! Share of stall hidden = `1 − (T_prefetch − T_dram) / (T_none − T_dram)`.
//! Also the fused `step` next to a plain `update` of the same batch, both on
//! DRAM-resident rows.
//!
//! `cargo bench --bench prefetch` (`EMBTIER_BENCH_ROUNDS`, default 3;
//! `EMBTIER_COMPUTE_US`, default 16000; `EMBTIER_BENCH_DIR` for the files).

mod common;

use std::time::{Duration, Instant};

use common::*;
use embtier::{IoEngineKind, Store};

const BATCH: usize = 4096;
const ROWS: u64 = 1 << 20;
const DIM: u32 = 64;
const WARM: usize = 40;
const MEASURE: usize = 120;

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Steps per second over `MEASURE` batches after `WARM` warm-up batches.
fn train(store: &Store, batches: &[Vec<u64>], compute: Duration, prefetch: bool) -> f64 {
    let mut out = vec![0f32; BATCH * DIM as usize];
    let grads = vec![0.001f32; BATCH * DIM as usize];
    let mut next = if prefetch {
        Some(store.prefetch("t", &batches[0]).expect("prefetch"))
    } else {
        None
    };
    let mut start = Instant::now();
    let mut parts = [0f64; 3];
    for (i, ids) in batches.iter().enumerate().take(WARM + MEASURE) {
        if i == WARM {
            start = Instant::now();
        }
        let mut cur = next.take();
        if let Some(c) = cur.as_mut() {
            // This batch's reads, started a step ago: wait rather than
            // read the same rows twice.
            c.wait().expect("prefetch");
        }
        if prefetch {
            next = Some(store.prefetch("t", &batches[i + 1]).expect("prefetch"));
        }
        let t0 = Instant::now();
        store.lookup("t", ids, &mut out).expect("lookup");
        let t1 = Instant::now();
        spin(compute);
        let t2 = Instant::now();
        store.step("t", ids, &grads).expect("step");
        let t3 = Instant::now();
        drop(cur);
        if i >= WARM {
            parts[0] += (t1 - t0).as_secs_f64();
            parts[1] += (t3 - t2).as_secs_f64();
            parts[2] += t3.elapsed().as_secs_f64();
        }
    }
    if std::env::var_os("EMBTIER_BENCH_VERBOSE").is_some() {
        eprintln!(
            "prefetch {prefetch}: per step lookup {:.2} ms, step {:.2} ms, release {:.2} ms",
            parts[0] / MEASURE as f64 * 1e3,
            parts[1] / MEASURE as f64 * 1e3,
            parts[2] / MEASURE as f64 * 1e3
        );
    }
    MEASURE as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rounds: usize = std::env::var("EMBTIER_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let compute = Duration::from_micros(
        std::env::var("EMBTIER_COMPUTE_US")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(16000),
    );
    let engine = if uring_available() {
        IoEngineKind::Uring
    } else {
        IoEngineKind::Psync
    };
    let dir = bench_dir();
    let rb = 4 * DIM as u64;
    eprintln!("writing {ROWS} rows x {DIM} f32 ...");
    drop(written_store(dir.path(), ROWS, DIM, 64 << 20, engine, 128));
    let path = dir.path().join("store");
    let batches = zipf_batches(WARM + MEASURE + 1, BATCH, ROWS, 1.05, 11);
    let (mut none, mut pf, mut dram) = (Vec::new(), Vec::new(), Vec::new());
    let (mut step_t, mut update_t) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let s = reopen(&path, ROWS, DIM, ROWS / 10 * rb, engine, 128);
        none.push(train(&s, &batches, compute, false));
        drop(s);
        let s = reopen(&path, ROWS, DIM, ROWS / 10 * rb, engine, 128);
        pf.push(train(&s, &batches, compute, true));
        let st = s.stats();
        let t = st.table("t").expect("t");
        eprintln!(
            "round {r}: prefetch run: dram hit ratio {:.3}, pinned now {}",
            t.dram().hit_ratio(),
            s.pinned_rows()
        );
        drop(s);
        let s = reopen(&path, ROWS, DIM, ROWS * rb * 2, engine, 128);
        // Warm: every row of the batches into DRAM.
        let mut out = vec![0f32; BATCH * DIM as usize];
        for ids in &batches {
            s.lookup("t", ids, &mut out).expect("warm");
        }
        dram.push(train(&s, &batches, compute, false));
        // Fused step vs plain update on DRAM-resident rows.
        let grads = vec![0.001f32; BATCH * DIM as usize];
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for ids in batches.iter().take(60) {
            let t = Instant::now();
            s.step("t", ids, &grads).expect("step");
            a.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            s.update("t", ids, &grads).expect("update");
            b.push(t.elapsed().as_secs_f64());
        }
        step_t.push(median(a));
        update_t.push(median(b));
    }
    let (n, p, d) = (
        median(none.clone()),
        median(pf.clone()),
        median(dram.clone()),
    );
    let (tn, tp, td) = (1.0 / n, 1.0 / p, 1.0 / d);
    let hidden = 1.0 - (tp - td) / (tn - td);
    println!("engine {engine:?}, {ROWS} rows x {DIM} f32, DRAM cache {} rows, Zipf(1.05), batch {BATCH}, compute {} us, {rounds} rounds", ROWS / 10, compute.as_micros());
    println!();
    println!("| loop | steps/s (rounds) | median | ratio to no prefetch |");
    println!("|---|---|---|---|");
    let f = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("| no prefetch | {} | {n:.1} | 1.00 |", f(&none));
    println!("| prefetch | {} | {p:.1} | {:.2} |", f(&pf), p / n);
    println!(
        "| whole table in DRAM | {} | {d:.1} | {:.2} |",
        f(&dram),
        d / n
    );
    println!();
    println!(
        "SSD stall per step: {:.2} ms without prefetch, {:.2} ms with; share hidden {:.0}%",
        (tn - td) * 1e3,
        (tp - td) * 1e3,
        hidden * 100.0
    );
    let (st, ut) = (median(step_t), median(update_t));
    println!(
        "fused step (SGD) {:.3} ms vs update {:.3} ms per 4096-id batch on DRAM-resident rows: {:.2}x",
        st * 1e3,
        ut * 1e3,
        st / ut
    );
}
