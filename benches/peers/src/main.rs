//! `embtier-peers`: embtier against RocksDB, foyer, an mmap'd flat file, a
//! flat in-memory gather and fio's device limit, on the same data, the same
//! DRAM budget and the same workloads, in one run.
//!
//! Each engine loads once (timed apart from the runs), then runs each
//! workload in a child process of its own, so that peak RSS and disk writes
//! are its own. The mmap engine's children run in a memory cgroup whose
//! limit is the budget, which is what bounds its page cache.
//!
//! Every run also records its rows per second from the moment the engine
//! opens ([`series`]): with `--warmup 0`, that is the cold start. W5 is a
//! training job as it lives: W3's loop for ten minutes or more with a
//! checkpoint every minute, every deferred cost inside the window, then
//! restarts of the store it leaves (see `docs/benchmarks.md`).
//!
//! ```text
//! cargo run --release -p embtier-peers -- --workload w2 --rows 20000000 --dim 64 --dram 512MiB
//! cargo run --release -p embtier-peers -- --workload w5 --engine embtier-uring,mmap --plot-dir plots
//! ```

mod engines;
mod plot;
mod report;
mod series;
mod workload;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use clap::Parser;
use engines::{Engine, EngineKind, Setup};
use workload::{Batch, Dataset, Generator, Workload};

/// Compare embtier with its peers; prints a markdown table (or `--json`).
#[derive(Parser, Debug, Clone)]
#[command(version, about)]
pub struct Args {
    /// Workloads to run, comma-separated.
    #[arg(long = "workload", value_delimiter = ',', default_values = ["w1", "w2", "w3", "w4"])]
    workloads: Vec<Workload>,
    /// Engines to compare, comma-separated.
    #[arg(long = "engine", value_delimiter = ',',
          default_values = ["flat", "embtier-uring", "embtier-psync", "rocksdb", "foyer", "mmap"])]
    engines: Vec<EngineKind>,
    /// Rows in all tables together.
    #[arg(long, default_value_t = 20_000_000)]
    rows: u64,
    /// Tables; sizes halve from one to the next.
    #[arg(long, default_value_t = 4)]
    tables: usize,
    /// f32 elements per row.
    #[arg(long, default_value_t = 64)]
    dim: u32,
    /// DRAM budget of every engine (e.g. 512MiB).
    #[arg(long, default_value = "512MiB", value_parser = parse_bytes)]
    dram: u64,
    /// Seconds each engine runs each workload, after the warm-up.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Seconds of warm-up before each measured run.
    #[arg(long, default_value_t = 10.0)]
    warmup: f64,
    /// Ids a batch.
    #[arg(long, default_value_t = 4096)]
    batch: usize,
    /// I/O queue depth (embtier, foyer's io_uring engine, fio).
    #[arg(long, default_value_t = 32)]
    qd: u32,
    /// Where the engines keep their data (a real disk, not tmpfs).
    #[arg(long, default_value = "target/peers-data")]
    dir: PathBuf,
    /// Reload every engine even when its data is already there.
    #[arg(long)]
    reload: bool,
    /// Skip fio.
    #[arg(long)]
    no_fio: bool,
    /// dlrm_datasets locality statistics for W4's histogram.
    #[arg(long, default_value = "../shared/traces/dlrm-2021-locality_stats.txt")]
    dlrm_stats: PathBuf,
    /// Print JSON instead of markdown.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    json_out: Option<PathBuf>,
    /// Internal: run one engine in this process.
    #[arg(long, hide = true)]
    child_engine: Option<EngineKind>,
    /// Internal: the workload of that child, or none to load.
    #[arg(long, hide = true)]
    child_workload: Option<Workload>,
    /// Internal: the memory cgroup that child joins.
    #[arg(long, hide = true)]
    child_cgroup: Option<PathBuf>,
    /// W5: seconds it runs at least (the issue's ten minutes).
    #[arg(long, default_value_t = 600.0)]
    w5_duration: f64,
    /// W5: go on past --w5-duration until embtier has run this many
    /// row-log merges since it opened (0: do not wait for merges); the
    /// engines after it then run as long as it did.
    #[arg(long, default_value_t = 3)]
    w5_merges: u64,
    /// W5: seconds it runs at most, whatever the merges.
    #[arg(long, default_value_t = 1800.0)]
    w5_max_duration: f64,
    /// W5: seconds between checkpoints.
    #[arg(long, default_value_t = 60.0)]
    checkpoint_every: f64,
    /// After W5: seconds of W2 in each restart run.
    #[arg(long, default_value_t = 60.0)]
    restart_duration: f64,
    /// After W5: skip the restart runs.
    #[arg(long)]
    no_restart: bool,
    /// After W5: also restart embtier after a SIGKILL that follows a
    /// checkpoint (a child trains for 30 s, checkpoints, trains 8 more
    /// batches and kills itself).
    #[arg(long)]
    restart_kill: bool,
    /// Write the per-second series as SVG charts into this directory.
    #[arg(long)]
    plot_dir: Option<PathBuf>,
    /// Run nothing: read a report written by --json-out, print it as
    /// markdown, and draw its charts (with --plot-dir).
    #[arg(long)]
    replot: Option<PathBuf>,
    /// Internal: this child is a restart run of this kind.
    #[arg(long, hide = true)]
    child_restart: Option<RestartMode>,
    /// Internal: W5 runs exactly this long in this child (embtier's time).
    #[arg(long, hide = true)]
    child_w5_secs: Option<f64>,
    /// Internal: this child trains (`--child-w5-secs`, 30 by default, with
    /// a checkpoint every `--checkpoint-every`), checkpoints and kills itself.
    #[arg(long, hide = true)]
    child_kill: bool,
}

