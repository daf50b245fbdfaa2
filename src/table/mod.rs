//! One table's rows across the tiers, and the protocol that keeps them consistent.
//!
//! # Cached tables
//!
//! A cached table is split into shards by a hash of the row id. A shard is one
//! mutex over the table's DRAM cache shard, its PMem cache shard and its
//! *pending* map, so every move of a row between memory tiers is atomic. The
//! newest copy of a row is the first found in: DRAM, PMem, pending, SSD.
//!
//! - **Exclusive tiers.** PMem is a victim cache: rows evicted from DRAM land
//!   in PMem; a PMem hit moves the row up to DRAM and frees its PMem slot. A
//!   row is never in both, so the two capacities add up.
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
//! `miss.rs` the lookups and read-modify-write calls (hits, miss
//! resolution, installs, pinning); `writeback.rs` write-back and the whole
//! row log (appends, merges, restore at open, flushes); `pinned.rs` pinned
//! tables' load and flush; `many.rs` multi-table lookups.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use embtier_format::{write_group_payload, BlockState, TableEntry, BLOCK_SIZE};
use parking_lot::Mutex;

use crate::config::{Placement, TableConfig};
use crate::error::{Error, Result};
use crate::hash::mix64;
use crate::init::init_row_bytes;
use crate::io::AlignedBuf;
use crate::policy::PolicyKind;
use crate::stats::{Counters, Local};
use crate::tier::cache::{SlotCache, Spill, MAX_SHARD_ROWS};
use crate::tier::rowlog::NOT_LOGGED;
use crate::tier::slab::{PmemFile, Slab};
use crate::tier::ssd::{row_from_group, Loc, Ssd};

mod many;
mod miss;
mod pinned;
mod writeback;

pub(crate) use many::{lookup_many, Part};

/// Most bytes of block groups one write-back stages at a time (the merge
/// stages as much again of log blocks): transient memory outside the DRAM
/// cache, so small enough to sit inside a tight budget, and still 1,024
/// blocks an I/O batch.
const WB_CHUNK_BYTES: usize = 4 << 20;
/// Block groups per pinned chunk.
const GROUPS_PER_CHUNK: u64 = 16;
/// Groups read per batch when loading a pinned table.
const LOAD_BATCH_GROUPS: usize = 1024;
/// A miss whose read raced with writes this many times gives up.
const MAX_MISS_RETRIES: usize = 1000;

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
    pub counters: Counters,
    wb_lock: Mutex<AlignedBuf>,
    wb_epoch: AtomicU64,
    pending_bytes: AtomicI64,
    /// Pending bytes at which a call writes back (amortises SSD writes).
    wb_batch: usize,
    /// Pending bytes above which updates wait for a successful write-back.
    pending_limit: usize,
    /// Rows one row-log block holds for this table (0: it writes back in
    /// place only).
    log_rows: usize,
    /// The table's index in the catalog.
    index: u32,
}

pub(crate) enum TableKind {
    Cached {
        shards: Vec<Mutex<Shard>>,
        dram_rows: u64,
        pmem_rows: u64,
    },
    Pinned {
        chunks: Vec<Mutex<Chunk>>,
        rows_per_chunk: u64,
    },
}

struct PendingRow {
    gen: u64,
    bytes: Box<[u8]>,
}

pub(crate) struct Shard {
    dram: SlotCache,
    pmem: Option<SlotCache>,
    pending: HashMap<u64, PendingRow>,
    /// Rows whose newest written copy is in the row log, and its block.
    logged: HashMap<u64, u32>,
    /// Pending rows retired after their SSD write completed.
    wb_seq: u64,
    /// Generation of the next pending row.
    next_gen: u64,
}

pub(crate) struct Chunk {
    first_row: u64,
    rows: usize,
    slab: Slab,
    dirty: Vec<u64>,
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
            Loc::Home(e.layout.group_of(self.id))
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
}

/// Per-call counts and scratch buffers (kept out of the shards, so that a
/// shard costs only its cache arrays).
struct Ctx {
    c: Local,
    new_pending: usize,
    pending_delta: isize,
    spill: Spill,
    spill2: Spill,
    scratch: Vec<u8>,
}

