//! Shared by the targets whose input is one block behind a magic and a CRC.

use embtier_format::BLOCK_SIZE;

/// The fuzz input without its first byte. With that byte odd (and a whole
/// block there), `magic` is stamped at 0 and the CRC32C of the bytes before
/// `crc_at` is written at `crc_at`, so the checks behind them are reached.
pub fn input(data: &[u8], magic: &[u8; 8], crc_at: usize) -> Option<Vec<u8>> {
    let (&mode, rest) = data.split_first()?;
    let mut b = rest.to_vec();
    if mode & 1 == 1 && b.len() >= BLOCK_SIZE {
        b[..8].copy_from_slice(magic);
        let crc = crc32c::crc32c(&b[..crc_at]);
        b[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    }
    Some(b)
}
