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
use crate::trace::{AccessKind, Trace};

/// One cache tier of a hierarchy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierSpec {
    /// `dram` or `pmem` (names the device profile too).
    pub name: String,
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
    /// hits / lookups.
    pub hit_ratio: f64,
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

/// Latency, bandwidth and IOPS of one device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// Latency of one access, microseconds.
    pub latency_us: f64,
    /// Read bandwidth, GB/s.
    pub read_gbps: f64,
    /// Write bandwidth, GB/s.
    pub write_gbps: f64,
    /// Operations per second (random 4 KiB for SSDs, row accesses otherwise).
    pub iops: f64,
    /// Operations in flight at once.
    pub parallelism: f64,
}

impl DeviceProfile {
    /// A built-in profile by name: `dram`, `optane-pmem`, `optane-ssd`,
    /// `nand-nvme` (sources in docs/replay.md).
    pub fn builtin(name: &str) -> Option<DeviceProfile> {
        let p = |latency_us, read_gbps, write_gbps, iops, parallelism| DeviceProfile {
            latency_us,
            read_gbps,
            write_gbps,
            iops,
            parallelism,
        };
        match name {
            "dram" => Some(p(0.1, 20.0, 15.0, 1e9, 10.0)),
            "optane-pmem" => Some(p(0.305, 6.6, 2.3, 1e8, 10.0)),
            "optane-ssd" => Some(p(10.0, 7.2, 6.2, 1.5e6, 64.0)),
            "nand-nvme" => Some(p(80.0, 6.9, 4.1, 1.0e6, 64.0)),
            _ => None,
        }
    }

