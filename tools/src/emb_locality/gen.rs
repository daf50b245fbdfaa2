//! `emb-locality gen`: a synthetic trace from a table spec.

use super::*;

pub(super) fn gen_cmd(a: GenArgs) -> Result<(), Fail> {
    let mut spec = match &a.spec {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).map_err(|e| data(format!("{}: {e}", p.display())))?;
            toml::from_str::<GenSpec>(&text).map_err(|e| data(format!("{}: {e}", p.display())))?
        }
        None => GenSpec {
            seed: 0,
            batches: a.batches,
            batch_size: a.batch_size,
            tables: a
                .tables
                .iter()
                .map(|s| parse_table(s))
                .collect::<Result<_, _>>()?,
        },
    };
    if let Some(s) = a.seed {
        spec.seed = s;
    }
    spec.validate().map_err(usage)?;
    let start = std::time::Instant::now();
    let bar = embtier_tools::cli::batch_bar(spec.batches);
    // Streamed: memory holds a few groups of batches, not the trace.
    let (accesses, batches, bytes) = spec
        .write_etrace(&a.out, |done| {
            if let Some(b) = &bar {
                b.set_position(done);
            }
        })
        .map_err(data)?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{}: {accesses} accesses in {batches} batches, {bytes} bytes, {:.1} M accesses/s",
        a.out.display(),
        accesses as f64 / secs / 1e6
    );
    Ok(())
}

fn parse_table(s: &str) -> Result<GenTable, Fail> {
    let p: Vec<&str> = s.split(':').collect();
    let bad = || {
        usage(format!(
            "--tables {s:?}: expected NAME:ROWS:POOLING:ALPHA[:DRIFT]"
        ))
    };
    if p.len() < 4 || p.len() > 5 {
        return Err(bad());
    }
    Ok(GenTable {
        name: p[0].to_string(),
        rows: p[1].parse().map_err(|_| bad())?,
        dim: 64,
        pooling: p[2].parse().map_err(|_| bad())?,
        alpha: p[3].parse().map_err(|_| bad())?,
        drift: p
            .get(4)
            .map(|d| d.parse())
            .transpose()
            .map_err(|_| bad())?
            .unwrap_or(0.0),
    })
}
