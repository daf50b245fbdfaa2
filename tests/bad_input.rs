//! One test per kind of bad input: each gets a typed error carrying the
//! facts, none panics, and none leaves a partial update.

mod common;

use std::fs;
use std::path::Path;
use std::sync::Arc;

use embtier::format::{sb, BLOCK_SIZE};
use embtier::io::fault::FaultPlan;
use embtier::{Error, Init, IoEngineKind, OpenOptionsExt, Store, StoreConfig, TableConfig};

const DIM: usize = 4;

fn cfg() -> StoreConfig {
    StoreConfig::builder()
        .table(TableConfig::new("t", 1000, DIM as u32).init(Init::Zeros))
        .table(TableConfig::new("u", 10, DIM as u32))
        .dram_capacity(16 * 1024)
        .io_engine(IoEngineKind::Psync)
        .build()
}

fn new_store(dir: &Path) -> Store {
    Store::create(dir.join("s"), cfg()).unwrap()
}

fn row(s: &Store, id: u64) -> Vec<f32> {
    let mut out = vec![0f32; DIM];
    s.lookup("t", &[id], &mut out).unwrap();
    out
}

#[test]
fn unknown_table() {
    let d = tempfile::tempdir().unwrap();
    let s = new_store(d.path());
    let mut out = vec![0f32; DIM];
    match s.lookup("nope", &[0], &mut out) {
        Err(Error::UnknownTable { name }) => assert_eq!(name, "nope"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        s.update("nope", &[0], &out),
        Err(Error::UnknownTable { .. })
    ));
    assert!(matches!(
        s.apply_sgd("nope", &[0], &out, 1.0),
        Err(Error::UnknownTable { .. })
    ));
}

#[test]
fn id_out_of_range_and_no_partial_update() {
    let d = tempfile::tempdir().unwrap();
    let s = new_store(d.path());
    let mut out = vec![0f32; 2 * DIM];
    match s.lookup("t", &[5, 1000], &mut out) {
        Err(Error::IdOutOfRange { table, id, rows }) => {
            assert_eq!((table.as_str(), id, rows), ("t", 1000, 1000))
        }
        other => panic!("{other:?}"),
    }
    // The first id is valid, the second is not: nothing may change.
    let vals = vec![9.0f32; 2 * DIM];
    assert!(matches!(
        s.update("t", &[5, u64::MAX], &vals),
        Err(Error::IdOutOfRange { .. })
    ));
    assert!(matches!(
        s.apply_sgd("t", &[5, 1001], &vals, 1.0),
        Err(Error::IdOutOfRange { .. })
    ));
    assert_eq!(row(&s, 5), vec![0.0; DIM]);
}

#[test]
fn wrong_lengths() {
    let d = tempfile::tempdir().unwrap();
    let s = new_store(d.path());
    let mut out = vec![0f32; DIM + 1];
    match s.lookup("t", &[1], &mut out) {
        Err(Error::LengthMismatch {
            what,
            got,
            expected,
            ..
        }) => {
            assert_eq!((what, got, expected), ("out", DIM + 1, DIM))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        s.update("t", &[1, 2], &[1.0; DIM]),
        Err(Error::LengthMismatch { what: "values", .. })
    ));
    assert!(matches!(
        s.apply_sgd("t", &[1], &[1.0; 2 * DIM], 1.0),
        Err(Error::LengthMismatch { what: "grads", .. })
    ));
    assert_eq!(row(&s, 1), vec![0.0; DIM]);
}

