//! The comparison harness: every figure of `docs/benchmarks.md` as a ratio to
//! a baseline measured in the same run, on the same file.
//!
//! - (a) DRAM hits vs a flat `Vec<f32>` gather of the same ids (target >= 0.5x).
//! - (b) all-miss SSD lookups, one row per 4 KiB block: io_uring vs psync
//!   (target >= 2x) and io_uring vs `fio --rw=randread --bs=4k --direct=1
//!   --ioengine=io_uring --iodepth=64` on the same data file (target >= 0.85x).
//! - (c) Zipf(1.05) over a table ten times the DRAM cache.
//!
//! `cargo bench --bench ssd_vs_fio` (`EMBTIER_BENCH_SECS` per measurement,
//! default 8; `EMBTIER_BENCH_DIR` for the files; fio is skipped with a
//! message when absent). Prints a markdown table; `--json` prints JSON too.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use embtier::{IoEngineKind, PolicyKind, Store};

const BATCH: usize = 4096;

/// Run `f` on batches until `secs` pass; returns (rows/s, median batch time).
fn measure(secs: f64, batches: &[Vec<u64>], mut f: impl FnMut(&[u64])) -> (f64, Duration) {
    let mut times = Vec::new();
    let start = Instant::now();
    let mut i = 0;
    while start.elapsed().as_secs_f64() < secs || times.len() < 5 {
        let ids = &batches[i % batches.len()];
        let t = Instant::now();
        f(ids);
        times.push(t.elapsed());
        i += 1;
    }
    let total: Duration = times.iter().sum();
    times.sort();
    let median = times[times.len() / 2];
    (
        times.len() as f64 * BATCH as f64 / total.as_secs_f64(),
        median,
    )
}

fn rate_of_median(m: Duration) -> f64 {
    BATCH as f64 / m.as_secs_f64()
}

/// fio's read IOPS on `file`, or None when fio is absent or fails.
fn fio(file: &std::path::Path, engine: &str, depth: u32, jobs: u32, secs: u64) -> Option<f64> {
    let out = Command::new("fio")
        .args([
            "--name=embtier-limit",
            &format!("--filename={}", file.display()),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            &format!("--ioengine={engine}"),
            &format!("--iodepth={depth}"),
            &format!("--numjobs={jobs}"),
            "--group_reporting",
            "--time_based",
            &format!("--runtime={secs}"),
            "--output-format=json",
        ])
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            eprintln!(
                "SKIP fio {engine}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return None;
        }
        Err(e) => {
            eprintln!("SKIP fio: not runnable ({e}); install it with apt-get install fio");
            return None;
        }
    };
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["jobs"][0]["read"]["iops"].as_f64()
}

