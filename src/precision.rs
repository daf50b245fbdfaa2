//! Row precisions: how a row's weights are stored. Lookups return f32;
//! updates are computed in f32 and rounded when written back.
//!
//! | elem | bytes for `dim` weights | encoding |
//! |---|---|---|
//! | `f32` | 4·dim | IEEE binary32 |
//! | `f16` | 2·dim | IEEE binary16, round-to-nearest-even or stochastic |
//! | `bf16` | 2·dim | bfloat16 (the top half of an f32), nearest-even or stochastic |
//! | `int8` | dim + 8 | row-wise: `q_i = round((w_i − min) / scale)`, `scale = (max − min) / 255`, then f32 `scale` and f32 `bias = min` |
//!
//! Stochastic rounding picks the upper or lower neighbour with probability
//! proportional to closeness, so the expected stored value is the exact one
//! and tiny updates are not lost to rounding (Gupta et al., ICML '15).

use half::{bf16, f16};

use crate::hash::mix64;

/// Element encoding of a table's weights.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Elem {
    /// 32-bit float.
    #[default]
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// int8 with a per-row f32 scale and bias.
    Int8,
}

impl Elem {
    /// The format crate's element code.
    pub fn format(self) -> embtier_format::ElemType {
        match self {
            Elem::F32 => embtier_format::ElemType::F32,
            Elem::F16 => embtier_format::ElemType::F16,
            Elem::Bf16 => embtier_format::ElemType::Bf16,
            Elem::Int8 => embtier_format::ElemType::Int8,
        }
    }

    /// From the format crate's element code.
    pub fn from_format(e: embtier_format::ElemType) -> Elem {
        match e {
            embtier_format::ElemType::F16 => Elem::F16,
            embtier_format::ElemType::Bf16 => Elem::Bf16,
            embtier_format::ElemType::Int8 => Elem::Int8,
            _ => Elem::F32,
        }
    }

    /// Bytes of `dim` weights.
    pub fn weight_bytes(self, dim: usize) -> usize {
        self.format().weight_bytes(dim as u32) as usize
    }
}

impl std::str::FromStr for Elem {
    type Err = String;
    /// `f32`, `f16`, `bf16` or `int8` (case, `-` and `_` ignored).
    fn from_str(s: &str) -> Result<Elem, String> {
        Ok(match crate::hash::canonical_name(s).as_str() {
            "f32" => Elem::F32,
            "f16" => Elem::F16,
            "bf16" => Elem::Bf16,
            "int8" => Elem::Int8,
            _ => return Err(format!("{s:?}: expected f32, f16, bf16 or int8")),
        })
    }
}

/// Rounding when writing weights back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// Round to nearest, ties to even.
    Nearest,
    /// Stochastic rounding driven by this seed (mixed per element).
    Stochastic(u64),
}

/// Decode `dim = out.len()` weights from `src`.
#[inline]
pub fn decode(elem: Elem, src: &[u8], out: &mut [f32]) {
    match elem {
        Elem::F32 => bytes_to_f32(src, out),
        Elem::F16 => {
            // Through a small aligned buffer, so that `half` converts whole
            // slices (F16C where the CPU has it) rather than element by element.
            use half::slice::HalfFloatSliceExt;
            let mut buf = [f16::ZERO; 64];
            for (o, b) in out.chunks_mut(64).zip(src.chunks(128)) {
                let h = &mut buf[..o.len()];
                for (x, c) in h.iter_mut().zip(b.chunks_exact(2)) {
                    *x = f16::from_bits(u16::from_le_bytes([c[0], c[1]]));
                }
                h.convert_to_f32_slice(o);
            }
        }
        Elem::Bf16 => {
            // bf16 is the top half of an f32: a shift, which vectorises.
            for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
            }
        }
        Elem::Int8 => {
            let d = out.len();
            let scale = f32::from_le_bytes(src[d..d + 4].try_into().expect("4 bytes"));
            let bias = f32::from_le_bytes(src[d + 4..d + 8].try_into().expect("4 bytes"));
            if scale <= f32::MAX / 255.0 {
                for (o, &q) in out.iter_mut().zip(&src[..d]) {
                    *o = q as f32 * scale + bias;
                }
            } else {
                // A row whose range passes f32's ([`encode`]): `q * scale`
                // would overflow in f32.
                for (o, &q) in out.iter_mut().zip(&src[..d]) {
                    let v = q as f64 * scale as f64 + bias as f64;
                    *o = v.clamp(-f32::MAX as f64, f32::MAX as f64) as f32;
                }
            }
        }
    }
}

