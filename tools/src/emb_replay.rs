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
use embtier_sim::minisim::{MiniPoint, MiniSim, DEFAULT_MIN_OBJECTS};
use embtier_sim::profile::{profiles_toml, DeviceProfile};
use embtier_sim::replay::{
    run_store, simulate_hierarchy, Hierarchy, HierarchyReport, RowGeometry, RunReport, TierSpec,
};
use embtier_sim::table::Table;
use embtier_sim::trace::gen::{GenSpec, GenTable};
use embtier_sim::trace::{row_bytes_of, Trace};
use embtier_sim::{SimPolicy, SimResult};
use embtier_tools::cli::{
    check_sizes, data, emit, load, load_keys, main_with, mean_row_bytes, mean_row_bytes_by_table,
    parse_f32_row_bytes, parse_rate, parse_sizes, usage, Devices, Fail, Input, Keys, Output,
    DEFAULT_ROW_BYTES,
};
use embtier_tools::plot;
use rayon::prelude::*;

#[path = "emb_replay/demo.rs"]
mod demo;
#[path = "emb_replay/run.rs"]
mod run;
#[path = "emb_replay/simulate.rs"]
mod simulate;

use demo::*;
use run::*;
use simulate::*;

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
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "auto",
        alias = "mrc-sizes"
    )]
    sizes: Vec<String>,
    /// Bytes per row where the trace does not say (default 256).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    row_bytes: Option<u64>,
    /// Simulate a spatial sample of the keys at this rate in (0, 1], with
    /// caches scaled by it (a miniature simulation, SHARDS-adjusted and
    /// corrected by LRU's error on the same sample; docs/replay.md).
    #[arg(long, value_parser = parse_rate)]
    sample: Option<f64>,
    /// With --sample: sizes whose scaled cache would hold fewer objects
    /// than this run at a larger rate (rate x 2^k, up to the full trace).
    #[arg(long, default_value_t = DEFAULT_MIN_OBJECTS, requires = "sample")]
    min_objects: u64,
    /// With --sample: skip the exact LRU pass over the full trace that
    /// corrects the sampled estimates (faster, less accurate).
    #[arg(long, requires = "sample")]
    no_lru_reference: bool,
    #[command(flatten)]
    output: Output,
    /// Write policy_mrc.svg (one line per policy) into this directory.
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
    /// say (default 256, f32 weights: dim = row bytes / 4, so a multiple
    /// of 4).
    #[arg(long, value_parser = parse_f32_row_bytes)]
    row_bytes: Option<u64>,
    #[command(flatten)]
    output: Output,
}

/// The options of `calibrate`.
#[derive(clap::Args)]
struct CalibrateArgs {
    /// Directory on the devices to measure (PMem: a DAX mount).
    dir: PathBuf,
    /// MiB of buffers and files per device: at least 16, at most half
    /// the memory available (a DRAM buffer of that size is held) and
    /// 512 GiB [default: 512, or half the memory available where that
    /// is less]
    #[arg(long, value_parser = parse_mib)]
    mib: Option<usize>,
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

/// Large arrays on transparent huge pages where a command turns it on
/// (the held trace and its ids and records): a fault and a TLB entry per
/// 2 MiB, not per 4 KiB (`docs/benchmarks.md`, "2026-11-28: huge pages
/// for the tools").
#[global_allocator]
static ALLOC: embtier::memory::HugePageAlloc = embtier::memory::HugePageAlloc;

fn main() -> ExitCode {
    main_with("emb-replay", run)
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{s:?} is not a ratio in [0, 1]")),
    }
}

/// The fewest MiB `calibrate --mib` takes.
const MIN_MIB: usize = 16;

/// The most MiB `calibrate --mib` takes on any machine (512 GiB: its
/// pointer chase numbers 256-byte rows with u32s, and no machine it runs
/// on holds much more).
const MAX_MIB: usize = 512 << 10;

/// MiB of memory available (`MemAvailable` of `/proc/meminfo`), if known.
fn available_mib() -> Option<usize> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: usize = m
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib >> 10)
}

