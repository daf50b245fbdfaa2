//! Create, open and recovery: the store's lock, the checks of its files,
//! the undo of a failed create, and the row log's restore at open.

use super::*;

/// The store directories this process holds open, by (device, inode) of
/// the directory, so that a path alias (a symlink, a bind mount) is the
/// same store.
pub(super) static OPEN_STORES: parking_lot::Mutex<Vec<(u64, u64)>> =
    parking_lot::Mutex::new(Vec::new());

/// The store's exclusive lock: a POSIX record lock (`fcntl(F_SETLK)`) on
/// the LOCK file against other processes, and [`OPEN_STORES`] against a
/// second open in this one. Released when dropped or when the process dies
/// (so a dead process's lock never blocks).
///
/// Not `flock`: a child forked while the store is open (a DataLoader
/// worker, or any subprocess between its fork and its exec) inherits the
/// descriptor, and an `flock` stays held until every copy is closed, so the
/// store stayed locked after its owner closed it. A record lock belongs to
/// the process and is not inherited. Its one hazard, that closing *any*
/// descriptor of the file releases it, is why a second open in this
/// process is refused by the registry before the file is opened again.
pub(super) struct LockFile {
    file: Option<File>,
    key: (u64, u64),
}

impl LockFile {
    fn acquire(dir: &Path) -> Result<LockFile> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let path = dir.join(LOCK_FILE);
        let meta = std::fs::metadata(dir).map_err(|e| Error::io(dir, "stat", e))?;
        let key = (meta.dev(), meta.ino());
        let mut open = OPEN_STORES.lock();
        if open.contains(&key) {
            return Err(Error::Locked {
                path,
                pid: std::process::id(),
            });
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, "open", e))?;
        // SAFETY: `flock` is a plain C struct for which all-zero bytes are
        // valid; the fields that matter are set below.
        let mut lock: libc::flock = unsafe { std::mem::zeroed() };
        lock.l_type = libc::F_WRLCK as _;
        lock.l_whence = libc::SEEK_SET as _;
        // l_start = 0, l_len = 0: the whole file.
        // SAFETY: fcntl(F_SETLK) on a valid open descriptor with a pointer
        // to an initialised `flock` that outlives the call.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
                // Another process holds it. Closing this descriptor is
                // harmless: this process holds no lock on the file.
                let mut s = String::new();
                let _ = file.read_to_string(&mut s);
                return Err(Error::Locked {
                    path,
                    pid: s.trim().parse().unwrap_or(0),
                });
            }
            return Err(Error::io(&path, "fcntl(F_SETLK)", err));
        }
        file.set_len(0)
            .map_err(|e| Error::io(&path, "truncate", e))?;
        write!(file, "{}", std::process::id()).map_err(|e| Error::io(&path, "write", e))?;
        open.push(key);
        Ok(LockFile {
            file: Some(file),
            key,
        })
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        // Release the record lock (by closing its descriptor) before the
        // registry lets this process open the store again: the other order
        // would let a new open's lock be released by this close.
        let mut open = OPEN_STORES.lock();
        drop(self.file.take());
        open.retain(|k| *k != self.key);
    }
}

pub(super) fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(super) fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, "fsync", e))
}

/// Refuse a data file shorter than the blocks the superblock commits (the
/// tables and the committed row log). A block past the end reads as a hole,
/// that is as a never-written row, so a truncated file would otherwise
/// serve its lost rows as their initial values. A block device is not
/// checked: its length is not the file's.
pub(super) fn check_data_len(data_path: &Path, sb: &Superblock) -> Result<()> {
    let meta = match std::fs::metadata(data_path) {
        Ok(m) => m,
        // A missing file is an error too: the engine's open would create
        // it, all holes.
        Err(e) => return Err(Error::io(data_path, "stat", e)),
    };
    let needed = (sb.data_blocks + sb.rowlog_blocks).saturating_mul(BLOCK_SIZE as u64);
    if meta.is_file() && meta.len() < needed {
        return Err(Error::Format {
            path: data_path.into(),
            source: FormatError::Truncated {
                offset: 0,
                needed,
                have: meta.len(),
            },
        });
    }
    Ok(())
}

