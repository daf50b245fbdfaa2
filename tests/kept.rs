//! Kept tiers: `Store::close` leaves a file-backed cache tier's rows in
//! its file with an index beside it, and the next open of that checkpoint
//! takes them where they lie, reading nothing. A store dropped without a
//! close (what a crash leaves) takes back, by the tiers' slot stamps, the
//! rows whose bytes its last checkpoint holds. Anything else (other tier
//! settings, a damaged index or stamps, stamps of another boot, a cold
//! open) starts the tier empty and serves the committed values.

use std::path::{Path, PathBuf};

use embtier::{
    Init, IoEngineKind, OpenOptionsExt, PolicyKind, Store, StoreConfig, TableConfig, TierConfig,
};

const DIM: u32 = 16;
const ROWS: u64 = 400_000;

fn rb() -> u64 {
    TableConfig::new("t", 1, DIM).row_bytes()
}

/// A DRAM tier of `dram` rows in a file at `shm`, and a PMem tier of
/// 4000 rows in the store directory. Without hot rows, so that a tier not
/// taken back shows as reads from the data file.
fn config(shm: &Path, dram: u64) -> StoreConfig {
    config_split(shm, dram, None)
}

/// [`config`] with table `t` given `t_dram` rows of the DRAM tier.
fn config_split(shm: &Path, dram: u64, t_dram: Option<u64>) -> StoreConfig {
    let mut d = TierConfig::dram(dram * rb(), PolicyKind::Lru);
    d.path = Some(shm.into());
    let mut t = TableConfig::new("t", ROWS, DIM).init(Init::Uniform { scale: 0.5 });
    if let Some(r) = t_dram {
        t = t.dram_bytes(r * rb());
    }
    StoreConfig::builder()
        .table(t)
        .table(TableConfig::new("u", 50_000, 8).init(Init::Uniform { scale: 0.5 }))
        .tiers(vec![
            d,
            TierConfig::pmem(None, 4000 * rb(), PolicyKind::Lru),
        ])
        .dram_shards(4)
        .io_engine(IoEngineKind::Psync)
        .warm_rows(false)
        .build()
}

fn with(p: &Path, ext: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(ext);
    s.into()
}

/// Ids spread over the table, each in a group of its own.
fn spread(n: u64) -> Vec<u64> {
    (0..n).map(|i| i * 97).collect()
}

fn look(s: &Store, ids: &[u64]) -> Vec<f32> {
    let mut out = vec![0f32; ids.len() * DIM as usize];
    s.lookup("t", ids, &mut out).unwrap();
    out
}

struct Closed {
    _dir: tempfile::TempDir,
    path: PathBuf,
    shm: PathBuf,
    /// Every id touched, and its value at the close.
    ids: Vec<u64>,
    values: Vec<f32>,
    /// Rows each tier held at the close.
    resident: [u64; 2],
}

/// A store trained, looked up so that both tiers hold rows (some of them
/// written), and closed.
fn closed() -> Closed {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let shm = dir.path().join("dram.shm");
    let s = Store::create(&path, config(&shm, 1000)).unwrap();
    let ids = spread(3000);
    let grads: Vec<f32> = (0..ids.len() * DIM as usize)
        .map(|i| (i % 7) as f32 * 0.125 - 0.375)
        .collect();
    s.apply_sgd("t", &ids[..1500], &grads[..1500 * DIM as usize], 1.0)
        .unwrap();
    s.checkpoint().unwrap();
    s.apply_sgd("t", &ids[1000..], &grads[1000 * DIM as usize..], 0.5)
        .unwrap();
    let values = look(&s, &ids);
    let st = s.stats().table("t").unwrap().clone();
    let resident = [st.tiers[0].resident_rows, st.tiers[1].resident_rows];
    assert!(resident[0] > 0 && resident[1] > 0, "{resident:?}");
    s.close().unwrap();
    Closed {
        _dir: dir,
        path,
        shm,
        ids,
        values,
        resident,
    }
}

