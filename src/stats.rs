//! Counters of a store, per table and per tier.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::config::Placement;

use crate::config::{MemoryKind, MAX_TIERS};

macro_rules! counters {
    ($(#[$m:meta])* $name:ident, $local:ident {
        $($(#[$fm:meta])* $f:ident),* $(,)?
    } per tier {
        $($(#[$tm:meta])* $t:ident),* $(,)?
    }) => {
        $(#[$m])*
        #[derive(Debug, Default)]
        pub(crate) struct $name {
            $($(#[$fm])* pub $f: AtomicU64,)*
            $($(#[$tm])* pub $t: [AtomicU64; MAX_TIERS],)*
        }
        /// Per-call counts, added to the shared counters once per call.
        #[derive(Debug, Default, Clone, Copy)]
        pub(crate) struct $local {
            $($(#[$fm])* pub $f: u64,)*
            $($(#[$tm])* pub $t: [u64; MAX_TIERS],)*
        }
        impl $local {
            pub fn publish(&self, to: &$name) {
                $(if self.$f != 0 { to.$f.fetch_add(self.$f, Relaxed); })*
                $(for (a, &v) in to.$t.iter().zip(&self.$t) {
                    if v != 0 { a.fetch_add(v, Relaxed); }
                })*
            }
        }
        impl $name {
            pub fn load(&self) -> $local {
                $local {
                    $($f: self.$f.load(Relaxed),)*
                    $($t: std::array::from_fn(|i| self.$t[i].load(Relaxed)),)*
                }
            }
        }
    };
}

counters!(
    /// Shared counters of one table.
    Counters, Local {
    lookups, updates, pending_hits, ssd_rows_read, ssd_rows_written,
    ssd_read_ops, ssd_write_ops, ssd_bytes_read, ssd_bytes_written, writeback_errors,
    prefetched, prefetch_pinned, filled, warmed, log_rows_read, log_rows_written, log_blocks_written, log_rows_merged,
    log_rows_spilled,
    } per tier {
    /// Rows found in the tier (for a pinned table: every access).
    hits,
    /// Rows inserted into the tier.
    inserts,
    /// Rows evicted from the tier.
    evictions,
    /// Of those, dirty.
    dirty_evictions,
});

impl Counters {
    /// Count one in-place write of `groups` block groups of `group_bytes`
    /// each, holding `rows` rows written.
    pub fn wrote_groups(&self, groups: usize, group_bytes: usize, rows: u64) {
        self.ssd_write_ops.fetch_add(groups as u64, Relaxed);
        self.ssd_bytes_written
            .fetch_add((groups * group_bytes) as u64, Relaxed);
        self.ssd_rows_written.fetch_add(rows, Relaxed);
    }
}

/// Figures of one cache tier of one table.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TierStats {
    /// The memory this tier lives in.
    pub kind: MemoryKind,
    /// Rows looked up or updated that reached this tier.
    pub lookups: u64,
    /// Of those, found here.
    pub hits: u64,
    /// Of those, not found here.
    pub misses: u64,
    /// Rows evicted from this tier.
    pub evictions: u64,
    /// Of those, dirty: moved down (to the next tier or towards SSD).
    pub dirty_evictions: u64,
    /// Bytes copied out of this tier on hits.
    pub bytes_read: u64,
    /// Bytes copied into this tier by inserts.
    pub bytes_written: u64,
    /// Rows resident now.
    pub resident_rows: u64,
    /// Rows this tier can hold for the table.
    pub capacity_rows: u64,
    /// Bytes of bookkeeping (index, keys, policy) now allocated.
    pub bookkeeping_bytes: u64,
}

impl TierStats {
    /// A tier of `kind` with nothing counted.
    pub const fn empty(kind: MemoryKind) -> TierStats {
        TierStats {
            kind,
            lookups: 0,
            hits: 0,
            misses: 0,
            evictions: 0,
            dirty_evictions: 0,
            bytes_read: 0,
            bytes_written: 0,
            resident_rows: 0,
            capacity_rows: 0,
            bookkeeping_bytes: 0,
        }
    }

    /// hits / lookups (0 when idle).
    pub fn hit_ratio(&self) -> f64 {
        if self.lookups == 0 {
            0.0
        } else {
            self.hits as f64 / self.lookups as f64
        }
    }
}

/// Figures of the SSD tier of one table.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SsdStats {
    /// Rows read from SSD (the data file or the row log): the misses of
    /// the whole hierarchy that needed a read. Not every miss does: a row
    /// an `update` overwrites whole is not read, and a row still waiting
    /// in memory for its write-back (pending) is served from there.
    pub rows_read: u64,
    /// Rows written to SSD (dirty write-backs and flushes).
    pub rows_written: u64,
    /// Block-group reads issued.
    pub read_ops: u64,
    /// Block-group writes issued.
    pub write_ops: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Write-backs that failed and were kept in memory for a retry. A
    /// write-back runs inside `lookup`, `update` and `step` when enough
    /// displaced dirty rows have gathered; its failure is not that call's
    /// (the call returns `Ok`), so this counter and `pending_rows` are where
    /// a full or failing disk first shows. See the store's "Errors" docs.
    pub writeback_errors: u64,
    /// Dirty rows displaced from the caches and waiting for their
    /// write-back now: held in memory only, durable only once a write-back
    /// or a checkpoint succeeds. Normally below a batch; growing together
    /// with `writeback_errors` means the disk refuses writes, and once it
    /// passes `pending_limit_rows` updates of the table fail.
    pub pending_rows: u64,
    /// Pending rows past which `update`, `step` and their kin write back
    /// before changing anything, and fail if that write-back fails.
    pub pending_limit_rows: u64,
    /// Of `rows_read`, rows read from the row log.
    pub log_rows_read: u64,
    /// Of `rows_written`, rows appended to the row log.
    pub log_rows_written: u64,
    /// Row-log blocks appended (included in `write_ops` and `bytes_written`).
    pub log_blocks_written: u64,
    /// Logged rows written to their home groups by merges.
    pub log_rows_merged: u64,
    /// Rows a background pass read back from its spill files, rather than
    /// from the log, to write home (`[ssd] merge_scan`: one walk of the
    /// pass's blocks for all of a table's ranges of ids). The spill's
    /// bytes are counted in `bytes_written` and `bytes_read`.
    pub log_rows_spilled: u64,
    /// Rows whose newest written copy is in the row log now.
    pub logged_rows: u64,
    /// DRAM the row log's map holds now, in bytes (from the maps'
    /// capacities: outside the cache's budget unless `[ssd]
    /// overhead_in_budget`). It grows with the log, not with the cache,
    /// and is given back as passes and merges empty the log.
    pub log_map_bytes: u64,
}

/// Figures of one table.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TableStats {
    /// Table name.
    pub name: String,
    /// Placement.
    pub placement: Placement,
    /// Row ids looked up (duplicates counted). A pooled lookup reads each
    /// distinct row once but counts as a lookup of all its indices would:
    /// a row's later occurrences hit the first tier where the row was in
    /// memory, and miss every tier where it was not.
    pub lookups: u64,
    /// Row ids updated (after deduplication). An `import_rows` of whole
    /// block groups writes them home without passing through the caches:
    /// it counts in the SSD tier's rows written, not here (its partial
    /// groups at the range's ends are updates, and count here).
    pub updates: u64,
    /// Row ids requested by [`crate::Store::prefetch`]. They are also counted
    /// in `lookups` and in the tiers' figures: a prefetch is a lookup whose
    /// values are not returned.
    pub prefetched: u64,
    /// Pins taken by prefetches (at most one per prefetched id; fewer when
    /// the pin bound is reached).
    pub prefetch_pinned: u64,
    /// Rows installed into the first tier from block groups read for other
    /// rows, while it had free room (a cold cache filling at a group's rows
    /// per read); counted in the first tier's inserts, not in `lookups`.
    pub filled: u64,
    /// Rows read back at open from the hot set the last checkpoint wrote
    /// (a warm restart; see [`crate::Store::wait_warm`]), not counted in
    /// `lookups`.
    pub warmed: u64,
    /// The cache tiers, in the store's order (`StoreConfig::tiers`). A
    /// table pinned to a tier counts every access as a hit there, and
    /// nothing in the others.
    pub tiers: Vec<TierStats>,
    /// SSD tier.
    pub ssd: SsdStats,
}

static NO_DRAM: TierStats = TierStats::empty(MemoryKind::Dram);
static NO_PMEM: TierStats = TierStats::empty(MemoryKind::Pmem);

impl TableStats {
    /// The first tier of `kind`, if the store has one.
    pub fn tier(&self, kind: MemoryKind) -> Option<&TierStats> {
        self.tiers.iter().find(|t| t.kind == kind)
    }

    /// The first DRAM tier (all zeros if the store has none).
    pub fn dram(&self) -> &TierStats {
        self.tier(MemoryKind::Dram).unwrap_or(&NO_DRAM)
    }

    /// The first PMem tier (all zeros if the store has none).
    pub fn pmem(&self) -> &TierStats {
        self.tier(MemoryKind::Pmem).unwrap_or(&NO_PMEM)
    }
}

/// Latency percentiles in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct LatencySummary {
    /// Operations recorded.
    pub count: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Maximum.
    pub max: u64,
}

impl LatencySummary {
    pub(crate) fn of(h: &hdrhistogram::Histogram<u64>) -> LatencySummary {
        LatencySummary {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// A snapshot of a store's figures.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Stats {
    /// Per table.
    pub tables: Vec<TableStats>,
    /// The SSD I/O engine in use.
    pub io_engine: String,
    /// Why that engine.
    pub io_engine_reason: String,
    /// Whether O_DIRECT is in use.
    pub direct_io: bool,
    /// Latency of single SSD reads (one block group each).
    pub ssd_read_latency: LatencySummary,
    /// The row log: blocks it may hold.
    pub row_log_capacity_blocks: u64,
    /// The row log: blocks in it (committed, and appended since).
    pub row_log_used_blocks: u64,
    /// Checkpoints since open that merged the whole row log into the
    /// tables and emptied it (inside the checkpoint, with training
    /// stopped).
    pub row_log_merges: u64,
    /// Checkpoints since open that moved the row log's start past the
    /// blocks a background pass had merged (the log's rows written home
    /// outside the checkpoint, which merged nothing).
    pub row_log_passes: u64,
}

impl Stats {
    /// The figures of table `name`.
    pub fn table(&self, name: &str) -> Option<&TableStats> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// Failed write-backs over all tables ([`SsdStats::writeback_errors`]):
    /// non-zero means the disk refused writes that no call reported.
    pub fn writeback_errors(&self) -> u64 {
        self.tables.iter().map(|t| t.ssd.writeback_errors).sum()
    }

    /// Rows held only in memory waiting for a write-back, over all tables
    /// ([`SsdStats::pending_rows`]).
    pub fn pending_rows(&self) -> u64 {
        self.tables.iter().map(|t| t.ssd.pending_rows).sum()
    }
}
