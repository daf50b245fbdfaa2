//! The cache tiers and the SSD tier.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ByteSize;
use crate::io::IoEngineKind;
use crate::policy::PolicyKind;

/// A kind of memory a cache tier lives in. Adding one is a variant here and
/// a slab backend in `tier::slab`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum MemoryKind {
    /// Ordinary heap memory.
    Dram,
    /// A memory-mapped file: persistent memory on a DAX file system, CXL
    /// memory exposed as a file, or (to emulate) any file system.
    Pmem,
}

impl MemoryKind {
    /// The name used in `store.toml` and in errors (`dram`, `pmem`).
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::Dram => "dram",
            MemoryKind::Pmem => "pmem",
        }
    }

    /// Whether tiers of this kind live in a file (and so take a `path`).
    pub fn file_backed(self) -> bool {
        match self {
            MemoryKind::Dram => false,
            MemoryKind::Pmem => true,
        }
    }
}

impl std::str::FromStr for MemoryKind {
    type Err = String;
    fn from_str(s: &str) -> Result<MemoryKind, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "dram" => Ok(MemoryKind::Dram),
            "pmem" => Ok(MemoryKind::Pmem),
            other => Err(format!("unknown memory kind {other:?} (dram or pmem)")),
        }
    }
}

impl fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Most cache tiers a store may have.
pub const MAX_TIERS: usize = 4;

/// One cache tier. The tiers of a store form an exclusive hierarchy, fastest
/// first: a row lives in at most one of them, a lookup that finds it below
/// the first tier moves it up to the first, and each tier's victims move
/// down one tier (dirty victims of the last tier are written to SSD).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    /// The memory it lives in.
    pub kind: MemoryKind,
    /// Bytes of row payload the tier may hold, pinned tables included.
    pub capacity: ByteSize,
    /// Eviction policy of its caches.
    #[serde(default, deserialize_with = "PolicyKind::deserialize_for_store")]
    pub policy: PolicyKind,
    /// For a file-backed kind, the file; by default `pmem.emb` in the store
    /// directory (`pmem.N.emb` for the N-th such tier, N >= 1). Put it on a
    /// DAX file system (or tmpfs, to emulate) to get byte-addressable memory.
    ///
    /// A DRAM tier given a path lives in that file instead of memory of
    /// its own: give it one on tmpfs (`/dev/shm/...`), and its rows are
    /// shared memory that outlives the process. A file-backed tier of
    /// either kind is *kept* by [`crate::Store::close`]: its rows stay in
    /// the file and the next open of that checkpoint takes them where they
    /// lie, with no read (a warm restart as CacheLib's across a process
    /// restart; `docs/tuning.md`, "Warm restarts").
    ///
    /// A relative path given here is relative to the working directory, as
    /// any path is; [`crate::Store::create`] writes it to `store.toml`
    /// made absolute. A relative path in a `store.toml` edited by hand is
    /// relative to the store's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// For a DRAM tier, back each cache shard's rows of 4 MiB or more with
    /// a mapping of its own that asks the kernel for transparent huge pages
    /// (`madvise(MADV_HUGEPAGE)`; Linux with THP `madvise` or `always`):
    /// one TLB entry and one fault per 2 MiB instead of per 4 KiB, for rows
    /// reached at random over the whole cache. On by default; turn it off
    /// where huge-page compaction stalls are a concern. Ignored for a
    /// tier in a file (tmpfs has its own huge-page setting,
    /// `shmem_enabled`).
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub huge_pages: bool,
}

/// For `skip_serializing_if`: a setting whose default is `true` is not
/// written while it has it.
pub(super) fn is_true(b: &bool) -> bool {
    *b
}

impl TierConfig {
    /// A DRAM tier of `bytes` with `policy`.
    pub fn dram(bytes: u64, policy: PolicyKind) -> TierConfig {
        TierConfig {
            kind: MemoryKind::Dram,
            capacity: ByteSize(bytes),
            policy,
            path: None,
            huge_pages: true,
        }
    }

    /// A PMem tier of `bytes` at `path` (None: in the store directory).
    pub fn pmem(path: Option<PathBuf>, bytes: u64, policy: PolicyKind) -> TierConfig {
        TierConfig {
            kind: MemoryKind::Pmem,
            capacity: ByteSize(bytes),
            policy,
            path,
            huge_pages: true,
        }
    }

    /// This tier with huge pages asked for (`true`, the default) or not
    /// (see [`TierConfig::huge_pages`]).
    pub fn with_huge_pages(mut self, on: bool) -> TierConfig {
        self.huge_pages = on;
        self
    }
}

