//! Narrow row precisions (f16, bf16, int8) against an in-memory reference:
//! the reference keeps each row as the f32 values the element type can
//! represent, plus f32 optimizer state, and rounds with the same codec. The
//! store must agree bit for bit across tiers (rows evicted to PMem and SSD and
//! read back), across a flush and reopen, and for never-written rows.

mod common;

use std::collections::HashMap;

use common::{sum_in_order, tier_configs, with_engine, Rng};
use embtier::format::InitKind;
use embtier::precision::{decode, encode, Rounding};
use embtier::{Elem, Init, IoEngineKind, Optimizer, RoundingMode, Store, StoreConfig, TableConfig};

/// Odd, so int8 weights (dim + 8 bytes) leave the optimizer state unaligned.
const DIM: usize = 7;
const ROWS: u64 = 300;
const SEED: u64 = 5;

fn narrow(elem: Elem, w: &[f32]) -> Vec<f32> {
    let mut b = vec![0u8; elem.weight_bytes(w.len())];
    encode(elem, w, &mut b, Rounding::Nearest);
    let mut out = vec![0f32; w.len()];
    decode(elem, &b, &mut out);
    out
}

/// A reference row: representable weights and the optimizer's f32 state.
#[derive(Clone)]
struct RefRow {
    w: Vec<f32>,
    state: Vec<u8>,
}

fn configs(elem: Elem, opt: Optimizer) -> Vec<(&'static str, StoreConfig)> {
    tier_configs(
        |p| {
            TableConfig::new("t", ROWS, DIM as u32)
                .elem(elem)
                .rounding(RoundingMode::Nearest)
                .init(Init::Uniform { scale: 0.5 })
                .seed(SEED)
                .optimizer(opt)
                .placement(p)
        },
        20,
    )
}

#[test]
fn narrow_rows_match_the_reference_across_tiers_and_reopen() {
    let opt = Optimizer::Adagrad {
        lr: 0.05,
        eps: 1e-6,
        weight_decay: 0.0,
    };
    let sb = opt.state_bytes(DIM as u32) as usize;
    for elem in [Elem::F16, Elem::Bf16, Elem::Int8] {
        for (cname, cfg) in configs(elem, opt) {
            let what = format!("{elem:?}/{cname}");
            let cfg = with_engine(cfg, IoEngineKind::Auto);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s");
            let mut store = Some(Store::create(&path, cfg).unwrap());
            let mut model: HashMap<u64, RefRow> = HashMap::new();
            let get = |m: &HashMap<u64, RefRow>, id: u64| {
                m.get(&id).cloned().unwrap_or_else(|| {
                    let mut w = vec![0f32; DIM];
                    embtier::init::init_row(InitKind::Uniform, 0.5, SEED, id, &mut w);
                    RefRow {
                        w: narrow(elem, &w),
                        state: vec![0; sb],
                    }
                })
            };
            let mut rng = Rng(17);
            for round in 0..240 {
                let s = store.as_ref().unwrap();
                let n = 1 + rng.below(10) as usize;
                let ids: Vec<u64> = (0..n).map(|_| rng.below(ROWS)).collect();
                let vals: Vec<f32> = (0..n * DIM).map(|_| rng.small_f32()).collect();
                match round % 3 {
                    0 => {
                        s.update("t", &ids, &vals).unwrap();
                        for (k, &id) in ids.iter().enumerate() {
                            let mut r = get(&model, id);
                            r.w = narrow(elem, &vals[k * DIM..(k + 1) * DIM]);
                            model.insert(id, r); // last occurrence wins
                        }
                    }
                    _ => {
                        s.step("t", &ids, &vals).unwrap();
                        for (id, sum) in sum_in_order(&ids, &vals, DIM) {
                            let mut r = get(&model, id);
                            // Widen, step in f32, round the weights back.
                            let mut wide: Vec<u8> =
                                r.w.iter().flat_map(|x| x.to_le_bytes()).collect();
                            wide.extend_from_slice(&r.state);
                            opt.apply(&mut wide, &sum);
                            let w: Vec<f32> = wide[..DIM * 4]
                                .chunks_exact(4)
                                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                                .collect();
                            r.w = narrow(elem, &w);
                            r.state = wide[DIM * 4..].to_vec();
                            model.insert(id, r);
                        }
                    }
                }
                if round % 40 == 39 {
                    // Every row, written or not.
                    let all: Vec<u64> = (0..ROWS).collect();
                    let mut out = vec![0f32; all.len() * DIM];
                    s.lookup("t", &all, &mut out).unwrap();
                    for &id in &all {
                        let got = &out[id as usize * DIM..(id as usize + 1) * DIM];
                        let want = get(&model, id).w;
                        assert_eq!(
                            got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                            want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                            "{what}: row {id} after round {round}"
                        );
                    }
                }
                if round == 120 {
                    store.take().unwrap().flush().unwrap();
                    store = Some(Store::open(&path).unwrap());
                }
            }
        }
    }
}

