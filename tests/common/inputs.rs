//! Deterministic test inputs, with no dependency beyond `embtier`: a small
//! PRNG, the tests' size knobs from the environment, and the mutations of
//! valid encodings that the arbitrary-bytes property tests feed to parsers.
//! The simulator's tests (`sim/tests/`) include this file too.
#![allow(dead_code)] // each test uses a part

use std::panic::{catch_unwind, AssertUnwindSafe};

/// The number in environment variable `name`, or `default` when it is
/// unset or not a number (the tests' size knobs).
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic PRNG (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        embtier::init::mix64(self.0)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A value exactly representable in f32 with few bits, so sums stay exact.
    pub fn small_f32(&mut self) -> f32 {
        (self.below(64) as f32 - 32.0) / 8.0
    }
}

/// `rng.below` for lengths and indices.
pub fn below(rng: &mut Rng, n: usize) -> usize {
    rng.below(n.max(1) as u64) as usize
}

/// `EMBTIER_ARBITRARY_ITERS`: the factor on the number of cases (default 1).
pub fn scale() -> usize {
    env_or("EMBTIER_ARBITRARY_ITERS", 1) as usize
}

/// A mutation of `base`: a few random edits of one of five kinds.
pub fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..1 + below(rng, 4) {
        match below(rng, 5) {
            0 if !b.is_empty() => {
                let i = below(rng, b.len());
                b[i] ^= 1 << below(rng, 8);
            }
            1 if !b.is_empty() => {
                let i = below(rng, b.len());
                b[i] = [0, 0xff, 0x7f, 0x80, rng.next() as u8][below(rng, 5)];
            }
            2 => {
                let n = below(rng, b.len() + 1);
                b.truncate(n);
            }
            3 if !b.is_empty() => {
                // Duplicate a slice somewhere else.
                let i = below(rng, b.len());
                let j = (i + below(rng, 64)).min(b.len());
                let s = b[i..j].to_vec();
                let at = below(rng, b.len() + 1);
                b.splice(at..at, s);
            }
            _ => {
                let i = below(rng, b.len() + 1);
                let n = below(rng, 16);
                let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                b.splice(i..i, junk);
            }
        }
    }
    b
}

/// Run `f`; a panic fails the test, naming `what`, the seed and the case.
pub fn no_panic<T>(what: &str, seed: u64, case: &[u8], f: impl FnOnce() -> T) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        let show = &case[..case.len().min(256)];
        panic!(
            "{what}: panicked on case seed {seed} ({} bytes, first 256: {show:02x?})",
            case.len()
        );
    }
}
