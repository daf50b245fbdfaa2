//! `emb-replay`: replay embedding access traces through eviction policies.
//!
//! A thin shell over `embtier_sim`: its simulated caches run the store's
//! own policy code (`embtier::policy`). Errors are one line naming the
//! file, record or argument; exit status 2 for usage, 1 for data.

#![forbid(unsafe_code)]
// The doc comments of the command-line arguments are clap's --help text,
// where `[dram]` or `id=COL[,header=yes|no]` are literal, not links.
#![allow(rustdoc::broken_intra_doc_links)]

use embtier_tools::cli::{data, emit, load, main_with, usage, Devices, Fail, Input};
use embtier_tools::plot;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use embtier::PolicyKind;
use embtier_sim::calibrate::calibrate;
use embtier_sim::offline::SetPolicy;
use embtier_sim::profile::{profiles_toml, DeviceProfile};
use embtier_sim::replay::{run_store, simulate_hierarchy, Hierarchy, RowGeometry, TierSpec};
use embtier_sim::trace::{row_bytes_of, Trace};
use embtier_sim::{densify, SimPolicy, SimResult};
use embtier_tools::table::Table;
use rayon::prelude::*;

#[derive(Parser)]
#[command(
    name = "emb-replay",
    version,
    about = "Replay embedding access traces through eviction policies"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Built once per process by clap; boxing the large variant buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Simulate single-tier caches: every policy at every size, in parallel.
    Simulate(SimulateArgs),
    /// Replay a trace against the real store on real files.
    Run(RunArgs),
    /// A self-contained tour on an embedded workload: a policy x size sweep,
    /// a three-tier simulation with estimated step times, and a short run
    /// against the real store in a temp dir.
    Demo,
    /// Measure this machine's DRAM, PMem (a mapped file in DIR) and SSD (a
    /// file in DIR, O_DIRECT) and write DIR/profile.toml.
    Calibrate {
        /// Directory on the devices to measure.
        dir: PathBuf,
        /// MiB of buffers and files.
        #[arg(long, default_value_t = 512)]
        mib: usize,
    },
}

/// The options of `simulate`.
#[derive(clap::Args)]
struct SimulateArgs {
    #[command(flatten)]
    input: Input,
    /// Policies, comma separated: lru, fifo, clock, lfu, 2q, slru, arc,
    /// wtinylfu, s3fifo, sieve, belady, lru-32way, lfu-32way (case, '-' and
    /// '_' ignored: S3-FIFO, W-TinyLFU and twoq work too).
    #[arg(long, value_delimiter = ',', default_value = "lru")]
    policies: Vec<String>,
    /// Cache sizes: rows (1000), bytes (64MiB, at the trace's mean row
    /// size), or `auto` (16 log-spaced sizes up to the unique rows).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    sizes: Vec<String>,
    /// Bytes per row where the trace does not say (default 256).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    row_bytes: Option<u64>,
    /// Print JSON: {"results": [{"policy", "size", "miss_ratio", "hits", "misses"}]}.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV.
    #[arg(long)]
    csv: bool,
    /// Write mrc.svg (one line per policy) into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// A tier hierarchy instead of a sweep, e.g.
    /// dram:lru:64MiB,pmem:sieve:1GiB,ssd (sizes in rows or bytes; a tier
    /// runs lru, fifo, clock, lfu, 2q, slru, arc, wtinylfu, s3fifo or sieve).
    #[arg(long)]
    tiers: Option<String>,
    /// Inclusive tiers (default: exclusive, as the store).
    #[arg(long, requires = "tiers")]
    inclusive: bool,
    #[command(flatten)]
    devices: Devices,
}

/// The options of `run`.
#[derive(clap::Args)]
struct RunArgs {
    #[command(flatten)]
    input: Input,
    /// The store's tiers (and tables, optional: by default one per trace table).
    #[arg(long)]
    config: PathBuf,
    /// Where to create the store (must not exist or be empty; default: a temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Fraction of lookups also updated with apply_sgd, in [0, 1].
    #[arg(long, default_value_t = 0.0, value_parser = parse_ratio)]
    update_ratio: f64,
    /// I/O engine: auto, uring or psync.
    #[arg(long, value_parser = |s: &str| s.parse::<embtier::IoEngineKind>())]
    engine: Option<embtier::IoEngineKind>,
    /// Seed of the update choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn parse_policy(s: &str) -> Result<SimPolicy, Fail> {
    s.parse().map_err(|e| usage(format!("--policies: {e}")))
}