/// Updates far below one unit in the last place: nearest rounding loses
/// every one of them, stochastic rounding keeps them in expectation.
#[test]
fn stochastic_rounding_keeps_updates_below_half_an_ulp() {
    const D: usize = 64;
    const R: u64 = 4;
    let steps = 1000;
    let lr = 1e-4f32;
    for elem in [Elem::Bf16, Elem::F16] {
        let mut means = Vec::new();
        for mode in [RoundingMode::Nearest, RoundingMode::Stochastic] {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::create(
                dir.path().join("s"),
                StoreConfig::builder()
                    .table(
                        TableConfig::new("t", R, D as u32)
                            .elem(elem)
                            .rounding(mode)
                            .init(Init::Zeros),
                    )
                    .build(),
            )
            .unwrap();
            let ids: Vec<u64> = (0..R).collect();
            store.update("t", &ids, &vec![1.0; R as usize * D]).unwrap();
            let g = vec![1.0f32; R as usize * D];
            for _ in 0..steps {
                store.apply_sgd("t", &ids, &g, lr).unwrap();
            }
            let mut out = vec![0f32; R as usize * D];
            store.lookup("t", &ids, &mut out).unwrap();
            means.push(out.iter().map(|&x| x as f64).sum::<f64>() / out.len() as f64);
        }
        let exact = 1.0 - steps as f64 * lr as f64; // 0.9
        assert_eq!(
            means[0], 1.0,
            "{elem:?}: nearest rounding cannot move off 1.0"
        );
        assert!(
            (means[1] - exact).abs() < 0.01,
            "{elem:?}: stochastic rounding mean {} vs exact {exact}",
            means[1]
        );
    }
}

/// int8 rows of dim 128 take 136 bytes against f32's 512, and the SSD
/// traffic of writing every row shrinks with them.
#[test]
fn int8_rows_shrink_ssd_bytes_about_fourfold() {
    const D: u32 = 128;
    const N: u64 = 3000;
    let mut written = Vec::new();
    let mut rng = Rng(99);
    let vals: Vec<f32> = (0..N as usize * D as usize)
        .map(|_| rng.small_f32())
        .collect();
    for elem in [Elem::F32, Elem::Int8] {
        let dir = tempfile::tempdir().unwrap();
        let table = TableConfig::new("t", N, D).elem(elem).init(Init::Zeros);
        let rb = table.row_bytes();
        let store = Store::create(
            dir.path().join("s"),
            StoreConfig::builder()
                .table(table)
                .dram_capacity(64 * rb)
                .build(),
        )
        .unwrap();
        let ids: Vec<u64> = (0..N).collect();
        store.update("t", &ids, &vals).unwrap();
        store.flush().unwrap();
        let mut out = vec![0f32; vals.len()];
        store.lookup("t", &ids, &mut out).unwrap();
        for (row, (o, v)) in out
            .chunks_exact(D as usize)
            .zip(vals.chunks_exact(D as usize))
            .enumerate()
        {
            let (lo, hi) = v
                .iter()
                .fold((f32::MAX, f32::MIN), |a, &x| (a.0.min(x), a.1.max(x)));
            let tol = if elem == Elem::Int8 {
                (hi - lo) / 255.0 / 2.0 * 1.0001 + 1e-6
            } else {
                0.0
            };
            for (a, b) in o.iter().zip(v) {
                assert!((a - b).abs() <= tol, "{elem:?}: row {row}: {b} read as {a}");
            }
        }
        written.push((rb, store.stats().table("t").unwrap().ssd.bytes_written));
    }
    assert_eq!((written[0].0, written[1].0), (512, 136));
    let ratio = written[1].1 as f64 / written[0].1 as f64;
    assert!(
        (0.2..0.3).contains(&ratio),
        "int8/f32 SSD bytes written {ratio:.3} ({written:?})"
    );
}

