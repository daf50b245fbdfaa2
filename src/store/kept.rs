//! Kept tiers: a file-backed cache tier's rows outlive a clean close.
//!
//! [`Store::close`] checkpoints, then for each cache tier that lives in a
//! file (a PMem tier, or a DRAM tier given a path on tmpfs) whose rows are
//! all clean, writes the file's rows through to it, renames it to
//! `<file>.kept` and writes `<file>.keep` beside it: the store id, the
//! generation, epoch and commit id just committed, and for each cache shard of the
//! tier where its slab lies in the file and which row each slot holds
//! (`embtier_format::kept`, FORMAT.md "Kept tier"). Every clean cached row
//! holds its committed value, so the file is a copy of committed rows.
//!
//! An open takes them back before anything can write the tier: it reads
//! the index and removes it (durably) whatever it holds, so that no later
//! open takes the rows again once they start to change; then, if the index
//! names the checkpoint the open found (store, generation, epoch, commit id), this
//! tier, and a file of the tier's size, it renames the file back and maps
//! it as it is, and each shard whose slab lies where the index says
//! (same tables, shards, offsets, capacities, row sizes: the same tier
//! settings) takes its rows without a read. Otherwise the file is removed
//! and the tier starts empty, as before. The rename keeps the rows out of
//! reach of anything that opens the tier's path meanwhile (an earlier
//! build truncates it at open). A crash at any point leaves either no
//! index (the tier starts empty) or an index whose checkpoint is the
//! committed one and whose file holds its rows.
//!
//! Where no close kept a tier, its slot stamps (`crate::tier::stamps`,
//! FORMAT.md "Slot stamps") may say what a crash left: [`stamps_found`]
//! keeps them only for an open of the same store, tier and boot, and
//! [`stamp_tiers`] gives every file-backed tier's caches their stamps,
//! returning, where the stamps match the caches and were kept through the
//! checkpoint found, the rows they say that checkpoint holds, as a kept
//! tier for [`adopt`].

use embtier_format::kept::KeptTier;
use embtier_format::stamps::{StampHeader, StampRegion};

use crate::tier::stamps::{self, Gen, KeptThrough, StampFile};

use super::open::{fsync_dir, tier_files};
use super::*;

/// `path` with `ext` appended to its name.
fn with(path: &Path, ext: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(ext);
    PathBuf::from(p)
}

/// The files a close leaves for a tier whose file is `path`: its rows
/// (the tier's file, renamed) and the index that names them.
fn kept_paths(path: &Path) -> (PathBuf, PathBuf) {
    (with(path, ".kept"), with(path, ".keep"))
}

/// The slot stamps of the tier whose file is `path` (`crate::tier::stamps`).
pub(super) fn stamps_path(path: &Path) -> PathBuf {
    with(path, ".stamps")
}

/// The directory a file lies in.
fn parent(p: &Path) -> &Path {
    p.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Remove `p` where there is one: a directory that cannot be written must
/// fail on the tier's own file, as before kept tiers.
fn remove_any(p: &Path) -> Result<()> {
    match fs::symlink_metadata(p) {
        Ok(_) => fs::remove_file(p).map_err(|e| Error::io(p, "remove", e)),
        Err(_) => Ok(()),
    }
}

/// At open, before tier `tier`'s memory is made at `path`: take what a
/// close kept of it, if that close committed the checkpoint of `found`,
/// the superblock the open found (None: a create, or a cold open, which
/// take nothing), and the file is `capacity` bytes. The index is removed
/// first, durably, whatever it holds; the rows' file is then renamed
/// back to `path` if taken, else removed.
pub(super) fn take(
    path: &Path,
    tier: usize,
    capacity: u64,
    found: Option<&Superblock>,
) -> Result<Option<KeptTier>> {
    let (rows, index) = kept_paths(path);
    // An index a crash left half written (never renamed into place).
    remove_any(&with(&index, ".tmp"))?;
    let bytes = match fs::read(&index) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(&index, "read", e)),
    };
    if bytes.is_some() {
        fs::remove_file(&index).map_err(|e| Error::io(&index, "remove", e))?;
        fsync_dir(parent(&index))?;
    }
    let kept = bytes.and_then(|b| KeptTier::decode(&b).ok()).filter(|k| {
        found.is_some_and(|sb| {
            sb.commit_id != 0
                && (k.store_id, k.generation, k.epoch, k.commit_id)
                    == (sb.store_id, sb.generation, sb.committed_epoch, sb.commit_id)
        }) && k.tier as usize == tier
            && k.file_len == capacity
            && fs::metadata(&rows).is_ok_and(|m| m.is_file() && m.len() == capacity)
    });
    match kept {
        Some(k) => {
            fs::rename(&rows, path).map_err(|e| Error::io(&rows, "rename", e))?;
            fsync_dir(parent(path))?;
            Ok(Some(k))
        }
        None => remove_any(&rows).map(|()| None),
    }
}