/// The row log's capacity in blocks: the config's, or by default half the
/// bytes of the cached tables (at least 16 MiB); none unless the data file
/// is a regular file (a block device has no room after the tables).
pub(super) fn row_log_blocks(config: &StoreConfig, catalog: &Catalog, data_path: &Path) -> u64 {
    let regular = fs::metadata(data_path)
        .map(|m| m.is_file())
        .unwrap_or(false);
    if !regular {
        return 0;
    }
    let bytes = match config.ssd.row_log {
        Some(b) => b.0,
        None => {
            let cached: u64 = catalog
                .tables
                .iter()
                .zip(&config.tables)
                .filter(|(_, t)| t.placement == Placement::Cached)
                .map(|(e, _)| e.block_count * BLOCK_SIZE as u64)
                .sum();
            (cached / 2).max(16 << 20)
        }
    };
    bytes / BLOCK_SIZE as u64
}

/// Recovery of the row log: map every row of its `committed` blocks to the
/// newest block holding it (later blocks are newer). Blocks past the
/// committed length were written after the last checkpoint and are
/// ignored. Any block that is not a sealed, committed row-log block of a
/// table of this store, holding ids in range, is an error naming it.
pub(super) fn restore_row_log(ssd: &Ssd, tables: &[Arc<Table>], sb: &Superblock) -> Result<()> {
    const CHUNK: u64 = 1024;
    let committed = sb.rowlog_blocks;
    let mut last_epoch = 0u64;
    let mut buf = AlignedBuf::new(BLOCK_SIZE);
    let mut pinned = false;
    let mut at = 0u64;
    while at < committed {
        let n = CHUNK.min(committed - at);
        let off = ssd.log_block(at as u32) * BLOCK_SIZE as u64;
        ssd.read_extents_each(&[off], n as usize * BLOCK_SIZE, &mut buf, &mut |_, _| {})?;
        for i in 0..n {
            let b = (at + i) as u32;
            let offset = ssd.log_block(b) * BLOCK_SIZE as u64;
            let raw = &buf.as_slice()[i as usize * BLOCK_SIZE..(i as usize + 1) * BLOCK_SIZE];
            let fmt = |source| Error::Format {
                path: ssd.path().to_path_buf(),
                source,
            };
            let invalid = |field, at: usize, value: String| {
                fmt(FormatError::InvalidField {
                    field,
                    offset: offset + at as u64,
                    value,
                })
            };
            let lb = ssd.check_log_block(b, raw).map_err(fmt)?;
            // Appends carry their checkpoint's epoch, in log order: an
            // older block where a newer append belongs is a lost write.
            let e = embtier_format::block_epoch(raw);
            let want_last = sb.version.has_v4_fields();
            let bad = e < last_epoch
                || (want_last && (b >= sb.rowlog_from) != (e == sb.committed_epoch))
                || (want_last && b < sb.rowlog_from && e > sb.committed_epoch);
            if bad {
                return Err(invalid(
                    "row log block epoch",
                    embtier_format::BLOCK_SIZE - 24,
                    format!(
                        "{e}: out of order for block {b} of a log whose last checkpoint \
                         (epoch {}) appended blocks {}..{} (an append that never \
                         reached the disk)",
                        sb.committed_epoch, sb.rowlog_from, committed
                    ),
                ));
            }
            last_epoch = e;
            let Some(t) = tables.get(lb.table as usize) else {
                return Err(invalid(
                    "table",
                    embtier_format::rowlog::TABLE,
                    format!("{}, but the store has {} tables", lb.table, tables.len()),
                ));
            };
            if lb.row_bytes != t.row_bytes {
                return Err(invalid(
                    "row_bytes",
                    embtier_format::rowlog::ROW_BYTES,
                    format!(
                        "{}, but table {:?} has rows of {}",
                        lb.row_bytes, t.name, t.row_bytes
                    ),
                ));
            }
            for (k, &id) in lb.ids.iter().enumerate() {
                if id >= t.entry.rows {
                    return Err(invalid(
                        "row id",
                        embtier_format::rowlog::IDS + 8 * k,
                        format!("{id}, but table {:?} has {} rows", t.name, t.entry.rows),
                    ));
                }
                pinned |= t.restore_logged(id, b, lb.row(k));
            }
        }
        at += n;
    }
    if pinned || (committed > 0 && ssd.log().capacity == 0) {
        ssd.log().mark_stale();
    }
    Ok(())
}

