//! One table's rows across the tiers, and the protocol that keeps them consistent.
//!
//! # Cached tables
//!
//! A cached table is split into shards by a hash of the row id. A shard is one
//! mutex over the table's slice of every cache tier (DRAM, then PMem, in the
//! store's order) and its *pending* map, so every move of a row between
//! memory tiers is atomic. The newest copy of a row is the first found in:
//! the tiers in order, pending, SSD.
//!
//! - **Exclusive tiers.** Each tier below the first is a victim cache of the
//!   one above: rows evicted from tier k land in tier k+1 (one spill loop,
//!   [`Shard::insert_top`]); a hit below the first tier moves the row up to
//!   the first and frees its slot. A row is in at most one tier, so the
//!   capacities add up.
//! - **Write-back.** Updates dirty rows in DRAM. A dirty row that leaves the
//!   bottom cache tier goes into the shard's pending map, then is written to
//!   SSD by [`Table::write_back`]; only after the write completes is the
//!   pending entry removed (if no newer version replaced it).
//! - **Misses** read SSD without holding a shard lock. A shard counts the
//!   pending rows whose SSD write has completed and been retired (`wb_seq`);
//!   a miss records the count when it finds the row absent from every memory
//!   tier, and installs what it read only if the count is unchanged.
//!   Soundness: a newer version of the row than the one on SSD at that
//!   moment must have passed through pending afterwards; if it is still
//!   pending (or back in a cache) the install finds and uses it instead, and
//!   if it has left pending, its write completed and `wb_seq` moved, so the
//!   miss reads again.
//! - **Writers** to SSD are serialised per table (`wb_lock`), so read-modify-
//!   write of a block never loses a neighbour's update. `wb_epoch` is odd
//!   while a write is in flight; a checksum failure seen by a concurrent
//!   reader during a write is retried rather than reported.
//!
//! # Pinned tables
//!
//! A pinned table holds every row in one tier, in chunks of whole block
//! groups, each behind a mutex with a dirty bit per group. `flush` writes the
//! dirty groups to SSD.
//!
//! # Files
//!
//! This file holds the table's state, its set-up and its small accessors;
//! `shard.rs` the shards (which shard, how many, and the spill loop that
//! moves rows between a shard's tiers and pending); `miss.rs` the lookups and read-modify-write calls (hits, miss
//! resolution, installs, pinning); `writeback.rs` write-back and the whole
//! row log (appends, merges, restore at open, flushes); `pinned.rs` pinned
//! tables' load and flush; `many.rs` multi-table lookups; `import.rs` bulk
//! loads written home whole groups at a time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use embtier_format::{write_group_payload, BlockState, TableEntry, BLOCK_SIZE};
use parking_lot::Mutex;

use crate::config::TableConfig;
use crate::error::{Error, Result};
use crate::hash::mix64;
use crate::init::init_row_bytes;
use crate::io::AlignedBuf;
use crate::policy::PolicyKind;
use crate::stats::{Counters, Local};
use crate::tier::cache::{SlotCache, Spill, MAX_SHARD_ROWS};
use crate::tier::logmap::{LogMap, MERGED};
use crate::tier::rowlog::{LogSpan, NOT_LOGGED};
use crate::tier::slab::{Slab, TierMemory};
use crate::tier::ssd::{row_from_group, Loc, Ssd};

mod import;
mod kept;
mod many;
mod miss;
mod pinned;
mod shard;
mod snapshot;
mod spill;
mod writeback;

use shard::{by_shard, part, shard_count, walk_prefetched};
pub use shard::{shard_capacities, shard_of};
pub(crate) use spill::{remove_spills, SpillTo};
pub(crate) use writeback::HotIds;

pub(crate) use many::{lookup_many, Count, Part};

/// Most bytes of block groups one write-back stages at a time (the merge
/// stages as much again of log blocks): transient memory outside the DRAM
/// cache, so small enough to sit inside a tight budget, and still 1,024
/// blocks an I/O batch.
const WB_CHUNK_BYTES: usize = 4 << 20;

