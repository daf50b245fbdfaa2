//! Reader of Meta's dlrm_datasets `locality_stats.txt`: per batch file, the
//! index count, unique rows, and the access-count histograms by rows and by
//! accesses in the bins of [`super::COUNT_BIN_EDGES`].

use std::path::Path;

/// One batch file's statistics.
#[derive(Debug, Clone, PartialEq)]
pub struct DlrmStats {
    /// The batch file's name.
    pub file: String,
    /// Average number of indices (accesses).
    pub indices: f64,
    /// Average number of unique rows.
    pub unique: f64,
    /// Fraction of rows per count bin (17 bins).
    pub by_rows: Vec<f64>,
    /// Fraction of accesses per count bin (17 bins).
    pub by_accesses: Vec<f64>,
}

/// Parse a `locality_stats.txt`. Errors name the line.
pub fn parse(text: &str) -> Result<Vec<DlrmStats>, String> {
    let mut out: Vec<DlrmStats> = Vec::new();
    let mut target: Option<bool> = None; // Some(true): by rows, Some(false): by accesses
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        let bad = |what: &str| format!("line {}: {what}: {l:?}", i + 1);
        if l.ends_with(".pt") {
            out.push(DlrmStats {
                file: l.to_string(),
                indices: 0.0,
                unique: 0.0,
                by_rows: Vec::new(),
                by_accesses: Vec::new(),
            });
            target = None;
            continue;
        }
        let Some(cur) = out.last_mut() else { continue };
        if let Some(v) = l.strip_prefix("Avg # of indices:") {
            cur.indices = v.trim().parse().map_err(|_| bad("bad number"))?;
        } else if let Some(v) = l.strip_prefix("Avg # of unique cols:") {
            cur.unique = v.trim().parse().map_err(|_| bad("bad number"))?;
        } else if l.starts_with("Histogram of col sizes") {
            target = Some(true);
        } else if l.starts_with("Ratio of index distribution") {
            target = Some(false);
        } else if l.starts_with('(') {
            let v: f64 = l
                .rsplit(':')
                .next()
                .and_then(|x| x.trim().parse().ok())
                .ok_or_else(|| bad("bad bin"))?;
            match target {
                Some(true) => cur.by_rows.push(v),
                Some(false) => cur.by_accesses.push(v),
                None => return Err(bad("bin outside a histogram")),
            }
        }
    }
    for s in &out {
        if s.by_rows.len() != 17 || s.by_accesses.len() != 17 {
            return Err(format!(
                "{}: expected 17 bins by rows and by accesses",
                s.file
            ));
        }
    }
    if out.is_empty() {
        return Err("no batch files found".into());
    }
    Ok(out)
}

/// Parse the file at `path`.
pub fn read(path: &Path) -> Result<Vec<DlrmStats>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The mean histograms over all batch files: (by rows, by accesses).
pub fn mean(stats: &[DlrmStats]) -> (Vec<f64>, Vec<f64>) {
    let n = stats.len().max(1) as f64;
    let mut r = vec![0.0; 17];
    let mut a = vec![0.0; 17];
    for s in stats {
        for k in 0..17 {
            r[k] += s.by_rows[k] / n;
            a[k] += s.by_accesses[k] / n;
        }
    }
    (r, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_shared_files() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/traces/dlrm-2021-locality_stats.txt");
        if !p.exists() {
            eprintln!("SKIP: {} is absent", p.display());
            return;
        }
        let s = read(&p).unwrap();
        assert_eq!(s.len(), 17);
        assert_eq!(s[0].file, "fbgemm_t856_bs65536.pt");
        assert_eq!((s[0].by_rows[0], s[0].by_accesses[0]), (0.473, 0.069));
        assert_eq!(s[0].indices, 887017990.0);
        let (r, a) = mean(&s);
        assert!(
            (r.iter().sum::<f64>() - 1.0).abs() < 0.02
                && (a.iter().sum::<f64>() - 1.0).abs() < 0.02
        );
        assert!(parse("x.pt\n(0, 1]: 0.5\n").is_err());
    }
}
