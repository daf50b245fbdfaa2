//! Dead epochs (FORMAT.md, "Dead epochs"): an epoch handed out and never
//! committed stays dead for good, so blocks it wrote that recovery could
//! not undo are never served, however many checkpoints follow; a clean
//! close adds none; and a list too long for the superblock is scrubbed
//! down to the epochs some block still carries.

mod common;

use std::fs;

use embtier::{Init, Store, StoreConfig, TableConfig};

/// 4400-byte rows: two blocks a group, so write-backs go home in place
/// (journaled), never to the row log.
const DIM: usize = 1100;
const ROWS: u64 = 40;

fn config() -> StoreConfig {
    StoreConfig::builder()
        .table(TableConfig::new("w", ROWS, DIM as u32).init(Init::Zeros))
        // Room for a few rows: updates evict and write back in place.
        .dram_capacity(8 * 4400)
        .build()
}

fn row(id: u64, gen: u64) -> Vec<f32> {
    (0..DIM)
        .map(|j| (gen * 1000 + id) as f32 + j as f32 / 2048.0)
        .collect()
}

/// Set every row to its value for `gen`, one row per call so that rows are
/// evicted and written back in place as it goes.
fn write_all(s: &Store, gen: u64) {
    for id in 0..ROWS {
        s.update("w", &[id], &row(id, gen)).unwrap();
    }
}

/// Every row reads as its value for `gen`, or fails; returns the failures.
fn exact_or_error(s: &Store, gen: u64) -> u64 {
    let mut failed = 0;
    for id in 0..ROWS {
        let mut out = vec![0f32; DIM];
        match s.lookup("w", &[id], &mut out) {
            Ok(()) => assert_eq!(out, row(id, gen), "row {id} is not generation {gen}'s"),
            Err(e) => {
                assert!(e.to_string().contains("never committed"), "{e}");
                failed += 1;
            }
        }
    }
    failed
}

#[test]
fn a_clean_close_adds_no_dead_epoch() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("s");
    let s = Store::create(&dir, config()).unwrap();
    write_all(&s, 1);
    s.checkpoint().unwrap();
    drop(s);
    for _ in 0..3 {
        let s = Store::open(&dir).unwrap();
        assert!(s.recovery().dead_epochs.is_empty(), "{:?}", s.recovery());
        assert_eq!(exact_or_error(&s, 1), 0);
    }
}

#[test]
fn a_crash_after_writes_leaves_a_dead_epoch_that_outlives_checkpoints() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("s");
    let s = Store::create(&dir, config()).unwrap();
    write_all(&s, 1);
    let crashed = s.checkpoint().unwrap().epoch + 1;
    write_all(&s, 2); // written back in place, journaled, never committed
    drop(s);
    // The journal is lost: recovery cannot undo the in-place writes.
    fs::remove_file(dir.join(embtier::JOURNAL_FILE)).unwrap();
    let s = Store::open(&dir).unwrap();
    assert!(
        s.recovery()
            .dead_epochs
            .iter()
            .any(|&(a, b)| a <= crashed && crashed <= b),
        "epoch {crashed} not dead: {:?}",
        s.recovery()
    );
    let failed = exact_or_error(&s, 1);
    assert!(failed > 0, "no row was written back in place");
    drop(s);
    // Checkpoints commit higher epochs; the dead blocks stay refused.
    for _ in 0..3 {
        let s = Store::open(&dir).unwrap();
        s.checkpoint().unwrap();
        drop(s);
        let s = Store::open(&dir).unwrap();
        assert_eq!(exact_or_error(&s, 1), failed);
    }
    // Rewriting a dead row whole makes it good again.
    let s = Store::open(&dir).unwrap();
    write_all(&s, 3);
    s.checkpoint().unwrap();
    drop(s);
    let s = Store::open(&dir).unwrap();
    assert_eq!(exact_or_error(&s, 3), 0);
}

