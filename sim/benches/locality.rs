//! Speed of the trace tools' library code: the generator, exact
//! stack-distance analysis, and a whole `analyze`.
//!
//! `cargo bench --bench locality`
#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use embtier_sim::locality::shards::{shards, Sampling};
use embtier_sim::locality::{analyze, stack_distances, Options};
use embtier_sim::trace::gen::{GenSpec, GenTable};

fn spec(batches: u64) -> GenSpec {
    GenSpec {
        seed: 1,
        batches,
        batch_size: 512,
        tables: vec![
            GenTable {
                name: "big".into(),
                rows: 10_000_000,
                dim: 64,
                pooling: 20.0,
                alpha: 1.05,
                drift: 0.0,
            },
            GenTable {
                name: "mid".into(),
                rows: 1_000_000,
                dim: 64,
                pooling: 5.0,
                alpha: 0.9,
                drift: 0.0,
            },
            GenTable {
                name: "small".into(),
                rows: 100_000,
                dim: 64,
                pooling: 1.0,
                alpha: 1.2,
                drift: 0.0,
            },
        ],
    }
}

fn locality(c: &mut Criterion) {
    let s = spec(100); // 1.33 M accesses
    let n = s.generate().accesses.len() as u64;
    let mut g = c.benchmark_group("locality");
    g.sample_size(10);
    g.throughput(Throughput::Elements(n));
    g.bench_function("gen", |b| b.iter(|| black_box(s.generate())));
    let t = s.generate();
    // Dense ids of the biggest table, as analyze builds them.
    let mut map = std::collections::HashMap::new();
    let seq: Vec<u32> = t
        .accesses
        .iter()
        .map(|a| {
            let k = a.key();
            let next = map.len() as u32;
            *map.entry(k).or_insert(next)
        })
        .collect();
    let objects = map.len();
    g.bench_function("stack_distances", |b| {
        b.iter(|| black_box(stack_distances(&seq, objects)))
    });
    let keys: Vec<u64> = t.accesses.iter().map(|a| a.key()).collect();
    g.bench_function("shards_rate_0.01", |b| {
        b.iter(|| black_box(shards(keys.iter().copied(), n, Sampling::Rate(0.01)).rate))
    });
    g.bench_function("shards_fixed_8192", |b| {
        b.iter(|| black_box(shards(keys.iter().copied(), n, Sampling::FixedSize(8192)).rate))
    });
    g.bench_function("analyze_per_table_and_overall", |b| {
        b.iter(|| black_box(analyze(&t, &Options::default())))
    });
    g.finish();
}

criterion_group!(benches, locality);
criterion_main!(benches);
