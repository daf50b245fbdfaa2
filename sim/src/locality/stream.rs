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
    /// The catalog index in the top 24 bits (`Access::key`).
    key_base: u64,
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
    fn new(table: usize, rows: u64, window: u64, sampling: Sampling) -> TableState {
        let direct = rows > 0 && rows <= DIRECT_ROWS;
        TableState {
            key_base: (table as u64) << 40,
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
            None if (row as usize) < self.rows.len() => row as usize,
            None => {
                self.outgrow(row);
                self.slot(row)
            }
            Some(m) => {
                let next = self.rows.len() as u32;
                let s = *m.entry(row).or_insert(next);
                if s == next {
                    self.rows.push([0; 4]);
                }
                s as usize
            }
        }
    }

    /// A row past the table's declared rows (an in-memory trace may
    /// declare too few): grow the direct state, or move it behind a map.
    #[cold]
    fn outgrow(&mut self, row: u64) {
        if row < DIRECT_ROWS {
            self.rows.resize(row as usize + 1, [0; 4]);
        } else {
            let touched = self
                .rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.iter().any(|&x| x != 0))
                .map(|(i, _)| (i as u64, i as u32));
            self.map = Some(touched.collect());
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
    shards: Shards,
    reuse: Reuse,
    /// The last batch's accesses the trace-wide pass may sample,
    /// (trace position, key, hash), not yet given to it: it takes them
    /// beside the parts' work on the next batch.
    pending: Vec<(u64, u64, u64)>,
}

impl Overall {
    /// The trace-wide SHARDS pass and reuse times over the accesses
    /// [`Overall::pending`] holds, in trace order. The parts chose them
    /// by a threshold no lower than the pass's now (a threshold only
    /// falls), so the pass's own test decides as if it had run first.
    fn take_pending(&mut self) {
        let mut sampled = std::mem::take(&mut self.pending);
        sampled.sort_unstable_by_key(|s| s.0);
        for &(pos, key, h) in &sampled {
            if h < self.shards.threshold() {
                self.shards.access_hashed(key, h);
                self.reuse.access(key, pos);
            }
        }
        sampled.clear();
        self.pending = sampled;
    }
}

/// A share of the tables, analysed on its own thread: their states, and
/// its share of the trace-wide working sets (rows are disjoint across
/// tables, so the parts' distinct counts add up).
#[derive(Default)]
struct Part {
    /// (catalog index, state) of the tables of this part.
    states: Vec<(usize, TableState)>,
    /// Trace-wide distinct rows of this part per window and per batch.
    per_window: Vec<u64>,
    per_batch: Vec<u64>,
    /// (trace position, key, hash) of the accesses the trace-wide SHARDS
    /// pass may sample, from the last batch.
    sampled: Vec<(u64, u64, u64)>,
}

/// Accesses ahead whose row state is prefetched.
const AHEAD: usize = 16;

/// One access of a part: its position in the batch, the table's index in
/// the part, the row.
#[derive(Debug, Clone, Copy)]
pub struct Own {
    pos: u32,
    table: u32,
    row: u64,
}

/// A batch split among the parts ([`Splitter::split`]).
#[derive(Debug, Default)]
pub struct Split {
    len: u64,
    parts: Vec<Vec<Own>>,
}

/// Splits batches among the parts of a [`StreamAnalysis`]; it can run on
/// another thread (the one that decodes the trace).
#[derive(Debug, Clone)]
pub struct Splitter {
    part_of: Vec<(u32, u32)>,
    n_parts: usize,
}

impl Splitter {
    /// Split `accesses` into `out` (its buffers are reused).
    pub fn split(&self, accesses: &[Access], out: &mut Split) {
        self.start(out);
        accesses.iter().for_each(|a| self.push(out, a));
    }

