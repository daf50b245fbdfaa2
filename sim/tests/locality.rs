//! Locality analysis against the field's reference (libCacheSim) on the
//! shared CloudPhysics trace, and on generated traces.

use std::path::Path;

use embtier_sim::locality::{analyze, Options};
use embtier_sim::trace::gen::{GenSpec, GenTable};
use embtier_sim::trace::{import, CsvSpec, Format};

/// LRU miss ratios, object counts (sizes ignored), from libCacheSim 0.3.5:
/// `python3 sim/tests/reference/libcachesim_lru_mrc.py` (pip install libcachesim==0.3.5).
const LIBCACHESIM_LRU: [(u64, f64); 8] = [
    (1, 0.9764208936349585),
    (10, 0.9450962484192778),
    (100, 0.8800670928762119),
    (1000, 0.832715680764367),
    (5000, 0.8037709006603906),
    (10000, 0.6976078403821835),
    (20000, 0.6327543206407193),
    (48974, 0.430079387382324),
];

#[test]
fn cloudphysics_counts_and_lru_mrc_match_libcachesim() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/traces/cloudPhysicsIO.oracleGeneral.bin");
    if !p.exists() {
        eprintln!("SKIP: {} is absent", p.display());
        return;
    }
    let (t, _) = import(&p, Format::OracleGeneral, &CsvSpec::default(), 1).unwrap();
    let opts = Options {
        mrc_sizes: Some(LIBCACHESIM_LRU.iter().map(|x| x.0).collect()),
        ..Options::default()
    };
    let r = analyze(&t, &opts);
    let o = &r.overall;
    // Facts from the traces README.
    assert_eq!(
        (o.accesses, o.unique_rows, o.one_hit_rows),
        (113_872, 48_974, 21_049)
    );
    assert!((o.cold_miss_ratio - 0.430079).abs() < 1e-6);
    for (p, (size, want)) in o.mrc.iter().zip(LIBCACHESIM_LRU) {
        assert_eq!(p.cache_rows, size);
        assert!(
            (p.miss_ratio - want).abs() < 1e-9,
            "size {size}: ours {} libCacheSim {want}",
            p.miss_ratio
        );
    }
}

#[test]
fn generated_trace_skew_and_tables() {
    let spec = GenSpec {
        seed: 9,
        batches: 400,
        batch_size: 256,
        tables: vec![
            GenTable {
                name: "hot".into(),
                rows: 50_000,
                dim: 16,
                pooling: 4.0,
                alpha: 1.2,
                drift: 0.0,
            },
            GenTable {
                name: "flat".into(),
                rows: 50_000,
                dim: 16,
                pooling: 1.0,
                alpha: 0.0,
                drift: 0.0,
            },
        ],
    };
    let t = spec.generate();
    let r = analyze(&t, &Options::default());
    let (hot, flat) = (&r.tables[0], &r.tables[1]);
    assert_eq!(hot.accesses, 400 * 256 * 4);
    assert_eq!(flat.accesses, 400 * 256);
    assert_eq!(r.overall.accesses, hot.accesses + flat.accesses);
    assert!(
        hot.top_1pct_share > 0.5 && flat.top_1pct_share < 0.05,
        "{} {}",
        hot.top_1pct_share,
        flat.top_1pct_share
    );
    assert!(
        (hot.zipf_alpha - 1.2).abs() < 0.15,
        "alpha fit {}",
        hot.zipf_alpha
    );
    assert!(hot.gini > flat.gini);
    // Working sets and bandwidth: every batch touches both tables.
    assert_eq!(hot.working_set_per_batch.count, 400);
    assert!(hot.working_set_per_batch.max <= 1024.0 && hot.working_set_per_batch.mean > 100.0);
    assert!(
        flat.working_set_per_batch.mean > 250.0,
        "uniform over 50k rows: few repeats in 256"
    );
    let bw = &hot.bandwidth;
    assert_eq!(bw.row_bytes, 64); // dim 16 f32
    assert!((bw.accesses_per_batch - 1024.0).abs() < 1e-9);
    assert!((bw.bytes_per_s - 1024.0 * 64.0).abs() < 1e-6);
    assert!(bw.unique_bytes_per_s < bw.bytes_per_s);
    assert!((r.overall.bandwidth.bytes_per_s - (1024.0 + 256.0) * 64.0).abs() < 1e-6);
    // Histograms are fractions summing to 1.
    for tr in [hot, flat, &r.overall] {
        let s: f64 = tr.count_hist_rows.iter().sum();
        let a: f64 = tr.count_hist_accesses.iter().sum();
        assert!((s - 1.0).abs() < 1e-9 && (a - 1.0).abs() < 1e-9);
        // MRC is non-increasing in size.
        assert!(tr
            .mrc
            .windows(2)
            .all(|w| w[1].miss_ratio <= w[0].miss_ratio + 1e-12));
    }
}

/// SHARDS at rate 0.01 on a 10 M-access Zipf trace: within 0.01 mean
/// absolute error of the exact MRC over 100 cache sizes evenly spaced up to
/// the unique rows (the SHARDS paper's evaluation). The fixed-size variant
/// too. The MAE over a log-spaced grid from 10 rows is printed as well: sizes
/// below 1/R rows are below what a 1% sample resolves (docs/locality.md).
#[test]
fn shards_mae_on_10m_accesses() {
    use embtier_sim::locality::shards::{shards, Sampling};
    use embtier_sim::locality::{mrc_from_distances, stack_distances};
    let spec = GenSpec {
        seed: 11,
        batches: 2442,
        batch_size: 4096,
        tables: vec![GenTable {
            name: "z".into(),
            rows: 2_000_000,
            dim: 16,
            pooling: 1.0,
            alpha: 0.9,
            drift: 0.0,
        }],
    };
    let t = spec.generate();
    assert!(t.accesses.len() >= 10_000_000);
    // Dense ids once; exact distances once; each estimate once.
    let mut ids = std::collections::HashMap::new();
    let seq: Vec<u32> = t
        .accesses
        .iter()
        .map(|a| {
            let n = ids.len() as u32;
            *ids.entry(a.row).or_insert(n)
        })
        .collect();
    let unique = ids.len() as u64;
    let n = seq.len() as u64;
    let (dist, _, _) = stack_distances(&seq, unique as usize);
    let linear: Vec<u64> = (1..=100).map(|k| k * unique / 100).collect();
    let log: Vec<u64> = (0..30).map(|i| (10f64 * 1.4f64.powi(i)) as u64).collect();
    for sampling in [Sampling::Rate(0.01), Sampling::FixedSize(16_384)] {
        let est = shards(seq.iter().map(|&o| o as u64), n, sampling);
        let mae = |sizes: &[u64]| {
            let e = mrc_from_distances(&dist, n, sizes);
            let s = est.mrc(sizes);
            e.iter()
                .zip(&s)
                .map(|(a, b)| (a.miss_ratio - b.miss_ratio).abs())
                .sum::<f64>()
                / e.len() as f64
        };
        let (lin, lg) = (mae(&linear), mae(&log));
        println!("{sampling:?}: MAE {lin:.5} over 100 evenly spaced sizes, {lg:.5} over 30 log-spaced sizes from 10 rows");
        assert!(lin <= 0.01, "{sampling:?}: MAE {lin}");
    }
}
