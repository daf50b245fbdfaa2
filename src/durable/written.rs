//! The written-group check, deferred: the groups the last checkpoint wrote
//! in place must hold its epoch (FORMAT.md, "Written-group list"). Open
//! only loads the list; a read of a listed group checks it on the spot,
//! and a sweep (a background thread after open, finished by the next
//! checkpoint before it commits) checks the rest in large sequential
//! reads. So open does not read every group a large checkpoint wrote (a
//! merge or a bulk load writes them all) before serving, and no listed
//! group is served, or its obligation dropped by a later commit, unchecked.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use embtier_format::{
    block_epoch, check_block, BlockState, FormatError, Superblock, WrittenList, BLOCK_SIZE,
    TRAILER_EPOCH,
};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::io::{AlignedBuf, IoEngine};

/// Blocks one sweep step reads at most (16 MiB).
const STEP_BLOCKS: u64 = 4096;

/// The listed groups not yet checked: a bit per data-file block, set at
/// each listed group's first block (an eighth of a byte per 4 KiB of
/// tables).
pub(crate) struct Unchecked {
    /// The epoch the list's groups must hold: the committed epoch.
    epoch: u64,
    bits: Vec<AtomicU64>,
    /// Listed groups not yet checked.
    left: AtomicU64,
    /// The sweep's next block; the lock serialises sweep steps.
    cursor: Mutex<u64>,
}

impl Unchecked {
    /// Load the list the superblock names (a missing, cut or damaged one
    /// fails open, naming the file), or `None` when the last checkpoint
    /// wrote nothing in place.
    pub(crate) fn load(dir: &Path, sb: &Superblock) -> Result<Option<Unchecked>> {
        if sb.written_groups == 0 {
            return Ok(None);
        }
        let path = dir.join(WrittenList::file_name(sb.generation));
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, "read", e))?;
        let list = WrittenList::decode(&bytes, sb).map_err(|source| Error::Format {
            path: path.clone(),
            source,
        })?;
        let blocks = sb.data_blocks;
        let bits: Vec<AtomicU64> = (0..blocks.div_ceil(64))
            .map(|_| AtomicU64::new(0))
            .collect();
        for &(first, _) in &list.groups {
            if first >= blocks {
                return Err(Error::Format {
                    path,
                    source: FormatError::InvalidField {
                        field: "written group",
                        offset: 0,
                        value: "a group past the tables".into(),
                    },
                });
            }
            bits[(first / 64) as usize].fetch_or(1 << (first % 64), Ordering::Relaxed);
        }
        Ok(Some(Unchecked {
            epoch: sb.committed_epoch,
            bits,
            left: AtomicU64::new(list.groups.len() as u64),
            cursor: Mutex::new(0),
        }))
    }

    /// Groups listed and not yet checked.
    pub(crate) fn left(&self) -> u64 {
        self.left.load(Ordering::Relaxed)
    }

    fn listed(&self, first: u64) -> bool {
        self.bits
            .get((first / 64) as usize)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (first % 64)) != 0)
    }

    fn clear(&self, first: u64) {
        let bit = 1 << (first % 64);
        if self.bits[(first / 64) as usize].fetch_and(!bit, Ordering::Relaxed) & bit != 0 {
            self.left.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The check of the first block `blk` of a group at block `first`, as
    /// read: `Err` when the group is listed and holds a hole or an older
    /// committed epoch (a write that never reached the disk). A block that
    /// fails its own checks (torn, decayed) is left to the read rules, as
    /// is a dead epoch's. A group that passes is not checked again.
    /// `dead`: the store's dead epochs (a block of one is the read rules'
    /// to refuse).
    pub(crate) fn check(
        &self,
        first: u64,
        blk: &[u8],
        dead: &[(u64, u64)],
    ) -> std::result::Result<(), FormatError> {
        if !self.listed(first) {
            return Ok(());
        }
        let sealed = match check_block(blk, first) {
            Ok(BlockState::Sealed) => true,
            Ok(BlockState::Hole) => false,
            Err(_) => return Ok(()),
        };
        let e = if sealed { block_epoch(blk) } else { 0 };
        let dead = dead.iter().any(|&(a, b)| a <= e && e <= b);
        if sealed && (e >= self.epoch || dead) {
            self.clear(first);
            return Ok(());
        }
        Err(FormatError::InvalidField {
            field: "epoch",
            offset: first * BLOCK_SIZE as u64 + TRAILER_EPOCH as u64,
            value: if sealed {
                format!(
                    "{e}, but the last checkpoint (epoch {}) wrote this group: \
                     a write that never reached the disk",
                    self.epoch
                )
            } else {
                format!(
                    "a hole, but the last checkpoint (epoch {}) wrote this group: \
                     a write that never reached the disk",
                    self.epoch
                )
            },
        })
    }

    /// One step of the sweep: read the listed groups' first blocks from
    /// the cursor on, at most [`STEP_BLOCKS`] blocks' span
    /// ([`crate::io::read_windowed`]), and check them.
    /// Returns whether the sweep is done.
    pub(crate) fn sweep_step(
        &self,
        data: &dyn IoEngine,
        data_path: &Path,
        dead: &[(u64, u64)],
    ) -> Result<bool> {
        let mut cursor = self.cursor.lock();
        let end = self.bits.len() as u64 * 64;
        let mut firsts: Vec<u64> = Vec::new();
        let mut b = *cursor;
        while b < end && firsts.len() < STEP_BLOCKS as usize {
            let w = self.bits[(b / 64) as usize].load(Ordering::Relaxed) >> (b % 64);
            if w == 0 {
                b = (b / 64 + 1) * 64;
                continue;
            }
            let at = b + w.trailing_zeros() as u64;
            if !firsts.is_empty() && at >= firsts[0] + STEP_BLOCKS {
                break;
            }
            firsts.push(at);
            b = at + 1;
        }
        if firsts.is_empty() {
            *cursor = end;
            return Ok(true);
        }
        // Close together, they are read in a few sequential reads.
        let offsets: Vec<u64> = firsts.iter().map(|&f| f * BLOCK_SIZE as u64).collect();
        let mut buf = AlignedBuf::new(offsets.len() * BLOCK_SIZE);
        buf.poison(offsets.len() * BLOCK_SIZE);
        crate::io::read_windowed(data, &offsets, BLOCK_SIZE, &mut buf, &mut |_, _| {})
            .map_err(|f| f.into_error(data_path))?;
        for (i, &f) in firsts.iter().enumerate() {
            self.check(
                f,
                &buf.as_slice()[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE],
                dead,
            )
            .map_err(|source| Error::Format {
                path: data_path.into(),
                source,
            })?;
        }
        *cursor = firsts[firsts.len() - 1] + 1;
        Ok(false)
    }
}
