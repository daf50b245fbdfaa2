//! The dicts `checkpoint` and `stats` return.

use super::*;

/// A [`Checkpoint`](embtier::Checkpoint) as the dict `checkpoint` returns.
pub(crate) fn checkpoint_dict<'py>(
    py: Python<'py>,
    c: &embtier::Checkpoint,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("generation", c.generation)?;
    d.set_item("epoch", c.epoch)?;
    d.set_item("groups_journaled", c.groups_journaled)?;
    d.set_item("journal_bytes", c.journal_bytes)?;
    d.set_item("row_log_merged_rows", c.row_log_merged_rows)?;
    d.set_item("row_log_blocks", c.row_log_blocks)?;
    d.set_item("hot_rows", c.hot_rows)?;
    d.set_item("hot_row_bytes", c.hot_row_bytes)?;
    d.set_item("row_log_bytes_released", c.row_log_bytes_released)?;
    d.set_item("row_log_blocks_freed", c.row_log_blocks_freed)?;
    d.set_item("paused_seconds", c.paused.as_secs_f64())?;
    d.set_item("pending_peak_bytes", c.pending_peak_bytes)?;
    Ok(d)
}

/// A store's [`Stats`](embtier::Stats) as the dict `stats` returns.
pub(crate) fn stats_dict<'py>(
    py: Python<'py>,
    st: &embtier::Stats,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("io_engine", &st.io_engine)?;
    d.set_item("io_engine_reason", &st.io_engine_reason)?;
    d.set_item("direct_io", st.direct_io)?;
    d.set_item("row_log_capacity_blocks", st.row_log_capacity_blocks)?;
    d.set_item("row_log_used_blocks", st.row_log_used_blocks)?;
    d.set_item("row_log_merges", st.row_log_merges)?;
    d.set_item("row_log_passes", st.row_log_passes)?;
    d.set_item("writeback_errors", st.writeback_errors())?;
    d.set_item("pending_rows", st.pending_rows())?;
    let lat = PyDict::new(py);
    let l = &st.ssd_read_latency;
    lat.set_item("count", l.count)?;
    lat.set_item("p50_ns", l.p50)?;
    lat.set_item("p90_ns", l.p90)?;
    lat.set_item("p99_ns", l.p99)?;
    lat.set_item("p999_ns", l.p999)?;
    d.set_item("ssd_read_latency", lat)?;
    let tables = PyDict::new(py);
    for t in &st.tables {
        let td = PyDict::new(py);
        td.set_item("placement", t.placement.to_string())?;
        td.set_item("lookups", t.lookups)?;
        td.set_item("updates", t.updates)?;
        td.set_item("prefetched", t.prefetched)?;
        td.set_item("prefetch_pinned", t.prefetch_pinned)?;
        td.set_item("filled", t.filled)?;
        td.set_item("warmed", t.warmed)?;
        let tier_dict = |tier: &embtier::TierStats| -> PyResult<Bound<'py, PyDict>> {
            let x = PyDict::new(py);
            x.set_item("kind", tier.kind.name())?;
            x.set_item("lookups", tier.lookups)?;
            x.set_item("hits", tier.hits)?;
            x.set_item("misses", tier.misses)?;
            x.set_item("hit_ratio", tier.hit_ratio())?;
            x.set_item("evictions", tier.evictions)?;
            x.set_item("dirty_evictions", tier.dirty_evictions)?;
            x.set_item("bytes_read", tier.bytes_read)?;
            x.set_item("bytes_written", tier.bytes_written)?;
            x.set_item("resident_rows", tier.resident_rows)?;
            x.set_item("capacity_rows", tier.capacity_rows)?;
            x.set_item("bookkeeping_bytes", tier.bookkeeping_bytes)?;
            Ok(x)
        };
        // "dram" and "pmem": the first tier of each kind (zeros when the
        // store has none); "tiers": every tier, in the store's order.
        td.set_item("dram", tier_dict(t.dram())?)?;
        td.set_item("pmem", tier_dict(t.pmem())?)?;
        let tiers = t
            .tiers
            .iter()
            .map(tier_dict)
            .collect::<PyResult<Vec<_>>>()?;
        td.set_item("tiers", tiers)?;
        let x = PyDict::new(py);
        let q = &t.ssd;
        x.set_item("rows_read", q.rows_read)?;
        x.set_item("rows_written", q.rows_written)?;
        x.set_item("read_ops", q.read_ops)?;
        x.set_item("write_ops", q.write_ops)?;
        x.set_item("bytes_read", q.bytes_read)?;
        x.set_item("bytes_written", q.bytes_written)?;
        x.set_item("writeback_errors", q.writeback_errors)?;
        x.set_item("pending_rows", q.pending_rows)?;
        x.set_item("pending_limit_rows", q.pending_limit_rows)?;
        x.set_item("log_rows_read", q.log_rows_read)?;
        x.set_item("log_rows_written", q.log_rows_written)?;
        x.set_item("log_blocks_written", q.log_blocks_written)?;
        x.set_item("log_rows_merged", q.log_rows_merged)?;
        x.set_item("log_rows_spilled", q.log_rows_spilled)?;
        x.set_item("logged_rows", q.logged_rows)?;
        x.set_item("log_map_bytes", q.log_map_bytes)?;
        td.set_item("ssd", x)?;
        tables.set_item(&t.name, td)?;
    }
    d.set_item("tables", tables)?;
    Ok(d)
}