impl Ctx {
    fn new() -> Ctx {
        Ctx {
            c: Local::default(),
            new_pending: 0,
            pending_delta: 0,
            spill: Spill::default(),
            spill2: Spill::default(),
            scratch: Vec::new(),
        }
    }
}

/// Positions `0..ids.len()` ordered by shard (stable: each shard sees its
/// ids in batch order), and the start of each shard's run.
fn by_shard(ids: &[u64], n: usize, shard_of: impl Fn(u64) -> usize) -> (Vec<u32>, Vec<u32>) {
    let sh: Vec<u32> = ids.iter().map(|&id| shard_of(id) as u32).collect();
    let mut start = vec![0u32; n + 1];
    for &s in &sh {
        start[s as usize + 1] += 1;
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut next = start.clone();
    let mut order = vec![0u32; ids.len()];
    for (pos, &s) in sh.iter().enumerate() {
        order[next[s as usize] as usize] = pos as u32;
        next[s as usize] += 1;
    }
    (order, start)
}

impl Shard {
    /// The row-log block of `id`'s newest written copy, or [`NOT_LOGGED`].
    fn logged_at(&self, id: u64) -> u32 {
        if self.logged.is_empty() {
            return NOT_LOGGED;
        }
        self.logged.get(&id).copied().unwrap_or(NOT_LOGGED)
    }

    /// Add a dirty row leaving the cache tiers to the pending map.
    fn add_pending(
        pending: &mut HashMap<u64, PendingRow>,
        next_gen: &mut u64,
        id: u64,
        bytes: &[u8],
        ctx: &mut Ctx,
    ) {
        *next_gen += 1;
        let old = pending.insert(
            id,
            PendingRow {
                gen: *next_gen,
                bytes: bytes.into(),
            },
        );
        if old.is_none() {
            ctx.pending_delta += bytes.len() as isize;
        }
        ctx.new_pending += 1;
    }

    /// Insert a row into DRAM; DRAM's victim moves to PMem (or pending if
    /// dirty and there is no PMem), PMem's victim to pending if dirty.
    fn insert_dram(&mut self, id: u64, src: &[u8], dirty: bool, ctx: &mut Ctx) -> usize {
        let Shard {
            dram,
            pmem,
            pending,
            next_gen,
            ..
        } = self;
        let mut spill = std::mem::take(&mut ctx.spill);
        spill.clear();
        let slot = dram.insert(id, src, dirty, &mut spill);
        ctx.c.dram_inserts += 1;
        if let Some(&(vid, vdirty)) = spill.rows.first() {
            ctx.c.dram_evictions += 1;
            ctx.c.dram_dirty_evictions += vdirty as u64;
            match pmem {
                Some(p) => {
                    let mut spill2 = std::mem::take(&mut ctx.spill2);
                    spill2.clear();
                    p.insert(vid, &spill.bytes, vdirty, &mut spill2);
                    ctx.c.pmem_inserts += 1;
                    if let Some(&(wid, wdirty)) = spill2.rows.first() {
                        ctx.c.pmem_evictions += 1;
                        if wdirty {
                            ctx.c.pmem_dirty_evictions += 1;
                            Self::add_pending(pending, next_gen, wid, &spill2.bytes, ctx);
                        }
                    }
                    ctx.spill2 = spill2;
                }
                None if vdirty => Self::add_pending(pending, next_gen, vid, &spill.bytes, ctx),
                None => {}
            }
        }
        ctx.spill = spill;
        slot
    }

    /// The DRAM slot of `id`, moving it up from PMem or pending if it is there.
    #[inline]
    fn locate(&mut self, id: u64, ctx: &mut Ctx) -> Option<usize> {
        if let Some(s) = self.dram.get(id) {
            self.dram.touch(s);
            ctx.c.dram_hits += 1;
            return Some(s);
        }
        self.locate_below(id, ctx)
    }

    fn locate_below(&mut self, id: u64, ctx: &mut Ctx) -> Option<usize> {
        let mut tmp = std::mem::take(&mut ctx.scratch);
        let from_pmem = self.pmem.as_mut().and_then(|p| p.take(id, &mut tmp));
        let found = if let Some(dirty) = from_pmem {
            ctx.c.pmem_hits += 1;
            Some(self.insert_dram(id, &tmp, dirty, ctx))
        } else if let Some(p) = self.pending.remove(&id) {
            ctx.c.pending_hits += 1;
            ctx.pending_delta -= p.bytes.len() as isize;
            Some(self.insert_dram(id, &p.bytes, true, ctx))
        } else {
            None
        };
        ctx.scratch = tmp;
        found
    }
}

impl Chunk {
    #[inline]
    fn row(&self, id: u64, rb: usize) -> &[u8] {
        let i = (id - self.first_row) as usize;
        &self.slab.bytes()[i * rb..(i + 1) * rb]
    }
    #[inline]
    fn row_mut(&mut self, id: u64, rb: usize) -> &mut [u8] {
        let i = (id - self.first_row) as usize;
        &mut self.slab.bytes_mut()[i * rb..(i + 1) * rb]
    }
    fn mark(&mut self, local_group: usize) {
        self.dirty[local_group / 64] |= 1 << (local_group % 64);
    }
}

/// Number of shards for a cached table.
fn shard_count(
    name: &str,
    dram_rows: u64,
    pmem_rows: u64,
    requested: Option<usize>,
) -> Result<usize> {
    let max = MAX_SHARD_ROWS as u64;
    let need = dram_rows.div_ceil(max).max(pmem_rows.div_ceil(max)).max(1);
    let want = requested
        .map(|r| r as u64)
        .unwrap_or_else(|| (dram_rows / 1024).clamp(1, 64));
    let n = want.max(need).min(dram_rows);
    if n < need {
        return Err(Error::config(format!(
            "table {name:?}: {pmem_rows} PMem rows need {need} shards, but the DRAM share holds only {dram_rows} rows (one per shard at least)"
        )));
    }
    Ok(n as usize)
}

/// Split `total` over `n` parts as evenly as possible.
fn part(total: u64, n: usize, i: usize) -> usize {
    (total / n as u64 + u64::from((i as u64) < total % n as u64)) as usize
}

pub(crate) struct TableSetup<'a> {
    pub entry: TableEntry,
    pub cfg: TableConfig,
    pub dram_rows: u64,
    pub pmem_rows: u64,
    pub dram_policy: PolicyKind,
    pub pmem_policy: PolicyKind,
    pub shards: Option<usize>,
    pub pmem: Option<&'a mut PmemFile>,
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
    pub(crate) fn new(s: TableSetup<'_>) -> Result<Table> {
        let e = &s.entry;
        let rb = e.layout.row_bytes as usize;
        let dim = e.dim as usize;
        let mut pmem = s.pmem;
        let mut pmem_region = |len: usize, what: &str| -> Result<Slab> {
            pmem.as_mut()
                .and_then(|p| p.region(len))
                .map(Slab::Pmem)
                .ok_or_else(|| {
                    Error::config(format!(
                        "table {:?}: PMem file too small for {what}",
                        e.name
                    ))
                })
        };
        let kind = match s.cfg.placement {
            Placement::Cached => {
                let n = shard_count(&e.name, s.dram_rows, s.pmem_rows, s.shards)?;
                let mut shards = Vec::with_capacity(n);
                for i in 0..n {
                    let dcap = part(s.dram_rows, n, i);
                    let pcap = part(s.pmem_rows, n, i);
                    let dram = SlotCache::new(dcap, rb, s.dram_policy, Slab::dram(dcap * rb));
                    let pmem = if pcap > 0 {
                        let slab = pmem_region(pcap * rb, "its cache")?;
                        Some(SlotCache::new(pcap, rb, s.pmem_policy, slab))
                    } else {
                        None
                    };
                    shards.push(Mutex::new(Shard {
                        dram,
                        pmem,
                        pending: HashMap::new(),
                        logged: HashMap::new(),
                        wb_seq: 0,
                        next_gen: 0,
                    }));
                }
                TableKind::Cached {
                    shards,
                    dram_rows: s.dram_rows,
                    pmem_rows: s.pmem_rows,
                }
            }
            Placement::PinnedDram | Placement::PinnedPmem => {
                let rpc = GROUPS_PER_CHUNK * e.layout.rows_per_group as u64;
                let nchunks = e.rows.div_ceil(rpc);
                let mut chunks = Vec::with_capacity(nchunks as usize);
                for c in 0..nchunks {
                    let first_row = c * rpc;
                    let rows = (e.rows - first_row).min(rpc) as usize;
                    let slab = if s.cfg.placement == Placement::PinnedDram {
                        Slab::dram(rows * rb)
                    } else {
                        pmem_region(rows * rb, "the pinned table")?
                    };
                    chunks.push(Mutex::new(Chunk {
                        first_row,
                        rows,
                        slab,
                        dirty: vec![0; (GROUPS_PER_CHUNK as usize).div_ceil(64)],
                    }));
                }
                TableKind::Pinned {
                    chunks,
                    rows_per_chunk: rpc,
                }
            }
        };
        let pending_limit = ((s.dram_rows as usize).saturating_mul(rb) / 4).max(64 * rb);
        let wb_batch = (pending_limit / 4).clamp(rb, 4 << 20);
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
            log_rows,
            index: s.index,
            name: e.name.clone(),
            dim,
            row_bytes: rb,
            elem: crate::Elem::from_format(e.elem),
            weight_bytes: e.elem.weight_bytes(e.dim) as usize,
            sr_epoch: AtomicU64::new(s.rounding_calls),
            kind,
            counters: Counters::default(),
            wb_lock: Mutex::new(AlignedBuf::new(BLOCK_SIZE)),
            wb_epoch: AtomicU64::new(0),
            pending_bytes: AtomicI64::new(0),
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
                shards[self.shard_of(id, n)].lock().dram.unpin(id);
            }
        }
    }

    /// Rows pinned in DRAM now.
    /// Whether the table is pinned whole to a memory tier.
    pub(crate) fn is_pinned(&self) -> bool {
        matches!(self.kind, TableKind::Pinned { .. })
    }

    pub(crate) fn pinned_rows(&self) -> usize {
        match &self.kind {
            TableKind::Cached { shards, .. } => shards.iter().map(|s| s.lock().dram.pinned()).sum(),
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

    /// Displaced dirty rows waiting for a write-back, and the limit past
    /// which updates write back first (and fail if that fails).
    pub(crate) fn pending(&self) -> (u64, u64) {
        let rb = self.row_bytes.max(1) as u64;
        let bytes = self.pending_bytes.load(Ordering::Relaxed).max(0) as u64;
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

    #[inline]
    fn shard_of(&self, id: u64, n: usize) -> usize {
        ((mix64(id) as u128 * n as u128) >> 64) as usize
    }

    /// Tier occupancy: (dram resident, dram capacity, dram bookkeeping,
    /// pmem resident, pmem capacity, pmem bookkeeping).
    pub(crate) fn occupancy(&self) -> [u64; 6] {
        match &self.kind {
            TableKind::Cached {
                shards,
                dram_rows,
                pmem_rows,
            } => {
                let mut o = [0u64, *dram_rows, 0, 0, *pmem_rows, 0];
                for sh in shards {
                    let sh = sh.lock();
                    o[0] += sh.dram.len() as u64;
                    o[2] += sh.dram.meta_bytes() as u64;
                    if let Some(p) = &sh.pmem {
                        o[3] += p.len() as u64;
                        o[5] += p.meta_bytes() as u64;
                    }
                }
                o
            }
            TableKind::Pinned { chunks, .. } => {
                let rows = self.entry.rows;
                let meta = (chunks.len() * (std::mem::size_of::<Mutex<Chunk>>() + 8)) as u64;
                if self.cfg.placement == Placement::PinnedDram {
                    [rows, rows, meta, 0, 0, 0]
                } else {
                    [0, 0, 0, rows, rows, meta]
                }
            }
        }
    }

    /// Dirty rows held in memory (cached tables: DRAM + PMem + pending).
    pub(crate) fn dirty_rows(&self) -> u64 {
        match &self.kind {
            TableKind::Cached { shards, .. } => shards
                .iter()
                .map(|s| {
                    let s = s.lock();
                    (s.dram.dirty_count()
                        + s.pmem.as_ref().map_or(0, |p| p.dirty_count())
                        + s.pending.len()) as u64
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
