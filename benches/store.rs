//! Criterion benchmarks of the store: batches of 4096 ids, f32 rows.
//!
//! - `a_dram_hits`: every lookup hits DRAM (dim 128), against a flat
//!   `Vec<f32>` gather of the same ids in the same run; and an SGD step of
//!   the same ids (`apply_sgd`, every row in DRAM) against the same step
//!   on the flat vector.
//! - `b_ssd_misses`: every lookup misses to SSD, one row per 4 KiB block
//!   (dim 1018), io_uring (queue depth 64) against psync.
//! - `c_zipf`: Zipf(1.05) over a table ten times the DRAM cache (dim 128).
//! - `d_precision`: DRAM-hit lookups and fused SGD steps, dim 128, in f32,
//!   f16, bf16 and int8 (decode on lookup; widen, step, round on step).
//! - `e_huge_pages`: DRAM-hit lookups and SGD steps over a 512 MiB cache
//!   (2 M rows of dim 64, uniform ids), its slabs backed by transparent
//!   huge pages (the default) against the same store without; and the
//!   time to fill each cache from a cold open, printed once for each.
//!
//! `cargo bench --bench store`. The fio comparison is `benches/ssd_vs_fio.rs`.

#![allow(missing_docs)] // criterion_group! generates undocumented items

mod common;

use embtier::MemoryKind;
use std::hint::black_box;
use std::time::Duration;

use common::*;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use embtier::IoEngineKind;

const BATCH: usize = 4096;

fn a_dram_hits(c: &mut Criterion) {
    let rows = 100_000u64;
    let dim = 128usize;
    let dir = bench_dir();
    let store = written_store(
        dir.path(),
        rows,
        dim as u32,
        64 << 20,
        IoEngineKind::Auto,
        64,
    );
    // Warm: every row into DRAM.
    let all: Vec<u64> = (0..rows).collect();
    let mut out = vec![0f32; BATCH * dim];
    for ch in all.chunks(BATCH) {
        store.lookup("t", ch, &mut out[..ch.len() * dim]).unwrap();
    }
    let flat: Vec<f32> = (0..rows as usize * dim).map(|i| i as f32).collect();
    let batches = uniform_batches(64, BATCH, rows, 1);
    let mut g = c.benchmark_group("a_dram_hits");
    g.throughput(Throughput::Elements(BATCH as u64));
    let mut i = 0;
    g.bench_function("flat_vec_gather", |b| {
        b.iter(|| {
            let ids = &batches[i % batches.len()];
            i += 1;
            for (k, &id) in ids.iter().enumerate() {
                let r = id as usize * dim;
                out[k * dim..(k + 1) * dim].copy_from_slice(&flat[r..r + dim]);
            }
            black_box(&out);
        })
    });
    let before = store.stats().table("t").unwrap().dram().misses;
    g.bench_function("embtier_lookup", |b| {
        b.iter(|| {
            let ids = &batches[i % batches.len()];
            i += 1;
            store.lookup("t", ids, &mut out).unwrap();
            black_box(&out);
        })
    });
    // The update path alone: an SGD step of the same ids, every row in
    // DRAM, against the same step on the flat vector.
    let grads: Vec<f32> = (0..BATCH * dim).map(|i| (i % 7) as f32 * 1e-3).collect();
    let mut flat = flat;
    g.bench_function("flat_vec_sgd", |b| {
        b.iter(|| {
            let ids = &batches[i % batches.len()];
            i += 1;
            for (k, &id) in ids.iter().enumerate() {
                let r = id as usize * dim;
                for (x, g) in flat[r..r + dim]
                    .iter_mut()
                    .zip(&grads[k * dim..(k + 1) * dim])
                {
                    *x -= 0.01 * g;
                }
            }
            black_box(&flat);
        })
    });
    g.bench_function("embtier_sgd", |b| {
        b.iter(|| {
            let ids = &batches[i % batches.len()];
            i += 1;
            store.apply_sgd("t", ids, &grads, 0.01).unwrap();
        })
    });
    g.finish();
    let after = store.stats().table("t").unwrap().dram().misses;
    assert_eq!(before, after, "every lookup hit DRAM");
}

