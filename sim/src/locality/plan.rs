//! Placement planning: tier budgets and per-table miss-ratio curves in, a
//! store configuration and predicted hit ratios out.
//!
//! **DRAM.** Each table offers a curve of (bytes, hits): cached sizes along
//! its MRC (a cached row costs its payload plus 14.5 bytes of bookkeeping,
//! as measured), and, as the last point, pinning the whole table (every
//! access hits; costs rows x row bytes). The budget goes greedily to the
//! best marginal hits per byte along each curve's upper concave hull (the
//! allocation Talus and Cliffhanger use; optimal for concave curves).
//!
//! **PMem** extends each table's cache below DRAM. The store's tiers are
//! exclusive, so DRAM + PMem behave like one LRU of the combined size: PMem
//! hits are `accesses x (mrc(d) - mrc(d + p))`. A table that got no DRAM may
//! instead be pinned to PMem whole. The same greedy allocates the budget;
//! then pinning a cached table to PMem in place of its caches is tried
//! where PMem holds it ([`plan`]).
//!
//! **Time.** The tiers' device profiles ([`TierDevices`], the format every
//! tool reads) turn hits and misses into an estimated time per batch: per
//! tier, [`crate::profile::DeviceProfile::seconds`] of its accesses (row
//! reads for DRAM and PMem hits, a 4 KiB read per SSD miss), summed.

use serde::Serialize;

use super::{Report, TableReport};
use crate::profile::TierDevices;
use crate::replay::StoreCounts;

/// Bytes of DRAM bookkeeping per cached row (measured: tests/bookkeeping.rs).
pub const BOOKKEEPING_BYTES: f64 = 14.5;

/// Tier budgets in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Budgets {
    /// DRAM bytes.
    pub dram: u64,
    /// PMem bytes.
    pub pmem: u64,
}

/// Where a table goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// Cached (DRAM then PMem then SSD).
    Cached,
    /// Pinned whole to DRAM.
    PinnedDram,
    /// Pinned whole to PMem.
    PinnedPmem,
}

/// The plan for one table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TablePlan {
    /// Table name.
    pub name: String,
    /// Rows.
    pub rows: u64,
    /// Bytes per row.
    pub row_bytes: u64,
    /// Placement.
    pub placement: Decision,
    /// DRAM bytes given (payload, plus bookkeeping for caches).
    pub dram_bytes: u64,
    /// DRAM cache rows (0 when pinned).
    pub dram_rows: u64,
    /// PMem bytes given.
    pub pmem_bytes: u64,
    /// PMem cache rows (0 when pinned).
    pub pmem_rows: u64,
    /// Accesses in the trace.
    pub accesses: u64,
    /// Predicted fraction of the table's accesses served by DRAM (a
    /// share of all its accesses, `dram_share` in JSON, as `emb-replay
    /// run` names it; not a tier's local hit ratio).
    #[serde(rename = "dram_share")]
    pub dram_hit_ratio: f64,
    /// Predicted fraction served by PMem (`pmem_share` in JSON).
    #[serde(rename = "pmem_share")]
    pub pmem_hit_ratio: f64,
    /// Predicted fraction read from SSD (`ssd_share` in JSON).
    #[serde(rename = "ssd_share")]
    pub ssd_ratio: f64,
    /// Predicted rows read from SSD over the trace: the requests no cache
    /// serves, counting a row once per batch in a simulated store (it
    /// reads a row once for every request of the batch that missed it).
    pub ssd_rows_read: u64,
}

/// A whole plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Per table.
    pub tables: Vec<TablePlan>,
    /// Predicted fraction of all accesses served by DRAM (`dram_share` in
    /// JSON).
    #[serde(rename = "dram_share")]
    pub dram_hit_ratio: f64,
    /// PMem share (`pmem_share` in JSON).
    #[serde(rename = "pmem_share")]
    pub pmem_hit_ratio: f64,
    /// SSD share (`ssd_share` in JSON).
    #[serde(rename = "ssd_share")]
    pub ssd_ratio: f64,
    /// Rows read from SSD over the trace (as [`TablePlan::ssd_rows_read`]).
    pub ssd_rows_read: u64,
    /// Estimated seconds per batch on the profile.
    pub seconds_per_batch: f64,
    /// Batches in the trace.
    pub batches: u64,
}

