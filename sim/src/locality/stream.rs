//! The sampled analysis in one streaming pass, with memory bounded by the
//! rows of the tables and the sampled keys, never by the accesses.
//!
//! Exact from per-row state (16 bytes a row: the access count, and the
//! last batch, table window and trace window that touched the row): the
//! counts, the dlrm_datasets histograms, skew, one-hit rows, working sets
//! per batch and per window, bandwidth. Estimated from the rows SHARDS
//! samples (one hash of `(table, row)` a reference, compared with each
//! pass's threshold): the miss-ratio curves and stack distances (SHARDS,
//! a pass per table and one over the trace) and the reuse times (the
//! sampled rows' reuse times, scaled by `1 / rate`).
//!
//! A table of more than [`DIRECT_ROWS`] rows, or of unknown size, keeps its
//! row state behind a hash map of the rows it touched.

use std::collections::HashMap;

use super::shards::{Sampling, Shards};
use super::*;
use crate::trace::{Access, TraceTable};
use crate::FastHash;

/// Tables up to this many rows index their row state by row id (16 bytes
/// a row, allocated zeroed: pages of rows never touched cost no memory).
pub const DIRECT_ROWS: u64 = 1 << 26;

/// Bytes of state per touched row (an upper bound for memory checks).
pub const BYTES_PER_ROW: u64 = 16;

/// Row state: count, last batch + 1, last table window + 1, last trace
/// window + 1 (0: never).
type RowState = [u32; 4];

/// Windows: a length, and a countdown to the next one.
#[derive(Debug, Clone, Copy)]
struct Window {
    len: u64,
    left: u64,
    /// Index + 1 of the current window.
    index: u32,
}

impl Window {
    fn new(len: u64) -> Window {
        Window {
            len: len.max(1),
            left: 0,
            index: 0,
        }
    }
    /// Advance by one access; true when it starts a window.
    #[inline]
    fn tick(&mut self) -> bool {
        let starts = self.left == 0;
        if starts {
            self.left = self.len;
            self.index += 1;
        }
        self.left -= 1;
        starts
    }
}

/// Sampled reuse times: the last access of each sampled key.
#[derive(Default)]
struct Reuse {
    last: HashMap<u64, u64, FastHash>,
    hist: Log2Hist,
}

impl Reuse {
    #[inline]
    fn access(&mut self, key: u64, at: u64) {
        match self.last.insert(key, at) {
            Some(p) => self.hist.add(at - p),
            None => self.hist.cold += 1,
        }
    }
    /// The histogram scaled to the whole trace.
    fn scaled(&self, rate: f64) -> Log2Hist {
        let s = |c: u64| (c as f64 / rate).round() as u64;
        Log2Hist {
            bins: self.hist.bins.iter().map(|&c| s(c)).collect(),
            cold: s(self.hist.cold),
        }
    }
}

struct TableState {
    /// Row state, by row id or by the map's slot.
    rows: Vec<RowState>,
    /// Slots of the rows touched, for tables indexed through a map.
    map: Option<HashMap<u64, u32, FastHash>>,
    /// Counts past `u32::MAX`: the multiples of 2^32 to add, by slot.
    overflow: HashMap<u32, u64, FastHash>,
    accesses: u64,
    window: Window,
    per_window: Vec<u64>,
    per_batch: Vec<u64>,
    /// Batch + 1 that last touched the table.
    batch: u32,
    shards: Shards,
    reuse: Reuse,
}

impl TableState {
    fn new(rows: u64, window: u64, sampling: Sampling) -> TableState {
        let direct = rows > 0 && rows <= DIRECT_ROWS;
        TableState {
            rows: if direct {
                vec![[0; 4]; rows as usize]
            } else {
                Vec::new()
            },
            map: (!direct).then(HashMap::default),
            overflow: HashMap::default(),
            accesses: 0,
            window: Window::new(window),
            per_window: Vec::new(),
            per_batch: Vec::new(),
            batch: 0,
            shards: Shards::new(sampling),
            reuse: Reuse::default(),
        }
    }

    /// The slot of `row`.
    #[inline]
    fn slot(&mut self, row: u64) -> usize {
        match &mut self.map {
            None => row as usize,
            Some(m) => {
                let next = m.len() as u32;
                let s = *m.entry(row).or_insert(next);
                if s as usize == self.rows.len() {
                    self.rows.push([0; 4]);
                }
                s as usize
            }
        }
    }

