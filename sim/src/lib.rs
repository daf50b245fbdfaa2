//! # embtier-sim
//!
//! The simulation and analysis side of embtier, beside the engine: access
//! traces (the `.etrace` format's reader and writer, importers of the
//! field's trace formats, a synthetic generator), locality analysis and
//! store planning, simulated caches, offline policies (Belady's MIN,
//! set-associative caches), and multi-tier replay with the store's batch
//! semantics, calibration of a machine's tiers, and replay against a real
//! [`embtier::Store`].
//!
//! The simulated caches run the engine's own eviction policies
//! ([`embtier::policy`]), not copies of them, so a simulated hit ratio
//! predicts the store's. The `emb-replay` and `emb-locality` tools are thin
//! shells over this crate.
//!
//! ```
//! use embtier::PolicyKind;
//! use embtier_sim::SimCache;
//!
//! let mut c = SimCache::new(PolicyKind::Lru, 2);
//! assert!(!c.access(1));
//! assert!(!c.access(2));
//! assert!(c.access(1));
//! assert!(!c.access(3)); // evicts 2, the least recently used
//! assert!(!c.access(2));
//! assert!(c.access(3));
//! ```

pub mod cache;
pub mod calibrate;
pub mod densify;
pub mod locality;
pub mod minisim;
pub mod offline;
pub mod policy;
pub mod profile;
pub mod replay;
pub mod table;
pub mod trace;

pub use cache::{
    digest_keys, simulate, simulate_dense, simulate_dense_digested, simulate_dense_keyed,
    DenseCache, SimCache, SimResult, Victim,
};
pub use densify::{densify, FastHash};
pub use policy::SimPolicy;