fn mean_row_bytes(t: &Trace, default: u64) -> u64 {
    let rb: Vec<u64> = t
        .tables
        .iter()
        .map(|tt| row_bytes_of(tt, default))
        .collect();
    let total: u64 = t.accesses.iter().map(|a| rb[a.table as usize]).sum();
    (total / t.accesses.len().max(1) as u64).max(1)
}

fn parse_sizes(spec: &[String], unique: u64, row_bytes: u64) -> Result<Vec<u64>, Fail> {
    if spec.len() == 1 && spec[0].trim() == "auto" {
        let mut v: Vec<u64> = (0..16)
            .map(|i| ((unique.max(2) as f64).powf((i + 1) as f64 / 16.0)).round() as u64)
            .collect();
        v.dedup();
        return Ok(v);
    }
    let mut out = Vec::new();
    for s in spec {
        let t = s.trim();
        let rows = if t.chars().all(|c| c.is_ascii_digit()) && !t.is_empty() {
            t.parse::<u64>()
                .map_err(|_| usage(format!("--sizes: {t:?} is too large")))?
        } else {
            let b = t.parse::<embtier::ByteSize>().map_err(|e| {
                usage(format!(
                    "--sizes: {e} (rows like 1000, bytes like 64MiB, or auto)"
                ))
            })?;
            b.0 / row_bytes
        };
        if rows == 0 {
            return Err(usage(format!(
                "--sizes: {t:?} is zero rows (a row is {row_bytes} bytes); a cache holds at least one row"
            )));
        }
        if rows > u32::MAX as u64 - 1 {
            return Err(usage(format!("--sizes: {t:?} is more than 2^32 rows")));
        }
        if rows > unique {
            eprintln!("note: size {rows} exceeds the trace's {unique} unique rows: only cold misses remain");
        }
        out.push(rows);
    }
    Ok(out)
}

fn run(cli: Cli) -> Result<(), Fail> {
    match cli.cmd {
        Cmd::Simulate(a) => simulate(a),
        Cmd::Run(a) => replay_store(a),
        Cmd::Demo => demo(),
        Cmd::Calibrate { dir, mib } => calibrate_cmd(&dir, mib),
    }
}