/// At open, before tier `tier`'s memory is made at `path`, where no kept
/// index was taken for it: the header of the tier's stamps, if the open
/// may take rows by them (a crash, or a store dropped without a close):
/// the open found a superblock (`found`; None for a create or a cold
/// open), the stamps name its store, this tier and this boot of the
/// machine, the tier's file has the tier's size and the stamps file the
/// length its header needs. Otherwise the stamps
/// are removed, before the tier's file is made anew, so that no later
/// open reads them beside the new file's bytes.
pub(super) fn stamps_found(
    path: &Path,
    tier: usize,
    capacity: u64,
    found: Option<&Superblock>,
) -> Result<Option<StampHeader>> {
    let sp = stamps_path(path);
    let h = found.and_then(|sb| {
        let boot = crate::durable::boot::current()?;
        stamps::read_header(&sp).filter(|h| {
            h.store_id == sb.store_id
                && h.boot_id == boot
                && h.tier as usize == tier
                && h.file_len == capacity
                && fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == capacity)
                // A stamps file cut short (a full disk, a copy) is a hint
                // lost, made anew, not an open that fails.
                && fs::metadata(&sp).is_ok_and(|m| m.len() == h.file_len_needed())
        })
    });
    if h.is_none() {
        remove_any(&sp)?;
    }
    Ok(h)
}

/// The caches an open carved in tier `tier`, in carving order: (table,
/// shard, offset in the tier's file, capacity, row bytes) of each. What a
/// kept index's and a stamps file's regions must be to be taken.
fn layout(tables: &[Arc<Table>], tier: usize) -> Vec<(u32, u32, Option<u64>, u32, u32)> {
    tables
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            let rb = t.row_bytes as u32;
            t.tier_regions(tier)
                .into_iter()
                .map(move |(s, at, cap)| (i as u32, s, at, cap, rb))
        })
        .collect()
}

/// Rows an open may take by a tier's stamps (after a crash): the
/// regions, as a kept tier at the checkpoint the open found, and the rows
/// the tier held whose bytes changed after it (those it cannot take).
#[derive(Debug)]
pub(super) struct Stamped {
    pub kept: KeptTier,
    pub changed: u64,
}

