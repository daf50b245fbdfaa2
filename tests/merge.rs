//! The row log's background merge: once the log is more than
//! `[ssd] merge_start` full (half, the default, in most tests here), a
//! thread writes its rows home between checkpoints, so the checkpoint
//! after it moves the log's start past them and merges nothing; every row
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

/// Passes begin once the log is more than half full.
fn cfg(background: bool) -> StoreConfig {
    cfg_listing(background, StoreConfig::default().ssd.merge_list_rows)
}

/// [`cfg`], with merges listing `list_rows` logged rows at once.
fn cfg_listing(background: bool, list_rows: usize) -> StoreConfig {
    cfg_starting(background, list_rows, 0.5)
}

/// [`cfg_listing`], with passes beginning once the log is more than
/// `start` full.
fn cfg_starting(background: bool, list_rows: usize, start: f64) -> StoreConfig {
    let mut c = StoreConfig::builder()
        .table(TableConfig::new("t", ROWS, DIM as u32).init(Init::Zeros))
        .dram_capacity(128 << 10)
        .merge_list_rows(list_rows)
        .merge_start(start)
        .build();
    c.ssd.row_log = Some(embtier::ByteSize(256 * 4096));
    c.ssd.merge_in_background = background;
    c
}

/// Checkpoint until one frees the blocks of the pass that has written
/// every row home (the thread marks the pass done after its last range,
/// which may hold no row, so the first checkpoint may come before that);
/// none of them merges a row. Returns the one that freed them.
fn checkpoint_after_the_pass(s: &Store) -> embtier::Checkpoint {
    let t0 = Instant::now();
    loop {
        let c = s.checkpoint().unwrap();
        assert_eq!(
            c.row_log_merged_rows, 0,
            "merged inside a checkpoint: {c:?}"
        );
        if c.row_log_blocks_freed > 0 {
            return c;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no checkpoint freed the pass's blocks: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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
    background_merge(cfg(true), 0.5);
}

/// With `merge_start` at a quarter, a pass begins once the log is past a
/// quarter full (before the half the other tests fill to), and merges
/// every row then logged.
#[test]
fn a_pass_begins_once_the_log_is_past_its_start() {
    let start = 0.25;
    let list = StoreConfig::default().ssd.merge_list_rows;
    background_merge(cfg_starting(true, list, start), start);
}

/// The same with merges listing 300 logged rows at a time: the thread
/// takes the table in several ranges of ids (about 8 for the 2,200 or so
/// rows logged), and still writes every logged row home with its newest
/// value.
#[test]
fn a_background_merge_in_ranges_of_ids_merges_every_row() {
    background_merge(cfg_listing(true, 300), 0.5);
}

/// Rows logged until the log is more than `start` full (the config's
/// `merge_start`), merged by the thread while other rows are updated,
/// then the checkpoint after the pass frees its blocks.
fn background_merge(cfg: StoreConfig, start: f64) {
    // A pass in several ranges of ids walks the log once and reads each
    // range's rows back from its spill file.
    let spills = cfg.ssd.merge_scan && cfg.ssd.merge_list_rows < 1000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let s = Store::create(&path, cfg).unwrap();
    let mut model = HashMap::new();
    let mut rng = Rng(11);
    // Scattered rows written back to the log by checkpoints until it is
    // more than `start` full.
    let mut round = 0;
    let at = (start * 256.0) as u64;
    while s.stats().row_log_used_blocks <= at {
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
    assert!(before as f64 > 4000.0 * start, "{before} rows logged");
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
    // The checkpoint after the pass merges nothing: it moves the log's
    // start past the pass's blocks, and keeps only the rows logged since
    // (the updates above that its flush appends).
    let c = checkpoint_after_the_pass(&s);
    assert!(
        c.row_log_blocks_freed > at && c.row_log_blocks < 64,
        "the pass's blocks were freed, the rest kept: {c:?}"
    );
    // Given back to the file system, piece by piece, every block of them
    // (where the file system punches holes at all).
    assert!(
        c.row_log_bytes_released == c.row_log_blocks_freed * 4096 || c.row_log_bytes_released == 0,
        "{c:?}"
    );
    check(&s, &model, "after the checkpoint");
    let spilled = s.stats().table("t").unwrap().ssd.log_rows_spilled;
    if spills {
        assert!(
            spilled > 0 && spilled <= merged(&s),
            "{spilled} of {} merged rows read back from spill files",
            merged(&s)
        );
    } else {
        assert_eq!(spilled, 0, "one range: no spill");
    }
    let left: Vec<_> = std::fs::read_dir(&path)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("merge-spill-"))
        .collect();
    assert!(left.is_empty(), "spill files left after the pass: {left:?}");
    drop(s);
    let s = Store::open(&path).unwrap();
    check(&s, &model, "reopened");
}

/// Off, nothing is merged before the checkpoint, which merges the whole
/// log: the behaviour the option turns off.
#[test]
fn without_the_background_merge_the_checkpoint_merges_everything() {
    checkpoint_merge(cfg(false));
}

/// The same with the checkpoint's merge listing 300 logged rows at a
/// time: every row merged, each with its newest value, across a reopen.
#[test]
fn a_checkpoint_merge_in_ranges_of_ids_merges_every_row() {
    checkpoint_merge(cfg_listing(false, 300));
}

fn checkpoint_merge(cfg: StoreConfig) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let s = Store::create(&path, cfg).unwrap();
    let mut rng = Rng(12);
    let mut model = HashMap::new();
    let mut v = 0.0;
    while s.stats().row_log_used_blocks * 2 <= 256 {
        v += 1.0;
        let ids: Vec<u64> = (0..400).map(|_| rng.below(ROWS)).collect();
        s.update("t", &ids, &vec![v; ids.len() * DIM]).unwrap();
        for &id in &ids {
            model.insert(id, v);
        }
        s.checkpoint().unwrap();
    }
    let before = logged(&s);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(logged(&s), before, "nothing merged in the background");
    let c = s.checkpoint().unwrap();
    assert_eq!(c.row_log_merged_rows, before, "{c:?}");
    assert_eq!(c.row_log_blocks, 0, "the log was emptied: {c:?}");
    check(&s, &model, "after the merge");
    drop(s);
    let s = Store::open(&path).unwrap();
    check(&s, &model, "reopened");
}

/// Rows of the table in which a background pass spans many chunks.
const BIG_ROWS: u64 = 2_000_000;

/// Passes begin once the log is more than half full.
fn big_cfg() -> StoreConfig {
    let mut c = StoreConfig::builder()
        .table(TableConfig::new("t", BIG_ROWS, DIM as u32).init(Init::Zeros))
        .dram_capacity(128 << 10)
        .merge_start(0.5)
        .build();
    c.ssd.row_log = Some(embtier::ByteSize(256 * 4096));
    c
}

/// The model's rows, and as many other rows (never written: zeros).
fn check_sparse(s: &Store, model: &HashMap<u64, f32>, rng: &mut Rng, when: &str) {
    let mut ids: Vec<u64> = model.keys().copied().collect();
    ids.extend((0..model.len()).map(|_| rng.below(BIG_ROWS)));
    let mut out = vec![0f32; ids.len() * DIM];
    s.lookup("t", &ids, &mut out).unwrap();
    for (k, &id) in ids.iter().enumerate() {
        let want = model.get(&id).copied().unwrap_or(0.0);
        let got = &out[k * DIM..(k + 1) * DIM];
        assert!(
            got.iter().all(|&v| v == want),
            "{when}: row {id}: {got:?}, want {want}"
        );
    }
}

/// Scattered rows (about one in a 1,024-group merge chunk, so that a pass
/// takes a hundred chunks or more) updated and checkpointed in rounds of
/// 400 until the log is more than half full; each round writes the next
/// value of `v`.
fn fill_past_half(s: &Store, model: &mut HashMap<u64, f32>, rng: &mut Rng, v: &mut f32) {
    while s.stats().row_log_used_blocks * 2 <= 256 {
        *v += 1.0;
        let ids: Vec<u64> = (0..400).map(|_| rng.below(BIG_ROWS)).collect();
        s.update("t", &ids, &vec![*v; ids.len() * DIM]).unwrap();
        for &id in &ids {
            model.insert(id, *v);
        }
        s.checkpoint().unwrap();
    }
}

/// Wait until `done()`, failing with `what()` after `secs` seconds.
fn wait_until(secs: u64, done: impl Fn() -> bool, what: impl Fn() -> String) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < Duration::from_secs(secs), "{}", what());
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn merged(s: &Store) -> u64 {
    s.stats().table("t").unwrap().ssd.log_rows_merged
}

