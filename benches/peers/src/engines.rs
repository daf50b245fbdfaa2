//! The engines under comparison, behind one trait. Each is set up the way
//! its own documentation recommends for point lookups of small values under
//! a fixed DRAM budget; the choices are listed in `docs/benchmarks.md`.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use foyer::{DeviceBuilder as _, IoEngineConfig as _};

use crate::workload::{fill_row, value, Batch, Dataset};

/// An engine's failure, as one line.
pub type Result<T> = std::result::Result<T, String>;

/// Which engine.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum EngineKind {
    /// A flat in-memory `Vec<f32>`: the upper bound, where the table fits.
    Flat,
    /// embtier over io_uring.
    EmbtierUring,
    /// embtier over io_uring with `[ssd] cold_fill` off: a miss installs
    /// only its own row, as before cold filling (for the cold-start runs).
    EmbtierUringNofill,
    /// embtier over pread/pwrite threads.
    EmbtierPsync,
    /// RocksDB, configured as FBGEMM's SSD TBE uses it.
    Rocksdb,
    /// foyer's HybridCache.
    Foyer,
    /// An mmap of a flat file, through the page cache.
    Mmap,
}

impl EngineKind {
    /// Name in the report.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Flat => "flat Vec (in DRAM)",
            EngineKind::EmbtierUring => "embtier io_uring",
            EngineKind::EmbtierUringNofill => "embtier io_uring, cold_fill off",
            EngineKind::EmbtierPsync => "embtier psync",
            EngineKind::Rocksdb => "RocksDB",
            EngineKind::Foyer => "foyer HybridCache",
            EngineKind::Mmap => "mmap flat file",
        }
    }

    /// Directory of its data under the harness's data dir.
    pub fn data_dir(self, base: &Path) -> PathBuf {
        base.join(match self {
            EngineKind::Flat => "flat",
            EngineKind::EmbtierUring
            | EngineKind::EmbtierUringNofill
            | EngineKind::EmbtierPsync => "embtier",
            EngineKind::Rocksdb => "rocksdb",
            EngineKind::Foyer => "foyer",
            EngineKind::Mmap => "mmap",
        })
    }
}

/// Settings every engine shares.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Where the engine keeps its data.
    pub dir: PathBuf,
    /// The dataset.
    pub ds: Dataset,
    /// DRAM budget, bytes.
    pub dram: u64,
    /// I/O queue depth, where the engine takes one.
    pub qd: u32,
}

/// What an engine says of its cache after a run.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct CacheReport {
    /// Rows the DRAM cache holds (exact or estimated, see `note`).
    pub rows: u64,
    /// How the figure was found, and engine-specific facts.
    pub note: String,
}

