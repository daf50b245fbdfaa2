//! Importers on the shared real traces (each test skips, saying so, when the
//! file is absent), and the `.etrace` round trip.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use embtier_sim::trace::{import, import_noting, CsvSpec, Format, Trace};

fn shared(name: &str) -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/traces")
        .join(name);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("SKIP: {} is absent", p.display());
        None
    }
}

fn unique_per_table(t: &Trace) -> Vec<usize> {
    let mut sets = vec![HashSet::new(); t.tables.len()];
    for a in &t.accesses {
        sets[a.table as usize].insert(a.row);
    }
    sets.iter().map(|s| s.len()).collect()
}

#[test]
fn oracle_general_cloudphysics() {
    let Some(p) = shared("cloudPhysicsIO.oracleGeneral.bin") else {
        return;
    };
    let (t, f) = import(&p, Format::Auto, &CsvSpec::default(), 4096).unwrap();
    assert_eq!(f, Format::OracleGeneral);
    // Facts from the traces README.
    assert_eq!(t.accesses.len(), 113_872);
    assert_eq!(t.tables[0].rows, 48_974);
    assert_eq!(unique_per_table(&t), vec![48_974]);
    assert_eq!(t.batch_ends.len(), 113_872usize.div_ceil(4096));
}

#[test]
fn csv_cloudphysics_matches_the_binary() {
    let (Some(csv), Some(bin)) = (
        shared("cloudPhysicsIO.csv"),
        shared("cloudPhysicsIO.oracleGeneral.bin"),
    ) else {
        return;
    };
    let spec: CsvSpec = "id=lbn,header=yes".parse().unwrap();
    let (a, f) = import(&csv, Format::Auto, &spec, 1).unwrap();
    assert_eq!(f, Format::Csv);
    let (b, _) = import(&bin, Format::OracleGeneral, &CsvSpec::default(), 1).unwrap();
    assert_eq!(a.accesses.len(), b.accesses.len());
    // Dense ids in order of first appearance: identical sequences.
    assert!(a
        .accesses
        .iter()
        .zip(&b.accesses)
        .all(|(x, y)| x.row == y.row));
}

/// The CSV reader detects the header by default, and says when the id
/// column it was given (column 0 by default) looks constant or like a
/// counter: on cloudPhysicsIO.csv column 0 is `version`, always 1.
#[test]
fn csv_headers_are_detected_and_doubtful_ids_named() {
    if let (Some(csv), Some(bin)) = (
        shared("cloudPhysicsIO.csv"),
        shared("cloudPhysicsIO.oracleGeneral.bin"),
    ) {
        let i = import_noting(&csv, Format::Auto, &CsvSpec::default(), 1).unwrap();
        assert_eq!(i.format, Format::Csv);
        assert_eq!(
            i.trace.accesses.len(),
            113_872,
            "the header is not a record"
        );
        assert!(i
            .notes
            .iter()
            .any(|n| !n.warning && n.text.contains("header")));
        let w: Vec<&str> = i
            .notes
            .iter()
            .filter(|n| n.warning)
            .map(|n| n.text.as_str())
            .collect();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("column 0 (version)") && w[0].contains("looks constant"),
            "{w:?}"
        );
        assert!(
            w[0].contains("lbn"),
            "names the columns to choose from: {w:?}"
        );
        // With the id named, and the header detected, it matches the binary.
        let spec: CsvSpec = "id=lbn".parse().unwrap();
        let a = import_noting(&csv, Format::Auto, &spec, 1).unwrap();
        assert!(a.notes.iter().all(|n| !n.warning), "{:?}", a.notes);
        let (b, _) = import(&bin, Format::OracleGeneral, &CsvSpec::default(), 1).unwrap();
        assert!(a
            .trace
            .accesses
            .iter()
            .map(|x| x.row)
            .eq(b.accesses.iter().map(|x| x.row)));
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.csv");
    // No header: numbers throughout, ids repeating.
    let body: String = (0..50).map(|i| format!("{},{}\n", i % 7, i)).collect();
    std::fs::write(&p, &body).unwrap();
    let i = import_noting(&p, Format::Auto, &CsvSpec::default(), 10).unwrap();
    assert!(i.notes.is_empty(), "{:?}", i.notes);
    assert_eq!(i.trace.accesses.len(), 50);
    // A row counter as the id.
    let spec: CsvSpec = "id=1".parse().unwrap();
    let i = import_noting(&p, Format::Auto, &spec, 10).unwrap();
    assert!(
        i.notes
            .iter()
            .any(|n| n.warning && n.text.contains("row counter")),
        "{:?}",
        i.notes
    );
    // A header named by the spec is read as one; header=no reads it as data.
    std::fs::write(&p, format!("key,n\n{body}")).unwrap();
    let i = import_noting(&p, Format::Auto, &"id=key".parse().unwrap(), 10).unwrap();
    assert_eq!(i.trace.accesses.len(), 50);
    let i = import_noting(&p, Format::Csv, &"header=no".parse().unwrap(), 10).unwrap();
    assert_eq!(i.trace.accesses.len(), 51);
}

