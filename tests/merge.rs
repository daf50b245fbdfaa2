//! The row log's background merge: once the log is more than half full, a
//! thread writes its rows home between checkpoints, so the checkpoint that
//! empties the log has only the rows logged since to merge; every row
//! keeps its newest value, in memory and across reopens.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::Rng;
use embtier::{Init, Store, StoreConfig, TableConfig};

const DIM: usize = 60; // 240-byte rows: 16 to a log block, 16 to a group
const ROWS: u64 = 20_000;
/// Rows the test logs before the merge; those above are updated during it.
const LOGGED: u64 = 15_000;

fn cfg(background: bool) -> StoreConfig {
    let mut c = StoreConfig::builder()
        .table(TableConfig::new("t", ROWS, DIM as u32).init(Init::Zeros))
        .dram_capacity(128 << 10)
        .build();
    c.ssd.row_log = Some(embtier::ByteSize(256 * 4096));
    c.ssd.merge_in_background = background;
    c
}

fn logged(s: &Store) -> u64 {
    s.stats().table("t").unwrap().ssd.logged_rows
}

fn check(s: &Store, model: &HashMap<u64, f32>, when: &str) {
    let ids: Vec<u64> = (0..ROWS).collect();
    let mut out = vec![0f32; ids.len() * DIM];
    s.lookup("t", &ids, &mut out).unwrap();
    for &id in &ids {
        let want = model.get(&id).copied().unwrap_or(0.0);
        assert_eq!(out[id as usize * DIM], want, "{when}: row {id}");
    }
}

#[test]
fn a_background_merge_leaves_the_checkpoint_little_to_merge() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let s = Store::create(&path, cfg(true)).unwrap();
    let mut model = HashMap::new();
    let mut rng = Rng(11);
    // Scattered rows written back to the log by checkpoints until it is
    // more than half full.
    let mut round = 0;
    while s.stats().row_log_used_blocks * 2 <= 256 {
        round += 1;
        let ids: Vec<u64> = (0..400).map(|_| rng.below(LOGGED)).collect();
        let v = round as f32;
        s.update("t", &ids, &vec![v; ids.len() * DIM]).unwrap();
        for &id in &ids {
            model.insert(id, v);
        }
        let c = s.checkpoint().unwrap();
        assert_eq!(c.row_log_merged_rows, 0, "round {round}: {c:?}");
    }
    // The thread merges while lookups and updates (of other rows) go on.
    let before = logged(&s);
    assert!(before > 2000, "{before} rows logged");
    let merged = |s: &Store| s.stats().table("t").unwrap().ssd.log_rows_merged;
    let t0 = Instant::now();
    let mut i = 0;
    while merged(&s) < before {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{} of {before} rows merged",
            merged(&s)
        );
        i += 1;
        if i > 20 {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let ids: Vec<u64> = (0..50).map(|_| LOGGED + rng.below(ROWS - LOGGED)).collect();
        s.update("t", &ids, &vec![-1.0; ids.len() * DIM]).unwrap();
        for &id in &ids {
            model.insert(id, -1.0);
        }
        check(&s, &model, "during the background merge");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The checkpoint that empties the log merges only the rows logged
    // since (the updates above that its flush appends): far fewer.
    let c = s.checkpoint().unwrap();
    assert_eq!(c.row_log_blocks, 0, "the log was emptied: {c:?}");
    assert!(
        c.row_log_merged_rows < before / 4,
        "{} rows merged inside the checkpoint, of {before} logged",
        c.row_log_merged_rows
    );
    check(&s, &model, "after the checkpoint");
    drop(s);
    let s = Store::open(&path).unwrap();
    check(&s, &model, "reopened");
}

/// Off, nothing is merged before the checkpoint, which merges the whole
/// log: the behaviour the option turns off.
#[test]
fn without_the_background_merge_the_checkpoint_merges_everything() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::create(dir.path().join("s"), cfg(false)).unwrap();
    let mut rng = Rng(12);
    while s.stats().row_log_used_blocks * 2 <= 256 {
        let ids: Vec<u64> = (0..400).map(|_| rng.below(ROWS)).collect();
        s.update("t", &ids, &vec![1.0; ids.len() * DIM]).unwrap();
        s.checkpoint().unwrap();
    }
    let before = logged(&s);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(logged(&s), before, "nothing merged in the background");
    let c = s.checkpoint().unwrap();
    assert_eq!(c.row_log_merged_rows, before, "{c:?}");
}