/// How a restart run reopens the store W5 left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RestartMode {
    /// As a trainer reopens: embtier reads its hot set back (warm
    /// restart), mmap finds what the page cache kept, RocksDB reopens.
    Warm,
    /// With the cache empty: embtier opened `cold`, mmap with the file's
    /// pages dropped (as after a reboot).
    Cold,
    /// embtier, after a SIGKILL that followed a checkpoint: a warm open.
    Kill,
}

impl RestartMode {
    /// How the report names the run.
    pub fn describe(self, k: EngineKind) -> &'static str {
        match (self, k) {
            (RestartMode::Warm, EngineKind::Mmap) => "reopened, page cache kept",
            (RestartMode::Cold, EngineKind::Mmap) => "reopened, page cache dropped",
            (RestartMode::Warm, EngineKind::Rocksdb) => "reopened",
            (RestartMode::Warm, _) if engines::keeps_tiers() => {
                "closed, reopened warm (kept in shm)"
            }
            (RestartMode::Warm, _) => "closed, reopened warm (hot rows put back)",
            (RestartMode::Cold, _) => "closed, reopened cold",
            (RestartMode::Kill, _) => "SIGKILL after a checkpoint, reopened warm",
        }
    }

    /// The restarts run for an engine after its W5.
    pub fn for_engine(k: EngineKind, kill: bool) -> Vec<RestartMode> {
        match k {
            EngineKind::EmbtierUring if kill => {
                vec![RestartMode::Warm, RestartMode::Cold, RestartMode::Kill]
            }
            EngineKind::EmbtierUring | EngineKind::Mmap => {
                vec![RestartMode::Warm, RestartMode::Cold]
            }
            EngineKind::Rocksdb => vec![RestartMode::Warm],
            _ => Vec::new(),
        }
    }
}

fn parse_bytes(s: &str) -> Result<u64, String> {
    s.parse::<embtier::config::ByteSize>().map(|b| b.0)
}

/// One measured run, as a child reports it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RunResult {
    /// Engine.
    pub engine: String,
    /// Workload.
    pub workload: String,
    /// Rows looked up per second.
    pub rows_per_s: f64,
    /// Median batch latency, µs.
    pub p50_us: f64,
    /// 99th-percentile batch latency, µs.
    pub p99_us: f64,
    /// Batches measured.
    pub batches: u64,
    /// Peak RSS of the process, bytes.
    pub peak_rss: u64,
    /// RSS growth from before the engine opened to the run's end, per row
    /// the engine reports cached.
    pub dram_bytes_per_cached_row: Option<f64>,
    /// Rows cached at the end.
    pub cached_rows: u64,
    /// Disk bytes written during the run and the final persist, per byte of
    /// rows updated (unique per batch); W3 only.
    pub write_amp: Option<f64>,
    /// Write amplification once the engine has also paid its deferred
    /// writes (`Engine::settle`: embtier's row-log merge); `None` when it
    /// defers none.
    pub write_amp_settled: Option<f64>,
    /// Seconds `settle` took.
    pub settle_s: Option<f64>,
    /// Seconds to open the engine.
    pub open_s: f64,
    /// Seconds the final persist took (W3).
    pub persist_s: Option<f64>,
    /// Batches whose values were checked against the dataset.
    pub verified_batches: u64,
    /// Facts of the setup.
    pub note: String,
    /// Rows/s of every whole second from the moment the engine opened
    /// (warm-up included).
    #[serde(default)]
    pub per_second: Vec<f64>,
    /// Rows/s of every whole tenth of a second from the open (what the
    /// time to 90% is read from).
    #[serde(default)]
    pub per_tenth: Vec<f64>,
    /// Median rows/s of the last third of `per_second`.
    #[serde(default)]
    pub steady_rows_per_s: Option<f64>,
    /// Seconds from the open to 90% of `steady_rows_per_s`, to a tenth
    /// (`series::t90`).
    #[serde(default)]
    pub t90_s: Option<f64>,
    /// A restart run: how the store was reopened.
    #[serde(default)]
    pub restart: Option<String>,
    /// W5's figures.
    #[serde(default)]
    pub w5: Option<W5Result>,
}

/// What W5 measured beyond a plain run.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct W5Result {
    /// Seconds trained (from the open to the end of the last batch).
    pub seconds: f64,
    /// Mean rows/s of each whole minute.
    pub per_minute: Vec<f64>,
    /// Their median: the sustained figure (`None` under a minute).
    pub median_minute_rows_per_s: Option<f64>,
    /// 99.9th-percentile batch latency, µs, all batches.
    pub p999_us: f64,
    /// p99 of the batches that ran a checkpoint (which waited on it), µs.
    pub p99_checkpoint_us: Option<f64>,
    /// p99 of the other batches, µs.
    pub p99_other_us: f64,
    /// Seconds each periodic checkpoint took, from its call to its commit
    /// (for one that finished beside training, its thread's time too).
    pub checkpoint_s: Vec<f64>,
    /// Seconds training waited in each periodic checkpoint's call (the
    /// same as `checkpoint_s` for an engine that checkpoints in the call).
    #[serde(default)]
    pub checkpoint_held_s: Vec<f64>,
    /// Row-log merges (embtier) during the window.
    pub merges: Option<u64>,
    /// Whether `--w5-max-duration` ended the run before the merges.
    pub capped: bool,
    /// Seconds the engine took to close (`None`: not closed, foyer).
    pub close_s: Option<f64>,
    /// RSS of the process every half second from the open to the close:
    /// (seconds from the open, bytes). Where in the run the peak falls.
    #[serde(default)]
    pub rss_series: Vec<(f64, u64)>,
    /// Seconds from the open at which training ended and the final
    /// persist began, the deferred writes (`settle`) began, and the close
    /// began: the phases of `rss_series` after training.
    #[serde(default)]
    pub phases_s: Vec<(String, f64)>,
    /// RSS of the process just before the engine opened (the harness's
    /// own: its code, the generator): what the engine's memory is beyond.
    #[serde(default)]
    pub rss_before_open: Option<u64>,
}

