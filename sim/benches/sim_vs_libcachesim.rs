//! LRU simulation speed against libCacheSim on the same trace, in the same
//! run: our `simulate_dense` (ids densified once, no hashing per request)
//! vs libCacheSim 0.3.5's `LRU.process_trace` through its Python binding
//! (skipped with a message when `python3 -c "import libcachesim"` fails).
//! Target: at least 1.5x libCacheSim's requests/s.
//!
//! `cargo bench --bench sim_vs_libcachesim`

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use embtier::PolicyKind;
use embtier_sim::trace::{import, CsvSpec, Format};
use embtier_sim::{densify, simulate_dense};

/// A 10 M-request Zipf(0.9) trace over 1 M objects in oracleGeneral format,
/// so that per-run setup is amortised on both sides.
fn synthetic(path: &Path) {
    use embtier_sim::trace::gen::{GenSpec, GenTable};
    use std::io::Write;
    let spec = GenSpec {
        seed: 3,
        batches: 2442,
        batch_size: 4096,
        tables: vec![GenTable {
            name: "z".into(),
            rows: 1_000_000,
            dim: 16,
            pooling: 1.0,
            alpha: 0.9,
            drift: 0.0,
        }],
    };
    let t = spec.generate();
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for (i, a) in t.accesses.iter().enumerate() {
        w.write_all(&(i as u32).to_le_bytes()).unwrap();
        w.write_all(&(a.row + 1).to_le_bytes()).unwrap();
        w.write_all(&1u32.to_le_bytes()).unwrap();
        w.write_all(&(-1i64).to_le_bytes()).unwrap();
    }
}

fn main() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/traces/cloudPhysicsIO.oracleGeneral.bin");
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("zipf10m.oracleGeneral.bin");
    synthetic(&big);
    println!("| trace | size | ours (M req/s, median) | libCacheSim (M req/s, best of 5) | ratio | ours incl. densify (M req/s) | miss ratio ours / libCacheSim |");
    println!("|---|---|---|---|---|---|---|");
    for trace in [shared, big] {
        if !trace.exists() {
            eprintln!("SKIP: {} is absent", trace.display());
            continue;
        }
        run(&trace);
    }
}

fn run(trace: &Path) {
    let (t, _) = import(trace, Format::OracleGeneral, &CsvSpec::default(), 1).unwrap();
    let ids: Vec<u64> = t.accesses.iter().map(|a| a.row).collect();
    let name = trace.file_name().unwrap().to_string_lossy().to_string();
    // Densify once per trace (a sweep pays it once); timed on its own.
    let start = Instant::now();
    let (dense, n) = densify(&ids);
    let densify_s = start.elapsed().as_secs_f64();
    for size in [1000usize, 10000] {
        // Ours: the simulation itself, median of runs.
        let mut rates = Vec::new();
        let mut mr = 0.0;
        for _ in 0..(15_000_000 / ids.len()).clamp(3, 15) {
            let start = Instant::now();
            let r = simulate_dense(PolicyKind::Lru, size, &dense, n);
            rates.push(ids.len() as f64 / start.elapsed().as_secs_f64());
            mr = r.miss_ratio();
        }
        rates.sort_by(f64::total_cmp);
        let ours = rates[rates.len() / 2];
        let with_densify = ids.len() as f64 / (ids.len() as f64 / ours + densify_s);
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/reference/lcs_lru_speed.py");
        let out = Command::new("python3")
            .arg(&script)
            .arg(trace)
            .arg(size.to_string())
            .arg("5")
            .output();
        let theirs = match out {
            Ok(o) if o.status.success() => {
                let s = String::from_utf8_lossy(&o.stdout);
                let mut it = s.split_whitespace();
                let rate: f64 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0.0);
                let lmr: f64 = it.next().and_then(|x| x.parse().ok()).unwrap_or(f64::NAN);
                Some((rate, lmr))
            }
            _ => {
                eprintln!("SKIP libCacheSim: python3 with libcachesim==0.3.5 is not available");
                None
            }
        };
        match theirs {
            Some((rate, lmr)) => println!(
                "| {name} | {size} | {:.1} | {:.1} | {:.2} | {:.1} | {mr:.6} / {lmr:.6} |",
                ours / 1e6,
                rate / 1e6,
                ours / rate,
                with_densify / 1e6
            ),
            None => println!(
                "| {name} | {size} | {:.1} | - | - | {:.1} | {mr:.6} / - |",
                ours / 1e6,
                with_densify / 1e6
            ),
        }
    }
}
