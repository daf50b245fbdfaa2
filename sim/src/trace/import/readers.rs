//! The readers, one per input format: each turns a file into a trace of
//! dense ids, batched.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::*;

/// Records of an oracleGeneral file read and parsed per block.
const OG_BLOCK_RECORDS: usize = 1 << 16;

/// libCacheSim oracleGeneral: 1.5 MB blocks of records read with `read`
/// (not mapped: a file truncated under a mapping raises SIGBUS), their ids
/// numbered by an open-addressing table sized from the file. A second
/// thread reads the blocks while this one numbers them ([`og_blocks`]:
/// `emb-replay simulate` of a 5.3 M-record file 23% faster). The numbering
/// is one thread: parsing in parallel pieces (each numbering its own keys,
/// then merged in order) measured slower on that file (0.49 s against
/// 0.35 s for the whole `emb-replay simulate`), the work per record being a
/// load and a probe.
pub(super) fn oracle_general(path: &Path, batch: usize) -> Result<Trace, TraceError> {
    let records = og_records(path)?;
    let mut ids = IdTable::with_capacity(records / 8);
    let mut accesses: Vec<Access> = Vec::with_capacity(records);
    let mut check = OgCheck::default();
    og_blocks(path, records, |block| {
        og_number(&mut ids, block, &mut check, |row| {
            accesses.push(Access {
                table: 0,
                row,
                kind: AccessKind::Lookup,
            })
        })
    })?;
    check.result(path)?;
    check_numbered(path, std::slice::from_ref(&ids))?;
    let batch = batch.max(1);
    let mut batch_ends: Vec<usize> = (1..=records / batch).map(|b| b * batch).collect();
    if records % batch != 0 {
        batch_ends.push(records);
    }
    Ok(Trace {
        tables: single_table("objects", ids.len() as u64),
        batch_ends,
        accesses,
    })
}

use crate::densify::IdTable;

/// Records of an oracleGeneral file, checked to be whole.
fn og_records(path: &Path) -> Result<usize, TraceError> {
    let len = std::fs::metadata(path).map_err(io_err(path))?.len();
    // A compressed file (by its name and first bytes: the first record's
    // time alone could spell a magic number) is not records.
    let name = path.to_string_lossy().to_lowercase();
    if [".gz", ".zst", ".zstd"].iter().any(|s| name.ends_with(s)) {
        let mut head = [0u8; 4];
        let n = File::open(path)
            .and_then(|mut f| f.read(&mut head))
            .map_err(io_err(path))?;
        if let Some(how) = compression(&head[..n]) {
            return Err(compressed(path, how, Format::OracleGeneral));
        }
    }
    if len % 24 != 0 {
        return Err(TraceError::BadRecord {
            path: path.into(),
            record: len / 24 + 1,
            reason: format!("truncated: {len} bytes is not a whole number of 24-byte records"),
        });
    }
    Ok((len / 24) as usize)
}

/// The first `records` 24-byte records of `path`, handed to `each` a
/// block at a time, in order.
///
/// A thread of its own reads the blocks (the kernel's copy of the file
/// into them was an eighth of a run's time) while this one hands each on,
/// three blocks in turn; where the system refuses a thread, the blocks
/// are read here, one after the other.
fn og_blocks(path: &Path, records: usize, mut each: impl FnMut(&[u8])) -> Result<(), TraceError> {
    let mut f = File::open(path).map_err(io_err(path))?;
    let block = OG_BLOCK_RECORDS.min(records) * 24;
    let total = records * 24;
    let read = move |f: &mut File, buf: &mut Vec<u8>, done: usize| {
        let n = block.min(total - done);
        buf.resize(n, 0);
        f.read_exact(buf).map_err(io_err(path))
    };
    let f = &mut f;
    let threaded = super::pipe::on_a_thread(
        "trace-read",
        2,
        move |h| -> Result<(), TraceError> {
            let (mut done, mut buf) = (0, Vec::new());
            while done < total {
                read(f, &mut buf, done)?;
                done += buf.len();
                match h.send(buf) {
                    Some(next) => buf = next,
                    None => break, // the caller stopped
                }
            }
            Ok(())
        },
        |buf: &mut Vec<u8>| each(buf),
    );
    match threaded {
        Some(r) => r,
        None => og_blocks_here(path, records, each),
    }
}