/// One engine.
pub trait Engine {
    /// Gather every id of `b`, table by table, into `out` (`b.len() * dim`).
    fn lookup(&mut self, b: &Batch, out: &mut [f32]) -> Result<()>;
    /// `w -= lr * g` for every id of `b` (`grads` in the order of `lookup`);
    /// `looked_up` is what `lookup` just returned for the same batch.
    fn sgd(&mut self, b: &Batch, looked_up: &[f32], grads: &[f32], lr: f32) -> Result<()>;
    /// Make every update durable on disk (flush, compaction debt paid).
    fn persist(&mut self) -> Result<()>;
    /// W5's periodic checkpoint, the `n`th of the run: what a trainer
    /// would call every minute to be able to restart from here. The
    /// default is [`Engine::persist`] (foyer: flush; mmap: `msync` +
    /// `fsync`).
    fn checkpoint(&mut self, _n: u64) -> Result<()> {
        self.persist()
    }
    /// Whether a checkpoint the engine began still runs beside training
    /// (embtier's snapshot checkpoints, finished on a thread of their
    /// own): the batches meanwhile count as batches with a checkpoint.
    fn checkpoint_running(&self) -> bool {
        false
    }
    /// Wait for a checkpoint the engine began to finish, and report its
    /// failure (nothing to wait for where `checkpoint` returns when done).
    fn wait_checkpoint(&mut self) -> Result<()> {
        Ok(())
    }
    /// Seconds each checkpoint that finished beside training took, from
    /// its call to its commit, in order, since the last time asked (empty
    /// for an engine whose `checkpoint` returns when it is done: then the
    /// call's time is the checkpoint's).
    fn checkpoints_finished(&mut self) -> Vec<f64> {
        Vec::new()
    }
    /// Row-log merges run since the engine opened (embtier: whole-log
    /// merges in a checkpoint and background passes a checkpoint
    /// committed); `None` for an engine without one.
    fn merges(&self) -> Option<u64> {
        None
    }
    /// After `persist`, pay any write debt the engine deferred (embtier:
    /// merge its row log into the tables). `Ok(false)`: it defers none
    /// beyond what `persist` already waited for.
    fn settle(&mut self) -> Result<bool> {
        Ok(false)
    }
    /// The DRAM cache's contents.
    fn cache(&self) -> CacheReport;
    /// Facts of the setup worth printing (engine chosen, and so on).
    fn setup_note(&self) -> String {
        String::new()
    }
    /// Close the engine as a trainer's clean exit does (after `persist`):
    /// by default, drop it.
    fn close(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// `EMBTIER_PEERS_DRAM_FILE=PATH`: embtier's DRAM tier lives in the file
/// `PATH` (on tmpfs, `/dev/shm/...`: shared memory that outlives the
/// process) instead of memory of its own, and the engine's close is
/// `Store::close`, which keeps it for the next open to take back (a warm
/// restart as a page cache survives a process; `docs/tuning.md`).
fn dram_file() -> Option<std::path::PathBuf> {
    std::env::var_os("EMBTIER_PEERS_DRAM_FILE").map(Into::into)
}

/// Whether embtier's tiers are kept across its restarts
/// (`EMBTIER_PEERS_DRAM_FILE`).
pub fn keeps_tiers() -> bool {
    dram_file().is_some()
}

/// Apply SGD to the unique rows of one table's part: `f(row, new_value)`.
fn sgd_rows(
    ids: &[u64],
    looked_up: &[f32],
    grads: &[f32],
    lr: f32,
    dim: usize,
    mut f: impl FnMut(u64, &[f32]) -> Result<()>,
) -> Result<()> {
    let mut acc: HashMap<u64, Vec<f32>> = HashMap::with_capacity(ids.len());
    for (i, &r) in ids.iter().enumerate() {
        let e = acc
            .entry(r)
            .or_insert_with(|| looked_up[i * dim..(i + 1) * dim].to_vec());
        for (w, g) in e.iter_mut().zip(&grads[i * dim..(i + 1) * dim]) {
            *w -= lr * g;
        }
    }
    for (r, v) in acc {
        f(r, &v)?;
    }
    Ok(())
}

/// [`sgd_rows`] over every part of a batch: `f(table, row, new_value)`.
fn sgd_batch(
    b: &Batch,
    looked_up: &[f32],
    grads: &[f32],
    lr: f32,
    dim: usize,
    mut f: impl FnMut(u32, u64, &[f32]) -> Result<()>,
) -> Result<()> {
    for (t, ids, span) in b.spans(dim) {
        sgd_rows(
            ids,
            &looked_up[span.clone()],
            &grads[span],
            lr,
            dim,
            |r, v| f(t, r, v),
        )?;
    }
    Ok(())
}

// ---------------------------------------------------------------- flat

/// Every row in one `Vec<f32>`.
pub struct Flat {
    data: Vec<f32>,
    offsets: Vec<u64>,
    dim: usize,
}

impl Flat {
    /// Build it (this is its load).
    pub fn new(s: &Setup) -> Flat {
        let dim = s.ds.dim as usize;
        let mut data = vec![0f32; s.ds.total_rows() as usize * dim];
        let offsets = s.ds.offsets();
        for (t, (&rows, &base)) in s.ds.rows.iter().zip(&offsets).enumerate() {
            for r in 0..rows {
                let at = ((base + r) as usize) * dim;
                fill_row(t as u32, r, &mut data[at..at + dim]);
            }
        }
        Flat { data, offsets, dim }
    }
}

impl Engine for Flat {
    fn lookup(&mut self, b: &Batch, out: &mut [f32]) -> Result<()> {
        let d = self.dim;
        for (k, (t, r)) in b.ids().enumerate() {
            let at = ((self.offsets[t as usize] + r) as usize) * d;
            out[k * d..(k + 1) * d].copy_from_slice(&self.data[at..at + d]);
        }
        Ok(())
    }

    fn sgd(&mut self, b: &Batch, looked_up: &[f32], grads: &[f32], lr: f32) -> Result<()> {
        let (d, offsets, data) = (self.dim, &self.offsets, &mut self.data);
        sgd_batch(b, looked_up, grads, lr, d, |t, r, v| {
            let at = ((offsets[t as usize] + r) as usize) * d;
            data[at..at + d].copy_from_slice(v);
            Ok(())
        })
    }

    fn persist(&mut self) -> Result<()> {
        Ok(())
    }

    fn cache(&self) -> CacheReport {
        CacheReport {
            rows: (self.data.len() / self.dim) as u64,
            note: "the whole table is in DRAM (ignores the budget)".into(),
        }
    }
}

// ---------------------------------------------------------------- embtier

/// An embtier store, one table per dataset table.
pub struct Embtier {
    /// The checkpoint finishing on its thread (snapshot checkpoints); it
    /// returns the seconds from its call to its commit. First, so that it
    /// is waited for before the store is let go.
    finishing: Finishing,
    store: std::sync::Arc<embtier::Store>,
    /// Seconds each checkpoint that finished on its thread took, from its
    /// call to its commit, in order.
    finished_s: Vec<f64>,
    /// `row_log_merges + row_log_passes` when it opened.
    merges0: u64,
    names: Vec<String>,
    dim: usize,
    /// What the last `persist` did.
    last: Option<embtier::Checkpoint>,
}

fn emb_err(e: embtier::Error) -> String {
    e.to_string()
}

/// `EMBTIER_PEERS_SYNC_CHECKPOINTS=1`: embtier's W5 checkpoints run with
/// training stopped, on the training thread (`[ssd] snapshot_checkpoints`
/// off), as before snapshot checkpoints.
fn sync_checkpoints() -> bool {
    std::env::var("EMBTIER_PEERS_SYNC_CHECKPOINTS").is_ok_and(|v| v == "1")
}

/// What a W5 checkpoint did with the row log, on stderr (the report keeps
/// only its times).
fn log_checkpoint(store: &embtier::Store, c: &embtier::Checkpoint, secs: f64) {
    let s = store.stats();
    eprintln!(
        "checkpoint {}: {:.2} s, training held {:.3} s, rows waiting in memory at most {:.1} MiB; \
         row log: {} rows merged inside it, {} blocks freed by a pass, {} blocks committed of {}; \
         {} whole-log merges and {} passes since open",
        c.generation,
        secs,
        c.paused.as_secs_f64(),
        c.pending_peak_bytes as f64 / (1 << 20) as f64,
        c.row_log_merged_rows,
        c.row_log_blocks_freed,
        c.row_log_blocks,
        s.row_log_capacity_blocks,
        s.row_log_merges,
        s.row_log_passes
    );
}

impl Embtier {
    fn config(s: &Setup, engine: embtier::IoEngineKind, cold_fill: bool) -> embtier::StoreConfig {
        let mut b = embtier::StoreConfig::builder();
        for (t, &rows) in s.ds.rows.iter().enumerate() {
            b = b.table(
                embtier::TableConfig::new(Dataset::table_name(t as u32), rows, s.ds.dim)
                    .init(embtier::Init::Zeros),
            );
        }
        let mut c = b
            .dram_capacity(s.dram)
            .io_engine(engine)
            .queue_depth(s.qd)
            .build();
        c.ssd.cold_fill = cold_fill;
        // The checkpoints before snapshot checkpoints, for a comparison in
        // one run.
        if sync_checkpoints() {
            c.ssd.snapshot_checkpoints = false;
        }
        // An experiment's row-log size (MiB), else embtier's default (the
        // tables' bytes). Runs that set it say so.
        if let Some(mib) = std::env::var("EMBTIER_PEERS_ROW_LOG_MIB")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            c.ssd.row_log = Some(embtier::ByteSize(mib << 20));
        }
        // `EMBTIER_PEERS_MERGE_SPILL=0`: an experiment with each range of
        // a background pass walking the log (`[ssd] merge_spill` off).
        if std::env::var("EMBTIER_PEERS_MERGE_SPILL").is_ok_and(|v| v == "0") {
            c.ssd.merge_spill = false;
        }
        // `EMBTIER_PEERS_OVERHEAD_IN_BUDGET=1`: the store's memory beyond
        // the rows' bytes counted against the DRAM budget (`[ssd]
        // overhead_in_budget`), so that the budget bounds its RSS as the
        // cgroup bounds mmap's.
        if std::env::var("EMBTIER_PEERS_OVERHEAD_IN_BUDGET").is_ok_and(|v| v == "1") {
            c.ssd.overhead_in_budget = true;
        }
        // `EMBTIER_PEERS_GIVE_BACK=1`: this child process (embtier's alone)
        // has glibc give freed buffers back at once, as docs/tuning.md
        // tells a trainer under a hard memory limit to
        // (`embtier::memory::give_back_freed_memory_promptly`).
        if std::env::var("EMBTIER_PEERS_GIVE_BACK").is_ok_and(|v| v == "1") {
            let applied = embtier::memory::give_back_freed_memory_promptly();
            eprintln!("malloc gives freed buffers back at once: {applied}");
        }
        // `EMBTIER_PEERS_WARM_ROWS=0`: an experiment without the hot rows'
        // copy (`[ssd] warm_rows` off), else embtier's default.
        if std::env::var("EMBTIER_PEERS_WARM_ROWS").is_ok_and(|v| v == "0") {
            c.ssd.warm_rows = false;
        }
        if let Some(p) = dram_file() {
            c.tiers[0].path = Some(p);
        }
        // An experiment's `[ssd] checkpoint_rest`, else embtier's default.
        if let Some(rest) = std::env::var("EMBTIER_PEERS_CHECKPOINT_REST")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
        {
            c.ssd.checkpoint_rest = rest;
        }
        c
    }

    /// Create the store and write every row.
    pub fn load(s: &Setup) -> Result<()> {
        let path = s.dir.join("store");
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let store =
            embtier::Store::create(&path, Self::config(s, embtier::IoEngineKind::Auto, true))
                .map_err(emb_err)?;
        let dim = s.ds.dim as usize;
        // `import_rows` in id order (whole block groups straight home),
        // then one checkpoint: the bulk-load path.
        let batch = 65_536u64;
        let mut vals = vec![0f32; batch as usize * dim];
        for (t, &rows) in s.ds.rows.iter().enumerate() {
            let name = Dataset::table_name(t as u32);
            let mut r = 0;
            while r < rows {
                let n = batch.min(rows - r);
                for (i, id) in (r..r + n).enumerate() {
                    fill_row(t as u32, id, &mut vals[i * dim..(i + 1) * dim]);
                }
                store
                    .import_rows(&name, r, &vals[..n as usize * dim])
                    .map_err(emb_err)?;
                r += n;
            }
        }
        store.checkpoint().map_err(emb_err)?;
        Ok(())
    }

    /// Open the loaded store with `engine`. `cold`: skip the warm restart
    /// (the hot set of the last checkpoint is not read back), so the
    /// cache starts empty; `cold_fill`: `[ssd] cold_fill`.
    pub fn open(
        s: &Setup,
        engine: embtier::IoEngineKind,
        cold: bool,
        cold_fill: bool,
    ) -> Result<Embtier> {
        let store = embtier::Store::open_with(
            s.dir.join("store"),
            Self::config(s, engine, cold_fill),
            embtier::OpenOptionsExt {
                cold,
                ..Default::default()
            },
        )
        .map_err(emb_err)?;
        // How the open rebuilt the row log's map, on stderr.
        let log = store.row_log_at_open();
        eprintln!(
            "open: row log of {} blocks mapped in {:.3} s, {}; {} rows kept in place",
            log.blocks,
            log.seconds,
            match (&log.index_refused, log.from_index) {
                (_, true) => "from its index".to_string(),
                (Some(why), false) => format!("by reading it (index not used: {why})"),
                (None, false) => "by reading it".to_string(),
            },
            store.rows_kept_at_open()
        );
        let store = std::sync::Arc::new(store);
        // `EMBTIER_PEERS_WAIT_WARM=1`: an experiment that waits for the
        // warm restart's read-back before training starts, to see what
        // the read-back alone costs.
        let wait = !cold && std::env::var("EMBTIER_PEERS_WAIT_WARM").is_ok_and(|v| v == "1");
        if wait {
            let t = std::time::Instant::now();
            let rows = store.wait_warm().map_err(emb_err)?;
            let r = ReadTotals::of(&store);
            let (read, log, ops) = (r.rows_read, r.log_rows_read, r.read_ops);
            eprintln!(
                "waited {:.2} s for the read-back ({rows} rows in all): {read} rows read \
                 from the SSD ({log} from the row log) in {ops} reads",
                t.elapsed().as_secs_f64()
            );
        }
        if !cold && !wait {
            // What the warm restart's read-back cost, on stderr: the rows
            // it read, the reads it took and when it finished.
            let st = std::sync::Arc::clone(&store);
            let t = std::time::Instant::now();
            let at_open = ReadTotals::of(&store).warmed;
            let _ = std::thread::Builder::new()
                .name("warm-report".into())
                .spawn(move || {
                    let r = st.wait_warm();
                    let ReadTotals {
                        warmed,
                        read_ops: ops,
                        log_rows_read: log,
                        ..
                    } = ReadTotals::of(&st);
                    eprintln!(
                        "warm read-back done {:.2} s after the open: {:?} rows in all, \
                         {at_open} by the open (the hot rows and the log's reads), {} after it; so far {ops} \
                         SSD reads, {log} rows read from the row log",
                        t.elapsed().as_secs_f64(),
                        r.map_err(|e| e.to_string()),
                        warmed - at_open,
                    );
                });
        }
        Ok(Embtier {
            merges0: {
                let s = store.stats();
                s.row_log_merges + s.row_log_passes
            },
            store,
            finishing: Finishing(None),
            finished_s: Vec::new(),
            names: (0..s.ds.rows.len() as u32)
                .map(Dataset::table_name)
                .collect(),
            dim: s.ds.dim as usize,
            last: None,
        })
    }
}

/// The store's read figures summed over its tables, for the warm restart's
/// report.
struct ReadTotals {
    warmed: u64,
    rows_read: u64,
    log_rows_read: u64,
    read_ops: u64,
}

impl ReadTotals {
    fn of(store: &embtier::Store) -> ReadTotals {
        let s = store.stats();
        let sum = |f: fn(&embtier::TableStats) -> u64| s.tables.iter().map(f).sum();
        ReadTotals {
            warmed: sum(|t| t.warmed),
            rows_read: sum(|t| t.ssd.rows_read),
            log_rows_read: sum(|t| t.ssd.log_rows_read),
            read_ops: sum(|t| t.ssd.read_ops),
        }
    }
}

impl Embtier {
    /// Wait for the checkpoint finishing on its thread, if any.
    fn join_checkpoint(&mut self) -> Result<()> {
        if let Some(h) = self.finishing.0.take() {
            let s = h
                .join()
                .map_err(|_| "the checkpoint thread panicked".to_string())??;
            self.finished_s.push(s);
        }
        Ok(())
    }
}

/// A checkpoint finishing on its thread, waited for when dropped (before
/// the store is, so that it closes after the checkpoint).
struct Finishing(Option<std::thread::JoinHandle<Result<f64>>>);

impl Drop for Finishing {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            let _ = h.join();
        }
    }
}

