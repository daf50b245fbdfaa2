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
//! assert_eq!(cfg.dram.capacity.0, 64 << 20);
//! assert_eq!(cfg.tables[0].placement, Placement::Cached);
//! ```

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::policy::PolicyKind;

/// A byte count; in TOML either an integer or a string such as `"64MiB"`,
/// `"1.5GiB"` or `"100MB"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<ByteSize, String> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let n: f64 = num
            .parse()
            .map_err(|_| format!("{s:?} is not a byte size (try 512MiB)"))?;
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kb" => 1_000,
            "kib" => 1 << 10,
            "m" | "mb" => 1_000_000,
            "mib" => 1 << 20,
            "g" | "gb" => 1_000_000_000,
            "gib" => 1 << 30,
            "t" | "tb" => 1_000_000_000_000,
            "tib" => 1 << 40,
            other => return Err(format!("{s:?}: unknown unit {other:?}")),
        };
        let v = n * mult as f64;
        if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
            return Err(format!("{s:?} is out of range"));
        }
        Ok(ByteSize(v as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [
            ("TiB", 1 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ];
        for (u, m) in UNITS {
            if self.0 >= m && self.0 % m == 0 {
                return write!(f, "{}{u}", self.0 / m);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(ByteSize(n)),
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Where a table's rows live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Cached: DRAM, then PMem, then SSD (the home of every row).
    #[default]
    Cached,
    /// The whole table held in DRAM; SSD is written only by `flush`.
    PinnedDram,
    /// The whole table held in the PMem file; SSD is written only by `flush`.
    PinnedPmem,
}

/// How updated weights are rounded to a table's element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum RoundingMode {
    /// Stochastic rounding for optimizer steps (`step`, `apply_sgd`), so
    /// updates smaller than one unit in the last place still move the
    /// weights in expectation; `update` (assignment) rounds to nearest.
    #[default]
    Stochastic,
    /// Round to nearest, ties to even, everywhere.
    Nearest,
}

/// Initial value of rows never written.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Init {
    /// All zeros.
    Zeros,
    /// Uniform in `[-scale, scale)`.
    Uniform {
        /// Half-width of the interval.
        scale: f32,
    },
}

impl Default for Init {
    fn default() -> Init {
        Init::Uniform { scale: 0.01 }
    }
}

/// One table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableConfig {
    /// Name, 1 to 64 bytes of UTF-8.
    pub name: String,
    /// Rows; ids are `0..rows`.
    pub rows: u64,
    /// Elements per row.
    pub dim: u32,
    /// Element type of the stored weights (`f32`, `f16`, `bf16`, `int8`);
    /// lookups always return f32. See [`crate::precision`].
    #[serde(default)]
    pub elem: crate::Elem,
    /// Rounding of updated weights when `elem` is narrower than f32.
    #[serde(default)]
    pub rounding: RoundingMode,
    /// Initial value of never-written rows.
    #[serde(default)]
    pub init: Init,
    /// Seed of the initialiser; by default derived from the name.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Where the rows live.
    #[serde(default)]
    pub placement: Placement,
    /// This table's share of the DRAM cache; by default the capacity left
    /// after pinned tables and explicit shares is split among cached tables in
    /// proportion to their size.
    #[serde(default)]
    pub dram_bytes: Option<ByteSize>,
    /// This table's share of the PMem cache, split like `dram_bytes`.
    #[serde(default)]
    pub pmem_bytes: Option<ByteSize>,
    /// Accept NaN and infinities in values and gradients.
    #[serde(default)]
    pub allow_non_finite: bool,
    /// The fused optimizer of [`crate::Store::step`]; its state is stored in
    /// each row, after the weights.
    #[serde(default)]
    pub optimizer: crate::Optimizer,
}

impl TableConfig {
    /// A cached f32 table with default initialisation.
    pub fn new(name: impl Into<String>, rows: u64, dim: u32) -> TableConfig {
        TableConfig {
            name: name.into(),
            rows,
            dim,
            elem: crate::Elem::F32,
            rounding: RoundingMode::Stochastic,
            init: Init::default(),
            seed: None,
            placement: Placement::Cached,
            dram_bytes: None,
            pmem_bytes: None,
            allow_non_finite: false,
            optimizer: crate::Optimizer::default(),
        }
    }

    /// Set the element type of the stored weights.
    pub fn elem(mut self, e: crate::Elem) -> Self {
        self.elem = e;
        self
    }

    /// Set the rounding of updated weights.
    pub fn rounding(mut self, r: RoundingMode) -> Self {
        self.rounding = r;
        self
    }

    /// Set the fused optimizer.
    pub fn optimizer(mut self, o: crate::Optimizer) -> Self {
        self.optimizer = o;
        self
    }

    /// Set the placement.
    pub fn placement(mut self, p: Placement) -> Self {
        self.placement = p;
        self
    }

    /// Set the initialiser.
    pub fn init(mut self, init: Init) -> Self {
        self.init = init;
        self
    }

    /// Set the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Accept non-finite values.
    pub fn allow_non_finite(mut self, yes: bool) -> Self {
        self.allow_non_finite = yes;
        self
    }

    /// Give this table an explicit DRAM cache budget.
    pub fn dram_bytes(mut self, b: u64) -> Self {
        self.dram_bytes = Some(ByteSize(b));
        self
    }

    /// Give this table an explicit PMem cache budget.
    pub fn pmem_bytes(mut self, b: u64) -> Self {
        self.pmem_bytes = Some(ByteSize(b));
        self
    }

    /// The seed used: the configured one, or a hash of the name.
    pub fn effective_seed(&self) -> u64 {
        self.seed.unwrap_or_else(|| {
            // FNV-1a of the name.
            self.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
            })
        })
    }

    /// Bytes per row on every tier (weights plus optimizer state, padded).
    pub fn row_bytes(&self) -> u64 {
        embtier_format::TableEntry::row_bytes_for(
            self.elem.format(),
            self.dim,
            self.optimizer.state_bytes(self.dim),
        )
    }
}

