//! The store's figures.

use super::*;

impl Store {
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
    /// assert_eq!((t.lookups, t.dram().hits, t.ssd.rows_read), (3, 1, 1));
    /// println!("{} p99 {} ns", st.io_engine, st.ssd_read_latency.p99);
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        let tables = self
            .tables
            .iter()
            .map(|t| {
                let c = t.counters.load();
                let rb = t.row_bytes as u64;
                let occupancy = t.occupancy(self.config.tiers.len());
                // Every access reaches the first tier of a cached table, and
                // each lower tier sees the misses of the one above; a pinned
                // table's tier sees every access and the others none.
                let mut reaching = match t.pin_tier() {
                    Some(_) => 0,
                    None => c.lookups + c.updates,
                };
                let tiers = self
                    .config
                    .tiers
                    .iter()
                    .zip(occupancy)
                    .enumerate()
                    .map(|(i, (cfg, [resident, capacity, meta]))| {
                        let lookups = if t.pin_tier() == Some(i) {
                            c.lookups + c.updates
                        } else {
                            reaching
                        };
                        let hits = c.hits[i];
                        let misses = lookups.saturating_sub(hits);
                        if t.pin_tier().is_none() {
                            reaching = misses;
                        }
                        let mut s = TierStats::empty(cfg.kind);
                        s.lookups = lookups;
                        s.hits = hits;
                        s.misses = misses;
                        s.evictions = c.evictions[i];
                        s.dirty_evictions = c.dirty_evictions[i];
                        s.bytes_read = hits * rb;
                        s.bytes_written = c.inserts[i] * rb;
                        s.resident_rows = resident;
                        s.capacity_rows = capacity;
                        s.bookkeeping_bytes = meta;
                        s
                    })
                    .collect();
                TableStats {
                    name: t.name.clone(),
                    placement: t.cfg.placement,
                    lookups: c.lookups,
                    updates: c.updates,
                    prefetched: c.prefetched,
                    prefetch_pinned: c.prefetch_pinned,
                    filled: c.filled,
                    warmed: c.warmed,
                    tiers,
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
                        log_rows_spilled: c.log_rows_spilled,
                        logged_rows: t.logged_rows(),
                        log_map_bytes: t.log_map_bytes(),
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
            row_log_used_blocks: self.ssd.log().len(),
            row_log_merges: self.log_merges.load(std::sync::atomic::Ordering::Relaxed),
            row_log_passes: self.log_passes.load(std::sync::atomic::Ordering::Relaxed),
        }
    }
}