/// The SSD tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SsdConfig {
    /// The data file or block device; by default `data.emb` in the store
    /// directory. Relative paths as for [`TierConfig::path`]: the working
    /// directory's through the API (written to `store.toml` made
    /// absolute), the store directory's in a hand-edited `store.toml`.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// I/O engine; `EMBTIER_IO_ENGINE` overrides it.
    #[serde(default)]
    pub io_engine: IoEngineKind,
    /// io_uring queue depth: reads in flight per batch.
    #[serde(default = "default_qd")]
    pub queue_depth: u32,
    /// Threads of the psync engine.
    #[serde(default = "default_psync_threads")]
    pub psync_threads: usize,
    /// Open with O_DIRECT (falls back to buffered I/O where refused).
    #[serde(default = "default_true")]
    pub direct_io: bool,
    /// Capacity of the row log, the region after the tables where dirty
    /// rows written back are appended packed (15 rows of 256 bytes a block)
    /// instead of read-modify-writing each row's 4 KiB block. `None` (the
    /// default): the bytes of the cached tables, at least 16 MiB. `0`
    /// turns it off. Only a data file that is a regular file gets one.
    #[serde(default)]
    pub row_log: Option<ByteSize>,
    /// Filling a cold cache: a miss's read of a home block group also
    /// installs the group's other rows into the first tier while it has
    /// free room (never evicting for them), until a shard is first full.
    /// On by default; `emb-replay simulate` does not model it, so turn it
    /// off to compare a run with a simulation exactly.
    #[serde(default = "default_true")]
    pub cold_fill: bool,
    /// Merge the row log in the background: once it is more than
    /// `merge_start` full (half by default), a thread writes its rows home
    /// a chunk at a time (at most half the time while the log is at most
    /// half full, the rest left to training; more as it fills towards
    /// three quarters). Checkpoints
    /// during the pass commit the log as it is; the first one after it
    /// moves the log's start past the pass's blocks, which appends then
    /// reuse: none merges unless the log reaches seven eighths full first.
    /// On by default; off, a checkpoint merges the whole log once it is
    /// more than half full, with training stopped.
    #[serde(default = "default_true")]
    pub merge_in_background: bool,
    /// Warm restarts at sequential speed: every checkpoint also writes the
    /// bytes of every row the cache tiers hold (`hot-rows.emb`, about the
    /// tiers' size), and an open at that checkpoint puts them back before
    /// it returns, reading the file in order. On by default; off, a
    /// checkpoint records only the ids (`hot.emb`) and an open reads those
    /// rows back from the data file in the background, which for a hot set
    /// spread over a table means reading most of the table.
    #[serde(default = "default_true")]
    pub warm_rows: bool,
    /// Live logged rows a merge lists at once (16 bytes each): a merge, in
    /// the background or in a checkpoint, takes a table's logged rows in
    /// ranges of ids that would hold this many if they were spread evenly
    /// over the table, so that its list does not grow with the log. Each
    /// range costs a scan of the table's log maps. Default 1 Mi rows (16
    /// MiB); at least 1.
    #[serde(default = "default_merge_list_rows")]
    pub merge_list_rows: usize,
    /// The background merge reads the logged rows of a range of ids by
    /// walking the log's blocks in order (4 MiB reads, up to 64 MiB of rows
    /// held at once) when they are dense enough there (a row per 8
    /// blocks), instead of one random block read per row. On by default;
    /// off, every row's block is read on its own (the behaviour before).
    #[serde(default = "default_true")]
    pub merge_scan: bool,
    /// With `merge_scan`, a background pass that takes a table in more
    /// than one range of ids walks the log's blocks once and spills each
    /// range's live rows to its own file in the store directory
    /// (`merge-spill-*.tmp`, direct I/O, about the live logged rows'
    /// bytes while the pass runs), then reads each range back from its
    /// file, instead of walking the blocks once per range. On by default;
    /// off, each range walks the log (the behaviour before).
    #[serde(default = "default_true")]
    pub merge_spill: bool,
    /// Checkpoints that do not stop training: a checkpoint holds lookups
    /// and updates back only while it marks the dirty rows (a scan of the
    /// cache tiers' keys) and writes the dirty groups of pinned tables,
    /// then writes the marked rows, syncs and commits while other threads
    /// go on; a row updated before the checkpoint wrote it is handed to it
    /// first (copy-on-write), so the commit holds exactly the updates made
    /// before the checkpoint began. Dirty rows evicted meanwhile wait in
    /// memory until the commit. On by default; off, the whole checkpoint
    /// runs with training stopped. A checkpoint that merges the whole row
    /// log stops training either way.
    #[serde(default = "default_true")]
    pub snapshot_checkpoints: bool,
    /// How long a checkpoint that runs beside training rests after each
    /// chunk it writes (a few MiB of the snapshot's rows, the hot rows),
    /// as a multiple of the time the chunk took: at 1.0 it takes at most
    /// half of the disk's time and training's reads keep the rest, and the
    /// checkpoint takes about twice as long. 0 writes at the disk's full
    /// rate. Hot-row writes are bounded in flight either way (the file is
    /// synced a chunk at a time, so that the kernel never holds hundreds
    /// of MiB to write at once). Default 1.0.
    #[serde(default = "default_checkpoint_rest")]
    pub checkpoint_rest: f64,
    /// How full the row log is, as a fraction of its blocks, when the
    /// background merge begins a pass (`merge_in_background`). The pass
    /// takes the log as it is then. Lower, passes begin sooner and find
    /// fewer rows rewritten since (more to write home); higher, the log
    /// has less room left for what training appends during the pass.
    /// Default 0.5; more than 0 and at most 0.75.
    #[serde(default = "default_merge_start")]
    pub merge_start: f64,
    /// Count what the store keeps in DRAM for its rows beyond their bytes
    /// against the first DRAM tier's capacity, so that the capacity bounds
    /// the store's memory rather than its cached rows' payload. Off (the
    /// default), the capacity is the rows' bytes and the rest comes on top
    /// (up to about as much again in `docs/benchmarks.md`'s W5). On, each
    /// cached row of that tier is charged its bytes, the cache's
    /// bookkeeping ([`CACHE_ROW_OVERHEAD`] bytes) and [`OVERHEAD_SHARE`] of
    /// its bytes again, which is what the write path may hold: rows
    /// waiting to be written and rows waiting for a snapshot checkpoint (a
    /// 24th of the cached bytes each, where each is a quarter when off),
    /// the row log's map (with `merge_in_background`, a pass begins when
    /// the map holds more than a 24th) and a pass's buffer (a 24th, at
    /// most 64 MiB); where that tier lives in a file (`path`, to be kept
    /// across restarts), also its stamp beside the file (16 bytes a slot,
    /// FORMAT.md "Slot stamps"). Fewer rows are cached for the same
    /// capacity, and the log is merged sooner.
    #[serde(default)]
    pub overhead_in_budget: bool,
}

