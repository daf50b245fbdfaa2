//! The store: a directory of named tables over DRAM, PMem and SSD tiers.
//!
//! This file holds the API (lookups, updates, optimizer steps, prefetch,
//! checkpoints); `open.rs` create, open and recovery (the lock, the file
//! checks, the undo of a failed create, the row log's restore); `stats.rs`
//! the figures.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use embtier_format::{
    Catalog, FormatError, FormatVersion, InitKind, OptimizerCode, RowLayout, Superblock,
    TableEntry, BLOCK_SIZE, CATALOG_OFFSET,
};

use crate::config::{Init, MemoryKind, Placement, StoreConfig, TableConfig};
use crate::durable::{pick_superblock, Checkpoint, Durable, Recovery};
use crate::error::{Error, Result};
use crate::io::{open_engine, AlignedBuf, IoEngine};
use crate::precision::Rounding;
use crate::precision::{bytes_to_f32, f32_to_bytes};
use crate::stats::{LatencySummary, SsdStats, Stats, TableStats, TierStats};
use crate::table::{Table, TableSetup};
use crate::tier::rowlog::RowLog;
use crate::tier::slab::{PmemFile, TierMemory};
use crate::tier::ssd::Ssd;

pub use crate::files::{CONFIG_FILE, DATA_FILE, LOCK_FILE, META_FILE, PMEM_FILE};

mod open;
mod stats;

use open::LockFile;

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

impl Store {
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