/// Bytes of write buffer a table keeps once a checkpoint or a pass is
/// done (see [`Table::release_write_buffer`]).
const WB_KEEP_BYTES: usize = 1 << 20;
/// Block groups per pinned chunk.
const GROUPS_PER_CHUNK: u64 = 16;
/// Groups read per batch when loading a pinned table.
const LOAD_BATCH_GROUPS: usize = 1024;
/// Log blocks a pass reads at a time when it walks its blocks in order
/// (`WB_CHUNK_BYTES` of them).
const LOG_WINDOW_BLOCKS: u64 = (WB_CHUNK_BYTES / BLOCK_SIZE) as u64;

/// A miss whose read raced with writes this many times gives up.
const MAX_MISS_RETRIES: usize = 1000;

/// Bytes of rows waiting to be written, from a table's `pending_bytes`
/// and `later_bytes`, each read clamped at zero (calls publish their
/// deltas in any order, so either can dip below zero for a moment).
fn waiting_bytes(pending: i64, later: i64) -> i64 {
    pending.max(0) + later.max(0)
}

pub(crate) struct Table {
    pub name: String,
    pub entry: TableEntry,
    pub cfg: TableConfig,
    pub dim: usize,
    pub row_bytes: usize,
    /// Element type of the stored weights.
    pub elem: crate::Elem,
    /// Bytes of the stored weights (the optimizer state follows them).
    pub weight_bytes: usize,
    /// Counter mixed into stochastic-rounding seeds, one value per call.
    sr_epoch: AtomicU64,
    pub kind: TableKind,
    /// A pinned table's chunks' first bytes, by address (empty for a
    /// cached table): where a row will be read, for a prefetch ahead of
    /// the chunk's lock ([`Table::prefetch_pinned`]). A chunk's slab is
    /// made once and never moves.
    pinned_at: Vec<usize>,
    pub counters: Counters,
    wb_lock: Mutex<AlignedBuf>,
    wb_epoch: AtomicU64,
    pending_bytes: AtomicI64,
    /// Bytes in the shards' `later` maps (dirty rows evicted while a
    /// checkpoint writes its snapshot).
    later_bytes: AtomicI64,
    /// The most `pending_bytes + later_bytes` has been since
    /// [`Table::take_pending_peak`] last read it.
    pending_peak: AtomicI64,
    /// Whether a checkpoint is writing this table's snapshot (being
    /// finished), and the updates waiting for it to end while `later` is
    /// over the limit; `snapshot_open` says whether one has begun.
    snapshot: parking_lot::Mutex<bool>,
    snapshot_ended: parking_lot::Condvar,
    snapshot_open: std::sync::atomic::AtomicBool,
    /// Pending bytes at which a call writes back (amortises SSD writes).
    wb_batch: usize,
    /// Pending bytes above which updates wait for a successful write-back.
    pending_limit: usize,
    /// Rows one row-log block holds for this table (0: it writes back in
    /// place only).
    log_rows: usize,
    /// The table's index in the catalog.
    index: u32,
    /// Whether misses still fill the first tier with the other rows of the
    /// groups they read (until a shard is first found full).
    fill_open: std::sync::atomic::AtomicBool,
}

pub(crate) enum TableKind {
    Cached {
        shards: Vec<Mutex<Shard>>,
        /// The table's capacity in each tier, in rows.
        tier_rows: Vec<u64>,
    },
    Pinned {
        chunks: Vec<Mutex<Chunk>>,
        /// The tier it lives in.
        tier: usize,
    },
}

/// A dirty row out of the cache tiers, waiting to be written. Shared, so
/// that a write-back writes from these very bytes (the row stays readable
/// in its map meanwhile) instead of copying every pending row first.
struct PendingRow {
    gen: u64,
    bytes: std::sync::Arc<[u8]>,
}

