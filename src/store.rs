//! The store: a directory of named tables over DRAM, PMem and SSD tiers.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use embtier_format::{
    Catalog, FormatError, FormatVersion, InitKind, OptimizerCode, RowLayout, Superblock,
    TableEntry, BLOCK_SIZE, CATALOG_OFFSET,
};

use crate::config::{Init, Placement, StoreConfig, TableConfig};
use crate::durable::{pick_superblock, Checkpoint, Durable, Recovery};
use crate::error::{Error, Result};
use crate::io::{open_engine, AlignedBuf, IoEngine};
use crate::precision::Rounding;
use crate::precision::{bytes_to_f32, f32_to_bytes};
use crate::stats::{LatencySummary, SsdStats, Stats, TableStats, TierStats};
use crate::table::{Table, TableSetup};
use crate::tier::rowlog::RowLog;
use crate::tier::slab::PmemFile;
use crate::tier::ssd::Ssd;

pub use crate::files::{CONFIG_FILE, DATA_FILE, LOCK_FILE, META_FILE, PMEM_FILE};

/// Wraps each I/O engine a store opens (the data file's, the journal's and
/// the metadata file's, with that file's path), for tests that inject faults.
pub type EngineWrapper = Arc<dyn Fn(&Path, Box<dyn IoEngine>) -> Box<dyn IoEngine> + Send + Sync>;

/// Options that are not part of the on-disk config.
#[derive(Clone, Default)]
pub struct OpenOptionsExt {
    /// Wrap the store's engines (fault injection in tests).
    pub wrap_engine: Option<EngineWrapper>,
}

/// One table's batch in [`Store::lookup_many`]: the ids to look up and
/// where their rows go (`ids.len() * dim` values, row `i` at `i * dim`).
#[derive(Debug)]
pub struct TableBatch<'a> {
    /// The table's name.
    pub table: &'a str,
    /// Row ids, duplicates allowed.
    pub ids: &'a [u64],
    /// The rows, in the order of `ids`.
    pub out: &'a mut [f32],
}

impl<'a> TableBatch<'a> {
    /// A part of a multi-table lookup.
    pub fn new(table: &'a str, ids: &'a [u64], out: &'a mut [f32]) -> TableBatch<'a> {
        TableBatch { table, ids, out }
    }
}

/// An open embtier store. `Send + Sync`: share it between threads by reference
/// or `Arc`; lookups and updates from several threads run concurrently.
///
/// ```
/// use embtier::{Store, StoreConfig, TableConfig};
/// let dir = tempfile::tempdir().unwrap();
/// let cfg = StoreConfig::builder()
///     .table(TableConfig::new("items", 1_000_000, 8))
///     .dram_capacity(1 << 20)
///     .build();
/// let store = Store::create(dir.path().join("s"), cfg).unwrap();
/// store.apply_sgd("items", &[3, 3], &[1.0; 16], 0.5).unwrap();
/// let mut out = [0f32; 8];
/// store.lookup("items", &[3], &mut out).unwrap();
/// store.flush().unwrap();
/// ```
///
/// # Errors, deferred write-backs, and what a failed call did
///
/// - **Write-backs are deferred, and their failures are not the caller's.**
///   Dirty rows displaced from DRAM and PMem are written to SSD in batches,
///   inside whichever `lookup`, `update`, `step` or `apply_sgd` call fills a
///   batch. If that write fails (a full disk), the call still returns `Ok`:
///   the rows stay *pending*, in memory and authoritative (reads see them),
///   and the next write-back or checkpoint retries them. Failures are
///   counted in [`crate::SsdStats::writeback_errors`], and the rows waiting
///   in [`crate::SsdStats::pending_rows`] (totals:
///   [`crate::Stats::writeback_errors`], [`crate::Stats::pending_rows`];
///   `emb-replay run` prints a warning when either is non-zero). Pending
///   rows are not durable. Once a table's pending rows pass
///   [`crate::SsdStats::pending_limit_rows`], every update of it writes back
///   first and fails with that write's error, and [`Store::checkpoint`]
///   always fails while a row cannot be written: nothing acknowledged by a
///   checkpoint is ever lost.
/// - **What a call that fails on a read did.** `update`, `step` and
///   `apply_sgd` change the rows they find in memory (DRAM, PMem, pending)
///   as they go, then read the others from SSD. If a read fails (an I/O
///   error, a corrupt block), the call returns that error; the rows found
///   in memory, and those read before the failure, may have changed, each
///   wholly (never a mix of old and new elements); the rows whose read
///   failed did not. Retrying the same step would apply it twice to the
///   rows that took it: treat a failed step as a failed training step, and
///   restart from the last checkpoint.
/// - Invalid input (an unknown table, an id out of range, a wrong length, a
///   non-finite value) is refused before anything changes.
pub struct Store {
    dir: PathBuf,
    config: StoreConfig,
    tables: Vec<Arc<Table>>,
    by_name: HashMap<String, usize>,
    pub(crate) ssd: Arc<Ssd>,
    superblock: Superblock,
    recovery: Recovery,
    /// Merges of the row log since open.
    log_merges: std::sync::atomic::AtomicU64,
    _lock: LockFile,
}

/// Rows being read into DRAM by [`Store::prefetch`], pinned there until
/// this handle is dropped.
#[must_use = "dropping a Prefetch at once releases its pins"]
pub struct Prefetch<'a> {
    table: Arc<Table>,
    handle: Option<std::thread::JoinHandle<(Vec<u64>, Result<()>)>>,
    pins: Vec<u64>,
    _store: std::marker::PhantomData<&'a Store>,
}

impl Prefetch<'_> {
    /// Whether the reads have finished.
    pub fn is_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Wait for the reads; returns how many rows were pinned (the others
    /// were read but hit the pin bound). An error (a failed or corrupt read)
    /// leaves the rows it concerns out of DRAM, and a later lookup of them
    /// reports it again. The pins last until the handle is dropped.
    pub fn wait(&mut self) -> Result<usize> {
        let Some(h) = self.handle.take() else {
            return Ok(self.pins.len());
        };
        match h.join() {
            Ok((pins, r)) => {
                self.pins = pins;
                r.map(|()| self.pins.len())
            }
            Err(_) => Err(Error::PrefetchPanicked {
                table: self.table.name.clone(),
            }),
        }
    }
}

impl Drop for Prefetch<'_> {
    fn drop(&mut self) {
        let _ = self.wait();
        self.table.unpin(&self.pins);
    }
}

/// The store directories this process holds open, by (device, inode) of
/// the directory, so that a path alias (a symlink, a bind mount) is the
/// same store.
static OPEN_STORES: parking_lot::Mutex<Vec<(u64, u64)>> = parking_lot::Mutex::new(Vec::new());

