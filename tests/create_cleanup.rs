//! A failed `Store::create` leaves nothing behind: every way create can be
//! made to fail gets its typed error, after which the store directory does
//! not exist (or is as empty as it was, if it existed), no PMem or data file
//! made outside it is left, and a retry with a corrected config succeeds.
//!
//! Cases that need a small or read-only file system mount one (tmpfs, ext4
//! on a loop device, a read-only bind mount); where mounting is refused (not
//! root) they print `skipping: ...` and the other cases still run.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::mount::{fill, Mount};
use embtier::{Error, Init, IoEngineKind, PolicyKind, Store, StoreConfig, TableConfig, TierConfig};

fn table() -> TableConfig {
    TableConfig::new("t", 1000, 4).init(Init::Zeros)
}

fn good() -> StoreConfig {
    StoreConfig::builder()
        .table(table())
        .dram_capacity(16 * 1024)
        .io_engine(IoEngineKind::Psync)
        .build()
}

fn with_pmem(path: Option<PathBuf>, bytes: u64) -> StoreConfig {
    let mut c = good();
    c.tiers.push(TierConfig::pmem(path, bytes, PolicyKind::Lru));
    c
}

fn with_ssd(path: PathBuf) -> StoreConfig {
    let mut c = good();
    c.ssd.path = Some(path);
    c
}

fn with_tables(ts: Vec<TableConfig>) -> StoreConfig {
    let mut c = good();
    c.tables = ts;
    c
}

/// Entries of `dir`, sorted; `None` if it does not exist.
fn listing(dir: &Path) -> Option<Vec<String>> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .ok()?
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    Some(v)
}

/// `create(dir, bad)` fails with an error `check` accepts and leaves
/// `dir` as it was (absent, or present and empty) and none of `gone`; then
/// `create(dir, fixed)` succeeds. The store made by the retry is removed
/// (with `dir`, unless `dir` existed before).
fn fails_clean(
    what: &str,
    dir: &Path,
    bad: StoreConfig,
    gone: &[&Path],
    check: impl Fn(&Error) -> bool,
    fixed: StoreConfig,
) {
    let before = listing(dir);
    let e = match Store::create(dir, bad) {
        Ok(_) => panic!("{what}: create succeeded"),
        Err(e) => e,
    };
    assert!(check(&e), "{what}: unexpected error {e:?}");
    assert_eq!(listing(dir), before, "{what}: {dir:?} changed ({e})");
    for p in gone {
        assert!(
            fs::symlink_metadata(p).is_err(),
            "{what}: {p:?} left behind ({e})"
        );
    }
    let store = Store::create(dir, fixed.clone())
        .unwrap_or_else(|e2| panic!("{what}: retry after {e} failed: {e2}"));
    drop(store);
    for p in [
        &fixed.ssd.path,
        &fixed.tiers.get(1).and_then(|p| p.path.clone()),
    ]
    .into_iter()
    .flatten()
    {
        let _ = fs::remove_file(p);
    }
    if before.is_some() {
        for e in fs::read_dir(dir).unwrap() {
            fs::remove_file(e.unwrap().path()).unwrap();
        }
    } else {
        fs::remove_dir_all(dir).unwrap();
    }
}

fn config_err(e: &Error) -> bool {
    matches!(e, Error::Config { .. })
}

fn io_err(op: &'static str, errno: i32) -> impl Fn(&Error) -> bool {
    move |e| matches!(e, Error::Io { op: o, source, .. } if *o == op && source.raw_os_error() == Some(errno))
}

#[test]
fn invalid_configs_create_nothing() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("s");
    let cases = [
        ("bad name", with_tables(vec![TableConfig::new("", 10, 4)])),
        ("zero dim", with_tables(vec![TableConfig::new("t", 10, 0)])),
        ("zero rows", with_tables(vec![TableConfig::new("t", 0, 4)])),
        ("duplicate", with_tables(vec![table(), table()])),
        ("no tables", with_tables(vec![])),
    ];
    for (what, bad) in cases {
        fails_clean(what, &dir, bad, &[], config_err, good());
    }
    // Past the largest file size: found after the directory is made.
    let huge = with_tables(vec![TableConfig::new("t", 1 << 62, 1024)]);
    fails_clean("2^63 bytes", &dir, huge, &[], config_err, good());
}

