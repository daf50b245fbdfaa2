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

    /// Encode `w` (`dim` f32s) into a row's weight bytes.
    #[inline]
    /// Decode `row` into the output slot of every miss of `run`.
    fn decode_misses(&self, row: &[u8], run: &[Miss], out: &mut [f32]) {
        let dim = self.dim;
        for m in run {
            self.decode(row, &mut out[m.k * dim..(m.k + 1) * dim]);
        }
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

    /// Fill a pinned table from SSD (or with initial values when fresh).
    fn load_pinned(&self, ssd: &Ssd, fresh: bool) -> Result<()> {
        let TableKind::Pinned { chunks, .. } = &self.kind else {
            return Ok(());
        };
        let e = &self.entry;
        let rb = self.row_bytes;
        if fresh {
            for ch in chunks {
                let mut ch = ch.lock();
                for i in 0..ch.rows {
                    let id = ch.first_row + i as u64;
                    init_row_bytes(
                        e.init,
                        e.init_scale,
                        e.seed,
                        id,
                        self.elem,
                        self.dim,
                        ch.row_mut(id, rb),
                    );
                }
            }
            return Ok(());
        }
        let total_groups = e.rows.div_ceil(e.layout.rows_per_group as u64);
        let mut buf = AlignedBuf::new(BLOCK_SIZE);
        let gb = e.layout.group_bytes();
        let rpc = GROUPS_PER_CHUNK * e.layout.rows_per_group as u64;
        let mut g0 = 0u64;
        while g0 < total_groups {
            let g1 = (g0 + LOAD_BATCH_GROUPS as u64).min(total_groups);
            let groups: Vec<u64> = (g0..g1).collect();
            ssd.read_groups(e, &groups, &mut buf)?;
            for (gi, &g) in groups.iter().enumerate() {
                let blocks = &buf.as_slice()[gi * gb..(gi + 1) * gb];
                let first = g * e.layout.rows_per_group as u64;
                let state = self.checked_group(ssd, g, blocks)?;
                let last = (first + e.layout.rows_per_group as u64).min(e.rows);
                for id in first..last {
                    let mut ch = chunks[(id / rpc) as usize].lock();
                    row_from_group(e, state, blocks, id, ch.row_mut(id, rb));
                }
            }
            g0 = g1;
        }
        Ok(())
    }

    /// Look up `ids` (validated) into `out`.
    pub(crate) fn lookup(&self, ssd: &Ssd, ids: &[u64], out: &mut [f32]) -> Result<()> {
        self.lookup_pinning(ssd, ids, out, None)
    }

    /// [`Table::lookup`] that also pins each row in DRAM (up to the pin
    /// limit) and records the ids it pinned in `pins`, one entry per pin.
    pub(crate) fn lookup_pinning(
        &self,
        ssd: &Ssd,
        ids: &[u64],
        out: &mut [f32],
        mut pins: Option<&mut Vec<u64>>,
    ) -> Result<()> {
        let dim = self.dim;
        let rb = self.row_bytes;
        let mut ctx = Ctx::new();
        ctx.c.lookups = ids.len() as u64;
        let pinned_before = pins.as_deref().map(|p| p.len());
        if pinned_before.is_some() {
            ctx.c.prefetched = ids.len() as u64;
        }
        match &self.kind {
            TableKind::Pinned {
                chunks,
                rows_per_chunk,
            } => {
                for (pos, &id) in ids.iter().enumerate() {
                    let ch = chunks[(id / rows_per_chunk) as usize].lock();
                    self.decode(ch.row(id, rb), &mut out[pos * dim..(pos + 1) * dim]);
                }
                ctx.c.dram_hits = ids.len() as u64;
            }
            TableKind::Cached { shards, .. } => {
                let misses = self.probe(shards, ids, out, &mut ctx, pins.as_deref_mut());
                let r = if misses.is_empty() {
                    Ok(())
                } else {
                    self.resolve_misses(ssd, shards, misses, &mut ctx, |sh, slot, run| {
                        if let Some(p) = pins.as_deref_mut() {
                            if sh.dram.pin(slot) {
                                p.push(run[0].id);
                            }
                        }
                        self.decode_misses(sh.dram.row(slot), run, out);
                    })
                };
                if let (Some(b), Some(p)) = (pinned_before, pins.as_deref()) {
                    ctx.c.prefetch_pinned = (p.len() - b) as u64;
                }
                self.finish(ssd, &mut ctx);
                r?;
            }
        }
        ctx.c.publish(&self.counters);
        Ok(())
    }

    /// Serve `ids`' DRAM and PMem hits of a cached table into `out`
    /// (pinning them when `pins` is given) and return the misses.
    fn probe(
        &self,
        shards: &[Mutex<Shard>],
        ids: &[u64],
        out: &mut [f32],
        ctx: &mut Ctx,
        mut pins: Option<&mut Vec<u64>>,
    ) -> Vec<Miss> {
        let dim = self.dim;
        let mut misses = Vec::new();
        // One lock per shard per batch, not one per id.
        let n = shards.len();
        let (order, start) = by_shard(ids, n, |id| self.shard_of(id, n));
        for s in 0..n {
            let run = &order[start[s] as usize..start[s + 1] as usize];
            if run.is_empty() {
                continue;
            }
            let mut sh = shards[s].lock();
            // Pipelined, so that cache misses overlap: the index
            // entry 12 ids ahead, the keys it points to 8 ahead, the
            // row 4 ahead.
            for &p in run.iter().take(12) {
                sh.dram.prefetch_index(ids[p as usize]);
            }
            for (j, &pos) in run.iter().enumerate() {
                if let Some(&p) = run.get(j + 12) {
                    sh.dram.prefetch_index(ids[p as usize]);
                }
                if let Some(&p) = run.get(j + 8) {
                    sh.dram.prefetch_keys(ids[p as usize]);
                }
                if let Some(&p) = run.get(j + 4) {
                    sh.dram.prefetch_row(ids[p as usize]);
                }
                let pos = pos as usize;
                let id = ids[pos];
                match sh.locate(id, ctx) {
                    Some(slot) => {
                        if let Some(p) = pins.as_deref_mut() {
                            if sh.dram.pin(slot) {
                                p.push(id);
                            }
                        }
                        self.decode(sh.dram.row(slot), &mut out[pos * dim..(pos + 1) * dim])
                    }
                    None => misses.push(Miss {
                        id,
                        seq: sh.wb_seq,
                        k: pos,
                        log: sh.logged_at(id),
                    }),
                }
            }
        }
        misses
    }

    /// Publish pending accounting and, once enough displaced dirty rows have
    /// gathered, write them back in one batch. Write-back errors are not the
    /// caller's: the rows stay pending (in memory, authoritative) and are
    /// retried by the next write-back or flush.
    fn finish(&self, ssd: &Ssd, ctx: &mut Ctx) {
        let pending = self.publish_pending(ctx);
        if ctx.new_pending > 0 && pending >= self.wb_batch && self.write_back(ssd).is_err() {
            ctx.c.writeback_errors += 1;
        }
    }

    /// Add this call's pending-byte delta to the table's; returns the total.
    /// Calls publish their deltas in any order, so the total can dip below
    /// zero for a moment; it is read clamped at zero.
    fn publish_pending(&self, ctx: &mut Ctx) -> usize {
        let d = std::mem::take(&mut ctx.pending_delta) as i64;
        (self.pending_bytes.fetch_add(d, Ordering::Relaxed) + d).max(0) as usize
    }

    /// Read missed rows from SSD, install them in DRAM, and call
    /// `act(shard, slot, misses_of_that_id)` under the shard lock. Rows are
    /// installed group by group as each read completes, while the batch's
    /// other reads are still in flight.
    fn resolve_misses(
        &self,
        ssd: &Ssd,
        shards: &[Mutex<Shard>],
        misses: Vec<Miss>,
        ctx: &mut Ctx,
        mut act: impl FnMut(&mut Shard, usize, &[Miss]),
    ) -> Result<()> {
        let gb = self.entry.layout.group_bytes();
        let mut buf = ssd.take_buf();
        let r = self.resolve_misses_in(ssd, shards, misses, ctx, &mut act, gb, &mut buf);
        ssd.put_buf(buf);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn resolve_misses_in(
        &self,
        ssd: &Ssd,
        shards: &[Mutex<Shard>],
        mut misses: Vec<Miss>,
        ctx: &mut Ctx,
        act: &mut impl FnMut(&mut Shard, usize, &[Miss]),
        gb: usize,
        buf: &mut AlignedBuf,
    ) -> Result<()> {
        let mut row = vec![0u8; self.row_bytes];
        let mut attempts = 0;
        while !misses.is_empty() {
            attempts += 1;
            let (locs, ranges) = self.group_misses(&mut misses);
            let epoch = self.wb_epoch.load(Ordering::Acquire);
            let mut retry: Vec<Miss> = Vec::new();
            let mut corrupt: Option<Error> = None;
            let misses_ref = &misses;
            let offsets: Vec<u64> = locs
                .iter()
                .map(|&l| ssd.loc_offset(&self.entry, l))
                .collect();
            let read = ssd.read_extents_each(&offsets, gb, buf, &mut |gi, blocks| {
                let (lo, hi) = ranges[gi];
                let mut i = Install {
                    shards,
                    epoch,
                    attempts,
                    row: &mut row,
                    ctx: &mut *ctx,
                    retry: &mut retry,
                    corrupt: &mut corrupt,
                };
                self.install_group(ssd, &mut i, locs[gi], blocks, &misses_ref[lo..hi], act);
            });
            ctx.c.ssd_read_ops += locs.len() as u64;
            ctx.c.ssd_bytes_read += (locs.len() * gb) as u64;
            read?;
            self.end_round(corrupt, attempts, &retry)?;
            misses = retry;
        }
        Ok(())
    }

    /// Sort `misses` by where they read (home group or row-log block) and
    /// id, and split them by place: the places in order, and the range of
    /// `misses` in each.
    fn group_misses(&self, misses: &mut [Miss]) -> (Vec<Loc>, Vec<(usize, usize)>) {
        let e = &self.entry;
        misses.sort_unstable_by_key(|m| (m.loc(e), m.id));
        let mut locs: Vec<Loc> = Vec::new();
        let mut ranges: Vec<(usize, usize)> = Vec::new();
        for (i, m) in misses.iter().enumerate() {
            let l = m.loc(e);
            if locs.last() != Some(&l) {
                locs.push(l);
                ranges.push((i, i));
            }
            ranges.last_mut().expect("pushed").1 = i + 1;
        }
        (locs, ranges)
    }

    /// The outcome of one round of miss reads: the first corruption seen,
    /// or an error if misses still race with write-backs after the last
    /// attempt.
    fn end_round(&self, corrupt: Option<Error>, attempts: usize, retry: &[Miss]) -> Result<()> {
        if let Some(err) = corrupt {
            return Err(err);
        }
        if attempts >= MAX_MISS_RETRIES && !retry.is_empty() {
            return Err(Error::config(format!(
                "table {:?}: row {} kept racing with write-backs",
                self.name, retry[0].id
            )));
        }
        Ok(())
    }

    /// A row-log block as read: checked (sealed, its number, an epoch that
    /// may be read, this table's rows), then decoded.
    fn checked_log_block<'b>(
        &self,
        ssd: &Ssd,
        b: u32,
        blocks: &'b [u8],
    ) -> std::result::Result<embtier_format::rowlog::LogBlock<'b>, embtier_format::FormatError>
    {
        let lb = ssd.check_log_block(b, blocks)?;
        let offset = ssd.log_block(b) * BLOCK_SIZE as u64;
        if lb.table != self.index || lb.row_bytes != self.row_bytes {
            return Err(embtier_format::FormatError::InvalidField {
                field: "table",
                offset: offset + embtier_format::rowlog::TABLE as u64,
                value: format!(
                    "{} with rows of {} bytes, where the index says table {} ({} bytes)",
                    lb.table, lb.row_bytes, self.index, self.row_bytes
                ),
            });
        }
        Ok(lb)
    }

    /// Row `id`'s bytes in the log block `lb` read at `loc`, which the log
    /// map says holds it.
    fn logged_row<'b>(
        &self,
        ssd: &Ssd,
        loc: Loc,
        lb: &'b embtier_format::rowlog::LogBlock<'_>,
        id: u64,
    ) -> std::result::Result<&'b [u8], embtier_format::FormatError> {
        match lb.ids.iter().position(|&x| x == id) {
            Some(k) => Ok(lb.row(k)),
            None => Err(embtier_format::FormatError::InvalidField {
                field: "row log block",
                offset: ssd.loc_offset(&self.entry, loc),
                value: format!("does not hold row {id}, which the log map places there"),
            }),
        }
    }

    /// Install the misses `run` (sorted by id, all read from `loc`) from
    /// the blocks just read there, and call `act` for each id under its
    /// shard lock. Misses that raced with a write-back go to `i.retry`; a
    /// place that fails its checks sets `i.corrupt`.
    fn install_group(
        &self,
        ssd: &Ssd,
        i: &mut Install<'_>,
        loc: Loc,
        blocks: &[u8],
        run: &[Miss],
        act: &mut impl FnMut(&mut Shard, usize, &[Miss]),
    ) {
        let e = &self.entry;
        if i.corrupt.is_some() {
            return;
        }
        let corrupt = |source| Error::Corrupt {
            path: ssd.path().to_path_buf(),
            table: self.name.clone(),
            id: run[0].id,
            source,
        };
        let mut home = None;
        let mut log = None;
        match loc {
            Loc::Home(g) => match ssd.check_group(e, g, blocks) {
                Ok(s) => home = Some(s),
                Err(source) => {
                    let now = self.wb_epoch.load(Ordering::Acquire);
                    if (now != i.epoch || now % 2 == 1) && i.attempts < MAX_MISS_RETRIES {
                        // Raced with a write of this group: read it again.
                        i.retry.extend_from_slice(run);
                    } else {
                        *i.corrupt = Some(corrupt(source));
                    }
                    return;
                }
            },
            // A log block is never rewritten while a map points at it.
            Loc::Log(b) => match self.checked_log_block(ssd, b, blocks) {
                Ok(lb) => log = Some(lb),
                Err(source) => {
                    *i.corrupt = Some(corrupt(source));
                    return;
                }
            },
        }
        for same in run.chunk_by(|a, b| a.id == b.id) {
            let id = same[0].id;
            match (&home, &log) {
                (Some(state), _) => row_from_group(e, *state, blocks, id, i.row),
                (_, Some(lb)) => match self.logged_row(ssd, loc, lb, id) {
                    Ok(bytes) => i.row.copy_from_slice(bytes),
                    Err(source) => {
                        *i.corrupt = Some(corrupt(source));
                        return;
                    }
                },
                _ => unreachable!("one of the two was read"),
            }
            let mut sh = i.shards[self.shard_of(id, i.shards.len())].lock();
            let slot = if let Some(s) = sh.locate(id, i.ctx) {
                s // someone brought it in meanwhile: theirs is newer
            } else if sh.wb_seq != same[0].seq {
                // Written back meanwhile: read it again, from where it is now.
                let (seq, log) = (sh.wb_seq, sh.logged_at(id));
                i.retry.extend(same.iter().map(|m| Miss { seq, log, ..*m }));
                continue;
            } else {
                i.ctx.c.ssd_rows_read += 1;
                if log.is_some() {
                    i.ctx.c.log_rows_read += 1;
                }
                sh.insert_dram(id, i.row, false, i.ctx)
            };
            act(&mut sh, slot, same);
        }
    }

    /// Apply `f(row_bytes, k)` to the rows `items = [(id, k)]` (ids unique,
    /// validated), marking them dirty. `overwrite` says `f` replaces the whole
    /// row, so a missing row need not be read first.
    pub(crate) fn modify(
        &self,
        ssd: &Ssd,
        items: &[(u64, usize)],
        overwrite: bool,
        f: impl Fn(&mut [u8], usize),
    ) -> Result<()> {
        let rb = self.row_bytes;
        let mut ctx = Ctx::new();
        ctx.c.updates = items.len() as u64;
        match &self.kind {
            TableKind::Pinned {
                chunks,
                rows_per_chunk,
            } => {
                let rpg = self.entry.layout.rows_per_group as u64;
                for &(id, k) in items {
                    let mut ch = chunks[(id / rows_per_chunk) as usize].lock();
                    f(ch.row_mut(id, rb), k);
                    let lg = ((id - ch.first_row) / rpg) as usize;
                    ch.mark(lg);
                }
                ctx.c.dram_hits = items.len() as u64;
            }
            TableKind::Cached { shards, .. } => {
                // Back-pressure: while write-backs fail (a full disk), refuse
                // new updates before touching anything.
                if self.pending_bytes.load(Ordering::Relaxed) > self.pending_limit as i64 {
                    self.write_back(ssd)?;
                }
                let zero = vec![0u8; rb];
                let mut misses = Vec::new();
                for &(id, k) in items {
                    let mut sh = shards[self.shard_of(id, shards.len())].lock();
                    let slot = match sh.locate(id, &mut ctx) {
                        Some(s) => s,
                        None if overwrite => sh.insert_dram(id, &zero, true, &mut ctx),
                        None => {
                            misses.push(Miss {
                                id,
                                seq: sh.wb_seq,
                                k,
                                log: sh.logged_at(id),
                            });
                            continue;
                        }
                    };
                    f(sh.dram.row_mut(slot), k);
                    sh.dram.set_dirty(slot);
                }
                let r = if misses.is_empty() {
                    Ok(())
                } else {
                    self.resolve_misses(ssd, shards, misses, &mut ctx, |sh, slot, run| {
                        for m in run {
                            f(sh.dram.row_mut(slot), m.k);
                        }
                        sh.dram.set_dirty(slot);
                    })
                };
                self.finish(ssd, &mut ctx);
                r?;
            }
        }
        ctx.c.publish(&self.counters);
        Ok(())
    }

    /// Write every pending row of a cached table to SSD.
    pub(crate) fn write_back(&self, ssd: &Ssd) -> Result<()> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Ok(());
        };
        let mut buf = self.wb_lock.lock();
        let mut snap: Vec<(u64, u64, usize)> = Vec::new(); // id, gen, offset in bytes
        let mut bytes: Vec<u8> = Vec::new();
        for sh in shards {
            let sh = sh.lock();
            for (&id, p) in &sh.pending {
                snap.push((id, p.gen, bytes.len()));
                bytes.extend_from_slice(&p.bytes);
            }
        }
        if snap.is_empty() {
            return Ok(());
        }
        snap.sort_unstable_by_key(|s| s.0);
        let rb = self.row_bytes;
        let rows: Vec<(u64, &[u8])> = snap
            .iter()
            .map(|&(id, _, o)| (id, &bytes[o..o + rb]))
            .collect();
        // Rows of partly covered groups are appended to the row log while
        // it has room, in chunks of at most WB_CHUNK_BYTES of log blocks.
        // Whole groups (a bulk load, a dense table) go home: their write
        // needs no read, and leaves nothing for a merge to do.
        let mut rows = rows;
        if self.log_rows > 0 {
            let e = &self.entry;
            let rpg = e.layout.rows_per_group as u64;
            let (mut home, mut partial): (Vec<RowRef<'_>>, Vec<RowRef<'_>>) = (vec![], vec![]);
            for run in rows.chunk_by(|a, b| e.layout.group_of(a.0) == e.layout.group_of(b.0)) {
                let g = e.layout.group_of(run[0].0);
                let whole = run.len() as u64 == (e.rows - g * rpg).min(rpg);
                if whole { &mut home } else { &mut partial }.extend_from_slice(run);
            }
            let per_chunk = (WB_CHUNK_BYTES / BLOCK_SIZE) * self.log_rows;
            let mut start = 0;
            while start < partial.len() {
                let end = (start + per_chunk).min(partial.len());
                match self.append_log(ssd, shards, &partial[start..end], &mut buf)? {
                    0 => break, // no room: the rest goes home
                    n => start += n,
                }
            }
            home.extend_from_slice(&partial[start..]);
            home.sort_unstable_by_key(|r| r.0);
            rows = home;
        }
        let mut start = 0;
        // Written home in chunks of at most WB_CHUNK_BYTES of block groups:
        // scattered rows cost a whole group each, so a 64 MiB flush of
        // 256-byte rows would otherwise stage a 1 GiB buffer (and keep it in
        // `wb_lock`).
        let gb = self.entry.layout.group_bytes();
        let max_groups = (WB_CHUNK_BYTES / gb).max(1);
        while start < rows.len() {
            let mut end = start;
            let mut groups = 0;
            let mut last = u64::MAX;
            while end < rows.len() {
                let g = self.entry.layout.group_of(rows[end].0);
                if g != last {
                    if groups == max_groups {
                        break;
                    }
                    groups += 1;
                    last = g;
                }
                end += 1;
            }
            self.write_rows(ssd, &rows[start..end], &mut buf)?;
            start = end;
        }
        let mut freed = 0;
        for &(id, gen, _) in &snap {
            let mut sh = shards[self.shard_of(id, shards.len())].lock();
            if sh.pending.get(&id).is_some_and(|p| p.gen == gen) {
                sh.pending.remove(&id);
                sh.wb_seq += 1;
                freed += rb;
            }
        }
        self.pending_bytes
            .fetch_sub(freed as i64, Ordering::Relaxed);
        Ok(())
    }

    /// Append `rows` (sorted by id, unique), or as many of the first of
    /// them as the log has room for, to the row log, packed `log_rows` to a
    /// block, and point the shards' log maps at them. Returns the rows
    /// appended (0: the log is full or closed, nothing was written).
    /// A failed append closes the log until the next merge, so that its
    /// blocks are never committed; the rows stay pending. Caller holds
    /// `wb_lock` (and passes its buffer) and the store's gate.
    fn append_log(
        &self,
        ssd: &Ssd,
        shards: &[Mutex<Shard>],
        rows: &[RowRef<'_>],
        buf: &mut AlignedBuf,
    ) -> Result<usize> {
        ssd.durable().check_writable()?;
        let rb = self.row_bytes;
        let Some((first, n)) = ssd.log().reserve(rows.len().div_ceil(self.log_rows) as u64) else {
            return Ok(0);
        };
        let n = n as usize;
        let rows = &rows[..rows.len().min(n * self.log_rows)];
        buf.ensure(n * BLOCK_SIZE);
        let epoch = ssd.durable().seal_epoch();
        let mut ids = Vec::with_capacity(self.log_rows);
        let mut bytes = Vec::with_capacity(self.log_rows * rb);
        for (bi, chunk) in rows.chunks(self.log_rows).enumerate() {
            ids.clear();
            bytes.clear();
            for (id, data) in chunk {
                ids.push(*id);
                bytes.extend_from_slice(data);
            }
            let blk = &mut buf.as_mut_slice()[bi * BLOCK_SIZE..(bi + 1) * BLOCK_SIZE];
            embtier_format::rowlog::encode(blk, self.index, rb, &ids, &bytes);
            embtier_format::seal_block(blk, ssd.log_block(first + bi as u32), epoch);
        }
        let at = ssd.log_block(first) * BLOCK_SIZE as u64;
        if let Err(f) = ssd.engine().write_extents(&[at], n * BLOCK_SIZE, buf) {
            ssd.log().close();
            return Err(ssd.err(f));
        }
        for (bi, chunk) in rows.chunks(self.log_rows).enumerate() {
            for (id, _) in chunk {
                let mut sh = shards[self.shard_of(*id, shards.len())].lock();
                sh.logged.insert(*id, first + bi as u32);
            }
        }
        let c = &self.counters;
        c.ssd_write_ops.fetch_add(1, Ordering::Relaxed);
        c.ssd_bytes_written
            .fetch_add((n * BLOCK_SIZE) as u64, Ordering::Relaxed);
        c.ssd_rows_written
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        c.log_rows_written
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        c.log_blocks_written.fetch_add(n as u64, Ordering::Relaxed);
        Ok(rows.len())
    }

    /// Write every logged row to its home group (the newest written copy of
    /// each, which is the log's), emptying the log maps. The caller holds
    /// the store's gate exclusively and has flushed the dirty rows home,
    /// so no newer copy exists anywhere. Returns the rows merged.
    pub(crate) fn merge_log(&self, ssd: &Ssd) -> Result<u64> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Ok(0);
        };
        let mut logged: Vec<(u64, u32)> = Vec::new();
        for sh in shards {
            logged.extend(sh.lock().logged.iter().map(|(&id, &b)| (id, b)));
        }
        if logged.is_empty() {
            return Ok(0);
        }
        logged.sort_unstable();
        let rb = self.row_bytes;
        let mut wb = self.wb_lock.lock();
        let mut lbuf = AlignedBuf::new(BLOCK_SIZE);
        // In id order, so that each home group is written once per chunk;
        // a chunk reads at most WB_CHUNK_BYTES of log blocks.
        for chunk in logged.chunks(WB_CHUNK_BYTES / BLOCK_SIZE) {
            let mut blocks: Vec<u32> = chunk.iter().map(|&(_, b)| b).collect();
            blocks.sort_unstable();
            blocks.dedup();
            let locs: Vec<Loc> = blocks.iter().map(|&b| Loc::Log(b)).collect();
            let offsets: Vec<u64> = locs
                .iter()
                .map(|&l| ssd.loc_offset(&self.entry, l))
                .collect();
            ssd.read_extents_each(&offsets, BLOCK_SIZE, &mut lbuf, &mut |_, _| {})?;
            self.counters
                .ssd_read_ops
                .fetch_add(blocks.len() as u64, Ordering::Relaxed);
            self.counters
                .ssd_bytes_read
                .fetch_add((blocks.len() * BLOCK_SIZE) as u64, Ordering::Relaxed);
            let mut bytes = vec![0u8; chunk.len() * rb];
            for (i, &(id, b)) in chunk.iter().enumerate() {
                let k = blocks.binary_search(&b).expect("read above");
                let raw = &lbuf.as_slice()[k * BLOCK_SIZE..(k + 1) * BLOCK_SIZE];
                let corrupt = |source| Error::Corrupt {
                    path: ssd.path().to_path_buf(),
                    table: self.name.clone(),
                    id,
                    source,
                };
                let lb = self.checked_log_block(ssd, b, raw).map_err(corrupt)?;
                let row = self
                    .logged_row(ssd, Loc::Log(b), &lb, id)
                    .map_err(corrupt)?;
                bytes[i * rb..(i + 1) * rb].copy_from_slice(row);
            }
            let rows: Vec<RowRef<'_>> = chunk
                .iter()
                .enumerate()
                .map(|(i, &(id, _))| (id, &bytes[i * rb..(i + 1) * rb]))
                .collect();
            // Written home: `write_rows` drops each row's map entry.
            self.write_rows(ssd, &rows, &mut wb)?;
        }
        self.counters
            .log_rows_merged
            .fetch_add(logged.len() as u64, Ordering::Relaxed);
        Ok(logged.len() as u64)
    }

    /// Recovery: row `id`'s newest committed copy is `bytes`, in row-log
    /// block `b`. A cached table maps the row there; a pinned table (one
    /// whose placement changed since it was logged) takes the bytes and
    /// marks them dirty. Returns whether the log must be merged at the next
    /// checkpoint (the pinned case).
    pub(crate) fn restore_logged(&self, id: u64, b: u32, bytes: &[u8]) -> bool {
        match &self.kind {
            TableKind::Cached { shards, .. } => {
                shards[self.shard_of(id, shards.len())]
                    .lock()
                    .logged
                    .insert(id, b);
                false
            }
            TableKind::Pinned {
                chunks,
                rows_per_chunk,
            } => {
                let rpg = self.entry.layout.rows_per_group as u64;
                let mut ch = chunks[(id / rows_per_chunk) as usize].lock();
                ch.row_mut(id, self.row_bytes).copy_from_slice(bytes);
                let lg = ((id - ch.first_row) / rpg) as usize;
                ch.mark(lg);
                true
            }
        }
    }

    /// Rows whose newest written copy is in the row log.
    pub(crate) fn logged_rows(&self) -> u64 {
        match &self.kind {
            TableKind::Cached { shards, .. } => {
                shards.iter().map(|s| s.lock().logged.len() as u64).sum()
            }
            TableKind::Pinned { .. } => 0,
        }
    }

    /// Read-modify-write the block groups of `rows` (sorted by id, unique),
    /// and drop their row-log map entries (their logged copies are older).
    /// Caller holds `wb_lock` (and passes its buffer).
    fn write_rows(&self, ssd: &Ssd, rows: &[RowRef<'_>], buf: &mut AlignedBuf) -> Result<()> {
        let e = &self.entry;
        let rpg = e.layout.rows_per_group as u64;
        let gb = e.layout.group_bytes();
        // Groups, partly covered ones (which need a read) first.
        let mut runs: Vec<(u64, &[RowRef<'_>])> = rows
            .chunk_by(|a, b| e.layout.group_of(a.0) == e.layout.group_of(b.0))
            .map(|r| (e.layout.group_of(r[0].0), r))
            .collect();
        let rows_in = |g: u64| (e.rows - g * rpg).min(rpg) as usize;
        runs.sort_by_key(|(g, r)| (r.len() == rows_in(*g), *g));
        let nread = runs.iter().filter(|(g, r)| r.len() < rows_in(*g)).count();
        let groups: Vec<u64> = runs.iter().map(|(g, _)| *g).collect();
        buf.ensure(groups.len() * gb);
        if nread > 0 {
            ssd.read_groups(e, &groups[..nread], buf)?;
            self.counters
                .ssd_read_ops
                .fetch_add(nread as u64, Ordering::Relaxed);
            self.counters
                .ssd_bytes_read
                .fetch_add((nread * gb) as u64, Ordering::Relaxed);
        }
        // Check what was read, and journal it (the old images of groups
        // first overwritten since the last checkpoint) before changing it;
        // `write_groups` journals the groups written whole itself.
        let states = (0..nread)
            .map(|gi| self.checked_group(ssd, groups[gi], &buf.as_slice()[gi * gb..(gi + 1) * gb]))
            .collect::<Result<Vec<_>>>()?;
        ssd.journal(e, &groups[..nread], &buf.as_slice()[..nread * gb])?;
        let mut tmp = vec![0u8; self.row_bytes];
        for (gi, (g, run)) in runs.iter().enumerate() {
            let blocks = &mut buf.as_mut_slice()[gi * gb..(gi + 1) * gb];
            let first = g * rpg;
            if let Some(&state) = states.get(gi) {
                if state == BlockState::Hole {
                    for id in first..first + rows_in(*g) as u64 {
                        row_from_group(e, state, &[], id, &mut tmp);
                        write_group_payload(blocks, e.layout.offset_in_group(id), &tmp);
                    }
                }
            } else {
                blocks.fill(0);
            }
            for (id, data) in run.iter() {
                write_group_payload(blocks, e.layout.offset_in_group(*id), data);
            }
        }
        self.wb_epoch.fetch_add(1, Ordering::AcqRel);
        let r = ssd.write_groups(e, &groups, &mut *buf);
        self.wb_epoch.fetch_add(1, Ordering::AcqRel);
        r?;
        let c = &self.counters;
        c.ssd_write_ops
            .fetch_add(groups.len() as u64, Ordering::Relaxed);
        c.ssd_bytes_written
            .fetch_add((groups.len() * gb) as u64, Ordering::Relaxed);
        c.ssd_rows_written
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        // Nothing is logged while the log is empty: skip the shard locks.
        if let (TableKind::Cached { shards, .. }, true) = (&self.kind, ssd.log().head() > 0) {
            let mut stale = false;
            for (id, _) in rows {
                let mut sh = shards[self.shard_of(*id, shards.len())].lock();
                if !sh.logged.is_empty() {
                    stale |= sh.logged.remove(id).is_some();
                }
            }
            if stale {
                ssd.log().mark_stale();
            }
        }
        Ok(())
    }

    /// Write every dirty row of the table to SSD (no fsync).
    pub(crate) fn flush(&self, ssd: &Ssd) -> Result<()> {
        match &self.kind {
            TableKind::Cached { shards, .. } => {
                let mut ctx = Ctx::new();
                for sh in shards {
                    let mut guard = sh.lock();
                    let Shard {
                        dram,
                        pmem,
                        pending,
                        next_gen,
                        ..
                    } = &mut *guard;
                    let mut add = |id: u64, b: &[u8]| {
                        Shard::add_pending(pending, next_gen, id, b, &mut ctx);
                    };
                    dram.drain_dirty(&mut add);
                    if let Some(p) = pmem {
                        p.drain_dirty(&mut add);
                    }
                    drop(guard);
                    // Bound the memory of a flush: write back every 64 MiB.
                    if ctx.new_pending * self.row_bytes > 64 << 20 {
                        self.finish_flush(ssd, &mut ctx)?;
                    }
                }
                self.finish_flush(ssd, &mut ctx)
            }
            TableKind::Pinned { chunks, .. } => self.flush_pinned(ssd, chunks),
        }
    }

    fn finish_flush(&self, ssd: &Ssd, ctx: &mut Ctx) -> Result<()> {
        self.publish_pending(ctx);
        ctx.new_pending = 0;
        self.write_back(ssd)
    }

    fn flush_pinned(&self, ssd: &Ssd, chunks: &[Mutex<Chunk>]) -> Result<()> {
        let e = &self.entry;
        let rb = self.row_bytes;
        let rpg = e.layout.rows_per_group as u64;
        let gb = e.layout.group_bytes();
        let mut buf = self.wb_lock.lock();
        for ch in chunks {
            let mut c = ch.lock();
            let dirty: Vec<usize> = (0..GROUPS_PER_CHUNK as usize)
                .filter(|&lg| c.dirty[lg / 64] >> (lg % 64) & 1 == 1)
                .collect();
            if dirty.is_empty() {
                continue;
            }
            buf.ensure(dirty.len() * gb);
            let first_group = c.first_row / rpg;
            let mut groups = Vec::with_capacity(dirty.len());
            let mut rows_written = 0u64;
            for (i, &lg) in dirty.iter().enumerate() {
                let g = first_group + lg as u64;
                groups.push(g);
                let blocks = &mut buf.as_mut_slice()[i * gb..(i + 1) * gb];
                blocks.fill(0);
                let first = g * rpg;
                let last = (first + rpg).min(e.rows);
                for id in first..last {
                    write_group_payload(blocks, e.layout.offset_in_group(id), c.row(id, rb));
                }
                rows_written += last - first;
            }
            // Written under the chunk lock: updates to these rows wait, so
            // clearing the dirty bits after success loses nothing.
            ssd.write_groups(e, &groups, &mut buf)?;
            c.dirty.iter_mut().for_each(|w| *w = 0);
            let cs = &self.counters;
            cs.ssd_write_ops
                .fetch_add(groups.len() as u64, Ordering::Relaxed);
            cs.ssd_bytes_written
                .fetch_add((groups.len() * gb) as u64, Ordering::Relaxed);
            cs.ssd_rows_written
                .fetch_add(rows_written, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Check group `g`'s blocks as read, naming the table and the group's
    /// first row in the error.
    fn checked_group(&self, ssd: &Ssd, g: u64, blocks: &[u8]) -> Result<BlockState> {
        ssd.check_group(&self.entry, g, blocks)
            .map_err(|source| Error::Corrupt {
                path: ssd.path().to_path_buf(),
                table: self.name.clone(),
                id: g * self.entry.layout.rows_per_group as u64,
                source,
            })
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
/// One table's part of a multi-table lookup: validated ids and their output.
pub(crate) struct Part<'a> {
    pub table: &'a Table,
    pub ids: &'a [u64],
    pub out: &'a mut [f32],
}

/// A part's round of miss reads in [`lookup_many`].
struct PartRound {
    ctx: Ctx,
    misses: Vec<Miss>,
    locs: Vec<Loc>,
    ranges: Vec<(usize, usize)>,
    epoch: u64,
    retry: Vec<Miss>,
    corrupt: Option<Error>,
}

/// Look up several tables' batches with one submission of every table's
/// SSD misses: all the reads of the batch share the queue, rather than
/// each table draining it before the next starts. The misses of groups of
/// different sizes go in one submission per size.
pub(crate) fn lookup_many(ssd: &Ssd, parts: &mut [Part<'_>]) -> Result<()> {
    let mut rounds: Vec<PartRound> = Vec::with_capacity(parts.len());
    let mut result = Ok(());
    // The DRAM and PMem hits; pinned tables are served whole.
    for p in parts.iter_mut() {
        let t = p.table;
        let mut ctx = Ctx::new();
        ctx.c.lookups = p.ids.len() as u64;
        let mut misses = match &t.kind {
            TableKind::Cached { shards, .. } => t.probe(shards, p.ids, p.out, &mut ctx, None),
            TableKind::Pinned { .. } => {
                if let Err(e) = t.lookup(ssd, p.ids, p.out) {
                    result = Err(e);
                }
                Vec::new()
            }
        };
        let (locs, ranges) = t.group_misses(&mut misses);
        rounds.push(PartRound {
            ctx,
            misses,
            locs,
            ranges,
            epoch: t.wb_epoch.load(Ordering::Acquire),
            retry: Vec::new(),
            corrupt: None,
        });
    }
    // Every part's missed groups, by extent size.
    let mut by_size: std::collections::BTreeMap<usize, Vec<(usize, usize)>> = Default::default();
    for (pi, r) in rounds.iter().enumerate() {
        let gb = parts[pi].table.entry.layout.group_bytes();
        by_size
            .entry(gb)
            .or_default()
            .extend((0..r.locs.len()).map(|gi| (pi, gi)));
    }
    let mut buf = ssd.take_buf();
    let max_row = parts.iter().map(|p| p.table.row_bytes).max().unwrap_or(0);
    let mut row = vec![0u8; max_row];
    for (gb, extents) in &by_size {
        if result.is_err() {
            break;
        }
        let offsets: Vec<u64> = extents
            .iter()
            .map(|&(pi, gi)| ssd.loc_offset(&parts[pi].table.entry, rounds[pi].locs[gi]))
            .collect();
        let read = ssd.read_extents_each(&offsets, *gb, &mut buf, &mut |k, blocks| {
            let (pi, gi) = extents[k];
            let p = &mut parts[pi];
            let t = p.table;
            let out = &mut *p.out;
            let TableKind::Cached { shards, .. } = &t.kind else {
                unreachable!("pinned tables have no misses")
            };
            let r = &mut rounds[pi];
            let (lo, hi) = r.ranges[gi];
            let mut i = Install {
                shards,
                epoch: r.epoch,
                attempts: 1,
                row: &mut row[..t.row_bytes],
                ctx: &mut r.ctx,
                retry: &mut r.retry,
                corrupt: &mut r.corrupt,
            };
            t.install_group(
                ssd,
                &mut i,
                r.locs[gi],
                blocks,
                &r.misses[lo..hi],
                &mut |sh: &mut Shard, slot: usize, run: &[Miss]| {
                    t.decode_misses(sh.dram.row(slot), run, out)
                },
            );
        });
        for &(pi, _) in extents {
            rounds[pi].ctx.c.ssd_read_ops += 1;
            rounds[pi].ctx.c.ssd_bytes_read += *gb as u64;
        }
        if let Err(e) = read {
            result = Err(e);
        }
    }
    ssd.put_buf(buf);
    // Misses that raced with write-backs read again table by table, then
    // every part publishes its accounting, whatever happened.
    for (p, mut r) in parts.iter_mut().zip(rounds) {
        let t = p.table;
        if result.is_ok() {
            let retry = std::mem::take(&mut r.retry);
            let out = &mut *p.out;
            result = t.end_round(r.corrupt.take(), 1, &retry).and_then(|()| {
                match (&t.kind, retry.is_empty()) {
                    (TableKind::Cached { shards, .. }, false) => {
                        t.resolve_misses(ssd, shards, retry, &mut r.ctx, |sh, slot, run| {
                            t.decode_misses(sh.dram.row(slot), run, out)
                        })
                    }
                    _ => Ok(()),
                }
            });
        }
        if matches!(t.kind, TableKind::Cached { .. }) {
            t.finish(ssd, &mut r.ctx);
            r.ctx.c.publish(&t.counters);
        }
    }
    result
}
