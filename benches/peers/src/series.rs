//! Throughput over time: rows per second of run, counted from the moment
//! the engine opens, and the figures drawn from it.
//!
//! **Steady state** is the median of the per-second rates over the last
//! third of the run (whole seconds only; at least 6 of them). **Time to
//! 90%** is the end of the first second from which the mean rate of three
//! consecutive seconds reaches 90% of the steady state, in seconds from the
//! open (the open itself included). Both depend on the run being long
//! enough for its last third to be warm; the report says how long it was.

use std::time::Instant;

/// Rows completed per one-second bin since `t0`.
#[derive(Debug, Clone)]
pub struct Series {
    t0: Instant,
    bins: Vec<u64>,
}

impl Series {
    /// A series whose second 0 starts at `t0` (taken just before the open).
    pub fn new(t0: Instant) -> Series {
        Series {
            t0,
            bins: Vec::new(),
        }
    }

    /// `rows` completed now.
    pub fn add(&mut self, rows: u64) {
        let s = self.t0.elapsed().as_secs() as usize;
        if self.bins.len() <= s {
            self.bins.resize(s + 1, 0);
        }
        self.bins[s] += rows;
    }

    /// Rows/s of every whole second so far (a last, partial second is left
    /// out; seconds in which no batch completed count as 0).
    pub fn per_second(&self) -> Vec<f64> {
        let whole = self.t0.elapsed().as_secs() as usize;
        let mut v: Vec<f64> = self.bins.iter().take(whole).map(|&r| r as f64).collect();
        v.resize(whole, 0.0);
        v
    }
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

/// Seconds from the open to 90% of `steady` (see the module's note).
pub fn t90(per_second: &[f64], steady: f64) -> Option<f64> {
    per_second
        .windows(3)
        .position(|w| w.iter().sum::<f64>() / 3.0 >= 0.9 * steady)
        .map(|b| (b + 1) as f64)
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
        // Seconds 8, 9, 10 average 90: the window starts at second 8, ends
        // its first second at 9.
        assert_eq!(t90(&v, s), Some(9.0));
        assert_eq!(first(&v, 2), Some(5.0));
        assert_eq!(per_minute(&v), Vec::<f64>::new());
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), Some(2.5));
        assert_eq!(steady(&[1.0; 5]), None);
    }
}