/// The DRAM tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DramConfig {
    /// Bytes of row payload the DRAM tier may hold, pinned tables included.
    pub capacity: ByteSize,
    /// Eviction policy of the DRAM cache.
    #[serde(default, deserialize_with = "PolicyKind::deserialize_for_store")]
    pub policy: PolicyKind,
    /// Shards per table; by default chosen from the capacity.
    #[serde(default)]
    pub shards: Option<usize>,
}

impl Default for DramConfig {
    fn default() -> DramConfig {
        DramConfig {
            capacity: ByteSize(256 << 20),
            policy: PolicyKind::Lru,
            shards: None,
        }
    }
}

/// The PMem tier: a file mapped with memmap2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PmemConfig {
    /// The file; by default `pmem.emb` in the store directory. Put it on a
    /// DAX file system (or tmpfs, to emulate) to get byte-addressable memory.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Bytes of row payload the PMem tier may hold.
    pub capacity: ByteSize,
    /// Eviction policy of the PMem cache.
    #[serde(default, deserialize_with = "PolicyKind::deserialize_for_store")]
    pub policy: PolicyKind,
}

pub use crate::io::IoEngineKind;

/// The SSD tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SsdConfig {
    /// The data file or block device; by default `data.emb` in the store directory.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// I/O engine; `EMBTIER_IO_ENGINE` overrides it.
    #[serde(default)]
    pub io_engine: IoEngineKind,
    /// io_uring queue depth: reads in flight per batch.
    #[serde(default = "default_qd")]
    pub queue_depth: u32,
    /// Threads of the psync engine.
    #[serde(default = "default_psync_threads")]
    pub psync_threads: usize,
    /// Open with O_DIRECT (falls back to buffered I/O where refused).
    #[serde(default = "default_true")]
    pub direct_io: bool,
    /// Capacity of the row log, the region after the tables where dirty
    /// rows written back are appended packed (15 rows of 256 bytes a block)
    /// instead of read-modify-writing each row's 4 KiB block. `None` (the
    /// default): half the bytes of the cached tables, at least 16 MiB. `0`
    /// turns it off. Only a data file that is a regular file gets one.
    #[serde(default)]
    pub row_log: Option<ByteSize>,
}

impl SsdConfig {
    /// What the I/O layer needs of these settings to open an engine.
    pub fn engine_options(&self) -> crate::io::EngineOptions {
        crate::io::EngineOptions {
            kind: self.io_engine,
            queue_depth: self.queue_depth,
            psync_threads: self.psync_threads,
            direct_io: self.direct_io,
        }
    }
}

fn default_qd() -> u32 {
    128
}
fn default_psync_threads() -> usize {
    4
}
fn default_true() -> bool {
    true
}

