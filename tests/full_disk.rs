//! A full file system is an error, never a signal.
//!
//! The PMem tier is a memory mapping of `pmem.emb`; a store into a page of
//! a sparse file on a full file system raises SIGBUS. These tests put the
//! store's files on small file systems (a tmpfs and an ext4 image on a loop
//! device, mounted for the test) and fill them:
//!
//! - (a) a PMem file larger than the free space: `create` and `open` fail
//!   with a typed error naming the file, the size and ENOSPC;
//! - (b) the store directory on a small ext4 (PMem elsewhere), filled during
//!   updates, checkpoints and row-log merges: the calls fail with ENOSPC,
//!   and after the space is freed a reopen holds the last checkpoint exactly;
//! - (c) the PMem file fits at create, then another file fills the file
//!   system, then rows are inserted into PMem: no SIGBUS, because the
//!   mapping's blocks were reserved at create.
//!
//! Each scenario runs in a child process (this binary re-executed with
//! `--ignored --exact`), so that a SIGBUS fails the test instead of killing
//! the harness. Mounting needs root: where a mount is refused the test
//! prints `skipping: ...` and returns.

mod common;

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::mount::{fill, Mount};
use common::Rng;
use embtier::{ByteSize, Error, Init, IoEngineKind, PolicyKind, Store, StoreConfig, TableConfig};

const DIM: usize = 16;
/// Mounts a small file system of the given size.
type Mounter = fn(u64) -> Result<Mount, String>;

const ENV_DIR: &str = "EMBTIER_FULL_DISK_DIR";

/// Whether `e` is, or was caused by, ENOSPC.
fn enospc(e: &Error) -> bool {
    if let Error::DiskFull { .. } = e {
        return true;
    }
    if let Error::Poisoned { reason } = e {
        return reason.contains("No space left") || reason.contains("no space left");
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if io.raw_os_error() == Some(libc::ENOSPC) {
                return true;
            }
        }
        src = s.source();
    }
    false
}

/// Mount a file system with `mount`, or print why not and return `None`.
fn mount_or_skip(what: &str, mount: impl FnOnce() -> Result<Mount, String>) -> Option<Mount> {
    match mount() {
        Ok(m) => Some(m),
        Err(why) => {
            eprintln!("skipping: cannot mount {what} (needs root and a loop device): {why}");
            None
        }
    }
}

/// Run the ignored test `child` in a child process with `EMBTIER_FULL_DISK_DIR`
/// set to `dir`; fail if it dies by a signal or fails.
fn in_child(child: &str, dir: &Path) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            child,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_DIR, dir)
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(sig) = out.status.signal() {
        panic!(
            "{child} was killed by signal {sig} (SIGBUS is {}):\n{log}",
            libc::SIGBUS
        );
    }
    assert!(
        out.status.success(),
        "{child} failed: {}\n{log}",
        out.status
    );
    assert!(log.contains("1 passed"), "{child} did not run:\n{log}");
    eprint!("{log}");
}

fn child_dir() -> PathBuf {
    std::env::var_os(ENV_DIR).expect(ENV_DIR).into()
}

fn config(rows: u64, pmem: Option<PathBuf>, pmem_bytes: u64) -> StoreConfig {
    let mut c = StoreConfig::builder()
        .table(TableConfig::new("t", rows, DIM as u32).init(Init::Zeros))
        .dram_capacity(16 * 1024)
        .pmem(pmem, pmem_bytes, PolicyKind::Lru)
        .io_engine(IoEngineKind::Psync)
        .build();
    c.ssd.row_log = Some(ByteSize(64 << 10));
    c
}

/// Look up every row of `t` in batches of 256: with DRAM small, clean rows
/// are evicted into PMem, so this writes all of the PMem mapping.
fn sweep(store: &Store, rows: u64) -> Vec<f32> {
    let mut all = vec![0f32; rows as usize * DIM];
    for (c, out) in all.chunks_mut(256 * DIM).enumerate() {
        let ids: Vec<u64> = (0..out.len() as u64 / DIM as u64)
            .map(|k| c as u64 * 256 + k)
            .collect();
        store.lookup("t", &ids, out).unwrap();
    }
    all
}

