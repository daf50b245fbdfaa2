//! `emb-replay simulate`: policies and sizes swept over a trace, and tier
//! hierarchies (`--tiers`).

use super::*;

/// `emb-replay simulate`: a policy x size sweep, or a tier hierarchy.
pub(super) fn simulate(a: SimulateArgs) -> Result<(), Fail> {
    let row_bytes = a.row_bytes.unwrap_or(DEFAULT_ROW_BYTES);
    if a.tiers.is_none() && (a.devices.given() || a.inclusive) {
        return Err(usage(
            "--devices, --profile and --inclusive describe a hierarchy: give --tiers (a sweep has no tiers and estimates no time)",
        ));
    }
    if let Some(spec) = &a.tiers {
        let t = load(&a.input)?;
        return hierarchy(
            &t,
            &a.input.trace,
            spec,
            a.inclusive,
            &a.devices,
            row_bytes,
            a.output,
        );
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
    // An oracleGeneral file's own ids for a policy that hashes keys
    // (W-TinyLFU), so that it decides as libCacheSim does on the same file
    // rather than on the dense rows.
    let hashes = sims
        .iter()
        .any(|p| matches!(p, SimPolicy::Online(k) if k.hashes_keys()));
    let Keys {
        tables,
        keys,
        per_table,
        own_ids,
    } = load_keys(&a.input, hashes)?;
    let requests = keys.len();
    let mut sweep = MiniSim::new(keys, a.sample.unwrap_or(1.0), a.min_objects);
    if let Some(ids) = own_ids {
        sweep = sweep.with_original_ids(ids);
    }
    let start = std::time::Instant::now();
    if sweep.rate() < 1.0 && !a.no_lru_reference {
        sweep = sweep.with_lru_reference();
    }
    let is_sampled = sweep.rate() < 1.0;
    if let (true, Some(asked)) = (is_sampled, a.sample) {
        check_sample(asked, sweep.rate(), sweep.sampled().0, requests)?;
    }
    let unique = sweep.unique_estimate();
    // Under sampling the unique rows are an estimate, said as one.
    let unique_text = if is_sampled {
        format!(
            "about {unique} unique rows (estimated from the {}% sample)",
            sig(sweep.rate() * 100.0)
        )
    } else {
        format!("{unique} unique rows")
    };
    let mean = mean_row_bytes_by_table(&tables, &per_table, row_bytes);
    let auto = a.sizes.len() == 1 && a.sizes[0].trim() == "auto";
    let sizes = if is_sampled && !auto {
        // No size "exceeds the trace's unique rows" on an estimate.
        let sizes = parse_sizes(&a.sizes, u64::MAX, mean)?;
        for &z in sizes.iter().filter(|&&z| z > unique) {
            eprintln!(
                "note: size {z} exceeds the estimated {unique} unique rows (from the {}% sample): it may see only cold misses",
                sig(sweep.rate() * 100.0)
            );
        }
        sizes
    } else {
        parse_sizes(&a.sizes, unique, mean)?
    };
    let points = sweep.curves(&sims, &sizes);
    // (policy, size asked, result, rows the cache really held)
    let results: Vec<(SimPolicy, u64, SimResult, u64)> = points
        .iter()
        .map(|p| (p.policy, p.size, p.result, rows_simulated(p)))
        .collect();
    warn_rounded(&sims, &results);
    let rounded = results.iter().any(|r| r.3 != r.1);
    let sampled = if is_sampled {
        let (req, keys) = sweep.sampled();
        let raised: Vec<String> = sizes
            .iter()
            .filter(|&&z| sweep.rate_for(z) > sweep.rate())
            .map(|&z| format!("{z} at {}", sig(sweep.rate_for(z))))
            .collect();
        format!(
            "; a spatial sample at rate {}: {req} requests of {keys} keys, caches scaled by the rate{}{}",
            sig(sweep.rate()),
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
        "{} simulations of {requests} requests ({unique_text}{sampled}) in {:.2} s",
        results.len(),
        start.elapsed().as_secs_f64()
    );
    let get = |s: SimPolicy, z: u64| {
        let r = results
            .iter()
            .find(|r| r.0 == s && r.1 == z)
            .expect("simulated");
        (r.2, r.3)
    };
    if let Some(dir) = &a.plot {
        std::fs::create_dir_all(dir).map_err(|e| data(format!("--plot {}: {e}", dir.display())))?;
        // Each point at the rows its cache held.
        let series: Vec<(String, Vec<(f64, f64)>)> = sims
            .iter()
            .map(|&s| {
                let pts = sizes
                    .iter()
                    .map(|&z| {
                        let (r, rows) = get(s, z);
                        (rows as f64, r.miss_ratio())
                    })
                    .collect();
                (s.name().to_string(), pts)
            })
            .collect();
        let path = dir.join("policy_mrc.svg");
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
            .map(|(s, z, r, rows)| {
                serde_json::json!({
                    "policy": s.name(), "size": z, "rows_simulated": rows,
                    "miss_ratio": r.miss_ratio(), "hits": r.hits, "misses": r.misses,
                    "rate": sweep.rate_for(*z),
                })
            })
            .collect();
        let mut o = serde_json::to_string_pretty(&serde_json::json!({
            "results": v, "requests": requests, "unique_rows": unique,
            "unique_rows_estimated": is_sampled, "sample_rate": sweep.rate(),
        }))
        .map_err(data)?;
        o.push('\n');
        o
    } else if a.output.csv {
        let mut t = Table::new([
            "policy",
            "size",
            "miss_ratio",
            "hits",
            "misses",
            "rows_simulated",
        ]);
        for (s, z, r, rows) in &results {
            t.row([
                s.name().to_string(),
                z.to_string(),
                format!("{:.6}", r.miss_ratio()),
                r.hits.to_string(),
                r.misses.to_string(),
                rows.to_string(),
            ]);
        }
        t.csv()
    } else {
        let mut o = miss_ratio_table(
            &sims,
            &sizes,
            |z| z.to_string(),
            |s, z| miss_ratio_cell(z, get(s, z).0.miss_ratio(), get(s, z).1),
        );
        let _ = writeln!(
            o,
            "\nmiss ratios (misses / requests); sizes in rows{}; {requests} requests, {unique_text}{sampled}",
            if rounded {
                format!(
                    " (a figure followed by (N rows) is a cache of N rows: a {WAYS}-way cache holds whole sets of {WAYS} rows)"
                )
            } else {
                String::new()
            }
        );
        o
    };
    emit(&o)
}

/// Ways per set of the 32-way caches.
pub(super) const WAYS: u64 = embtier_sim::policy::WAYS as u64;

/// The rows the cache of point `p` really held, as a full-trace size:
/// the size asked for, except for a set-associative cache, which holds
/// whole sets of [`WAYS`] rows (its miniature cache's size rounded up to
/// a multiple of [`WAYS`], and scaled back by the rate it ran at).
pub(super) fn rows_simulated(p: &MiniPoint) -> u64 {
    match p.policy {
        SimPolicy::SetAssoc(_) => {
            let held = p.scaled.max(1).div_ceil(WAYS) * WAYS;
            if held == p.scaled {
                p.size
            } else if p.rate >= 1.0 {
                held
            } else {
                (held as f64 / p.rate).round() as u64
            }
        }
        _ => p.size,
    }
}

/// A cell of a miss-ratio table: the ratio, and the rows simulated where
/// they are not the `size` of its column.
pub(super) fn miss_ratio_cell(size: u64, ratio: f64, rows: u64) -> String {
    if rows == size {
        format!("{ratio:.4}")
    } else {
        format!("{ratio:.4} ({rows} rows)")
    }
}

/// A warning line per policy of `sims` that ran some size of `results`
/// (policy, size, result, rows simulated) at other than that many rows.
pub(super) fn warn_rounded(sims: &[SimPolicy], results: &[(SimPolicy, u64, SimResult, u64)]) {
    for &s in sims {
        let moved: Vec<(u64, u64)> = results
            .iter()
            .filter(|r| r.0 == s && r.3 != r.1)
            .map(|r| (r.1, r.3))
            .collect();
        if moved.is_empty() {
            continue;
        }
        let list: Vec<String> = moved
            .iter()
            .enumerate()
            .map(|(i, (z, rows))| {
                if i == 0 {
                    format!("{z} ran as {rows}")
                } else {
                    format!("{z} as {rows}")
                }
            })
            .collect();
        eprintln!(
            "warning: {s} holds whole sets of {WAYS} rows: size{} {} rows; its figures are those of the rows simulated (rows_simulated in --json and --csv)",
            if moved.len() > 1 { "s" } else { "" },
            list.join(", ")
        );
    }
}

/// The fewest sampled requests a curve is worth trusting from.
const MIN_SAMPLED: usize = embtier_tools::cli::FEW_SAMPLED as usize;

/// A sample at `rate` (`asked` on the command line) holding `sampled` of
/// the trace's `requests`: none is a data error, few a warning; each says
/// about what rate would hold [`MIN_SAMPLED`].
fn check_sample(asked: f64, rate: f64, sampled: usize, requests: usize) -> Result<(), Fail> {
    let want = if sampled == 0 {
        (MIN_SAMPLED as f64 / requests.max(1) as f64).max(2.0 * rate)
    } else {
        rate * MIN_SAMPLED as f64 / sampled as f64
    };
    let advice = if want < 1.0 {
        format!(
            "use a larger rate (about {} or more for {MIN_SAMPLED} requests)",
            sig_up(want)
        )
    } else {
        format!("use a larger rate, or no --sample (the trace has too few requests for a sample of {MIN_SAMPLED})")
    };
    if sampled == 0 {
        return Err(data(format!(
            "--sample {}: the sample at rate {} holds none of the trace's {requests} requests; {advice}",
            sig(asked),
            sig(rate)
        )));
    }
    if sampled < MIN_SAMPLED {
        eprintln!(
            "warning: --sample {}: the sample at rate {} holds only {sampled} of the trace's {requests} requests: the estimated curve is unreliable; {advice}",
            sig(asked),
            sig(rate)
        );
    }
    Ok(())
}

/// The decimals that show `x` to three significant digits.
fn sig_decimals(x: f64) -> usize {
    (2 - x.log10().floor() as i64).max(0) as usize
}

/// `x` to three significant digits, rounded up (a rate to ask for).
pub(super) fn sig_up(x: f64) -> String {
    if x <= 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let d = sig_decimals(x);
    let scale = 10f64.powi(d as i32);
    sig((x * scale).ceil() / scale)
}

/// `x` to three significant digits, without trailing zeros (`0.01`,
/// `12.5`, `5.96e-8` as `0.0000000596`).
pub(super) fn sig(x: f64) -> String {
    if x <= 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let decimals = sig_decimals(x);
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A markdown table of miss ratios: a row per policy, a column per cache
/// size (headed by `label`), each cell from `cell` (see [`miss_ratio_cell`]).
pub(super) fn miss_ratio_table(
    sims: &[SimPolicy],
    sizes: &[u64],
    label: impl Fn(u64) -> String,
    cell: impl Fn(SimPolicy, u64) -> String,
) -> String {
    let mut t =
        Table::new(std::iter::once("policy".to_string()).chain(sizes.iter().map(|&z| label(z))));
    for &s in sims {
        t.row(std::iter::once(s.name().to_string()).chain(sizes.iter().map(|&z| cell(s, z))));
    }
    t.markdown()
}

/// Parse `dram:lru:64MiB,pmem:sieve:1GiB,ssd`: cache tiers, fastest
/// first, above the SSD, which ends the list (the hierarchy reads its
/// misses from it, and costs that).
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
        let rows = tier_rows(part, f[2], row_bytes, unique)?;
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
    if !h.ssd {
        return Err(usage(format!(
            "--tiers: {spec:?} has no ssd: the cache tiers sit above an SSD, which ends the list, e.g. {},ssd",
            parts.join(",")
        )));
    }
    Ok(h)
}

/// The rows of tier `part` from its `size` field: rows (`1000`) or bytes
/// (`64MiB`, at `row_bytes` a row); a note when above the `unique` rows.
fn tier_rows(part: &str, size: &str, row_bytes: u64, unique: u64) -> Result<u64, Fail> {
    let rows = embtier_tools::cli::size_rows(size, row_bytes, "a tier")
        .map_err(|e| usage(format!("--tiers: {part:?}: {e}")))?;
    if rows > unique {
        eprintln!(
            "note: tier {part}: {rows} rows exceed the trace's {unique} unique rows: only cold misses remain"
        );
    }
    Ok(rows)
}

/// The table of a hierarchy simulation: a row per tier, then the SSD,
/// which serves the requests no tier held (its share of requests is the
/// miss ratio) and reads their rows, once per batch.
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
    let c = Counts::of(r);
    let s = &r.ssd;
    t.row([
        "ssd".to_string(),
        "-".into(),
        "all".into(),
        c.misses.to_string(),
        "-".into(),
        "-".into(),
        format!("{:.4}", c.miss_ratio()),
        format!(
            "{} ({} rows read, {} block reads)",
            mib(s.bytes_read),
            s.rows_read,
            s.read_ops
        ),
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

/// The totals of a hierarchy simulation, consistent by construction:
/// `hits + misses == requests`.
pub(super) struct Counts {
    /// Row requests: the first tier's lookups (every row a lookup asks
    /// for, and every row an update asks for once per batch).
    pub requests: u64,
    /// Requests some cache tier held.
    pub hits: u64,
    /// Requests no cache tier held: `requests - hits`.
    pub misses: u64,
}

impl Counts {
    /// The totals of `r`.
    pub fn of(r: &HierarchyReport) -> Counts {
        let requests = r.tiers.first().map_or(0, |t| t.lookups);
        let hits: u64 = r.tiers.iter().map(|t| t.hits).sum();
        Counts {
            requests,
            hits,
            misses: requests.saturating_sub(hits),
        }
    }

    /// misses / requests.
    pub fn miss_ratio(&self) -> f64 {
        self.misses as f64 / self.requests.max(1) as f64
    }
}

/// `emb-replay simulate --tiers`: the trace through a hierarchy, its
/// counts printed as a table (text, CSV) or JSON.
pub(super) fn hierarchy(
    t: &Trace,
    path: &std::path::Path,
    spec: &str,
    inclusive: bool,
    devices: &Devices,
    row_bytes: u64,
    output: Output,
) -> Result<(), Fail> {
    let geo = RowGeometry::of(t, row_bytes);
    let keys: Vec<u64> = t.accesses.iter().map(|a| a.key()).collect();
    embtier_sim::densify::check_dense(&keys).map_err(|limit| {
        data(format!(
            "{}: more than {limit} distinct (table, row) keys; the hierarchy numbers them in 32 bits",
            path.display()
        ))
    })?;
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
    let described = devices.describe(&names)?;
    let r = simulate_hierarchy(t, &h, &geo, Some(&profiles));
    let c = Counts::of(&r);
    if output.json {
        let v = serde_json::json!({ "results": [{
            "policy": h.tiers[0].policy.name(),
            "size": h.tiers[0].rows,
            "accesses": r.accesses,
            "requests": c.requests,
            "hits": c.hits,
            "misses": c.misses,
            "miss_ratio": c.miss_ratio(),
            "ssd_rows_read": r.ssd.rows_read,
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
        "{} hierarchy, {} accesses ({} row requests) in {} batches, {} unique rows\n",
        if h.inclusive {
            "inclusive"
        } else {
            "exclusive"
        },
        r.accesses,
        c.requests,
        r.batches,
        unique
    );
    o.push_str(&table.markdown());
    let by_tier: Vec<String> = r
        .tiers
        .iter()
        .map(|t| format!("{} {}", t.name, t.hits))
        .collect();
    let _ = writeln!(
        o,
        "\n{} row requests: {} hits, {} misses (miss ratio {:.4}); hits by tier: {}; the SSD read {} rows for the misses (a row missed twice in a batch is read once)",
        c.requests,
        c.hits,
        c.misses,
        c.miss_ratio(),
        by_tier.join(", "),
        r.ssd.rows_read
    );
    let _ = writeln!(
        o,
        "{SHARES}\nestimated time: {:.3} ms per batch, {:.2} s for the trace (device profiles: {described})",
        r.est_seconds_per_batch * 1e3,
        r.est_seconds,
    );
    emit(&o)
}
