//! The superblock decoder on arbitrary bytes, as either copy. With the
//! first byte odd, the magic and the CRC are fixed up first, so that the
//! field checks behind them are reached.
#![no_main]
use embtier_format::{sb, Superblock, BLOCK_SIZE, SUPERBLOCK_MAGIC};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut b = rest.to_vec();
    if mode & 1 == 1 && b.len() >= BLOCK_SIZE {
        b[..8].copy_from_slice(&SUPERBLOCK_MAGIC);
        let crc = crc32c::crc32c(&b[..sb::CRC]);
        b[sb::CRC..sb::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(s) = Superblock::decode_at(&b, 4096) {
        // What decodes re-encodes to the same superblock.
        assert_eq!(Superblock::decode(&s.encode()).as_ref(), Ok(&s));
    }
});
