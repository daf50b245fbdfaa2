//! The row-log index: an open after a crash (here, a store dropped
//! without a close) in the same boot rebuilds the row log's map from the
//! index instead of reading the log, and serves exactly the last
//! checkpoint's values; an index it must not trust (none, not kept through
//! the last commit, of another boot, a damaged slot) makes it read the log
//! as before, serve the same values, and write the index anew.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

use embtier::format::logindex::{IndexHeader, INDEX_KEPT_THROUGH, SLOTS_AT};
use embtier::io::fault::FaultPlan;
use embtier::{
    Init, IoEngineKind, OpenOptionsExt, PolicyKind, Store, StoreConfig, TableConfig, TierConfig,
    LOG_INDEX_FILE,
};
use rand::{Rng, SeedableRng};

const DIM: u32 = 16;
const ROWS: u64 = 200_000;

/// One cached table over 800 rows of DRAM, and a small pinned one: dirty
/// rows the cache lets go of are appended to the row log.
fn config() -> StoreConfig {
    let rb = TableConfig::new("t", 1, DIM).row_bytes();
    StoreConfig::builder()
        .table(TableConfig::new("t", ROWS, DIM).init(Init::Uniform { scale: 0.5 }))
        .tiers(vec![TierConfig::dram(800 * rb, PolicyKind::Lru)])
        .dram_shards(4)
        .io_engine(IoEngineKind::Psync)
        .warm_rows(false)
        .build()
}

/// A cold open: with no hot set to bring back, the open maps the log from
/// its index wherever it may trust it (a warm one reads the log where the
/// hot set's rows fill it, as they fill this small one).
fn open(path: &Path) -> Store {
    Store::open_ext(
        path,
        OpenOptionsExt {
            cold: true,
            ..Default::default()
        },
    )
    .unwrap()
}

fn look(s: &Store, ids: &[u64]) -> Vec<f32> {
    let mut out = vec![0f32; ids.len() * DIM as usize];
    s.lookup("t", ids, &mut out).unwrap();
    out
}

/// `rounds` rounds of SGD steps on random ids (some rounds ending in a
/// checkpoint); returns every id touched.
fn train(s: &Store, rng: &mut rand::rngs::StdRng, rounds: usize, touched: &mut Vec<u64>) {
    for r in 0..rounds {
        let ids: Vec<u64> = (0..500).map(|_| rng.gen_range(0..ROWS / 4)).collect();
        let grads: Vec<f32> = (0..ids.len() * DIM as usize)
            .map(|_| rng.gen_range(-1.0..1.0))
            .collect();
        s.apply_sgd("t", &ids, &grads, 0.1).unwrap();
        touched.extend(&ids);
        if r % 7 == 6 {
            s.checkpoint().unwrap();
        }
    }
}

/// Every touched row's value, by id.
fn values(s: &Store, touched: &[u64]) -> BTreeMap<u64, Vec<f32>> {
    let mut ids = touched.to_vec();
    ids.sort_unstable();
    ids.dedup();
    let v = look(s, &ids);
    ids.iter()
        .zip(v.chunks(DIM as usize))
        .map(|(&id, r)| (id, r.to_vec()))
        .collect()
}

fn check(s: &Store, want: &BTreeMap<u64, Vec<f32>>) {
    let ids: Vec<u64> = want.keys().copied().collect();
    let got = look(s, &ids);
    for (k, (id, w)) in want.iter().enumerate() {
        assert_eq!(
            &got[k * DIM as usize..(k + 1) * DIM as usize],
            &w[..],
            "row {id}"
        );
    }
}

/// A store trained through checkpoints, trained on after the last one (so
/// that the log holds appends the checkpoint does not count), and
/// dropped. Returns the store's path and the checkpoint's values.
fn dropped(dir: &Path, seed: u64) -> (std::path::PathBuf, BTreeMap<u64, Vec<f32>>) {
    let path = dir.join("s");
    let s = Store::create(&path, config()).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut touched = Vec::new();
    train(&s, &mut rng, 28, &mut touched);
    s.checkpoint().unwrap();
    let committed = values(&s, &touched);
    let used = s.stats().row_log_used_blocks;
    assert!(used > 20, "the log holds {used} blocks");
    let mut after = Vec::new();
    train(&s, &mut rng, 6, &mut after);
    assert!(
        s.stats().row_log_used_blocks > used,
        "no appends after the checkpoint"
    );
    drop(s);
    (path, committed)
}

