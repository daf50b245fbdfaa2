//! The names of a store directory's files (FORMAT.md, "Files of a store
//! directory"): a leaf, so that every layer may name them.

/// Metadata file: superblock and catalog.
pub const META_FILE: &str = "embtier.meta";
/// Tier configuration, editable between opens.
pub const CONFIG_FILE: &str = "store.toml";
/// Default SSD data file.
pub const DATA_FILE: &str = "data.emb";
/// Default PMem file.
pub const PMEM_FILE: &str = "pmem.emb";
/// Lock file.
pub const LOCK_FILE: &str = "LOCK";
/// Journal file name.
pub const JOURNAL_FILE: &str = "journal.emb";
/// The hot set: the rows each cache tier held at the last checkpoint, read
/// back at open (a warm restart). A hint: losing it costs only time.
pub const HOT_FILE: &str = "hot.emb";
/// The hot rows: the bytes of the rows the cache tiers held at the last
/// checkpoint, put back by an open at that checkpoint. A hint, like
/// [`HOT_FILE`].
pub const HOT_ROWS_FILE: &str = "hot-rows.emb";
/// The boot record: which boot of the machine committed the last
/// checkpoint (the written-group check is skipped in that boot). A hint.
pub const BOOT_FILE: &str = "boot.emb";
/// The row-log index: the ids of each block of the row log's ring,
/// written beside each append, from which an open after a crash in the
/// same boot rebuilds the log's map without reading the log. A hint.
pub const LOG_INDEX_FILE: &str = "log-index.emb";
/// The start of a background merge pass's spill files
/// (`merge-spill-<table>-<range>.tmp`): the live rows of the pass's log
/// blocks, one file per range of ids, removed when the pass is done with
/// them (and by the next open, after a crash). Never the only copy.
pub const MERGE_SPILL_PREFIX: &str = "merge-spill-";
