//! The library's error type.

use std::path::PathBuf;

use embtier_format::FormatError;

/// Result alias for embtier.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every way an embtier call can fail. Each variant carries the facts a user
/// needs to act on it: the table, the id, the limit, the path, the offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No table of this name exists in the store.
    #[error("unknown table {name:?}")]
    UnknownTable {
        /// The name asked for.
        name: String,
    },
    /// A row id is not below the table's row count.
    #[error("table {table:?}: id {id} out of range (table has {rows} rows)")]
    IdOutOfRange {
        /// Table name.
        table: String,
        /// The offending id.
        id: u64,
        /// Rows of the table.
        rows: u64,
    },
    /// A buffer's length does not match `ids.len() * dim`.
    #[error(
        "table {table:?}: {what} has {got} elements, expected {expected} ({})",
        per_id(*ids, *dim, what)
    )]
    LengthMismatch {
        /// Table name.
        table: String,
        /// Which argument (`out`, `values`, `grads`).
        what: &'static str,
        /// Elements given.
        got: usize,
        /// Elements expected.
        expected: usize,
        /// Ids given.
        ids: usize,
        /// Table dimension.
        dim: u32,
    },
    /// Optimizer state given or asked for in bytes that are not whole
    /// rows of the table's state ([`crate::Store::export_state`]).
    #[error(
        "table {table:?}: {what} has {got} bytes, not a whole number of rows of {state_bytes} bytes of optimizer state"
    )]
    StateLength {
        /// Table name.
        table: String,
        /// Which argument (`out`, `state`).
        what: &'static str,
        /// Bytes given.
        got: usize,
        /// Bytes of state a row of the table holds (0: none).
        state_bytes: usize,
    },
    /// Optimizer state given to [`crate::Store::import_state`] holds a
    /// negative sum of squares (Adagrad's, Adam's second moment), which
    /// the next step would take the root of.
    #[error(
        "table {table:?}: state holds {value} for id {id} at element {element}, a sum of squares, which cannot be negative"
    )]
    NegativeState {
        /// Table name.
        table: String,
        /// Row id.
        id: u64,
        /// The f32's index within the row's state.
        element: usize,
        /// The value.
        value: f32,
    },
    /// A value or gradient is NaN or infinite and the table does not allow it.
    #[error(
        "table {table:?}: {what} holds a non-finite {value} for {} {id} at element {element}",
        id_kind(what)
    )]
    NonFinite {
        /// Table name.
        table: String,
        /// The argument, by the name the API gives it: `values`, `grads`,
        /// `per_sample_weights`, or `grad` (a pooled step's gradient of
        /// the bags).
        what: &'static str,
        /// Row id the value belongs to; for `grad`, the bag's index.
        id: u64,
        /// Element index within the row.
        element: usize,
        /// The value.
        value: f32,
    },
    /// The offsets of a batch of bags are not `B + 1` entries from 0, never
    /// decreasing, ending at the number of indices.
    #[error("table {table:?}: bad offsets at entry {at}: {reason}")]
    BadOffsets {
        /// Table name.
        table: String,
        /// The offending entry of `offsets`.
        at: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// Per-sample weights were given with a pooling mode other than sum.
    #[error("table {table:?}: per_sample_weights need pooling mode \"sum\", not {mode:?}")]
    WeightsNeedSum {
        /// Table name.
        table: String,
        /// The pooling mode given.
        mode: &'static str,
    },
    /// A learning rate that is not finite, or negative (a step with it
    /// would climb the loss).
    #[error("learning rate {lr}: must be finite and not negative")]
    BadLearningRate {
        /// The rate given.
        lr: f32,
    },
    /// The directory holds no embtier store.
    #[error("{path}: not an embtier store ({reason})")]
    NotAStore {
        /// The directory.
        path: PathBuf,
        /// What was missing or wrong.
        reason: String,
    },
    /// The directory already holds a store (or other files) at create.
    #[error("{path}: already exists and is not empty")]
    AlreadyExists {
        /// The directory.
        path: PathBuf,
    },
    /// Another live process holds the store open, or this one does
    /// through another handle (`pid` is then this process's).
    #[error("{path}: store is locked by {}", locked_by(*pid))]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// Pid written in the lock file by its holder.
        pid: u32,
    },
    /// An on-disk structure failed validation; the inner error names the offset.
    #[error("{path}: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong and where.
        #[source]
        source: FormatError,
    },
    /// A data block of a table failed validation while reading a row.
    #[error("{path}: table {table:?}, row {id}: {source}")]
    Corrupt {
        /// The data file.
        path: PathBuf,
        /// Table name.
        table: String,
        /// The row whose block is bad.
        id: u64,
        /// What is wrong and where.
        #[source]
        source: FormatError,
    },
    /// The warm restart's read-back failed (see `Store::wait_warm`).
    #[error("warm restart: {reason}")]
    Warm {
        /// What failed.
        reason: String,
    },
    /// The configuration is invalid.
    #[error("invalid config: {reason}")]
    Config {
        /// What is wrong (naming the table, where it is one table's
        /// setting).
        reason: String,
        /// The table whose setting is wrong, where it is one table's.
        table: Option<String>,
    },
    /// A tier's budget for a table cannot hold what it must hold.
    #[error("{tier} budget of {capacity} bytes for table {table:?} cannot hold {needed} bytes (row size {row_bytes})")]
    TierTooSmall {
        /// `dram` or `pmem`.
        tier: &'static str,
        /// Table name.
        table: String,
        /// Bytes available to the table in that tier.
        capacity: u64,
        /// Bytes needed: one row for a cache (what a row is charged, under
        /// `[ssd] overhead_in_budget`), the whole table when pinned.
        needed: u64,
        /// Bytes per row.
        row_bytes: u64,
    },
    /// The table uses a feature this build does not implement yet.
    #[error("table {table:?}: {what} is not supported yet")]
    Unsupported {
        /// Table name.
        table: String,
        /// The feature.
        what: String,
    },
    /// The config given to [`crate::Store::open_with`] does not match what
    /// the store was created with (a table more or less, shape, element
    /// type or optimizer state).
    #[error("table {table:?}: the store holds {stored}, the config says {given}")]
    ConfigMismatch {
        /// Table name (the config's, when names differ).
        table: String,
        /// What the store's catalog records.
        stored: String,
        /// What the config asks for.
        given: String,
    },
    /// This thread began a checkpoint ([`crate::Store::begin_checkpoint`])
    /// and has not finished it: another checkpoint (or a merge of the row
    /// log) asked for on the same thread would wait for it for ever.
    /// Finish it first, or finish it on another thread.
    #[error("{what} while this thread's checkpoint is unfinished: call finish() on it first, or on another thread")]
    CheckpointInProgress {
        /// What was asked for (`checkpoint`, `begin_checkpoint`, `merge_row_log`).
        what: &'static str,
    },
    /// A prefetch's background thread panicked (a bug). Pins it had taken
    /// stay until the store is reopened; pinning stays bounded.
    #[error("table {table:?}: the prefetch thread panicked")]
    PrefetchPanicked {
        /// Table name.
        table: String,
    },
    /// The device is full. Nothing was lost: dirty rows stay in memory, the
    /// store stays readable, and a later `flush` retries.
    #[error("{path}: no space left on device at offset {offset}")]
    DiskFull {
        /// The file.
        path: PathBuf,
        /// Byte offset of the write that failed.
        offset: u64,
    },
    /// The blocks of a file written through a memory mapping (the PMem
    /// tier's `pmem.emb`) could not be reserved when it was created: the
    /// file system is full (ENOSPC), or refuses both `fallocate` and
    /// `posix_fallocate`. Reserving them at open is what keeps a full file
    /// system from raising SIGBUS later, at a store into the mapping.
    #[error("{path}: cannot reserve {len} bytes for a writable memory mapping: {}", reserve_reason(.source))]
    MapReserve {
        /// The file.
        path: PathBuf,
        /// Bytes that were to be reserved (the mapping's length).
        len: u64,
        /// The OS error; its errno is ENOSPC when the file system is full.
        #[source]
        source: std::io::Error,
    },
    /// The store was opened by another process, which this one was forked
    /// from (a PyTorch DataLoader worker with the fork start method,
    /// `os.fork`): the copy a fork made shares the opener's io_uring
    /// queues and has none of its threads, so it takes no calls. Do the
    /// store's calls in the process that opened it.
    #[error("the store was opened by process {pid}, which this process was forked from: a forked copy takes no calls (make the store's calls in process {pid}; a DataLoader worker should leave them to the training process)")]
    Forked {
        /// The process that opened the store.
        pid: u32,
    },
    /// A flush, journal or commit fsync failed earlier: what reached the
    /// disk is unknown, so the store takes no more writes. Reopening it
    /// recovers the last checkpoint.
    #[error("the store refuses writes after a failed sync ({reason}); reopen it to recover the last checkpoint")]
    Poisoned {
        /// The failure that poisoned it.
        reason: String,
    },
    /// An I/O call failed.
    #[error("{path}: {op} at offset {offset}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operation (`read`, `write`, `fsync`, `open`, ...).
        op: &'static str,
        /// Byte offset, 0 where none applies.
        offset: u64,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

