//! Prefetch: rows read ahead are DRAM hits later, stay resident against any
//! amount of other traffic until their handle is dropped, pinning is bounded
//! however many prefetches are outstanding, and results never depend on it.

mod common;

use common::Rng;
use embtier::{Init, Optimizer, PolicyKind, Store, StoreConfig, StoreConfigBuilder, TableConfig};

const DIM: u32 = 8;
const ROWS: u64 = 100_000;
const CACHE: u64 = 64;

fn table() -> TableConfig {
    TableConfig::new("t", ROWS, DIM)
        .init(Init::Uniform { scale: 0.1 })
        .optimizer(Optimizer::RowwiseAdagrad {
            lr: 0.1,
            eps: 1e-8,
            weight_decay: 0.0,
        })
}

fn builder(policy: PolicyKind) -> StoreConfigBuilder {
    let rb = table().row_bytes();
    StoreConfig::builder()
        .table(table())
        .dram_capacity(CACHE * rb)
        .dram_shards(1)
        .dram_policy(policy)
}

fn stats(s: &Store) -> (u64, u64) {
    let st = s.stats();
    let t = st.table("t").unwrap();
    (t.dram().hits, t.ssd.rows_read)
}

/// Read 2000 other rows, enough to evict everything unpinned many times over.
fn churn(s: &Store, from: u64) {
    let ids: Vec<u64> = (from..from + 2000).collect();
    let mut out = vec![0f32; ids.len() * DIM as usize];
    for c in ids.chunks(100) {
        s.lookup("t", c, &mut out[..c.len() * DIM as usize])
            .unwrap();
    }
}

#[test]
fn prefetched_rows_stay_resident_until_the_handle_is_dropped() {
    for policy in [
        PolicyKind::Lru,
        PolicyKind::Fifo,
        PolicyKind::Sieve,
        PolicyKind::Clock,
        PolicyKind::Lfu,
        PolicyKind::S3Fifo,
        PolicyKind::Arc,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::create(dir.path().join("s"), builder(policy).build()).unwrap();
        let ids: Vec<u64> = (50_000..50_020).collect();
        let mut pf = s.prefetch("t", &ids).unwrap();
        assert_eq!(pf.wait().unwrap(), 20, "{policy:?}");
        assert_eq!(s.pinned_rows(), 20);
        {
            let st = s.stats();
            let t = st.table("t").unwrap();
            assert_eq!((t.prefetched, t.prefetch_pinned, t.lookups), (20, 20, 20));
        }
        churn(&s, 0);
        let (h0, r0) = stats(&s);
        let mut out = vec![0f32; ids.len() * DIM as usize];
        s.lookup("t", &ids, &mut out).unwrap();
        let (h1, r1) = stats(&s);
        assert_eq!(
            (h1 - h0, r1 - r0),
            (20, 0),
            "{policy:?}: prefetched rows must hit DRAM"
        );
        s.step("t", &ids, &vec![0.5; out.len()]).unwrap();
        drop(pf);
        assert_eq!(s.pinned_rows(), 0);
        churn(&s, 10_000);
        // Without pins, a scan evicts the rows under the recency policies;
        // the scan-resistant ones (SIEVE, LFU, S3-FIFO, ARC) rightly keep
        // rows that were hit, so they prove nothing here.
        if matches!(
            policy,
            PolicyKind::Lru | PolicyKind::Fifo | PolicyKind::Clock
        ) {
            let (h2, r2) = stats(&s);
            s.lookup("t", &ids, &mut out).unwrap();
            let (h3, r3) = stats(&s);
            assert_eq!(h3 - h2, 0, "{policy:?}: unpinned rows are evicted by churn");
            assert_eq!(r3 - r2, 20, "{policy:?}");
        }
    }
}