fn default_checkpoint_rest() -> f64 {
    1.0
}

/// Bytes of a cache's bookkeeping per row (`tier::cache`: its key, its
/// index entry, the policy's links), rounded up: what
/// [`SsdConfig::overhead_in_budget`] charges a cached row beyond its bytes.
pub const CACHE_ROW_OVERHEAD: u64 = 16;

/// With [`SsdConfig::overhead_in_budget`], the write path's share of a
/// cached row's bytes charged beside them, in 24ths: rows waiting to be
/// written (1) and waiting for a snapshot checkpoint (1), the row log's
/// map (2: a pass begins past 1) and a merge pass's buffer (1).
pub const OVERHEAD_SHARE: (u64, u64) = (5, 24);

/// One part of [`OVERHEAD_SHARE`] of `cached_bytes` (a 24th): what each of
/// the write path's holdings keeps to under
/// [`SsdConfig::overhead_in_budget`].
pub(crate) fn overhead_part(cached_bytes: u64) -> u64 {
    cached_bytes / OVERHEAD_SHARE.1
}

/// Bytes the first DRAM tier charges a cached row of `row_bytes` under
/// `overhead_in_budget` (see [`SsdConfig::overhead_in_budget`]).
pub fn charged_row_bytes(row_bytes: u64, overhead_in_budget: bool) -> u64 {
    if overhead_in_budget {
        row_bytes + (row_bytes * OVERHEAD_SHARE.0).div_ceil(OVERHEAD_SHARE.1) + CACHE_ROW_OVERHEAD
    } else {
        row_bytes
    }
}

fn default_merge_start() -> f64 {
    0.5
}

fn default_merge_list_rows() -> usize {
    1 << 20
}

impl SsdConfig {
    /// What the I/O layer needs of these settings to open an engine.
    pub fn engine_options(&self) -> crate::io::EngineOptions {
        crate::io::EngineOptions {
            kind: self.io_engine,
            queue_depth: self.queue_depth,
            psync_threads: self.psync_threads,
            direct_io: self.direct_io,
        }
    }
}

fn default_qd() -> u32 {
    128
}
fn default_psync_threads() -> usize {
    4
}
pub(super) fn default_true() -> bool {
    true
}

impl Default for SsdConfig {
    fn default() -> SsdConfig {
        SsdConfig {
            path: None,
            io_engine: IoEngineKind::Auto,
            queue_depth: default_qd(),
            psync_threads: default_psync_threads(),
            direct_io: true,
            row_log: None,
            cold_fill: true,
            merge_in_background: true,
            warm_rows: true,
            merge_list_rows: default_merge_list_rows(),
            merge_scan: true,
            merge_spill: true,
            snapshot_checkpoints: true,
            checkpoint_rest: default_checkpoint_rest(),
            merge_start: default_merge_start(),
            overhead_in_budget: false,
        }
    }
}
