//! A child forked while a store is open (a PyTorch DataLoader worker with
//! the fork start method, `os.fork`): its copy of the store refuses every
//! call with `Forked` and its drop does nothing, and the parent's store
//! goes on as if the child had never been. Its own test binary, so that
//! few threads run beside the fork.

mod common;

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use embtier::{Error, IoEngineKind, PolicyKind, Store, StoreConfig, TableConfig, TierConfig};

const ROWS: u64 = 20_000;
const DIM: usize = 16;

fn config(engine: IoEngineKind) -> StoreConfig {
    StoreConfig::builder()
        .table(TableConfig::new("t", ROWS, DIM as u32))
        .tiers(vec![TierConfig::dram(64 << 10, PolicyKind::Lru)])
        .io_engine(engine)
        .build()
}

fn value(id: u64, j: usize) -> f32 {
    (id * 7 + j as u64) as f32 * 0.125
}

fn check_rows(s: &Store, what: &str) {
    let ids: Vec<u64> = (0..ROWS).step_by(3).collect();
    let mut out = vec![0f32; ids.len() * DIM];
    s.lookup("t", &ids, &mut out).unwrap();
    for (i, &id) in ids.iter().enumerate() {
        for j in 0..DIM {
            assert_eq!(out[i * DIM + j], value(id, j), "{what}: row {id}");
        }
    }
}

/// Wait for `child` to exit, at most 60 s (a child stuck on the parent's
/// rings never would): its exit status, or None if it was killed.
fn wait_exit(child: libc::pid_t) -> Option<i32> {
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waitpid on our own child's pid, into a local.
        let r = unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) };
        if r == child {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if start.elapsed() > Duration::from_secs(60) {
            // SAFETY: kill and reap our own child.
            unsafe {
                libc::kill(child, libc::SIGKILL);
                libc::waitpid(child, std::ptr::null_mut(), 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// In a forked child: run `body` and leave with status 0 where it returns
/// true, 1 where false, 2 where it panicked, without the parent's
/// destructors.
fn exit_child(body: impl FnOnce() -> bool) -> ! {
    let status = match std::panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(_) => 2,
    };
    // SAFETY: leaves the child without running the parent's destructors
    // or flushing its buffers twice.
    unsafe { libc::_exit(status) }
}

#[test]
fn a_forked_child_cannot_use_the_store_and_the_parent_goes_on() {
    for engine in common::engines() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("s");
        let store = Store::create(&d, config(engine)).unwrap();
        let ids: Vec<u64> = (0..ROWS).collect();
        let vals: Vec<f32> = (0..ROWS)
            .flat_map(|id| (0..DIM).map(move |j| value(id, j)))
            .collect();
        store.update("t", &ids, &vals).unwrap();
        store.checkpoint().unwrap();
        let parent = std::process::id();
        // SAFETY: fork in a test process; the child uses the store only
        // through calls that must refuse at their first check, allocates
        // through glibc's malloc (made safe across fork by glibc), writes
        // nothing to stdout, and leaves with _exit.
        let child = unsafe { libc::fork() };
        if child == 0 {
            exit_child(move || {
                let forked = |r: embtier::Result<()>| matches!(r, Err(Error::Forked { pid }) if pid == parent);
                let mut out = vec![0f32; 256 * DIM];
                let mut ok = forked(store.lookup("t", &ids[..256], &mut out));
                ok &= forked(store.update("t", &ids[..4], &vals[..4 * DIM]));
                ok &= forked(store.checkpoint().map(|_| ()));
                ok &= forked(store.flush());
                // A close there only lets go of the copy.
                ok &= store.close().is_ok();
                ok
            });
        }
        assert!(child > 0, "fork failed");
        match wait_exit(child) {
            Some(0) => {}
            Some(1) => panic!("{engine:?}: a call in the child was not refused with Forked"),
            Some(2) => panic!("{engine:?}: the child panicked"),
            other => panic!("{engine:?}: the child ended as {other:?}"),
        }
        // The parent's store: its rows, a checkpoint, a reopen.
        check_rows(&store, "after the child");
        store.update("t", &ids[..8], &vals[..8 * DIM]).unwrap();
        store.checkpoint().unwrap();
        store.close().unwrap();
        let store = Store::open(&d).unwrap();
        check_rows(&store, "reopened");
    }
}

/// A child forked while the parent held a store open can open it itself
/// once the parent has closed it: the parent's entries in the registry of
/// open stores are not the child's. Before, the child was refused for
/// ever, with `Locked` naming its own pid.
#[test]
fn a_forked_child_opens_the_store_once_the_parent_closed_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("s");
    let store = Store::create(&d, config(IoEngineKind::Psync)).unwrap();
    // SAFETY: as in the test above; the child retries an open for up to
    // 20 s and leaves with _exit.
    let child = unsafe { libc::fork() };
    if child == 0 {
        let start = Instant::now();
        let status = loop {
            match Store::open(&d) {
                Ok(s) => {
                    drop(s);
                    break 0;
                }
                Err(Error::Locked { pid, .. }) if pid == std::process::id() => break 1,
                Err(Error::Locked { .. }) if start.elapsed() < Duration::from_secs(20) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(_) => break 2,
            }
        };
        // SAFETY: leaves the child without the parent's destructors.
        unsafe { libc::_exit(status) };
    }
    assert!(child > 0, "fork failed");
    std::thread::sleep(Duration::from_millis(100));
    drop(store);
    match wait_exit(child) {
        Some(0) => {}
        Some(1) => panic!("the child was refused as if it held the store"),
        other => panic!("the child ended as {other:?}"),
    }
    let pid = std::fs::read_to_string(d.join("LOCK")).unwrap();
    assert!(
        pid.bytes().all(|b| b.is_ascii_digit()),
        "LOCK holds {pid:?}"
    );
}

/// A checkpoint begun on the thread that then forks: the child's copy
/// refuses to finish it (it would write and commit the parent's files),
/// and dropping it there releases nothing of the parent's; the parent
/// finishes it.
#[test]
fn a_checkpoint_begun_before_a_fork_is_the_parents() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("s");
    let store = Store::create(&d, config(IoEngineKind::Psync)).unwrap();
    let ids: Vec<u64> = (0..ROWS).collect();
    let vals: Vec<f32> = (0..ROWS)
        .flat_map(|id| (0..DIM).map(move |j| value(id, j)))
        .collect();
    store.update("t", &ids, &vals).unwrap();
    let pending = store.begin_checkpoint().unwrap();
    let parent = std::process::id();
    // SAFETY: as in the first test.
    let child = unsafe { libc::fork() };
    if child == 0 {
        exit_child(|| matches!(pending.finish(), Err(Error::Forked { pid }) if pid == parent));
    }
    assert!(child > 0, "fork failed");
    assert_eq!(wait_exit(child), Some(0), "the child's finish");
    pending.finish().unwrap();
    store.close().unwrap();
    let store = Store::open(&d).unwrap();
    check_rows(&store, "the parent's checkpoint");
}