/// A checkpoint taken while the background merge is part-way through the
/// log commits the log as it is and merges nothing: the rows the thread
/// wrote home were written from their log copies, so no copy is stale. A
/// crash (a drop without a checkpoint) then undoes the thread's
/// uncommitted writes and serves the committed log; rows written home
/// whole after their log copy was merged keep their newest value; and the
/// checkpoint after the pass empties the log.
#[test]
fn checkpoints_during_a_background_pass_merge_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let s = Store::create(&path, big_cfg()).unwrap();
    let mut model = HashMap::new();
    let mut rng = Rng(13);
    fill_past_half(&s, &mut model, &mut rng, &mut 0.0);
    let before = logged(&s);
    let merges = |s: &Store| s.stats().row_log_merges;
    let m0 = merges(&s);
    wait_until(30, || merged(&s) > 0, || "the thread never merged".into());
    let c = s.checkpoint().unwrap();
    let part = merged(&s);
    assert_eq!(
        (c.row_log_merged_rows, merges(&s)),
        (0, m0),
        "a checkpoint during the pass merged ({part} of {before} rows merged in all): {c:?}"
    );
    assert!(
        part < before,
        "the pass ended before the checkpoint ({part} of {before}): make it longer"
    );
    assert!(
        c.row_log_blocks > 128,
        "the log was committed as it was: {c:?}"
    );
    check_sparse(&s, &model, &mut rng, "after a checkpoint during the pass");
    // Let the pass end; no checkpoint commits it.
    let all_merged = |s: &Store| {
        wait_until(
            60,
            || merged(s) >= before,
            || format!("{} of {before} merged", merged(s)),
        )
    };
    all_merged(&s);
    assert_eq!(logged(&s), 0, "every logged row is home");
    check_sparse(&s, &model, &mut rng, "after the pass");
    drop(s);
    let s = Store::open(&path).unwrap();
    assert_eq!(logged(&s), before, "the committed log is served again");
    check_sparse(
        &s,
        &model,
        &mut rng,
        "reopened after a pass no checkpoint committed",
    );
    // The thread passes again (the log is past half full); then whole
    // groups of merged rows are rewritten, which must not bring back their
    // older log copies.
    all_merged(&s);
    let some: Vec<u64> = model.keys().copied().take(20).collect();
    let mut ids = Vec::new();
    for id in some {
        let g = id / 16 * 16; // 16 rows to a group
        ids.extend((g..g + 16).filter(|&r| r < BIG_ROWS));
    }
    ids.sort_unstable();
    ids.dedup();
    s.update("t", &ids, &vec![-7.0; ids.len() * DIM]).unwrap();
    for &id in &ids {
        model.insert(id, -7.0);
    }
    // The rewritten groups held logged rows, so they were logged again
    // rather than written home: nothing is stale, and the checkpoint after
    // the pass frees its blocks and merges nothing.
    let c = checkpoint_after_the_pass(&s);
    assert!(
        c.row_log_blocks_freed > 128 && c.row_log_blocks < 64,
        "after the pass, a checkpoint frees its blocks: {c:?}"
    );
    check_sparse(
        &s,
        &model,
        &mut rng,
        "after the checkpoint that freed the pass's blocks",
    );
    drop(s);
    let s = Store::open(&path).unwrap();
    check_sparse(
        &s,
        &model,
        &mut rng,
        "reopened after the pass's blocks were freed",
    );
}