/// Samples the process's RSS every half second on its own thread until
/// dropped (W5's `rss_series`).
struct RssSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<std::thread::JoinHandle<Vec<(f64, u64)>>>,
}

impl RssSampler {
    fn start(t0: Instant) -> RssSampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut v = Vec::new();
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(r) = proc_status("VmRSS:") {
                    v.push((t0.elapsed().as_secs_f64(), r));
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            v
        });
        RssSampler {
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> Vec<(f64, u64)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

/// One load, as a child reports it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct LoadResult {
    /// Engine.
    pub engine: String,
    /// Seconds (NaN, written as null, when reused).
    #[serde(deserialize_with = "f64_or_nan")]
    pub seconds: f64,
    /// Bytes on disk afterwards.
    pub disk_bytes: u64,
    /// Whether it was reused from an earlier run.
    pub reused: bool,
}

/// An `f64` that JSON wrote as `null` (serde_json writes NaN so) reads
/// back as NaN.
fn f64_or_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    use serde::Deserialize as _;
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let usage = e.use_stderr();
            let _ = e.print();
            return ExitCode::from(if usage { 2 } else { 0 });
        }
    };
    if let Err(e) = check_args(&args) {
        eprintln!("embtier-peers: {e}");
        return ExitCode::from(2);
    }
    let r = match (&args.replot, args.child_engine) {
        (Some(p), _) => replot(&args, p),
        (None, Some(kind)) => child(&args, kind),
        (None, None) => parent(&args),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("embtier-peers: {e}");
            ExitCode::from(1)
        }
    }
}

fn check_args(a: &Args) -> Result<(), String> {
    if a.rows == 0 || a.tables == 0 || a.dim == 0 || a.batch == 0 {
        return Err("--rows, --tables, --dim and --batch must be positive".into());
    }
    if a.rows < a.tables as u64 {
        return Err(format!(
            "--rows {} is fewer than --tables {}",
            a.rows, a.tables
        ));
    }
    if a.dim > 1018 {
        return Err(format!(
            "--dim {} exceeds one row per 4 KiB block (1018)",
            a.dim
        ));
    }
    if !(a.duration > 0.0 && a.duration.is_finite() && a.warmup >= 0.0 && a.warmup.is_finite()) {
        return Err("--duration must be positive and --warmup not negative".into());
    }
    for (name, v) in [
        ("--w5-duration", a.w5_duration),
        ("--w5-max-duration", a.w5_max_duration),
        ("--checkpoint-every", a.checkpoint_every),
        ("--restart-duration", a.restart_duration),
    ] {
        if !(v > 0.0 && v.is_finite()) {
            return Err(format!("{name} {v} must be a positive number of seconds"));
        }
    }
    if a.w5_max_duration < a.w5_duration {
        return Err(format!(
            "--w5-max-duration {} is under --w5-duration {}",
            a.w5_max_duration, a.w5_duration
        ));
    }
    if a.qd == 0 || a.qd > 4096 {
        return Err(format!("--qd {} out of 1..=4096", a.qd));
    }
    if a.dram < 1 << 20 {
        return Err(format!("--dram {} is under 1 MiB", a.dram));
    }
    Ok(())
}

fn dataset(a: &Args) -> Dataset {
    Dataset::new(a.rows, a.tables, a.dim)
}

fn setup(a: &Args, kind: EngineKind) -> Setup {
    Setup {
        dir: kind.data_dir(&a.dir),
        ds: dataset(a),
        dram: a.dram,
        qd: a.qd,
    }
}

// ------------------------------------------------------------------ parent

