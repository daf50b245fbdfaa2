//! `emb-locality plan`: a store configuration from a trace's curves.

use super::*;

/// `--rows`: the table sizes of the model, by trace table.
fn table_rows(spec: &[String], tables: &[TraceTable]) -> Result<Vec<Option<u64>>, Fail> {
    let bad = |s: &str| usage(format!("--rows: {s:?} is not ROWS or NAME=ROWS"));
    let mut all = None;
    let mut named: Vec<(String, u64)> = Vec::new();
    for s in spec {
        match s.split_once('=') {
            Some((n, r)) => {
                named.push((n.trim().to_string(), r.trim().parse().map_err(|_| bad(s))?))
            }
            None => all = Some(s.trim().parse::<u64>().map_err(|_| bad(s))?),
        }
    }
    for (n, _) in &named {
        if !tables.iter().any(|tt| &tt.name == n) {
            let names: Vec<&str> = tables.iter().map(|tt| tt.name.as_str()).collect();
            return Err(usage(format!(
                "--rows: the trace has no table {n:?} (it has {})",
                names.join(", ")
            )));
        }
    }
    tables
        .iter()
        .map(|tt| {
            let r = named
                .iter()
                .find(|(n, _)| *n == tt.name)
                .map(|(_, r)| *r)
                .or(all);
            match r {
                Some(r) if r < tt.rows => Err(usage(format!(
                    "--rows: table {:?} has {r} rows, but the trace touches row ids up to {}",
                    tt.name, tt.rows
                ))),
                _ => Ok(r),
            }
        })
        .collect()
}

