//! Pooled embedding bags against a plain reference built on `lookup` and
//! `step`: a second store with the same configuration receives the same
//! batches as a `lookup` of every index (pooled here, in index order) and a
//! `step` of every index with its expanded gradient. Outputs and weights
//! must agree bit for bit, across tier configurations, precisions (with
//! stochastic rounding) and optimizers, and with the multi-table forms.

mod common;

use common::{tier_configs, Rng};
use embtier::{
    Elem, Error, Init, MemoryKind, Optimizer, Placement, PooledBatch, PooledGrad, PoolingMode,
    Store, StoreConfig, TableConfig,
};

const ROWS: u64 = 200;
const DIM: usize = 6;

/// A random batch of `b` bags (lengths 0 to 6, duplicates likely) over
/// `rows` rows, with weights.
fn bags(rng: &mut Rng, b: usize, rows: u64) -> (Vec<u64>, Vec<u64>, Vec<f32>) {
    let mut offsets = vec![0u64];
    let mut indices = Vec::new();
    for _ in 0..b {
        let n = rng.below(7);
        for _ in 0..n {
            indices.push(rng.below(rows));
        }
        offsets.push(indices.len() as u64);
    }
    let weights = indices.iter().map(|_| rng.small_f32()).collect();
    (indices, offsets, weights)
}

/// The reference forward: `lookup` of every index, then in-order f32
/// accumulation per bag from zero, then the mean's division.
fn ref_pool(
    s: &Store,
    t: &str,
    indices: &[u64],
    offsets: &[u64],
    mode: PoolingMode,
    w: Option<&[f32]>,
    dim: usize,
) -> Vec<f32> {
    let mut rows = vec![0f32; indices.len() * dim];
    s.lookup(t, indices, &mut rows).unwrap();
    let mut out = vec![0f32; (offsets.len() - 1) * dim];
    for b in 0..offsets.len() - 1 {
        let (lo, hi) = (offsets[b] as usize, offsets[b + 1] as usize);
        let o = &mut out[b * dim..(b + 1) * dim];
        for k in lo..hi {
            for j in 0..dim {
                o[j] += rows[k * dim + j] * w.map_or(1.0, |w| w[k]);
            }
        }
        if mode == PoolingMode::Mean && hi > lo {
            o.iter_mut().for_each(|a| *a /= (hi - lo) as f32);
        }
    }
    out
}

/// The reference backward: each index's expanded gradient, then `step`.
#[allow(clippy::too_many_arguments)]
fn ref_step(
    s: &Store,
    t: &str,
    indices: &[u64],
    offsets: &[u64],
    grad: &[f32],
    mode: PoolingMode,
    w: Option<&[f32]>,
    dim: usize,
) {
    let mut g = vec![0f32; indices.len() * dim];
    for b in 0..offsets.len() - 1 {
        let (lo, hi) = (offsets[b] as usize, offsets[b + 1] as usize);
        for k in lo..hi {
            for j in 0..dim {
                let x = grad[b * dim + j];
                g[k * dim + j] = match (mode, w) {
                    (PoolingMode::Mean, _) => x / (hi - lo) as f32,
                    (_, Some(w)) => x * w[k],
                    (_, None) => x,
                };
            }
        }
    }
    s.step(t, indices, &g).unwrap();
}

fn all_rows(s: &Store, t: &str, rows: u64, dim: usize) -> Vec<u32> {
    let ids: Vec<u64> = (0..rows).collect();
    let mut out = vec![0f32; ids.len() * dim];
    s.lookup(t, &ids, &mut out).unwrap();
    out.iter().map(|x| x.to_bits()).collect()
}

/// A part of a multi-table pooled lookup.
fn fwd<'a>(
    table: &'a str,
    indices: &'a [u64],
    offsets: &'a [u64],
    mode: PoolingMode,
    per_sample_weights: Option<&'a [f32]>,
    out: &'a mut [f32],
) -> PooledBatch<'a> {
    PooledBatch {
        table,
        indices,
        offsets,
        mode,
        per_sample_weights,
        out,
    }
}