/// Avazu: detected by its header, one table per categorical column after
/// id, click and hour, a sample per line.
#[test]
fn avazu_sample() {
    let Some(p) = shared("avazu_sample.csv") else {
        return;
    };
    let (t, f) = import(&p, Format::Auto, &CsvSpec::default(), 10).unwrap();
    assert_eq!(f, Format::Avazu);
    let names: Vec<&str> = t.tables.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names.len(), 21);
    assert_eq!((names[0], names[1], names[20]), ("C1", "banner_pos", "C21"));
    // Facts of the file: 100 samples (the header aside), a value in every column.
    assert_eq!(t.accesses.len(), 100 * 21);
    assert_eq!(t.batch_ends.len(), 10);
    let text = std::fs::read_to_string(&p).unwrap();
    for (k, table) in t.tables.iter().enumerate() {
        let distinct: HashSet<&str> = text
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(3 + k).unwrap())
            .collect();
        assert_eq!(table.rows, distinct.len() as u64, "{}", table.name);
    }
}

#[test]
fn lirs_gzip_txt() {
    for name in ["lirs_loop.trace.gz", "lirs_sprite.trace.gz"] {
        let Some(p) = shared(name) else { continue };
        let (t, f) = import(&p, Format::Auto, &CsvSpec::default(), 1000).unwrap();
        assert_eq!(f, Format::Txt);
        // Independent count: non-separator lines, distinct values.
        let mut s = String::new();
        use std::io::Read;
        flate2_read(&p).read_to_string(&mut s).unwrap();
        let ids: Vec<&str> = s
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('*'))
            .collect();
        assert_eq!(t.accesses.len(), ids.len(), "{name}");
        assert_eq!(
            t.tables[0].rows as usize,
            ids.iter().collect::<HashSet<_>>().len(),
            "{name}"
        );
    }
}

fn flate2_read(p: &Path) -> impl std::io::Read {
    // The test decodes independently of the importer, with the gzip CLI.
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(p)
        .output()
        .unwrap();
    std::io::Cursor::new(out.stdout)
}

#[test]
fn movielens_100k() {
    let Some(p) = shared("ml-100k.inter") else {
        return;
    };
    let (t, f) = import(&p, Format::Auto, &CsvSpec::default(), 256).unwrap();
    assert_eq!(f, Format::Movielens);
    assert_eq!(t.tables.len(), 2);
    assert_eq!((t.tables[0].rows, t.tables[1].rows), (943, 1682));
    assert_eq!(t.accesses.len(), 200_000);
    assert_eq!(t.batch_ends.len(), 100_000usize.div_ceil(256));
}

fn criteo_expected(p: &Path, delim: char, skip_header: bool) -> (Vec<usize>, usize) {
    let text = std::fs::read_to_string(p).unwrap();
    let mut sets = vec![HashSet::new(); 26];
    let mut accesses = 0;
    for line in text.lines().skip(skip_header as usize) {
        let cols: Vec<&str> = line.split(delim).collect();
        for (i, v) in cols[14..].iter().enumerate() {
            if !v.is_empty() {
                sets[i].insert(v.to_string());
                accesses += 1;
            }
        }
    }
    (sets.iter().map(|s| s.len()).collect(), accesses)
}

