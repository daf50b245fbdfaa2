//! The row log's recovery at open, over a log of several reads (which the
//! open reads ahead on a second thread while it checks the blocks): every
//! row comes back as its newest logged copy, and the first damaged block
//! or failed read, in log order, fails the open: an error, never a panic,
//! a hang or a wrong value.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use embtier::format::BLOCK_SIZE;
use embtier::io::fault::FaultPlan;
use embtier::{Init, IoEngineKind, OpenOptionsExt, Store, StoreConfig, TableConfig};

/// 1 KiB rows: three to a row-log block.
const DIM: usize = 256;
const ROWS: u64 = 16000;
/// Blocks the open reads at once (`LOG_CHUNK` in `src/store/restore.rs`).
const CHUNK_BLOCKS: usize = 1024;

fn cfg() -> StoreConfig {
    StoreConfig::builder()
        .table(TableConfig::new("t", ROWS, DIM as u32).init(Init::Zeros))
        // A cache of 4,096 rows of the 16,000: most updates reach the log
        // as they go, and the hot rows a checkpoint writes are many.
        .dram_capacity(4 << 20)
        // Room for every copy, so that no merge empties the log.
        .row_log(Some(64 << 20))
        .io_engine(IoEngineKind::Psync)
        .build()
}

/// Row `id`'s value after `round` rounds of updates: every row in round
/// 1, the even rows again in round 2 (so that the log holds an old copy of
/// those, in earlier blocks, and a newer one later).
fn value(id: u64, round: u32) -> f32 {
    let round = if id % 2 == 0 { round } else { round.min(1) };
    (id as f32) * 0.5 + round as f32 * 1000.0
}

/// A store whose log takes more than three reads of the open,
/// closed at its second checkpoint; its directory and the log's blocks'
/// offsets in the data file, oldest first.
fn logged_store(dir: &Path) -> (PathBuf, Vec<u64>) {
    logged_store_with(dir, cfg())
}

/// [`logged_store`] with `cfg`.
fn logged_store_with(dir: &Path, cfg: StoreConfig) -> (PathBuf, Vec<u64>) {
    let path = dir.join("s");
    let s = Store::create(&path, cfg).unwrap();
    for round in 1..=2u32 {
        let ids: Vec<u64> = (0..ROWS).filter(|&id| round == 1 || id % 2 == 0).collect();
        for chunk in ids.chunks(500) {
            let vals: Vec<f32> = chunk
                .iter()
                .flat_map(|&id| std::iter::repeat_n(value(id, round), DIM))
                .collect();
            s.update("t", chunk, &vals).unwrap();
        }
        s.checkpoint().unwrap();
    }
    let data_blocks = s.superblock().data_blocks;
    let used = s.stats().row_log_used_blocks;
    drop(s);
    let bytes = fs::read(path.join(embtier::DATA_FILE)).unwrap();
    let log: Vec<u64> = (data_blocks..data_blocks + used)
        .map(|b| b * BLOCK_SIZE as u64)
        .filter(|&at| &bytes[at as usize..at as usize + 4] == b"ELOG")
        .collect();
    assert_eq!(log.len() as u64, used, "the log's blocks follow the tables");
    assert!(
        log.len() > 2 * CHUNK_BLOCKS,
        "{} log blocks: more than two reads of the open",
        log.len()
    );
    (path, log)
}

/// Every row holds its newest value.
fn assert_newest(s: &Store, case: &str) {
    let mut out = vec![0f32; DIM];
    for id in 0..ROWS {
        s.lookup("t", &[id], &mut out).unwrap();
        assert!(
            out.iter().all(|&x| x == value(id, 2)),
            "{case}: row {id} is {}, not {}",
            out[0],
            value(id, 2)
        );
    }
}

fn cold() -> OpenOptionsExt {
    OpenOptionsExt {
        cold: true,
        ..Default::default()
    }
}

#[test]
fn a_log_of_several_reads_restores_every_rows_newest_copy() {
    let d = tempfile::tempdir().unwrap();
    let (path, _) = logged_store(d.path());
    let s = Store::open_ext(&path, cold()).unwrap();
    let logged = s.stats().tables[0].ssd.logged_rows;
    assert!(
        logged > ROWS / 2,
        "{logged} rows restored to the log's map: the rows must come from the log"
    );
    assert_newest(&s, "reopened");
}

/// A warm open puts the hot rows back on a second thread while the log's
/// map is restored: the rows come back as their newest copies, from the
/// hot rows or through the map.
#[test]
fn a_warm_open_restores_the_log_beside_the_hot_rows() {
    let d = tempfile::tempdir().unwrap();
    let (path, _) = logged_store(d.path());
    let s = Store::open(&path).unwrap();
    let warmed = s.wait_warm().unwrap();
    let st = s.stats();
    assert!(
        warmed >= 2000 && st.tables[0].ssd.logged_rows > ROWS / 2,
        "{warmed} rows put back, {} in the log's map: both must come back",
        st.tables[0].ssd.logged_rows
    );
    // From the hot rows and the log's reads: nothing read back after.
    assert_eq!(
        st.tables[0].ssd.read_ops, 0,
        "reads after the open: the hot rows held every row"
    );
    assert_newest(&s, "reopened warm");
}