/// [`og_blocks`] without a thread.
fn og_blocks_here(
    path: &Path,
    records: usize,
    mut each: impl FnMut(&[u8]),
) -> Result<(), TraceError> {
    let mut f = File::open(path).map_err(io_err(path))?;
    let mut buf = vec![0u8; OG_BLOCK_RECORDS.min(records) * 24];
    let mut done = 0usize;
    while done < records {
        let n = OG_BLOCK_RECORDS.min(records - done);
        let block = &mut buf[..n * 24];
        f.read_exact(block).map_err(io_err(path))?;
        each(block);
        done += n;
    }
    Ok(())
}

/// Where [`og_number`] is in a file: the records numbered so far, and the
/// first that is not an oracleGeneral record (its index and next-access
/// time), if any.
#[derive(Default)]
struct OgCheck {
    done: u64,
    bad: Option<(u64, i64)>,
}

impl OgCheck {
    /// An error for the first record that is not an oracleGeneral record.
    fn result(&self, path: &Path) -> Result<(), TraceError> {
        match self.bad {
            None => Ok(()),
            Some((i, next)) => Err(TraceError::BadRecord {
                path: path.into(),
                record: i + 1,
                reason: format!(
                    "next access time {next} is neither -1 nor a later request: \
                     not an oracleGeneral record (is --format right?)"
                ),
            }),
        }
    }
}

/// Whether `next` can be the next-access time of request `i`: -1 or
/// `i64::MAX` (no later access, as libCacheSim reads them), or a later
/// request, within 2^48 of it (eight bytes of text read as one are
/// 2^61 or more), so that a trace cut short keeps its times.
#[inline(always)]
fn og_next_ok(next: i64, i: u64) -> bool {
    next == -1 || next == i64::MAX || (next as u64).wrapping_sub(i + 1) < 1 << 48
}

/// Number the ids of a block of records (`ids` numbers each new id next),
/// handing `row` each record's dense id in order, and check each record's
/// next-access time ([`OgCheck`]): a block with a record that fails is
/// not numbered.
fn og_number(ids: &mut IdTable, block: &[u8], check: &mut OgCheck, mut row: impl FnMut(u64)) {
    let key = |r: &[u8]| u64::from_le_bytes(r[4..12].try_into().expect("8 bytes"));
    let next = |r: &[u8]| i64::from_le_bytes(r[16..24].try_into().expect("8 bytes"));
    let first = check.done;
    check.done += (block.len() / 24) as u64;
    if check.bad.is_some() {
        return; // the file is refused: number nothing more of it
    }
    // Every record checked, without a branch a record; the first bad one
    // found only where there is one.
    let mut ok = true;
    for (i, r) in block.chunks_exact(24).enumerate() {
        ok &= og_next_ok(next(r), first + i as u64);
    }
    if !ok {
        check.bad = block
            .chunks_exact(24)
            .enumerate()
            .find(|&(i, r)| !og_next_ok(next(r), first + i as u64))
            .map(|(i, r)| (first + i as u64, next(r)));
        return; // the file is refused: number nothing of it
    }
    // Slots are random memory: ask for the slot of a record ahead, and
    // keep its key's hash for when its turn comes (`hashes[i % AHEAD]`
    // is record i's).
    const AHEAD: usize = 16;
    let mut hashes = [0u64; AHEAD];
    for (h, r) in hashes.iter_mut().zip(block.chunks_exact(24)) {
        *h = IdTable::hash(key(r));
        ids.prefetch_hashed(*h);
    }
    for (i, r) in block.chunks_exact(24).enumerate() {
        let h = hashes[i % AHEAD];
        if let Some(next) = block.get((i + AHEAD) * 24..(i + AHEAD + 1) * 24) {
            let hn = IdTable::hash(key(next));
            ids.prefetch_hashed(hn);
            hashes[i % AHEAD] = hn;
        }
        row(ids.id_hashed(key(r), h) as u64);
    }
}

