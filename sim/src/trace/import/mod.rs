//! Importers: libCacheSim oracleGeneral, CSV with a column spec, one id per
//! line (optionally gzip), Criteo TSV/CSV, Avazu CSV, MovieLens, and
//! `.etrace`.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::str::FromStr;

use super::{etrace_err, Access, AccessKind, Trace, TraceError, TraceTable};
use crate::densify::IdTable;

mod pipe;
mod readers;
mod text;

pub use readers::oracle_general_batches;
use readers::{avazu, criteo, delimited, movielens, oracle_general, txt};

/// Input formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// Pick by magic bytes, name and content.
    Auto,
    /// embtier's `.etrace`.
    Etrace,
    /// libCacheSim oracleGeneral: 24-byte records `{u32 time, u64 obj_id, u32 obj_size, i64 next}`.
    OracleGeneral,
    /// Delimited text with a [`CsvSpec`].
    Csv,
    /// One id per line; `*` lines are skipped; gzip if the name ends in `.gz`.
    Txt,
    /// Criteo Display Advertising: TSV without header, or CSV with `label,I1..,C1..C26`.
    Criteo,
    /// Avazu CTR: CSV with the header `id,click,hour,C1,banner_pos,...,C21`;
    /// each of the 21 categorical columns after `hour` is a table.
    Avazu,
    /// MovieLens `u.data`, `ratings.dat` or `ratings.csv`, or RecBole
    /// `.inter`: users and items in timestamp order.
    Movielens,
}

impl Format {
    /// Names accepted by [`Format::from_str`].
    pub const NAMES: &'static str =
        "auto, etrace, oracle-general, csv, txt, criteo, avazu, movielens";

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Etrace => "etrace",
            Format::OracleGeneral => "oracle-general",
            Format::Csv => "csv",
            Format::Txt => "txt",
            Format::Criteo => "criteo",
            Format::Avazu => "avazu",
            Format::Movielens => "movielens",
        }
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        let n = embtier::canonical_name(s);
        Ok(match n.as_str() {
            "auto" => Format::Auto,
            "etrace" => Format::Etrace,
            "oraclegeneral" | "oracle" => Format::OracleGeneral,
            "csv" => Format::Csv,
            "txt" | "text" => Format::Txt,
            "criteo" => Format::Criteo,
            "avazu" => Format::Avazu,
            "movielens" | "ml" => Format::Movielens,
            _ => {
                return Err(format!(
                    "unknown format {s:?} (expected one of {})",
                    Format::NAMES
                ))
            }
        })
    }
}

/// Which columns of a delimited file hold what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvSpec {
    /// The id column: a 0-based index or a header name.
    pub id: String,
    /// The table column, if any (index or name).
    pub table: Option<String>,
    /// Whether the first line is a header; `None`: detect it (a header
    /// has a field that is not a number over a field that is).
    pub header: Option<bool>,
    /// The delimiter.
    pub delimiter: u8,
}

impl Default for CsvSpec {
    fn default() -> CsvSpec {
        CsvSpec {
            id: "0".into(),
            table: None,
            header: None,
            delimiter: b',',
        }
    }
}

impl FromStr for CsvSpec {
    type Err = String;
    /// `id=COL[,table=COL][,header=yes|no|auto][,delim=,|tab|;|space]`
    fn from_str(s: &str) -> Result<CsvSpec, String> {
        let mut spec = CsvSpec::default();
        let mut given: Vec<&str> = Vec::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| {
                format!("column spec {part:?} is not key=value (try id=lbn,header=yes)")
            })?;
            if given.contains(&k.trim()) {
                return Err(format!("column spec key {:?} is given twice", k.trim()));
            }
            given.push(k.trim());
            match k.trim() {
                "id" => spec.id = v.trim().to_string(),
                "table" => spec.table = Some(v.trim().to_string()),
                "header" => {
                    spec.header = match v.trim() {
                        "yes" | "true" | "1" => Some(true),
                        "no" | "false" | "0" => Some(false),
                        "auto" => None,
                        o => return Err(format!("header={o:?}: expected yes, no or auto")),
                    }
                }
                "delim" | "delimiter" => {
                    spec.delimiter = match v {
                        "tab" | "\\t" => b'\t',
                        "space" => b' ',
                        "comma" => b',',
                        "semicolon" | ";" => b';',
                        "|" | "pipe" => b'|',
                        o if o.len() == 1 => o.as_bytes()[0],
                        o => {
                            return Err(format!(
                                "delim={o:?}: expected one character, tab or space"
                            ))
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "unknown column spec key {other:?} (id, table, header, delim)"
                    ))
                }
            }
        }
        Ok(spec)
    }
}

