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

use embtier_tools::cli::{data, emit, load, main_with, progress, usage, Devices, Fail, Input};
use embtier_tools::plot;

use clap::{Parser, Subcommand};
use embtier_sim::locality::plan::{plan, Budgets};
use embtier_sim::locality::shards::Sampling;
use embtier_sim::locality::{analyze, Log2Hist, Options, Report, TableReport, COUNT_BIN_EDGES};
use embtier_sim::trace::gen::{GenSpec, GenTable};
use embtier_sim::trace::row_bytes_of;

#[derive(Parser)]
#[command(
    name = "emb-locality",
    version,
    about = "Locality analysis of embedding access traces"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Analyse a trace: counts, skew, count histogram, reuse, miss-ratio curves.
    Analyze {
        #[command(flatten)]
        input: Input,
        /// Print JSON (schema: docs/locality.md).
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// Print CSV: one line per table and MRC point.
        #[arg(long)]
        csv: bool,
        /// Cache sizes (rows) for the MRC, comma separated.
        #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u64).range(1..))]
        mrc_sizes: Option<Vec<u64>>,
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
        /// Cache sizes are bytes, and the MRC weighs rows by their size.
        #[arg(long)]
        bytes: bool,
        /// Print the overall access-count histogram beside the mean of a
        /// dlrm_datasets locality_stats.txt.
        #[arg(long)]
        compare_dlrm: Option<PathBuf>,
    },
    /// Plan a store: pin or cache each table and size its caches from the MRCs.
    Plan {
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
        /// Write the store.toml here (default: print it).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the plan as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Estimate MRCs by SHARDS at this rate.
        #[arg(long, value_parser = parse_rate)]
        sample: Option<f64>,
    },
    /// Convert a trace to .etrace.
    Convert {
        #[command(flatten)]
        input: Input,
        /// The .etrace to write.
        out: PathBuf,
    },
    /// Generate a synthetic multi-table trace.
    Gen {
        /// The .etrace to write.
        out: PathBuf,
        /// A TOML workload spec (seed, batches, batch_size, [[tables]]).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Without --config: tables as NAME:ROWS:POOLING:ALPHA[:DRIFT], comma separated.
        #[arg(long, value_delimiter = ',', default_value = "t0:1000000:8:1.05")]
        tables: Vec<String>,
        /// Without --config: batches.
        #[arg(long, default_value_t = 1000)]
        batches: u64,
        /// Without --config: samples per batch.
        #[arg(long, default_value_t = 512)]
        batch_size: u64,
        /// Seed (overrides the config's).
        #[arg(long)]
        seed: Option<u64>,
    },
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    s.parse::<embtier::ByteSize>().map(|b| b.0)
}

/// The store.toml of a plan: explicit per-table shares of payload bytes;
/// `tables[i]` gives table i's dim, element type and optimizer.
fn store_config(
    p: &embtier_sim::locality::plan::Plan,
    tables: &[embtier::TableConfig],
) -> embtier::StoreConfig {
    use embtier::{ByteSize, Placement, StoreConfig, TableConfig};
    use embtier_sim::locality::plan::Decision;
    let mut cfg = StoreConfig::default();
    let (mut dram, mut pmem) = (0u64, 0u64);
    for (t, shape) in p.tables.iter().zip(tables) {
        let mut tc = TableConfig::new(t.name.clone(), t.rows.max(1), shape.dim)
            .elem(shape.elem)
            .optimizer(shape.optimizer);
        match t.placement {
            Decision::PinnedDram => {
                tc.placement = Placement::PinnedDram;
                dram += t.rows * t.row_bytes;
            }
            Decision::PinnedPmem => {
                tc.placement = Placement::PinnedPmem;
                pmem += t.rows * t.row_bytes;
            }
            Decision::Cached => {
                // Every cached table stages rows through at least one DRAM row.
                let d = t.dram_rows.max(1) * t.row_bytes;
                let m = t.pmem_rows * t.row_bytes;
                tc.dram_bytes = Some(ByteSize(d));
                tc.pmem_bytes = Some(ByteSize(m));
                dram += d;
                pmem += m;
            }
        }
        cfg.tables.push(tc);
    }
    cfg.dram.capacity = ByteSize(dram);
    if pmem > 0 {
        cfg.pmem = Some(embtier::config::PmemConfig {
            path: None,
            capacity: ByteSize(pmem),
            policy: Default::default(),
        });
    } else {
        for t in &mut cfg.tables {
            t.pmem_bytes = None;
        }
    }
    cfg
}

