//! Leaf helpers with no dependency inside the crate: the 64-bit mixer that
//! initial values, shard placement, stochastic rounding and the generators
//! derive from, and the name normaliser of the parsers.

/// The SplitMix64 finaliser: a bijective 64-bit mixer. Initial values
/// (FORMAT.md), shard placement and stochastic rounding all derive from it;
/// tests and examples use it for their deterministic generators.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A name as the parsers of this crate compare it: lower case, with `-` and
/// `_` dropped, so that `S3-FIFO`, `s3_fifo` and `s3fifo` are one name.
pub fn canonical_name(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}
