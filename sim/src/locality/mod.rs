//! Locality analysis of an access trace: counts, skew, the dlrm_datasets
//! access-count histogram, exact LRU stack distances (O(N log N)), reuse
//! times, and exact miss-ratio curves. Every figure is given per table and
//! overall; "overall" treats `(table, row)` as one object space.
//!
//! Conventions (also in `docs/locality.md`):
//! - shares, Gini and the Zipf fit are over rows touched by the trace;
//! - a cache size counts rows; a row hits an LRU cache of `C` rows iff its
//!   stack distance (distinct rows accessed since its last access) is `< C`.

use serde::Serialize;

mod curves;
pub mod dlrm;
pub mod plan;
pub mod shards;
pub mod store_toml;
pub mod stream;

use crate::trace::{Access, Trace, TraceTable};

use curves::skew;
pub use curves::{
    byte_mrc, default_sizes, fit_zipf, lru_hits, lru_hits_from_distances, mrc_from_distances,
    mrc_from_hits, reuse_times, stack_distances,
};

/// Upper edges of the access-count bins of Meta's dlrm_datasets
/// `locality_stats.txt`: (0,1], (1,2], (2,4], ..., (16384,32768], then 32768+.
pub const COUNT_BIN_EDGES: [u64; 16] = [
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768,
];

/// Bin of an access count `c >= 1`: 0 for (0,1], ..., 15 for (16384,32768], 16 above.
pub fn count_bin(c: u64) -> usize {
    if c <= 1 {
        0
    } else {
        ((64 - (c - 1).leading_zeros()) as usize).min(16)
    }
}

/// A point of a miss-ratio curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MrcPoint {
    /// Cache size in rows (with `--bytes`: the rows a cache of `cache_bytes`
    /// holds, for one table; 0 overall, where row sizes differ).
    pub cache_rows: u64,
    /// Cache size in bytes, when sizes are given in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_bytes: Option<u64>,
    /// Miss ratio of an LRU cache of that size.
    pub miss_ratio: f64,
}

/// A log2-binned histogram: `bins[k]` counts values in `[2^(k-1), 2^k)`
/// (`bins[0]` counts 0), `cold` counts first accesses (no previous access).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Log2Hist {
    /// Counts per bin.
    pub bins: Vec<u64>,
    /// First accesses.
    pub cold: u64,
}

impl Log2Hist {
    pub(crate) fn add(&mut self, v: u64) {
        let k = if v == 0 {
            0
        } else {
            64 - v.leading_zeros() as usize
        };
        if self.bins.len() <= k {
            self.bins.resize(k + 1, 0);
        }
        self.bins[k] += 1;
    }
    /// Lower and upper bound (inclusive) of bin `k`.
    pub fn range(k: usize) -> (u64, u64) {
        if k == 0 {
            (0, 0)
        } else {
            (1 << (k - 1), (1u64 << k) - 1)
        }
    }
}

/// A quantity over time: summary statistics and a series of at most 200
/// points (each the mean of consecutive values).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Series {
    /// Values summarised.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
    /// Downsampled values in time order.
    pub points: Vec<f64>,
}

impl Series {
    fn of(values: &[u64]) -> Series {
        if values.is_empty() {
            return Series::default();
        }
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let q = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64;
        let per = values.len().div_ceil(200);
        Series {
            count: values.len() as u64,
            mean: values.iter().sum::<u64>() as f64 / values.len() as f64,
            p50: q(0.5),
            p99: q(0.99),
            max: *sorted.last().expect("non-empty") as f64,
            points: values
                .chunks(per)
                .map(|c| c.iter().sum::<u64>() as f64 / c.len() as f64)
                .collect(),
        }
    }
}

/// Bandwidth a table needs at a target training rate.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Bandwidth {
    /// Bytes per row assumed (overall, where tables differ: the mean over
    /// the accesses, rounded).
    pub row_bytes: u64,
    /// Target batches per second.
    pub batches_per_s: f64,
    /// Mean accesses per batch.
    pub accesses_per_batch: f64,
    /// Mean distinct rows per batch.
    pub unique_rows_per_batch: f64,
    /// Row bytes read per second, every access counted.
    pub bytes_per_s: f64,
    /// Row bytes read per second after deduplication within each batch.
    pub unique_bytes_per_s: f64,
}

impl Bandwidth {
    /// `row_bytes` as the mean over the accesses of the bytes already
    /// summed (the overall figure of tables whose rows differ).
    fn mean_row_bytes(&mut self) {
        let accesses_per_s = self.accesses_per_batch * self.batches_per_s;
        self.row_bytes = if accesses_per_s > 0.0 {
            (self.bytes_per_s / accesses_per_s).round() as u64
        } else {
            0
        };
    }
}

/// Every figure of one table (or of the whole trace).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TableReport {
    /// Table name (`overall` for the whole trace).
    pub name: String,
    /// Rows of the table (sum over tables for overall).
    pub rows: u64,
    /// Accesses.
    pub accesses: u64,
    /// Distinct rows accessed.
    pub unique_rows: u64,
    /// Rows accessed exactly once.
    pub one_hit_rows: u64,
    /// unique_rows / rows.
    pub coverage: f64,
    /// Share of accesses to the most accessed 0.1% of touched rows (at least one row).
    pub top_0_1pct_share: f64,
    /// The same for the top 1%.
    pub top_1pct_share: f64,
    /// The same for the top 10%.
    pub top_10pct_share: f64,
    /// Zipf exponent fitted to the rank-frequency curve (see `docs/locality.md`).
    pub zipf_alpha: f64,
    /// Gini coefficient of the access counts of touched rows.
    pub gini: f64,
    /// Fraction of touched rows per count bin ([`COUNT_BIN_EDGES`], 17 bins).
    pub count_hist_rows: Vec<f64>,
    /// Fraction of accesses per count bin.
    pub count_hist_accesses: Vec<f64>,
    /// LRU stack distances.
    pub reuse_distance: Log2Hist,
    /// Reuse times (accesses since the previous access of the row).
    pub reuse_time: Log2Hist,
    /// LRU miss-ratio curve (exact, or estimated by SHARDS; see `mrc_method`).
    pub mrc: Vec<MrcPoint>,
    /// `exact`, or `shards` with the final sampling rate.
    pub mrc_method: String,
    /// Accesses SHARDS sampled for the MRC and stack distances (`None`
    /// when they are exact): the fewer, the rougher the estimate; none
    /// leaves no curve at all.
    pub mrc_sampled_references: Option<u64>,
    /// Compulsory (cold) miss ratio: unique_rows / accesses.
    pub cold_miss_ratio: f64,
    /// Distinct rows per batch, over time.
    pub working_set_per_batch: Series,
    /// Distinct rows per window of `window` accesses (of this table), over time.
    pub working_set_per_window: Series,
    /// Window length used.
    pub window: u64,
    /// Bandwidth need at the target rate.
    pub bandwidth: Bandwidth,
}

