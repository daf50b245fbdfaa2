//! Replaying a trace against the real store (`emb-replay run`).

use serde::Serialize;

use crate::trace::{AccessKind, Trace};

/// What a replay against the real store measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Write-backs that failed during the replay (the store kept the rows
    /// in memory and retried; see [`embtier::SsdStats::writeback_errors`]).
    pub writeback_errors: u64,
    /// Rows left waiting in memory for a write-back at the end.
    pub pending_rows: u64,
    /// Accesses replayed (the trace's lookups and updates).
    pub accesses: u64,
    /// Row requests the store served: ids looked up, plus ids updated
    /// (deduplicated within a call), over all tables.
    pub requests: u64,
    /// Of those, updates.
    pub updates: u64,
    /// Batches replayed.
    pub batches: u64,
    /// Wall-clock seconds of the replay.
    pub seconds: f64,
    /// accesses / seconds.
    pub rows_per_s: f64,
    /// Batch latency percentiles, microseconds.
    pub batch_p50_us: f64,
    /// 99th percentile.
    pub batch_p99_us: f64,
    /// 99.9th percentile.
    pub batch_p999_us: f64,
    /// DRAM's hit ratio: its hits over the requests that reached it.
    pub dram_hit_ratio: f64,
    /// PMem's hit ratio: its hits over the requests that reached it (those
    /// DRAM missed).
    pub pmem_hit_ratio: f64,
    /// DRAM hits over all row requests (pinned tables' hits included).
    pub dram_share: f64,
    /// PMem hits over all row requests.
    pub pmem_share: f64,
    /// Row requests neither DRAM nor PMem served, over all requests.
    pub miss_share: f64,
    /// DRAM hits.
    pub dram_hits: u64,
    /// PMem hits.
    pub pmem_hits: u64,
    /// Rows read from SSD.
    pub ssd_rows_read: u64,
    /// Rows written to SSD.
    pub ssd_rows_written: u64,
    /// SSD block-group reads.
    pub ssd_read_ops: u64,
    /// SSD block-group writes.
    pub ssd_write_ops: u64,
    /// SSD bytes read.
    pub ssd_bytes_read: u64,
    /// SSD bytes written.
    pub ssd_bytes_written: u64,
    /// The I/O engine used.
    pub io_engine: String,
    /// Every cache tier, in the store's order (`dram_*` and `pmem_*` above
    /// are the first of each kind; a store may have two of a kind).
    pub tiers: Vec<TierRun>,
}

/// One cache tier over a replay.
#[derive(Debug, Clone, Serialize)]
pub struct TierRun {
    /// `dram` or `pmem`.
    pub kind: String,
    /// Requests that reached it (those the tiers above missed).
    pub lookups: u64,
    /// Of those, served here.
    pub hits: u64,
    /// hits / lookups.
    pub hit_ratio: f64,
    /// hits over all row requests.
    pub share: f64,
}

/// Each of the store's cache tiers (`kinds`, its order) as (hits,
/// lookups) summed over the tables: a cached table's tiers are the
/// store's; a pinned table's one tier adds to the store's first tier of
/// its kind.
fn tier_totals(kinds: &[embtier::MemoryKind], s: &embtier::Stats) -> Vec<(u64, u64)> {
    let mut out = vec![(0u64, 0u64); kinds.len()];
    for t in &s.tables {
        for (j, x) in t.tiers.iter().enumerate() {
            let at = if t.tiers.len() == kinds.len() {
                Some(j)
            } else {
                kinds.iter().position(|&k| k == x.kind)
            };
            if let Some(o) = at.and_then(|i| out.get_mut(i)) {
                o.0 += x.hits;
                o.1 += x.lookups;
            }
        }
    }
    out
}

