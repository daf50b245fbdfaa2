//! The text readers (Criteo, Avazu, CSV with a column spec, one id per
//! line) against a plain reference on generated files: the reference reads
//! lines with `BufRead::lines`, splits them into `String`s and numbers each
//! table's values as strings with a `HashMap`, as the readers did before
//! they read bytes. Every access, batch and table must agree, over files
//! large enough to cross the readers' blocks (4 MiB) and chunks (4,096
//! records), with the oddities real files carry: CRLF endings, blank
//! lines, trimmed blanks, missing trailing fields, upper-case and
//! zero-padded hex, ids that are not hex at all, records with no access.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use embtier_sim::trace::{import, CsvSpec, Format, Trace};

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What a reader gives: `(table, row)` per access, the batches' ends, and
/// each table's name and rows.
type Seen = (Vec<(u32, u64)>, Vec<usize>, Vec<(String, u64)>);

fn seen(t: &Trace) -> Seen {
    (
        t.accesses.iter().map(|a| (a.table, a.row)).collect(),
        t.batch_ends.clone(),
        t.tables.iter().map(|t| (t.name.clone(), t.rows)).collect(),
    )
}

/// The reference's numbering: per table, values as strings.
#[derive(Default)]
struct Reference {
    ids: Vec<HashMap<String, u64>>,
    accesses: Vec<(u32, u64)>,
    ends: Vec<usize>,
    in_batch: usize,
    batch: usize,
}

impl Reference {
    fn new(tables: usize, batch: usize) -> Reference {
        Reference {
            ids: vec![HashMap::new(); tables],
            batch,
            ..Default::default()
        }
    }
    fn push(&mut self, t: usize, v: &str) {
        if t >= self.ids.len() {
            self.ids.resize(t + 1, HashMap::new());
        }
        let n = self.ids[t].len() as u64;
        let row = *self.ids[t].entry(v.to_string()).or_insert(n);
        self.accesses.push((t as u32, row));
    }
    fn end_sample(&mut self) {
        self.in_batch += 1;
        if self.in_batch == self.batch {
            self.close();
        }
    }
    fn close(&mut self) {
        if self.ends.last().copied().unwrap_or(0) != self.accesses.len() {
            self.ends.push(self.accesses.len());
        }
        self.in_batch = 0;
    }
    fn finish(mut self, names: Vec<String>) -> Seen {
        self.close();
        let tables = names
            .into_iter()
            .zip(&self.ids)
            .map(|(n, m)| (n, (m.len() as u64).max(1)))
            .collect();
        (self.accesses, self.ends, tables)
    }
}

fn lines(path: &Path) -> Vec<String> {
    use std::io::BufRead;
    std::io::BufReader::new(std::fs::File::open(path).unwrap())
        .lines()
        .map(Result::unwrap)
        .collect()
}

/// A line end: mostly LF, sometimes CRLF.
fn end(r: &mut Rng) -> &'static str {
    if r.chance(10) {
        "\r\n"
    } else {
        "\n"
    }
}

/// A hex value as Criteo files write it, or as damaged copies do.
fn hex_value(r: &mut Rng, bits: u32) -> String {
    let v = r.below(1 << bits) as u32;
    match r.below(20) {
        0 => format!("{v:X}"),
        1 => format!("{v:010x}"),
        2 => format!(" {v:x} "),
        3 => String::new(),
        4 => format!("\x0b{v:x}\u{a0}"),
        _ => format!("{v:08x}"),
    }
}