#[test]
fn criteo_tsv_and_csv() {
    for (name, delim, header) in [
        ("criteo-train-head1000.tsv", '\t', false),
        ("criteo_sample.csv", ',', true),
    ] {
        let Some(p) = shared(name) else { continue };
        let (t, f) = import(&p, Format::Auto, &CsvSpec::default(), 128).unwrap();
        assert_eq!(f, Format::Criteo, "{name}");
        assert_eq!(t.tables.len(), 26);
        let (rows, accesses) = criteo_expected(&p, delim, header);
        let got: Vec<usize> = t.tables.iter().map(|t| t.rows as usize).collect();
        assert_eq!(got, rows, "{name}: rows per table");
        assert_eq!(t.accesses.len(), accesses, "{name}");
        assert_eq!(t.tables[0].name, "C1");
    }
}

#[test]
fn etrace_round_trip_and_compactness() {
    let Some(p) = shared("criteo-train-head1000.tsv") else {
        return;
    };
    let (t, _) = import(&p, Format::Criteo, &CsvSpec::default(), 64).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.etrace");
    let bytes = t.write_etrace(&out).unwrap();
    let per = bytes as f64 / t.accesses.len() as f64;
    println!(
        "criteo head: {} accesses, {bytes} bytes, {per:.2} bytes per access",
        t.accesses.len()
    );
    assert!(per <= 5.0);
    let (back, f) = import(&out, Format::Auto, &CsvSpec::default(), 1).unwrap();
    assert_eq!(f, Format::Etrace);
    assert_eq!(back, t);
}

#[test]
fn bad_inputs_name_the_file_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ids.txt");
    std::fs::write(&p, "1\n2\nthree\n").unwrap();
    let e = import(&p, Format::Txt, &CsvSpec::default(), 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ids.txt") && e.contains("record 3"), "{e}");
    let p = dir.path().join("og.bin");
    std::fs::write(&p, [0u8; 50]).unwrap();
    let e = import(&p, Format::OracleGeneral, &CsvSpec::default(), 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("og.bin") && e.contains("record 3"), "{e}");
    let p = dir.path().join("empty.txt");
    std::fs::write(&p, "").unwrap();
    assert!(import(&p, Format::Txt, &CsvSpec::default(), 1)
        .unwrap_err()
        .to_string()
        .contains("no accesses"));
    let p = dir.path().join("x.csv");
    std::fs::write(&p, "a,b\n1,2\n").unwrap();
    let spec: CsvSpec = "id=c,header=yes".parse().unwrap();
    let e = import(&p, Format::Csv, &spec, 1).unwrap_err().to_string();
    assert!(e.contains("no column \"c\""), "{e}");
    assert!("id".parse::<CsvSpec>().is_err());
    assert!("bogus"
        .parse::<Format>()
        .unwrap_err()
        .contains("oracle-general"));
    let p = dir.path().join("t.etrace");
    std::fs::write(&p, b"ETRACE\0\x01garbage").unwrap();
    let e = import(&p, Format::Auto, &CsvSpec::default(), 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("t.etrace"), "{e}");
}

/// The block reader of oracleGeneral against a plain model: records over
/// several blocks (and a partial one), ids numbered in order of first
/// appearance, batches of the requested size; a torn record is an error
/// naming the record.
#[test]
fn oracle_general_blocks_match_a_plain_reader() {
    use std::collections::HashMap;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.oracleGeneral.bin");
    let n = 3 * 65_536 + 123;
    let mut x = 5u64;
    let mut bytes = Vec::with_capacity(n * 24);
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let id = match x >> 62 {
            0 => u64::MAX - (x >> 50) % 7,
            1 => (x >> 33) % 5000,
            _ => (x >> 20) % 200_000 * 0x1_0000_0001,
        };
        ids.push(id);
        bytes.extend_from_slice(&(i as u32).to_le_bytes());
        bytes.extend_from_slice(&id.to_le_bytes());
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&(-1i64).to_le_bytes());
    }
    std::fs::write(&path, &bytes).unwrap();
    let mut m: HashMap<u64, u64> = HashMap::new();
    let want: Vec<u64> = ids
        .iter()
        .map(|k| {
            let next = m.len() as u64;
            *m.entry(*k).or_insert(next)
        })
        .collect();
    let (t, f) = import(&path, Format::OracleGeneral, &CsvSpec::default(), 1000).unwrap();
    assert_eq!(f, Format::OracleGeneral);
    let got: Vec<u64> = t.accesses.iter().map(|a| a.row).collect();
    assert_eq!(got, want);
    assert!(t.accesses.iter().all(|a| a.table == 0));
    assert_eq!(t.tables[0].rows, m.len() as u64);
    let ends: Vec<usize> = (1..=n / 1000)
        .map(|b| b * 1000)
        .chain(std::iter::once(n))
        .collect();
    assert_eq!(t.batch_ends, ends);
    std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
    let e = import(&path, Format::OracleGeneral, &CsvSpec::default(), 1000)
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("record {n}")), "{e}");
}