impl Engine for Embtier {
    fn lookup(&mut self, b: &Batch, out: &mut [f32]) -> Result<()> {
        // Every table's part in one call: one submission of all the misses.
        let mut rest = out;
        let mut parts = Vec::new();
        for (t, ids, span) in b.spans(self.dim) {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(span.len());
            rest = tail;
            parts.push(embtier::TableBatch::new(&self.names[t as usize], ids, mine));
        }
        self.store.lookup_many(&mut parts).map_err(emb_err)
    }

    fn sgd(&mut self, b: &Batch, _looked_up: &[f32], grads: &[f32], lr: f32) -> Result<()> {
        for (t, ids, span) in b.spans(self.dim) {
            self.store
                .apply_sgd(&self.names[t as usize], ids, &grads[span], lr)
                .map_err(emb_err)?;
        }
        Ok(())
    }

    fn persist(&mut self) -> Result<()> {
        self.join_checkpoint()?;
        self.last = Some(self.store.checkpoint().map_err(emb_err)?);
        Ok(())
    }

    fn settle(&mut self) -> Result<bool> {
        self.store.merge_row_log().map_err(emb_err)?;
        Ok(true)
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        self.join_checkpoint()?;
        if dram_file().is_none() {
            return Ok(());
        }
        let Embtier { store, .. } = *self;
        let store = std::sync::Arc::try_unwrap(store)
            .map_err(|_| "the store is still shared at its close".to_string())?;
        store.close().map_err(emb_err)
    }

