//! The report: one markdown table per workload, or the same data as JSON.

use std::fmt::Write as _;

use crate::workload::{self, Dataset, DlrmGen, Workload};
use crate::{Args, Fio, LoadResult, RunResult};

/// Everything one run of the harness measured.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// The machine.
    pub machine: String,
    /// The command line's settings.
    pub settings: Settings,
    /// W4's histogram: source, target, what the generator gives, and the
    /// largest per-bin difference.
    pub w4_histogram: Option<W4Check>,
    /// Loads, timed apart from the runs.
    pub loads: Vec<LoadResult>,
    /// Runs, with `embtier_over_this` filled in.
    pub results: Vec<Row>,
    /// fio's limit, or why it is missing.
    pub fio: Option<Result<Fio, String>>,
    /// Engines left out, and why.
    pub skipped: Vec<String>,
    /// The targets, measured.
    pub targets: Vec<Target>,
}

/// Settings of the run.
#[derive(Debug, serde::Serialize)]
pub struct Settings {
    /// Rows per table.
    pub table_rows: Vec<u64>,
    /// f32 a row.
    pub dim: u32,
    /// Bytes of all rows.
    pub table_bytes: u64,
    /// The DRAM budget, bytes.
    pub dram: u64,
    /// Ids a batch.
    pub batch: usize,
    /// Queue depth.
    pub qd: u32,
    /// Seconds measured per run.
    pub duration_s: f64,
    /// Seconds of warm-up.
    pub warmup_s: f64,
    /// Data directory.
    pub dir: String,
}

/// W4's histogram check.
#[derive(Debug, serde::Serialize)]
pub struct W4Check {
    /// Where the target came from.
    pub source: String,
    /// Target row fractions per bin.
    pub target: Vec<f64>,
    /// The generator's, over one window of every table.
    pub generated: Vec<f64>,
    /// Largest absolute difference per bin (fraction points).
    pub max_bin_error: f64,
}

/// One run with its ratio.
#[derive(Debug, serde::Serialize)]
pub struct Row {
    /// The run.
    #[serde(flatten)]
    pub run: RunResult,
    /// embtier io_uring's rows/s over this engine's, same workload.
    pub embtier_over_this: Option<f64>,
}

/// A target of the issue.
#[derive(Debug, serde::Serialize)]
pub struct Target {
    /// What is compared.
    pub comparison: String,
    /// Workload.
    pub workload: String,
    /// The target, as text.
    pub target: String,
    /// Measured value.
    pub measured: Option<f64>,
    /// Whether it is met.
    pub met: Option<bool>,
}

const EMB: &str = "embtier io_uring";

