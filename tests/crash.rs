//! Crash testing: a child process runs updates, SGD steps and checkpoints
//! and reports each checkpoint it starts and each one acknowledged; the
//! parent SIGKILLs it at a random moment, reopens the store, and checks it
//! bit for bit against the model at the last acknowledged checkpoint (or at
//! the in-flight one, if its commit reached the disk).
//!
//! The first child is also opened against while it lives: the open is
//! refused with the child's pid, and after the kill the dead child's lock
//! does not block.
//!
//! `EMBTIER_CRASH_ITERS` sets the number of kills (default 100).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::workload::{config, ops, run, Model, Op};
use common::Rng;
use embtier::{OpenOptionsExt, Store};

/// One checkpoint per this many ops, on average.
const EVERY: u64 = 12;

/// The child: runs the op stream of `EMBTIER_CRASH_SEED` on the store in
/// `EMBTIER_CRASH_DIR` until killed. Run only by the parent (`--ignored`).
#[test]
#[ignore = "the crash test's child process; run by sigkill_at_random_moments"]
fn crash_child() {
    let dir = std::env::var("EMBTIER_CRASH_DIR").expect("EMBTIER_CRASH_DIR");
    let seed: u64 = std::env::var("EMBTIER_CRASH_SEED")
        .expect("EMBTIER_CRASH_SEED")
        .parse()
        .expect("seed");
    let store = Store::open(&dir).expect("child open");
    println!("OPEN {} {}", store.generation(), store.rows_kept_at_open());
    if std::env::var_os("EMBTIER_CRASH_CONCURRENT").is_some_and(|v| v == "1") {
        // Each checkpoint finishes on a thread of its own while the ops go
        // on: its moment is where `begin_checkpoint` returned.
        std::thread::scope(|s| {
            let mut writer: Option<std::thread::ScopedJoinHandle<'_, ()>> = None;
            for op in ops(seed, EVERY).take(100_000) {
                if let Op::Checkpoint = op {
                    if let Some(w) = writer.take() {
                        w.join().expect("checkpoint thread");
                    }
                    // Before the call: a checkpoint that must stop training
                    // commits inside it.
                    println!("BEGIN");
                    let begun = store.begin_checkpoint().expect("child begin_checkpoint");
                    writer = Some(s.spawn(move || {
                        let c = begun.finish().expect("child checkpoint");
                        println!("ACK {}", c.generation);
                    }));
                } else {
                    run(&store, &op).expect("child op");
                }
            }
        });
    } else {
        // With `EMBTIER_CRASH_CLOSE=1`, every third checkpoint is a close
        // (which keeps the file-backed tiers) and a reopen (which takes
        // them back), so kills land in both.
        let close = std::env::var_os("EMBTIER_CRASH_CLOSE").is_some_and(|v| v == "1");
        let mut store = Some(store);
        let mut n = 0u64;
        for op in ops(seed, EVERY).take(100_000) {
            let s = store.as_ref().expect("open");
            if let Op::Checkpoint = op {
                n += 1;
                println!("BEGIN");
                if close && n % 3 == 0 {
                    let g = s.generation() + 1;
                    store.take().expect("open").close().expect("child close");
                    println!("ACK {g}");
                    let s = Store::open(&dir).expect("child reopen");
                    println!("OPEN {} {}", s.generation(), s.rows_kept_at_open());
                    store = Some(s);
                } else {
                    let c = s.checkpoint().expect("child checkpoint");
                    println!("ACK {}", c.generation);
                }
            } else {
                run(s, &op).expect("child op");
            }
        }
    }
    println!("DONE");
}

#[test]
fn sigkill_at_random_moments_recovers_the_last_checkpoint() {
    sigkill_at_random_moments(Mode::Plain);
}

/// The same with every checkpoint finished on a thread of its own while
/// the child's ops go on (`Store::begin_checkpoint`): a reopen holds
/// exactly the ops before the last acknowledged checkpoint began (or the
/// in-flight one's), none of those after. The store counts its overhead
/// against the DRAM budget (`[ssd] overhead_in_budget`), so passes also
/// begin because the log's map is past its share, and kills land there.
#[test]
fn sigkill_while_checkpoints_finish_beside_the_ops() {
    sigkill_at_random_moments(Mode::Concurrent);
}