/// An oracleGeneral file's accesses without holding them: a first pass
/// numbers its ids (memory grows with the distinct ids, not the
/// accesses); `start` then gets the catalog and the number of accesses,
/// and a second pass hands `each` the accesses in batches of `batch`: the
/// same accesses, rows and batches as [`import`] gives, in order.
pub fn oracle_general_batches(
    path: &Path,
    batch: usize,
    start: impl FnOnce(&[TraceTable], u64),
    each: impl FnMut(&[Access]),
) -> Result<(), TraceError> {
    let records = og_records(path)?;
    let mut ids = IdTable::with_capacity(records.min(1 << 24) / 8);
    let mut check = OgCheck::default();
    og_blocks(path, records, |block| {
        og_number(&mut ids, block, &mut check, |_| {})
    })?;
    check.result(path)?;
    check_numbered(path, std::slice::from_ref(&ids))?;
    start(&single_table("objects", ids.len() as u64), records as u64);
    og_feed(path, records, &mut ids, batch, each)
}

/// An oracleGeneral file's accesses in one pass, handed to `each` in
/// batches of `batch` (the same accesses, rows and batches as [`import`]
/// gives); returns the catalog, known at the end.
pub(super) fn oracle_general_stream(
    path: &Path,
    batch: usize,
    each: impl FnMut(&[Access]),
) -> Result<(Vec<TraceTable>, IdTable), TraceError> {
    let records = og_records(path)?;
    let mut ids = IdTable::with_capacity(records.min(1 << 24) / 8);
    og_feed(path, records, &mut ids, batch, each)?;
    Ok((single_table("objects", ids.len() as u64), ids))
}

/// The first `records` records of `path`, numbered by `ids`, handed to
/// `each` in batches of `batch`.
fn og_feed(
    path: &Path,
    records: usize,
    ids: &mut IdTable,
    batch: usize,
    mut each: impl FnMut(&[Access]),
) -> Result<(), TraceError> {
    let batch = batch.max(1);
    let mut b: Vec<Access> = Vec::with_capacity(batch.min(records.max(1)));
    let mut check = OgCheck::default();
    og_blocks(path, records, |block| {
        if check.bad.is_some() {
            return; // the file is refused: hand on nothing more
        }
        og_number(ids, block, &mut check, |row| {
            b.push(Access {
                table: 0,
                row,
                kind: AccessKind::Lookup,
            });
            if b.len() == batch {
                each(&b);
                b.clear();
            }
        })
    })?;
    check.result(path)?;
    check_numbered(path, std::slice::from_ref(ids))?;
    if !b.is_empty() {
        each(&b);
    }
    Ok(())
}

pub(super) fn txt(path: &Path, mut b: Builder<'_>) -> Result<(Trace, Counts), TraceError> {
    let mut ids = vec![IdTable::default()];
    let parse = |i: u64, line: &[u8], pending: &mut text::Pending| {
        let s = text::trim(line);
        if s.is_empty() || s[0] == b'*' || s[0] == b'#' {
            return Ok(());
        }
        let id: u64 = std::str::from_utf8(s)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| TraceError::BadRecord {
                path: path.into(),
                record: i + 1,
                reason: format!("{:?} is not an integer id", text::shown(s)),
            })?;
        pending.push(0, id);
        pending.end_record();
        Ok(())
    };
    text::number_parsed(path, parse, &mut ids, &mut b)?;
    Ok(b.finish(single_table("ids", ids[0].len() as u64)))
}