    /// Empty `out` for a batch given access by access ([`Splitter::push`]).
    pub fn start(&self, out: &mut Split) {
        out.parts.resize_with(self.n_parts, Vec::new);
        out.parts.iter_mut().for_each(Vec::clear);
        out.len = 0;
    }

    /// The next access of the batch `out` holds.
    #[inline]
    pub fn push(&self, out: &mut Split, a: &Access) {
        let (p, l) = self.part_of[a.table as usize];
        out.parts[p as usize].push(Own {
            pos: out.len as u32,
            table: l,
            row: a.row,
        });
        out.len += 1;
    }
}

impl Part {
    /// This part's accesses of batch `b1` - 1, which starts at trace
    /// position `at` and holds `len` accesses; trace windows of `ow_len`.
    fn process(&mut self, own: &[Own], b1: u32, at: u64, len: u64, ow_len: u64, ov_threshold: u64) {
        self.per_batch.push(0);
        self.sampled.clear();
        let mut ob = 0u64;
        // Trace windows are [k * ow_len, (k + 1) * ow_len); every part
        // keeps one entry per window begun.
        let mut next_start = self.per_window.len() as u64 * ow_len;
        for (i, a) in own.iter().enumerate() {
            if let Some(n) = own.get(i + AHEAD) {
                let st = &self.states[n.table as usize].1;
                if st.map.is_none() {
                    embtier::hint::prefetch(st.rows.as_ptr().wrapping_add(n.row as usize));
                }
            }
            let g = at + a.pos as u64;
            while g >= next_start {
                self.per_window.push(0);
                next_start += ow_len;
            }
            let ow_index = self.per_window.len() as u32;
            let st = &mut self.states[a.table as usize].1;
            let slot = st.slot(a.row);
            if st.batch != b1 {
                st.batch = b1;
                st.per_batch.push(0);
            }
            if st.window.tick() {
                st.per_window.push(0);
            }
            let rs = &mut st.rows[slot];
            rs[0] = rs[0].wrapping_add(1);
            if rs[0] == 0 {
                *st.overflow.entry(slot as u32).or_insert(0) += 1 << 32;
            }
            if rs[1] != b1 {
                rs[1] = b1;
                *st.per_batch.last_mut().expect("pushed") += 1;
                ob += 1;
            }
            if rs[2] != st.window.index {
                rs[2] = st.window.index;
                *st.per_window.last_mut().expect("pushed") += 1;
            }
            if rs[3] != ow_index {
                rs[3] = ow_index;
                *self.per_window.last_mut().expect("pushed") += 1;
            }
            // The trace-wide key, as `Access::key`.
            let key = st.key_base | a.row;
            let h = Shards::hash(key);
            if h < st.shards.threshold() {
                st.shards.access_hashed(key, h);
                st.reuse.access(key, st.accesses);
            }
            if h < ov_threshold {
                self.sampled.push((g, key, h));
            }
            st.accesses += 1;
        }
        while next_start < at + len {
            self.per_window.push(0);
            next_start += ow_len;
        }
        *self.per_batch.last_mut().expect("pushed") = ob;
    }
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
    /// The parts, and what sends each table's accesses to its part (set
    /// with the parts).
    parts: Vec<Part>,
    splitter: Option<Splitter>,
    /// The split of the last batch given whole, its buffers reused.
    split: Split,
    overall: Overall,
    batches: u32,
    /// Batches held back until the tables' windows are known.
    held: Vec<Vec<Access>>,
    held_accesses: u64,
}

/// Accesses held back to estimate each table's share of the trace.
const HOLD: u64 = 4 << 20;

