//! The emb-locality binary: exit statuses, one-line errors, and a
//! gen -> convert -> analyze round trip.

mod common;

use common::{gen_trace, locality as bin, stderr};

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["analyze"][..],
        &["analyze", "x", "--format", "parquet"],
        &["analyze", "x", "--mrc-sizes", "0,10"],
        &["analyze", "x", "--columns", "idx"],
        &["frobnicate"],
    ] {
        let o = bin(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
    }
    let o = bin(&["gen", "/tmp/never.etrace", "--tables", "a:10:1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("NAME:ROWS:POOLING:ALPHA"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn data_errors_exit_1_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.etrace");
    let o = bin(&["analyze", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    assert!(e.contains("missing.etrace"), "{e}");

    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "1\n2\nx\n").unwrap();
    let o = bin(&["analyze", bad.to_str().unwrap(), "--format", "txt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("record 3"), "{}", stderr(&o));

    let corrupt = dir.path().join("c.etrace");
    gen_trace(&corrupt, 10, 50, None);
    let mut b = std::fs::read(&corrupt).unwrap();
    let n = b.len();
    b[n - 10] ^= 0xff;
    std::fs::write(&corrupt, &b).unwrap();
    let o = bin(&["analyze", corrupt.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("checksum mismatch"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
}

#[test]
fn gen_convert_analyze() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("w.toml");
    std::fs::write(
        &spec,
        "seed = 3\nbatches = 50\nbatch_size = 100\n[[tables]]\nname = \"a\"\nrows = 5000\npooling = 2\nalpha = 1.1\n[[tables]]\nname = \"b\"\nrows = 100\nalpha = 0.0\n",
    )
    .unwrap();
    let gen = dir.path().join("g.etrace");
    let o = bin(&[
        "gen",
        gen.to_str().unwrap(),
        "--config",
        spec.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Same spec, same bytes.
    let gen2 = dir.path().join("g2.etrace");
    bin(&[
        "gen",
        gen2.to_str().unwrap(),
        "--config",
        spec.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read(&gen).unwrap(), std::fs::read(&gen2).unwrap());

    let o = bin(&[
        "analyze",
        gen.to_str().unwrap(),
        "--json",
        "--mrc-sizes",
        "10,100,1000",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["overall"]["accesses"], 50 * 100 * 3);
    assert_eq!(v["tables"][0]["name"], "a");
    assert_eq!(v["tables"][1]["accesses"], 50 * 100);
    let sizes: Vec<u64> = v["tables"][0]["mrc"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["cache_rows"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, vec![10, 100, 1000]);
    for key in [
        "unique_rows",
        "one_hit_rows",
        "top_0_1pct_share",
        "top_1pct_share",
        "top_10pct_share",
        "zipf_alpha",
        "count_hist_rows",
        "count_hist_accesses",
    ] {
        assert!(!v["overall"][key].is_null(), "{key}");
    }

    // txt -> etrace -> analyze agree.
    let txt = dir.path().join("ids.txt");
    std::fs::write(&txt, "5\n6\n5\n7\n5\n").unwrap();
    let et = dir.path().join("ids.etrace");
    let o = bin(&["convert", txt.to_str().unwrap(), et.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let a = bin(&["analyze", txt.to_str().unwrap(), "--csv"]);
    let b = bin(&["analyze", et.to_str().unwrap(), "--csv"]);
    assert_eq!(a.stdout, b.stdout);
    assert!(String::from_utf8_lossy(&a.stdout).contains("overall,3,5,3,2,"));
}

#[test]
fn plot_writes_three_svgs() {
    let dir = tempfile::tempdir().unwrap();
    let tr = dir.path().join("p.etrace");
    gen_trace(&tr, 20, 64, Some("a:1000:2:1.1,b:500:1:0"));
    let out = dir.path().join("plots");
    let o = bin(&[
        "analyze",
        tr.to_str().unwrap(),
        "--plot",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in ["mrc.svg", "count_cdf.svg", "reuse_distance_cdf.svg"] {
        let s = std::fs::read_to_string(out.join(f)).unwrap();
        assert!(s.starts_with("<svg") && s.contains("polyline"), "{f}");
    }
}

/// plan -> store.toml -> a real store opens with it.
#[test]
fn plan_emits_a_store_config_the_store_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let tr = dir.path().join("w.etrace");
    gen_trace(
        &tr,
        100,
        128,
        Some("tiny:50:2:0.5,big:100000:4:1.1,flat:100000:1:0"),
    );
    let toml_path = dir.path().join("store.toml");
    let o = bin(&[
        "plan",
        tr.to_str().unwrap(),
        "--dram",
        "1MiB",
        "--pmem",
        "4MiB",
        "--out",
        toml_path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(&toml_path).unwrap();
    let cfg = embtier::StoreConfig::from_toml(&text).unwrap();
    assert_eq!(cfg.tables.len(), 3);
    assert_eq!(
        cfg.tables[0].placement,
        embtier::Placement::Pinned(embtier::MemoryKind::Dram),
        "{text}"
    );
    let store = embtier::Store::create(dir.path().join("s"), cfg).unwrap();
    let mut out = vec![0f32; 64]; // generated tables have dim 64
    store.lookup("big", &[7], &mut out).unwrap();
    // JSON plan: fractions sum to one.
    let o = bin(&["plan", tr.to_str().unwrap(), "--dram", "1MiB", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = v["dram_share"].as_f64().unwrap()
        + v["pmem_share"].as_f64().unwrap()
        + v["ssd_share"].as_f64().unwrap();
    assert!((s - 1.0).abs() < 1e-9);
    // An SSD too small for the tables is a data error naming the need.
    let o = bin(&[
        "plan",
        tr.to_str().unwrap(),
        "--dram",
        "1MiB",
        "--ssd",
        "1MiB",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("need"), "{}", stderr(&o));
    // Precision and optimizer: the plan sizes the stored row (int8 dim 64
    // with row-wise Adagrad: 64 + 8 + 4 = 76 bytes) and writes them out.
    let toml8 = dir.path().join("int8.toml");
    let o = bin(&[
        "plan",
        tr.to_str().unwrap(),
        "--dram",
        "1MiB",
        "--elem",
        "int8",
        "--optimizer",
        "rowwise-adagrad",
        "--out",
        toml8.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cfg8 = embtier::StoreConfig::from_toml(&std::fs::read_to_string(&toml8).unwrap()).unwrap();
    for t in &cfg8.tables {
        assert_eq!((t.dim, t.elem), (64, embtier::Elem::Int8));
        assert!(matches!(
            t.optimizer,
            embtier::Optimizer::RowwiseAdagrad { .. }
        ));
        assert_eq!(t.row_bytes(), 76);
    }
    let o = bin(&[
        "plan",
        tr.to_str().unwrap(),
        "--dram",
        "1MiB",
        "--elem",
        "int8",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tables"][0]["row_bytes"].as_u64(), Some(72), "{v}");
    embtier::Store::create(dir.path().join("s8"), cfg8).unwrap();
    for bad in [["--elem", "f64"], ["--optimizer", "lion"]] {
        let o = bin(&[
            "plan",
            tr.to_str().unwrap(),
            "--dram",
            "1MiB",
            bad[0],
            bad[1],
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    }
    // Bad budget: usage error.
    assert_eq!(
        bin(&["plan", tr.to_str().unwrap(), "--dram", "lots"])
            .status
            .code(),
        Some(2)
    );
    // A DRAM budget under a row per cached table (it wrote 512 B of DRAM
    // for `--dram 300`) is refused, naming --dram and what the tables need;
    // --json without --out says where the store.toml went.
    for dram in ["300", "0"] {
        let o = bin(&["plan", tr.to_str().unwrap(), "--dram", dram]);
        assert_eq!(o.status.code(), Some(2), "--dram {dram}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("--dram") && e.contains("need") && e.lines().count() == 2,
            "{e}"
        );
    }
    let o = bin(&["plan", tr.to_str().unwrap(), "--dram", "1MiB", "--json"]);
    assert!(stderr(&o).contains("--out FILE"), "{}", stderr(&o));
}

#[test]
fn bytes_mrc_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let tr = dir.path().join("b.etrace");
    gen_trace(&tr, 20, 64, Some("a:1000:2:1.1,b:500:1:0"));
    let o = bin(&[
        "analyze",
        tr.to_str().unwrap(),
        "--json",
        "--bytes",
        "--mrc-sizes",
        "2560,25600",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // Table a has 256-byte rows (dim 64): 2560 bytes hold 10 rows.
    assert_eq!(v["tables"][0]["mrc"][0]["cache_bytes"], 2560);
    assert_eq!(v["tables"][0]["mrc"][0]["cache_rows"], 10);
    assert_eq!(v["overall"]["mrc"][1]["cache_bytes"], 25600);
    // The overall row size is the mean over the accesses (it read 0).
    assert_eq!(
        v["overall"]["bandwidth"]["row_bytes"], 256,
        "{}",
        v["overall"]
    );
    // CSV: each point's size in bytes; the overall curve's rows cell is
    // empty rather than 0.
    let o = bin(&[
        "analyze",
        tr.to_str().unwrap(),
        "--csv",
        "--bytes",
        "--mrc-sizes",
        "2560,25600",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = String::from_utf8_lossy(&o.stdout);
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .ends_with(",cache_rows,miss_ratio,cache_bytes"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 6, "{csv}");
    for r in &rows {
        let (name, cache_rows, bytes) = (r[0], r[14], r[16]);
        assert!(bytes == "2560" || bytes == "25600", "{csv}");
        match name {
            "overall" => assert_eq!(cache_rows, "", "{csv}"),
            _ => assert_eq!(
                cache_rows.parse::<u64>().unwrap() * 256,
                bytes.parse::<u64>().unwrap(),
                "{csv}"
            ),
        }
    }
}

/// An oracleGeneral file too large for `--max-memory` is refused exactly
/// and streamed with `--sample`, with the accesses of the file.
#[test]
fn sampled_oracle_general_streams_past_max_memory() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t.oracleGeneral.bin");
    let mut b = Vec::new();
    for i in 0..30_000u64 {
        b.extend_from_slice(&(i as u32).to_le_bytes());
        b.extend_from_slice(&((i * 7919) % 1000 + 1_000_000).to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&(-1i64).to_le_bytes());
    }
    std::fs::write(&t, &b).unwrap();
    let p = t.to_str().unwrap();
    let o = bin(&["analyze", p, "--max-memory", "100KiB"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--sample 0.01"), "{}", stderr(&o));
    let o = bin(&[
        "analyze",
        p,
        "--max-memory",
        "100KiB",
        "--sample",
        "0.5",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("streamed"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["overall"]["accesses"], 30_000);
    assert_eq!(v["tables"][0]["unique_rows"], 1000);
}

/// `--max-memory` refuses the exact analysis with one line naming
/// `--sample`, and a sampled analysis of a `.etrace` streams past it;
/// `plan` takes the same limit.
#[test]
fn max_memory_refuses_exact_and_streams_sampled() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t.etrace");
    gen_trace(&t, 40, 100, Some("a:5000:4:1.0,b:300:1:0.5"));
    let p = t.to_str().unwrap();
    // 40 x 100 x 5 = 20,000 accesses: about 1.0 MB exact; 100 KB is too little.
    for args in [
        &["analyze", p, "--max-memory", "100KiB"][..],
        &["plan", p, "--dram", "1MiB", "--max-memory", "100KiB"],
    ] {
        let o = bin(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert_eq!(e.trim().lines().count(), 1, "{e}");
        assert!(e.contains("t.etrace") && e.contains("--sample 0.01"), "{e}");
    }
    let o = bin(&[
        "analyze",
        p,
        "--max-memory",
        "200KiB",
        "--sample",
        "0.5",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("streamed"), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["overall"]["accesses"], 20_000);
    assert_eq!(v["tables"][0]["accesses"], 16_000);
    assert!(v["overall"]["mrc_method"]
        .as_str()
        .unwrap()
        .starts_with("shards (rate 0.5"));
    // The per-row counters themselves must fit: 5,300 rows x 16 bytes.
    let o = bin(&["analyze", p, "--max-memory", "50KiB", "--sample", "0.5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("per-row counters"), "{}", stderr(&o));
    // plan holds the trace to simulate the store where it fits; past the
    // limit, with --sample, it streams and predicts from the curves.
    let o = bin(&[
        "plan",
        p,
        "--dram",
        "1MiB",
        "--sample",
        "0.5",
        "--max-memory",
        "900KiB",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("predicted from the curves"),
        "{}",
        stderr(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("[[tables]]") && out.contains("predicted from the tables'"),
        "{out}"
    );
    let o = bin(&["plan", p, "--dram", "1MiB", "--sample", "0.5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("predicted by simulating this store"));
    let o = bin(&[
        "plan",
        p,
        "--dram",
        "1MiB",
        "--sample",
        "0.5",
        "--max-memory",
        "900KiB",
        "--policies",
        "lru,sieve",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--policies"), "{}", stderr(&o));
}

/// A text trace says nothing of its size ahead, so the exact analysis
/// reads it through, holds no more than `--max-memory` allows, and then
/// refuses in one line naming the file and `--sample`; with room, the
/// same file is analysed exactly.
#[test]
fn a_text_trace_past_max_memory_is_refused_after_its_pass() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("ids.txt");
    let ids: String = (0..20_000u64)
        .map(|i| format!("{}\n", (i * 7919) % 3000))
        .collect();
    std::fs::write(&t, ids).unwrap();
    let p = t.to_str().unwrap();
    // 20,000 accesses at 32 bytes: 640 KB.
    let o = bin(&["analyze", p, "--max-memory", "500KiB"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    let last = e.trim().lines().last().unwrap();
    assert!(
        last.contains("ids.txt")
            && last.contains("20000 accesses")
            && last.contains("--sample 0.01"),
        "{e}"
    );
    let o = bin(&["analyze", p, "--max-memory", "1MiB", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["overall"]["accesses"], 20_000);
    assert_eq!(v["tables"][0]["unique_rows"], 3000);
}