fn parse_positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(r),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 1.0 => Ok(r),
        _ => Err(format!("{s:?} is not a rate in (0, 1]")),
    }
}

fn run(cli: Cli) -> Result<(), Fail> {
    match cli.cmd {
        Cmd::Analyze {
            input,
            json,
            csv,
            mrc_sizes,
            sample,
            sample_size,
            window,
            batches_per_s,
            row_bytes,
            plot,
            bytes,
            compare_dlrm,
        } => {
            let t = load(&input)?;
            let spinner = progress("analysing");
            let sample = match (sample, sample_size) {
                (Some(r), _) => Some(Sampling::Rate(r)),
                (None, Some(n)) => Some(Sampling::FixedSize(n as usize)),
                (None, None) => None,
            };
            let r = analyze(
                &t,
                &Options {
                    mrc_sizes,
                    sample,
                    window,
                    batches_per_s,
                    row_bytes,
                    bytes,
                },
            );
            if let Some(s) = spinner {
                s.finish_and_clear();
            }
            if let Some(dir) = &plot {
                plot::write_all(&r, dir)
                    .map_err(|e| data(format!("--plot {}: {e}", dir.display())))?;
                eprintln!(
                    "{}: mrc.svg, count_cdf.svg, reuse_distance_cdf.svg",
                    dir.display()
                );
            }
            let mut o = String::new();
            if json {
                o = serde_json::to_string_pretty(&r).map_err(data)?;
                o.push('\n');
            } else if csv {
                print_csv(&mut o, &r);
            } else {
                print_text(&mut o, &r);
            }
            if let Some(p) = &compare_dlrm {
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
        Cmd::Plan {
            input,
            dram,
            pmem,
            ssd,
            devices,
            row_bytes,
            out,
            json,
            sample,
            elem,
            optimizer,
        } => {
            let t = load(&input)?;
            let devices = devices.tiers()?;
            let r = analyze(
                &t,
                &Options {
                    sample: sample.map(Sampling::Rate),
                    ..Options::default()
                },
            );
            // The stored row: the trace's f32 row gives dim; element type and
            // optimizer state give the bytes.
            let shapes: Vec<embtier::TableConfig> = t
                .tables
                .iter()
                .map(|tt| {
                    let f32_bytes = row_bytes_of(tt, row_bytes.unwrap_or(256));
                    let dim = (f32_bytes / 4).clamp(1, embtier::config::MAX_DIM as u64) as u32;
                    embtier::TableConfig::new(tt.name.clone(), tt.rows.max(1), dim)
                        .elem(elem)
                        .optimizer(optimizer)
                })
                .collect();
            let rb: Vec<u64> = shapes.iter().map(|c| c.row_bytes()).collect();
            let p = plan(
                &r,
                &rb,
                Budgets { dram, pmem },
                &devices,
                t.batch_ends.len() as u64,
            );
            let cfg = store_config(&p, &shapes);
            cfg.validate().map_err(data)?;
            // The SSD data file holds every row, in sealed 4 KiB block groups.
            let ssd_need: u64 = p
                .tables
                .iter()
                .map(|t| {
                    let l = embtier::format::RowLayout::for_row_bytes(t.row_bytes as u32);
                    l.blocks_for(t.rows.max(1)) * embtier::format::BLOCK_SIZE as u64
                })
                .sum();
            if let Some(budget) = ssd {
                if ssd_need > budget {
                    return Err(data(format!(
                        "--ssd {budget}: the tables need {ssd_need} bytes of SSD ({:.3} GiB)",
                        ssd_need as f64 / (1u64 << 30) as f64
                    )));
                }
            }
            let toml_text = format!(
                "# store.toml planned by emb-locality from {}\n# predicted: DRAM {:.4}, PMem {:.4}, SSD {:.4} of accesses; {:.3} ms per batch\n{}",
                input.trace.display(),
                p.dram_hit_ratio,
                p.pmem_hit_ratio,
                p.ssd_ratio,
                p.seconds_per_batch * 1e3,
                cfg.to_toml()
            );
            let mut o = String::new();
            if json {
                o = serde_json::to_string_pretty(&p).map_err(data)?;
                o.push('\n');
            } else {
                let _ = writeln!(o, "| table | rows | row bytes | placement | DRAM MiB | DRAM rows | PMem MiB | PMem rows | DRAM hits | PMem hits | SSD |");
                let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|");
                for tp in &p.tables {
                    let _ = writeln!(
                        o,
                        "| {} | {} | {} | {:?} | {:.2} | {} | {:.2} | {} | {:.4} | {:.4} | {:.4} |",
                        tp.name,
                        tp.rows,
                        tp.row_bytes,
                        tp.placement,
                        tp.dram_bytes as f64 / (1 << 20) as f64,
                        tp.dram_rows,
                        tp.pmem_bytes as f64 / (1 << 20) as f64,
                        tp.pmem_rows,
                        tp.dram_hit_ratio,
                        tp.pmem_hit_ratio,
                        tp.ssd_ratio
                    );
                }
                let _ = writeln!(
                    o,
                    "\npredicted over all accesses: DRAM {:.4}, PMem {:.4}, SSD {:.4}; {:.3} ms per batch on the profile; SSD data file {:.3} GiB\n",
                    p.dram_hit_ratio,
                    p.pmem_hit_ratio,
                    p.ssd_ratio,
                    p.seconds_per_batch * 1e3,
                    ssd_need as f64 / (1u64 << 30) as f64
                );
            }
            match out {
                Some(path) => {
                    std::fs::write(&path, &toml_text)
                        .map_err(|e| data(format!("{}: {e}", path.display())))?;
                    eprintln!("{}: written", path.display());
                }
                None if !json => o.push_str(&toml_text),
                None => {}
            }
            emit(&o)
        }
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
        Cmd::Gen {
            out,
            config,
            tables,
            batches,
            batch_size,
            seed,
        } => {
            let mut spec = match config {
                Some(p) => {
                    let text = std::fs::read_to_string(&p)
                        .map_err(|e| data(format!("{}: {e}", p.display())))?;
                    toml::from_str::<GenSpec>(&text)
                        .map_err(|e| data(format!("{}: {e}", p.display())))?
                }
                None => GenSpec {
                    seed: 0,
                    batches,
                    batch_size,
                    tables: tables
                        .iter()
                        .map(|s| parse_table(s))
                        .collect::<Result<_, _>>()?,
                },
            };
            if let Some(s) = seed {
                spec.seed = s;
            }
            spec.validate().map_err(usage)?;
            let start = std::time::Instant::now();
            let t = spec.generate();
            let bytes = t.write_etrace(&out).map_err(data)?;
            let secs = start.elapsed().as_secs_f64();
            eprintln!(
                "{}: {} accesses in {} batches, {bytes} bytes, {:.1} M accesses/s",
                out.display(),
                t.accesses.len(),
                t.batch_ends.len(),
                t.accesses.len() as f64 / secs / 1e6
            );
            Ok(())
        }
    }
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

fn main() -> ExitCode {
    main_with("emb-locality", run)
}