/// The index of column `spec_col` (an index, or a name in `header`);
/// `said` is what the spec said of a header (`None`: detected).
pub(super) fn column_index(
    spec_col: &str,
    header: Option<&[&str]>,
    said: Option<bool>,
    path: &Path,
) -> Result<usize, TraceError> {
    if let Ok(i) = spec_col.parse::<usize>() {
        return Ok(i);
    }
    let unrecognised = |reason: String| TraceError::Unrecognised {
        path: path.into(),
        reason,
    };
    let Some(names) = header else {
        return Err(unrecognised(match said {
            Some(false) => format!("column {spec_col:?} is a name, but the spec says header=no"),
            _ => format!(
                "column {spec_col:?} is a name, but the file has no header (none detected: \
                 add header=yes to --columns if its first line names the columns, or give the column's index)"
            ),
        }));
    };
    let mut at = names
        .iter()
        .enumerate()
        .filter(|(_, n)| n.trim() == spec_col)
        .map(|(i, _)| i);
    match (at.next(), at.next()) {
        (Some(i), None) => Ok(i),
        (Some(i), Some(j)) => Err(unrecognised(format!(
            "columns {i} and {j} are both named {spec_col:?} in the header: give the column's index"
        ))),
        (None, _) => Err(unrecognised(format!(
            "no column {spec_col:?} in the header ({})",
            names.join(", ")
        ))),
    }
}