/// The analysis of a trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The whole trace.
    pub overall: TableReport,
    /// Per table, in catalog order.
    pub tables: Vec<TableReport>,
}

/// Options.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Cache sizes (rows) of the MRC; by default 24 log-spaced sizes up to the
    /// unique rows of each table.
    pub mrc_sizes: Option<Vec<u64>>,
    /// Estimate the MRC and stack distances with SHARDS instead of exactly.
    pub sample: Option<shards::Sampling>,
    /// Accesses per working-set window (default: accesses / 100, at least 1000).
    pub window: Option<u64>,
    /// Target training rate for the bandwidth figures (default 1 batch/s).
    pub batches_per_s: Option<f64>,
    /// Bytes per row when the trace does not say (default 256).
    pub row_bytes: Option<u64>,
    /// Cache sizes are bytes: a row hits an LRU cache of `C` bytes iff the
    /// bytes of the distinct rows accessed since its last access, plus its
    /// own, fit in `C`.
    pub bytes: bool,
}

/// One table's (or the whole trace's) input to `report`.
struct Stream<'a> {
    name: &'a str,
    rows: u64,
    row_bytes: u64,
    /// Dense object ids in time order.
    seq: &'a [u32],
    /// The first access (in `seq`) of each batch the table occurs in.
    batch_starts: &'a [u32],
    /// Batches in the trace.
    batches: usize,
    n_objects: usize,
    /// Bytes of each object (overall only; empty for a table).
    object_bytes: Vec<u64>,
}

/// What one pass over a table's accesses gives its exact report.
struct TablePass {
    /// LRU's hits at each of the sizes asked for.
    hits: Vec<u64>,
    dist: Log2Hist,
    time: Log2Hist,
    /// Accesses per object.
    counts: Vec<u64>,
    /// Distinct objects per batch the table occurs in.
    ws_batch: Vec<u64>,
    /// Distinct objects per window of `window` accesses.
    ws_window: Vec<u64>,
}

/// The stack-distance pass of `s` with LRU's hits at `sizes` and the
/// working sets counted in it: an access starts its object's count in a
/// batch (or window) when its object's last access came before the
/// batch's (window's) first, so the pass's record of each object's last
/// access serves all three, and the accesses are read once.
fn table_pass(s: &Stream<'_>, sizes: &[u64], window: u64) -> TablePass {
    let mut v = TableVisit {
        batch_starts: s.batch_starts,
        buckets: curves::SizeBuckets::new(sizes),
        per_batch: Vec::with_capacity(s.batch_starts.len()),
        per_window: Vec::new(),
        batch_start: 0,
        window,
        window_start: 0,
        window_end: 0,
    };
    let (dist, time, counts) = curves::distance_pass(s.seq, s.n_objects, &mut v);
    TablePass {
        hits: v.buckets.hits(sizes),
        dist,
        time,
        counts,
        ws_batch: v.per_batch,
        ws_window: v.per_window,
    }
}

/// [`table_pass`]'s counters, told of each access by the pass.
struct TableVisit<'a> {
    /// The batches' first accesses still to come.
    batch_starts: &'a [u32],
    buckets: curves::SizeBuckets,
    per_batch: Vec<u64>,
    per_window: Vec<u64>,
    /// The first access of the batch.
    batch_start: u32,
    window: u64,
    /// The first access of the window, and the first of the next.
    window_start: usize,
    window_end: usize,
}

impl curves::Visit for &mut TableVisit<'_> {
    #[inline(always)]
    fn visit(&mut self, t: usize, last: u32, d: u64) {
        if let Some((&start, rest)) = self.batch_starts.split_first() {
            if start as usize == t {
                self.batch_start = start;
                self.batch_starts = rest;
                self.per_batch.push(0);
            }
        }
        if t == self.window_end {
            self.per_window.push(0);
            self.window_start = t;
            self.window_end = t + self.window as usize;
        }
        let first = last == curves::FIRST;
        if first || last < self.batch_start {
            *self.per_batch.last_mut().expect("a batch") += 1;
        }
        if first || (last as usize) < self.window_start {
            *self.per_window.last_mut().expect("a window") += 1;
        }
        if !first {
            self.buckets.add(d);
        }
    }
}

/// The figures that follow from per-row access counts alone.
struct CountFigures {
    unique: u64,
    one_hit: u64,
    hist_rows: Vec<f64>,
    hist_acc: Vec<f64>,
    top: (f64, f64, f64),
    alpha: f64,
    gini: f64,
}

impl CountFigures {
    /// From the counts of the touched rows (zeros are dropped; reordered).
    fn of(mut counts: Vec<u64>, accesses: u64) -> CountFigures {
        counts.retain(|&c| c > 0);
        let unique = counts.len() as u64;
        let one_hit = counts.iter().filter(|&&c| c == 1).count() as u64;
        let mut hist_rows = vec![0f64; 17];
        let mut hist_acc = vec![0f64; 17];
        for &c in &counts {
            let b = count_bin(c);
            hist_rows[b] += 1.0;
            hist_acc[b] += c as f64;
        }
        hist_rows
            .iter_mut()
            .for_each(|v| *v /= unique.max(1) as f64);
        hist_acc
            .iter_mut()
            .for_each(|v| *v /= accesses.max(1) as f64);
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let (t01, t1, t10, alpha, gini) = skew(&counts, accesses);
        CountFigures {
            unique,
            one_hit,
            hist_rows,
            hist_acc,
            top: (t01, t1, t10),
            alpha,
            gini,
        }
    }
}

/// The MRC sizes of a table or the trace (bytes with `--bytes`), and the
/// same sizes in rows for a table whose rows are all one size.
fn curve_sizes(
    opts: &Options,
    unique: u64,
    row_bytes: u64,
    mean_bytes: u64,
) -> (Vec<u64>, Vec<u64>) {
    let sizes = opts.mrc_sizes.clone().unwrap_or_else(|| {
        let rows = default_sizes(unique);
        if opts.bytes {
            let rb = if row_bytes > 0 { row_bytes } else { mean_bytes };
            rows.iter().map(|r| r * rb).collect()
        } else {
            rows
        }
    });
    // With --bytes, a table's sizes convert to rows (its rows are all one size).
    let row_sizes = if opts.bytes && row_bytes > 0 {
        sizes.iter().map(|c| c / row_bytes).collect()
    } else {
        sizes.clone()
    };
    (sizes, row_sizes)
}