/// Give every file-backed tier's caches their stamps (`tiers[i]`: tier
/// `i`'s file, if it has one; `found_stamps[i]`: its stamps' header
/// where [`stamps_found`] kept them), moved by `gen`. Where the stamps
/// found are of the caches the open carved (the same regions), they are
/// mapped as they are and what they say the caches hold at checkpoint
/// `sb` comes back, for [`adopt`]; otherwise the stamps are made anew,
/// all empty. A system without a boot id gets no stamps (an open could
/// not tell a crash from a power loss).
pub(super) fn stamp_tiers(
    tables: &[Arc<Table>],
    tiers: &[Option<PathBuf>],
    found_stamps: &[Option<StampHeader>],
    sb: &Superblock,
    gen: &Gen,
    through: &mut Vec<KeptThrough>,
) -> Result<Vec<Option<Stamped>>> {
    let mut out = Vec::with_capacity(tiers.len());
    for (tier, path) in tiers.iter().enumerate() {
        // (A boot id too long for the header's field is none.)
        let boot_id = crate::durable::boot::current()
            .filter(|b| b.len() <= embtier_format::stamps::STAMPS_BOOT_ID_BYTES);
        let (Some(path), Some(boot_id)) = (path, boot_id) else {
            if let Some(p) = path {
                remove_any(&stamps_path(p))?;
            }
            out.push(None);
            continue;
        };
        let regions: Vec<StampRegion> = layout(tables, tier)
            .into_iter()
            .map(|(table, shard, at, capacity, row_bytes)| StampRegion {
                table,
                shard,
                offset: at.unwrap_or(0),
                capacity,
                row_bytes,
            })
            .collect();
        let file_len = fs::metadata(path)
            .map_err(|e| Error::io(path, "stat", e))?
            .len();
        let h = StampHeader {
            store_id: sb.store_id,
            boot_id,
            tier: tier as u32,
            file_len,
            regions,
        };
        let sp = stamps_path(path);
        let same = found_stamps.get(tier).and_then(|f| f.as_ref()) == Some(&h);
        // Taken only if kept up to date through the checkpoint found:
        // else a build that keeps no stamps committed since they were
        // written. Stamps not taken are made anew, all empty.
        let found = match same {
            true => Some(StampFile::open(&sp, &h)?)
                .filter(|f| sb.commit_id != 0 && f.kept_through().get() == sb.commit_id),
            false => None,
        };
        let take = found.is_some();
        let mut file = match found {
            Some(f) => f,
            None => StampFile::create(&sp, &h)?,
        };
        for t in tables {
            t.attach_stamps(tier, &mut file, gen);
        }
        file.kept_through().set(sb.commit_id);
        through.push(file.kept_through());
        if !take {
            out.push(None);
            continue;
        }
        let mut regions = Vec::new();
        let mut changed = 0;
        for t in tables {
            let (r, n) = t.stamped_regions(tier, sb.generation);
            regions.extend(r);
            changed += n;
        }
        out.push(Some(Stamped {
            kept: KeptTier {
                store_id: sb.store_id,
                generation: sb.generation,
                epoch: sb.committed_epoch,
                commit_id: sb.commit_id,
                tier: tier as u32,
                file_len,
                regions,
            },
            changed,
        }));
    }
    Ok(out)
}

/// What an open took from kept tiers.
#[derive(Debug, Default)]
pub(super) struct Taken {
    /// Rows taken, over every tier.
    pub rows: u64,
    /// Per tier: whether its rows were taken (its index matched its
    /// caches, every one of them).
    pub tiers: Vec<bool>,
    /// Per tier: the rows taken.
    pub tier_rows: Vec<u64>,
}

/// Each kept tier's rows into the caches just made for it, where they
/// are its caches one for one: the same tables and shards, their slabs
/// at the same places, of the same capacities and row sizes. A tier
/// whose settings changed starts empty (its file's bytes are left
/// unread).
pub(super) fn adopt(tables: &[Arc<Table>], kept: &[Option<KeptTier>]) -> Taken {
    let mut taken = Taken {
        rows: 0,
        tiers: vec![false; kept.len()],
        tier_rows: vec![0; kept.len()],
    };
    for (tier, k) in kept.iter().enumerate() {
        let Some(k) = k else {
            continue;
        };
        let now = layout(tables, tier);
        let recorded: Vec<_> = k
            .regions
            .iter()
            .map(|r| (r.table, r.shard, Some(r.offset), r.capacity, r.row_bytes))
            .collect();
        if now != recorded {
            continue;
        }
        // Shards are independent: on every core (2.1 M rows of a 512
        // MiB cache took 70 ms on one).
        let regions: Vec<_> = k.regions.iter().collect();
        let per = crate::table::each(regions, |r| {
            tables[r.table as usize].adopt_region(tier, r, k.generation)
        });
        let rows = per.iter().sum::<u64>();
        taken.rows += rows;
        taken.tier_rows[tier] = rows;
        taken.tiers[tier] = true;
    }
    taken
}

