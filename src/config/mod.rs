//! Store configuration: tables, tier capacities and paths, policies, I/O engine.
//!
//! [`StoreConfig`] reads from and writes to `store.toml`; [`StoreConfig::builder`]
//! builds one in code.
//!
//! ```
//! use embtier::{StoreConfig, TableConfig, Placement, PolicyKind};
//! let cfg: StoreConfig = toml::from_str(r#"
//!     [dram]
//!     capacity = "64MiB"
//!     policy = "sieve"
//!
//!     [[tables]]
//!     name = "user"
//!     rows = 1000000
//!     dim = 64
//! "#).unwrap();
//! assert_eq!(cfg.tiers[0].capacity.0, 64 << 20);
//! assert_eq!(cfg.tables[0].placement, Placement::Cached);
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::policy::PolicyKind;

mod bytes;
mod table;
mod tier;

pub use crate::io::IoEngineKind;
pub use bytes::ByteSize;
pub use table::{Init, Placement, RoundingMode, TableConfig};
pub(crate) use tier::overhead_part;
pub use tier::{
    charged_row_bytes, MemoryKind, SsdConfig, TierConfig, CACHE_ROW_OVERHEAD, MAX_TIERS,
    OVERHEAD_SHARE,
};

/// `[dram]` of `store.toml`, the form written before tier lists (and still
/// written for a DRAM tier optionally followed by a PMem tier).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LegacyDram {
    capacity: ByteSize,
    #[serde(default, deserialize_with = "PolicyKind::deserialize_for_store")]
    policy: PolicyKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shards: Option<usize>,
    #[serde(default = "tier::default_true", skip_serializing_if = "tier::is_true")]
    huge_pages: bool,
}

/// `[pmem]` of `store.toml`, the form written before tier lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LegacyPmem {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<PathBuf>,
    capacity: ByteSize,
    #[serde(default, deserialize_with = "PolicyKind::deserialize_for_store")]
    policy: PolicyKind,
}

/// The DRAM tier a config without tiers gets: 256 MiB, LRU.
fn default_tiers() -> Vec<TierConfig> {
    vec![TierConfig::dram(256 << 20, PolicyKind::Lru)]
}

/// Everything a store needs: its tables and its tiers.
///
/// In `store.toml` the tiers are either a `[dram]` section and an optional
/// `[pmem]` section (the form every store so far was written with, and
/// still the form written for such tiers), or a list:
///
/// ```
/// use embtier::{StoreConfig, config::MemoryKind, PolicyKind};
/// let cfg = StoreConfig::from_toml(r#"
///     [[tiers]]
///     kind = "dram"
///     capacity = "64MiB"
///     policy = "sieve"
///
///     [[tiers]]
///     kind = "pmem"
///     capacity = "1GiB"
///     path = "/mnt/pmem0/emb.pmem"
///
///     [[tables]]
///     name = "user"
///     rows = 1000000
///     dim = 64
/// "#)?;
/// assert_eq!(cfg.tiers[1].kind, MemoryKind::Pmem);
/// assert_eq!(cfg.tiers[0].policy, PolicyKind::Sieve);
/// # Ok::<(), embtier::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawStoreConfig", into = "RawStoreConfig")]
pub struct StoreConfig {
    /// The cache tiers, fastest first (1 to [`MAX_TIERS`]; the first holds
    /// at least one row of every cached table).
    pub tiers: Vec<TierConfig>,
    /// Shards per cached table (each shard is one lock over its slice of
    /// every tier); by default chosen from the first tier's capacity.
    pub shards: Option<usize>,
    /// The SSD tier.
    pub ssd: SsdConfig,
    /// The tables.
    pub tables: Vec<TableConfig>,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            tiers: default_tiers(),
            shards: None,
            ssd: SsdConfig::default(),
            tables: Vec::new(),
        }
    }
}

/// `store.toml` as written: either the legacy `[dram]`/`[pmem]` sections
/// or `[[tiers]]` with a top-level `shards`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStoreConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shards: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dram: Option<LegacyDram>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pmem: Option<LegacyPmem>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tiers: Option<Vec<TierConfig>>,
    #[serde(default)]
    ssd: SsdConfig,
    #[serde(default)]
    tables: Vec<TableConfig>,
}

