//! The `.etrace` reader, streaming every batch. With the first byte odd,
//! the header, catalog and chunk checksums are fixed up first, so that the
//! decoding behind them is reached.
#![no_main]
use embtier_format::trace::{ch, th, TraceReader};
use libfuzzer_sys::fuzz_target;

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

fn put(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Recompute every checksum the reader checks.
fn fix_crcs(b: &mut [u8]) {
    if b.len() < th::SIZE {
        return;
    }
    let cat_end = (th::SIZE + u32_at(b, th::CATALOG_LEN)).min(b.len());
    let c = crc32c::crc32c(&b[th::SIZE..cat_end]);
    put(b, th::CATALOG_CRC, c);
    let c = crc32c::crc32c(&b[..th::CRC]);
    put(b, th::CRC, c);
    let mut at = cat_end;
    while at + ch::CRC + 4 <= b.len() {
        let start = at + ch::CRC + 4;
        let end = (start + u32_at(b, at + ch::PAYLOAD_LEN)).min(b.len());
        let c = crc32c::crc32c(&b[start..end]);
        put(b, at + ch::CRC, c);
        at = end;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut b = rest.to_vec();
    if mode & 1 == 1 {
        fix_crcs(&mut b);
    }
    let Ok(mut r) = TraceReader::new(&b[..]) else {
        return;
    };
    let rows: Vec<u64> = r.tables().iter().map(|t| t.rows).collect();
    let mut batch = Vec::new();
    while let Ok(true) = r.next_batch(&mut batch) {
        for a in &batch {
            // The reader's promise: every access is inside its table.
            assert!(a.row < rows[a.table as usize]);
        }
    }
});
