//! `emb-locality`: characterise an embedding access trace.
//!
//! A thin shell: argument parsing, progress and rendering over
//! `embtier_sim::trace` and `embtier_sim::locality`. Errors are one line
//! naming the file, record or argument; exit status 2 for usage, 1 for data.

#![forbid(unsafe_code)]
// The doc comments of the command-line arguments are clap's --help text,
// where `[dram]` or `id=COL[,header=yes|no]` are literal, not links.
#![allow(rustdoc::broken_intra_doc_links)]

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use embtier::PolicyKind;
use embtier_sim::locality::plan::{plan, Budgets, Decision, Plan};
use embtier_sim::locality::shards::Sampling;
use embtier_sim::locality::store_toml::{round_size, store_config, store_toml, Policies};
use embtier_sim::locality::stream::{analyze_etrace, analyze_file, StreamAnalysis};
use embtier_sim::locality::{
    analyze, ExactAnalysis, Log2Hist, Options, Report, TableReport, COUNT_BIN_EDGES,
    MAX_EXACT_ACCESSES,
};
use embtier_sim::minisim::with_policy_curves;
use embtier_sim::replay::simulate_store;
use embtier_sim::table::Table;
use embtier_sim::trace::gen::{GenSpec, GenTable};
use embtier_sim::trace::{detect, import_stream, row_bytes_of, Format, TraceReader, TraceTable};
use embtier_sim::SimPolicy;
use embtier_tools::cli::{
    check_sizes, data, emit, load, main_with, mean_row_bytes_by_table, parse_f32_row_bytes,
    parse_rate, parse_sizes, progress, say_read, usage, Devices, Fail, Input, Output,
    DEFAULT_ROW_BYTES,
};
use embtier_tools::plot;
use rayon::prelude::*;

#[path = "emb_locality/analyze.rs"]
mod analyze;
#[path = "emb_locality/gen.rs"]
mod gen;
#[path = "emb_locality/plan.rs"]
mod plan;

use analyze::*;
use gen::*;
use plan::*;

#[derive(Parser)]
#[command(
    name = "emb-locality",
    version,
    about = "Locality analysis of embedding access traces, and store plans from it",
    after_help = "Formats: auto, etrace, oracle-general, csv, txt, criteo, avazu, movielens.\nPolicies of a planned store's tiers: lru, fifo, clock, lfu, arc, s3fifo, sieve.\nDevice profiles: dram, optane-pmem, optane-ssd, nand-nvme, or a file from `emb-replay calibrate`.\nGuide: docs/locality.md."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Built once per process by clap; boxing the large variant buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Analyse a trace: counts, skew, count histogram, reuse, miss-ratio curves.
    Analyze(AnalyzeArgs),
    /// Plan a store: pin or cache each table and size its caches from the
    /// MRCs; print the plan and the store.toml.
    Plan(PlanArgs),
    /// Convert a trace to .etrace.
    Convert {
        #[command(flatten)]
        input: Input,
        /// The .etrace to write.
        out: PathBuf,
    },
    /// Generate a synthetic multi-table trace.
    Gen(GenArgs),
}