    /// Access counts of the touched rows.
    fn counts(&self) -> Vec<u64> {
        let mut c: Vec<u64> = self
            .rows
            .iter()
            .map(|r| r[0] as u64)
            .filter(|&c| c > 0)
            .collect();
        if !self.overflow.is_empty() {
            // Rare: rebuild with the slots to add the overflow.
            c = self
                .rows
                .iter()
                .enumerate()
                .map(|(s, r)| r[0] as u64 + self.overflow.get(&(s as u32)).copied().unwrap_or(0))
                .filter(|&c| c > 0)
                .collect();
        }
        c
    }
}

/// The trace-wide passes.
struct Overall {
    accesses: u64,
    window: Window,
    per_window: Vec<u64>,
    per_batch: Vec<u64>,
    shards: Shards,
    reuse: Reuse,
}

/// What the caller knows of the trace before the pass, for the default
/// working-set windows (a hundredth of each table's accesses, and of the
/// trace's).
#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// Accesses of the whole trace.
    pub accesses: u64,
    /// Accesses per table, in catalog order, when known; otherwise each
    /// table's share of the trace is taken from the first batches.
    pub per_table: Option<Vec<u64>>,
}

/// The sampled analysis, fed batch by batch ([`StreamAnalysis::batch`]).
pub struct StreamAnalysis {
    tables: Vec<TraceTable>,
    opts: Options,
    sampling: Sampling,
    expect: Expect,
    states: Vec<TableState>,
    overall: Overall,
    batches: u32,
    /// Batches held back until the tables' windows are known.
    held: Vec<Vec<Access>>,
    held_accesses: u64,
}

/// Accesses held back to estimate each table's share of the trace.
const HOLD: u64 = 4 << 20;

impl StreamAnalysis {
    /// A pass over a trace of `tables`; `opts.sample` must be set (the
    /// exact analysis is [`analyze`]).
    pub fn new(tables: &[TraceTable], opts: &Options, expect: Expect) -> StreamAnalysis {
        let sampling = opts.sample.unwrap_or(Sampling::Rate(1.0));
        let overall_window = opts
            .window
            .unwrap_or((expect.accesses / 100).max(1000))
            .max(1);
        let mut s = StreamAnalysis {
            tables: tables.to_vec(),
            opts: opts.clone(),
            sampling,
            expect,
            states: Vec::new(),
            overall: Overall {
                accesses: 0,
                window: Window::new(overall_window),
                per_window: Vec::new(),
                per_batch: Vec::new(),
                shards: Shards::new(sampling),
                reuse: Reuse::default(),
            },
            batches: 0,
            held: Vec::new(),
            held_accesses: 0,
        };
        if let Some(per) = s.expect.per_table.clone() {
            s.start(&per);
        }
        s
    }

    /// Bytes of per-row state the pass allocates for `tables` (their
    /// declared rows; tables behind a map grow with the rows touched).
    pub fn row_state_bytes(tables: &[TraceTable]) -> u64 {
        tables
            .iter()
            .filter(|t| t.rows <= DIRECT_ROWS)
            .map(|t| t.rows * BYTES_PER_ROW)
            .sum()
    }

