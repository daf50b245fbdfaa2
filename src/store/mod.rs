//! The store: a directory of named tables over DRAM, PMem and SSD tiers.
//!
//! This file holds the store's state and the API's reads and checkpoints;
//! `write.rs` overwrites and optimizer steps; `prefetch.rs` prefetches;
//! `open.rs` create, open and recovery, with `lock.rs` (the store's lock),
//! `undo.rs` (the undo of a failed create) and `restore.rs` (the file
//! checks and the row log's restore at open); `stats.rs` the figures.

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
use crate::io::pace::Pacer;
use crate::io::{open_engine, AlignedBuf, IoEngine};
use crate::precision::Rounding;
use crate::precision::{bytes_to_f32, f32_to_bytes};
use crate::stats::{LatencySummary, SsdStats, Stats, TableStats, TierStats};
use crate::table::{Table, TableSetup};
use crate::tier::rowlog::RowLog;
use crate::tier::slab::TierMemory;
use crate::tier::ssd::Ssd;

pub use crate::files::{
    BOOT_FILE, CONFIG_FILE, DATA_FILE, HOT_FILE, HOT_ROWS_FILE, LOCK_FILE, LOG_INDEX_FILE,
    META_FILE, PMEM_FILE,
};

mod claims;
mod kept;
mod lock;
mod merger;
mod open;
mod prefetch;
mod restore;
mod stats;
mod sweep;
mod undo;
mod warm;
mod worker;
mod write;

pub use prefetch::Prefetch;
pub use restore::RowLogAtOpen;
pub(crate) use write::GradSums;

use lock::LockFile;

/// Wraps each I/O engine a store opens (the data file's, the journal's and
/// the metadata file's, with that file's path), for tests that inject faults.
pub type EngineWrapper = Arc<dyn Fn(&Path, Box<dyn IoEngine>) -> Box<dyn IoEngine> + Send + Sync>;

/// Options that are not part of the on-disk config.
#[derive(Clone, Default)]
pub struct OpenOptionsExt {
    /// Wrap the store's engines (fault injection in tests).
    pub wrap_engine: Option<EngineWrapper>,
    /// Open cold: do not read back the hot set of the last checkpoint
    /// (see [`Store::wait_warm`]).
    pub cold: bool,
    /// Inject this plan's faults into the files the store reads and writes
    /// through the page cache rather than an engine (the row-log index),
    /// for tests that inject faults; [`OpenOptionsExt::wrap_engine`] covers
    /// the engines' files.
    pub faults: Option<Arc<crate::io::Faults>>,
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
    /// Checkpoints that moved the log's start past a background pass.
    log_passes: std::sync::atomic::AtomicU64,
    /// The prefetch threads still running (waited for when the store is
    /// dropped, before the background threads stop and the lock goes).
    prefetching: prefetch::Prefetching,
    /// The warm restart's read-back, while it runs (cancelled and joined
    /// when the store is dropped, before anything else is).
    warm: parking_lot::Mutex<Option<warm::Warm>>,
    /// The background check of the last checkpoint's written groups.
    sweep: parking_lot::Mutex<Option<worker::Worker>>,
    /// The background merge of the row log.
    merger: parking_lot::Mutex<Option<worker::Worker>>,
    /// What the open took from tiers a close kept ([`Store::close`]).
    kept: kept::Taken,
    /// The generation a write to a file-backed tier's slot made now is
    /// first committed in (`crate::tier::stamps`): moved by each
    /// checkpoint's moment.
    stamp_gen: crate::tier::stamps::Gen,
    /// Each file-backed tier's stamps' kept-through word, set after each
    /// commit.
    kept_through: Vec<crate::tier::stamps::KeptThrough>,
    /// How the open rebuilt the row log's map.
    row_log_at_open: RowLogAtOpen,
    /// The locks of tier files outside the store's directory
    /// (`<file>.lock`, `claims::lock_outside`), released before the
    /// store's own.
    _tier_locks: Vec<LockFile>,
    _lock: LockFile,
    /// The fork generation ([`crate::fork`]) and process the store was
    /// opened in: a forked copy takes no calls, and its drop does nothing.
    opened_in: (u64, u32),
}