/// A checkpoint that empties the log part-way through a background pass
/// (here `merge_row_log`; in training, a log seven eighths full or made
/// stale) ends that pass: the thread passes over the new log once it is
/// past half full, and the checkpoint after that pass empties it. (The
/// thread used to finish its old pass and then wait for a checkpoint that
/// the new log's fill no longer triggers.)
#[test]
fn a_pass_cut_short_by_an_emptied_log_starts_over_on_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let s = Store::create(&path, big_cfg()).unwrap();
    let mut model = HashMap::new();
    let mut rng = Rng(14);
    let mut v = 0.0;
    fill_past_half(&s, &mut model, &mut rng, &mut v);
    wait_until(30, || merged(&s) > 0, || "the thread never merged".into());
    let c = s.merge_row_log().unwrap();
    assert_eq!(c.row_log_blocks, 0, "{c:?}");
    fill_past_half(&s, &mut model, &mut rng, &mut v);
    // The new log is past half full: the thread merges all of it.
    wait_until(
        30,
        || logged(&s) == 0,
        || {
            format!(
                "{} rows of the new log left unmerged: the thread did not pass over it",
                logged(&s)
            )
        },
    );
    let c = checkpoint_after_the_pass(&s);
    assert_eq!(
        c.row_log_blocks, 0,
        "the checkpoint after the pass frees the log: {c:?}"
    );
    check_sparse(&s, &model, &mut rng, "after the second pass");
    drop(s);
    let s = Store::open(&path).unwrap();
    check_sparse(&s, &model, &mut rng, "reopened");
}

