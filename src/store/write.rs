//! Writes: overwrites, and gradient steps with the tables' optimizers
//! (duplicate ids summed first, rounding per row).

use super::*;

/// The gradients of a call's ids summed by distinct id, in the order
/// given: ids numbered in order of first occurrence ([`crate::hash::distinct`]),
/// each sum started from its id's first gradient (a copy) and added to in
/// order. `step` and the pooled step (`expand_and_sum`) sum through it.
pub(crate) struct GradSums {
    ids: Vec<u64>,
    slots: Vec<u32>,
    sums: Vec<f32>,
    dim: usize,
}

impl GradSums {
    /// Sums for the ids `indices` (one gradient each, `dim` wide).
    pub(crate) fn new(indices: &[u64], dim: usize) -> GradSums {
        let (ids, slots, _) = crate::hash::distinct(indices);
        let sums = Vec::with_capacity(ids.len() * dim);
        GradSums {
            ids,
            slots,
            sums,
            dim,
        }
    }

    /// Add the gradient `g` of index `k`; the indices come in order.
    #[inline]
    pub(crate) fn add(&mut self, k: usize, g: &[f32]) {
        let s = self.slots[k] as usize * self.dim;
        if s == self.sums.len() {
            // The id's first gradient (ids are numbered in order).
            self.sums.extend_from_slice(g);
        } else {
            for (a, b) in self.sums[s..s + self.dim].iter_mut().zip(g) {
                *a += *b;
            }
        }
    }

    /// The distinct ids, sorted, with their index into the sums; and the
    /// sums.
    pub(crate) fn finish(self) -> (Vec<(u64, usize)>, Vec<f32>) {
        let mut items: Vec<(u64, usize)> = self
            .ids
            .into_iter()
            .enumerate()
            .map(|(s, id)| (id, s))
            .collect();
        items.sort_unstable();
        (items, self.sums)
    }
}

/// Sum the gradients of duplicate ids, in the order given: returns the
/// unique ids (sorted) with their index into the summed gradients.
fn sum_duplicates(ids: &[u64], grads: &[f32], dim: usize) -> (Vec<(u64, usize)>, Vec<f32>) {
    let mut sums = GradSums::new(ids, dim);
    for k in 0..ids.len() {
        sums.add(k, &grads[k * dim..(k + 1) * dim]);
    }
    sums.finish()
}

