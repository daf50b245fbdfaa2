//! The readers, one per input format: each turns a file into a trace of
//! dense ids, batched.

use std::fs::File;
use std::io::{BufRead, Read};
use std::path::Path;

use super::*;

/// Records of an oracleGeneral file read and parsed per block.
const OG_BLOCK_RECORDS: usize = 1 << 16;

/// libCacheSim oracleGeneral: 1.5 MB blocks of records read with `read`
/// (not mapped: a file truncated under a mapping raises SIGBUS), their ids
/// numbered by an open-addressing table sized from the file. One thread:
/// parsing in parallel pieces (each numbering its own keys, then merged in
/// order) measured slower on a 5.3 M-record file (0.49 s against 0.35 s for
/// the whole `emb-replay simulate`), the work per record being a load and
/// a probe.
pub(super) fn oracle_general(path: &Path, batch: usize) -> Result<Trace, TraceError> {
    let records = og_records(path)?;
    let mut ids = IdTable::with_capacity(records / 8);
    let mut accesses: Vec<Access> = Vec::with_capacity(records);
    og_blocks(path, records, |block| {
        og_number(&mut ids, block, |row| {
            accesses.push(Access {
                table: 0,
                row,
                kind: AccessKind::Lookup,
            })
        })
    })?;
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
fn og_blocks(path: &Path, records: usize, mut each: impl FnMut(&[u8])) -> Result<(), TraceError> {
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

/// Number the ids of a block of records (`ids` numbers each new id next),
/// handing `row` each record's dense id in order.
fn og_number(ids: &mut IdTable, block: &[u8], mut row: impl FnMut(u64)) {
    let key = |r: &[u8]| u64::from_le_bytes(r[4..12].try_into().expect("8 bytes"));
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
    og_blocks(path, records, |block| og_number(&mut ids, block, |_| {}))?;
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
) -> Result<Vec<TraceTable>, TraceError> {
    let records = og_records(path)?;
    let mut ids = IdTable::with_capacity(records.min(1 << 24) / 8);
    og_feed(path, records, &mut ids, batch, each)?;
    Ok(single_table("objects", ids.len() as u64))
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
    og_blocks(path, records, |block| {
        og_number(ids, block, |row| {
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
    if !b.is_empty() {
        each(&b);
    }
    Ok(())
}

pub(super) fn txt(path: &Path, mut b: Builder<'_>) -> Result<(Trace, Counts), TraceError> {
    let r = open_text(path)?;
    let mut ids = crate::densify::IdTable::default();
    // One line buffer for the file, not a String per line.
    let mut r = r;
    let mut line = String::new();
    for i in 0.. {
        line.clear();
        if r.read_line(&mut line).map_err(io_err(path))? == 0 {
            break;
        }
        let s = line.trim();
        if s.is_empty() || s.starts_with('*') || s.starts_with('#') {
            continue;
        }
        let id: u64 = s.parse().map_err(|_| TraceError::BadRecord {
            path: path.into(),
            record: i as u64 + 1,
            reason: format!("{s:?} is not an integer id"),
        })?;
        let row = ids.id(id) as u64;
        b.push(0, row);
        b.end_sample();
    }
    Ok(b.finish(single_table("ids", ids.len() as u64)))
}

pub(super) fn column_index(
    spec_col: &str,
    header: Option<&[&str]>,
    path: &Path,
) -> Result<usize, TraceError> {
    if let Ok(i) = spec_col.parse::<usize>() {
        return Ok(i);
    }
    let names = header.ok_or_else(|| TraceError::Unrecognised {
        path: path.into(),
        reason: format!("column {spec_col:?} is a name, but the spec says header=no"),
    })?;
    names
        .iter()
        .position(|n| n.trim() == spec_col)
        .ok_or_else(|| TraceError::Unrecognised {
            path: path.into(),
            reason: format!(
                "no column {spec_col:?} in the header ({})",
                names.join(", ")
            ),
        })
}

pub(super) fn delimited(
    path: &Path,
    spec: &CsvSpec,
    mut b: Builder<'_>,
    notes: &mut Vec<Note>,
) -> Result<(Trace, Counts), TraceError> {
    let delim = spec.delimiter as char;
    let has_header = match spec.header {
        Some(h) => h,
        None => {
            // The first two lines decide.
            let mut two = open_text(path)?.lines().take(2);
            let a = two.next().transpose().map_err(io_err(path))?;
            let b = two.next().transpose().map_err(io_err(path))?;
            let detected = match (a, b) {
                (Some(a), Some(b)) => {
                    let a: Vec<&str> = a.split(delim).collect();
                    let b: Vec<&str> = b.split(delim).collect();
                    looks_like_header(&a, &b)
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
    let r = open_text(path)?;
    let mut lines = r.lines().enumerate();
    let header_line = if has_header {
        match lines.next() {
            Some((_, l)) => Some(l.map_err(io_err(path))?),
            None => return Err(TraceError::Empty { path: path.into() }),
        }
    } else {
        None
    };
    let header: Option<Vec<&str>> = header_line.as_deref().map(|h| h.split(delim).collect());
    let id_col = column_index(&spec.id, header.as_deref(), path)?;
    let table_col = spec
        .table
        .as_deref()
        .map(|c| column_index(c, header.as_deref(), path))
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
    let mut tables: Densify<String> = Densify::default();
    let mut ids: Vec<Densify<String>> = Vec::new();
    // Whether each id, read as a number, is the one before plus one.
    let mut counting = true;
    let mut last: Option<i128> = None;
    let mut records = 0u64;
    for (i, line) in lines {
        let line = line.map_err(io_err(path))?;
        if line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split(delim).collect();
        let rec = |reason: String| TraceError::BadRecord {
            path: path.into(),
            record: i as u64 + 1,
            reason,
        };
        let id = cols
            .get(id_col)
            .ok_or_else(|| {
                rec(format!(
                    "has {} columns, the id is column {id_col}",
                    cols.len()
                ))
            })?
            .trim();
        if id.is_empty() {
            return Err(rec(format!("empty id in column {id_col}")));
        }
        records += 1;
        let n = id.parse::<i128>().ok();
        counting &= match (last, n) {
            (None, Some(_)) => true,
            (Some(l), Some(n)) => n == l + 1,
            _ => false,
        };
        last = n;
        let t = match table_col {
            Some(c) => {
                let name = cols
                    .get(c)
                    .ok_or_else(|| rec(format!("has no table column {c}")))?
                    .trim();
                tables.id(name.to_string())
            }
            None => tables.id(String::new()),
        };
        if t as usize == ids.len() {
            ids.push(Densify::default());
        }
        let row = ids[t as usize].id(id.to_string());
        b.push(t as u32, row);
        b.end_sample();
    }
    let distinct: u64 = ids.iter().map(Densify::len).sum();
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
        .into_keys()
        .into_iter()
        .zip(&ids)
        .map(|(n, ids)| TraceTable {
            name: if n.is_empty() { "ids".into() } else { n },
            rows: ids.len().max(1),
            dim: 0,
            row_bytes: 0,
        })
        .collect();
    Ok(b.finish(tables))
}

pub(super) fn criteo(path: &Path, mut b: Builder<'_>) -> Result<(Trace, Counts), TraceError> {
    let r = open_text(path)?;
    let mut ids: Vec<Densify<u32>> = (0..26).map(|_| Densify::default()).collect();
    let mut first = true;
    let mut delim = '\t';
    for (i, line) in r.lines().enumerate() {
        let line = line.map_err(io_err(path))?;
        if first {
            first = false;
            if line.starts_with("label,") {
                delim = ',';
                continue; // the CSV-with-header variant
            }
        }
        if line.is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split(delim).collect();
        // Some copies drop trailing empty fields: fewer columns mean the
        // last categorical values are missing.
        if !(14..=40).contains(&cols.len()) {
            return Err(TraceError::BadRecord {
                path: path.into(),
                record: i as u64 + 1,
                reason: format!(
                    "has {} columns, Criteo has 40 (label, I1-I13, C1-C26)",
                    cols.len()
                ),
            });
        }
        for (t, v) in cols[14..].iter().enumerate() {
            let v = v.trim();
            if v.is_empty() {
                continue;
            }
            let h = u32::from_str_radix(v, 16).map_err(|_| TraceError::BadRecord {
                path: path.into(),
                record: i as u64 + 1,
                reason: format!("C{} = {v:?} is not a 32-bit hex hash", t + 1),
            })?;
            let row = ids[t].id(h);
            b.push(t as u32, row);
        }
        b.end_sample();
    }
    let tables = ids
        .iter()
        .enumerate()
        .map(|(t, d)| TraceTable {
            name: format!("C{}", t + 1),
            rows: d.len().max(1),
            dim: 0,
            row_bytes: 0,
        })
        .collect();
    Ok(b.finish(tables))
}

/// Avazu's categorical columns: every column after `id`, `click` and `hour`.
const AVAZU_SKIP: usize = 3;

pub(super) fn avazu(path: &Path, mut b: Builder<'_>) -> Result<(Trace, Counts), TraceError> {
    let r = open_text(path)?;
    let mut lines = r.lines().enumerate();
    let header = match lines.next() {
        Some((_, l)) => l.map_err(io_err(path))?,
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
    let mut ids: Vec<Densify<String>> = names.iter().map(|_| Densify::default()).collect();
    for (i, line) in lines {
        let line = line.map_err(io_err(path))?;
        if line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line.split(',').collect();
        if cols.len() != names.len() + AVAZU_SKIP {
            return Err(TraceError::BadRecord {
                path: path.into(),
                record: i as u64 + 1,
                reason: format!(
                    "has {} columns, the header {}",
                    cols.len(),
                    names.len() + AVAZU_SKIP
                ),
            });
        }
        for (t, v) in cols[AVAZU_SKIP..].iter().enumerate() {
            let row = ids[t].id(v.trim().to_string());
            b.push(t as u32, row);
        }
        b.end_sample();
    }
    let tables = names
        .into_iter()
        .zip(&ids)
        .map(|(name, d)| TraceTable {
            name,
            rows: d.len().max(1),
            dim: 0,
            row_bytes: 0,
        })
        .collect();
    Ok(b.finish(tables))
}

pub(super) fn movielens(path: &Path, mut b: Builder<'_>) -> Result<(Trace, Counts), TraceError> {
    let r = open_text(path)?;
    let mut recs: Vec<(f64, u64, String, String)> = Vec::new();
    for (i, line) in r.lines().enumerate() {
        let line = line.map_err(io_err(path))?;
        if i == 0 && line.contains(":token") {
            continue; // RecBole .inter header
        }
        if line.trim().is_empty() {
            continue;
        }
        let cols: Vec<&str> = line
            .split(['\t', ',', ' '])
            .filter(|c| !c.is_empty())
            .collect();
        let rec = |reason: String| TraceError::BadRecord {
            path: path.into(),
            record: i as u64 + 1,
            reason,
        };
        if cols.len() < 4 {
            return Err(rec(format!(
                "has {} columns, need user, item, rating, timestamp",
                cols.len()
            )));
        }
        let ts: f64 = cols[3]
            .parse()
            .map_err(|_| rec(format!("timestamp {:?} is not a number", cols[3])))?;
        recs.push((ts, i as u64, cols[0].to_string(), cols[1].to_string()));
    }
    // Timestamp order; ties keep file order.
    recs.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut users = Densify::default();
    let mut items = Densify::default();
    for (_, _, u, it) in recs {
        let ur = users.id(u);
        let ir = items.id(it);
        b.push(0, ur);
        b.push(1, ir);
        b.end_sample();
    }
    let tables = vec![
        TraceTable {
            name: "users".into(),
            rows: users.len().max(1),
            dim: 0,
            row_bytes: 0,
        },
        TraceTable {
            name: "items".into(),
            rows: items.len().max(1),
            dim: 0,
            row_bytes: 0,
        },
    ];
    Ok(b.finish(tables))
}