pub(crate) struct Shard {
    /// This shard's slice of the store's first tier, where hits are served
    /// (every shard holds at least one of its rows). Inline, not in `lower`:
    /// it is on the path of every hit.
    top: SlotCache,
    /// Its slices of the lower tiers that give it rows, fastest first, each
    /// with the store's tier index (for counters).
    lower: Vec<(usize, SlotCache)>,
    pending: HashMap<u64, PendingRow>,
    /// While a checkpoint writes its snapshot (`window`): dirty rows that
    /// left the tiers after it began. `pending` then holds the snapshot's
    /// rows only (those pending when it began, and the old rows handed over
    /// since), which the checkpoint writes; these wait until it has
    /// committed and then join `pending`. Reads look here first.
    later: HashMap<u64, PendingRow>,
    /// Whether a checkpoint is writing its snapshot (see `Table::open_snapshot`).
    window: bool,
    /// Rows whose newest written copy is in the row log, and its block;
    /// or [`MERGED`]: the row's log copy was written home by the background
    /// merge (home and the log hold the same bytes).
    logged: LogMap,
    /// Pending rows retired after their SSD write completed.
    wb_seq: u64,
    /// Generation of the next pending row.
    next_gen: u64,
}

/// [`GROUPS_PER_CHUNK`] consecutive block groups of a pinned table, laid
/// out in memory as in their payloads: a row sits at its local group times
/// the layout's slot bytes plus its offset in the group.
pub(crate) struct Chunk {
    first_group: u64,
    groups: usize,
    slab: Slab,
    /// A dirty bit per local group.
    dirty: Vec<u64>,
}

/// Where a pinned table's row is: its chunk, its group in the chunk, and
/// the byte offset of its bytes in the chunk's slab.
#[derive(Clone, Copy, Debug)]
struct PinnedPlace {
    chunk: usize,
    local_group: usize,
    at: usize,
}

/// A row to write: its id and bytes.
type RowRef<'a> = (u64, &'a [u8]);

#[derive(Clone, Copy, Debug)]
struct Miss {
    id: u64,
    seq: u64,
    k: usize,
    /// The row-log block holding the row's newest written copy, or
    /// [`NOT_LOGGED`] (its home group does).
    log: u32,
}

impl Miss {
    fn loc(&self, e: &TableEntry) -> Loc {
        if self.log == NOT_LOGGED {
            Loc::Home(e.layout.locate(self.id).group)
        } else {
            Loc::Log(self.log)
        }
    }
}

/// The state one round of miss installs shares across its groups.
struct Install<'a> {
    shards: &'a [Mutex<Shard>],
    /// `wb_epoch` when the round's reads were issued.
    epoch: u64,
    attempts: usize,
    row: &'a mut [u8],
    ctx: &'a mut Ctx,
    retry: &'a mut Vec<Miss>,
    corrupt: &'a mut Option<Error>,
    /// Misses of the round not yet installed: a fill leaves that much room
    /// free, so that it never makes the round evict a row it asked for.
    left: &'a mut usize,
}

/// Per-call counts and scratch buffers (kept out of the shards, so that a
/// shard costs only its cache arrays).
struct Ctx {
    c: Local,
    new_pending: usize,
    pending_delta: isize,
    /// The same for the shards' `later` maps.
    later_delta: isize,
    spill: Spill,
    spill2: Spill,
    scratch: Vec<u8>,
    /// Read the misses in windows of sequential reads where they lie
    /// close (a warm restart; see `Ssd::read_extents_windowed`).
    windowed: bool,
}

impl Ctx {
    fn new() -> Ctx {
        Ctx {
            c: Local::default(),
            new_pending: 0,
            pending_delta: 0,
            later_delta: 0,
            spill: Spill::default(),
            spill2: Spill::default(),
            scratch: Vec::new(),
            windowed: false,
        }
    }
}

impl Chunk {
    #[inline]
    fn row(&self, p: PinnedPlace, rb: usize) -> &[u8] {
        &self.slab.bytes()[p.at..p.at + rb]
    }
    #[inline]
    fn row_mut(&mut self, p: PinnedPlace, rb: usize) -> &mut [u8] {
        &mut self.slab.bytes_mut()[p.at..p.at + rb]
    }
    fn mark(&mut self, local_group: usize) {
        self.dirty[local_group / 64] |= 1 << (local_group % 64);
    }
}