    /// Set the windows from per-table access counts and allocate the state.
    fn start(&mut self, per_table: &[u64]) {
        let opts = &self.opts;
        self.states = self
            .tables
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let acc = per_table.get(i).copied().unwrap_or(0);
                let w = opts.window.unwrap_or((acc / 100).max(1000));
                TableState::new(t.rows, w, self.sampling)
            })
            .collect();
    }

    /// One batch of accesses, in trace order.
    pub fn batch(&mut self, accesses: &[Access]) {
        if accesses.is_empty() {
            return;
        }
        if self.states.is_empty() {
            self.held.push(accesses.to_vec());
            self.held_accesses += accesses.len() as u64;
            if self.held_accesses >= HOLD {
                self.release();
            }
            return;
        }
        self.process(accesses);
    }

    /// Estimate each table's accesses from the held batches, then run them.
    fn release(&mut self) {
        let mut seen = vec![0u64; self.tables.len()];
        for b in &self.held {
            for a in b {
                seen[a.table as usize] += 1;
            }
        }
        let total = self.expect.accesses.max(self.held_accesses);
        let scale = total as f64 / self.held_accesses.max(1) as f64;
        let per: Vec<u64> = seen.iter().map(|&c| (c as f64 * scale) as u64).collect();
        self.start(&per);
        for b in std::mem::take(&mut self.held) {
            self.process(&b);
        }
    }

    fn process(&mut self, accesses: &[Access]) {
        self.batches += 1;
        let b1 = self.batches;
        let ov = &mut self.overall;
        ov.per_batch.push(0);
        let ob = ov.per_batch.last_mut().expect("pushed");
        for a in accesses {
            let st = &mut self.states[a.table as usize];
            let slot = st.slot(a.row);
            if st.batch != b1 {
                st.batch = b1;
                st.per_batch.push(0);
            }
            if st.window.tick() {
                st.per_window.push(0);
            }
            if ov.window.tick() {
                ov.per_window.push(0);
            }
            let rs = &mut st.rows[slot];
            rs[0] = rs[0].wrapping_add(1);
            if rs[0] == 0 {
                *st.overflow.entry(slot as u32).or_insert(0) += 1 << 32;
            }
            if rs[1] != b1 {
                rs[1] = b1;
                *st.per_batch.last_mut().expect("pushed") += 1;
                *ob += 1;
            }
            if rs[2] != st.window.index {
                rs[2] = st.window.index;
                *st.per_window.last_mut().expect("pushed") += 1;
            }
            if rs[3] != ov.window.index {
                rs[3] = ov.window.index;
                *ov.per_window.last_mut().expect("pushed") += 1;
            }
            let key = a.key();
            let h = Shards::hash(key);
            if h < st.shards.threshold() {
                st.shards.access_hashed(key, h);
                st.reuse.access(key, st.accesses);
            }
            if h < ov.shards.threshold() {
                ov.shards.access_hashed(key, h);
                ov.reuse.access(key, ov.accesses);
            }
            st.accesses += 1;
            ov.accesses += 1;
        }
    }

    /// The report.
    pub fn finish(mut self) -> Report {
        if self.states.is_empty() {
            self.release();
        }
        let opts = self.opts.clone();
        let default_rb = opts.row_bytes.unwrap_or(256);
        let batches = self.batches as usize;
        let mut overall_counts: Vec<u64> = Vec::new();
        let mut object_bytes = (0u64, 0u64); // (sum, objects)
        let mut tables = Vec::with_capacity(self.tables.len());
        let states = std::mem::take(&mut self.states);
        for (t, st) in self.tables.iter().zip(states) {
            let counts = st.counts();
            drop(st.rows);
            overall_counts.extend_from_slice(&counts);
            let cf = CountFigures::of(counts, st.accesses);
            let row_bytes = crate::trace::row_bytes_of(t, default_rb);
            object_bytes.0 += cf.unique * row_bytes;
            object_bytes.1 += cf.unique;
            tables.push(part_report(
                &t.name,
                t.rows,
                st.accesses,
                row_bytes,
                batches,
                cf,
                st.shards,
                &st.reuse,
                &st.per_batch,
                &st.per_window,
                st.window.len,
                &opts,
            ));
        }
        let ov = self.overall;
        let cf = CountFigures::of(overall_counts, ov.accesses);
        let rows = self
            .tables
            .iter()
            .map(|t| t.rows)
            .fold(0u64, |a, b| a.saturating_add(b));
        let mean = (object_bytes.0 / object_bytes.1.max(1)).max(1);
        let mut overall = part_report(
            "overall",
            rows,
            ov.accesses,
            0,
            batches,
            cf,
            ov.shards,
            &ov.reuse,
            &ov.per_batch,
            &ov.per_window,
            ov.window.len,
            &Options {
                row_bytes: Some(mean),
                ..opts
            },
        );
        overall.bandwidth.row_bytes = 0;
        overall.bandwidth.bytes_per_s = tables.iter().map(|t| t.bandwidth.bytes_per_s).sum();
        overall.bandwidth.unique_bytes_per_s =
            tables.iter().map(|t| t.bandwidth.unique_bytes_per_s).sum();
        Report { overall, tables }
    }
}

