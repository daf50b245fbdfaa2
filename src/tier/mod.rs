//! The tiers: DRAM and PMem row caches (one [`cache`] implementation over two
//! kinds of [`slab`] memory), pinned tables, and the SSD home of every row.

pub(crate) mod cache;
pub(crate) mod logindex;
pub(crate) mod logmap;
pub(crate) mod rowlog;
pub(crate) mod slab;
pub(crate) mod ssd;
pub(crate) mod stamps;