fn b_ssd_misses(c: &mut Criterion) {
    let rows = 500_000u64; // 2 GB of 4 KiB blocks
    let dim = 1018u32; // 4072 bytes: one row per block
    let dir = bench_dir();
    let mut engines = vec![IoEngineKind::Psync];
    if uring_available() {
        engines.insert(0, IoEngineKind::Uring);
    }
    let _ = written_store(dir.path(), rows, dim, 1 << 20, IoEngineKind::Auto, 64);
    let batches = uniform_batches(64, BATCH, rows, 2);
    let mut g = c.benchmark_group("b_ssd_misses");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    for engine in engines {
        // A tiny cache (256 rows): practically every lookup misses.
        let store = reopen(&dir.path().join("store"), rows, dim, 256 * 4072, engine, 64);
        let mut out = vec![0f32; BATCH * dim as usize];
        let mut i = 0;
        g.bench_function(format!("{engine:?}").to_lowercase(), |b| {
            b.iter(|| {
                let ids = &batches[i % batches.len()];
                i += 1;
                store.lookup("t", ids, &mut out).unwrap();
            })
        });
        let t = store.stats();
        let t = t.table("t").unwrap();
        eprintln!(
            "{engine:?}: dram hit ratio {:.4}, ssd read p50 {} us",
            t.dram().hit_ratio(),
            store.stats().ssd_read_latency.p50 / 1000
        );
    }
    g.finish();
}

fn c_zipf(c: &mut Criterion) {
    let rows = 1_000_000u64;
    let dim = 128u32;
    let dram = rows * dim as u64 * 4 / 10;
    let dir = bench_dir();
    let store = written_store(dir.path(), rows, dim, dram, IoEngineKind::Auto, 64);
    let batches = zipf_batches(256, BATCH, rows, 1.05, 3);
    let mut out = vec![0f32; BATCH * dim as usize];
    // Warm the cache with a pass over the batches.
    for ids in &batches {
        store.lookup("t", ids, &mut out).unwrap();
    }
    let before = store.stats().table("t").unwrap().dram().clone();
    let mut g = c.benchmark_group("c_zipf");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(20);
    let mut i = 0;
    g.bench_function("lookup_zipf1.05_cache10pct", |b| {
        b.iter_batched(
            || (),
            |_| {
                let ids = &batches[i % batches.len()];
                i += 1;
                store.lookup("t", ids, &mut out).unwrap();
            },
            BatchSize::SmallInput,
        )
    });
    let mut grads = vec![0.001f32; BATCH * dim as usize];
    grads[0] = 0.002;
    g.bench_function("lookup_sgd_zipf1.05_cache10pct", |b| {
        b.iter(|| {
            let ids = &batches[i % batches.len()];
            i += 1;
            store.lookup("t", ids, &mut out).unwrap();
            store.apply_sgd("t", ids, &grads, 0.01).unwrap();
        })
    });
    g.finish();
    let after = store.stats().table("t").unwrap().dram().clone();
    eprintln!(
        "c_zipf: DRAM hit ratio during measurement {:.4}",
        (after.hits - before.hits) as f64 / (after.lookups - before.lookups).max(1) as f64
    );
}

