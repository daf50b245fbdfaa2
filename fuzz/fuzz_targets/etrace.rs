//! The `.etrace` reader, streaming every batch.
#![no_main]
use embtier_format::trace::TraceReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut r) = TraceReader::new(data) else {
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
