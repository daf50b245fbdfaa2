//! Tests of the hierarchy simulation and the store replay.

#[test]
fn a_store_config_is_a_hierarchy() {
    use embtier::{MemoryKind, PolicyKind, StoreConfig, TierConfig};
    let cfg = StoreConfig::builder()
        .tiers(vec![
            TierConfig::dram(1 << 20, PolicyKind::Sieve),
            TierConfig::dram(2 << 20, PolicyKind::Lru),
            TierConfig::pmem(None, 8 << 20, PolicyKind::Fifo),
        ])
        .build();
    let h = super::Hierarchy::of_store(&cfg, 256);
    let got: Vec<(MemoryKind, PolicyKind, u64)> =
        h.tiers.iter().map(|t| (t.kind, t.policy, t.rows)).collect();
    assert_eq!(
        got,
        [
            (MemoryKind::Dram, PolicyKind::Sieve, 4096),
            (MemoryKind::Dram, PolicyKind::Lru, 8192),
            (MemoryKind::Pmem, PolicyKind::Fifo, 32768)
        ]
    );
    assert!(h.ssd && !h.inclusive);
}

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
                kind: embtier::MemoryKind::Dram,
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
                kind: embtier::MemoryKind::Dram,
                policy: PolicyKind::Lru,
                rows: 100,
            },
            TierSpec {
                kind: embtier::MemoryKind::Pmem,
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
            kind: embtier::MemoryKind::Dram,
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

/// `simulate_store` counts what the store counts: three tables (one
/// pinned, two cached in several shards over DRAM and PMem, one with
/// updates), with and without cold fill, for several policies.
#[test]
fn simulate_store_counts_what_the_store_counts() {
    use embtier::{ByteSize, MemoryKind, Placement, StoreConfig, TableConfig, TierConfig};
    let t = GenSpec {
        seed: 8,
        batches: 60,
        batch_size: 256,
        tables: vec![
            GenTable {
                name: "big".into(),
                rows: 200_000,
                dim: 16,
                pooling: 4.0,
                alpha: 1.0,
                drift: 0.0,
            },
            GenTable {
                name: "mid".into(),
                rows: 20_000,
                dim: 8,
                pooling: 2.0,
                alpha: 0.8,
                drift: 0.001,
            },
            GenTable {
                name: "pin".into(),
                rows: 500,
                dim: 8,
                pooling: 1.0,
                alpha: 0.5,
                drift: 0.0,
            },
        ],
    }
    .generate();
    // A tenth of "mid"'s accesses are the trainer's updates.
    let mut t = t;
    for (i, a) in t.accesses.iter_mut().enumerate() {
        if a.table == 1 && i % 10 == 0 {
            a.kind = AccessKind::Update;
        }
    }
    for (dram, pmem, cold_fill) in [
        (PolicyKind::Sieve, PolicyKind::Lru, true),
        (PolicyKind::S3Fifo, PolicyKind::Clock, false),
        (PolicyKind::Arc, PolicyKind::Fifo, true),
    ] {
        let mut cfg = StoreConfig::default();
        let mut big = TableConfig::new("big", 200_000, 16);
        big.dram_bytes = Some(ByteSize(6000 * 64));
        big.pmem_bytes = Some(ByteSize(12_000 * 64));
        let mut mid = TableConfig::new("mid", 20_000, 8);
        mid.dram_bytes = Some(ByteSize(2500 * 32));
        mid.pmem_bytes = Some(ByteSize(0));
        let mut pin = TableConfig::new("pin", 500, 8);
        pin.placement = Placement::Pinned(MemoryKind::Dram);
        cfg.tables = vec![big, mid, pin];
        cfg.tiers = vec![
            TierConfig::dram(6000 * 64 + 2500 * 32 + 500 * 32, dram),
            TierConfig::pmem(None, 12_000 * 64, pmem),
        ];
        cfg.ssd.cold_fill = cold_fill;
        let want = simulate_store(&t, &cfg).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = embtier::Store::create(dir.path(), cfg).unwrap();
        let got = run_store(&store, &t, 0.0, 1, |_, _| {}).unwrap();
        assert_eq!(want.requests(), got.requests);
        let hits = |f: fn(&TableCounts) -> u64| want.tables.iter().map(f).sum::<u64>();
        let (dh, ph) = (hits(|c| c.dram_hits), hits(|c| c.pmem_hits));
        eprintln!(
            "{dram}/{pmem} fill {cold_fill}: DRAM {dh} vs {}, PMem {ph} vs {}",
            got.dram_hits, got.pmem_hits
        );
        assert!(ph > 0 && dh > want.tables[2].requests);
        let close = |a: u64, b: u64| a.abs_diff(b) as f64 <= 0.001 * got.requests as f64;
        assert!(close(dh, got.dram_hits), "DRAM {dh} vs {}", got.dram_hits);
        assert!(close(ph, got.pmem_hits), "PMem {ph} vs {}", got.pmem_hits);
        let reads = hits(|c| c.ssd_rows_read);
        eprintln!("  SSD rows read {reads} vs {}", got.ssd_rows_read);
        // A dirty row waiting for its write-back is found in the store's
        // pending map and not read again; the simulation reads it.
        assert!(reads >= got.ssd_rows_read);
        assert!(reads - got.ssd_rows_read <= got.requests / 200);
    }
}