/// A uniform value in [0, 1) for element `i` under `seed`.
#[inline]
fn unit(seed: u64, i: usize) -> f32 {
    (mix64(seed ^ mix64(i as u64 + 1)) >> 40) as f32 * (1.0 / (1u32 << 24) as f32)
}

/// Round `x` to a neighbour in a format whose two candidates are `lo <= x <= hi`.
#[inline]
fn pick(x: f32, lo: f32, hi: f32, u: f32) -> bool {
    // true: take hi
    if hi == lo {
        return false;
    }
    u < (x - lo) / (hi - lo)
}

/// `x` stochastically rounded to an f16 value (returned as the f32 that
/// represents it exactly). In the normal range this adds uniform noise below
/// f16's 10 mantissa bits and truncates, in the bits of the magnitude, so the
/// upper neighbour is taken with probability equal to the fraction; near
/// zero (subnormals), near the top of the range and for non-finite values it
/// picks between the two neighbours explicitly.
#[inline]
fn stochastic_f16(x: f32, seed: u64, i: usize) -> f32 {
    const DROP: u32 = (1 << 13) - 1; // f32 has 23 mantissa bits, f16 10
    let a = x.abs();
    if (f16::MIN_POSITIVE.to_f32()..f16::MAX.to_f32()).contains(&a) {
        let noise = (mix64(seed ^ mix64(i as u64 + 1)) as u32) & DROP;
        let v = f32::from_bits((x.to_bits() + noise) & !DROP);
        if v.abs() <= f16::MAX.to_f32() {
            return v;
        }
    }
    let n = f16::from_f32(x);
    let nf = n.to_f32();
    if nf == x || !x.is_finite() {
        return nf;
    }
    // The other neighbour, one ulp away towards x.
    let step = if (nf < x) == (nf >= 0.0) { 1i32 } else { -1 };
    let other = f16::from_bits((n.to_bits() as i32 + step) as u16).to_f32();
    let (lo, hi) = if nf < x { (nf, other) } else { (other, nf) };
    if pick(x, lo, hi, unit(seed, i)) {
        hi
    } else {
        lo
    }
}

/// Encode `w` into `dst` (the weights' bytes).
pub fn encode(elem: Elem, w: &[f32], dst: &mut [u8], rounding: Rounding) {
    match elem {
        Elem::F32 => f32_to_bytes(w, dst),
        Elem::F16 => {
            // Each value is first made exactly representable in f16 (rounded
            // stochastically in f32 arithmetic), then a whole slice is
            // converted by `half` (F16C where the CPU has it).
            use half::slice::HalfFloatSliceExt;
            let mut wide = [0f32; 64];
            let mut narrow = [f16::ZERO; 64];
            for (c, (d, ws)) in dst.chunks_mut(128).zip(w.chunks(64)).enumerate() {
                let n = ws.len();
                for (j, (o, &x)) in wide[..n].iter_mut().zip(ws).enumerate() {
                    *o = match rounding {
                        Rounding::Nearest => x,
                        Rounding::Stochastic(seed) => stochastic_f16(x, seed, c * 64 + j),
                    };
                }
                narrow[..n].convert_from_f32_slice(&wide[..n]);
                for (b, h) in d.chunks_exact_mut(2).zip(&narrow[..n]) {
                    b.copy_from_slice(&h.to_le_bytes());
                }
            }
        }
        Elem::Bf16 => {
            for (i, (b, &x)) in dst.chunks_exact_mut(2).zip(w).enumerate() {
                let h = match rounding {
                    Rounding::Nearest => bf16::from_f32(x),
                    Rounding::Stochastic(seed) => {
                        if !x.is_finite() {
                            bf16::from_f32(x)
                        } else {
                            // Add uniform noise below the kept bits, then truncate.
                            let noise = (mix64(seed ^ mix64(i as u64 + 1)) & 0xffff) as u32;
                            let bits = x.to_bits();
                            let sum = bits.wrapping_add(noise);
                            // Keep the sign: magnitudes round up or down.
                            if (sum ^ bits) & 0x8000_0000 != 0 {
                                bf16::from_bits((bits >> 16) as u16)
                            } else {
                                bf16::from_bits((sum >> 16) as u16)
                            }
                        }
                    }
                };
                b.copy_from_slice(&h.to_le_bytes());
            }
        }
        Elem::Int8 => {
            let d = w.len();
            let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
            for &x in w {
                lo = lo.min(x);
                hi = hi.max(x);
            }
            if d > 0 && !(hi - lo).is_finite() {
                // Values near ±f32::MAX (a range past f32's) or infinite
                // ones (a step that overflowed): in f64, saturated.
                int8_wide(w, dst, rounding);
                return;
            }
            if d == 0 || !lo.is_finite() || !hi.is_finite() {
                lo = 0.0;
                hi = 0.0;
            }
            let scale = (hi - lo) / 255.0;
            for (i, (q, &x)) in dst[..d].iter_mut().zip(w).enumerate() {
                let v = if scale > 0.0 { (x - lo) / scale } else { 0.0 };
                let r = match rounding {
                    Rounding::Nearest => v.round(),
                    Rounding::Stochastic(seed) => (v + unit(seed, i)).floor(),
                };
                *q = r.clamp(0.0, 255.0) as u8;
            }
            dst[d..d + 4].copy_from_slice(&scale.to_le_bytes());
            dst[d + 4..d + 8].copy_from_slice(&lo.to_le_bytes());
        }
    }
}

