//! Pooled embedding bags in FBGEMM's table-batched layout: a batch of `B`
//! bags is `indices` with `offsets` of `B + 1` entries, bag `b` being
//! `indices[offsets[b]..offsets[b + 1]]`. The forward pools each bag's rows
//! (sum, weighted sum or mean); the backward gives every index its bag's
//! gradient and runs the table's fused optimizer, without materialising
//! the expanded per-index gradients.
//!
//! Both are defined against the plain calls, and the tests hold them to it
//! bit for bit: [`crate::Store::lookup_pooled`] equals a [`crate::Store::lookup`]
//! of every index followed by an in-order f32 accumulation per bag, and
//! [`crate::Store::step_pooled`] equals a [`crate::Store::step`] of every
//! index with its expanded gradient.

use crate::error::{Error, Result};
use crate::store::Store;
use crate::table::{distinct_tables, each, Count, Part, Table};

/// How a bag's rows are pooled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PoolingMode {
    /// The sum of the rows (each times its per-sample weight, if given).
    #[default]
    Sum,
    /// The mean of the rows; an empty bag pools to zeros. Per-sample
    /// weights are not allowed (as in PyTorch's `EmbeddingBag`).
    Mean,
}

impl PoolingMode {
    /// `"sum"` or `"mean"`.
    pub fn name(self) -> &'static str {
        match self {
            PoolingMode::Sum => "sum",
            PoolingMode::Mean => "mean",
        }
    }
}

impl std::str::FromStr for PoolingMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<PoolingMode> {
        match s {
            "sum" => Ok(PoolingMode::Sum),
            "mean" => Ok(PoolingMode::Mean),
            other => Err(Error::config(format!(
                "pooling mode {other:?}: expected \"sum\" or \"mean\""
            ))),
        }
    }
}

/// One table's bags for [`Store::lookup_pooled_many`]: the pooled rows go
/// to `out` (`B x dim`).
#[derive(Debug)]
pub struct PooledBatch<'a> {
    /// Table name.
    pub table: &'a str,
    /// Row ids of all bags, concatenated.
    pub indices: &'a [u64],
    /// `B + 1` offsets into `indices`.
    pub offsets: &'a [u64],
    /// Pooling.
    pub mode: PoolingMode,
    /// One weight per index (sum mode only).
    pub per_sample_weights: Option<&'a [f32]>,
    /// `B x dim` pooled rows.
    pub out: &'a mut [f32],
}

/// One table's bags and their gradients for [`Store::step_pooled_many`].
#[derive(Debug, Clone, Copy)]
pub struct PooledGrad<'a> {
    /// Table name.
    pub table: &'a str,
    /// Row ids of all bags, concatenated.
    pub indices: &'a [u64],
    /// `B + 1` offsets into `indices`.
    pub offsets: &'a [u64],
    /// Pooling of the forward this is the backward of.
    pub mode: PoolingMode,
    /// One weight per index (sum mode only).
    pub per_sample_weights: Option<&'a [f32]>,
    /// `B x dim` gradients of the pooled rows.
    pub grad: &'a [f32],
}

/// Validate a batch of bags against table `t`: offsets start at 0, never
/// decrease, end at `indices.len()`; weights (sum mode only) one per index;
/// ids in range. Returns `B`.
fn check_bags(
    t: &Table,
    indices: &[u64],
    offsets: &[u64],
    mode: PoolingMode,
    weights: Option<&[f32]>,
) -> Result<usize> {
    let bad = |at: usize, reason: String| Error::BadOffsets {
        table: t.name.clone(),
        at,
        reason,
    };
    if offsets.is_empty() {
        return Err(bad(0, "no offsets: B bags need B + 1".into()));
    }
    if offsets[0] != 0 {
        return Err(bad(0, format!("the first offset is {}, not 0", offsets[0])));
    }
    if let Some(i) = offsets.windows(2).position(|w| w[1] < w[0]) {
        return Err(bad(
            i + 1,
            format!(
                "offset {} is below the one before it, {}",
                offsets[i + 1],
                offsets[i]
            ),
        ));
    }
    let last = *offsets.last().expect("not empty");
    if last != indices.len() as u64 {
        return Err(bad(
            offsets.len() - 1,
            format!(
                "the last offset is {last}, but there are {} indices",
                indices.len()
            ),
        ));
    }
    if let Some(w) = weights {
        if mode != PoolingMode::Sum {
            return Err(Error::WeightsNeedSum {
                table: t.name.clone(),
                mode: mode.name(),
            });
        }
        if w.len() != indices.len() {
            return Err(Error::LengthMismatch {
                table: t.name.clone(),
                what: "per_sample_weights",
                got: w.len(),
                expected: indices.len(),
                ids: indices.len(),
                dim: 1,
            });
        }
        if !t.cfg.allow_non_finite {
            if let Some(i) = w.iter().position(|x| !x.is_finite()) {
                return Err(Error::NonFinite {
                    table: t.name.clone(),
                    what: "per_sample_weights",
                    id: indices[i],
                    element: 0,
                    value: w[i],
                });
            }
        }
    }
    Store::check_ids(t, indices)?;
    Ok(offsets.len() - 1)
}

