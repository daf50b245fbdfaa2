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
