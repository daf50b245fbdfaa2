//! `emb-replay demo`: a generated trace through a few hierarchies, for a
//! first look without data.

use super::*;

pub(super) fn demo() -> Result<(), Fail> {
    let spec = GenSpec {
        seed: 7,
        batches: 200,
        batch_size: 512,
        tables: vec![
            GenTable {
                name: "user".into(),
                rows: 2_000_000,
                dim: 32,
                pooling: 1.0,
                alpha: 1.05,
                drift: 0.0,
            },
            GenTable {
                name: "item".into(),
                rows: 500_000,
                dim: 32,
                pooling: 8.0,
                alpha: 0.9,
                drift: 0.0005,
            },
            GenTable {
                name: "country".into(),
                rows: 200,
                dim: 32,
                pooling: 1.0,
                alpha: 0.6,
                drift: 0.0,
            },
        ],
    };
    let t = spec.generate();
    let mut o = String::new();
    let _ = writeln!(
        o,
        "embedded workload: 3 tables (2M users Zipf 1.05; 500k items, pooling 8, Zipf 0.9, drifting; 200 countries), {} batches of 512 samples, {} accesses, rows of 128 bytes (dim 32, f32)\n",
        t.batch_ends.len(),
        t.accesses.len()
    );
    // 1. Single-tier sweep.
    let keys: Vec<u64> = t.accesses.iter().map(|a| a.key()).collect();
    let sweep = MiniSim::new(keys, 1.0, 1);
    let sims = [
        SimPolicy::Online(PolicyKind::Lru),
        SimPolicy::Online(PolicyKind::Clock),
        SimPolicy::Online(PolicyKind::Arc),
        SimPolicy::Online(PolicyKind::S3Fifo),
        SimPolicy::Online(PolicyKind::Sieve),
        SimPolicy::SetAssoc(embtier_sim::offline::SetPolicy::Lru),
        SimPolicy::Belady,
    ];
    let sizes = [1_000u64, 10_000, 50_000, 200_000];
    let jobs: Vec<(SimPolicy, u64)> = sims
        .iter()
        .flat_map(|&s| sizes.iter().map(move |&z| (s, z)))
        .collect();
    let res: Vec<MiniPoint> = jobs.par_iter().map(|&(s, z)| sweep.run(s, z)).collect();
    let _ = writeln!(
        o,
        "1. DRAM miss ratio (misses / requests) by policy and DRAM size in rows ({} unique rows):\n",
        sweep.unique_estimate()
    );
    let point = |s: SimPolicy, z: u64| {
        res.iter()
            .find(|p| p.policy == s && p.size == z)
            .expect("simulated")
    };
    o.push_str(&miss_ratio_table(
        &sims,
        &sizes,
        |z| format!("{}k rows", z / 1000),
        |s, z| {
            let p = point(s, z);
            miss_ratio_cell(z, p.miss_ratio(), rows_simulated(p))
        },
    ));
    if res.iter().any(|p| rows_simulated(p) != p.size) {
        let _ = writeln!(
            o,
            "\n(N rows): the cache held N rows; a {WAYS}-way cache holds whole sets of {WAYS} rows"
        );
    }
    // 2. Three tiers with step-time estimates.
    let geo = RowGeometry::of(&t, 128);
    let dev = |n: &str| DeviceProfile::builtin(n).expect("built-in");
    let _ = writeln!(o, "\n2. Three tiers (exclusive: DRAM SIEVE above PMem LRU above SSD), estimated with the dram, optane-pmem and nand-nvme profiles; shares are of all row requests:\n");
    let mut tab = Table::new([
        "DRAM rows (SIEVE)",
        "PMem rows (LRU)",
        "DRAM share",
        "PMem share",
        "SSD rows read",
        "est. ms per batch",
    ]);
    for (d, p) in [(10_000u64, 0u64), (10_000, 200_000), (50_000, 200_000)] {
        let mut tiers = vec![TierSpec {
            kind: embtier::MemoryKind::Dram,
            policy: PolicyKind::Sieve,
            rows: d,
        }];
        let mut prof = vec![dev("dram")];
        if p > 0 {
            tiers.push(TierSpec {
                kind: embtier::MemoryKind::Pmem,
                policy: PolicyKind::Lru,
                rows: p,
            });
            prof.push(dev("optane-pmem"));
        }
        prof.push(dev("nand-nvme"));
        let h = Hierarchy {
            tiers,
            ssd: true,
            inclusive: false,
        };
        let r = simulate_hierarchy(&t, &h, &geo, Some(&prof));
        tab.row([
            d.to_string(),
            if p > 0 { p.to_string() } else { "none".into() },
            format!("{:.4}", r.tiers[0].request_share),
            r.tiers
                .get(1)
                .map_or("-".to_string(), |x| format!("{:.4}", x.request_share)),
            r.ssd.rows_read.to_string(),
            format!("{:.3}", r.est_seconds_per_batch * 1e3),
        ]);
    }
    o.push_str(&tab.markdown());
    // 3. A short run against the real store.
    let tmp = tempfile::tempdir().map_err(data)?;
    let cfg = embtier::StoreConfig::builder()
        .table(embtier::TableConfig::new("user", 2_000_000, 32))
        .table(embtier::TableConfig::new("item", 500_000, 32))
        .table(
            embtier::TableConfig::new("country", 200, 32)
                .placement(embtier::Placement::Pinned(embtier::MemoryKind::Dram)),
        )
        .dram_capacity(50_000 * 128)
        .dram_policy(PolicyKind::Sieve)
        .pmem(None, 200_000 * 128, PolicyKind::Lru)
        .build();
    let store = embtier::Store::create(tmp.path().join("store"), cfg).map_err(data)?;
    let r = run_store(&store, &t, 0.5, 1, |_, _| {}).map_err(data)?;
    let _ = writeln!(
        o,
        "\n3. The real store (DRAM 50k rows SIEVE, PMem 200k rows LRU, countries pinned to DRAM; half the lookups also updated): {:.0} accesses/s with the {} engine, batch p50 {:.0} us, p99 {:.0} us; {} row requests, SSD {} rows read, {} written:\n",
        r.rows_per_s,
        r.io_engine,
        r.batch_p50_us,
        r.batch_p99_us,
        r.requests,
        r.ssd_rows_read,
        r.ssd_rows_written
    );
    o.push_str(&run_table(&r, &["sieve", "lru"]).markdown());
    let _ = writeln!(o, "\n{SHARES}");
    emit(&o)
}
