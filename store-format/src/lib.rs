//! Every byte layout that embtier writes, each with its reader and writer.
//!
//! The byte-level specification is `store-format/FORMAT.md`; every offset it
//! names is a constant here, and `tests/format.rs` in this crate pins them.
//! All integers are little-endian. All checksums are CRC-32C (Castagnoli).
//!
//! Layouts:
//! - [`Superblock`]: blocks 0 and 1 of the metadata file `embtier.meta`
//!   (two copies; the checkpoint commit record).
//! - [`Catalog`] of [`TableEntry`]: the tables, right after the superblocks.
//! - Data blocks: 4 KiB blocks of the SSD data file, each sealed with a
//!   trailer ([`seal_block`], [`check_block`]); rows are placed in them by a
//!   [`RowLayout`].
//! - [`journal`]: the undo journal of the checkpoint protocol.
//! - [`rowlog`]: blocks of the row log, the region of the data file after
//!   the tables where written-back rows are appended packed.
//! - [`hotset`]: the hot set a checkpoint leaves for a warm restart, and
//!   [`hotrows`]: the bytes of those rows, for a restart at that checkpoint.
//!
//! - [`boot`]: the boot that committed the last checkpoint.
//! - [`logindex`]: the ids of each row-log block, for an open after a
//!   crash in the same boot.
//! - [`kept`]: a cache tier a close kept in its file, and [`stamps`]: the
//!   row and generation of each slot of a file-backed tier, kept up to
//!   date, for an open after a crash.
//!
//! Files: `superblock.rs`, `catalog.rs`, `counters.rs` (call counters) and
//! `written.rs` (written-group list) for `embtier.meta` and its companions;
//! `layout.rs` (element types, row maps and layouts) and `block.rs` (block
//! trailers) for the data file; this file the constants, errors and
//! versions they share.

#![forbid(unsafe_code)]

use thiserror::Error;

mod block;
mod catalog;
mod counters;
mod layout;
mod superblock;
mod written;

pub mod boot;
pub mod hotrows;
pub mod hotset;
pub mod journal;
pub mod kept;
pub mod logindex;
pub mod rowlog;
pub mod stamps;
pub mod trace;

pub use block::*;
pub use catalog::*;
pub use counters::*;
pub use layout::*;
pub use superblock::*;
pub use written::*;

/// Size of every on-disk block, in bytes. Data-file offsets are multiples of it.
pub const BLOCK_SIZE: usize = 4096;
/// Bytes of a data block that hold row data; the rest is the trailer.
pub const BLOCK_PAYLOAD: usize = 4072;

/// Offset of the write epoch (u64) in a data block's trailer: the epoch of
/// the checkpoint protocol during which the block was written.
pub const TRAILER_EPOCH: usize = 4072;
/// Offset of the block number (u64) in a data block's trailer.
pub const TRAILER_BLOCK_NO: usize = 4080;
/// Offset of the block magic (u32) in a data block's trailer.
pub const TRAILER_MAGIC: usize = 4088;
/// Offset of the CRC-32C (u32) of bytes `[0, TRAILER_CRC)` of a data block.
pub const TRAILER_CRC: usize = 4092;
/// Magic of a sealed data block: the bytes `EBLK` read as a little-endian u32.
pub const BLOCK_MAGIC: u32 = u32::from_le_bytes(*b"EBLK");

/// Magic at offset 0 of the metadata file.
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"EMBTIER\0";

/// Byte offsets of the two copies of the superblock in the metadata file.
pub const SUPERBLOCK_SLOTS: [u64; 2] = [0, BLOCK_SIZE as u64];
/// Byte offset of the catalog in the metadata file.
pub const CATALOG_OFFSET: u64 = 2 * BLOCK_SIZE as u64;
/// Most dead epoch ranges a superblock holds (see [`sb::DEAD_RANGES`]).
pub const MAX_DEAD_RANGES: usize = 128;
/// Magic of a call-counter slot: `"ECNT"`.
pub const COUNTERS_MAGIC: u32 = u32::from_le_bytes(*b"ECNT");

/// Errors of decoding or validating a layout. The caller adds the file path.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum FormatError {
    /// The magic bytes are not embtier's.
    #[error("bad magic at offset {offset}: found {found:02x?}, expected {expected:02x?}")]
    BadMagic {
        /// Byte offset of the magic.
        offset: u64,
        /// What was found.
        found: Vec<u8>,
        /// What was expected.
        expected: Vec<u8>,
    },
    /// The format version is not one this build reads.
    #[error("unsupported format version {found} (this build reads versions 2 to {supported})")]
    UnsupportedVersion {
        /// Version found on disk.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// A checksum does not match its bytes.
    #[error(
        "checksum mismatch at offset {offset}: stored {stored:#010x}, computed {computed:#010x}"
    )]
    ChecksumMismatch {
        /// Byte offset of the checksummed region.
        offset: u64,
        /// Checksum stored on disk.
        stored: u32,
        /// Checksum of the bytes read.
        computed: u32,
    },
    /// A data block carries another block's number (a misdirected write).
    #[error("block at offset {offset} says it is block {found}, expected {expected}")]
    MisplacedBlock {
        /// Byte offset of the block.
        offset: u64,
        /// Block number in the trailer.
        found: u64,
        /// Block number of the position.
        expected: u64,
    },
    /// Fewer bytes than the layout needs.
    #[error("truncated at offset {offset}: need {needed} bytes, have {have}")]
    Truncated {
        /// Byte offset where the structure starts.
        offset: u64,
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        have: u64,
    },
    /// A field holds a value outside its domain.
    #[error("invalid {field} at offset {offset}: {value}")]
    InvalidField {
        /// Field name.
        field: &'static str,
        /// Byte offset of the field.
        offset: u64,
        /// The value found, rendered.
        value: String,
    },
}

