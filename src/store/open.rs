//! Create and open: the catalog and superblock a create writes, and the
//! assembly of tables, tiers and the SSD tier that both end in.

use super::restore::{check_data_len, restore_row_log, row_log_blocks};
use super::undo::CreateUndo;
use super::*;
use crate::table::HotIds;
use embtier_format::kept::KeptTier;
use std::sync::atomic::AtomicU64;

use crate::tier::stamps::Gen;

use super::{claims, kept};

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

impl Store {
    /// Create a new store in `dir` (which must not exist or be empty).
    /// Writes `store.toml`, the metadata file, and a sparse data file: no row
    /// data is written, so a table of 10^9 rows is created in constant time.
    ///
    /// A create that fails leaves nothing behind: the directories, files and
    /// the PMem file it made are removed again (a directory that existed
    /// empty before stays), so it can be retried with a corrected config.
    /// A configured file's lock outside the directory (`<file>.lock`) stays,
    /// as lock files do: removing one another process may be opening would
    /// let two processes lock two files of one name.
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
        // store.toml names the files absolutely: an open from another
        // working directory finds the same ones.
        let config = config.with_absolute_paths()?;
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
            store_id: crate::hash::random_u64(),
            commit_id: crate::hash::random_u64(),
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
            rowlog_start: 0,
            rowlog_ring: 0,
            written_groups: 0,
            written_crc: 0,
            counters_generation: 0,
            dead_epochs: Vec::new(),
        };
        // The configured files, before any is made: locked where outside
        // the directory, and a data file there must be new (or a device):
        // a file another store wrote would serve its rows as this one's.
        let claimed = claims::check(dir, &config)?;
        let outside = claims::lock_outside(&claimed)?;
        let data_path = config
            .ssd
            .path
            .clone()
            .unwrap_or_else(|| dir.join(DATA_FILE));
        if let Ok(m) = fs::metadata(&data_path) {
            if m.is_file() && m.len() > 0 {
                return Err(Error::AlreadyExists { path: data_path });
            }
        }
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
        fs::write(&cfg_path, config.try_to_toml()?)
            .map_err(|e| Error::io(&cfg_path, "write", e))?;
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
            undo.outside_file(&kept::stamps_path(p));
        }
        let faults = opts.faults.clone();
        let mut store = Store::assemble(dir, config, sb, catalog, (lock, outside), true, opts)?;
        store.row_log_at_open = restore_row_log(
            dir,
            &store.ssd,
            &store.tables,
            &store.superblock,
            &mut [],
            0,
            faults.as_ref(),
        )?
        .1;
        undo.armed = false;
        store.start_merger()?;
        Ok(store)
    }

    /// Open the store in `dir` with the tier settings of its `store.toml`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Store::open_ext(dir, OpenOptionsExt::default())
    }

    /// [`Store::open`] with extra options (for example `cold`, which skips
    /// the warm restart).
    pub fn open_ext(dir: impl AsRef<Path>, opts: OpenOptionsExt) -> Result<Store> {
        let dir = dir.as_ref();
        let cfg_path = dir.join(CONFIG_FILE);
        if !dir.join(META_FILE).exists() {
            return Err(Error::NotAStore {
                path: dir.into(),
                reason: format!("no {META_FILE}"),
            });
        }
        let text = fs::read_to_string(&cfg_path).map_err(|e| Error::io(&cfg_path, "read", e))?;
        // A config error, in the parse or in the checks of the settings
        // read (a store.toml edited by hand), names the file.
        let name_file = |e| match e {
            Error::Config { reason, table } => Error::Config {
                reason: format!("{}: {reason}", cfg_path.display()),
                table,
            },
            other => other,
        };
        // A relative path there is the store directory's, not the working
        // directory's.
        let cfg = StoreConfig::from_toml(&text)
            .map_err(name_file)?
            .with_paths_under(dir);
        cfg.plan().map_err(name_file)?;
        Store::open_with(dir, cfg, opts)
    }

    /// Open the store in `dir` with new tier settings. The tables of `config`
    /// must match the store's catalog (name, rows, dim); placements, budgets,
    /// policies and engine may differ. A table's initialiser and seed are
    /// the catalog's whatever `config` says (never-written rows follow
    /// them), and [`Store::config`] reports the catalog's.
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
        // A table more or less: a mismatch naming the first table only
        // one side has.
        let (given, stored) = (config.tables.len(), catalog.tables.len());
        if given > stored {
            let t = &config.tables[stored];
            return Err(Error::ConfigMismatch {
                table: t.name.clone(),
                stored: format!("no table {:?} ({stored} tables)", t.name),
                given: format!(
                    "table {:?} of {} x {} ({given} tables)",
                    t.name, t.rows, t.dim
                ),
            });
        }
        if given < stored {
            let e = &catalog.tables[given];
            return Err(Error::ConfigMismatch {
                table: e.name.clone(),
                stored: format!(
                    "table {:?} of {} x {} ({stored} tables)",
                    e.name, e.rows, e.dim
                ),
                given: format!("no table {:?} ({given} tables)", e.name),
            });
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
        // A table's initialiser is the catalog's (never-written rows
        // follow it): a config that says otherwise is not used, and
        // `config()` reports what holds.
        let mut config = config;
        for (t, e) in config.tables.iter_mut().zip(&catalog.tables) {
            if t.effective_seed() != e.seed {
                // None where the catalog's is the name's own seed.
                t.seed = None;
                if t.effective_seed() != e.seed {
                    t.seed = Some(e.seed);
                }
            }
            let init = match e.init {
                InitKind::Uniform => Init::Uniform {
                    scale: e.init_scale,
                },
                _ => Init::Zeros,
            };
            if t.init != init {
                t.init = init;
            }
        }
        let lock = LockFile::acquire(dir)?;
        // The configured files, before any is opened.
        let claimed = claims::check(dir, &config)?;
        let outside = claims::lock_outside(&claimed)?;
        let cold = opts.cold;
        let faults = opts.faults.clone();
        let mut store = Store::assemble(dir, config, sb, catalog, (lock, outside), false, opts)?;
        // The row log's map and the hot rows are independent (each row's
        // hot copy and its newest logged copy are the same checkpoint's),
        // so the log's reads, which wait on the disk, and the hot rows'
        // installs, which fault the caches' memory in, overlap: a
        // SIGKILLed W5 store opened in 2.3 s one after the other.
        // The hot set's rows whose newest copy is in the log come back
        // from the log's own reads (see `restore_row_log`).
        // Where every cache tier was kept by a close of this checkpoint
        // and taken back, the caches hold what that checkpoint's hot rows
        // and hot set name: nothing to put back or read.
        let all_kept = store.kept.tiers.iter().all(|&k| k);
        let cold = cold || all_kept;
        let plan = if cold { Vec::new() } else { store.hot_plan()? };
        let mut hot_ids: Vec<HotIds> = store.tables.iter().map(|_| HotIds::None).collect();
        for (i, ids) in &plan {
            hot_ids[*i] = store.tables[*i].hot_ids(ids);
        }
        // The hot set's rows to bring back: those it names, less those
        // taken in place (the hot rows then put some back, and the rest
        // are read from the log or home).
        let named: u64 = plan.iter().map(|(_, ids)| ids.len() as u64).sum();
        let need = named.saturating_sub(store.kept.rows);
        let (put, at_open) = std::thread::scope(|scope| {
            let hot = (!cold).then(|| {
                std::thread::Builder::new()
                    .name("embtier-hot-rows".into())
                    .spawn_scoped(scope, || store.load_hot_rows())
            });
            let restored = restore_row_log(
                dir,
                &store.ssd,
                &store.tables,
                &store.superblock,
                &mut hot_ids,
                need,
                faults.as_ref(),
            );
            let put = match hot {
                None => 0,
                Some(Ok(h)) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                // No thread to be had: the hot rows after the log.
                Some(Err(_)) if restored.is_ok() => store.load_hot_rows(),
                Some(Err(_)) => 0,
            };
            restored.map(|(logged, at_open)| (put + logged, at_open))
        })?;
        store.row_log_at_open = at_open;
        drop(hot_ids);
        store.start_sweep()?;
        store.start_merger()?;
        if !cold {
            store.read_hot_set(put + store.kept.rows, plan)?;
        } else if all_kept {
            store.set_warm_done(store.kept.rows);
        }
        Ok(store)
    }

    fn assemble(
        dir: &Path,
        config: StoreConfig,
        superblock: Superblock,
        catalog: Catalog,
        (lock, tier_locks): (LockFile, Vec<LockFile>),
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
                &superblock,
                config.ssd.merge_list_rows,
                config.ssd.merge_start,
            ),
        );
        let found = (!fresh && !opts.cold).then_some(&superblock);
        let TierFiles {
            mut memory,
            kept,
            stamps,
            paths,
        } = open_tier_memory(dir, &config, found)?;
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
                cold_fill: config.ssd.cold_fill,
                overhead_in_budget: config.ssd.overhead_in_budget,
                memory: &mut memory,
                ssd: &ssd,
                fresh,
                index: index as u32,
                rounding_calls: ssd.durable().counters().get(index).copied().unwrap_or(0),
            })?));
        }
        // Every write to a slot from now on is first committed by the
        // next checkpoint (see `Store::begin`, which moves this).
        let stamp_gen: Gen = Arc::new(AtomicU64::new(superblock.generation + 1));
        let mut kept_through = Vec::new();
        let stamped = kept::stamp_tiers(
            &tables,
            &paths,
            &stamps,
            &superblock,
            &stamp_gen,
            &mut kept_through,
        )?;
        // A close's index, else what the stamps say a crash left.
        let mut crashed = vec![None; stamped.len()];
        let kept: Vec<Option<KeptTier>> = kept
            .into_iter()
            .zip(stamped)
            .enumerate()
            .map(|(i, (k, s))| {
                k.or_else(|| {
                    s.map(|s| {
                        crashed[i] = Some(s.changed);
                        s.kept
                    })
                })
            })
            .collect();
        let mut kept = kept::adopt(&tables, &kept);
        for (i, changed) in crashed.iter().enumerate() {
            // A tier that lost more than an eighth of its rows to writes
            // after the checkpoint does not stand for the hot rows: the
            // open puts those back as well, into the slots left free.
            if changed.is_some_and(|c| c.saturating_mul(8) > kept.tier_rows[i]) {
                kept.tiers[i] = false;
            }
        }

        let by_name = tables
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(Store {
            dir: dir.into(),
            config,
            tables,
            by_name,
            ssd: Arc::new(ssd),
            superblock,
            recovery,
            log_merges: 0.into(),
            log_passes: 0.into(),
            prefetching: Default::default(),
            warm: parking_lot::Mutex::new(None),
            sweep: parking_lot::Mutex::new(None),
            merger: parking_lot::Mutex::new(None),
            kept,
            stamp_gen,
            kept_through,
            row_log_at_open: RowLogAtOpen::default(),
            _tier_locks: tier_locks,
            _lock: lock,
            opened_in: (crate::fork::generation(), std::process::id()),
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
        .map(|t| {
            if !t.kind.file_backed() {
                // A DRAM tier lives in a file only where given one.
                return t.path.clone();
            }
            let p = t.path.clone().unwrap_or_else(|| {
                if n == 0 {
                    dir.join(PMEM_FILE)
                } else {
                    dir.join(format!("pmem.{n}.emb"))
                }
            });
            n += 1;
            Some(p)
        })
        .collect()
}

/// Each tier's memory, its file (if any) at [`tier_files`]' path; with
/// `found`, the superblock an open found, each file a close kept for that
/// checkpoint is taken as it is ([`kept::take`]), and what it recorded
/// comes back beside the memory (`None` for a tier made anew).
fn open_tier_memory(
    dir: &Path,
    config: &StoreConfig,
    found: Option<&Superblock>,
) -> Result<TierFiles> {
    let mut out = TierFiles::default();
    // (A tier file outside the store's directory was locked before:
    // `claims::lock_outside`.)
    for (i, (t, path)) in config.tiers.iter().zip(tier_files(dir, config)).enumerate() {
        let k = match &path {
            Some(p) => kept::take(p, i, t.capacity.0, found)?,
            None => None,
        };
        // No kept index: the stamps may say what a crash left.
        let stamps = match &path {
            Some(p) if k.is_none() => kept::stamps_found(p, i, t.capacity.0, found)?,
            Some(p) => {
                // The index wins; the stamps are made anew.
                kept::stamps_found(p, i, t.capacity.0, None)?;
                None
            }
            None => None,
        };
        let as_it_is = k.is_some() || stamps.is_some();
        out.memory
            .push(TierMemory::open(t, path.as_deref(), as_it_is)?);
        out.kept.push(k);
        out.stamps.push(stamps);
        out.paths.push(path);
    }
    Ok(out)
}

/// The tiers' memory an open made, and what it found of earlier runs.
#[derive(Default)]
struct TierFiles {
    memory: Vec<TierMemory>,
    /// Per tier, what a close kept of it ([`kept::take`]).
    kept: Vec<Option<KeptTier>>,
    /// Per tier, the header of stamps a crash left ([`kept::stamps_found`]).
    stamps: Vec<Option<embtier_format::stamps::StampHeader>>,
    /// Per tier, its file.
    paths: Vec<Option<PathBuf>>,
}