/// [`encode`] of an int8 row whose range passes f32's or that holds an
/// infinite value: ±inf saturate to ±`f32::MAX`, NaN is stored as the
/// row's low end (as in an ordinary row), and the range and each value's
/// place in it are reckoned in f64, so that the finite values keep int8's
/// precision (a 255th of the range) rather than reading back as NaN or
/// zeros. [`decode`] reads such a row (its scale past `f32::MAX / 255`)
/// in f64 too.
fn int8_wide(w: &[f32], dst: &mut [u8], rounding: Rounding) {
    let d = w.len();
    let sat = |x: f32| x.clamp(-f32::MAX, f32::MAX); // NaN stays NaN
    let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
    for &x in w {
        lo = lo.min(sat(x));
        hi = hi.max(sat(x));
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, 0.0); // every value NaN
    }
    let scale = (hi as f64 - lo as f64) / 255.0;
    for (i, (q, &x)) in dst[..d].iter_mut().zip(w).enumerate() {
        let v = if scale > 0.0 {
            ((sat(x) as f64 - lo as f64) / scale) as f32
        } else {
            0.0
        };
        let r = match rounding {
            Rounding::Nearest => v.round(),
            Rounding::Stochastic(seed) => (v + unit(seed, i)).floor(),
        };
        *q = r.clamp(0.0, 255.0) as u8;
    }
    dst[d..d + 4].copy_from_slice(&(scale as f32).to_le_bytes());
    dst[d + 4..d + 8].copy_from_slice(&lo.to_le_bytes());
}

/// Little-endian row bytes to f32s (one memcpy on little-endian targets).
#[inline]
pub(crate) fn bytes_to_f32(src: &[u8], dst: &mut [f32]) {
    #[cfg(target_endian = "little")]
    {
        let n = dst.len() * 4;
        // SAFETY: dst is an exclusively borrowed, initialised region of
        // dst.len() f32s, i.e. n bytes, and u8 has no alignment requirement;
        // every byte pattern is a valid f32, and on a little-endian target an
        // f32's bytes in memory are exactly its little-endian encoding.
        let d = unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<u8>(), n) };
        copy_row(d, &src[..n]);
    }
    #[cfg(not(target_endian = "little"))]
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    }
}

/// Copy a row in fixed 64-byte chunks. The compiler turns each chunk into
/// vector moves, whose cache misses overlap across rows; libc's memmove takes
/// its `rep movsb` path for row-sized copies, which does not overlap and
/// costs about half the throughput of a batch of DRAM hits.
#[inline]
pub(crate) fn copy_row(dst: &mut [u8], src: &[u8]) {
    let mut d = dst.chunks_exact_mut(64);
    let mut s = src.chunks_exact(64);
    for (a, b) in (&mut d).zip(&mut s) {
        let b: &[u8; 64] = b.try_into().expect("64-byte chunk");
        let a: &mut [u8; 64] = a.try_into().expect("64-byte chunk");
        *a = *b;
    }
    d.into_remainder().copy_from_slice(s.remainder());
}

