//! Fused optimizers: the update a trainer applies to the rows it looked up,
//! run inside the store with each row's optimizer state stored beside its
//! weights (and so moved, evicted, written back and flushed with them).
//!
//! A row is `dim` f32 weights followed by the state below (little-endian).
//! With weight decay `wd`, the gradient used is `g' = g + wd·w`. All
//! arithmetic is f32, in the order written here (`docs/optimizers.md`).
//!
//! | optimizer | state | update |
//! |---|---|---|
//! | SGD | none | `w ← w − lr·g'` |
//! | row-wise Adagrad (FBGEMM's) | `s`: 1 f32 | `s ← s + mean(g'²)`; `w ← w − lr·g' / (√s + eps)` |
//! | Adagrad | `s`: dim f32 | `s_i ← s_i + g'_i²`; `w_i ← w_i − lr·g'_i / (√s_i + eps)` |
//! | Adam | `m`, `v`: dim f32 each; `t`: u32 | `t ← t + 1`; `m ← β1·m + (1−β1)·g'`; `v ← β2·v + (1−β2)·g'²`; `w ← w − lr·(m / (1−β1^t)) / (√(v / (1−β2^t)) + eps)` |
//!
//! Adam keeps a **per-row** step count `t`, so that a row updated rarely is
//! bias-corrected by its own number of updates, not by the global step.

use serde::{Deserialize, Serialize};

/// A table's optimizer and its hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Optimizer {
    /// Plain SGD.
    Sgd {
        /// Learning rate.
        #[serde(serialize_with = "crate::optim::short_f32")]
        lr: f32,
        /// L2 weight decay.
        #[serde(default)]
        #[serde(serialize_with = "crate::optim::short_f32")]
        weight_decay: f32,
    },
    /// Row-wise Adagrad: one accumulator per row (FBGEMM's default).
    RowwiseAdagrad {
        /// Learning rate.
        #[serde(serialize_with = "crate::optim::short_f32")]
        lr: f32,
        /// Added to the root of the accumulator.
        #[serde(default = "default_eps")]
        #[serde(serialize_with = "crate::optim::short_f32")]
        eps: f32,
        /// L2 weight decay.
        #[serde(default)]
        #[serde(serialize_with = "crate::optim::short_f32")]
        weight_decay: f32,
    },
    /// Adagrad: one accumulator per element.
    Adagrad {
        /// Learning rate.
        #[serde(serialize_with = "crate::optim::short_f32")]
        lr: f32,
        /// Added to the root of the accumulator.
        #[serde(default = "default_eps")]
        #[serde(serialize_with = "crate::optim::short_f32")]
        eps: f32,
        /// L2 weight decay.
        #[serde(default)]
        #[serde(serialize_with = "crate::optim::short_f32")]
        weight_decay: f32,
    },
    /// Adam with a per-row step count.
    Adam {
        /// Learning rate.
        #[serde(serialize_with = "crate::optim::short_f32")]
        lr: f32,
        /// First-moment decay.
        #[serde(default = "default_beta1")]
        #[serde(serialize_with = "crate::optim::short_f32")]
        beta1: f32,
        /// Second-moment decay.
        #[serde(default = "default_beta2")]
        #[serde(serialize_with = "crate::optim::short_f32")]
        beta2: f32,
        /// Added to the root of the second moment.
        #[serde(default = "default_eps")]
        #[serde(serialize_with = "crate::optim::short_f32")]
        eps: f32,
        /// L2 weight decay.
        #[serde(default)]
        #[serde(serialize_with = "crate::optim::short_f32")]
        weight_decay: f32,
    },
}

fn default_eps() -> f32 {
    1e-8
}
fn default_beta1() -> f32 {
    0.9
}
fn default_beta2() -> f32 {
    0.999
}

impl std::str::FromStr for Optimizer {
    type Err = String;
    /// An optimizer by name with common default hyper-parameters: `sgd`
    /// (lr 0.01), `rowwise-adagrad` and `adagrad` (lr 0.01, eps 1e-8), `adam`
    /// (lr 0.001, betas 0.9 and 0.999, eps 1e-8); no weight decay. Case, `-`
    /// and `_` are ignored.
    fn from_str(s: &str) -> Result<Optimizer, String> {
        Ok(match crate::hash::canonical_name(s).as_str() {
            "sgd" => Optimizer::default(),
            "rowwiseadagrad" => Optimizer::RowwiseAdagrad {
                lr: 0.01,
                eps: 1e-8,
                weight_decay: 0.0,
            },
            "adagrad" => Optimizer::Adagrad {
                lr: 0.01,
                eps: 1e-8,
                weight_decay: 0.0,
            },
            "adam" => Optimizer::Adam {
                lr: 0.001,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            },
            _ => {
                return Err(format!(
                    "{s:?}: expected sgd, rowwise-adagrad, adagrad or adam"
                ))
            }
        })
    }
}