impl Report {
    /// Assemble the report.
    pub fn new(
        a: &Args,
        ds: &Dataset,
        target: &(Vec<f64>, String),
        loads: Vec<LoadResult>,
        runs: Vec<RunResult>,
        fio: Option<Result<Fio, String>>,
        skipped: Vec<String>,
    ) -> Report {
        let emb = |w: &str| {
            runs.iter()
                .find(|r| r.engine == EMB && r.workload == w)
                .map(|r| r.rows_per_s)
        };
        let results: Vec<Row> = runs
            .iter()
            .map(|r| Row {
                embtier_over_this: emb(&r.workload).map(|e| e / r.rows_per_s),
                run: r.clone(),
            })
            .collect();
        let ratio = |peer: &str, w: &str| {
            results
                .iter()
                .find(|r| r.run.engine == peer && r.run.workload == w)
                .and_then(|r| r.embtier_over_this)
        };
        let mut targets = Vec::new();
        let mut t = |comparison: &str,
                     w: &str,
                     target: &str,
                     measured: Option<f64>,
                     ok: fn(f64) -> bool| {
            targets.push(Target {
                comparison: comparison.into(),
                workload: w.into(),
                target: target.into(),
                measured,
                met: measured.map(ok),
            })
        };
        t(
            "embtier vs RocksDB",
            "W2",
            ">= 3x",
            ratio("RocksDB", "W2"),
            |x| x >= 3.0,
        );
        t(
            "embtier vs RocksDB",
            "W3",
            ">= 3x",
            ratio("RocksDB", "W3"),
            |x| x >= 3.0,
        );
        t(
            "embtier vs foyer",
            "W2",
            ">= 1.5x",
            ratio("foyer HybridCache", "W2"),
            |x| x >= 1.5,
        );
        let fio_ratio = match (&fio, emb("W1")) {
            (Some(Ok(f)), Some(e)) => Some(e / f.iops),
            _ => None,
        };
        t(
            "embtier rows/s vs fio IOPS",
            "W1",
            ">= 0.85x",
            fio_ratio,
            |x| x >= 0.85,
        );
        let wa = runs
            .iter()
            .find(|r| r.engine == EMB && r.workload == "W3")
            .and_then(|r| r.write_amp);
        t("embtier write amplification", "W3", "<= 1.2", wa, |x| {
            x <= 1.2
        });
        let w4_histogram = a.workloads.contains(&Workload::W4).then(|| {
            let shares = workload::shares(ds.rows.len(), a.batch);
            let mut ids = Vec::new();
            let mut per_table_max: f64 = 0.0;
            for (t, (&rows, &share)) in ds.rows.iter().zip(&shares).enumerate() {
                let mut g = DlrmGen::new(rows, share, 64, &target.0, 0xc4ec ^ t as u64);
                let w: Vec<u64> = g.window_ids();
                let h = workload::histogram(&w);
                per_table_max = per_table_max.max(workload::max_bin_error(&h, &target.0));
                ids.extend(w.into_iter().map(|r| ((t as u64) << 48) | r));
            }
            let generated = workload::histogram(&ids);
            W4Check {
                source: target.1.clone(),
                target: target.0.clone(),
                max_bin_error: workload::max_bin_error(&generated, &target.0).max(per_table_max),
                generated,
            }
        });
        Report {
            machine: machine(&a.dir),
            settings: Settings {
                table_rows: ds.rows.clone(),
                dim: ds.dim,
                table_bytes: ds.total_rows() * ds.row_bytes(),
                dram: a.dram,
                batch: a.batch,
                qd: a.qd,
                duration_s: a.duration,
                warmup_s: a.warmup,
                dir: a.dir.display().to_string(),
            },
            w4_histogram,
            loads,
            results,
            fio,
            skipped,
            targets,
        }
    }