/// `emb-replay calibrate`: measure, print the figures, write the profile.
fn calibrate_cmd(dir: &std::path::Path, mib: usize) -> Result<(), Fail> {
    std::fs::create_dir_all(dir).map_err(|e| data(format!("{}: {e}", dir.display())))?;
    eprintln!(
        "measuring DRAM, PMem (a file mapped from {0}) and SSD (a file in {0}) with {mib} MiB each ...",
        dir.display()
    );
    let c = calibrate(dir, mib).map_err(data)?;
    let on = match &c.medium {
        Some(m) => m.describe(),
        None => "unknown (/proc/mounts unreadable)".to_string(),
    };
    if !c.medium.as_ref().is_some_and(|m| m.is_pmem()) {
        eprintln!(
            "warning: {} is not on persistent memory ({on}): the pmem figures measure that memory, not PMem; calibrate in a directory on a DAX mount (mount -o dax) to measure PMem",
            dir.display()
        );
    }
    if !c.ssd_direct {
        eprintln!(
            "warning: O_DIRECT was refused in {}: the ssd figures include the page cache",
            dir.display()
        );
    }
    let mut t = Table::new([
        "tier",
        "latency (us)",
        "read (GB/s)",
        "write (GB/s)",
        "IOPS",
        "parallelism",
        "measured on",
    ]);
    for (name, where_) in [
        ("dram", "a heap buffer".to_string()),
        ("pmem", format!("a mapped file on {on}")),
        (
            "ssd",
            format!(
                "a file, {} engine, {}",
                c.ssd_engine,
                if c.ssd_direct { "O_DIRECT" } else { "buffered" }
            ),
        ),
    ] {
        let p = &c.profiles[name];
        t.row([
            name.to_string(),
            format!("{:.3}", p.latency_us),
            format!("{:.2}", p.read_gbps),
            format!("{:.2}", p.write_gbps),
            format!("{:.0}", p.iops),
            format!("{:.1}", p.parallelism),
            where_,
        ]);
    }
    let path = dir.join("profile.toml");
    let header = format!(
        "measured by emb-replay calibrate in {} ({mib} MiB per device)\npmem: {on}\nlatency: one access alone; IOPS: random accesses (256-byte rows; 4 KiB at queue depth 64)\nparallelism: IOPS x latency; GB/s: 10^9 bytes per second, sequential",
        dir.display()
    );
    std::fs::write(&path, profiles_toml(&c.profiles, &header))
        .map_err(|e| data(format!("{}: {e}", path.display())))?;
    let mut o = t.markdown();
    let _ = writeln!(
        o,
        "\nlatency: one access with nothing else in flight; IOPS: random accesses (256-byte row copies; 4 KiB reads at queue depth 64); parallelism: IOPS x latency; GB/s: 10^9 bytes per second, sequential\n{}: written (read by emb-replay simulate --profile and emb-locality plan --profile)",
        path.display()
    );
    emit(&o)
}

/// `emb-replay simulate`: a policy x size sweep, or a tier hierarchy.
fn simulate(a: SimulateArgs) -> Result<(), Fail> {
    let SimulateArgs {
        input,
        policies,
        sizes,
        row_bytes,
        json,
        csv,
        plot,
        tiers,
        inclusive,
        devices,
    } = a;
    if let Some(spec) = tiers {
        let t = load(&input)?;
        return hierarchy(&t, &spec, inclusive, &devices, row_bytes, json);
    }
    let mut sims: Vec<SimPolicy> = Vec::new();
    for p in &policies {
        let p = parse_policy(p)?;
        if !sims.contains(&p) {
            sims.push(p); // `lru,LRU` is one policy
        }
    }
    let t = load(&input)?;
    // One id space over (table, row); dense once, no hashing per request after.
    let keys: Vec<u64> = t.accesses.iter().map(|a| a.key()).collect();
    let (dense, n) = densify(&keys);
    let sizes = parse_sizes(
        &sizes,
        n as u64,
        mean_row_bytes(&t, row_bytes.unwrap_or(256)),
    )?;
    let jobs: Vec<(SimPolicy, u64)> = sims
        .iter()
        .flat_map(|&s| sizes.iter().map(move |&z| (s, z)))
        .collect();
    let start = std::time::Instant::now();
    let results: Vec<(SimPolicy, u64, SimResult)> = jobs
        .par_iter()
        .map(|&(s, z)| (s, z, s.run(z, &keys, &dense, n)))
        .collect();
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{} simulations of {} requests ({} unique rows) in {:.2} s",
        results.len(),
        keys.len(),
        n,
        secs
    );
    if let Some(dir) = &plot {
        std::fs::create_dir_all(dir).map_err(|e| data(format!("--plot {}: {e}", dir.display())))?;
        let series: Vec<(String, Vec<(f64, f64)>)> = sims
            .iter()
            .map(|s| {
                let pts = results
                    .iter()
                    .filter(|r| r.0 == *s)
                    .map(|r| (r.1 as f64, r.2.miss_ratio()))
                    .collect();
                (s.name().to_string(), pts)
            })
            .collect();
        let path = dir.join("mrc.svg");
        plot::mrc_lines(
            &path,
            &format!("Miss-ratio curves: {}", input.trace.display()),
            &series,
        )
        .map_err(|e| data(format!("--plot {}: {e}", path.display())))?;
        eprintln!("{}: written", path.display());
    }
    let mut o = String::new();
    if json {
        let v: Vec<serde_json::Value> = results
            .iter()
            .map(|(s, z, r)| {
                serde_json::json!({
                    "policy": s.name(), "size": z, "miss_ratio": r.miss_ratio(),
                    "hits": r.hits, "misses": r.misses,
                })
            })
            .collect();
        o = serde_json::to_string_pretty(&serde_json::json!({ "results": v })).map_err(data)?;
        o.push('\n');
    } else if csv {
        o.push_str("policy,size,miss_ratio,hits,misses\n");
        for (s, z, r) in &results {
            let _ = writeln!(
                o,
                "{},{},{:.6},{},{}",
                s.name(),
                z,
                r.miss_ratio(),
                r.hits,
                r.misses
            );
        }
    } else {
        miss_ratio_table(
            &mut o,
            &sims,
            &sizes,
            |z| z.to_string(),
            |s, z| {
                let r = results.iter().find(|r| r.0 == s && r.1 == z);
                r.expect("simulated").2.miss_ratio()
            },
        );
        let _ = writeln!(
            o,
            "\nmiss ratios; sizes in rows; {} requests, {} unique rows",
            keys.len(),
            n
        );
    }
    emit(&o)
}

