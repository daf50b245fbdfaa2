//! The row-log index (`log-index.emb`; FORMAT.md, "Row-log index"): a
//! slot per block of the log's ring naming the ids its last append put
//! there, written beside each append, so that an open after a crash in
//! the same boot rebuilds the log's map from the slots (a few percent of
//! the log's bytes) instead of reading and checking every committed block.
//!
//! The slots go through the page cache and are synced beside the data
//! file before each commit, so that a write-back the kernel failed is
//! seen; the boot id in the header makes any other boot's open read the
//! log. The *kept-through* word says through which checkpoint's commit
//! every appended block's slot was written; a slot write or sync that
//! fails zeroes it for good (until an open rebuilds the index from a
//! read of the log), so an index that missed an append is never trusted.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::io::Faults;

use embtier_format::logindex::{IndexHeader, INDEX_KEPT_THROUGH, SLOTS_AT};

/// An open row-log index.
pub(crate) struct LogIndex {
    file: File,
    path: PathBuf,
    header: IndexHeader,
    /// Every append since the index was made or found true wrote its
    /// slot. Once false it stays false: the kept-through word is 0.
    healthy: AtomicBool,
    /// Faults to inject into the file's reads, writes and syncs (tests).
    faults: Option<Arc<Faults>>,
}

impl LogIndex {
    /// Open the index at `path` for a log described by `want`, trusted
    /// through checkpoint `generation`: `Ok(index)` when the file holds
    /// that header and its kept-through word is `generation` (its slots
    /// of the committed log may be read), else the file made anew (header,
    /// kept-through 0, every slot unwritten) and the reason the old one
    /// was not trusted. Its reads, writes, syncs and length changes take
    /// `faults`' faults.
    pub fn open(
        path: &Path,
        want: IndexHeader,
        generation: u64,
        faults: Option<Arc<Faults>>,
    ) -> std::io::Result<(LogIndex, Result<(), String>)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let ix = LogIndex {
            file,
            path: path.to_path_buf(),
            header: want,
            healthy: AtomicBool::new(true),
            faults,
        };
        let mut head = vec![0u8; SLOTS_AT as usize];
        let found = match ix.read_at(&mut head, 0) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Err("no index (or one cut short)".to_string())
            }
            Err(e) => return Err(e),
            Ok(()) => match IndexHeader::decode(&head) {
                Err(e) => Err(format!("its header: {e}")),
                Ok((h, _)) if h.boot_id != ix.header.boot_id => {
                    Err("written in another boot of the machine".into())
                }
                Ok((h, _)) if h != ix.header => Err(format!(
                    "made for another log ({h:?}, this one is {:?})",
                    ix.header
                )),
                Ok((_, kept)) if kept != generation => Err(format!(
                    "kept through checkpoint {kept}, but the store committed {generation}"
                )),
                Ok(_) => Ok(()),
            },
        };
        if found.is_err() {
            ix.remake()?;
        }
        Ok((ix, found))
    }

    /// Write the file anew for `self.header`: the header block with
    /// kept-through 0, then a slot per ring block, every one unwritten
    /// (a hole reads as zeros, which no slot decodes as).
    pub fn remake(&self) -> std::io::Result<()> {
        let bytes = self
            .header
            .encode()
            .ok_or_else(|| std::io::Error::other("a boot id longer than the header's 40 bytes"))?;
        self.set_len(0)?;
        self.write_at(&bytes, 0)?;
        self.set_len(self.header.file_len())
    }

    /// Bytes of a slot.
    pub fn slot_bytes(&self) -> usize {
        self.header.slot_bytes as usize
    }

    /// The ring the index has a slot per block of.
    pub fn ring(&self) -> u64 {
        self.header.ring
    }

    /// Read the `n` slots from ring block `first` (not past the ring's
    /// end) into `buf`.
    pub fn read_slots(&self, first: u64, n: u64, buf: &mut Vec<u8>) -> std::io::Result<()> {
        buf.resize(n as usize * self.slot_bytes(), 0);
        self.read_at(buf, self.header.slot_offset(first))
    }

    /// Write `slots` (whole slots, encoded) from ring block `first`. A
    /// failed write leaves the index untrustworthy until the next open
    /// makes it anew.
    pub fn write_slots(&self, first: u64, slots: &[u8]) {
        if !self.healthy.load(Ordering::Acquire) {
            return;
        }
        let ok = first + (slots.len() / self.slot_bytes()) as u64 <= self.header.ring
            && self.write_at(slots, self.header.slot_offset(first)).is_ok();
        if !ok {
            self.broken();
        }
    }

    /// The index missed an append: never trust it again (best effort on
    /// the word: a failure to write it leaves the old generation, which
    /// the next commit makes stale).
    pub fn broken(&self) {
        self.healthy.store(false, Ordering::Release);
        let _ = self.write_at(&0u64.to_le_bytes(), INDEX_KEPT_THROUGH as u64);
    }

    /// Before a commit: the slots written so far to the disk, so that a
    /// write-back the kernel failed (and dropped from its page cache) is
    /// seen here, as the data file's are by its sync, and the index is
    /// not trusted after it.
    pub fn sync(&self) {
        if !self.healthy() {
            return;
        }
        let synced = match &self.faults {
            Some(plan) => plan.sync_file(&self.path, &self.file),
            None => self.file.sync_data(),
        };
        if synced.is_err() {
            self.broken();
        }
    }

    /// Whether every append since the index was made wrote its slot.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Checkpoint `generation` committed, its log in a ring of `ring`
    /// blocks: record that the slots are true through it. Where the ring
    /// changed (a merge emptied the log and it took the configured size),
    /// the file is made anew for it first (the committed log is empty).
    pub fn committed(&mut self, generation: u64, ring: u64) {
        if !self.healthy() {
            return;
        }
        if ring != self.header.ring {
            self.header.ring = ring;
            if self.remake().is_err() {
                self.broken();
                return;
            }
        }
        if self
            .write_at(&generation.to_le_bytes(), INDEX_KEPT_THROUGH as u64)
            .is_err()
        {
            self.broken();
        }
    }

    /// Where the index lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        match &self.faults {
            Some(plan) => plan.write_file_at(&self.path, &self.file, buf, offset),
            None => self.file.write_all_at(buf, offset),
        }
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        match &self.faults {
            Some(plan) => plan.set_file_len(&self.path, &self.file, len),
            None => self.file.set_len(len),
        }
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match &self.faults {
            Some(plan) => plan.read_file_at(&self.path, &self.file, buf, offset),
            None => self.file.read_exact_at(buf, offset),
        }
    }
}
