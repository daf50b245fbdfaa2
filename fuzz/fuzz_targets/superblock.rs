//! The superblock decoder on arbitrary bytes, as either copy.
#![no_main]
use embtier_format::Superblock;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(sb) = Superblock::decode_at(data, 4096) {
        // What decodes re-encodes to the same superblock.
        assert_eq!(Superblock::decode(&sb.encode()).as_ref(), Ok(&sb));
    }
});
