//! Multi-tier replay: a trace through a hierarchy of caches (DRAM, PMem)
//! above an SSD, with the store's own policies and the store's batch
//! semantics, so that a simulation predicts what `Store` will count.
//!
//! Batch semantics (those of `Store::lookup` and `Store::apply_sgd`):
//! - lookups of a batch: first every resident id is a hit, in batch order
//!   (a lower-tier hit moves the row up at once); then the missed ids,
//!   deduplicated and in ascending order, are read from SSD and installed.
//!   A duplicate of a missed id in the same batch is also a miss.
//! - updates of a batch: unique ids in ascending order; each is located
//!   (hit) or read and installed (miss), then marked dirty.
//!
//! Tiers are **exclusive** (as the store: a row is in at most one cache
//! tier; DRAM's victims move to PMem, PMem's dirty victims are written back)
//! or **inclusive** (each tier caches the misses of the tier above; dirty
//! victims are written to the tier below, the last tier's to SSD).
//! SSD traffic is counted in 4 KiB blocks: rows per block come from each
//! table's row size, and a batch reads each missed block once.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use embtier::PolicyKind;

use crate::cache::{DenseCache, Victim};
use crate::profile::DeviceProfile;
use crate::trace::{AccessKind, Trace};

/// One cache tier of a hierarchy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierSpec {
    /// The memory it lives in (the engine's own kinds: a new kind of memory
    /// is a variant there; its name also names the device profile).
    pub kind: embtier::MemoryKind,
    /// Eviction policy.
    pub policy: PolicyKind,
    /// Capacity in rows.
    pub rows: u64,
}

/// A hierarchy to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct Hierarchy {
    /// Cache tiers, fastest first.
    pub tiers: Vec<TierSpec>,
    /// Whether an SSD holds every row below the caches (else misses are
    /// counted but not charged to a device).
    pub ssd: bool,
    /// Inclusive tiers (default: exclusive, as the store).
    pub inclusive: bool,
}

impl Hierarchy {
    /// The hierarchy a store of `cfg` builds, for rows of `row_bytes`: the
    /// same tier list (kinds, policies, capacities in rows), exclusive,
    /// over SSD. One global cache per tier: the store's per-table budgets
    /// and shards are not modelled.
    pub fn of_store(cfg: &embtier::StoreConfig, row_bytes: u64) -> Hierarchy {
        Hierarchy {
            tiers: cfg
                .tiers
                .iter()
                .map(|t| TierSpec {
                    kind: t.kind,
                    policy: t.policy,
                    rows: t.capacity.0 / row_bytes.max(1),
                })
                .collect(),
            ssd: true,
            inclusive: false,
        }
    }
}

/// Counts of one cache tier.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TierReport {
    /// Tier name.
    pub name: String,
    /// Policy.
    pub policy: String,
    /// Capacity in rows.
    pub rows: u64,
    /// Accesses that reached this tier.
    pub lookups: u64,
    /// Of those, found here.
    pub hits: u64,
    /// Of those, not found here.
    pub misses: u64,
    /// hits / lookups: the tier's own hit ratio.
    pub hit_ratio: f64,
    /// hits / the row requests of the whole hierarchy (the first tier's
    /// lookups): the share of requests this tier served.
    pub request_share: f64,
    /// Row bytes read from this tier (hits).
    pub bytes_read: u64,
    /// Row bytes written into this tier (inserts, dirty write-downs).
    pub bytes_written: u64,
    /// Rows evicted from this tier.
    pub evictions: u64,
    /// Of those, dirty (written down).
    pub dirty_writebacks: u64,
}

/// Counts of the SSD below the caches.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SsdReport {
    /// Rows read (unique misses per batch).
    pub rows_read: u64,
    /// 4 KiB block reads (unique blocks per batch).
    pub read_ops: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Dirty rows written back.
    pub rows_written: u64,
    /// Block writes (unique blocks per batch; each a read-modify-write).
    pub write_ops: u64,
    /// Bytes written.
    pub bytes_written: u64,
}

