//! Concurrency soak: eight threads run lookups, SGD steps, updates,
//! prefetches, checkpoints and flushes against one store for a bounded time
//! (`EMBTIER_SOAK_SECS`, default 6). With the `deadlock-detection` feature
//! (on in the README's test command) a watchdog runs parking_lot's deadlock
//! detector throughout; without it, a run that outlives its time by a
//! minute is reported as a hang. Each worker owns the rows `id % 6 == w`
//! and checks every lookup of them against its own model as it goes; at the
//! end, and again after a reopen, the whole store must equal the models.

mod common;

use embtier::MemoryKind;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::Rng;
use embtier::{Init, Placement, Store, StoreConfig, TableConfig};

const ROWS: u64 = 6000;
const DIM: usize = 8;
const WORKERS: u64 = 6;

fn config() -> StoreConfig {
    StoreConfig::builder()
        .table(TableConfig::new("c", ROWS, DIM as u32).init(Init::Zeros))
        .table(
            TableConfig::new("p", 600, DIM as u32)
                .init(Init::Zeros)
                .placement(Placement::Pinned(MemoryKind::Dram)),
        )
        .dram_capacity(64 << 10) // about 2000 rows: most lookups miss
        .dram_shards(4)
        .build()
}

/// A worker's rows of table `t`: its model, indexed by id / WORKERS.
struct Owned {
    c: Vec<f32>,
    p: Vec<f32>,
}

fn worker(store: &Store, w: u64, stop: &AtomicBool, ops: &AtomicU64) -> Owned {
    let mut rng = Rng(0x50a4 + w);
    let mut m = Owned {
        c: vec![0.0; (ROWS / WORKERS) as usize * DIM],
        p: vec![0.0; (600 / WORKERS) as usize * DIM],
    };
    while !stop.load(Ordering::Relaxed) {
        let (table, rows) = if rng.below(4) == 0 {
            ("p", 600)
        } else {
            ("c", ROWS)
        };
        let n = 1 + rng.below(32) as usize;
        let ids: Vec<u64> = (0..n)
            .map(|_| rng.below(rows / WORKERS) * WORKERS + w)
            .collect();
        let model = if table == "c" { &mut m.c } else { &mut m.p };
        let at = |id: u64| (id / WORKERS) as usize * DIM;
        match rng.below(5) {
            0 | 1 => {
                let mut out = vec![0f32; n * DIM];
                store.lookup(table, &ids, &mut out).unwrap();
                for (k, &id) in ids.iter().enumerate() {
                    assert_eq!(
                        &out[k * DIM..(k + 1) * DIM],
                        &model[at(id)..at(id) + DIM],
                        "worker {w}: {table} row {id} differs from its model"
                    );
                }
                // And someone else's rows, for contention (values unchecked).
                let other: Vec<u64> = (0..n).map(|_| rng.below(rows)).collect();
                store.lookup(table, &other, &mut out).unwrap();
            }
            2 => {
                let vals: Vec<f32> = (0..n * DIM).map(|_| rng.small_f32()).collect();
                store.update(table, &ids, &vals).unwrap();
                for (k, &id) in ids.iter().enumerate() {
                    model[at(id)..at(id) + DIM].copy_from_slice(&vals[k * DIM..(k + 1) * DIM]);
                }
            }
            3 => {
                let pf = store.prefetch(table, &ids).unwrap();
                let grads: Vec<f32> = (0..n * DIM).map(|_| rng.small_f32()).collect();
                store.apply_sgd(table, &ids, &grads, 0.5).unwrap();
                drop(pf);
                for (id, g) in common::sum_in_order(&ids, &grads, DIM) {
                    for (x, g) in model[at(id)..at(id) + DIM].iter_mut().zip(&g) {
                        *x -= 0.5 * g;
                    }
                }
            }
            _ => {
                let grads: Vec<f32> = (0..n * DIM).map(|_| rng.small_f32()).collect();
                store.apply_sgd(table, &ids, &grads, 0.5).unwrap();
                for (id, g) in common::sum_in_order(&ids, &grads, DIM) {
                    for (x, g) in model[at(id)..at(id) + DIM].iter_mut().zip(&g) {
                        *x -= 0.5 * g;
                    }
                }
            }
        }
        ops.fetch_add(1, Ordering::Relaxed);
    }
    m
}