/// Linear interpolation of a table's MRC at `rows` (log-spaced points).
fn mrc_at(t: &TableReport, rows: f64) -> f64 {
    if rows <= 0.0 {
        return 1.0;
    }
    let pts = &t.mrc;
    if pts.is_empty() {
        return 1.0;
    }
    if rows >= t.unique_rows as f64 {
        return t.cold_miss_ratio;
    }
    let mut prev = (0.0f64, 1.0f64);
    for p in pts {
        let x = p.cache_rows as f64;
        if rows <= x {
            let f = (rows - prev.0) / (x - prev.0).max(1e-9);
            return prev.1 + f * (p.miss_ratio - prev.1);
        }
        prev = (x, p.miss_ratio);
    }
    prev.1
}

/// One step a table can take: go to `bytes` total and `hits` total.
#[derive(Debug, Clone, Copy)]
struct Point {
    bytes: f64,
    hits: f64,
    rows: u64,
    pin: bool,
}

/// Upper concave hull of points starting at (0, 0), sorted by bytes.
fn hull(mut pts: Vec<Point>) -> Vec<Point> {
    pts.sort_by(|a, b| a.bytes.total_cmp(&b.bytes));
    let mut h: Vec<Point> = vec![Point {
        bytes: 0.0,
        hits: 0.0,
        rows: 0,
        pin: false,
    }];
    for p in pts {
        if p.hits <= h.last().expect("non-empty").hits {
            continue;
        }
        while h.len() >= 2 {
            let (a, b) = (h[h.len() - 2], h[h.len() - 1]);
            // Drop b if it lies under the segment a -> p.
            let cross =
                (b.bytes - a.bytes) * (p.hits - a.hits) - (b.hits - a.hits) * (p.bytes - a.bytes);
            if cross >= 0.0 {
                h.pop();
            } else {
                break;
            }
        }
        h.push(p);
    }
    h
}