/// The MRC, distance histogram and method of a SHARDS estimate.
fn sampled_curve(
    r: &shards::Sampled,
    opts: &Options,
    sizes: &[u64],
    row_sizes: &[u64],
    row_bytes: u64,
    mean_bytes: u64,
) -> (Vec<MrcPoint>, Log2Hist, String) {
    // Scale sampled counts to estimates of the whole trace.
    let mut dh = r.reuse_distance.clone();
    let scale = 1.0 / r.rate;
    dh.bins
        .iter_mut()
        .for_each(|c| *c = (*c as f64 * scale).round() as u64);
    dh.cold = (dh.cold as f64 * scale).round() as u64;
    let mut method = format!(
        "shards (rate {:.6}, {} sampled references)",
        r.rate, r.sampled
    );
    if opts.bytes && row_bytes == 0 {
        // SHARDS counts rows; convert at the mean row size.
        let as_rows: Vec<u64> = sizes.iter().map(|c| c / mean_bytes).collect();
        let mut m = r.mrc(&as_rows);
        for (p, &c) in m.iter_mut().zip(sizes) {
            p.cache_bytes = Some(c);
            p.cache_rows = 0;
        }
        method.push_str(&format!(", bytes at the mean row size {mean_bytes}"));
        (m, dh, method)
    } else {
        (r.mrc(row_sizes), dh, method)
    }
}

/// The exact report of one table or of the trace (sampled analyses
/// stream: [`stream::StreamAnalysis`]).
fn report(st: &Stream<'_>, opts: &Options) -> TableReport {
    let (name, rows, seq, n_objects) = (st.name, st.rows, st.seq, st.n_objects);
    let accesses = seq.len() as u64;
    // Every object of 0..n_objects occurs (the ids are dense).
    let unique = n_objects as u64;
    let mean_bytes =
        (st.object_bytes.iter().sum::<u64>() / st.object_bytes.len().max(1) as u64).max(1);
    let (sizes, row_sizes) = curve_sizes(opts, unique, st.row_bytes, mean_bytes);
    let window = opts.window.unwrap_or((accesses / 100).max(1000)).max(1);
    let p = table_pass(st, &row_sizes, window);
    let cf = CountFigures::of(p.counts, accesses);
    debug_assert_eq!(cf.unique, unique, "{name}: ids not dense");
    let (hits, dh, th, ws_batch, ws_window) = (p.hits, p.dist, p.time, p.ws_batch, p.ws_window);
    let (mrc, method) = if opts.bytes && st.row_bytes == 0 {
        // Overall: rows of different sizes, so weigh distances in bytes.
        let sz: Vec<u64> = st.object_bytes.iter().map(|&b| b.max(1)).collect();
        (byte_mrc(seq, &sz, &sizes), "exact, in bytes".to_string())
    } else {
        (
            mrc_from_hits(&row_sizes, &hits, accesses),
            "exact".to_string(),
        )
    };
    assemble(Parts {
        name,
        rows,
        accesses,
        row_bytes: st.row_bytes,
        batches: st.batches,
        cf,
        sizes: &sizes,
        mrc,
        reuse_distance: dh,
        reuse_time: th,
        method,
        sampled_references: None,
        ws_batch: &ws_batch,
        ws_window: &ws_window,
        window,
        opts,
    })
}

/// What a [`TableReport`] is made of, however it was computed.
struct Parts<'a> {
    name: &'a str,
    rows: u64,
    accesses: u64,
    row_bytes: u64,
    batches: usize,
    cf: CountFigures,
    sizes: &'a [u64],
    mrc: Vec<MrcPoint>,
    reuse_distance: Log2Hist,
    reuse_time: Log2Hist,
    method: String,
    sampled_references: Option<u64>,
    ws_batch: &'a [u64],
    ws_window: &'a [u64],
    window: u64,
    opts: &'a Options,
}

fn assemble(p: Parts<'_>) -> TableReport {
    let mut mrc = p.mrc;
    if p.opts.bytes && p.row_bytes > 0 {
        for (m, &c) in mrc.iter_mut().zip(p.sizes) {
            m.cache_bytes = Some(c);
        }
    }
    let bps = p.opts.batches_per_s.unwrap_or(1.0);
    // Means over all batches of the trace (a table absent from a batch moves nothing then).
    let per_batch = p.accesses as f64 / p.batches.max(1) as f64;
    let uniq_per_batch = p.ws_batch.iter().sum::<u64>() as f64 / p.batches.max(1) as f64;
    let unique = p.cf.unique;
    TableReport {
        name: p.name.into(),
        rows: p.rows,
        accesses: p.accesses,
        unique_rows: unique,
        one_hit_rows: p.cf.one_hit,
        coverage: unique as f64 / p.rows.max(1) as f64,
        top_0_1pct_share: p.cf.top.0,
        top_1pct_share: p.cf.top.1,
        top_10pct_share: p.cf.top.2,
        zipf_alpha: p.cf.alpha,
        gini: p.cf.gini,
        count_hist_rows: p.cf.hist_rows,
        count_hist_accesses: p.cf.hist_acc,
        reuse_distance: p.reuse_distance,
        reuse_time: p.reuse_time,
        mrc,
        mrc_method: p.method,
        mrc_sampled_references: p.sampled_references,
        cold_miss_ratio: unique as f64 / p.accesses.max(1) as f64,
        working_set_per_batch: Series::of(p.ws_batch),
        working_set_per_window: Series::of(p.ws_window),
        window: p.window,
        bandwidth: Bandwidth {
            row_bytes: p.row_bytes,
            batches_per_s: bps,
            accesses_per_batch: per_batch,
            unique_rows_per_batch: uniq_per_batch,
            bytes_per_s: per_batch * p.row_bytes as f64 * bps,
            unique_bytes_per_s: uniq_per_batch * p.row_bytes as f64 * bps,
        },
    }
}

/// How many accesses ahead the exact analysis asks for a row's dense id.
const ID_AHEAD: usize = 16;

/// Row ids to dense ids in order of first appearance: the rows
/// themselves while they come in that order (as the importers number
/// them), else a vector over the table's rows where they are few (at
/// most `budget`), else the importers' id table.
enum DenseIds {
    /// Every row so far was below the first `n` rows, or the `n`th, and
    /// is its own id: `(n, rows, budget)`.
    InOrder(u32, u64, u64),
    /// Dense id + 1 by row (0: not seen), and the ids given.
    Direct(Vec<u32>, u32),
    Map(crate::densify::IdTable),
}

impl DenseIds {
    /// Ids that are the rows while the rows come in order of first
    /// appearance, then [`DenseIds::new`]'s.
    fn in_order(rows: u64, budget: u64) -> DenseIds {
        DenseIds::InOrder(0, rows, budget)
    }

    /// Ids by vector or by table (`rows` of the table, at most `budget`
    /// by vector).
    fn new(rows: u64, budget: u64) -> DenseIds {
        if rows <= budget {
            DenseIds::Direct(vec![0; rows as usize], 0)
        } else {
            DenseIds::Map(Default::default())
        }
    }