fn criteo_reference(path: &Path, batch: usize) -> Seen {
    let mut r = Reference::new(26, batch);
    let mut delim = '\t';
    for (i, line) in lines(path).iter().enumerate() {
        if i == 0 && line.starts_with("label,") {
            delim = ',';
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split(delim).collect();
        for (t, v) in cols[14..].iter().enumerate() {
            let v = v.trim();
            if !v.is_empty() {
                // Numbered by value, as the reader parses the hash.
                let n = u32::from_str_radix(v, 16).unwrap();
                r.push(t, &n.to_string());
            }
        }
        r.end_sample();
    }
    r.finish((1..=26).map(|t| format!("C{t}")).collect())
}

#[test]
fn criteo_matches_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    for (case, csv) in [(0u64, false), (1, true)] {
        let mut r = Rng(case + 11);
        let path = dir.path().join(format!("c{case}.txt"));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        if csv {
            let mut h = vec!["label".to_string()];
            h.extend((1..=13).map(|i| format!("I{i}")));
            h.extend((1..=26).map(|i| format!("C{i}")));
            writeln!(f, "{}", h.join(",")).unwrap();
        }
        let delim = if csv { "," } else { "\t" };
        for _ in 0..30_000 {
            if r.chance(2) {
                write!(f, "{}", end(&mut r)).unwrap();
                continue;
            }
            let mut cols: Vec<String> = (0..14).map(|i| (i * 3).to_string()).collect();
            // Some copies drop trailing empty fields.
            let cats = if r.chance(5) { 26 - r.below(27) } else { 26 };
            for t in 0..cats {
                // Skewed: a few bits for some tables, many for others.
                let bits = [4, 9, 14, 20, 26][(t % 5) as usize];
                cols.push(if r.chance(3) {
                    String::new()
                } else {
                    hex_value(&mut r, bits)
                });
            }
            write!(f, "{}{}", cols.join(delim), end(&mut r)).unwrap();
        }
        drop(f);
        assert!(std::fs::metadata(&path).unwrap().len() > 5 << 20);
        for batch in [1, 7, 4096] {
            let (t, _) = import(&path, Format::Criteo, &CsvSpec::default(), batch).unwrap();
            let want = criteo_reference(&path, batch);
            let got = seen(&t);
            assert_eq!(got.2, want.2, "case {case}, batch {batch}: tables");
            assert_eq!(got.1, want.1, "case {case}, batch {batch}: batches");
            assert!(got.0 == want.0, "case {case}, batch {batch}: accesses");
        }
    }
}

/// An id as a CSV might hold it: numbers, hex, zero-padded, upper case,
/// words, long strings.
fn csv_value(r: &mut Rng) -> String {
    let v = r.below(3000);
    match r.below(10) {
        0 => format!("{v:x}"),
        1 => format!("{v:05}"),
        2 => format!("{v:X}"),
        3 => format!("user-{v}"),
        4 => format!("{v:020}"),
        5 => format!(" {v} "),
        // Blanks `str::trim` takes and `trim_ascii` leaves.
        6 => format!("\u{a0}{v}\u{3000}"),
        7 => format!("\x0b{v}\u{85}"),
        _ => v.to_string(),
    }
}

fn csv_reference(path: &Path, id_col: usize, table_col: Option<usize>, batch: usize) -> Seen {
    let mut r = Reference::new(0, batch);
    let mut names: Vec<String> = Vec::new();
    for (i, line) in lines(path).iter().enumerate() {
        if i == 0 || line.trim().is_empty() {
            continue; // the header
        }
        let cols: Vec<&str> = line.split(',').collect();
        let name = table_col.map_or("", |c| cols[c].trim());
        let t = match names.iter().position(|n| n == name) {
            Some(t) => t,
            None => {
                names.push(name.to_string());
                names.len() - 1
            }
        };
        r.push(t, cols[id_col].trim());
        r.end_sample();
    }
    let names = names
        .into_iter()
        .map(|n| if n.is_empty() { "ids".into() } else { n })
        .collect();
    r.finish(names)
}