/// The error of the first of `ids`' tables that came to more distinct
/// ids than it numbers ([`IdTable::overflowed`]): its later ids alias.
fn check_numbered(path: &Path, ids: &[IdTable]) -> Result<(), TraceError> {
    match ids.iter().position(IdTable::overflowed) {
        Some(table) => Err(TraceError::TooManyIds {
            path: path.into(),
            table,
            limit: IdTable::MAX_IDS as u64,
        }),
        None => Ok(()),
    }
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> TraceError + '_ {
    move |source| TraceError::Io {
        path: path.into(),
        source,
    }
}

/// How a file is compressed, from its first bytes: gzip or zstd (as
/// libCacheSim's traces are published), or `None`.
pub fn compression(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(&[0x1f, 0x8b, 0x08]) {
        Some("gzip")
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Some("zstd")
    } else {
        None
    }
}

/// The error for a compressed file given to a reader of binary records,
/// which reads the plain file (it seeks and sizes it).
pub(super) fn compressed(path: &Path, how: &str, format: Format) -> TraceError {
    let tool = if how == "gzip" { "gunzip" } else { "zstd -d" };
    TraceError::Unrecognised {
        path: path.into(),
        reason: format!(
            "a {how}-compressed {} file: decompress it first ({tool})",
            format.name()
        ),
    }
}

/// Decide the format of `path` from its first bytes and its name; a
/// gzip file by what it holds (the name without `.gz`, the first bytes
/// decompressed).
pub fn detect(path: &Path) -> Result<Format, TraceError> {
    let mut head = [0u8; 512];
    let mut f = File::open(path).map_err(io_err(path))?;
    let n = f.read(&mut head).map_err(io_err(path))?;
    let head = &head[..n];
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let Some(how) = compression(head) else {
        return detect_plain(path, &name, head);
    };
    let inner = [".gz", ".zst", ".zstd"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(&name);
    if how != "gzip" {
        let format = detect_plain(path, inner, b"").unwrap_or(Format::OracleGeneral);
        return Err(compressed(path, how, format));
    }
    // Up to 512 bytes of what it holds (a damaged stream: what came out
    // before the damage; the reader names the error).
    let mut d = flate2::read::MultiGzDecoder::new(File::open(path).map_err(io_err(path))?);
    let mut inside = [0u8; 512];
    let mut got = 0;
    while got < inside.len() {
        match d.read(&mut inside[got..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => got += k,
        }
    }
    if got == 0 && !name.ends_with(".gz") {
        // Nothing decompressed: not gzip after all (an oracleGeneral
        // record's time can spell the magic number).
        return detect_plain(path, &name, head);
    }
    let format = match detect_plain(path, inner, &inside[..got]) {
        // `ids.gz`: one id a line, as before the contents decided.
        Err(_) if name.ends_with(".gz") && !inner.contains('.') => Format::Txt,
        f => f?,
    };
    match format {
        Format::Etrace | Format::OracleGeneral => Err(compressed(path, how, format)),
        f => Ok(f),
    }
}

/// [`detect`] of a file named `name` (lower case) that starts with
/// `head`, uncompressed.
fn detect_plain(path: &Path, name: &str, head: &[u8]) -> Result<Format, TraceError> {
    let head = head.strip_prefix(text::BOM).unwrap_or(head);
    if head.starts_with(&embtier_format::trace::TRACE_MAGIC[..6]) {
        return Ok(Format::Etrace);
    }
    if name.contains("oraclegeneral") || name.ends_with(".oracle") {
        return Ok(Format::OracleGeneral);
    }
    if name.ends_with(".inter") || name == "u.data" || name == "ratings.dat" {
        return Ok(Format::Movielens);
    }
    if name.ends_with(".gz") || name.ends_with(".trace") || name.ends_with(".txt") {
        return Ok(Format::Txt);
    }
    let text = String::from_utf8_lossy(head);
    let first = text.lines().next().unwrap_or("");
    if first.starts_with("label,I1,") || first.split('\t').count() == 40 {
        return Ok(Format::Criteo);
    }
    if first.starts_with("id,click,hour,") {
        return Ok(Format::Avazu);
    }
    if first.starts_with("userId,movieId,rating,timestamp") {
        return Ok(Format::Movielens);
    }
    if name.ends_with(".csv") || name.ends_with(".tsv") {
        return Ok(Format::Csv);
    }
    if !head.is_empty()
        && head
            .iter()
            .all(|b| b.is_ascii_digit() || b.is_ascii_whitespace() || *b == b'*')
    {
        return Ok(Format::Txt);
    }
    Err(TraceError::Unrecognised {
        path: path.into(),
        reason: format!("cannot tell the format; pass --format ({})", Format::NAMES),
    })
}

/// Import `path` in `format` (detected when `Auto`; the format used is
/// returned). `batch` is accesses per batch for formats without batches, or
/// samples per batch for Criteo, Avazu and MovieLens.
pub fn import(
    path: &Path,
    format: Format,
    csv: &CsvSpec,
    batch: usize,
) -> Result<(Trace, Format), TraceError> {
    import_noting(path, format, csv, batch).map(|i| (i.trace, i.format))
}

/// What [`import_noting`] read, and what a user should know of it.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The trace.
    pub trace: Trace,
    /// The format it was read as.
    pub format: Format,
    /// What the reader decided or doubts: a header it detected, an id
    /// column that looks constant or like a row counter.
    pub notes: Vec<Note>,
}

/// A line for the user about an import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// A doubt about the result (else a decision the reader made).
    pub warning: bool,
    /// What, on one line.
    pub text: String,
}

