//! The report: one markdown table per workload, or the same data as JSON.

use std::fmt::Write as _;

use embtier_sim::table::Table;

use crate::series;
use crate::workload::{self, Dataset, DlrmGen, Workload};
use crate::{Args, Fio, LoadResult, RunResult};

/// Everything one run of the harness measured.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, serde::Serialize, serde::Deserialize)]
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
    /// W5: seconds at least.
    pub w5_duration_s: f64,
    /// W5: row-log merges embtier must have run.
    pub w5_merges: u64,
    /// W5: seconds between checkpoints.
    pub checkpoint_every_s: f64,
    /// Seconds of W2 per restart run.
    pub restart_s: f64,
}

/// W4's histogram check.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Row {
    /// The run.
    #[serde(flatten)]
    pub run: RunResult,
    /// embtier io_uring's rows/s over this engine's, same workload.
    pub embtier_over_this: Option<f64>,
}

/// A target of the issue.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
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
        // Issue 16's targets.
        let find = |e: &str, w: &str, restart: Option<&str>| {
            runs.iter()
                .find(|r| r.engine == e && r.workload == w && r.restart.as_deref() == restart)
        };
        let sustained = |e: &str| {
            find(e, "W5", None)
                .and_then(|r| r.w5.as_ref())
                .and_then(|x| x.median_minute_rows_per_s)
        };
        let over = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        if a.workloads.contains(&Workload::W5) {
            let e = sustained(EMB);
            t(
                "embtier sustained rows/s vs RocksDB (median minute)",
                "W5",
                ">= 3x",
                over(e, sustained("RocksDB")),
                |x| x >= 3.0,
            );
            t(
                "embtier sustained rows/s vs budget-held mmap (median minute)",
                "W5",
                ">= 2x",
                over(e, sustained("mmap flat file")),
                |x| x >= 2.0,
            );
            let w5 = find(EMB, "W5", None);
            t(
                "embtier write amplification, nothing deferred (log merged)",
                "W5",
                "<= 3",
                w5.and_then(|r| r.write_amp_settled),
                |x| x <= 3.0,
            );
            let x = w5.and_then(|r| r.w5.as_ref());
            t(
                "embtier p99 of batches with a checkpoint vs p99 of the others",
                "W5",
                "<= 2x",
                x.and_then(|x| x.p99_checkpoint_us.map(|c| c / x.p99_other_us)),
                |x| x <= 2.0,
            );
            let t90 = |e: &str, how: &str| find(e, "restart", Some(how)).and_then(|r| r.t90_s);
            let emb_warm = t90(
                EMB,
                crate::RestartMode::Warm.describe(crate::EngineKind::EmbtierUring),
            );
            for how in [
                crate::RestartMode::Cold.describe(crate::EngineKind::Mmap),
                crate::RestartMode::Warm.describe(crate::EngineKind::Mmap),
            ] {
                t(
                    &format!("embtier warm restart, time to 90% vs mmap {how}"),
                    "restart, W2",
                    "<= 0.25x",
                    over(emb_warm, t90("mmap flat file", how)),
                    |x| x <= 0.25,
                );
            }
        }
        if a.warmup == 0.0 && a.workloads.contains(&Workload::W2) {
            let t90 = |e: &str| find(e, "W2", None).and_then(|r| r.t90_s);
            t(
                "embtier cold first open, time to 90% vs mmap",
                "W2",
                "<= 1x",
                over(t90(EMB), t90("mmap flat file")),
                |x| x <= 1.0,
            );
        }
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
                w5_duration_s: a.w5_duration,
                w5_merges: a.w5_merges,
                checkpoint_every_s: a.checkpoint_every,
                restart_s: a.restart_duration,
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
            let mut t = Table::new(["load", "seconds", "on disk"]).right_aligned([1, 2]);
            for l in &self.loads {
                let secs = if l.reused {
                    "reused".to_string()
                } else {
                    format!("{:.1}", l.seconds)
                };
                t.row([l.engine.clone(), secs, gib(l.disk_bytes)]);
            }
            let _ = writeln!(o, "{}", t.markdown());
        }
        let mut workloads: Vec<&str> = Vec::new();
        for r in &self.results {
            if !workloads.contains(&r.run.workload.as_str()) {
                workloads.push(&r.run.workload);
            }
        }
        for w in workloads {
            if w == "restart" {
                self.restarts(&mut o);
                continue;
            }
            let desc = match w {
                "W1" => Workload::W1.describe(),
                "W2" => Workload::W2.describe(),
                "W3" => Workload::W3.describe(),
                "W5" => Workload::W5.describe(),
                _ => Workload::W4.describe(),
            };
            let _ = writeln!(o, "**{w}: {desc}**\n");
            if w == "W5" {
                self.w5(&mut o);
                continue;
            }
            let mut t = Table::new([
                "engine",
                "rows/s",
                "p50 ms",
                "p99 ms",
                "peak RSS",
                "DRAM B / cached row",
                "write amp.",
                "embtier ÷ this",
            ])
            .right_aligned(1..8);
            for r in self.results.iter().filter(|r| r.run.workload == w) {
                let x = &r.run;
                t.row([
                    x.engine.clone(),
                    si(x.rows_per_s),
                    format!("{:.2}", x.p50_us / 1000.0),
                    format!("{:.2}", x.p99_us / 1000.0),
                    gib(x.peak_rss),
                    x.dram_bytes_per_cached_row
                        .map_or("-".into(), |v| format!("{v:.0}")),
                    x.write_amp.map_or("-".into(), |v| format!("{v:.2}")),
                    r.embtier_over_this
                        .map_or("-".into(), |v| format!("{v:.2}x")),
                ]);
            }
            if w == "W1" {
                match &self.fio {
                    Some(Ok(f)) => {
                        let emb = self
                            .results
                            .iter()
                            .find(|r| r.run.engine == EMB && r.run.workload == "W1")
                            .map(|r| r.run.rows_per_s);
                        t.row([
                            format!("fio randread 4 KiB, QD{} (device limit)", s.qd),
                            format!("{} IOPS", si(f.iops)),
                            format!("{:.3}", f.p50_us / 1000.0),
                            format!("{:.3}", f.p99_us / 1000.0),
                            "-".into(),
                            "-".into(),
                            "-".into(),
                            emb.map_or("-".into(), |e| format!("{:.2}x", e / f.iops)),
                        ]);
                    }
                    Some(Err(e)) => {
                        let mut cells = vec!["fio".to_string(), e.clone()];
                        cells.resize(8, String::new());
                        t.row(cells);
                    }
                    None => {}
                }
            }
            let _ = writeln!(o, "{}", t.markdown());
            for r in self.results.iter().filter(|r| r.run.workload == w) {
                if let (Some(wa), Some(secs)) = (r.run.write_amp_settled, r.run.settle_s) {
                    let _ = writeln!(
                        o,
                        "{}, with the writes it deferred paid as well (its row log merged into the tables after the final persist, {:.1} s): write amp. {:.2}.\n",
                        r.run.engine, secs, wa
                    );
                }
            }
            self.cold_start(&mut o, w);
        }
        if let Some(h) = &self.w4_histogram {
            let _ = writeln!(
                o,
                "W4's access-count histogram (rows per count bin, one window of 64 batches) differs from {} by at most {:.2} points per bin.\n",
                h.source,
                100.0 * h.max_bin_error
            );
        }
        let mut t =
            Table::new(["target", "workload", "wanted", "measured", "met"]).right_aligned([3]);
        for x in &self.targets {
            t.row([
                x.comparison.clone(),
                x.workload.clone(),
                x.target.clone(),
                x.measured.map_or("-".into(), |v| format!("{v:.2}")),
                x.met
                    .map_or("not run", |m| if m { "yes" } else { "NO" })
                    .to_string(),
            ]);
        }
        let _ = writeln!(o, "{}", t.markdown());
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

    /// The cold start of workload `w`'s runs: rows/s from the open, beside
    /// the steady state, same runs.
    fn cold_start(&self, o: &mut String, w: &str) {
        let runs: Vec<&RunResult> = self
            .results
            .iter()
            .filter(|r| r.run.workload == w && !r.run.per_second.is_empty())
            .map(|r| &r.run)
            .collect();
        if runs.is_empty() {
            return;
        }
        let run = if w == "W5" {
            "no warm-up: the whole run".to_string()
        } else {
            format!(
                "{} s warm-up, then {} s measured",
                self.settings.warmup_s, self.settings.duration_s
            )
        };
        let _ = writeln!(
            o,
            "{w} from the open ({run}; steady = median of the last third of the seconds from the open; t90 = end of the first tenth of a second from which the next second averages 90% of it):\n"
        );
        let mut t = Table::new([
            "engine",
            "open s",
            "first 10 s rows/s",
            "first 30 s rows/s",
            "steady rows/s",
            "t90 s",
            "seconds from open",
        ])
        .right_aligned(1..7);
        for x in runs {
            t.row(cold_cells(x));
        }
        let _ = writeln!(o, "{}", t.markdown());
    }

    /// W5's tables: the figures, then the per-minute series.
    fn w5(&self, o: &mut String) {
        let runs: Vec<&Row> = self
            .results
            .iter()
            .filter(|r| r.run.workload == "W5")
            .collect();
        let emb = runs
            .iter()
            .find(|r| r.run.engine == EMB)
            .and_then(|r| r.run.w5.as_ref())
            .and_then(|x| x.median_minute_rows_per_s);
        let mut t = Table::new([
            "engine",
            "seconds",
            "rows/s, median minute",
            "rows/s, mean",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "p99 ms, batches with a checkpoint",
            "p99 ms, other batches",
            "checkpoints: n, mean s, max s (training held, max s)",
            "merges",
            "write amp. (window + final persist)",
            "write amp., nothing deferred",
            "peak RSS",
            "embtier ÷ this",
        ])
        .right_aligned(1..15);
        let ms = |us: f64| format!("{:.1}", us / 1000.0);
        for r in &runs {
            let x = &r.run;
            let Some(f) = &x.w5 else { continue };
            let n = f.checkpoint_s.len();
            let mean = f.checkpoint_s.iter().sum::<f64>() / n.max(1) as f64;
            let max = f.checkpoint_s.iter().copied().fold(0.0, f64::max);
            // A report saved before the held times were kept has none.
            let held = f
                .checkpoint_held_s
                .iter()
                .copied()
                .reduce(f64::max)
                .map_or(String::new(), |h| format!(" ({h:.3})"));
            t.row([
                x.engine.clone(),
                format!(
                    "{:.0}{}",
                    f.seconds,
                    if f.capped { " (capped)" } else { "" }
                ),
                f.median_minute_rows_per_s.map_or("-".into(), si),
                si(x.rows_per_s),
                ms(x.p50_us),
                ms(x.p99_us),
                ms(f.p999_us),
                f.p99_checkpoint_us.map_or("-".into(), ms),
                ms(f.p99_other_us),
                format!("{n}, {mean:.2}, {max:.2}{held}"),
                f.merges.map_or("-".into(), |m| m.to_string()),
                x.write_amp.map_or("-".into(), |v| format!("{v:.2}")),
                match (x.write_amp_settled, x.settle_s) {
                    (Some(v), Some(s)) => format!("{v:.2} (merge {s:.1} s)"),
                    _ => x
                        .write_amp
                        .map_or("-".into(), |v| format!("{v:.2} (as persisted)")),
                },
                gib(x.peak_rss),
                emb.zip(f.median_minute_rows_per_s)
                    .map_or("-".into(), |(e, x)| format!("{:.2}x", e / x)),
            ]);
        }
        let _ = writeln!(o, "{}", t.markdown());
        let minutes = runs
            .iter()
            .filter_map(|r| r.run.w5.as_ref().map(|x| x.per_minute.len()))
            .max()
            .unwrap_or(0);
        if minutes > 0 {
            let mut header = vec!["minute".to_string()];
            header.extend(runs.iter().map(|r| r.run.engine.clone()));
            let mut t = Table::new(header).right_aligned(0..=runs.len());
            for m in 0..minutes {
                let mut cells = vec![(m + 1).to_string()];
                for r in &runs {
                    cells.push(
                        r.run
                            .w5
                            .as_ref()
                            .and_then(|x| x.per_minute.get(m))
                            .map_or("-".into(), |&v| si(v)),
                    );
                }
                t.row(cells);
            }
            let _ = writeln!(o, "W5 rows/s per minute from the open:\n\n{}", t.markdown());
        }
        for r in &runs {
            if let Some(line) = r.run.w5.as_ref().and_then(rss_peak_line) {
                let _ = writeln!(o, "- {}: {line}", r.run.engine);
            }
        }
        let _ = writeln!(o);
        self.cold_start(o, "W5");
    }

    /// The restart runs: W2 from the open of the store W5 left.
    fn restarts(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "**Restart after W5: W2 from the open ({} s per run; steady and t90 as above)**\n",
            self.settings.restart_s
        );
        let mut t = Table::new([
            "engine",
            "how",
            "open s",
            "first 10 s rows/s",
            "first 30 s rows/s",
            "steady rows/s",
            "t90 s",
            "seconds from open",
        ])
        .right_aligned(2..8);
        for r in self.results.iter().filter(|r| r.run.workload == "restart") {
            let mut cells = cold_cells(&r.run);
            cells.insert(1, r.run.restart.clone().unwrap_or_default());
            t.row(cells);
        }
        let _ = writeln!(o, "{}", t.markdown());
    }
}