#[test]
fn pmem_path_in_a_missing_directory() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("a/b/s"); // its parents are made by create too
    let pmem = d.path().join("missing/pmem.emb");
    let bad = with_pmem(Some(pmem), 64 << 10);
    fails_clean(
        "pmem in missing dir",
        &dir,
        bad,
        &[&d.path().join("a")],
        io_err("open", libc::ENOENT),
        with_pmem(Some(d.path().join("pmem.emb")), 64 << 10),
    );
    // The error names the tier file the config gave, not its lock.
    let pmem = d.path().join("missing/pmem.emb");
    match Store::create(d.path().join("c"), with_pmem(Some(pmem.clone()), 64 << 10)) {
        Err(Error::Io { path, .. }) => assert_eq!(path, pmem),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("created"),
    }
    // The same into a directory the user made and left empty: it stays.
    let mine = d.path().join("mine");
    fs::create_dir(&mine).unwrap();
    let bad = with_pmem(Some(d.path().join("missing/pmem.emb")), 64 << 10);
    fails_clean(
        "pmem in missing dir, store dir pre-existing",
        &mine,
        bad,
        &[],
        io_err("open", libc::ENOENT),
        good(),
    );
}

#[test]
fn data_file_outside_the_store_is_removed() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("s");
    let data = d.path().join("outside.emb");
    let mut bad = with_ssd(data.clone());
    bad.tiers = with_pmem(Some(d.path().join("missing/pmem.emb")), 64 << 10).tiers;
    fails_clean(
        "pmem fails after an outside data file",
        &dir,
        bad,
        &[&data],
        io_err("open", libc::ENOENT),
        with_ssd(data.clone()),
    );
    // A data file in a missing directory.
    fails_clean(
        "data file in missing dir",
        &dir,
        with_ssd(d.path().join("missing/data.emb")),
        &[],
        io_err("create", libc::ENOENT),
        good(),
    );
}

#[test]
fn a_file_in_the_way() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("f");
    fs::write(&file, b"mine").unwrap();
    // The store directory's parent is a file (so no retry there: the fix
    // is another path).
    let Err(e) = Store::create(file.join("s"), good()) else {
        panic!("created");
    };
    assert!(io_err("mkdir", libc::ENOTDIR)(&e), "{e:?}");
    assert_eq!(fs::read(&file).unwrap(), b"mine");
    assert_eq!(listing(d.path()).unwrap(), ["f"]);
    // The store directory is a file.
    match Store::create(&file, good()) {
        Err(Error::Io {
            op: "read_dir",
            source,
            ..
        }) if source.raw_os_error() == Some(libc::ENOTDIR) => {}
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert_eq!(fs::read(&file).unwrap(), b"mine");
    assert_eq!(listing(d.path()).unwrap(), ["f"]);
    drop(Store::create(d.path().join("s"), good()).unwrap());
}