    /// The report as markdown.
    pub fn markdown(&self) -> String {
        let mut o = String::new();
        let s = &self.settings;
        let _ = writeln!(o, "machine: {}\n", self.machine);
        let _ = writeln!(
            o,
            "dataset: {} tables of {:?} rows, dim {} ({} B a row), {}; DRAM budget {} ({:.1}% of the table); \
             batches of {} ids; queue depth {}; {} s warm-up, {} s measured per run\n",
            s.table_rows.len(),
            s.table_rows,
            s.dim,
            s.dim * 4,
            gib(s.table_bytes),
            gib(s.dram),
            100.0 * s.dram as f64 / s.table_bytes as f64,
            s.batch,
            s.qd,
            s.warmup_s,
            s.duration_s
        );
        if !self.loads.is_empty() {
            let _ = writeln!(o, "| load | seconds | on disk |\n|---|---:|---:|");
            for l in &self.loads {
                let secs = if l.reused {
                    "reused".to_string()
                } else {
                    format!("{:.1}", l.seconds)
                };
                let _ = writeln!(o, "| {} | {} | {} |", l.engine, secs, gib(l.disk_bytes));
            }
            o.push('\n');
        }
        let mut workloads: Vec<&str> = Vec::new();
        for r in &self.results {
            if !workloads.contains(&r.run.workload.as_str()) {
                workloads.push(&r.run.workload);
            }
        }
        for w in workloads {
            let desc = match w {
                "W1" => Workload::W1.describe(),
                "W2" => Workload::W2.describe(),
                "W3" => Workload::W3.describe(),
                _ => Workload::W4.describe(),
            };
            let _ = writeln!(o, "**{w}: {desc}**\n");
            let _ = writeln!(
                o,
                "| engine | rows/s | p50 ms | p99 ms | peak RSS | DRAM B / cached row | write amp. | embtier ÷ this |\n|---|---:|---:|---:|---:|---:|---:|---:|"
            );
            for r in self.results.iter().filter(|r| r.run.workload == w) {
                let x = &r.run;
                let _ = writeln!(
                    o,
                    "| {} | {} | {:.2} | {:.2} | {} | {} | {} | {} |",
                    x.engine,
                    si(x.rows_per_s),
                    x.p50_us / 1000.0,
                    x.p99_us / 1000.0,
                    gib(x.peak_rss),
                    x.dram_bytes_per_cached_row
                        .map_or("-".into(), |v| format!("{v:.0}")),
                    x.write_amp.map_or("-".into(), |v| format!("{v:.2}")),
                    r.embtier_over_this
                        .map_or("-".into(), |v| format!("{v:.2}x")),
                );
            }
            if w == "W1" {
                match &self.fio {
                    Some(Ok(f)) => {
                        let emb = self
                            .results
                            .iter()
                            .find(|r| r.run.engine == EMB && r.run.workload == "W1")
                            .map(|r| r.run.rows_per_s);
                        let _ = writeln!(
                            o,
                            "| fio randread 4 KiB, QD{} (device limit) | {} IOPS | {:.3} | {:.3} | - | - | - | {} |",
                            s.qd,
                            si(f.iops),
                            f.p50_us / 1000.0,
                            f.p99_us / 1000.0,
                            emb.map_or("-".into(), |e| format!("{:.2}x", e / f.iops))
                        );
                    }
                    Some(Err(e)) => {
                        let _ = writeln!(o, "| fio | {e} | | | | | | |");
                    }
                    None => {}
                }
            }
            o.push('\n');
            for r in self.results.iter().filter(|r| r.run.workload == w) {
                if let (Some(wa), Some(secs)) = (r.run.write_amp_settled, r.run.settle_s) {
                    let _ = writeln!(
                        o,
                        "{}, with the writes it deferred paid as well (its row log merged into the tables after the final persist, {:.1} s): write amp. {:.2}.\n",
                        r.run.engine, secs, wa
                    );
                }
            }
        }
        if let Some(h) = &self.w4_histogram {
            let _ = writeln!(
                o,
                "W4's access-count histogram (rows per count bin, one window of 64 batches) differs from {} by at most {:.2} points per bin.\n",
                h.source,
                100.0 * h.max_bin_error
            );
        }
        let _ = writeln!(
            o,
            "| target | workload | wanted | measured | met |\n|---|---|---|---:|---|"
        );
        for t in &self.targets {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                t.comparison,
                t.workload,
                t.target,
                t.measured.map_or("-".into(), |v| format!("{v:.2}")),
                t.met.map_or("not run", |m| if m { "yes" } else { "NO" })
            );
        }
        o.push('\n');
        let mut notes: Vec<(String, String)> = Vec::new();
        for r in &self.results {
            if !notes.iter().any(|(e, _)| *e == r.run.engine) {
                notes.push((r.run.engine.clone(), r.run.note.clone()));
            }
        }
        for (e, n) in notes {
            let _ = writeln!(o, "- {e}: {n}");
        }
        for s in &self.skipped {
            let _ = writeln!(o, "- skipped {s}");
        }
        o
    }
}

fn gib(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn machine(dir: &std::path::Path) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = crate::proc_kib("/proc/meminfo", "MemTotal:").unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let fs = fs_type(dir);
    format!(
        "{cpu}, {cores} cores, {} memory, Linux {}, data on {fs}",
        gib(mem),
        kernel.trim()
    )
}

fn fs_type(dir: &std::path::Path) -> String {
    let Ok(canon) = std::fs::canonicalize(dir) else {
        return "?".into();
    };
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best = ("", "?", "?");
    for l in mounts.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() >= 3 && canon.starts_with(f[1]) && f[1].len() >= best.0.len() {
            best = (f[1], f[2], f[0]);
        }
    }
    format!("{} ({})", best.1, best.2)
}
