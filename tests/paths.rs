//! Relative file paths in a store's configuration (`[ssd] path`, a tier's
//! `path`). Its own test binary, with one test: it changes the process's
//! working directory, which every other test of a binary would see.
//!
//! A path given through the API is relative to the working directory, as
//! any `Path` is; `store.toml` is written with it made absolute, so a
//! later open from another directory finds the same files. A relative
//! path in a `store.toml` edited by hand is relative to the store's
//! directory, where the file lives, never to the opening process's
//! working directory.

use std::path::Path;

use embtier::{IoEngineKind, PolicyKind, Store, StoreConfig, TableConfig, TierConfig};

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
