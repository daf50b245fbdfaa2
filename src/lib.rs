//! # embtier
//!
//! A tiered store for the embedding tables of recommendation models: hot rows
//! in DRAM, warm rows in byte-addressable persistent memory (a memory-mapped
//! file), and every row's home on SSD, read in batches through io_uring.
//! In the spirit of MTrainS (Kassa et al.).
//!
//! A table has dense ids `0..rows`. A row never written reads as a
//! deterministic function of (seed, id), so creating a billion-row table
//! costs nothing. A trainer calls [`Store::lookup`] for a batch, then
//! [`Store::apply_sgd`] (or [`Store::update`]) with the results.
//!
//! ```
//! use embtier::{MemoryKind, Store, StoreConfig, TableConfig, Placement, PolicyKind};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let cfg = StoreConfig::builder()
//!     .table(TableConfig::new("user", 10_000_000, 16))           // cached
//!     .table(TableConfig::new("country", 300, 16).placement(Placement::Pinned(MemoryKind::Dram)))
//!     .dram_capacity(8 << 20)
//!     .dram_policy(PolicyKind::Sieve)
//!     .build();
//! let store = Store::create(dir.path().join("store"), cfg).unwrap();
//!
//! let ids = [42, 7, 42];
//! let mut rows = vec![0f32; ids.len() * 16];
//! store.lookup("user", &ids, &mut rows).unwrap();
//! let grads = vec![0.5f32; ids.len() * 16];
//! store.apply_sgd("user", &ids, &grads, 0.1).unwrap(); // id 42 gets the sum of its two gradients
//! store.flush().unwrap();
//! drop(store);
//!
//! let store = Store::open(dir.path().join("store")).unwrap();
//! let mut row = vec![0f32; 16];
//! store.lookup("user", &[42], &mut row).unwrap();
//! assert!((row[0] - (rows[0] - 0.1)).abs() < 1e-6);
//! ```
//!
//! See `docs/architecture.md` for the design and `store-format/FORMAT.md`
//! for the bytes on disk.

pub mod config;
mod durable;
pub mod error;
mod files;
mod fork;
mod hash;
pub mod hint;
pub mod init;
pub mod io;
pub mod memory;
pub mod optim;
pub mod policy;
pub mod pooled;
pub mod precision;
pub mod stats;
mod store;
mod table;
mod tier;

pub use config::{
    ByteSize, Init, IoEngineKind, MemoryKind, Placement, RoundingMode, StoreConfig,
    StoreConfigBuilder, TableConfig, TierConfig,
};
pub use durable::{Checkpoint, Recovery, JOURNAL_FILE};
pub use error::{Error, Result};
pub use optim::Optimizer;
pub use policy::PolicyKind;
pub use pooled::{PooledBatch, PooledGrad, PoolingMode};
pub use precision::Elem;
pub use stats::{LatencySummary, SsdStats, Stats, TableStats, TierStats};
pub use store::{
    CheckpointInProgress, EngineWrapper, OpenOptionsExt, Prefetch, RowLogAtOpen, Store, TableBatch,
    BOOT_FILE, CONFIG_FILE, DATA_FILE, HOT_FILE, HOT_ROWS_FILE, LOCK_FILE, LOG_INDEX_FILE,
    META_FILE, PMEM_FILE,
};
pub use table::{shard_capacities, shard_of};

/// The on-disk format crate.
pub use embtier_format as format;
pub use hash::canonical_name;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
