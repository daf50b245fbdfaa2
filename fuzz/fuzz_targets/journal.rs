//! The undo journal's scanner and batch-header decoder. With the first
//! byte odd, the first header's magic and CRC are fixed up first, so that
//! the entry checks and the image checks behind them are reached.
#![no_main]
use embtier_format::journal::{jh, scan, BatchHeader, JOURNAL_MAGIC};
use libfuzzer_sys::fuzz_target;

#[path = "sealed.rs"]
mod sealed;

fuzz_target!(|data: &[u8]| {
    let Some(b) = sealed::input(data, &JOURNAL_MAGIC, jh::CRC) else {
        return;
    };
    let _ = BatchHeader::decode(&b, 0);
    if let Ok((batches, _tail)) = scan(&b) {
        for x in batches {
            assert_eq!(x.image_ok.len(), x.header.entries.len());
            assert_eq!(
                BatchHeader::decode(&x.header.encode(), 0).as_ref(),
                Ok(&x.header)
            );
        }
    }
});