fn kept_files(c: &Closed) -> [bool; 4] {
    let pmem = c.path.join(embtier::PMEM_FILE);
    [
        with(&c.shm, ".kept").exists(),
        with(&c.shm, ".keep").exists(),
        with(&pmem, ".kept").exists(),
        with(&pmem, ".keep").exists(),
    ]
}

/// The rows come back to their tiers from their files, with their
/// values, and nothing is read: every lookup of them hits.
#[test]
fn a_closed_store_takes_its_file_tiers_back() {
    let c = closed();
    assert_eq!(kept_files(&c), [true; 4], "both tiers kept");
    assert!(!c.shm.exists(), "the DRAM tier's file is renamed");
    // An index a crash left half written beside them goes at the open.
    let half = with(&with(&c.shm, ".keep"), ".tmp");
    std::fs::write(&half, b"EMBKEPT1 cut short").unwrap();
    let s = Store::open(&c.path).unwrap();
    assert_eq!(kept_files(&c), [false; 4], "taken");
    assert!(!half.exists(), "a half-written index left behind");
    assert!(c.shm.exists());
    let warmed = s.wait_warm().unwrap();
    let st = s.stats().table("t").unwrap().clone();
    assert_eq!(
        [st.tiers[0].resident_rows, st.tiers[1].resident_rows],
        c.resident,
        "each tier holds what it held"
    );
    assert_eq!(warmed, c.resident[0] + c.resident[1]);
    let out = look(&s, &c.ids);
    assert_eq!(out, c.values);
    let st = s.stats().table("t").unwrap().clone();
    assert_eq!(st.ssd.rows_read, 0, "nothing read: {st:?}");
    assert_eq!(st.tiers[0].hits + st.tiers[1].hits, c.ids.len() as u64);
    // Rows never cached still read right, and the store trains on.
    let other: Vec<u64> = (0..200).map(|i| i * 1999 + 5).collect();
    let before = look(&s, &other);
    s.apply_sgd("t", &other, &vec![1.0; before.len()], 0.5)
        .unwrap();
    let after = look(&s, &other);
    for (a, b) in after.iter().zip(&before) {
        assert_eq!(*a, b - 0.5);
    }
}

/// A store opened from kept tiers, every cached row then written, and
/// dropped without a close: the next open takes none of the rows back
/// (their slot stamps name a generation after the checkpoint) and serves
/// the values the close committed, not the bytes the tiers' files held
/// when dropped.
#[test]
fn a_store_dropped_after_writing_its_kept_rows_takes_none_back() {
    let c = closed();
    let s = Store::open(&c.path).unwrap();
    s.apply_sgd("t", &c.ids, &vec![2.0; c.values.len()], 1.0)
        .unwrap();
    drop(s);
    assert_eq!(kept_files(&c), [false; 4]);
    let s = Store::open(&c.path).unwrap();
    assert_eq!(s.rows_kept_at_open(), 0);
    s.wait_warm().unwrap();
    assert_eq!(look(&s, &c.ids), c.values);
}

/// An open whose tier settings differ, or whose index is damaged, or a
/// cold open, takes nothing, removes what the close left, and serves the
/// committed values.
#[test]
fn kept_tiers_that_do_not_match_start_empty() {
    type Open = fn(&Closed) -> Store;
    let cases: [(&str, Open); 4] = [
        ("another DRAM capacity", |c| {
            Store::open_with(&c.path, config(&c.shm, 500), OpenOptionsExt::default()).unwrap()
        }),
        ("another split of the DRAM tier", |c| {
            let cfg = config_split(&c.shm, 1000, Some(600));
            Store::open_with(&c.path, cfg, OpenOptionsExt::default()).unwrap()
        }),
        ("a damaged index", |c| {
            let index = with(&c.shm, ".keep");
            let mut b = std::fs::read(&index).unwrap();
            let n = b.len();
            b[n / 2] ^= 1;
            std::fs::write(&index, b).unwrap();
            Store::open(&c.path).unwrap()
        }),
        ("a cold open", |c| {
            Store::open_ext(
                &c.path,
                OpenOptionsExt {
                    cold: true,
                    ..Default::default()
                },
            )
            .unwrap()
        }),
    ];
    for (what, open) in cases {
        let c = closed();
        let s = open(&c);
        assert_eq!(kept_files(&c), [false; 4], "{what}: what the close left");
        s.wait_warm().unwrap();
        assert_eq!(look(&s, &c.ids), c.values, "{what}");
    }
}

