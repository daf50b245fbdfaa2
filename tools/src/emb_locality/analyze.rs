//! `emb-locality analyze`: the report of a trace, as text, CSV or JSON,
//! and its charts.

use super::*;
use embtier_tools::cli::FEW_SAMPLED;

/// Memory the exact analysis takes per access: it streams the trace into
/// each table's dense ids and holds those (measured: 22.1 M accesses over
/// 800 tables peaked at 703,860 KiB of RSS on huge pages, 32.6 bytes an
/// access; 31.8 on 4 KiB pages).
pub(super) const EXACT_BYTES_PER_ACCESS: u64 = 34;

/// Memory per access of an exact analysis beside the loaded trace, as
/// `plan` holds it to replay it (measured: 1.07 GB for the same 22 M
/// accesses, 48.5 bytes an access).
pub(super) const HELD_BYTES_PER_ACCESS: u64 = 50;

/// The default of `--max-memory`: three quarters of the machine's memory
/// (16 GiB where /proc/meminfo cannot be read).
pub(super) fn default_max_memory() -> u64 {
    let kib = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    });
    kib.map_or(16 << 30, |k| k * 1024 / 4 * 3)
}

/// What is known of a trace before its accesses are read.
pub(super) struct Headers {
    /// The format (`auto` resolved).
    pub format: Format,
    /// Accesses: a `.etrace`'s from its chunk headers, an oracleGeneral
    /// file's from its length; `None` for the other formats.
    pub accesses: Option<u64>,
    /// A `.etrace`'s batches (0 otherwise).
    pub batches: u64,
    /// A `.etrace`'s catalog (empty otherwise).
    pub tables: Vec<TraceTable>,
}

/// The [`Headers`] of `input`, reading no access.
pub(super) fn headers(input: &Input) -> Result<Headers, Fail> {
    let path = &input.trace;
    let format = match input.format {
        Format::Auto => detect(path).map_err(data)?,
        f => f,
    };
    let fail = |e: &dyn std::fmt::Display| data(format!("{}: {e}", path.display()));
    let mut h = Headers {
        format,
        accesses: None,
        batches: 0,
        tables: Vec::new(),
    };
    match format {
        Format::Etrace => {
            let f = std::fs::File::open(path).map_err(|e| fail(&e))?;
            let mut r = TraceReader::new(std::io::BufReader::new(f)).map_err(|e| fail(&e))?;
            let (batches, accesses) = r.totals().map_err(|e| fail(&e))?;
            h.accesses = Some(accesses);
            h.batches = batches;
            h.tables = r.tables().to_vec();
        }
        Format::OracleGeneral => {
            h.accesses = Some(std::fs::metadata(path).map_err(|e| fail(&e))?.len() / 24);
        }
        _ => {}
    }
    Ok(h)
}

/// A trace's catalog and size, and its analysis.
pub(super) struct Analysed {
    /// The tables.
    pub tables: Vec<TraceTable>,
    /// Accesses.
    pub accesses: u64,
    /// Batches.
    pub batches: u64,
    /// The analysis.
    pub report: Report,
}

/// Bytes in the binary unit that fits them, to a tenth: `1.6 MiB`,
/// `1.0 KiB`, `512 B`.
fn bytes_text(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = b as f64;
    let mut u = 0;
    while x >= 1024.0 && u + 1 < units.len() {
        x /= 1024.0;
        u += 1;
    }
    match u {
        0 => format!("{b} B"),
        _ => format!("{x:.1} {}", units[u]),
    }
}

/// Why an exact analysis of `accesses` accesses is refused under
/// `max_memory`, if it is: past the memory, or past the accesses it can
/// number ([`MAX_EXACT_ACCESSES`]).
pub(super) fn exact_refusal(accesses: u64, max_memory: u64) -> Option<String> {
    let sample = "use --sample 0.01 (SHARDS: one pass, memory bounded by the tables' rows)";
    let need = accesses.saturating_mul(EXACT_BYTES_PER_ACCESS);
    if accesses > MAX_EXACT_ACCESSES {
        Some(format!(
            "the exact analysis holds at most {MAX_EXACT_ACCESSES} accesses (it numbers them in 32 bits), not {accesses}; {sample}"
        ))
    } else if need > max_memory {
        Some(format!(
            "the exact analysis of {accesses} accesses needs about {}, over --max-memory {}; {sample} or raise --max-memory",
            bytes_text(need),
            bytes_text(max_memory)
        ))
    } else {
        None
    }
}

