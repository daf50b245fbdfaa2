//! The data-block check: arbitrary bytes, and the first 8 as the block number.
#![no_main]
use embtier_format::{block_epoch, check_block, BlockState, BLOCK_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let no = u64::from_le_bytes(data[..8].try_into().unwrap());
    let block = &data[8..];
    if let Ok(BlockState::Sealed) = check_block(block, no) {
        assert_eq!(block.len(), BLOCK_SIZE);
        let _ = block_epoch(block);
    }
});