/// Drive `store` with `trace`: per batch and table, `lookup` the lookups in
/// batch order, then `apply_sgd` the updates (the trace's, plus a seeded
/// `update_ratio` share of the lookups) with small gradients. Trace tables
/// map to store tables by name. `progress(done, total)` is called per batch.
pub fn run_store(
    store: &embtier::Store,
    trace: &Trace,
    update_ratio: f64,
    seed: u64,
    mut progress: impl FnMut(u64, u64),
) -> embtier::Result<RunReport> {
    let dims: Vec<(String, usize)> = trace
        .tables
        .iter()
        .map(|t| Ok((t.name.clone(), store.table_shape(&t.name)?.1 as usize)))
        .collect::<embtier::Result<_>>()?;
    let hist = embtier::io::LatencyRecorder::default();
    let mut lat = Vec::with_capacity(trace.batch_ends.len());
    let before = store.stats();
    let mut rng = crate::trace::gen::Xoshiro::new(seed);
    let start = std::time::Instant::now();
    let mut s = 0usize;
    let mut out = Vec::new();
    let mut grads = Vec::new();
    let total = trace.batch_ends.len() as u64;
    for (bi, &end) in trace.batch_ends.iter().enumerate() {
        let batch = &trace.accesses[s..end];
        // Each table's lookups and updates, made before the batch's clock
        // starts: the batch's time is the store's.
        let order = super::by_table(batch);
        let work: Vec<(u32, Vec<u64>, Vec<u64>)> = super::table_groups(&order, batch)
            .map(|group| {
                let of = |i: &usize| &batch[*i];
                let ids = group
                    .iter()
                    .map(of)
                    .filter(|a| a.kind == AccessKind::Lookup)
                    .map(|a| a.row)
                    .collect();
                let upd = group
                    .iter()
                    .map(of)
                    .filter(|a| {
                        a.kind == AccessKind::Update
                            || (update_ratio > 0.0 && rng.f64() < update_ratio)
                    })
                    .map(|a| a.row)
                    .collect();
                (of(&group[0]).table, ids, upd)
            })
            .collect();
        let t0 = std::time::Instant::now();
        for (t, ids, upd) in &work {
            let (name, dim) = &dims[*t as usize];
            if !ids.is_empty() {
                out.resize(ids.len() * dim, 0.0);
                store.lookup(name, ids, &mut out)?;
            }
            if !upd.is_empty() {
                grads.resize(upd.len() * dim, 0.001);
                store.apply_sgd(name, upd, &grads[..upd.len() * dim], 0.01)?;
            }
        }
        lat.push(t0.elapsed());
        if lat.len() >= 256 {
            hist.record_all(&lat);
            lat.clear();
        }
        progress(bi as u64 + 1, total);
        s = end;
    }
    hist.record_all(&lat);
    let seconds = start.elapsed().as_secs_f64();
    let after = store.stats();
    // Counter deltas over the replay, summed over tables.
    let d = |f: &dyn Fn(&embtier::TableStats) -> u64| {
        after.tables.iter().map(f).sum::<u64>() - before.tables.iter().map(f).sum::<u64>()
    };
    let updates = d(&|t| t.updates);
    let requests = d(&|t| t.lookups) + updates;
    let share = |x: u64| x as f64 / requests.max(1) as f64;
    let kinds: Vec<embtier::MemoryKind> = store.config().tiers.iter().map(|t| t.kind).collect();
    let (t0, t1) = (tier_totals(&kinds, &before), tier_totals(&kinds, &after));
    let tiers: Vec<TierRun> = kinds
        .iter()
        .zip(t0.iter().zip(&t1))
        .map(|(&kind, (&(h0, l0), &(h1, l1)))| {
            let (hits, lookups) = (h1 - h0, l1 - l0);
            TierRun {
                kind: kind.to_string(),
                lookups,
                hits,
                hit_ratio: hits as f64 / lookups.max(1) as f64,
                share: share(hits),
            }
        })
        .collect();
    // DRAM's and PMem's figures are the first tier of each kind's.
    let first = |k: embtier::MemoryKind| {
        let name = k.to_string();
        tiers.iter().find(|t| t.kind == name)
    };
    let (dram_hits, dram_lookups) =
        first(embtier::MemoryKind::Dram).map_or((0, 0), |t| (t.hits, t.lookups));
    let (pmem_hits, pmem_lookups) =
        first(embtier::MemoryKind::Pmem).map_or((0, 0), |t| (t.hits, t.lookups));
    let all_hits: u64 = tiers.iter().map(|t| t.hits).sum();
    let h = hist.snapshot();
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    Ok(RunReport {
        accesses: trace.accesses.len() as u64,
        requests,
        updates,
        batches: total,
        seconds,
        rows_per_s: trace.accesses.len() as f64 / seconds.max(1e-9),
        batch_p50_us: us(0.5),
        batch_p99_us: us(0.99),
        batch_p999_us: us(0.999),
        dram_hit_ratio: dram_hits as f64 / dram_lookups.max(1) as f64,
        pmem_hit_ratio: pmem_hits as f64 / pmem_lookups.max(1) as f64,
        dram_share: share(dram_hits),
        pmem_share: share(pmem_hits),
        // Every tier's hits: a second tier of a kind serves too.
        miss_share: share(requests.saturating_sub(all_hits)),
        dram_hits,
        pmem_hits,
        ssd_rows_read: d(&|t| t.ssd.rows_read),
        ssd_rows_written: d(&|t| t.ssd.rows_written),
        ssd_read_ops: d(&|t| t.ssd.read_ops),
        ssd_write_ops: d(&|t| t.ssd.write_ops),
        ssd_bytes_read: d(&|t| t.ssd.bytes_read),
        ssd_bytes_written: d(&|t| t.ssd.bytes_written),
        writeback_errors: after.writeback_errors() - before.writeback_errors(),
        tiers,
        pending_rows: after.pending_rows(),
        io_engine: after.io_engine,
    })
}