    /// The dense id of `row`. Inlined into the per-access loop; the moves
    /// from one kind to the next are out of line.
    #[inline(always)]
    fn id(&mut self, row: u64) -> u32 {
        match self {
            DenseIds::InOrder(n, ..) => {
                if row < *n as u64 {
                    row as u32
                } else if row == *n as u64 && *n < u32::MAX {
                    *n += 1;
                    row as u32
                } else {
                    self.leave_order(row)
                }
            }
            DenseIds::Direct(v, n) => match v.get_mut(row as usize) {
                Some(x) => {
                    if *x == 0 {
                        *n += 1;
                        *x = *n;
                    }
                    *x - 1
                }
                None => self.leave_vector(row),
            },
            DenseIds::Map(m) => {
                // An exact analysis holds fewer accesses than the map
                // numbers ids (`MAX_EXACT_ACCESSES`).
                debug_assert!(!m.overflowed());
                m.id(row)
            }
        }
    }

    /// Ask for the memory that [`DenseIds::id`] of `row` reads (a hint).
    #[inline(always)]
    fn prefetch(&self, row: u64) {
        match self {
            DenseIds::InOrder(..) => {}
            DenseIds::Direct(v, _) => {
                embtier::hint::prefetch(v.as_ptr().wrapping_add(row as usize))
            }
            DenseIds::Map(m) => m.prefetch_hashed(crate::densify::IdTable::hash(row)),
        }
    }

    /// `row`'s dense id if it has one, numbering nothing.
    #[inline(always)]
    fn peek(&self, row: u64) -> Option<u32> {
        match self {
            DenseIds::InOrder(n, ..) => (row < *n as u64).then_some(row as u32),
            DenseIds::Direct(v, _) => v.get(row as usize).and_then(|&x| x.checked_sub(1)),
            DenseIds::Map(m) => m.get(row),
        }
    }

    /// Out of order: the rows seen are 0..n, each its own id; number
    /// them so again by vector or table, then `row`.
    #[cold]
    #[inline(never)]
    fn leave_order(&mut self, row: u64) -> u32 {
        let DenseIds::InOrder(n, rows, budget) = *self else {
            unreachable!("only in order")
        };
        let mut d = DenseIds::new(rows, budget);
        for r in 0..n as u64 {
            d.id(r);
        }
        *self = d;
        self.id(row)
    }

    /// A row past the declared rows: move to a table, its rows entered in
    /// id order so that they keep their ids, then `row`.
    #[cold]
    #[inline(never)]
    fn leave_vector(&mut self, row: u64) -> u32 {
        let DenseIds::Direct(v, _) = self else {
            unreachable!("only by vector")
        };
        let mut seen: Vec<(u32, u64)> = v
            .iter()
            .enumerate()
            .filter(|(_, &x)| x != 0)
            .map(|(r, &x)| (x - 1, r as u64))
            .collect();
        seen.sort_unstable();
        let mut t = crate::densify::IdTable::with_capacity(seen.len());
        for (_, r) in seen {
            t.id(r);
        }
        *self = DenseIds::Map(t);
        self.id(row)
    }

    /// Ids given.
    fn len(&self) -> usize {
        match self {
            DenseIds::InOrder(n, ..) => *n as usize,
            DenseIds::Direct(_, n) => *n as usize,
            DenseIds::Map(m) => m.len(),
        }
    }
}

/// The trace-wide report of a one-table trace: the table's, as the
/// trace-wide pass would compute it (its objects are the table's rows, so
/// every figure is the same; with `--bytes` its curve is in bytes only).
fn single_overall(t: &TableReport, opts: &Options) -> TableReport {
    let mut o = t.clone();
    o.name = "overall".into();
    if opts.bytes {
        o.mrc_method = "exact, in bytes".into();
        o.mrc.iter_mut().for_each(|p| p.cache_rows = 0);
    }
    o
}

/// Analyse `trace`.
///
/// With `opts.sample`, one streaming pass ([`stream::StreamAnalysis`]):
/// counts, histograms and working sets exact, curves, distances and reuse
/// times estimated from the sampled rows.
///
/// # Panics
/// An exact analysis (no [`Options::sample`]) of more than
/// [`MAX_EXACT_ACCESSES`] accesses.
pub fn analyze(trace: &Trace, opts: &Options) -> Report {
    analyze_with(trace, opts, true)
}

/// [`analyze`]; `share_single`: a one-table trace's trace-wide report is
/// its table's (the same figures, computed once).
fn analyze_with(trace: &Trace, opts: &Options, share_single: bool) -> Report {
    if opts.sample.is_some() {
        let mut per_table = vec![0u64; trace.tables.len()];
        for a in &trace.accesses {
            per_table[a.table as usize] += 1;
        }
        let mut s = stream::StreamAnalysis::new(
            &trace.tables,
            opts,
            stream::Expect {
                accesses: trace.accesses.len() as u64,
                per_table: Some(per_table),
            },
        );
        for b in trace.batches() {
            s.batch(b);
        }
        return s.finish();
    }
    let mut x = ExactAnalysis::new(Some(&trace.tables), trace.accesses.len() as u64, u64::MAX);
    x.share_single = share_single;
    for b in trace.batches() {
        x.batch(b);
    }
    assert!(
        !x.over(),
        "an exact analysis of more than {MAX_EXACT_ACCESSES} accesses"
    );
    x.finish(&trace.tables, opts)
}

/// The most accesses an exact analysis holds: it keeps their times and
/// their positions in its sequences in 32 bits. Past it an
/// [`ExactAnalysis`] drops what it holds ([`ExactAnalysis::over`]), and a
/// sampled analysis ([`Options::sample`]) is the one to run.
pub const MAX_EXACT_ACCESSES: u64 = u32::MAX as u64 - 1;

/// The exact analysis fed a batch at a time, as a trace is read: each
/// table's accesses as dense ids with the first access of each batch it
/// occurs in (4 bytes an access), and the trace-wide sequence once a
/// second table occurs (4 more); [`ExactAnalysis::finish`] reports. The
/// trace itself is never held.
pub struct ExactAnalysis {
    /// A one-table trace's trace-wide report is its table's.
    share_single: bool,
    /// Each table's rows where a catalog came first (else unknown), and
    /// the rows by vector at most when a table's rows come out of order.
    rows: Vec<u64>,
    budget: u64,
    /// The accesses expected (0 when unknown): a one-table trace's
    /// sequence takes them all, so it is allocated once at that size
    /// rather than grown by copies (a tenth of `analyze`'s time).
    expect: u64,
    maps: Vec<DenseIds>,
    seq: Vec<Vec<u32>>,
    starts: Vec<Vec<u32>>,
    /// The last batch each table occurs in.
    last_batch: Vec<usize>,
    /// The trace-wide id of each table's dense ids.
    overall_of_local: Vec<Vec<u32>>,
    n_overall: u32,
    /// The first table that occurred, while it is the only one.
    only: Option<usize>,
    /// The trace-wide sequence and batch starts, once a second table
    /// occurs (until then they are the only table's).
    overall: Option<(Vec<u32>, Vec<u32>)>,
    overall_last_batch: usize,
    batches: usize,
    accesses: u64,
    limit: u64,
}