#[test]
fn csv_matches_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.csv");
    let mut r = Rng(5);
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(f, "time,table,key,size").unwrap();
    let tables = ["emb a", "b", "c", "  d  ", "\u{a0}b\u{2003}"];
    for i in 0..60_000u64 {
        if r.chance(1) {
            write!(f, "  {}", end(&mut r)).unwrap();
            continue;
        }
        let t = tables[r.below(5) as usize];
        write!(
            f,
            "{i},{t},{},{}{}",
            csv_value(&mut r),
            r.below(9),
            end(&mut r)
        )
        .unwrap();
    }
    drop(f);
    for (spec, id_col, table_col) in [
        ("id=key,table=table", 2, Some(1)),
        ("id=2", 2, None),
        ("id=size,table=1", 3, Some(1)),
    ] {
        let spec: CsvSpec = spec.parse().unwrap();
        for batch in [1, 13, 4096] {
            let (t, _) = import(&path, Format::Csv, &spec, batch).unwrap();
            let want = csv_reference(&path, id_col, table_col, batch);
            let got = seen(&t);
            assert_eq!(got.2, want.2, "{spec:?}, batch {batch}: tables");
            assert_eq!(got.1, want.1, "{spec:?}, batch {batch}: batches");
            assert!(got.0 == want.0, "{spec:?}, batch {batch}: accesses");
        }
    }
}

#[test]
fn avazu_matches_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.csv");
    let mut r = Rng(9);
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let names = ["C1", "banner_pos", "site_id", "app_id", "device_ip", "C14"];
    writeln!(f, "id,click,hour,{}", names.join(",")).unwrap();
    for i in 0..40_000u64 {
        let mut cols = vec![i.to_string(), "0".into(), "14102100".into()];
        for _ in &names {
            cols.push(csv_value(&mut r));
        }
        write!(f, "{}{}", cols.join(","), end(&mut r)).unwrap();
    }
    drop(f);
    let mut want = Reference::new(names.len(), 64);
    for line in lines(&path).iter().skip(1) {
        for (t, v) in line.split(',').skip(3).enumerate() {
            want.push(t, v.trim());
        }
        want.end_sample();
    }
    let want = want.finish(names.iter().map(|n| n.to_string()).collect());
    let (t, _) = import(&path, Format::Avazu, &CsvSpec::default(), 64).unwrap();
    let got = seen(&t);
    assert_eq!(got.2, want.2, "tables");
    assert_eq!(got.1, want.1, "batches");
    assert!(got.0 == want.0, "accesses");
}

#[test]
fn txt_matches_the_reference_plain_and_gzip() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = Rng(3);
    let mut text = String::new();
    for _ in 0..200_000 {
        match r.below(50) {
            0 => text.push_str("*\n"),
            1 => text.push_str("# a comment\n"),
            2 => text.push('\n'),
            3 => text.push_str(&format!(" +{} \r\n", r.below(1000))),
            4 => text.push_str(&format!("\u{2003}{}\x0b\n", r.below(1000))),
            _ => text.push_str(&format!("{}\n", r.below(1 << 18) * 1_000_003)),
        }
    }
    let mut want = Reference::new(1, 100);
    for line in text.lines() {
        let s = line.trim();
        if s.is_empty() || s.starts_with('*') || s.starts_with('#') {
            continue;
        }
        want.push(0, &s.parse::<u64>().unwrap().to_string());
        want.end_sample();
    }
    let want = want.finish(vec!["ids".into()]);
    let plain = dir.path().join("ids.txt");
    std::fs::write(&plain, &text).unwrap();
    let gz = dir.path().join("ids.txt.gz");
    let mut e = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    e.write_all(text.as_bytes()).unwrap();
    e.finish().unwrap();
    for p in [&plain, &gz] {
        let (t, _) = import(p, Format::Txt, &CsvSpec::default(), 100).unwrap();
        let got = seen(&t);
        assert_eq!(got.2, want.2, "{}: tables", p.display());
        assert_eq!(got.1, want.1, "{}: batches", p.display());
        assert!(got.0 == want.0, "{}: accesses", p.display());
    }
}