/// The store's exclusive lock: a POSIX record lock (`fcntl(F_SETLK)`) on
/// the LOCK file against other processes, and [`OPEN_STORES`] against a
/// second open in this one. Released when dropped or when the process dies
/// (so a dead process's lock never blocks).
///
/// Not `flock`: a child forked while the store is open (a DataLoader
/// worker, or any subprocess between its fork and its exec) inherits the
/// descriptor, and an `flock` stays held until every copy is closed, so the
/// store stayed locked after its owner closed it. A record lock belongs to
/// the process and is not inherited. Its one hazard, that closing *any*
/// descriptor of the file releases it, is why a second open in this
/// process is refused by the registry before the file is opened again.
struct LockFile {
    file: Option<File>,
    key: (u64, u64),
}

impl LockFile {
    fn acquire(dir: &Path) -> Result<LockFile> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let path = dir.join(LOCK_FILE);
        let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, "stat", e))?;
        let key = (meta.dev(), meta.ino());
        let mut open = OPEN_STORES.lock();
        if open.contains(&key) {
            return Err(Error::Locked {
                path,
                pid: std::process::id(),
            });
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, "open", e))?;
        // SAFETY: `flock` is a plain C struct for which all-zero bytes are
        // valid; the fields that matter are set below.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as _;
        lock.l_whence = libc::SEEK_SET as _;
        // l_start = 0, l_len = 0: the whole file.
        // SAFETY: fcntl(F_SETLK) on a valid open descriptor with a pointer
        // to an initialised `flock` that outlives the call.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
                // Another process holds it. Closing this descriptor is
                // harmless: this process holds no lock on the file.
                let mut s = String::new();
                let _ = file.read_to_string(&mut s);
                return Err(Error::Locked {
                    path,
                    pid: s.trim().parse().unwrap_or(0),
                });
            }
            return Err(Error::io(&path, "fcntl(F_SETLK)", err));
        }
        file.set_len(0)
            .map_err(|e| Error::io(&path, "truncate", e))?;
        write!(file, "{}", std::process::id()).map_err(|e| Error::io(&path, "write", e))?;
        open.push(key);
        Ok(LockFile {
            file: Some(file),
            key,
        })
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Release the record lock (by closing its descriptor) before the
        // registry lets this process open the store again: the other order
        // would let a new open's lock be released by this close.
        let mut open = OPEN_STORES.lock();
        drop(self.file.take());
        open.retain(|k| *k != self.key);
    }
}

/// Sum the gradients of duplicate ids, in the order given: returns the
/// unique ids (sorted) with their index into the summed gradients.
fn sum_duplicates(ids: &[u64], grads: &[f32], dim: usize) -> (Vec<(u64, usize)>, Vec<f32>) {
    let mut slot_of: rustc_hash::FxHashMap<u64, usize> = rustc_hash::FxHashMap::default();
    slot_of.reserve(ids.len());
    let mut sums: Vec<f32> = Vec::with_capacity(grads.len());
    let mut items: Vec<(u64, usize)> = Vec::with_capacity(ids.len());
    for (k, &id) in ids.iter().enumerate() {
        let g = &grads[k * dim..(k + 1) * dim];
        match slot_of.get(&id) {
            Some(&s) => {
                for (a, b) in sums[s * dim..(s + 1) * dim].iter_mut().zip(g) {
                    *a += *b;
                }
            }
            None => {
                let s = items.len();
                slot_of.insert(id, s);
                items.push((id, s));
                sums.extend_from_slice(g);
            }
        }
    }
    items.sort_unstable();
    (items, sums)
}

/// The rounding of row `s` of a call whose stochastic base seed is `base`.
fn rounding_for(base: Option<u64>, s: usize) -> Rounding {
    match base {
        Some(b) => Rounding::Stochastic(crate::hash::mix64(
            b ^ (s as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        )),
        None => Rounding::Nearest,
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, "fsync", e))
}

/// Refuse a data file shorter than the blocks the superblock commits (the
/// tables and the committed row log). A block past the end reads as a hole,
/// that is as a never-written row, so a truncated file would otherwise
/// serve its lost rows as their initial values. A block device is not
/// checked: its length is not the file's.
fn check_data_len(data_path: &Path, sb: &Superblock) -> Result<()> {
    let meta = match std::fs::metadata(data_path) {
        Ok(m) => m,
        // A missing file is an error too: the engine's open would create
        // it, all holes.
        Err(e) => return Err(Error::io(data_path, "stat", e)),
    };
    let needed = (sb.data_blocks + sb.rowlog_blocks).saturating_mul(BLOCK_SIZE as u64);
    if meta.is_file() && meta.len() < needed {
        return Err(Error::Format {
            path: data_path.into(),
            source: FormatError::Truncated {
                offset: 0,
                needed,
                have: meta.len(),
            },
        });
    }
    Ok(())
}

/// The row log's capacity in blocks: the config's, or by default half the
/// bytes of the cached tables (at least 16 MiB); none unless the data file
/// is a regular file (a block device has no room after the tables).
fn row_log_blocks(config: &StoreConfig, catalog: &Catalog, data_path: &Path) -> u64 {
    let regular = fs::metadata(data_path)
        .map(|m| m.is_file())
        .unwrap_or(false);
    if !regular {
        return 0;
    }
    let bytes = match config.ssd.row_log {
        Some(b) => b.0,
        None => {
            let cached: u64 = catalog
                .tables
                .iter()
                .zip(&config.tables)
                .filter(|(_, t)| t.placement == Placement::Cached)
                .map(|(e, _)| e.block_count * BLOCK_SIZE as u64)
                .sum();
            (cached / 2).max(16 << 20)
        }
    };
    bytes / BLOCK_SIZE as u64
}