#[test]
fn a_dropped_store_maps_its_row_log_from_the_index_and_serves_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (path, committed) = dropped(dir.path(), 1);
    // Warm, the hot set's rows fill most of this log: it is read whole
    // for them, and they are in memory when the open returns.
    let s = Store::open(&path).unwrap();
    let at = s.row_log_at_open().clone();
    assert!(!at.from_index, "{at:?}");
    assert!(
        at.index_refused.as_deref().unwrap().contains("the hot set"),
        "{at:?}"
    );
    check(&s, &committed);
    drop(s);
    let s = open(&path);
    let at = s.row_log_at_open().clone();
    assert!(at.blocks > 20, "{at:?}");
    assert!(at.from_index, "{at:?}");
    assert_eq!(at.index_refused, None);
    check(&s, &committed);

    // Trained on, checkpointed and dropped again: the index was kept up to
    // date by this session's appends.
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let mut touched: Vec<u64> = committed.keys().copied().collect();
    train(&s, &mut rng, 20, &mut touched);
    s.checkpoint().unwrap();
    let committed = values(&s, &touched);
    drop(s);
    let s = open(&path);
    assert!(s.row_log_at_open().from_index, "{:?}", s.row_log_at_open());
    check(&s, &committed);
    drop(s);

    // Without the index: the log is read, the values are the same, and
    // the read writes the index anew for the next open.
    std::fs::remove_file(path.join(LOG_INDEX_FILE)).unwrap();
    let s = open(&path);
    let at = s.row_log_at_open().clone();
    assert!(!at.from_index);
    assert!(
        at.index_refused.as_deref().unwrap().contains("no index"),
        "{at:?}"
    );
    check(&s, &committed);
    drop(s);
    let s = open(&path);
    assert!(s.row_log_at_open().from_index, "{:?}", s.row_log_at_open());
    check(&s, &committed);
}

/// `s`, an open that must not have trusted the index: it read the log,
/// saying why (`why` in its reason), and serves `committed`; the read
/// made the index anew, so the next cold open maps from it and serves
/// the same.
fn refused_then_remade(s: Store, path: &Path, why: &str, committed: &BTreeMap<u64, Vec<f32>>) {
    let at = s.row_log_at_open().clone();
    assert!(!at.from_index, "{why}: {at:?}");
    assert!(
        at.index_refused.as_deref().unwrap().contains(why),
        "{why}: {at:?}"
    );
    check(&s, committed);
    drop(s);
    let s = open(path);
    assert!(s.row_log_at_open().from_index, "after {why}");
    check(&s, committed);
}

/// The index's header and kept-through word, and the size of its slots.
fn header(path: &Path) -> (IndexHeader, u64) {
    let b = std::fs::read(path.join(LOG_INDEX_FILE)).unwrap();
    IndexHeader::decode(&b).unwrap()
}

fn write_at(path: &Path, at: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path.join(LOG_INDEX_FILE))
        .unwrap();
    f.write_all_at(bytes, at).unwrap();
}

/// A change made to a store's files.
type Damage = Box<dyn Fn(&Path)>;