pub(super) fn entry_for(t: &TableConfig, base_block: u64) -> TableEntry {
    let layout = RowLayout::for_row_bytes(t.row_bytes() as u32);
    let state_bytes = t.optimizer.state_bytes(t.dim);
    let (init, init_scale) = match t.init {
        Init::Zeros => (InitKind::Zeros, 0.0),
        Init::Uniform { scale } => (InitKind::Uniform, scale),
    };
    TableEntry {
        name: t.name.clone(),
        rows: t.rows,
        dim: t.dim,
        elem: t.elem.format(),
        init,
        init_scale,
        seed: t.effective_seed(),
        state_bytes,
        optimizer: t.optimizer.code(),
        base_block,
        block_count: layout.blocks_for(t.rows),
        layout,
    }
}

/// What a `Store::create` has made so far, removed again if it fails: the
/// guard is dropped armed on every error path, and disarmed once the store
/// is assembled. It removes only what this create made: the files a store
/// keeps in its directory (and only once the directory is this create's,
/// see `owns_contents`), data and PMem files at configured paths that did not
/// exist before, and the directories it made, each only if empty.
pub(super) struct CreateUndo {
    dir: PathBuf,
    /// Directories made by this create (the store directory and any missing
    /// parents), outermost first.
    made_dirs: Vec<PathBuf>,
    /// Whether the store files in `dir` are this create's to remove: true
    /// from the moment it tries the store's lock, false again if another
    /// process holds it (another create raced this one into the same empty
    /// directory, and the files are that one's).
    owns_contents: bool,
    /// Files made outside the store's own names: a configured data or PMem
    /// path that did not exist before this create.
    outside: Vec<PathBuf>,
    armed: bool,
}

/// The files a store keeps in its directory.
pub(super) const STORE_FILES: [&str; 7] = [
    LOCK_FILE,
    CONFIG_FILE,
    META_FILE,
    "embtier.meta.tmp",
    DATA_FILE,
    crate::durable::JOURNAL_FILE,
    PMEM_FILE,
];

impl CreateUndo {
    fn new(dir: &Path) -> CreateUndo {
        CreateUndo {
            dir: dir.into(),
            made_dirs: Vec::new(),
            owns_contents: false,
            outside: Vec::new(),
            armed: true,
        }
    }

    /// `fs::create_dir_all(dir)`, remembering which directories it made.
    fn make_dirs(&mut self, dir: &Path) -> Result<()> {
        let missing: Vec<PathBuf> = dir
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .take_while(|a| fs::symlink_metadata(a).is_err())
            .map(Path::to_path_buf)
            .collect();
        self.made_dirs = missing.into_iter().rev().collect();
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, "mkdir", e))
    }

    /// Remember `path` (a configured file outside the store's names) for
    /// removal, unless something is there already.
    fn outside_file(&mut self, path: &Path) {
        if fs::symlink_metadata(path).is_err() {
            self.outside.push(path.into());
        }
    }
}

impl Drop for CreateUndo {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Errors are ignored: this runs on an error path, and the error
        // being returned is the one that matters.
        if self.owns_contents {
            for name in STORE_FILES {
                let _ = fs::remove_file(self.dir.join(name));
            }
        }
        for p in &self.outside {
            let _ = fs::remove_file(p);
        }
        for d in self.made_dirs.iter().rev() {
            let _ = fs::remove_dir(d); // only if empty
        }
    }
}

impl Store {
    /// Create a new store in `dir` (which must not exist or be empty).
    /// Writes `store.toml`, the metadata file, and a sparse data file: no row
    /// data is written, so a table of 10^9 rows is created in constant time.
    ///
    /// A create that fails leaves nothing behind: the directories, files and
    /// the PMem file it made are removed again (a directory that existed
    /// empty before stays), so it can be retried with a corrected config.
    pub fn create(dir: impl AsRef<Path>, config: StoreConfig) -> Result<Store> {
        Store::create_with(dir, config, OpenOptionsExt::default())
    }