/// Parts of the tables per analysis thread ([`StreamAnalysis::start`]).
const PARTS_PER_THREAD: usize = 8;

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
            parts: Vec::new(),
            splitter: None,
            split: Split::default(),
            overall: Overall {
                accesses: 0,
                window: Window::new(overall_window),
                shards: Shards::new(sampling),
                reuse: Reuse::default(),
                pending: Vec::new(),
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

    /// Set the windows from per-table access counts, allocate the state,
    /// and share the tables among the parts by their accesses.
    fn start(&mut self, per_table: &[u64]) {
        // Several parts a thread: tables of equal accesses cost unequal
        // time (a large table's row state misses the cache, a small one's
        // does not), so parts balanced by accesses finish unevenly, and
        // more of them let idle threads take the rest (2.0e9 accesses over
        // 800 tables on 2 threads: 35-36 s with 16 parts, 39-40 s with 2).
        let n_parts =
            (PARTS_PER_THREAD * rayon::current_num_threads()).clamp(1, self.tables.len().max(1));
        self.start_parts(per_table, n_parts);
    }

    fn start_parts(&mut self, per_table: &[u64], n_parts: usize) {
        let opts = &self.opts;
        let acc = |i: usize| per_table.get(i).copied().unwrap_or(0);
        let mut order: Vec<usize> = (0..self.tables.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(acc(i)));
        let mut load = vec![0u64; n_parts];
        let mut parts: Vec<Part> = (0..n_parts).map(|_| Part::default()).collect();
        let mut part_of = vec![(0, 0); self.tables.len()];
        for i in order {
            let p = (0..n_parts).min_by_key(|&p| load[p]).expect("a part");
            load[p] += acc(i).max(1);
            let t = &self.tables[i];
            let w = opts.window.unwrap_or((acc(i) / 100).max(1000));
            part_of[i] = (p as u32, parts[p].states.len() as u32);
            parts[p]
                .states
                .push((i, TableState::new(i, t.rows, w, self.sampling)));
        }
        self.parts = parts;
        self.splitter = Some(Splitter { part_of, n_parts });
    }

    /// One batch of accesses, in trace order.
    pub fn batch(&mut self, accesses: &[Access]) {
        if accesses.is_empty() {
            return;
        }
        if self.parts.is_empty() {
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

    /// The splitter of this pass's parts (`None` while batches are held
    /// back to estimate the tables' shares: pass `Expect::per_table`).
    pub fn splitter(&self) -> Option<Splitter> {
        self.splitter.clone()
    }

    fn process(&mut self, accesses: &[Access]) {
        let mut split = std::mem::take(&mut self.split);
        self.splitter
            .as_ref()
            .expect("started")
            .split(accesses, &mut split);
        self.batch_split(&split);
        self.split = split;
    }

    /// One batch, split by [`StreamAnalysis::splitter`].
    pub fn batch_split(&mut self, split: &Split) {
        use rayon::prelude::*;
        if split.len == 0 {
            return;
        }
        self.batches += 1;
        let b1 = self.batches;
        let ov = &mut self.overall;
        let (at, ow_len, threshold) = (ov.accesses, ov.window.len, ov.shards.threshold());
        // The parts' work on this batch beside the trace-wide pass over
        // the last one's sampled accesses: that pass is one thread's, and
        // run after the parts it left the other idle (a fifth of the
        // 2.0e9-access trace's time; docs/benchmarks.md).
        let parts = &mut self.parts;
        rayon::join(
            || {
                parts
                    .par_iter_mut()
                    .zip(&split.parts)
                    .for_each(|(p, own)| p.process(own, b1, at, split.len, ow_len, threshold))
            },
            || ov.take_pending(),
        );
        for p in &mut self.parts {
            ov.pending.append(&mut p.sampled);
        }
        ov.accesses += split.len;
    }

    /// The report.
    pub fn finish(mut self) -> Report {
        if self.parts.is_empty() {
            self.release();
        }
        let opts = self.opts.clone();
        let default_rb = opts.row_bytes.unwrap_or(256);
        let batches = self.batches as usize;
        let mut overall_counts: Vec<u64> = Vec::new();
        let mut object_bytes = (0u64, 0u64); // (sum, objects)
        let mut tables = Vec::with_capacity(self.tables.len());
        let mut states: Vec<(usize, TableState)> = Vec::new();
        let mut ov_per_window: Vec<u64> = Vec::new();
        let mut ov_per_batch: Vec<u64> = Vec::new();
        let add = |sum: &mut Vec<u64>, v: &[u64]| {
            if sum.len() < v.len() {
                sum.resize(v.len(), 0);
            }
            sum.iter_mut().zip(v).for_each(|(s, x)| *s += x);
        };
        for p in std::mem::take(&mut self.parts) {
            add(&mut ov_per_window, &p.per_window);
            add(&mut ov_per_batch, &p.per_batch);
            states.extend(p.states);
        }
        states.sort_by_key(|s| s.0);
        for (t, (_, st)) in self.tables.iter().zip(states) {
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
        let mut ov = self.overall;
        ov.take_pending();
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
            &ov_per_batch,
            &ov_per_window,
            ov.window.len,
            &Options {
                row_bytes: Some(mean),
                ..opts
            },
        );
        overall.bandwidth.bytes_per_s = tables.iter().map(|t| t.bandwidth.bytes_per_s).sum();
        overall.bandwidth.unique_bytes_per_s =
            tables.iter().map(|t| t.bandwidth.unique_bytes_per_s).sum();
        overall.bandwidth.mean_row_bytes();
        Report { overall, tables }
    }
}

/// The sampled analysis of a `.etrace` file in one pass: a second thread
/// decodes and checks the chunks while this one analyses; memory holds a
/// few batches and the per-row state, never the trace.
pub fn analyze_etrace(
    path: &std::path::Path,
    opts: &Options,
) -> Result<Report, crate::trace::TraceError> {
    use crate::trace::TraceError;
    use std::sync::mpsc;
    let fmt = crate::trace::etrace_err(path);
    let mut r = crate::trace::open_etrace(path)?;
    let (_, accesses) = r.totals().map_err(fmt)?;
    if accesses == 0 {
        return Err(TraceError::Empty { path: path.into() });
    }
    // The tables' shares from the first accesses (for their windows and
    // to balance the parts), then the whole trace from the start.
    let mut seen = vec![0u64; r.tables().len()];
    let mut b = Vec::new();
    let mut held = 0u64;
    while held < HOLD && r.next_batch(&mut b).map_err(fmt)? {
        for a in &b {
            seen[a.table as usize] += 1;
        }
        held += b.len() as u64;
    }
    let scale = accesses as f64 / held.max(1) as f64;
    let per_table = seen.iter().map(|&c| (c as f64 * scale) as u64).collect();
    r.rewind().map_err(fmt)?;
    let mut s = StreamAnalysis::new(
        r.tables(),
        opts,
        Expect {
            accesses,
            per_table: Some(per_table),
        },
    );
    let splitter = s
        .splitter()
        .expect("started: the tables' accesses are given");
    let decoded = std::thread::scope(|scope| {
        let (full_tx, full_rx) = mpsc::sync_channel::<Split>(2);
        let (empty_tx, empty_rx) = mpsc::channel::<Split>();
        let reader = scope.spawn(move || {
            loop {
                // Decoded straight into the parts' lists.
                let mut split = empty_rx.try_recv().unwrap_or_default();
                splitter.start(&mut split);
                if !r.next_batch_with(|a| splitter.push(&mut split, &a))? {
                    return Ok(());
                }
                if full_tx.send(split).is_err() {
                    return Ok(()); // the analysis stopped
                }
            }
        });
        for split in full_rx {
            s.batch_split(&split);
            let _ = empty_tx.send(split);
        }
        reader.join().expect("the trace reader does not panic")
    });
    decoded.map_err(fmt)?;
    Ok(s.finish())
}

/// A trace file analysed by [`analyze_file`].
#[derive(Debug, Clone, PartialEq)]
pub struct Streamed {
    /// The format it was read as.
    pub format: crate::trace::Format,
    /// What the reader decided or doubts (a header it detected...).
    pub notes: Vec<crate::trace::Note>,
    /// The tables.
    pub tables: Vec<TraceTable>,
    /// Accesses.
    pub accesses: u64,
    /// Batches.
    pub batches: u64,
    /// The analysis.
    pub report: Report,
}

/// The sampled analysis (`opts.sample` set) of a trace file in any format
/// but `.etrace` ([`analyze_etrace`]) without holding its accesses: one
/// pass reads the catalog, a second feeds the analysis in batches of
/// `batch` ([`crate::trace::import_batches`]). Memory grows with the
/// distinct ids (each reader's id tables and 16 bytes of state a row),
/// not with the accesses. The report is the report of the same file
/// imported whole.
pub fn analyze_file(
    path: &std::path::Path,
    format: crate::trace::Format,
    csv: &crate::trace::CsvSpec,
    batch: usize,
    opts: &Options,
) -> Result<Streamed, crate::trace::TraceError> {
    let s: std::cell::RefCell<Option<StreamAnalysis>> = Default::default();
    let mut tables = Vec::new();
    let mut accesses = 0;
    let mut batches = 0;
    let (format, notes) = crate::trace::import_batches(
        path,
        format,
        csv,
        batch,
        |t, per_table| {
            tables = t.to_vec();
            accesses = per_table.iter().sum();
            let expect = Expect {
                accesses,
                per_table: Some(per_table.to_vec()),
            };
            *s.borrow_mut() = Some(StreamAnalysis::new(t, opts, expect));
        },
        |b| {
            batches += 1;
            s.borrow_mut().as_mut().expect("started").batch(b);
        },
    )?;
    let s = s
        .into_inner()
        .ok_or(crate::trace::TraceError::Empty { path: path.into() })?;
    Ok(Streamed {
        format,
        notes,
        tables,
        accesses,
        batches,
        report: s.finish(),
    })
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
    let (mut mrc, dh, mut method) =
        sampled_curve(&sampled, opts, &sizes, &row_sizes, row_bytes, mean);
    if sampled.sampled == 0 && accesses > 0 {
        // The sample held none of these accesses (a small table at a low
        // rate): no estimate, where SHARDS would say no miss at all. LRU
        // misses only the first access of each row at a size of at least
        // the distinct rows (counted exactly), at most every access below:
        // the bound, said in the method.
        let unique = cf.unique;
        let cold = unique as f64 / accesses as f64;
        for (p, &c) in mrc.iter_mut().zip(&row_sizes) {
            let rows = if opts.bytes && row_bytes == 0 {
                c / mean
            } else {
                c
            };
            p.miss_ratio = if rows >= unique { cold } else { 1.0 };
        }
        method = format!(
            "no sampled reference (rate {rate:.6}): a bound, 1 below the {unique} distinct rows and their cold misses from there"
        );
    }
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
        sampled_references: Some(sampled.sampled),
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
    use crate::trace::Format;

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
                    assert_eq!(r.mrc_sampled_references, Some(r.accesses));
                    r.mrc_sampled_references = None;
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

    /// Rows past the declared rows grow the state, or move it behind a map,
    /// keeping the counts.
    #[test]
    fn rows_past_the_declared_ones_are_counted() {
        let mut st = TableState::new(0, 10, 1000, Sampling::Rate(1.0));
        for row in [3u64, 3, 12, DIRECT_ROWS + 5, 3, DIRECT_ROWS + 5, 12] {
            let s = st.slot(row);
            st.rows[s][0] += 1;
        }
        assert!(st.map.is_some());
        let mut c = st.counts();
        c.sort_unstable();
        assert_eq!(c, vec![2, 2, 3]);
    }

    /// The trace-wide pass takes a batch's sampled accesses beside the
    /// parts' work on the next one, chosen by a threshold that may since
    /// have fallen (fixed-size SHARDS lowers it as it drops keys): its
    /// figures are the same however the trace is cut into batches, one
    /// batch (taken at the end) or batches of 7 accesses.
    #[test]
    fn trace_wide_pass_is_the_same_however_batched() {
        let t = trace();
        let opts = Options {
            sample: Some(Sampling::FixedSize(40)),
            ..Options::default()
        };
        let run = |cut: usize| {
            let mut s = StreamAnalysis::new(
                &t.tables,
                &opts,
                Expect {
                    accesses: t.accesses.len() as u64,
                    per_table: Some(vec![1; t.tables.len()]),
                },
            );
            for b in t.accesses.chunks(cut) {
                s.batch(b);
            }
            s.finish().overall
        };
        let (one, many) = (run(t.accesses.len()), run(7));
        assert!(
            one.mrc_sampled_references.is_some_and(|n| n > 40),
            "{:?}",
            one.mrc_sampled_references
        );
        assert_eq!(one.mrc, many.mrc);
        assert_eq!(one.mrc_method, many.mrc_method);
        assert_eq!(one.mrc_sampled_references, many.mrc_sampled_references);
        assert_eq!(one.reuse_distance, many.reuse_distance);
        assert_eq!(one.reuse_time, many.reuse_time);
    }

    /// However the tables are shared among parts (one part, more parts
    /// than threads, more parts than tables), the report is the same.
    #[test]
    fn parts_do_not_change_the_report() {
        let t = trace();
        let opts = Options {
            sample: Some(Sampling::Rate(0.3)),
            ..Options::default()
        };
        let want = analyze(&t, &opts);
        let mut per = vec![0u64; t.tables.len()];
        for a in &t.accesses {
            per[a.table as usize] += 1;
        }
        for n in [1, 3, 4] {
            let mut s = StreamAnalysis::new(
                &t.tables,
                &opts,
                Expect {
                    accesses: t.accesses.len() as u64,
                    per_table: None,
                },
            );
            s.start_parts(&per, n);
            for b in t.batches() {
                s.batch(b);
            }
            assert_eq!(s.finish(), want, "{n} parts");
        }
    }

    /// A `.etrace` streamed from its file (decoded into the parts on the
    /// reader thread) gives the report of the trace in memory; a damaged
    /// file is an error naming it.
    #[test]
    fn streamed_file_equals_the_trace_in_memory() {
        let t = trace();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.etrace");
        t.write_etrace(&path).unwrap();
        let opts = Options {
            sample: Some(Sampling::Rate(0.2)),
            ..Options::default()
        };
        assert_eq!(analyze_etrace(&path, &opts).unwrap(), analyze(&t, &opts));
        let mut b = std::fs::read(&path).unwrap();
        let n = b.len();
        b[n / 2] ^= 0x55;
        std::fs::write(&path, &b).unwrap();
        let e = analyze_etrace(&path, &opts).unwrap_err().to_string();
        assert!(e.contains("t.etrace"), "{e}");
    }

    /// An oracleGeneral file streamed in two passes gives the report of
    /// the same file imported whole, at a sampled rate and at rate 1; a
    /// truncated file is an error naming it.
    #[test]
    fn streamed_oracle_general_equals_the_file_imported_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.oracleGeneral.bin");
        let mut bytes = Vec::new();
        let mut x = 5u64;
        // 150,000 records (more than two read blocks) over skewed, scattered ids.
        for t in 0..150_000u32 {
            x = embtier::init::mix64(x);
            let r = (x >> 11) as f64 / (1u64 << 53) as f64;
            let id = embtier::init::mix64((r * r * r * 40_000.0) as u64);
            bytes.extend_from_slice(&t.to_le_bytes());
            bytes.extend_from_slice(&id.to_le_bytes());
            bytes.extend_from_slice(&1u32.to_le_bytes());
            bytes.extend_from_slice(&(-1i64).to_le_bytes());
        }
        std::fs::write(&path, &bytes).unwrap();
        let csv = crate::trace::CsvSpec::default();
        let (t, _) =
            crate::trace::import(&path, crate::trace::Format::OracleGeneral, &csv, 999).unwrap();
        for rate in [0.1, 1.0] {
            let opts = Options {
                sample: Some(Sampling::Rate(rate)),
                ..Options::default()
            };
            let s = analyze_file(&path, Format::OracleGeneral, &csv, 999, &opts).unwrap();
            assert_eq!(s.tables, t.tables);
            assert_eq!(s.accesses, 150_000);
            assert_eq!(s.batches, t.batch_ends.len() as u64);
            assert_eq!(s.report, analyze(&t, &opts), "rate {rate}");
        }
        std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
        let opts = Options {
            sample: Some(Sampling::Rate(0.1)),
            ..Options::default()
        };
        let e = analyze_file(&path, Format::OracleGeneral, &csv, 1000, &opts)
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.oracleGeneral.bin"), "{e}");
    }

    /// Text, CSV, Criteo and MovieLens files streamed in two passes give
    /// the report of the same file imported whole (tables, per-table
    /// windows and all), and the same notes.
    #[test]
    fn streamed_text_formats_equal_the_files_imported_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut x = 9u64;
        let mut next = |n: u64| {
            x = embtier::init::mix64(x);
            let r = (x >> 11) as f64 / (1u64 << 53) as f64;
            (r * r * n as f64) as u64
        };
        let (mut txt, mut csv, mut criteo, mut ml) = (
            String::new(),
            String::from("user,item\n"),
            String::new(),
            String::new(),
        );
        for i in 0..6_000u64 {
            txt.push_str(&format!("{}\n", next(900) * 31 + 7));
            csv.push_str(&format!("{},{}\n", next(500), next(70)));
            let cats: Vec<String> = (0..26u64)
                .map(|c| format!("{:08x}", next(40 + c * 30)))
                .collect();
            criteo.push_str(&format!(
                "{}\t{}\t{}\n",
                i % 2,
                vec!["1"; 13].join("\t"),
                cats.join("\t")
            ));
            ml.push_str(&format!(
                "{}\t{}\t4\t{}\n",
                next(300),
                next(800),
                1_000 + next(50_000)
            ));
        }
        let csv_spec = crate::trace::CsvSpec::default();
        for (name, body, format) in [
            ("t.txt", &txt, Format::Txt),
            ("t.csv", &csv, Format::Csv),
            ("t.criteo", &criteo, Format::Criteo),
            ("t.inter", &ml, Format::Movielens),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, body).unwrap();
            let imported = crate::trace::import_noting(&path, format, &csv_spec, 64).unwrap();
            let t = imported.trace;
            for rate in [0.3, 1.0] {
                let opts = Options {
                    sample: Some(Sampling::Rate(rate)),
                    ..Options::default()
                };
                let s = analyze_file(&path, format, &csv_spec, 64, &opts).unwrap();
                assert_eq!(s.format, format);
                assert_eq!(s.notes, imported.notes, "{name}");
                assert_eq!(s.tables, t.tables, "{name}");
                assert_eq!(s.accesses, t.accesses.len() as u64, "{name}");
                assert_eq!(s.batches, t.batch_ends.len() as u64, "{name}");
                assert_eq!(s.report, analyze(&t, &opts), "{name} at rate {rate}");
            }
        }
    }

    /// Counts past u32::MAX are kept exactly.
    #[test]
    fn counts_overflow_into_the_side_map() {
        let mut st = TableState::new(0, 4, 1000, Sampling::Rate(0.5));
        st.rows[2][0] = u32::MAX;
        st.overflow.insert(2, 1 << 32);
        st.rows[3][0] = 7;
        let mut c = st.counts();
        c.sort_unstable();
        assert_eq!(c, vec![7, u32::MAX as u64 + (1 << 32)]);
    }
}
