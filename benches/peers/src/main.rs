//! `embtier-peers`: embtier against RocksDB, foyer, an mmap'd flat file, a
//! flat in-memory gather and fio's device limit, on the same data, the same
//! DRAM budget and the same workloads, in one run.
//!
//! Each engine loads once (timed apart from the runs), then runs each
//! workload in a child process of its own, so that peak RSS and disk writes
//! are its own. The mmap engine's children run in a memory cgroup whose
//! limit is the budget, which is what bounds its page cache.
//!
//! ```text
//! cargo run --release -p embtier-peers -- --workload w2 --rows 20000000 --dim 64 --dram 512MiB
//! ```

mod engines;
mod report;
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
}

/// One load, as a child reports it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct LoadResult {
    /// Engine.
    pub engine: String,
    /// Seconds.
    pub seconds: f64,
    /// Bytes on disk afterwards.
    pub disk_bytes: u64,
    /// Whether it was reused from an earlier run.
    pub reused: bool,
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
    let r = match args.child_engine {
        Some(kind) => child(&args, kind),
        None => parent(&args),
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
        let out = spawn_child(a, k, None, None)?;
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
    for &w in &order {
        for &k in &engines {
            eprintln!("{:?} on {} ...", w, k.name());
            if w.updates() {
                // The run changes the data: the next harness run reloads.
                let _ = std::fs::remove_file(k.data_dir(&a.dir).join("peers-dataset.json"));
            }
            let cg = if k == EngineKind::Mmap {
                cgroup.as_ref().and_then(|c| c.as_ref().ok()).cloned()
            } else {
                None
            };
            let out = spawn_child(a, k, Some(w), cg.as_deref())?;
            let mut r: RunResult = parse_line(&out, k)?;
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

fn spawn_child(
    _a: &Args,
    k: EngineKind,
    w: Option<Workload>,
    cg: Option<&Path>,
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
    let out = c
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("spawning the {} child: {e}", k.name()))?;
    if !out.status.success() {
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
    pub p50_us: f64,
    /// 99th percentile, µs.
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

fn open_engine(a: &Args, k: EngineKind) -> Result<Box<dyn Engine>, String> {
    let s = setup(a, k);
    Ok(match k {
        EngineKind::Flat => Box::new(engines::Flat::new(&s)),
        EngineKind::EmbtierUring => {
            Box::new(engines::Embtier::open(&s, embtier::IoEngineKind::Uring)?)
        }
        EngineKind::EmbtierPsync => {
            Box::new(engines::Embtier::open(&s, embtier::IoEngineKind::Psync)?)
        }
        EngineKind::Rocksdb => Box::new(engines::Rocks::open(&s)?),
        EngineKind::Foyer => Box::new(engines::Foyer::open(&s)?),
        EngineKind::Mmap => Box::new(engines::Mmap::open(&s)?),
    })
}

fn child(a: &Args, k: EngineKind) -> Result<(), String> {
    let Some(w) = a.child_workload else {
        let s = setup(a, k);
        let t = Instant::now();
        match k {
            EngineKind::Flat => {}
            EngineKind::EmbtierUring | EngineKind::EmbtierPsync => engines::Embtier::load(&s)?,
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
    let dim = ds.dim as usize;
    let (target, _) = w4_target(a)?;
    let rss0 = proc_status("VmRSS:");
    let t = Instant::now();
    let mut eng = open_engine(a, k)?;
    let open_s = t.elapsed().as_secs_f64();
    let mut gen = Generator::new(&ds, w, a.batch, 0xb0a7 ^ w as u64, &target);
    let mut out = vec![0f32; a.batch * dim];
    let mut grads = vec![0f32; a.batch * dim];
    for (i, g) in grads.iter_mut().enumerate() {
        *g = ((i % 17) as f32 - 8.0) * 1e-3;
    }
    let lr = 0.01;
    let mut verified = 0u64;
    // One batch through the engine; the batch is drawn before the clock
    // starts, so the generator's cost is in no engine's latency.
    let mut step = |eng: &mut Box<dyn Engine>, b: &Batch, verify: bool| -> Result<(), String> {
        let n = b.len();
        eng.lookup(b, &mut out[..n * dim])?;
        if verify {
            engines::verify(b, &out[..n * dim], dim)
                .map_err(|e| format!("{}: wrong value: {e}", k.name()))?;
            verified += 1;
        }
        if w.updates() {
            eng.sgd(b, &out[..n * dim], &grads[..n * dim], lr)?;
        }
        Ok(())
    };
    // Warm-up; the first batches of a read workload are checked value by value.
    let warm = Instant::now();
    let mut i = 0u64;
    while warm.elapsed().as_secs_f64() < a.warmup || i < 4 {
        let b = gen.next_batch();
        step(&mut eng, &b, !w.updates() && i < 32)?;
        i += 1;
    }
    let disk0 = disk_sectors_written(&a.dir);
    let mut hist =
        hdrhistogram::Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram");
    let mut rows = 0u64;
    let mut updated = 0u64;
    let mut batches = 0u64;
    let run = Instant::now();
    while run.elapsed().as_secs_f64() < a.duration || batches < 2 {
        let b = gen.next_batch();
        let bt = Instant::now();
        step(&mut eng, &b, false)?;
        hist.saturating_record(bt.elapsed().as_micros() as u64);
        rows += b.len() as u64;
        if w.updates() {
            updated += b.unique_rows() as u64;
        }
        batches += 1;
    }
    let secs = run.elapsed().as_secs_f64();
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
    let note = [eng.setup_note(), cache.note]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    let (mut write_amp_settled, mut settle_s) = (None, None);
    if w.updates() {
        let t = Instant::now();
        if eng.settle()? {
            write_amp_settled = wa_now();
            settle_s = Some(t.elapsed().as_secs_f64());
        }
    }
    let r = RunResult {
        engine: k.name().into(),
        workload: format!("{w:?}"),
        rows_per_s: rows as f64 / secs,
        p50_us: hist.value_at_quantile(0.5) as f64,
        p99_us: hist.value_at_quantile(0.99) as f64,
        batches,
        peak_rss: proc_status("VmHWM:").unwrap_or(0),
        dram_bytes_per_cached_row: match (rss0, rss1) {
            (Some(a0), Some(a1)) if cache.rows > 0 => {
                Some(a1.saturating_sub(a0) as f64 / cache.rows as f64)
            }
            _ => None,
        },
        cached_rows: cache.rows,
        write_amp,
        write_amp_settled,
        settle_s,
        open_s,
        persist_s,
        verified_batches: verified,
        note,
    };
    println!(
        "RESULT {}",
        serde_json::to_string(&r).map_err(|e| e.to_string())?
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    // Exit without closing the engine: nothing after this is measured, the
    // data of a writing run is reloaded next time, and foyer 0.22.6's close
    // can wait forever after a write-heavy run (seen here).
    std::process::exit(0)
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
