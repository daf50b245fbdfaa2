//! emb-replay, defects found in review: each test ran against the code
//! before its fix and failed there. Sizes of 32-way caches, the counts of
//! `simulate --tiers`, `calibrate --mib` bounds, errors naming the right
//! argument, and sampled figures labelled as estimates.

mod common;

use common::{gen_trace, replay, stderr};

/// A generated trace: 50 batches of 200 samples, one table of 20,000 rows
/// with pooling 4 (40,000 accesses).
fn gen(dir: &std::path::Path) -> String {
    let tr = dir.join("t.etrace");
    gen_trace(&tr, 50, 200, Some("a:20000:4:1.0"));
    tr.to_str().unwrap().to_string()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &std::process::Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A failure: the exit status, one error line on stderr (the last; the
/// format `auto` chose may come before it), no panic or abort.
fn fails(o: &std::process::Output, code: i32) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{e}");
    assert_eq!(e.matches("error").count(), 1, "{e}");
    assert!(
        e.trim()
            .lines()
            .last()
            .unwrap()
            .starts_with("emb-replay: error: "),
        "{e}"
    );
    assert!(
        !e.contains("panicked") && !e.contains("memory allocation"),
        "{e}"
    );
    e
}

/// A 32-way cache holds whole sets: a size that is not a multiple of 32
/// runs at the next one, and every output says so instead of labelling the
/// figure with the size asked for.
#[test]
fn set_associative_sizes_report_the_rows_simulated() {
    let dir = tempfile::tempdir().unwrap();
    let tr = gen(dir.path());
    let args = [
        "simulate",
        &tr,
        "--policies",
        "lru-32way,lru,belady",
        "--sizes",
        "1,33,64",
    ];
    let o = replay(&[&args[..], &["--json"]].concat());
    let v = json(&o);
    let e = stderr(&o);
    assert!(
        e.contains("warning: lru-32way") && e.contains("1 ran as 32") && e.contains("33 as 64"),
        "{e}"
    );
    assert!(!e.contains("64 as 64"), "{e}");
    let res = v["results"].as_array().unwrap();
    let rows = |p: &str, z: u64| {
        res.iter()
            .find(|r| r["policy"] == p && r["size"] == z)
            .unwrap_or_else(|| panic!("{p} {z}"))["rows_simulated"]
            .as_u64()
            .unwrap_or_else(|| panic!("{p} {z}: no rows_simulated"))
    };
    assert_eq!(rows("lru-32way", 1), 32);
    assert_eq!(rows("lru-32way", 33), 64);
    assert_eq!(rows("lru-32way", 64), 64);
    for z in [1, 33, 64] {
        assert_eq!(rows("lru", z), z);
        assert_eq!(rows("belady", z), z);
    }
    // A one-set cache is LRU of 32 rows: its miss ratio is LRU's at 32,
    // not at the 1 row asked for.
    let o = replay(&[
        "simulate",
        &tr,
        "--policies",
        "lru",
        "--sizes",
        "32",
        "--json",
    ]);
    let lru32 = json(&o)["results"][0]["miss_ratio"].as_f64().unwrap();
    let way1 = res
        .iter()
        .find(|r| r["policy"] == "lru-32way" && r["size"] == 1)
        .unwrap()["miss_ratio"]
        .as_f64()
        .unwrap();
    assert_eq!(way1, lru32);
    // CSV: a rows_simulated column.
    let o = replay(&[&args[..], &["--csv"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("policy,size,miss_ratio,hits,misses,rows_simulated\n"),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("lru-32way,1,") && l.ends_with(",32")),
        "{out}"
    );
    // The table: the rows simulated beside the figure.
    let o = replay(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("| lru-32way |"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("(32 rows)") && line.contains("(64 rows)"),
        "{out}"
    );
    let line = out.lines().find(|l| l.starts_with("| lru |")).unwrap();
    assert!(!line.contains("rows)"), "{out}");
}

/// `simulate --tiers`: hits and misses add up to the requests, misses are
/// requests that no tier held, and SSD rows read are their own field.
#[test]
fn tier_counts_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let tr = gen(dir.path());
    for tiers in ["dram:lru:1000,ssd", "dram:lru:300,pmem:sieve:1500,ssd"] {
        let o = replay(&["simulate", &tr, "--tiers", tiers, "--json"]);
        let v = json(&o);
        let r = &v["results"][0];
        let n = |k: &str| {
            r[k].as_u64()
                .unwrap_or_else(|| panic!("{tiers}: no {k} in {r}"))
        };
        let t = r["tiers"].as_array().unwrap();
        let requests = n("requests");
        assert_eq!(requests, t[0]["lookups"].as_u64().unwrap(), "{tiers}");
        let tier_hits: u64 = t.iter().map(|t| t["hits"].as_u64().unwrap()).sum();
        assert_eq!(n("hits"), tier_hits, "{tiers}");
        assert_eq!(n("hits") + n("misses"), requests, "{tiers}");
        assert_eq!(n("misses"), t.last().unwrap()["misses"], "{tiers}");
        let mr = r["miss_ratio"].as_f64().unwrap();
        assert!(
            (mr - n("misses") as f64 / requests as f64).abs() < 1e-12,
            "{tiers}"
        );
        if t.len() == 1 {
            let hr = t[0]["hit_ratio"].as_f64().unwrap();
            assert!((mr - (1.0 - hr)).abs() < 1e-12, "{tiers}");
        }
        // Rows read from SSD: deduplicated per batch, so fewer here.
        assert_eq!(n("ssd_rows_read"), r["ssd"]["rows_read"], "{tiers}");
        assert!(n("ssd_rows_read") < n("misses"), "{tiers}");
        assert_eq!(n("accesses"), 40_000, "{tiers}");
    }
    // The text says the same, labelled.
    let o = replay(&["simulate", &tr, "--tiers", "dram:lru:1000,ssd", "--json"]);
    let r = json(&o)["results"][0].clone();
    let o = replay(&["simulate", &tr, "--tiers", "dram:lru:1000,ssd"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let want = format!(
        "{} row requests: {} hits, {} misses (miss ratio {:.4})",
        r["requests"],
        r["hits"],
        r["misses"],
        r["miss_ratio"].as_f64().unwrap()
    );
    assert!(out.contains(&want), "{want:?} in:\n{out}");
    let ssd = out.lines().find(|l| l.starts_with("| ssd |")).unwrap();
    assert!(
        ssd.contains(&format!("| {} |", r["misses"]))
            && ssd.contains(&format!("{} rows read", r["ssd_rows_read"])),
        "{out}"
    );
}

/// The hierarchy sits above an SSD: a list without it is a usage error
/// that says how to write it, not an SSD that costs nothing.
#[test]
fn tiers_require_the_ssd() {
    let dir = tempfile::tempdir().unwrap();
    let tr = gen(dir.path());
    let o = replay(&["simulate", &tr, "--tiers", "dram:lru:1000"]);
    let e = fails(&o, 2);
    assert!(
        e.contains("--tiers") && e.contains("dram:lru:1000,ssd"),
        "{e}"
    );
}

/// A bad size in --tiers is an error under --tiers, not --sizes.
#[test]
fn tier_size_errors_name_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let tr = gen(dir.path());
    for bad in [
        "dram:lru:0,ssd",
        "dram:lru:12 parsecs,ssd",
        "dram:lru:auto,ssd",
        "dram:lru:1B,ssd",
    ] {
        let o = replay(&["simulate", &tr, "--tiers", bad]);
        let e = fails(&o, 2);
        assert!(
            e.contains("--tiers") && !e.contains("--sizes"),
            "{bad}: {e}"
        );
    }
}

/// --mib is bounded by the parser: below 16 or absurdly large is a usage
/// error naming --mib, never an abort.
#[test]
fn calibrate_mib_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let cal = dir.path().join("cal");
    for mib in ["0", "15", "99999999", "18446744073709551615"] {
        let o = replay(&["calibrate", cal.to_str().unwrap(), "--mib", mib]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "--mib {mib}: {e}");
        assert!(e.contains("--mib"), "--mib {mib}: {e}");
        assert!(
            !e.contains("panicked") && !e.contains("memory allocation"),
            "{e}"
        );
        assert!(!cal.join("profile.toml").exists(), "--mib {mib}");
    }
}

/// Under --sample the unique rows are an estimate, and say so; no size is
/// said to exceed the trace's unique rows on an estimate.
#[test]
fn sampled_figures_are_estimates() {
    let dir = tempfile::tempdir().unwrap();
    let tr = gen(dir.path());
    let args = [
        "simulate",
        &tr,
        "--sample",
        "0.1",
        "--sizes",
        "1000,100000000",
    ];
    let o = replay(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let (out, e) = (stdout(&o), stderr(&o));
    assert!(
        out.contains("about ") && out.contains("estimated from the 10% sample"),
        "{out}"
    );
    assert!(e.contains("estimated from the 10% sample"), "{e}");
    assert!(!e.contains("exceeds the trace's"), "{e}");
    assert!(e.contains("exceeds the estimated"), "{e}");
    let v = json(&replay(&[&args[..], &["--json"]].concat()));
    assert_eq!(v["unique_rows_estimated"], true);
    // Without sampling the count is exact, and the note stands.
    let o = replay(&["simulate", &tr, "--sizes", "100000000", "--json"]);
    assert!(stderr(&o).contains("exceeds the trace's"), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["unique_rows_estimated"], false);
}

/// A rate that samples no request is a data error naming --sample; one
/// that samples few warns that the curve is unreliable.
#[test]
fn sample_of_nothing_fails() {
    let dir = tempfile::tempdir().unwrap();
    let tr = gen(dir.path());
    let o = replay(&["simulate", &tr, "--sample", "1e-9", "--sizes", "1000"]);
    let e = fails(&o, 1);
    assert!(
        e.contains("--sample") && e.contains("40000 requests") && e.contains("larger rate"),
        "{e}"
    );
    assert!(stdout(&o).is_empty());
    // 0.01 of 40,000 requests: about 400 sampled.
    let o = replay(&["simulate", &tr, "--sample", "0.01", "--sizes", "1000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: --sample") && stderr(&o).contains("unreliable"),
        "{}",
        stderr(&o)
    );
    let o = replay(&["simulate", &tr, "--sample", "0.5", "--sizes", "1000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("unreliable"), "{}", stderr(&o));
}

/// A store.toml the store refuses (a DRAM tier of no bytes) is a data
/// error naming the file.
#[test]
fn a_refused_store_toml_names_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let tr = gen(dir.path());
    let cfg = dir.path().join("zero.toml");
    std::fs::write(
        &cfg,
        "[[tiers]]\nkind = \"dram\"\ncapacity = \"0B\"\n\n[[tables]]\nname = \"a\"\nrows = 20000\ndim = 16\ndram_bytes = \"64KiB\"\n",
    )
    .unwrap();
    let o = replay(&[
        "run",
        &tr,
        "--config",
        cfg.to_str().unwrap(),
        "--dir",
        dir.path().join("store").to_str().unwrap(),
    ]);
    let e = fails(&o, 1);
    assert!(
        e.contains("zero.toml") && e.contains("invalid config"),
        "{e}"
    );
}

/// A tier's size with blanks around it is the same size (` 1000` read
/// as bytes was 3 rows of 256 bytes).
#[test]
fn tier_sizes_are_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let tr = gen(dir.path());
    let plain = json(&replay(&[
        "simulate",
        &tr,
        "--tiers",
        "dram:lru:1000,ssd",
        "--json",
    ]));
    let spaced = json(&replay(&[
        "simulate",
        &tr,
        "--tiers",
        "dram:lru: 1000 ,ssd",
        "--json",
    ]));
    assert_eq!(plain["results"][0]["hits"], spaced["results"][0]["hits"]);
}