/// Analyse `input`: a sampled analysis of a `.etrace` streams (memory
/// bounded by the tables' rows), and one of any other file reads it twice
/// (memory bounded by its distinct ids); the exact analysis reads the file
/// once, holding each access as dense ids but not the trace. The exact
/// analysis is refused, naming `--sample`, where it would take more than
/// `max_memory`. `sizes` turns a mean row size into the MRC sizes.
pub(super) fn analysed(
    input: &Input,
    mut opts: Options,
    max_memory: u64,
    sizes: impl FnOnce(u64) -> Result<Option<Vec<u64>>, Fail>,
) -> Result<Analysed, Fail> {
    let path = &input.trace;
    let h = headers(input)?;
    let refuse = |accesses: u64| match opts.sample {
        None => exact_refusal(accesses, max_memory).map_or(Ok(()), |why| {
            Err(usage(format!("{}: {why}", path.display())))
        }),
        Some(_) => Ok(()),
    };
    if let Some(n) = h.accesses {
        refuse(n)?;
    }
    if h.format == Format::Etrace && opts.sample.is_some() {
        let (tables, accesses, batches) = (h.tables, h.accesses.unwrap_or(0), h.batches);
        let state = StreamAnalysis::row_state_bytes(&tables);
        if state > max_memory {
            return Err(usage(format!(
                "{}: the per-row counters of the {} tables' rows need up to {}, over --max-memory {}; raise --max-memory",
                path.display(),
                tables.len(),
                bytes_text(state),
                bytes_text(max_memory)
            )));
        }
        let default = opts.row_bytes.unwrap_or(DEFAULT_ROW_BYTES);
        let mean = tables.iter().map(|t| row_bytes_of(t, default)).sum::<u64>()
            / tables.len().max(1) as u64;
        opts.mrc_sizes = sizes(mean.max(1))?;
        eprintln!(
            "{}: read as etrace, streamed: {accesses} accesses in {batches} batches",
            path.display()
        );
        let spinner = progress("analysing");
        let report = analyze_etrace(path, &opts).map_err(data)?;
        if let Some(s) = spinner {
            s.finish_and_clear();
        }
        return Ok(Analysed {
            tables,
            accesses,
            batches,
            report,
        });
    }
    if opts.sample.is_some() {
        // One pass reads the catalog, a second feeds the analysis: memory
        // grows with the distinct ids, not with the accesses. (The rows of
        // these formats carry no size: the MRC sizes take the default.)
        opts.mrc_sizes = sizes(opts.row_bytes.unwrap_or(DEFAULT_ROW_BYTES))?;
        // The id tables of these formats are large random arrays, filled
        // whole: on huge pages (a Criteo file of 52 M accesses and 13 M
        // distinct values: 10-14% faster, the same peak RSS).
        embtier::memory::HugePageAlloc::set_enabled(true);
        let spinner = progress("analysing");
        let s = analyze_file(
            path,
            h.format,
            &input.columns,
            input.batch_size as usize,
            &opts,
        )
        .map_err(data)?;
        if let Some(s) = spinner {
            s.finish_and_clear();
        }
        let (accesses, batches) = (s.accesses, s.batches);
        eprintln!(
            "{}: read as {}, streamed in two passes: {accesses} accesses in {batches} batches",
            path.display(),
            s.format.name(),
        );
        say_read(input, &s.notes, accesses, batches);
        return Ok(Analysed {
            tables: s.tables,
            accesses,
            batches,
            report: s.report,
        });
    }
    // The exact analysis streams the file into each table's dense ids
    // (the trace itself is never held), and past --max-memory's worth of
    // accesses holds nothing more and refuses at the end. Its memory is a
    // few arrays it fills (ids, per-row records): on huge pages.
    embtier::memory::HugePageAlloc::set_enabled(true);
    let spinner = progress(&format!("reading {}", path.display()));
    let catalog = (h.format == Format::Etrace).then_some(&h.tables[..]);
    let limit = max_memory / EXACT_BYTES_PER_ACCESS;
    let mut x = ExactAnalysis::new(catalog, h.accesses.unwrap_or(0), limit);
    let (format, tables, notes) = import_stream(
        path,
        h.format,
        &input.columns,
        input.batch_size as usize,
        |b| x.batch(b),
    )
    .map_err(data)?;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    if input.format == Format::Auto {
        eprintln!("{}: read as {}", path.display(), format.name());
    }
    // A .etrace carries its trainer's batches: no warning for those.
    let batches = if format == Format::Etrace {
        0
    } else {
        x.batches()
    };
    say_read(input, &notes, x.accesses(), batches);
    if x.over() {
        refuse(x.accesses())?;
    }
    let default = opts.row_bytes.unwrap_or(DEFAULT_ROW_BYTES);
    opts.mrc_sizes = sizes(mean_row_bytes_by_table(
        &tables,
        &x.per_table(tables.len()),
        default,
    ))?;
    let spinner = progress("analysing");
    let (accesses, batches) = (x.accesses(), x.batches());
    let report = x.finish(&tables, &opts);
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    Ok(Analysed {
        accesses,
        batches,
        tables,
        report,
    })
}