pub(super) fn delimited(
    path: &Path,
    spec: &CsvSpec,
    mut b: Builder<'_>,
    notes: &mut Vec<Note>,
) -> Result<(Trace, Counts), TraceError> {
    let has_header = match spec.header {
        Some(h) => h,
        None => {
            // The first two lines that are not blank decide.
            let two: Vec<String> = text::first_lines(path, 2, true)?
                .into_iter()
                .map(|(_, l)| l)
                .collect();
            let detected = match (two.first(), two.get(1)) {
                (Some(a), Some(b)) => {
                    let (a, b) = (
                        text::cells(a, spec.delimiter),
                        text::cells(b, spec.delimiter),
                    );
                    let a: Vec<&str> = a.iter().map(String::as_str).collect();
                    let b: Vec<&str> = b.iter().map(String::as_str).collect();
                    looks_like_header(&a, &b)
                }
                // A file of one line: a header when it names columns
                // (it then holds no access).
                (Some(a), None) => {
                    let a = text::cells(a, spec.delimiter);
                    lone_header(&a.iter().map(String::as_str).collect::<Vec<_>>())
                }
                _ => false,
            };
            if detected {
                notes.push(Note {
                    warning: false,
                    text: "the first line is a header (detected; --columns header=no reads it as data)"
                        .into(),
                });
            }
            detected
        }
    };
    // The header is the first line that is not blank.
    let (mut header_line, mut header_at) = (None, u64::MAX);
    if has_header {
        match text::first_lines(path, 1, true)?.pop() {
            Some((i, l)) => (header_line, header_at) = (Some(l), i),
            None => return Err(TraceError::Empty { path: path.into() }),
        }
    }
    let header_cells = header_line.map(|h| text::cells(&h, spec.delimiter));
    let header: Option<Vec<&str>> = header_cells
        .as_ref()
        .map(|h| h.iter().map(String::as_str).collect());
    let id_col = column_index(&spec.id, header.as_deref(), spec.header, path)?;
    let table_col = spec
        .table
        .as_deref()
        .map(|c| column_index(c, header.as_deref(), spec.header, path))
        .transpose()?;
    let column = |c: usize| match &header {
        Some(h) => format!("column {c} ({})", h.get(c).map_or("?", |n| n.trim())),
        None => format!("column {c}"),
    };
    let id_name = column(id_col);
    let columns = header.as_ref().map(|h| {
        h.iter()
            .map(|n| n.trim().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    });
    let mut tables = text::Names::default();
    let mut keys: Vec<text::ValueKeys> = Vec::new();
    let mut ids: Vec<IdTable> = Vec::new();
    // Whether each id, read as a number, is the one before plus one.
    let mut counting = true;
    let mut last: Option<i128> = None;
    let mut records = 0u64;
    let delim = spec.delimiter;
    let mut quoted = text::Quoted::default();
    let parse = |i: u64, line: &[u8], pending: &mut text::Pending| {
        if i == header_at || text::trim(line).is_empty() {
            return Ok(());
        }
        let rec = |reason: String| TraceError::BadRecord {
            path: path.into(),
            record: i + 1,
            reason,
        };
        // A line with a quote is split as RFC 4180 quotes fields (rare:
        // every other line is split in place); a quote that does not close
        // on its line leaves it split at every delimiter, as files that do
        // not quote are read.
        let unquoted = memchr::memchr(b'"', line).is_some() && quoted.split(line, delim).is_ok();
        let line_fields: &mut dyn Iterator<Item = &[u8]> = if unquoted {
            &mut (0..quoted.len()).map(|k| quoted.field(k))
        } else {
            &mut line.split(|&b| b == delim)
        };
        let (mut id, mut table) = (None, None);
        for (k, f) in line_fields.enumerate() {
            if k == id_col {
                id = Some(f);
            }
            if Some(k) == table_col {
                table = Some(f);
            }
            if id.is_some() && (table.is_some() || table_col.is_none()) {
                break;
            }
        }
        let Some(id) = id else {
            let n = match text::split_quoted(line, delim) {
                Ok(f) => f.len(),
                Err(_) => line.split(|&b| b == delim).count(),
            };
            return Err(rec(format!("has {n} columns, the id is column {id_col}")));
        };
        let id = text::trim(id);
        if id.is_empty() {
            return Err(rec(format!("empty id in column {id_col}")));
        }
        records += 1;
        let num = if counting {
            std::str::from_utf8(id)
                .ok()
                .and_then(|s| s.parse::<i128>().ok())
        } else {
            None
        };
        counting &= match (last, num) {
            (None, Some(_)) => true,
            (Some(l), Some(n)) => n == l + 1,
            _ => false,
        };
        last = num;
        let t = match (table_col, table) {
            (Some(c), None) => return Err(rec(format!("has no table column {c}"))),
            (_, Some(name)) => tables.id(text::trim(name)),
            (None, None) => tables.id(b""),
        };
        if t as usize == keys.len() {
            keys.push(text::ValueKeys::default());
        }
        pending.push(t, keys[t as usize].key(id));
        pending.end_record();
        Ok(())
    };
    text::number_parsed(path, parse, &mut ids, &mut b)?;
    let distinct: u64 = ids.iter().map(|d| d.len() as u64).sum();
    let warn = |text: String| Note {
        warning: true,
        text,
    };
    let choose = match &columns {
        Some(c) => format!("choose the id with --columns id=NAME (the columns: {c})"),
        None => "choose the id with --columns id=N".to_string(),
    };
    if records >= 20 && distinct <= 2 {
        notes.push(warn(format!(
            "the id, {id_name}, has {distinct} distinct value(s) in {records} records: it looks constant, not an id; {choose}"
        )));
    } else if records >= 20 && counting {
        notes.push(warn(format!(
            "the id, {id_name}, counts up by one each record: it looks like a row counter, not an id (every access would miss); {choose}"
        )));
    } else if records >= 20 && distinct == records {
        notes.push(warn(format!(
            "the id, {id_name}, never repeats in {records} records (a row counter or an event id?): every access would miss; {choose}"
        )));
    }
    let tables = tables
        .into_names()
        .into_iter()
        .zip(&ids)
        .map(|(n, ids)| TraceTable {
            name: if n.is_empty() { "ids".into() } else { n },
            rows: (ids.len() as u64).max(1),
            dim: 0,
            row_bytes: 0,
        })
        .collect();
    Ok(b.finish(tables))
}

pub(super) fn criteo(path: &Path, mut b: Builder<'_>) -> Result<(Trace, Counts), TraceError> {
    let mut ids: Vec<IdTable> = (0..26).map(|_| IdTable::default()).collect();
    let mut delim = b'\t';
    let parse = |i: u64, line: &[u8], pending: &mut text::Pending| {
        if i == 0 && line.starts_with(b"label,") {
            delim = b',';
            return Ok(()); // the CSV-with-header variant
        }
        if line.is_empty() {
            return Ok(());
        }
        let mut cols: [&[u8]; 40] = [&[]; 40];
        let n = text::split_fields(line, delim, &mut cols);
        // Some copies drop trailing empty fields: fewer columns mean the
        // last categorical values are missing.
        if !(14..=40).contains(&n) {
            return Err(TraceError::BadRecord {
                path: path.into(),
                record: i + 1,
                reason: format!("has {n} columns, Criteo has 40 (label, I1-I13, C1-C26)"),
            });
        }
        for (t, v) in cols[14..n].iter().enumerate() {
            let v = text::trim(v);
            if v.is_empty() {
                continue;
            }
            let h = text::hex_u32(v).ok_or_else(|| TraceError::BadRecord {
                path: path.into(),
                record: i + 1,
                reason: format!("C{} = {:?} is not a 32-bit hex hash", t + 1, text::shown(v)),
            })?;
            pending.push(t as u32, h as u64);
        }
        pending.end_record();
        Ok(())
    };
    text::number_parsed(path, parse, &mut ids, &mut b)?;
    let tables = ids
        .iter()
        .enumerate()
        .map(|(t, d)| TraceTable {
            name: format!("C{}", t + 1),
            rows: (d.len() as u64).max(1),
            dim: 0,
            row_bytes: 0,
        })
        .collect();
    Ok(b.finish(tables))
}

/// Avazu's categorical columns: every column after `id`, `click` and `hour`.
const AVAZU_SKIP: usize = 3;

pub(super) fn avazu(path: &Path, mut b: Builder<'_>) -> Result<(Trace, Counts), TraceError> {
    let header = match text::first_lines(path, 1, false)?.pop() {
        Some((_, l)) => l,
        None => return Err(TraceError::Empty { path: path.into() }),
    };
    if !header.starts_with("id,click,hour,") {
        return Err(TraceError::BadRecord {
            path: path.into(),
            record: 1,
            reason: "an Avazu file starts with the header id,click,hour,...".into(),
        });
    }
    let names: Vec<String> = header
        .split(',')
        .skip(AVAZU_SKIP)
        .map(|n| n.trim().to_string())
        .collect();
    let mut keys: Vec<text::ValueKeys> = names.iter().map(|_| Default::default()).collect();
    let mut ids: Vec<IdTable> = names.iter().map(|_| IdTable::default()).collect();
    let width = names.len() + AVAZU_SKIP;
    let parse = |i: u64, line: &[u8], pending: &mut text::Pending| {
        if i == 0 || text::trim(line).is_empty() {
            return Ok(());
        }
        let mut n = 0;
        for (k, v) in line.split(|&c| c == b',').enumerate() {
            n = k + 1;
            if k >= AVAZU_SKIP && k < width {
                let t = k - AVAZU_SKIP;
                pending.push(t as u32, keys[t].key(text::trim(v)));
            }
        }
        if n != width {
            return Err(TraceError::BadRecord {
                path: path.into(),
                record: i + 1,
                reason: format!("has {n} columns, the header {width}"),
            });
        }
        pending.end_record();
        Ok(())
    };
    text::number_parsed(path, parse, &mut ids, &mut b)?;
    let tables = names
        .into_iter()
        .zip(&ids)
        .map(|(name, d)| TraceTable {
            name,
            rows: (d.len() as u64).max(1),
            dim: 0,
            row_bytes: 0,
        })
        .collect();
    Ok(b.finish(tables))
}

/// The fields of a MovieLens line into `out` (the first four; the rest
/// are counted): returns how many there are. A line with `::` is
/// ml-1m's `ratings.dat` and splits there (a single `:` is part of a
/// value); any other splits at runs of tabs (`u.data`, RecBole's
/// `.inter`), commas (`ratings.csv`) and spaces.
fn ml_fields<'a>(line: &'a [u8], out: &mut [&'a [u8]; 4]) -> usize {
    let mut n = 0;
    let mut keep = |f: &'a [u8]| {
        if let Some(o) = out.get_mut(n) {
            *o = f;
        }
        n += 1;
    };
    // One search of the line: its first `::`, if any, starts the split.
    let mut seps = memchr::memmem::find_iter(line, b"::").peekable();
    if seps.peek().is_some() {
        let mut at = 0;
        for end in seps {
            keep(text::trim(&line[at..end]));
            at = end + 2;
        }
        keep(text::trim(&line[at..]));
    } else {
        line.split(|c| matches!(c, b'\t' | b',' | b' '))
            .filter(|f| !f.is_empty())
            .for_each(keep);
    }
    n
}