fn parent(a: &Args) -> Result<(), String> {
    std::fs::create_dir_all(&a.dir).map_err(|e| format!("{}: {e}", a.dir.display()))?;
    let ds = dataset(a);
    let target = w4_target(a)?;
    let mut loads = Vec::new();
    let mut results: Vec<RunResult> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    let flat_fits = fits_in_memory(ds.total_rows() * ds.row_bytes());
    let cgroup = if a.engines.contains(&EngineKind::Mmap) {
        Some(make_cgroup(a.dram))
    } else {
        None
    };
    let engines: Vec<EngineKind> = a
        .engines
        .iter()
        .copied()
        .filter(|&k| {
            if k == EngineKind::Flat && !flat_fits {
                skipped.push(format!(
                    "{}: the table does not fit in half of free memory",
                    k.name()
                ));
                false
            } else {
                true
            }
        })
        .collect();
    // Loads: the two embtier engines share one store.
    let mut loaded = Vec::new();
    for &k in &engines {
        if k == EngineKind::Flat {
            continue;
        }
        let dir = k.data_dir(&a.dir);
        if loaded.contains(&dir) {
            continue;
        }
        loaded.push(dir.clone());
        let marker = dir.join("peers-dataset.json");
        let want = serde_json::to_string(&ds).expect("dataset json");
        if !a.reload && std::fs::read_to_string(&marker).ok().as_deref() == Some(want.as_str()) {
            loads.push(LoadResult {
                engine: k.name().into(),
                seconds: f64::NAN,
                disk_bytes: du(&dir),
                reused: true,
            });
            continue;
        }
        let _ = std::fs::remove_dir_all(&dir);
        eprintln!("loading {} ...", k.name());
        let out = spawn_child(a, k, None, None, &[], false)?;
        let mut l: LoadResult = parse_line(&out, k)?;
        l.disk_bytes = du(&dir);
        loads.push(l);
        std::fs::write(&marker, want).map_err(|e| format!("{}: {e}", marker.display()))?;
    }
    // fio runs right after embtier's W1 (below), so that the two see the
    // disk in the same state: a cloud disk's speed drifts over minutes.
    let want_fio = !a.no_fio && a.workloads.contains(&Workload::W1);
    let mut fio = None;
    // Runs: reads first, the writing workload last, so that every engine
    // reads the data as loaded.
    let mut order: Vec<Workload> = a
        .workloads
        .iter()
        .copied()
        .filter(|w| !w.updates())
        .collect();
    order.extend(a.workloads.iter().copied().filter(|w| w.updates()));
    order.dedup();
    // W5 runs as long as embtier took to reach its merges: embtier first.
    // (The cold_fill-off variant is for the cold starts only.)
    let mut w5_engines: Vec<EngineKind> = engines
        .iter()
        .copied()
        .filter(|&k| k != EngineKind::EmbtierUringNofill)
        .collect();
    w5_engines.sort_by_key(|&k| k != EngineKind::EmbtierUring);
    let mut w5_secs: Option<f64> = None;
    for &w in &order {
        let list = if w == Workload::W5 {
            &w5_engines
        } else {
            &engines
        };
        for &k in list {
            eprintln!("{:?} on {} ...", w, k.name());
            uptime(&format!("before {w:?} on {}", k.name()));
            if w.updates() {
                // The run changes the data: the next harness run reloads.
                let _ = std::fs::remove_file(k.data_dir(&a.dir).join("peers-dataset.json"));
            }
            let cg = if k == EngineKind::Mmap {
                cgroup.as_ref().and_then(|c| c.as_ref().ok()).cloned()
            } else {
                None
            };
            let mut extra = Vec::new();
            if let (Workload::W5, Some(s)) = (w, w5_secs) {
                extra = vec!["--child-w5-secs".to_string(), format!("{s}")];
            }
            let out = spawn_child(a, k, Some(w), cg.as_deref(), &extra, false)?;
            let mut r: RunResult = parse_line(&out, k)?;
            uptime(&format!("after {w:?} on {}", k.name()));
            if w == Workload::W5 && w5_secs.is_none() && k == EngineKind::EmbtierUring {
                w5_secs = r.w5.as_ref().map(|x| x.seconds);
            }
            if k == EngineKind::Mmap {
                r.note = match &cgroup {
                    Some(Ok(p)) => format!(
                        "{}; page cache held to the budget by memory cgroup {}",
                        r.note,
                        p.display()
                    ),
                    Some(Err(e)) => format!("{}; UNBOUNDED page cache ({e})", r.note),
                    None => r.note,
                };
            }
            results.push(r);
            if w == Workload::W5 && !a.no_restart {
                for mode in RestartMode::for_engine(k, a.restart_kill) {
                    results.push(restart(a, k, mode, cg.as_deref())?);
                }
            }
            if want_fio
                && w == Workload::W1
                && (k == EngineKind::EmbtierUring || k == EngineKind::Mmap)
                && fio.is_none()
            {
                fio = Some(run_fio(a));
            }
        }
    }
    if want_fio && fio.is_none() {
        fio = Some(run_fio(a));
    }
    if let Some(Ok(p)) = &cgroup {
        let _ = std::fs::remove_dir(p);
    }
    let rep = report::Report::new(a, &ds, &target, loads, results, fio, skipped);
    if let Some(dir) = &a.plot_dir {
        for p in plot::write_all(&rep, dir)? {
            eprintln!("wrote {}", p.display());
        }
    }
    let json = serde_json::to_string_pretty(&rep).map_err(|e| e.to_string())?;
    if let Some(p) = &a.json_out {
        std::fs::write(p, &json).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    if a.json {
        println!("{json}");
    } else {
        print!("{}", rep.markdown());
    }
    Ok(())
}

/// `--replot`: a saved report, printed and drawn again.
fn replot(a: &Args, path: &Path) -> Result<(), String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--replot {}: {e}", path.display()))?;
    let rep: report::Report = serde_json::from_str(&text)
        .map_err(|e| format!("--replot {}: not a report: {e}", path.display()))?;
    if let Some(dir) = &a.plot_dir {
        for p in plot::write_all(&rep, dir)? {
            eprintln!("wrote {}", p.display());
        }
    }
    print!("{}", rep.markdown());
    Ok(())
}

/// W4's target histogram and where it came from.
pub fn w4_target(a: &Args) -> Result<(Vec<f64>, String), String> {
    match workload::dlrm_target(&a.dlrm_stats) {
        Ok(Some(t)) => Ok((t, a.dlrm_stats.display().to_string())),
        Ok(None) => Ok((
            workload::DLRM_FALLBACK.to_vec(),
            format!(
                "{} absent: the embedded copy of its first batch file",
                a.dlrm_stats.display()
            ),
        )),
        Err(e) => Err(format!("{}: {e}", a.dlrm_stats.display())),
    }
}

fn fits_in_memory(bytes: u64) -> bool {
    bytes <= proc_kib("/proc/meminfo", "MemAvailable:").unwrap_or(0) / 2
}

/// A memory cgroup (v1 or v2) limited to the budget plus the process's own
/// heap and code, for the mmap engine's children.
fn make_cgroup(dram: u64) -> Result<PathBuf, String> {
    // The child's own anonymous memory (code, batch buffers, generator)
    // is under 20 MiB; the rest of the limit is page cache.
    let slack = 32u64 << 20;
    let name = format!("embtier-peers-{}", std::process::id());
    let tries = [
        (
            PathBuf::from("/sys/fs/cgroup/memory"),
            "memory.limit_in_bytes",
        ),
        (PathBuf::from("/sys/fs/cgroup"), "memory.max"),
    ];
    let mut why = String::new();
    for (root, file) in tries {
        if !root.join("cgroup.procs").exists() {
            continue;
        }
        let p = root.join(&name);
        match std::fs::create_dir_all(&p)
            .and_then(|_| std::fs::write(p.join(file), (dram + slack).to_string()))
        {
            Ok(()) => return Ok(p),
            Err(e) => why = format!("{}: {e}", p.display()),
        }
    }
    Err(if why.is_empty() {
        "no memory cgroup hierarchy".into()
    } else {
        why
    })
}