/// After a crash, as after a store dropped without a close (no
/// checkpoint, every write made), the next open takes back, by the tiers'
/// slot stamps, the rows whose bytes the recovered checkpoint holds, and
/// only those: rows written after it come back from the data file with
/// the checkpoint's values, rows looked up after it are not taken, and
/// the rows taken are served without a read.
#[test]
fn a_dropped_store_takes_back_the_rows_its_checkpoint_holds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let shm = dir.path().join("dram.shm");
    let s = Store::create(&path, config(&shm, 1000)).unwrap();
    let ids = spread(3000);
    let grads: Vec<f32> = (0..ids.len() * DIM as usize)
        .map(|i| (i % 5) as f32 * 0.25 - 0.5)
        .collect();
    s.apply_sgd("t", &ids, &grads, 1.0).unwrap();
    s.checkpoint().unwrap();
    let committed = look(&s, &ids);
    // After the checkpoint: 500 rows written, 200 others looked up.
    let (changed, kept) = ids.split_at(500);
    s.apply_sgd("t", changed, &vec![1.0; 500 * DIM as usize], 0.5)
        .unwrap();
    let fresh: Vec<u64> = (0..200).map(|i| 300_000 + i * 3).collect();
    let fresh_values = look(&s, &fresh);
    let st = s.stats().table("t").unwrap().clone();
    let resident = st.tiers[0].resident_rows + st.tiers[1].resident_rows;
    drop(s);
    let pmem = path.join(embtier::PMEM_FILE);
    for p in [&shm, &pmem] {
        assert!(with(p, ".stamps").exists(), "{p:?}: no stamps");
        assert!(!with(p, ".keep").exists(), "{p:?}: a drop keeps no index");
    }

    let s = Store::open(&path).unwrap();
    let taken = s.rows_kept_at_open();
    assert!(taken >= 1000, "took {taken} of {resident} rows");
    assert!(
        taken <= resident - 700,
        "took {taken} of {resident}: rows written or read after the checkpoint among them"
    );
    s.wait_warm().unwrap();
    let before = s.stats().table("t").unwrap().ssd.rows_read;
    assert_eq!(look(&s, kept), committed[500 * DIM as usize..]);
    let read = s.stats().table("t").unwrap().ssd.rows_read - before;
    assert!(
        read <= kept.len() as u64 - taken,
        "{read} rows read for {} rows, {taken} of them taken",
        kept.len()
    );
    assert_eq!(look(&s, changed), committed[..500 * DIM as usize]);
    assert_eq!(look(&s, &fresh), fresh_values);

    // Written again and checkpointed, then dropped: the written rows are
    // the checkpoint's now, and come back with the rest.
    s.apply_sgd("t", changed, &vec![1.0; 500 * DIM as usize], 0.25)
        .unwrap();
    s.checkpoint().unwrap();
    let now = look(&s, &ids);
    drop(s);
    let s = Store::open(&path).unwrap();
    assert!(s.rows_kept_at_open() >= taken + 500);
    assert_eq!(look(&s, &ids), now);
}