/// The outcome of a hierarchy simulation.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HierarchyReport {
    /// Per cache tier.
    pub tiers: Vec<TierReport>,
    /// SSD.
    pub ssd: SsdReport,
    /// Accesses replayed (lookups and updates).
    pub accesses: u64,
    /// Batches replayed.
    pub batches: u64,
    /// Estimated seconds for the whole trace (if a profile was given).
    pub est_seconds: f64,
    /// Estimated seconds per batch.
    pub est_seconds_per_batch: f64,
}

/// Bytes and rows-per-block of each table.
#[derive(Debug, Clone)]
pub struct RowGeometry {
    /// Bytes per row, per table.
    pub row_bytes: Vec<u64>,
}

impl RowGeometry {
    /// From the trace catalog (row bytes, else 4·dim, else `default`).
    pub fn of(trace: &Trace, default: u64) -> RowGeometry {
        RowGeometry {
            row_bytes: trace
                .tables
                .iter()
                .map(|t| crate::trace::row_bytes_of(t, default))
                .collect(),
        }
    }

    /// The SSD block (table, block index) of a row, as the store lays rows out.
    fn block(&self, table: u32, row: u64) -> (u32, u64) {
        let l = embtier_format::RowLayout::for_row_bytes(self.row_bytes[table as usize] as u32);
        (table, l.locate(row).group * l.blocks_per_group as u64)
    }

    fn blocks_per_row(&self, table: u32) -> u64 {
        embtier_format::RowLayout::for_row_bytes(self.row_bytes[table as usize] as u32)
            .blocks_per_group as u64
    }
}

/// Per-batch device activity, for time estimates.
#[derive(Default, Clone)]
struct BatchIo {
    tier_hits: Vec<u64>,
    tier_read: Vec<u64>,
    tier_written: Vec<u64>,
    ssd_ops: u64,
    ssd_read: u64,
    ssd_written: u64,
}

struct Sim<'a> {
    h: &'a Hierarchy,
    geo: &'a RowGeometry,
    tiers: Vec<DenseCache>,
    rep: HierarchyReport,
    /// (table, row) of each dense id.
    origin: &'a [(u32, u64)],
    dirty_out: BTreeSet<(u32, u64)>,
    io: BatchIo,
}