/// The log is a ring: after each background pass, the next checkpoint
/// moves the log's start past the pass's blocks, merging nothing, and
/// appends go on into the blocks it freed. Over many laps of a 32-block
/// ring every row keeps its newest value: in memory, across clean reopens,
/// and across drops between checkpoints (which reopen at the last one,
/// whatever lap its log was on).
#[test]
fn the_log_wraps_around_its_ring_and_every_row_keeps_its_value() {
    wraps(true);
}

/// The same with the passes reading each logged row's block on its own
/// (`[ssd] merge_scan = false`) rather than walking the log in order.
#[test]
fn the_log_wraps_with_passes_that_read_a_block_a_row() {
    wraps(false);
}

/// The same with passes listing 40 rows at a time: the ids' ranges are
/// uneven, so a range's rows are walked for in several parts.
#[test]
fn the_log_wraps_with_passes_that_walk_the_log_in_parts() {
    wraps_listing(true, 40);
}

fn wraps(scan: bool) {
    wraps_listing(scan, StoreConfig::default().ssd.merge_list_rows);
}

fn wraps_listing(scan: bool, list_rows: usize) {
    const RING: u64 = 32;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let mut c = cfg_listing(true, list_rows);
    c.ssd.row_log = Some(embtier::ByteSize(RING * 4096));
    c.ssd.merge_scan = scan;
    let mut s = Store::create(&path, c).unwrap();
    let mut rng = Rng(15);
    let mut acked: HashMap<u64, f32> = HashMap::new();
    let (mut freed, mut reopened, mut dropped) = (0u64, 0, 0);
    for round in 1..=240u32 {
        let mut cur = acked.clone();
        // About 7 log blocks of scattered rows a round, each row its own
        // value (so that a row merged home from the wrong slot of its
        // block shows).
        let ids: Vec<u64> = (0..100).map(|_| rng.below(ROWS)).collect();
        let value = |id: u64| (round as u64 * ROWS + id) as f32; // exact below 2^24
        let mut vals = Vec::with_capacity(ids.len() * DIM);
        for &id in &ids {
            vals.extend(std::iter::repeat_n(value(id), DIM));
        }
        s.update("t", &ids, &vals).unwrap();
        for &id in &ids {
            cur.insert(id, value(id));
        }
        if round % 11 == 0 {
            // A drop between checkpoints: the round's updates are lost.
            drop(s);
            s = Store::open(&path).unwrap();
            dropped += 1;
            check(&s, &acked, &format!("round {round}: reopened after a drop"));
            continue;
        }
        let c = s.checkpoint().unwrap();
        assert_eq!(c.row_log_merged_rows, 0, "round {round}: {c:?}");
        freed += c.row_log_blocks_freed;
        acked = cur;
        // Let the pass over a log past half full end, and a checkpoint
        // free its blocks, so that the log never fills to the point where
        // a checkpoint merges it all.
        let t0 = Instant::now();
        while s.stats().row_log_used_blocks * 2 > RING {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "round {round}: no pass"
            );
            std::thread::sleep(Duration::from_millis(2));
            let c = s.checkpoint().unwrap();
            assert_eq!(c.row_log_merged_rows, 0, "round {round}: {c:?}");
            freed += c.row_log_blocks_freed;
        }
        if round % 10 == 0 {
            check(&s, &acked, &format!("round {round}"));
        }
        if round % 25 == 0 {
            drop(s);
            s = Store::open(&path).unwrap();
            reopened += 1;
            check(&s, &acked, &format!("round {round}: reopened"));
        }
    }
    assert!(
        freed > 10 * RING,
        "{freed} blocks freed: the log went round its ring fewer than ten times"
    );
    assert_eq!(s.stats().row_log_merges, 0, "no checkpoint merged the log");
    assert!(reopened >= 9 && dropped >= 20);
    drop(s);
    let s = Store::open(&path).unwrap();
    check(&s, &acked, "reopened at the end");
}