fn d_precision(c: &mut Criterion) {
    use embtier::{Elem, Init, Placement, Store, StoreConfig, TableConfig};
    let rows = 100_000u64;
    let dim = 128usize;
    let batches = uniform_batches(64, BATCH, rows, 2);
    let grads = vec![0.001f32; BATCH * dim];
    let mut out = vec![0f32; BATCH * dim];
    let mut g = c.benchmark_group("d_precision");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.sample_size(30);
    for (name, elem) in [
        ("f32", Elem::F32),
        ("f16", Elem::F16),
        ("bf16", Elem::Bf16),
        ("int8", Elem::Int8),
    ] {
        let dir = bench_dir();
        let t = TableConfig::new("t", rows, dim as u32)
            .elem(elem)
            .init(Init::Uniform { scale: 0.1 })
            .placement(Placement::Pinned(MemoryKind::Dram));
        let store = Store::create(
            dir.path().join("s"),
            StoreConfig::builder()
                .table(t)
                .dram_capacity(rows * 600)
                .build(),
        )
        .unwrap();
        lookup_and_sgd(
            &mut g,
            (&format!("lookup_{name}"), &format!("sgd_step_{name}")),
            &store,
            &batches,
            &mut out,
            &grads,
        );
    }
    g.finish();
}

/// Benchmark `store`'s lookups and then its SGD steps of table "t" over
/// `batches` in turn, as `names`.
fn lookup_and_sgd(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    names: (&str, &str),
    store: &embtier::Store,
    batches: &[Vec<u64>],
    out: &mut [f32],
    grads: &[f32],
) {
    let mut i = 0;
    g.bench_function(names.0, |b| {
        b.iter(|| {
            let ids = &batches[i % batches.len()];
            i += 1;
            store.lookup("t", ids, out).unwrap();
            black_box(&out);
        })
    });
    g.bench_function(names.1, |b| {
        b.iter(|| {
            let ids = &batches[i % batches.len()];
            i += 1;
            store.apply_sgd("t", ids, grads, 0.01).unwrap();
        })
    });
}

fn e_huge_pages(c: &mut Criterion) {
    use embtier::{Init, Store, StoreConfig, TableConfig};
    let rows = 2u64 << 20;
    let dim = 64usize;
    let mut out = vec![0f32; BATCH * dim];
    let grads: Vec<f32> = (0..BATCH * dim).map(|i| (i % 7) as f32 * 1e-3).collect();
    let batches = uniform_batches(64, BATCH, rows, 3);
    let open = |huge: bool| {
        let dir = bench_dir();
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("t", rows, dim as u32).init(Init::Uniform { scale: 0.1 }))
            .dram_capacity(rows * dim as u64 * 4 + (8 << 20))
            .dram_huge_pages(huge)
            .build();
        let store = Store::create(dir.path().join("s"), cfg).expect("create");
        (dir, store)
    };
    let (_d_off, off) = open(false);
    let (_d_on, on) = open(true);
    // Fill each cache from empty (every row once, in id order), the
    // pages' first touch included; alternating, twice each.
    let all: Vec<u64> = (0..rows).collect();
    for (name, store) in [("off", &off), ("on", &on)] {
        let t = std::time::Instant::now();
        for ch in all.chunks(BATCH) {
            store.lookup("t", ch, &mut out[..ch.len() * dim]).unwrap();
        }
        println!(
            "e_huge_pages: filling the 512 MiB cache from a cold open, huge pages {name}: {:.3} s",
            t.elapsed().as_secs_f64()
        );
    }
    let misses = |s: &Store| s.stats().table("t").unwrap().dram().misses;
    let filled = [misses(&off), misses(&on)];
    let mut g = c.benchmark_group("e_huge_pages");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, store) in [("off", &off), ("on", &on)] {
        lookup_and_sgd(
            &mut g,
            (
                &format!("lookup_huge_pages_{name}"),
                &format!("sgd_huge_pages_{name}"),
            ),
            store,
            &batches,
            &mut out,
            &grads,
        );
    }
    g.finish();
    for (store, before) in [&off, &on].into_iter().zip(filled) {
        let d = store.stats().table("t").unwrap().dram().clone();
        assert_eq!(d.resident_rows, rows, "every row cached");
        assert_eq!(d.misses, before, "every benchmarked lookup hit DRAM");
    }
}

criterion_group!(
    benches,
    a_dram_hits,
    b_ssd_misses,
    c_zipf,
    d_precision,
    e_huge_pages
);
criterion_main!(benches);
