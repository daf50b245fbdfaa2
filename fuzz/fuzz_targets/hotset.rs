//! The hot set (`hot.emb`; FORMAT.md, "Hot set"): the decoder on arbitrary
//! bytes, and on bytes re-sealed with a valid CRC so that the checks behind
//! it are reached. Whatever decodes must satisfy the documented invariants
//! (ids strictly ascending, below 2^62, at most 64 tiers a table) and
//! encode back to the same bytes.
//!
//! Input: byte 0 bit 0 asks for the CRC to be recomputed over the rest
//! (the file is then bytes 1..), so that the fuzzer reaches the counts and
//! the varints instead of stopping at the checksum.
#![no_main]
use embtier_format::hotset::HotSet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if mode & 1 == 1 && bytes.len() >= 4 {
        let n = bytes.len() - 4;
        let crc = crc32c::crc32c(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
    }
    let Ok(h) = HotSet::decode(&bytes) else {
        return;
    };
    for t in &h.tables {
        assert!(t.tiers.len() <= 64);
        for ids in &t.tiers {
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "not ascending");
            assert!(ids.iter().all(|&id| id < 1 << 62), "id out of range");
        }
    }
    // Canonical: what decodes encodes back to the same bytes (varints are
    // accepted only in their shortest form if this holds; a longer form is
    // a finding to decide on, not a crash).
    let again = h.encode();
    assert_eq!(HotSet::decode(&again).unwrap(), h);
});