/// An index the open must not trust is refused with its reason, the log
/// is read, and the values are the checkpoint's: kept through an earlier
/// commit (a build without the index appended since), written in another
/// boot (its page-cache writes may have been lost), or with a damaged slot
/// in the committed log. Accepting any of them would map rows to blocks
/// that do not hold them, or miss rows the log holds.
#[test]
fn an_index_it_must_not_trust_is_refused_and_the_log_read() {
    let dir = tempfile::tempdir().unwrap();
    let (path, committed) = dropped(dir.path(), 3);
    let (h, kept) = header(&path);
    let sb = open(&path).superblock().clone();
    assert_eq!(kept, sb.generation);

    let cases: Vec<(&str, Damage)> = vec![
        (
            "kept through checkpoint",
            Box::new(move |p: &Path| {
                write_at(p, INDEX_KEPT_THROUGH as u64, &(kept - 1).to_le_bytes())
            }),
        ),
        (
            "another boot",
            Box::new({
                let h = h.clone();
                move |p: &Path| {
                    let mut other = h.clone();
                    other.boot_id = b"00000000-0000-4000-8000-000000000000".to_vec();
                    let mut b = other.encode().unwrap();
                    b[INDEX_KEPT_THROUGH..].copy_from_slice(&kept.to_le_bytes());
                    write_at(p, 0, &b);
                }
            }),
        ),
        (
            "its slot",
            Box::new({
                let h = h.clone();
                move |p: &Path| {
                    // A bit of an id in the slot of the committed log's
                    // last block.
                    let last = (sb.rowlog_start as u64 + sb.rowlog_blocks - 1) % h.ring;
                    let at = SLOTS_AT + last * h.slot_bytes as u64 + 24;
                    let f = std::fs::File::open(p.join(LOG_INDEX_FILE)).unwrap();
                    let mut byte = [0u8];
                    f.read_exact_at(&mut byte, at).unwrap();
                    write_at(p, at, &[byte[0] ^ 1]);
                }
            }),
        ),
    ];
    for (why, damage) in cases {
        damage(&path);
        refused_then_remade(open(&path), &path, why, &committed);
    }
}

/// A log block damaged on the disk under a true index: the open, reading
/// no log block, succeeds, and the lookup that reads the block fails
/// naming it, as a miss's read checks every block; no wrong value is
/// served.
#[test]
fn a_damaged_log_block_under_a_true_index_fails_the_read_that_meets_it() {
    let dir = tempfile::tempdir().unwrap();
    let (path, committed) = dropped(dir.path(), 5);
    let s = open(&path);
    assert!(s.row_log_at_open().from_index);
    let sb = s.superblock().clone();
    drop(s);
    // The committed log's first block, in its rows.
    let block = sb.data_blocks + sb.rowlog_start as u64;
    let at = block * embtier::format::BLOCK_SIZE as u64 + 1000;
    let data = path.join(embtier::DATA_FILE);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&data)
        .unwrap();
    let mut byte = [0u8];
    f.read_exact_at(&mut byte, at).unwrap();
    f.write_all_at(&[byte[0] ^ 0x10], at).unwrap();
    f.sync_all().unwrap();
    let s = open(&path);
    assert!(s.row_log_at_open().from_index);
    let ids: Vec<u64> = committed.keys().copied().collect();
    let mut out = vec![0f32; ids.len() * DIM as usize];
    let e = s.lookup("t", &ids, &mut out).unwrap_err().to_string();
    assert!(
        e.contains("data.emb") && e.contains(&format!("offset {}", at - 1000)),
        "{e}"
    );
}

/// Open with `plan`'s faults in the index's reads, writes and syncs only.
fn open_faulty(path: &Path, plan: &Arc<FaultPlan>) -> Store {
    *plan.only_file.lock() = Some(path.join(LOG_INDEX_FILE));
    let opts = OpenOptionsExt {
        cold: true,
        faults: Some(plan.clone()),
        ..Default::default()
    };
    Store::open_ext(path, opts).unwrap()
}