/// A part of a multi-table pooled step.
fn bwd<'a>(
    table: &'a str,
    indices: &'a [u64],
    offsets: &'a [u64],
    mode: PoolingMode,
    per_sample_weights: Option<&'a [f32]>,
    grad: &'a [f32],
) -> PooledGrad<'a> {
    PooledGrad {
        table,
        indices,
        offsets,
        mode,
        per_sample_weights,
        grad,
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn pooled_calls_equal_lookup_and_step_bit_for_bit() {
    let opts = [
        Optimizer::Sgd {
            lr: 0.05,
            weight_decay: 0.0,
        },
        Optimizer::RowwiseAdagrad {
            lr: 0.05,
            eps: 1e-8,
            weight_decay: 0.0,
        },
    ];
    let mut cases = 0;
    for elem in [Elem::F32, Elem::F16, Elem::Bf16, Elem::Int8] {
        for opt in opts {
            for (cname, cfg) in tier_configs(
                |p| {
                    TableConfig::new("t", ROWS, DIM as u32)
                        .elem(elem)
                        .init(Init::Uniform { scale: 0.5 })
                        .seed(3)
                        .optimizer(opt)
                        .placement(p)
                },
                20,
            ) {
                let td = tempfile::tempdir().unwrap();
                let s = Store::create(td.path().join("pooled"), cfg.clone()).unwrap();
                let r = Store::create(td.path().join("reference"), cfg).unwrap();
                let mut rng = Rng(17);
                for step in 0..40 {
                    let mode = if step % 3 == 2 {
                        PoolingMode::Mean
                    } else {
                        PoolingMode::Sum
                    };
                    let (idx, off, w) = bags(&mut rng, 24, ROWS);
                    let w = (mode == PoolingMode::Sum && step % 2 == 0).then_some(&w[..]);
                    let b = off.len() - 1;
                    let what = format!("{elem:?} {opt:?} {cname} step {step} {mode:?}");
                    let mut out = vec![f32::NAN; b * DIM];
                    s.lookup_pooled("t", &idx, &off, mode, w, &mut out).unwrap();
                    let want = ref_pool(&r, "t", &idx, &off, mode, w, DIM);
                    assert_eq!(bits(&out), bits(&want), "{what}: forward");
                    let grad: Vec<f32> = (0..b * DIM).map(|_| rng.small_f32()).collect();
                    s.step_pooled("t", &idx, &off, &grad, mode, w).unwrap();
                    ref_step(&r, "t", &idx, &off, &grad, mode, w, DIM);
                    if step % 10 == 9 {
                        assert_eq!(
                            all_rows(&s, "t", ROWS, DIM),
                            all_rows(&r, "t", ROWS, DIM),
                            "{what}: weights"
                        );
                    }
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 4 * 2 * 3 * 40);
}

#[test]
fn multi_table_forms_equal_one_table_at_a_time() {
    let cfg = || {
        StoreConfig::builder()
            .table(
                TableConfig::new("a", 300, 4)
                    .init(Init::Uniform { scale: 0.1 })
                    .optimizer(Optimizer::RowwiseAdagrad {
                        lr: 0.1,
                        eps: 1e-8,
                        weight_decay: 0.0,
                    }),
            )
            .table(
                TableConfig::new("b", 500, 8)
                    .init(Init::Uniform { scale: 0.1 })
                    .elem(Elem::Bf16)
                    .optimizer(Optimizer::Sgd {
                        lr: 0.1,
                        weight_decay: 0.0,
                    }),
            )
            // A pinned table between the cached ones: pooled straight
            // from its rows while the others are looked up.
            .table(
                TableConfig::new("c", 200, 4)
                    .init(Init::Uniform { scale: 0.1 })
                    .placement(Placement::Pinned(MemoryKind::Dram))
                    .optimizer(Optimizer::Sgd {
                        lr: 0.1,
                        weight_decay: 0.0,
                    }),
            )
            .dram_capacity(16 << 10)
            .build()
    };
    let td = tempfile::tempdir().unwrap();
    let many = Store::create(td.path().join("many"), cfg()).unwrap();
    let one = Store::create(td.path().join("one"), cfg()).unwrap();
    let mut rng = Rng(5);
    for step in 0..30 {
        let (ia, oa, wa) = bags(&mut rng, 16, 300);
        let (ib, ob, _) = bags(&mut rng, 16, 500);
        let (ic, oc, wc) = bags(&mut rng, 16, 200);
        let (mut outa, mut outb) = (vec![0f32; 16 * 4], vec![0f32; 16 * 8]);
        let mut outc = vec![f32::NAN; 16 * 4];
        many.lookup_pooled_many(&mut [
            fwd("a", &ia, &oa, PoolingMode::Sum, Some(&wa), &mut outa),
            fwd("c", &ic, &oc, PoolingMode::Sum, Some(&wc), &mut outc),
            fwd("b", &ib, &ob, PoolingMode::Mean, None, &mut outb),
        ])
        .unwrap();
        let (mut wanta, mut wantb) = (vec![0f32; 16 * 4], vec![0f32; 16 * 8]);
        one.lookup_pooled("a", &ia, &oa, PoolingMode::Sum, Some(&wa), &mut wanta)
            .unwrap();
        one.lookup_pooled("b", &ib, &ob, PoolingMode::Mean, None, &mut wantb)
            .unwrap();
        assert_eq!(bits(&outa), bits(&wanta), "step {step}: a");
        assert_eq!(bits(&outb), bits(&wantb), "step {step}: b");
        let wantc = ref_pool(&one, "c", &ic, &oc, PoolingMode::Sum, Some(&wc), 4);
        assert_eq!(bits(&outc), bits(&wantc), "step {step}: c");
        let ga: Vec<f32> = (0..16 * 4).map(|_| rng.small_f32()).collect();
        let gb: Vec<f32> = (0..16 * 8).map(|_| rng.small_f32()).collect();
        many.step_pooled_many(&[
            bwd("a", &ia, &oa, PoolingMode::Sum, Some(&wa), &ga),
            bwd("b", &ib, &ob, PoolingMode::Mean, None, &gb),
            bwd("c", &ic, &oc, PoolingMode::Sum, Some(&wc), &ga),
        ])
        .unwrap();
        one.step_pooled("a", &ia, &oa, &ga, PoolingMode::Sum, Some(&wa))
            .unwrap();
        one.step_pooled("b", &ib, &ob, &gb, PoolingMode::Mean, None)
            .unwrap();
        one.step_pooled("c", &ic, &oc, &ga, PoolingMode::Sum, Some(&wc))
            .unwrap();
    }
    assert_eq!(all_rows(&many, "c", 200, 4), all_rows(&one, "c", 200, 4));
    assert_eq!(all_rows(&many, "a", 300, 4), all_rows(&one, "a", 300, 4));
    assert_eq!(all_rows(&many, "b", 500, 8), all_rows(&one, "b", 500, 8));
}

#[test]
fn bad_bags_get_typed_errors_and_change_nothing() {
    let td = tempfile::tempdir().unwrap();
    let s = Store::create(
        td.path().join("s"),
        StoreConfig::builder()
            .table(TableConfig::new("t", 10, 2).init(Init::Zeros))
            .build(),
    )
    .unwrap();
    let mut out = vec![0f32; 4];
    let off_err = |idx: &[u64], off: &[u64], n: usize| {
        let mut out = vec![0f32; n * 2];
        s.lookup_pooled("t", idx, off, PoolingMode::Sum, None, &mut out)
            .unwrap_err()
    };
    for (idx, off, n, at) in [
        (&[1u64, 2][..], &[][..], 0usize, 0usize), // no offsets
        (&[1, 2], &[1, 2], 1, 0),                  // does not start at 0
        (&[1, 2], &[0, 2, 1], 2, 2),               // decreasing
        (&[1, 2], &[0, 1], 1, 1),                  // ends short of the indices
        (&[1, 2], &[0, 3], 1, 1),                  // ends past them
    ] {
        match off_err(idx, off, n) {
            Error::BadOffsets { table, at: a, .. } => {
                assert_eq!((table.as_str(), a), ("t", at), "{off:?}")
            }
            other => panic!("{off:?}: {other:?}"),
        }
    }
    assert!(matches!(
        s.lookup_pooled(
            "t",
            &[1, 10],
            &[0, 2],
            PoolingMode::Sum,
            None,
            &mut out[..2]
        ),
        Err(Error::IdOutOfRange {
            id: 10,
            rows: 10,
            ..
        })
    ));
    assert!(matches!(
        s.lookup_pooled("t", &[1], &[0, 1], PoolingMode::Sum, None, &mut out),
        Err(Error::LengthMismatch { what: "out", .. })
    ));
    assert!(matches!(
        s.lookup_pooled(
            "t",
            &[1],
            &[0, 1],
            PoolingMode::Sum,
            Some(&[1.0, 2.0]),
            &mut out[..2]
        ),
        Err(Error::LengthMismatch {
            what: "per_sample_weights",
            ..
        })
    ));
    assert!(s
        .lookup_pooled(
            "t",
            &[1],
            &[0, 1],
            PoolingMode::Mean,
            Some(&[1.0]),
            &mut out[..2]
        )
        .is_err());
    assert!(matches!(
        s.step_pooled("t", &[1], &[0, 1], &[1.0], PoolingMode::Sum, None),
        Err(Error::LengthMismatch { what: "grad", .. })
    ));
    assert!(matches!(
        s.step_pooled(
            "t",
            &[1, 2],
            &[0, 1, 2],
            &[1.0, 1.0, 1.0, f32::NAN],
            PoolingMode::Sum,
            None
        ),
        Err(Error::NonFinite {
            id: 1,
            element: 1,
            ..
        })
    ));
    assert!(matches!(
        s.step_pooled("nope", &[1], &[0, 1], &[1.0, 1.0], PoolingMode::Sum, None),
        Err(Error::UnknownTable { .. })
    ));
    // Nothing was written by any of them.
    let mut all = vec![0f32; 20];
    s.lookup("t", &(0..10).collect::<Vec<_>>(), &mut all)
        .unwrap();
    assert_eq!(all, vec![0.0; 20]);
    assert_eq!("mean".parse::<PoolingMode>().unwrap(), PoolingMode::Mean);
    assert!("max".parse::<PoolingMode>().is_err());
}

/// The figures a table's stats give for its accesses.
fn counted(s: &Store, t: &str) -> Vec<u64> {
    let st = s.stats();
    let t = st.table(t).unwrap();
    let mut v = vec![t.lookups, t.updates, t.prefetched, t.ssd.rows_read];
    for tier in &t.tiers {
        v.extend([tier.lookups, tier.hits, tier.misses]);
    }
    v
}

#[test]
fn a_pooled_lookup_counts_every_index_as_a_lookup_of_them_would() {
    // Caches that hold a call's rows without evicting one of them, so a
    // plain lookup's later occurrences of a row find it where the first
    // left it; rows in DRAM, in PMem and on SSD only.
    let rb = TableConfig::new("t", ROWS, DIM as u32).row_bytes();
    let configs = [
        StoreConfig::builder()
            .table(TableConfig::new("t", ROWS, DIM as u32))
            .dram_capacity(64 * rb)
            .dram_shards(1)
            .dram_policy(embtier::PolicyKind::Lru)
            .pmem(None, 200 * rb, embtier::PolicyKind::Lru)
            .build(),
        StoreConfig::builder()
            .table(
                TableConfig::new("t", ROWS, DIM as u32)
                    .placement(Placement::Pinned(MemoryKind::Dram)),
            )
            .dram_capacity(1 << 20)
            .build(),
    ];
    for (ci, cfg) in configs.into_iter().enumerate() {
        for seed in 0..6 {
            let td = tempfile::tempdir().unwrap();
            let s = Store::create(td.path().join("pooled"), cfg.clone()).unwrap();
            let r = Store::create(td.path().join("reference"), cfg.clone()).unwrap();
            let mut rng = Rng(100 + seed);
            // The same history in both: 120 rows, most past DRAM's 64.
            let warm: Vec<u64> = (0..120).map(|_| rng.below(ROWS)).collect();
            let mut sink = vec![0f32; warm.len() * DIM];
            s.lookup("t", &warm, &mut sink).unwrap();
            r.lookup("t", &warm, &mut sink).unwrap();
            assert_eq!(counted(&s, "t"), counted(&r, "t"));
            // 12 bags over 40 rows: duplicates in most.
            let (idx, off, _) = bags(&mut rng, 12, 40);
            let mut out = vec![0f32; 12 * DIM];
            s.lookup_pooled("t", &idx, &off, PoolingMode::Sum, None, &mut out)
                .unwrap();
            let mut rows = vec![0f32; idx.len() * DIM];
            r.lookup("t", &idx, &mut rows).unwrap();
            assert_eq!(
                counted(&s, "t"),
                counted(&r, "t"),
                "config {ci} seed {seed}: {} indices",
                idx.len()
            );
        }
    }
}

#[test]
fn a_step_of_several_cached_tables_counts_as_their_steps_one_at_a_time() {
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("a", 300, 4))
        .table(TableConfig::new("b", 500, 8))
        .dram_capacity(16 << 10)
        .build();
    let td = tempfile::tempdir().unwrap();
    let many = Store::create(td.path().join("many"), cfg.clone()).unwrap();
    let one = Store::create(td.path().join("one"), cfg).unwrap();
    let mut rng = Rng(9);
    for _ in 0..3 {
        let (ia, oa, _) = bags(&mut rng, 16, 300);
        let (ib, ob, _) = bags(&mut rng, 16, 500);
        let (ga, gb) = (vec![0.5f32; 16 * 4], vec![0.5f32; 16 * 8]);
        let a = bwd("a", &ia, &oa, PoolingMode::Sum, None, &ga);
        let b = bwd("b", &ib, &ob, PoolingMode::Sum, None, &gb);
        many.step_pooled_many(&[a, b]).unwrap();
        one.step_pooled_many(&[a]).unwrap();
        one.step_pooled_many(&[b]).unwrap();
        for t in ["a", "b"] {
            let (m, o) = (counted(&many, t), counted(&one, t));
            // Updates of the distinct rows only: no lookups, no prefetches.
            assert_eq!((m[0], m[2]), (0, 0), "{t}: {m:?}");
            assert_eq!(m, o, "{t}");
        }
    }
}

#[test]
fn large_multi_table_lookups_probed_side_by_side_equal_one_table_at_a_time() {
    // Batches past the size at which each table's hits are probed on a
    // thread of its own, through caches that evict.
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("a", 5000, 4).init(Init::Uniform { scale: 0.1 }))
        .table(
            TableConfig::new("b", 3000, 8)
                .init(Init::Uniform { scale: 0.1 })
                .elem(Elem::F16),
        )
        .dram_capacity(64 << 10)
        .build();
    let td = tempfile::tempdir().unwrap();
    let many = Store::create(td.path().join("many"), cfg.clone()).unwrap();
    let one = Store::create(td.path().join("one"), cfg).unwrap();
    let mut rng = Rng(21);
    for step in 0..6 {
        let (ia, oa, _) = bags(&mut rng, 1500, 5000);
        let (ib, ob, _) = bags(&mut rng, 1500, 3000);
        let distinct = |v: &[u64]| v.iter().collect::<std::collections::HashSet<_>>().len();
        assert!(distinct(&ia) + distinct(&ib) >= 4096, "probed side by side");
        let (mut outa, mut outb) = (vec![0f32; 1500 * 4], vec![0f32; 1500 * 8]);
        many.lookup_pooled_many(&mut [
            fwd("a", &ia, &oa, PoolingMode::Sum, None, &mut outa),
            fwd("b", &ib, &ob, PoolingMode::Mean, None, &mut outb),
        ])
        .unwrap();
        let (mut wanta, mut wantb) = (vec![0f32; 1500 * 4], vec![0f32; 1500 * 8]);
        one.lookup_pooled("a", &ia, &oa, PoolingMode::Sum, None, &mut wanta)
            .unwrap();
        one.lookup_pooled("b", &ib, &ob, PoolingMode::Mean, None, &mut wantb)
            .unwrap();
        assert_eq!(bits(&outa), bits(&wanta), "step {step}: a");
        assert_eq!(bits(&outb), bits(&wantb), "step {step}: b");
        for t in ["a", "b"] {
            assert_eq!(counted(&many, t), counted(&one, t), "step {step}: {t}");
        }
        let ga: Vec<f32> = (0..1500 * 4).map(|_| rng.small_f32()).collect();
        many.step_pooled_many(&[bwd("a", &ia, &oa, PoolingMode::Sum, None, &ga)])
            .unwrap();
        one.step_pooled("a", &ia, &oa, &ga, PoolingMode::Sum, None)
            .unwrap();
    }
    assert_eq!(all_rows(&many, "a", 5000, 4), all_rows(&one, "a", 5000, 4));
}