/// A call of more than `limit` ids ([`crate::hash::MAX_CALL_IDS`]: a
/// call numbers its ids' positions and distinct ids in 32 bits) is
/// [`Error::Unsupported`], before anything is read or written.
pub(crate) fn check_call_len(t: &Table, n: usize, limit: usize) -> Result<()> {
    if n > limit {
        return Err(Error::Unsupported {
            table: t.name.clone(),
            what: format!("a call of {n} ids (a call takes at most {limit})"),
        });
    }
    Ok(())
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
        Self::rows_from(t, start, n)
    }

    /// The ids `start .. start + n` of table `t`, or the first of them
    /// past its rows as [`Error::IdOutOfRange`].
    fn rows_from(t: &Table, start: u64, n: usize) -> Result<Vec<u64>> {
        let end = start.checked_add(n as u64).filter(|&e| e <= t.entry.rows);
        if end.is_none() && n > 0 {
            return Err(Error::IdOutOfRange {
                table: t.name.clone(),
                id: start.max(t.entry.rows),
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

    /// Bytes of optimizer state a row of `table` holds after its weights:
    /// 0 for SGD, 4 for row-wise Adagrad, `4 * dim` for Adagrad, `8 * dim
    /// + 4` for Adam (FORMAT.md, "Rows").
    pub fn state_bytes(&self, table: &str) -> Result<usize> {
        let t = self.table(table)?;
        Ok(t.cfg.optimizer.state_bytes(t.dim as u32) as usize)
    }

    /// Read the optimizer state of rows `start .. start + n` of `table`
    /// into `out` (`n x` [`Store::state_bytes`] bytes, in id order; the
    /// bytes as a row holds them: f32s, little-endian, and Adam's step
    /// count a u32 last). A read: it marks no row dirty. With
    /// [`Store::export_rows`] it is what resuming training elsewhere needs
    /// ([`Store::import_state`]); a table of SGD has no state.
    pub fn export_state(&self, table: &str, start: u64, out: &mut [u8]) -> Result<()> {
        let t = self.table(table)?;
        let (ids, sb) = Self::state_range(t, "out", start, out.len())?;
        if ids.is_empty() {
            return Ok(());
        }
        let wb = t.weight_bytes;
        let items: Vec<(u64, usize)> = ids.iter().enumerate().map(|(k, &id)| (id, k)).collect();
        // As a lookup: its misses read the log and may write rows home,
        // which a checkpoint's commit must not see begin inside it.
        let _gate = self.ssd.read_gate();
        // `f` is called on this thread, one row at a time.
        let out = std::cell::RefCell::new(out);
        t.read_whole_rows(&self.ssd, &items, |row, k| {
            out.borrow_mut()[k * sb..(k + 1) * sb].copy_from_slice(&row[wb..wb + sb]);
        })
    }

    /// Overwrite the optimizer state of rows `start .. start + n` of
    /// `table` with `state` (as [`Store::export_state`] gives it), leaving
    /// their weights. Nothing is written unless the state passes
    /// [`Store::check_import_state`].
    pub fn import_state(&self, table: &str, start: u64, state: &[u8]) -> Result<()> {
        let t = self.table(table)?;
        let (ids, sb) = Self::state_range(t, "state", start, state.len())?;
        if ids.is_empty() {
            return Ok(());
        }
        Self::check_state(t, &ids, sb, state)?;
        let wb = t.weight_bytes;
        let items: Vec<(u64, usize)> = ids.iter().enumerate().map(|(k, &id)| (id, k)).collect();
        t.throttle();
        let _gate = self.ssd.write_gate()?;
        t.modify(
            &self.ssd,
            &items,
            false,
            |_| {},
            |row, k| row[wb..wb + sb].copy_from_slice(&state[k * sb..(k + 1) * sb]),
        )
    }

    /// Whether [`Store::import_state`] would take `state` for rows `start
    /// ..`, without writing anything: its length is whole rows of the
    /// table, every f32 is finite (unless the table allows non-finite
    /// values: [`Error::NonFinite`]) but a sum of squares (Adagrad's,
    /// Adam's second moment), which may be `+inf` (a step whose gradient's
    /// square overflowed leaves one) and cannot be negative
    /// ([`Error::NegativeState`]). A caller that loads several tables
    /// checks them all first, so that a refused one leaves every table as
    /// it was.
    pub fn check_import_state(&self, table: &str, start: u64, state: &[u8]) -> Result<()> {
        let t = self.table(table)?;
        let (ids, sb) = Self::state_range(t, "state", start, state.len())?;
        Self::check_state(t, &ids, sb, state)
    }

    /// Whether [`Store::import_rows`] would take `values` for rows `start
    /// ..`, without writing anything: whole rows within the table, every
    /// value finite unless the table allows non-finite values.
    pub fn check_import_rows(&self, table: &str, start: u64, values: &[f32]) -> Result<()> {
        let t = self.table(table)?;
        let ids = Self::id_range(t, "values", start, values.len())?;
        Self::check_finite(t, "values", &ids, values)
    }

    /// The checks of [`Store::check_import_state`] on the state of `ids`.
    fn check_state(t: &Table, ids: &[u64], sb: usize, state: &[u8]) -> Result<()> {
        // No rows (a table without state has none to check: no bytes).
        if ids.is_empty() || sb == 0 {
            return Ok(());
        }
        // Every field is an f32 but Adam's step count, the last 4 bytes;
        // the sums of squares (Adagrad's, Adam's `v`, after its `m`) must
        // not be negative, or the next step takes a root of one.
        let dim = t.dim;
        let (floats, squares_from) = match t.cfg.optimizer {
            crate::Optimizer::Adam { .. } => ((sb - 4) / 4, dim),
            _ => (sb / 4, 0),
        };
        for (k, row) in state.chunks_exact(sb).enumerate() {
            for (i, b) in row[..floats * 4].chunks_exact(4).enumerate() {
                let value = f32::from_le_bytes(b.try_into().expect("4 bytes"));
                let square = i >= squares_from;
                let taken = value.is_finite()
                    || t.cfg.allow_non_finite
                    || (square && value == f32::INFINITY);
                if !taken {
                    return Err(Error::NonFinite {
                        table: t.name.clone(),
                        what: "state",
                        id: ids[k],
                        element: i,
                        value,
                    });
                }
                if square && value < 0.0 {
                    return Err(Error::NegativeState {
                        table: t.name.clone(),
                        id: ids[k],
                        element: i,
                        value,
                    });
                }
            }
        }
        Ok(())
    }

    /// The ids of `len` bytes of state from `start` in table `t`, and its
    /// state bytes a row.
    fn state_range(
        t: &Table,
        what: &'static str,
        start: u64,
        len: usize,
    ) -> Result<(Vec<u64>, usize)> {
        let sb = t.cfg.optimizer.state_bytes(t.dim as u32) as usize;
        if (sb == 0 && len > 0) || (sb > 0 && len % sb != 0) {
            return Err(Error::StateLength {
                table: t.name.clone(),
                what,
                got: len,
                state_bytes: sb,
            });
        }
        let n = len.checked_div(sb).unwrap_or(0);
        check_call_len(t, n, crate::hash::MAX_CALL_IDS)?;
        Ok((Self::rows_from(t, start, n)?, sb))
    }

    /// Overwrite rows `start .. start + n` of `table` with `values` (`n x
    /// dim`), in id order: what an [`Store::update`] of that range does,
    /// made for bulk loads. Call it chunk by chunk, in id order, to load a
    /// table larger than memory (pretrained weights), then
    /// [`Store::checkpoint`] once. Nothing is written unless every value is
    /// valid.
    ///
    /// The block groups the range covers whole are written straight home
    /// in large sequential writes, past the caches and the row log, and a
    /// group never written before is journaled without an image; rows of
    /// the range already in memory take the new values. The groups at the
    /// range's two ends that it covers only in part go through
    /// [`Store::update`], as does a whole call on a pinned table or a table
    /// whose rows carry optimizer state (which is left as it is), and a
    /// whole call on a thread that holds an unfinished
    /// [`Store::begin_checkpoint`] (elsewhere it waits for the checkpoint
    /// to finish: its writes must not fall inside one). Chunks of
    /// a few thousand rows or more, starting on a group boundary, keep
    /// nearly everything on the fast path.
    pub fn import_rows(&self, table: &str, start: u64, values: &[f32]) -> Result<()> {
        let t = self.table(table)?;
        let ids = Self::id_range(t, "values", start, values.len())?;
        if !t.imports_directly() || ids.is_empty() {
            return self.update(table, &ids, values);
        }
        Self::check_finite(t, "values", &ids, values)?;
        let l = t.entry.layout;
        let end = start + ids.len() as u64;
        // The whole groups: from the first group starting at or after
        // `start` to the last ending at or before `end`.
        let first = l.rows_of(l.locate(start).group, t.entry.rows);
        let lo = if first.start == start {
            start
        } else {
            first.end.min(end)
        };
        let last = l.rows_of(l.locate(end - 1).group, t.entry.rows);
        let hi = if last.end == end {
            end
        } else {
            last.start.max(lo)
        };
        let dim = t.dim;
        let at = |id: u64| (id - start) as usize;
        if lo > start {
            self.update(table, &ids[..at(lo)], &values[..at(lo) * dim])?;
        }
        if hi > lo {
            // Not while a checkpoint writes its snapshot: its epoch must
            // hold nothing newer than its moment.
            //   On the thread that holds an unfinished checkpoint, whose
            //   finish cannot run while this waits, the rows go through
            //   the update path instead, which such a checkpoint allows.
            let vals = &values[at(lo) * dim..at(hi) * dim];
            match self.ssd.checkpointing_unless_mine() {
                Some(_one) => {
                    let _gate = self.ssd.write_gate()?;
                    t.import_groups(&self.ssd, lo, hi - lo, &|i, row| {
                        t.encode(&vals[i * dim..(i + 1) * dim], row, Rounding::Nearest)
                    })?;
                }
                None => self.update(table, &ids[at(lo)..at(hi)], vals)?,
            }
        }
        if end > hi {
            self.update(table, &ids[at(hi)..], &values[at(hi) * dim..])?;
        }
        Ok(())
    }

    /// [`Error::Forked`] in a process forked since the open (a DataLoader
    /// worker): its copy shares the opener's io_uring queues and has none
    /// of its threads, so every call of it is refused (its own calls check
    /// this; a caller checks before calls that return no `Result`, such as
    /// [`Store::stats`]).
    pub fn check_process(&self) -> Result<()> {
        let (generation, pid) = self.opened_in;
        if crate::fork::forked_since(generation) {
            return Err(Error::Forked { pid });
        }
        Ok(())
    }

    /// Whether this is a forked copy of the store: this process was forked
    /// from the one that opened it (a DataLoader worker with the fork start
    /// method). Such a copy refuses every call with [`Error::Forked`], and
    /// its close and drop do nothing but let go of the memory.
    pub fn is_forked_copy(&self) -> bool {
        crate::fork::forked_since(self.opened_in.0)
    }

    pub(crate) fn table(&self, name: &str) -> Result<&Arc<Table>> {
        self.check_process()?;
        self.by_name
            .get(name)
            .map(|&i| &self.tables[i])
            .ok_or_else(|| Error::UnknownTable { name: name.into() })
    }

    pub(crate) fn check_ids(t: &Table, ids: &[u64]) -> Result<()> {
        check_call_len(t, ids.len(), crate::hash::MAX_CALL_IDS)?;
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
        // Blocks of 64 checked without a branch per element (vectorised),
        // then the first bad element found within its block.
        const BLOCK: usize = 64;
        let bad = |x: &f32| !x.is_finite();
        let first = v
            .chunks(BLOCK)
            .position(|c| c.iter().fold(false, |any, x| any | bad(x)))
            .and_then(|b| {
                let c = &v[b * BLOCK..(b * BLOCK + BLOCK).min(v.len())];
                c.iter().position(bad).map(|i| b * BLOCK + i)
            });
        match first {
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
                count: crate::table::Count::Ids,
            });
        }
        let _gate = self.ssd.read_gate();
        crate::table::lookup_many(&self.ssd, &mut parts)
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
    /// when the row log holds rows since written in place with newer
    /// bytes, or is full enough (more than half without the background
    /// merge; with it, once the merge thread has been through it, or seven
    /// eighths): then it also merges the log (see
    /// [`Store::merge_row_log`]). The protocol is in
    /// `store-format/FORMAT.md`.
    ///
    /// With `[ssd] snapshot_checkpoints` (the default), lookups and updates
    /// from other threads wait only while the checkpoint marks the dirty
    /// rows and writes pinned tables' dirty groups, and for its commit;
    /// they go on while it writes the rows, and what it commits is the
    /// state when it began (updates made meanwhile go to the next one).
    /// [`Store::begin_checkpoint`] lets the calling thread go on too. A
    /// checkpoint that merges the whole row log holds them back throughout,
    /// as every checkpoint does with the option off.
    /// [`Checkpoint::paused`] says how long they waited.
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
        self.begin(false, "checkpoint")?.finish()
    }

    /// Begin a [`Store::checkpoint`] and return once its moment has passed:
    /// it will commit exactly the updates made before this returned. Call
    /// [`CheckpointInProgress::finish`] (on any thread) to write and commit
    /// it, while this thread goes on training:
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Store, StoreConfig, TableConfig};
    /// let path = dir.path().join("s");
    /// let store = Store::create(&path, StoreConfig::builder()
    ///     .table(TableConfig::new("t", 100, 2)).build())?;
    /// store.update("t", &[9], &[4.0, 5.0])?;
    /// let c = std::thread::scope(|s| {
    ///     let begun = store.begin_checkpoint()?;
    ///     let writer = s.spawn(move || begun.finish());
    ///     store.update("t", &[9], &[6.0, 7.0])?; // after its moment
    ///     writer.join().unwrap()
    /// })?;
    /// drop(store);
    /// let store = Store::open(&path)?;
    /// let mut out = [0f32; 2];
    /// store.lookup("t", &[9], &mut out)?;
    /// assert_eq!((out, store.generation()), ([4.0, 5.0], c.generation));
    /// # Ok::<(), embtier::Error>(())
    /// ```
    ///
    /// Another checkpoint, a bulk import, or a background merge pass's
    /// start waits until it is finished or dropped. A checkpoint that must
    /// run with training stopped (see [`Store::checkpoint`]) runs whole
    /// here, and `finish` returns its report.
    pub fn begin_checkpoint(&self) -> Result<CheckpointInProgress<'_>> {
        let begun = self.begin(false, "begin_checkpoint")?;
        if let Some(Begun::Writing(_)) = begun.state {
            self.ssd.set_holder(Some(std::thread::current().id()));
        }
        Ok(begun)
    }

    /// A [`Store::checkpoint`] that also merges the row log into the tables
    /// whatever its fill: every logged row is written to its home block
    /// group, and the log is emptied. A checkpoint merges on its own when
    /// the log is full enough (see [`Store::checkpoint`]); call this to pay
    /// that cost at a time
    /// of your choosing (before copying the store, or at the end of a
    /// training phase), or to measure it. Training waits while it runs.
    pub fn merge_row_log(&self) -> Result<Checkpoint> {
        self.begin(true, "merge_row_log")?.finish()
    }

    fn begin(&self, force: bool, what: &'static str) -> Result<CheckpointInProgress<'_>> {
        self.check_process()?;
        // One checkpoint (or bulk import) at a time.
        let one = self.ssd.checkpointing(what)?;
        for t in &self.tables {
            t.take_pending_peak();
        }
        // Training is held from here: new calls queue behind the wait for
        // the ones in flight.
        let began = std::time::Instant::now();
        let gate = self.ssd.checkpoint_gate()?;
        // The checkpoint's moment (training held): a slot written from now
        // on is first held by the commit after this one's.
        self.stamp_gen.store(
            self.ssd.durable().committed().0 + 2,
            std::sync::atomic::Ordering::Relaxed,
        );
        let log = self.ssd.log();
        // A merge writes the dirty rows home rather than to the log it is
        // about to empty, then every logged row that is still newest. With
        // the background merge, the log's fill is the thread's to act on:
        // the checkpoint merges once the thread has swept the log.
        let background = self.config.ssd.merge_in_background;
        let merge = log.checkpoint_merges(background) || (force && log.len() > 0);
        if merge || log.must_merge() || !self.config.ssd.snapshot_checkpoints {
            let done = self.checkpoint_stopped(gate, merge, began);
            drop(one);
            return Ok(CheckpointInProgress {
                store: self,
                state: Some(Begun::Ran(done)),
            });
        }
        // The checkpoint's moment: what it commits is every update made
        // before this, and none made after. The dirty rows become old
        // (marked, not copied), pinned tables' dirty groups are written,
        // and training goes on while the rest is written.
        let window = Window {
            tables: &self.tables,
            open: true,
        };
        for t in &self.tables {
            t.open_snapshot();
        }
        for t in self.tables.iter().filter(|t| t.is_pinned()) {
            t.flush(&self.ssd)?;
        }
        let counters: Vec<u64> = self.tables.iter().map(|t| t.rounding_calls()).collect();
        drop(gate);
        Ok(CheckpointInProgress {
            store: self,
            state: Some(Begun::Writing(Snapshot {
                window,
                _one: one,
                counters,
                paused: began.elapsed(),
            })),
        })
    }

    /// Write, sync and commit the snapshot `p` began.
    fn finish_snapshot(&self, p: &Snapshot<'_>) -> Result<Checkpoint> {
        let log = self.ssd.log();
        let mut pacer = self.ssd.pacer(self.config.ssd.checkpoint_rest);
        for t in &self.tables {
            t.flush_snapshot(&self.ssd, &mut pacer)?;
        }
        // As in `checkpoint_stopped`: a flush that made a logged copy stale
        // or failed an append leaves a log that must be merged now. The
        // calls meanwhile wrote nothing, so the log holds nothing newer
        // than the checkpoint's moment, and the merge writes it home, with
        // training held back.
        let merge = log.must_merge();
        let (mut done, freed) = if merge {
            let stopped = std::time::Instant::now();
            let _gate = self.ssd.checkpoint_gate()?;
            log.close();
            let merged = self.merge_tables()?;
            let mut r = self.commit_checkpoint(true, merged, &p.counters)?;
            r.0.paused = p.paused + stopped.elapsed();
            r
        } else {
            // No gate: the calls go on and write nothing to the data file
            // until the window closes, and the merge thread writes no chunk
            // while this holds `merge_pause`, so every write of the epoch
            // has been issued, and the sync covers them all.
            let _paused = self.ssd.merge_pause().write();
            let mut r = self.commit_checkpoint(false, 0, &p.counters)?;
            r.0.paused = p.paused;
            r
        };
        self.release_freed(&mut done, &freed, self.config.ssd.checkpoint_rest);
        Ok(done)
    }

    /// A checkpoint with training stopped throughout (`gate` held): a merge
    /// of the whole log, one forced by the flush, or
    /// `[ssd] snapshot_checkpoints` off.
    fn checkpoint_stopped(
        &self,
        gate: parking_lot::RwLockWriteGuard<'_, ()>,
        merge: bool,
        began: std::time::Instant,
    ) -> Result<Checkpoint> {
        let log = self.ssd.log();
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
        // The flush itself may have written a logged row home (its group
        // was written whole) or failed an append: the log's copies are then
        // stale or never to be committed, and it must be merged now, not at
        // the next checkpoint, or a reopen would read them back.
        let merge = merge || log.must_merge();
        let merged = if merge { self.merge_tables()? } else { 0 };
        let counters: Vec<u64> = self.tables.iter().map(|t| t.rounding_calls()).collect();
        let (mut done, freed) = self.commit_checkpoint(merge, merged, &counters)?;
        self.release_freed(&mut done, &freed, 0.0);
        self.finish_checkpoint(&mut done, 0.0);
        drop(gate);
        done.paused = began.elapsed();
        Ok(done)
    }

    /// Merge the row log into every table (the caller holds the gate, and
    /// closed the log); returns the rows written home.
    fn merge_tables(&self) -> Result<u64> {
        self.tables.iter().map(|t| t.merge_log(&self.ssd)).sum()
    }

    /// Sync and commit a checkpoint whose rows are written (the caller
    /// holds the gate exclusively, or a snapshot checkpoint's window keeps
    /// every writer still), with each table's `counters` of
    /// rounding calls as of its moment. Returns its report and the log's
    /// blocks the commit freed, for [`Store::release_freed`].
    fn commit_checkpoint(
        &self,
        merge: bool,
        merged: u64,
        counters: &[u64],
    ) -> Result<(Checkpoint, Vec<(u64, u64)>)> {
        let log = self.ssd.log();
        self.ssd.finish_written()?;
        self.ssd.sync().map_err(|e| self.ssd.durable().poison(e))?;
        log.sync_index();
        // Without a merge, the log is committed from where a finished
        // background pass left it: the blocks before hold no row's newest
        // copy that home does not hold too.
        let (mut done, commit_id) = self
            .ssd
            .durable()
            .commit(log.commit_point(merge), counters)?;
        for k in &self.kept_through {
            k.set(commit_id);
        }
        let freed = log.committed(merge);
        log.index_committed(done.generation);
        if merge {
            for t in &self.tables {
                t.clear_log_map();
            }
            self.log_merges
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        } else if !freed.is_empty() {
            done.row_log_blocks_freed = freed.iter().map(|&(_, n)| n).sum();
            self.log_passes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        done.row_log_merged_rows = merged;
        Ok((done, freed))
    }

    /// After a commit that moved the log's start past a pass's blocks
    /// (`freed`), before any append may reuse them (under the gate, or in
    /// a snapshot checkpoint's window, where no call appends and the merge
    /// thread waits to start its next pass): drop the map entries of the
    /// rows the pass wrote home, and give the blocks back to the file
    /// system. Training's misses meanwhile read a `MERGED` entry's row
    /// from home either way.
    fn release_freed(&self, done: &mut Checkpoint, freed: &[(u64, u64)], rest: f64) {
        if done.row_log_blocks_freed > 0 {
            for t in &self.tables {
                t.drop_merged_log_entries();
                #[cfg(debug_assertions)]
                t.debug_check_freed(freed);
            }
        }
        let mut pacer = self.ssd.pacer(rest);
        done.row_log_bytes_released = freed
            .iter()
            .map(|&(first, n)| self.release_log_blocks(first, n, &mut pacer))
            .sum();
    }

    /// After the commit, while every clean cached row holds committed
    /// bytes (under the gate), or every one not marked fresh does (after a
    /// snapshot checkpoint's window): the hot set and hot rows for a warm
    /// restart, and the boot record.
    fn finish_checkpoint(&self, done: &mut Checkpoint, rest: f64) {
        done.hot_rows = self.write_hot_set(done.generation);
        done.hot_row_bytes = self.write_hot_rows(done.generation, rest);
        crate::durable::boot::record(&self.dir, done.generation);
    }

    /// Give the `n` row-log blocks from ring block `first`, which the
    /// durable commit no longer counts in the log, back to the file system
    /// (a later append allocates them again), in pieces with `pacer`'s
    /// rests between them. Best effort: returns the bytes released, 0
    /// where the file system cannot punch holes.
    fn release_log_blocks(&self, first: u64, n: u64, pacer: &mut Pacer) -> u64 {
        // In pieces of PUNCH_BLOCKS, resting between them: a punch holds
        // the file's inode lock, which direct reads of the file wait for
        // (ext4), so a pass's gigabytes punched at once hold training's
        // misses for the whole punch.
        let file = self.ssd.engine().file().file();
        let mut released = 0;
        let mut at = first;
        while at < first + n {
            let k = (first + n - at).min(PUNCH_BLOCKS);
            let off = (self.superblock.data_blocks + at) * BLOCK_SIZE as u64;
            match crate::io::reserve::punch_hole(file, off, k * BLOCK_SIZE as u64) {
                Ok(true) => released += k * BLOCK_SIZE as u64,
                _ => break,
            }
            at += k;
            pacer.chunk_done();
        }
        released
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

/// A checkpoint begun by [`Store::begin_checkpoint`]: its moment has
/// passed, and [`CheckpointInProgress::finish`] writes and commits it.
/// Dropping it unfinished abandons it: nothing is committed and nothing is
/// lost (the rows it was to write stay in memory, dirty, for the next).
#[must_use = "a checkpoint commits only when finished"]
pub struct CheckpointInProgress<'a> {
    store: &'a Store,
    /// Taken by `finish`; None only there.
    state: Option<Begun<'a>>,
}

/// What `begin` left for `finish`.
enum Begun<'a> {
    /// A snapshot to write and commit.
    Writing(Snapshot<'a>),
    /// A checkpoint that had to stop training, run whole in `begin`.
    Ran(Result<Checkpoint>),
}

/// A snapshot checkpoint between its moment and its end. Fields drop in
/// order: the window closes before the next checkpoint may begin.
struct Snapshot<'a> {
    window: Window<'a>,
    _one: crate::tier::ssd::Checkpointing<'a>,
    /// Each table's rounding calls at the moment.
    counters: Vec<u64>,
    /// Time training was held back so far.
    paused: std::time::Duration,
}

impl CheckpointInProgress<'_> {
    /// Whether it has committed already: a checkpoint that had to stop
    /// training (see [`Store::checkpoint`]) runs whole in
    /// [`Store::begin_checkpoint`], holds nothing back, and `finish`
    /// returns its report.
    pub fn is_committed(&self) -> bool {
        matches!(self.state, Some(Begun::Ran(Ok(_))))
    }

    /// Write the rows, sync and commit; returns what the checkpoint did
    /// (see [`Store::checkpoint`] for its errors: after one, nothing is
    /// lost and the last committed checkpoint stays the durable one).
    pub fn finish(mut self) -> Result<Checkpoint> {
        // A forked copy (the thread that began it forked): nothing of it
        // is this process's to write or release (see the drop).
        self.store.check_process()?;
        let done = match self.state.take().expect("taken only here") {
            Begun::Writing(mut snap) => {
                self.store.ssd.set_holder(None);
                match self.store.finish_snapshot(&snap) {
                    Ok(mut done) => {
                        // Training writes again from here; the hot rows
                        // leave out what it brings in meanwhile. The next
                        // checkpoint waits for them (`snap` holds on).
                        snap.window.close(true);
                        let rest = self.store.config.ssd.checkpoint_rest;
                        self.store.finish_checkpoint(&mut done, rest);
                        for t in &self.store.tables {
                            t.end_fresh();
                        }
                        Ok(done)
                    }
                    Err(e) => Err(e),
                }
            }
            Begun::Ran(done) => done,
        };
        for t in &self.store.tables {
            t.release_write_buffer();
        }
        crate::memory::trim();
        done.map(|mut d| {
            d.pending_peak_bytes = self
                .store
                .tables
                .iter()
                .map(|t| t.take_pending_peak())
                .sum();
            d
        })
    }
}