/// A slot write or an index sync that fails (a full disk, an I/O error,
/// a write-back the kernel failed) leaves the session running, since the
/// data file holds every row, and its checkpoints committing; but the
/// index then misses appends, so no later open may trust it: the open
/// after a crash reads the log and serves the last checkpoint exactly,
/// and writes the index anew. Trusted, the index would map the ids of the
/// missed appends to their older copies.
#[test]
fn a_failed_slot_write_or_sync_leaves_an_index_no_open_trusts() {
    for kind in ["write", "torn write", "sync"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        drop(Store::create(&path, config()).unwrap());
        let plan = Arc::new(FaultPlan::default());
        let s = open_faulty(&path, &plan);
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut touched = Vec::new();
        train(&s, &mut rng, 14, &mut touched);
        s.checkpoint().unwrap();
        let (writes, syncs) = (plan.writes.load(SeqCst), plan.syncs.load(SeqCst));
        match kind {
            "sync" => plan.fail_syncs_from.store(syncs, SeqCst),
            _ => {
                plan.tear_failed_writes.store(kind == "torn write", SeqCst);
                plan.fail_writes_now(libc::EIO);
            }
        }
        // Two rounds of training append to the log; a checkpoint syncs.
        let before = s.stats().row_log_used_blocks;
        train(&s, &mut rng, 2, &mut touched);
        assert!(s.stats().row_log_used_blocks > before, "{kind}: no appends");
        if kind == "sync" {
            s.checkpoint().unwrap();
        }
        // A failed write or sync, since the ones before were counted.
        let (w, y) = (plan.writes.load(SeqCst), plan.syncs.load(SeqCst));
        assert!(
            if kind == "sync" {
                y > syncs
            } else {
                w > writes
            },
            "{kind}: the fault was never met ({w} writes, {y} syncs)"
        );
        // Healed, the session's appends write their slots again, and its
        // commits could write the kept-through word, but the slots it
        // missed stay missed.
        plan.heal();
        train(&s, &mut rng, 14, &mut touched);
        s.checkpoint().unwrap();
        let committed = values(&s, &touched);
        let generation = s.generation();
        let mut after = Vec::new();
        train(&s, &mut rng, 3, &mut after);
        drop(s);
        // Zeroed, or (where zeroing it failed too) left at the checkpoint
        // before the fault, which the next commit made stale.
        let kept = header(&path).1;
        assert!(kept < generation, "{kind}: kept through {kept}");

        let s = open(&path);
        assert!(s.row_log_at_open().blocks > 20, "{kind}");
        let why = format!("kept through checkpoint {kept}, ");
        refused_then_remade(s, &path, &why, &committed);
    }
}

/// An index whose header or slots cannot be read is read around: the
/// open reads the log and serves the checkpoint exactly.
#[test]
fn an_index_that_cannot_be_read_makes_the_open_read_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (path, committed) = dropped(dir.path(), 7);
    // Read 0 is the header's, read 1 the first chunk of slots.
    for (from, why) in [(0, "Input/output error"), (1, "Input/output error")] {
        let plan = Arc::new(FaultPlan::default());
        plan.fail_reads_from.store(from, SeqCst);
        let s = open_faulty(&path, &plan);
        assert!(plan.reads.load(SeqCst) > from, "read {from} never made");
        refused_then_remade(s, &path, why, &committed);
    }
}

/// An index that cannot be made anew (its truncation, its header's write
/// or its sizing fails: a full disk, an I/O error) leaves the open
/// without one: it reads the log and serves the checkpoint, and the next
/// open, finding no index it may trust, reads the log again and makes
/// it; the one after maps from it.
#[test]
fn an_index_that_cannot_be_made_anew_leaves_the_session_without_one() {
    // The remake's writes: 0 truncates, 1 writes the header, 2 sizes it.
    for from in 0..3u64 {
        let dir = tempfile::tempdir().unwrap();
        let (path, committed) = dropped(dir.path(), 13 + from);
        std::fs::remove_file(path.join(LOG_INDEX_FILE)).unwrap();
        let plan = Arc::new(FaultPlan::default());
        plan.fail_writes_from.store(from, SeqCst);
        let s = open_faulty(&path, &plan);
        assert!(
            plan.writes.load(SeqCst) > from,
            "write {from} of the remake never made"
        );
        let at = s.row_log_at_open().clone();
        assert!(!at.from_index, "write {from}: {at:?}");
        assert!(
            at.index_refused
                .as_deref()
                .unwrap()
                .contains("Input/output error"),
            "write {from}: {at:?}"
        );
        check(&s, &committed);
        drop(s);
        let s = open(&path);
        let at = s.row_log_at_open().clone();
        assert!(!at.from_index, "after write {from} failed: {at:?}");
        check(&s, &committed);
        drop(s);
        let s = open(&path);
        assert!(s.row_log_at_open().from_index, "made after write {from}");
        check(&s, &committed);
    }
}