impl FormatError {
    /// The byte offset the error names, if it names one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            FormatError::BadMagic { offset, .. }
            | FormatError::ChecksumMismatch { offset, .. }
            | FormatError::MisplacedBlock { offset, .. }
            | FormatError::Truncated { offset, .. }
            | FormatError::InvalidField { offset, .. } => Some(*offset),
            FormatError::UnsupportedVersion { .. } => None,
        }
    }
}

/// Store format versions this build reads. Version 1 (no checkpoint
/// protocol) is no longer read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatVersion {
    /// Two superblock copies, epochs in data-block trailers, the undo journal.
    V2 = 2,
    /// Version 2 and the row log: the superblock's `rowlog_blocks`, and
    /// row-log blocks after the tables in the data file. A version 2 store
    /// reads as one with an empty row log.
    V3 = 3,
    /// Version 3, dead epoch ranges and the persisted call counters in the
    /// superblock, and the counter slots after the catalog. Versions 2 and
    /// 3 read as stores with no dead epochs and counters at zero.
    V4 = 4,
    /// Version 4 and a row log that wraps: the superblock's `rowlog_start`
    /// and `rowlog_ring`. Older versions read as a log that starts at
    /// block 0 and does not wrap.
    V5 = 5,
}

impl FormatVersion {
    /// The version this build writes.
    pub const CURRENT: FormatVersion = FormatVersion::V5;

    /// Whether the superblock carries version 4's fields (dead epochs,
    /// call counters, `rowlog_from`, the written-group list).
    pub fn has_v4_fields(self) -> bool {
        !matches!(self, FormatVersion::V2 | FormatVersion::V3)
    }

    /// Whether the superblock carries version 5's fields (`rowlog_start`,
    /// `rowlog_ring`).
    pub fn has_v5_fields(self) -> bool {
        self.has_v4_fields() && self != FormatVersion::V4
    }
}

impl TryFrom<u32> for FormatVersion {
    type Error = FormatError;
    fn try_from(v: u32) -> Result<Self, FormatError> {
        match v {
            2 => Ok(FormatVersion::V2),
            3 => Ok(FormatVersion::V3),
            4 => Ok(FormatVersion::V4),
            5 => Ok(FormatVersion::V5),
            found => Err(FormatError::UnsupportedVersion {
                found,
                supported: FormatVersion::CURRENT as u32,
            }),
        }
    }
}

pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// A header's first check: `b` holds at least its `needed` bytes.
pub(crate) fn check_len(b: &[u8], needed: usize) -> Result<(), FormatError> {
    if b.len() < needed {
        return Err(FormatError::Truncated {
            offset: 0,
            needed: needed as u64,
            have: b.len() as u64,
        });
    }
    Ok(())
}

/// A header's second check: `b` begins with its 8-byte `magic` (after
/// [`check_len`]).
pub(crate) fn check_magic(b: &[u8], magic: &[u8; 8]) -> Result<(), FormatError> {
    if b[..8] != *magic {
        return Err(FormatError::BadMagic {
            offset: 0,
            found: b[..8].to_vec(),
            expected: magic.to_vec(),
        });
    }
    Ok(())
}

/// A header's third check: the CRC-32C stored at `crc_at` of `b` is that
/// of every byte before it.
pub(crate) fn check_crc(b: &[u8], crc_at: usize) -> Result<(), FormatError> {
    let stored = get_u32(b, crc_at);
    let computed = crc32c::crc32c(&b[..crc_at]);
    if stored != computed {
        return Err(FormatError::ChecksumMismatch {
            offset: crc_at as u64,
            stored,
            computed,
        });
    }
    Ok(())
}

/// A boot id field of the hint files that are trusted only in the boot
/// that wrote them (stamps, row-log index): ASCII, zero-padded. The id
/// before the padding, or an error naming `offset` where a byte after the
/// first zero is not zero.
pub(crate) fn padded_boot_id(field: &[u8], offset: u64) -> Result<&[u8], FormatError> {
    let n = field.iter().position(|&c| c == 0).unwrap_or(field.len());
    if field[n..].iter().any(|&c| c != 0) {
        return Err(FormatError::InvalidField {
            field: "boot id",
            offset,
            value: format!("{field:?}"),
        });
    }
    Ok(&field[..n])
}

/// Decode the little-endian u32 at `at` (for tests and tools).
pub fn le_u32(b: &[u8], at: usize) -> u32 {
    get_u32(b, at)
}

/// Decode the little-endian u64 at `at` (for tests and tools).
pub fn le_u64(b: &[u8], at: usize) -> u64 {
    get_u64(b, at)
}

/// What the decoders' tests share.
#[cfg(test)]
pub(crate) mod testing {
    /// `b` with its trailing CRC-32C written again over the bytes before
    /// it: a damage the CRC does not catch, for a decoder's own checks.
    pub fn reseal(mut b: Vec<u8>) -> Vec<u8> {
        let n = b.len() - 4;
        let crc = crc32c::crc32c(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// `decode` refuses `b` with any byte flipped, and cut short anywhere.
    pub fn refuses_flips_and_cuts<T, E>(b: &[u8], decode: impl Fn(&[u8]) -> Result<T, E>) {
        for i in 0..b.len() {
            let mut d = b.to_vec();
            d[i] ^= 0x40;
            assert!(decode(&d).is_err(), "byte {i} flipped");
        }
        for n in 0..b.len() {
            assert!(decode(&b[..n]).is_err(), "cut at {n}");
        }
    }
}
