//! emb-locality as a new user met it (a first-day review): a sampling
//! rate that samples nothing, `convert` onto its own input, and a table
//! name that needs quoting in the CSV report.

mod common;

use common::{gen_trace, locality as bin, stderr};

/// A rate that samples no access leaves no curve: `analyze` and `plan`
/// refuse it (exit 1), naming `--sample` and a rate that would do; a
/// rate that samples a few hundred warns that the curve is rough.
#[test]
fn a_sample_that_samples_nothing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t.etrace");
    gen_trace(&t, 40, 256, Some("a:5000:1:1.0"));
    let t = t.to_str().unwrap();
    for args in [
        &["analyze", t, "--sample", "1e-9"][..],
        &["plan", t, "--dram", "64KiB", "--sample", "1e-9"],
    ] {
        let o = bin(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert!(
            e.contains("--sample sampled 0 of the 10240 accesses") && e.contains("sample more"),
            "{args:?}: {e}"
        );
    }
    let o = bin(&["analyze", t, "--sample", "0.02"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the curves are rough"),
        "{}",
        stderr(&o)
    );
    // A table the sample missed: its curve is the bound (every access a
    // miss below its distinct rows), not "no misses", and a warning
    // names it.
    let two = dir.path().join("two.etrace");
    gen_trace(&two, 40, 256, Some("big:200000:4:0.6,tiny:3:1:0.0"));
    let o = bin(&[
        "analyze",
        two.to_str().unwrap(),
        "--sample",
        "0.05",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("sampled none of the accesses of 1 table(s) (tiny)"),
        "{}",
        stderr(&o)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let tiny = &v["tables"][1];
    assert_eq!(tiny["mrc_sampled_references"], 0);
    for p in tiny["mrc"].as_array().unwrap() {
        let (rows, m) = (
            p["cache_rows"].as_u64().unwrap(),
            p["miss_ratio"].as_f64().unwrap(),
        );
        if rows < 3 {
            assert_eq!(m, 1.0, "{p}");
        } else {
            assert!(m > 0.0 && m < 0.01, "{p}");
        }
    }
    let o = bin(&["analyze", t, "--sample", "1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("rough"), "{}", stderr(&o));
}

/// `convert X X` (or through another name of X) would overwrite the
/// trace it reads: a usage error, and the file is left as it was.
#[test]
fn convert_refuses_to_write_over_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ids.txt");
    std::fs::write(&p, "1\n2\n1\n").unwrap();
    let same = dir.path().join(".").join("ids.txt");
    for out in [&p, &same] {
        let o = bin(&["convert", p.to_str().unwrap(), out.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("the output is the input"),
            "{}",
            stderr(&o)
        );
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "1\n2\n1\n");
    }
    let out = dir.path().join("ids.etrace");
    let o = bin(&["convert", p.to_str().unwrap(), out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// Cells of a CSV line, quotes respected.
fn cells(l: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = l.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// A table named with a comma (quoted in the input) is one quoted cell
/// of `analyze --csv`: every line has the header's cells.
#[test]
fn csv_report_quotes_table_names() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("t.csv");
    let mut text = String::from("table,id\n");
    for i in 0..200 {
        let t = if i % 2 == 0 { "\"a,b\"" } else { "c" };
        text.push_str(&format!("{t},{}\n", i % 7));
    }
    std::fs::write(&p, &text).unwrap();
    let o = bin(&[
        "analyze",
        p.to_str().unwrap(),
        "--columns",
        "id=id,table=table",
        "--csv",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let width = cells(out.lines().next().unwrap()).len();
    let mut named = 0;
    for l in out.lines().skip(1) {
        let c = cells(l);
        assert_eq!(c.len(), width, "{l}");
        named += usize::from(c[0] == "a,b");
    }
    assert!(named > 0, "no row of table a,b:\n{out}");
}

/// `plan --json` names the shares as `run --json` does, and gives each
/// cached table the bytes and rows its table and store.toml give.
#[test]
fn plan_json_agrees_with_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t.etrace");
    gen_trace(&t, 60, 256, Some("a:20000:2:1.0,b:9000:1:0.8"));
    let t = t.to_str().unwrap();
    let args = ["plan", t, "--dram", "1000KiB", "--pmem", "3000KiB"];
    let json = bin(&[&args[..], &["--json"]].concat());
    assert_eq!(json.status.code(), Some(0), "{}", stderr(&json));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(
        v.get("dram_hit_ratio").is_none() && v["dram_share"].is_f64(),
        "{v}"
    );
    let csv = bin(&[&args[..], &["--csv"]].concat());
    assert_eq!(csv.status.code(), Some(0), "{}", stderr(&csv));
    let csv = String::from_utf8(csv.stdout).unwrap();
    let head = cells(csv.lines().next().unwrap());
    let col = |name: &str| head.iter().position(|h| h == name).unwrap();
    let mut checked = 0;
    for (l, tp) in csv.lines().skip(1).zip(v["tables"].as_array().unwrap()) {
        let c = cells(l);
        assert_eq!(c[0], tp["name"].as_str().unwrap());
        if c[col("placement")] != "cached" {
            continue;
        }
        for (csv_col, key) in [("DRAM rows", "dram_rows"), ("PMem rows", "pmem_rows")] {
            assert_eq!(
                c[col(csv_col)].parse::<u64>().unwrap(),
                tp[key].as_u64().unwrap(),
                "{key} of {}",
                c[0]
            );
        }
        checked += 1;
    }
    assert!(checked > 0, "no cached table:\n{csv}");
}

/// `gen` refuses what `plan` would refuse later (two tables of one name,
/// more rows than the store holds), and flags that `--spec` overrides.
#[test]
fn gen_refuses_what_the_store_would() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g.etrace");
    let out = out.to_str().unwrap();
    for (tables, says) in [
        ("a:100:1:1.0,a:50:1:1.0", "two tables have this name"),
        ("a:18446744073709551615:1:1.0", "2^62"),
    ] {
        let o = bin(&["gen", out, "--tables", tables, "--batches", "2"]);
        assert_eq!(o.status.code(), Some(2), "{tables}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{tables}: {}", stderr(&o));
    }
    let spec = dir.path().join("w.toml");
    std::fs::write(
        &spec,
        "seed = 1\nbatches = 3\nbatch_size = 8\n[[tables]]\nname = \"a\"\nrows = 100\ndim = 8\npooling = 1.0\nalpha = 1.0\n",
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let o = bin(&["gen", out, "--spec", spec, "--batches", "5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = bin(&["gen", out, "--spec", spec]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// A trace of a few rows sampled at any rate: the advice is the exact
/// analysis, not a rate (a two-row trace at 0.5 was told to sample at
/// 8.8e-3, below the rate it had).
#[test]
fn a_sample_of_a_few_rows_is_told_to_go_exact() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("few.etrace");
    gen_trace(&t, 40, 256, Some("a:2:1:0.0"));
    let o = bin(&["analyze", t.to_str().unwrap(), "--sample", "0.5"]);
    let e = stderr(&o);
    assert!(
        e.contains("only 2 distinct rows")
            && e.contains("leave out --sample")
            && !e.contains("e-3"),
        "{e}"
    );
}
