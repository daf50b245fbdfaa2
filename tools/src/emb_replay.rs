//! `emb-replay`: replay embedding access traces through eviction policies.
//!
//! A thin shell over `embtier_sim`: its simulated caches run the store's
//! own policy code (`embtier::policy`). Errors are one line naming the
//! file, record or argument; exit status 2 for usage, 1 for data.

#![forbid(unsafe_code)]
// The doc comments of the command-line arguments are clap's --help text,
// where `[dram]` or `id=COL[,header=yes|no]` are literal, not links.
#![allow(rustdoc::broken_intra_doc_links)]

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use embtier::PolicyKind;
use embtier_sim::calibrate::calibrate;
use embtier_sim::policy::Sweep;
use embtier_sim::profile::{profiles_toml, DeviceProfile};
use embtier_sim::replay::{
    run_store, simulate_hierarchy, Hierarchy, HierarchyReport, RowGeometry, RunReport, TierSpec,
};
use embtier_sim::table::Table;
use embtier_sim::trace::gen::{GenSpec, GenTable};
use embtier_sim::trace::{row_bytes_of, Trace};
use embtier_sim::{SimPolicy, SimResult};
use embtier_tools::cli::{
    check_sizes, data, emit, load, main_with, mean_row_bytes, parse_rate, parse_sizes, usage,
    Devices, Fail, Input, Output, DEFAULT_ROW_BYTES,
};
use embtier_tools::plot;
use rayon::prelude::*;

#[derive(Parser)]
#[command(
    name = "emb-replay",
    version,
    about = "Replay embedding access traces through eviction policies: simulated caches, tier hierarchies, or the real store",
    after_help = "Policies (case, '-' and '_' ignored): lru, fifo, clock, lfu, 2q, slru, arc, wtinylfu, s3fifo, sieve, belady, lru-32way, lfu-32way; the store's tiers run lru, fifo, clock, lfu, arc, s3fifo and sieve.\nDevice profiles: dram, optane-pmem, optane-ssd, nand-nvme, or a file from `emb-replay calibrate`.\nGuide: docs/replay.md."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Built once per process by clap; boxing the large variant buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Simulate caches: every policy at every size, in parallel (a sweep),
    /// or a hierarchy of tiers above an SSD (--tiers).
    Simulate(SimulateArgs),
    /// Replay a trace against the real store on real files.
    Run(RunArgs),
    /// A self-contained tour on an embedded workload: a policy x size sweep,
    /// a three-tier simulation with estimated step times, and a short run
    /// against the real store in a temp dir.
    Demo,
    /// Measure this machine's DRAM, PMem (a file mapped from DIR) and SSD
    /// (a file in DIR, O_DIRECT); print the figures and write
    /// DIR/profile.toml, the device profile every tool reads.
    Calibrate(CalibrateArgs),
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
    /// Simulate a spatial sample of the keys at this rate in (0, 1], with
    /// caches scaled by it (a miniature simulation, SHARDS-adjusted).
    #[arg(long, value_parser = parse_rate)]
    sample: Option<f64>,
    #[command(flatten)]
    output: Output,
    /// Write mrc.svg (one line per policy) into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// A tier hierarchy instead of a sweep, e.g.
    /// dram:lru:64MiB,pmem:sieve:1GiB,ssd (sizes in rows or bytes; a tier
    /// runs lru, fifo, clock, lfu, 2q, slru, arc, wtinylfu, s3fifo or sieve).
    #[arg(long, conflicts_with_all = ["sample", "plot", "policies", "sizes"])]
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
    /// The store.toml to create the store from: its tiers, and its tables
    /// (optional: by default one per trace table).
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
    /// Bytes per row of the tables made from the trace where it does not
    /// say (default 256, f32 weights: dim = row bytes / 4).
    #[arg(long, value_parser = clap::value_parser!(u64).range(4..))]
    row_bytes: Option<u64>,
    #[command(flatten)]
    output: Output,
}

/// The options of `calibrate`.
#[derive(clap::Args)]
struct CalibrateArgs {
    /// Directory on the devices to measure (PMem: a DAX mount).
    dir: PathBuf,
    /// MiB of buffers and files per device (at least 16).
    #[arg(long, default_value_t = 512)]
    mib: usize,
    #[command(flatten)]
    output: Output,
}