impl TryFrom<RawStoreConfig> for StoreConfig {
    type Error = String;
    fn try_from(r: RawStoreConfig) -> std::result::Result<StoreConfig, String> {
        let legacy = r.dram.is_some() || r.pmem.is_some();
        if legacy && r.tiers.is_some() {
            return Err("give the tiers either as [dram]/[pmem] or as [[tiers]], not both".into());
        }
        if r.dram.as_ref().is_some_and(|d| d.shards.is_some()) && r.shards.is_some() {
            return Err("give shards either in [dram] or at the top level, not both".into());
        }
        let (tiers, shards) = match r.tiers {
            Some(t) => (t, r.shards),
            None => {
                let dram = r.dram.unwrap_or(LegacyDram {
                    capacity: ByteSize(256 << 20),
                    policy: PolicyKind::Lru,
                    shards: None,
                    huge_pages: true,
                });
                let shards = dram.shards.or(r.shards);
                let mut t =
                    vec![TierConfig::dram(dram.capacity.0, dram.policy)
                        .with_huge_pages(dram.huge_pages)];
                if let Some(p) = r.pmem {
                    t.push(TierConfig::pmem(p.path, p.capacity.0, p.policy));
                }
                (t, shards)
            }
        };
        Ok(StoreConfig {
            tiers,
            shards,
            ssd: r.ssd,
            tables: r.tables,
        })
    }
}

impl From<StoreConfig> for RawStoreConfig {
    fn from(c: StoreConfig) -> RawStoreConfig {
        let legacy = match c.tiers.as_slice() {
            // (`[dram]` has no path: a DRAM tier in a file is written as
            // `[[tiers]]`.)
            [d] if d.kind == MemoryKind::Dram && d.path.is_none() => Some((d.clone(), None)),
            [d, p]
                if d.kind == MemoryKind::Dram && d.path.is_none() && p.kind == MemoryKind::Pmem =>
            {
                Some((d.clone(), Some(p.clone())))
            }
            _ => None,
        };
        match legacy {
            Some((d, p)) => RawStoreConfig {
                shards: None,
                dram: Some(LegacyDram {
                    capacity: d.capacity,
                    policy: d.policy,
                    shards: c.shards,
                    huge_pages: d.huge_pages,
                }),
                pmem: p.map(|p| LegacyPmem {
                    path: p.path,
                    capacity: p.capacity,
                    policy: p.policy,
                }),
                tiers: None,
                ssd: c.ssd,
                tables: c.tables,
            },
            None => RawStoreConfig {
                shards: c.shards,
                dram: None,
                pmem: None,
                tiers: Some(c.tiers),
                ssd: c.ssd,
                tables: c.tables,
            },
        }
    }
}

/// Builder of a [`StoreConfig`].
#[derive(Debug, Clone, Default)]
pub struct StoreConfigBuilder {
    cfg: StoreConfig,
}