#[test]
fn an_existing_store_is_never_touched() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("s");
    let s = Store::create(&dir, good()).unwrap();
    s.update("t", &[3], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    s.flush().unwrap();
    drop(s);
    let before = listing(&dir);
    // Even with a config that would fail later (PMem in a missing dir).
    let bad = with_pmem(Some(d.path().join("missing/pmem.emb")), 64 << 10);
    assert!(matches!(
        Store::create(&dir, bad),
        Err(Error::AlreadyExists { .. })
    ));
    assert_eq!(listing(&dir), before);
    let s = Store::open(&dir).unwrap();
    let mut out = [0f32; 4];
    s.lookup("t", &[3], &mut out).unwrap();
    assert_eq!(out, [1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn a_data_file_too_large_for_the_file_system() {
    // ext4's largest file is 16 TiB (4 KiB blocks); this table is 8 PiB.
    let Some(m) = skip_unless(Mount::ext4(8 << 20), "ext4") else {
        return;
    };
    let dir = m.dir.join("s");
    let huge = with_tables(vec![TableConfig::new("t", 1 << 40, 1024)]);
    fails_clean(
        "data file past the largest file",
        &dir,
        huge,
        &[],
        io_err("set_len", libc::EFBIG),
        good(),
    );
}

fn skip_unless(m: Result<Mount, String>, what: &str) -> Option<Mount> {
    match m {
        Ok(m) => Some(m),
        Err(why) => {
            eprintln!("skipping: cannot mount {what} (needs root): {why}");
            None
        }
    }
}

#[test]
fn read_only_directories() {
    let d = tempfile::tempdir().unwrap();
    let ro_src = d.path().join("ro");
    fs::create_dir(&ro_src).unwrap();
    let Some(ro) = skip_unless(Mount::read_only_bind(&ro_src), "a read-only bind") else {
        return;
    };
    let erofs = |op| io_err(op, libc::EROFS);
    let dir = d.path().join("s");
    fails_clean(
        "pmem not writable",
        &dir,
        with_pmem(Some(ro.dir.join("pmem.emb")), 64 << 10),
        &[],
        erofs("open"),
        with_pmem(Some(d.path().join("pmem.emb")), 64 << 10),
    );
    fails_clean(
        "data file not writable",
        &dir,
        with_ssd(ro.dir.join("data.emb")),
        &[],
        |e: &Error| erofs("open")(e) && e.to_string().contains("/data.emb:"),
        good(),
    );
    // The store directory on the read-only file system (the fix is
    // another path).
    let Err(e) = Store::create(ro.dir.join("s"), good()) else {
        panic!("created");
    };
    assert!(erofs("mkdir")(&e), "{e:?}");
    assert_eq!(listing(&ro_src).unwrap(), Vec::<String>::new());
    assert_eq!(listing(&ro.dir).unwrap(), Vec::<String>::new());
}

/// Whether `e` is the file system being full.
fn is_enospc(e: &Error) -> bool {
    match e {
        Error::Io { source, .. } | Error::MapReserve { source, .. } => {
            source.raw_os_error() == Some(libc::ENOSPC)
        }
        Error::DiskFull { .. } => true,
        _ => false,
    }
}

/// Fill the tmpfs at `m` with `filler`, then free `pages` pages of it.
fn fill_but(m: &Mount, pages: u64) -> PathBuf {
    let filler = fill(&m.dir, "filler");
    let len = fs::metadata(&filler).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&filler)
        .unwrap()
        .set_len(len.saturating_sub(pages * 4096) / 4096 * 4096)
        .unwrap();
    filler
}

#[test]
fn a_full_file_system() {
    let Some(m) = skip_unless(Mount::tmpfs(4 << 20), "tmpfs") else {
        return;
    };
    let dir = m.dir.join("s");
    // Pages left: 0 (the LOCK file's pid fails), 1 (store.toml fails),
    // 2 (the metadata file, 3 pages, fails), 6 (PMem of 64 KiB fails).
    for (pages, what, file) in [
        (0, "lock", "LOCK"),
        (1, "config", "store.toml"),
        (2, "meta", "embtier.meta.tmp"),
        (6, "pmem", "pmem.emb"),
    ] {
        let filler = fill_but(&m, pages);
        let bad = with_pmem(None, 64 << 10);
        let before = listing(&dir);
        let e = Store::create(&dir, bad)
            .err()
            .unwrap_or_else(|| panic!("{what}: create succeeded with {pages} pages free"));
        let (path, enospc) = match &e {
            Error::Io { path, source, .. } => (path, source.raw_os_error() == Some(libc::ENOSPC)),
            Error::MapReserve { path, source, .. } => {
                (path, source.raw_os_error() == Some(libc::ENOSPC))
            }
            _ => panic!("{what}: {e:?}"),
        };
        assert!(enospc, "{what}: {e:?}");
        assert_eq!(path, &dir.join(file), "{what}: {e}");
        eprintln!("{pages} pages free: {e}");
        assert_eq!(listing(&dir), before, "{what}: {e}");
        // Freeing the space is the fix. A child that another test forked
        // (for `mount`) holds a copy of every descriptor open at the fork
        // until it execs, so under load the filler's pages can outlive its
        // removal by a moment: a full disk is retried briefly, nothing else.
        fs::remove_file(&filler).unwrap();
        let mut tries = 0;
        let s = loop {
            match Store::create(&dir, with_pmem(None, 64 << 10)) {
                Ok(s) => break s,
                Err(e) if tries < 20 && is_enospc(&e) => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(e) => panic!("{what}: create after freeing the space: {e}"),
            }
        };
        drop(s);
        fs::remove_dir_all(&dir).unwrap();
    }
    // PMem outside the store directory, beyond the free space.
    let d = tempfile::tempdir().unwrap();
    let pmem = m.dir.join("pmem.emb");
    fails_clean(
        "pmem beyond free space",
        &d.path().join("s"),
        with_pmem(Some(pmem.clone()), 8 << 20),
        &[&pmem],
        |e| matches!(e, Error::MapReserve { source, .. } if source.raw_os_error() == Some(libc::ENOSPC)),
        with_pmem(Some(pmem.clone()), 1 << 20),
    );
}
