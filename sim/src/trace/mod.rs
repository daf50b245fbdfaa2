//! Access traces: a format-independent view ([`Trace`]), importers of the
//! field's trace formats, and conversion to `.etrace`.
//!
//! Every importer maps its ids to dense row ids per table, in order of first
//! appearance, and groups accesses into batches. Importers hold the trace in
//! memory (about 16 bytes per access); the `.etrace` reader streams.

pub mod gen;
mod import;

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};

pub use embtier_format::trace::{Access, AccessKind, TraceReader, TraceTable, TraceWriter};
pub use import::{
    detect, import, import_batches, import_noting, import_stream, import_stream_ids,
    looks_like_header, oracle_general_batches, CsvSpec, Format, Imported, Note,
};

/// Errors of reading or converting a trace. Each names the file and, where
/// known, the record (1-based line or record number) or byte offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A record does not parse.
    #[error("{path}: record {record}: {reason}")]
    BadRecord {
        /// The file.
        path: PathBuf,
        /// 1-based record (line) number.
        record: u64,
        /// What is wrong.
        reason: String,
    },
    /// A `.etrace` structure is invalid.
    #[error("{path}: {source}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What and where.
        #[source]
        source: embtier_format::FormatError,
    },
    /// The format cannot be determined, or is not what the options need.
    #[error("{path}: {reason}")]
    Unrecognised {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The file holds no accesses.
    #[error("{path}: no accesses")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// A table has more distinct ids than the tools number (they number a
    /// table's ids in 32 bits).
    #[error("{path}: table {table} (0-based, in the reader's order) has more than {limit} distinct ids; the tools number a table's ids in 32 bits")]
    TooManyIds {
        /// The file.
        path: PathBuf,
        /// The table, 0-based in the order its reader numbers tables: of
        /// first appearance, or a format's columns (Criteo, Avazu).
        table: usize,
        /// The distinct ids a table may have.
        limit: u64,
    },
}

/// A trace in memory: a catalog and batches of accesses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// The tables.
    pub tables: Vec<TraceTable>,
    /// Batches; each is a range of `accesses`.
    pub batch_ends: Vec<usize>,
    /// Every access, in order.
    pub accesses: Vec<Access>,
}

/// A `.etrace` file opened for reading, its header read.
pub fn open_etrace(path: &Path) -> Result<TraceReader<BufReader<File>>, TraceError> {
    let f = File::open(path).map_err(|source| TraceError::Io {
        path: path.into(),
        source,
    })?;
    TraceReader::new(BufReader::with_capacity(1 << 20, f)).map_err(etrace_err(path))
}

/// A `.etrace` reader's error as `path`'s.
pub fn etrace_err(path: &Path) -> impl Fn(embtier_format::FormatError) -> TraceError + Copy + '_ {
    move |source| TraceError::Format {
        path: path.into(),
        source,
    }
}

impl Trace {
    /// Batches as slices.
    pub fn batches(&self) -> impl Iterator<Item = &[Access]> {
        let mut start = 0;
        self.batch_ends.iter().map(move |&end| {
            let b = &self.accesses[start..end];
            start = end;
            b
        })
    }

    /// Read a `.etrace` file whole.
    pub fn read_etrace(path: &Path) -> Result<Trace, TraceError> {
        let fmt = etrace_err(path);
        let mut r = open_etrace(path)?;
        let mut t = Trace {
            tables: r.tables().to_vec(),
            ..Trace::default()
        };
        let mut b = Vec::new();
        while r.next_batch(&mut b).map_err(fmt)? {
            t.accesses.extend_from_slice(&b);
            t.batch_ends.push(t.accesses.len());
        }
        Ok(t)
    }

    /// Write as `.etrace`; returns the bytes written.
    pub fn write_etrace(&self, path: &Path) -> Result<u64, TraceError> {
        let io = |source| TraceError::Io {
            path: path.into(),
            source,
        };
        let f = File::create(path).map_err(io)?;
        let mut w = TraceWriter::new(BufWriter::with_capacity(1 << 20, f), self.tables.clone())
            .map_err(io)?;
        for b in self.batches() {
            for a in b {
                w.access(a.table, a.row, a.kind).map_err(io)?;
            }
            w.end_batch().map_err(io)?;
        }
        let (_, _, bytes) = w.finish().map_err(io)?;
        Ok(bytes)
    }
}

/// Bytes per row of a trace table: its catalog's row bytes, else 4·dim
/// (f32 rows), else `default` (traces that carry neither).
pub fn row_bytes_of(t: &TraceTable, default: u64) -> u64 {
    if t.row_bytes > 0 {
        t.row_bytes as u64
    } else if t.dim > 0 {
        t.dim as u64 * 4
    } else {
        default
    }
}