#[test]
fn non_finite_rejected_unless_allowed() {
    let d = tempfile::tempdir().unwrap();
    let s = new_store(d.path());
    let mut vals = vec![1.0f32; 2 * DIM];
    vals[DIM + 2] = f32::NAN;
    match s.update("t", &[3, 4], &vals) {
        Err(Error::NonFinite {
            id, element, what, ..
        }) => assert_eq!((id, element, what), (4, 2, "values")),
        other => panic!("{other:?}"),
    }
    vals[DIM + 2] = f32::INFINITY;
    assert!(matches!(
        s.apply_sgd("t", &[3, 4], &vals, 1.0),
        Err(Error::NonFinite { .. })
    ));
    assert!(matches!(
        s.apply_sgd("t", &[3], &[1.0; DIM], f32::NAN),
        Err(Error::BadLearningRate { .. })
    ));
    // A negative rate climbs the loss: refused, as a table's optimizer
    // with one is (and as torch.optim.SGD refuses it).
    let e = s.apply_sgd("t", &[3], &[1.0; DIM], -1.0).unwrap_err();
    assert!(
        matches!(e, Error::BadLearningRate { lr } if lr == -1.0),
        "{e}"
    );
    assert!(e.to_string().contains("-1"), "{e}");
    assert_eq!(row(&s, 3), vec![0.0; DIM], "no partial update");
    drop(s);

    let d2 = tempfile::tempdir().unwrap();
    let mut c = cfg();
    c.tables[0].allow_non_finite = true;
    let s = Store::create(d2.path().join("s"), c).unwrap();
    s.update("t", &[3], &[f32::NAN, 1.0, f32::NEG_INFINITY, 0.0])
        .unwrap();
    let r = row(&s, 3);
    assert!(r[0].is_nan() && r[2] == f32::NEG_INFINITY);
}

#[test]
fn not_a_store() {
    let d = tempfile::tempdir().unwrap();
    match Store::open(d.path()) {
        Err(Error::NotAStore { path, .. }) => assert_eq!(path, d.path()),
        other => panic!("{other:?}"),
    }
    // A file with the right name but other content.
    fs::write(
        d.path().join(embtier::META_FILE),
        b"hello, this is not a store",
    )
    .unwrap();
    fs::write(d.path().join(embtier::CONFIG_FILE), cfg().to_toml()).unwrap();
    assert!(matches!(
        Store::open(d.path()),
        Err(Error::NotAStore { .. })
    ));
    // Create refuses a non-empty directory.
    assert!(matches!(
        Store::create(d.path(), cfg()),
        Err(Error::AlreadyExists { .. })
    ));
}

fn patch_superblock(dir: &Path, f: impl Fn(&mut [u8])) {
    let p = dir.join(embtier::META_FILE);
    let mut b = fs::read(&p).unwrap();
    // Both copies, so that neither can stand in for the other.
    f(&mut b[..BLOCK_SIZE]);
    f(&mut b[BLOCK_SIZE..2 * BLOCK_SIZE]);
    fs::write(&p, b).unwrap();
}