fn assert_reserve_enospc(r: embtier::Result<Store>, pmem: &Path, bytes: u64, what: &str) {
    match r {
        Ok(store) => {
            // The regression: the mapping is sparse, and writing it raises
            // SIGBUS here (which the parent reports) or corrupts nothing
            // only by luck.
            sweep(&store, 20_000);
            panic!("{what}: succeeded with a {bytes}-byte PMem file on a full file system");
        }
        Err(e) => {
            match &e {
                Error::MapReserve { path, len, source } => {
                    assert_eq!((path.as_path(), *len), (pmem, bytes));
                    assert_eq!(source.raw_os_error(), Some(libc::ENOSPC), "{what}");
                }
                other => panic!("{what}: {other:?} is not MapReserve"),
            }
            let msg = e.to_string();
            assert!(msg.contains(&pmem.display().to_string()), "{msg}");
            assert!(msg.contains(&bytes.to_string()), "{msg}");
            assert!(msg.contains("full"), "{msg}");
        }
    }
}

#[test]
#[ignore = "child of pmem_larger_than_the_free_space_fails_at_create_and_open"]
fn child_pmem_too_large() {
    let fs = child_dir();
    let tmp = tempfile::tempdir().unwrap();
    let pmem = fs.join("pmem.emb");
    let big = 4 << 20; // the file system has 2 MiB
    let r = Store::create(
        tmp.path().join("s"),
        config(20_000, Some(pmem.clone()), big),
    );
    assert_reserve_enospc(r, &pmem, big, "create");
    // The failed create left nothing on the small file system.
    assert!(!pmem.exists(), "create left {pmem:?} behind");
    // A PMem file that fits: a retry works; a larger one at open fails.
    let small = 256 << 10;
    let store = Store::create(
        tmp.path().join("s"),
        config(20_000, Some(pmem.clone()), small),
    )
    .unwrap();
    sweep(&store, 20_000);
    drop(store);
    let r = Store::open_with(
        tmp.path().join("s"),
        config(20_000, Some(pmem.clone()), big),
        Default::default(),
    );
    assert_reserve_enospc(r, &pmem, big, "open");
    // The failed open gave the space back: the small one opens again.
    let store = Store::open_with(
        tmp.path().join("s"),
        config(20_000, Some(pmem.clone()), small),
        Default::default(),
    )
    .unwrap();
    assert_eq!(sweep(&store, 20_000), vec![0.0; 20_000 * DIM]);
}

#[test]
fn pmem_larger_than_the_free_space_fails_at_create_and_open() {
    let mounts: [(&str, Mounter); 2] = [("tmpfs", Mount::tmpfs), ("ext4", Mount::ext4)];
    for (what, mount) in mounts {
        let Some(m) = mount_or_skip(what, || {
            mount(if what == "ext4" { 4 << 20 } else { 2 << 20 })
        }) else {
            return;
        };
        eprintln!("{what}: {} bytes free", m.free_bytes());
        in_child("child_pmem_too_large", &m.dir);
    }
}

#[test]
#[ignore = "child of pmem_reserved_at_create_survives_a_full_file_system"]
fn child_pmem_then_full() {
    let fs = child_dir();
    let rows = 20_000;
    // 1 MiB of PMem, in the store directory on the small file system.
    let store = Store::create(fs.join("s"), config(rows, None, 1 << 20)).unwrap();
    let filler = fill(&fs, "filler");
    assert!(
        common::mount::free_bytes(&fs) < 64 << 10,
        "not full: {} bytes free",
        common::mount::free_bytes(&fs)
    );
    // Misses read holes, DRAM evicts into PMem: every PMem page is written.
    assert_eq!(sweep(&store, rows), vec![0.0; rows as usize * DIM]);
    assert_eq!(sweep(&store, rows), vec![0.0; rows as usize * DIM]);
    let s = store.stats();
    let pmem = s.tables[0].pmem();
    assert!(
        pmem.capacity_rows >= 15_000 && pmem.resident_rows == pmem.capacity_rows,
        "PMem not filled: {pmem:?}"
    );
    drop(store);
    std::fs::remove_file(filler).unwrap();
}

#[test]
fn pmem_reserved_at_create_survives_a_full_file_system() {
    let mounts: [(&str, Mounter); 2] = [("tmpfs", Mount::tmpfs), ("ext4", Mount::ext4)];
    for (what, mount) in mounts {
        let Some(m) = mount_or_skip(what, || mount(8 << 20)) else {
            return;
        };
        in_child("child_pmem_then_full", &m.dir);
    }
}

