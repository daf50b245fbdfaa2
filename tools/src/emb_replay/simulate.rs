//! `emb-replay simulate`: policies and sizes swept over a trace, and tier
//! hierarchies (`--tiers`).

use super::*;

/// `emb-replay simulate`: a policy x size sweep, or a tier hierarchy.
pub(super) fn simulate(a: SimulateArgs) -> Result<(), Fail> {
    let row_bytes = a.row_bytes.unwrap_or(DEFAULT_ROW_BYTES);
    if let Some(spec) = &a.tiers {
        let t = load(&a.input)?;
        return hierarchy(&t, spec, a.inclusive, &a.devices, row_bytes, a.output);
    }
    let mut sims: Vec<SimPolicy> = Vec::new();
    for p in &a.policies {
        let p: SimPolicy = p.parse().map_err(|e| usage(format!("--policies: {e}")))?;
        if !sims.contains(&p) {
            sims.push(p); // `lru,LRU` is one policy
        }
    }
    check_sizes(&a.sizes)?;
    // The whole trace held, as keys and dense ids: on huge pages (not
    // under --sample, which holds a sample).
    embtier::memory::HugePageAlloc::set_enabled(a.sample.is_none());
    // One id space over (table, row); dense once, no hashing per request after.
    let Keys {
        tables,
        keys,
        per_table,
    } = load_keys(&a.input)?;
    let requests = keys.len();
    let mut sweep = MiniSim::new(keys, a.sample.unwrap_or(1.0), a.min_objects);
    let start = std::time::Instant::now();
    if sweep.rate() < 1.0 && !a.no_lru_reference {
        sweep = sweep.with_lru_reference();
    }
    let unique = sweep.unique_estimate();
    let mean = mean_row_bytes_by_table(&tables, &per_table, row_bytes);
    let sizes = parse_sizes(&a.sizes, unique, mean)?;
    let points = sweep.curves(&sims, &sizes);
    let results: Vec<(SimPolicy, u64, SimResult)> = points
        .iter()
        .map(|p| (p.policy, p.size, p.result))
        .collect();
    let sampled = if sweep.rate() < 1.0 {
        let (req, keys) = sweep.sampled();
        let raised: Vec<String> = sizes
            .iter()
            .filter(|&&z| sweep.rate_for(z) > sweep.rate())
            .map(|&z| format!("{z} at {:.4}", sweep.rate_for(z)))
            .collect();
        format!(
            "; a spatial sample at rate {:.4}: {req} requests of {keys} keys, caches scaled by the rate{}{}",
            sweep.rate(),
            if sweep.lru_reference() {
                ", corrected by LRU's error on the sample"
            } else {
                ""
            },
            if raised.is_empty() {
                String::new()
            } else {
                format!(
                    "; sizes under {} scaled objects ran at a larger rate: {}",
                    a.min_objects,
                    raised.join(", ")
                )
            }
        )
    } else {
        String::new()
    };
    eprintln!(
        "{} simulations of {requests} requests ({unique} unique rows{sampled}) in {:.2} s",
        results.len(),
        start.elapsed().as_secs_f64()
    );
    let get = |s: SimPolicy, z: u64| {
        results
            .iter()
            .find(|r| r.0 == s && r.1 == z)
            .expect("simulated")
            .2
    };
    if let Some(dir) = &a.plot {
        std::fs::create_dir_all(dir).map_err(|e| data(format!("--plot {}: {e}", dir.display())))?;
        let series: Vec<(String, Vec<(f64, f64)>)> = sims
            .iter()
            .map(|&s| {
                let pts = sizes
                    .iter()
                    .map(|&z| (z as f64, get(s, z).miss_ratio()))
                    .collect();
                (s.name().to_string(), pts)
            })
            .collect();
        let path = dir.join("mrc.svg");
        plot::mrc_lines(
            &path,
            &format!("Miss-ratio curves by policy: {}", a.input.trace.display()),
            &series,
        )
        .map_err(|e| data(format!("--plot {}: {e}", path.display())))?;
        eprintln!("{}: written", path.display());
    }
    let o = if a.output.json {
        let v: Vec<serde_json::Value> = results
            .iter()
            .map(|(s, z, r)| {
                serde_json::json!({
                    "policy": s.name(), "size": z, "miss_ratio": r.miss_ratio(),
                    "hits": r.hits, "misses": r.misses, "rate": sweep.rate_for(*z),
                })
            })
            .collect();
        let mut o = serde_json::to_string_pretty(&serde_json::json!({
            "results": v, "requests": requests, "unique_rows": unique, "sample_rate": sweep.rate(),
        }))
        .map_err(data)?;
        o.push('\n');
        o
    } else if a.output.csv {
        let mut t = Table::new(["policy", "size", "miss_ratio", "hits", "misses"]);
        for (s, z, r) in &results {
            t.row([
                s.name().to_string(),
                z.to_string(),
                format!("{:.6}", r.miss_ratio()),
                r.hits.to_string(),
                r.misses.to_string(),
            ]);
        }
        t.csv()
    } else {
        let mut o = miss_ratio_table(
            &sims,
            &sizes,
            |z| z.to_string(),
            |s, z| get(s, z).miss_ratio(),
        );
        let _ = writeln!(
            o,
            "\nmiss ratios (misses / requests); sizes in rows; {requests} requests, {unique} unique rows{sampled}"
        );
        o
    };
    emit(&o)
}