#[test]
fn reopening_with_another_element_type_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let cfg = |e: Elem| {
        StoreConfig::builder()
            .table(TableConfig::new("t", 10, 4).elem(e))
            .build()
    };
    drop(Store::create(&path, cfg(Elem::Bf16)).unwrap());
    let err = match Store::open_with(&path, cfg(Elem::F16), Default::default()) {
        Ok(_) => panic!("element type mismatch must be refused"),
        Err(e) => e,
    };
    assert!(
        matches!(&err, embtier::Error::ConfigMismatch { stored, .. } if stored.contains("Bf16")),
        "{err}"
    );
    Store::open(&path).expect("its own config reopens");
}

/// Issue 13, defect 3: stochastic rounding resumes across a restart. "Train
/// N steps, checkpoint, reopen, train M steps" stores the same bits as
/// "train N + M steps" in one open, in every narrow precision, for two
/// tables stepped in turn, and also when steps after the checkpoint were
/// lost to a crash (they are undone, and so is their draw of the stream).
#[test]
fn stochastic_rounding_is_reproducible_across_a_restart() {
    const D: u32 = 16;
    const ROWS_T: u64 = 500;
    let (n, m) = (12usize, 9usize);
    for elem in [Elem::F16, Elem::Bf16, Elem::Int8] {
        let config = || {
            StoreConfig::builder()
                .table(
                    TableConfig::new("a", ROWS_T, D)
                        .elem(elem)
                        .rounding(RoundingMode::Stochastic)
                        .seed(11)
                        .optimizer(Optimizer::RowwiseAdagrad {
                            lr: 0.01,
                            eps: 1e-8,
                            weight_decay: 0.0,
                        }),
                )
                .table(
                    TableConfig::new("b", ROWS_T, D)
                        .elem(elem)
                        .rounding(RoundingMode::Stochastic)
                        .seed(12)
                        .optimizer(Optimizer::Sgd {
                            lr: 0.003,
                            weight_decay: 0.0,
                        }),
                )
                // Small enough that rows go down to SSD and come back.
                .dram_capacity(64 << 10)
                .build()
        };
        let step = |s: &Store, k: usize| {
            let mut rng = Rng(1000 + k as u64);
            for table in ["a", "b"] {
                let ids: Vec<u64> = (0..256).map(|_| rng.below(ROWS_T)).collect();
                let grads: Vec<f32> = (0..ids.len() * D as usize)
                    .map(|_| rng.small_f32() * 1e-3)
                    .collect();
                s.step(table, &ids, &grads).unwrap();
            }
        };
        let all = |s: &Store| -> Vec<u32> {
            let ids: Vec<u64> = (0..ROWS_T).collect();
            let mut bits = Vec::new();
            for table in ["a", "b"] {
                let mut out = vec![0f32; ids.len() * D as usize];
                s.lookup(table, &ids, &mut out).unwrap();
                bits.extend(out.iter().map(|x| x.to_bits()));
            }
            bits
        };
        // One open.
        let t = tempfile::tempdir().unwrap();
        let s = Store::create(t.path().join("s"), config()).unwrap();
        (0..n + m).for_each(|k| step(&s, k));
        let straight = all(&s);
        // Checkpoint, reopen.
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("s");
        let s = Store::create(&dir, config()).unwrap();
        (0..n).for_each(|k| step(&s, k));
        s.checkpoint().unwrap();
        drop(s);
        let s = Store::open(&dir).unwrap();
        (n..n + m).for_each(|k| step(&s, k));
        assert!(
            all(&s) == straight,
            "{elem:?}: a restart changed the rounding"
        );
        // Checkpoint, steps lost to a crash, reopen.
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("s");
        let s = Store::create(&dir, config()).unwrap();
        (0..n).for_each(|k| step(&s, k));
        s.checkpoint().unwrap();
        (0..5).for_each(|k| step(&s, 77 + k));
        drop(s); // no checkpoint: the five steps are lost
        let s = Store::open(&dir).unwrap();
        (n..n + m).for_each(|k| step(&s, k));
        assert!(
            all(&s) == straight,
            "{elem:?}: steps lost to a crash changed the rounding"
        );
    }
}