/// f32s to little-endian row bytes.
#[inline]
pub(crate) fn f32_to_bytes(src: &[f32], dst: &mut [u8]) {
    #[cfg(target_endian = "little")]
    {
        let n = src.len() * 4;
        // SAFETY: src is a borrowed, initialised region of n bytes; reading
        // an f32's bytes as u8 is always valid, and on a little-endian target
        // they are its little-endian encoding.
        let s = unsafe { std::slice::from_raw_parts(src.as_ptr().cast::<u8>(), n) };
        dst[..n].copy_from_slice(s);
    }
    #[cfg(not(target_endian = "little"))]
    for (d, s) in dst.chunks_exact_mut(4).zip(src) {
        d.copy_from_slice(&s.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals() -> Vec<f32> {
        let mut x = 3u64;
        (0..512)
            .map(|_| {
                x = mix64(x);
                ((x >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0) as f32
            })
            .collect()
    }

    /// Round-trip error bounds per precision.
    #[test]
    fn round_trip_error_is_bounded() {
        let w = vals();
        for (elem, bound) in [
            (Elem::F32, 0.0f32),
            (Elem::F16, 1.0 / 2048.0),
            (Elem::Bf16, 1.0 / 256.0),
        ] {
            let mut b = vec![0u8; elem.weight_bytes(w.len())];
            encode(elem, &w, &mut b, Rounding::Nearest);
            let mut back = vec![0f32; w.len()];
            decode(elem, &b, &mut back);
            for (a, x) in back.iter().zip(&w) {
                assert!(
                    (a - x).abs() <= bound * x.abs().max(1e-3) + 1e-7,
                    "{elem:?}: {x} -> {a}"
                );
            }
        }
        // int8: half a step of the row's range.
        let mut b = vec![0u8; Elem::Int8.weight_bytes(w.len())];
        encode(Elem::Int8, &w, &mut b, Rounding::Nearest);
        let mut back = vec![0f32; w.len()];
        decode(Elem::Int8, &b, &mut back);
        let (lo, hi) = w
            .iter()
            .fold((f32::MAX, f32::MIN), |a, &x| (a.0.min(x), a.1.max(x)));
        let step = (hi - lo) / 255.0;
        for (a, x) in back.iter().zip(&w) {
            assert!((a - x).abs() <= step / 2.0 + 1e-6, "int8: {x} -> {a}");
        }
    }

    /// Stochastic rounding is unbiased: the mean of many roundings is close
    /// to the exact value, where nearest rounding is stuck.
    #[test]
    fn stochastic_rounding_is_unbiased() {
        for elem in [Elem::F16, Elem::Bf16] {
            let x = 1.0f32 + 1.0 / 1000.0;
            let mut sum = 0.0f64;
            let n = 20_000;
            for s in 0..n {
                let mut b = [0u8; 2];
                encode(elem, &[x], &mut b, Rounding::Stochastic(s));
                let mut y = [0f32];
                decode(elem, &b, &mut y);
                sum += y[0] as f64;
            }
            let mean = sum / n as f64;
            assert!(
                (mean - x as f64).abs() < 2e-4,
                "{elem:?}: mean {mean} vs {x}"
            );
            let mut b = [0u8; 2];
            encode(elem, &[x], &mut b, Rounding::Nearest);
            let mut y = [0f32];
            decode(elem, &b, &mut y);
            assert_ne!(y[0], x, "{elem:?}: nearest cannot represent it");
        }
    }

    /// f16 stochastic rounding always lands on one of the two neighbours and
    /// is unbiased across the range: negative, subnormal, near the maximum.
    #[test]
    fn f16_stochastic_rounding_hits_neighbours_without_bias() {
        for x in [-3.3f32, 1.0e-6, -4.0e-7, 65000.7, 0.3333, -1234.567] {
            let n = f16::from_f32(x);
            let nf = n.to_f32();
            let step = if (nf < x) == (nf >= 0.0) { 1i32 } else { -1 };
            let other = f16::from_bits((n.to_bits() as i32 + step) as u16).to_f32();
            let (lo, hi) = if nf < x { (nf, other) } else { (other, nf) };
            let trials = 20_000;
            let mut sum = 0.0f64;
            for s in 0..trials {
                let mut b = [0u8; 2];
                encode(Elem::F16, &[x], &mut b, Rounding::Stochastic(s));
                let mut y = [0f32];
                decode(Elem::F16, &b, &mut y);
                assert!(
                    y[0] == lo || y[0] == hi,
                    "{x}: {} not in {{{lo}, {hi}}}",
                    y[0]
                );
                sum += y[0] as f64;
            }
            let mean = sum / trials as f64;
            let ulp = (hi - lo) as f64;
            // 5 standard errors of a Bernoulli mean, in ulps.
            assert!(
                (mean - x as f64).abs() < 5.0 * ulp * 0.5 / (trials as f64).sqrt() + 1e-12,
                "{x}: mean {mean}"
            );
        }
    }
}
