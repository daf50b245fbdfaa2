//! The superblock decoder on arbitrary bytes, as either copy. With the
//! first byte odd, the magic and the CRC are fixed up first, so that the
//! field checks behind them are reached.
#![no_main]
use embtier_format::{sb, Superblock, SUPERBLOCK_MAGIC};
use libfuzzer_sys::fuzz_target;

#[path = "sealed.rs"]
mod sealed;

fuzz_target!(|data: &[u8]| {
    let Some(b) = sealed::input(data, &SUPERBLOCK_MAGIC, sb::CRC) else {
        return;
    };
    if let Ok(s) = Superblock::decode_at(&b, 4096) {
        // What decodes re-encodes to the same superblock.
        assert_eq!(Superblock::decode(&s.encode()).as_ref(), Ok(&s));
    }
});