/// A bad record deep in a file (past the first chunks the parsing thread
/// hands on) is named by its line, and nothing is returned.
#[test]
fn a_bad_record_far_in_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.tsv");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let good: Vec<String> = (0..14)
        .map(|i| i.to_string())
        .chain((0..26).map(|t| format!("{:08x}", t * 977)))
        .collect();
    for _ in 0..20_000 {
        writeln!(f, "{}", good.join("\t")).unwrap();
    }
    let mut bad = good.clone();
    bad[20] = "nothex!".into();
    writeln!(f, "{}", bad.join("\t")).unwrap();
    for _ in 0..5_000 {
        writeln!(f, "{}", good.join("\t")).unwrap();
    }
    drop(f);
    let e = import(&path, Format::Criteo, &CsvSpec::default(), 64)
        .unwrap_err()
        .to_string();
    assert!(e.contains("record 20001") && e.contains("C7"), "{e}");
    let path = dir.path().join("bad.csv");
    let mut text = String::from("k\n");
    for i in 0..9_000 {
        text.push_str(&format!("{}\n", i % 100));
    }
    text.push_str("\n \n,\n");
    std::fs::write(&path, &text).unwrap();
    let e = import(&path, Format::Csv, &"id=k".parse().unwrap(), 64)
        .unwrap_err()
        .to_string();
    assert!(e.contains("record 9004") && e.contains("empty id"), "{e}");
}

/// Values are numbered by their bytes: a file in Latin-1 (not UTF-8),
/// with or without a header, reads without an error.
#[test]
fn values_need_not_be_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("latin1.csv");
    let body: &[u8] = b"caf\xe9,1\nna\xefve,2\ncaf\xe9,3\ncafe,4\n";
    for header in [&b""[..], b"name,n\n"] {
        std::fs::write(&path, [header, body].concat()).unwrap();
        let (t, _) = import(&path, Format::Csv, &CsvSpec::default(), 64).unwrap();
        let rows: Vec<u64> = t.accesses.iter().map(|a| a.row).collect();
        assert_eq!(rows, vec![0, 1, 0, 2], "header {header:?}");
        assert_eq!(t.tables[0].rows, 3);
    }
}

/// MovieLens: ratings in timestamp order (ties in file order), users and
/// items numbered as strings in that order; tabs, commas and spaces
/// separate, a RecBole header is skipped.
#[test]
fn movielens_matches_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.inter");
    let mut r = Rng(21);
    let mut text = String::from("user_id:token\titem_id:token\trating:float\ttimestamp:float\n");
    for _ in 0..50_000 {
        if r.chance(1) {
            text.push_str(" \n");
            continue;
        }
        let sep = ["\t", ",", " ", "  "][r.below(4) as usize];
        let ts = if r.chance(20) {
            format!("{}.5", r.below(1000))
        } else {
            r.below(2000).to_string()
        };
        let user = csv_value(&mut r);
        // A single colon is part of a value (IMDb-style ids, URLs); only
        // `::` separates, in ratings.dat.
        let item = if r.chance(10) {
            format!("tt:{}", r.below(700))
        } else {
            format!("i{}", r.below(700))
        };
        text.push_str(&format!(
            "{}{sep}{item}{sep}{}{sep}{ts}{}",
            user.trim(),
            r.below(5),
            end(&mut r)
        ));
    }
    std::fs::write(&path, &text).unwrap();
    let mut recs: Vec<(f64, String, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if i == 0 || line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line
            .split(['\t', ',', ' '])
            .filter(|c| !c.is_empty())
            .collect();
        recs.push((cols[3].parse().unwrap(), cols[0].into(), cols[1].into()));
    }
    recs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut want = Reference::new(2, 32);
    for (_, u, it) in &recs {
        want.push(0, u);
        want.push(1, it);
        want.end_sample();
    }
    let want = want.finish(vec!["users".into(), "items".into()]);
    let (t, _) = import(&path, Format::Movielens, &CsvSpec::default(), 32).unwrap();
    let got = seen(&t);
    assert_eq!(got.2, want.2, "tables");
    assert_eq!(got.1, want.1, "batches");
    assert!(got.0 == want.0, "accesses");
}

