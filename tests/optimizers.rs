//! Each fused optimizer against a straightforward reference implementation,
//! bit-identical in f32 over many random steps (with duplicate ids), across
//! tier configurations where eviction is constant, and across a reopen.

// The reference is written as plain index loops on purpose: a literal
// transcription of the formulas, independent of the store's code.
#![allow(clippy::needless_range_loop)]

mod common;

use std::collections::HashMap;

use common::{sum_in_order, tier_configs, with_engine, Rng};
use embtier::format::InitKind;
use embtier::{Init, IoEngineKind, Optimizer, Store, StoreConfig, TableConfig};

const DIM: usize = 6;
const ROWS: u64 = 400;

/// A row of the reference: weights and optimizer state, plain vectors.
#[derive(Clone)]
struct RefRow {
    w: Vec<f32>,
    a: Vec<f32>, // Adagrad accumulators, or Adam's m (row-wise Adagrad uses a[0])
    b: Vec<f32>, // Adam's v
    t: u32,
}

fn reference_step(opt: &Optimizer, r: &mut RefRow, g: &[f32]) {
    let wd = match *opt {
        Optimizer::Sgd { weight_decay, .. }
        | Optimizer::RowwiseAdagrad { weight_decay, .. }
        | Optimizer::Adagrad { weight_decay, .. }
        | Optimizer::Adam { weight_decay, .. } => weight_decay,
        _ => unreachable!(),
    };
    // The gradient with weight decay, from the weights before this step.
    let gd: Vec<f32> = (0..DIM)
        .map(|i| if wd != 0.0 { g[i] + wd * r.w[i] } else { g[i] })
        .collect();
    match *opt {
        Optimizer::Sgd { lr, .. } => {
            for i in 0..DIM {
                r.w[i] -= lr * gd[i];
            }
        }
        Optimizer::RowwiseAdagrad { lr, eps, .. } => {
            let mut sq = 0.0f32;
            for x in &gd {
                sq += x * x;
            }
            r.a[0] += sq / DIM as f32;
            let denom = r.a[0].sqrt() + eps;
            for i in 0..DIM {
                r.w[i] -= lr * gd[i] / denom;
            }
        }
        Optimizer::Adagrad { lr, eps, .. } => {
            for i in 0..DIM {
                r.a[i] += gd[i] * gd[i];
                r.w[i] -= lr * gd[i] / (r.a[i].sqrt() + eps);
            }
        }
        Optimizer::Adam {
            lr,
            beta1,
            beta2,
            eps,
            ..
        } => {
            r.t += 1;
            let c1 = 1.0 - beta1.powi(r.t as i32);
            let c2 = 1.0 - beta2.powi(r.t as i32);
            for i in 0..DIM {
                r.a[i] = beta1 * r.a[i] + (1.0 - beta1) * gd[i];
                r.b[i] = beta2 * r.b[i] + (1.0 - beta2) * gd[i] * gd[i];
                r.w[i] -= lr * (r.a[i] / c1) / ((r.b[i] / c2).sqrt() + eps);
            }
        }
        _ => unreachable!(),
    }
}

fn optimizers() -> Vec<(&'static str, Optimizer)> {
    vec![
        (
            "sgd",
            Optimizer::Sgd {
                lr: 0.05,
                weight_decay: 0.01,
            },
        ),
        (
            "rowwise-adagrad",
            Optimizer::RowwiseAdagrad {
                lr: 0.1,
                eps: 1e-6,
                weight_decay: 0.0,
            },
        ),
        (
            "adagrad",
            Optimizer::Adagrad {
                lr: 0.1,
                eps: 1e-6,
                weight_decay: 0.001,
            },
        ),
        (
            "adam",
            Optimizer::Adam {
                lr: 0.01,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            },
        ),
    ]
}