/// Pool `rows` (the distinct rows, `dim` each) into `out` by bag: in index
/// order, f32 accumulation from zero; weights multiply each row; mean
/// divides the sum by the bag's length.
#[allow(clippy::too_many_arguments)]
fn pool(
    rows: &[f32],
    slots: &[u32],
    offsets: &[u64],
    mode: PoolingMode,
    weights: Option<&[f32]>,
    dim: usize,
    out: &mut [f32],
) {
    for (b, o) in out.chunks_exact_mut(dim).enumerate() {
        o.fill(0.0);
        let (lo, hi) = (offsets[b] as usize, offsets[b + 1] as usize);
        for k in lo..hi {
            let r = &rows[slots[k] as usize * dim..(slots[k] as usize + 1) * dim];
            match weights {
                Some(w) => {
                    let w = w[k];
                    for (a, x) in o.iter_mut().zip(r) {
                        *a += *x * w;
                    }
                }
                None => {
                    for (a, x) in o.iter_mut().zip(r) {
                        *a += *x;
                    }
                }
            }
        }
        if mode == PoolingMode::Mean && hi > lo {
            let n = (hi - lo) as f32;
            for a in o.iter_mut() {
                *a /= n;
            }
        }
    }
}

/// The summed gradient of every distinct index of a batch of bags, as
/// [`Store::step`] would sum the expanded gradients (index `k` of bag `b`
/// gets `grad[b] * weight[k]`, or `grad[b] / len(b)` in mean mode): ids in
/// order of first occurrence, each sum started from its first gradient
/// and added to in index order. Returns `(items sorted by id, sums)`.
fn expand_and_sum(
    indices: &[u64],
    offsets: &[u64],
    mode: PoolingMode,
    weights: Option<&[f32]>,
    grad: &[f32],
    dim: usize,
) -> (Vec<(u64, usize)>, Vec<f32>) {
    let mut sums = crate::store::GradSums::new(indices, dim);
    // An index's gradient: the bag's own where nothing scales it (no
    // copy), else scaled into `scaled`.
    let mut scaled = vec![0f32; dim];
    for b in 0..offsets.len() - 1 {
        let (lo, hi) = (offsets[b] as usize, offsets[b + 1] as usize);
        let gb = &grad[b * dim..(b + 1) * dim];
        for k in lo..hi {
            let g: &[f32] = match (mode, weights) {
                (PoolingMode::Mean, _) => {
                    let n = (hi - lo) as f32;
                    scaled.iter_mut().zip(gb).for_each(|(a, x)| *a = *x / n);
                    &scaled
                }
                (_, Some(w)) => {
                    scaled.iter_mut().zip(gb).for_each(|(a, x)| *a = *x * w[k]);
                    &scaled
                }
                (_, None) => gb,
            };
            sums.add(k, g);
        }
    }
    sums.finish()
}