    /// [`Store::create`] with extra options.
    pub fn create_with(
        dir: impl AsRef<Path>,
        config: StoreConfig,
        opts: OpenOptionsExt,
    ) -> Result<Store> {
        let dir = dir.as_ref();
        config.plan()?;
        let mut undo = CreateUndo::new(dir);
        if dir.exists() {
            let mut it = fs::read_dir(dir).map_err(|e| Error::io(dir, "read_dir", e))?;
            if it.next().is_some() {
                return Err(Error::AlreadyExists { path: dir.into() });
            }
        } else {
            undo.make_dirs(dir)?;
        }
        undo.owns_contents = true;
        let lock = LockFile::acquire(dir).inspect_err(|e| {
            if matches!(e, Error::Locked { .. }) {
                undo.owns_contents = false;
            }
        })?;
        let mut catalog = Catalog::default();
        let mut next = 0u64;
        for t in &config.tables {
            let e = entry_for(t, next);
            next = next
                .checked_add(e.block_count)
                .ok_or_else(|| Error::config("tables span more than 2^64 blocks"))?;
            catalog.tables.push(e);
        }
        if next > i64::MAX as u64 / BLOCK_SIZE as u64 {
            return Err(Error::config(
                "tables exceed the largest file size (2^63 bytes)",
            ));
        }
        let cat_bytes = catalog.encode();
        let sb = Superblock {
            version: FormatVersion::CURRENT,
            store_id: crate::hash::mix64(
                now_unix() ^ ((std::process::id() as u64) << 32) ^ dir.as_os_str().len() as u64,
            ),
            created_unix: now_unix(),
            table_count: catalog.tables.len() as u32,
            catalog_offset: CATALOG_OFFSET,
            catalog_len: cat_bytes.len() as u64,
            catalog_crc: crc32c::crc32c(&cat_bytes),
            data_blocks: next,
            generation: 0,
            seq: 1,
            committed_epoch: 0,
            next_epoch: 1,
            rowlog_blocks: 0,
            rowlog_from: 0,
            written_groups: 0,
            written_crc: 0,
            counters_generation: 0,
            dead_epochs: Vec::new(),
        };
        let data_path = config
            .ssd
            .path
            .clone()
            .unwrap_or_else(|| dir.join(DATA_FILE));
        if config.ssd.path.is_some() {
            undo.outside_file(&data_path);
        }
        {
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&data_path)
                .map_err(|e| Error::io(&data_path, "create", e))?;
            let is_file = f.metadata().map(|m| m.is_file()).unwrap_or(true);
            if is_file {
                f.set_len(next * BLOCK_SIZE as u64)
                    .map_err(|e| Error::io(&data_path, "set_len", e))?;
            }
            f.sync_all()
                .map_err(|e| Error::io(&data_path, "fsync", e))?;
        }
        let cfg_path = dir.join(CONFIG_FILE);
        fs::write(&cfg_path, config.to_toml()).map_err(|e| Error::io(&cfg_path, "write", e))?;
        // The metadata file last: a directory without it is not a store.
        let meta_path = dir.join(META_FILE);
        let tmp = dir.join(format!("{META_FILE}.tmp"));
        {
            let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, "create", e))?;
            // Two copies of the superblock, then the catalog.
            let mut bytes = sb.encode().to_vec();
            bytes.extend_from_slice(&sb.encode());
            bytes.extend_from_slice(&cat_bytes);
            f.write_all(&bytes)
                .map_err(|e| Error::io(&tmp, "write", e))?;
            f.sync_all().map_err(|e| Error::io(&tmp, "fsync", e))?;
        }
        fs::rename(&tmp, &meta_path).map_err(|e| Error::io(&meta_path, "rename", e))?;
        fsync_dir(dir)?;
        for p in tier_files(dir, &config).iter().flatten() {
            undo.outside_file(p);
        }
        let store = Store::assemble(dir, config, sb, catalog, lock, true, opts)?;
        undo.armed = false;
        Ok(store)
    }

    /// Open the store in `dir` with the tier settings of its `store.toml`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        let dir = dir.as_ref();
        let cfg_path = dir.join(CONFIG_FILE);
        if !dir.join(META_FILE).exists() {
            return Err(Error::NotAStore {
                path: dir.into(),
                reason: format!("no {META_FILE}"),
            });
        }
        let text = fs::read_to_string(&cfg_path).map_err(|e| Error::io(&cfg_path, "read", e))?;
        let cfg = StoreConfig::from_toml(&text).map_err(|e| match e {
            Error::Config { reason } => Error::Config {
                reason: format!("{}: {reason}", cfg_path.display()),
            },
            other => other,
        })?;
        Store::open_with(dir, cfg, OpenOptionsExt::default())
    }

    /// Open the store in `dir` with new tier settings. The tables of `config`
    /// must match the store's catalog (name, rows, dim); placements, budgets,
    /// policies and engine may differ.
    pub fn open_with(
        dir: impl AsRef<Path>,
        config: StoreConfig,
        opts: OpenOptionsExt,
    ) -> Result<Store> {
        let dir = dir.as_ref();
        let meta_path = dir.join(META_FILE);
        let mut bytes = Vec::new();
        match File::open(&meta_path) {
            Ok(mut f) => f
                .read_to_end(&mut bytes)
                .map_err(|e| Error::io(&meta_path, "read", e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotAStore {
                    path: dir.into(),
                    reason: format!("no {META_FILE}"),
                })
            }
            Err(e) => return Err(Error::io(&meta_path, "open", e)),
        };
        let fmt_err = |source: FormatError| Error::Format {
            path: meta_path.clone(),
            source,
        };
        let sb = pick_superblock(&bytes).map_err(|e| match e {
            FormatError::BadMagic { .. } => Error::NotAStore {
                path: dir.into(),
                reason: format!("{}: {e}", meta_path.display()),
            },
            e => fmt_err(e),
        })?;
        let start = sb.catalog_offset.min(bytes.len() as u64) as usize;
        let catalog = Catalog::decode(
            &bytes[start..],
            sb.table_count,
            sb.catalog_offset,
            sb.catalog_crc,
        )
        .map_err(fmt_err)?;
        if catalog.data_blocks() != sb.data_blocks {
            return Err(fmt_err(FormatError::InvalidField {
                field: "data_blocks",
                offset: embtier_format::sb::DATA_BLOCKS as u64,
                value: format!(
                    "{} but the catalog spans {}",
                    sb.data_blocks,
                    catalog.data_blocks()
                ),
            }));
        }
        config.plan()?;
        if config.tables.len() != catalog.tables.len() {
            return Err(Error::config(format!(
                "config has {} tables, the store has {}",
                config.tables.len(),
                catalog.tables.len()
            )));
        }
        for (t, e) in config.tables.iter().zip(&catalog.tables) {
            let mismatch = |stored: String, given: String| Error::ConfigMismatch {
                table: t.name.clone(),
                stored,
                given,
            };
            if t.name != e.name || t.rows != e.rows || t.dim != e.dim {
                return Err(mismatch(
                    format!("table {:?} of {} x {}", e.name, e.rows, e.dim),
                    format!("table {:?} of {} x {}", t.name, t.rows, t.dim),
                ));
            }
            if t.elem.format() != e.elem {
                return Err(mismatch(
                    format!("{:?} weights", e.elem),
                    format!("{:?} weights", t.elem),
                ));
            }
            let code = t.optimizer.code();
            if e.optimizer != OptimizerCode::Unrecorded && e.optimizer != code {
                return Err(mismatch(
                    format!("state of {:?}", e.optimizer),
                    format!("{code:?}"),
                ));
            }
            let need = t.optimizer.state_bytes(t.dim);
            if need != e.state_bytes {
                return Err(mismatch(
                    format!("{} bytes of optimizer state per row", e.state_bytes),
                    format!("an optimizer with {need} bytes of optimizer state per row"),
                ));
            }
        }
        let lock = LockFile::acquire(dir)?;
        Store::assemble(dir, config, sb, catalog, lock, false, opts)
    }

    fn assemble(
        dir: &Path,
        config: StoreConfig,
        superblock: Superblock,
        catalog: Catalog,
        lock: LockFile,
        fresh: bool,
        opts: OpenOptionsExt,
    ) -> Result<Store> {
        let plan = config.plan()?;
        let data_path = config
            .ssd
            .path
            .clone()
            .unwrap_or_else(|| dir.join(DATA_FILE));
        if !fresh {
            check_data_len(&data_path, &superblock)?;
        }
        let (engine, choice) = open_engine(&data_path, &config.ssd.engine_options())?;
        let wrap = |p: &Path, e: Box<dyn IoEngine>| match &opts.wrap_engine {
            Some(w) => w(p, e),
            None => e,
        };
        let engine = wrap(&data_path, engine);
        // Recovery: undo what the last session wrote after its last
        // checkpoint, before anything reads the data file.
        let (dur, recovery) = Durable::open(dir, superblock.clone(), &*engine, &data_path, &wrap)?;
        let log_capacity = row_log_blocks(&config, &catalog, &data_path);
        let ssd = Ssd::new(
            engine,
            data_path,
            choice,
            dur,
            RowLog::new(
                superblock.data_blocks,
                log_capacity,
                superblock.rowlog_blocks,
            ),
        );
        let mut memory = open_tier_memory(dir, &config)?;
        let policies: Vec<_> = config.tiers.iter().map(|t| t.policy).collect();
        let mut tables = Vec::with_capacity(catalog.tables.len());
        for (index, ((entry, cfg), tp)) in catalog
            .tables
            .into_iter()
            .zip(config.tables.iter().cloned())
            .zip(plan)
            .enumerate()
        {
            let pin_tier = match cfg.placement {
                Placement::Pinned(kind) => config.first_tier_of(kind),
                Placement::Cached => None,
            };
            tables.push(Arc::new(Table::new(TableSetup {
                entry,
                cfg,
                tier_rows: tp.rows,
                policies: policies.clone(),
                pin_tier,
                shards: config.shards,
                memory: &mut memory,
                ssd: &ssd,
                fresh,
                index: index as u32,
                rounding_calls: ssd.durable().counters().get(index).copied().unwrap_or(0),
            })?));
        }
        let by_name = tables
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        restore_row_log(&ssd, &tables, &superblock)?;
        Ok(Store {
            dir: dir.into(),
            config,
            tables,
            by_name,
            ssd: Arc::new(ssd),
            superblock,
            recovery,
            log_merges: 0.into(),
            _lock: lock,
        })
    }
}