fn configs(opt: Optimizer) -> Vec<(&'static str, StoreConfig)> {
    tier_configs(
        |p| {
            TableConfig::new("t", ROWS, DIM as u32)
                .init(Init::Uniform { scale: 0.1 })
                .seed(3)
                .optimizer(opt)
                .placement(p)
        },
        40,
    )
}

#[test]
fn fused_optimizers_match_the_reference_bit_for_bit() {
    for (oname, opt) in optimizers() {
        for (cname, cfg) in configs(opt) {
            let cfg = with_engine(cfg, IoEngineKind::Auto);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s");
            let mut store = Some(Store::create(&path, cfg).unwrap());
            let mut model: HashMap<u64, RefRow> = HashMap::new();
            let row = |m: &HashMap<u64, RefRow>, id: u64| {
                m.get(&id).cloned().unwrap_or_else(|| {
                    let mut w = vec![0f32; DIM];
                    embtier::init::init_row(InitKind::Uniform, 0.1, 3, id, &mut w);
                    RefRow {
                        w,
                        a: vec![0.0; DIM],
                        b: vec![0.0; DIM],
                        t: 0,
                    }
                })
            };
            let mut rng = Rng(11);
            for step in 0..300 {
                let s = store.as_ref().unwrap();
                let n = 1 + rng.below(12) as usize;
                let ids: Vec<u64> = (0..n)
                    .map(|_| {
                        if rng.below(2) == 0 {
                            rng.below(8)
                        } else {
                            rng.below(ROWS)
                        }
                    })
                    .collect();
                let grads: Vec<f32> = (0..n * DIM).map(|_| rng.small_f32()).collect();
                s.step("t", &ids, &grads).unwrap();
                // Reference: sum duplicates in order, apply once.
                for (id, sum) in sum_in_order(&ids, &grads, DIM) {
                    let mut r = row(&model, id);
                    reference_step(&opt, &mut r, &sum);
                    model.insert(id, r);
                }
                if step % 50 == 49 {
                    let s = store.take().unwrap();
                    s.flush().unwrap();
                    drop(s);
                    store = Some(Store::open(&path).unwrap());
                }
                if step % 7 == 0 {
                    let s = store.as_ref().unwrap();
                    let check: Vec<u64> = (0..10).map(|_| rng.below(ROWS)).collect();
                    let mut out = vec![0f32; check.len() * DIM];
                    s.lookup("t", &check, &mut out).unwrap();
                    for (k, id) in check.iter().enumerate() {
                        let want = row(&model, *id).w;
                        let got = &out[k * DIM..(k + 1) * DIM];
                        assert!(
                            got.iter()
                                .zip(&want)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{oname}/{cname} step {step} row {id}: {got:?} vs {want:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn optimizer_state_is_in_the_row_and_checked_at_open() {
    let adam = Optimizer::Adam {
        lr: 0.01,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    let t = TableConfig::new("t", 10, 8).optimizer(adam);
    assert_eq!(t.row_bytes(), 8 * 4 + 2 * 8 * 4 + 4);
    let dir = tempfile::tempdir().unwrap();
    let s = Store::create(
        dir.path().join("s"),
        StoreConfig::builder().table(t).build(),
    )
    .unwrap();
    drop(s);
    // Reopening with another optimizer (other state size) is refused.
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("t", 10, 8))
        .build();
    let e = Store::open_with(dir.path().join("s"), cfg, Default::default()).unwrap_err();
    assert!(
        matches!(&e, embtier::Error::ConfigMismatch { stored, .. } if stored.contains("Adam")),
        "{e}"
    );
    // Same state size, other kind (dim 1: row-wise Adagrad and Adagrad
    // both hold 4 bytes): refused too, because the catalog records the kind.
    let rw = Optimizer::RowwiseAdagrad {
        lr: 0.1,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    let ada = Optimizer::Adagrad {
        lr: 0.1,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    let one = |o: Optimizer| {
        StoreConfig::builder()
            .table(TableConfig::new("t", 10, 1).optimizer(o))
            .build()
    };
    drop(Store::create(dir.path().join("one"), one(rw)).unwrap());
    match Store::open_with(dir.path().join("one"), one(ada), Default::default()) {
        Err(embtier::Error::ConfigMismatch { stored, .. }) => {
            assert!(stored.contains("RowwiseAdagrad"), "{stored}")
        }
        Err(e) => panic!("expected ConfigMismatch, got {e}"),
        Ok(_) => panic!("another optimizer kind was accepted"),
    }
    // A new learning rate is fine: hyper-parameters may change between opens.
    let rw2 = Optimizer::RowwiseAdagrad {
        lr: 0.01,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    Store::open_with(dir.path().join("one"), one(rw2), Default::default())
        .expect("same kind, new lr");
    // Bad hyper-parameters are config errors.
    let bad = StoreConfig::builder()
        .table(TableConfig::new("u", 10, 8).optimizer(Optimizer::Adam {
            lr: 0.1,
            beta1: 1.5,
            beta2: 0.9,
            eps: 1e-8,
            weight_decay: 0.0,
        }))
        .build();
    assert!(Store::create(dir.path().join("u"), bad)
        .unwrap_err()
        .to_string()
        .contains("beta1"));
}

/// Bad gradients get typed errors and leave every row (weights and state)
/// untouched, in every precision; a table that opts in accepts them.
#[test]
fn step_rejects_bad_gradients_without_partial_update() {
    let opt = Optimizer::Adagrad {
        lr: 0.1,
        eps: 1e-8,
        weight_decay: 0.0,
    };
    for elem in [embtier::Elem::F32, embtier::Elem::Bf16, embtier::Elem::Int8] {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::create(
            dir.path().join("s"),
            StoreConfig::builder()
                .table(TableConfig::new("t", 50, 4).optimizer(opt).elem(elem))
                .table(
                    TableConfig::new("open", 50, 4)
                        .optimizer(opt)
                        .allow_non_finite(true),
                )
                .build(),
        )
        .unwrap();
        let ids = [1u64, 2, 3];
        s.step("t", &ids, &[0.5; 12]).unwrap();
        let snapshot = |s: &Store| {
            let mut out = vec![0f32; 12];
            s.lookup("t", &ids, &mut out).unwrap();
            out.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        let before = snapshot(&s);
        match s.step("t", &ids, &[0.5; 11]) {
            Err(embtier::Error::LengthMismatch {
                what,
                got,
                expected,
                ..
            }) => assert_eq!((what, got, expected), ("grads", 11, 12)),
            other => panic!("{elem:?}: expected LengthMismatch, got {other:?}"),
        }
        let mut g = [0.5f32; 12];
        g[10] = f32::NAN; // the last row's: earlier rows must not be written
        match s.step("t", &ids, &g) {
            Err(embtier::Error::NonFinite { id, element, .. }) => assert_eq!((id, element), (3, 2)),
            other => panic!("{elem:?}: expected NonFinite, got {other:?}"),
        }
        g[10] = f32::INFINITY;
        assert!(s.step("t", &ids, &g).is_err());
        assert!(matches!(
            s.step("t", &[1, 50], &[0.5; 8]),
            Err(embtier::Error::IdOutOfRange { .. })
        ));
        assert_eq!(before, snapshot(&s), "{elem:?}: a rejected step wrote");
        // The second step on the same rows proves the state was untouched:
        // it must equal a store that saw only the first step, then this one.
        s.step("t", &ids, &[0.25; 12]).unwrap();
        let dir2 = tempfile::tempdir().unwrap();
        let s2 = Store::create(
            dir2.path().join("s"),
            StoreConfig::builder()
                .table(TableConfig::new("t", 50, 4).optimizer(opt).elem(elem))
                .build(),
        )
        .unwrap();
        s2.step("t", &ids, &[0.5; 12]).unwrap();
        s2.step("t", &ids, &[0.25; 12]).unwrap();
        assert_eq!(
            snapshot(&s),
            snapshot(&s2),
            "{elem:?}: optimizer state changed"
        );
        // Opt-in table: NaN goes through.
        s.step("open", &[1], &[f32::NAN, 0.0, 0.0, 0.0]).unwrap();
        let mut out = [0f32; 4];
        s.lookup("open", &[1], &mut out).unwrap();
        assert!(out[0].is_nan());
    }
}

/// A table's optimizer state leaves and enters a store with its weights:
/// a store loaded from another's `export_rows` and `export_state` then
/// takes the same steps, bit for bit, for every optimizer, with rows
/// spread over a small cache, PMem and the SSD and with a pinned table.
/// The export reads (no row turns dirty); a bad length or a non-finite
/// state is refused whole.
#[test]
fn optimizer_state_leaves_and_enters_with_the_weights() {
    use embtier::{Error, Init, MemoryKind, Placement};
    let (rows, dim) = (3000u64, 8usize);
    // The optimizers with state (SGD's case is at the end).
    let opts = optimizers()
        .into_iter()
        .map(|(_, o)| o)
        .filter(|o| o.state_bytes(dim as u32) > 0);
    for opt in opts {
        for pinned in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let make = |name: &str, seed: u64| {
                let mut t = TableConfig::new("t", rows, dim as u32)
                    .init(Init::Uniform { scale: 0.5 })
                    .seed(seed)
                    .optimizer(opt);
                if pinned {
                    t = t.placement(Placement::Pinned(MemoryKind::Dram));
                }
                let cfg = StoreConfig::builder()
                    .table(t)
                    .dram_capacity(if pinned { 1 << 20 } else { 16 << 10 })
                    .pmem(None, 32 << 10, embtier::PolicyKind::Lru)
                    .build();
                Store::create(dir.path().join(name), cfg).unwrap()
            };
            let (a, b) = (make("a", 1), make("b", 2));
            let mut x = 7u64;
            let mut batch = || {
                let ids: Vec<u64> = (0..200)
                    .map(|_| {
                        x = embtier::init::mix64(x);
                        x % rows
                    })
                    .collect();
                let grads: Vec<f32> = (0..ids.len() * dim)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) * 1e-2)
                    .collect();
                (ids, grads)
            };
            for _ in 0..5 {
                let (ids, g) = batch();
                a.step("t", &ids, &g).unwrap();
            }
            a.checkpoint().unwrap();
            let sb = a.state_bytes("t").unwrap();
            assert_eq!(sb, opt.state_bytes(dim as u32) as usize);
            let mut w = vec![0f32; rows as usize * dim];
            let mut s = vec![0u8; rows as usize * sb];
            a.export_rows("t", 0, &mut w).unwrap();
            a.export_state("t", 0, &mut s).unwrap();
            assert_eq!(a.dirty_rows(), 0, "{opt:?}: an export is a read");
            assert!(s.iter().any(|&v| v != 0), "{opt:?}: some state was made");
            // Refused whole: a length not of whole rows, a NaN.
            let e = b.import_state("t", 0, &s[..sb + 1]).unwrap_err();
            assert!(matches!(e, Error::StateLength { .. }), "{e}");
            let mut bad = s[..2 * sb].to_vec();
            bad[sb..sb + 4].copy_from_slice(&f32::NAN.to_le_bytes());
            let e = b.import_state("t", 0, &bad).unwrap_err();
            assert!(matches!(e, Error::NonFinite { id: 1, .. }), "{e}");
            // A negative sum of squares (every f32 of Adagrad's; Adam's
            // second moment, after its first).
            let mut neg = s[..sb].to_vec();
            let at = match opt {
                Optimizer::Adam { .. } => dim * 4,
                _ => 0,
            };
            neg[at..at + 4].copy_from_slice(&(-1.0f32).to_le_bytes());
            let e = b.import_state("t", 5, &neg).unwrap_err();
            assert!(matches!(e, Error::NegativeState { id: 5, .. }), "{e}");
            // A sum of squares of +inf (a gradient's square overflowed:
            // a step leaves it) is taken; -inf is not; the checks alone
            // write nothing.
            let mut inf = s[..sb].to_vec();
            inf[at..at + 4].copy_from_slice(&f32::INFINITY.to_le_bytes());
            b.check_import_state("t", 5, &inf).unwrap();
            inf[at..at + 4].copy_from_slice(&f32::NEG_INFINITY.to_le_bytes());
            let e = b.check_import_state("t", 5, &inf).unwrap_err();
            assert!(matches!(e, Error::NonFinite { id: 5, .. }), "{e}");
            let e = b.check_import_state("t", 0, &bad).unwrap_err();
            assert!(matches!(e, Error::NonFinite { id: 1, .. }), "{e}");
            let e = b
                .check_import_rows("t", 0, &[1.0, f32::NAN][..])
                .unwrap_err();
            assert!(matches!(e, Error::LengthMismatch { .. }), "{e}");
            let mut nan_row = w[..dim].to_vec();
            nan_row[1] = f32::NAN;
            let e = b.check_import_rows("t", 3, &nan_row).unwrap_err();
            assert!(matches!(e, Error::NonFinite { id: 3, .. }), "{e}");
            b.check_import_rows("t", 3, &w[..dim]).unwrap();
            let e = b.check_import_rows("t", rows, &w[..dim]).unwrap_err();
            assert!(matches!(e, Error::IdOutOfRange { .. }), "{e}");
            let e = b.import_state("t", rows - 1, &s[..2 * sb]).unwrap_err();
            assert!(matches!(e, Error::IdOutOfRange { .. }), "{e}");
            // Loaded in two pieces, as a state_dict's chunks load.
            let half = rows as usize / 2;
            b.import_rows("t", 0, &w).unwrap();
            b.import_state("t", 0, &s[..half * sb]).unwrap();
            b.import_state("t", half as u64, &s[half * sb..]).unwrap();
            let mut s2 = vec![0u8; s.len()];
            b.export_state("t", 0, &mut s2).unwrap();
            assert!(s2 == s, "{opt:?}: the state read back");
            for _ in 0..4 {
                let (ids, g) = batch();
                a.step("t", &ids, &g).unwrap();
                b.step("t", &ids, &g).unwrap();
            }
            let (mut wa, mut wb) = (w.clone(), w.clone());
            a.export_rows("t", 0, &mut wa).unwrap();
            b.export_rows("t", 0, &mut wb).unwrap();
            assert!(
                wa == wb,
                "{opt:?}, pinned {pinned}: the steps after the load"
            );
        }
    }
    // A table of SGD has no state: nothing to export, nothing to import.
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("t", 10, 4))
        .build();
    let s = Store::create(dir.path().join("s"), cfg).unwrap();
    assert_eq!(s.state_bytes("t").unwrap(), 0);
    s.export_state("t", 0, &mut []).unwrap();
    assert!(s.import_state("t", 0, &[0u8; 4]).is_err());
}

/// A table with no optimizer state (SGD): its state is empty, and the
/// checks take what `export_state` gives (no bytes a row). They panicked
/// on a zero chunk size where `import_state` returned at once.
#[test]
fn a_table_without_state_checks_and_imports_empty_state() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("t", 100, 4).optimizer(Optimizer::Sgd {
            lr: 0.1,
            weight_decay: 0.0,
        }))
        .io_engine(IoEngineKind::Psync)
        .build();
    let s = Store::create(dir.path().join("s"), cfg).unwrap();
    assert_eq!(s.state_bytes("t").unwrap(), 0);
    let mut state = vec![];
    s.export_state("t", 0, &mut state).unwrap();
    s.check_import_state("t", 0, &state).unwrap();
    s.check_import_state("t", 99, &[]).unwrap();
    s.import_state("t", 0, &state).unwrap();
}