/// Recovery of the row log: map every row of its `committed` blocks to the
/// newest block holding it (later blocks are newer). Blocks past the
/// committed length were written after the last checkpoint and are
/// ignored. Any block that is not a sealed, committed row-log block of a
/// table of this store, holding ids in range, is an error naming it.
fn restore_row_log(ssd: &Ssd, tables: &[Arc<Table>], sb: &Superblock) -> Result<()> {
    const CHUNK: u64 = 1024;
    let committed = sb.rowlog_blocks;
    let mut last_epoch = 0u64;
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let mut pinned = false;
    let mut at = 0u64;
    while at < committed {
        let n = CHUNK.min(committed - at);
        let off = ssd.log_block(at as u32) * BLOCK_SIZE as u64;
        ssd.read_extents_each(&[off], n as usize * BLOCK_SIZE, &mut buf, &mut |_, _| {})?;
        for i in 0..n {
            let b = (at + i) as u32;
            let offset = ssd.log_block(b) * BLOCK_SIZE as u64;
            let raw = &buf.as_slice()[i as usize * BLOCK_SIZE..(i as usize + 1) * BLOCK_SIZE];
            let fmt = |source| Error::Format {
                path: ssd.path().to_path_buf(),
                source,
            };
            let invalid = |field, at: usize, value: String| {
                fmt(FormatError::InvalidField {
                    field,
                    offset: offset + at as u64,
                    value,
                })
            };
            let lb = ssd.check_log_block(b, raw).map_err(fmt)?;
            // Appends carry their checkpoint's epoch, in log order: an
            // older block where a newer append belongs is a lost write.
            let e = embtier_format::block_epoch(raw);
            let want_last = sb.version.has_v4_fields();
            let bad = e < last_epoch
                || (want_last && (b >= sb.rowlog_from) != (e == sb.committed_epoch))
                || (want_last && b < sb.rowlog_from && e > sb.committed_epoch);
            if bad {
                return Err(invalid(
                    "row log block epoch",
                    embtier_format::BLOCK_SIZE - 24,
                    format!(
                        "{e}: out of order for block {b} of a log whose last checkpoint \
                         (epoch {}) appended blocks {}..{} (an append that never \
                         reached the disk)",
                        sb.committed_epoch, sb.rowlog_from, committed
                    ),
                ));
            }
            last_epoch = e;
            let Some(t) = tables.get(lb.table as usize) else {
                return Err(invalid(
                    "table",
                    embtier_format::rowlog::TABLE,
                    format!("{}, but the store has {} tables", lb.table, tables.len()),
                ));
            };
            if lb.row_bytes != t.row_bytes {
                return Err(invalid(
                    "row_bytes",
                    embtier_format::rowlog::ROW_BYTES,
                    format!(
                        "{}, but table {:?} has rows of {}",
                        lb.row_bytes, t.name, t.row_bytes
                    ),
                ));
            }
            for (k, &id) in lb.ids.iter().enumerate() {
                if id >= t.entry.rows {
                    return Err(invalid(
                        "row id",
                        embtier_format::rowlog::IDS + 8 * k,
                        format!("{id}, but table {:?} has {} rows", t.name, t.entry.rows),
                    ));
                }
                pinned |= t.restore_logged(id, b, lb.row(k));
            }
        }
        at += n;
    }
    if pinned || (committed > 0 && ssd.log().capacity == 0) {
        ssd.log().mark_stale();
    }
    Ok(())
}

fn entry_for(t: &TableConfig, base_block: u64) -> TableEntry {
    let layout = RowLayout::for_row_bytes(t.row_bytes() as u32);
    let state_bytes = t.optimizer.state_bytes(t.dim);
    let (init, init_scale) = match t.init {
        Init::Zeros => (InitKind::Zeros, 0.0),
        Init::Uniform { scale } => (InitKind::Uniform, scale),
    };
    TableEntry {
        name: t.name.clone(),
        rows: t.rows,
        dim: t.dim,
        elem: t.elem.format(),
        init,
        init_scale,
        seed: t.effective_seed(),
        state_bytes,
        optimizer: t.optimizer.code(),
        base_block,
        block_count: layout.blocks_for(t.rows),
        layout,
    }
}

/// What a `Store::create` has made so far, removed again if it fails: the
/// guard is dropped armed on every error path, and disarmed once the store
/// is assembled. It removes only what this create made: the files a store
/// keeps in its directory (and only once the directory is this create's,
/// see `owns_contents`), data and PMem files at configured paths that did not
/// exist before, and the directories it made, each only if empty.
struct CreateUndo {
    dir: PathBuf,
    /// Directories made by this create (the store directory and any missing
    /// parents), outermost first.
    made_dirs: Vec<PathBuf>,
    /// Whether the store files in `dir` are this create's to remove: true
    /// from the moment it tries the store's lock, false again if another
    /// process holds it (another create raced this one into the same empty
    /// directory, and the files are that one's).
    owns_contents: bool,
    /// Files made outside the store's own names: a configured data or PMem
    /// path that did not exist before this create.
    outside: Vec<PathBuf>,
    armed: bool,
}

/// The files a store keeps in its directory.
const STORE_FILES: [&str; 7] = [
    LOCK_FILE,
    CONFIG_FILE,
    META_FILE,
    "embtier.meta.tmp",
    DATA_FILE,
    crate::durable::JOURNAL_FILE,
    PMEM_FILE,
];

impl CreateUndo {
    fn new(dir: &Path) -> CreateUndo {
        CreateUndo {
            dir: dir.into(),
            made_dirs: Vec::new(),
            owns_contents: false,
            outside: Vec::new(),
            armed: true,
        }
    }

    /// `fs::create_dir_all(dir)`, remembering which directories it made.
    fn make_dirs(&mut self, dir: &Path) -> Result<()> {
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .take_while(|a| fs::symlink_metadata(a).is_err())
            .map(Path::to_path_buf)
            .collect();
        self.made_dirs = missing.into_iter().rev().collect();
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, "mkdir", e))
    }

    /// Remember `path` (a configured file outside the store's names) for
    /// removal, unless something is there already.
    fn outside_file(&mut self, path: &Path) {
        if fs::symlink_metadata(path).is_err() {
            self.outside.push(path.into());
        }
    }
}

impl Drop for CreateUndo {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Errors are ignored: this runs on an error path, and the error
        // being returned is the one that matters.
        if self.owns_contents {
            for name in STORE_FILES {
                let _ = fs::remove_file(self.dir.join(name));
            }
        }
        for p in &self.outside {
            let _ = fs::remove_file(p);
        }
        for d in self.made_dirs.iter().rev() {
            let _ = fs::remove_dir(d); // only if empty
        }
    }
}

impl Store {
    /// Create a new store in `dir` (which must not exist or be empty).
    /// Writes `store.toml`, the metadata file, and a sparse data file: no row
    /// data is written, so a table of 10^9 rows is created in constant time.
    ///
    /// A create that fails leaves nothing behind: the directories, files and
    /// the PMem file it made are removed again (a directory that existed
    /// empty before stays), so it can be retried with a corrected config.
    pub fn create(dir: impl AsRef<Path>, config: StoreConfig) -> Result<Store> {
        Store::create_with(dir, config, OpenOptionsExt::default())
    }

