//! The undo journal's scanner and batch-header decoder.
#![no_main]
use embtier_format::journal::{scan, BatchHeader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = BatchHeader::decode(data, 0);
    if let Ok((batches, _tail)) = scan(data) {
        for b in batches {
            assert_eq!(b.image_ok.len(), b.header.entries.len());
            assert_eq!(BatchHeader::decode(&b.header.encode(), 0).as_ref(), Ok(&b.header));
        }
    }
});