/// `emb-replay run`: the trace against the real store.
fn replay_store(a: RunArgs) -> Result<(), Fail> {
    let RunArgs {
        input,
        config,
        dir,
        update_ratio,
        engine,
        seed,
        json,
    } = a;
    let text =
        std::fs::read_to_string(&config).map_err(|e| data(format!("{}: {e}", config.display())))?;
    let mut cfg = embtier::StoreConfig::from_toml(&text)
        .map_err(|e| data(format!("{}: {e}", config.display())))?;
    let t = load(&input)?;
    if cfg.tables.is_empty() {
        for tt in &t.tables {
            let dim = if tt.dim > 0 {
                tt.dim
            } else {
                (row_bytes_of(tt, 256) / 4).max(1) as u32
            };
            cfg.tables.push(embtier::TableConfig::new(
                tt.name.clone(),
                tt.rows.max(1),
                dim,
            ));
        }
    }
    for tt in &t.tables {
        match cfg.tables.iter().find(|c| c.name == tt.name) {
            Some(c) if c.rows >= tt.rows => {}
            Some(c) => {
                return Err(data(format!(
                    "{}: table {:?} has {} rows, the trace needs {}",
                    config.display(),
                    c.name,
                    c.rows,
                    tt.rows
                )))
            }
            None => {
                return Err(data(format!(
                    "{}: no table {:?} for the trace",
                    config.display(),
                    tt.name
                )))
            }
        }
    }
    if let Some(e) = engine {
        cfg.ssd.io_engine = e;
    }
    let tmp = tempfile::tempdir().map_err(data)?;
    let path = dir.unwrap_or_else(|| tmp.path().join("store"));
    let store = embtier::Store::create(&path, cfg).map_err(data)?;
    let bar = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let b = indicatif::ProgressBar::new(t.batch_ends.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} batches {eta}")
                .map_err(data)?,
        );
        Some(b)
    } else {
        None
    };
    let r = run_store(&store, &t, update_ratio, seed, |done, _| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    })
    .map_err(data)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let o = if json {
        let mut o = serde_json::to_string_pretty(&r).map_err(data)?;
        o.push('\n');
        o
    } else {
        format!(
                    "{} accesses in {} batches, {:.2} s: {:.0} rows/s ({})\nbatch latency p50 {:.0} us, p99 {:.0} us, p99.9 {:.0} us\nDRAM hit ratio {:.4} ({} hits), PMem hit ratio {:.4} ({} hits)\nSSD: {} rows read in {} reads ({:.1} MiB), {} rows written in {} writes ({:.1} MiB)\n",
                    r.accesses,
                    r.batches,
                    r.seconds,
                    r.rows_per_s,
                    r.io_engine,
                    r.batch_p50_us,
                    r.batch_p99_us,
                    r.batch_p999_us,
                    r.dram_hit_ratio,
                    r.dram_hits,
                    r.pmem_hit_ratio,
                    r.pmem_hits,
                    r.ssd_rows_read,
                    r.ssd_read_ops,
                    r.ssd_bytes_read as f64 / (1 << 20) as f64,
                    r.ssd_rows_written,
                    r.ssd_write_ops,
                    r.ssd_bytes_written as f64 / (1 << 20) as f64
                ) + &if r.writeback_errors > 0 || r.pending_rows > 0 {
                    format!(
                        "WARNING: {} write-backs failed during the replay; {} rows are held only in memory, waiting for a write-back (not durable)\n",
                        r.writeback_errors, r.pending_rows
                    )
                } else {
                    String::new()
                }
    };
    emit(&o)
}