/// The MRC sizes of `--sizes`: `None` for `auto`; bytes with `--bytes`.
fn mrc_sizes(spec: &[String], mean_row_bytes: u64, bytes: bool) -> Result<Option<Vec<u64>>, Fail> {
    if spec.len() == 1 && spec[0].trim() == "auto" {
        return Ok(None);
    }
    if bytes {
        let v = spec
            .iter()
            .map(|s| match s.trim().parse::<embtier::ByteSize>() {
                Ok(b) if b.0 > 0 => Ok(b.0),
                Ok(_) => Err(usage(format!("--sizes: {s:?} is zero bytes"))),
                Err(e) => Err(usage(format!("--sizes: {e}"))),
            })
            .collect::<Result<_, _>>()?;
        return Ok(Some(v));
    }
    parse_sizes(spec, u64::MAX, mean_row_bytes).map(Some)
}

/// The charts of `r` into `dir`, saying what they left out.
pub(super) fn write_plots(
    r: &Report,
    dir: &std::path::Path,
    trace: &std::path::Path,
    top: u64,
) -> Result<(), Fail> {
    let name = trace.file_name().map_or_else(
        || trace.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let note = plot::write_all(r, dir, &name, top as usize)
        .map_err(|e| data(format!("--plot {}: {e}", dir.display())))?;
    eprintln!(
        "{}: mrc.svg, count_cdf.svg, reuse_distance_cdf.svg{}",
        dir.display(),
        note.map_or(String::new(), |n| format!(" ({n})"))
    );
    Ok(())
}

/// A sampled analysis (`flag`: `--sample` or `--sample-size`) that
/// sampled no access has no curve: refuse it; one that sampled few gets
/// a warning, and so does each table the sample missed (its curve is a
/// bound: every access a miss below its distinct rows).
pub(super) fn check_sampled(r: &Report, trace: &std::path::Path, flag: &str) -> Result<(), Fail> {
    let o = &r.overall;
    let Some(n) = o.mrc_sampled_references else {
        return Ok(());
    };
    let raise = |n: u64| {
        // A spatial sample keeps a share of the rows, not of the accesses:
        // a rate that would keep fewer than a hundred of the trace's rows
        // is no advice (a trace of two rows sampled at 0.5 was told to
        // sample at 8.8e-3).
        let rate = (FEW_SAMPLED as f64 / o.accesses.max(1) as f64).min(1.0);
        let advice = if rate * (o.unique_rows as f64) < 100.0 {
            format!(
                "the trace has only {} distinct rows, and a spatial sample keeps a share of them: leave out {flag} (the exact analysis)",
                o.unique_rows
            )
        } else {
            format!("sample more (a rate of about {rate:.2e} or more holds {FEW_SAMPLED})")
        };
        format!(
            "{}: {flag} sampled {n} of the {} accesses: {advice}",
            trace.display(),
            o.accesses,
        )
    };
    if n == 0 {
        return Err(data(format!("{}; there is no curve to report", raise(0))));
    }
    if n < FEW_SAMPLED {
        eprintln!("warning: {}; the curves are rough", raise(n));
    }
    let missed: Vec<&str> = r
        .tables
        .iter()
        .filter(|t| t.accesses > 0 && t.mrc_sampled_references == Some(0))
        .map(|t| t.name.as_str())
        .collect();
    if !missed.is_empty() {
        let shown: Vec<&str> = missed.iter().take(8).copied().collect();
        eprintln!(
            "warning: {}: {flag} sampled none of the accesses of {} table(s) ({}{}): their curves are a bound, every access a miss below their distinct rows",
            trace.display(),
            missed.len(),
            shown.join(", "),
            if missed.len() > shown.len() { ", ..." } else { "" }
        );
    }
    Ok(())
}

pub(super) fn analyze_cmd(a: AnalyzeArgs) -> Result<(), Fail> {
    check_sizes(&a.sizes)?;
    let sample = match (a.sample, a.sample_size) {
        (Some(r), _) => Some(Sampling::Rate(r)),
        (None, Some(n)) => Some(Sampling::FixedSize(n as usize)),
        (None, None) => None,
    };
    let opts = Options {
        mrc_sizes: None,
        sample,
        window: a.window,
        batches_per_s: a.batches_per_s,
        row_bytes: a.row_bytes,
        bytes: a.bytes,
    };
    let max_memory = a.max_memory.map_or_else(default_max_memory, |b| b.0);
    let r = analysed(&a.input, opts, max_memory, |mean| {
        mrc_sizes(&a.sizes, mean, a.bytes)
    })?
    .report;
    let flag = if a.sample.is_none() && a.sample_size.is_some() {
        "--sample-size"
    } else {
        "--sample"
    };
    check_sampled(&r, &a.input.trace, flag)?;
    if let Some(dir) = &a.plot {
        write_plots(&r, dir, &a.input.trace, a.top)?;
    }
    let mut o = String::new();
    if a.output.json {
        o = serde_json::to_string_pretty(&r).map_err(data)?;
        o.push('\n');
    } else if a.output.csv {
        print_csv(&mut o, &r);
    } else {
        print_text(&mut o, &r);
    }
    if let Some(p) = &a.compare_dlrm {
        let stats = embtier_sim::locality::dlrm::read(p).map_err(data)?;
        let (dr, da) = embtier_sim::locality::dlrm::mean(&stats);
        let _ = writeln!(
            o,
            "access-count histogram, this trace (overall) vs the mean of {} batch files of {}:",
            stats.len(),
            p.display()
        );
        let _ = writeln!(
            o,
            "  {:<16} {:>9} {:>9} {:>11} {:>11}",
            "count", "rows", "dlrm rows", "accesses", "dlrm acc."
        );
        for k in 0..17 {
            let _ = writeln!(
                o,
                "  {:<16} {:>9.3} {:>9.3} {:>11.3} {:>11.3}",
                bin_label(k),
                r.overall.count_hist_rows[k],
                dr[k],
                r.overall.count_hist_accesses[k],
                da[k]
            );
        }
    }
    emit(&o)
}

fn bin_label(i: usize) -> String {
    if i == 16 {
        "(32768+".to_string()
    } else {
        let lo = if i == 0 { 0 } else { COUNT_BIN_EDGES[i - 1] };
        format!("({lo}, {}]", COUNT_BIN_EDGES[i])
    }
}

/// `mixed`: the overall report of tables whose rows differ in size (its
/// row size is their mean over the accesses).
fn print_table(o: &mut String, t: &TableReport, mixed: bool) {
    let _ = writeln!(o, "== {} ==", t.name);
    let _ = writeln!(
        o,
        "accesses {}  unique rows {}  rows touched once {} ({:.1}%)  coverage {:.4} of {} rows",
        t.accesses,
        t.unique_rows,
        t.one_hit_rows,
        100.0 * t.one_hit_rows as f64 / t.unique_rows.max(1) as f64,
        t.coverage,
        t.rows
    );
    let _ = writeln!(o,
        "skew: top 0.1% {:.3}  top 1% {:.3}  top 10% {:.3} of accesses;  zipf alpha {:.3};  gini {:.3}",
        t.top_0_1pct_share, t.top_1pct_share, t.top_10pct_share, t.zipf_alpha, t.gini
    );
    let _ = writeln!(o, "access-count histogram (dlrm_datasets bins):");
    let _ = writeln!(
        o,
        "  {:<16} {:>8} {:>8} {:>10} {:>8}",
        "count", "rows", "cum", "accesses", "cum"
    );
    let (mut cr, mut ca) = (0.0, 0.0);
    for i in 0..17 {
        cr += t.count_hist_rows[i];
        ca += t.count_hist_accesses[i];
        let _ = writeln!(
            o,
            "  {:<16} {:>8.3} {:>8.3} {:>10.3} {:>8.3}",
            bin_label(i),
            t.count_hist_rows[i],
            cr,
            t.count_hist_accesses[i],
            ca
        );
    }
    print_hist(
        o,
        "reuse distance (LRU stack: distinct rows since the row's last access)",
        &t.reuse_distance,
        t.accesses,
    );
    print_hist(
        o,
        "reuse time (accesses since the row's last access)",
        &t.reuse_time,
        t.accesses,
    );
    let w = &t.working_set_per_batch;
    let v = &t.working_set_per_window;
    let _ = writeln!(
        o,
        "working set: per batch mean {:.1}, p50 {:.0}, p99 {:.0}, max {:.0} rows over {} batches; per {} accesses mean {:.1}, max {:.0} rows",
        w.mean, w.p50, w.p99, w.max, w.count, t.window, v.mean, v.max
    );
    let b = &t.bandwidth;
    let _ = writeln!(
        o,
        "bandwidth at {} batches/s: {:.1} accesses and {:.1} distinct rows per batch; {:.2} MB/s of rows, {:.2} MB/s after per-batch dedup{}",
        b.batches_per_s,
        b.accesses_per_batch,
        b.unique_rows_per_batch,
        b.bytes_per_s / 1e6,
        b.unique_bytes_per_s / 1e6,
        match (b.row_bytes, mixed) {
            (0, _) => String::new(),
            (n, false) => format!(" ({n} bytes per row)"),
            (n, true) => format!(" (a mean of {n} bytes per row over the accesses)"),
        }
    );
    let _ = writeln!(
        o,
        "LRU miss-ratio curve, {} (cold miss ratio {:.4}):",
        t.mrc_method, t.cold_miss_ratio
    );
    for p in &t.mrc {
        match p.cache_bytes {
            Some(b) => {
                let _ = writeln!(o, "  {:>14} bytes  {:.4}", b, p.miss_ratio);
            }
            None => {
                let _ = writeln!(o, "  {:>12} rows  {:.4}", p.cache_rows, p.miss_ratio);
            }
        }
    }
    o.push('\n');
}

fn print_hist(o: &mut String, name: &str, h: &Log2Hist, total: u64) {
    let _ = writeln!(o, "{name}: bin, count, share, cumulative share");
    let share = |c: u64| c as f64 / total.max(1) as f64;
    // Each bin's label, then the columns aligned past the widest.
    let rows: Vec<(String, u64)> = h
        .bins
        .iter()
        .enumerate()
        .filter(|&(_, &c)| c > 0)
        .map(|(k, &c)| {
            let (lo, hi) = Log2Hist::range(k);
            (format!("[{lo}, {hi}]"), c)
        })
        .chain(std::iter::once(("first access".to_string(), h.cold)))
        .collect();
    let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let mut cum = 0u64;
    for (i, (label, c)) in rows.iter().enumerate() {
        if i + 1 < rows.len() {
            cum += c;
            let _ = writeln!(
                o,
                "  {label:<width$} {c:>10} {:>8.4} cum {:.4}",
                share(*c),
                share(cum)
            );
        } else {
            let _ = writeln!(o, "  {label:<width$} {c:>10} {:>8.4}", share(*c));
        }
    }
}

fn print_text(o: &mut String, r: &Report) {
    let sizes: std::collections::BTreeSet<u64> =
        r.tables.iter().map(|t| t.bandwidth.row_bytes).collect();
    print_table(o, &r.overall, sizes.len() > 1);
    for t in &r.tables {
        print_table(o, t, false);
    }
}

fn print_csv(o: &mut String, r: &Report) {
    let _ = writeln!(o, "table,rows,accesses,unique_rows,one_hit_rows,coverage,top_0_1pct_share,top_1pct_share,top_10pct_share,zipf_alpha,gini,cold_miss_ratio,bytes_per_s,unique_bytes_per_s,cache_rows,miss_ratio,cache_bytes");
    for t in std::iter::once(&r.overall).chain(&r.tables) {
        for p in &t.mrc {
            let _ = writeln!(
                o,
                "{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.4},{:.4},{:.6},{:.1},{:.1},{},{:.6},{}",
                embtier_sim::table::csv_cell(&t.name),
                t.rows,
                t.accesses,
                t.unique_rows,
                t.one_hit_rows,
                t.coverage,
                t.top_0_1pct_share,
                t.top_1pct_share,
                t.top_10pct_share,
                t.zipf_alpha,
                t.gini,
                t.cold_miss_ratio,
                t.bandwidth.bytes_per_s,
                t.bandwidth.unique_bytes_per_s,
                // By bytes, the overall curve is in bytes only: its rows
                // cell is empty, its bytes given.
                match (std::ptr::eq(t, &r.overall), p.cache_bytes) {
                    (true, Some(_)) => String::new(),
                    _ => p.cache_rows.to_string(),
                },
                p.miss_ratio,
                p.cache_bytes.map_or(String::new(), |b| b.to_string())
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_analysis_past_its_32_bit_numbering_is_refused_whatever_the_memory() {
        assert_eq!(exact_refusal(1000, 1 << 20), None);
        let over_memory = exact_refusal(1 << 20, 1 << 20).expect("over the memory");
        assert!(over_memory.contains("--max-memory"), "{over_memory}");
        assert_eq!(exact_refusal(MAX_EXACT_ACCESSES, u64::MAX), None);
        let why = exact_refusal(MAX_EXACT_ACCESSES + 1, u64::MAX).expect("past 2^32 - 2");
        assert!(why.contains("32 bits") && why.contains("--sample"), "{why}");
    }
}