impl Sim<'_> {
    fn rb(&self, id: u32) -> u64 {
        self.geo.row_bytes[self.origin[id as usize].0 as usize]
    }

    /// Insert into tier `i` and push its victims down.
    fn insert_at(&mut self, i: usize, id: u32, dirty: bool) {
        let rb = self.rb(id);
        let mut victims = Vec::new();
        self.tiers[i].insert(id, dirty, &mut victims);
        self.rep.tiers[i].bytes_written += rb;
        self.io.tier_written[i] += rb;
        for v in victims {
            self.evicted_from(i, v);
        }
    }

    /// `v` left tier `i`.
    fn evicted_from(&mut self, i: usize, Victim { id: v, dirty: d }: Victim) {
        self.rep.tiers[i].evictions += 1;
        if d {
            self.rep.tiers[i].dirty_writebacks += 1;
        }
        let below = i + 1;
        if below < self.tiers.len() {
            if self.h.inclusive {
                if d {
                    if self.tiers[below].contains(v) {
                        self.tiers[below].set_dirty(v);
                        let rb = self.rb(v);
                        self.rep.tiers[below].bytes_written += rb;
                        self.io.tier_written[below] += rb;
                    } else {
                        self.insert_at(below, v, true);
                    }
                }
            } else {
                // Exclusive: every victim moves down, clean or dirty.
                self.insert_at(below, v, d);
            }
        } else if d {
            let (t, r) = self.origin[v as usize];
            self.dirty_out.insert((t, r));
        }
    }

    /// Hit at tier `i > 0`: move up (exclusive) or fill the tiers above
    /// (inclusive). Returns nothing; counts are updated.
    fn promote(&mut self, i: usize, id: u32, make_dirty: bool) {
        if self.h.inclusive {
            let mut victims = Vec::new();
            self.tiers[i].hit(id, &mut victims);
            for v in victims {
                self.evicted_from(i, v);
            }
            for j in (0..i).rev() {
                self.insert_at(j, id, make_dirty && j == 0);
            }
        } else {
            let d = self.tiers[i].remove(id).unwrap_or(false);
            self.insert_at(0, id, d || make_dirty);
        }
    }

    /// Look `id` up through the tiers; true when found in some tier.
    fn locate(&mut self, id: u32, make_dirty: bool) -> bool {
        let rb = self.rb(id);
        for i in 0..self.tiers.len() {
            self.rep.tiers[i].lookups += 1;
            if self.tiers[i].contains(id) {
                self.rep.tiers[i].hits += 1;
                self.rep.tiers[i].bytes_read += rb;
                self.io.tier_hits[i] += 1;
                self.io.tier_read[i] += rb;
                if i == 0 {
                    let mut victims = Vec::new();
                    self.tiers[0].hit(id, &mut victims);
                    for v in victims {
                        self.evicted_from(0, v);
                    }
                    if make_dirty {
                        self.tiers[0].set_dirty(id);
                    }
                } else {
                    self.promote(i, id, make_dirty);
                }
                return true;
            }
            self.rep.tiers[i].misses += 1;
        }
        false
    }

    /// Read the unique missed ids from SSD and install them, ascending.
    fn fill(&mut self, missed: &mut Vec<u32>, make_dirty: bool) {
        missed.sort_unstable_by_key(|&id| self.origin[id as usize]);
        missed.dedup();
        let mut blocks = BTreeSet::new();
        for &id in missed.iter() {
            let (t, r) = self.origin[id as usize];
            blocks.insert(self.geo.block(t, r));
            self.rep.ssd.rows_read += 1;
            if self.h.inclusive {
                for j in (0..self.tiers.len()).rev() {
                    if !self.tiers[j].contains(id) {
                        self.insert_at(j, id, make_dirty && j == 0);
                    }
                }
            } else {
                self.insert_at(0, id, make_dirty);
            }
        }
        if self.h.ssd {
            let ops: u64 = blocks
                .iter()
                .map(|(t, _)| self.geo.blocks_per_row(*t))
                .sum();
            self.rep.ssd.read_ops += ops;
            self.rep.ssd.bytes_read += ops * 4096;
            self.io.ssd_ops += ops;
            self.io.ssd_read += ops * 4096;
        }
    }

    /// Write back the rows that left the last tier dirty in this batch.
    fn write_back(&mut self) {
        if self.dirty_out.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.dirty_out);
        let blocks: BTreeSet<(u32, u64)> =
            rows.iter().map(|&(t, r)| self.geo.block(t, r)).collect();
        self.rep.ssd.rows_written += rows.len() as u64;
        if self.h.ssd {
            let ops: u64 = blocks
                .iter()
                .map(|(t, _)| self.geo.blocks_per_row(*t))
                .sum();
            self.rep.ssd.write_ops += ops;
            self.rep.ssd.bytes_written += ops * 4096;
            self.io.ssd_ops += ops;
            self.io.ssd_written += ops * 4096;
        }
    }
}

/// A batch's accesses ordered by table, tables in ascending order and
/// each table's accesses in batch order (their indexes in `batch`), for
/// [`table_groups`]. One sort of the batch, where a scan of the whole
/// batch per table cost a many-table trace (800 tables, 2 M accesses a
/// batch) most of `emb-locality plan`'s time.
pub(crate) fn by_table(batch: &[crate::trace::Access]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..batch.len()).collect();
    // Stable: a table's accesses keep their order.
    order.sort_by_key(|&i| batch[i].table);
    order
}

/// The groups of one table each in `order` ([`by_table`] of `batch`).
pub(crate) fn table_groups<'a>(
    order: &'a [usize],
    batch: &'a [crate::trace::Access],
) -> impl Iterator<Item = &'a [usize]> + 'a {
    order.chunk_by(move |&x, &y| batch[x].table == batch[y].table)
}