fn demo() -> Result<(), Fail> {
    use embtier_sim::trace::gen::{GenSpec, GenTable};
    let spec = GenSpec {
        seed: 7,
        batches: 200,
        batch_size: 512,
        tables: vec![
            GenTable {
                name: "user".into(),
                rows: 2_000_000,
                dim: 32,
                pooling: 1.0,
                alpha: 1.05,
                drift: 0.0,
            },
            GenTable {
                name: "item".into(),
                rows: 500_000,
                dim: 32,
                pooling: 8.0,
                alpha: 0.9,
                drift: 0.0005,
            },
            GenTable {
                name: "country".into(),
                rows: 200,
                dim: 32,
                pooling: 1.0,
                alpha: 0.6,
                drift: 0.0,
            },
        ],
    };
    let t = spec.generate();
    let mut o = String::new();
    let _ = writeln!(
        o,
        "embedded workload: 3 tables (2M users Zipf 1.05; 500k items, pooling 8, Zipf 0.9, drifting; 200 countries), {} batches of 512 samples, {} accesses\n",
        t.batch_ends.len(),
        t.accesses.len()
    );
    // 1. Single-tier sweep.
    let keys: Vec<u64> = t.accesses.iter().map(|a| a.key()).collect();
    let (dense, n) = densify(&keys);
    let sims = [
        SimPolicy::Online(PolicyKind::Lru),
        SimPolicy::Online(PolicyKind::Clock),
        SimPolicy::Online(PolicyKind::Arc),
        SimPolicy::Online(PolicyKind::S3Fifo),
        SimPolicy::Online(PolicyKind::Sieve),
        SimPolicy::SetAssoc(SetPolicy::Lru),
        SimPolicy::Belady,
    ];
    let sizes = [1_000u64, 10_000, 50_000, 200_000];
    let jobs: Vec<(SimPolicy, u64)> = sims
        .iter()
        .flat_map(|&s| sizes.iter().map(move |&z| (s, z)))
        .collect();
    let res: Vec<(SimPolicy, u64, f64)> = jobs
        .par_iter()
        .map(|&(s, z)| (s, z, s.run(z, &keys, &dense, n).miss_ratio()))
        .collect();
    let _ = writeln!(
        o,
        "1. DRAM miss ratio by policy and size (rows of 128 bytes; {n} unique rows):\n"
    );
    let label = |z: u64| format!("{}k rows", z / 1000);
    miss_ratio_table(&mut o, &sims, &sizes, label, |s, z| {
        res.iter()
            .find(|r| r.0 == s && r.1 == z)
            .expect("simulated")
            .2
    });
    // 2. Three tiers with step-time estimates.
    let geo = RowGeometry::of(&t, 128);
    let profiles = [
        DeviceProfile::builtin("dram").expect("built-in"),
        DeviceProfile::builtin("optane-pmem").expect("built-in"),
        DeviceProfile::builtin("nand-nvme").expect("built-in"),
    ];
    let _ = writeln!(o, "\n2. Three tiers (exclusive), estimated with the dram, optane-pmem and nand-nvme profiles:\n");
    let _ = writeln!(
        o,
        "| DRAM | PMem | DRAM hits | PMem hits | SSD rows read | est. ms per batch |"
    );
    let _ = writeln!(o, "|---|---|---|---|---|---|");
    for (d, p) in [(10_000u64, 0u64), (10_000, 200_000), (50_000, 200_000)] {
        let mut tiers = vec![TierSpec {
            name: "dram".into(),
            policy: PolicyKind::Sieve,
            rows: d,
        }];
        if p > 0 {
            tiers.push(TierSpec {
                name: "pmem".into(),
                policy: PolicyKind::Lru,
                rows: p,
            });
        }
        let prof: Vec<DeviceProfile> = if p > 0 {
            profiles.to_vec()
        } else {
            vec![profiles[0], profiles[2]]
        };
        let h = Hierarchy {
            tiers,
            ssd: true,
            inclusive: false,
        };
        let r = simulate_hierarchy(&t, &h, &geo, Some(&prof));
        let _ = writeln!(
            o,
            "| {d} | {p} | {:.4} | {:.4} | {} | {:.3} |",
            r.tiers[0].hit_ratio,
            r.tiers
                .get(1)
                .map_or(0.0, |x| x.hits as f64 / r.accesses as f64),
            r.ssd.rows_read,
            r.est_seconds_per_batch * 1e3
        );
    }
    // 3. A short run against the real store.
    let tmp = tempfile::tempdir().map_err(data)?;
    let cfg = embtier::StoreConfig::builder()
        .table(embtier::TableConfig::new("user", 2_000_000, 32))
        .table(embtier::TableConfig::new("item", 500_000, 32))
        .table(
            embtier::TableConfig::new("country", 200, 32).placement(embtier::Placement::PinnedDram),
        )
        .dram_capacity(50_000 * 128)
        .dram_policy(PolicyKind::Sieve)
        .pmem(None, 200_000 * 128, PolicyKind::Lru)
        .build();
    let store = embtier::Store::create(tmp.path().join("store"), cfg).map_err(data)?;
    let r = run_store(&store, &t, 0.5, 1, |_, _| {}).map_err(data)?;
    let _ = writeln!(
        o,
        "\n3. The real store (DRAM 50k rows SIEVE, PMem 200k rows LRU, countries pinned; half the lookups also updated):\n   {:.0} rows/s with {}, batch p50 {:.0} us, p99 {:.0} us; DRAM hit ratio {:.4}, PMem {:.4}; SSD {} rows read, {} written",
        r.rows_per_s,
        r.io_engine,
        r.batch_p50_us,
        r.batch_p99_us,
        r.dram_hit_ratio,
        r.pmem_hit_ratio,
        r.ssd_rows_read,
        r.ssd_rows_written
    );
    emit(&o)
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{s:?} is not a ratio in [0, 1]")),
    }
}