/// Updates of `n` rows from `rng`, applied to the store; each update that
/// succeeds is applied to `model` too. Returns the errors.
fn updates(
    store: &Store,
    model: &mut HashMap<u64, Vec<f32>>,
    rng: &mut Rng,
    rows: u64,
    n: usize,
) -> Vec<Error> {
    let mut errs = Vec::new();
    for _ in 0..n / 32 {
        let ids: Vec<u64> = (0..32).map(|_| rng.below(rows)).collect();
        let vals: Vec<f32> = (0..32 * DIM).map(|_| rng.small_f32()).collect();
        match store.update("t", &ids, &vals) {
            Ok(()) => {
                for (k, &id) in ids.iter().enumerate() {
                    model.insert(id, vals[k * DIM..(k + 1) * DIM].to_vec());
                }
            }
            Err(e) => errs.push(e),
        }
    }
    errs
}

fn assert_equals_model(store: &Store, rows: u64, model: &HashMap<u64, Vec<f32>>) {
    let all = sweep(store, rows);
    for id in 0..rows {
        let got = &all[id as usize * DIM..(id as usize + 1) * DIM];
        let want = model.get(&id).cloned().unwrap_or(vec![0.0; DIM]);
        assert_eq!(got, &want[..], "row {id}");
    }
}

#[test]
#[ignore = "child of a_full_store_directory_fails_calls_and_recovers_the_last_checkpoint"]
fn child_store_dir_full() {
    let fs = child_dir();
    let pmem_dir = tempfile::tempdir().unwrap();
    let dir = fs.join("s");
    let rows = 40_000; // 2.6 MiB of data blocks on a 6 MiB file system
    let cfg = config(rows, Some(pmem_dir.path().join("pmem.emb")), 32 << 10);
    let store = Store::create(&dir, cfg.clone()).unwrap();
    let mut rng = Rng(7);
    let mut model = HashMap::new();
    assert!(updates(&store, &mut model, &mut rng, 2_000, 2_000).is_empty());
    store.checkpoint().unwrap();
    let checkpointed = model.clone();

    let filler = fill(&fs, "filler");
    // Updates over the whole table: write-backs reach blocks never written.
    let mut errs = updates(&store, &mut model, &mut rng, rows, 6_000);
    let failed_updates = errs.len();
    let ckpt = store.checkpoint();
    let merge = store.merge_row_log();
    let flush = store.flush();
    eprintln!(
        "full: {failed_updates} updates failed; checkpoint {:?}; merge {:?}; flush {:?}",
        ckpt.as_ref().err().map(|e| e.to_string()),
        merge.as_ref().err().map(|e| e.to_string()),
        flush.as_ref().err().map(|e| e.to_string()),
    );
    assert!(ckpt.is_err(), "a checkpoint succeeded on a full disk");
    assert!(merge.is_err(), "a merge succeeded on a full disk");
    assert!(flush.is_err(), "a flush succeeded on a full disk");
    errs.extend([ckpt.err(), merge.err(), flush.err()].into_iter().flatten());
    for e in &errs {
        assert!(enospc(e), "not ENOSPC: {e:?}");
    }
    // The store still answers lookups (of what it holds in memory or on disk).
    let mut out = vec![0f32; DIM];
    store.lookup("t", &[0], &mut out).unwrap();
    drop(store);

    // Free the space; a reopen is exactly at the last checkpoint.
    std::fs::remove_file(&filler).unwrap();
    let store = Store::open_with(&dir, cfg.clone(), Default::default()).unwrap();
    assert_equals_model(&store, rows, &checkpointed);

    // And the reopened store takes updates and checkpoints again.
    let mut model = checkpointed;
    assert!(updates(&store, &mut model, &mut rng, 2_000, 1_000).is_empty());
    store.merge_row_log().unwrap();
    drop(store);
    let store = Store::open_with(&dir, cfg, Default::default()).unwrap();
    assert_equals_model(&store, rows, &model);
}

#[test]
fn a_full_store_directory_fails_calls_and_recovers_the_last_checkpoint() {
    let Some(m) = mount_or_skip("ext4", || Mount::ext4(8 << 20)) else {
        return;
    };
    in_child("child_store_dir_full", &m.dir);
}