/// The MovieLens layouts beside ml-100k's: ml-1m's `ratings.dat` (`::`)
/// and ml-25m's `ratings.csv` (with its header) are found by name or
/// first line and read alike; a timestamp that is not a number past the
/// first line is an error naming its line.
#[test]
fn movielens_dat_and_csv_layouts() {
    let dir = tempfile::tempdir().unwrap();
    let rows = [(1, 10, 300), (2, 10, 100), (1, 11, 200), (3, 12, 100)];
    let dat = dir.path().join("ratings.dat");
    let csv = dir.path().join("ratings.csv");
    let mut d = String::new();
    let mut c = String::from("userId,movieId,rating,timestamp\n");
    for (u, i, t) in rows {
        d.push_str(&format!("{u}::{i}::4::{t}\n"));
        c.push_str(&format!("{u},{i},4.5,{t}\r\n"));
    }
    std::fs::write(&dat, d).unwrap();
    std::fs::write(&csv, &c).unwrap();
    for p in [&dat, &csv] {
        let (t, f) = import(p, Format::Auto, &CsvSpec::default(), 8).unwrap();
        assert_eq!(f, Format::Movielens, "{}", p.display());
        // By time: (2,10,100), (3,12,100), (1,11,200), (1,10,300).
        let got: Vec<(u32, u64)> = t.accesses.iter().map(|a| (a.table, a.row)).collect();
        assert_eq!(
            got,
            vec![
                (0, 0),
                (1, 0),
                (0, 1),
                (1, 1),
                (0, 2),
                (1, 2),
                (0, 2),
                (1, 0)
            ],
            "{}",
            p.display()
        );
    }
    c.push_str("4,13,3,soon\n");
    std::fs::write(&csv, &c).unwrap();
    let e = import(&csv, Format::Auto, &CsvSpec::default(), 8)
        .unwrap_err()
        .to_string();
    assert!(e.contains("record 6") && e.contains("soon"), "{e}");
    // A first line with a numeric rating is data, not a header: its bad
    // timestamp is an error too.
    std::fs::write(&csv, "4,13,3,soon\n1,10,4,300\n").unwrap();
    let e = import(&csv, Format::Movielens, &CsvSpec::default(), 8)
        .unwrap_err()
        .to_string();
    assert!(e.contains("record 1") && e.contains("soon"), "{e}");
}

/// A binary file read as text has "lines" of kilobytes: the error names
/// the record and shows the start of the value, on one short line.
#[test]
fn a_long_bad_value_is_cut_in_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bin.txt");
    let mut bytes = b"12\n".to_vec();
    bytes.extend((0..20_000u32).map(|i| (i % 200 + 14) as u8));
    std::fs::write(&path, &bytes).unwrap();
    let e = import(&path, Format::Txt, &CsvSpec::default(), 8)
        .unwrap_err()
        .to_string();
    assert!(e.contains("record 2") && e.contains("(20000 bytes)"), "{e}");
    assert!(e.len() < 400 && !e.contains('\n'), "{} bytes: {e}", e.len());
}

/// What `import` reads of `text` written to `name`: (accesses, distinct
/// rows of each table), or the error's text.
fn read_text(
    dir: &Path,
    name: &str,
    text: &[u8],
    format: Format,
    spec: &str,
) -> Result<(usize, Vec<u64>, Format), String> {
    let p = dir.join(name);
    if name.ends_with(".gz") {
        let mut e = flate2::write::GzEncoder::new(
            std::fs::File::create(&p).unwrap(),
            flate2::Compression::fast(),
        );
        e.write_all(text).unwrap();
        e.finish().unwrap();
    } else {
        std::fs::write(&p, text).unwrap();
    }
    let spec: CsvSpec = spec.parse().unwrap();
    import(&p, format, &spec, 64)
        .map(|(t, f)| {
            (
                t.accesses.len(),
                t.tables.iter().map(|t| t.rows).collect(),
                f,
            )
        })
        .map_err(|e| e.to_string())
}