/// Each tier's file: its configured path, or for the n-th file-backed tier
/// without one `pmem.emb` (n = 0) or `pmem.N.emb` in the store directory;
/// None for a DRAM tier.
pub(crate) fn tier_files(dir: &Path, config: &StoreConfig) -> Vec<Option<PathBuf>> {
    let mut n = 0;
    config
        .tiers
        .iter()
        .map(|t| match t.kind {
            MemoryKind::Dram => None,
            MemoryKind::Pmem => {
                let p = t.path.clone().unwrap_or_else(|| {
                    if n == 0 {
                        dir.join(PMEM_FILE)
                    } else {
                        dir.join(format!("pmem.{n}.emb"))
                    }
                });
                n += 1;
                Some(p)
            }
        })
        .collect()
}

/// Each tier's memory: DRAM as it is, file-backed tiers mapped.
fn open_tier_memory(dir: &Path, config: &StoreConfig) -> Result<Vec<TierMemory>> {
    let files = tier_files(dir, config);
    let mut out = Vec::with_capacity(config.tiers.len());
    for (t, path) in config.tiers.iter().zip(files) {
        out.push(match path {
            None => TierMemory::Dram,
            Some(path) => {
                // A file-backed tier is a cache: its contents do not outlive
                // the process. Its blocks are reserved now: a store into an
                // unallocated page of the mapping on a full file system is a
                // SIGBUS.
                let f = crate::io::reserve::create_reserved(&path, t.capacity.0)?;
                TierMemory::File(
                    PmemFile::map(&f, t.capacity.0 as usize)
                        .map_err(|e| Error::io(&path, "mmap", e))?,
                )
            }
        });
    }
    Ok(out)
}