/// The options of `analyze`.
#[derive(clap::Args)]
struct AnalyzeArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    output: Output,
    /// Cache sizes of the MRC, comma separated: rows (1000), bytes (64MiB,
    /// at the trace's mean row size), or `auto` (log-spaced up to each
    /// table's unique rows).
    #[arg(
        long,
        alias = "mrc-sizes",
        value_delimiter = ',',
        default_value = "auto"
    )]
    sizes: Vec<String>,
    /// Estimate MRCs, stack distances and reuse times by SHARDS at this
    /// sampling rate, in (0, 1]; counts, histograms and working sets stay
    /// exact. The trace then streams, in memory bounded by its tables' rows
    /// (16 bytes a row, plus the id tables of formats other than .etrace),
    /// not by its accesses: a .etrace in one pass, other formats in two.
    #[arg(long, value_parser = parse_rate, conflicts_with = "sample_size")]
    sample: Option<f64>,
    /// Estimate MRCs by fixed-size SHARDS with at most this many sampled rows.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    sample_size: Option<u64>,
    /// Accesses per working-set window (default: a hundredth of each
    /// table's accesses, and of the trace's, at least 1000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    window: Option<u64>,
    /// Target training rate for the bandwidth figures, batches per second.
    #[arg(long, value_parser = parse_positive)]
    batches_per_s: Option<f64>,
    /// Bytes per row where the trace does not say (default 256).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    row_bytes: Option<u64>,
    /// Write SVG charts (MRC, access-count CDF, reuse-distance CDF) into this directory.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Tables the charts draw beside the overall curve: the most accessed.
    #[arg(long, default_value_t = plot::DEFAULT_TOP, value_parser = clap::value_parser!(u64).range(1..))]
    top: u64,
    /// Cache sizes are bytes (a plain number too), and the MRC weighs rows
    /// by their size.
    #[arg(long)]
    bytes: bool,
    /// Print the overall access-count histogram beside the mean of a
    /// dlrm_datasets locality_stats.txt.
    #[arg(long)]
    compare_dlrm: Option<PathBuf>,
    /// Memory the analysis may take, e.g. 8GiB (default: three quarters of
    /// the machine's). The exact analysis streams the trace but holds each
    /// access as dense ids (about 32 bytes an access with what it derives)
    /// and is refused past it; with --sample the trace streams in memory
    /// bounded by its tables' rows.
    #[arg(long, value_parser = |s: &str| s.parse::<embtier::ByteSize>())]
    max_memory: Option<embtier::ByteSize>,
}

/// The options of `plan`.
#[derive(clap::Args)]
struct PlanArgs {
    #[command(flatten)]
    input: Input,
    /// DRAM budget, e.g. 8GiB.
    #[arg(long, value_parser = parse_bytes)]
    dram: u64,
    /// PMem budget (0: no PMem tier).
    #[arg(long, value_parser = parse_bytes, default_value = "0")]
    pmem: u64,
    /// SSD budget: the data file must hold every table (default: unchecked).
    #[arg(long, value_parser = parse_bytes)]
    ssd: Option<u64>,
    #[command(flatten)]
    devices: Devices,
    /// Policy of the DRAM caches: lru, fifo, clock, lfu, arc, s3fifo or
    /// sieve (the store's; docs/tuning.md).
    #[arg(long, default_value = "sieve", value_parser = |s: &str| PolicyKind::parse_for_store(s))]
    dram_policy: PolicyKind,
    /// Choose the DRAM policy among these (comma separated, the store's):
    /// each sizes the caches on its own miss-ratio curves (miniature
    /// simulations at --sample's rate), and the one whose simulated store
    /// takes the least estimated time per batch (then serves the most
    /// hits) is written to the store.toml.
    #[arg(long, value_delimiter = ',', conflicts_with = "dram_policy", value_parser = |s: &str| PolicyKind::parse_for_store(s))]
    policies: Vec<PolicyKind>,
    /// Policy of the PMem caches (as --dram-policy).
    #[arg(long, default_value = "lru", value_parser = |s: &str| PolicyKind::parse_for_store(s))]
    pmem_policy: PolicyKind,
    /// The model's table sizes, where the trace touches fewer rows than a
    /// table has: NAME=ROWS, comma separated, or ROWS alone for every table
    /// not named (e.g. 10000000,C3=1460).
    #[arg(long, value_delimiter = ',')]
    rows: Vec<String>,
    /// Bytes per row where the trace does not say (default 256). Trace
    /// and flag row sizes are of f32 weights: dim = row bytes / 4, so a
    /// multiple of 4.
    #[arg(long, value_parser = parse_f32_row_bytes)]
    row_bytes: Option<u64>,
    /// Element type the planned tables store: f32, f16, bf16 or int8.
    /// The plan sizes caches by the stored row (weights + state).
    #[arg(long, default_value = "f32")]
    elem: embtier::Elem,
    /// Fused optimizer of the planned tables, with default
    /// hyper-parameters (edit them in the store.toml): sgd,
    /// rowwise-adagrad, adagrad or adam. Its state is part of each row.
    #[arg(long, default_value = "sgd")]
    optimizer: embtier::Optimizer,
    /// Write the store.toml here (default: print it after the plan).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    output: Output,
    /// Estimate MRCs by SHARDS at this rate, in (0, 1]; past --max-memory
    /// the trace then streams in memory bounded by its tables' rows (as
    /// analyze --sample).
    #[arg(long, value_parser = parse_rate)]
    sample: Option<f64>,
    /// Write the charts of the analysis the plan is made from into this
    /// directory (as analyze --plot).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Tables the charts draw beside the overall curve: the most accessed.
    #[arg(long, default_value_t = plot::DEFAULT_TOP, value_parser = clap::value_parser!(u64).range(1..))]
    top: u64,
    /// Memory the analysis may take (as analyze --max-memory; plan holds
    /// the trace to replay it, about 50 bytes an access).
    #[arg(long, value_parser = |s: &str| s.parse::<embtier::ByteSize>())]
    max_memory: Option<embtier::ByteSize>,
}

