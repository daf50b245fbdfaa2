//! Per-operation latency, in an HDR histogram.

use std::time::Duration;

use hdrhistogram::Histogram;
use parking_lot::Mutex;

/// An HDR histogram of operation latencies in nanoseconds (1 ns to 100 s,
/// 3 significant digits), merged once per batch.
#[derive(Debug)]
pub struct LatencyRecorder {
    hist: Mutex<Histogram<u64>>,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        LatencyRecorder {
            hist: Mutex::new(new_hist()),
        }
    }
}

pub(crate) fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid bounds")
}

impl LatencyRecorder {
    /// Merge a batch's latencies.
    pub fn record_all(&self, lat: &[Duration]) {
        if lat.is_empty() {
            return;
        }
        let mut h = self.hist.lock();
        for d in lat {
            h.saturating_record((d.as_nanos() as u64).max(1));
        }
    }

    /// A copy of the histogram.
    pub fn snapshot(&self) -> Histogram<u64> {
        self.hist.lock().clone()
    }
}