impl ExactAnalysis {
    /// An analysis of a trace whose catalog (`tables`) and number of
    /// accesses may be known ahead (they size its id maps; 0 accesses
    /// when unknown), holding at most `limit` accesses (and never more
    /// than [`MAX_EXACT_ACCESSES`]): past it, it drops what it holds and
    /// only counts ([`ExactAnalysis::over`]).
    pub fn new(tables: Option<&[TraceTable]>, accesses: u64, limit: u64) -> ExactAnalysis {
        let limit = limit.min(MAX_EXACT_ACCESSES);
        ExactAnalysis {
            share_single: true,
            rows: tables.map_or(Vec::new(), |t| t.iter().map(|t| t.rows).collect()),
            budget: 2 * accesses + 1024,
            expect: accesses,
            maps: Vec::new(),
            seq: Vec::new(),
            starts: Vec::new(),
            last_batch: Vec::new(),
            overall_of_local: Vec::new(),
            n_overall: 0,
            only: None,
            overall: None,
            overall_last_batch: usize::MAX,
            batches: 0,
            accesses: 0,
            limit,
        }
    }

    /// Take the next batch.
    pub fn batch(&mut self, batch: &[Access]) {
        const OVERALL_AHEAD: usize = 6;
        let b = self.batches;
        self.batches += 1;
        self.accesses += batch.len() as u64;
        if self.accesses > self.limit {
            if !self.seq.is_empty() {
                *self = ExactAnalysis {
                    batches: self.batches,
                    accesses: self.accesses,
                    ..ExactAnalysis::new(None, 0, self.limit)
                };
            }
            return;
        }
        if self.one_table_run(batch, b) {
            return;
        }
        self.sync_only();
        for (i, a) in batch.iter().enumerate() {
            // Two random reads an access, a table's dense id and then its
            // trace-wide id, were most of the loop's time with many
            // tables (a generated 4-table trace): ask for the first of an
            // access a few ahead, and for the second of a nearer one,
            // whose dense id has arrived by now.
            if let Some(n) = batch.get(i + ID_AHEAD) {
                if let Some(m) = self.maps.get(n.table as usize) {
                    m.prefetch(n.row);
                }
            }
            if let Some(n) = batch.get(i + OVERALL_AHEAD) {
                let t = n.table as usize;
                if let (Some(m), Some(ids)) = (self.maps.get(t), self.overall_of_local.get(t)) {
                    if let Some(local) = m.peek(n.row) {
                        embtier::hint::prefetch(ids.as_ptr().wrapping_add(local as usize));
                    }
                }
            }
            let t = a.table as usize;
            if t >= self.maps.len() {
                self.add_tables(t + 1);
            }
            if self.only != Some(t) && self.overall.is_none() {
                match self.only {
                    None => self.only = Some(t),
                    Some(k) => {
                        // The trace-wide sequence takes every access:
                        // sized for them at once where they are known (a
                        // vector grown by doubling copied itself into
                        // fresh pages, each zeroed by the kernel first).
                        let mut seq = Vec::new();
                        let _ = seq.try_reserve_exact(self.expect.min(self.limit) as usize);
                        seq.extend_from_slice(&self.seq[k]);
                        self.overall = Some((seq, self.starts[k].clone()));
                        self.overall_last_batch = self.last_batch[k];
                    }
                }
            }
            let local = self.maps[t].id(a.row);
            if local as usize == self.overall_of_local[t].len() {
                self.overall_of_local[t].push(self.n_overall);
                self.n_overall += 1;
            }
            self.note_batch(t, b);
            self.seq[t].push(local);
            if let Some((seq, starts)) = &mut self.overall {
                if self.overall_last_batch != b {
                    self.overall_last_batch = b;
                    starts.push(seq.len() as u32);
                }
                seq.push(self.overall_of_local[t][local as usize]);
            }
        }
    }

    /// A batch of one table's accesses while it is the only table so far
    /// (every access of a one-table trace): its dense ids go straight to
    /// its sequence in one loop. Its trace-wide ids are its own ids while
    /// it is alone, so they are left to [`ExactAnalysis::sync_only`].
    /// Returns whether it took the batch.
    fn one_table_run(&mut self, batch: &[Access], b: usize) -> bool {
        let Some(first) = batch.first() else {
            return true;
        };
        let t = first.table as usize;
        if self.overall.is_some()
            || self.only.is_some_and(|k| k != t)
            || !batch.iter().all(|a| a.table == first.table)
        {
            return false;
        }
        if t >= self.maps.len() {
            self.add_tables(t + 1);
        }
        self.only = Some(t);
        self.note_batch(t, b);
        let (map, seq) = (&mut self.maps[t], &mut self.seq[t]);
        if seq.capacity() == 0 && self.rows.len() <= 1 {
            // A trace of one table (by its catalog, or a reader's that
            // knows none): this table's accesses are all of them. Only
            // address space until written; where even that is refused,
            // the sequence grows as it would have.
            let _ = seq.try_reserve_exact(self.expect.min(self.limit) as usize);
        }
        // The dense ids are random memory where the rows are (a vector
        // or a table over the rows): ask for a row's a few ahead.
        seq.reserve(batch.len());
        for (i, a) in batch.iter().enumerate() {
            if let Some(n) = batch.get(i + ID_AHEAD) {
                map.prefetch(n.row);
            }
            seq.push(map.id(a.row));
        }
        true
    }

    /// Table `t`'s next access is in batch `b`: where `b` is a batch it
    /// had no access in yet, its first access there starts a batch.
    #[inline(always)]
    fn note_batch(&mut self, t: usize, b: usize) {
        if self.last_batch[t] != b {
            self.last_batch[t] = b;
            self.starts[t].push(self.seq[t].len() as u32);
        }
    }

    /// The only table's trace-wide ids, which [`ExactAnalysis::one_table_run`]
    /// leaves behind: while one table has occurred, each new dense id is
    /// the next trace-wide id, so they are its dense ids.
    fn sync_only(&mut self) {
        if let (Some(k), None) = (self.only, &self.overall) {
            let n = self.maps[k].len();
            let ids = &mut self.overall_of_local[k];
            ids.extend(ids.len() as u32..n as u32);
            self.n_overall = n as u32;
        }
    }