pub(super) fn movielens(path: &Path, b: Builder<'_>) -> Result<(Trace, Counts), TraceError> {
    movielens_numbered(path, b, [IdTable::default(), IdTable::default()])
}

/// [`movielens`] with the id tables of its users and items given (tests
/// give them a small limit).
fn movielens_numbered(
    path: &Path,
    mut b: Builder<'_>,
    ids: [IdTable; 2],
) -> Result<(Trace, Counts), TraceError> {
    // Each rating as (timestamp, user's key, item's key): 24 bytes, no
    // strings (ml-25m has 25 M of them).
    let mut keys = [text::ValueKeys::default(), text::ValueKeys::default()];
    let mut recs: Vec<(f64, u64, u64)> = Vec::new();
    text::for_each_line(path, |i, line| {
        if i == 0 && line.windows(6).any(|w| w == b":token") {
            return Ok(()); // RecBole .inter header
        }
        if text::trim(line).is_empty() {
            return Ok(());
        }
        let rec = |reason: String| TraceError::BadRecord {
            path: path.into(),
            record: i + 1,
            reason,
        };
        let mut cols: [&[u8]; 4] = [&[]; 4];
        let n = ml_fields(line, &mut cols);
        if n < 4 {
            return Err(rec(format!(
                "has {n} columns, need user, item, rating, timestamp"
            )));
        }
        let [user, item, rating, ts] = cols;
        let Some(t) = std::str::from_utf8(ts)
            .ok()
            .and_then(|t| t.parse::<f64>().ok())
        else {
            let words = |f: &[u8]| !f.iter().any(u8::is_ascii_digit);
            if i == 0 && words(rating) && words(ts) {
                return Ok(()); // a header: `userId,movieId,rating,timestamp`
            }
            return Err(rec(format!(
                "timestamp {:?} is not a number",
                text::shown(ts)
            )));
        };
        recs.push((t, keys[0].key(user), keys[1].key(item)));
        Ok(())
    })?;
    // Timestamp order; ties keep file order (a stable sort).
    recs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut ids = Vec::from(ids);
    let mut pending = text::Pending::default();
    for (_, u, it) in recs {
        pending.push(0, u);
        pending.push(1, it);
        pending.end_record();
        if pending.full() {
            pending.flush(&mut ids, &mut b);
        }
    }
    pending.flush(&mut ids, &mut b);
    check_numbered(path, &ids)?;
    let (users, items) = (ids[0].len() as u64, ids[1].len() as u64);
    let tables = vec![
        TraceTable {
            name: "users".into(),
            rows: users.max(1),
            dim: 0,
            row_bytes: 0,
        },
        TraceTable {
            name: "items".into(),
            rows: items.max(1),
            dim: 0,
            row_bytes: 0,
        },
    ];
    Ok(b.finish(tables))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An oracleGeneral file with more distinct objects than the id
    /// table numbers is refused naming the file (the objects past the
    /// limit would alias the last id); at the limit it is read whole.
    #[test]
    fn an_oracle_general_file_past_its_ids_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.oracleGeneral.bin");
        // Records: time u32, object u64, size u32, next time i64.
        let objects = [7u64, 9, 7, 11, 13, 9, 13];
        let bytes: Vec<u8> = objects
            .iter()
            .enumerate()
            .flat_map(|(t, &o)| {
                let mut r = (t as u32).to_le_bytes().to_vec();
                r.extend(o.to_le_bytes());
                r.extend(100u32.to_le_bytes());
                r.extend((-1i64).to_le_bytes());
                r
            })
            .collect();
        std::fs::write(&p, &bytes).unwrap();
        let records = og_records(&p).unwrap();
        assert_eq!(records, objects.len());
        let mut ids = IdTable::with_limit(3);
        match og_feed(&p, records, &mut ids, 2, |_| {}) {
            Err(TraceError::TooManyIds { path, table: 0, .. }) => assert_eq!(path, p),
            r => panic!("{r:?}"),
        }
        let mut ids = IdTable::with_limit(4);
        let mut rows = Vec::new();
        og_feed(&p, records, &mut ids, 2, |b| {
            rows.extend(b.iter().map(|a| a.row))
        })
        .unwrap();
        assert_eq!(rows, vec![0, 1, 0, 2, 3, 1, 3]);
    }

    /// A MovieLens file with more distinct items than the id table
    /// numbers is refused naming the file and the table (items: 1); at
    /// the limit it is read.
    #[test]
    fn a_movielens_file_past_its_ids_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("u.data");
        std::fs::write(
            &p,
            "1\t10\t5\t100\n1\t11\t4\t101\n2\t12\t3\t102\n2\t10\t3\t103\n",
        )
        .unwrap();
        let limited = |n| [IdTable::with_limit(n), IdTable::with_limit(n)];
        match movielens_numbered(&p, Builder::new(2), limited(2)) {
            Err(TraceError::TooManyIds { path, table: 1, .. }) => assert_eq!(path, p),
            r => panic!("{:?}", r.map(|(t, _)| t.accesses.len())),
        }
        let (t, _) = movielens_numbered(&p, Builder::new(2), limited(3)).unwrap();
        assert_eq!(t.accesses.len(), 8);
        assert_eq!((t.tables[0].rows, t.tables[1].rows), (2, 3));
    }

    /// The blocks read on a thread of their own are those read here, in
    /// order, and a file shorter than its records say fails alike.
    #[test]
    fn blocks_alike_with_and_without_a_thread() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.oracleGeneral.bin");
        let records = 3 * OG_BLOCK_RECORDS + 1234;
        let bytes: Vec<u8> = (0..records * 24).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&p, &bytes).unwrap();
        let collect = |threaded: bool, records: usize| {
            let mut got = Vec::new();
            let r = if threaded {
                og_blocks(&p, records, |b| got.push(b.to_vec()))
            } else {
                og_blocks_here(&p, records, |b| got.push(b.to_vec()))
            };
            (r.map_err(|e| e.to_string()), got)
        };
        let (r, blocks) = collect(true, records);
        assert!(r.is_ok());
        assert_eq!(blocks.len(), 4);
        assert!(blocks.concat() == bytes);
        assert!(collect(false, records) == (r, blocks));
        // More records than the file holds: both fail on the last block.
        let (e, _) = collect(true, records + 1);
        assert!(e.is_err());
        assert_eq!(e, collect(false, records + 1).0);
    }
}
