//! The files a store's configuration names (`[ssd] path`, a tier's
//! `path`): relative paths, and paths that name one file twice, another
//! store's files or the store's own. Its own test binary: one test changes
//! the process's working directory (the others use absolute paths only).
//!
//! A path given through the API is relative to the working directory, as
//! any `Path` is; `store.toml` is written with it made absolute, so a
//! later open from another directory finds the same files. A relative
//! path in a `store.toml` edited by hand is relative to the store's
//! directory, where the file lives, never to the opening process's
//! working directory.

use std::path::{Path, PathBuf};

use embtier::{
    Error, Init, IoEngineKind, OpenOptionsExt, PolicyKind, Store, StoreConfig, TableConfig,
    TierConfig,
};

const ROWS: u64 = 5_000;
const DIM: u32 = 8;

fn config(data: &str, tier: &str) -> StoreConfig {
    StoreConfig::builder()
        .table(TableConfig::new("t", ROWS, DIM))
        .tiers(vec![
            TierConfig::dram(64 << 10, PolicyKind::Lru),
            TierConfig::pmem(Some(tier.into()), 256 << 10, PolicyKind::Lru),
        ])
        .ssd_path(data.into())
        .io_engine(IoEngineKind::Psync)
        .build()
}

fn write_rows(store: &Store) -> Vec<f32> {
    let ids: Vec<u64> = (0..ROWS).collect();
    let rows: Vec<f32> = (0..ROWS * DIM as u64).map(|i| i as f32 * 0.25).collect();
    store.update("t", &ids, &rows).unwrap();
    store.checkpoint().unwrap();
    rows
}

fn read_rows(store: &Store) -> Vec<f32> {
    let ids: Vec<u64> = (0..ROWS).collect();
    let mut out = vec![0f32; ROWS as usize * DIM as usize];
    store.lookup("t", &ids, &mut out).unwrap();
    out
}

fn cd(p: &Path) {
    std::fs::create_dir_all(p).unwrap();
    std::env::set_current_dir(p).unwrap();
}

#[test]
fn relative_paths_do_not_depend_on_the_opening_processs_directory() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();

    // Created through the API from `a`: the files are in `a`, and an open
    // from `b` finds them there.
    cd(&root.join("a"));
    let s = root.join("s");
    let store = Store::create(&s, config("rel-data.emb", "rel-tier.emb")).unwrap();
    let rows = write_rows(&store);
    store.close().unwrap();
    assert!(root.join("a/rel-data.emb").exists(), "the data file");
    cd(&root.join("b"));
    let store = Store::open(&s).unwrap_or_else(|e| panic!("opened from another directory: {e}"));
    assert_eq!(read_rows(&store), rows, "rows read from another directory");
    drop(store);
    assert!(
        !root.join("b/rel-tier.emb").exists(),
        "the open made a tier file in its working directory"
    );

    // A store.toml edited by hand to a relative path, the data file moved
    // beside it: the path is the store directory's, from any directory.
    let toml = s.join("store.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    let data_abs = root.join("a/rel-data.emb");
    let edited = text.replace(data_abs.to_str().unwrap(), "moved-data.emb");
    assert_ne!(
        edited, text,
        "store.toml names the data file absolutely:\n{text}"
    );
    std::fs::write(&toml, edited).unwrap();
    std::fs::rename(&data_abs, s.join("moved-data.emb")).unwrap();
    cd(&root.join("c"));
    let store = Store::open(&s).unwrap_or_else(|e| panic!("a hand-edited relative path: {e}"));
    assert_eq!(read_rows(&store), rows, "rows after the data file moved");
    drop(store);
    for d in ["b", "c"] {
        let left: Vec<_> = std::fs::read_dir(root.join(d))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{d} holds {left:?}");
    }
}

fn tiers_config(tiers: Vec<TierConfig>) -> StoreConfig {
    StoreConfig::builder()
        .table(TableConfig::new("t", ROWS, DIM).init(Init::Uniform { scale: 0.5 }))
        .tiers(tiers)
        .io_engine(IoEngineKind::Psync)
        .build()
}

fn refused_as_config(r: embtier::Result<Store>, what: &str, names: &[&Path]) -> String {
    match r {
        Ok(_) => panic!("{what}: accepted"),
        Err(e @ Error::Config { .. }) => {
            let text = e.to_string();
            for n in names {
                assert!(
                    text.contains(&*n.to_string_lossy()),
                    "{what}: {text} does not name {n:?}"
                );
            }
            text
        }
        Err(e) => panic!("{what}: not a config error: {e:?}"),
    }
}