/// Parse `dram:lru:64MiB,pmem:sieve:1GiB,ssd`.
fn parse_tiers(spec: &str, row_bytes: u64, unique: u64) -> Result<Hierarchy, Fail> {
    let mut h = Hierarchy {
        tiers: Vec::new(),
        ssd: false,
        inclusive: false,
    };
    let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
    for (i, part) in parts.iter().enumerate() {
        if *part == "ssd" {
            if i + 1 != parts.len() {
                return Err(usage("--tiers: ssd must be the last tier"));
            }
            h.ssd = true;
            continue;
        }
        let f: Vec<&str> = part.split(':').collect();
        if f.len() != 3 {
            return Err(usage(format!(
                "--tiers: {part:?} is not NAME:POLICY:SIZE (e.g. dram:lru:64MiB)"
            )));
        }
        let kind = f[1]
            .parse::<SimPolicy>()
            .ok()
            .and_then(SimPolicy::online)
            .ok_or_else(|| {
                usage(format!(
                    "--tiers: {:?} is not a policy a tier runs; a tier runs {}",
                    f[1],
                    PolicyKind::list(PolicyKind::ALL.iter().copied())
                ))
            })?;
        let rows = parse_sizes(&[f[2].to_string()], unique, row_bytes)?[0];
        h.tiers.push(TierSpec {
            name: f[0].to_string(),
            policy: kind,
            rows,
        });
    }
    if h.tiers.is_empty() {
        return Err(usage("--tiers: at least one cache tier"));
    }
    Ok(h)
}

