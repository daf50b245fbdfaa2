//! Lazy initialisation: the value of a row that was never written.
//!
//! A never-written row is a pure function of (seed, row id), so a table of
//! 10^9 rows costs nothing to create: its blocks are file holes, and a hole
//! decodes to these values.

use embtier_format::InitKind;

pub use crate::hash::mix64;

/// The stream of initial values of row `row`.
fn uniform_stream(scale: f32, seed: u64, row: u64) -> impl Iterator<Item = f32> {
    let mut state = mix64(seed ^ mix64(row.wrapping_add(0x9e37_79b9_7f4a_7c15)));
    std::iter::repeat_with(move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let bits = mix64(state) >> 40; // 24 random bits
        let u = bits as f32 * (1.0 / (1u32 << 24) as f32); // [0, 1)
        (2.0 * u - 1.0) * scale
    })
}

/// Initial value of row `row`: zeros, or uniform in `[-scale, scale)` from a
/// SplitMix64 stream seeded by `(seed, row)`.
pub fn init_row(kind: InitKind, scale: f32, seed: u64, row: u64, out: &mut [f32]) {
    match kind {
        InitKind::Uniform => {
            for (v, x) in out.iter_mut().zip(uniform_stream(scale, seed, row)) {
                *v = x;
            }
        }
        _ => out.fill(0.0),
    }
}

/// Initial bytes of a row whose `dim` weights are stored as `elem`;
/// optimizer state and padding are zero. Narrow elements hold the f32
/// initial values rounded to nearest, so every tier and every reopen agree.
pub(crate) fn init_row_bytes(
    kind: InitKind,
    scale: f32,
    seed: u64,
    row: u64,
    elem: crate::Elem,
    dim: usize,
    out: &mut [u8],
) {
    out.fill(0);
    if kind != InitKind::Uniform {
        // Zeros: all-zero bytes decode to 0.0 in every element type (int8's
        // scale and bias are zero too).
        return;
    }
    if elem == crate::Elem::F32 {
        let weights = out[..dim * 4].chunks_exact_mut(4);
        for (b, x) in weights.zip(uniform_stream(scale, seed, row)) {
            b.copy_from_slice(&x.to_le_bytes());
        }
    } else {
        let mut w = vec![0f32; dim];
        init_row(kind, scale, seed, row, &mut w);
        let wb = elem.weight_bytes(dim);
        crate::precision::encode(
            elem,
            &w,
            &mut out[..wb],
            crate::precision::Rounding::Nearest,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_deterministic_and_bounded() {
        let mut a = vec![0f32; 100];
        let mut b = vec![0f32; 100];
        init_row(InitKind::Uniform, 0.5, 7, 12345, &mut a);
        init_row(InitKind::Uniform, 0.5, 7, 12345, &mut b);
        assert_eq!(a, b);
        assert!(a.iter().all(|v| (-0.5..0.5).contains(v)));
        let mean: f32 = a.iter().sum::<f32>() / 100.0;
        assert!(mean.abs() < 0.15, "mean {mean}");
        init_row(InitKind::Uniform, 0.5, 7, 12346, &mut b);
        assert_ne!(a, b, "neighbouring rows differ");
        init_row(InitKind::Uniform, 0.5, 8, 12345, &mut b);
        assert_ne!(a, b, "seeds differ");
        init_row(InitKind::Zeros, 0.5, 8, 12345, &mut b);
        assert!(b.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn bytes_match_floats() {
        let mut f = vec![0f32; 300];
        init_row(InitKind::Uniform, 1.0, 3, 9, &mut f);
        let mut b = vec![0xffu8; 1204];
        init_row_bytes(InitKind::Uniform, 1.0, 3, 9, crate::Elem::F32, 300, &mut b);
        for i in 0..300 {
            assert_eq!(
                f32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().unwrap()),
                f[i]
            );
        }
        assert_eq!(&b[1200..], &[0, 0, 0, 0]);
    }
}