/// `format`, or the one [`detect`] finds for `Auto`.
fn resolve(path: &Path, format: Format) -> Result<Format, TraceError> {
    if format == Format::Auto {
        detect(path)
    } else {
        Ok(format)
    }
}

/// [`import`], with the notes a tool shows its user.
pub fn import_noting(
    path: &Path,
    format: Format,
    csv: &CsvSpec,
    batch: usize,
) -> Result<Imported, TraceError> {
    let format = resolve(path, format)?;
    let batch = batch.max(1);
    let mut notes = Vec::new();
    let t = match format {
        Format::Etrace => Trace::read_etrace(path)?,
        Format::OracleGeneral => oracle_general(path, batch)?,
        Format::Auto => unreachable!("resolved above"),
        _ => read_with(path, format, csv, Builder::new(batch), &mut notes)?.0,
    };
    if t.accesses.is_empty() {
        return Err(TraceError::Empty { path: path.into() });
    }
    Ok(Imported {
        trace: t,
        format,
        notes,
    })
}

/// Whether a field reads as a number (decimal, signed or not, or a float).
fn numeric(f: &str) -> bool {
    let f = f.trim();
    !f.is_empty() && f.parse::<f64>().is_ok()
}

/// Whether `first` is a header over `second`: some column is a number in
/// `second` and not in `first`, and every field of `first` is non-empty
/// (but for empty ones at its end: a trailing delimiter).
pub fn looks_like_header(first: &[&str], second: &[&str]) -> bool {
    let first = without_trailing_empty(first);
    !first.is_empty()
        && first.iter().all(|f| !f.trim().is_empty())
        && first
            .iter()
            .zip(second)
            .any(|(a, b)| !numeric(a) && numeric(b))
}

/// Whether `line`, the only line of a file, is a header: its fields
/// (but for empty ones at its end) all non-empty, and none a number.
pub(super) fn lone_header(line: &[&str]) -> bool {
    let line = without_trailing_empty(line);
    !line.is_empty() && line.iter().all(|f| !f.trim().is_empty() && !numeric(f))
}