    fn checkpoint(&mut self, _n: u64) -> Result<()> {
        // The last one first (it overran the minute: the trainer waits).
        self.join_checkpoint()?;
        let t = std::time::Instant::now();
        if sync_checkpoints() {
            let c = self.store.checkpoint().map_err(emb_err)?;
            log_checkpoint(&self.store, &c, t.elapsed().as_secs_f64());
            return Ok(());
        }
        // A trainer's checkpoint beside training: begun here (its moment),
        // finished on a thread while the batches go on.
        let store = std::sync::Arc::clone(&self.store);
        let (begun_tx, begun_rx) = std::sync::mpsc::channel();
        let h = std::thread::Builder::new()
            .name("w5-checkpoint".into())
            .spawn(move || {
                let begun = store.begin_checkpoint().map_err(emb_err);
                let _ = begun_tx.send(());
                let c = begun?.finish().map_err(emb_err)?;
                let s = t.elapsed().as_secs_f64();
                log_checkpoint(&store, &c, s);
                Ok(s)
            })
            .map_err(|e| format!("spawn the checkpoint thread: {e}"))?;
        // Its moment passed (or it failed, which the join reports).
        let _ = begun_rx.recv();
        self.finishing.0 = Some(h);
        Ok(())
    }

    fn checkpoint_running(&self) -> bool {
        self.finishing.0.as_ref().is_some_and(|h| !h.is_finished())
    }

    fn wait_checkpoint(&mut self) -> Result<()> {
        self.join_checkpoint()
    }

    fn checkpoints_finished(&mut self) -> Vec<f64> {
        std::mem::take(&mut self.finished_s)
    }

    fn merges(&self) -> Option<u64> {
        let s = self.store.stats();
        Some(s.row_log_merges + s.row_log_passes - self.merges0)
    }

    fn cache(&self) -> CacheReport {
        let st = self.store.stats();
        let rows: u64 = st.tables.iter().map(|t| t.dram().resident_rows).sum();
        CacheReport {
            rows,
            note: format!(
                "resident rows from Store::stats; I/O engine {}",
                st.io_engine
            ),
        }
    }