impl Default for SsdConfig {
    fn default() -> SsdConfig {
        SsdConfig {
            path: None,
            io_engine: IoEngineKind::Auto,
            queue_depth: default_qd(),
            psync_threads: default_psync_threads(),
            direct_io: true,
            row_log: None,
        }
    }
}

/// Everything a store needs: its tables and its tiers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The DRAM tier.
    #[serde(default)]
    pub dram: DramConfig,
    /// The PMem tier, if any.
    #[serde(default)]
    pub pmem: Option<PmemConfig>,
    /// The SSD tier.
    #[serde(default)]
    pub ssd: SsdConfig,
    /// The tables.
    #[serde(default)]
    pub tables: Vec<TableConfig>,
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
    /// DRAM capacity in bytes.
    pub fn dram_capacity(mut self, bytes: u64) -> Self {
        self.cfg.dram.capacity = ByteSize(bytes);
        self
    }
    /// DRAM eviction policy.
    pub fn dram_policy(mut self, p: PolicyKind) -> Self {
        self.cfg.dram.policy = p;
        self
    }
    /// DRAM shards per table.
    pub fn dram_shards(mut self, n: usize) -> Self {
        self.cfg.dram.shards = Some(n);
        self
    }
    /// Add a PMem tier of `bytes` at `path` (None: in the store directory).
    pub fn pmem(mut self, path: Option<PathBuf>, bytes: u64, policy: PolicyKind) -> Self {
        self.cfg.pmem = Some(PmemConfig {
            path,
            capacity: ByteSize(bytes),
            policy,
        });
        self
    }
    /// SSD data file path.
    pub fn ssd_path(mut self, p: PathBuf) -> Self {
        self.cfg.ssd.path = Some(p);
        self
    }
    /// Capacity of the row log in bytes (`ssd.row_log` in `store.toml`):
    /// `Some(0)` turns it off, `None` takes the default (half the bytes of
    /// the cached tables, at least 16 MiB). See [`SsdConfig::row_log`].
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
    /// The config.
    pub fn build(self) -> StoreConfig {
        self.cfg
    }
}

/// Largest row count a table may have: ids must leave the top two bits of a
/// u64 free for cache flags.
pub const MAX_ROWS: u64 = 1 << 62;
/// Largest dimension.
pub const MAX_DIM: u32 = 1 << 20;

/// What the config gives one table: its budgets in each tier, in rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TablePlan {
    pub dram_rows: u64,
    pub pmem_rows: u64,
}

impl StoreConfig {
    /// Start a builder.
    pub fn builder() -> StoreConfigBuilder {
        StoreConfigBuilder::default()
    }

    /// Parse `store.toml` text.
    pub fn from_toml(s: &str) -> Result<StoreConfig> {
        toml::from_str(s).map_err(|e| Error::config(e.to_string()))
    }

