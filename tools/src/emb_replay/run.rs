//! `emb-replay run`: a trace replayed against the real store.

use super::*;

/// `emb-replay run`: the trace against the real store.
pub(super) fn replay_store(a: RunArgs) -> Result<(), Fail> {
    let RunArgs {
        input,
        config,
        dir,
        update_ratio,
        engine,
        seed,
        row_bytes,
        output,
    } = a;
    let text =
        std::fs::read_to_string(&config).map_err(|e| data(format!("{}: {e}", config.display())))?;
    let mut cfg = embtier::StoreConfig::from_toml(&text)
        .map_err(|e| data(format!("{}: {e}", config.display())))?;
    let t = load(&input)?;
    if cfg.tables.is_empty() {
        for tt in &t.tables {
            let dim = if tt.dim > 0 {
                tt.dim
            } else {
                (row_bytes_of(tt, row_bytes.unwrap_or(DEFAULT_ROW_BYTES)) / 4).max(1) as u32
            };
            cfg.tables.push(embtier::TableConfig::new(
                tt.name.clone(),
                tt.rows.max(1),
                dim,
            ));
        }
    }
    for tt in &t.tables {
        match cfg.tables.iter().find(|c| c.name == tt.name) {
            Some(c) if c.rows >= tt.rows => {}
            Some(c) => {
                return Err(data(format!(
                    "{}: table {:?} has {} rows, the trace needs {}",
                    config.display(),
                    c.name,
                    c.rows,
                    tt.rows
                )))
            }
            None => {
                return Err(data(format!(
                    "{}: no table {:?} for the trace",
                    config.display(),
                    tt.name
                )))
            }
        }
    }
    if let Some(e) = engine {
        cfg.ssd.io_engine = e;
    }
    // Each cache tier's policy, in the store's order (the report's tiers).
    let policies: Vec<&'static str> = cfg.tiers.iter().map(|t| t.policy.name()).collect();
    let tmp = tempfile::tempdir().map_err(data)?;
    // A store made for this run (no --dir) goes with the run, and so do the
    // files it makes outside its directory (a tier's or the data file's
    // `path`, in /dev/shm say, and their companions): they would hold
    // memory or disk after the run.
    let _outside = match dir {
        Some(_) => OutsideFiles::default(),
        None => OutsideFiles::before(
            cfg.tiers
                .iter()
                .filter_map(|t| t.path.clone())
                .chain(cfg.ssd.path.clone()),
        ),
    };
    let path = dir.unwrap_or_else(|| tmp.path().join("store"));
    // A config the store refuses names the file it came from.
    let store = embtier::Store::create(&path, cfg).map_err(|e| match e {
        embtier::Error::Config { .. } => data(format!("{}: {e}", config.display())),
        e => data(e),
    })?;
    let bar = embtier_tools::cli::batch_bar(t.batch_ends.len() as u64);
    let r = run_store(&store, &t, update_ratio, seed, |done, _| {
        if let Some(b) = &bar {
            b.set_position(done);
        }
    })
    .map_err(data)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if r.writeback_errors > 0 || r.pending_rows > 0 {
        eprintln!(
            "WARNING: {} write-backs failed during the replay; {} rows are held only in memory, waiting for a write-back (not durable)",
            r.writeback_errors, r.pending_rows
        );
    }
    if output.json {
        let mut o = serde_json::to_string_pretty(&r).map_err(data)?;
        o.push('\n');
        return emit(&o);
    }
    let table = run_table(&r, &policies);
    if output.csv {
        return emit(&table.csv());
    }
    let mut o = format!(
        "{} accesses in {} batches: {} row requests ({} of them updates), {:.2} s, {:.0} accesses/s, {} engine\nbatch latency: p50 {:.0} us, p99 {:.0} us, p99.9 {:.0} us\n\n",
        r.accesses,
        r.batches,
        r.requests,
        r.updates,
        r.seconds,
        r.rows_per_s,
        r.io_engine,
        r.batch_p50_us,
        r.batch_p99_us,
        r.batch_p999_us,
    );
    o.push_str(&table.markdown());
    let _ = writeln!(
        o,
        "\nSSD: {} rows read in {} reads ({} MiB), {} rows written in {} writes ({} MiB)\n{SHARES}",
        r.ssd_rows_read,
        r.ssd_read_ops,
        mib(r.ssd_bytes_read),
        r.ssd_rows_written,
        r.ssd_write_ops,
        mib(r.ssd_bytes_written)
    );
    emit(&o)
}

/// The tiers of a store run: hits, hit ratio and share of requests, every
/// cache tier the store has (`policies`: each one's, in order), then SSD.
pub(super) fn run_table(r: &RunReport, policies: &[&str]) -> Table {
    let mut t = Table::new(["tier", "policy", "hits", "hit ratio", "share of requests"]);
    let several = |kind: &str| r.tiers.iter().filter(|x| x.kind == kind).count() > 1;
    for (i, x) in r.tiers.iter().enumerate() {
        // Two tiers of a kind are told apart by their place.
        let name = if several(&x.kind) {
            format!("{} (tier {})", x.kind, i + 1)
        } else {
            x.kind.clone()
        };
        t.row([
            name,
            policies.get(i).copied().unwrap_or("-").to_string(),
            x.hits.to_string(),
            format!("{:.4}", x.hit_ratio),
            format!("{:.4}", x.share),
        ]);
    }
    t.row([
        "ssd (missed every cache)".to_string(),
        "-".into(),
        format!("{} rows read", r.ssd_rows_read),
        "-".into(),
        format!("{:.4}", r.miss_share),
    ]);
    t
}

/// Files a run's store makes outside its directory, removed when the run
/// ends (dropped after the store, which is declared after it): each
/// configured path and every file beside it whose name starts with the
/// path's (`<path>.stamps`) that was not there before the store was made.
#[derive(Default)]
struct OutsideFiles {
    made: Vec<(
        std::path::PathBuf,
        std::collections::HashSet<std::ffi::OsString>,
    )>,
}

impl OutsideFiles {
    fn before(paths: impl Iterator<Item = std::path::PathBuf>) -> OutsideFiles {
        let made = paths
            .filter_map(|p| {
                let parent = p.parent()?.to_path_buf();
                let had = std::fs::read_dir(&parent)
                    .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
                    .unwrap_or_default();
                Some((p, had))
            })
            .collect();
        OutsideFiles { made }
    }
}

impl Drop for OutsideFiles {
    fn drop(&mut self) {
        for (p, had) in &self.made {
            let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
                continue;
            };
            let Ok(entries) = std::fs::read_dir(parent) else {
                continue;
            };
            for e in entries.flatten() {
                let n = e.file_name();
                if !had.contains(&n) && n.as_encoded_bytes().starts_with(name.as_encoded_bytes()) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}
