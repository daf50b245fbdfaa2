//! The catalog decoder: the first 4 bytes pick the entry count, the rest
//! is the catalog, with its checksum fixed up so that every field check runs.
#![no_main]
use embtier_format::{Catalog, CATALOG_OFFSET};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let count = u32::from_le_bytes(data[..4].try_into().unwrap()) % 64;
    let body = &data[4..];
    if let Ok(c) = Catalog::decode(body, count, CATALOG_OFFSET, crc32c::crc32c(body)) {
        // What decodes re-encodes to bytes that decode to the same bytes.
        let again = c.encode();
        let back = Catalog::decode(&again, count, CATALOG_OFFSET, crc32c::crc32c(&again))
            .expect("a re-encoded catalog decodes");
        assert_eq!(back.encode(), again);
    }
});
