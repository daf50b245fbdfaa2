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
use embtier_sim::locality::{analyze, Log2Hist, Options, Report, TableReport, COUNT_BIN_EDGES};
use embtier_sim::table::Table;
use embtier_sim::trace::gen::{GenSpec, GenTable};
use embtier_sim::trace::{row_bytes_of, Trace};
use embtier_tools::cli::{
    check_sizes, data, emit, load, main_with, mean_row_bytes, parse_rate, parse_sizes, progress,
    usage, Devices, Fail, Input, Output, DEFAULT_ROW_BYTES,
};
use embtier_tools::plot;

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
    /// Estimate MRCs by SHARDS at this sampling rate, in (0, 1].
    #[arg(long, value_parser = parse_rate, conflicts_with = "sample_size")]
    sample: Option<f64>,
    /// Estimate MRCs by fixed-size SHARDS with at most this many sampled rows.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    sample_size: Option<u64>,
    /// Accesses per working-set window (default: a hundredth of the trace).
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
    /// Policy of the PMem caches (as --dram-policy).
    #[arg(long, default_value = "lru", value_parser = |s: &str| PolicyKind::parse_for_store(s))]
    pmem_policy: PolicyKind,
    /// The model's table sizes, where the trace touches fewer rows than a
    /// table has: NAME=ROWS, comma separated, or ROWS alone for every table
    /// not named (e.g. 10000000,C3=1460).
    #[arg(long, value_delimiter = ',')]
    rows: Vec<String>,
    /// Bytes per row where the trace does not say (default 256). Trace
    /// and flag row sizes are of f32 weights: dim = row bytes / 4.
    #[arg(long, value_parser = clap::value_parser!(u64).range(4..))]
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
    /// Estimate MRCs by SHARDS at this rate, in (0, 1].
    #[arg(long, value_parser = parse_rate)]
    sample: Option<f64>,
    /// Write the charts of the analysis the plan is made from into this
    /// directory (as analyze --plot).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Tables the charts draw beside the overall curve: the most accessed.
    #[arg(long, default_value_t = plot::DEFAULT_TOP, value_parser = clap::value_parser!(u64).range(1..))]
    top: u64,
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
    #[arg(long, value_delimiter = ',', default_value = "t0:1000000:8:1.05")]
    tables: Vec<String>,
    /// Without --spec: batches.
    #[arg(long, default_value_t = 1000)]
    batches: u64,
    /// Without --spec: samples per batch.
    #[arg(long, default_value_t = 512)]
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

fn main() -> ExitCode {
    main_with("emb-locality", run)
}