impl Store {
    /// Look up bags of rows and pool each: bag `b` is
    /// `indices[offsets[b]..offsets[b + 1]]` (FBGEMM's TBE layout, `offsets`
    /// of `B + 1` entries starting at 0 and ending at `indices.len()`), and
    /// `out[b * dim..(b + 1) * dim]` becomes the sum of its rows (each times
    /// its per-sample weight, when given), or their mean; an empty bag
    /// pools to zeros. Every distinct row is read once, misses in one batch
    /// of reads. Bad offsets are [`Error::BadOffsets`]; nothing is read
    /// unless every argument is valid.
    ///
    /// The result is bit-identical to a [`Store::lookup`] of `indices`
    /// followed by an f32 accumulation of each bag in index order from zero
    /// (`acc += row * weight`), then, for the mean, one division of each
    /// element by the bag's length.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Init, PoolingMode, Store, StoreConfig, TableConfig};
    /// let store = Store::create(dir.path().join("s"), StoreConfig::builder()
    ///     .table(TableConfig::new("t", 100, 2).init(Init::Zeros)).build())?;
    /// store.update("t", &[1, 2], &[1.0, 2.0, 10.0, 20.0])?;
    /// // Two bags: {1, 2, 2} and {} .
    /// let mut out = [9f32; 4];
    /// store.lookup_pooled("t", &[1, 2, 2], &[0, 3, 3], PoolingMode::Sum, None, &mut out)?;
    /// assert_eq!(out, [21.0, 42.0, 0.0, 0.0]);
    /// store.lookup_pooled("t", &[1, 2], &[0, 2], PoolingMode::Mean, None, &mut out[..2])?;
    /// assert_eq!(out[..2], [5.5, 11.0]);
    /// assert!(store.lookup_pooled("t", &[1], &[0, 2], PoolingMode::Sum, None, &mut out[..2]).is_err());
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn lookup_pooled(
        &self,
        table: &str,
        indices: &[u64],
        offsets: &[u64],
        mode: PoolingMode,
        per_sample_weights: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<()> {
        self.lookup_pooled_many(&mut [PooledBatch {
            table,
            indices,
            offsets,
            mode,
            per_sample_weights,
            out,
        }])
    }

    /// [`Store::lookup_pooled`] for several tables at once: every table's
    /// misses are submitted in one queue, as in [`Store::lookup_many`].
    /// Every part is validated before anything is read.
    pub fn lookup_pooled_many(&self, batches: &mut [PooledBatch<'_>]) -> Result<()> {
        let mut tables = Vec::with_capacity(batches.len());
        for b in batches.iter() {
            let t = self.table(b.table)?;
            let n = check_bags(t, b.indices, b.offsets, b.mode, b.per_sample_weights)?;
            Store::check_len(t, "out", n, b.out.len())?;
            tables.push(t);
        }
        // A pinned table pools straight from its rows, on its own thread
        // where there are several tables (`Table::pool_pinned`).
        let (pinned, tables): (Vec<_>, Vec<_>) = batches
            .iter_mut()
            .zip(tables)
            .partition(|(_, t)| t.is_pinned());
        let cached: Vec<_> = tables.iter().map(|(_, t)| *t).collect();
        let mut rest: Vec<&mut PooledBatch<'_>> = tables.into_iter().map(|(b, _)| b).collect();
        if !pinned.is_empty() {
            // Admitted as every read is (never inside a checkpoint's
            // exclusive part), though it reads memory only.
            let _gate = self.ssd.read_gate();
            each(pinned, |(b, t)| {
                let mean = b.mode == PoolingMode::Mean;
                t.pool_pinned(b.indices, b.offsets, mean, b.per_sample_weights, b.out)
            });
        }
        if rest.is_empty() {
            return Ok(());
        }
        // Per table, independent: on threads when there are several.
        let mut plans: Vec<_> = each(rest.iter().zip(cached).collect(), |(b, t)| {
            let (ids, slots, occurrences) = crate::hash::distinct(b.indices);
            let rows = vec![0f32; ids.len() * t.dim];
            (t, ids, slots, occurrences, rows)
        });
        {
            let mut parts: Vec<Part<'_>> = plans
                .iter_mut()
                .map(|(t, ids, _, occurrences, rows)| Part {
                    table: t,
                    ids,
                    out: rows,
                    count: Count::Occurrences(occurrences),
                })
                .collect();
            let _gate = self.ssd.read_gate();
            crate::table::lookup_many(&self.ssd, &mut parts)?;
        }
        each(
            rest.iter_mut().zip(&plans).collect(),
            |(b, (t, _, slots, _, rows))| {
                pool(
                    rows,
                    slots,
                    b.offsets,
                    b.mode,
                    b.per_sample_weights,
                    t.dim,
                    b.out,
                )
            },
        );
        Ok(())
    }

    /// The backward of [`Store::lookup_pooled`] fused with the table's
    /// optimizer: every index receives its bag's gradient `grad[b]` (`B x
    /// dim`), times its per-sample weight, or divided by the bag's length
    /// in mean mode; the gradients of duplicate ids are summed in index
    /// order; then the table's optimizer runs once per distinct row. This is
    /// exactly [`Store::step`] with the expanded gradients, bit for bit
    /// (stochastic rounding included), without materialising them. Nothing
    /// is written unless every argument is valid and finite.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Init, Optimizer, PoolingMode, Store, StoreConfig, TableConfig};
    /// let store = Store::create(dir.path().join("s"), StoreConfig::builder()
    ///     .table(TableConfig::new("t", 100, 1).init(Init::Zeros)
    ///         .optimizer(Optimizer::Sgd { lr: 0.5, weight_decay: 0.0 })).build())?;
    /// // Bags {3, 3, 4} and {4}, gradients 1 and 10.
    /// store.step_pooled("t", &[3, 3, 4, 4], &[0, 3, 4], &[1.0, 10.0], PoolingMode::Sum, None)?;
    /// let mut w = [0f32; 2];
    /// store.lookup("t", &[3, 4], &mut w)?;
    /// assert_eq!(w, [-1.0, -5.5]); // 3: -0.5 * (1 + 1); 4: -0.5 * (1 + 10)
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn step_pooled(
        &self,
        table: &str,
        indices: &[u64],
        offsets: &[u64],
        grad: &[f32],
        mode: PoolingMode,
        per_sample_weights: Option<&[f32]>,
    ) -> Result<()> {
        self.step_pooled_many(&[PooledGrad {
            table,
            indices,
            offsets,
            mode,
            per_sample_weights,
            grad,
        }])
    }

    /// [`Store::step_pooled`] for several tables: every part is validated
    /// first; then each table's optimizer runs, distinct tables side by
    /// side (the calling thread and helpers up to the cores; their misses
    /// read side by side). A table appearing twice is stepped twice, in
    /// order.
    ///
    /// The rows a backward steps are those its forward just looked up, and
    /// so in memory: there is no pass that brings the tables' rows in
    /// first (one that looked every distinct row up again, to find it
    /// resident, cost a cached step 1.6x its time).
    pub fn step_pooled_many(&self, batches: &[PooledGrad<'_>]) -> Result<()> {
        let mut plans = Vec::with_capacity(batches.len());
        for b in batches {
            let t = self.table(b.table)?;
            let n = check_bags(t, b.indices, b.offsets, b.mode, b.per_sample_weights)?;
            Store::check_len(t, "grad", n, b.grad.len())?;
            if !t.cfg.allow_non_finite {
                if let Some(i) = b.grad.iter().position(|x| !x.is_finite()) {
                    // `id` names the bag here: a bag gradient has no row.
                    return Err(Error::NonFinite {
                        table: t.name.clone(),
                        what: "grad",
                        id: (i / t.dim) as u64,
                        element: i % t.dim,
                        value: b.grad[i],
                    });
                }
            }
            plans.push(t);
        }
        self.ssd.durable().check_writable()?;
        let step = |(t, b): (&&std::sync::Arc<Table>, &PooledGrad<'_>)| {
            let (items, sums) = expand_and_sum(
                b.indices,
                b.offsets,
                b.mode,
                b.per_sample_weights,
                b.grad,
                t.dim,
            );
            self.apply_summed(t, &items, &sums, t.cfg.optimizer)
        };
        if distinct_tables(plans.iter().map(|t| &***t)) {
            // Distinct tables: their steps are independent.
            each(plans.iter().zip(batches).collect(), step)
                .into_iter()
                .collect::<Result<()>>()
        } else {
            // A table twice: in order.
            plans.iter().zip(batches).try_for_each(step)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_sums_weights_and_means_in_order() {
        let rows = [1.0f32, 2.0, 10.0, 20.0];
        let mut out = [0f32; 6];
        pool(
            &rows,
            &[0, 1, 1],
            &[0, 2, 2, 3],
            PoolingMode::Sum,
            Some(&[1.0, 0.5, 2.0]),
            2,
            &mut out,
        );
        assert_eq!(out, [6.0, 12.0, 0.0, 0.0, 20.0, 40.0]);
        pool(
            &rows,
            &[0, 1],
            &[0, 2],
            PoolingMode::Mean,
            None,
            2,
            &mut out[..2],
        );
        assert_eq!(out[..2], [5.5, 11.0]);
    }
}