    fn setup_note(&self) -> String {
        let st = self.store.stats();
        let logged: u64 = st.tables.iter().map(|t| t.ssd.log_rows_written).sum();
        let live: u64 = st.tables.iter().map(|t| t.ssd.logged_rows).sum();
        let map: u64 = st.tables.iter().map(|t| t.ssd.log_map_bytes).sum();
        let merged: u64 = st.tables.iter().map(|t| t.ssd.log_rows_merged).sum();
        let spilled: u64 = st.tables.iter().map(|t| t.ssd.log_rows_spilled).sum();
        let read: u64 = st.tables.iter().map(|t| t.ssd.bytes_read).sum();
        let mut note = format!(
            "{} ({}), direct I/O {}; row log: {} rows appended, {} of {} blocks used, \
             {} rows live in it, its map {:.1} MiB, {} rows merged ({} read back from \
             spill files); {:.1} GiB read from SSD since open",
            st.io_engine,
            st.io_engine_reason,
            st.direct_io,
            logged,
            st.row_log_used_blocks,
            st.row_log_capacity_blocks,
            live,
            map as f64 / (1 << 20) as f64,
            merged,
            spilled,
            read as f64 / (1u64 << 30) as f64
        );
        if let Some(cp) = &self.last {
            note += &format!(
                ", the final checkpoint merged {} rows and committed {} log blocks",
                cp.row_log_merged_rows, cp.row_log_blocks
            );
        }
        note
    }
}

// ---------------------------------------------------------------- RocksDB

/// Key of a row: table then row, big-endian, so keys sort as (table, row).
fn rkey(t: u32, r: u64) -> [u8; 12] {
    let mut k = [0u8; 12];
    k[..4].copy_from_slice(&t.to_be_bytes());
    k[4..].copy_from_slice(&r.to_be_bytes());
    k
}