/// The rows of the hot set that the hot rows do not hold (here none: a
/// store without them) and whose newest copy is in the log are put back
/// from the log's own reads at open: the open reads that log whole
/// anyway, so reading them again one block at a time, after it, is
/// wasted. The even rows have two copies in the log; the older one must
/// not win.
#[test]
fn the_hot_sets_logged_rows_come_back_from_the_logs_reads() {
    let d = tempfile::tempdir().unwrap();
    let (path, _) = logged_store_with(d.path(), {
        let mut c = cfg();
        c.ssd.warm_rows = false;
        c
    });
    assert!(!path.join(embtier::HOT_ROWS_FILE).exists(), "no hot rows");
    let s = Store::open(&path).unwrap();
    let warmed = s.wait_warm().unwrap();
    let st = s.stats();
    let t = &st.tables[0];
    assert!(
        warmed >= 4000 && t.dram().resident_rows >= 4000,
        "{warmed} rows put back, {} resident: the hot set's 4,096",
        t.dram().resident_rows
    );
    assert_eq!(
        (t.ssd.rows_read, t.ssd.log_rows_read, t.ssd.read_ops),
        (0, 0, 0),
        "rows read back after the open: the log's reads brought them all"
    );
    // The hot set's rows, looked up first: in memory, and newest.
    let hot =
        embtier::format::hotset::HotSet::decode(&fs::read(path.join(embtier::HOT_FILE)).unwrap())
            .unwrap();
    let ids: Vec<u64> = hot.tables[0].tiers.concat();
    assert!(ids.len() >= 4000, "{} ids in the hot set", ids.len());
    let mut out = vec![0f32; ids.len() * DIM];
    s.lookup("t", &ids, &mut out).unwrap();
    for (id, row) in ids.iter().zip(out.chunks(DIM)) {
        assert!(
            row.iter().all(|&x| x == value(*id, 2)),
            "row {id} is {}, not {}",
            row[0],
            value(*id, 2)
        );
    }
    let t = &s.stats().tables[0];
    assert_eq!(
        (t.dram().hits, t.ssd.read_ops),
        (ids.len() as u64, 0),
        "a lookup of the hot set's rows: all hits"
    );
    assert_newest(&s, "reopened from the log's reads");
}

/// Remove the row-log index, so that the next open reads the whole log
/// (these tests are about that read; `tests/logindex.rs` covers the
/// index).
fn no_index(path: &Path) {
    match fs::remove_file(path.join(embtier::LOG_INDEX_FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("{e}"),
        _ => {}
    }
}

/// A damaged block in the third read, and another in the fourth: the open
/// names the first, the one an open reading in order meets first.
#[test]
fn the_first_damaged_block_in_log_order_fails_the_open() {
    let d = tempfile::tempdir().unwrap();
    let (path, log) = logged_store(d.path());
    let data = path.join(embtier::DATA_FILE);
    let first = log[2 * CHUNK_BLOCKS + 7];
    let later = *log.last().unwrap();
    assert!(
        (log.len() - 1) / CHUNK_BLOCKS > 2,
        "{} log blocks: the later damage must be in a later read than the first",
        log.len()
    );
    common::flip(&data, later + 200);
    common::flip(&data, first + 100);
    no_index(&path);
    let msg = Store::open_ext(&path, cold()).unwrap_err().to_string();
    assert!(
        msg.contains("data.emb") && msg.contains(&format!("checksum mismatch at offset {first}")),
        "{msg}"
    );
    // Mended, the first no longer stops it: the open names the later one.
    common::flip(&data, first + 100);
    no_index(&path);
    let msg = Store::open_ext(&path, cold()).unwrap_err().to_string();
    assert!(
        msg.contains(&format!("checksum mismatch at offset {later}")),
        "{msg}"
    );
}

/// Each read of the open failing in turn (the log's among them, on the
/// read-ahead thread): the open is an error, or, where it can do without
/// that read, a store that serves the newest values.
#[test]
fn every_failed_read_of_the_open_is_an_error_or_harmless() {
    let d = tempfile::tempdir().unwrap();
    let (path, _) = logged_store(d.path());
    // The reads of a good open, counted.
    let plan = Arc::new(FaultPlan::default());
    no_index(&path);
    let s = Store::open_ext(&path, common::faulty_opts(&plan, true)).unwrap();
    let reads = plan.reads.load(Ordering::SeqCst);
    drop(s);
    assert!(reads >= 3, "{reads} reads: the log's three at least");
    let dir = path.to_str().unwrap();
    let mut failed = 0;
    // Cold, and warm: the hot rows go in on a thread of their own while
    // the log's read fails.
    for (k, cold) in (0..reads).flat_map(|k| [(k, true), (k, false)]) {
        let plan = Arc::new(FaultPlan::default());
        plan.fail_reads_from.store(k, Ordering::SeqCst);
        no_index(&path);
        match Store::open_ext(&path, common::faulty_opts(&plan, cold)) {
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains(dir), "read {k}: {msg}");
                failed += msg.contains("data.emb") as u32;
            }
            Ok(s) => {
                plan.heal();
                assert_newest(&s, &format!("read {k} failed"));
            }
        }
    }
    assert!(
        failed >= 6,
        "{failed} of {reads} failed reads (each cold and warm) failed the open naming the data \
         file: the log's three at least"
    );
}