/// A header with a trailing delimiter is still a header; a file that is
/// only a header has no accesses; a column named where no header was
/// detected says so (not "the spec says header=no").
#[test]
fn headers_with_a_trailing_delimiter_or_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    assert_eq!(
        read_text(d, "t5.csv", b"id,\n1,\n2,\n1,\n", Format::Csv, "").unwrap(),
        (3, vec![2], Format::Csv)
    );
    let mut text = String::from("table,id,seq,\n");
    for i in 0..400 {
        text.push_str(&format!("t{},{},{i},\n", i % 2, i % 50));
    }
    let (n, rows, _) = read_text(
        d,
        "trail.csv",
        text.as_bytes(),
        Format::Auto,
        "id=id,table=table",
    )
    .unwrap();
    assert_eq!((n, rows.iter().sum::<u64>()), (400, 50));
    assert_eq!(
        read_text(d, "trail.csv", text.as_bytes(), Format::Auto, "id=1")
            .unwrap()
            .0,
        400
    );
    for only in [
        &b"table,id,seq\n"[..],
        b"table,id,seq",
        b"table,id,seq,\r\n",
        b"table,id,seq\n\n",
        b"\n  \ntable,id,seq\n \n",
    ] {
        let e = read_text(d, "only.csv", only, Format::Auto, "").unwrap_err();
        assert!(e.contains("no accesses"), "{only:?}: {e}");
    }
    // Blank lines before the header: it is still the header.
    assert_eq!(
        read_text(
            d,
            "blank.csv",
            b"\n \nid,x\n1,a\n\n2,b\n1,c\n",
            Format::Csv,
            "id=id"
        )
        .unwrap(),
        (3, vec![2], Format::Csv)
    );
    let e = read_text(d, "nohead.csv", b"1,2\n3,4\n", Format::Csv, "id=id").unwrap_err();
    assert!(e.contains("no header") && !e.contains("header=no"), "{e}");
    let e = read_text(d, "dup.csv", b"id,id,seq\n1,2,3\n", Format::Csv, "id=id").unwrap_err();
    assert!(e.contains("columns 0 and 1"), "{e}");
    let e = "id=1,id=2".parse::<CsvSpec>().unwrap_err();
    assert!(e.contains("twice"), "{e}");
}

/// A UTF-8 byte-order mark before the first line is not part of it, in
/// every text reader and in the detection of the format.
#[test]
fn a_byte_order_mark_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bom = "\u{feff}";
    let csv = format!("{bom}table,id\nA,1\nA,2\nB,1\n");
    assert_eq!(
        read_text(
            d,
            "b.csv",
            csv.as_bytes(),
            Format::Auto,
            "id=id,table=table"
        )
        .unwrap(),
        (3, vec![2, 1], Format::Csv)
    );
    assert_eq!(
        read_text(
            d,
            "b.txt",
            format!("{bom}8\n9\n8\n").as_bytes(),
            Format::Txt,
            ""
        )
        .unwrap(),
        (3, vec![2], Format::Txt)
    );
    let mut h = vec!["label".to_string()];
    h.extend((1..=13).map(|i| format!("I{i}")));
    h.extend((1..=26).map(|i| format!("C{i}")));
    let row: Vec<String> = (0..14)
        .map(|i| i.to_string())
        .chain((0..26).map(|t| format!("{:08x}", t)))
        .collect();
    let crit = format!(
        "{bom}{}\n{}\n{}\n",
        h.join(","),
        row.join(","),
        row.join(",")
    );
    let (n, _, f) = read_text(d, "crit.csv", crit.as_bytes(), Format::Auto, "").unwrap();
    assert_eq!((n, f), (52, Format::Criteo));
    let tsv = format!("{bom}{}\n", row.join("\t"));
    let (n, _, f) = read_text(d, "crit.tsv", tsv.as_bytes(), Format::Auto, "").unwrap();
    assert_eq!((n, f), (26, Format::Criteo));
}