/// The report of one table (`row_bytes` > 0) or of the trace (0; then
/// `opts.row_bytes` carries the mean row size for byte-sized curves).
#[allow(clippy::too_many_arguments)]
fn part_report(
    name: &str,
    rows: u64,
    accesses: u64,
    row_bytes: u64,
    batches: usize,
    cf: CountFigures,
    shards: Shards,
    reuse: &Reuse,
    per_batch: &[u64],
    per_window: &[u64],
    window: u64,
    opts: &Options,
) -> TableReport {
    let mean = opts.row_bytes.unwrap_or(256).max(1);
    let (sizes, row_sizes) = curve_sizes(opts, cf.unique, row_bytes, mean);
    let rate = shards.rate();
    let sampled = shards.finish(accesses);
    let (mrc, dh, method) = sampled_curve(&sampled, opts, &sizes, &row_sizes, row_bytes, mean);
    assemble(Parts {
        name,
        rows,
        accesses,
        row_bytes,
        batches,
        cf,
        sizes: &sizes,
        mrc,
        reuse_distance: dh,
        reuse_time: reuse.scaled(rate),
        method,
        ws_batch: per_batch,
        ws_window: per_window,
        window,
        opts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::gen::{GenSpec, GenTable};

    fn trace() -> crate::trace::Trace {
        let t = |name: &str, rows: u64, pooling: f64, alpha: f64, drift: f64| GenTable {
            name: name.into(),
            rows,
            dim: 16,
            pooling,
            alpha,
            drift,
        };
        GenSpec {
            seed: 5,
            batches: 60,
            batch_size: 50,
            tables: vec![
                t("hot", 2000, 3.0, 1.1, 0.0),
                t("drifting", 5000, 1.5, 0.9, 0.02),
                t("rare", 300, 0.2, 0.0, 0.0),
                // Declared far past DIRECT_ROWS: state behind the map.
                t("huge", 1 << 40, 1.0, 0.8, 0.0),
            ],
        }
        .generate()
    }

    /// At rate 1 every row is sampled, so the streaming pass must equal
    /// the exact in-memory analysis figure for figure (only the method's
    /// name differs), in rows and in bytes, with default and set windows.
    #[test]
    fn rate_one_equals_the_exact_analysis() {
        let t = trace();
        assert!(t.accesses.len() > 10_000);
        for (bytes, window) in [(false, None), (false, Some(777)), (true, None)] {
            let exact = Options {
                bytes,
                window,
                ..Options::default()
            };
            let want = analyze(&t, &exact);
            let sampled = Options {
                sample: Some(Sampling::Rate(1.0)),
                ..exact.clone()
            };
            // Both ways of knowing the tables' accesses: given, and
            // estimated from the held batches (the whole trace here).
            let given = analyze(&t, &sampled);
            let mut s = StreamAnalysis::new(
                &t.tables,
                &sampled,
                Expect {
                    accesses: t.accesses.len() as u64,
                    per_table: None,
                },
            );
            for b in t.batches() {
                s.batch(b);
            }
            let estimated = s.finish();
            for mut got in [given, estimated] {
                for r in std::iter::once(&mut got.overall).chain(got.tables.iter_mut()) {
                    assert!(
                        r.mrc_method.starts_with("shards (rate 1.0"),
                        "{}",
                        r.mrc_method
                    );
                    r.mrc_method.clear();
                }
                let mut want = want.clone();
                for r in std::iter::once(&mut want.overall).chain(want.tables.iter_mut()) {
                    r.mrc_method.clear();
                }
                for (g, w) in std::iter::once(&got.overall)
                    .chain(&got.tables)
                    .zip(std::iter::once(&want.overall).chain(&want.tables))
                {
                    assert_eq!(g, w, "bytes {bytes} window {window:?}, table {}", w.name);
                }
            }
        }
    }

    /// Counts past u32::MAX are kept exactly.
    #[test]
    fn counts_overflow_into_the_side_map() {
        let mut st = TableState::new(4, 1000, Sampling::Rate(0.5));
        st.rows[2][0] = u32::MAX;
        st.overflow.insert(2, 1 << 32);
        st.rows[3][0] = 7;
        let mut c = st.counts();
        c.sort_unstable();
        assert_eq!(c, vec![7, u32::MAX as u64 + (1 << 32)]);
    }
}