/// A store of version 4, whose log starts at block 0 and does not wrap,
/// opens with its committed log served, and then runs with a ring: the
/// log wraps, and every row keeps its value across reopens. (The store is
/// made by rewriting a new store's superblock to version 4 after a
/// checkpoint that committed a log from block 0: the bytes version 4
/// wrote.)
#[test]
fn a_version_4_store_opens_and_its_log_becomes_a_ring() {
    use embtier::format::{sb, BLOCK_SIZE};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let mut c = cfg(true);
    c.ssd.row_log = Some(embtier::ByteSize(32 * 4096));
    let s = Store::create(&path, c).unwrap();
    let mut rng = Rng(16);
    let mut model = HashMap::new();
    let ids: Vec<u64> = (0..100).map(|_| rng.below(ROWS)).collect();
    s.update("t", &ids, &vec![1.0; ids.len() * DIM]).unwrap();
    for &id in &ids {
        model.insert(id, 1.0);
    }
    let cp = s.checkpoint().unwrap();
    assert!(cp.row_log_blocks > 0, "{cp:?}");
    drop(s);
    let meta = path.join(embtier::META_FILE);
    let mut b = std::fs::read(&meta).unwrap();
    for copy in [0, BLOCK_SIZE] {
        let blk = &mut b[copy..copy + BLOCK_SIZE];
        assert_eq!(blk[sb::ROWLOG_START..sb::ROWLOG_START + 4], [0; 4]);
        blk[sb::VERSION..sb::VERSION + 4].copy_from_slice(&4u32.to_le_bytes());
        blk[sb::ROWLOG_RING..sb::ROWLOG_RING + 8].fill(0);
        let crc = crc32c::crc32c(&blk[..sb::CRC]);
        blk[sb::CRC..sb::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    }
    std::fs::write(&meta, b).unwrap();
    let mut s = Store::open(&path).unwrap();
    assert_eq!(s.superblock().rowlog_ring, 0, "opened as version 4");
    assert!(logged(&s) > 0, "the committed log is served");
    check(&s, &model, "opened at version 4");
    let mut freed = 0;
    for round in 2..=60u32 {
        let ids: Vec<u64> = (0..100).map(|_| rng.below(ROWS)).collect();
        let v = round as f32;
        s.update("t", &ids, &vec![v; ids.len() * DIM]).unwrap();
        for &id in &ids {
            model.insert(id, v);
        }
        freed += s.checkpoint().unwrap().row_log_blocks_freed;
        let t0 = Instant::now();
        while s.stats().row_log_used_blocks * 2 > 32 {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "round {round}: no pass"
            );
            std::thread::sleep(Duration::from_millis(2));
            freed += s.checkpoint().unwrap().row_log_blocks_freed;
        }
        if round % 20 == 0 {
            drop(s);
            s = Store::open(&path).unwrap();
            check(&s, &model, &format!("round {round}: reopened"));
        }
    }
    assert!(freed > 64, "{freed} blocks freed: the log did not wrap");
    assert_eq!(s.superblock().version, embtier::format::FormatVersion::V5);
}