fn check_all(store: &Store, models: &[Owned], when: &str) {
    for (table, rows) in [("c", ROWS), ("p", 600)] {
        let ids: Vec<u64> = (0..rows).collect();
        let mut out = vec![0f32; rows as usize * DIM];
        store.lookup(table, &ids, &mut out).unwrap();
        for id in 0..rows {
            let m = &models[(id % WORKERS) as usize];
            let model = if table == "c" { &m.c } else { &m.p };
            let at = (id / WORKERS) as usize * DIM;
            assert_eq!(
                &out[id as usize * DIM..(id as usize + 1) * DIM],
                &model[at..at + DIM],
                "{when}: {table} row {id}"
            );
        }
    }
}

#[test]
fn eight_threads_mixed_work_no_deadlock_and_the_model_holds() {
    let secs: u64 = common::env_or("EMBTIER_SOAK_SECS", 6);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let store = Store::create(&dir, config()).unwrap();
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let checkpoints = AtomicU64::new(0);
    let deadlocks = AtomicU64::new(0);
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let t0 = Instant::now();
    let models = std::thread::scope(|s| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|w| {
                let (store, stop, ops) = (&store, &stop, &ops);
                s.spawn(move || worker(store, w, stop, ops))
            })
            .collect();
        // Thread 7: checkpoints; thread 8: flushes and stats.
        let (store_r, stop_r, cps) = (&store, &stop, &checkpoints);
        let ck = s.spawn(move || {
            while !stop_r.load(Ordering::Relaxed) {
                store_r.checkpoint().unwrap();
                cps.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let fl = s.spawn(move || {
            while !stop_r.load(Ordering::Relaxed) {
                store_r.flush().unwrap();
                let _ = store_r.stats();
                std::thread::sleep(Duration::from_millis(35));
            }
        });
        // The watchdog: the deadlock detector, and the clock.
        #[cfg(feature = "deadlock-detection")]
        let dl = &deadlocks;
        s.spawn(move || loop {
            #[cfg(feature = "deadlock-detection")]
            {
                let found = parking_lot::deadlock::check_deadlock();
                if !found.is_empty() {
                    for (i, threads) in found.iter().enumerate() {
                        for t in threads {
                            eprintln!(
                                "deadlock {i}: thread {:?}\n{:?}",
                                t.thread_id(),
                                t.backtrace()
                            );
                        }
                    }
                    dl.fetch_add(found.len() as u64, Ordering::Relaxed);
                    stop_r.store(true, Ordering::Relaxed);
                }
            }
            if t0.elapsed() > Duration::from_secs(secs) {
                stop_r.store(true, Ordering::Relaxed);
            }
            match done_rx.recv_timeout(Duration::from_millis(100)) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            assert!(
                t0.elapsed() < Duration::from_secs(secs + 60),
                "the soak outlived its time by a minute: a hang"
            );
        });
        let models: Vec<Owned> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        ck.join().unwrap();
        fl.join().unwrap();
        done_tx.send(()).unwrap();
        models
    });
    assert_eq!(deadlocks.load(Ordering::Relaxed), 0, "deadlocks detected");
    let (n_ops, n_cp) = (
        ops.load(Ordering::Relaxed),
        checkpoints.load(Ordering::Relaxed),
    );
    eprintln!(
        "soak: {:.1} s, {n_ops} batches, {n_cp} checkpoints, deadlock detector {}",
        t0.elapsed().as_secs_f64(),
        if cfg!(feature = "deadlock-detection") {
            "on"
        } else {
            "off (feature not enabled)"
        }
    );
    assert!(
        n_ops > 100 && n_cp > 3,
        "the soak did too little to mean anything"
    );
    check_all(&store, &models, "at the end");
    store.checkpoint().unwrap();
    drop(store);
    let store = Store::open(&dir).unwrap();
    check_all(&store, &models, "after a checkpoint and a reopen");
}