/// The same over a DRAM tier and a PMem tier that live in files, with
/// every third checkpoint of the child a close and a reopen, and every
/// other reopen of the parent's closed rather than dropped: kills land in
/// closes that keep the tiers and in opens that take them back, and the
/// child trains on caches taken back (`docs/architecture.md`, "Kept
/// tiers").
#[test]
fn sigkill_while_stores_close_and_keep_their_tiers() {
    sigkill_at_random_moments(Mode::Close);
}

/// Checkpoints beside the ops, as above, over the tiers in files of the
/// close test, each parent's reopen dropped: the reopen after each kill
/// takes back, where they lie, the rows whose slot stamps say the
/// recovered checkpoint holds their bytes, and the model check reads them
/// (`docs/architecture.md`, "Kept tiers after a crash"). Kills land
/// between a snapshot's moment and its commit, where a row written after
/// the moment must not be taken.
#[test]
fn sigkill_with_tiers_in_files_takes_their_rows_back() {
    sigkill_at_random_moments(Mode::ConcurrentInFiles);
}

/// The workload's DRAM tier in a file in `dir`, and a PMem tier below it
/// (in the store's directory): tiers a close keeps.
fn tiers_in_files(dir: &std::path::Path) -> Vec<embtier::TierConfig> {
    let mut dram = embtier::TierConfig::dram(96 << 10, embtier::PolicyKind::Lru);
    dram.path = Some(dir.join("dram.tier"));
    vec![
        dram,
        embtier::TierConfig::pmem(None, 64 << 10, embtier::PolicyKind::Lru),
    ]
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    Concurrent,
    Close,
    ConcurrentInFiles,
}