/// With `[ssd] overhead_in_budget`, the log's map has a share of the
/// DRAM budget: once it holds more than a 24th of the cached bytes, a
/// pass begins although the log is far from `merge_start` full, writes
/// the logged rows home, and the checkpoint after it frees their blocks
/// and their map entries. Every row keeps its value, and across a reopen.
#[test]
fn a_log_map_past_its_share_of_the_budget_begins_a_pass() {
    let mut c = StoreConfig::builder()
        .table(TableConfig::new("t", ROWS, DIM as u32).init(Init::Zeros))
        .dram_capacity(128 << 10)
        .overhead_in_budget(true)
        .build();
    c.ssd.row_log = Some(embtier::ByteSize(4096 * 4096));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let s = Store::create(&path, c).unwrap();
    let st = s.stats();
    let t = st.table("t").unwrap();
    // 128 KiB at 240 + 50 + 16 bytes a row.
    let cap = t.dram().capacity_rows;
    let charged = embtier::config::charged_row_bytes(240, true);
    assert_eq!(charged, 306);
    assert!(
        cap <= (128 << 10) / charged && cap + 8 >= (128 << 10) / charged,
        "{cap} rows cached"
    );
    let share = cap * 240 / 24;
    let mut model = HashMap::new();
    let mut rng = Rng(23);
    let mut round = 0;
    // Checkpoints log scattered rows until the map is past its share.
    while s.stats().table("t").unwrap().ssd.log_map_bytes <= share {
        round += 1;
        assert!(round < 200, "the map never grew past {share} bytes");
        let ids: Vec<u64> = (0..200).map(|_| rng.below(LOGGED)).collect();
        let v = round as f32;
        s.update("t", &ids, &vec![v; ids.len() * DIM]).unwrap();
        for &id in &ids {
            model.insert(id, v);
        }
        s.checkpoint().unwrap();
    }
    let used = s.stats().row_log_used_blocks;
    assert!(used * 8 < 4096, "the log is {used} of 4096 blocks full");
    wait_until(
        30,
        || merged(&s) > 0,
        || format!("no pass began with the map at {share}+ bytes"),
    );
    let c = checkpoint_after_the_pass(&s);
    assert!(c.row_log_blocks_freed > 0, "{c:?}");
    let map = s.stats().table("t").unwrap().ssd.log_map_bytes;
    assert!(map <= share, "the map holds {map} bytes after the pass");
    check(&s, &model, "after the pass");
    drop(s);
    let s = Store::open(&path).unwrap();
    check(&s, &model, "reopened");
}