pub(crate) struct TableSetup<'a> {
    pub entry: TableEntry,
    pub cfg: TableConfig,
    /// Rows in each tier (the plan's).
    pub tier_rows: Vec<u64>,
    /// Each tier's eviction policy.
    pub policies: Vec<PolicyKind>,
    /// The tier a pinned table lives in.
    pub pin_tier: Option<usize>,
    pub shards: Option<usize>,
    /// Whether misses fill a cold first tier (`SsdConfig::cold_fill`).
    pub cold_fill: bool,
    /// `SsdConfig::overhead_in_budget`: the pending limit is the share of
    /// the first tier's bytes it was charged.
    pub overhead_in_budget: bool,
    /// Each tier's memory.
    pub memory: &'a mut [TierMemory],
    pub ssd: &'a Ssd,
    pub fresh: bool,
    /// The table's index in the catalog (named in its row-log blocks).
    pub index: u32,
    /// Calls that drew a stochastic rounding seed before the last
    /// checkpoint (persisted with it, so a resumed run rounds as one that
    /// never stopped).
    pub rounding_calls: u64,
}

impl Table {
    /// A checkpoint or a background pass is done: give back the write
    /// buffer if its largest write left it over [`WB_KEEP_BYTES`] (4-8 MiB
    /// with a merge), so that it is not held for the rest of the run. Not
    /// after each write: a merge writes thousands of chunks, and a buffer
    /// allocated for each (a fresh mapping each with
    /// `memory::give_back_freed_memory_promptly`) tripled the final merge's
    /// time in W5. A buffer in use by a write-back on another thread is
    /// left to the next checkpoint or pass, not waited for.
    pub(crate) fn release_write_buffer(&self) {
        if let Some(mut b) = self.wb_lock.try_lock() {
            if b.len() > WB_KEEP_BYTES {
                *b = AlignedBuf::new(BLOCK_SIZE);
            }
        }
    }