fn run(cli: Cli) -> Result<(), Fail> {
    match cli.cmd {
        Cmd::Analyze(a) => analyze_cmd(a),
        Cmd::Plan(a) => plan_cmd(a),
        Cmd::Convert { input, out } => {
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

/// The MRC sizes of `--sizes`: `None` for `auto`; bytes with `--bytes`.
fn mrc_sizes(
    spec: &[String],
    t: &Trace,
    row_bytes: u64,
    bytes: bool,
) -> Result<Option<Vec<u64>>, Fail> {
    if spec.len() == 1 && spec[0].trim() == "auto" {
        return Ok(None);
    }
    if bytes {
        let v = spec
            .iter()
            .map(|s| match s.trim().parse::<embtier::ByteSize>() {
                Ok(b) if b.0 > 0 => Ok(b.0),
                Ok(_) => Err(usage(format!("--sizes: {s:?} is zero bytes"))),
                Err(e) => Err(usage(format!("--sizes: {e}"))),
            })
            .collect::<Result<_, _>>()?;
        return Ok(Some(v));
    }
    parse_sizes(spec, u64::MAX, mean_row_bytes(t, row_bytes)).map(Some)
}

/// The charts of `r` into `dir`, saying what they left out.
fn write_plots(
    r: &Report,
    dir: &std::path::Path,
    trace: &std::path::Path,
    top: u64,
) -> Result<(), Fail> {
    let name = trace.file_name().map_or_else(
        || trace.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let note = plot::write_all(r, dir, &name, top as usize)
        .map_err(|e| data(format!("--plot {}: {e}", dir.display())))?;
    eprintln!(
        "{}: mrc.svg, count_cdf.svg, reuse_distance_cdf.svg{}",
        dir.display(),
        note.map_or(String::new(), |n| format!(" ({n})"))
    );
    Ok(())
}

fn analyze_cmd(a: AnalyzeArgs) -> Result<(), Fail> {
    check_sizes(&a.sizes)?;
    let t = load(&a.input)?;
    let row_bytes = a.row_bytes.unwrap_or(DEFAULT_ROW_BYTES);
    let sizes = mrc_sizes(&a.sizes, &t, row_bytes, a.bytes)?;
    let spinner = progress("analysing");
    let sample = match (a.sample, a.sample_size) {
        (Some(r), _) => Some(Sampling::Rate(r)),
        (None, Some(n)) => Some(Sampling::FixedSize(n as usize)),
        (None, None) => None,
    };
    let r = analyze(
        &t,
        &Options {
            mrc_sizes: sizes,
            sample,
            window: a.window,
            batches_per_s: a.batches_per_s,
            row_bytes: a.row_bytes,
            bytes: a.bytes,
        },
    );
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    if let Some(dir) = &a.plot {
        write_plots(&r, dir, &a.input.trace, a.top)?;
    }
    let mut o = String::new();
    if a.output.json {
        o = serde_json::to_string_pretty(&r).map_err(data)?;
        o.push('\n');
    } else if a.output.csv {
        print_csv(&mut o, &r);
    } else {
        print_text(&mut o, &r);
    }
    if let Some(p) = &a.compare_dlrm {
        let stats = embtier_sim::locality::dlrm::read(p).map_err(data)?;
        let (dr, da) = embtier_sim::locality::dlrm::mean(&stats);
        let _ = writeln!(
            o,
            "access-count histogram, this trace (overall) vs the mean of {} batch files of {}:",
            stats.len(),
            p.display()
        );
        let _ = writeln!(
            o,
            "  {:<16} {:>9} {:>9} {:>11} {:>11}",
            "count", "rows", "dlrm rows", "accesses", "dlrm acc."
        );
        for k in 0..17 {
            let _ = writeln!(
                o,
                "  {:<16} {:>9.3} {:>9.3} {:>11.3} {:>11.3}",
                bin_label(k),
                r.overall.count_hist_rows[k],
                dr[k],
                r.overall.count_hist_accesses[k],
                da[k]
            );
        }
    }
    emit(&o)
}

/// `--rows`: the table sizes of the model, by trace table.
fn table_rows(spec: &[String], t: &Trace) -> Result<Vec<Option<u64>>, Fail> {
    let bad = |s: &str| usage(format!("--rows: {s:?} is not ROWS or NAME=ROWS"));
    let mut all = None;
    let mut named: Vec<(String, u64)> = Vec::new();
    for s in spec {
        match s.split_once('=') {
            Some((n, r)) => {
                named.push((n.trim().to_string(), r.trim().parse().map_err(|_| bad(s))?))
            }
            None => all = Some(s.trim().parse::<u64>().map_err(|_| bad(s))?),
        }
    }
    for (n, _) in &named {
        if !t.tables.iter().any(|tt| &tt.name == n) {
            let names: Vec<&str> = t.tables.iter().map(|tt| tt.name.as_str()).collect();
            return Err(usage(format!(
                "--rows: the trace has no table {n:?} (it has {})",
                names.join(", ")
            )));
        }
    }
    t.tables
        .iter()
        .map(|tt| {
            let r = named
                .iter()
                .find(|(n, _)| *n == tt.name)
                .map(|(_, r)| *r)
                .or(all);
            match r {
                Some(r) if r < tt.rows => Err(usage(format!(
                    "--rows: table {:?} has {r} rows, but the trace touches row ids up to {}",
                    tt.name, tt.rows
                ))),
                _ => Ok(r),
            }
        })
        .collect()
}

fn plan_cmd(a: PlanArgs) -> Result<(), Fail> {
    let t = load(&a.input)?;
    let devices = a.devices.tiers()?;
    let rows = table_rows(&a.rows, &t)?;
    let mut r = analyze(
        &t,
        &Options {
            sample: a.sample.map(Sampling::Rate),
            ..Options::default()
        },
    );
    for (tr, rows) in r.tables.iter_mut().zip(&rows) {
        if let Some(n) = rows {
            tr.rows = *n;
        }
    }
    if let Some(dir) = &a.plot {
        write_plots(&r, dir, &a.input.trace, a.top)?;
    }
    // The stored row: the trace's f32 row gives dim; element type and
    // optimizer state give the bytes.
    let shapes: Vec<embtier::TableConfig> = t
        .tables
        .iter()
        .zip(&r.tables)
        .map(|(tt, tr)| {
            let f32_bytes = row_bytes_of(tt, a.row_bytes.unwrap_or(DEFAULT_ROW_BYTES));
            let dim = (f32_bytes / 4).clamp(1, embtier::config::MAX_DIM as u64) as u32;
            embtier::TableConfig::new(tt.name.clone(), tr.rows.max(1), dim)
                .elem(a.elem)
                .optimizer(a.optimizer)
        })
        .collect();
    let rb: Vec<u64> = shapes.iter().map(|c| c.row_bytes()).collect();
    let budgets = Budgets {
        dram: a.dram,
        pmem: a.pmem,
    };
    let p = plan(&r, &rb, budgets, &devices, t.batch_ends.len() as u64);
    let policies = Policies {
        dram: a.dram_policy,
        pmem: a.pmem_policy,
    };
    let cfg = store_config(&p, &shapes, budgets, policies);
    cfg.validate().map_err(data)?;
    // The SSD data file holds every row, in sealed 4 KiB block groups.
    let ssd_need: u64 = cfg
        .tables
        .iter()
        .map(|t| {
            let l = embtier::format::RowLayout::for_row_bytes(t.row_bytes() as u32);
            l.blocks_for(t.rows) * embtier::format::BLOCK_SIZE as u64
        })
        .sum();
    if let Some(budget) = a.ssd {
        if ssd_need > budget {
            return Err(data(format!(
                "--ssd {budget}: the tables need {ssd_need} bytes of SSD ({:.3} GiB)",
                ssd_need as f64 / (1u64 << 30) as f64
            )));
        }
    }
    let header = format!(
        "store.toml planned by emb-locality from {} ({} accesses in {} batches)\nbudgets: DRAM {}, PMem {}; SSD data file {}\npredicted shares of all accesses: DRAM {:.4}, PMem {:.4}, SSD {:.4}; {:.3} ms per batch\n(hit ratios predicted for LRU caches, one per table; the tiers run {} and {}: docs/tuning.md)",
        a.input.trace.display(),
        t.accesses.len(),
        t.batch_ends.len(),
        round_size(a.dram).1,
        round_size(a.pmem).1,
        round_size(ssd_need).1,
        p.dram_hit_ratio,
        p.pmem_hit_ratio,
        p.ssd_ratio,
        p.seconds_per_batch * 1e3,
        a.dram_policy,
        a.pmem_policy,
    );
    let toml_text = store_toml(&p, &cfg, &header);
    if let Some(path) = &a.out {
        std::fs::write(path, &toml_text).map_err(|e| data(format!("{}: {e}", path.display())))?;
        eprintln!("{}: written", path.display());
    }
    if a.output.json {
        let mut o = serde_json::to_string_pretty(&p).map_err(data)?;
        o.push('\n');
        return emit(&o);
    }
    let table = plan_table(&p, &cfg);
    if a.output.csv {
        return emit(&table.csv());
    }
    let mut o = table.markdown();
    let _ = writeln!(
        o,
        "\nshares are of each table's accesses (the last line: of all accesses); DRAM and PMem are the bytes of row payload written to the store.toml\npredicted: {:.3} ms per batch on the device profiles; SSD data file {}\n",
        p.seconds_per_batch * 1e3,
        round_size(ssd_need).1
    );
    if a.out.is_none() {
        o.push_str(&toml_text);
    }
    emit(&o)
}

/// The plan as a table: a row per table, then the whole.
fn plan_table(p: &Plan, cfg: &embtier::StoreConfig) -> Table {
    let mut t = Table::new([
        "table",
        "rows",
        "row bytes",
        "placement",
        "DRAM",
        "DRAM rows",
        "PMem",
        "PMem rows",
        "DRAM share",
        "PMem share",
        "SSD share",
    ]);
    let size = |b: u64| round_size(b).1;
    for (tp, tc) in p.tables.iter().zip(&cfg.tables) {
        let (d, m) = match tp.placement {
            Decision::PinnedDram => (tc.rows * tp.row_bytes, 0),
            Decision::PinnedPmem => (0, tc.rows * tp.row_bytes),
            Decision::Cached => (
                tc.dram_bytes.map_or(0, |b| b.0),
                tc.pmem_bytes.map_or(0, |b| b.0),
            ),
        };
        let placement = match tp.placement {
            Decision::Cached => "cached",
            Decision::PinnedDram => "pinned-dram",
            Decision::PinnedPmem => "pinned-pmem",
        };
        t.row([
            tp.name.clone(),
            tc.rows.to_string(),
            tp.row_bytes.to_string(),
            placement.to_string(),
            size(d),
            (d / tp.row_bytes).to_string(),
            size(m),
            (m / tp.row_bytes).to_string(),
            format!("{:.4}", tp.dram_hit_ratio),
            format!("{:.4}", tp.pmem_hit_ratio),
            format!("{:.4}", tp.ssd_ratio),
        ]);
    }
    t.row([
        "(all)".to_string(),
        p.tables.iter().map(|t| t.rows).sum::<u64>().to_string(),
        "-".into(),
        "-".into(),
        size(capacity_of(cfg, embtier::MemoryKind::Dram)),
        "-".into(),
        size(capacity_of(cfg, embtier::MemoryKind::Pmem)),
        "-".into(),
        format!("{:.4}", p.dram_hit_ratio),
        format!("{:.4}", p.pmem_hit_ratio),
        format!("{:.4}", p.ssd_ratio),
    ]);
    t
}

fn gen_cmd(a: GenArgs) -> Result<(), Fail> {
    let mut spec = match &a.spec {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).map_err(|e| data(format!("{}: {e}", p.display())))?;
            toml::from_str::<GenSpec>(&text).map_err(|e| data(format!("{}: {e}", p.display())))?
        }
        None => GenSpec {
            seed: 0,
            batches: a.batches,
            batch_size: a.batch_size,
            tables: a
                .tables
                .iter()
                .map(|s| parse_table(s))
                .collect::<Result<_, _>>()?,
        },
    };
    if let Some(s) = a.seed {
        spec.seed = s;
    }
    spec.validate().map_err(usage)?;
    let start = std::time::Instant::now();
    let t = spec.generate();
    let bytes = t.write_etrace(&a.out).map_err(data)?;
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{}: {} accesses in {} batches, {bytes} bytes, {:.1} M accesses/s",
        a.out.display(),
        t.accesses.len(),
        t.batch_ends.len(),
        t.accesses.len() as f64 / secs / 1e6
    );
    Ok(())
}

fn parse_table(s: &str) -> Result<GenTable, Fail> {
    let p: Vec<&str> = s.split(':').collect();
    let bad = || {
        usage(format!(
            "--tables {s:?}: expected NAME:ROWS:POOLING:ALPHA[:DRIFT]"
        ))
    };
    if p.len() < 4 || p.len() > 5 {
        return Err(bad());
    }
    Ok(GenTable {
        name: p[0].to_string(),
        rows: p[1].parse().map_err(|_| bad())?,
        dim: 64,
        pooling: p[2].parse().map_err(|_| bad())?,
        alpha: p[3].parse().map_err(|_| bad())?,
        drift: p
            .get(4)
            .map(|d| d.parse())
            .transpose()
            .map_err(|_| bad())?
            .unwrap_or(0.0),
    })
}

fn bin_label(i: usize) -> String {
    if i == 16 {
        "(32768+".to_string()
    } else {
        let lo = if i == 0 { 0 } else { COUNT_BIN_EDGES[i - 1] };
        format!("({lo}, {}]", COUNT_BIN_EDGES[i])
    }
}

fn print_table(o: &mut String, t: &TableReport) {
    let _ = writeln!(o, "== {} ==", t.name);
    let _ = writeln!(
        o,
        "accesses {}  unique rows {}  rows touched once {} ({:.1}%)  coverage {:.4} of {} rows",
        t.accesses,
        t.unique_rows,
        t.one_hit_rows,
        100.0 * t.one_hit_rows as f64 / t.unique_rows.max(1) as f64,
        t.coverage,
        t.rows
    );
    let _ = writeln!(o,
        "skew: top 0.1% {:.3}  top 1% {:.3}  top 10% {:.3} of accesses;  zipf alpha {:.3};  gini {:.3}",
        t.top_0_1pct_share, t.top_1pct_share, t.top_10pct_share, t.zipf_alpha, t.gini
    );
    let _ = writeln!(o, "access-count histogram (dlrm_datasets bins):");
    let _ = writeln!(
        o,
        "  {:<16} {:>8} {:>8} {:>10} {:>8}",
        "count", "rows", "cum", "accesses", "cum"
    );
    let (mut cr, mut ca) = (0.0, 0.0);
    for i in 0..17 {
        cr += t.count_hist_rows[i];
        ca += t.count_hist_accesses[i];
        let _ = writeln!(
            o,
            "  {:<16} {:>8.3} {:>8.3} {:>10.3} {:>8.3}",
            bin_label(i),
            t.count_hist_rows[i],
            cr,
            t.count_hist_accesses[i],
            ca
        );
    }
    print_hist(
        o,
        "reuse distance (LRU stack)",
        &t.reuse_distance,
        t.accesses,
    );
    print_hist(o, "reuse time", &t.reuse_time, t.accesses);
    let w = &t.working_set_per_batch;
    let v = &t.working_set_per_window;
    let _ = writeln!(
        o,
        "working set: per batch mean {:.1}, p50 {:.0}, p99 {:.0}, max {:.0} rows over {} batches; per {} accesses mean {:.1}, max {:.0} rows",
        w.mean, w.p50, w.p99, w.max, w.count, t.window, v.mean, v.max
    );
    let b = &t.bandwidth;
    let _ = writeln!(
        o,
        "bandwidth at {} batches/s: {:.1} accesses and {:.1} distinct rows per batch; {:.2} MB/s of rows, {:.2} MB/s after per-batch dedup{}",
        b.batches_per_s,
        b.accesses_per_batch,
        b.unique_rows_per_batch,
        b.bytes_per_s / 1e6,
        b.unique_bytes_per_s / 1e6,
        if b.row_bytes > 0 { format!(" ({} bytes per row)", b.row_bytes) } else { String::new() }
    );
    let _ = writeln!(
        o,
        "LRU miss-ratio curve, {} (cold miss ratio {:.4}):",
        t.mrc_method, t.cold_miss_ratio
    );
    for p in &t.mrc {
        match p.cache_bytes {
            Some(b) => {
                let _ = writeln!(o, "  {:>14} bytes  {:.4}", b, p.miss_ratio);
            }
            None => {
                let _ = writeln!(o, "  {:>12} rows  {:.4}", p.cache_rows, p.miss_ratio);
            }
        }
    }
    o.push('\n');
}

fn print_hist(o: &mut String, name: &str, h: &Log2Hist, total: u64) {
    let _ = writeln!(o, "{name}:");
    let mut cum = 0u64;
    for (k, &c) in h.bins.iter().enumerate() {
        if c == 0 {
            continue;
        }
        cum += c;
        let (lo, hi) = Log2Hist::range(k);
        let _ = writeln!(
            o,
            "  [{lo}, {hi}] {:>10} {:>8.4} cum {:.4}",
            c,
            c as f64 / total.max(1) as f64,
            cum as f64 / total.max(1) as f64
        );
    }
    let _ = writeln!(
        o,
        "  first access {:>10} {:>8.4}",
        h.cold,
        h.cold as f64 / total.max(1) as f64
    );
}

fn print_text(o: &mut String, r: &Report) {
    print_table(o, &r.overall);
    for t in &r.tables {
        print_table(o, t);
    }
}

fn print_csv(o: &mut String, r: &Report) {
    let _ = writeln!(o, "table,rows,accesses,unique_rows,one_hit_rows,coverage,top_0_1pct_share,top_1pct_share,top_10pct_share,zipf_alpha,gini,cold_miss_ratio,bytes_per_s,unique_bytes_per_s,cache_rows,miss_ratio");
    for t in std::iter::once(&r.overall).chain(&r.tables) {
        for p in &t.mrc {
            let _ = writeln!(
                o,
                "{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.4},{:.4},{:.6},{:.1},{:.1},{},{:.6}",
                t.name,
                t.rows,
                t.accesses,
                t.unique_rows,
                t.one_hit_rows,
                t.coverage,
                t.top_0_1pct_share,
                t.top_1pct_share,
                t.top_10pct_share,
                t.zipf_alpha,
                t.gini,
                t.cold_miss_ratio,
                t.bandwidth.bytes_per_s,
                t.bandwidth.unique_bytes_per_s,
                p.cache_rows,
                p.miss_ratio
            );
        }
    }
}

/// The bytes of `cfg`'s tiers of `kind`.
fn capacity_of(cfg: &embtier::StoreConfig, kind: embtier::MemoryKind) -> u64 {
    cfg.tiers
        .iter()
        .filter(|t| t.kind == kind)
        .map(|t| t.capacity.0)
        .sum()
}