    /// [`Store::create`] with extra options.
    pub fn create_with(
        dir: impl AsRef<Path>,
        config: StoreConfig,
        opts: OpenOptionsExt,
    ) -> Result<Store> {
        let dir = dir.as_ref();
        config.plan()?;
        let mut undo = CreateUndo::new(dir);
        if dir.exists() {
            let mut it = fs::read_dir(dir).map_err(|e| Error::io(dir, "read_dir", e))?;
            if it.next().is_some() {
                return Err(Error::AlreadyExists { path: dir.into() });
            }
        } else {
            undo.make_dirs(dir)?;
        }
        undo.owns_contents = true;
        let lock = LockFile::acquire(dir).inspect_err(|e| {
            if matches!(e, Error::Locked { .. }) {
                undo.owns_contents = false;
            }
        })?;
        let mut catalog = Catalog::default();
        let mut next = 0u64;
        for t in &config.tables {
            let e = entry_for(t, next);
            next = next
                .checked_add(e.block_count)
                .ok_or_else(|| Error::config("tables span more than 2^64 blocks"))?;
            catalog.tables.push(e);
        }
        if next > i64::MAX as u64 / BLOCK_SIZE as u64 {
            return Err(Error::config(
                "tables exceed the largest file size (2^63 bytes)",
            ));
        }
        let cat_bytes = catalog.encode();
        let sb = Superblock {
            version: FormatVersion::CURRENT,
            store_id: crate::hash::mix64(
                now_unix() ^ ((std::process::id() as u64) << 32) ^ dir.as_os_str().len() as u64,
            ),
            created_unix: now_unix(),
            table_count: catalog.tables.len() as u32,
            catalog_offset: CATALOG_OFFSET,
            catalog_len: cat_bytes.len() as u64,
            catalog_crc: crc32c::crc32c(&cat_bytes),
            data_blocks: next,
            generation: 0,
            seq: 1,
            committed_epoch: 0,
            next_epoch: 1,
            rowlog_blocks: 0,
            rowlog_from: 0,
            written_groups: 0,
            written_crc: 0,
            counters_generation: 0,
            dead_epochs: Vec::new(),
        };
        let data_path = config
            .ssd
            .path
            .clone()
            .unwrap_or_else(|| dir.join(DATA_FILE));
        if config.ssd.path.is_some() {
            undo.outside_file(&data_path);
        }
        {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&data_path)
                .map_err(|e| Error::io(&data_path, "create", e))?;
            let is_file = f.metadata().map(|m| m.is_file()).unwrap_or(true);
            if is_file {
                f.set_len(next * BLOCK_SIZE as u64)
                    .map_err(|e| Error::io(&data_path, "set_len", e))?;
            }
            f.sync_all()
                .map_err(|e| Error::io(&data_path, "fsync", e))?;
        }
        let cfg_path = dir.join(CONFIG_FILE);
        fs::write(&cfg_path, config.to_toml()).map_err(|e| Error::io(&cfg_path, "write", e))?;
        // The metadata file last: a directory without it is not a store.
        let meta_path = dir.join(META_FILE);
        let tmp = dir.join(format!("{META_FILE}.tmp"));
        {
            let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, "create", e))?;
            // Two copies of the superblock, then the catalog.
            let mut bytes = sb.encode().to_vec();
            bytes.extend_from_slice(&sb.encode());
            bytes.extend_from_slice(&cat_bytes);
            f.write_all(&bytes)
                .map_err(|e| Error::io(&tmp, "write", e))?;
            f.sync_all().map_err(|e| Error::io(&tmp, "fsync", e))?;
        }
        fs::rename(&tmp, &meta_path).map_err(|e| Error::io(&meta_path, "rename", e))?;
        fsync_dir(dir)?;
        if let Some(p) = config.pmem.as_ref().and_then(|p| p.path.as_ref()) {
            undo.outside_file(p);
        }
        let store = Store::assemble(dir, config, sb, catalog, lock, true, opts)?;
        undo.armed = false;
        Ok(store)
    }

    /// Open the store in `dir` with the tier settings of its `store.toml`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        let dir = dir.as_ref();
        let cfg_path = dir.join(CONFIG_FILE);
        if !dir.join(META_FILE).exists() {
            return Err(Error::NotAStore {
                path: dir.into(),
                reason: format!("no {META_FILE}"),
            });
        }
        let text = fs::read_to_string(&cfg_path).map_err(|e| Error::io(&cfg_path, "read", e))?;
        let cfg = StoreConfig::from_toml(&text).map_err(|e| match e {
            Error::Config { reason } => Error::Config {
                reason: format!("{}: {reason}", cfg_path.display()),
            },
            other => other,
        })?;
        Store::open_with(dir, cfg, OpenOptionsExt::default())
    }

    /// Open the store in `dir` with new tier settings. The tables of `config`
    /// must match the store's catalog (name, rows, dim); placements, budgets,
    /// policies and engine may differ.
    pub fn open_with(
        dir: impl AsRef<Path>,
        config: StoreConfig,
        opts: OpenOptionsExt,
    ) -> Result<Store> {
        let dir = dir.as_ref();
        let meta_path = dir.join(META_FILE);
        let mut bytes = Vec::new();
        match File::open(&meta_path) {
            Ok(mut f) => f
                .read_to_end(&mut bytes)
                .map_err(|e| Error::io(&meta_path, "read", e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotAStore {
                    path: dir.into(),
                    reason: format!("no {META_FILE}"),
                })
            }
            Err(e) => return Err(Error::io(&meta_path, "open", e)),
        };
        let fmt_err = |source: FormatError| Error::Format {
            path: meta_path.clone(),
            source,
        };
        let sb = pick_superblock(&bytes).map_err(|e| match e {
            FormatError::BadMagic { .. } => Error::NotAStore {
                path: dir.into(),
                reason: format!("{}: {e}", meta_path.display()),
            },
            e => fmt_err(e),
        })?;
        let start = sb.catalog_offset.min(bytes.len() as u64) as usize;
        let catalog = Catalog::decode(
            &bytes[start..],
            sb.table_count,
            sb.catalog_offset,
            sb.catalog_crc,
        )
        .map_err(fmt_err)?;
        if catalog.data_blocks() != sb.data_blocks {
            return Err(fmt_err(FormatError::InvalidField {
                field: "data_blocks",
                offset: embtier_format::sb::DATA_BLOCKS as u64,
                value: format!(
                    "{} but the catalog spans {}",
                    sb.data_blocks,
                    catalog.data_blocks()
                ),
            }));
        }
        config.plan()?;
        if config.tables.len() != catalog.tables.len() {
            return Err(Error::config(format!(
                "config has {} tables, the store has {}",
                config.tables.len(),
                catalog.tables.len()
            )));
        }
        for (t, e) in config.tables.iter().zip(&catalog.tables) {
            let mismatch = |stored: String, given: String| Error::ConfigMismatch {
                table: t.name.clone(),
                stored,
                given,
            };
            if t.name != e.name || t.rows != e.rows || t.dim != e.dim {
                return Err(mismatch(
                    format!("table {:?} of {} x {}", e.name, e.rows, e.dim),
                    format!("table {:?} of {} x {}", t.name, t.rows, t.dim),
                ));
            }
            if t.elem.format() != e.elem {
                return Err(mismatch(
                    format!("{:?} weights", e.elem),
                    format!("{:?} weights", t.elem),
                ));
            }
            let code = t.optimizer.code();
            if e.optimizer != OptimizerCode::Unrecorded && e.optimizer != code {
                return Err(mismatch(
                    format!("state of {:?}", e.optimizer),
                    format!("{code:?}"),
                ));
            }
            let need = t.optimizer.state_bytes(t.dim);
            if need != e.state_bytes {
                return Err(mismatch(
                    format!("{} bytes of optimizer state per row", e.state_bytes),
                    format!("an optimizer with {need} bytes of optimizer state per row"),
                ));
            }
        }
        let lock = LockFile::acquire(dir)?;
        Store::assemble(dir, config, sb, catalog, lock, false, opts)
    }

    fn assemble(
        dir: &Path,
        config: StoreConfig,
        superblock: Superblock,
        catalog: Catalog,
        lock: LockFile,
        fresh: bool,
        opts: OpenOptionsExt,
    ) -> Result<Store> {
        let plan = config.plan()?;
        let data_path = config
            .ssd
            .path
            .clone()
            .unwrap_or_else(|| dir.join(DATA_FILE));
        if !fresh {
            check_data_len(&data_path, &superblock)?;
        }
        let (engine, choice) = open_engine(&data_path, &config.ssd.engine_options())?;
        let wrap = |p: &Path, e: Box<dyn IoEngine>| match &opts.wrap_engine {
            Some(w) => w(p, e),
            None => e,
        };
        let engine = wrap(&data_path, engine);
        // Recovery: undo what the last session wrote after its last
        // checkpoint, before anything reads the data file.
        let (dur, recovery) = Durable::open(dir, superblock.clone(), &*engine, &data_path, &wrap)?;
        let log_capacity = row_log_blocks(&config, &catalog, &data_path);
        let ssd = Ssd::new(
            engine,
            data_path,
            choice,
            dur,
            RowLog::new(
                superblock.data_blocks,
                log_capacity,
                superblock.rowlog_blocks,
            ),
        );
        let mut pmem = match &config.pmem {
            Some(p) => {
                let path = p.path.clone().unwrap_or_else(|| dir.join(PMEM_FILE));
                // PMem is a cache: its contents do not outlive the process.
                // Its blocks are reserved now: a store into an unallocated
                // page of the mapping on a full file system is a SIGBUS.
                let f = crate::io::reserve::create_reserved(&path, p.capacity.0)?;
                Some(
                    PmemFile::map(&f, p.capacity.0 as usize)
                        .map_err(|e| Error::io(&path, "mmap", e))?,
                )
            }
            None => None,
        };
        let pmem_policy = config.pmem.as_ref().map(|p| p.policy).unwrap_or_default();
        let mut tables = Vec::with_capacity(catalog.tables.len());
        for (index, ((entry, cfg), tp)) in catalog
            .tables
            .into_iter()
            .zip(config.tables.iter().cloned())
            .zip(plan)
            .enumerate()
        {
            tables.push(Arc::new(Table::new(TableSetup {
                entry,
                cfg,
                dram_rows: tp.dram_rows,
                pmem_rows: tp.pmem_rows,
                dram_policy: config.dram.policy,
                pmem_policy,
                shards: config.dram.shards,
                pmem: pmem.as_mut(),
                ssd: &ssd,
                fresh,
                index: index as u32,
                rounding_calls: ssd.durable().counters().get(index).copied().unwrap_or(0),
            })?));
        }
        let by_name = tables
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        restore_row_log(&ssd, &tables, &superblock)?;
        Ok(Store {
            dir: dir.into(),
            config,
            tables,
            by_name,
            ssd: Arc::new(ssd),
            superblock,
            recovery,
            log_merges: 0.into(),
            _lock: lock,
        })
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configuration in force.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The superblock as found at open, before this session's epoch was
    /// handed out; [`Store::generation`] follows later checkpoints.
    pub fn superblock(&self) -> &Superblock {
        &self.superblock
    }

    /// The checkpoint generation last committed: 0 for a new store, then
    /// one more for each [`Store::checkpoint`].
    pub fn generation(&self) -> u64 {
        self.ssd.durable().generation()
    }

    /// What recovery did when this store was opened.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Table names, in catalog order.
    pub fn table_names(&self) -> impl Iterator<Item = &str> {
        self.tables.iter().map(|t| t.name.as_str())
    }

    /// `(rows, dim)` of table `name`.
    pub fn table_shape(&self, name: &str) -> Result<(u64, u32)> {
        let t = self.table(name)?;
        Ok((t.entry.rows, t.entry.dim))
    }

    /// The ids `start .. start + n` of table `t` for `len` elements (`n`
    /// rows of `dim`), checked against the table.
    fn id_range(t: &Table, what: &'static str, start: u64, len: usize) -> Result<Vec<u64>> {
        let n = len / t.dim.max(1);
        if n * t.dim != len {
            return Err(Error::LengthMismatch {
                table: t.name.clone(),
                what,
                got: len,
                expected: n * t.dim,
                ids: n,
                dim: t.entry.dim,
            });
        }
        let end = start.checked_add(n as u64).filter(|&e| e <= t.entry.rows);
        if end.is_none() && n > 0 {
            return Err(Error::IdOutOfRange {
                table: t.name.clone(),
                id: start.saturating_add(n as u64 - 1),
                rows: t.entry.rows,
            });
        }
        Ok((start..start + n as u64).collect())
    }

    /// Read rows `start .. start + n` of `table` into `out` (`n x dim`), in
    /// id order: a [`Store::lookup`] of that range. Call it chunk by chunk
    /// to stream a table larger than memory out (to save it, or to fill a
    /// `state_dict`).
    pub fn export_rows(&self, table: &str, start: u64, out: &mut [f32]) -> Result<()> {
        let t = self.table(table)?;
        let ids = Self::id_range(t, "out", start, out.len())?;
        self.lookup(table, &ids, out)
    }

    /// Overwrite rows `start .. start + n` of `table` with `values` (`n x
    /// dim`), in id order: an [`Store::update`] of that range. Call it
    /// chunk by chunk to load a table larger than memory (pretrained
    /// weights). Optimizer state is left as it is.
    pub fn import_rows(&self, table: &str, start: u64, values: &[f32]) -> Result<()> {
        let t = self.table(table)?;
        let ids = Self::id_range(t, "values", start, values.len())?;
        self.update(table, &ids, values)
    }

    pub(crate) fn table(&self, name: &str) -> Result<&Arc<Table>> {
        self.by_name
            .get(name)
            .map(|&i| &self.tables[i])
            .ok_or_else(|| Error::UnknownTable { name: name.into() })
    }

    pub(crate) fn check_ids(t: &Table, ids: &[u64]) -> Result<()> {
        let rows = t.entry.rows;
        match ids.iter().find(|&&id| id >= rows) {
            Some(&id) => Err(Error::IdOutOfRange {
                table: t.name.clone(),
                id,
                rows,
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn check_len(t: &Table, what: &'static str, ids: usize, got: usize) -> Result<()> {
        let expected = ids.saturating_mul(t.dim);
        if got != expected {
            return Err(Error::LengthMismatch {
                table: t.name.clone(),
                what,
                got,
                expected,
                ids,
                dim: t.entry.dim,
            });
        }
        Ok(())
    }

    pub(crate) fn check_finite(
        t: &Table,
        what: &'static str,
        ids: &[u64],
        v: &[f32],
    ) -> Result<()> {
        if t.cfg.allow_non_finite {
            return Ok(());
        }
        match v.iter().position(|x| !x.is_finite()) {
            Some(i) => Err(Error::NonFinite {
                table: t.name.clone(),
                what,
                id: ids[i / t.dim],
                element: i % t.dim,
                value: v[i],
            }),
            None => Ok(()),
        }
    }

    /// Look up a batch: row `ids[i]` goes to `out[i * dim..(i + 1) * dim]`.
    /// Duplicate ids are allowed. Misses are deduplicated, grouped by SSD
    /// block group, and read in one batch.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Init, Store, StoreConfig, TableConfig};
    /// let cfg = StoreConfig::builder()
    ///     .table(TableConfig::new("t", 1000, 4).init(Init::Zeros))
    ///     .build();
    /// let store = Store::create(dir.path().join("s"), cfg)?;
    /// let mut out = vec![1f32; 2 * 4];
    /// store.lookup("t", &[7, 7], &mut out)?;
    /// assert_eq!(out, vec![0.0; 8]); // never written: the initial value
    /// assert!(store.lookup("t", &[1000], &mut out[..4]).is_err()); // id out of range
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn lookup(&self, table: &str, ids: &[u64], out: &mut [f32]) -> Result<()> {
        let t = self.table(table)?;
        Self::check_len(t, "out", ids.len(), out.len())?;
        Self::check_ids(t, ids)?;
        let _gate = self.ssd.read_gate();
        t.lookup(&self.ssd, ids, out)
    }

    /// Look up several tables' batches at once: what [`Store::lookup`] does
    /// for each, except that the SSD reads of every table's misses are
    /// submitted together (one queue, up to its depth in flight), so a
    /// batch spread over many tables costs about one round of reads, not
    /// one per table. This is the call a trainer makes with the sparse
    /// features of a whole batch. Every part is validated before anything
    /// is read; a table may appear more than once.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Init, Store, StoreConfig, TableBatch, TableConfig};
    /// let cfg = StoreConfig::builder()
    ///     .table(TableConfig::new("user", 1000, 4).init(Init::Zeros))
    ///     .table(TableConfig::new("item", 500, 2).init(Init::Zeros))
    ///     .build();
    /// let store = Store::create(dir.path().join("s"), cfg)?;
    /// store.update("item", &[3], &[1.0, 2.0])?;
    /// let (mut users, mut items) = (vec![9f32; 2 * 4], vec![9f32; 2]);
    /// store.lookup_many(&mut [
    ///     TableBatch::new("user", &[7, 8], &mut users),
    ///     TableBatch::new("item", &[3], &mut items),
    /// ])?;
    /// assert_eq!((users, items), (vec![0.0; 8], vec![1.0, 2.0]));
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn lookup_many(&self, batches: &mut [TableBatch<'_>]) -> Result<()> {
        let mut parts = Vec::with_capacity(batches.len());
        for b in batches.iter_mut() {
            let t = self.table(b.table)?;
            Self::check_len(t, "out", b.ids.len(), b.out.len())?;
            Self::check_ids(t, b.ids)?;
            parts.push(crate::table::Part {
                table: t,
                ids: b.ids,
                out: &mut *b.out,
            });
        }
        let _gate = self.ssd.read_gate();
        crate::table::lookup_many(&self.ssd, &mut parts)
    }

    /// Start reading `ids`' rows into DRAM on a background thread (the SSD
    /// reads go through the store's engine, io_uring where available) and
    /// pin them there, so that a later [`Store::lookup`] or [`Store::step`]
    /// of those ids hits DRAM even while other batches run. The pins are
    /// released when the returned [`Prefetch`] is dropped: drop it after the
    /// batch's `step`, as in FBGEMM's prefetch pipeline.
    ///
    /// Pinning is bounded: at most half of each DRAM shard's rows are pinned
    /// at once, whatever the number of outstanding prefetches; rows beyond
    /// the bound are still read into DRAM, only not pinned. A `step` of rows
    /// that were not prefetched, or not pinned, is correct, only slower.
    /// Prefetch reads count as lookups in [`Store::stats`]. Pinned tables
    /// need no prefetch; theirs returns at once.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Init, Optimizer, Store, StoreConfig, TableConfig};
    /// let store = Store::create(dir.path().join("s"), StoreConfig::builder()
    ///     .table(TableConfig::new("t", 1_000_000, 16).init(Init::Zeros)).build())?;
    /// let mut next = store.prefetch("t", &[7, 8, 9])?; // reads start now
    /// // ... compute the current batch ...
    /// next.wait()?;                              // rows 7, 8, 9 are in DRAM, pinned
    /// let mut rows = vec![0f32; 3 * 16];
    /// store.lookup("t", &[7, 8, 9], &mut rows)?; // DRAM hits
    /// store.step("t", &[7, 8, 9], &vec![0.1; 3 * 16])?;
    /// drop(next);                                // unpinned
    /// assert_eq!(store.pinned_rows(), 0);
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn prefetch(&self, table: &str, ids: &[u64]) -> Result<Prefetch<'_>> {
        self.start_prefetch(table, ids)
    }

    /// [`Store::prefetch`] whose handle does not borrow the store, for
    /// owners that cannot hold a borrow (the Python binding). The handle
    /// keeps the table's memory alive until it is dropped; dropping the
    /// store first is safe, and its pins then go with the table.
    pub fn prefetch_detached(&self, table: &str, ids: &[u64]) -> Result<Prefetch<'static>> {
        self.start_prefetch(table, ids)
    }

    fn start_prefetch<'a>(&self, table: &str, ids: &[u64]) -> Result<Prefetch<'a>> {
        let t = Arc::clone(self.table(table)?);
        Self::check_ids(&t, ids)?;
        let ssd = Arc::clone(&self.ssd);
        let ids = ids.to_vec();
        let worker = Arc::clone(&t);
        let handle = std::thread::Builder::new()
            .name("embtier-prefetch".into())
            .spawn(move || {
                let mut pins = Vec::new();
                let mut out = vec![0f32; ids.len() * worker.dim];
                let _gate = ssd.read_gate();
                let r = worker.lookup_pinning(&ssd, &ids, &mut out, Some(&mut pins));
                (pins, r)
            })
            .map_err(|e| Error::io(&self.dir, "spawn prefetch thread", e))?;
        Ok(Prefetch {
            table: t,
            handle: Some(handle),
            pins: Vec::new(),
            _store: std::marker::PhantomData,
        })
    }

    /// Rows pinned in DRAM by outstanding prefetches, over all tables.
    pub fn pinned_rows(&self) -> u64 {
        self.tables.iter().map(|t| t.pinned_rows() as u64).sum()
    }

    /// Overwrite rows: row `ids[i]` becomes `values[i * dim..(i + 1) * dim]`.
    /// For a duplicate id the last occurrence wins. Nothing is written unless
    /// every id and value is valid.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Store, StoreConfig, TableConfig};
    /// let store = Store::create(dir.path().join("s"),
    ///     StoreConfig::builder().table(TableConfig::new("t", 10, 2)).build())?;
    /// store.update("t", &[3, 3], &[1.0, 1.0, 2.0, 2.0])?; // last wins
    /// let mut out = [0f32; 2];
    /// store.lookup("t", &[3], &mut out)?;
    /// assert_eq!(out, [2.0, 2.0]);
    /// assert!(store.update("t", &[4], &[f32::NAN, 0.0]).is_err()); // rejected whole
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn update(&self, table: &str, ids: &[u64], values: &[f32]) -> Result<()> {
        let t = self.table(table)?;
        Self::check_len(t, "values", ids.len(), values.len())?;
        Self::check_ids(t, ids)?;
        Self::check_finite(t, "value", ids, values)?;
        // Last occurrence of each id.
        let mut last: HashMap<u64, usize> = HashMap::with_capacity(ids.len());
        for (k, &id) in ids.iter().enumerate() {
            last.insert(id, k);
        }
        let mut items: Vec<(u64, usize)> = last.into_iter().collect();
        items.sort_unstable();
        let dim = t.dim;
        // Assignment rounds to nearest: a value set is the value read back,
        // as closely as the element type allows.
        let whole = t.row_bytes == t.weight_bytes;
        let _gate = self.ssd.write_gate()?;
        t.modify(&self.ssd, &items, whole, |row, k| {
            t.encode(&values[k * dim..(k + 1) * dim], row, Rounding::Nearest)
        })
    }

    /// SGD: `row -= lr * grad`. Gradients of duplicate ids are summed first,
    /// in the order given, and applied once (FBGEMM's semantics). Nothing is
    /// written unless every id and gradient is valid.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Init, Store, StoreConfig, TableConfig};
    /// let store = Store::create(dir.path().join("s"), StoreConfig::builder()
    ///     .table(TableConfig::new("t", 10, 1).init(Init::Zeros)).build())?;
    /// store.apply_sgd("t", &[5, 5, 6], &[1.0, 2.0, 4.0], 0.5)?;
    /// let mut out = [0f32; 2];
    /// store.lookup("t", &[5, 6], &mut out)?;
    /// assert_eq!(out, [-1.5, -2.0]); // 5: -(0.5 * (1 + 2)); 6: -(0.5 * 4)
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn apply_sgd(&self, table: &str, ids: &[u64], grads: &[f32], lr: f32) -> Result<()> {
        let t = self.table(table)?;
        Self::check_len(t, "grads", ids.len(), grads.len())?;
        Self::check_ids(t, ids)?;
        Self::check_finite(t, "gradient", ids, grads)?;
        if !lr.is_finite() {
            return Err(Error::BadLearningRate { lr });
        }
        let sgd = crate::Optimizer::Sgd {
            lr,
            weight_decay: 0.0,
        };
        self.apply_optimizer(t, ids, grads, sgd)
    }

    /// The table's fused optimizer step: `row ← optimizer(row, grad)` with
    /// the optimizer of the table's config, its state read from and written
    /// back into the row. Gradients of duplicate ids are summed first, in the
    /// order given, and applied once. Nothing is written unless every id and
    /// gradient is valid. Formulas: [`crate::optim`] and `docs/optimizers.md`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Init, Optimizer, Store, StoreConfig, TableConfig};
    /// let opt = Optimizer::RowwiseAdagrad { lr: 0.1, eps: 1e-8, weight_decay: 0.0 };
    /// let store = Store::create(dir.path().join("s"), StoreConfig::builder()
    ///     .table(TableConfig::new("t", 100, 2).init(Init::Zeros).optimizer(opt)).build())?;
    /// store.step("t", &[4], &[3.0, 4.0])?; // s = mean(9, 16) = 12.5
    /// let mut w = [0f32; 2];
    /// store.lookup("t", &[4], &mut w)?;
    /// assert!((w[0] + 0.1 * 3.0 / 12.5f32.sqrt()).abs() < 1e-6);
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn step(&self, table: &str, ids: &[u64], grads: &[f32]) -> Result<()> {
        let t = self.table(table)?;
        Self::check_len(t, "grads", ids.len(), grads.len())?;
        Self::check_ids(t, ids)?;
        Self::check_finite(t, "gradient", ids, grads)?;
        self.apply_optimizer(t, ids, grads, t.cfg.optimizer)
    }

    /// Sum duplicate ids' gradients, then apply `opt` to each row in place
    /// (on an f32 copy of the weights when they are narrower; the state, if
    /// `opt` has any, follows the weights). Inputs are validated.
    fn apply_optimizer(
        &self,
        t: &Table,
        ids: &[u64],
        grads: &[f32],
        opt: crate::Optimizer,
    ) -> Result<()> {
        let (items, sums) = sum_duplicates(ids, grads, t.dim);
        self.apply_summed(t, &items, &sums, opt)
    }

    /// Apply `opt` to each row of `items` (`(id, slot)`, sorted by id, ids
    /// unique) with the gradient `sums[slot * dim..]`: slots number the ids
    /// in the order of their first occurrence in the call, which also seeds
    /// their stochastic rounding. Inputs are validated.
    pub(crate) fn apply_summed(
        &self,
        t: &Table,
        items: &[(u64, usize)],
        sums: &[f32],
        opt: crate::Optimizer,
    ) -> Result<()> {
        let _gate = self.ssd.write_gate()?;
        let dim = t.dim;
        if t.elem == crate::Elem::F32 {
            return t.modify(&self.ssd, items, false, |row, s| {
                opt.apply(row, &sums[s * dim..(s + 1) * dim])
            });
        }
        // Narrow weights: run the optimizer on an f32 copy of the row
        // (weights widened, state as stored, always f32), then round the
        // weights back.
        let base = t.rounding_base();
        let (wb, sb) = (t.weight_bytes, opt.state_bytes(t.dim as u32) as usize);
        let scratch = std::cell::RefCell::new((vec![0f32; dim], vec![0u8; dim * 4 + sb]));
        t.modify(&self.ssd, items, false, |row, s| {
            let mut guard = scratch.borrow_mut();
            let (w, wide) = &mut *guard;
            t.decode(row, w);
            f32_to_bytes(w, &mut wide[..dim * 4]);
            wide[dim * 4..].copy_from_slice(&row[wb..wb + sb]);
            opt.apply(wide, &sums[s * dim..(s + 1) * dim]);
            bytes_to_f32(&wide[..dim * 4], w);
            t.encode(w, row, rounding_for(base, s));
            row[wb..wb + sb].copy_from_slice(&wide[dim * 4..]);
        })
    }

    /// Make the current state of every table durable and atomic: after a
    /// crash at any later instant, [`Store::open`] recovers exactly this
    /// state (or a later checkpoint's), never a mixture. Updates made after
    /// the last checkpoint are lost in a crash, as a trainer's are.
    ///
    /// Writes every dirty row: appended to the row log, packed, while it has
    /// room; else in place, first journaling the old image of each block
    /// group overwritten for the first time since the last checkpoint. Then
    /// it fsyncs the data file and commits by writing the superblock's two
    /// copies in turn, the row log's length with them. Its cost is
    /// proportional to the rows dirtied since the last checkpoint, except
    /// when the row log is more than half full, or holds rows since written
    /// in place: then it also merges the log (see [`Store::merge_row_log`]). Lookups and updates from other threads wait
    /// while it runs. The protocol is in `store-format/FORMAT.md`.
    ///
    /// On a failed write nothing is lost: rows not written stay dirty in
    /// memory, the last checkpoint stays the durable one, and a later
    /// `checkpoint` retries. A failed fsync poisons the store: every later
    /// write fails with [`Error::Poisoned`] until it is reopened.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Store, StoreConfig, TableConfig};
    /// let path = dir.path().join("s");
    /// let store = Store::create(&path, StoreConfig::builder()
    ///     .table(TableConfig::new("t", 100, 2)).build())?;
    /// store.update("t", &[9], &[4.0, 5.0])?;
    /// let c = store.checkpoint()?;
    /// assert_eq!((c.generation, store.dirty_rows()), (1, 0));
    /// store.update("t", &[9], &[6.0, 7.0])?; // after the checkpoint: lost
    /// drop(store);
    /// let store = Store::open(&path)?;
    /// let mut out = [0f32; 2];
    /// store.lookup("t", &[9], &mut out)?;
    /// assert_eq!((out, store.generation()), ([4.0, 5.0], 1));
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn checkpoint(&self) -> Result<Checkpoint> {
        self.checkpoint_merging(false)
    }

    /// A [`Store::checkpoint`] that also merges the row log into the tables
    /// whatever its fill: every logged row is written to its home block
    /// group, and the log is emptied. A checkpoint merges on its own when
    /// the log is more than half full; call this to pay that cost at a time
    /// of your choosing (before copying the store, or at the end of a
    /// training phase), or to measure it.
    pub fn merge_row_log(&self) -> Result<Checkpoint> {
        self.checkpoint_merging(true)
    }

    fn checkpoint_merging(&self, force: bool) -> Result<Checkpoint> {
        let _gate = self.ssd.checkpoint_gate()?;
        let log = self.ssd.log();
        // A merge writes the dirty rows home rather than to the log it is
        // about to empty, then every logged row that is still newest.
        let merge = log.wants_merge() || (force && log.head() > 0);
        if merge {
            log.close();
        }
        let mut first_err = None;
        for t in &self.tables {
            if let Err(e) = t.flush(&self.ssd) {
                first_err.get_or_insert(e);
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        let mut merged = 0;
        if merge {
            for t in &self.tables {
                merged += t.merge_log(&self.ssd)?;
            }
        }
        self.ssd.sync().map_err(|e| self.ssd.durable().poison(e))?;
        let counters: Vec<u64> = self.tables.iter().map(|t| t.rounding_calls()).collect();
        let mut done =
            self.ssd
                .durable()
                .commit(if merge { 0 } else { log.head() }, merge, &counters)?;
        if merge {
            log.reset();
            self.log_merges
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        done.row_log_merged_rows = merged;
        Ok(done)
    }

    /// [`Store::checkpoint`], for callers that need no report: after
    /// `flush` and a drop, [`Store::open`] sees every update.
    pub fn flush(&self) -> Result<()> {
        self.checkpoint().map(|_| ())
    }

    /// Dirty rows held in memory, over all tables.
    pub fn dirty_rows(&self) -> u64 {
        self.tables.iter().map(|t| t.dirty_rows()).sum()
    }

    /// A snapshot of the counters: per table and per tier lookups, hits,
    /// misses, evictions, dirty write-backs, bytes and I/O operations, and
    /// SSD read latency percentiles.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Store, StoreConfig, TableConfig};
    /// let store = Store::create(dir.path().join("s"), StoreConfig::builder()
    ///     .table(TableConfig::new("t", 1000, 8)).build())?;
    /// let mut out = vec![0f32; 16];
    /// store.lookup("t", &[1, 1], &mut out)?; // two misses, one deduplicated read
    /// store.lookup("t", &[1], &mut out[..8])?; // a hit
    /// let st = store.stats();
    /// let t = st.table("t").unwrap();
    /// assert_eq!((t.lookups, t.dram.hits, t.ssd.rows_read), (3, 1, 1));
    /// println!("{} p99 {} ns", st.io_engine, st.ssd_read_latency.p99);
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        let tables = self
            .tables
            .iter()
            .map(|t| {
                let c = t.counters.load();
                let [dres, dcap, dmeta, pres, pcap, pmeta] = t.occupancy();
                let rb = t.row_bytes as u64;
                let pinned_pmem = t.cfg.placement == Placement::PinnedPmem;
                let (dram_hits, pmem_hits) = if pinned_pmem {
                    (0, c.dram_hits)
                } else {
                    (c.dram_hits, c.pmem_hits)
                };
                let accesses = c.lookups + c.updates;
                let dram_lookups = if pinned_pmem { 0 } else { accesses };
                let dram = TierStats {
                    lookups: dram_lookups,
                    hits: dram_hits,
                    misses: dram_lookups.saturating_sub(dram_hits),
                    evictions: c.dram_evictions,
                    dirty_evictions: c.dram_dirty_evictions,
                    bytes_read: dram_hits * rb,
                    bytes_written: c.dram_inserts * rb,
                    resident_rows: dres,
                    capacity_rows: dcap,
                    bookkeeping_bytes: dmeta,
                };
                let pmem_lookups = if pinned_pmem { accesses } else { dram.misses };
                let pmem = TierStats {
                    lookups: pmem_lookups,
                    hits: pmem_hits,
                    misses: pmem_lookups.saturating_sub(pmem_hits),
                    evictions: c.pmem_evictions,
                    dirty_evictions: c.pmem_dirty_evictions,
                    bytes_read: pmem_hits * rb,
                    bytes_written: c.pmem_inserts * rb,
                    resident_rows: pres,
                    capacity_rows: pcap,
                    bookkeeping_bytes: pmeta,
                };
                TableStats {
                    name: t.name.clone(),
                    placement: t.cfg.placement,
                    lookups: c.lookups,
                    updates: c.updates,
                    prefetched: c.prefetched,
                    prefetch_pinned: c.prefetch_pinned,
                    dram,
                    pmem,
                    ssd: SsdStats {
                        rows_read: c.ssd_rows_read,
                        rows_written: c.ssd_rows_written,
                        read_ops: c.ssd_read_ops,
                        write_ops: c.ssd_write_ops,
                        bytes_read: c.ssd_bytes_read,
                        bytes_written: c.ssd_bytes_written,
                        writeback_errors: c.writeback_errors,
                        pending_rows: t.pending().0,
                        pending_limit_rows: t.pending().1,
                        log_rows_read: c.log_rows_read,
                        log_rows_written: c.log_rows_written,
                        log_blocks_written: c.log_blocks_written,
                        log_rows_merged: c.log_rows_merged,
                        logged_rows: t.logged_rows(),
                    },
                }
            })
            .collect();
        Stats {
            tables,
            io_engine: self.ssd.engine().name(),
            io_engine_reason: self.ssd.choice().reason.clone(),
            direct_io: self.ssd.engine().direct(),
            ssd_read_latency: LatencySummary::of(&self.ssd.engine().read_latency().snapshot()),
            row_log_capacity_blocks: self.ssd.log().capacity,
            row_log_used_blocks: self.ssd.log().head(),
            row_log_merges: self.log_merges.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}

// A store is shared between trainer threads.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Store>();
};

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir)
            .field("tables", &self.tables.len())
            .field("io_engine", &self.ssd.engine().name())
            .finish()
    }
}
