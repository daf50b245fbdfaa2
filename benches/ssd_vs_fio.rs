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
use embtier::IoEngineKind;

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
    (times.len() as f64 * BATCH as f64 / total.as_secs_f64(), median)
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
            eprintln!("SKIP fio {engine}: {}", String::from_utf8_lossy(&o.stderr).trim());
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

    // (a) DRAM hits vs flat gather.
    {
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
        let (_, ours_m) = measure(secs / 2.0, &batches, |ids| store.lookup("t", ids, &mut out).unwrap());
        assert_eq!(store.stats().table("t").unwrap().dram.misses, n, "only the warm-up missed");
        rows.push(Row {
            workload: "(a) DRAM hits, dim 128",
            engine: "embtier".into(),
            rows_per_s: rate_of_median(ours_m),
            median_ms: ours_m.as_secs_f64() * 1e3,
            baseline: "flat Vec<f32> gather",
            baseline_rows_per_s: rate_of_median(flat_m),
            target: ">= 0.5",
        });
    }

    // (b) all misses, one row per block.
    {
        let (n, dim) = (500_000u64, 1020u32);
        let dir = bench_dir();
        drop(written_store(dir.path(), n, dim, 1 << 20, IoEngineKind::Auto, 64));
        let batches = uniform_batches(64, BATCH, n, 2);
        let mut out = vec![0f32; BATCH * dim as usize];
        let mut results = Vec::new();
        let mut engines = vec![IoEngineKind::Psync];
        if uring_available() {
            engines.insert(0, IoEngineKind::Uring);
        }
        for engine in engines {
            let store = reopen(&dir.path().join("store"), n, dim, 256 * 4080, engine, 64);
            let (_, m) = measure(secs, &batches, |ids| store.lookup("t", ids, &mut out).unwrap());
            let st = store.stats();
            assert!(st.table("t").unwrap().dram.hit_ratio() < 0.01, "misses");
            results.push((engine, m, st.ssd_read_latency.p50));
        }
        let data = dir.path().join("store").join(embtier::DATA_FILE);
        let fio_uring = fio(&data, "io_uring", 64, 1, secs as u64);
        let fio_psync = fio(&data, "psync", 1, 4, secs as u64);
        let psync_rate = results
            .iter()
            .find(|r| r.0 == IoEngineKind::Psync)
            .map(|r| rate_of_median(r.1))
            .unwrap_or(0.0);
        for (engine, m, p50) in &results {
            let label = format!("{engine:?} (read p50 {} us)", p50 / 1000).to_lowercase();
            if *engine == IoEngineKind::Uring {
                rows.push(Row {
                    workload: "(b) SSD misses, 1 row/block",
                    engine: label.clone(),
                    rows_per_s: rate_of_median(*m),
                    median_ms: m.as_secs_f64() * 1e3,
                    baseline: "embtier psync (4 threads)",
                    baseline_rows_per_s: psync_rate,
                    target: ">= 2",
                });
                if let Some(f) = fio_uring {
                    rows.push(Row {
                        workload: "(b) SSD misses, 1 row/block",
                        engine: label,
                        rows_per_s: rate_of_median(*m),
                        median_ms: m.as_secs_f64() * 1e3,
                        baseline: "fio io_uring iodepth 64",
                        baseline_rows_per_s: f,
                        target: ">= 0.85",
                    });
                }
            } else if let Some(f) = fio_psync {
                rows.push(Row {
                    workload: "(b) SSD misses, 1 row/block",
                    engine: label,
                    rows_per_s: rate_of_median(*m),
                    median_ms: m.as_secs_f64() * 1e3,
                    baseline: "fio psync numjobs 4",
                    baseline_rows_per_s: f,
                    target: "-",
                });
            }
        }
    }

    // (c) Zipf over a table 10x the cache.
    {
        let (n, dim) = (1_000_000u64, 128u32);
        let dir = bench_dir();
        let store = written_store(dir.path(), n, dim, n * dim as u64 * 4 / 10, IoEngineKind::Auto, 64);
        let batches = zipf_batches(256, BATCH, n, 1.05, 3);
        let mut out = vec![0f32; BATCH * dim as usize];
        for ids in &batches {
            store.lookup("t", ids, &mut out).unwrap();
        }
        let before = store.stats().table("t").unwrap().dram.clone();
        let (_, m) = measure(secs, &batches, |ids| store.lookup("t", ids, &mut out).unwrap());
        let after = store.stats().table("t").unwrap().dram.clone();
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
        rows.push(Row {
            workload: "(c) Zipf(1.05), cache = 10% of table",
            engine: format!("{} (DRAM hit ratio {hr:.3})", store.stats().io_engine),
            rows_per_s: rate_of_median(m),
            median_ms: m.as_secs_f64() * 1e3,
            baseline: "flat Vec<f32> gather (whole table in DRAM)",
            baseline_rows_per_s: rate_of_median(flat_m),
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