/// One id per line: CRLF and LF, blank, `*` and `#` lines skipped, ids
/// numbered in order of first appearance; a bad line names its number.
#[test]
fn txt_lines_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ids.txt");
    std::fs::write(
        &path,
        "7\r\n*\n# note\n\n18446744073709551615\n7\n  3  \r\n3\n",
    )
    .unwrap();
    let (t, _) = import(&path, Format::Txt, &CsvSpec::default(), 2).unwrap();
    let rows: Vec<u64> = t.accesses.iter().map(|a| a.row).collect();
    assert_eq!(rows, vec![0, 1, 0, 2, 2]);
    assert_eq!(t.tables[0].rows, 3);
    assert_eq!(t.batch_ends, vec![2, 4, 5]);
    std::fs::write(&path, "1\n2\n\n-4\n").unwrap();
    let e = import(&path, Format::Txt, &CsvSpec::default(), 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("record 4"), "{e}");
}

/// A file of whole 24-byte records that are not oracleGeneral records (a
/// CSV read with `--format oracle-general`) is refused at the first
/// record whose next-access time is neither -1 (nor `i64::MAX`, which
/// libCacheSim reads as none) nor a later request, by every reader of the
/// format; real next-access times, past the file's end too (a trace cut
/// short), are read.
#[test]
fn records_that_are_not_oracle_general_are_refused() {
    use embtier_sim::trace::{import_stream, oracle_general_batches};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.oracleGeneral.bin");
    let record = |i: u32, id: u64, next: i64| {
        let mut r = Vec::new();
        r.extend_from_slice(&i.to_le_bytes());
        r.extend_from_slice(&id.to_le_bytes());
        r.extend_from_slice(&512u32.to_le_bytes());
        r.extend_from_slice(&next.to_le_bytes());
        r
    };
    // Good: -1, i64::MAX, a later request, and one past the end.
    let good: Vec<u8> = [
        record(0, 9, 2),
        record(1, 8, -1),
        record(2, 9, i64::MAX),
        record(3, 7, 1_000_000),
    ]
    .concat();
    std::fs::write(&path, &good).unwrap();
    let (t, _) = import(&path, Format::OracleGeneral, &CsvSpec::default(), 2).unwrap();
    assert_eq!(t.accesses.len(), 4);
    let read_all = |p: &Path| -> Vec<String> {
        let mut errs = vec![
            import(p, Format::OracleGeneral, &CsvSpec::default(), 2)
                .map(|_| ())
                .unwrap_err()
                .to_string(),
            oracle_general_batches(p, 2, |_, _| {}, |_| {})
                .unwrap_err()
                .to_string(),
        ];
        errs.push(
            import_stream(p, Format::OracleGeneral, &CsvSpec::default(), 2, |_| {})
                .map(|_| ())
                .unwrap_err()
                .to_string(),
        );
        errs
    };
    // Bad: a next-access time at or before its own request, or negative.
    for (k, next) in [(2u32, 1i64), (3, 3), (1, -2)] {
        let mut bad = good.clone();
        bad[k as usize * 24 + 16..k as usize * 24 + 24].copy_from_slice(&next.to_le_bytes());
        std::fs::write(&path, &bad).unwrap();
        for e in read_all(&path) {
            assert!(e.contains(&format!("record {}", k + 1)), "{e}");
            assert!(
                e.contains(&next.to_string()) && e.contains("oracleGeneral"),
                "{e}"
            );
        }
    }
    // 100 records of CSV text.
    let text: Vec<u8> = b"1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23\n"
        .iter()
        .copied()
        .cycle()
        .take(2400)
        .collect();
    std::fs::write(&path, &text).unwrap();
    for e in read_all(&path) {
        assert!(e.contains("record 1:"), "{e}");
    }
}