impl Drop for CheckpointInProgress<'_> {
    /// In a forked copy, what it holds (the snapshot's window, the
    /// checkpoint's hold on the SSD tier) is the opener's: leaked, not
    /// released. Elsewhere it drops as it is (abandoned, see above).
    fn drop(&mut self) {
        if self.store.is_forked_copy() {
            std::mem::forget(self.state.take());
        }
    }
}

impl std::fmt::Debug for CheckpointInProgress<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointInProgress")
            .field("snapshot", &matches!(self.state, Some(Begun::Writing(_))))
            .finish()
    }
}

/// Row-log blocks given back to the file system per punch (64 MiB).
const PUNCH_BLOCKS: u64 = 16 << 10;

/// A checkpoint's window over the tables: closed by [`Window::close`] or
/// when dropped, whether the checkpoint committed or failed (see
/// `Table::close_snapshot`).
struct Window<'a> {
    tables: &'a [Arc<Table>],
    open: bool,
}

impl Window<'_> {
    /// Close it (once); `fresh`: the tiers mark the rows inserted from now
    /// on, for the hot rows written next.
    fn close(&mut self, fresh: bool) {
        if std::mem::take(&mut self.open) {
            for t in self.tables {
                t.close_snapshot(fresh);
            }
        }
    }
}