fn hierarchy(
    t: &Trace,
    spec: &str,
    inclusive: bool,
    devices: &Devices,
    row_bytes: Option<u64>,
    json: bool,
) -> Result<(), Fail> {
    let geo = RowGeometry::of(t, row_bytes.unwrap_or(256));
    let keys: Vec<u64> = t.accesses.iter().map(|a| a.key()).collect();
    let (_, unique) = densify(&keys);
    let mut h = parse_tiers(
        spec,
        mean_row_bytes(t, row_bytes.unwrap_or(256)),
        unique as u64,
    )?;
    h.inclusive = inclusive;
    let names: Vec<&str> = h
        .tiers
        .iter()
        .map(|t| t.name.as_str())
        .chain(std::iter::once("ssd"))
        .collect();
    let profiles = devices.resolve(&names)?;
    let r = simulate_hierarchy(t, &h, &geo, Some(&profiles));
    let mut o = String::new();
    let to_ssd = r.ssd.rows_read;
    if json {
        let v = serde_json::json!({ "results": [{
            "policy": h.tiers[0].policy.name(),
            "size": h.tiers[0].rows,
            "miss_ratio": to_ssd as f64 / r.accesses.max(1) as f64,
            "hits": r.tiers.iter().map(|t| t.hits).sum::<u64>(),
            "misses": to_ssd,
            "inclusive": h.inclusive,
            "tiers": r.tiers,
            "ssd": r.ssd,
            "est_seconds": r.est_seconds,
            "est_seconds_per_batch": r.est_seconds_per_batch,
        }]});
        o = serde_json::to_string_pretty(&v).map_err(data)?;
        o.push('\n');
    } else {
        let _ = writeln!(
            o,
            "{} hierarchy, {} accesses in {} batches, {} unique rows\n",
            if h.inclusive {
                "inclusive"
            } else {
                "exclusive"
            },
            r.accesses,
            r.batches,
            unique
        );
        let _ = writeln!(o, "| tier | policy | rows | lookups | hits | hit ratio | MiB read | MiB written | evictions | dirty write-backs |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|");
        for tr in &r.tiers {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {:.4} | {:.1} | {:.1} | {} | {} |",
                tr.name,
                tr.policy,
                tr.rows,
                tr.lookups,
                tr.hits,
                tr.hit_ratio,
                tr.bytes_read as f64 / (1 << 20) as f64,
                tr.bytes_written as f64 / (1 << 20) as f64,
                tr.evictions,
                tr.dirty_writebacks
            );
        }
        let s = &r.ssd;
        let _ = writeln!(
            o,
            "| ssd | - | all | {} rows read | - | - | {:.1} ({} block reads) | {:.1} ({} block writes, {} rows) | - | - |",
            s.rows_read,
            s.bytes_read as f64 / (1 << 20) as f64,
            s.read_ops,
            s.bytes_written as f64 / (1 << 20) as f64,
            s.write_ops,
            s.rows_written
        );
        let _ = writeln!(
            o,
            "\nestimated time: {:.3} ms per batch, {:.2} s for the trace (profiles: {})",
            r.est_seconds_per_batch * 1e3,
            r.est_seconds,
            h.tiers
                .iter()
                .map(|t| t.name.as_str())
                .chain(std::iter::once("ssd"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    emit(&o)
}

fn main() -> ExitCode {
    main_with("emb-replay", run)
}

/// A markdown table of miss ratios: a row per policy, a column per cache
/// size (headed by `label`).
fn miss_ratio_table(
    o: &mut String,
    sims: &[SimPolicy],
    sizes: &[u64],
    label: impl Fn(u64) -> String,
    ratio: impl Fn(SimPolicy, u64) -> f64,
) {
    let _ = write!(o, "| policy |");
    for &z in sizes {
        let _ = write!(o, " {} |", label(z));
    }
    o.push_str("\n|---|");
    for _ in sizes {
        o.push_str("---|");
    }
    o.push('\n');
    for &s in sims {
        let _ = write!(o, "| {} |", s.name());
        for &z in sizes {
            let _ = write!(o, " {:.4} |", ratio(s, z));
        }
        o.push('\n');
    }
}