/// After W5: reopen `k`'s store as `mode` says and run W2 on it, from the
/// open, for `--restart-duration` seconds.
fn restart(
    a: &Args,
    k: EngineKind,
    mode: RestartMode,
    cg: Option<&Path>,
) -> Result<RunResult, String> {
    let value = clap::ValueEnum::to_possible_value(&mode)
        .expect("value")
        .get_name()
        .to_string();
    if mode == RestartMode::Kill {
        eprintln!("{}: training 30 s, checkpoint, SIGKILL ...", k.name());
        spawn_child(
            a,
            k,
            Some(Workload::W5),
            cg,
            &["--child-kill".to_string()],
            true,
        )?;
    }
    eprintln!("restart of {}: {} ...", k.name(), mode.describe(k));
    uptime(&format!("before the {value} restart of {}", k.name()));
    let out = spawn_child(
        a,
        k,
        Some(Workload::W2),
        cg,
        &["--child-restart".to_string(), value.clone()],
        false,
    )?;
    uptime(&format!("after the {value} restart of {}", k.name()));
    let mut r: RunResult = parse_line(&out, k)?;
    r.workload = "restart".into();
    r.restart = Some(mode.describe(k).into());
    Ok(r)
}

/// The load average, on stderr, so that a log shows how quiet the machine
/// was around each run.
fn uptime(when: &str) {
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let l: Vec<&str> = l.split_whitespace().take(3).collect();
    eprintln!("load average {} ({when})", l.join(" "));
}

fn spawn_child(
    _a: &Args,
    k: EngineKind,
    w: Option<Workload>,
    cg: Option<&Path>,
    extra: &[String],
    killed_ok: bool,
) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut c = Command::new(exe);
    c.args(std::env::args_os().skip(1))
        .arg("--child-engine")
        .arg(
            clap::ValueEnum::to_possible_value(&k)
                .expect("value")
                .get_name(),
        );
    if let Some(w) = w {
        c.arg("--child-workload").arg(
            clap::ValueEnum::to_possible_value(&w)
                .expect("value")
                .get_name(),
        );
    }
    if let Some(cg) = cg {
        c.arg("--child-cgroup").arg(cg);
    }
    c.args(extra);
    let out = c
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("spawning the {} child: {e}", k.name()))?;
    use std::os::unix::process::ExitStatusExt as _;
    let killed = out.status.signal() == Some(libc::SIGKILL);
    let ok = out.status.success() || (killed_ok && killed);
    if !ok {
        return Err(format!("{} child failed ({})", k.name(), out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn parse_line<T: serde::de::DeserializeOwned>(out: &str, k: EngineKind) -> Result<T, String> {
    let line = out
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("RESULT "))
        .ok_or_else(|| format!("{} child printed no result", k.name()))?;
    serde_json::from_str(line).map_err(|e| format!("{} child's result: {e}", k.name()))
}

fn du(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => n += du(&e.path()),
                Ok(m) => n += m.blocks() * 512,
                Err(_) => {}
            }
        }
    }
    n
}

/// fio's limit on the same file system, as the device column of W1.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Fio {
    /// The command.
    pub command: String,
    /// 4 KiB reads a second.
    pub iops: f64,
    /// Median completion latency, µs.
    #[serde(deserialize_with = "f64_or_nan")]
    pub p50_us: f64,
    /// 99th percentile, µs.
    #[serde(deserialize_with = "f64_or_nan")]
    pub p99_us: f64,
}

