//! Arbitrary-bytes property tests for the trace parsers: the `.etrace`
//! reader and each trace importer. Inputs are random bytes and mutations
//! (bit flips, overwrites, truncations, splices) of valid encodings. Every
//! input must give `Ok` or a typed error: a panic fails the test and prints
//! the seed and case that caused it. The engine's parsers have theirs in
//! `tests/arbitrary_bytes.rs`; both use the mutations of
//! `tests/common/inputs.rs`.
//!
//! `EMBTIER_ARBITRARY_ITERS` scales the number of cases (default 1).

use embtier::format::trace::{Access, AccessKind, TraceTable};
use embtier_sim::trace::{import, CsvSpec, Format, Trace};

#[path = "../../tests/common/inputs.rs"]
mod inputs;

use inputs::{below, mutate, no_panic, scale, Rng};

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
            Format::Avazu,
            "a.csv",
            b"id,click,hour,C1,site_id\n1,0,14102100,1005,1fbe01fe\n2,1,14102100,1002,85f751fd\n"
                .to_vec(),
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
            header: Some(true),
            delimiter: b',',
        },
        CsvSpec {
            id: "7".into(),
            table: Some("99".into()),
            header: Some(false),
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
