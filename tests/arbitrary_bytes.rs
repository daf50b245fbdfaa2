//! Arbitrary-bytes property tests for every parser: the superblock, the
//! catalog (with its checksum fixed up, so that field validation is what is
//! exercised), data blocks, the undo journal (alone and replayed by an
//! open), and the store directory as a whole (the `.etrace` reader and the
//! trace importers: `sim/tests/arbitrary_bytes.rs`). Inputs are random
//! bytes and mutations
//! (bit flips, overwrites, truncations, splices) of valid encodings. Every
//! input must give `Ok` or a typed error: a panic fails the test and prints
//! the seed and case that caused it.
//!
//! `EMBTIER_ARBITRARY_ITERS` scales the number of cases (default 1).

use std::path::Path;

use embtier::format::{check_block, Catalog, Superblock, BLOCK_SIZE};
use embtier::{Store, StoreConfig, TableConfig};

mod common;

use common::inputs::{below, mutate, no_panic, scale};
use common::Rng;

/// The metadata file of a small real store.
fn real_meta(dir: &Path) -> Vec<u8> {
    let path = dir.join("s");
    let s = Store::create(
        &path,
        StoreConfig::builder()
            .table(TableConfig::new("users", 1000, 8))
            .table(TableConfig::new("items", 77, 3))
            .build(),
    )
    .unwrap();
    s.update("users", &[3, 500], &[1.0; 16]).unwrap();
    s.flush().unwrap();
    drop(s);
    std::fs::read(path.join(embtier::META_FILE)).unwrap()
}

#[test]
fn superblock_and_catalog_decoders_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let meta = real_meta(dir.path());
    let sb = Superblock::decode(&meta[..BLOCK_SIZE]).expect("the real superblock decodes");
    let cat_at = sb.catalog_offset as usize;
    let cat = meta[cat_at..cat_at + sb.catalog_len as usize].to_vec();
    Catalog::decode(&cat, sb.table_count, sb.catalog_offset, sb.catalog_crc).expect("real catalog");
    let mut rejected = 0;
    for seed in 0..(4000 * scale()) as u64 {
        let mut rng = Rng(seed);
        let case = if seed % 5 == 0 {
            (0..below(&mut rng, 2 * BLOCK_SIZE))
                .map(|_| rng.next() as u8)
                .collect()
        } else {
            mutate(&mut rng, &meta[..BLOCK_SIZE])
        };
        no_panic("Superblock::decode", seed, &case, || {
            rejected += Superblock::decode(&case).is_err() as usize;
        });
        // The catalog with a matching checksum: every field check runs.
        let c = mutate(&mut rng, &cat);
        let count = [sb.table_count, below(&mut rng, 5) as u32, u32::MAX][below(&mut rng, 3)];
        no_panic("Catalog::decode", seed, &c, || {
            let _ = Catalog::decode(&c, count, sb.catalog_offset, crc32c::crc32c(&c));
        });
    }
    assert!(
        rejected > 3000,
        "mutations must be caught: {rejected} rejected"
    );
}

#[test]
fn block_checks_never_panic() {
    for seed in 0..(3000 * scale()) as u64 {
        let mut rng = Rng(seed);
        let mut b: Vec<u8> = if seed % 3 == 0 {
            vec![0; BLOCK_SIZE]
        } else {
            (0..BLOCK_SIZE).map(|_| rng.next() as u8).collect()
        };
        if seed % 3 == 1 {
            b = mutate(&mut rng, &b);
        }
        no_panic("check_block", seed, &b, || {
            let _ = check_block(&b, [rng.next() % 1000, u64::MAX][below(&mut rng, 2)]);
        });
    }
}

/// Whole-store open on a corrupted metadata file: an error or a store,
/// never a panic; and a store that opens serves lookups without panicking.
#[test]
fn store_open_on_mutated_metadata_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let meta = real_meta(dir.path());
    let path = dir.path().join("s");
    let meta_path = path.join(embtier::META_FILE);
    for seed in 0..(300 * scale()) as u64 {
        let mut rng = Rng(seed);
        let m = mutate(&mut rng, &meta);
        std::fs::write(&meta_path, &m).unwrap();
        no_panic("Store::open", seed, &m, || {
            if let Ok(s) = Store::open(&path) {
                let mut out = vec![0f32; 8];
                let _ = s.lookup("users", &[3], &mut out);
            }
        });
    }
    std::fs::write(&meta_path, &meta).unwrap();
    let s = Store::open(&path).expect("the original metadata opens again");
    let mut out = vec![0f32; 8];
    s.lookup("users", &[500], &mut out).unwrap();
    assert_eq!(out, [1.0; 8]);
}

/// The undo journal: its scanner and header decoder on random and mutated
/// journals, and a whole-store open (which replays the journal) of the
/// crashed fixture with its journal mutated.
#[test]
fn journal_scan_and_recovery_never_panic() {
    use embtier::format::journal::{scan, BatchHeader};
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/crashed");
    let journal = std::fs::read(fixture.join(embtier::JOURNAL_FILE)).expect("fixture journal");
    scan(&journal).expect("the fixture's journal scans");
    for seed in 0..(3000 * scale()) as u64 {
        let mut rng = Rng(seed);
        let case = if seed % 7 == 0 {
            (0..below(&mut rng, 3 * BLOCK_SIZE))
                .map(|_| rng.next() as u8)
                .collect()
        } else {
            mutate(&mut rng, &journal)
        };
        no_panic("journal::scan", seed, &case, || {
            let _ = scan(&case);
            let _ = BatchHeader::decode(&case, 0);
        });
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    std::fs::create_dir(&path).unwrap();
    for seed in 0..(150 * scale()) as u64 {
        let mut rng = Rng(seed);
        for f in [embtier::META_FILE, embtier::CONFIG_FILE, embtier::DATA_FILE] {
            std::fs::copy(fixture.join(f), path.join(f)).unwrap();
        }
        let j = mutate(&mut rng, &journal);
        std::fs::write(path.join(embtier::JOURNAL_FILE), &j).unwrap();
        no_panic("Store::open (journal)", seed, &j, || {
            if let Ok(s) = Store::open(&path) {
                let mut out = vec![0f32; 4];
                let _ = s.lookup("t", &[3], &mut out);
            }
        });
    }
}