#[test]
fn two_tiers_naming_one_file_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().canonicalize().unwrap();
    // The second PMem tier named as the first's default file.
    let d = root.join("s1");
    let c = tiers_config(vec![
        TierConfig::dram(8 << 10, PolicyKind::Lru),
        TierConfig::pmem(None, 64 << 10, PolicyKind::Lru),
        TierConfig::pmem(Some(d.join("pmem.emb")), 64 << 10, PolicyKind::Lru),
    ]);
    refused_as_config(
        Store::create(&d, c),
        "the default file",
        &[&d.join("pmem.emb")],
    );
    assert!(
        !d.join("embtier.meta").exists(),
        "a refused create left a store"
    );
    // One file through a symlink, and spelled with `..`.
    let real = root.join("tier.file");
    std::fs::write(&real, b"").unwrap();
    let link = root.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    let dotdot = root.join("sub/../tier.file");
    for (i, alias) in [link, dotdot].into_iter().enumerate() {
        let d = root.join(format!("s{}", i + 2));
        let c = tiers_config(vec![
            TierConfig::dram(8 << 10, PolicyKind::Lru),
            TierConfig::pmem(Some(real.clone()), 64 << 10, PolicyKind::Lru),
            TierConfig::pmem(Some(alias.clone()), 64 << 10, PolicyKind::Lru),
        ]);
        refused_as_config(Store::create(&d, c), &format!("{alias:?}"), &[&real]);
    }
    // A tier named as the data file, or as another tier's stamps.
    let d = root.join("s4");
    let data = root.join("outside-data.emb");
    let mut c = tiers_config(vec![
        TierConfig::dram(8 << 10, PolicyKind::Lru),
        TierConfig::pmem(Some(data.clone()), 64 << 10, PolicyKind::Lru),
    ]);
    c.ssd.path = Some(data.clone());
    refused_as_config(Store::create(&d, c), "the data file", &[&data]);
    let stamps = root.join("tier.file.stamps");
    let c = tiers_config(vec![
        TierConfig::dram(8 << 10, PolicyKind::Lru),
        TierConfig::pmem(Some(real.clone()), 64 << 10, PolicyKind::Lru),
        TierConfig::pmem(Some(stamps.clone()), 64 << 10, PolicyKind::Lru),
    ]);
    refused_as_config(Store::create(root.join("s5"), c), "stamps", &[&stamps]);
}

/// Every row written (values from the id), checkpointed and closed.
fn committed(dir: &Path, c: StoreConfig) -> Vec<f32> {
    let store = Store::create(dir, c).unwrap();
    let rows = write_rows(&store);
    store.close().unwrap();
    rows
}

#[test]
fn a_tier_naming_one_of_the_stores_own_files_is_refused_before_it_is_touched() {
    let root = tempfile::tempdir().unwrap();
    let d = root.path().join("s");
    let base = tiers_config(vec![TierConfig::dram(16 << 10, PolicyKind::Lru)]);
    let rows = committed(&d, base.clone());
    for name in [
        "data.emb",
        "embtier.meta",
        "journal.emb",
        "store.toml",
        "LOCK",
        "hot-rows.emb",
        "hot.emb",
        "log-index.emb",
        "written-0.emb",
    ] {
        let mut c = base.clone();
        c.tiers.push(TierConfig::pmem(
            Some(d.join(name)),
            64 << 10,
            PolicyKind::Lru,
        ));
        let before: Vec<(PathBuf, u64)> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path(), e.metadata().unwrap().len())
            })
            .collect();
        refused_as_config(
            Store::open_with(&d, c, OpenOptionsExt::default()),
            name,
            &[&d.join(name)],
        );
        for (p, len) in before {
            assert_eq!(
                std::fs::metadata(&p).unwrap().len(),
                len,
                "{name}: {p:?} changed"
            );
        }
        let store = Store::open(&d).unwrap_or_else(|e| panic!("{name}: then: {e}"));
        assert_eq!(read_rows(&store), rows, "{name}: rows");
        store.close().unwrap();
    }
}

#[test]
fn a_tier_in_another_stores_directory_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let b_dir = root.path().join("b");
    let cb = tiers_config(vec![
        TierConfig::dram(8 << 10, PolicyKind::Lru),
        TierConfig::pmem(None, 256 << 10, PolicyKind::Lru),
    ]);
    let b = Store::create(&b_dir, cb).unwrap();
    let rows = write_rows(&b);
    // Two trainers from one template: A names B's tier file.
    let ca = tiers_config(vec![
        TierConfig::dram(8 << 10, PolicyKind::Lru),
        TierConfig::pmem(Some(b_dir.join("pmem.emb")), 256 << 10, PolicyKind::Lru),
    ]);
    let a_dir = root.path().join("a");
    refused_as_config(
        Store::create(&a_dir, ca.clone()),
        "open",
        &[&b_dir.join("pmem.emb")],
    );
    assert_eq!(read_rows(&b), rows, "B's rows after A's create");
    b.close().unwrap();
    // Closed, B's kept tier is B's still.
    refused_as_config(
        Store::create(&a_dir, ca),
        "closed",
        &[&b_dir.join("pmem.emb")],
    );
    let b = Store::open(&b_dir).unwrap();
    assert_eq!(read_rows(&b), rows, "B reopened");
}

#[test]
fn a_data_file_another_store_holds_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("shared-data.emb");
    let mut c = tiers_config(vec![TierConfig::dram(16 << 10, PolicyKind::Lru)]);
    c.ssd.path = Some(data.clone());
    c.tables[0].init = Init::Zeros;
    let a_dir = root.path().join("a");
    let rows = committed(&a_dir, c.clone());
    // Closed: the new store would read A's blocks as its own.
    match Store::create(root.path().join("b"), c.clone()) {
        Err(Error::AlreadyExists { path }) => assert_eq!(path, data),
        Err(e) => panic!("not AlreadyExists: {e:?}"),
        Ok(_) => panic!("a second store over A's data file"),
    }
    // Open: a copy of A's directory (the data file stays where it is) is
    // refused by A's lock on the data file.
    let a = Store::open(&a_dir).unwrap();
    let copy = root.path().join("copy");
    std::fs::create_dir(&copy).unwrap();
    for e in std::fs::read_dir(&a_dir).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
    }
    match Store::open(&copy) {
        Err(Error::Locked { path, .. }) => {
            assert_eq!(path, root.path().join("shared-data.emb.lock"))
        }
        Err(e) => panic!("not Locked: {e:?}"),
        Ok(_) => panic!("a copy opened over A's data file while A is open"),
    }
    assert_eq!(read_rows(&a), rows, "A's rows");
    a.close().unwrap();
    let a = Store::open(&a_dir).unwrap();
    assert_eq!(read_rows(&a), rows, "A reopened");
}
