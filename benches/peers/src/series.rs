//! Throughput over time: rows per second of run, counted from the moment
//! the engine opens, and the figures drawn from it.
//!
//! **Steady state** is the median of the per-second rates over the last
//! third of the run (whole seconds only; at least 6 of them). **Time to
//! 90%** is the end of the first tenth of a second from which the mean
//! rate of the next second (ten tenths) reaches 90% of the steady state,
//! in seconds from the open (the open itself included), and never before
//! the end of the first tenth in which a batch completed (a fast second
//! after a slow open would otherwise make up for the open). Both depend on
//! the run being long enough for its last third to be warm; the report
//! says how long it was. (Until 2026-11-26 the time to 90% was counted in
//! whole seconds, the first of three that averaged 90%: 1 s was the least
//! any engine could show, so a bar of 0.25x an engine that warms within
//! its first second could not be judged.)

use std::time::Instant;

/// Rows completed per one-second bin and per tenth of a second since `t0`.
#[derive(Debug, Clone)]
pub struct Series {
    t0: Instant,
    bins: Vec<u64>,
    tenths: Vec<u64>,
}

impl Series {
    /// A series whose second 0 starts at `t0` (taken just before the open).
    pub fn new(t0: Instant) -> Series {
        Series {
            t0,
            bins: Vec::new(),
            tenths: Vec::new(),
        }
    }

    /// `rows` completed now.
    pub fn add(&mut self, rows: u64) {
        let e = self.t0.elapsed();
        for (bins, i) in [
            (&mut self.bins, e.as_secs() as usize),
            (&mut self.tenths, (e.as_millis() / 100) as usize),
        ] {
            if bins.len() <= i {
                bins.resize(i + 1, 0);
            }
            bins[i] += rows;
        }
    }

    /// Rows/s of every whole second so far (a last, partial second is left
    /// out; seconds in which no batch completed count as 0).
    pub fn per_second(&self) -> Vec<f64> {
        rates(&self.bins, self.t0.elapsed().as_secs() as usize, 1.0)
    }

    /// Rows/s of every whole tenth of a second so far (as
    /// [`Series::per_second`], ten times finer).
    pub fn per_tenth(&self) -> Vec<f64> {
        rates(
            &self.tenths,
            (self.t0.elapsed().as_millis() / 100) as usize,
            10.0,
        )
    }
}

/// Rows/s of the first `whole` bins of `bins` (rows each), `per_s` bins a
/// second; bins past the last row count as 0.
fn rates(bins: &[u64], whole: usize, per_s: f64) -> Vec<f64> {
    let mut v: Vec<f64> = bins.iter().take(whole).map(|&r| r as f64 * per_s).collect();
    v.resize(whole, 0.0);
    v
}

/// Median of `v` (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// The steady state: median rows/s of the last third of the seconds.
pub fn steady(per_second: &[f64]) -> Option<f64> {
    if per_second.len() < 6 {
        return None;
    }
    median(&per_second[per_second.len() - per_second.len() / 3..])
}

/// Seconds from the open to 90% of `steady`, from the rates of each tenth
/// of a second ([`Series::per_tenth`]; see the module's note).
pub fn t90(per_tenth: &[f64], steady: f64) -> Option<f64> {
    let served = per_tenth.iter().position(|&r| r > 0.0)?;
    per_tenth
        .windows(10)
        .position(|w| w.iter().sum::<f64>() / 10.0 >= 0.9 * steady)
        .map(|b| (b.max(served) + 1) as f64 / 10.0)
}

/// Mean rows/s of each whole minute.
pub fn per_minute(per_second: &[f64]) -> Vec<f64> {
    per_second
        .chunks_exact(60)
        .map(|c| c.iter().sum::<f64>() / 60.0)
        .collect()
}

/// Mean rows/s over the first `secs` seconds (`None` if the run was
/// shorter).
pub fn first(per_second: &[f64], secs: usize) -> Option<f64> {
    (per_second.len() >= secs && secs > 0)
        .then(|| per_second[..secs].iter().sum::<f64>() / secs as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramp_reaches_ninety_percent() {
        // 0, 10, 20, ... 100, then 100 for 20 s.
        let mut v: Vec<f64> = (0..=10).map(|i| i as f64 * 10.0).collect();
        v.extend(std::iter::repeat_n(100.0, 20));
        let s = steady(&v).unwrap();
        assert_eq!(s, 100.0);
        // A ramp in tenths: tenths 86..=95 average 90.5, tenths 85..=94
        // 89.5; the window from tenth 86 ends its first tenth at 8.7 s.
        let tenths: Vec<f64> = (0..=100).map(|i| i as f64).chain([100.0; 20]).collect();
        assert_eq!(t90(&tenths, s), Some(8.7));
        // Half a second of open, then steady: the second from tenth 4
        // averages 90%, but nothing was served before tenth 5.
        let open: Vec<f64> = [0.0; 5].into_iter().chain([100.0; 30]).collect();
        assert_eq!(t90(&open, 100.0), Some(0.6));
        // A fast first second makes up for the open in the average: still
        // not before the first rows.
        let fast: Vec<f64> = [0.0; 7].into_iter().chain([150.0; 30]).collect();
        assert_eq!(t90(&fast, 100.0), Some(0.8));
        assert_eq!(t90(&[100.0; 9], 100.0), None);
        // Rates of whole bins: a partial last bin left out, empty ones 0.
        assert_eq!(rates(&[1, 2, 3], 2, 1.0), vec![1.0, 2.0]);
        assert_eq!(rates(&[3, 4], 4, 10.0), vec![30.0, 40.0, 0.0, 0.0]);
        assert_eq!(first(&v, 2), Some(5.0));
        assert_eq!(per_minute(&v), Vec::<f64>::new());
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), Some(2.5));
        assert_eq!(steady(&[1.0; 5]), None);
    }
}