/// More crashes (each after a checkpoint, so each leaves its own range)
/// than a superblock lists: the open that overflows scrubs the data file
/// and keeps only the dead epoch whose blocks are still there.
#[test]
fn an_overflowing_dead_list_is_scrubbed_to_the_epochs_still_on_disk() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("s");
    let s = Store::create(&dir, config()).unwrap();
    write_all(&s, 1);
    let lost = s.checkpoint().unwrap().epoch + 1;
    // One crash whose journal is lost: its blocks stay dead.
    write_all(&s, 2);
    drop(s);
    fs::remove_file(dir.join(embtier::JOURNAL_FILE)).unwrap();
    let mut scrubbed = None;
    let mut failed = None;
    for round in 0..embtier::format::MAX_DEAD_RANGES + 2 {
        let s = Store::open(&dir).unwrap();
        if let Some(sc) = s.recovery().scrubbed {
            scrubbed = Some((round, sc, s.recovery().dead_epochs.clone()));
        }
        assert!(s.recovery().dead_epochs.len() <= embtier::format::MAX_DEAD_RANGES);
        let f = exact_or_error(&s, 1);
        assert!(f > 0);
        assert_eq!(*failed.get_or_insert(f), f, "round {round}");
        s.checkpoint().unwrap();
        // A crash after writes the journal undoes: a dead epoch, no dead
        // block.
        write_all(&s, 9);
        drop(s);
    }
    let (round, (read, found), dead) = scrubbed.expect("the dead list never overflowed");
    eprintln!("scrub at round {round}: {read} blocks read, {found} dead, ranges {dead:?}");
    assert!(found > 0 && read >= found);
    assert_eq!(
        dead,
        vec![(lost, lost)],
        "only the lost epoch's blocks are dead"
    );
    let s = Store::open(&dir).unwrap();
    assert_eq!(exact_or_error(&s, 1), failed.unwrap());
}

/// A row-log append the last checkpoint counted on that never reached the
/// disk (a dropped fsync) leaves whatever the block held before: after a
/// merge, an older committed log block. Its rows were once committed, so
/// the epoch rule alone passed them, and open served stale values. Now
/// the log's epochs are checked against the commit (`rowlog_from`).
#[test]
fn a_lost_row_log_append_fails_open_instead_of_serving_stale_rows() {
    use std::io::{Read, Seek, SeekFrom, Write};
    const R: u64 = 4000;
    const D: usize = 60; // 240-byte rows: 16 a log block
    let cfg = || {
        let mut c = StoreConfig::builder()
            .table(TableConfig::new("t", R, D as u32).init(Init::Zeros))
            .dram_capacity(64 << 10)
            .build();
        c.ssd.row_log = Some(embtier::ByteSize(256 << 10));
        // The test needs the log as each checkpoint leaves it: no merge
        // between checkpoints.
        c.ssd.merge_in_background = false;
        c
    };
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("s");
    let s = Store::create(&dir, cfg()).unwrap();
    let ids: Vec<u64> = (0..R).step_by(7).collect();
    let vals = |g: f32| vec![g; ids.len() * D];
    s.update("t", &ids, &vals(1.0)).unwrap();
    let c1 = s.checkpoint().unwrap();
    assert!(c1.row_log_blocks > 0, "{c1:?}");
    let base = s.superblock().data_blocks * 4096;
    let data = dir.join(embtier::DATA_FILE);
    let block0 = |f: &mut fs::File| {
        let mut b = vec![0u8; 4096];
        f.seek(SeekFrom::Start(base)).unwrap();
        f.read_exact(&mut b).unwrap();
        b
    };
    let old = block0(&mut fs::File::open(&data).unwrap());
    s.merge_row_log().unwrap();
    s.update("t", &ids, &vals(3.0)).unwrap();
    let c3 = s.checkpoint().unwrap();
    assert!(
        c3.row_log_blocks > 0 && c3.row_log_merged_rows == 0,
        "{c3:?}"
    );
    drop(s);
    // Commit 3's first append is lost: block 0 holds commit 1's again.
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&data)
        .unwrap();
    assert_ne!(block0(&mut f), old);
    f.seek(SeekFrom::Start(base)).unwrap();
    f.write_all(&old).unwrap();
    drop(f);
    match Store::open(&dir) {
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("data.emb") && msg.contains(&format!("offset {}", base + 4072)),
                "{msg}"
            );
        }
        Ok(s) => {
            // Had it opened, some row would read commit 1's value.
            let mut out = vec![0f32; ids.len() * D];
            s.lookup("t", &ids, &mut out).unwrap();
            panic!(
                "opened; {} rows read a stale value",
                out.chunks(D).filter(|r| r[0] != 3.0).count()
            );
        }
    }
}