fn run_fio(a: &Args) -> Result<Fio, String> {
    let file = EngineKind::EmbtierUring
        .data_dir(&a.dir)
        .join("store")
        .join(embtier::DATA_FILE);
    let file = if file.exists() {
        file
    } else {
        EngineKind::Mmap.data_dir(&a.dir).join("table.f32")
    };
    if !file.exists() {
        return Err("no data file to read (run embtier or mmap too)".into());
    }
    let secs = a.duration.ceil() as u64;
    let args = vec![
        "--name=w1".to_string(),
        format!("--filename={}", file.display()),
        "--rw=randread".into(),
        "--bs=4k".into(),
        "--direct=1".into(),
        "--ioengine=io_uring".into(),
        format!("--iodepth={}", a.qd),
        format!("--runtime={secs}"),
        "--ramp_time=2".into(),
        "--time_based".into(),
        "--readonly".into(),
        "--output-format=json".into(),
    ];
    let command = format!("fio {}", args.join(" "));
    eprintln!("{command}");
    let out = Command::new("fio")
        .args(&args)
        .output()
        .map_err(|e| format!("fio: {e} (apt-get install fio)"))?;
    if !out.status.success() {
        return Err(format!(
            "fio failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("fio's JSON: {e}"))?;
    let read = &v["jobs"][0]["read"];
    let pct = |p: &str| {
        read["clat_ns"]["percentile"][p]
            .as_f64()
            .unwrap_or(f64::NAN)
            / 1000.0
    };
    Ok(Fio {
        command,
        iops: read["iops"].as_f64().ok_or("fio's JSON has no read iops")?,
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
    })
}

// ------------------------------------------------------------------ child

/// Open `k`. Every run but a warm restart opens with the cache empty:
/// embtier cold (the hot set its load's checkpoint recorded is the load's,
/// not the workload's), mmap with the file's pages dropped.
fn open_engine(
    a: &Args,
    k: EngineKind,
    restart: Option<RestartMode>,
) -> Result<Box<dyn Engine>, String> {
    let s = setup(a, k);
    let warm = matches!(restart, Some(RestartMode::Warm | RestartMode::Kill));
    use embtier::IoEngineKind::{Psync, Uring};
    Ok(match k {
        EngineKind::Flat => Box::new(engines::Flat::new(&s)),
        EngineKind::EmbtierUring => Box::new(engines::Embtier::open(&s, Uring, !warm, true)?),
        EngineKind::EmbtierUringNofill => {
            Box::new(engines::Embtier::open(&s, Uring, !warm, false)?)
        }
        EngineKind::EmbtierPsync => Box::new(engines::Embtier::open(&s, Psync, !warm, true)?),
        EngineKind::Rocksdb => Box::new(engines::Rocks::open(&s)?),
        EngineKind::Foyer => Box::new(engines::Foyer::open(&s)?),
        EngineKind::Mmap => Box::new(engines::Mmap::open(&s, !warm)?),
    })
}

fn child(a: &Args, k: EngineKind) -> Result<(), String> {
    let Some(w) = a.child_workload else {
        let s = setup(a, k);
        let t = Instant::now();
        match k {
            EngineKind::Flat => {}
            EngineKind::EmbtierUring
            | EngineKind::EmbtierUringNofill
            | EngineKind::EmbtierPsync => engines::Embtier::load(&s)?,
            EngineKind::Rocksdb => engines::Rocks::load(&s)?,
            EngineKind::Foyer => engines::Foyer::load(&s)?,
            EngineKind::Mmap => engines::Mmap::load(&s)?,
        }
        let l = LoadResult {
            engine: k.name().into(),
            seconds: t.elapsed().as_secs_f64(),
            disk_bytes: 0,
            reused: false,
        };
        println!(
            "RESULT {}",
            serde_json::to_string(&l).map_err(|e| e.to_string())?
        );
        return Ok(());
    };
    if let Some(cg) = &a.child_cgroup {
        std::fs::write(cg.join("cgroup.procs"), std::process::id().to_string())
            .map_err(|e| format!("joining {}: {e}", cg.display()))?;
    }
    let ds = dataset(a);
    let (target, _) = w4_target(a)?;
    let rss0 = proc_status("VmRSS:");
    let disk_open = disk_sectors_written(&a.dir);
    let t0 = Instant::now();
    let mut series = series::Series::new(t0);
    let mut eng = open_engine(a, k, a.child_restart)?;
    let open_s = t0.elapsed().as_secs_f64();
    let mut gen = Generator::new(&ds, w, a.batch, 0xb0a7 ^ w as u64, &target);
    let mut st = Stepper::new(&ds, a.batch, k, w);
    if a.child_kill {
        return kill_run(a, eng, &mut gen, &mut st, t0);
    }
    if w == Workload::W5 {
        let r = w5_run(
            a,
            k,
            eng,
            &mut gen,
            &mut st,
            Start {
                t0,
                series,
                open_s,
                rss0,
                disk_open,
            },
        )?;
        return print_and_exit(&r);
    }
    let restart = a.child_restart.is_some();
    let (warmup, duration) = if restart {
        (0.0, a.restart_duration)
    } else {
        (a.warmup, a.duration)
    };
    // Warm-up; the first batches of a read workload are checked value by
    // value (not in a restart run: W5 changed the values).
    let warm = Instant::now();
    let mut i = 0u64;
    while warm.elapsed().as_secs_f64() < warmup || i < 4 {
        let b = gen.next_batch();
        st.step(&mut eng, &b, !w.updates() && !restart && i < 32)?;
        series.add(b.len() as u64);
        i += 1;
    }
    let disk0 = disk_sectors_written(&a.dir);
    let mut hist = histogram();
    let mut rows = 0u64;
    let mut updated = 0u64;
    let mut batches = 0u64;
    let run = Instant::now();
    while run.elapsed().as_secs_f64() < duration || batches < 2 {
        let b = gen.next_batch();
        let bt = Instant::now();
        st.step(&mut eng, &b, false)?;
        hist.saturating_record(bt.elapsed().as_micros() as u64);
        rows += b.len() as u64;
        series.add(b.len() as u64);
        if w.updates() {
            updated += b.unique_rows() as u64;
        }
        batches += 1;
    }
    let secs = run.elapsed().as_secs_f64();
    let per_second = series.per_second();
    let per_tenth = series.per_tenth();
    let cache = eng.cache();
    let rss1 = proc_status("VmRSS:");
    let update_bytes = updated as f64 * ds.row_bytes() as f64;
    let wa_now = || {
        disk_sectors_written(&a.dir)
            .zip(disk0)
            .map(|(b, a)| ((b - a) * 512) as f64 / update_bytes)
    };
    let (write_amp, persist_s) = if w.updates() {
        let t = Instant::now();
        eng.persist()?;
        (wa_now(), Some(t.elapsed().as_secs_f64()))
    } else {
        (None, None)
    };
    let note = note(&*eng, &cache);
    let (mut write_amp_settled, mut settle_s) = (None, None);
    if w.updates() {
        let t = Instant::now();
        if eng.settle()? {
            write_amp_settled = wa_now();
            settle_s = Some(t.elapsed().as_secs_f64());
        }
    }
    let steady = series::steady(&per_second);
    let r = RunResult {
        engine: k.name().into(),
        workload: format!("{w:?}"),
        rows_per_s: rows as f64 / secs,
        p50_us: hist.value_at_quantile(0.5) as f64,
        p99_us: hist.value_at_quantile(0.99) as f64,
        batches,
        peak_rss: proc_status("VmHWM:").unwrap_or(0),
        dram_bytes_per_cached_row: per_cached_row(rss0, rss1, cache.rows),
        cached_rows: cache.rows,
        write_amp,
        write_amp_settled,
        settle_s,
        open_s,
        persist_s,
        verified_batches: st.verified,
        note,
        t90_s: steady.and_then(|s| series::t90(&per_tenth, s)),
        per_tenth,
        steady_rows_per_s: steady,
        per_second,
        restart: None,
        w5: None,
    };
    // A restart's run closes as a trainer's clean exit does, so that the
    // next restart finds what it leaves (embtier with its DRAM tier in a
    // file keeps it; the others just drop).
    if restart {
        eng.close()?;
    }
    print_and_exit(&r)
}

fn histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("histogram")
}

fn per_cached_row(rss0: Option<u64>, rss1: Option<u64>, rows: u64) -> Option<f64> {
    match (rss0, rss1) {
        (Some(a0), Some(a1)) if rows > 0 => Some(a1.saturating_sub(a0) as f64 / rows as f64),
        _ => None,
    }
}

fn note(eng: &dyn Engine, cache: &engines::CacheReport) -> String {
    [eng.setup_note(), cache.note.clone()]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Print the child's result for the parent, and exit without closing the
/// engine: nothing after this is measured, the data of a writing run is
/// reloaded next time, and foyer 0.22.6's close can wait forever after a
/// write-heavy run (seen here).
fn print_and_exit(r: &RunResult) -> Result<(), String> {
    println!(
        "RESULT {}",
        serde_json::to_string(r).map_err(|e| e.to_string())?
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    std::process::exit(0)
}

/// One batch through an engine, with the buffers it needs.
struct Stepper {
    out: Vec<f32>,
    grads: Vec<f32>,
    dim: usize,
    kind: EngineKind,
    updates: bool,
    verified: u64,
}

impl Stepper {
    fn new(ds: &Dataset, batch: usize, kind: EngineKind, w: Workload) -> Stepper {
        let dim = ds.dim as usize;
        let mut grads = vec![0f32; batch * dim];
        for (i, g) in grads.iter_mut().enumerate() {
            *g = ((i % 17) as f32 - 8.0) * 1e-3;
        }
        Stepper {
            out: vec![0f32; batch * dim],
            grads,
            dim,
            kind,
            updates: w.updates(),
            verified: 0,
        }
    }

    /// Look the batch up (and check its values if `verify`), then update
    /// it if the workload writes. The batch is drawn before the caller's
    /// clock starts, so the generator's cost is in no engine's latency.
    fn step(&mut self, eng: &mut Box<dyn Engine>, b: &Batch, verify: bool) -> Result<(), String> {
        let n = b.len() * self.dim;
        eng.lookup(b, &mut self.out[..n])?;
        if verify {
            engines::verify(b, &self.out[..n], self.dim)
                .map_err(|e| format!("{}: wrong value: {e}", self.kind.name()))?;
            self.verified += 1;
        }
        if self.updates {
            eng.sgd(b, &self.out[..n], &self.grads[..n], 0.01)?;
        }
        Ok(())
    }
}

/// What a child knew when its engine had just opened.
struct Start {
    t0: Instant,
    series: series::Series,
    open_s: f64,
    rss0: Option<u64>,
    disk_open: Option<u64>,
}

/// W5: W3's loop from the open for `--w5-duration` seconds (and on until
/// embtier's merges, see `Args::w5_merges`), a checkpoint every
/// `--checkpoint-every` seconds on a fixed schedule (a checkpoint that
/// overruns the next slot skips it); then the final persist, the deferred
/// writes, and a clean close.
fn w5_run(
    a: &Args,
    k: EngineKind,
    mut eng: Box<dyn Engine>,
    gen: &mut Generator,
    st: &mut Stepper,
    s: Start,
) -> Result<RunResult, String> {
    let Start {
        t0,
        mut series,
        open_s,
        rss0,
        disk_open,
    } = s;
    let (min_secs, max_secs, wait_merges) = match a.child_w5_secs {
        Some(x) => (x, x, false),
        None => (a.w5_duration, a.w5_max_duration, a.w5_merges > 0),
    };
    let sampler = RssSampler::start(t0);
    let mut phases_s = Vec::new();
    let (mut all, mut ck_hist, mut other) = (histogram(), histogram(), histogram());
    let mut next_ck = a.checkpoint_every;
    let mut checkpoint_s = Vec::new();
    let (mut rows, mut updated, mut batches) = (0u64, 0u64, 0u64);
    let mut capped = false;
    loop {
        let el = t0.elapsed().as_secs_f64();
        let merges_due = wait_merges && eng.merges().is_some_and(|m| m < a.w5_merges);
        if el >= max_secs {
            capped = merges_due;
            break;
        }
        if el >= min_secs && !merges_due {
            break;
        }
        let b = gen.next_batch();
        let bt = Instant::now();
        let ck = t0.elapsed().as_secs_f64() >= next_ck;
        if ck {
            let c = Instant::now();
            eng.checkpoint(checkpoint_s.len() as u64)?;
            checkpoint_s.push(c.elapsed().as_secs_f64());
            let now = t0.elapsed().as_secs_f64();
            while next_ck <= now {
                next_ck += a.checkpoint_every;
            }
        }
        // A checkpoint finishing beside training (embtier) overlaps the
        // batch as much as one it waited on.
        let ck = ck || eng.checkpoint_running();
        st.step(&mut eng, &b, false)?;
        let us = bt.elapsed().as_micros() as u64;
        all.saturating_record(us);
        if ck {
            ck_hist.saturating_record(us);
        } else {
            other.saturating_record(us);
        }
        rows += b.len() as u64;
        updated += b.unique_rows() as u64;
        batches += 1;
        series.add(b.len() as u64);
    }
    let seconds = t0.elapsed().as_secs_f64();
    let per_second = series.per_second();
    let per_tenth = series.per_tenth();
    let merges = eng.merges();
    let cache = eng.cache();
    let rss1 = proc_status("VmRSS:");
    let update_bytes = updated as f64 * a.dim as f64 * 4.0;
    let wa_now = || {
        disk_sectors_written(&a.dir)
            .zip(disk_open)
            .map(|(b, a)| ((b - a) * 512) as f64 / update_bytes)
    };
    phases_s.push(("persist".to_string(), t0.elapsed().as_secs_f64()));
    let t = Instant::now();
    eng.persist()?;
    let persist_s = t.elapsed().as_secs_f64();
    // Checkpoints that finished beside training: their whole time, and the
    // call's as what training waited.
    let finished = eng.checkpoints_finished();
    let checkpoint_held_s = checkpoint_s.clone();
    if !finished.is_empty() {
        checkpoint_s = finished;
    }
    let write_amp = wa_now();
    let note = note(&*eng, &cache);
    let (mut write_amp_settled, mut settle_s) = (None, None);
    phases_s.push(("settle".to_string(), t0.elapsed().as_secs_f64()));
    let t = Instant::now();
    if eng.settle()? {
        write_amp_settled = wa_now();
        settle_s = Some(t.elapsed().as_secs_f64());
    }
    // Close cleanly, so that a restart finds what a trainer's clean exit
    // leaves; not foyer, whose close can wait forever after writes.
    phases_s.push(("close".to_string(), t0.elapsed().as_secs_f64()));
    let close_s = match k != EngineKind::Foyer {
        true => {
            let t = Instant::now();
            eng.close()?;
            Some(t.elapsed().as_secs_f64())
        }
        false => None,
    };
    let rss_series = sampler.finish();
    let per_minute = series::per_minute(&per_second);
    let steady = series::steady(&per_second);
    let q = |h: &hdrhistogram::Histogram<u64>, p: f64| h.value_at_quantile(p) as f64;
    Ok(RunResult {
        engine: k.name().into(),
        workload: "W5".into(),
        rows_per_s: rows as f64 / seconds,
        p50_us: q(&all, 0.5),
        p99_us: q(&all, 0.99),
        batches,
        peak_rss: proc_status("VmHWM:").unwrap_or(0),
        dram_bytes_per_cached_row: per_cached_row(rss0, rss1, cache.rows),
        cached_rows: cache.rows,
        write_amp,
        write_amp_settled,
        settle_s,
        open_s,
        persist_s: Some(persist_s),
        verified_batches: 0,
        note,
        t90_s: steady.and_then(|s| series::t90(&per_tenth, s)),
        per_tenth,
        steady_rows_per_s: steady,
        restart: None,
        w5: Some(W5Result {
            seconds,
            median_minute_rows_per_s: series::median(&per_minute),
            per_minute,
            p999_us: q(&all, 0.999),
            p99_checkpoint_us: (!ck_hist.is_empty()).then(|| q(&ck_hist, 0.99)),
            p99_other_us: q(&other, 0.99),
            checkpoint_s,
            checkpoint_held_s,
            merges,
            capped,
            close_s,
            rss_series,
            phases_s,
            rss_before_open: rss0,
        }),
        per_second,
    })
}

/// The SIGKILL variant of a restart: train 30 s, checkpoint, train until
/// the checkpoint has committed (embtier's finishes beside training, as in
/// W5, so the rows updated meanwhile are not in its hot rows), train 8
/// more batches (whose updates the checkpoint does not hold), and kill
/// this process as a crash would.
///
/// Until 2026-11-28 the kill came 8 batches after the checkpoint began,
/// a few tenths of a second into its 5-10 s of writing, so the restart
/// reopened the checkpoint before it: a SIGKILL *during* a checkpoint.
fn kill_run(
    a: &Args,
    mut eng: Box<dyn Engine>,
    gen: &mut Generator,
    st: &mut Stepper,
    t0: Instant,
) -> Result<(), String> {
    // Training for `--child-w5-secs` (30 by default) with a checkpoint
    // every `--checkpoint-every` seconds, as W5 does, then one more.
    let secs = a.child_w5_secs.unwrap_or(30.0);
    let mut next_ck = a.checkpoint_every;
    let checkpoint =
        |eng: &mut Box<dyn Engine>, st: &mut Stepper, gen: &mut Generator| -> Result<(), String> {
            eng.checkpoint(0)?;
            while eng.checkpoint_running() {
                st.step(eng, &gen.next_batch(), false)?;
            }
            eng.wait_checkpoint()
        };
    loop {
        let el = t0.elapsed().as_secs_f64();
        if el >= secs {
            break;
        }
        if el >= next_ck {
            checkpoint(&mut eng, st, gen)?;
            next_ck += a.checkpoint_every;
            continue;
        }
        st.step(&mut eng, &gen.next_batch(), false)?;
    }
    checkpoint(&mut eng, st, gen)?;
    for _ in 0..8 {
        st.step(&mut eng, &gen.next_batch(), false)?;
    }
    eprintln!("killing the child after a checkpoint");
    // SAFETY: raise only sends a signal to this process; SIGKILL ends it
    // here, without unwinding, which is the crash being modelled.
    unsafe {
        libc::raise(libc::SIGKILL);
    }
    Err("SIGKILL did not end the process".into())
}

/// A `kB` field of `/proc/self/status`, in bytes.
fn proc_status(field: &str) -> Option<u64> {
    proc_kib("/proc/self/status", field)
}

/// A `field: N kB` line of a `/proc` file such as `/proc/meminfo`, in bytes.
pub fn proc_kib(file: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(file).ok()?;
    let l = s.lines().find(|l| l.starts_with(field))?;
    l.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|k| k * 1024)
}

/// Sectors written to the block device under `dir` (whole disk, all
/// writers): `/sys/dev/block/MAJ:MIN/stat`, field 7.
fn disk_sectors_written(dir: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    let stat = std::fs::read_to_string(format!("/sys/dev/block/{maj}:{min}/stat")).ok()?;
    stat.split_whitespace().nth(6)?.parse().ok()
}
