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