struct Row {
    workload: &'static str,
    engine: String,
    rows_per_s: f64,
    median_ms: f64,
    baseline: &'static str,
    baseline_rows_per_s: f64,
    target: &'static str,
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let secs: f64 = std::env::var("EMBTIER_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8.0);
    let mut rows: Vec<Row> = Vec::new();
    let only = std::env::var("EMBTIER_BENCH_ONLY").unwrap_or_else(|_| "a,b,c".into());
    let run = |w: &str| only.split(',').any(|x| x.trim() == w);
    let mut fio_uring_iops: Option<f64> = None;

    // (a) DRAM hits vs flat gather.
    if run("a") {
        let (n, dim) = (100_000u64, 128usize);
        let dir = bench_dir();
        let store = written_store(dir.path(), n, dim as u32, 64 << 20, IoEngineKind::Auto, 64);
        let all: Vec<u64> = (0..n).collect();
        let mut out = vec![0f32; BATCH * dim];
        for ch in all.chunks(BATCH) {
            store.lookup("t", ch, &mut out[..ch.len() * dim]).unwrap();
        }
        let flat: Vec<f32> = (0..n as usize * dim).map(|i| i as f32).collect();
        let batches = uniform_batches(64, BATCH, n, 1);
        let (_, flat_m) = measure(secs / 2.0, &batches, |ids| {
            for (k, &id) in ids.iter().enumerate() {
                let r = id as usize * dim;
                out[k * dim..(k + 1) * dim].copy_from_slice(&flat[r..r + dim]);
            }
            std::hint::black_box(&out);
        });
        drop(store);
        for policy in [PolicyKind::Lru, PolicyKind::Sieve] {
            let mut cfg = reopen_config(n, dim as u32, 64 << 20, IoEngineKind::Auto, 64);
            cfg.tiers[0].policy = policy;
            let store =
                Store::open_with(dir.path().join("store"), cfg, Default::default()).unwrap();
            store.wait_warm().unwrap();
            for ch in all.chunks(BATCH) {
                store.lookup("t", ch, &mut out[..ch.len() * dim]).unwrap();
            }
            let warm = store.stats().table("t").unwrap().dram().misses;
            let (_, ours_m) = measure(secs / 2.0, &batches, |ids| {
                store.lookup("t", ids, &mut out).unwrap()
            });
            let d = store.stats().table("t").unwrap().dram().clone();
            assert_eq!(d.misses, warm, "the measured window is all hits: {d:?}");
            rows.push(Row {
                workload: "(a) DRAM hits, dim 128",
                engine: format!("embtier, {policy}"),
                rows_per_s: rate_of_median(ours_m),
                median_ms: ours_m.as_secs_f64() * 1e3,
                baseline: "flat Vec<f32> gather",
                baseline_rows_per_s: rate_of_median(flat_m),
                target: ">= 0.5",
            });
        }
    }

    // (b) all misses, one row per block.
    if run("b") || run("c") {
        let (n, dim) = (500_000u64, 1018u32);
        let dir = bench_dir();
        drop(written_store(
            dir.path(),
            n,
            dim,
            1 << 20,
            IoEngineKind::Auto,
            64,
        ));
        let batches = uniform_batches(64, BATCH, n, 2);
        let mut out = vec![0f32; BATCH * dim as usize];
        let data = dir.path().join("store").join(embtier::DATA_FILE);
        fio_uring_iops = fio(&data, "io_uring", 64, 1, secs as u64);
        if run("b") {
            // (engine, queue depth or threads, label)
            let mut variants = vec![
                (IoEngineKind::Psync, 4, "psync, 4 threads (default)"),
                (IoEngineKind::Psync, 1, "psync, 1 thread"),
            ];
            if uring_available() {
                variants.insert(0, (IoEngineKind::Uring, 128, "uring, qd 128 (default)"));
                variants.insert(0, (IoEngineKind::Uring, 64, "uring, qd 64"));
            }
            let mut rate = std::collections::HashMap::new();
            for (engine, q, label) in &variants {
                let mut cfg = reopen_config(n, dim, 256 * 4072, *engine, 64);
                if *engine == IoEngineKind::Uring {
                    cfg.ssd.queue_depth = *q;
                } else {
                    cfg.ssd.psync_threads = *q as usize;
                }
                // Cold: a warm restart would read the written rows back.
                let cold = embtier::OpenOptionsExt {
                    cold: true,
                    ..Default::default()
                };
                let store = Store::open_with(dir.path().join("store"), cfg, cold).unwrap();
                let (_, m) = measure(secs, &batches, |ids| {
                    store.lookup("t", ids, &mut out).unwrap()
                });
                let st = store.stats();
                assert!(st.table("t").unwrap().dram().hit_ratio() < 0.01, "misses");
                eprintln!("{label}: read p50 {} us", st.ssd_read_latency.p50 / 1000);
                rate.insert(*label, (rate_of_median(m), m));
            }
            let fio_psync = fio(&data, "psync", 1, 4, secs as u64);
            let mut push =
                |label: &str, base: &'static str, base_rate: Option<f64>, target: &'static str| {
                    if let (Some(&(r, m)), Some(b)) = (rate.get(label), base_rate) {
                        rows.push(Row {
                            workload: "(b) SSD misses, 1 row/block",
                            engine: label.to_string(),
                            rows_per_s: r,
                            median_ms: m.as_secs_f64() * 1e3,
                            baseline: base,
                            baseline_rows_per_s: b,
                            target,
                        });
                    }
                };
            let p4 = rate.get("psync, 4 threads (default)").map(|x| x.0);
            let p1 = rate.get("psync, 1 thread").map(|x| x.0);
            for u in ["uring, qd 64", "uring, qd 128 (default)"] {
                push(u, "fio io_uring iodepth 64", fio_uring_iops, ">= 0.85");
                push(u, "embtier psync, 4 threads", p4, ">= 2");
                push(u, "embtier psync, 1 thread", p1, ">= 2");
            }
            push(
                "psync, 4 threads (default)",
                "fio psync numjobs 4",
                fio_psync,
                "-",
            );
        }
    }

    // (c) Zipf over a table 10x the cache.
    if run("c") {
        let (n, dim) = (1_000_000u64, 128u32);
        let dir = bench_dir();
        let store = written_store(
            dir.path(),
            n,
            dim,
            n * dim as u64 * 4 / 10,
            IoEngineKind::Auto,
            64,
        );
        let batches = zipf_batches(256, BATCH, n, 1.05, 3);
        let mut out = vec![0f32; BATCH * dim as usize];
        for ids in &batches {
            store.lookup("t", ids, &mut out).unwrap();
        }
        let before = store.stats().table("t").unwrap().dram().clone();
        let (_, m) = measure(secs, &batches, |ids| {
            store.lookup("t", ids, &mut out).unwrap()
        });
        let after = store.stats().table("t").unwrap().dram().clone();
        let hr = (after.hits - before.hits) as f64 / (after.lookups - before.lookups) as f64;
        // Baseline: the same batches as all-DRAM hits would run (flat gather).
        let flat: Vec<f32> = vec![0.5; n as usize * dim as usize];
        let d = dim as usize;
        let (_, flat_m) = measure(secs / 2.0, &batches, |ids| {
            for (k, &id) in ids.iter().enumerate() {
                let r = id as usize * d;
                out[k * d..(k + 1) * d].copy_from_slice(&flat[r..r + d]);
            }
            std::hint::black_box(&out);
        });
        let flat_rate = rate_of_median(flat_m);
        if let Some(iops) = fio_uring_iops {
            // The device-limited bound at this hit ratio: hits at flat-gather
            // speed, each miss one 4 KiB read at fio's IOPS.
            let bound = 1.0 / (hr / flat_rate + (1.0 - hr) / iops);
            rows.push(Row {
                workload: "(c) Zipf(1.05), cache = 10% of table",
                engine: format!("{} (DRAM hit ratio {hr:.3})", store.stats().io_engine),
                rows_per_s: rate_of_median(m),
                median_ms: m.as_secs_f64() * 1e3,
                baseline: "bound: hits at flat-gather speed + misses at fio IOPS",
                baseline_rows_per_s: bound,
                target: "-",
            });
        }
        rows.push(Row {
            workload: "(c) Zipf(1.05), cache = 10% of table",
            engine: format!("{} (DRAM hit ratio {hr:.3})", store.stats().io_engine),
            rows_per_s: rate_of_median(m),
            median_ms: m.as_secs_f64() * 1e3,
            baseline: "flat Vec<f32> gather (whole table in DRAM)",
            baseline_rows_per_s: flat_rate,
            target: "-",
        });
    }

    println!("| workload | engine | rows/s (median batch) | median batch ms | baseline | baseline rows/s | ratio | target |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.0} | {:.2} | {} | {:.0} | {:.2} | {} |",
            r.workload,
            r.engine,
            r.rows_per_s,
            r.median_ms,
            r.baseline,
            r.baseline_rows_per_s,
            r.rows_per_s / r.baseline_rows_per_s,
            r.target
        );
    }
    if json {
        let v: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "workload": r.workload, "engine": r.engine, "rows_per_s": r.rows_per_s,
                    "median_batch_ms": r.median_ms, "baseline": r.baseline,
                    "baseline_rows_per_s": r.baseline_rows_per_s,
                    "ratio": r.rows_per_s / r.baseline_rows_per_s, "target": r.target,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap());
    }
}
