//! What a new user meets on the first day, with only the README and
//! `--help`: the two tools are one family (the same flags mean the same
//! thing in every subcommand that has them), figures say their units,
//! `plan` writes a store.toml a person would write, and warnings say what
//! a default did.

mod common;

use common::{gen_trace, locality, replay, stderr};

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ok(o: std::process::Output, what: &str) -> std::process::Output {
    assert!(o.status.success(), "{what}: {}", stderr(&o));
    o
}

/// `--sizes`, `--sample`, `--csv`, `--json`, `--plot`, `--row-bytes`,
/// `--devices` and `--profile` work wherever their job exists, and mean the
/// same there; `--config` is a store.toml only, the generator's is `--spec`.
#[test]
fn one_family_of_flags() {
    let dir = tempfile::tempdir().unwrap();
    let tr = dir.path().join("t.etrace");
    gen_trace(&tr, 20, 100, Some("a:5000:2:1.0,b:300:1:0.5"));
    let tr = tr.to_str().unwrap();
    let plots = dir.path().join("plots");
    let p = plots.to_str().unwrap();
    // The same sizes, rows or bytes, in analyze and simulate.
    for sizes in ["100,1000", "25KiB,250KiB"] {
        let a = ok(
            locality(&["analyze", tr, "--sizes", sizes, "--json"]),
            sizes,
        );
        let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
        let s = ok(replay(&["simulate", tr, "--sizes", sizes, "--json"]), sizes);
        let w: serde_json::Value = serde_json::from_slice(&s.stdout).unwrap();
        for (i, size) in [100u64, 1000].into_iter().enumerate() {
            assert_eq!(v["overall"]["mrc"][i]["cache_rows"], size, "{sizes}");
            assert_eq!(w["results"][i]["size"], size, "{sizes}");
            // LRU: the analysis's exact MRC is the simulation's miss ratio.
            let (x, y) = (
                v["overall"]["mrc"][i]["miss_ratio"].as_f64().unwrap(),
                w["results"][i]["miss_ratio"].as_f64().unwrap(),
            );
            assert!((x - y).abs() < 1e-9, "{sizes}: {x} {y}");
        }
    }
    // The old name of analyze's sizes still works.
    ok(
        locality(&["analyze", tr, "--mrc-sizes", "100"]),
        "--mrc-sizes",
    );
    // --sample in analyze, plan and simulate.
    ok(
        locality(&["analyze", tr, "--sample", "0.5"]),
        "analyze --sample",
    );
    ok(
        locality(&["plan", tr, "--dram", "64KiB", "--sample", "0.5"]),
        "plan --sample",
    );
    let o = ok(
        replay(&["simulate", tr, "--sample", "0.5", "--sizes", "100"]),
        "simulate --sample",
    );
    assert!(
        stdout(&o).contains("spatial sample at rate 0.5"),
        "{}",
        stdout(&o)
    );
    // --csv and --plot in every report that has a table or curves.
    for (tool, args) in [
        ("locality", vec!["analyze", tr, "--csv", "--plot", p]),
        (
            "locality",
            vec!["plan", tr, "--dram", "64KiB", "--csv", "--plot", p],
        ),
        ("replay", vec!["simulate", tr, "--csv", "--plot", p]),
        (
            "replay",
            vec!["simulate", tr, "--tiers", "dram:lru:100,ssd", "--csv"],
        ),
    ] {
        let o = if tool == "locality" {
            locality(&args)
        } else {
            replay(&args)
        };
        let o = ok(o, &args.join(" "));
        let first = stdout(&o).lines().next().unwrap_or("").to_string();
        assert!(
            first.contains(',') && !first.starts_with('|'),
            "{args:?}: {first}"
        );
    }
    // --devices and --profile in plan and simulate --tiers alike.
    ok(
        locality(&["plan", tr, "--dram", "64KiB", "--devices", "ssd=optane-ssd"]),
        "plan --devices",
    );
    let o = locality(&["plan", tr, "--dram", "64KiB", "--devices", "ssd=floppy"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("nand-nvme"), "{}", stderr(&o));
    // run: --row-bytes and --csv.
    let cfg = dir.path().join("store.toml");
    std::fs::write(
        &cfg,
        "[dram]\ncapacity = \"64KiB\"\n[ssd]\nio_engine = \"psync\"\n",
    )
    .unwrap();
    let o = ok(
        replay(&[
            "run",
            tr,
            "--config",
            cfg.to_str().unwrap(),
            "--row-bytes",
            "64",
            "--csv",
        ]),
        "run --csv",
    );
    assert!(
        stdout(&o).starts_with("tier,policy,hits,hit ratio,share of requests\n"),
        "{}",
        stdout(&o)
    );
    // gen's workload spec is --spec.
    let spec = dir.path().join("w.toml");
    std::fs::write(
        &spec,
        "batches = 3\nbatch_size = 10\n[[tables]]\nname = \"x\"\nrows = 100\n",
    )
    .unwrap();
    let g = dir.path().join("g.etrace");
    ok(
        locality(&["gen", g.to_str().unwrap(), "--spec", spec.to_str().unwrap()]),
        "gen --spec",
    );
    // --help names the policies, formats and profiles.
    let h = stdout(&replay(&["--help"]));
    for k in ["wtinylfu", "lfu-32way", "optane-pmem", "calibrate"] {
        assert!(h.contains(k), "emb-replay --help: {k}");
    }
    let h = stdout(&locality(&["plan", "--help"]));
    for k in ["--dram-policy", "sieve", "--rows", "nand-nvme", "--profile"] {
        assert!(h.contains(k), "emb-locality plan --help: {k}");
    }
}

/// Every figure of `run` and of a hierarchy says what it is a share of;
/// a store without PMem shows no PMem figure.
#[test]
fn figures_say_their_units() {
    let dir = tempfile::tempdir().unwrap();
    let tr = dir.path().join("t.etrace");
    gen_trace(&tr, 20, 100, Some("a:5000:2:1.0"));
    let tr = tr.to_str().unwrap();
    let cfg = dir.path().join("store.toml");
    std::fs::write(
        &cfg,
        "[dram]\ncapacity = \"64KiB\"\npolicy = \"sieve\"\n[ssd]\nio_engine = \"psync\"\n",
    )
    .unwrap();
    let out = stdout(&ok(
        replay(&[
            "run",
            tr,
            "--config",
            cfg.to_str().unwrap(),
            "--update-ratio",
            "0.5",
        ]),
        "run",
    ));
    assert!(out.contains("| dram | sieve |"), "{out}");
    assert!(
        !out.contains("| pmem |"),
        "no PMem tier, no PMem row: {out}"
    );
    assert!(
        out.contains("hit ratio: a tier's hits over the requests that reached it"),
        "{out}"
    );
    assert!(out.contains("row requests ("), "{out}");
    std::fs::write(
        &cfg,
        "[dram]\ncapacity = \"32KiB\"\n[pmem]\ncapacity = \"64KiB\"\npolicy = \"clock\"\n[ssd]\nio_engine = \"psync\"\n",
    )
    .unwrap();
    let out = stdout(&ok(
        replay(&["run", tr, "--config", cfg.to_str().unwrap()]),
        "run",
    ));
    assert!(out.contains("| pmem | clock |"), "{out}");
    let out = stdout(&ok(
        replay(&["simulate", tr, "--tiers", "dram:lru:200,pmem:lru:400,ssd"]),
        "tiers",
    ));
    assert!(out.contains("| hit ratio | share of requests |"), "{out}");
    let out = stdout(&ok(replay(&["demo"]), "demo"));
    for k in [
        "DRAM rows (SIEVE)",
        "PMem rows (LRU)",
        "DRAM 50k rows SIEVE",
        "share of requests",
    ] {
        assert!(out.contains(k), "demo: {k}: {out}");
    }
}

/// plan writes a store.toml a person would write, with the policy and the
/// table sizes asked for.
#[test]
fn plan_writes_a_file_a_person_would() {
    let dir = tempfile::tempdir().unwrap();
    let tr = dir.path().join("w.etrace");
    gen_trace(
        &tr,
        50,
        128,
        Some("tiny:50:2:0.5,big:100000:4:1.1,flat:100000:1:0"),
    );
    let tr = tr.to_str().unwrap();
    let out = dir.path().join("store.toml");
    ok(
        locality(&[
            "plan",
            tr,
            "--dram",
            "1MiB",
            "--pmem",
            "3MiB",
            "--optimizer",
            "adam",
            "--rows",
            "2000000,tiny=64",
            "--out",
            out.to_str().unwrap(),
        ]),
        "plan",
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let cfg = embtier::StoreConfig::from_toml(&text).unwrap();
    assert_eq!(cfg.tiers[0].policy, embtier::PolicyKind::Sieve, "{text}");
    let rows: Vec<u64> = cfg.tables.iter().map(|t| t.rows).collect();
    assert_eq!(rows, vec![64, 2_000_000, 2_000_000], "{text}");
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(" = ") {
            if k.ends_with("_bytes") || k == "capacity" {
                // Binary units and at most three significant digits, or a
                // plain count of bytes below 1 KiB.
                let v = v.trim_matches('"');
                let digits = v.chars().filter(|c| c.is_ascii_digit()).count();
                let unit = v.ends_with("KiB") || v.ends_with("MiB") || v.ends_with("GiB");
                assert!(
                    (unit && digits <= 4) || v.parse::<u64>().is_ok_and(|n| n < 1024),
                    "{line}"
                );
            }
        }
    }
    assert!(text.contains("lr = 0.001"), "{text}");
    assert!(
        !text.contains("99999") && !text.contains("00001"),
        "no float noise: {text}"
    );
    for name in ["tiny", "big", "flat"] {
        assert!(
            text.contains(&format!("# {name}: pinned"))
                || text.contains(&format!("# {name}: cached")),
            "{text}"
        );
    }
    embtier::Store::create(dir.path().join("s"), cfg).unwrap();
    // The policies it writes are the store's, in any spelling; others are
    // refused, naming what the store takes.
    let o = ok(
        locality(&[
            "plan",
            tr,
            "--dram",
            "1MiB",
            "--dram-policy",
            "S3-FIFO",
            "--pmem",
            "1MiB",
            "--pmem-policy",
            "CLOCK",
        ]),
        "policies",
    );
    assert!(stdout(&o).contains("policy = \"s3fifo\""), "{}", stdout(&o));
    assert!(stdout(&o).contains("policy = \"clock\""), "{}", stdout(&o));
    let o = locality(&["plan", tr, "--dram", "1MiB", "--dram-policy", "2q"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("the store's tiers accept lru, fifo, clock, lfu, arc, s3fifo, sieve"),
        "{}",
        stderr(&o)
    );
    // --rows below the rows the trace touches, or naming no table, is a usage error.
    for bad in ["big=10", "nosuch=5", "lots"] {
        let o = locality(&["plan", tr, "--dram", "1MiB", "--rows", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
    }
}

/// A trace whose batching comes from --batch-size and makes one batch gets
/// a warning saying so.
#[test]
fn one_batch_is_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let ids = dir.path().join("ids.txt");
    std::fs::write(&ids, "1\n2\n3\n1\n").unwrap();
    let o = ok(locality(&["analyze", ids.to_str().unwrap()]), "analyze");
    assert!(
        stderr(&o).contains("the whole trace is one batch"),
        "{}",
        stderr(&o)
    );
    let o = ok(
        locality(&["analyze", ids.to_str().unwrap(), "--batch-size", "2"]),
        "analyze",
    );
    assert!(!stderr(&o).contains("one batch"), "{}", stderr(&o));
}

/// CSV input: the header is detected, a doubtful id column is named, and
/// Avazu is read as Avazu, all said on stderr.
#[test]
fn csv_input_says_what_it_read() {
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces");
    let (cp, av) = (
        shared.join("cloudPhysicsIO.csv"),
        shared.join("avazu_sample.csv"),
    );
    if !cp.exists() || !av.exists() {
        eprintln!("SKIP: {} or {} is absent", cp.display(), av.display());
        return;
    }
    let o = ok(
        locality(&["analyze", cp.to_str().unwrap(), "--csv"]),
        "cloudPhysicsIO.csv",
    );
    let e = stderr(&o);
    assert!(e.contains("the first line is a header"), "{e}");
    assert!(
        e.contains("warning:") && e.contains("column 0 (version)") && e.contains("looks constant"),
        "{e}"
    );
    let o = ok(
        locality(&[
            "analyze",
            av.to_str().unwrap(),
            "--batch-size",
            "10",
            "--csv",
        ]),
        "avazu_sample.csv",
    );
    assert!(stderr(&o).contains("read as avazu"), "{}", stderr(&o));
    assert!(stdout(&o).contains("\nsite_id,"), "{}", stdout(&o));
}