impl StoreConfigBuilder {
    /// Add a table.
    pub fn table(mut self, t: TableConfig) -> Self {
        self.cfg.tables.push(t);
        self
    }
    /// Capacity in bytes of the first tier (DRAM unless `tiers` set others).
    pub fn dram_capacity(mut self, bytes: u64) -> Self {
        self.cfg.tiers[0].capacity = ByteSize(bytes);
        self
    }
    /// Eviction policy of the first tier.
    pub fn dram_policy(mut self, p: PolicyKind) -> Self {
        self.cfg.tiers[0].policy = p;
        self
    }
    /// Shards per cached table.
    pub fn dram_shards(mut self, n: usize) -> Self {
        self.cfg.shards = Some(n);
        self
    }
    /// Huge pages for the first tier's rows ([`TierConfig::huge_pages`];
    /// on by default).
    pub fn dram_huge_pages(mut self, on: bool) -> Self {
        self.cfg.tiers[0].huge_pages = on;
        self
    }
    /// Set (or replace) the PMem tier below the first: `bytes` at `path`
    /// (None: in the store directory).
    pub fn pmem(mut self, path: Option<PathBuf>, bytes: u64, policy: PolicyKind) -> Self {
        let t = TierConfig::pmem(path, bytes, policy);
        match self
            .cfg
            .tiers
            .iter()
            .position(|t| t.kind == MemoryKind::Pmem)
        {
            Some(i) => self.cfg.tiers[i] = t,
            None => self.cfg.tiers.push(t),
        }
        self
    }
    /// Replace the whole tier list, fastest first.
    pub fn tiers(mut self, tiers: Vec<TierConfig>) -> Self {
        self.cfg.tiers = tiers;
        self
    }
    /// SSD data file path.
    pub fn ssd_path(mut self, p: PathBuf) -> Self {
        self.cfg.ssd.path = Some(p);
        self
    }
    /// Capacity of the row log in bytes (`ssd.row_log` in `store.toml`):
    /// `Some(0)` turns it off, `None` takes the default (the bytes of the
    /// cached tables, at least 16 MiB). See [`SsdConfig::row_log`].
    ///
    /// ```
    /// use embtier::{Store, StoreConfig, TableConfig};
    /// let dir = tempfile::tempdir().unwrap();
    /// let cfg = |log| StoreConfig::builder().table(TableConfig::new("t", 1000, 64)).row_log(log).build();
    /// let off = Store::create(dir.path().join("off"), cfg(Some(0)))?;
    /// assert_eq!(off.stats().row_log_capacity_blocks, 0);
    /// let small = Store::create(dir.path().join("small"), cfg(Some(64 << 10)))?;
    /// assert_eq!(small.stats().row_log_capacity_blocks, 16);
    /// # Ok::<(), embtier::Error>(())
    /// ```
    pub fn row_log(mut self, bytes: Option<u64>) -> Self {
        self.cfg.ssd.row_log = bytes.map(ByteSize);
        self
    }
    /// I/O engine.
    pub fn io_engine(mut self, e: IoEngineKind) -> Self {
        self.cfg.ssd.io_engine = e;
        self
    }
    /// io_uring queue depth.
    pub fn queue_depth(mut self, qd: u32) -> Self {
        self.cfg.ssd.queue_depth = qd;
        self
    }
    /// Threads of the psync engine.
    pub fn psync_threads(mut self, n: usize) -> Self {
        self.cfg.ssd.psync_threads = n;
        self
    }
    /// Use O_DIRECT.
    pub fn direct_io(mut self, yes: bool) -> Self {
        self.cfg.ssd.direct_io = yes;
        self
    }
    /// Write the cached rows' bytes at every checkpoint for warm restarts
    /// at sequential speed ([`SsdConfig::warm_rows`]).
    pub fn warm_rows(mut self, yes: bool) -> Self {
        self.cfg.ssd.warm_rows = yes;
        self
    }

    /// How long a checkpoint beside training rests after each chunk it
    /// writes, as a multiple of the chunk's time
    /// ([`SsdConfig::checkpoint_rest`]).
    pub fn checkpoint_rest(mut self, rest: f64) -> Self {
        self.cfg.ssd.checkpoint_rest = rest;
        self
    }

    /// How full the row log is when a background merge pass begins
    /// ([`SsdConfig::merge_start`]).
    pub fn merge_start(mut self, fraction: f64) -> Self {
        self.cfg.ssd.merge_start = fraction;
        self
    }

    /// Count the store's memory beyond the rows' bytes against the first
    /// DRAM tier ([`SsdConfig::overhead_in_budget`]).
    pub fn overhead_in_budget(mut self, on: bool) -> Self {
        self.cfg.ssd.overhead_in_budget = on;
        self
    }

    /// Live logged rows a merge lists at once
    /// ([`SsdConfig::merge_list_rows`]).
    pub fn merge_list_rows(mut self, rows: usize) -> Self {
        self.cfg.ssd.merge_list_rows = rows;
        self
    }

    /// The config.
    pub fn build(self) -> StoreConfig {
        self.cfg
    }
}

/// Largest row count a table may have: ids must leave the top two bits of a
/// u64 free for cache flags.
pub const MAX_ROWS: u64 = 1 << 62;
/// Largest dimension (the catalog's limit).
pub const MAX_DIM: u32 = embtier_format::MAX_DIM;

/// What the config gives one table: its budgets in each tier, in rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TablePlan {
    /// Rows per tier, in the order of [`StoreConfig::tiers`]: the table's
    /// cache capacity there, or its whole size in the tier it is pinned to.
    pub rows: Vec<u64>,
}

impl StoreConfig {
    /// Every configured file path (`[ssd] path`, each tier's `path`).
    fn paths_mut(&mut self) -> impl Iterator<Item = &mut PathBuf> {
        self.ssd
            .path
            .iter_mut()
            .chain(self.tiers.iter_mut().filter_map(|t| t.path.as_mut()))
    }

    /// The config with each relative file path made absolute against the
    /// working directory, as [`crate::Store::create`] writes it to
    /// `store.toml`: a later open from another directory names the same
    /// files.
    pub(crate) fn with_absolute_paths(mut self) -> Result<StoreConfig> {
        for p in self.paths_mut() {
            if p.is_relative() {
                *p = std::path::absolute(&*p).map_err(|e| Error::io(&*p, "absolute", e))?;
            }
        }
        Ok(self)
    }