/// A gzip file is detected by what it holds, and a compressed binary
/// trace is refused with a message saying so (not read as records).
#[test]
fn gzip_files_are_detected_by_their_contents() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let csv = b"table,id\nA,1\nA,2\nB,1\n";
    assert_eq!(
        read_text(d, "plain.csv.gz", csv, Format::Auto, "id=id,table=table").unwrap(),
        (3, vec![2, 1], Format::Csv)
    );
    let row: Vec<String> = (0..14)
        .map(|i| i.to_string())
        .chain((0..26).map(|t| format!("{:08x}", t)))
        .collect();
    let tsv = format!("{}\n{}\n", row.join("\t"), row.join("\t"));
    let (n, _, f) = read_text(d, "day.tsv.gz", tsv.as_bytes(), Format::Auto, "").unwrap();
    assert_eq!((n, f), (52, Format::Criteo));
    // 1,000 oracleGeneral records, compressed: refused, by detection and
    // by the reader.
    let mut og = Vec::new();
    for i in 0..1000u64 {
        og.extend_from_slice(&(i as u32).to_le_bytes());
        og.extend_from_slice(&(i % 37).to_le_bytes());
        og.extend_from_slice(&1u32.to_le_bytes());
        og.extend_from_slice(&(-1i64).to_le_bytes());
    }
    for format in [Format::Auto, Format::OracleGeneral] {
        let e = read_text(d, "t.oracleGeneral.bin.gz", &og, format, "").unwrap_err();
        assert!(
            e.contains("gzip") && e.contains("decompress"),
            "{format:?}: {e}"
        );
    }
    // A plain oracleGeneral file whose first time spells gzip's magic
    // number (0x1f 0x8b 0x08) is records, not gzip.
    og[..4].copy_from_slice(&0x0008_8b1fu32.to_le_bytes());
    assert_eq!(
        read_text(d, "m.oracleGeneral.bin", &og, Format::Auto, "").unwrap(),
        (1000, vec![37], Format::OracleGeneral)
    );
    // A gzip file without `.gz` is read decompressed, as it is detected;
    // `NAME.gz` of one id a line is txt, comments and signs included.
    assert_eq!(
        read_text(
            d,
            "hidden.csv",
            &gzip(csv),
            Format::Auto,
            "id=id,table=table"
        )
        .unwrap(),
        (3, vec![2, 1], Format::Csv)
    );
    assert_eq!(
        read_text(d, "ids.gz", b"# ids\n+7\n8\n7\n", Format::Auto, "").unwrap(),
        (3, vec![2], Format::Txt)
    );
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// Quoted CSV fields (RFC 4180) are read as their text: a delimiter or a
/// doubled quote inside quotes is part of the value, in the header and
/// in the records; a line whose quote does not close is split plainly.
#[test]
fn quoted_fields_are_unquoted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut text = String::from("\"table\",\"id\",seq\n");
    let mut plain = String::from("table,id,seq\n");
    for i in 0..300 {
        let (t, id) = (["y,z", "x", "say \"hi\""][i % 3], i % 17);
        let q = format!("\"{}\"", t.replace('"', "\"\""));
        text.push_str(&format!("{q},\"{id}\",{i}\n"));
        plain.push_str(&format!("{},{id},{i}\n", t.replace([',', '"'], "_")));
    }
    let p = d.join("q.csv");
    std::fs::write(&p, &text).unwrap();
    let spec: CsvSpec = "id=id,table=table".parse().unwrap();
    let (t, _) = import(&p, Format::Csv, &spec, 64).unwrap();
    let names: Vec<&str> = t.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["y,z", "x", "say \"hi\""]);
    let q = d.join("plain.csv");
    std::fs::write(&q, &plain).unwrap();
    let (want, _) = import(&q, Format::Csv, &spec, 64).unwrap();
    assert_eq!(seen(&t).0, seen(&want).0);
    assert_eq!(seen(&t).1, seen(&want).1);
    // A quote that does not close on its line: the line is split at
    // every delimiter, as before quotes were read.
    std::fs::write(&p, "table,id\nx,1\n\"x,2\ny,\"draft\n").unwrap();
    let (t, _) = import(&p, Format::Csv, &spec, 64).unwrap();
    let names: Vec<&str> = t.tables.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["x", "\"x", "y"]);
}