impl Drop for Window<'_> {
    fn drop(&mut self) {
        self.close(false);
    }
}

impl Drop for Store {
    /// In a forked copy only: the opener's threads are not in this
    /// process, its files and io_uring queues are the opener's, and its
    /// locks may have been held by a thread at the fork. So nothing is
    /// joined, written, waited for or locked: the parts whose drops would
    /// do so are leaked (the process's memory is a copy the opener keeps).
    fn drop(&mut self) {
        if !self.is_forked_copy() {
            return;
        }
        std::mem::forget(Arc::clone(&self.ssd));
        for t in &self.tables {
            std::mem::forget(Arc::clone(t));
        }
        std::mem::forget(self.warm.get_mut().take());
        std::mem::forget(self.sweep.get_mut().take());
        std::mem::forget(self.merger.get_mut().take());
        std::mem::forget(std::mem::take(&mut self.prefetching));
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

#[cfg(test)]
mod tests {
    use crate::{Error, PolicyKind, Store, StoreConfig, TableConfig, TierConfig};

    /// A warm restart's read-back leaves no read buffer in the SSD tier's
    /// pool: every id of its batches is a miss, so each batch's buffer is
    /// full (a 4 KiB group per id), and the pool, which keeps up to four
    /// buffers of up to 64 MiB for the lookups after, held them resident
    /// for the rest of the run (100 MB after a SIGKILLed W5's restart).
    #[test]
    fn a_warm_read_back_leaves_no_buffer_in_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let rb = TableConfig::new("t", 1, 16).row_bytes();
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("t", 1_300_000, 16))
            .tiers(vec![TierConfig::dram(12_000 * rb, PolicyKind::Lru)])
            .warm_rows(false)
            .build();
        let s = Store::create(&path, cfg).unwrap();
        // Ids a group apart, each its own read at the restart, written
        // home (not left in the row log, whose read at the open would put
        // them back).
        let ids: Vec<u64> = (0..10_000u64).map(|i| i * 128).collect();
        s.apply_sgd("t", &ids, &vec![1.0; ids.len() * 16], 0.1)
            .unwrap();
        s.checkpoint().unwrap();
        s.merge_row_log().unwrap();
        s.checkpoint().unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
        let read = s.wait_warm().unwrap();
        assert!(read >= 8_000, "{read} rows read back");
        let pooled = s.ssd.pooled_bytes();
        assert!(pooled <= 1 << 20, "{pooled} bytes of read buffers kept");
    }