    /// The config of a `store.toml` with each relative file path taken as
    /// relative to the store directory `dir`, where the file lives, not to
    /// the opening process's working directory.
    pub(crate) fn with_paths_under(mut self, dir: &std::path::Path) -> StoreConfig {
        for p in self.paths_mut() {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
        self
    }

    /// Each table's rows in each tier, as the store splits the tiers: the
    /// cache capacity of a cached table there, or a pinned table's whole
    /// size in the tier it is pinned to (tables and tiers in config order).
    /// The error of [`crate::Store::create`] for a config it refuses.
    pub fn table_tier_rows(&self) -> Result<Vec<Vec<u64>>> {
        Ok(self.plan()?.into_iter().map(|p| p.rows).collect())
    }

    /// Start a builder.
    pub fn builder() -> StoreConfigBuilder {
        StoreConfigBuilder::default()
    }

    /// Parse `store.toml` text. An error is one line: where (line and
    /// column) and what, without the toml crate's excerpt of the text.
    pub fn from_toml(s: &str) -> Result<StoreConfig> {
        toml::from_str(s).map_err(|e| {
            let at = e.span().and_then(|span| {
                // (A byte offset; `get`, should it fall inside a char.)
                let before = s.get(..span.start.min(s.len()))?;
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                Some(format!("line {line}, column {column}: "))
            });
            let what = e.message().trim().replace('\n', "; ");
            Error::config(format!("{}{what}", at.unwrap_or_default()))
        })
    }

    /// Render as `store.toml` text.
    ///
    /// # Panics
    /// If a setting cannot be written as TOML: an integer past 2^63 - 1
    /// (TOML's integers are i64). A config that [`StoreConfig::validate`]
    /// accepts always renders.
    pub fn to_toml(&self) -> String {
        self.try_to_toml().expect("a StoreConfig always serialises")
    }

    /// [`StoreConfig::to_toml`], its failure an error.
    pub(crate) fn try_to_toml(&self) -> Result<String> {
        toml::to_string_pretty(self)
            .map_err(|e| Error::config(format!("cannot be written as store.toml: {e}")))
    }

    /// Check the config: table shapes, names, and that every tier budget
    /// holds what it must (the errors `Store::create` would give).
    pub fn validate(&self) -> Result<()> {
        self.plan().map(|_| ())
    }

    /// Check the config and split the tier budgets among tables.
    pub(crate) fn plan(&self) -> Result<Vec<TablePlan>> {
        if self.tables.is_empty() {
            return Err(Error::config("no tables"));
        }
        if self.ssd.queue_depth == 0 || self.ssd.queue_depth > 4096 {
            return Err(Error::config(format!(
                "ssd.queue_depth {} is not in 1..=4096",
                self.ssd.queue_depth
            )));
        }
        if self.ssd.psync_threads == 0 || self.ssd.psync_threads > 256 {
            return Err(Error::config(format!(
                "ssd.psync_threads {} is not in 1..=256",
                self.ssd.psync_threads
            )));
        }
        let rest = self.ssd.checkpoint_rest;
        if !rest.is_finite() || !(0.0..=100.0).contains(&rest) {
            return Err(Error::config(format!(
                "ssd.checkpoint_rest {rest} must be between 0 and 100"
            )));
        }
        let start = self.ssd.merge_start;
        if !start.is_finite() || start <= 0.0 || start > 0.75 {
            return Err(Error::config(format!(
                "ssd.merge_start {start} must be more than 0 and at most 0.75"
            )));
        }
        if self.ssd.merge_list_rows == 0 {
            return Err(Error::config("ssd.merge_list_rows 0 must be at least 1"));
        }
        // store.toml's integers are TOML's, i64: a setting past it could
        // not be written (nor read back).
        const TOML_MAX: u64 = i64::MAX as u64;
        let past = |what: &str, v: u64| {
            format!("{what} {v} is past 2^63 - 1, the largest integer store.toml holds")
        };
        if self.ssd.merge_list_rows as u64 > TOML_MAX {
            return Err(Error::config(past(
                "ssd.merge_list_rows",
                self.ssd.merge_list_rows as u64,
            )));
        }
        if let Some(n) = self.shards.filter(|&n| n as u64 > TOML_MAX) {
            return Err(Error::config(past("shards", n as u64)));
        }
        if let Some(t) = self
            .tables
            .iter()
            .find(|t| t.seed.is_some_and(|s| s > TOML_MAX))
        {
            return Err(Error::table_config(
                &t.name,
                past("seed", t.seed.unwrap_or(0)),
            ));
        }
        if self.tiers.is_empty() || self.tiers.len() > MAX_TIERS {
            return Err(Error::config(format!(
                "{} cache tiers; a store has 1 to {MAX_TIERS}",
                self.tiers.len()
            )));
        }
        for (i, tier) in self.tiers.iter().enumerate() {
            if !tier.policy.store_supported() {
                return Err(Error::config(format!(
                    "{}.policy {} runs in simulation only; the store's tiers support lru, fifo, clock, lfu, arc, s3fifo and sieve",
                    self.tier_name(i),
                    tier.policy
                )));
            }
            if tier.path.is_some() && self.tiers[..i].iter().any(|o| o.path == tier.path) {
                return Err(Error::config(format!(
                    "{}: its path is another tier's",
                    self.tier_name(i)
                )));
            }
        }
        for (i, t) in self.tables.iter().enumerate() {
            if t.name.is_empty()
                || t.name.len() > embtier_format::MAX_NAME_LEN
                || t.name.contains('\0')
            {
                return Err(Error::Config {
                    reason: format!("table name {:?} must be 1 to 64 bytes with no NUL", t.name),
                    table: Some(t.name.clone()),
                });
            }
            if self.tables[..i].iter().any(|o| o.name == t.name) {
                return Err(Error::Config {
                    reason: format!("duplicate table {:?}", t.name),
                    table: Some(t.name.clone()),
                });
            }
            if t.rows == 0 || t.rows > MAX_ROWS {
                return Err(Error::table_config(
                    &t.name,
                    format!("rows {} is not in 1..=2^62", t.rows),
                ));
            }
            if t.dim == 0 || t.dim > MAX_DIM {
                return Err(Error::table_config(
                    &t.name,
                    format!("dim {} is not in 1..=2^20", t.dim),
                ));
            }
            if let Init::Uniform { scale } = t.init {
                if !scale.is_finite() || scale < 0.0 {
                    return Err(Error::table_config(
                        &t.name,
                        format!("init scale {scale} must be finite and >= 0"),
                    ));
                }
            }
            t.optimizer
                .validate()
                .map_err(|e| Error::table_config(&t.name, e))?;
            if let Placement::Pinned(kind) = t.placement {
                if self.first_tier_of(kind).is_none() {
                    return Err(Error::Config {
                        reason: format!(
                            "table {:?} is pinned to {kind} but no {kind} tier is configured",
                            t.name
                        ),
                        table: Some(t.name.clone()),
                    });
                }
            }
        }
        let mut rows = vec![Vec::with_capacity(self.tiers.len()); self.tables.len()];
        for i in 0..self.tiers.len() {
            for (r, n) in rows.iter_mut().zip(split_budget(self, i)?) {
                r.push(n);
            }
        }
        Ok(rows.into_iter().map(|rows| TablePlan { rows }).collect())
    }

    /// Index of the first tier of `kind`: where a table pinned to `kind`
    /// lives, and the tier a table's `dram_bytes` or `pmem_bytes` shares.
    pub(crate) fn first_tier_of(&self, kind: MemoryKind) -> Option<usize> {
        self.tiers.iter().position(|t| t.kind == kind)
    }

    /// How errors name tier `i`: its kind where that is unique, else
    /// `tiers[i]`.
    pub(crate) fn tier_name(&self, i: usize) -> String {
        let kind = self.tiers[i].kind;
        if self.tiers.iter().filter(|t| t.kind == kind).count() == 1 {
            kind.name().to_string()
        } else {
            format!("tiers[{i}]")
        }
    }

    /// Table `t`'s explicit share of tier `i`, if it gives one.
    fn explicit_share(&self, t: &TableConfig, i: usize) -> Option<ByteSize> {
        let kind = self.tiers[i].kind;
        if self.first_tier_of(kind) != Some(i) {
            return None;
        }
        match kind {
            MemoryKind::Dram => t.dram_bytes,
            MemoryKind::Pmem => t.pmem_bytes,
        }
    }
}

/// Most rows worth caching for a table of `rows` rows: the table plus 25%
/// slack, because hash sharding never splits rows perfectly evenly, and a
/// shard that overflows evicts even when the whole table would fit.
fn cache_cap(rows: u64) -> u64 {
    rows.saturating_add(rows / 4).saturating_add(64)
}

/// Split one tier's capacity among tables, in rows: pinned tables take their
/// whole size, explicit shares are honoured, and what is left goes to the
/// other cached tables in proportion to their size in bytes, each at least
/// a row in the first tier.
fn split_budget(cfg: &StoreConfig, tier_index: usize) -> Result<Vec<u64>> {
    let tier = cfg.tiers[tier_index].kind.name();
    let first = tier_index == 0;
    let pinned_here = |p: Placement| match p {
        Placement::Pinned(k) => cfg.first_tier_of(k) == Some(tier_index),
        Placement::Cached => false,
    };
    let explicit = |t: &TableConfig| cfg.explicit_share(t, tier_index);
    // What a cached row costs this tier: its bytes, and with
    // `overhead_in_budget` in the first DRAM tier, what the store keeps
    // for it beyond them.
    let charged =
        cfg.ssd.overhead_in_budget && cfg.first_tier_of(MemoryKind::Dram) == Some(tier_index);
    // A DRAM tier in a file (kept across restarts) keeps a stamp per slot
    // beside it, in the same memory (`tier::stamps`).
    let stamps = if charged && cfg.tiers[tier_index].path.is_some() {
        embtier_format::stamps::STAMP_BYTES
    } else {
        0
    };
    let cost = |t: &TableConfig| charged_row_bytes(t.row_bytes(), charged) + stamps;
    let mut left = cfg.tiers[tier_index].capacity.0;
    let mut out = vec![0u64; cfg.tables.len()];
    let too_small = |t: &TableConfig, cap: u64, needed: u64| Error::TierTooSmall {
        tier,
        table: t.name.clone(),
        capacity: cap,
        needed,
        row_bytes: t.row_bytes(),
    };
    // Pinned tables first, then explicit shares.
    for (i, t) in cfg.tables.iter().enumerate() {
        if pinned_here(t.placement) {
            let need = t.rows.saturating_mul(t.row_bytes());
            if need > left {
                return Err(too_small(t, left, need));
            }
            left -= need;
            out[i] = t.rows;
        }
    }
    for (i, t) in cfg.tables.iter().enumerate() {
        if t.placement != Placement::Cached {
            continue;
        }
        if let Some(b) = explicit(t) {
            if b.0 > left {
                return Err(Error::table_config(
                    &t.name,
                    format!(
                        "{tier}_bytes {} exceeds the {left} bytes left in the {tier} tier",
                        b.0
                    ),
                ));
            }
            left -= b.0;
            out[i] = (b.0 / cost(t)).min(cache_cap(t.rows));
            if out[i] == 0 && first {
                return Err(too_small(t, b.0, cost(t)));
            }
        }
    }
    let auto: Vec<usize> = (0..cfg.tables.len())
        .filter(|&i| {
            cfg.tables[i].placement == Placement::Cached && explicit(&cfg.tables[i]).is_none()
        })
        .collect();
    let total: u128 = auto
        .iter()
        .map(|&i| cfg.tables[i].rows as u128 * cfg.tables[i].row_bytes() as u128)
        .sum();
    for &i in &auto {
        let t = &cfg.tables[i];
        let size = t.rows as u128 * t.row_bytes() as u128;
        let share = (left as u128 * size / total.max(1)) as u64;
        out[i] = (share / cost(t)).min(cache_cap(t.rows));
    }
    // Every cached table needs at least one row in the first tier to
    // stage rows through. A table whose share rounds to none (a small
    // table beside a huge one) gets one from what the split left over,
    // else from the largest share that keeps a row of its own.
    if first {
        let used: u64 = auto.iter().map(|&i| out[i] * cost(&cfg.tables[i])).sum();
        let mut spare = left - used;
        for &z in &auto {
            if out[z] > 0 {
                continue;
            }
            let need = cost(&cfg.tables[z]);
            if spare < need {
                let donor = auto
                    .iter()
                    .copied()
                    .filter(|&d| out[d] >= 2)
                    .max_by_key(|&d| out[d] * cost(&cfg.tables[d]));
                let Some(d) = donor else {
                    return Err(too_small(&cfg.tables[z], spare, need));
                };
                let per = cost(&cfg.tables[d]);
                let k = (need - spare).div_ceil(per);
                if out[d] <= k {
                    return Err(too_small(&cfg.tables[z], spare, need));
                }
                out[d] -= k;
                spare += k * per;
            }
            spare -= need;
            out[z] = 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