/// `calibrate --mib`: at least [`MIN_MIB`], at most [`MAX_MIB`] and half
/// the memory available (calibrate holds a DRAM buffer of that size, and
/// its mapped file as much again in the page cache).
fn parse_mib(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number of MiB"))?;
    if n < MIN_MIB {
        return Err(format!(
            "{n} MiB is too small: calibrate measures at least {MIN_MIB} MiB per device"
        ));
    }
    let (most, why) = match available_mib() {
        Some(a) if a / 2 < MAX_MIB => (
            (a / 2).max(MIN_MIB),
            format!("half of the {a} MiB of memory available: calibrate holds a DRAM buffer of that size"),
        ),
        _ => (MAX_MIB, "512 GiB".to_string()),
    };
    if n > most {
        return Err(format!("{n} MiB is more than {why}; use at most {most}"));
    }
    Ok(n)
}

/// The `--mib` of a `calibrate` that names none: 512, or half the memory
/// available where that is less; an error where even [`MIN_MIB`] is more.
fn default_mib(available: Option<usize>) -> Result<usize, Fail> {
    match available {
        Some(a) if a / 2 < MIN_MIB => Err(data(format!(
            "only {a} MiB of memory available: calibrate needs twice {MIN_MIB} MiB (a DRAM buffer and a mapped file of --mib MiB each)"
        ))),
        Some(a) => Ok((a / 2).min(512)),
        None => Ok(512),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

/// `emb-replay calibrate`: measure, print the figures, write the profile.
fn calibrate_cmd(a: CalibrateArgs) -> Result<(), Fail> {
    let CalibrateArgs { dir, mib, output } = a;
    let mib = match mib {
        Some(m) => m,
        None => default_mib(available_mib())?,
    };
    // The buffers calibrate allocates (a region, and a u32 per 256-byte
    // row of it) asked for first without aborting on failure: a size the
    // parser allows that this machine cannot allocate now is an error.
    let reserve = mib
        .checked_mul(1 << 20)
        .and_then(|b| b.checked_add(b / 64))
        .ok_or_else(|| usage(format!("--mib {mib}: too large for this machine")))?;
    if let Err(e) = Vec::<u8>::new().try_reserve_exact(reserve) {
        return Err(data(format!(
            "--mib {mib}: cannot allocate the DRAM buffers ({e}); use a smaller --mib"
        )));
    }
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

/// What "hit ratio" and "share of requests" mean, printed under tables.
const SHARES: &str = "hit ratio: a tier's hits over the requests that reached it; share of requests: its hits over all row requests (every row a lookup asks for, and every row an update asks for once per batch)";

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
    fn tiers_need_the_ssd_and_name_themselves() {
        let Err(Fail(2, e)) = parse_tiers("dram:lru:10", 256, 100) else {
            panic!()
        };
        assert!(e.contains("dram:lru:10,ssd"), "{e}");
        for bad in ["dram:lru:0,ssd", "dram:lru:auto,ssd", "dram:lru:1B,ssd"] {
            let Err(Fail(2, e)) = parse_tiers(bad, 256, 100) else {
                panic!("{bad}")
            };
            assert!(e.starts_with("--tiers: \"dram:lru:"), "{e}");
        }
    }

    #[test]
    fn figures_to_three_digits() {
        assert_eq!(sig(0.010_000_002), "0.01");
        assert_eq!(sig(0.64), "0.64");
        assert_eq!(sig(12.345), "12.3");
        assert_eq!(sig(1.0 / (1u64 << 24) as f64), "0.0000000596");
        assert_eq!(sig_up(0.010_03), "0.0101");
        assert_eq!(sig_up(0.008_78), "0.00878");
    }

    #[test]
    fn default_mib_fits_the_memory_available() {
        assert_eq!(default_mib(None).ok(), Some(512));
        assert_eq!(default_mib(Some(24 << 10)).ok(), Some(512));
        assert_eq!(default_mib(Some(700)).ok(), Some(350));
        assert_eq!(default_mib(Some(32)).ok(), Some(16));
        assert!(default_mib(Some(31)).is_err());
    }

    #[test]
    fn mib_is_bounded() {
        assert_eq!(parse_mib("16"), Ok(16));
        for bad in ["0", "15", "-1", "x", "99999999"] {
            assert!(parse_mib(bad).is_err(), "{bad}");
        }
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