#[test]
fn pinning_is_bounded_when_prefetches_are_never_released() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::create(dir.path().join("s"), builder(PolicyKind::Lru).build()).unwrap();
    let mut held = Vec::new();
    let mut pinned = 0;
    for b in 0..20u64 {
        let ids: Vec<u64> = (b * 30..b * 30 + 30).collect();
        let mut pf = s.prefetch("t", &ids).unwrap();
        pinned += pf.wait().unwrap();
        held.push(pf);
        assert!(s.pinned_rows() <= CACHE / 2, "{} pinned", s.pinned_rows());
    }
    assert_eq!(
        pinned as u64,
        CACHE / 2,
        "the bound is reached, not exceeded"
    );
    let st = s.stats();
    let t = st.table("t").unwrap();
    assert_eq!((t.prefetched, t.prefetch_pinned), (600, CACHE / 2));
    // The store still serves everything else, with the unpinned half.
    churn(&s, 20_000);
    let mut out = vec![0f32; 30 * DIM as usize];
    let ids: Vec<u64> = (0..30).collect();
    s.step("t", &ids, &vec![1.0; out.len()]).unwrap();
    s.lookup("t", &ids, &mut out).unwrap();
    drop(held);
    assert_eq!(s.pinned_rows(), 0);
}

/// The same training sequence with and without prefetch (the prefetch of
/// batch i+1 outstanding while batch i steps) gives bit-identical rows.
#[test]
fn prefetch_does_not_change_results() {
    let mut finals = Vec::new();
    for use_prefetch in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::create(dir.path().join("s"), builder(PolicyKind::Sieve).build()).unwrap();
        let mut rng = Rng(4);
        let batches: Vec<Vec<u64>> = (0..60)
            .map(|_| (0..40).map(|_| rng.below(300)).collect())
            .collect();
        let mut next = if use_prefetch {
            Some(s.prefetch("t", &batches[0]).unwrap())
        } else {
            None
        };
        for (i, ids) in batches.iter().enumerate() {
            let cur = next.take();
            if use_prefetch && i + 1 < batches.len() {
                next = Some(s.prefetch("t", &batches[i + 1]).unwrap());
            }
            let mut out = vec![0f32; ids.len() * DIM as usize];
            s.lookup("t", ids, &mut out).unwrap();
            let grads: Vec<f32> = out.iter().map(|w| w * 0.5 + 0.01).collect();
            s.step("t", ids, &grads).unwrap();
            drop(cur);
        }
        let all: Vec<u64> = (0..300).collect();
        let mut out = vec![0f32; all.len() * DIM as usize];
        s.lookup("t", &all, &mut out).unwrap();
        finals.push(out.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    }
    assert!(finals[0] == finals[1], "prefetch changed the rows");
}

#[test]
fn prefetch_rejects_bad_ids_and_tables() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::create(dir.path().join("s"), builder(PolicyKind::Lru).build()).unwrap();
    assert!(matches!(
        s.prefetch("t", &[1, ROWS]),
        Err(embtier::Error::IdOutOfRange { .. })
    ));
    assert!(matches!(
        s.prefetch("nope", &[1]),
        Err(embtier::Error::UnknownTable { .. })
    ));
    assert_eq!(s.pinned_rows(), 0);
}

/// Two trainers on disjoint rows, each with a prefetch pipeline, and a third
/// thread scanning other rows, all on one small cache: the final rows equal
/// a single-threaded run of the same per-row sequences, and no pin leaks.
#[test]
fn concurrent_pipelines_match_a_serial_run() {
    let run = |threads: bool| -> Vec<u32> {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::create(dir.path().join("s"), builder(PolicyKind::Lru).build()).unwrap();
        let work = |s: &Store, lane: u64| {
            let mut rng = Rng(100 + lane);
            let batches: Vec<Vec<u64>> = (0..80)
                .map(|_| (0..16).map(|_| lane * 1000 + rng.below(200)).collect())
                .collect();
            let mut next = Some(s.prefetch("t", &batches[0]).unwrap());
            for (i, ids) in batches.iter().enumerate() {
                let mut cur = next.take();
                if i + 1 < batches.len() {
                    next = Some(s.prefetch("t", &batches[i + 1]).unwrap());
                }
                if let Some(c) = cur.as_mut() {
                    c.wait().unwrap();
                }
                let mut out = vec![0f32; ids.len() * DIM as usize];
                s.lookup("t", ids, &mut out).unwrap();
                let g: Vec<f32> = out.iter().map(|w| w * 0.25 + 0.125).collect();
                s.step("t", ids, &g).unwrap();
                drop(cur);
            }
        };
        if threads {
            std::thread::scope(|sc| {
                sc.spawn(|| work(&s, 1));
                sc.spawn(|| work(&s, 2));
                sc.spawn(|| {
                    for k in 0..40u64 {
                        churn(&s, 50_000 + k * 100);
                    }
                });
            });
        } else {
            work(&s, 1);
            work(&s, 2);
        }
        assert_eq!(s.pinned_rows(), 0, "pins leaked");
        let ids: Vec<u64> = (1000..1200).chain(2000..2200).collect();
        let mut out = vec![0f32; ids.len() * DIM as usize];
        s.lookup("t", &ids, &mut out).unwrap();
        out.iter().map(|x| x.to_bits()).collect()
    };
    assert!(
        run(false) == run(true),
        "concurrent pipelines changed the rows"
    );
}

