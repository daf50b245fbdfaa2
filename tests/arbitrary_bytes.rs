//! Arbitrary-bytes property tests for every parser: the superblock, the
//! catalog (with its checksum fixed up, so that field validation is what is
//! exercised), data blocks, the undo journal (alone and replayed by an
//! open), the store directory as a whole, the `.etrace` reader and each
//! trace importer. Inputs are random bytes and mutations
//! (bit flips, overwrites, truncations, splices) of valid encodings. Every
//! input must give `Ok` or a typed error: a panic fails the test and prints
//! the seed and case that caused it.
//!
//! `EMBTIER_ARBITRARY_ITERS` scales the number of cases (default 1).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use embtier::format::trace::{Access, AccessKind, TraceTable};
use embtier::format::{check_block, Catalog, Superblock, BLOCK_SIZE};
use embtier::trace::Trace;
use embtier::trace::{import, CsvSpec, Format};
use embtier::{Store, StoreConfig, TableConfig};

mod common;

use common::Rng;

/// `rng.below` for lengths and indices.
fn below(rng: &mut Rng, n: usize) -> usize {
    rng.below(n.max(1) as u64) as usize
}

fn scale() -> usize {
    common::env_or("EMBTIER_ARBITRARY_ITERS", 1) as usize
}

/// A mutation of `base`: a few random edits of one of five kinds.
fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..1 + below(rng, 4) {
        match below(rng, 5) {
            0 if !b.is_empty() => {
                let i = below(rng, b.len());
                b[i] ^= 1 << below(rng, 8);
            }
            1 if !b.is_empty() => {
                let i = below(rng, b.len());
                b[i] = [0, 0xff, 0x7f, 0x80, rng.next() as u8][below(rng, 5)];
            }
            2 => {
                let n = below(rng, b.len() + 1);
                b.truncate(n);
            }
            3 if !b.is_empty() => {
                // Duplicate a slice somewhere else.
                let i = below(rng, b.len());
                let j = (i + below(rng, 64)).min(b.len());
                let s = b[i..j].to_vec();
                let at = below(rng, b.len() + 1);
                b.splice(at..at, s);
            }
            _ => {
                let i = below(rng, b.len() + 1);
                let n = below(rng, 16);
                let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                b.splice(i..i, junk);
            }
        }
    }
    b
}

fn no_panic<T>(what: &str, seed: u64, case: &[u8], f: impl FnOnce() -> T) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        let show = &case[..case.len().min(256)];
        panic!(
            "{what}: panicked on case seed {seed} ({} bytes, first 256: {show:02x?})",
            case.len()
        );
    }
}

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

#[test]
fn etrace_reader_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let t = Trace {
        tables: vec![
            TraceTable {
                name: "a".into(),
                rows: 1000,
                dim: 16,
                row_bytes: 64,
            },
            TraceTable {
                name: "b".into(),
                rows: 10,
                dim: 0,
                row_bytes: 0,
            },
        ],
        batch_ends: vec![3, 5, 9],
        accesses: (0..9)
            .map(|i| Access {
                table: (i % 2) as u32,
                row: (i * 37 % 10) as u64,
                kind: if i % 3 == 0 {
                    AccessKind::Update
                } else {
                    AccessKind::Lookup
                },
            })
            .collect(),
    };
    let good = dir.path().join("good.etrace");
    t.write_etrace(&good).unwrap();
    let back = Trace::read_etrace(&good).unwrap();
    assert_eq!((back.accesses.len(), back.batch_ends), (9, vec![3, 5, 9]));
    let bytes = std::fs::read(&good).unwrap();
    let p = dir.path().join("case.etrace");
    let mut rejected = 0;
    for seed in 0..(1500 * scale()) as u64 {
        let mut rng = Rng(seed);
        let m = mutate(&mut rng, &bytes);
        std::fs::write(&p, &m).unwrap();
        no_panic("read_etrace", seed, &m, || {
            rejected += Trace::read_etrace(&p).is_err() as usize;
            let _ = import(&p, Format::Auto, &CsvSpec::default(), 4);
        });
    }
    assert!(
        rejected > 1000,
        "mutations must be caught: {rejected} rejected"
    );
}

#[test]
fn trace_importers_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let samples: Vec<(Format, &str, Vec<u8>)> = vec![
        (
            Format::Txt,
            "ids.txt",
            b"1\n2\n*\n3\n18446744073709551615\n".to_vec(),
        ),
        (
            Format::Csv,
            "ids.csv",
            b"id,table\n1,a\n2,b\n3,a\n".to_vec(),
        ),
        (
            Format::Criteo,
            "c.tsv",
            format!(
                "1\t{}\t{}\n0\t{}\t{}\n",
                "5\t".repeat(12) + "5",
                "68fd1e64\t".repeat(25) + "a",
                "\t".repeat(12),
                "\t".repeat(25)
            )
            .into_bytes(),
        ),
        (
            Format::Movielens,
            "u.data",
            b"196\t242\t3\t881250949\n186\t302\t3\t891717742\n".to_vec(),
        ),
        (
            Format::OracleGeneral,
            "x.oracleGeneral",
            (0..5u64)
                .flat_map(|i| {
                    let mut r = Vec::new();
                    r.extend_from_slice(&(i as u32).to_le_bytes());
                    r.extend_from_slice(&(i * 7).to_le_bytes());
                    r.extend_from_slice(&4096u32.to_le_bytes());
                    r.extend_from_slice(&(-1i64).to_le_bytes());
                    r
                })
                .collect(),
        ),
    ];
    let specs = [
        CsvSpec::default(),
        CsvSpec {
            id: "id".into(),
            table: Some("table".into()),
            header: true,
            delimiter: b',',
        },
        CsvSpec {
            id: "7".into(),
            table: Some("99".into()),
            header: false,
            delimiter: b'\t',
        },
    ];
    for (fmt, name, good) in &samples {
        let p = dir.path().join(name);
        std::fs::write(&p, good).unwrap();
        for seed in 0..(400 * scale()) as u64 {
            let mut rng = Rng(seed);
            let m = if seed == 0 {
                good.clone()
            } else {
                mutate(&mut rng, good)
            };
            std::fs::write(&p, &m).unwrap();
            let spec = &specs[below(&mut rng, specs.len())];
            let batch = [0, 1, 3, usize::MAX][below(&mut rng, 4)];
            no_panic(&format!("import {fmt:?}"), seed, &m, || {
                let _ = import(&p, *fmt, spec, batch);
                let _ = import(&p, Format::Auto, spec, batch);
            });
        }
    }
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