    pub(crate) fn new(s: TableSetup<'_>) -> Result<Table> {
        let e = &s.entry;
        let rb = e.layout.row_bytes as usize;
        let dim = e.dim as usize;
        let memory = s.memory;
        let too_small = |m: &TierMemory, what: &str| {
            Error::table_config(
                &e.name,
                format!("the {} tier's file is too small for {what}", m.name()),
            )
        };
        let mut slab = |tier: usize, len: usize, what: &str| -> Result<Slab> {
            memory[tier]
                .slab(len)
                .ok_or_else(|| too_small(&memory[tier], what))
        };
        let mut pinned_at = Vec::new();
        let kind = match s.pin_tier {
            None => {
                let n = shard_count(&e.name, &s.tier_rows, s.shards)?;
                let mut shards = Vec::with_capacity(n);
                for i in 0..n {
                    let mut tiers = Vec::with_capacity(s.tier_rows.len());
                    for (t, &rows) in s.tier_rows.iter().enumerate() {
                        let cap = part(rows, n, i);
                        if cap == 0 {
                            continue;
                        }
                        let what = if t == 0 {
                            "its cache"
                        } else {
                            "its lower cache"
                        };
                        let slab = slab(t, cap * rb, what)?;
                        tiers.push((t, SlotCache::new(cap, rb, s.policies[t], slab)));
                    }
                    // The first tier has a row in every shard (`shard_count`).
                    let (first, top) = tiers.remove(0);
                    debug_assert_eq!(first, 0);
                    shards.push(Mutex::new(Shard {
                        top,
                        lower: tiers,
                        pending: HashMap::new(),
                        later: HashMap::new(),
                        window: false,
                        logged: LogMap::new(e.rows),
                        wb_seq: 0,
                        next_gen: 0,
                    }));
                }
                TableKind::Cached {
                    shards,
                    tier_rows: s.tier_rows.clone(),
                }
            }
            Some(tier) => {
                let total = e.layout.groups_for(e.rows);
                let nchunks = total.div_ceil(GROUPS_PER_CHUNK);
                let mut chunks = Vec::with_capacity(nchunks as usize);
                // (first group, groups, bytes) of each chunk.
                let shape: Vec<(u64, usize, usize)> = (0..nchunks)
                    .map(|c| {
                        let first_group = c * GROUPS_PER_CHUNK;
                        let groups = (total - first_group).min(GROUPS_PER_CHUNK) as usize;
                        // Whole slots for all but the last group, which
                        // holds only the table's last rows.
                        let last = e
                            .layout
                            .rows_in_group(first_group + groups as u64 - 1, e.rows);
                        (
                            first_group,
                            groups,
                            (groups - 1) * e.layout.slot_bytes() + last * rb,
                        )
                    })
                    .collect();
                let lens: Vec<usize> = shape.iter().map(|c| c.2).collect();
                let slabs = memory[tier]
                    .slabs(&lens)
                    .ok_or_else(|| too_small(&memory[tier], "the pinned table"))?;
                for (&(first_group, groups, _), slab) in shape.iter().zip(slabs) {
                    pinned_at.push(slab.bytes().as_ptr() as usize);
                    chunks.push(Mutex::new(Chunk {
                        first_group,
                        groups,
                        slab,
                        dirty: vec![0; (GROUPS_PER_CHUNK as usize).div_ceil(64)],
                    }));
                }
                TableKind::Pinned { chunks, tier }
            }
        };
        let top_rows = s.tier_rows.first().copied().unwrap_or(0);
        // Rows waiting to be written: a quarter of the first tier's bytes,
        // and as many again waiting for a snapshot checkpoint (`later`);
        // with the overhead in the budget, a 24th each, the twelfth the
        // tier charged for them.
        let top_bytes = (top_rows as usize).saturating_mul(rb);
        let pending_limit = match s.overhead_in_budget {
            true => crate::config::overhead_part(top_bytes as u64) as usize,
            false => top_bytes / 4,
        }
        .max(64 * rb);
        // At least a row, even where a row is past 4 MiB (`clamp` would
        // panic with its bounds crossed).
        let wb_batch = (pending_limit / 4).min(4 << 20).max(rb);
        // The log packs rows of cached tables whose groups are one block;
        // rows too large to share a log block gain nothing from it.
        let log_rows = match (&kind, e.layout.blocks_per_group) {
            (TableKind::Cached { .. }, 1) if s.ssd.log().capacity > 0 => {
                embtier_format::rowlog::rows_per_block(rb)
            }
            _ => 0,
        };
        let log_rows = if log_rows >= 2 { log_rows } else { 0 };
        let t = Table {
            fill_open: std::sync::atomic::AtomicBool::new(
                s.cold_fill && matches!(kind, TableKind::Cached { .. }),
            ),
            log_rows,
            index: s.index,
            name: e.name.clone(),
            dim,
            row_bytes: rb,
            elem: crate::Elem::from_format(e.elem),
            weight_bytes: e.elem.weight_bytes(e.dim) as usize,
            sr_epoch: AtomicU64::new(s.rounding_calls),
            kind,
            pinned_at,
            counters: Counters::default(),
            wb_lock: Mutex::new(AlignedBuf::new(BLOCK_SIZE)),
            wb_epoch: AtomicU64::new(0),
            pending_bytes: AtomicI64::new(0),
            later_bytes: AtomicI64::new(0),
            pending_peak: AtomicI64::new(0),
            snapshot: parking_lot::Mutex::new(false),
            snapshot_ended: parking_lot::Condvar::new(),
            snapshot_open: std::sync::atomic::AtomicBool::new(false),
            wb_batch,
            pending_limit,
            cfg: s.cfg,
            entry: s.entry,
        };
        if let TableKind::Pinned { .. } = t.kind {
            t.load_pinned(s.ssd, s.fresh)?;
        }
        Ok(t)
    }