/// The options of `gen`.
#[derive(clap::Args)]
struct GenArgs {
    /// The .etrace to write.
    out: PathBuf,
    /// A TOML workload spec (seed, batches, batch_size, [[tables]]; see
    /// docs/locality.md, "Generator").
    #[arg(long, alias = "config")]
    spec: Option<PathBuf>,
    /// Without --spec: tables as NAME:ROWS:POOLING:ALPHA[:DRIFT], comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "t0:1000000:8:1.05",
        conflicts_with = "spec"
    )]
    tables: Vec<String>,
    /// Without --spec: batches.
    #[arg(long, default_value_t = 1000, conflicts_with = "spec")]
    batches: u64,
    /// Without --spec: samples per batch.
    #[arg(long, default_value_t = 512, conflicts_with = "spec")]
    batch_size: u64,
    /// Seed (overrides the spec's).
    #[arg(long)]
    seed: Option<u64>,
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    s.parse::<embtier::ByteSize>().map(|b| b.0)
}

fn parse_positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(r),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

/// Large arrays on transparent huge pages where a command turns it on
/// (the held trace and its ids and records): a fault and a TLB entry per
/// 2 MiB, not per 4 KiB (`docs/benchmarks.md`, "2026-11-28: huge pages
/// for the tools").
#[global_allocator]
static ALLOC: embtier::memory::HugePageAlloc = embtier::memory::HugePageAlloc;

fn main() -> ExitCode {
    main_with("emb-locality", run)
}

/// Whether `a` and `b` name the same existing file (by device and
/// inode: links and `./x` against `x` included).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

fn run(cli: Cli) -> Result<(), Fail> {
    match cli.cmd {
        Cmd::Analyze(a) => analyze_cmd(a),
        Cmd::Plan(a) => plan_cmd(a),
        Cmd::Convert { input, out } => {
            if same_file(&input.trace, &out) {
                return Err(usage(format!(
                    "{}: the output is the input file; give convert another path",
                    out.display()
                )));
            }
            let t = load(&input)?;
            let bytes = t.write_etrace(&out).map_err(data)?;
            eprintln!(
                "{}: {} tables, {} batches, {} accesses, {} bytes ({:.2} bytes per access)",
                out.display(),
                t.tables.len(),
                t.batch_ends.len(),
                t.accesses.len(),
                bytes,
                bytes as f64 / t.accesses.len().max(1) as f64
            );
            Ok(())
        }
        Cmd::Gen(a) => gen_cmd(a),
    }
}