    /// Render as `store.toml` text.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("a StoreConfig always serialises")
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
        let policies = std::iter::once(("dram", self.dram.policy))
            .chain(self.pmem.as_ref().map(|p| ("pmem", p.policy)));
        for (tier, p) in policies {
            if !p.store_supported() {
                return Err(Error::config(format!(
                    "{tier}.policy {p} runs in simulation only; the store's tiers support lru, fifo, clock, lfu, arc, s3fifo and sieve"
                )));
            }
        }
        for (i, t) in self.tables.iter().enumerate() {
            if t.name.is_empty()
                || t.name.len() > embtier_format::MAX_NAME_LEN
                || t.name.contains('\0')
            {
                return Err(Error::config(format!(
                    "table name {:?} must be 1 to 64 bytes with no NUL",
                    t.name
                )));
            }
            if self.tables[..i].iter().any(|o| o.name == t.name) {
                return Err(Error::config(format!("duplicate table {:?}", t.name)));
            }
            if t.rows == 0 || t.rows > MAX_ROWS {
                return Err(Error::config(format!(
                    "table {:?}: rows {} is not in 1..=2^62",
                    t.name, t.rows
                )));
            }
            if t.dim == 0 || t.dim > MAX_DIM {
                return Err(Error::config(format!(
                    "table {:?}: dim {} is not in 1..=2^20",
                    t.name, t.dim
                )));
            }
            if let Init::Uniform { scale } = t.init {
                if !scale.is_finite() || scale < 0.0 {
                    return Err(Error::config(format!(
                        "table {:?}: init scale {scale} must be finite and >= 0",
                        t.name
                    )));
                }
            }
            t.optimizer
                .validate()
                .map_err(|e| Error::config(format!("table {:?}: {e}", t.name)))?;
            if t.placement == Placement::PinnedPmem && self.pmem.is_none() {
                return Err(Error::config(format!(
                    "table {:?} is pinned to PMem but no [pmem] tier is configured",
                    t.name
                )));
            }
        }
        let dram = split_budget(
            self,
            "dram",
            self.dram.capacity.0,
            Placement::PinnedDram,
            |t| t.dram_bytes,
        )?;
        let pmem = match &self.pmem {
            Some(p) => split_budget(self, "pmem", p.capacity.0, Placement::PinnedPmem, |t| {
                t.pmem_bytes
            })?,
            None => vec![0; self.tables.len()],
        };
        Ok(dram
            .into_iter()
            .zip(pmem)
            .map(|(dram_rows, pmem_rows)| TablePlan {
                dram_rows,
                pmem_rows,
            })
            .collect())
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
/// other cached tables in proportion to their size in bytes.
fn split_budget(
    cfg: &StoreConfig,
    tier: &'static str,
    capacity: u64,
    pinned_here: Placement,
    explicit: impl Fn(&TableConfig) -> Option<ByteSize>,
) -> Result<Vec<u64>> {
    let mut left = capacity;
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
        if t.placement == pinned_here {
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
                return Err(Error::config(format!(
                    "table {:?}: {tier}_bytes {} exceeds the {left} bytes left in the {tier} tier",
                    t.name, b.0
                )));
            }
            left -= b.0;
            out[i] = (b.0 / t.row_bytes()).min(cache_cap(t.rows));
            if out[i] == 0 && tier == "dram" {
                return Err(too_small(t, b.0, t.row_bytes()));
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
        out[i] = (share / t.row_bytes()).min(cache_cap(t.rows));
        // Every cached table needs at least one DRAM row to stage rows through.
        if out[i] == 0 && tier == "dram" {
            return Err(too_small(t, share, t.row_bytes()));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_parse() {
        assert_eq!("64MiB".parse::<ByteSize>().unwrap().0, 64 << 20);
        assert_eq!("1.5GiB".parse::<ByteSize>().unwrap().0, 3 << 29);
        assert_eq!("100MB".parse::<ByteSize>().unwrap().0, 100_000_000);
        assert_eq!("4096".parse::<ByteSize>().unwrap().0, 4096);
        assert!("12 parsecs".parse::<ByteSize>().is_err());
        assert!("".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize(64 << 20).to_string(), "64MiB");
    }

    #[test]
    fn toml_round_trip() {
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("a", 1000, 16).placement(Placement::PinnedDram))
            .table(TableConfig::new("b", 1 << 40, 128).init(Init::Zeros))
            .dram_capacity(1 << 30)
            .pmem(None, 1 << 30, PolicyKind::Sieve)
            .build();
        let text = cfg.to_toml();
        assert_eq!(StoreConfig::from_toml(&text).unwrap(), cfg);
    }

    #[test]
    fn budgets_split_by_size() {
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("small", 100, 1).placement(Placement::PinnedDram))
            .table(TableConfig::new("a", 3000, 1))
            .table(TableConfig::new("b", 1000, 1))
            .dram_capacity(400 + 4 * 400)
            .build();
        let plan = cfg.plan().unwrap();
        assert_eq!(plan[0].dram_rows, 100);
        assert_eq!(plan[1].dram_rows, 300);
        assert_eq!(plan[2].dram_rows, 100);
    }

    #[test]
    fn simulation_only_policies_are_refused() {
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("a", 1000, 4))
            .dram_policy(PolicyKind::Slru)
            .build();
        assert!(cfg
            .plan()
            .unwrap_err()
            .to_string()
            .contains("simulation only"));
    }

    #[test]
    fn tier_too_small_is_an_error() {
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("a", 1000, 128))
            .dram_capacity(100)
            .build();
        assert!(matches!(cfg.plan(), Err(Error::TierTooSmall { .. })));
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("a", 1000, 128).placement(Placement::PinnedDram))
            .dram_capacity(1000)
            .build();
        assert!(matches!(
            cfg.plan(),
            Err(Error::TierTooSmall {
                needed: 512_000,
                ..
            })
        ));
    }
}