    /// Drop the pins of `ids` (as recorded by [`Table::lookup_pinning`]).
    pub(crate) fn unpin(&self, ids: &[u64]) {
        if let TableKind::Cached { shards, .. } = &self.kind {
            let n = shards.len();
            for &id in ids {
                shards[self.shard_of(id, n)].lock().top().unpin(id);
            }
        }
    }

    /// Whether the table is pinned whole to a memory tier.
    pub(crate) fn is_pinned(&self) -> bool {
        self.pin_tier().is_some()
    }

    /// Rows pinned in the first tier by prefetches now.
    pub(crate) fn pinned_rows(&self) -> usize {
        match &self.kind {
            TableKind::Cached { shards, .. } => {
                shards.iter().map(|s| s.lock().top().pinned()).sum()
            }
            TableKind::Pinned { .. } => 0,
        }
    }

    /// Decode a row's weights into `out` (`dim` f32s).
    #[inline]
    pub(crate) fn decode(&self, row: &[u8], out: &mut [f32]) {
        crate::precision::decode(self.elem, &row[..self.weight_bytes], out)
    }

    pub(crate) fn encode(&self, w: &[f32], row: &mut [u8], rounding: crate::precision::Rounding) {
        crate::precision::encode(self.elem, w, &mut row[..self.weight_bytes], rounding)
    }

    /// The most bytes of rows that waited to be written at once (pending,
    /// and evicted during a snapshot checkpoint's window) since the last
    /// call; the count starts again from what waits now.
    pub(crate) fn take_pending_peak(&self) -> u64 {
        let now = waiting_bytes(
            self.pending_bytes.load(Ordering::Relaxed),
            self.later_bytes.load(Ordering::Relaxed),
        );
        self.pending_peak.swap(now, Ordering::Relaxed).max(now) as u64
    }

    /// Displaced dirty rows waiting for a write-back, and the limit past
    /// which updates write back first (and fail if that fails).
    pub(crate) fn pending(&self) -> (u64, u64) {
        let rb = self.row_bytes.max(1) as u64;
        let bytes = self.pending_bytes.load(Ordering::Relaxed).max(0) as u64
            + self.later_bytes.load(Ordering::Relaxed).max(0) as u64;
        (bytes.div_ceil(rb), self.pending_limit as u64 / rb)
    }

    /// Calls that have drawn a stochastic rounding seed (see
    /// [`Table::rounding_base`]), since the store was created.
    pub(crate) fn rounding_calls(&self) -> u64 {
        self.sr_epoch.load(Ordering::Relaxed)
    }

    /// A fresh base seed for the stochastic rounding of one call, or `None`
    /// when this table rounds to nearest.
    pub(crate) fn rounding_base(&self) -> Option<u64> {
        match (self.elem, self.cfg.rounding) {
            (crate::Elem::F32, _) | (_, crate::RoundingMode::Nearest) => None,
            _ => {
                let n = self.sr_epoch.fetch_add(1, Ordering::Relaxed);
                Some(mix64(self.entry.seed ^ mix64(n.wrapping_add(0x5eed))))
            }
        }
    }

    /// Where row `id` of a pinned table is in its chunks.
    #[inline]
    fn pinned_place(&self, id: u64) -> PinnedPlace {
        let p = self.entry.layout.locate(id);
        let local_group = (p.group % GROUPS_PER_CHUNK) as usize;
        PinnedPlace {
            chunk: (p.group / GROUPS_PER_CHUNK) as usize,
            local_group,
            at: local_group * self.entry.layout.slot_bytes() + p.offset,
        }
    }

    /// Ask for the cache lines of pinned row `id` (a table's loops over
    /// a batch call it a few ids ahead: a row of a pinned table is random
    /// memory, and its read was the loop's whole cost). A hint: no lock,
    /// no read.
    #[inline]
    pub(crate) fn prefetch_pinned(&self, id: u64) {
        let p = self.pinned_place(id);
        let Some(&base) = self.pinned_at.get(p.chunk) else {
            return;
        };
        crate::hint::prefetch_bytes(base + p.at, self.row_bytes);
    }

    #[inline]
    fn shard_of(&self, id: u64, n: usize) -> usize {
        shard_of(id, n)
    }