    /// A batch whose misses read more than the pool keeps (64 MiB) reads
    /// them through one bounded buffer, left in the pool for the next
    /// batch: a lookup of several tables' misses (32 K groups of 4 KiB,
    /// 128 MiB) allocated, faulted in and dropped a buffer of the whole
    /// batch each call, a third more CPU than the same tables looked up
    /// one by one.
    #[test]
    fn a_batch_of_many_misses_reads_through_one_bounded_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let rb = TableConfig::new("t", 1, 16).row_bytes();
        let tables = ["a", "b"];
        let mut b = StoreConfig::builder();
        for t in tables {
            b = b.table(TableConfig::new(t, 1_300_000, 16));
        }
        let cfg = b
            .tiers(vec![TierConfig::dram(4_000 * rb, PolicyKind::Lru)])
            .warm_rows(false)
            .build();
        let s = Store::create(&path, cfg).unwrap();
        // Ids a group apart, written home: each a read of its own.
        let ids: Vec<u64> = (0..10_000u64).map(|i| i * 128).collect();
        for t in tables {
            s.apply_sgd(t, &ids, &vec![1.0; ids.len() * 16], 0.1)
                .unwrap();
        }
        s.merge_row_log().unwrap();
        drop(s);
        let cold = super::OpenOptionsExt {
            cold: true,
            ..Default::default()
        };
        let s = Store::open_ext(&path, cold).unwrap();
        let mut outs = [vec![0f32; ids.len() * 16], vec![0f32; ids.len() * 16]];
        let [oa, ob] = &mut outs;
        s.lookup_many(&mut [
            super::TableBatch::new("a", &ids, oa),
            super::TableBatch::new("b", &ids, ob),
        ])
        .unwrap();
        let reads: u64 = tables
            .iter()
            .map(|t| s.stats().table(t).unwrap().ssd.read_ops)
            .sum();
        assert!(reads >= 20_000, "{reads} reads");
        let pooled = s.ssd.pooled_bytes();
        assert_eq!(
            pooled,
            crate::tier::ssd::READ_CHUNK_BYTES,
            "bytes of read buffers kept"
        );
        // And the rows are the rows.
        let mut one = vec![0f32; 16];
        for (t, o) in tables.iter().zip(&outs) {
            for k in [0usize, 4_999, 9_999] {
                s.lookup(t, &ids[k..k + 1], &mut one).unwrap();
                assert_eq!(&o[k * 16..(k + 1) * 16], &one[..], "{t} row {}", ids[k]);
            }
        }
    }

    /// A call past the limit is refused as unsupported, naming its size
    /// and the limit; at the limit it passes.
    #[test]
    fn a_call_past_the_id_limit_is_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(
            dir.path().join("s"),
            StoreConfig::builder()
                .table(TableConfig::new("t", 10, 2))
                .build(),
        )
        .unwrap();
        let t = store.table("t").unwrap();
        assert!(super::check_call_len(t, 5, 5).is_ok());
        match super::check_call_len(t, 6, 5) {
            Err(Error::Unsupported { table, what }) => {
                assert_eq!(table, "t");
                assert!(
                    what.contains("6 ids") && what.contains("at most 5"),
                    "{what}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