fn run(cli: Cli) -> Result<(), Fail> {
    match cli.cmd {
        Cmd::Simulate(a) => simulate(a),
        Cmd::Run(a) => replay_store(a),
        Cmd::Demo => demo(),
        Cmd::Calibrate(a) => calibrate_cmd(a),
    }
}

fn main() -> ExitCode {
    main_with("emb-replay", run)
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{s:?} is not a ratio in [0, 1]")),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

/// `emb-replay calibrate`: measure, print the figures, write the profile.
fn calibrate_cmd(a: CalibrateArgs) -> Result<(), Fail> {
    let CalibrateArgs { dir, mib, output } = a;
    std::fs::create_dir_all(&dir).map_err(|e| data(format!("{}: {e}", dir.display())))?;
    eprintln!(
        "measuring DRAM, PMem (a file mapped from {0}) and SSD (a file in {0}) with {mib} MiB each ...",
        dir.display()
    );
    let c = calibrate(&dir, mib).map_err(data)?;
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
    let path = dir.join("profile.toml");
    let header = format!(
        "measured by emb-replay calibrate in {} ({mib} MiB per device)\npmem: {on}\nlatency: one access alone; IOPS: random accesses (256-byte rows; 4 KiB at queue depth 64)\nparallelism: IOPS x latency; GB/s: 10^9 bytes per second, sequential",
        dir.display()
    );
    std::fs::write(&path, profiles_toml(&c.profiles, &header))
        .map_err(|e| data(format!("{}: {e}", path.display())))?;
    eprintln!(
        "{}: written (read by emb-replay simulate --profile and emb-locality plan --profile)",
        path.display()
    );
    if output.json {
        let mut o = serde_json::to_string_pretty(&c.profiles).map_err(data)?;
        o.push('\n');
        return emit(&o);
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
    let ssd_on = format!(
        "a file, {} engine, {}",
        c.ssd_engine,
        if c.ssd_direct { "O_DIRECT" } else { "buffered" }
    );
    for (name, where_) in [
        ("dram", "a heap buffer".to_string()),
        ("pmem", format!("a mapped file on {on}")),
        ("ssd", ssd_on),
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
    let mut o = t.render(output.csv);
    if !output.csv {
        o.push_str("\nlatency: one access with nothing else in flight; IOPS: random accesses (256-byte row copies; 4 KiB reads at queue depth 64); parallelism: IOPS x latency; GB/s: 10^9 bytes per second, sequential\n");
    }
    emit(&o)
}

/// `emb-replay simulate`: a policy x size sweep, or a tier hierarchy.
fn simulate(a: SimulateArgs) -> Result<(), Fail> {
    let row_bytes = a.row_bytes.unwrap_or(DEFAULT_ROW_BYTES);
    if let Some(spec) = &a.tiers {
        let t = load(&a.input)?;
        return hierarchy(&t, spec, a.inclusive, &a.devices, row_bytes, a.output);
    }
    let mut sims: Vec<SimPolicy> = Vec::new();
    for p in &a.policies {
        let p: SimPolicy = p.parse().map_err(|e| usage(format!("--policies: {e}")))?;
        if !sims.contains(&p) {
            sims.push(p); // `lru,LRU` is one policy
        }
    }
    check_sizes(&a.sizes)?;
    let t = load(&a.input)?;
    // One id space over (table, row); dense once, no hashing per request after.
    let keys: Vec<u64> = t.accesses.iter().map(|a| a.key()).collect();
    let requests = keys.len();
    let sweep = Sweep::new(keys, a.sample);
    let unique = (sweep.unique() as f64 / sweep.rate()).round() as u64;
    let sizes = parse_sizes(&a.sizes, unique, mean_row_bytes(&t, row_bytes))?;
    let jobs: Vec<(SimPolicy, u64)> = sims
        .iter()
        .flat_map(|&s| sizes.iter().map(move |&z| (s, z)))
        .collect();
    let start = std::time::Instant::now();
    let results: Vec<(SimPolicy, u64, SimResult)> = jobs
        .par_iter()
        .map(|&(s, z)| (s, z, sweep.run(s, z)))
        .collect();
    let sampled = if sweep.rate() < 1.0 {
        format!(
            "; a spatial sample at rate {}: {} requests of {} keys, caches scaled by the rate",
            sweep.rate(),
            sweep.requests(),
            sweep.unique()
        )
    } else {
        String::new()
    };
    eprintln!(
        "{} simulations of {requests} requests ({unique} unique rows{sampled}) in {:.2} s",
        results.len(),
        start.elapsed().as_secs_f64()
    );
    let get = |s: SimPolicy, z: u64| {
        results
            .iter()
            .find(|r| r.0 == s && r.1 == z)
            .expect("simulated")
            .2
    };
    if let Some(dir) = &a.plot {
        std::fs::create_dir_all(dir).map_err(|e| data(format!("--plot {}: {e}", dir.display())))?;
        let series: Vec<(String, Vec<(f64, f64)>)> = sims
            .iter()
            .map(|&s| {
                let pts = sizes
                    .iter()
                    .map(|&z| (z as f64, get(s, z).miss_ratio()))
                    .collect();
                (s.name().to_string(), pts)
            })
            .collect();
        let path = dir.join("mrc.svg");
        plot::mrc_lines(
            &path,
            &format!("Miss-ratio curves by policy: {}", a.input.trace.display()),
            &series,
        )
        .map_err(|e| data(format!("--plot {}: {e}", path.display())))?;
        eprintln!("{}: written", path.display());
    }
    let o = if a.output.json {
        let v: Vec<serde_json::Value> = results
            .iter()
            .map(|(s, z, r)| {
                serde_json::json!({
                    "policy": s.name(), "size": z, "miss_ratio": r.miss_ratio(),
                    "hits": r.hits, "misses": r.misses,
                })
            })
            .collect();
        let mut o = serde_json::to_string_pretty(&serde_json::json!({
            "results": v, "requests": requests, "unique_rows": unique, "sample_rate": sweep.rate(),
        }))
        .map_err(data)?;
        o.push('\n');
        o
    } else if a.output.csv {
        let mut t = Table::new(["policy", "size", "miss_ratio", "hits", "misses"]);
        for (s, z, r) in &results {
            t.row([
                s.name().to_string(),
                z.to_string(),
                format!("{:.6}", r.miss_ratio()),
                r.hits.to_string(),
                r.misses.to_string(),
            ]);
        }
        t.csv()
    } else {
        let mut o = miss_ratio_table(
            &sims,
            &sizes,
            |z| z.to_string(),
            |s, z| get(s, z).miss_ratio(),
        );
        let _ = writeln!(
            o,
            "\nmiss ratios (misses / requests); sizes in rows; {requests} requests, {unique} unique rows{sampled}"
        );
        o
    };
    emit(&o)
}

/// A markdown table of miss ratios: a row per policy, a column per cache
/// size (headed by `label`).
fn miss_ratio_table(
    sims: &[SimPolicy],
    sizes: &[u64],
    label: impl Fn(u64) -> String,
    ratio: impl Fn(SimPolicy, u64) -> f64,
) -> String {
    let mut t =
        Table::new(std::iter::once("policy".to_string()).chain(sizes.iter().map(|&z| label(z))));
    for &s in sims {
        t.row(
            std::iter::once(s.name().to_string())
                .chain(sizes.iter().map(|&z| format!("{:.4}", ratio(s, z)))),
        );
    }
    t.markdown()
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
        let memory = f[0]
            .parse::<embtier::MemoryKind>()
            .map_err(|e| usage(format!("--tiers: {e}")))?;
        h.tiers.push(TierSpec {
            kind: memory,
            policy: kind,
            rows,
        });
    }
    if h.tiers.is_empty() {
        return Err(usage("--tiers: at least one cache tier"));
    }
    Ok(h)
}

/// The table of a hierarchy simulation: a row per tier, then the SSD.
fn hierarchy_table(r: &HierarchyReport) -> Table {
    let mut t = Table::new([
        "tier",
        "policy",
        "rows",
        "lookups",
        "hits",
        "hit ratio",
        "share of requests",
        "MiB read",
        "MiB written",
        "evictions",
        "dirty write-backs",
    ]);
    for tr in &r.tiers {
        t.row([
            tr.name.clone(),
            tr.policy.clone(),
            tr.rows.to_string(),
            tr.lookups.to_string(),
            tr.hits.to_string(),
            format!("{:.4}", tr.hit_ratio),
            format!("{:.4}", tr.request_share),
            mib(tr.bytes_read),
            mib(tr.bytes_written),
            tr.evictions.to_string(),
            tr.dirty_writebacks.to_string(),
        ]);
    }
    let s = &r.ssd;
    t.row([
        "ssd".to_string(),
        "-".into(),
        "all".into(),
        format!("{} rows read", s.rows_read),
        "-".into(),
        "-".into(),
        "-".into(),
        format!("{} ({} block reads)", mib(s.bytes_read), s.read_ops),
        format!(
            "{} ({} block writes, {} rows)",
            mib(s.bytes_written),
            s.write_ops,
            s.rows_written
        ),
        "-".into(),
        "-".into(),
    ]);
    t
}

/// What "hit ratio" and "share of requests" mean, printed under tables.
const SHARES: &str = "hit ratio: a tier's hits over the requests that reached it; share of requests: its hits over all row requests (every row a lookup asks for, and every row an update asks for once per batch)";

fn hierarchy(
    t: &Trace,
    spec: &str,
    inclusive: bool,
    devices: &Devices,
    row_bytes: u64,
    output: Output,
) -> Result<(), Fail> {
    let geo = RowGeometry::of(t, row_bytes);
    let keys: Vec<u64> = t.accesses.iter().map(|a| a.key()).collect();
    let (_, unique) = embtier_sim::densify(&keys);
    let mut h = parse_tiers(spec, mean_row_bytes(t, row_bytes), unique as u64)?;
    h.inclusive = inclusive;
    let names: Vec<&str> = h
        .tiers
        .iter()
        .map(|t| t.kind.name())
        .chain(std::iter::once("ssd"))
        .collect();
    let profiles = devices.resolve(&names)?;
    let r = simulate_hierarchy(t, &h, &geo, Some(&profiles));
    let to_ssd = r.ssd.rows_read;
    if output.json {
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
        let mut o = serde_json::to_string_pretty(&v).map_err(data)?;
        o.push('\n');
        return emit(&o);
    }
    let table = hierarchy_table(&r);
    if output.csv {
        return emit(&table.csv());
    }
    let mut o = String::new();
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
    o.push_str(&table.markdown());
    let _ = writeln!(
        o,
        "\n{SHARES}\nestimated time: {:.3} ms per batch, {:.2} s for the trace (device profiles of {})",
        r.est_seconds_per_batch * 1e3,
        r.est_seconds,
        names.join(", ")
    );
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
        row_bytes,
        output,
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
                (row_bytes_of(tt, row_bytes.unwrap_or(DEFAULT_ROW_BYTES)) / 4).max(1) as u32
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
    let first_of = |k: embtier::MemoryKind| cfg.tiers.iter().find(|t| t.kind == k);
    let policies = (
        first_of(embtier::MemoryKind::Dram).map_or("none", |t| t.policy.name()),
        first_of(embtier::MemoryKind::Pmem).map(|t| t.policy.name()),
    );
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
    if r.writeback_errors > 0 || r.pending_rows > 0 {
        eprintln!(
            "WARNING: {} write-backs failed during the replay; {} rows are held only in memory, waiting for a write-back (not durable)",
            r.writeback_errors, r.pending_rows
        );
    }
    if output.json {
        let mut o = serde_json::to_string_pretty(&r).map_err(data)?;
        o.push('\n');
        return emit(&o);
    }
    let table = run_table(&r, policies.0, policies.1);
    if output.csv {
        return emit(&table.csv());
    }
    let mut o = format!(
        "{} accesses in {} batches: {} row requests ({} of them updates), {:.2} s, {:.0} accesses/s, {} engine\nbatch latency: p50 {:.0} us, p99 {:.0} us, p99.9 {:.0} us\n\n",
        r.accesses,
        r.batches,
        r.requests,
        r.updates,
        r.seconds,
        r.rows_per_s,
        r.io_engine,
        r.batch_p50_us,
        r.batch_p99_us,
        r.batch_p999_us,
    );
    o.push_str(&table.markdown());
    let _ = writeln!(
        o,
        "\nSSD: {} rows read in {} reads ({} MiB), {} rows written in {} writes ({} MiB)\n{SHARES}",
        r.ssd_rows_read,
        r.ssd_read_ops,
        mib(r.ssd_bytes_read),
        r.ssd_rows_written,
        r.ssd_write_ops,
        mib(r.ssd_bytes_written)
    );
    emit(&o)
}

/// The tiers of a store run: hits, hit ratio and share of requests; PMem
/// only where the store has it.
fn run_table(r: &RunReport, dram: &str, pmem: Option<&str>) -> Table {
    let mut t = Table::new(["tier", "policy", "hits", "hit ratio", "share of requests"]);
    t.row([
        "dram".to_string(),
        dram.to_string(),
        r.dram_hits.to_string(),
        format!("{:.4}", r.dram_hit_ratio),
        format!("{:.4}", r.dram_share),
    ]);
    if let Some(p) = pmem {
        t.row([
            "pmem".to_string(),
            p.to_string(),
            r.pmem_hits.to_string(),
            format!("{:.4}", r.pmem_hit_ratio),
            format!("{:.4}", r.pmem_share),
        ]);
    }
    t.row([
        "ssd (missed every cache)".to_string(),
        "-".into(),
        format!("{} rows read", r.ssd_rows_read),
        "-".into(),
        format!("{:.4}", r.miss_share),
    ]);
    t
}

fn demo() -> Result<(), Fail> {
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
        "embedded workload: 3 tables (2M users Zipf 1.05; 500k items, pooling 8, Zipf 0.9, drifting; 200 countries), {} batches of 512 samples, {} accesses, rows of 128 bytes (dim 32, f32)\n",
        t.batch_ends.len(),
        t.accesses.len()
    );
    // 1. Single-tier sweep.
    let keys: Vec<u64> = t.accesses.iter().map(|a| a.key()).collect();
    let sweep = Sweep::new(keys, None);
    let sims = [
        SimPolicy::Online(PolicyKind::Lru),
        SimPolicy::Online(PolicyKind::Clock),
        SimPolicy::Online(PolicyKind::Arc),
        SimPolicy::Online(PolicyKind::S3Fifo),
        SimPolicy::Online(PolicyKind::Sieve),
        SimPolicy::SetAssoc(embtier_sim::offline::SetPolicy::Lru),
        SimPolicy::Belady,
    ];
    let sizes = [1_000u64, 10_000, 50_000, 200_000];
    let jobs: Vec<(SimPolicy, u64)> = sims
        .iter()
        .flat_map(|&s| sizes.iter().map(move |&z| (s, z)))
        .collect();
    let res: Vec<(SimPolicy, u64, f64)> = jobs
        .par_iter()
        .map(|&(s, z)| (s, z, sweep.run(s, z).miss_ratio()))
        .collect();
    let _ = writeln!(
        o,
        "1. DRAM miss ratio (misses / requests) by policy and DRAM size in rows ({} unique rows):\n",
        sweep.unique()
    );
    o.push_str(&miss_ratio_table(
        &sims,
        &sizes,
        |z| format!("{}k rows", z / 1000),
        |s, z| {
            res.iter()
                .find(|r| r.0 == s && r.1 == z)
                .expect("simulated")
                .2
        },
    ));
    // 2. Three tiers with step-time estimates.
    let geo = RowGeometry::of(&t, 128);
    let dev = |n: &str| DeviceProfile::builtin(n).expect("built-in");
    let _ = writeln!(o, "\n2. Three tiers (exclusive: DRAM SIEVE above PMem LRU above SSD), estimated with the dram, optane-pmem and nand-nvme profiles; shares are of all row requests:\n");
    let mut tab = Table::new([
        "DRAM rows (SIEVE)",
        "PMem rows (LRU)",
        "DRAM share",
        "PMem share",
        "SSD rows read",
        "est. ms per batch",
    ]);
    for (d, p) in [(10_000u64, 0u64), (10_000, 200_000), (50_000, 200_000)] {
        let mut tiers = vec![TierSpec {
            kind: embtier::MemoryKind::Dram,
            policy: PolicyKind::Sieve,
            rows: d,
        }];
        let mut prof = vec![dev("dram")];
        if p > 0 {
            tiers.push(TierSpec {
                kind: embtier::MemoryKind::Pmem,
                policy: PolicyKind::Lru,
                rows: p,
            });
            prof.push(dev("optane-pmem"));
        }
        prof.push(dev("nand-nvme"));
        let h = Hierarchy {
            tiers,
            ssd: true,
            inclusive: false,
        };
        let r = simulate_hierarchy(&t, &h, &geo, Some(&prof));
        tab.row([
            d.to_string(),
            if p > 0 { p.to_string() } else { "none".into() },
            format!("{:.4}", r.tiers[0].request_share),
            r.tiers
                .get(1)
                .map_or("-".to_string(), |x| format!("{:.4}", x.request_share)),
            r.ssd.rows_read.to_string(),
            format!("{:.3}", r.est_seconds_per_batch * 1e3),
        ]);
    }
    o.push_str(&tab.markdown());
    // 3. A short run against the real store.
    let tmp = tempfile::tempdir().map_err(data)?;
    let cfg = embtier::StoreConfig::builder()
        .table(embtier::TableConfig::new("user", 2_000_000, 32))
        .table(embtier::TableConfig::new("item", 500_000, 32))
        .table(
            embtier::TableConfig::new("country", 200, 32)
                .placement(embtier::Placement::Pinned(embtier::MemoryKind::Dram)),
        )
        .dram_capacity(50_000 * 128)
        .dram_policy(PolicyKind::Sieve)
        .pmem(None, 200_000 * 128, PolicyKind::Lru)
        .build();
    let store = embtier::Store::create(tmp.path().join("store"), cfg).map_err(data)?;
    let r = run_store(&store, &t, 0.5, 1, |_, _| {}).map_err(data)?;
    let _ = writeln!(
        o,
        "\n3. The real store (DRAM 50k rows SIEVE, PMem 200k rows LRU, countries pinned to DRAM; half the lookups also updated): {:.0} accesses/s with the {} engine, batch p50 {:.0} us, p99 {:.0} us; {} row requests, SSD {} rows read, {} written:\n",
        r.rows_per_s,
        r.io_engine,
        r.batch_p50_us,
        r.batch_p99_us,
        r.requests,
        r.ssd_rows_read,
        r.ssd_rows_written
    );
    o.push_str(&run_table(&r, "sieve", Some("lru")).markdown());
    let _ = writeln!(o, "\n{SHARES}");
    emit(&o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_parse_and_refuse_offline_policies() {
        let h = parse_tiers("dram:S3-FIFO:100,pmem:twoq:1KiB,ssd", 256, 10_000).unwrap();
        assert_eq!(h.tiers[0].policy, PolicyKind::S3Fifo);
        assert_eq!((h.tiers[1].policy, h.tiers[1].rows), (PolicyKind::TwoQ, 4));
        assert!(h.ssd);
        let Err(Fail(2, e)) = parse_tiers("dram:belady:10", 256, 100) else {
            panic!()
        };
        assert!(
            e.ends_with(
                "a tier runs lru, fifo, clock, lfu, 2q, slru, arc, wtinylfu, s3fifo, sieve"
            ),
            "{e}"
        );
    }

    #[test]
    fn sizes_read_rows_bytes_and_auto() {
        let s = |v: &[&str]| {
            parse_sizes(
                &v.iter().map(|x| x.to_string()).collect::<Vec<_>>(),
                1000,
                100,
            )
        };
        assert_eq!(s(&["10", "1KiB"]).unwrap(), vec![10, 10]);
        let auto = s(&["auto"]).unwrap();
        assert!(
            auto.len() > 10 && auto.windows(2).all(|w| w[0] < w[1]),
            "{auto:?}"
        );
        assert_eq!(auto.last(), Some(&1000));
        assert!(s(&["0"]).is_err());
        assert!(s(&["12 parsecs"]).is_err());
    }
}