fn row_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_row(b: &[u8], out: &mut [f32]) -> Result<()> {
    if b.len() != out.len() * 4 {
        return Err(format!(
            "value of {} bytes, expected {}",
            b.len(),
            out.len() * 4
        ));
    }
    for (o, c) in out.iter_mut().zip(b.chunks_exact(4)) {
        *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    Ok(())
}

/// RocksDB with a block cache of the whole budget.
pub struct Rocks {
    db: rocksdb::DB,
    cache: rocksdb::Cache,
    read: rocksdb::ReadOptions,
    write: rocksdb::WriteOptions,
    dim: usize,
    /// Where W5's checkpoints go (the last one is kept).
    dir: PathBuf,
}

impl Rocks {
    fn options(s: &Setup) -> (rocksdb::Options, rocksdb::Cache) {
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.set_use_direct_reads(true);
        o.set_use_direct_io_for_flush_and_compaction(true);
        o.set_compression_type(rocksdb::DBCompressionType::None);
        o.set_bottommost_compression_type(rocksdb::DBCompressionType::None);
        // Every lookup hits: the last level's filters would cost memory
        // and never save a read, so RocksDB's own advice is to skip them.
        o.set_optimize_filters_for_hits(true);
        o.increase_parallelism(2);
        o.set_max_background_jobs(2);
        let cache = rocksdb::Cache::new_lru_cache(s.dram as usize);
        let mut t = rocksdb::BlockBasedOptions::default();
        t.set_block_cache(&cache);
        t.set_block_size(4096);
        t.set_bloom_filter(10.0, false);
        // Index and filter blocks live in the block cache, so the budget
        // bounds them too; they get its high-priority pool.
        t.set_cache_index_and_filter_blocks(true);
        t.set_cache_index_and_filter_blocks_with_high_priority(true);
        t.set_pin_l0_filter_and_index_blocks_in_cache(true);
        o.set_block_based_table_factory(&t);
        (o, cache)
    }

    /// Open with the default column family named, so that its handle is
    /// there for the batched MultiGet, with the same options.
    fn open_db(o: &rocksdb::Options, path: &Path) -> Result<rocksdb::DB> {
        let cf =
            rocksdb::ColumnFamilyDescriptor::new(rocksdb::DEFAULT_COLUMN_FAMILY_NAME, o.clone());
        rocksdb::DB::open_cf_descriptors(o, path, vec![cf]).map_err(|e| e.to_string())
    }

    /// Bulk-load: sorted SST files, ingested (RocksDB's fastest load path).
    pub fn load(s: &Setup) -> Result<()> {
        let path = s.dir.join("db");
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        let (o, _cache) = Self::options(s);
        let db = Self::open_db(&o, &path)?;
        let sst_dir = s.dir.join("sst");
        std::fs::create_dir_all(&sst_dir).map_err(|e| e.to_string())?;
        let dim = s.ds.dim as usize;
        let mut row = vec![0f32; dim];
        let per_file = (256u64 << 20) / s.ds.row_bytes().max(1);
        let mut files = Vec::new();
        let mut w: Option<rocksdb::SstFileWriter<'_>> = None;
        let mut in_file = 0u64;
        for (t, &rows) in s.ds.rows.iter().enumerate() {
            for r in 0..rows {
                if w.is_none() {
                    let f = sst_dir.join(format!("{}.sst", files.len()));
                    let nw = rocksdb::SstFileWriter::create(&o);
                    nw.open(&f).map_err(|e| e.to_string())?;
                    files.push(f);
                    w = Some(nw);
                    in_file = 0;
                }
                fill_row(t as u32, r, &mut row);
                let wr = w.as_mut().expect("writer");
                wr.put(rkey(t as u32, r), row_bytes(&row))
                    .map_err(|e| e.to_string())?;
                in_file += 1;
                if in_file == per_file {
                    w.take()
                        .expect("writer")
                        .finish()
                        .map_err(|e| e.to_string())?;
                }
            }
        }
        if let Some(mut wr) = w {
            wr.finish().map_err(|e| e.to_string())?;
        }
        let mut io = rocksdb::IngestExternalFileOptions::default();
        io.set_move_files(true);
        db.ingest_external_file_opts(&io, files)
            .map_err(|e| e.to_string())?;
        let _ = std::fs::remove_dir_all(&sst_dir);
        Ok(())
    }

    /// Open the loaded database.
    pub fn open(s: &Setup) -> Result<Rocks> {
        let (o, cache) = Self::options(s);
        let db = Self::open_db(&o, &s.dir.join("db"))?;
        let read = rocksdb::ReadOptions::default();
        let mut write = rocksdb::WriteOptions::default();
        write.disable_wal(true);
        Ok(Rocks {
            db,
            cache,
            read,
            write,
            dim: s.ds.dim as usize,
            dir: s.dir.clone(),
        })
    }
}

impl Engine for Rocks {
    fn lookup(&mut self, b: &Batch, out: &mut [f32]) -> Result<()> {
        // One MultiGet for the batch, keys sorted, as FBGEMM's SSD TBE does.
        let mut keys: Vec<([u8; 12], usize)> = b
            .ids()
            .enumerate()
            .map(|(k, (t, r))| (rkey(t, r), k))
            .collect();
        keys.sort_unstable();
        let cf = self
            .db
            .cf_handle(rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
            .ok_or("no default column family")?;
        let got =
            self.db
                .batched_multi_get_cf_opt(cf, keys.iter().map(|(k, _)| k), true, &self.read);
        let d = self.dim;
        for ((key, at), v) in keys.iter().zip(got) {
            match v.map_err(|e| e.to_string())? {
                Some(v) => bytes_row(&v, &mut out[at * d..(at + 1) * d])?,
                None => return Err(format!("key {key:?} missing")),
            }
        }
        Ok(())
    }

    fn sgd(&mut self, b: &Batch, looked_up: &[f32], grads: &[f32], lr: f32) -> Result<()> {
        let mut wb = rocksdb::WriteBatch::default();
        sgd_batch(b, looked_up, grads, lr, self.dim, |t, r, v| {
            wb.put(rkey(t, r), row_bytes(v));
            Ok(())
        })?;
        self.db
            .write_opt(wb, &self.write)
            .map_err(|e| e.to_string())
    }

    fn persist(&mut self) -> Result<()> {
        self.db.flush().map_err(|e| e.to_string())?;
        self.db
            .wait_for_compact(&rocksdb::WaitForCompactOptions::default())
            .map_err(|e| e.to_string())
    }

    /// Flush the memtable, then a RocksDB `Checkpoint` (hard links of the
    /// SST files, as a trainer would keep to restart from); the previous
    /// checkpoint is removed. Compaction goes on in the background.
    fn checkpoint(&mut self, n: u64) -> Result<()> {
        self.db.flush().map_err(|e| e.to_string())?;
        let path = self.dir.join(format!("checkpoint-{n}"));
        let _ = std::fs::remove_dir_all(&path);
        rocksdb::checkpoint::Checkpoint::new(&self.db)
            .and_then(|c| c.create_checkpoint(&path))
            .map_err(|e| format!("checkpoint {}: {e}", path.display()))?;
        if n > 0 {
            let _ = std::fs::remove_dir_all(self.dir.join(format!("checkpoint-{}", n - 1)));
        }
        Ok(())
    }

    fn cache(&self) -> CacheReport {
        let keys = self
            .db
            .property_int_value("rocksdb.estimate-num-keys")
            .ok()
            .flatten()
            .unwrap_or(0);
        let sst = self
            .db
            .property_int_value("rocksdb.total-sst-files-size")
            .ok()
            .flatten()
            .unwrap_or(0);
        let usage = self.cache.get_usage() as u64;
        let rows = if sst > 0 {
            (usage as f64 * keys as f64 / sst as f64) as u64
        } else {
            0
        };
        CacheReport {
            rows,
            note: format!(
                "estimated: block-cache usage {usage} B x {keys} keys / {sst} B of SST (index and filter blocks included)"
            ),
        }
    }

    fn setup_note(&self) -> String {
        "direct reads and flush/compaction, WAL off, LRU block cache = budget (index+filters inside), \
         4 KiB blocks, no compression, bloom 10 bits/key (upper levels), batched MultiGet, liburing"
            .into()
    }
}

// ---------------------------------------------------------------- foyer

/// foyer's block engine aligns every entry to 4 KiB on disk, so one 256-byte
/// row per entry would take 16x the space. Its documentation's advice for
/// small objects is to pack them: a value here is a page of consecutive rows
/// of one table, as many as fit in 4 KiB with the entry header.
pub fn foyer_rows_per_page(ds: &Dataset) -> u64 {
    ((4096 - 128) / ds.row_bytes()).max(1)
}

fn foyer_key(t: u32, page: u64) -> u64 {
    ((t as u64) << 48) | page
}

/// foyer HybridCache: memory = budget, block engine on a file.
pub struct Foyer {
    cache: foyer::HybridCache<u64, Vec<u8>>,
    rt: tokio::runtime::Runtime,
    rpp: u64,
    dim: usize,
    io_engine: String,
    pages: HashMap<u64, Vec<u8>>,
    lost_pages: u64,
}

impl Foyer {
    fn device_bytes(s: &Setup) -> u64 {
        let rpp = foyer_rows_per_page(&s.ds);
        let pages: u64 = s.ds.rows.iter().map(|r| r.div_ceil(rpp)).sum();
        // Three times the data: the log-structured engine needs room to
        // rewrite updated pages before it reclaims the stale copies, and a
        // reclaimed block's live pages are dropped (counted as lost).
        (pages * 4096 * 3).next_multiple_of(64 << 20)
    }

    fn build(s: &Setup) -> Result<Foyer> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&s.dir).map_err(|e| e.to_string())?;
        let path = s.dir.join("device");
        let build = |uring: bool| -> Result<foyer::HybridCache<u64, Vec<u8>>> {
            let device = foyer::FileDeviceBuilder::new(&path)
                .with_capacity(Self::device_bytes(s) as usize)
                .with_direct(true)
                .build()
                .map_err(|e| e.to_string())?;
            let b = foyer::HybridCacheBuilder::new()
                .with_policy(foyer::HybridCachePolicy::WriteOnEviction)
                .memory(s.dram as usize)
                .with_weighter(|_k: &u64, v: &Vec<u8>| v.len() + 8)
                .storage();
            let b = if uring {
                b.with_io_engine_config(
                    foyer::UringIoEngineConfig::new()
                        .with_io_depth(s.qd as usize)
                        .boxed() as Box<dyn foyer::IoEngineConfig>,
                )
            } else {
                b.with_io_engine_config(
                    foyer::PsyncIoEngineConfig::new().boxed() as Box<dyn foyer::IoEngineConfig>
                )
            };
            rt.block_on(
                b.with_engine_config(
                    foyer::BlockEngineConfig::new(device)
                        .with_block_size(16 << 20)
                        // As foyer's README tunes it: clean blocks kept
                        // ahead so flushers do not stall, and room in the
                        // flush buffers so that inserts are not dropped.
                        // The default pickers reclaim mostly-stale blocks
                        // first. (Reinserting every live entry on reclaim,
                        // tried first, wedged flush_if after W3 here.)
                        .with_clean_block_threshold(4)
                        .with_buffer_pool_size(64 << 20)
                        .with_submit_queue_size_threshold(64 << 20),
                )
                .with_recover_mode(foyer::RecoverMode::Quiet)
                .build(),
            )
            .map_err(|e| e.to_string())
        };
        let (cache, io_engine) = match build(true) {
            Ok(c) => (c, "io_uring".to_string()),
            Err(e) => (build(false)?, format!("psync (io_uring refused: {e})")),
        };
        Ok(Foyer {
            cache,
            rt,
            rpp: foyer_rows_per_page(&s.ds),
            dim: s.ds.dim as usize,
            io_engine,
            pages: HashMap::new(),
            lost_pages: 0,
        })
    }

    /// Write every page to the disk tier, waiting for the flushers so that
    /// none is dropped, then close.
    pub fn load(s: &Setup) -> Result<()> {
        let path = s.dir.join("device");
        let _ = std::fs::remove_file(&path);
        let f = Self::build(s)?;
        let dim = s.ds.dim as usize;
        let mut page = vec![0f32; f.rpp as usize * dim];
        let mut n = 0u64;
        for (t, &rows) in s.ds.rows.iter().enumerate() {
            let pages = rows.div_ceil(f.rpp);
            for p in 0..pages {
                let first = p * f.rpp;
                let k = f.rpp.min(rows - first) as usize;
                for i in 0..k {
                    fill_row(
                        t as u32,
                        first + i as u64,
                        &mut page[i * dim..(i + 1) * dim],
                    );
                }
                let key = foyer_key(t as u32, p);
                f.cache
                    .storage_writer(key)
                    .force()
                    .insert(row_bytes(&page[..k * dim]));
                n += 1;
                if n.is_multiple_of(4096) {
                    f.rt.block_on(f.cache.storage().wait());
                }
            }
        }
        f.rt.block_on(f.cache.storage().wait());
        // Check that nothing was dropped by a full flush buffer.
        let mut missing = Vec::new();
        for (t, &rows) in s.ds.rows.iter().enumerate() {
            for p in 0..rows.div_ceil(f.rpp) {
                if !f.cache.storage().may_contains(&foyer_key(t as u32, p)) {
                    missing.push((t, p));
                }
            }
        }
        if !missing.is_empty() {
            return Err(format!(
                "foyer dropped {} of {n} pages while loading (first: table {} page {})",
                missing.len(),
                missing[0].0,
                missing[0].1
            ));
        }
        f.rt.block_on(f.cache.close()).map_err(|e| e.to_string())
    }

    /// Open (recover) the loaded cache.
    pub fn open(s: &Setup) -> Result<Foyer> {
        Self::build(s)
    }

    fn fetch(&mut self, b: &Batch) -> Result<()> {
        self.pages.clear();
        let rpp = self.rpp;
        let mut keys: Vec<u64> = b
            .parts
            .iter()
            .flat_map(|(t, ids)| ids.iter().map(move |r| foyer_key(*t, r / rpp)))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let cache = &self.cache;
        let got = self.rt.block_on(async {
            let futs = keys.iter().map(|k| cache.get(k));
            futures::future::join_all(futs).await
        });
        for (k, g) in keys.iter().zip(got) {
            match g.map_err(|e| e.to_string())? {
                Some(e) => {
                    self.pages.insert(*k, e.value().clone());
                }
                None => {
                    // foyer is a cache: a full flush buffer drops writes.
                    // Count the loss, serve zeros, and go on.
                    self.lost_pages += 1;
                    self.pages
                        .insert(*k, vec![0u8; (self.rpp * self.dim as u64 * 4) as usize]);
                }
            }
        }
        Ok(())
    }
}