/// Stamps an open must not trust take nothing and serve the checkpoint's
/// values: stamps not kept through the last commit (a build without
/// stamps opened the store and committed since), stamps of another boot
/// of the machine (a power loss may have lost the tier file's writes from
/// the page cache), a damaged header, a file cut short, a cold open.
#[test]
fn stamps_of_another_boot_or_damaged_take_nothing() {
    use embtier::format::stamps::StampHeader;
    type Spoil = fn(&Path);
    let cases: [(&str, Spoil, bool); 5] = [
        (
            "a commit they were not kept through (a build without stamps)",
            |p| {
                let mut b = std::fs::read(p).unwrap();
                let at = StampHeader::decode(&b).unwrap().kept_through_at() as usize;
                let g = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
                assert!(g > 0, "kept through {g}");
                b[at..at + 8].copy_from_slice(&(g - 1).to_le_bytes());
                std::fs::write(p, b).unwrap();
            },
            false,
        ),
        (
            "another boot",
            |p| {
                let b = std::fs::read(p).unwrap();
                let mut h = StampHeader::decode(&b).unwrap();
                h.boot_id = b"00000000-0000-0000-0000-000000000000".to_vec();
                let e = h.encode().unwrap();
                let mut b = b;
                b[..e.len()].copy_from_slice(&e);
                std::fs::write(p, b).unwrap();
            },
            false,
        ),
        (
            "a damaged header",
            |p| {
                let mut b = std::fs::read(p).unwrap();
                b[30] ^= 1;
                std::fs::write(p, b).unwrap();
            },
            false,
        ),
        (
            "a file cut short (every warm open failed on it)",
            |p| {
                let len = std::fs::metadata(p).unwrap().len();
                let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
                f.set_len(len / 2).unwrap();
            },
            false,
        ),
        ("a cold open", |_| {}, true),
    ];
    for (what, spoil, cold) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let shm = dir.path().join("dram.shm");
        let s = Store::create(&path, config(&shm, 1000)).unwrap();
        let ids = spread(800);
        s.apply_sgd("t", &ids, &vec![0.5; 800 * DIM as usize], 1.0)
            .unwrap();
        s.checkpoint().unwrap();
        let committed = look(&s, &ids);
        drop(s);
        spoil(&with(&shm, ".stamps"));
        spoil(&with(&path.join(embtier::PMEM_FILE), ".stamps"));
        let s = Store::open_ext(
            &path,
            OpenOptionsExt {
                cold,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(s.rows_kept_at_open(), 0, "{what}");
        assert_eq!(look(&s, &ids), committed, "{what}");
        // The stamps are made anew: a second drop and open takes nothing
        // the spoiled ones named.
        drop(s);
        let s = Store::open(&path).unwrap();
        assert_eq!(look(&s, &ids), committed, "{what}, reopened");
    }
}

/// Copy the store directory `from` (its files) to `to`.
fn copy_store(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Two copies of one store that part at a checkpoint (a directory copied,
/// or restored from a backup, and both trained on) reach the same
/// generation with different rows. A tier file outside the directory that
/// both copies' configurations name then holds, after one copy's close
/// (or crash), rows of that copy's checkpoint, which the other copy's
/// checkpoint of the same generation does not hold: the other copy must
/// take none of them back and serve its own values.
#[test]
fn tiers_left_by_a_copy_that_parted_from_the_store_take_nothing() {
    for crash in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let shm = dir.path().join("dram.shm");
        let s = Store::create(&a, config(&shm, 1000)).unwrap();
        let ids = spread(800);
        s.apply_sgd("t", &ids, &vec![0.5; ids.len() * DIM as usize], 1.0)
            .unwrap();
        s.checkpoint().unwrap();
        drop(s);
        copy_store(&a, &b);
        // Each copy trains the same rows its own way, and checkpoints.
        let mut values = Vec::new();
        for (p, grad) in [(&a, 1.0f32), (&b, -2.0)] {
            let s = Store::open(p).unwrap();
            s.apply_sgd("t", &ids, &vec![grad; ids.len() * DIM as usize], 1.0)
                .unwrap();
            s.checkpoint().unwrap();
            values.push(look(&s, &ids));
            assert!(s.stats().table("t").unwrap().tiers[0].resident_rows >= 800);
            if crash {
                drop(s);
            } else {
                s.close().unwrap();
            }
        }
        assert_ne!(values[0], values[1]);
        // The tier file now holds b's rows, of b's checkpoint of the
        // generation a is at.
        let s = Store::open(&a).unwrap();
        s.wait_warm().unwrap();
        let got = look(&s, &ids);
        let wrong = got
            .chunks(DIM as usize)
            .zip(values[0].chunks(DIM as usize))
            .filter(|(g, w)| g != w)
            .count();
        assert_eq!(
            wrong,
            0,
            "copy a served rows of copy b's tier (crash: {crash}; {} taken at the open)",
            s.rows_kept_at_open()
        );
    }
}

/// Two stores (two directories, one config template) naming the same
/// tier file: the second truncated and remapped the file the first had
/// mapped, the first then served zeros and the second's rows as its own,
/// and checkpointed them. The second is refused, naming the tier file's
/// lock and the holder; the first's rows are untouched; once the first
/// is closed, the second opens.
#[test]
fn two_stores_naming_one_tier_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let shm = dir.path().join("dram.shm");
    let a = Store::create(dir.path().join("a"), config(&shm, 1000)).unwrap();
    let ids = spread(800);
    a.apply_sgd("t", &ids, &vec![0.5; 800 * DIM as usize], 1.0)
        .unwrap();
    let before = look(&a, &ids);
    let e = match Store::create(dir.path().join("b"), config(&shm, 1000)) {
        Ok(_) => panic!("a second store over the same tier file"),
        Err(e) => e,
    };
    match &e {
        embtier::Error::Locked { path, pid } => {
            assert_eq!(path, &with(&shm, ".lock"), "{e}");
            assert_eq!(*pid, std::process::id(), "{e}");
        }
        _ => panic!("not Locked: {e}"),
    }
    assert!(
        !dir.path().join("b").join("store.toml").exists(),
        "the refused create left its store behind"
    );
    // The refusal did not release the first store's record lock (closing
    // any descriptor of a record-locked file releases it): another
    // process is still refused.
    assert!(
        !another_process_can_lock(&with(&shm, ".lock")),
        "the first store's tier lock was released by the refused create"
    );
    assert_eq!(look(&a, &ids), before, "the first store's rows");
    a.checkpoint().unwrap();
    a.close().unwrap();
    let b = Store::create(dir.path().join("b"), config(&shm, 1000)).unwrap();
    drop(b);
    let a = Store::open(dir.path().join("a")).unwrap();
    assert_eq!(look(&a, &ids), before, "reopened");
}

/// Whether a forked child process can take a write record lock on `path`.
fn another_process_can_lock(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: fork in a multi-threaded test process; the child calls only
    // async-signal-safe functions (open, fcntl, _exit) on memory prepared
    // before the fork.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: see above; `c` outlives the calls, `lock` is a plain C
        // struct for which zeros are valid, and _exit skips destructors.
        unsafe {
            let fd = libc::open(c.as_ptr(), libc::O_RDWR);
            let mut lock: libc::flock = std::mem::zeroed();
            lock.l_type = libc::F_WRLCK as _;
            lock.l_whence = libc::SEEK_SET as _;
            let rc = libc::fcntl(fd, libc::F_SETLK, &lock);
            libc::_exit(if fd >= 0 && rc == 0 { 0 } else { 1 });
        }
    }
    assert!(child > 0, "fork failed");
    let mut status = 0;
    // SAFETY: waitpid on our own child's pid, into a local.
    unsafe { libc::waitpid(child, &mut status, 0) };
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

/// Reading or copying an open store's files (`cp -r`, `shutil.copytree`,
/// a backup tool) opens and closes its `LOCK` in the store's process. A
/// POSIX record lock is released by any close of the file in the
/// process that holds it, so a second process could then open the store
/// beside the first and lose one's checkpoints.
#[test]
fn reading_an_open_stores_lock_file_keeps_it_locked() {
    let dir = tempfile::tempdir().unwrap();
    let shm = dir.path().join("dram.shm");
    let s = Store::create(dir.path().join("a"), config(&shm, 1000)).unwrap();
    let lock = dir.path().join("a").join("LOCK");
    let pid = std::fs::read_to_string(&lock).unwrap();
    assert_eq!(pid, std::process::id().to_string());
    assert!(
        !another_process_can_lock(&lock),
        "the store's lock, after a read of it"
    );
    assert!(
        !another_process_can_lock(&with(&shm, ".lock")),
        "the tier file's lock"
    );
    let _ = std::fs::read(with(&shm, ".lock")).unwrap();
    assert!(
        !another_process_can_lock(&with(&shm, ".lock")),
        "the tier file's lock, after a read"
    );
    drop(s);
    assert!(another_process_can_lock(&lock), "released by the drop");
}
