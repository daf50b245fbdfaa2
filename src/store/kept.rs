//! Kept tiers: a file-backed cache tier's rows outlive a clean close.
//!
//! [`Store::close`] checkpoints, then for each cache tier that lives in a
//! file (a PMem tier, or a DRAM tier given a path on tmpfs) whose rows are
//! all clean, writes the file's rows through to it, renames it to
//! `<file>.kept` and writes `<file>.keep` beside it: the store id, the
//! generation and epoch just committed, and for each cache shard of the
//! tier where its slab lies in the file and which row each slot holds
//! (`embtier_format::kept`, FORMAT.md "Kept tier"). Every clean cached row
//! holds its committed value, so the file is a copy of committed rows.
//!
//! An open takes them back before anything can write the tier: it reads
//! the index and removes it (durably) whatever it holds, so that no later
//! open takes the rows again once they start to change; then, if the index
//! names the checkpoint the open found (store, generation, epoch), this
//! tier, and a file of the tier's size, it renames the file back and maps
//! it as it is, and each shard whose slab lies where the index says
//! (same tables, shards, offsets, capacities, row sizes: the same tier
//! settings) takes its rows without a read. Otherwise the file is removed
//! and the tier starts empty, as before. The rename keeps the rows out of
//! reach of anything that opens the tier's path meanwhile (an earlier
//! build truncates it at open). A crash at any point leaves either no
//! index (the tier starts empty) or an index whose checkpoint is the
//! committed one and whose file holds its rows.

use embtier_format::kept::KeptTier;

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
            (k.store_id, k.generation, k.epoch) == (sb.store_id, sb.generation, sb.committed_epoch)
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

/// What an open took from kept tiers.
#[derive(Debug, Default)]
pub(super) struct Taken {
    /// Rows taken, over every tier.
    pub rows: u64,
    /// Per tier: whether its rows were taken (its index matched its
    /// caches, every one of them).
    pub tiers: Vec<bool>,
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
    };
    for (tier, k) in kept.iter().enumerate() {
        let Some(k) = k else {
            continue;
        };
        let now: Vec<_> = tables
            .iter()
            .enumerate()
            .flat_map(|(i, t)| {
                let rb = t.row_bytes as u32;
                t.tier_regions(tier)
                    .into_iter()
                    .map(move |(s, at, cap)| (i as u32, s, at, cap, rb))
            })
            .collect();
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
        let per = crate::table::each(regions, |r| tables[r.table as usize].adopt_region(tier, r));
        taken.rows += per.iter().sum::<u64>();
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
    /// Dropping a store instead keeps nothing; so does a crash, and
    /// the open then brings the hot rows back from `hot-rows.emb`.
    ///
    /// What the files cost while the store is closed: a tmpfs file holds
    /// its tier's memory until the next open takes it (or removes it) or
    /// the machine restarts.
    pub fn close(self) -> Result<()> {
        self.checkpoint()?;
        // Nothing may change a cache from here on: the warm-up's
        // read-back and the background threads stop.
        drop(self.warm.lock().take());
        drop(self.merger.lock().take());
        drop(self.sweep.lock().take());
        self.keep_tiers()
    }

    /// Rows this open took from tiers a [`Store::close`] kept (0 when it
    /// took none: a store dropped without a close, a crash, other tier
    /// settings, a cold open).
    pub fn rows_kept_at_open(&self) -> u64 {
        self.kept.rows
    }

    fn keep_tiers(&self) -> Result<()> {
        let (generation, epoch) = self.ssd.durable().committed();
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