impl Engine for Foyer {
    fn lookup(&mut self, b: &Batch, out: &mut [f32]) -> Result<()> {
        self.fetch(b)?;
        let d = self.dim;
        let rb = d * 4;
        for (k, (t, r)) in b.ids().enumerate() {
            let page = &self.pages[&foyer_key(t, r / self.rpp)];
            let at = (r % self.rpp) as usize * rb;
            bytes_row(
                page.get(at..at + rb).ok_or("short page")?,
                &mut out[k * d..(k + 1) * d],
            )?;
        }
        Ok(())
    }

    fn sgd(&mut self, b: &Batch, looked_up: &[f32], grads: &[f32], lr: f32) -> Result<()> {
        // Read-modify-write of each page touched, from the pages `lookup`
        // just fetched.
        let rb = self.dim * 4;
        let (rpp, pages) = (self.rpp, &mut self.pages);
        let mut dirty = Vec::new();
        sgd_batch(b, looked_up, grads, lr, self.dim, |t, r, v| {
            let key = foyer_key(t, r / rpp);
            let page = pages.get_mut(&key).ok_or("page not fetched")?;
            let at = (r % rpp) as usize * rb;
            page[at..at + rb].copy_from_slice(&row_bytes(v));
            dirty.push(key);
            Ok(())
        })?;
        dirty.sort_unstable();
        dirty.dedup();
        for key in dirty {
            // The page map is refilled by the next fetch: move, not copy.
            let page = self.pages.remove(&key).expect("dirty page was fetched");
            self.cache.insert(key, page);
        }
        Ok(())
    }

    fn persist(&mut self) -> Result<()> {
        // Write-on-eviction: push every in-memory page to disk, and wait.
        self.rt.block_on(self.cache.flush_if(|_, _| true));
        self.rt.block_on(self.cache.storage().wait());
        Ok(())
    }