/// The detached-prefetch tests' table: 20,000 rows of 16, over 64 KiB of
/// DRAM (and 128 KiB of PMem with `pmem`), so that a prefetch of 8,000
/// rows evicts all the while.
const N: u64 = 20_000;
const D: usize = 16;

fn detached_config(pmem: bool) -> StoreConfig {
    let b = StoreConfig::builder()
        .table(TableConfig::new("t", N, D as u32).init(Init::Zeros))
        .dram_capacity(64 << 10);
    match pmem {
        true => b.pmem(None, 128 << 10, PolicyKind::Lru),
        false => b,
    }
    .build()
}

/// A prefetch's ids in round `round`: 8,000 rows spread over the table.
fn far(round: u64) -> Vec<u64> {
    (0..8000).map(|i| (i * 7919 + round * 31) % N).collect()
}

/// A detached prefetch (the Python binding's) still reading when its
/// store is dropped: its evictions wrote back through the dropped store
/// into the one opened after it, over that store's row log, and the open
/// after that store's acknowledged checkpoints failed ("invalid row log
/// block"). A drop now waits for the store's prefetch threads.
#[test]
fn a_dropped_stores_detached_prefetch_does_not_write_into_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let mut store = Store::create(&path, detached_config(false)).unwrap();
    let ids: Vec<u64> = (0..N).collect();
    store.update("t", &ids, &vec![1.0; N as usize * D]).unwrap();
    store.checkpoint().unwrap();
    for round in 0..8u64 {
        let dirty: Vec<u64> = (0..1500).map(|i| (i * 13 + round * 101) % N).collect();
        store
            .update("t", &dirty, &vec![-1.0; dirty.len() * D])
            .unwrap();
        let pf = store.prefetch_detached("t", &far(round)).unwrap();
        drop(store);
        store = Store::open(&path).unwrap();
        for k in 0..4 {
            let up: Vec<u64> = (0..500)
                .map(|i| (i * 37 + round * 7 + k * 1009) % N)
                .collect();
            store.update("t", &up, &vec![2.0; up.len() * D]).unwrap();
            store.checkpoint().unwrap();
        }
        drop(pf);
        drop(store);
        store = Store::open(&path).unwrap_or_else(|e| {
            panic!("round {round}: reopen after acknowledged checkpoints: {e}")
        });
        let mut out = vec![0f32; N as usize * D];
        store
            .lookup("t", &ids, &mut out)
            .unwrap_or_else(|e| panic!("round {round}: lookup: {e}"));
    }
}

/// A detached prefetch still installing rows when its store is closed:
/// the close recorded which row each PMem slot held, the prefetch went on
/// evicting into the tier, and the next open took the kept tier back and
/// served other rows' bytes (1,650 rows wrong, no error). A close now
/// waits for the store's prefetch threads first.
#[test]
fn a_detached_prefetch_across_a_close_leaves_the_kept_tier_right() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let store = Store::create(&path, detached_config(true)).unwrap();
    let ids: Vec<u64> = (0..N).collect();
    let vals: Vec<f32> = ids.iter().flat_map(|&id| [id as f32; D]).collect();
    store.update("t", &ids, &vals).unwrap();
    store.close().unwrap();
    for round in 0..8u64 {
        let store = Store::open(&path).unwrap();
        let mut out = vec![0f32; N as usize * D];
        store.lookup("t", &ids, &mut out).unwrap();
        let wrong: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|&i| out[i as usize * D] != i as f32)
            .collect();
        assert!(
            wrong.is_empty(),
            "round {round} ({} rows taken from the kept tier): {} rows wrong, e.g. t[{}] holds {}",
            store.rows_kept_at_open(),
            wrong.len(),
            wrong[0],
            out[wrong[0] as usize * D]
        );
        let pf = store.prefetch_detached("t", &far(round)).unwrap();
        store.close().unwrap();
        drop(pf);
    }
}