pub(super) fn plan_cmd(a: PlanArgs) -> Result<(), Fail> {
    let devices = a.devices.tiers()?;
    let described = a.devices.describe(&["dram", "pmem", "ssd"])?;
    let max_memory = a.max_memory.map_or_else(default_max_memory, |b| b.0);
    let opts = Options {
        sample: a.sample.map(Sampling::Rate),
        ..Options::default()
    };
    // The prediction replays the trace through the simulated store, so the
    // trace is held where it fits; past --max-memory, with --sample, a
    // .etrace or oracleGeneral file streams and the prediction comes from
    // the curves alone.
    // An exact analysis numbers accesses in 32 bits: a longer trace is
    // analysed sampled or not at all.
    let too_long = |n: u64| n > MAX_EXACT_ACCESSES && opts.sample.is_none();
    let path = &a.input.trace;
    let held = match headers(&a.input)?.accesses {
        Some(n) if n.saturating_mul(HELD_BYTES_PER_ACCESS) > max_memory || too_long(n) => {
            if !a.policies.is_empty() {
                return Err(usage(match n.saturating_mul(HELD_BYTES_PER_ACCESS) > max_memory {
                    true => format!(
                        "--policies: {}: choosing a policy simulates the store over the trace, which does not fit in --max-memory; plan one policy (--dram-policy) or raise --max-memory",
                        path.display()
                    ),
                    false => format!(
                        "--policies: {}: {n} accesses, past the {MAX_EXACT_ACCESSES} an exact analysis holds; add --sample 0.01",
                        path.display()
                    ),
                }));
            }
            None
        }
        _ => {
            let t = load(&a.input)?;
            if too_long(t.accesses.len() as u64) {
                let why = exact_refusal(t.accesses.len() as u64, u64::MAX).unwrap_or_default();
                return Err(usage(format!("{}: {why}", path.display())));
            }
            Some(t)
        }
    };
    let (tables, accesses, batches, mut r) = match &held {
        Some(t) => (
            t.tables.clone(),
            t.accesses.len() as u64,
            t.batch_ends.len() as u64,
            analyze(t, &opts),
        ),
        None => {
            let an = analysed(&a.input, opts, max_memory, |_| Ok(None))?;
            eprintln!(
                "{}: the trace does not fit in --max-memory: predicted from the curves (one cache per table), not by simulating the store",
                a.input.trace.display()
            );
            (an.tables, an.accesses, an.batches, an.report)
        }
    };
    check_sampled(&r, &a.input.trace, "--sample")?;
    let rows = table_rows(&a.rows, &tables)?;
    for (tr, rows) in r.tables.iter_mut().zip(&rows) {
        if let Some(n) = rows {
            tr.rows = *n;
        }
    }
    if let Some(dir) = &a.plot {
        write_plots(&r, dir, &a.input.trace, a.top)?;
    }
    // The stored row: the trace's f32 row gives dim; element type and
    // optimizer state give the bytes.
    let shapes: Vec<embtier::TableConfig> = tables
        .iter()
        .zip(&r.tables)
        .map(|(tt, tr)| {
            let f32_bytes = row_bytes_of(tt, a.row_bytes.unwrap_or(DEFAULT_ROW_BYTES));
            let dim = (f32_bytes / 4).clamp(1, embtier::config::MAX_DIM as u64) as u32;
            embtier::TableConfig::new(tt.name.clone(), tr.rows.max(1), dim)
                .elem(a.elem)
                .optimizer(a.optimizer)
        })
        .collect();
    let rb: Vec<u64> = shapes.iter().map(|c| c.row_bytes()).collect();
    let budgets = Budgets {
        dram: a.dram,
        pmem: a.pmem,
    };
    // The sizes come from the curves (one cache per table, one access at a
    // time); the prediction from a simulation of the store planned: its
    // shards, the tiers' policies, its batch lookups and cold fill.
    let make = |dram: PolicyKind, r: &Report| -> Result<(Plan, embtier::StoreConfig, f64), Fail> {
        let mut p = plan(r, &rb, budgets, &devices, batches);
        let policies = Policies {
            dram,
            pmem: a.pmem_policy,
        };
        let cfg = store_config(&p, &shapes, budgets, policies);
        cfg.validate().map_err(data)?;
        let curve_dram = p.dram_hit_ratio;
        if let Some(t) = &held {
            let counts = simulate_store(t, &cfg).map_err(data)?;
            p.predict_from(&counts, &devices);
        }
        Ok((p, cfg, curve_dram))
    };
    // Candidates: each DRAM policy (--policies, else --dram-policy), sizes
    // from the one-access-at-a-time curves (exact LRU without --policies,
    // the policy's own miniature ones with). The simulated store scores
    // each: the least estimated time per batch (SSD reads dominate it),
    // then the most DRAM + PMem hits, then DRAM's.
    let rate = a.sample.unwrap_or(1.0);
    let kinds = if a.policies.is_empty() {
        vec![a.dram_policy]
    } else {
        // A policy named twice (`lru,LRU`) is one candidate.
        let mut k: Vec<PolicyKind> = Vec::new();
        for &p in &a.policies {
            if !k.contains(&p) {
                k.push(p);
            }
        }
        k
    };
    type Run = (PolicyKind, String, Plan, embtier::StoreConfig, f64);
    let runs: Vec<Result<Run, Fail>> = kinds
        .par_iter()
        .map(|&k| {
            let (rk, label) = if a.policies.is_empty() {
                (r.clone(), "LRU".to_string())
            } else {
                (
                    with_policy_curves(
                        &r,
                        held.as_ref().expect("--policies holds the trace"),
                        SimPolicy::Online(k),
                        rate,
                        32,
                    ),
                    k.to_string(),
                )
            };
            make(k, &rk).map(|(pp, c, d)| (k, label, pp, c, d))
        })
        .collect();
    let mut tried = String::new();
    let mut best: Option<Run> = None;
    for run in runs {
        let run = run?;
        let score = |p: &Plan| {
            (
                -p.seconds_per_batch,
                p.dram_hit_ratio + p.pmem_hit_ratio,
                p.dram_hit_ratio,
            )
        };
        let _ = write!(
            tried,
            "{}{} on {} curves: DRAM {:.4} PMem {:.4}, {} SSD rows read, {:.3} ms per batch",
            if tried.is_empty() { "" } else { "; " },
            run.0,
            run.1,
            run.2.dram_hit_ratio,
            run.2.pmem_hit_ratio,
            run.2.ssd_rows_read,
            run.2.seconds_per_batch * 1e3
        );
        if best.as_ref().is_none_or(|b| {
            score(&run.2).partial_cmp(&score(&b.2)) == Some(std::cmp::Ordering::Greater)
        }) {
            best = Some(run);
        }
    }
    let (dram_policy, curves, mut p, cfg, curve_dram) = best.expect("a candidate");
    // A cached table stages its rows through at least one DRAM row, so a
    // budget under a row per cached table cannot be kept: say so rather
    // than write a store larger than the budget.
    let dram_written = cfg.tiers.first().map_or(0, |t| t.capacity.0);
    if dram_written > a.dram {
        let cached = p
            .tables
            .iter()
            .filter(|t| t.placement == Decision::Cached)
            .count();
        return Err(usage(format!(
            "--dram {}: a cached table takes at least one DRAM row, so the {cached} tables this plan caches need {} of DRAM; give --dram at least that{}",
            round_size(a.dram).1,
            round_size(dram_written).1,
            if a.pmem == 0 {
                ", or --pmem for tables to be pinned there"
            } else {
                ""
            }
        )));
    }
    sizes_as_written(&mut p, &cfg);
    eprintln!("candidates: {tried}; chosen: {dram_policy} on {curves} curves");
    // The SSD data file holds every row, in sealed 4 KiB block groups.
    let ssd_need: u64 = cfg
        .tables
        .iter()
        .map(|t| {
            let l = embtier::format::RowLayout::for_row_bytes(t.row_bytes() as u32);
            l.blocks_for(t.rows) * embtier::format::BLOCK_SIZE as u64
        })
        .sum();
    if let Some(budget) = a.ssd {
        if ssd_need > budget {
            return Err(data(format!(
                "--ssd {budget}: the tables need {ssd_need} bytes of SSD ({:.3} GiB)",
                ssd_need as f64 / (1u64 << 30) as f64
            )));
        }
    }
    let how = if held.is_some() {
        format!(
            "(predicted by simulating this store over the trace: its shards, its {} DRAM and {} PMem caches, its batch lookups and cold fill;\n sizes chosen on the tables' {} curves, which predicted DRAM {:.4} for one cache per table; docs/locality.md)\ncandidates, as simulated: {}",
            dram_policy, a.pmem_policy, curves, curve_dram, tried
        )
    } else {
        format!(
            "(predicted from the tables' {} curves, one cache per table: the trace did not fit in --max-memory for a simulation of this store's shards, {} DRAM and {} PMem caches, batch lookups and cold fill; docs/locality.md)",
            curves, dram_policy, a.pmem_policy
        )
    };
    let header = format!(
        "store.toml planned by emb-locality from {} ({} accesses in {} batches)\nbudgets: DRAM {}, PMem {}; SSD data file {}\npredicted shares of all row requests: DRAM {:.4}, PMem {:.4}, SSD {:.4} ({} rows read: a row once per batch that misses it); {:.3} ms per batch on the device profiles {described}\n{}",
        a.input.trace.display(),
        accesses,
        batches,
        round_size(a.dram).1,
        round_size(a.pmem).1,
        round_size(ssd_need).1,
        p.dram_hit_ratio,
        p.pmem_hit_ratio,
        p.ssd_ratio,
        p.ssd_rows_read,
        p.seconds_per_batch * 1e3,
        how,
    );
    let toml_text = store_toml(&p, &cfg, &header);
    if let Some(path) = &a.out {
        std::fs::write(path, &toml_text).map_err(|e| data(format!("{}: {e}", path.display())))?;
        eprintln!("{}: written", path.display());
    }
    if a.out.is_none() && (a.output.json || a.output.csv) {
        eprintln!(
            "note: the store.toml is printed only with the table; with --{} write it with --out FILE",
            if a.output.json { "json" } else { "csv" }
        );
    }
    if a.output.json {
        let mut o = serde_json::to_string_pretty(&p).map_err(data)?;
        o.push('\n');
        return emit(&o);
    }
    let table = plan_table(&p, &cfg);
    if a.output.csv {
        return emit(&table.csv());
    }
    let mut o = table.markdown();
    let _ = writeln!(
        o,
        "\nshares are of each table's accesses (the last line: of all accesses); DRAM and PMem are the bytes of row payload written to the store.toml\npredicted: {:.3} ms per batch on the device profiles {described}; SSD data file {}\n",
        p.seconds_per_batch * 1e3,
        round_size(ssd_need).1
    );
    if a.out.is_none() {
        o.push_str(&toml_text);
    }
    emit(&o)
}