fn reserve_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOSPC) => format!("the file system is full ({e})"),
        Some(libc::EOPNOTSUPP) => {
            format!("the file system supports neither fallocate nor posix_fallocate ({e})")
        }
        _ => e.to_string(),
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            op,
            offset: 0,
            source,
        }
    }

    pub(crate) fn config(reason: impl Into<String>) -> Error {
        Error::Config {
            reason: reason.into(),
            table: None,
        }
    }

    /// A config error in table `table`'s settings: the reason as
    /// `table "t": ...`, and the table named apart.
    pub(crate) fn table_config(table: &str, reason: impl std::fmt::Display) -> Error {
        Error::Config {
            reason: format!("table {table:?}: {reason}"),
            table: Some(table.into()),
        }
    }
}

/// What [`Error::NonFinite`]'s id counts: a pooled step's `grad` is one
/// row a bag, so its id is the bag's index.
fn id_kind(what: &str) -> &'static str {
    if what == "grad" {
        "bag"
    } else {
        "id"
    }
}

/// How [`Error::LengthMismatch`] says what was expected: `ids x dim`, or
/// for an argument with one value an id, `one an id`.
fn per_id(ids: usize, dim: u32, what: &str) -> String {
    match what {
        "per_sample_weights" => format!("{ids} ids, one weight each"),
        _ => format!("{ids} ids x dim {dim}"),
    }
}

/// Who holds a lock, for [`Error::Locked`]'s message: this process (an
/// open handle not yet closed or dropped) or another's pid.
fn locked_by(pid: u32) -> String {
    if pid == std::process::id() {
        format!("this process (pid {pid}): a handle of it is still open; close or drop it first")
    } else {
        format!("pid {pid}")
    }
}