/// A run's cold-start cells: engine, open s, first 10 s, first 30 s,
/// steady, t90, seconds.
fn cold_cells(x: &RunResult) -> Vec<String> {
    let ps = &x.per_second;
    vec![
        x.engine.clone(),
        format!("{:.2}", x.open_s),
        series::first(ps, 10).map_or("-".into(), si),
        series::first(ps, 30).map_or("-".into(), si),
        x.steady_rows_per_s.map_or("-".into(), si),
        x.t90_s.map_or("-".into(), |v| format!("{v:.1}")),
        ps.len().to_string(),
    ]
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

/// Where a W5 run's sampled RSS peaked: the highest sample during training
/// and after it (the final persist, the deferred writes, the close).
fn rss_peak_line(f: &crate::W5Result) -> Option<String> {
    let end = f
        .phases_s
        .iter()
        .find(|(p, _)| p == "persist")
        .map_or(f64::INFINITY, |(_, t)| *t);
    let peak = |train: bool| {
        f.rss_series
            .iter()
            .filter(|(t, _)| (*t < end) == train)
            .max_by_key(|(_, r)| *r)
            .copied()
    };
    let (tt, tr) = peak(true)?;
    let phase = |t: f64| {
        f.phases_s
            .iter()
            .rev()
            .find(|(_, s)| *s <= t)
            .map_or("training", |(p, _)| p.as_str())
    };
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut s = format!(
        "sampled RSS peaked at {:.0} MiB during training (at {tt:.0} s)",
        mib(tr)
    );
    let mut top = tr;
    if let Some((at, ar)) = peak(false) {
        s += &format!(
            ", {:.0} MiB after it (at {at:.0} s, {})",
            mib(ar),
            phase(at)
        );
        top = top.max(ar);
    }
    if let Some(r0) = f.rss_before_open {
        s += &format!(
            "; {:.0} MiB before the open, so the engine's own peak is {:.0} MiB",
            mib(r0),
            mib(top.saturating_sub(r0))
        );
    }
    Some(s)
}