impl Store {
    /// Close the store: a [`Store::checkpoint`], then each cache tier that
    /// lives in a file is *kept*: its rows stay in the file, with an
    /// index of them beside it, and the next open of this checkpoint
    /// takes them where they lie instead of reading them back. A DRAM
    /// tier in a file on tmpfs (`[[tiers]] path = "/dev/shm/..."`) is
    /// shared memory, so a process that closes and reopens its store
    /// finds its cache warm at once, as a page cache survives a process
    /// (CacheLib keeps its DRAM cache across a restart the same way).
    /// After a store dropped without a close, or a crash, in the same
    /// boot of the machine, the next open takes back by the tiers' slot
    /// stamps (`crate::tier::stamps`) only the rows whose bytes the
    /// checkpoint it recovers holds; where many rows were written after
    /// it, it also brings the hot rows back from `hot-rows.emb`.
    ///
    /// What the files cost while the store is closed: a tmpfs file holds
    /// its tier's memory until the next open takes it (or removes it) or
    /// the machine restarts.
    ///
    /// A close (and a drop) first waits for the reads of prefetches still
    /// running ([`Store::prefetch_detached`]'s handles may outlive the
    /// store), which install rows and evict others.
    ///
    /// In a process forked from the one that opened the store, a close
    /// only lets go of the copy: nothing is waited for or written.
    pub fn close(self) -> Result<()> {
        if self.is_forked_copy() {
            return Ok(());
        }
        // A detached prefetch's thread (its handle may outlive the store)
        // ends first: it installs rows and evicts others.
        self.prefetching.wait_idle();
        self.checkpoint()?;
        // Nothing may change a cache from here on: the warm-up's
        // read-back and the background threads stop.
        drop(self.warm.lock().take());
        drop(self.merger.lock().take());
        drop(self.sweep.lock().take());
        self.keep_tiers()
    }

    /// Rows this open took back where they lay in file-backed tiers: from
    /// tiers a [`Store::close`] kept, or, after a crash or a store dropped
    /// without a close, the rows the tiers' slot stamps say the recovered
    /// checkpoint holds (0 when it took none: other tier settings, another
    /// boot of the machine, a cold open).
    pub fn rows_kept_at_open(&self) -> u64 {
        self.kept.rows
    }

    /// How this open rebuilt the row log's map: from the row-log index
    /// (after a crash in the same boot of the machine, without reading
    /// the log), or by reading the committed log, and why.
    pub fn row_log_at_open(&self) -> &RowLogAtOpen {
        &self.row_log_at_open
    }

    fn keep_tiers(&self) -> Result<()> {
        let (generation, epoch) = self.ssd.durable().committed();
        let commit_id = self.ssd.durable().commit_id();
        for (tier, path) in tier_files(&self.dir, &self.config).iter().enumerate() {
            let Some(path) = path else {
                continue;
            };
            let mut regions = Vec::new();
            let mut clean = true;
            for t in &self.tables {
                match t
                    .kept_regions(tier)
                    .map_err(|e| Error::io(path, "msync", e))?
                {
                    Some(r) => regions.extend(r),
                    None => clean = false,
                }
            }
            // A row written since the checkpoint (none, unless a
            // write-back failed) leaves the tier to start empty.
            if !clean {
                continue;
            }
            let k = KeptTier {
                store_id: self.superblock.store_id,
                generation,
                epoch,
                commit_id,
                tier: tier as u32,
                file_len: self.config.tiers[tier].capacity.0,
                regions,
            };
            let (rows, index) = kept_paths(path);
            fs::rename(path, &rows).map_err(|e| Error::io(path, "rename", e))?;
            let tmp = with(&index, ".tmp");
            File::create(&tmp)
                .and_then(|mut f| {
                    f.write_all(&k.encode())?;
                    f.sync_all()
                })
                .map_err(|e| Error::io(&tmp, "write", e))?;
            fs::rename(&tmp, &index).map_err(|e| Error::io(&tmp, "rename", e))?;
            fsync_dir(parent(&index))?;
        }
        Ok(())
    }
}