/// `fields` without the empty ones at its end (a trailing delimiter).
fn without_trailing_empty<'a, 'b>(fields: &'a [&'b str]) -> &'a [&'b str] {
    let named = fields
        .iter()
        .rposition(|f| !f.trim().is_empty())
        .map_or(0, |i| i + 1);
    &fields[..named]
}

/// Accumulates accesses into batches of a fixed size: holds them (a
/// [`Trace`]), or hands each batch on as it closes and forgets it.
pub(super) struct Builder<'a> {
    t: Trace,
    batch: usize,
    in_batch: usize,
    sink: Sink<'a>,
    counts: Counts,
}

/// What a [`Builder`] closed: accesses, batches, accesses per table.
#[derive(Debug, Default)]
pub(super) struct Counts {
    accesses: u64,
    batches: u64,
    per_table: Vec<u64>,
}

/// Where a [`Builder`]'s closed batches go.
enum Sink<'a> {
    /// Kept, in the trace.
    Hold,
    /// Counted only.
    Count,
    /// Handed to a function.
    Feed(&'a mut dyn FnMut(&[Access])),
}

impl<'a> Builder<'a> {
    /// A builder that holds the trace.
    pub(super) fn new(batch: usize) -> Builder<'a> {
        Builder::with_sink(batch, Sink::Hold)
    }

    fn with_sink(batch: usize, sink: Sink<'a>) -> Builder<'a> {
        Builder {
            t: Trace::default(),
            batch: batch.max(1),
            in_batch: 0,
            sink,
            counts: Counts::default(),
        }
    }
    #[inline]
    fn push(&mut self, table: u32, row: u64) {
        let t = table as usize;
        if t >= self.counts.per_table.len() {
            self.counts.per_table.resize(t + 1, 0);
        }
        self.counts.per_table[t] += 1;
        self.t.accesses.push(Access {
            table,
            row,
            kind: AccessKind::Lookup,
        });
    }
    /// One sample (or one access) done; close the batch when full.
    #[inline]
    fn end_sample(&mut self) {
        self.in_batch += 1;
        if self.in_batch == self.batch {
            self.close();
        }
    }
    fn close(&mut self) {
        let start = self.t.batch_ends.last().copied().unwrap_or(0);
        if start != self.t.accesses.len() {
            self.counts.accesses += (self.t.accesses.len() - start) as u64;
            self.counts.batches += 1;
            match &mut self.sink {
                Sink::Hold => self.t.batch_ends.push(self.t.accesses.len()),
                Sink::Count => self.t.accesses.clear(),
                Sink::Feed(f) => {
                    f(&self.t.accesses);
                    self.t.accesses.clear();
                }
            }
        }
        self.in_batch = 0;
    }
    /// The trace (its accesses only if held) with `tables`, and what was
    /// closed (accesses per table for every table).
    fn finish(mut self, tables: Vec<TraceTable>) -> (Trace, Counts) {
        self.close();
        self.counts.per_table.resize(tables.len(), 0);
        self.t.tables = tables;
        (self.t, self.counts)
    }
}

/// A file's accesses in one pass without holding them, in any format:
/// `each` gets the accesses batch by batch (the same accesses, rows and
/// batches as [`import_noting`] gives), and the catalog comes at the end
/// (the readers number each table's ids as they go, so the tables' rows
/// are known only then). Returns the format read, the catalog and the
/// reader's notes.
pub fn import_stream(
    path: &Path,
    format: Format,
    csv: &CsvSpec,
    batch: usize,
    each: impl FnMut(&[Access]),
) -> Result<(Format, Vec<TraceTable>, Vec<Note>), TraceError> {
    let (f, tables, notes, _) = import_stream_ids(path, format, csv, batch, false, each)?;
    Ok((f, tables, notes))
}

/// What [`import_stream_ids`] returns: the format read, the catalog, the
/// reader's notes, and an oracleGeneral file's own ids where asked.
pub type StreamedIds = (Format, Vec<TraceTable>, Vec<Note>, Option<Vec<u64>>);