#[test]
fn unknown_format_version() {
    let d = tempfile::tempdir().unwrap();
    drop(new_store(d.path()));
    let dir = d.path().join("s");
    patch_superblock(&dir, |b| {
        b[sb::VERSION..sb::VERSION + 4].copy_from_slice(&7u32.to_le_bytes());
        let crc = crc32c::crc32c(&b[..sb::CRC]);
        b[sb::CRC..sb::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    });
    let e = Store::open(&dir).unwrap_err();
    let msg = e.to_string();
    match e {
        Error::Format {
            path,
            source:
                embtier::format::FormatError::UnsupportedVersion {
                    found: 7,
                    supported: 5,
                },
        } => assert!(path.ends_with(embtier::META_FILE)),
        other => panic!("{other:?}"),
    }
    assert!(msg.contains("version 7"), "{msg}");
}

#[test]
fn bad_checksum_names_file_and_offset() {
    let d = tempfile::tempdir().unwrap();
    drop(new_store(d.path()));
    let dir = d.path().join("s");
    patch_superblock(&dir, |b| b[sb::TABLE_COUNT] ^= 0x40);
    let msg = Store::open(&dir).unwrap_err().to_string();
    assert!(
        msg.contains("embtier.meta") && msg.contains("checksum mismatch at offset 0"),
        "{msg}"
    );

    // Catalog corruption: the error names the catalog's offset (8192).
    let d = tempfile::tempdir().unwrap();
    drop(new_store(d.path()));
    let dir = d.path().join("s");
    let p = dir.join(embtier::META_FILE);
    let mut b = fs::read(&p).unwrap();
    b[2 * BLOCK_SIZE + 70] ^= 1;
    fs::write(&p, &b).unwrap();
    let msg = Store::open(&dir).unwrap_err().to_string();
    assert!(msg.contains("checksum mismatch at offset 8192"), "{msg}");
}

#[test]
fn corrupt_data_block_is_an_error_not_wrong_values() {
    let d = tempfile::tempdir().unwrap();
    // No row log: the flush writes the rows home.
    let mut c = cfg();
    c.ssd.row_log = Some(embtier::ByteSize(0));
    let s = Store::create(d.path().join("s"), c).unwrap();
    s.update("t", &[0, 200], &[1.0; 2 * DIM]).unwrap();
    s.flush().unwrap();
    drop(s);
    let dir = d.path().join("s");
    // Row 200 of a 16-byte-row table sits in block 200 / 255 = 0.
    let p = dir.join(embtier::DATA_FILE);
    let mut b = fs::read(&p).unwrap();
    b[200 * 16 + 1] ^= 0x10;
    fs::write(&p, &b).unwrap();
    // Opened cold: a warm open would put row 200 back from the hot rows
    // (its committed value) without reading the damaged block.
    let cold = embtier::OpenOptionsExt {
        cold: true,
        ..Default::default()
    };
    let s = Store::open_ext(&dir, cold).unwrap();
    let mut out = vec![0f32; DIM];
    let e = s.lookup("t", &[200], &mut out).unwrap_err();
    let msg = e.to_string();
    match e {
        Error::Corrupt { table, id, .. } => assert_eq!((table.as_str(), id), ("t", 200)),
        other => panic!("{other:?}"),
    }
    assert!(
        msg.contains("data.emb") && msg.contains("checksum mismatch at offset 0"),
        "{msg}"
    );
}

#[test]
fn corrupt_row_log_block_fails_open_naming_it() {
    let d = tempfile::tempdir().unwrap();
    let s = new_store(d.path());
    s.update("t", &[0, 200], &[1.0; 2 * DIM]).unwrap();
    let cp = s.checkpoint().unwrap();
    assert_eq!(cp.row_log_blocks, 1, "the two rows were logged, packed");
    let data_blocks = s.superblock().data_blocks;
    drop(s);
    let p = d.path().join("s").join(embtier::DATA_FILE);
    let mut b = fs::read(&p).unwrap();
    let at = data_blocks as usize * BLOCK_SIZE;
    assert_eq!(&b[at..at + 4], b"ELOG");
    // Untouched, it reads back; with a flipped bit, open names the block.
    let s = Store::open(d.path().join("s")).unwrap();
    let mut out = vec![0f32; DIM];
    s.lookup("t", &[200], &mut out).unwrap();
    assert_eq!(out, vec![1.0; DIM]);
    drop(s);
    b[at + 100] ^= 0x10;
    fs::write(&p, &b).unwrap();
    let msg = Store::open(d.path().join("s")).unwrap_err().to_string();
    assert!(
        msg.contains("data.emb") && msg.contains(&format!("checksum mismatch at offset {at}")),
        "{msg}"
    );
}

#[test]
fn tiers_that_cannot_hold_one_row() {
    let d = tempfile::tempdir().unwrap();
    let c = StoreConfig::builder()
        .table(TableConfig::new("big", 1000, 1024))
        .dram_capacity(1000)
        .build();
    match Store::create(d.path().join("s"), c) {
        Err(Error::TierTooSmall {
            tier,
            table,
            needed,
            row_bytes,
            ..
        }) => {
            assert_eq!(
                (tier, table.as_str(), needed, row_bytes),
                ("dram", "big", 4096, 4096)
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(
        !d.path().join("s").exists(),
        "nothing created on a bad config"
    );
}

#[test]
fn second_open_is_locked() {
    let d = tempfile::tempdir().unwrap();
    let s = new_store(d.path());
    match Store::open(d.path().join("s")) {
        Err(Error::Locked { pid, .. }) => assert_eq!(pid, std::process::id()),
        other => panic!("{other:?}"),
    }
    drop(s);
    Store::open(d.path().join("s")).unwrap();
}

/// A child forked while a store is open (a PyTorch DataLoader worker, or
/// any subprocess between its fork and its exec) inherits the lock file's
/// descriptor. It must not keep the store locked once its owner closes it:
/// with an `flock` it did, and reopening failed with `Locked` for as long
/// as the child lived (seen as a flaky `tests/create_cleanup.rs`, whose
/// mounts fork while other tests reopen).
#[test]
fn a_forked_child_does_not_keep_the_store_locked() {
    let d = tempfile::tempdir().unwrap();
    let s = new_store(d.path());
    // SAFETY: fork in a multi-threaded test process; the child calls only
    // async-signal-safe functions (sleep, _exit) and touches no memory the
    // parent's other threads may have left locked.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: see above; _exit skips every destructor.
        unsafe {
            libc::sleep(30);
            libc::_exit(0);
        }
    }
    assert!(child > 0, "fork failed");
    drop(s);
    let reopened = Store::open(d.path().join("s"));
    // SAFETY: kill and waitpid on our own child's pid.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
    let s = reopened.expect("the forked child must not hold the lock");
    // And the lock still excludes a second open in this process.
    assert!(matches!(
        Store::open(d.path().join("s")),
        Err(Error::Locked { .. })
    ));
    drop(s);
}

/// Open options whose engine is wrapped in a fault injector, and its plan.
fn faulty() -> (Arc<FaultPlan>, OpenOptionsExt) {
    let plan = Arc::new(FaultPlan::default());
    // Cold: a warm-up reading in the background would take reads from the
    // counts the faults are planned by.
    let opts = common::faulty_opts(&plan, true);
    (plan, opts)
}

#[test]
fn full_disk_is_an_error_and_nothing_is_lost() {
    let d = tempfile::tempdir().unwrap();
    let (plan, opts) = faulty();
    // A cache of 16 rows over 1000: updates displace dirty rows constantly.
    let mut c = cfg();
    c.tiers[0].capacity = embtier::ByteSize(16 * 16 + 10 * 16);
    c.shards = Some(1);
    c.tables[0].dram_bytes = Some(embtier::ByteSize(16 * 16));
    c.tables[1].dram_bytes = Some(embtier::ByteSize(10 * 16));
    let s = Store::create_with(d.path().join("s"), c, opts).unwrap();
    let mut model = vec![0f32; 1000];
    for round in 0..3 {
        let ids: Vec<u64> = (0..1000).collect();
        let grads = vec![1.0f32; 1000 * DIM];
        if round == 1 {
            plan.fail_writes_now(libc::ENOSPC);
        }
        // While the disk is full, updates either succeed in memory or are
        // refused whole (back-pressure); never applied in part.
        for chunk in ids.chunks(50) {
            let g = &grads[..chunk.len() * DIM];
            match s.apply_sgd("t", chunk, g, 1.0) {
                Ok(()) => chunk.iter().for_each(|&i| model[i as usize] -= 1.0),
                Err(Error::DiskFull { offset, .. }) => assert!(offset % 4096 == 0),
                Err(e) => panic!("{e:?}"),
            }
        }
        if round == 1 {
            match s.flush() {
                // The data file, or the journal of the in-place writes that
                // follow a failed row-log append.
                Err(Error::DiskFull { path, .. }) => assert!(
                    path.ends_with(embtier::DATA_FILE) || path.ends_with(embtier::JOURNAL_FILE),
                    "{path:?}"
                ),
                other => panic!("flush on a full disk: {other:?}"),
            }
            // Still readable, and every acknowledged update is visible.
            let mut out = vec![0f32; 1000 * DIM];
            s.lookup("t", &ids, &mut out).unwrap();
            for i in 0..1000 {
                assert_eq!(out[i * DIM], model[i], "row {i} while the disk is full");
            }
            assert!(s.stats().table("t").unwrap().ssd.writeback_errors > 0);
            plan.heal();
        }
    }
    s.flush().unwrap();
    drop(s);
    let s = Store::open(d.path().join("s")).unwrap();
    let ids: Vec<u64> = (0..1000).collect();
    let mut out = vec![0f32; 1000 * DIM];
    s.lookup("t", &ids, &mut out).unwrap();
    for i in 0..1000 {
        assert!(
            out[i * DIM..(i + 1) * DIM].iter().all(|&v| v == model[i]),
            "row {i} after reopen"
        );
    }
}

#[test]
fn read_errors_are_typed() {
    let d = tempfile::tempdir().unwrap();
    let (plan, opts) = faulty();
    let s = Store::create_with(d.path().join("s"), cfg(), opts).unwrap();
    plan.fail_reads_now(libc::EIO);
    let mut out = vec![0f32; DIM];
    match s.lookup("t", &[7], &mut out) {
        Err(Error::Io {
            op: "read", source, ..
        }) => assert_eq!(source.raw_os_error(), Some(libc::EIO)),
        other => panic!("{other:?}"),
    }
    plan.heal();
    s.lookup("t", &[7], &mut out).unwrap();
}

#[test]
fn bad_config_files() {
    assert!(StoreConfig::from_toml("[dram]\ncapacity = \"lots\"").is_err());
    let e = StoreConfig::from_toml("[[tables]]\nname = \"a\"\nrows = 1\ndim = 1\nbogus = 3")
        .unwrap_err()
        .to_string();
    // One line, saying where: not the toml crate's excerpt of the text.
    assert!(!e.contains('\n'), "{e}");
    assert!(e.contains("line 5, column 1") && e.contains("bogus"), "{e}");
    let c = StoreConfig::builder()
        .table(TableConfig::new("a", 0, 4))
        .build();
    assert!(matches!(c.clone().tables[0].rows, 0));
    let d = tempfile::tempdir().unwrap();
    assert!(matches!(
        Store::create(d.path().join("s"), c),
        Err(Error::Config { .. })
    ));
    let c = StoreConfig::builder()
        .table(TableConfig::new("a", 10, 4))
        .table(TableConfig::new("a", 10, 4))
        .build();
    assert!(matches!(
        Store::create(d.path().join("s"), c),
        Err(Error::Config { .. })
    ));
}

/// A store.toml edited to a setting the store refuses (here a negative
/// learning rate, which builds before 2026-12-07 took): the open names
/// the file and the setting, and once the file is mended the rows are
/// all there.
#[test]
fn an_edited_store_toml_that_is_refused_names_itself_and_loses_nothing() {
    let t = tempfile::tempdir().unwrap();
    let s = new_store(t.path());
    let dir = t.path().join("s");
    s.update("t", &[3], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    s.close().unwrap();
    let path = dir.join("store.toml");
    let good = fs::read_to_string(&path).unwrap();
    assert!(good.contains("lr = 0.01"), "{good}");
    fs::write(&path, good.replace("lr = 0.01", "lr = -0.01")).unwrap();
    let e = Store::open(&dir).unwrap_err();
    assert!(matches!(e, Error::Config { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("lr -0.01 is negative"),
        "{msg}"
    );
    fs::write(&path, good).unwrap();
    let s = Store::open(&dir).unwrap();
    assert_eq!(row(&s, 3), vec![1.0, 2.0, 3.0, 4.0]);
}

/// A table's setting refused where its tiers are built (a first tier too
/// small for the shards the lower tiers need): the error names the table
/// apart, as the config's own checks do.
#[test]
fn a_table_s_tier_error_names_the_table_apart() {
    let t = tempfile::tempdir().unwrap();
    let cfg = StoreConfig::from_toml(
        "[[tables]]\nname = \"big\"\nrows = 1000000\ndim = 4\n\
         [[tiers]]\nkind = \"dram\"\ncapacity = 16\n\
         [[tiers]]\nkind = \"pmem\"\ncapacity = \"8MiB\"\n",
    )
    .unwrap();
    match Store::create(t.path().join("s"), cfg) {
        Err(Error::Config { table, reason }) => {
            assert_eq!(table.as_deref(), Some("big"), "{reason}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// A table whose rows (weights and optimizer state) pass 4 MiB, inside
/// the documented dim limit of 2^20: `Store::create` panicked ("min >
/// max") sizing the table's write-back batch. It is created, and its rows
/// step and read back.
#[test]
fn a_row_past_4_mib_is_created_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let dim = 524_289u32;
    let t = TableConfig::new("t", 3, dim).optimizer(embtier::Optimizer::Adagrad {
        lr: 0.5,
        eps: 1e-8,
        weight_decay: 0.0,
    });
    let cfg = StoreConfig::builder()
        .table(t)
        .dram_capacity(64 << 20)
        .build();
    let s = Store::create(dir.path().join("s"), cfg).unwrap();
    let mut before = vec![0f32; dim as usize];
    s.lookup("t", &[2], &mut before).unwrap();
    s.step("t", &[2], &vec![1.0; dim as usize]).unwrap();
    s.checkpoint().unwrap();
    let mut after = vec![0f32; dim as usize];
    s.lookup("t", &[2], &mut after).unwrap();
    // Adagrad's first step of a gradient of 1: w - lr * 1 / (1 + eps).
    let moved = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| (*b - *a - 0.5).abs() < 1e-4)
        .count();
    assert_eq!(moved, dim as usize);
}

/// A config with a table more or less than the store's is a mismatch
/// naming the table (typed, as a changed shape is), not a bare config
/// error.
#[test]
fn a_config_with_a_table_more_or_less_is_a_mismatch_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    drop(new_store(dir.path()));
    let d = dir.path().join("s");
    let mut more = cfg();
    more.tables.push(TableConfig::new("extra", 10, DIM as u32));
    match Store::open_with(&d, more, OpenOptionsExt::default()) {
        Err(Error::ConfigMismatch { table, stored, .. }) => {
            assert_eq!(table, "extra");
            assert!(stored.contains("no table \"extra\""), "{stored}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    let mut fewer = cfg();
    let gone = fewer.tables.pop().unwrap();
    match Store::open_with(&d, fewer, OpenOptionsExt::default()) {
        Err(Error::ConfigMismatch { table, given, .. }) => {
            assert_eq!(table, gone.name);
            assert!(given.contains("no table"), "{given}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// A reopen's config with another initialiser or seed: never-written rows
/// still follow the catalog's, and `config()` says so rather than
/// reporting the one not used.
#[test]
fn a_reopen_with_another_initialiser_reports_the_one_that_holds() {
    let dir = tempfile::tempdir().unwrap();
    drop(new_store(dir.path()));
    let d = dir.path().join("s");
    let mut other = cfg();
    other.tables[0].init = Init::Uniform { scale: 0.5 };
    other.tables[0].seed = Some(99);
    let s = Store::open_with(&d, other, OpenOptionsExt::default()).unwrap();
    assert_eq!(row(&s, 7), vec![0.0; DIM], "a never-written row");
    let t = &s.config().tables[0];
    assert_eq!(t.init, Init::Zeros, "config() of the reopened store");
    assert_eq!(t.effective_seed(), cfg().tables[0].effective_seed());
}

/// A range past a table's end names the first id out of range, as the
/// error's doc says, not the range's last.
#[test]
fn a_range_past_the_end_names_its_first_id_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let s = new_store(dir.path());
    let e = s.import_rows("t", 995, &[0.0; 10 * DIM]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::IdOutOfRange {
                id: 1000,
                rows: 1000,
                ..
            }
        ),
        "{e:?}"
    );
    let e = s.import_rows("t", 1003, &[0.0; 2 * DIM]).unwrap_err();
    assert!(matches!(e, Error::IdOutOfRange { id: 1003, .. }), "{e:?}");
}

/// A child this process spawns shares the lock's open file description
/// from its clone until its exec closes it: a drop and reopen of the store
/// in that window found the store locked by this very process (seen as a
/// flaky `tests/crash.rs` beside the SIGKILL tests' children). The open
/// now waits such a holder out.
#[test]
fn reopening_beside_spawned_children_is_not_refused() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    drop(new_store(dir.path()));
    let d = dir.path().join("s");
    let stop = Arc::new(AtomicBool::new(false));
    let spawner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut c) = std::process::Command::new("true").spawn() {
                    let _ = c.wait();
                    n += 1;
                }
            }
            n
        })
    };
    let start = std::time::Instant::now();
    let mut opens = 0;
    while start.elapsed() < std::time::Duration::from_secs(3) {
        let s = Store::open(&d).unwrap_or_else(|e| panic!("open {opens} beside spawns: {e}"));
        drop(s);
        opens += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let spawned = spawner.join().unwrap();
    assert!(spawned > 0 && opens > 0, "{spawned} spawns, {opens} opens");
    // The pid at the file's start, and nothing else.
    let s = Store::open(&d).unwrap();
    let lock = fs::read(d.join("LOCK")).unwrap();
    assert_eq!(lock, std::process::id().to_string().into_bytes());
    drop(s);
}