/// Greedy allocation of `budget` bytes over the tables' curves `pts`
/// (each sorted by bytes): along their upper concave hulls by marginal
/// hits per byte, then, with what no hull step fits in, the affordable
/// point of any curve that adds the most hits, until none does (a curve
/// whose hull jumps from a small cache to the whole table would otherwise
/// leave most of the budget unspent). Returns the chosen point per table.
fn allocate(pts: &[Vec<Point>], budget: f64) -> Vec<Point> {
    use std::cmp::{Ordering, Reverse};
    use std::collections::BinaryHeap;
    let hulls: Vec<Vec<Point>> = pts.iter().map(|p| hull(p.clone())).collect();
    let mut at = vec![0usize; hulls.len()];
    let mut left = budget;
    // Each table's next hull step, steepest first (ties: the first table).
    // A step that does not fit now never will (what is left only falls,
    // and a hull's steps are taken in order), so it leaves the heap.
    struct Step(f64, Reverse<usize>);
    impl PartialEq for Step {
        fn eq(&self, o: &Step) -> bool {
            self.cmp(o) == Ordering::Equal
        }
    }
    impl Eq for Step {}
    impl PartialOrd for Step {
        fn partial_cmp(&self, o: &Step) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Step {
        fn cmp(&self, o: &Step) -> Ordering {
            self.0.total_cmp(&o.0).then(self.1.cmp(&o.1))
        }
    }
    let step = |i: usize, at: usize| -> Option<(Step, f64)> {
        let (cur, next) = (hulls[i][at], *hulls[i].get(at + 1)?);
        let cost = next.bytes - cur.bytes;
        Some((
            Step((next.hits - cur.hits) / cost.max(1e-9), Reverse(i)),
            cost,
        ))
    };
    let mut heap: BinaryHeap<Step> = (0..hulls.len())
        .filter_map(|i| step(i, 0).map(|s| s.0))
        .collect();
    while let Some(Step(_, Reverse(i))) = heap.pop() {
        let (_, cost) = step(i, at[i]).expect("a step was queued");
        if cost > left + 1e-9 {
            continue;
        }
        left -= cost;
        at[i] += 1;
        if let Some((s, _)) = step(i, at[i]) {
            heap.push(s);
        }
    }
    let mut chosen: Vec<Point> = at.iter().zip(&hulls).map(|(&i, h)| h[i]).collect();
    loop {
        let mut best: Option<(usize, Point, f64)> = None;
        for (i, curve) in pts.iter().enumerate() {
            let cur = chosen[i];
            for &p in curve {
                let cost = p.bytes - cur.bytes;
                let gain = p.hits - cur.hits;
                if cost > 0.0
                    && cost <= left + 1e-9
                    && gain > 0.0
                    && best.is_none_or(|b| gain > b.2)
                {
                    best = Some((i, p, gain));
                }
            }
        }
        match best {
            Some((i, p, _)) => {
                left -= p.bytes - chosen[i].bytes;
                chosen[i] = p;
            }
            None => return chosen,
        }
    }
}

/// Candidate sizes: every MRC point plus a fine log grid up to the unique rows.
fn sizes(t: &TableReport) -> Vec<u64> {
    let mut v: Vec<u64> = t.mrc.iter().map(|p| p.cache_rows).collect();
    let u = t.unique_rows.max(1);
    for i in 0..=64 {
        v.push(((u as f64).powf(i as f64 / 64.0)).round() as u64);
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Tables tried, most accessed first, for pinning to PMem in place of a
/// cache (each try is a whole allocation).
const PMEM_PIN_TRIES: usize = 32;

/// Plan a store for the tables of `r`, with `row_bytes[i]` bytes per row of
/// table i (already resolved from the trace or the command line).
///
/// The budgets go along the curves ([`plan_with`]); then, where PMem can
/// hold a cached table whole, pinning it there (its DRAM going to the
/// other tables) is tried, one table at a time, and kept while it makes
/// the estimated time per batch shorter: a table whose misses a cache
/// leaves to the SSD can cost more than all of its accesses from PMem.
pub fn plan(
    r: &Report,
    row_bytes: &[u64],
    budgets: Budgets,
    devices: &TierDevices,
    batches: u64,
) -> Plan {
    let mut pinned = vec![false; r.tables.len()];
    let mut best = plan_with(r, row_bytes, budgets, devices, batches, &pinned)
        .expect("nothing pinned fits any budget");
    let mut order: Vec<usize> = (0..r.tables.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(r.tables[i].accesses));
    order.truncate(PMEM_PIN_TRIES);
    loop {
        let mut better: Option<(usize, Plan)> = None;
        for &i in &order {
            if pinned[i] || best.tables[i].placement != Decision::Cached {
                continue;
            }
            pinned[i] = true;
            if let Some(p) = plan_with(r, row_bytes, budgets, devices, batches, &pinned) {
                let to_beat = better
                    .as_ref()
                    .map_or(best.seconds_per_batch, |b| b.1.seconds_per_batch);
                if p.seconds_per_batch < to_beat * (1.0 - 1e-9) {
                    better = Some((i, p));
                }
            }
            pinned[i] = false;
        }
        match better {
            Some((i, p)) => {
                pinned[i] = true;
                best = p;
            }
            None => return best,
        }
    }
}

/// [`plan`] with the tables of `pmem_pinned` pinned to PMem and the
/// budgets spread over the others' curves; `None` where PMem cannot
/// hold the pinned tables.
fn plan_with(
    r: &Report,
    row_bytes: &[u64],
    budgets: Budgets,
    devices: &TierDevices,
    batches: u64,
    pmem_pinned: &[bool],
) -> Option<Plan> {
    let n = r.tables.len();
    let pinned_bytes: f64 = (0..n)
        .filter(|&i| pmem_pinned[i])
        .map(|i| r.tables[i].rows as f64 * row_bytes[i] as f64)
        .sum();
    if pinned_bytes > budgets.pmem as f64 {
        return None;
    }
    // DRAM.
    let curves: Vec<Vec<Point>> = r
        .tables
        .iter()
        .zip(row_bytes)
        .zip(pmem_pinned)
        .map(|((t, &rb), &pinned)| {
            if pinned {
                return Vec::new();
            }
            let acc = t.accesses as f64;
            let mut pts: Vec<Point> = sizes(t)
                .into_iter()
                .map(|s| Point {
                    bytes: s as f64 * (rb as f64 + BOOKKEEPING_BYTES),
                    hits: acc * (1.0 - mrc_at(t, s as f64)),
                    rows: s,
                    pin: false,
                })
                .collect();
            pts.push(Point {
                bytes: (t.rows as f64) * rb as f64,
                hits: acc,
                rows: t.rows,
                pin: true,
            });
            pts
        })
        .collect();
    let dram = allocate(&curves, budgets.dram as f64);
    // PMem: for tables not pinned.
    let pmem_curves: Vec<Vec<Point>> = r
        .tables
        .iter()
        .zip(row_bytes)
        .zip(&dram)
        .zip(pmem_pinned)
        .map(|(((t, &rb), d), &pinned)| {
            if d.pin || pinned {
                return Vec::new();
            }
            let acc = t.accesses as f64;
            let base = acc * (1.0 - mrc_at(t, d.rows as f64));
            let mut pts: Vec<Point> = sizes(t)
                .into_iter()
                .filter(|&s| s > 0)
                .map(|s| Point {
                    bytes: s as f64 * rb as f64,
                    hits: acc * (1.0 - mrc_at(t, (d.rows + s) as f64)) - base,
                    rows: s,
                    pin: false,
                })
                .collect();
            if d.rows == 0 {
                pts.push(Point {
                    bytes: t.rows as f64 * rb as f64,
                    hits: acc,
                    rows: t.rows,
                    pin: true,
                });
            }
            pts
        })
        .collect();
    let mut pmem = allocate(&pmem_curves, budgets.pmem as f64 - pinned_bytes);
    for i in (0..n).filter(|&i| pmem_pinned[i]) {
        let t = &r.tables[i];
        pmem[i] = Point {
            bytes: t.rows as f64 * row_bytes[i] as f64,
            hits: t.accesses as f64,
            rows: t.rows,
            pin: true,
        };
    }
    let mut tables = Vec::with_capacity(n);
    for i in 0..n {
        let t = &r.tables[i];
        let d = dram[i];
        let p = pmem[i];
        let acc = t.accesses as f64;
        let (placement, dram_hits, pmem_hits) = if d.pin {
            (Decision::PinnedDram, acc, 0.0)
        } else if p.pin {
            (Decision::PinnedPmem, 0.0, acc)
        } else {
            (Decision::Cached, d.hits, p.hits)
        };
        let ssd = (acc - dram_hits - pmem_hits).max(0.0);
        tables.push(TablePlan {
            name: t.name.clone(),
            rows: t.rows,
            row_bytes: row_bytes[i],
            placement,
            dram_bytes: if p.pin { 0 } else { d.bytes.ceil() as u64 },
            dram_rows: if d.pin || p.pin { 0 } else { d.rows },
            pmem_bytes: if d.pin { 0 } else { p.bytes.ceil() as u64 },
            pmem_rows: if p.pin || d.pin { 0 } else { p.rows },
            accesses: t.accesses,
            dram_hit_ratio: dram_hits / acc.max(1.0),
            pmem_hit_ratio: pmem_hits / acc.max(1.0),
            ssd_ratio: ssd / acc.max(1.0),
            ssd_rows_read: ssd.round() as u64,
        });
    }
    let mut p = Plan {
        tables,
        dram_hit_ratio: 0.0,
        pmem_hit_ratio: 0.0,
        ssd_ratio: 0.0,
        ssd_rows_read: 0,
        seconds_per_batch: 0.0,
        batches,
    };
    p.total(devices);
    Some(p)
}

impl Plan {
    /// The overall shares, SSD reads and the time per batch, from the
    /// tables'.
    fn total(&mut self, devices: &TierDevices) {
        let (mut dh, mut ph, mut total, mut reads) = (0.0, 0.0, 0.0, 0u64);
        // Row bytes read from DRAM and PMem over the trace.
        let (mut dram_bytes, mut pmem_bytes) = (0.0, 0.0);
        for t in &self.tables {
            let acc = t.accesses as f64;
            let (d, p) = (t.dram_hit_ratio * acc, t.pmem_hit_ratio * acc);
            dram_bytes += d * t.row_bytes as f64;
            pmem_bytes += p * t.row_bytes as f64;
            dh += d;
            ph += p;
            total += acc;
            reads += t.ssd_rows_read;
        }
        let ssd = reads as f64;
        self.ssd_rows_read = reads;
        let secs = devices.dram.seconds(dh, dram_bytes, 0.0)
            + devices.pmem.seconds(ph, pmem_bytes, 0.0)
            + devices.ssd.seconds(ssd, ssd * 4096.0, 0.0);
        self.dram_hit_ratio = dh / total.max(1.0);
        self.pmem_hit_ratio = ph / total.max(1.0);
        self.ssd_ratio = 1.0 - (dh + ph) / total.max(1.0);
        self.seconds_per_batch = secs / self.batches.max(1) as f64;
    }

    /// Replace the curves' predictions by what a simulation of the
    /// planned store counted ([`crate::replay::simulate_store`]: its
    /// shards, the tiers' policies, its batch lookups and cold fill), per
    /// table by name; shares are then of each table's row requests.
    pub fn predict_from(&mut self, counts: &StoreCounts, devices: &TierDevices) {
        for t in &mut self.tables {
            let Some(c) = counts.tables.iter().find(|c| c.name == t.name) else {
                continue;
            };
            let n = c.requests.max(1) as f64;
            t.accesses = c.requests;
            t.dram_hit_ratio = c.dram_hits as f64 / n;
            t.pmem_hit_ratio = c.pmem_hits as f64 / n;
            t.ssd_ratio = (1.0 - t.dram_hit_ratio - t.pmem_hit_ratio).max(0.0);
            t.ssd_rows_read = c.ssd_rows_read;
        }
        self.total(devices);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locality::{analyze, Options};
    use crate::trace::gen::{GenSpec, GenTable};

    fn report() -> Report {
        let spec = GenSpec {
            seed: 1,
            batches: 200,
            batch_size: 256,
            tables: vec![
                // Small and very hot: should be pinned.
                GenTable {
                    name: "tiny".into(),
                    rows: 200,
                    dim: 16,
                    pooling: 4.0,
                    alpha: 0.5,
                    drift: 0.0,
                },
                // Large and skewed: should be cached.
                GenTable {
                    name: "skewed".into(),
                    rows: 200_000,
                    dim: 16,
                    pooling: 4.0,
                    alpha: 1.1,
                    drift: 0.0,
                },
                // Large and uniform: caching buys little.
                GenTable {
                    name: "flat".into(),
                    rows: 200_000,
                    dim: 16,
                    pooling: 1.0,
                    alpha: 0.0,
                    drift: 0.0,
                },
            ],
        };
        analyze(&spec.generate(), &Options::default())
    }

    #[test]
    fn budget_goes_where_it_buys_hits() {
        let r = report();
        let rb = vec![64u64; 3];
        let p = plan(
            &r,
            &rb,
            Budgets {
                dram: 1 << 20,
                pmem: 0,
            },
            &TierDevices::default(),
            200,
        );
        assert_eq!(
            p.tables[0].placement,
            Decision::PinnedDram,
            "{:?}",
            p.tables[0]
        );
        assert!(
            p.tables[1].dram_bytes > 10 * p.tables[2].dram_bytes,
            "{:?}",
            p.tables
        );
        let spent: u64 = p.tables.iter().map(|t| t.dram_bytes).sum();
        assert!(spent <= 1 << 20);
        // More DRAM never predicts fewer hits.
        let q = plan(
            &r,
            &rb,
            Budgets {
                dram: 4 << 20,
                pmem: 0,
            },
            &TierDevices::default(),
            200,
        );
        assert!(q.dram_hit_ratio >= p.dram_hit_ratio);
        // PMem adds hits below DRAM.
        let w = plan(
            &r,
            &rb,
            Budgets {
                dram: 1 << 20,
                pmem: 8 << 20,
            },
            &TierDevices::default(),
            200,
        );
        assert!(w.pmem_hit_ratio > 0.0 && (w.dram_hit_ratio - p.dram_hit_ratio).abs() < 1e-9);
        assert!(w.seconds_per_batch < p.seconds_per_batch);
        let total = w.dram_hit_ratio + w.pmem_hit_ratio + w.ssd_ratio;
        assert!((total - 1.0).abs() < 1e-9);
    }

    /// A table that PMem holds whole is pinned there, giving up its DRAM,
    /// where that makes the batch faster than caching it: a pooled table
    /// of 100,000 rows (24 MiB) beside a large skewed one, with 256 KiB of
    /// DRAM and 64 MiB of PMem (a first-day user's plan cached it, leaving
    /// 15% of its accesses to the SSD: 11x the SSD reads of this one). And
    /// no further table pinned so would make the batch faster.
    #[test]
    fn a_table_pmem_holds_is_pinned_there_where_that_is_faster() {
        let spec = GenSpec {
            seed: 3,
            batches: 100,
            batch_size: 256,
            tables: vec![
                GenTable {
                    name: "user".into(),
                    rows: 1_000_000,
                    dim: 64,
                    pooling: 1.0,
                    alpha: 1.1,
                    drift: 0.0,
                },
                GenTable {
                    name: "pages".into(),
                    rows: 100_000,
                    dim: 64,
                    pooling: 20.0,
                    alpha: 0.9,
                    drift: 0.0,
                },
            ],
        };
        let r = analyze(&spec.generate(), &Options::default());
        let rb = vec![256u64; 2];
        let budgets = Budgets {
            dram: 256 << 10,
            pmem: 64 << 20,
        };
        let dev = TierDevices::default();
        let p = plan(&r, &rb, budgets, &dev, 100);
        let cached = plan_with(&r, &rb, budgets, &dev, 100, &[false; 2]).unwrap();
        assert_eq!(cached.tables[1].placement, Decision::Cached);
        assert_eq!(
            p.tables[1].placement,
            Decision::PinnedPmem,
            "{:?}",
            p.tables
        );
        assert_eq!(p.tables[1].pmem_bytes, 100_000 * 256);
        assert!(
            p.tables[0].dram_bytes > cached.tables[0].dram_bytes,
            "{:?}",
            p.tables
        );
        assert!(p.seconds_per_batch < cached.seconds_per_batch);
        assert!(
            p.ssd_rows_read * 2 < cached.ssd_rows_read,
            "{} {}",
            p.ssd_rows_read,
            cached.ssd_rows_read
        );
        let pmem: u64 = p.tables.iter().map(|t| t.pmem_bytes).sum();
        assert!(pmem <= budgets.pmem, "{pmem}");
        let dram: u64 = p.tables.iter().map(|t| t.dram_bytes).sum();
        assert!(dram <= budgets.dram, "{dram}");
        // A local optimum: pinning one more table is slower or does not fit.
        let pinned: Vec<bool> = p
            .tables
            .iter()
            .map(|t| t.placement == Decision::PinnedPmem)
            .collect();
        for i in (0..2).filter(|&i| !pinned[i]) {
            let mut more = pinned.clone();
            more[i] = true;
            if let Some(q) = plan_with(&r, &rb, budgets, &dev, 100, &more) {
                assert!(q.seconds_per_batch >= p.seconds_per_batch, "table {i}");
            }
        }
        // Without PMem for it, nothing is pinned there.
        let small = Budgets {
            dram: 256 << 10,
            pmem: 8 << 20,
        };
        let q = plan(&r, &rb, small, &dev, 100);
        assert!(
            q.tables.iter().all(|t| t.placement != Decision::PinnedPmem),
            "{:?}",
            q.tables
        );
    }

    /// A curve whose hull jumps past the budget still gets the budget: the
    /// affordable point under the hull that adds hits.
    #[test]
    fn budget_no_hull_step_fits_goes_to_the_curve() {
        let pt = |bytes: f64, hits: f64, rows: u64| Point {
            bytes,
            hits,
            rows,
            pin: false,
        };
        let curve = vec![
            pt(100.0, 50.0, 1),
            pt(5000.0, 60.0, 50),
            pt(8000.0, 55.0, 80),
            pt(10_000.0, 1000.0, 100),
        ];
        let got = allocate(std::slice::from_ref(&curve), 6000.0);
        assert_eq!(got[0].rows, 50, "{got:?}");
        let got = allocate(std::slice::from_ref(&curve), 20_000.0);
        assert_eq!(got[0].rows, 100, "{got:?}");
        let got = allocate(&[curve], 50.0);
        assert_eq!(got[0].rows, 0, "{got:?}");
    }

    /// The hull phase of [`allocate`] (a heap of each table's next step)
    /// against a plain scan of every table's next step at each step, on
    /// random curves and budgets, ties included.
    #[test]
    fn allocation_equals_a_plain_scan() {
        fn plain(pts: &[Vec<Point>], budget: f64) -> (Vec<usize>, f64) {
            let hulls: Vec<Vec<Point>> = pts.iter().map(|p| hull(p.clone())).collect();
            let mut at = vec![0usize; hulls.len()];
            let mut left = budget;
            loop {
                let mut best: Option<(usize, f64)> = None;
                for (i, h) in hulls.iter().enumerate() {
                    if let Some(next) = h.get(at[i] + 1) {
                        let cur = h[at[i]];
                        let cost = next.bytes - cur.bytes;
                        if cost <= left + 1e-9 {
                            let gain = (next.hits - cur.hits) / cost.max(1e-9);
                            if best.is_none_or(|b| gain > b.1) {
                                best = Some((i, gain));
                            }
                        }
                    }
                }
                let Some((i, _)) = best else {
                    return (
                        at.iter()
                            .zip(&hulls)
                            .map(|(&a, h)| h[a].rows as usize)
                            .collect(),
                        left,
                    );
                };
                left -= hulls[i][at[i] + 1].bytes - hulls[i][at[i]].bytes;
                at[i] += 1;
            }
        }
        let mut x = 9u64;
        let mut rnd = |n: u64| {
            x = embtier::init::mix64(x);
            x % n
        };
        for case in 0..300 {
            let tables = 1 + rnd(12) as usize;
            let pts: Vec<Vec<Point>> = (0..tables)
                .map(|_| {
                    let (mut bytes, mut hits) = (0.0, 0.0);
                    (1..=1 + rnd(20))
                        .map(|r| {
                            // Small integers: equal slopes are common.
                            bytes += (1 + rnd(4)) as f64;
                            hits += rnd(5) as f64;
                            Point {
                                bytes,
                                hits,
                                rows: r,
                                pin: false,
                            }
                        })
                        .collect()
                })
                .collect();
            let budget = rnd(60) as f64;
            // Curves of hull points only: the second phase adds nothing
            // to them (the next step does not fit, the later ones cost
            // more), so the allocation is the hull phase's.
            let hulls: Vec<Vec<Point>> =
                pts.iter().map(|p| hull(p.clone())[1..].to_vec()).collect();
            let got: Vec<usize> = allocate(&hulls, budget)
                .iter()
                .map(|p| p.rows as usize)
                .collect();
            assert_eq!(
                got,
                plain(&hulls, budget).0,
                "case {case}: {hulls:?} at {budget}"
            );
            // Any curves: never past the budget.
            let spent: f64 = allocate(&pts, budget).iter().map(|p| p.bytes).sum();
            assert!(spent <= budget + 1e-9, "case {case}");
        }
    }

    #[test]
    fn hull_is_concave() {
        let pts = vec![
            Point {
                bytes: 1.0,
                hits: 1.0,
                rows: 1,
                pin: false,
            },
            Point {
                bytes: 2.0,
                hits: 1.1,
                rows: 2,
                pin: false,
            },
            Point {
                bytes: 3.0,
                hits: 3.0,
                rows: 3,
                pin: false,
            },
        ];
        let h = hull(pts);
        assert_eq!(h.iter().map(|p| p.rows).collect::<Vec<_>>(), vec![0, 3]);
    }
}
