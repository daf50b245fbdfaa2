//! The undo journal's scanner and batch-header decoder. With the first
//! byte odd, the first header's magic and CRC are fixed up first, so that
//! the entry checks and the image checks behind them are reached.
#![no_main]
use embtier_format::journal::{jh, scan, BatchHeader, JOURNAL_MAGIC};
use embtier_format::BLOCK_SIZE;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut b = rest.to_vec();
    if mode & 1 == 1 && b.len() >= BLOCK_SIZE {
        b[..8].copy_from_slice(&JOURNAL_MAGIC);
        let crc = crc32c::crc32c(&b[..jh::CRC]);
        b[jh::CRC..jh::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let _ = BatchHeader::decode(&b, 0);
    if let Ok((batches, _tail)) = scan(&b) {
        for x in batches {
            assert_eq!(x.image_ok.len(), x.header.entries.len());
            assert_eq!(BatchHeader::decode(&x.header.encode(), 0).as_ref(), Ok(&x.header));
        }
    }
});
