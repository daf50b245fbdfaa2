//! The written-group list of a checkpoint (FORMAT.md, "Written-group
//! list").

use crate::*;

/// Written-group list field offsets (see FORMAT.md, "Written-group list").
pub mod wl {
    /// `u32` [`super::WRITTEN_MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u32` zero.
    pub const RESERVED: usize = 4;
    /// `u64` the epoch whose in-place writes are listed.
    pub const EPOCH: usize = 8;
    /// `u64` the generation whose commit wrote the list.
    pub const GENERATION: usize = 16;
    /// `u64` groups listed.
    pub const COUNT: usize = 24;
    /// First entry: `u64` first block, `u32` blocks of the group.
    pub const ENTRIES: usize = 32;
    /// Entry size.
    pub const ENTRY_SIZE: usize = 12;
}

/// Magic of a written-group list: `"EWRT"`.
pub const WRITTEN_MAGIC: u32 = u32::from_le_bytes(*b"EWRT");

/// The block groups a checkpoint's epoch wrote in place, written before
/// its commit record so that open can check that each one reached the
/// disk (a group still holding an older epoch is a write a dropped fsync
/// lost). The commit of generation `g` writes file `written-{g mod 2}.emb`,
/// so the list the current superblock names survives a crash inside the
/// next commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenList {
    /// The epoch whose writes are listed (the committed one).
    pub epoch: u64,
    /// The generation whose commit wrote the list.
    pub generation: u64,
    /// `(first block, blocks)` of each group, ascending.
    pub groups: Vec<(u64, u32)>,
}

impl WrittenList {
    /// The file name of the list of generation `g`.
    pub fn file_name(generation: u64) -> String {
        format!("written-{}.emb", generation % 2)
    }

    /// Encode: header, entries, then the CRC-32C of everything before it.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(wl::ENTRIES + wl::ENTRY_SIZE * self.groups.len() + 4);
        WrittenList::write(
            &mut b,
            self.epoch,
            self.generation,
            self.groups.iter().copied(),
        )
        .expect("a Vec takes every write");
        b
    }

    /// Write the encoding of the list of `groups` (ascending) to `w` as
    /// it goes, without holding the list or its bytes: the same bytes as
    /// [`WrittenList::encode`]. Returns the CRC it ends with.
    pub fn write(
        w: &mut impl std::io::Write,
        epoch: u64,
        generation: u64,
        groups: impl ExactSizeIterator<Item = (u64, u32)>,
    ) -> std::io::Result<u32> {
        let mut head = [0u8; wl::ENTRIES];
        put_u32(&mut head, wl::MAGIC, WRITTEN_MAGIC);
        put_u64(&mut head, wl::EPOCH, epoch);
        put_u64(&mut head, wl::GENERATION, generation);
        put_u64(&mut head, wl::COUNT, groups.len() as u64);
        w.write_all(&head)?;
        let mut crc = crc32c::crc32c(&head);
        // Entries a piece at a time: one CRC call and one write a piece.
        let mut piece = [0u8; wl::ENTRY_SIZE * 341];
        let mut n = 0;
        let mut count = 0u64;
        for (first, nb) in groups {
            let at = wl::ENTRY_SIZE * n;
            put_u64(&mut piece, at, first);
            put_u32(&mut piece, at + 8, nb);
            n += 1;
            count += 1;
            if n * wl::ENTRY_SIZE == piece.len() {
                crc = crc32c::crc32c_append(crc, &piece);
                w.write_all(&piece)?;
                n = 0;
            }
        }
        let rest = &piece[..n * wl::ENTRY_SIZE];
        crc = crc32c::crc32c_append(crc, rest);
        w.write_all(rest)?;
        if count != get_u64(&head, wl::COUNT) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "the written list's groups gave {count} entries, their length said {}",
                    get_u64(&head, wl::COUNT)
                ),
            ));
        }
        w.write_all(&crc.to_le_bytes())?;
        Ok(crc)
    }

    /// The CRC an encoded list ends with (what the superblock records).
    pub fn crc_of(encoded: &[u8]) -> u32 {
        get_u32(encoded, encoded.len() - 4)
    }

    /// Decode the list the superblock `sb` names: its CRC, count, epoch and
    /// generation must be the ones the superblock says. Errors name
    /// offsets in the list's file.
    pub fn decode(b: &[u8], sb: &Superblock) -> Result<WrittenList, FormatError> {
        let n = sb.written_groups as usize;
        let len = n
            .checked_mul(wl::ENTRY_SIZE)
            .and_then(|x| x.checked_add(wl::ENTRIES + 4));
        match len {
            Some(len) if b.len() == len => {}
            _ => {
                return Err(FormatError::Truncated {
                    offset: 0,
                    needed: len.unwrap_or(usize::MAX) as u64,
                    have: b.len() as u64,
                })
            }
        }
        let end = b.len() - 4;
        let (stored, computed) = (get_u32(b, end), crc32c::crc32c(&b[..end]));
        if stored != computed || stored != sb.written_crc {
            return Err(FormatError::ChecksumMismatch {
                offset: end as u64,
                stored,
                computed: if stored != computed {
                    computed
                } else {
                    sb.written_crc
                },
            });
        }
        if get_u32(b, wl::MAGIC) != WRITTEN_MAGIC {
            return Err(FormatError::BadMagic {
                offset: 0,
                found: b[..4].to_vec(),
                expected: WRITTEN_MAGIC.to_le_bytes().to_vec(),
            });
        }
        for (field, at, want) in [
            ("written epoch", wl::EPOCH, sb.committed_epoch),
            ("written generation", wl::GENERATION, sb.generation),
            ("written count", wl::COUNT, sb.written_groups),
        ] {
            let v = get_u64(b, at);
            if v != want {
                return Err(FormatError::InvalidField {
                    field,
                    offset: at as u64,
                    value: format!("{v}, the superblock says {want}"),
                });
            }
        }
        Ok(WrittenList {
            epoch: sb.committed_epoch,
            generation: sb.generation,
            groups: (0..n)
                .map(|i| {
                    let at = wl::ENTRIES + wl::ENTRY_SIZE * i;
                    (get_u64(b, at), get_u32(b, at + 8))
                })
                .collect(),
        })
    }
}