/// The rounding of row `s` of a call whose stochastic base seed is `base`.
fn rounding_for(base: Option<u64>, s: usize) -> Rounding {
    match base {
        Some(b) => Rounding::Stochastic(crate::hash::mix64(
            b ^ (s as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
        )),
        None => Rounding::Nearest,
    }
}

impl Store {
    /// Overwrite rows: row `ids[i]` becomes `values[i * dim..(i + 1) * dim]`.
    /// For a duplicate id the last occurrence wins. Nothing is written unless
    /// every id and value is valid.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Store, StoreConfig, TableConfig};
    /// let store = Store::create(dir.path().join("s"),
    ///     StoreConfig::builder().table(TableConfig::new("t", 10, 2)).build())?;
    /// store.update("t", &[3, 3], &[1.0, 1.0, 2.0, 2.0])?; // last wins
    /// let mut out = [0f32; 2];
    /// store.lookup("t", &[3], &mut out)?;
    /// assert_eq!(out, [2.0, 2.0]);
    /// assert!(store.update("t", &[4], &[f32::NAN, 0.0]).is_err()); // rejected whole
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn update(&self, table: &str, ids: &[u64], values: &[f32]) -> Result<()> {
        let t = self.table(table)?;
        Self::check_len(t, "values", ids.len(), values.len())?;
        Self::check_ids(t, ids)?;
        Self::check_finite(t, "values", ids, values)?;
        // Last occurrence of each id.
        let mut last: HashMap<u64, usize> = HashMap::with_capacity(ids.len());
        for (k, &id) in ids.iter().enumerate() {
            last.insert(id, k);
        }
        let mut items: Vec<(u64, usize)> = last.into_iter().collect();
        items.sort_unstable();
        let dim = t.dim;
        // Assignment rounds to nearest: a value set is the value read back,
        // as closely as the element type allows.
        let whole = t.row_bytes == t.weight_bytes;
        t.throttle();
        let _gate = self.ssd.write_gate()?;
        let ahead = |k: usize| crate::hint::prefetch_slice(&values[k * dim..(k + 1) * dim]);
        t.modify(&self.ssd, &items, whole, ahead, |row, k| {
            t.encode(&values[k * dim..(k + 1) * dim], row, Rounding::Nearest)
        })
    }

    /// SGD: `row -= lr * grad`. Gradients of duplicate ids are summed first,
    /// in the order given, and applied once (FBGEMM's semantics). Nothing is
    /// written unless every id and gradient is valid and `lr` is finite and
    /// not negative ([`Error::BadLearningRate`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Init, Store, StoreConfig, TableConfig};
    /// let store = Store::create(dir.path().join("s"), StoreConfig::builder()
    ///     .table(TableConfig::new("t", 10, 1).init(Init::Zeros)).build())?;
    /// store.apply_sgd("t", &[5, 5, 6], &[1.0, 2.0, 4.0], 0.5)?;
    /// let mut out = [0f32; 2];
    /// store.lookup("t", &[5, 6], &mut out)?;
    /// assert_eq!(out, [-1.5, -2.0]); // 5: -(0.5 * (1 + 2)); 6: -(0.5 * 4)
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn apply_sgd(&self, table: &str, ids: &[u64], grads: &[f32], lr: f32) -> Result<()> {
        let t = self.table(table)?;
        Self::check_len(t, "grads", ids.len(), grads.len())?;
        Self::check_ids(t, ids)?;
        Self::check_finite(t, "grads", ids, grads)?;
        if !lr.is_finite() || lr < 0.0 {
            return Err(Error::BadLearningRate { lr });
        }
        let sgd = crate::Optimizer::Sgd {
            lr,
            weight_decay: 0.0,
        };
        self.apply_optimizer(t, ids, grads, sgd)
    }

    /// The table's fused optimizer step: `row ← optimizer(row, grad)` with
    /// the optimizer of the table's config, its state read from and written
    /// back into the row. Gradients of duplicate ids are summed first, in the
    /// order given, and applied once. Nothing is written unless every id and
    /// gradient is valid. Formulas: [`crate::optim`] and `docs/optimizers.md`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// use embtier::{Init, Optimizer, Store, StoreConfig, TableConfig};
    /// let opt = Optimizer::RowwiseAdagrad { lr: 0.1, eps: 1e-8, weight_decay: 0.0 };
    /// let store = Store::create(dir.path().join("s"), StoreConfig::builder()
    ///     .table(TableConfig::new("t", 100, 2).init(Init::Zeros).optimizer(opt)).build())?;
    /// store.step("t", &[4], &[3.0, 4.0])?; // s = mean(9, 16) = 12.5
    /// let mut w = [0f32; 2];
    /// store.lookup("t", &[4], &mut w)?;
    /// assert!((w[0] + 0.1 * 3.0 / 12.5f32.sqrt()).abs() < 1e-6);
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn step(&self, table: &str, ids: &[u64], grads: &[f32]) -> Result<()> {
        let t = self.table(table)?;
        Self::check_len(t, "grads", ids.len(), grads.len())?;
        Self::check_ids(t, ids)?;
        Self::check_finite(t, "grads", ids, grads)?;
        self.apply_optimizer(t, ids, grads, t.cfg.optimizer)
    }

    /// Sum duplicate ids' gradients, then apply `opt` to each row in place
    /// (on an f32 copy of the weights when they are narrower; the state, if
    /// `opt` has any, follows the weights). Inputs are validated.
    fn apply_optimizer(
        &self,
        t: &Table,
        ids: &[u64],
        grads: &[f32],
        opt: crate::Optimizer,
    ) -> Result<()> {
        let (items, sums) = sum_duplicates(ids, grads, t.dim);
        self.apply_summed(t, &items, &sums, opt)
    }

    /// Apply `opt` to each row of `items` (`(id, slot)`, sorted by id, ids
    /// unique) with the gradient `sums[slot * dim..]`: slots number the ids
    /// in the order of their first occurrence in the call, which also seeds
    /// their stochastic rounding. Inputs are validated.
    pub(crate) fn apply_summed(
        &self,
        t: &Table,
        items: &[(u64, usize)],
        sums: &[f32],
        opt: crate::Optimizer,
    ) -> Result<()> {
        t.throttle();
        let _gate = self.ssd.write_gate()?;
        let dim = t.dim;
        let ahead = |s: usize| crate::hint::prefetch_slice(&sums[s * dim..(s + 1) * dim]);
        if t.elem == crate::Elem::F32 {
            return t.modify(&self.ssd, items, false, ahead, |row, s| {
                opt.apply(row, &sums[s * dim..(s + 1) * dim])
            });
        }
        // Narrow weights: run the optimizer on an f32 copy of the row
        // (weights widened, state as stored, always f32), then round the
        // weights back.
        let base = t.rounding_base();
        let (wb, sb) = (t.weight_bytes, opt.state_bytes(t.dim as u32) as usize);
        let scratch = std::cell::RefCell::new((vec![0f32; dim], vec![0u8; dim * 4 + sb]));
        t.modify(&self.ssd, items, false, ahead, |row, s| {
            let mut guard = scratch.borrow_mut();
            let (w, wide) = &mut *guard;
            t.decode(row, w);
            f32_to_bytes(w, &mut wide[..dim * 4]);
            wide[dim * 4..].copy_from_slice(&row[wb..wb + sb]);
            opt.apply(wide, &sums[s * dim..(s + 1) * dim]);
            bytes_to_f32(&wide[..dim * 4], w);
            t.encode(w, row, rounding_for(base, s));
            row[wb..wb + sb].copy_from_slice(&wide[dim * 4..]);
        })
    }
}