impl Default for Optimizer {
    fn default() -> Optimizer {
        Optimizer::Sgd {
            lr: 0.01,
            weight_decay: 0.0,
        }
    }
}

#[inline]
fn get(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

/// `b` as f32s, where that is the same as reading them little-endian: on a
/// little-endian host, when `b` is aligned for f32 and whole f32s long.
#[inline]
fn f32_view(b: &mut [u8]) -> Option<&mut [f32]> {
    if cfg!(target_endian = "big") {
        return None;
    }
    // SAFETY: every bit pattern is a valid f32, and `align_to_mut` only
    // returns a middle slice that is aligned for f32 and within `b`; the
    // borrow of `b` covers the view's lifetime.
    let (head, mid, tail) = unsafe { b.align_to_mut::<f32>() };
    (head.is_empty() && tail.is_empty()).then_some(mid)
}

#[inline]
fn put(b: &mut [u8], i: usize, v: f32) {
    b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
}

impl Optimizer {
    /// The catalog's code for this optimizer's kind.
    pub fn code(&self) -> embtier_format::OptimizerCode {
        use embtier_format::OptimizerCode as C;
        match self {
            Optimizer::Sgd { .. } => C::Sgd,
            Optimizer::RowwiseAdagrad { .. } => C::RowwiseAdagrad,
            Optimizer::Adagrad { .. } => C::Adagrad,
            Optimizer::Adam { .. } => C::Adam,
        }
    }

    /// Bytes of state per row for rows of `dim` elements.
    pub fn state_bytes(&self, dim: u32) -> u32 {
        match self {
            Optimizer::Sgd { .. } => 0,
            Optimizer::RowwiseAdagrad { .. } => 4,
            Optimizer::Adagrad { .. } => 4 * dim,
            Optimizer::Adam { .. } => 8 * dim + 4,
        }
    }

    /// Check the hyper-parameters (rates and decays finite and not
    /// negative, eps positive, betas in [0, 1)); the message names the bad
    /// one.
    pub fn validate(&self) -> Result<(), String> {
        // Finite and not negative, as torch.optim asks of its rates and
        // decays: a negative one would climb the loss (or grow the
        // weights) for the whole run without a word.
        let finite = |name: &str, v: f32| {
            if !v.is_finite() {
                Err(format!("optimizer {name} {v} is not finite"))
            } else if v < 0.0 {
                Err(format!("optimizer {name} {v} is negative"))
            } else {
                Ok(())
            }
        };
        match *self {
            Optimizer::Sgd { lr, weight_decay } => {
                finite("lr", lr)?;
                finite("weight_decay", weight_decay)
            }
            Optimizer::RowwiseAdagrad {
                lr,
                eps,
                weight_decay,
            }
            | Optimizer::Adagrad {
                lr,
                eps,
                weight_decay,
            } => {
                finite("lr", lr)?;
                finite("weight_decay", weight_decay)?;
                if !(eps.is_finite() && eps > 0.0) {
                    return Err(format!("optimizer eps {eps} must be positive"));
                }
                Ok(())
            }
            Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                finite("lr", lr)?;
                finite("weight_decay", weight_decay)?;
                for (n, b) in [("beta1", beta1), ("beta2", beta2)] {
                    if !(0.0..1.0).contains(&b) {
                        return Err(format!("optimizer {n} {b} must be in [0, 1)"));
                    }
                }
                if !(eps.is_finite() && eps > 0.0) {
                    return Err(format!("optimizer eps {eps} must be positive"));
                }
                Ok(())
            }
        }
    }

    /// Apply one step with gradient `g` (length `dim`) to `row` (weights
    /// then state, as laid out above).
    pub fn apply(&self, row: &mut [u8], g: &[f32]) {
        let dim = g.len();
        let (w, state) = row.split_at_mut(dim * 4);
        let wd = match *self {
            Optimizer::Sgd { weight_decay, .. }
            | Optimizer::RowwiseAdagrad { weight_decay, .. }
            | Optimizer::Adagrad { weight_decay, .. }
            | Optimizer::Adam { weight_decay, .. } => weight_decay,
        };
        let grad = |i: usize, w: &[u8]| {
            if wd != 0.0 {
                g[i] + wd * get(w, i)
            } else {
                g[i]
            }
        };
        // The common case on the hosts this runs on: weights aligned for
        // f32 on a little-endian machine, no weight decay. The same
        // arithmetic in the same order as below, on an f32 view, so the
        // compiler can vectorise it; the results are bit-identical.
        if let (0.0, Some(wf)) = (wd, f32_view(w)) {
            match *self {
                Optimizer::Sgd { lr, .. } => {
                    for (x, gi) in wf.iter_mut().zip(g) {
                        *x -= lr * gi;
                    }
                    return;
                }
                Optimizer::RowwiseAdagrad { lr, eps, .. } => {
                    let mut sq = 0.0f32;
                    for gi in g {
                        sq += gi * gi;
                    }
                    let s = get(state, 0) + sq / dim as f32;
                    put(state, 0, s);
                    let denom = s.sqrt() + eps;
                    for (x, gi) in wf.iter_mut().zip(g) {
                        *x -= lr * gi / denom;
                    }
                    return;
                }
                _ => {}
            }
        }
        match *self {
            Optimizer::Sgd { lr, .. } => {
                for i in 0..dim {
                    let gi = grad(i, w);
                    put(w, i, get(w, i) - lr * gi);
                }
            }
            Optimizer::RowwiseAdagrad { lr, eps, .. } => {
                let mut sq = 0.0f32;
                for i in 0..dim {
                    let gi = grad(i, w);
                    sq += gi * gi;
                }
                let s = get(state, 0) + sq / dim as f32;
                put(state, 0, s);
                let denom = s.sqrt() + eps;
                for i in 0..dim {
                    let gi = grad(i, w);
                    put(w, i, get(w, i) - lr * gi / denom);
                }
            }
            Optimizer::Adagrad { lr, eps, .. } => {
                for i in 0..dim {
                    let gi = grad(i, w);
                    let s = get(state, i) + gi * gi;
                    put(state, i, s);
                    put(w, i, get(w, i) - lr * gi / (s.sqrt() + eps));
                }
            }
            Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
                ..
            } => {
                let (m, rest) = state.split_at_mut(dim * 4);
                let (v, t) = rest.split_at_mut(dim * 4);
                let step = u32::from_le_bytes([t[0], t[1], t[2], t[3]]).saturating_add(1);
                t[..4].copy_from_slice(&step.to_le_bytes());
                let c1 = 1.0 - beta1.powi(step.min(i32::MAX as u32) as i32);
                let c2 = 1.0 - beta2.powi(step.min(i32::MAX as u32) as i32);
                for i in 0..dim {
                    let gi = grad(i, w);
                    let mi = beta1 * get(m, i) + (1.0 - beta1) * gi;
                    let vi = beta2 * get(v, i) + (1.0 - beta2) * gi * gi;
                    put(m, i, mi);
                    put(v, i, vi);
                    put(w, i, get(w, i) - lr * (mi / c1) / ((vi / c2).sqrt() + eps));
                }
            }
        }
    }
}

/// An f32 setting written as a person writes it (store.toml's `lr`, `eps`
/// and the like, and a table's init scale): the shortest decimal that
/// reads back as the same f32 (`lr = 0.01`, where the f32 as an f64 wrote
/// `lr = 0.009999999776482582`). Here rather than in `config`, which uses
/// this module (the modules form no cycle).
pub(crate) fn short_f32<S: serde::Serializer>(v: &f32, s: S) -> Result<S::Ok, S::Error> {
    // f32's Display is the shortest decimal that reads back as it, read
    // as an f32. Read as an f64 and then rounded to f32 (as a reader of
    // store.toml does) it is rounded twice, which lands elsewhere for a
    // few values (7.038531e-26 read back as 7.0385313e-26): those are
    // written as the f64 they are, exactly.
    let short: f64 = v.to_string().parse().unwrap_or(f64::from(*v));
    s.serialize_f64(if short as f32 == *v {
        short
    } else {
        f64::from(*v)
    })
}
