//! One table's configuration: shape, element type, placement, initialiser.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{ByteSize, MemoryKind};

/// Where a table's rows live.
///
/// In `store.toml`: `"cached"`, or `"pinned-"` and a tier kind
/// (`"pinned-dram"`, `"pinned-pmem"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// Cached: the tiers in order, then SSD (the home of every row).
    #[default]
    Cached,
    /// The whole table held in the first tier of this kind (its budget pays
    /// for the whole table); SSD is written only by `flush`.
    Pinned(MemoryKind),
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Cached => f.write_str("cached"),
            Placement::Pinned(k) => write!(f, "pinned-{k}"),
        }
    }
}

impl FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Placement, String> {
        match s {
            "cached" => Ok(Placement::Cached),
            "pinned-dram" => Ok(Placement::Pinned(MemoryKind::Dram)),
            "pinned-pmem" => Ok(Placement::Pinned(MemoryKind::Pmem)),
            _ => Err(format!(
                "unknown placement {s:?} (cached, pinned-dram or pinned-pmem)"
            )),
        }
    }
}

impl Serialize for Placement {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Placement {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Placement, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
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
        #[serde(serialize_with = "crate::optim::short_f32")]
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
    /// This table's share of the first DRAM tier; by default the capacity
    /// left after pinned tables and explicit shares is split among cached
    /// tables in proportion to their size (as every other tier always is).
    #[serde(default)]
    pub dram_bytes: Option<ByteSize>,
    /// This table's share of the first PMem tier, split like `dram_bytes`.
    #[serde(default)]
    pub pmem_bytes: Option<ByteSize>,
    /// Accept NaN and infinities in values and gradients. Off, they are
    /// refused on the way in; a step's own result is not checked, so a
    /// finite gradient or rate large enough to overflow f32 leaves an
    /// infinite weight or optimizer state (as torch's optimizers do), and
    /// an f16 row holds `inf` for a value past ±65504. Int8 rows saturate
    /// such values to ±`f32::MAX` (`store-format/FORMAT.md`).
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

    /// Accept non-finite values and gradients ([`TableConfig::allow_non_finite`]'s
    /// field: what it checks and what it does not).
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
