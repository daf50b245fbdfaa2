//! Data blocks: the trailer every 4 KiB block of the data file carries
//! (FORMAT.md, "Data block").

use crate::*;

/// State of a data block read from disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// All 4096 bytes are zero: the block was never written (a file hole),
    /// so its rows have their initial values.
    Hole,
    /// A sealed block whose checksum and block number match.
    Sealed,
}

/// Seal a data block: write its trailer (write epoch, block number, magic,
/// CRC-32C).
///
/// # Panics
/// If `block.len() != BLOCK_SIZE` (a caller bug, never input-dependent).
pub fn seal_block(block: &mut [u8], block_no: u64, epoch: u64) {
    assert_eq!(block.len(), BLOCK_SIZE, "a data block is 4096 bytes");
    put_u64(block, TRAILER_EPOCH, epoch);
    put_u64(block, TRAILER_BLOCK_NO, block_no);
    put_u32(block, TRAILER_MAGIC, BLOCK_MAGIC);
    let crc = crc32c::crc32c(&block[..TRAILER_CRC]);
    put_u32(block, TRAILER_CRC, crc);
}

/// The write epoch in a sealed block's trailer (meaningful only for a block
/// that [`check_block`] found [`BlockState::Sealed`]).
///
/// # Panics
/// If `block.len() < BLOCK_SIZE` (a caller bug).
pub fn block_epoch(block: &[u8]) -> u64 {
    get_u64(block, TRAILER_EPOCH)
}

/// Check a data block read from block number `block_no` of the data file.
/// A slice of any other length than [`BLOCK_SIZE`] (a short read) is
/// reported as truncated.
pub fn check_block(block: &[u8], block_no: u64) -> Result<BlockState, FormatError> {
    let offset = block_no.saturating_mul(BLOCK_SIZE as u64);
    if block.len() != BLOCK_SIZE {
        return Err(FormatError::Truncated {
            offset,
            needed: BLOCK_SIZE as u64,
            have: block.len() as u64,
        });
    }
    let stored = get_u32(block, TRAILER_CRC);
    let magic = get_u32(block, TRAILER_MAGIC);
    if stored == 0 && magic == 0 && block.iter().all(|&b| b == 0) {
        return Ok(BlockState::Hole);
    }
    let computed = crc32c::crc32c(&block[..TRAILER_CRC]);
    if computed != stored {
        return Err(FormatError::ChecksumMismatch {
            offset,
            stored,
            computed,
        });
    }
    if magic != BLOCK_MAGIC {
        return Err(FormatError::BadMagic {
            offset: offset.saturating_add(TRAILER_MAGIC as u64),
            found: magic.to_le_bytes().to_vec(),
            expected: BLOCK_MAGIC.to_le_bytes().to_vec(),
        });
    }
    let found = get_u64(block, TRAILER_BLOCK_NO);
    if found != block_no {
        return Err(FormatError::MisplacedBlock {
            offset,
            found,
            expected: block_no,
        });
    }
    Ok(BlockState::Sealed)
}