    /// Seconds for `ops` operations moving `read` and `written` bytes: the
    /// largest of the IOPS, bandwidth and latency/parallelism bounds.
    pub fn seconds(&self, ops: u64, read: u64, written: u64) -> f64 {
        if ops == 0 && read == 0 && written == 0 {
            return 0.0;
        }
        let by_iops = ops as f64 / self.iops;
        let by_bw = read as f64 / (self.read_gbps * 1e9) + written as f64 / (self.write_gbps * 1e9);
        let by_lat = ops as f64 * self.latency_us * 1e-6 / self.parallelism.max(1.0);
        by_iops.max(by_bw).max(by_lat)
    }
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
        (table, l.group_of(row) * l.blocks_per_group as u64)
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
            .map(|t| DenseCache::new(t.policy, (t.rows as usize).max(1), n))
            .collect(),
        rep: HierarchyReport {
            tiers: h
                .tiers
                .iter()
                .map(|t| TierReport {
                    name: t.name.clone(),
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
        let mut tables: Vec<u32> = batch.iter().map(|a| a.table).collect();
        tables.sort_unstable();
        tables.dedup();
        for t in tables {
            let mut missed = Vec::new();
            for (a, &id) in batch.iter().zip(ids) {
                if a.table == t && a.kind == AccessKind::Lookup && !sim.locate(id, false) {
                    missed.push(id);
                }
            }
            sim.fill(&mut missed, false);
            let mut upd: Vec<u32> = batch
                .iter()
                .zip(ids)
                .filter(|(a, _)| a.table == t && a.kind == AccessKind::Update)
                .map(|(_, &id)| id)
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
                s += dev.seconds(io.tier_hits[i], io.tier_read[i], io.tier_written[i]);
            }
            if h.ssd {
                if let Some(ssd) = p.get(sim.tiers.len()) {
                    s += ssd.seconds(io.ssd_ops, io.ssd_read, io.ssd_written);
                }
            }
            total_secs += s;
        }
        sim.rep.batches += 1;
        start = end;
    }
    let mut rep = sim.rep;
    rep.accesses = trace.accesses.len() as u64;
    for t in &mut rep.tiers {
        t.hit_ratio = if t.lookups == 0 {
            0.0
        } else {
            t.hits as f64 / t.lookups as f64
        };
    }
    rep.est_seconds = total_secs;
    rep.est_seconds_per_batch = total_secs / rep.batches.max(1) as f64;
    rep
}

/// Device profiles of a hierarchy's tiers, by name, as read from or written
/// to a profile TOML (`[dram]`, `[pmem]`, `[ssd]`).
pub type Profiles = std::collections::BTreeMap<String, DeviceProfile>;

/// Measure this machine's tiers: DRAM (a heap buffer), PMem (a file mapped
/// from `dir`, as the store's PMem tier), SSD (O_DIRECT 4 KiB random reads
/// at queue depth 64, and 1 MiB sequential writes, through the store's own
/// I/O engine, on a file in `dir`). `mib` sizes the buffers and files.
pub fn calibrate(dir: &std::path::Path, mib: usize) -> embtier::Result<Profiles> {
    use std::time::Instant;
    let bytes = mib.max(16) << 20;
    let row = 256usize;
    let rows = bytes / row;
    // Random row gathers and sequential copies over a byte region.
    let measure_mem = |region: &mut [u8]| -> DeviceProfile {
        let mut x = 0x1234_5678u64;
        let n = 2_000_000usize;
        let mut out = [0u8; 256];
        let mut sink = 0u64;
        let start = Instant::now();
        for _ in 0..n {
            x = embtier::init::mix64(x);
            let r = (x % rows as u64) as usize * row;
            out.copy_from_slice(&region[r..r + row]);
            sink = sink.wrapping_add(out[7] as u64);
        }
        let per_op = start.elapsed().as_secs_f64() / n as f64;
        std::hint::black_box(sink);
        let half = region.len() / 2;
        let (a, b) = region.split_at_mut(half);
        let start = Instant::now();
        for _ in 0..4 {
            b[..half].copy_from_slice(&a[..half]);
        }
        let gbps = (4 * half) as f64 / start.elapsed().as_secs_f64() / 1e9;
        DeviceProfile {
            latency_us: per_op * 1e6,
            read_gbps: gbps,
            write_gbps: gbps,
            iops: 1.0 / per_op,
            parallelism: 1.0,
        }
    };
    let mut profiles = Profiles::new();
    let mut dram = vec![1u8; bytes];
    profiles.insert("dram".into(), measure_mem(&mut dram));
    drop(dram);
    // PMem: a mapped file, as the store maps its PMem tier.
    let pmem_path = dir.join("calibrate.pmem");
    {
        // Blocks reserved, so that `fill` below cannot raise SIGBUS on a
        // full file system: the calibration fails with an error instead.
        let f =
            embtier::io::reserve::create_reserved(&pmem_path, bytes as u64).inspect_err(|_| {
                let _ = std::fs::remove_file(&pmem_path);
            })?;
        // SAFETY: the file was just created by us in the calibration
        // directory and is not shared; the mapping lives only in this block.
        // Its blocks are allocated, so no store into it can fault for want
        // of space.
        let mut map =
            unsafe { memmap2::MmapMut::map_mut(&f) }.map_err(|source| embtier::Error::Io {
                path: pmem_path.clone(),
                op: "mmap",
                offset: 0,
                source,
            })?;
        map.fill(1);
        profiles.insert("pmem".into(), measure_mem(&mut map));
    }
    let _ = std::fs::remove_file(&pmem_path);
    // SSD: a real file, fully written, read back with O_DIRECT.
    let ssd_path = dir.join("calibrate.ssd");
    let cfg = embtier::config::SsdConfig {
        queue_depth: 64,
        ..Default::default()
    };
    let (engine, _) = embtier::io::open_engine(&ssd_path, &cfg.engine_options())?;
    let mut buf = embtier::io::AlignedBuf::new(1 << 20);
    buf.as_mut_slice().fill(7);
    let chunks = (bytes >> 20) as u64;
    let start = Instant::now();
    for c in 0..chunks {
        engine
            .write_extents(&[c << 20], 1 << 20, &buf)
            .map_err(|f| f.into_error(&ssd_path))?;
    }
    engine.sync().map_err(|f| f.into_error(&ssd_path))?;
    let write_gbps = bytes as f64 / start.elapsed().as_secs_f64() / 1e9;
    let blocks = (bytes / 4096) as u64;
    let mut x = 99u64;
    let offsets: Vec<u64> = (0..4096)
        .map(|_| {
            x = embtier::init::mix64(x);
            (x % blocks) * 4096
        })
        .collect();
    let mut rbuf = embtier::io::AlignedBuf::new(offsets.len() * 4096);
    let start = Instant::now();
    let mut reads = 0u64;
    while start.elapsed().as_secs_f64() < 2.0 {
        engine
            .read_extents(&offsets, 4096, &mut rbuf)
            .map_err(|f| f.into_error(&ssd_path))?;
        reads += offsets.len() as u64;
    }
    let iops = reads as f64 / start.elapsed().as_secs_f64();
    let lat = engine.read_latency().snapshot();
    let _ = std::fs::remove_file(&ssd_path);
    profiles.insert(
        "ssd".into(),
        DeviceProfile {
            latency_us: lat.value_at_quantile(0.5) as f64 / 1e3,
            read_gbps: iops * 4096.0 / 1e9,
            write_gbps,
            iops,
            parallelism: 64.0,
        },
    );
    Ok(profiles)
}

/// What a replay against the real store measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    /// Write-backs that failed during the replay (the store kept the rows
    /// in memory and retried; see [`embtier::SsdStats::writeback_errors`]).
    pub writeback_errors: u64,
    /// Rows left waiting in memory for a write-back at the end.
    pub pending_rows: u64,
    /// Accesses replayed (lookups and updates).
    pub accesses: u64,
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
    /// The store's DRAM hits over lookups and updates.
    pub dram_hit_ratio: f64,
    /// The store's PMem hits over the accesses that reached PMem.
    pub pmem_hit_ratio: f64,
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
        let t0 = std::time::Instant::now();
        let mut tables: Vec<u32> = batch.iter().map(|a| a.table).collect();
        tables.sort_unstable();
        tables.dedup();
        for t in tables {
            let (name, dim) = &dims[t as usize];
            let ids: Vec<u64> = batch
                .iter()
                .filter(|a| a.table == t && a.kind == AccessKind::Lookup)
                .map(|a| a.row)
                .collect();
            if !ids.is_empty() {
                out.resize(ids.len() * dim, 0.0);
                store.lookup(name, &ids, &mut out)?;
            }
            let upd: Vec<u64> = batch
                .iter()
                .filter(|a| {
                    a.table == t
                        && (a.kind == AccessKind::Update
                            || (update_ratio > 0.0 && rng.f64() < update_ratio))
                })
                .map(|a| a.row)
                .collect();
            if !upd.is_empty() {
                grads.resize(upd.len() * dim, 0.001);
                store.apply_sgd(name, &upd, &grads[..upd.len() * dim], 0.01)?;
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
    let dram_hits = d(&|t| t.dram.hits);
    let dram_lookups = d(&|t| t.dram.lookups);
    let pmem_hits = d(&|t| t.pmem.hits);
    let pmem_lookups = d(&|t| t.pmem.lookups);
    let h = hist.snapshot();
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
    Ok(RunReport {
        accesses: trace.accesses.len() as u64,
        batches: total,
        seconds,
        rows_per_s: trace.accesses.len() as f64 / seconds.max(1e-9),
        batch_p50_us: us(0.5),
        batch_p99_us: us(0.99),
        batch_p999_us: us(0.999),
        dram_hit_ratio: dram_hits as f64 / dram_lookups.max(1) as f64,
        pmem_hit_ratio: pmem_hits as f64 / pmem_lookups.max(1) as f64,
        dram_hits,
        pmem_hits,
        ssd_rows_read: d(&|t| t.ssd.rows_read),
        ssd_rows_written: d(&|t| t.ssd.rows_written),
        ssd_read_ops: d(&|t| t.ssd.read_ops),
        ssd_write_ops: d(&|t| t.ssd.write_ops),
        ssd_bytes_read: d(&|t| t.ssd.bytes_read),
        ssd_bytes_written: d(&|t| t.ssd.bytes_written),
        writeback_errors: after.writeback_errors() - before.writeback_errors(),
        pending_rows: after.pending_rows(),
        io_engine: after.io_engine,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate;
    use crate::trace::gen::{GenSpec, GenTable};

    fn trace(batch_size: u64) -> Trace {
        GenSpec {
            seed: 4,
            batches: 100,
            batch_size,
            tables: vec![GenTable {
                name: "t".into(),
                rows: 5000,
                dim: 16,
                pooling: 1.0,
                alpha: 1.0,
                drift: 0.0,
            }],
        }
        .generate()
    }

    /// With batches of one access, one tier is the plain simulator.
    #[test]
    fn one_tier_batches_of_one_equal_simulate() {
        let t = trace(1);
        let keys: Vec<u64> = t.accesses.iter().map(|a| a.row).collect();
        for k in [PolicyKind::Lru, PolicyKind::Sieve, PolicyKind::Arc] {
            let h = Hierarchy {
                tiers: vec![TierSpec {
                    name: "dram".into(),
                    policy: k,
                    rows: 300,
                }],
                ssd: true,
                inclusive: false,
            };
            let r = simulate_hierarchy(&t, &h, &RowGeometry::of(&t, 64), None);
            let s = simulate(k, 300, &keys);
            assert_eq!(r.tiers[0].hits, s.hits, "{k}");
            assert_eq!(r.ssd.rows_read, s.misses);
        }
    }

    /// Exclusive LRU + LRU behaves as one LRU of the combined size for hits.
    #[test]
    fn exclusive_lru_pair_is_a_bigger_lru() {
        let t = trace(1);
        let keys: Vec<u64> = t.accesses.iter().map(|a| a.row).collect();
        let h = Hierarchy {
            tiers: vec![
                TierSpec {
                    name: "dram".into(),
                    policy: PolicyKind::Lru,
                    rows: 100,
                },
                TierSpec {
                    name: "pmem".into(),
                    policy: PolicyKind::Lru,
                    rows: 400,
                },
            ],
            ssd: true,
            inclusive: false,
        };
        let r = simulate_hierarchy(&t, &h, &RowGeometry::of(&t, 64), None);
        let big = simulate(PolicyKind::Lru, 500, &keys);
        assert_eq!(r.tiers[0].hits + r.tiers[1].hits, big.hits);
        assert_eq!(r.tiers[1].lookups, r.tiers[0].misses);
        let inc = Hierarchy {
            inclusive: true,
            ..h
        };
        let ri = simulate_hierarchy(&t, &inc, &RowGeometry::of(&t, 64), None);
        assert!(ri.tiers[0].hits + ri.tiers[1].hits <= r.tiers[0].hits + r.tiers[1].hits);
    }

    #[test]
    fn updates_write_back_and_time_estimates() {
        let mut t = trace(64);
        for (i, a) in t.accesses.iter_mut().enumerate() {
            if i % 3 == 0 {
                a.kind = AccessKind::Update;
            }
        }
        let h = Hierarchy {
            tiers: vec![TierSpec {
                name: "dram".into(),
                policy: PolicyKind::Lru,
                rows: 50,
            }],
            ssd: true,
            inclusive: false,
        };
        let p = [
            DeviceProfile::builtin("dram").unwrap(),
            DeviceProfile::builtin("nand-nvme").unwrap(),
        ];
        let r = simulate_hierarchy(&t, &h, &RowGeometry::of(&t, 64), Some(&p));
        assert!(r.tiers[0].dirty_writebacks > 0);
        assert_eq!(r.ssd.rows_written, r.tiers[0].dirty_writebacks);
        assert!(r.ssd.write_ops > 0 && r.ssd.write_ops <= r.ssd.rows_written);
        // 64-byte rows: 63 per block, so block reads < row reads.
        assert!(r.ssd.read_ops < r.ssd.rows_read);
        assert!(r.est_seconds > 0.0 && r.est_seconds_per_batch > 0.0);
        assert!(DeviceProfile::builtin("bogus").is_none());
    }
}