/// [`import_stream`], and with `ids` an oracleGeneral file's own ids by
/// the dense row each became, taken from the reader's id table when the
/// file is read: what libCacheSim hashes where a policy
/// hashes keys. `None` for the other formats, whose rows have no one id of
/// their own.
pub fn import_stream_ids(
    path: &Path,
    format: Format,
    csv: &CsvSpec,
    batch: usize,
    ids: bool,
    mut each: impl FnMut(&[Access]),
) -> Result<StreamedIds, TraceError> {
    let format = resolve(path, format)?;
    let batch = batch.max(1);
    let mut notes = Vec::new();
    let mut any = false;
    let mut each = |b: &[Access]| {
        any |= !b.is_empty();
        each(b)
    };
    let mut own = None;
    let tables = match format {
        Format::Etrace => {
            let mut r = crate::trace::open_etrace(path)?;
            let mut b = Vec::new();
            while r.next_batch(&mut b).map_err(etrace_err(path))? {
                each(&b);
            }
            r.tables().to_vec()
        }
        Format::OracleGeneral => {
            let (tables, table) = readers::oracle_general_stream(path, batch, &mut each)?;
            if ids {
                own = Some(table.keys_by_id());
            }
            tables
        }
        Format::Auto => unreachable!("resolved above"),
        _ => {
            let b = Builder::with_sink(batch, Sink::Feed(&mut each));
            read_with(path, format, csv, b, &mut notes)?.0.tables
        }
    };
    if !any {
        return Err(TraceError::Empty { path: path.into() });
    }
    Ok((format, tables, notes, own))
}

/// A file's accesses without holding them, for the formats read through a
/// batch builder (all but `.etrace`; oracleGeneral has its own two passes,
/// [`oracle_general_batches`], the same in effect): a first pass reads the
/// file for its catalog (the readers number each table's ids, so memory
/// grows with the distinct ids, not the accesses); `start` then gets the
/// catalog and each table's accesses, and a second pass hands `each` the
/// accesses batch by batch: the same accesses, rows and batches as
/// [`import`] gives. Returns the format read and the first pass's notes.
pub fn import_batches(
    path: &Path,
    format: Format,
    csv: &CsvSpec,
    batch: usize,
    start: impl FnOnce(&[TraceTable], &[u64]),
    mut each: impl FnMut(&[Access]),
) -> Result<(Format, Vec<Note>), TraceError> {
    let format = resolve(path, format)?;
    if format == Format::Etrace {
        return Err(TraceError::Unrecognised {
            path: path.into(),
            reason: "a .etrace streams through its own reader (TraceReader)".into(),
        });
    }
    if format == Format::OracleGeneral {
        let mut any = false;
        oracle_general_batches(
            path,
            batch,
            |t, n| start(t, &[n]),
            |b| {
                any = true;
                each(b)
            },
        )?;
        if !any {
            return Err(TraceError::Empty { path: path.into() });
        }
        return Ok((format, Vec::new()));
    }
    let mut notes = Vec::new();
    let (tables, counts) = {
        let b = Builder::with_sink(batch, Sink::Count);
        read_with(path, format, csv, b, &mut notes)?
    };
    if counts.accesses == 0 {
        return Err(TraceError::Empty { path: path.into() });
    }
    start(&tables.tables, &counts.per_table);
    let b = Builder::with_sink(batch, Sink::Feed(&mut each));
    read_with(path, format, csv, b, &mut Vec::new())?;
    Ok((format, notes))
}

/// Read `path` in `format` (neither `.etrace` nor oracleGeneral nor
/// `Auto`) into `b`: the trace (its accesses if `b` holds them) and what
/// it closed.
fn read_with(
    path: &Path,
    format: Format,
    csv: &CsvSpec,
    b: Builder<'_>,
    notes: &mut Vec<Note>,
) -> Result<(Trace, Counts), TraceError> {
    match format {
        Format::Csv => delimited(path, csv, b, notes),
        Format::Txt => txt(path, b),
        Format::Criteo => criteo(path, b),
        Format::Avazu => avazu(path, b),
        Format::Movielens => movielens(path, b),
        Format::Etrace | Format::OracleGeneral | Format::Auto => {
            unreachable!("read by their own readers")
        }
    }
}

fn single_table(name: &str, rows: u64) -> Vec<TraceTable> {
    vec![TraceTable {
        name: name.into(),
        rows: rows.max(1),
        dim: 0,
        row_bytes: 0,
    }]
}
