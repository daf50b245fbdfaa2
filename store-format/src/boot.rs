//! The boot record (`boot.emb`; see FORMAT.md, "Boot record"): which boot
//! of the machine committed the last checkpoint. An open in the same boot
//! need not check that the checkpoint's writes reached the disk: without a
//! power loss or a kernel crash in between (either starts a new boot), a
//! write the disk acknowledged is readable, from its media or its cache.
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `EMBBOOT1` |
//! | 8 | 8 | generation of the checkpoint it follows |
//! | 16 | 40 | boot id, ASCII, zero-padded (Linux: `/proc/sys/kernel/random/boot_id`) |
//! | 56 | 4 | CRC-32C of bytes 0..56 |
//! | 60 | 4 | reserved, zero |

use crate::{check_crc, check_magic};
use crate::{get_u32, get_u64, put_u32, put_u64, FormatError};

/// Magic of a boot record.
pub const BOOT_MAGIC: [u8; 8] = *b"EMBBOOT1";
/// Offset of the generation.
pub const BOOT_GENERATION: usize = 8;
/// Offset of the boot id.
pub const BOOT_ID: usize = 16;
/// Bytes of the boot id field.
pub const BOOT_ID_BYTES: usize = 40;
/// Offset of the CRC.
pub const BOOT_CRC: usize = 56;
/// Offset of the reserved word.
pub const BOOT_RESERVED: usize = 60;
/// Bytes of a boot record.
pub const BOOT_RECORD: usize = 64;

/// A decoded boot record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootRecord {
    /// The checkpoint generation it follows.
    pub generation: u64,
    /// The boot id (at most 40 bytes, no NUL).
    pub boot_id: Vec<u8>,
}

impl BootRecord {
    /// The record's bytes; `None` if the boot id does not fit (empty, over
    /// 40 bytes, or holding a NUL): such a machine gets no record.
    pub fn encode(&self) -> Option<[u8; BOOT_RECORD]> {
        let id = &self.boot_id;
        if id.is_empty() || id.len() > BOOT_ID_BYTES || id.contains(&0) {
            return None;
        }
        let mut b = [0u8; BOOT_RECORD];
        b[..8].copy_from_slice(&BOOT_MAGIC);
        put_u64(&mut b, BOOT_GENERATION, self.generation);
        b[BOOT_ID..BOOT_ID + id.len()].copy_from_slice(id);
        let crc = crc32c::crc32c(&b[..BOOT_CRC]);
        put_u32(&mut b, BOOT_CRC, crc);
        Some(b)
    }

    /// Decode and check a boot record.
    pub fn decode(b: &[u8]) -> Result<BootRecord, FormatError> {
        if b.len() != BOOT_RECORD {
            return Err(FormatError::Truncated {
                offset: 0,
                needed: BOOT_RECORD as u64,
                have: b.len() as u64,
            });
        }
        check_magic(b, &BOOT_MAGIC)?;
        check_crc(b, BOOT_CRC)?;
        if get_u32(b, BOOT_RESERVED) != 0 {
            return Err(FormatError::InvalidField {
                field: "reserved",
                offset: BOOT_RESERVED as u64,
                value: get_u32(b, BOOT_RESERVED).to_string(),
            });
        }
        let field = &b[BOOT_ID..BOOT_ID + BOOT_ID_BYTES];
        let len = field.iter().position(|&c| c == 0).unwrap_or(BOOT_ID_BYTES);
        if len == 0 || field[len..].iter().any(|&c| c != 0) {
            return Err(FormatError::InvalidField {
                field: "boot id",
                offset: BOOT_ID as u64,
                value: format!("{:?}", String::from_utf8_lossy(field)),
            });
        }
        Ok(BootRecord {
            generation: get_u64(b, BOOT_GENERATION),
            boot_id: field[..len].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_every_flip() {
        let r = BootRecord {
            generation: 12,
            boot_id: b"0b5e0f4c-8e0a-4c55-9d6c-2f43a5b0c9d1".to_vec(),
        };
        let b = r.encode().unwrap();
        assert_eq!(BootRecord::decode(&b).unwrap(), r);
        for i in 0..b.len() {
            for bit in 0..8 {
                let mut c = b;
                c[i] ^= 1 << bit;
                assert!(BootRecord::decode(&c).is_err(), "flip {i}:{bit}");
            }
        }
        assert!(BootRecord::decode(&b[..63]).is_err());
        for bad in [&b""[..], &[b'a'; 41][..], b"a\0b"] {
            let r = BootRecord {
                generation: 1,
                boot_id: bad.to_vec(),
            };
            assert!(r.encode().is_none());
        }
    }
}