    /// Occupancy of each of the store's `tiers` tiers: (rows resident,
    /// capacity in rows, bookkeeping bytes).
    pub(crate) fn occupancy(&self, tiers: usize) -> Vec<[u64; 3]> {
        let mut o = vec![[0u64; 3]; tiers];
        match &self.kind {
            TableKind::Cached { shards, tier_rows } => {
                for (o, &rows) in o.iter_mut().zip(tier_rows) {
                    o[1] = rows;
                }
                for sh in shards {
                    let sh = sh.lock();
                    for (t, c) in sh.caches() {
                        o[t][0] += c.len() as u64;
                        o[t][2] += c.meta_bytes() as u64;
                    }
                }
            }
            TableKind::Pinned { chunks, tier, .. } => {
                let rows = self.entry.rows;
                let meta = (chunks.len() * (std::mem::size_of::<Mutex<Chunk>>() + 8)) as u64;
                o[*tier] = [rows, rows, meta];
            }
        }
        o
    }

    /// The tier a pinned table lives in.
    pub(crate) fn pin_tier(&self) -> Option<usize> {
        match self.kind {
            TableKind::Pinned { tier, .. } => Some(tier),
            TableKind::Cached { .. } => None,
        }
    }

    /// Dirty rows held in memory (cached tables: every tier and pending).
    pub(crate) fn dirty_rows(&self) -> u64 {
        match &self.kind {
            TableKind::Cached { shards, .. } => shards
                .iter()
                .map(|s| {
                    let s = s.lock();
                    (s.caches().map(|(_, c)| c.dirty_count()).sum::<usize>()
                        + s.pending.len()
                        + s.later.len()) as u64
                })
                .sum(),
            TableKind::Pinned { chunks, .. } => chunks
                .iter()
                .map(|c| {
                    c.lock()
                        .dirty
                        .iter()
                        .map(|w| w.count_ones() as u64)
                        .sum::<u64>()
                })
                .sum(),
        }
    }
}

/// Whether no table comes twice among `tables`: the parts of a call
/// whose tables are distinct may go side by side ([`each`]); a table
/// twice goes in order, as calls one after the other would.
pub(crate) fn distinct_tables<'a>(tables: impl Iterator<Item = &'a Table>) -> bool {
    let mut t: Vec<*const Table> = tables.map(|t| t as *const Table).collect();
    t.sort_unstable();
    t.windows(2).all(|w| w[0] != w[1])
}

/// `f` of every item, in order of the items, worked on by the calling
/// thread and up to one helper thread fewer than the cores (one item per
/// table of a call: a call of 800 tables takes as many threads as a call
/// of two). A helper the system refuses is done without.
pub(crate) fn each<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let n = items.len();
    if n < 2 || cores < 2 {
        return items.into_iter().map(f).collect();
    }
    let work: Vec<Mutex<Option<T>>> = items.into_iter().map(|x| Mutex::new(Some(x))).collect();
    let done: Vec<Mutex<Option<R>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let run = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(x) = work.get(i).and_then(|w| w.lock().take()) else {
            break;
        };
        *done[i].lock() = Some(f(x));
    };
    std::thread::scope(|s| {
        for _ in 1..cores.min(n) {
            // Refused (no threads left): the calling thread does its share.
            let _ = std::thread::Builder::new().spawn_scoped(s, run);
        }
        run();
    });
    done.into_iter()
        .map(|r| r.into_inner().expect("every item was done"))
        .collect()
}

#[cfg(test)]
mod each_tests {
    use super::each;

    /// Results come in the items' order, however many threads took them,
    /// and every item is done once.
    #[test]
    fn each_keeps_the_items_order() {
        for n in [0usize, 1, 2, 3, 17, 300] {
            let done = std::sync::atomic::AtomicUsize::new(0);
            let out = each((0..n).collect(), |x| {
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                x * 3
            });
            assert_eq!(out, (0..n).map(|x| x * 3).collect::<Vec<_>>());
            assert_eq!(done.into_inner(), n);
        }
    }
}