/// An int8 row whose range passes f32's (values near ±f32::MAX: a step
/// that overflowed, or a user's update) read back as all NaN, and a row
/// with an infinite value (a step's overflow) as all zeros, its finite
/// values lost. Such a row now keeps its finite values to int8's
/// precision (a 255th of the range), saturates ±inf to ±f32::MAX and
/// stores NaN as the row's low end; a row of ordinary values is encoded
/// bit for bit as before.
#[test]
fn int8_rows_past_f32_range_keep_their_finite_values() {
    let step = |lo: f32, hi: f32| (hi as f64 - lo as f64) / 255.0;
    let cases: [&[f32]; 6] = [
        &[2.0e38, -2.0e38, 1.0, 5.0],
        &[f32::INFINITY, f32::NEG_INFINITY, 1.0, 2.0],
        &[f32::INFINITY, f32::INFINITY, f32::INFINITY, f32::INFINITY],
        &[f32::MAX, -f32::MAX, 0.0, 1.0e38],
        &[f32::INFINITY, 1.0, 2.0, 3.0],
        &[f32::NEG_INFINITY, f32::NAN, 2.0, 3.0],
    ];
    for w in cases {
        let out = narrow(Elem::Int8, w);
        let sat: Vec<f32> = w
            .iter()
            .map(|&x| {
                if x.is_nan() {
                    f32::NAN
                } else {
                    x.clamp(-f32::MAX, f32::MAX)
                }
            })
            .collect();
        let finite: Vec<f32> = sat.iter().copied().filter(|x| x.is_finite()).collect();
        let lo = finite.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = finite.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let tol = step(lo, hi) * 0.5 * 1.0001;
        for (k, (&x, &o)) in sat.iter().zip(&out).enumerate() {
            assert!(o.is_finite(), "{w:?}: element {k} read {o}");
            let want = if x.is_nan() { lo } else { x };
            assert!(
                (o as f64 - want as f64).abs() <= tol,
                "{w:?}: element {k} read {o}, want {want} within {tol}"
            );
        }
    }
    // Ordinary rows: the same bytes as the plain formula gives.
    let w = [0.25f32, -1.5, 3.0, 0.0, 7.5];
    let mut b = vec![0u8; Elem::Int8.weight_bytes(w.len())];
    encode(Elem::Int8, &w, &mut b, Rounding::Nearest);
    let (lo, hi) = (-1.5f32, 7.5f32);
    let scale = (hi - lo) / 255.0;
    for (k, &x) in w.iter().enumerate() {
        assert_eq!(b[k], ((x - lo) / scale).round() as u8);
    }
    assert_eq!(&b[5..9], &scale.to_le_bytes());
    assert_eq!(&b[9..13], &lo.to_le_bytes());
    // Through a store: a step that overflows leaves a row of finite values.
    let dir = tempfile::tempdir().unwrap();
    let t = TableConfig::new("t", 10, 4)
        .elem(Elem::Int8)
        .init(Init::Zeros);
    let s = Store::create(
        dir.path().join("s"),
        StoreConfig::builder().table(t).build(),
    )
    .unwrap();
    s.update("t", &[2], &[3.0e38, 1.0, 2.0, 3.0]).unwrap();
    s.apply_sgd("t", &[2], &[-1.0e38, 0.0, 0.0, 0.0], 1.0)
        .unwrap();
    let mut out = [0f32; 4];
    s.lookup("t", &[2], &mut out).unwrap();
    assert!(out.iter().all(|x| x.is_finite()), "{out:?}");
    assert!(out[0] > 3.0e38, "{out:?}");
}