/// A group the last checkpoint wrote in place whose write never reached
/// the disk (its data fsync dropped) still holds the previous checkpoint's
/// bytes, sealed with a committed epoch. Every group of the checkpoint's
/// written-group list is checked, by a read of it or by the sweep after
/// open, and the lost one fails naming its offset.
#[test]
fn a_lost_in_place_write_fails_its_reads_instead_of_serving_stale_rows() {
    use std::io::{Read, Seek, SeekFrom, Write};
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("s");
    let s = Store::create(&dir, config()).unwrap();
    write_all(&s, 1);
    s.checkpoint().unwrap();
    let data = dir.join(embtier::DATA_FILE);
    let group = |f: &mut fs::File, id: u64| {
        let mut b = vec![0u8; 2 * 4096];
        f.seek(SeekFrom::Start(id * 2 * 4096)).unwrap();
        f.read_exact(&mut b).unwrap();
        b
    };
    let old = group(&mut fs::File::open(&data).unwrap(), 5);
    write_all(&s, 2);
    let c = s.checkpoint().unwrap();
    assert!(c.groups_journaled > 0, "{c:?}");
    drop(s);
    // Reopened in the boot that committed it: nothing can have lost an
    // acknowledged write, and nothing is checked.
    let s = Store::open(&dir).unwrap();
    let r = s.recovery().clone();
    assert_eq!((r.written_checked, r.written_trusted), (0, ROWS), "{r:?}");
    assert_eq!(exact_or_error(&s, 2), 0);
    drop(s);
    // After a power loss (a new boot), every listed group is checked; so
    // they are when the boot record is damaged.
    let boot = fs::read(dir.join(embtier::BOOT_FILE)).unwrap();
    common::reboot(&dir);
    let mut damaged = boot.clone();
    damaged[20] ^= 1;
    for then in [Some(damaged), Some(boot)] {
        let s = Store::open(&dir).unwrap();
        let r = s.recovery().clone();
        assert_eq!((r.written_checked, r.written_trusted), (ROWS, 0), "{r:?}");
        assert_eq!(exact_or_error(&s, 2), 0);
        drop(s);
        if let Some(b) = then {
            fs::write(dir.join(embtier::BOOT_FILE), b).unwrap();
        }
    }
    // The record of this boot is back, for the same checkpoint: trusted.
    let s = Store::open(&dir).unwrap();
    assert_eq!(s.recovery().written_trusted, ROWS);
    drop(s);
    // Row 5's write is lost (a power loss: the machine boots again): its
    // group holds generation 1's bytes again.
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&data)
        .unwrap();
    assert_ne!(group(&mut f, 5), old);
    f.seek(SeekFrom::Start(5 * 2 * 4096)).unwrap();
    f.write_all(&old).unwrap();
    drop(f);
    common::reboot(&dir);
    // Open reads none of the listed groups; a read of row 5's group
    // checks it and fails, naming its epoch's offset, and so does the
    // check of the rest (which a thread runs after open, and the next
    // checkpoint finishes before it may commit).
    let s = Store::open(&dir).unwrap();
    let at = format!("offset {}", 5 * 8192 + 4072);
    let mut out = vec![0f32; DIM];
    let msg = s.lookup("w", &[5], &mut out).unwrap_err().to_string();
    assert!(msg.contains("data.emb") && msg.contains(&at), "{msg}");
    let msg = s.check_written().unwrap_err().to_string();
    assert!(msg.contains("data.emb") && msg.contains(&at), "{msg}");
    assert!(
        s.checkpoint().is_err(),
        "a checkpoint laundered the lost write"
    );
    // Every other row reads its generation-2 value.
    for id in (0..ROWS).filter(|&id| id != 5) {
        s.lookup("w", &[id], &mut out).unwrap();
        assert_eq!(out, row(id, 2), "row {id}");
    }
    drop(s);
    // Still refused at the next open, by the sweep alone.
    let s = Store::open(&dir).unwrap();
    assert!(s.check_written().is_err());
    drop(s);
    // A damaged or missing list fails open too, naming the list.
    let list = dir.join(embtier::format::WrittenList::file_name(2));
    fs::write(&list, b"EWRT").unwrap();
    let msg = Store::open(&dir).map(|_| ()).unwrap_err().to_string();
    assert!(msg.contains("written-0.emb"), "{msg}");
}