/// Replay `trace` through `h`. `profiles[i]` is the device of tier `i`, and
/// `profiles[tiers.len()]` the SSD's (estimated times are 0 without them).
pub fn simulate_hierarchy(
    trace: &Trace,
    h: &Hierarchy,
    geo: &RowGeometry,
    profiles: Option<&[DeviceProfile]>,
) -> HierarchyReport {
    // Dense ids over (table, row).
    let mut map: std::collections::HashMap<(u32, u64), u32, crate::FastHash> = Default::default();
    let mut origin: Vec<(u32, u64)> = Vec::new();
    let dense: Vec<u32> = trace
        .accesses
        .iter()
        .map(|a| {
            *map.entry((a.table, a.row)).or_insert_with(|| {
                origin.push((a.table, a.row));
                (origin.len() - 1) as u32
            })
        })
        .collect();
    let n = origin.len();
    let mut sim = Sim {
        h,
        geo,
        tiers: h
            .tiers
            .iter()
            .map(|t| {
                let rows = usize::try_from(t.rows).unwrap_or(usize::MAX);
                DenseCache::new(t.policy, crate::cache::sim_capacity(rows, n), n)
            })
            .collect(),
        rep: HierarchyReport {
            tiers: h
                .tiers
                .iter()
                .map(|t| TierReport {
                    name: t.kind.name().to_string(),
                    policy: t.policy.name().to_string(),
                    rows: t.rows,
                    ..TierReport::default()
                })
                .collect(),
            ..HierarchyReport::default()
        },
        origin: &origin,
        dirty_out: BTreeSet::new(),
        io: BatchIo::default(),
    };
    let fresh_io = BatchIo {
        tier_hits: vec![0; h.tiers.len()],
        tier_read: vec![0; h.tiers.len()],
        tier_written: vec![0; h.tiers.len()],
        ..BatchIo::default()
    };
    let mut start = 0usize;
    let mut total_secs = 0.0;
    for &end in &trace.batch_ends {
        sim.io = fresh_io.clone();
        let batch = &trace.accesses[start..end];
        let ids = &dense[start..end];
        // Per table, as the store is called: lookups, then updates.
        let order = by_table(batch);
        for group in table_groups(&order, batch) {
            let mut missed = Vec::new();
            for &i in group {
                let (a, id) = (&batch[i], ids[i]);
                if a.kind == AccessKind::Lookup && !sim.locate(id, false) {
                    missed.push(id);
                }
            }
            sim.fill(&mut missed, false);
            let mut upd: Vec<u32> = group
                .iter()
                .filter(|&&i| batch[i].kind == AccessKind::Update)
                .map(|&i| ids[i])
                .collect();
            upd.sort_unstable_by_key(|&id| origin[id as usize]);
            upd.dedup();
            let mut missed = Vec::new();
            for &id in &upd {
                if !sim.locate(id, true) {
                    missed.push(id);
                }
            }
            sim.fill(&mut missed, true);
        }
        sim.write_back();
        if let Some(p) = profiles {
            let io = &sim.io;
            let mut s = 0.0;
            for (i, dev) in p.iter().enumerate().take(sim.tiers.len()) {
                s += dev.seconds(
                    io.tier_hits[i] as f64,
                    io.tier_read[i] as f64,
                    io.tier_written[i] as f64,
                );
            }
            if h.ssd {
                if let Some(ssd) = p.get(sim.tiers.len()) {
                    s += ssd.seconds(io.ssd_ops as f64, io.ssd_read as f64, io.ssd_written as f64);
                }
            }
            total_secs += s;
        }
        sim.rep.batches += 1;
        start = end;
    }
    let mut rep = sim.rep;
    rep.accesses = trace.accesses.len() as u64;
    let requests = rep.tiers.first().map_or(0, |t| t.lookups);
    for t in &mut rep.tiers {
        t.hit_ratio = t.hits as f64 / t.lookups.max(1) as f64;
        t.request_share = t.hits as f64 / requests.max(1) as f64;
    }
    rep.est_seconds = total_secs;
    rep.est_seconds_per_batch = total_secs / rep.batches.max(1) as f64;
    rep
}

mod sharded;
mod store;

pub use sharded::{simulate_store, StoreCounts, TableCounts};
pub use store::{run_store, RunReport, TierRun};

#[cfg(test)]
mod tests;