fn sigkill_at_random_moments(mode: Mode) {
    let concurrent = matches!(mode, Mode::Concurrent | Mode::ConcurrentInFiles);
    let files = matches!(mode, Mode::Close | Mode::ConcurrentInFiles);
    let iters: u64 = common::env_or("EMBTIER_CRASH_ITERS", 100);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    // Merges list 16 logged rows at a time (the child opens with the
    // config the store keeps): a background pass takes a table in several
    // ranges of ids, walking the log once and reading each range back
    // from its spill file, and kills land inside that too.
    let mut cfg = config();
    cfg.ssd.merge_list_rows = 16;
    cfg.ssd.overhead_in_budget = mode == Mode::Concurrent;
    if files {
        cfg.tiers = tiers_in_files(tmp.path());
    }
    drop(Store::create(&dir, cfg).unwrap());
    let exe = std::env::current_exe().unwrap();
    let mut model = Model::new();
    let mut generation = 0u64;
    let mut rng = Rng(0xc0ffee);
    let (mut in_flight_won, mut rolled_back, mut restored) = (0, 0, 0u64);
    // Reopens that put hot rows back (the open at the checkpoint that
    // wrote them), and the rows: the model check below reads them.
    let (mut hot_reopens, mut hot_rows) = (0u64, 0u64);
    // Opens that took kept tiers back (the child's, whose `OPEN` line
    // says so, and the parent's), and the rows.
    let (mut kept_opens, mut kept_rows) = (0u64, 0u64);
    // The parent's reopens after a kill that took rows back, and the rows.
    let (mut after_kill, mut after_kill_rows) = (0u64, 0u64);
    // The parent's cold reopens after a kill with a committed row log:
    // those that mapped it from the row-log index, and those that read it.
    let (mut from_index, mut log_read) = (0u64, 0u64);
    for it in 0..iters {
        let seed = 1000 + it;
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env("EMBTIER_CRASH_DIR", &dir)
            .env("EMBTIER_CRASH_SEED", seed.to_string())
            .env(
                "EMBTIER_CRASH_CONCURRENT",
                if concurrent { "1" } else { "" },
            )
            .env(
                "EMBTIER_CRASH_CLOSE",
                if mode == Mode::Close { "1" } else { "" },
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut lines = Vec::new();
        if it == 0 {
            // While the child holds the store, another process's open is
            // refused, naming the child; once it is dead, its lock is not.
            loop {
                let line = rx
                    .recv_timeout(Duration::from_secs(30))
                    .expect("child output");
                let open = line.contains("OPEN");
                lines.push(line);
                if open {
                    break;
                }
            }
            match Store::open(&dir) {
                Err(embtier::Error::Locked { pid, .. }) => assert_eq!(pid, child.id()),
                other => panic!("open of a store held by pid {}: {other:?}", child.id()),
            }
        }
        // Wait for the child to open the store, then kill it anywhere in
        // the next 0-80 ms: mid-update, mid-write-back, mid-checkpoint.
        std::thread::sleep(Duration::from_millis(5 + rng.below(80)));
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.try_iter());
        assert!(
            !lines.iter().any(|l| l == "DONE"),
            "the child finished before the kill; lengthen its op stream"
        );
        let opened = lines.iter().any(|l| l.contains("OPEN"));
        for l in lines.iter().filter(|l| l.starts_with("OPEN")) {
            let k: u64 = l
                .rsplit(' ')
                .next()
                .and_then(|k| k.parse().ok())
                .unwrap_or(0);
            kept_opens += (k > 0) as u64;
            kept_rows += k;
        }
        let acked = lines.iter().filter(|l| l.starts_with("ACK")).count() as u64;
        let begun = lines.iter().filter(|l| *l == "BEGIN").count() as u64;
        // Every other reopen cold: with no hot set to bring back, the
        // open maps the row log from its index wherever it may trust it
        // (a warm one reads the log where the hot set's rows fill it, as
        // they do this small log), and the model check reads every row
        // through that map.
        let cold = it % 2 == 1;
        let store = Store::open_ext(
            &dir,
            OpenOptionsExt {
                cold,
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("kill {it}: reopen: {e}"));
        kept_opens += (store.rows_kept_at_open() > 0) as u64;
        kept_rows += store.rows_kept_at_open();
        after_kill += (store.rows_kept_at_open() > 0) as u64;
        after_kill_rows += store.rows_kept_at_open();
        let log = store.row_log_at_open();
        if log.blocks > 0 && cold {
            from_index += log.from_index as u64;
            log_read += !log.from_index as u64;
        }
        let g = store.generation();
        let lo = generation + acked;
        let hi = generation + begun;
        assert!(
            (lo..=hi).contains(&g),
            "kill {it}: recovered generation {g}, acknowledged {lo}, begun {hi} (opened: {opened})"
        );
        if g > lo {
            in_flight_won += 1;
        }
        restored += store.recovery().groups_restored;
        rolled_back += (store.recovery().rolled_back_epoch > 0) as u64;
        let warmed: u64 = store.wait_warm().unwrap_or(0);
        let read: u64 = store.stats().tables.iter().map(|t| t.ssd.rows_read).sum();
        if warmed > read {
            hot_reopens += 1;
            hot_rows += warmed - read;
        }
        model.advance(seed, EVERY, g - generation);
        model.check(&store).unwrap_or_else(|e| {
            panic!(
                "kill {it} (seed {seed}) at generation {g}: {e}; child said {lines:?}; kept {}",
                store.rows_kept_at_open()
            )
        });
        generation = g;
        if mode == Mode::Close && it % 2 == 0 {
            // A close commits what the reopen held: one checkpoint with
            // nothing new in it (the op stream's count of checkpoints does
            // not see it).
            let before = store.generation();
            store
                .close()
                .unwrap_or_else(|e| panic!("kill {it}: close: {e}"));
            let s = Store::open(&dir).unwrap();
            assert_eq!(s.generation(), before + 1);
            model
                .check(&s)
                .unwrap_or_else(|e| panic!("kill {it}: after a close: {e}"));
            kept_opens += (s.rows_kept_at_open() > 0) as u64;
            kept_rows += s.rows_kept_at_open();
            // Closed again, so that the child takes the tiers back: one
            // more checkpoint with nothing new.
            s.close().unwrap();
            generation = before + 2;
        } else {
            drop(store);
        }
    }
    eprintln!(
        "crash{}: {iters} kills survived; {rolled_back} recoveries undid an epoch \
         ({restored} groups restored); {in_flight_won} in-flight checkpoints had committed; \
         {hot_reopens} reopens put {hot_rows} hot rows back; {from_index} reopens mapped \
         the row log from its index, {log_read} read it; final generation {generation}",
        if concurrent {
            " (checkpoints beside the ops)"
        } else {
            ""
        }
    );
    // The kills are in one boot, and each session keeps the index: a cold
    // reopen reads the log only where the kill fell between a commit and
    // its kept-through word, or the index missed an append.
    assert!(
        from_index > log_read || iters < 20,
        "{from_index} reopens mapped the log from its index, {log_read} read it: \
         the index is not under test"
    );
    if files {
        eprintln!(
            "crash (tiers in files): {kept_opens} opens took {kept_rows} kept rows back, \
             {after_kill} of them reopens after a kill ({after_kill_rows} rows)"
        );
        assert!(
            kept_opens > 0 || iters < 20,
            "no open took a kept tier back: kept tiers are not under test"
        );
        assert!(
            after_kill > 0 || iters < 20,
            "no reopen after a kill took rows back: slot stamps are not under test"
        );
    } else {
        assert!(
            hot_reopens > 0 || iters < 20,
            "no reopen put hot rows back: the warm restart is not under test"
        );
    }
    assert!(
        rolled_back > 0 && generation > 0,
        "the kills never landed between checkpoints or never after one: the test is not testing"
    );
}

/// The same op stream in one process, the store dropped (as a crash leaves
/// it, every write issued having completed) after a different number of
/// ops each time: every reopen holds exactly the last checkpoint.
/// Deterministic, so a failure replays. It found a checkpoint whose own
/// flush made the row log stale (a logged row's whole group written home)
/// without merging it, so that the reopen read the old logged copy.
#[test]
fn drops_between_checkpoints_reopen_at_the_last_one() {
    let iters: u64 = common::env_or("EMBTIER_CRASH_ITERS", 100) * 3;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    drop(Store::create(&dir, config()).unwrap());
    let mut acked = Model::new();
    let mut rolled_back = 0;
    for it in 0..iters {
        let seed = 5000 + it;
        let store = Store::open(&dir).unwrap();
        rolled_back += (store.recovery().rolled_back_epoch > 0) as u64;
        acked
            .check(&store)
            .unwrap_or_else(|e| panic!("drop {it} (seed {}): reopened: {e}", seed - 1));
        let mut cur = acked.clone();
        let stop = 5 + (seed * 7919) % 120;
        for op in ops(seed, EVERY).take(stop as usize) {
            match op {
                Op::Checkpoint => {
                    store.checkpoint().unwrap();
                    acked = cur.clone();
                }
                op => {
                    run(&store, &op).unwrap();
                    cur.apply(&op);
                }
            }
        }
    }
    // Most drops follow a checkpoint closely; a tenth must fall between.
    assert!(
        rolled_back >= iters / 10,
        "{rolled_back} of {iters} opens undid an epoch"
    );
}

/// The same op stream in one process over tiers in files, with every
/// third checkpoint a close and a reopen that takes the tiers back: each
/// reopen holds exactly the close's checkpoint, and the ops after it run
/// on the caches taken back.
#[test]
fn closes_keep_tiers_that_reopen_at_the_last_checkpoint() {
    let iters: u64 = common::env_or("EMBTIER_CRASH_ITERS", 100);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let mut cfg = config();
    cfg.tiers = tiers_in_files(tmp.path());
    drop(Store::create(&dir, cfg).unwrap());
    let mut cur = Model::new();
    let (mut kept_opens, mut n) = (0u64, 0u64);
    let mut store = Some(Store::open(&dir).unwrap());
    for it in 0..iters {
        let seed = 9000 + it;
        for op in ops(seed, EVERY).take(60) {
            let s = store.as_ref().unwrap();
            match op {
                Op::Checkpoint => {
                    n += 1;
                    if n % 3 == 0 {
                        store.take().unwrap().close().unwrap();
                        let s = Store::open(&dir).unwrap();
                        kept_opens += (s.rows_kept_at_open() > 0) as u64;
                        cur.check(&s)
                            .unwrap_or_else(|e| panic!("iteration {it}, close {n}: reopened: {e}"));
                        store = Some(s);
                    } else {
                        s.checkpoint().unwrap();
                    }
                }
                op => {
                    run(s, &op).unwrap();
                    cur.apply(&op);
                }
            }
        }
    }
    assert!(kept_opens > iters / 4, "{kept_opens} opens took kept tiers");
}