    fn add_tables(&mut self, n: usize) {
        for t in self.maps.len()..n {
            let rows = self.rows.get(t).copied().unwrap_or(u64::MAX);
            self.maps.push(DenseIds::in_order(rows, self.budget));
        }
        self.seq.resize_with(n, Vec::new);
        self.starts.resize_with(n, Vec::new);
        self.last_batch.resize(n, usize::MAX);
        self.overall_of_local.resize_with(n, Vec::new);
    }

    /// Accesses taken.
    pub fn accesses(&self) -> u64 {
        self.accesses
    }

    /// Batches taken.
    pub fn batches(&self) -> u64 {
        self.batches as u64
    }

    /// Whether the accesses went past the limit (then nothing is held
    /// and [`ExactAnalysis::finish`] must not be asked).
    pub fn over(&self) -> bool {
        self.accesses > self.limit
    }

    /// Accesses of each of the first `n` tables.
    pub fn per_table(&self, n: usize) -> Vec<u64> {
        (0..n)
            .map(|t| self.seq.get(t).map_or(0, |s| s.len() as u64))
            .collect()
    }

    /// The report of the trace whose catalog is `tables` (every access's
    /// table among them).
    ///
    /// On rayon's threads the tables' passes run beside the trace-wide
    /// pass, so the memory of the passes at their peak is the trace-wide
    /// pass's and the tables' in flight together (a generated 4-table
    /// trace: 274 MB of peak RSS on two threads, 266 MB on one;
    /// `docs/benchmarks.md`).
    pub fn finish(mut self, tables: &[TraceTable], opts: &Options) -> Report {
        assert!(!self.over(), "an exact analysis past its limit");
        self.sync_only();
        let nt = tables.len();
        self.add_tables(nt.max(self.maps.len()));
        // A one-table trace's trace-wide pass is its table's.
        let single = self.share_single && nt == 1;
        let (overall_seq, overall_starts) = match (self.overall.take(), self.only) {
            (Some(o), _) => o,
            (None, _) if single => (Vec::new(), Vec::new()),
            (None, Some(k)) => (self.seq[k].clone(), self.starts[k].clone()),
            (None, None) => (Vec::new(), Vec::new()),
        };
        let batches = self.batches.max(1);
        let default_rb = opts.row_bytes.unwrap_or(256);
        let row_bytes = |t: &TraceTable| crate::trace::row_bytes_of(t, default_rb);
        let table_report = |i: usize| {
            let t = &tables[i];
            report(
                &Stream {
                    name: &t.name,
                    rows: t.rows,
                    row_bytes: row_bytes(t),
                    seq: &self.seq[i],
                    batch_starts: &self.starts[i],
                    batches,
                    n_objects: self.maps[i].len(),
                    object_bytes: Vec::new(),
                },
                opts,
            )
        };
        let overall_report = || {
            let rows: u64 = tables
                .iter()
                .map(|t| t.rows)
                .fold(0u64, |a, b| a.saturating_add(b));
            let mut object_bytes = vec![0u64; self.n_overall as usize];
            for (t, ids) in self.overall_of_local.iter().enumerate().take(nt) {
                for &o in ids {
                    object_bytes[o as usize] = row_bytes(&tables[t]);
                }
            }
            report(
                &Stream {
                    name: "overall",
                    rows,
                    row_bytes: 0,
                    seq: &overall_seq,
                    batch_starts: &overall_starts,
                    batches,
                    n_objects: self.n_overall as usize,
                    object_bytes,
                },
                opts,
            )
        };
        // The tables' passes and the trace-wide one are independent: run
        // them side by side (the trace-wide pass, as long as all the
        // tables' together, beside the tables, largest first). The
        // reports are the same as one after another, in the tables'
        // order.
        let (reports, mut overall) = if single {
            let r = table_report(0);
            let o = single_overall(&r, opts);
            (vec![r], o)
        } else {
            use rayon::prelude::*;
            let mut order: Vec<usize> = (0..nt).collect();
            order.sort_by_key(|&i| std::cmp::Reverse(self.seq[i].len()));
            let (mut done, overall) = rayon::join(
                || {
                    order
                        .par_iter()
                        .map(|&i| (i, table_report(i)))
                        .collect::<Vec<_>>()
                },
                overall_report,
            );
            done.sort_by_key(|(i, _)| *i);
            (done.into_iter().map(|(_, r)| r).collect(), overall)
        };
        // Overall bandwidth is the sum of the tables' (rows differ in size).
        overall.bandwidth.bytes_per_s = reports.iter().map(|t| t.bandwidth.bytes_per_s).sum();
        overall.bandwidth.unique_bytes_per_s =
            reports.iter().map(|t| t.bandwidth.unique_bytes_per_s).sum();
        overall.bandwidth.mean_row_bytes();
        Report {
            overall,
            tables: reports,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimCache;
    use embtier::PolicyKind;

    fn seq(n: usize, objects: u64, seed: u64) -> Vec<u32> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = embtier::init::mix64(x);
                let r = (x >> 11) as f64 / (1u64 << 53) as f64;
                (r * r * objects as f64) as u32
            })
            .collect()
    }

    /// The exact MRC equals an LRU simulation at every size.
    #[test]
    fn mrc_equals_lru_simulation_at_every_size() {
        let s = seq(8_000, 300, 5);
        let n = 300;
        let (dist, _, times) = stack_distances(&s, n);
        assert_eq!(times, reuse_times(&s, n));
        let sizes: Vec<u64> = (1..=n as u64).collect();
        let mrc = mrc_from_distances(&dist, s.len() as u64, &sizes);
        for p in mrc {
            let mut c = SimCache::new(PolicyKind::Lru, p.cache_rows as usize);
            let misses = s.iter().filter(|&&o| !c.access(o as u64)).count();
            let want = misses as f64 / s.len() as f64;
            assert!(
                (p.miss_ratio - want).abs() < 1e-12,
                "size {}: {} vs {want}",
                p.cache_rows,
                p.miss_ratio
            );
        }
    }

    /// A one-table trace's trace-wide report, taken from its table, is
    /// the one the trace-wide pass computes, in rows and in bytes.
    #[test]
    fn single_table_overall_is_the_computed_one() {
        use crate::trace::gen::{GenSpec, GenTable};
        let t = GenSpec {
            seed: 2,
            batches: 30,
            batch_size: 64,
            tables: vec![GenTable {
                name: "only".into(),
                rows: 3000,
                dim: 8,
                pooling: 2.0,
                alpha: 0.9,
                drift: 0.01,
            }],
        }
        .generate();
        for bytes in [false, true] {
            for window in [None, Some(100)] {
                let opts = Options {
                    bytes,
                    window,
                    ..Options::default()
                };
                let shared = analyze_with(&t, &opts, true);
                let computed = analyze_with(&t, &opts, false);
                assert_eq!(shared, computed, "bytes {bytes} window {window:?}");
            }
        }
    }

    /// Dense ids are given in order of first appearance, the same by
    /// vector and by map, and a row past the declared ones keeps them.
    #[test]
    fn dense_ids_by_vector_and_by_map_agree() {
        let rows = [5u64, 2, 5, 0, 9, 2, 7, 40, 5, 41, 0];
        let mut v = DenseIds::new(10, 100);
        let mut m = DenseIds::new(10, 5);
        assert!(matches!(v, DenseIds::Direct(..)) && matches!(m, DenseIds::Map(_)));
        let a: Vec<u32> = rows.iter().map(|&r| v.id(r)).collect();
        let b: Vec<u32> = rows.iter().map(|&r| m.id(r)).collect();
        assert_eq!(a, vec![0, 1, 0, 2, 3, 1, 4, 5, 0, 6, 2]);
        assert_eq!(a, b);
        assert_eq!((v.len(), m.len()), (7, 7));
        assert!(matches!(v, DenseIds::Map(_)));
    }

    /// A peek (the prefetch's look ahead) is the id a row was given, and
    /// nothing for a row not seen, by every kind of map, without
    /// numbering anything.
    #[test]
    fn a_peek_is_the_id_given_and_numbers_nothing() {
        let rows = [0u64, 1, 0, 2, 1, 7, 3, 7, 0];
        for (mut d, kind) in [
            (DenseIds::in_order(10, 100), "in order"),
            (DenseIds::new(10, 100), "vector"),
            (DenseIds::new(10, 5), "table"),
        ] {
            for &r in &rows {
                let before = d.len();
                let peeked = d.peek(r);
                assert_eq!(d.len(), before, "{kind}: a peek numbered row {r}");
                let id = d.id(r);
                match peeked {
                    Some(p) => assert_eq!(p, id, "{kind}: row {r}"),
                    None => assert_eq!(id as usize, before, "{kind}: row {r} was seen"),
                }
                assert_eq!(d.peek(r), Some(id), "{kind}: row {r} after its id");
            }
            assert_eq!(d.peek(8), None, "{kind}");
        }
    }

    /// Rows in order of first appearance are their own ids; the first
    /// row out of that order moves to a vector or a table with the same
    /// ids, which go on as the vector's and the table's do.
    #[test]
    fn dense_ids_in_order_until_they_are_not() {
        let in_order = [0u64, 1, 0, 2, 1, 3, 3, 0];
        let then = [7u64, 2, 9, 7, 4, 30, 0];
        for budget in [100u64, 5] {
            let mut o = DenseIds::in_order(10, budget);
            let mut plain = DenseIds::new(10, budget);
            for &r in &in_order {
                assert_eq!(o.id(r), plain.id(r));
                assert_eq!(o.id(r), r as u32);
            }
            assert!(matches!(o, DenseIds::InOrder(4, ..)));
            assert_eq!(o.len(), 4);
            for &r in &then {
                assert_eq!(o.id(r), plain.id(r), "row {r}, budget {budget}");
            }
            assert!(!matches!(o, DenseIds::InOrder(..)));
            assert_eq!(o.len(), plain.len());
        }
    }

    /// Working sets per batch count the batches a table (or the trace)
    /// occurs in, each once, where a batch is empty or a table sits a
    /// batch out.
    #[test]
    fn working_sets_per_batch_skip_empty_batches() {
        use crate::trace::{Access, AccessKind, TraceTable};
        let table = |name: &str| TraceTable {
            name: name.into(),
            rows: 10,
            dim: 0,
            row_bytes: 8,
        };
        let acc = |table: u32, row: u64| Access {
            table,
            row,
            kind: AccessKind::Lookup,
        };
        // Batches: [a0 a1 a0], [], [b5 b5 a1 b6], [b5].
        let trace = Trace {
            tables: vec![table("a"), table("b")],
            batch_ends: vec![3, 3, 7, 8],
            accesses: vec![
                acc(0, 0),
                acc(0, 1),
                acc(0, 0),
                acc(1, 5),
                acc(1, 5),
                acc(0, 1),
                acc(1, 6),
                acc(1, 5),
            ],
        };
        let r = analyze(&trace, &Options::default());
        assert_eq!(r.tables[0].working_set_per_batch, Series::of(&[2, 1]));
        assert_eq!(r.tables[1].working_set_per_batch, Series::of(&[2, 1]));
        assert_eq!(r.overall.working_set_per_batch, Series::of(&[2, 3, 1]));
    }

    /// An exact analysis fed batch by batch without the catalog ahead
    /// reports what the analysis of the loaded trace does, whichever
    /// table occurs first and however late a second one comes; past its
    /// limit it holds nothing and says so.
    #[test]
    fn an_exact_analysis_fed_by_batches_is_the_loaded_ones() {
        use crate::trace::gen::{GenSpec, GenTable};
        let table = |name: &str, rows, alpha| GenTable {
            name: String::from(name),
            rows,
            dim: 8,
            pooling: 2.0,
            alpha,
            drift: 0.01,
        };
        let mut t = GenSpec {
            seed: 4,
            batches: 40,
            batch_size: 32,
            tables: vec![
                table("a", 900, 0.9),
                table("b", 300, 1.1),
                table("c", 50, 0.5),
            ],
        }
        .generate();
        // Table 2 alone for the first ten batches and a half, then all
        // three (the second table comes inside a batch).
        let cut = (t.batch_ends[9] + t.batch_ends[10]) / 2;
        assert_ne!(t.accesses[cut].table, 2);
        t.accesses[..cut].iter_mut().for_each(|a| a.table = 2);
        let opts = Options::default();
        let want = analyze(&t, &opts);
        let mut x = ExactAnalysis::new(None, 0, u64::MAX);
        t.batches().for_each(|b| x.batch(b));
        assert_eq!((x.accesses(), x.batches()), (t.accesses.len() as u64, 40));
        assert_eq!(
            x.per_table(3)[2],
            t.accesses.iter().filter(|a| a.table == 2).count() as u64
        );
        let got = x.finish(&t.tables, &opts);
        assert_eq!(got, want);
        // The trace-wide report is that of a one-table trace keyed by
        // (table, row), made without the trace-wide sequence.
        let mut one = t.clone();
        one.tables = vec![TraceTable {
            name: "keys".into(),
            rows: 1 << 48,
            dim: 8,
            row_bytes: 0,
        }];
        one.accesses.iter_mut().for_each(|a| {
            a.row = a.key();
            a.table = 0;
        });
        let plain = &analyze(&one, &opts).tables[0];
        let o = &got.overall;
        assert_eq!(o.working_set_per_batch, plain.working_set_per_batch);
        assert_eq!(o.working_set_per_window, plain.working_set_per_window);
        assert_eq!(
            (&o.reuse_distance, &o.reuse_time),
            (&plain.reuse_distance, &plain.reuse_time)
        );
        assert_eq!(
            (o.unique_rows, &o.count_hist_rows),
            (plain.unique_rows, &plain.count_hist_rows)
        );
        assert_eq!(o.mrc, plain.mrc);
        let mut x = ExactAnalysis::new(Some(&t.tables), t.accesses.len() as u64, 100);
        t.batches().for_each(|b| x.batch(b));
        assert!(x.over());
        assert_eq!(x.accesses(), t.accesses.len() as u64);
        assert!(x.seq.is_empty());
    }

    /// One table pass gives the counts, working sets and LRU hits that
    /// separate plain passes give, over batches of uneven sizes (some
    /// empty) and windows that do not divide the accesses.
    #[test]
    fn a_table_pass_is_the_separate_passes() {
        let n = 300;
        let s = seq(9_001, n as u64, 13);
        let mut batch_of = Vec::with_capacity(s.len());
        let mut b = 0u32;
        for i in 0..s.len() {
            if i % 97 == 0 || i % 131 == 0 {
                b += 1 + (i % 3 == 0) as u32;
            }
            batch_of.push(b);
        }
        let starts: Vec<u32> = (0..s.len())
            .filter(|&i| i == 0 || batch_of[i] != batch_of[i - 1])
            .map(|i| i as u32)
            .collect();
        let st = Stream {
            name: "t",
            rows: n as u64,
            row_bytes: 8,
            seq: &s,
            batch_starts: &starts,
            batches: b as usize + 1,
            n_objects: n,
            object_bytes: Vec::new(),
        };
        let sizes = [1u64, 7, 50, 299, 300];
        for window in [1u64, 64, 1000, 20_000] {
            let p = table_pass(&st, &sizes, window);
            let (ws_batch, ws_window) = working_sets(&st, &batch_of, window);
            assert_eq!(
                (&p.ws_batch, &p.ws_window),
                (&ws_batch, &ws_window),
                "window {window}"
            );
            let mut counts = vec![0u64; n];
            s.iter().for_each(|&o| counts[o as usize] += 1);
            assert_eq!(p.counts, counts);
            let (hits, dh, th) = lru_hits(&s, n, &sizes);
            assert_eq!((p.hits, p.dist, p.time), (hits, dh, th));
        }
    }

    /// Working sets counted plainly: the reference for `table_pass`.
    fn working_sets(s: &Stream<'_>, batch_of: &[u32], window: u64) -> (Vec<u64>, Vec<u64>) {
        let mut per_batch = vec![0u64; s.batches];
        let mut seen_b = vec![u32::MAX; s.n_objects];
        let mut seen_w = vec![u64::MAX; s.n_objects];
        let mut per_window = Vec::new();
        for (i, (&o, &b)) in s.seq.iter().zip(batch_of).enumerate() {
            if seen_b[o as usize] != b {
                seen_b[o as usize] = b;
                per_batch[b as usize] += 1;
            }
            let w = i as u64 / window;
            if w as usize == per_window.len() {
                per_window.push(0);
            }
            if seen_w[o as usize] != w {
                seen_w[o as usize] = w;
                per_window[w as usize] += 1;
            }
        }
        // Batches in which the table has no access do not count.
        let mut touched = vec![false; s.batches];
        for &b in batch_of {
            touched[b as usize] = true;
        }
        let per_batch = per_batch
            .into_iter()
            .zip(touched)
            .filter(|(_, t)| *t)
            .map(|(c, _)| c)
            .collect();
        (per_batch, per_window)
    }

    /// `lru_hits` counts, at sizes given in any order and repeated, the
    /// hits of an LRU simulation, with the histograms of the full pass;
    /// the objects are few against the accesses, so the marker tree is
    /// renumbered many times.
    #[test]
    fn lru_hits_are_an_lru_simulations_at_any_sizes() {
        let n = 257;
        let s = seq(20_000, n as u64, 11);
        let sizes = [300u64, 1, 64, 0, 64, 2, 128, 256, 257, 10_000, 3, 65];
        let (hits, dh, th) = lru_hits(&s, n, &sizes);
        let (_, dh_full, th_full) = stack_distances(&s, n);
        assert_eq!((dh, th), (dh_full, th_full));
        for (&c, &h) in sizes.iter().zip(&hits) {
            // A cache of no rows hits nothing (the simulator refuses it).
            let want = if c == 0 {
                0
            } else {
                let mut cache = SimCache::new(PolicyKind::Lru, c as usize);
                s.iter().filter(|&&o| cache.access(o as u64)).count() as u64
            };
            assert_eq!(h, want, "size {c}");
        }
    }

    /// Byte MRC with equal sizes equals the row MRC at C / size.
    #[test]
    fn byte_mrc_matches_rows_for_equal_sizes() {
        let s = seq(5000, 200, 9);
        let (dist, _, _) = stack_distances(&s, 200);
        let rows = mrc_from_distances(&dist, 5000, &(1..=200).collect::<Vec<_>>());
        let bytes = byte_mrc(
            &s,
            &vec![64; 200],
            &(1..=200).map(|c| c * 64).collect::<Vec<_>>(),
        );
        for (a, b) in rows.iter().zip(&bytes) {
            assert!((a.miss_ratio - b.miss_ratio).abs() < 1e-12);
        }
        // A row bigger than the cache never hits.
        let big = byte_mrc(&[0, 0, 0], &[100], &[99, 100]);
        assert_eq!(big[0].miss_ratio, 1.0);
        assert!((big[1].miss_ratio - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn bins_match_dlrm() {
        assert_eq!(count_bin(1), 0);
        assert_eq!(count_bin(2), 1);
        assert_eq!(count_bin(3), 2);
        assert_eq!(count_bin(4), 2);
        assert_eq!(count_bin(5), 3);
        assert_eq!(count_bin(32768), 15);
        assert_eq!(count_bin(32769), 16);
        assert_eq!(count_bin(u64::MAX), 16);
    }

    #[test]
    fn zipf_fit_recovers_alpha() {
        for alpha in [0.8f64, 1.0, 1.2] {
            let counts: Vec<u64> = (1..=20_000u64)
                .map(|r| (1e6 * (r as f64).powf(-alpha)).round() as u64)
                .collect();
            let got = fit_zipf(&counts);
            assert!((got - alpha).abs() < 0.02, "{alpha}: {got}");
        }
    }

    #[test]
    fn gini_extremes() {
        let (_, _, _, _, g) = skew(&[5, 5, 5, 5], 20);
        assert!(g.abs() < 1e-12);
        let (_, _, _, _, g) = skew(&[100, 1, 1, 1], 103);
        assert!(g > 0.7, "{g}");
    }
}
