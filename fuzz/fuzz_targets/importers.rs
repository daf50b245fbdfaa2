//! Every trace importer: the first byte picks the format and the CSV
//! options, the rest is the file.
#![no_main]
use embtier_sim::trace::{import, CsvSpec, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let (fmt, name) = match pick % 8 {
        0 => (Format::Txt, "ids.txt"),
        1 => (Format::Csv, "ids.csv"),
        2 => (Format::Criteo, "c.tsv"),
        3 => (Format::Movielens, "u.data"),
        4 => (Format::OracleGeneral, "x.oracleGeneral"),
        5 => (Format::Etrace, "t.etrace"),
        6 => (Format::Avazu, "a.csv"),
        _ => (Format::Auto, "any.txt"),
    };
    let spec = if pick & 0x80 != 0 {
        CsvSpec {
            id: "id".into(),
            table: Some("table".into()),
            header: Some(true),
            delimiter: b',',
        }
    } else {
        CsvSpec::default()
    };
    let dir = std::env::temp_dir().join(format!("embtier-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(name);
    if std::fs::write(&path, body).is_ok() {
        let _ = import(&path, fmt, &spec, 1 + (pick as usize >> 3));
    }
});