/// The cached tables' sizes in `p` as `cfg` (the store.toml) writes
/// them, rounded to units a person would write: `--json`, the table and
/// the file then give the same bytes and rows.
fn sizes_as_written(p: &mut Plan, cfg: &embtier::StoreConfig) {
    for (tp, tc) in p.tables.iter_mut().zip(&cfg.tables) {
        if tp.placement == Decision::Cached {
            let rb = tp.row_bytes.max(1);
            tp.dram_bytes = tc.dram_bytes.map_or(0, |b| b.0);
            tp.dram_rows = tp.dram_bytes / rb;
            tp.pmem_bytes = tc.pmem_bytes.map_or(0, |b| b.0);
            tp.pmem_rows = tp.pmem_bytes / rb;
        }
    }
}

/// The plan as a table: a row per table, then the whole.
fn plan_table(p: &Plan, cfg: &embtier::StoreConfig) -> Table {
    let mut t = Table::new([
        "table",
        "rows",
        "row bytes",
        "placement",
        "DRAM",
        "DRAM rows",
        "PMem",
        "PMem rows",
        "DRAM share",
        "PMem share",
        "SSD share",
    ]);
    let size = |b: u64| round_size(b).1;
    for (tp, tc) in p.tables.iter().zip(&cfg.tables) {
        let (d, m) = match tp.placement {
            Decision::PinnedDram => (tc.rows * tp.row_bytes, 0),
            Decision::PinnedPmem => (0, tc.rows * tp.row_bytes),
            Decision::Cached => (
                tc.dram_bytes.map_or(0, |b| b.0),
                tc.pmem_bytes.map_or(0, |b| b.0),
            ),
        };
        let placement = match tp.placement {
            Decision::Cached => "cached",
            Decision::PinnedDram => "pinned-dram",
            Decision::PinnedPmem => "pinned-pmem",
        };
        t.row([
            tp.name.clone(),
            tc.rows.to_string(),
            tp.row_bytes.to_string(),
            placement.to_string(),
            size(d),
            (d / tp.row_bytes).to_string(),
            size(m),
            (m / tp.row_bytes).to_string(),
            format!("{:.4}", tp.dram_hit_ratio),
            format!("{:.4}", tp.pmem_hit_ratio),
            format!("{:.4}", tp.ssd_ratio),
        ]);
    }
    t.row([
        "(all)".to_string(),
        p.tables.iter().map(|t| t.rows).sum::<u64>().to_string(),
        "-".into(),
        "-".into(),
        size(capacity_of(cfg, embtier::MemoryKind::Dram)),
        "-".into(),
        size(capacity_of(cfg, embtier::MemoryKind::Pmem)),
        "-".into(),
        format!("{:.4}", p.dram_hit_ratio),
        format!("{:.4}", p.pmem_hit_ratio),
        format!("{:.4}", p.ssd_ratio),
    ]);
    t
}

/// The bytes of `cfg`'s tiers of `kind`.
fn capacity_of(cfg: &embtier::StoreConfig, kind: embtier::MemoryKind) -> u64 {
    cfg.tiers
        .iter()
        .filter(|t| t.kind == kind)
        .map(|t| t.capacity.0)
        .sum()
}