/// A markdown table of miss ratios: a row per policy, a column per cache
/// size (headed by `label`).
pub(super) fn miss_ratio_table(
    sims: &[SimPolicy],
    sizes: &[u64],
    label: impl Fn(u64) -> String,
    ratio: impl Fn(SimPolicy, u64) -> f64,
) -> String {
    let mut t =
        Table::new(std::iter::once("policy".to_string()).chain(sizes.iter().map(|&z| label(z))));
    for &s in sims {
        t.row(
            std::iter::once(s.name().to_string())
                .chain(sizes.iter().map(|&z| format!("{:.4}", ratio(s, z)))),
        );
    }
    t.markdown()
}

/// Parse `dram:lru:64MiB,pmem:sieve:1GiB,ssd`.
pub(super) fn parse_tiers(spec: &str, row_bytes: u64, unique: u64) -> Result<Hierarchy, Fail> {
    let mut h = Hierarchy {
        tiers: Vec::new(),
        ssd: false,
        inclusive: false,
    };
    let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
    for (i, part) in parts.iter().enumerate() {
        if *part == "ssd" {
            if i + 1 != parts.len() {
                return Err(usage("--tiers: ssd must be the last tier"));
            }
            h.ssd = true;
            continue;
        }
        let f: Vec<&str> = part.split(':').collect();
        if f.len() != 3 {
            return Err(usage(format!(
                "--tiers: {part:?} is not NAME:POLICY:SIZE (e.g. dram:lru:64MiB)"
            )));
        }
        let kind = f[1]
            .parse::<SimPolicy>()
            .ok()
            .and_then(SimPolicy::online)
            .ok_or_else(|| {
                usage(format!(
                    "--tiers: {:?} is not a policy a tier runs; a tier runs {}",
                    f[1],
                    PolicyKind::list(PolicyKind::ALL.iter().copied())
                ))
            })?;
        let rows = parse_sizes(&[f[2].to_string()], unique, row_bytes)?[0];
        let memory = f[0]
            .parse::<embtier::MemoryKind>()
            .map_err(|e| usage(format!("--tiers: {e}")))?;
        h.tiers.push(TierSpec {
            kind: memory,
            policy: kind,
            rows,
        });
    }
    if h.tiers.is_empty() {
        return Err(usage("--tiers: at least one cache tier"));
    }
    Ok(h)
}

/// The table of a hierarchy simulation: a row per tier, then the SSD.
pub(super) fn hierarchy_table(r: &HierarchyReport) -> Table {
    let mut t = Table::new([
        "tier",
        "policy",
        "rows",
        "lookups",
        "hits",
        "hit ratio",
        "share of requests",
        "MiB read",
        "MiB written",
        "evictions",
        "dirty write-backs",
    ]);
    for tr in &r.tiers {
        t.row([
            tr.name.clone(),
            tr.policy.clone(),
            tr.rows.to_string(),
            tr.lookups.to_string(),
            tr.hits.to_string(),
            format!("{:.4}", tr.hit_ratio),
            format!("{:.4}", tr.request_share),
            mib(tr.bytes_read),
            mib(tr.bytes_written),
            tr.evictions.to_string(),
            tr.dirty_writebacks.to_string(),
        ]);
    }
    let s = &r.ssd;
    t.row([
        "ssd".to_string(),
        "-".into(),
        "all".into(),
        format!("{} rows read", s.rows_read),
        "-".into(),
        "-".into(),
        "-".into(),
        format!("{} ({} block reads)", mib(s.bytes_read), s.read_ops),
        format!(
            "{} ({} block writes, {} rows)",
            mib(s.bytes_written),
            s.write_ops,
            s.rows_written
        ),
        "-".into(),
        "-".into(),
    ]);
    t
}

pub(super) fn hierarchy(
    t: &Trace,
    spec: &str,
    inclusive: bool,
    devices: &Devices,
    row_bytes: u64,
    output: Output,
) -> Result<(), Fail> {
    let geo = RowGeometry::of(t, row_bytes);
    let keys: Vec<u64> = t.accesses.iter().map(|a| a.key()).collect();
    let (_, unique) = embtier_sim::densify(&keys);
    let mut h = parse_tiers(spec, mean_row_bytes(t, row_bytes), unique as u64)?;
    h.inclusive = inclusive;
    let names: Vec<&str> = h
        .tiers
        .iter()
        .map(|t| t.kind.name())
        .chain(std::iter::once("ssd"))
        .collect();
    let profiles = devices.resolve(&names)?;
    let r = simulate_hierarchy(t, &h, &geo, Some(&profiles));
    let to_ssd = r.ssd.rows_read;
    if output.json {
        let v = serde_json::json!({ "results": [{
            "policy": h.tiers[0].policy.name(),
            "size": h.tiers[0].rows,
            "miss_ratio": to_ssd as f64 / r.accesses.max(1) as f64,
            "hits": r.tiers.iter().map(|t| t.hits).sum::<u64>(),
            "misses": to_ssd,
            "inclusive": h.inclusive,
            "tiers": r.tiers,
            "ssd": r.ssd,
            "est_seconds": r.est_seconds,
            "est_seconds_per_batch": r.est_seconds_per_batch,
        }]});
        let mut o = serde_json::to_string_pretty(&v).map_err(data)?;
        o.push('\n');
        return emit(&o);
    }
    let table = hierarchy_table(&r);
    if output.csv {
        return emit(&table.csv());
    }
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} hierarchy, {} accesses in {} batches, {} unique rows\n",
        if h.inclusive {
            "inclusive"
        } else {
            "exclusive"
        },
        r.accesses,
        r.batches,
        unique
    );
    o.push_str(&table.markdown());
    let _ = writeln!(
        o,
        "\n{SHARES}\nestimated time: {:.3} ms per batch, {:.2} s for the trace (device profiles of {})",
        r.est_seconds_per_batch * 1e3,
        r.est_seconds,
        names.join(", ")
    );
    emit(&o)
}