    fn cache(&self) -> CacheReport {
        let usage = self.cache.memory().usage() as u64;
        let page_bytes = self.rpp * self.dim as u64 * 4 + 8;
        CacheReport {
            rows: usage / page_bytes * self.rpp,
            note: format!(
                "memory usage {usage} B by weight (value + key) / {page_bytes} B a page x {} rows a page; \
                 LOST {} page reads (pages foyer dropped)",
                self.rpp, self.lost_pages
            ),
        }
    }

    fn setup_note(&self) -> String {
        format!(
            "{} engine, write-on-eviction, 16 MiB blocks, O_DIRECT file device, pages of {} rows",
            self.io_engine, self.rpp
        )
    }
}

// ---------------------------------------------------------------- mmap

/// A flat file of every row, mapped shared; reads fault through the page
/// cache. Before a batch is gathered, `MADV_WILLNEED` on each row's page
/// starts the reads together, as a careful mmap user would.
pub struct Mmap {
    map: memmap2::MmapMut,
    file: File,
    offsets: Vec<u64>,
    dim: usize,
}

impl Mmap {
    fn path(s: &Setup) -> PathBuf {
        s.dir.join("table.f32")
    }

    /// Write the flat file, then drop its pages from the page cache.
    pub fn load(s: &Setup) -> Result<()> {
        std::fs::create_dir_all(&s.dir).map_err(|e| e.to_string())?;
        let path = Self::path(s);
        let f = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut w = std::io::BufWriter::with_capacity(8 << 20, &f);
        let mut row = vec![0f32; s.ds.dim as usize];
        for (t, &rows) in s.ds.rows.iter().enumerate() {
            for r in 0..rows {
                fill_row(t as u32, r, &mut row);
                w.write_all(&row_bytes(&row)).map_err(|e| e.to_string())?;
            }
        }
        w.flush().map_err(|e| e.to_string())?;
        drop(w);
        f.sync_all().map_err(|e| e.to_string())?;
        drop_page_cache(&f)
    }

    /// Map the file. `drop_cache`: drop its pages from the page cache
    /// first (a cold open, as after a reboot); without it, a reopen finds
    /// what the page cache kept of an earlier process's run.
    pub fn open(s: &Setup, drop_cache: bool) -> Result<Mmap> {
        let path = Self::path(s);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if drop_cache {
            drop_page_cache(&file)?;
        }
        // SAFETY: the file is private to this harness (its own data dir) and
        // no other process maps or truncates it while it is mapped.
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| e.to_string())?;
        map.advise(memmap2::Advice::Random)
            .map_err(|e| e.to_string())?;
        Ok(Mmap {
            map,
            file,
            offsets: s.ds.offsets(),
            dim: s.ds.dim as usize,
        })
    }

    fn at(&self, t: u32, r: u64) -> usize {
        ((self.offsets[t as usize] + r) as usize) * self.dim * 4
    }
}

/// Drop a file's clean pages from the page cache.
fn drop_page_cache(f: &File) -> Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fadvise only reads its integer arguments; the fd is open
    // for the duration of the call.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(format!(
            "posix_fadvise: {}",
            std::io::Error::from_raw_os_error(rc)
        ));
    }
    Ok(())
}

impl Engine for Mmap {
    fn lookup(&mut self, b: &Batch, out: &mut [f32]) -> Result<()> {
        let rb = self.dim * 4;
        for (t, r) in b.ids() {
            let at = self.at(t, r);
            let page = at & !4095;
            let end = (at + rb).next_multiple_of(4096).min(self.map.len());
            // Start the read; gathering below waits for it.
            let _ = self
                .map
                .advise_range(memmap2::Advice::WillNeed, page, end - page);
        }
        for (k, (t, r)) in b.ids().enumerate() {
            let at = self.at(t, r);
            bytes_row(
                &self.map[at..at + rb],
                &mut out[k * self.dim..(k + 1) * self.dim],
            )?;
        }
        Ok(())
    }

    fn sgd(&mut self, b: &Batch, looked_up: &[f32], grads: &[f32], lr: f32) -> Result<()> {
        let (d, offsets, map) = (self.dim, &self.offsets, &mut self.map);
        sgd_batch(b, looked_up, grads, lr, d, |t, r, v| {
            let at = ((offsets[t as usize] + r) as usize) * d * 4;
            map[at..at + d * 4].copy_from_slice(&row_bytes(v));
            Ok(())
        })
    }

    fn persist(&mut self) -> Result<()> {
        self.map.flush().map_err(|e| e.to_string())?;
        self.file.sync_all().map_err(|e| e.to_string())
    }

    fn cache(&self) -> CacheReport {
        // Resident pages of the mapping, by mincore.
        let pages = self.map.len().div_ceil(4096);
        let mut vec = vec![0u8; pages];
        // SAFETY: the mapping is live for the call and `vec` has one byte per
        // page of it, as mincore requires.
        let rc = unsafe {
            libc::mincore(
                self.map.as_ptr() as *mut libc::c_void,
                self.map.len(),
                vec.as_mut_ptr(),
            )
        };
        let resident = if rc == 0 {
            vec.iter().filter(|&&v| v & 1 == 1).count() as u64
        } else {
            0
        };
        let rows_per_page = 4096 / (self.dim as u64 * 4).max(1);
        CacheReport {
            rows: resident * rows_per_page.max(1),
            note: format!("{resident} resident pages by mincore"),
        }
    }
}

/// Check a gathered batch against the dataset's values.
pub fn verify(b: &Batch, out: &[f32], dim: usize) -> Result<()> {
    for (k, (t, r)) in b.ids().enumerate() {
        for j in 0..dim {
            let want = value(t, r, j as u32);
            let got = out[k * dim + j];
            if got.to_bits() != want.to_bits() {
                return Err(format!(
                    "table {t} row {r} element {j}: got {got}, expected {want}"
                ));
            }
        }
    }
    Ok(())
}
