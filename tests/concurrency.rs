//! Eight threads call lookup (single- and multi-table) and apply_sgd on overlapping ids. Gradients are
//! small integers, exact in f32, so the final table must equal the sum of all
//! gradients whatever the interleaving. Every gradient row is constant, so a
//! row with unequal elements would be a half-written row: lookups check that.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::{engines, with_engine, Rng};
use embtier::{Init, PolicyKind, Store, StoreConfig, TableBatch, TableConfig};

const THREADS: usize = 8;
const ROWS: u64 = 4000;
const DIM: usize = 16;

fn run(cfg: StoreConfig, label: &str) {
    let t0 = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path().join("s"), cfg).unwrap();
    let iters: usize = common::env_or("EMBTIER_CONCURRENCY_ITERS", 300) as usize;
    // Expected sum per row, accumulated by the threads themselves.
    let expected: Vec<AtomicU64> = (0..ROWS).map(|_| AtomicU64::new(0)).collect();
    let torn = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let store = &store;
            let expected = &expected;
            let torn = &torn;
            s.spawn(move || {
                let mut rng = Rng(77 + t as u64);
                for _ in 0..iters {
                    let n = 1 + rng.below(64) as usize;
                    // Overlapping: half the ids from a hot range every thread shares.
                    let ids: Vec<u64> = (0..n)
                        .map(|_| {
                            if rng.below(2) == 0 {
                                rng.below(100)
                            } else {
                                rng.below(ROWS)
                            }
                        })
                        .collect();
                    if rng.below(3) == 0 {
                        let mut out = vec![0f32; n * DIM];
                        if rng.below(2) == 0 {
                            store.lookup("t", &ids, &mut out).unwrap();
                        } else {
                            // The same table twice, through the multi-table path.
                            let (a, b) = ids.split_at(n / 2);
                            let (oa, ob) = out.split_at_mut(n / 2 * DIM);
                            store
                                .lookup_many(&mut [
                                    TableBatch::new("t", a, oa),
                                    TableBatch::new("t", b, ob),
                                ])
                                .unwrap();
                        }
                        for row in out.chunks(DIM) {
                            if row.iter().any(|&v| v != row[0]) {
                                torn.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    } else {
                        let mut grads = Vec::with_capacity(n * DIM);
                        for &id in &ids {
                            let g = 1 + rng.below(3);
                            expected[id as usize].fetch_add(g, Ordering::Relaxed);
                            grads.extend(std::iter::repeat_n(g as f32, DIM));
                        }
                        store.apply_sgd("t", &ids, &grads, 1.0).unwrap();
                    }
                }
            });
        }
    });
    assert_eq!(
        torn.load(Ordering::Relaxed),
        0,
        "{label}: a lookup saw a half-written row"
    );
    let check = |store: &Store, when: &str| {
        let ids: Vec<u64> = (0..ROWS).collect();
        let mut out = vec![0f32; ROWS as usize * DIM];
        store.lookup("t", &ids, &mut out).unwrap();
        for id in 0..ROWS as usize {
            let want = -(expected[id].load(Ordering::Relaxed) as f32);
            assert!(
                out[id * DIM..(id + 1) * DIM].iter().all(|&v| v == want),
                "{label} {when}: row {id} = {:?}, want {want}",
                &out[id * DIM..id * DIM + 2]
            );
        }
    };
    check(&store, "live");
    store.flush().unwrap();
    drop(store);
    let store = Store::open(dir.path().join("s")).unwrap();
    check(&store, "after reopen");
    let st = store.stats();
    eprintln!(
        "{label}: ok ({}) in {:?}: {:?}",
        st.io_engine,
        t0.elapsed(),
        st.table("t").unwrap().ssd
    );
}

#[test]
fn eight_threads_sum_exactly() {
    for engine in engines() {
        // Small caches with PMem, so rows move between tiers constantly.
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("t", ROWS, DIM as u32).init(Init::Zeros))
            .dram_capacity(300 * 64)
            .dram_policy(PolicyKind::Sieve)
            .pmem(None, 500 * 64, PolicyKind::Lru)
            .build();
        run(
            with_engine(cfg, engine),
            &format!("dram+pmem+ssd/{engine:?}"),
        );
        // Tiny single-shard cache: maximal contention and eviction.
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("t", ROWS, DIM as u32).init(Init::Zeros))
            .dram_capacity(8 * 64)
            .dram_shards(1)
            .build();
        run(with_engine(cfg, engine), &format!("tiny/{engine:?}"));
        // Pinned to DRAM.
        let cfg = StoreConfig::builder()
            .table(
                TableConfig::new("t", ROWS, DIM as u32)
                    .init(Init::Zeros)
                    .placement(embtier::Placement::Pinned(embtier::MemoryKind::Dram)),
            )
            .dram_capacity(1 << 20)
            .build();
        run(with_engine(cfg, engine), &format!("pinned/{engine:?}"));
    }
}
