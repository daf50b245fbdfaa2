//! Text traces read as bytes: the file (or its gzip stream) in large
//! blocks, split into lines and fields in place, ids numbered from their
//! bytes. No `String` or `Vec` per line or per field: the readers of CSV,
//! one-id-per-line, Criteo and Avazu files spent most of their time
//! allocating those and hashing strings (about 20 MB of text a second).

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use super::{io_err, Builder, TraceError};
use crate::densify::{FastHash, IdTable};

/// Bytes read from the file at a time (a longer line grows the buffer).
const BLOCK: usize = 4 << 20;
/// The longest line a text trace may have: a line past it (a binary file,
/// `/dev/zero`, a trace with no newlines) is refused rather than held
/// whole, whatever its length.
pub(super) const MAX_LINE: usize = 16 << 20;

/// The error of a line past [`MAX_LINE`], line `index` (from 0).
fn too_long(path: &Path, index: u64) -> TraceError {
    TraceError::BadRecord {
        path: path.into(),
        record: index + 1,
        reason: format!(
            "a line longer than {} MiB: not a text trace (is --format right?)",
            MAX_LINE >> 20
        ),
    }
}

/// The UTF-8 byte-order mark some tools (Excel, PowerShell) write
/// before a file's first line: not part of it.
pub(super) const BOM: &[u8] = b"\xef\xbb\xbf";

/// The reader of `path`: the file, or its decompressed stream where it
/// starts as gzip does or its name ends in `.gz` (as [`super::detect`]
/// decides: a gzip file named `trace.csv` is read decompressed).
fn open(path: &Path) -> Result<Box<dyn Read>, TraceError> {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::File::open(path).map_err(io_err(path))?;
    let mut head = [0u8; 4];
    let mut n = 0;
    while n < head.len() {
        match f.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(path)(e)),
        }
    }
    f.seek(SeekFrom::Start(0)).map_err(io_err(path))?;
    let named = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    if named || super::compression(&head[..n]) == Some("gzip") {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(f)))
    } else {
        Ok(Box::new(f))
    }
}

/// Hand each line of `path` to `each(index, line)` in order: `index`
/// counts every line from 0, and `line` is without its end (`\n` or
/// `\r\n`), as [`std::io::BufRead::lines`] gives them (a last line
/// without a newline is a line; an empty one after the last newline is
/// not), and a byte-order mark before the first line left out. Stops at
/// the first error `each` returns.
pub(super) fn for_each_line(
    path: &Path,
    mut each: impl FnMut(u64, &[u8]) -> Result<(), TraceError>,
) -> Result<(), TraceError> {
    let mut r = open(path)?;
    let mut buf = vec![0u8; BLOCK];
    let mut filled = 0usize;
    let mut index = 0u64;
    loop {
        if filled > MAX_LINE {
            // Bytes of one unended line past the limit.
            return Err(too_long(path, index));
        }
        if filled == buf.len() {
            // A line longer than the buffer.
            buf.resize(buf.len() * 2, 0);
        }
        let n = match r.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err(path)(e)),
        };
        if n == 0 {
            if filled > 0 {
                let line = &buf[..filled];
                let line = match index {
                    0 => line.strip_prefix(BOM).unwrap_or(line),
                    _ => line,
                };
                each(index, line)?;
            }
            return Ok(());
        }
        let scan = filled;
        filled += n;
        // Only the bytes just read can hold the last newline.
        let Some(last) = memchr::memrchr(b'\n', &buf[scan..filled]).map(|i| scan + i) else {
            continue;
        };
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', &buf[..=last]) {
            if nl - start > MAX_LINE {
                return Err(too_long(path, index));
            }
            let mut line = &buf[start..nl];
            if index == 0 {
                line = line.strip_prefix(BOM).unwrap_or(line);
            }
            each(index, line.strip_suffix(b"\r").unwrap_or(line))?;
            index += 1;
            start = nl + 1;
        }
        buf.copy_within(last + 1..filled, 0);
        filled -= last + 1;
    }
}

/// The first `n` lines of `path` (fewer in a shorter file) with their
/// indices (as [`for_each_line`] numbers them), as text (bytes that are
/// not UTF-8 replaced), without their ends; lines blank after [`trim`]
/// left out when `skip_blank` (the readers skip them too): a header, or
/// the lines that tell whether there is one.
pub(super) fn first_lines(
    path: &Path,
    n: usize,
    skip_blank: bool,
) -> Result<Vec<(u64, String)>, TraceError> {
    use std::io::BufRead;
    let mut r = std::io::BufReader::new(open(path)?);
    let mut out = Vec::with_capacity(n);
    let mut line = Vec::new();
    let mut index = 0u64;
    while out.len() < n {
        line.clear();
        let mut within = (&mut r).take(MAX_LINE as u64 + 1);
        if within.read_until(b'\n', &mut line).map_err(io_err(path))? == 0 {
            break;
        }
        if line.len() > MAX_LINE {
            return Err(too_long(path, index));
        }
        let mut l = line
            .strip_suffix(b"\n")
            .map_or(&line[..], |l| l.strip_suffix(b"\r").unwrap_or(l));
        if index == 0 {
            l = l.strip_prefix(BOM).unwrap_or(l);
        }
        if !(skip_blank && trim(l).is_empty()) {
            out.push((index, lossy(l).into_owned()));
        }
        index += 1;
    }
    Ok(out)
}

/// The fields of `line` split at `delim` into `out` (at most its length;
/// the rest are counted, not kept): returns how many there are.
#[inline]
pub(super) fn split_fields<'a>(line: &'a [u8], delim: u8, out: &mut [&'a [u8]]) -> usize {
    let mut n = 0;
    for f in line.split(|&b| b == delim) {
        if let Some(o) = out.get_mut(n) {
            *o = f;
        }
        n += 1;
    }
    n
}

/// `v` without the white space `str::trim` removes at its ends: ASCII
/// blanks, the vertical tab, and Unicode's (no-break space, U+0085,
/// U+2000-U+200A, U+3000, ...). Bytes that are not UTF-8 stay, and a
/// value with only ASCII at its ends (nearly all) costs one pass of
/// `trim_ascii`.
#[inline]
pub(super) fn trim(v: &[u8]) -> &[u8] {
    let mut v = v.trim_ascii();
    while let Some(n) = first_blank(v) {
        v = v[n..].trim_ascii_start();
    }
    while let Some(n) = last_blank(v) {
        v = v[..v.len() - n].trim_ascii_end();
    }
    v
}

/// The length of the white-space character `v` starts with, if it does
/// (beyond the ASCII blanks `trim_ascii` takes).
fn first_blank(v: &[u8]) -> Option<usize> {
    let &b = v.first()?;
    if b == 0x0b {
        return Some(1);
    }
    if b < 0x80 {
        return None;
    }
    let len = match b {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => return None,
    };
    let c = std::str::from_utf8(v.get(..len)?).ok()?.chars().next()?;
    c.is_whitespace().then_some(len)
}

/// The length of the white-space character `v` ends with, if it does.
fn last_blank(v: &[u8]) -> Option<usize> {
    let &b = v.last()?;
    if b == 0x0b {
        return Some(1);
    }
    if b < 0x80 {
        return None;
    }
    // The character starts at the last byte that is not a continuation
    // byte (10xxxxxx), at most 4 from the end.
    let start = (v.len().saturating_sub(4)..v.len())
        .rev()
        .find(|&i| v[i] & 0xc0 != 0x80)?;
    let c = std::str::from_utf8(&v[start..]).ok()?.chars().next()?;
    c.is_whitespace().then_some(v.len() - start)
}

/// The fields of `line` split at `delim`, where a field may be quoted
/// as RFC 4180 writes it: `"a,b"` is `a,b` and `""` inside quotes is one
/// `"`; text after a closing quote, before the next delimiter, is kept.
/// A quote that does not close on the line is an error (a quoted field
/// that spans lines is not read).
pub(super) fn split_quoted(line: &[u8], delim: u8) -> Result<Vec<Vec<u8>>, String> {
    let mut q = Quoted::default();
    q.split(line, delim)?;
    Ok((0..q.len()).map(|k| q.field(k).to_vec()).collect())
}

/// [`split_quoted`]'s fields in buffers kept from line to line (a file
/// that quotes every field allocates nothing a line).
#[derive(Default)]
pub(super) struct Quoted {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Quoted {
    /// Split `line` as [`split_quoted`] does, into these buffers.
    pub(super) fn split(&mut self, line: &[u8], delim: u8) -> Result<(), String> {
        self.bytes.clear();
        self.ends.clear();
        let mut i = 0;
        let mut start = true;
        while i < line.len() {
            let c = line[i];
            if start && c == b'"' {
                // A quoted field, up to its closing quote.
                i += 1;
                loop {
                    match line.get(i) {
                        None => {
                            return Err(format!(
                                "field {} opens a quote that does not close on its line",
                                self.ends.len()
                            ))
                        }
                        Some(b'"') if line.get(i + 1) == Some(&b'"') => {
                            self.bytes.push(b'"');
                            i += 2;
                        }
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(_) => {
                            // Up to the next quote at once.
                            let run = memchr::memchr(b'"', &line[i..]).unwrap_or(line.len() - i);
                            self.bytes.extend_from_slice(&line[i..i + run]);
                            i += run;
                        }
                    }
                }
                start = false;
                continue;
            }
            if c == delim {
                self.ends.push(self.bytes.len());
                start = true;
            } else {
                self.bytes.push(c);
                start = false;
            }
            i += 1;
        }
        self.ends.push(self.bytes.len());
        Ok(())
    }

    /// Fields of the last line split.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Field `k` of the last line split.
    pub(super) fn field(&self, k: usize) -> &[u8] {
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        &self.bytes[start..self.ends[k]]
    }
}

/// [`split_quoted`] of a header or a line that decides one, as text
/// (bytes that are not UTF-8 replaced); an unclosed quote leaves the
/// line split at every delimiter.
pub(super) fn cells(line: &str, delim: u8) -> Vec<String> {
    match split_quoted(line.as_bytes(), delim) {
        Ok(f) => f.iter().map(|c| lossy(c).into_owned()).collect(),
        Err(_) => line.split(delim as char).map(str::to_string).collect(),
    }
}

/// `v` as a hexadecimal `u32`, as `u32::from_str_radix(v, 16)` reads it
/// (an optional `+`, then digits of either case; no overflow).
#[inline]
pub(super) fn hex_u32(v: &[u8]) -> Option<u32> {
    let v = v.strip_prefix(b"+").unwrap_or(v);
    if v.is_empty() {
        return None;
    }
    let mut x: u32 = 0;
    for &b in v {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        x = x.checked_mul(16)?.checked_add(d as u32)?;
    }
    Some(x)
}

/// `v` as text (bytes that are not UTF-8 replaced).
fn lossy(v: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(v)
}

/// Bytes of a value an error message shows at most.
const SHOWN: usize = 64;

/// `v` as text for a one-line message: bytes that are not UTF-8 replaced,
/// and a value longer than [`SHOWN`] bytes cut, saying how long it is (a
/// binary file read as text has "lines" of many kilobytes).
pub(super) fn shown(v: &[u8]) -> String {
    if v.len() <= SHOWN {
        return lossy(v).into_owned();
    }
    format!("{}... ({} bytes)", lossy(&v[..SHOWN]), v.len())
}

/// Keys of a column's values, by their bytes: distinct values have
/// distinct keys, so numbering the keys in order of first appearance
/// gives the same ids as numbering the values as strings.
///
/// A value of 1 to 15 lower-case hexadecimal digits (most ids in these
/// files: hashes and decimal numbers) is its own key, `len << 60 |
/// value`, with no hashing of strings: distinct such strings have
/// distinct keys (the length keeps leading zeros apart). Any other value
/// is interned and keyed by its index, below `2^60`, so it never meets a
/// key of the first kind.
#[derive(Default)]
pub(super) struct ValueKeys {
    interned: HashMap<Box<[u8]>, u64, FastHash>,
}

impl ValueKeys {
    /// The key of `v` (see the type's documentation).
    #[inline]
    pub(super) fn key(&mut self, v: &[u8]) -> u64 {
        if (1..=15).contains(&v.len()) {
            let mut x = 0u64;
            let mut hex = true;
            for &b in v {
                let d = match b {
                    b'0'..=b'9' => b - b'0',
                    b'a'..=b'f' => b - b'a' + 10,
                    _ => {
                        hex = false;
                        break;
                    }
                };
                x = x << 4 | d as u64;
            }
            if hex {
                return (v.len() as u64) << 60 | x;
            }
        }
        if let Some(&k) = self.interned.get(v) {
            return k;
        }
        let k = self.interned.len() as u64;
        self.interned.insert(v.into(), k);
        k
    }
}

/// Records parsed but not yet numbered: each table's keys are numbered
/// by an [`IdTable`] whose slots are random memory, a cache miss each in
/// a large table. Holding a few thousand records lets the numbering ask
/// for the slot of a key [`Pending::AHEAD`] keys before its turn, as the
/// oracleGeneral reader does, instead of waiting on each in turn; and
/// lets one thread parse while another numbers ([`number_parsed`]).
#[derive(Default)]
pub(super) struct Pending {
    /// `(table, key)` of each access, in order.
    keys: Vec<(u32, u64)>,
    /// Where each record's accesses end in `keys`.
    ends: Vec<u32>,
}

impl Pending {
    /// Keys between asking for a slot and numbering its key.
    const AHEAD: usize = 16;
    /// Records held before they are numbered.
    const RECORDS: usize = 4096;

    /// An access of `table` to the value keyed `key`.
    #[inline]
    pub(super) fn push(&mut self, table: u32, key: u64) {
        self.keys.push((table, key));
    }

    /// The record is whole.
    #[inline]
    pub(super) fn end_record(&mut self) {
        self.ends.push(self.keys.len() as u32);
    }

    /// Whether enough records are held to number them.
    #[inline]
    pub(super) fn full(&self) -> bool {
        self.ends.len() >= Pending::RECORDS
    }

    /// Number every access held (table `t`'s keys by `ids[t]`, which
    /// grows to the tables met) and hand them to `b`, a record at a time.
    pub(super) fn flush(&mut self, ids: &mut Vec<IdTable>, b: &mut Builder<'_>) {
        const A: usize = Pending::AHEAD;
        if let Some(top) = self.keys.iter().map(|&(t, _)| t as usize).max() {
            if top >= ids.len() {
                ids.resize_with(top + 1, IdTable::default);
            }
        }
        let mut hashes = [0u64; A];
        for (j, &(t, k)) in self.keys.iter().take(A).enumerate() {
            hashes[j] = IdTable::hash(k);
            ids[t as usize].prefetch_hashed(hashes[j]);
        }
        let mut ends = self.ends.iter().copied().peekable();
        for (j, &(t, k)) in self.keys.iter().enumerate() {
            while ends.next_if(|&e| e as usize == j).is_some() {
                b.end_sample();
            }
            let h = hashes[j % A];
            if let Some(&(tn, kn)) = self.keys.get(j + A) {
                let hn = IdTable::hash(kn);
                ids[tn as usize].prefetch_hashed(hn);
                hashes[j % A] = hn;
            }
            let row = ids[t as usize].id_hashed(k, h);
            b.push(t, row as u64);
        }
        for _ in ends {
            b.end_sample();
        }
        self.keys.clear();
        self.ends.clear();
    }
}

/// Read `path`'s lines, `parse` each into accesses (`parse(index, line,
/// pending)`, as [`for_each_line`] numbers lines: pushing each access's
/// table and key, then ending the record), number table `t`'s keys by
/// `ids[t]` in order of first appearance, and hand the accesses to `b`.
///
/// One thread reads and parses while this one numbers, the work split
/// about evenly (a Criteo file: 0.4 of a core parsing, 0.6 numbering),
/// in chunks of [`Pending::RECORDS`] records; where the system refuses a
/// thread, both are done here, one chunk after the other. The first
/// error `parse` returns ends the reading and is returned; the records of
/// its chunk parsed before it are not numbered (a streamed import hands on
/// up to a chunk fewer batches before the error than the old reader did).
pub(super) fn number_parsed(
    path: &Path,
    mut parse: impl FnMut(u64, &[u8], &mut Pending) -> Result<(), TraceError> + Send,
    ids: &mut Vec<IdTable>,
    b: &mut Builder<'_>,
) -> Result<(), TraceError> {
    let parse_here = &mut parse;
    let parsed = super::pipe::on_a_thread(
        "trace-parse",
        4,
        move |h| {
            let mut cur = Pending::default();
            for_each_line(path, |i, line| {
                parse_here(i, line, &mut cur)?;
                if cur.full() {
                    cur = h
                        .send(std::mem::take(&mut cur))
                        .ok_or_else(|| stopped(path))?;
                }
                Ok(())
            })?;
            h.send(cur).map(drop).ok_or_else(|| stopped(path))
        },
        |chunk: &mut Pending| chunk.flush(ids, b),
    );
    match parsed {
        Some(r) => r,
        None => number_here(path, parse, ids, b),
    }?;
    super::check_numbered(path, ids)
}

/// [`number_parsed`] without a thread: parse and number here, a chunk at
/// a time.
fn number_here(
    path: &Path,
    mut parse: impl FnMut(u64, &[u8], &mut Pending) -> Result<(), TraceError>,
    ids: &mut Vec<IdTable>,
    b: &mut Builder<'_>,
) -> Result<(), TraceError> {
    let mut cur = Pending::default();
    for_each_line(path, |i, line| {
        parse(i, line, &mut cur)?;
        if cur.full() {
            cur.flush(ids, b);
        }
        Ok(())
    })?;
    cur.flush(ids, b);
    Ok(())
}

/// What the parsing thread returns when the numbering has stopped (it
/// panicked: its panic is what the caller sees).
fn stopped(path: &Path) -> TraceError {
    io_err(path)(std::io::Error::other("the numbering of the ids stopped"))
}

/// Dense ids of names (a CSV's table column) in order of first
/// appearance, kept as their text.
#[derive(Default)]
pub(super) struct Names {
    ids: HashMap<Box<[u8]>, u32, FastHash>,
    names: Vec<String>,
}

impl Names {
    /// The dense id of name `v`.
    #[inline]
    pub(super) fn id(&mut self, v: &[u8]) -> u32 {
        if let Some(&i) = self.ids.get(v) {
            return i;
        }
        let i = self.names.len() as u32;
        self.ids.insert(v.into(), i);
        self.names.push(lossy(v).into_owned());
        i
    }

    /// The names, by dense id.
    pub(super) fn into_names(self) -> Vec<String> {
        self.names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines_of(bytes: &[u8], gz: bool) -> Vec<(u64, Vec<u8>)> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(if gz { "t.txt.gz" } else { "t.txt" });
        let mut f = std::fs::File::create(&p).unwrap();
        if gz {
            let mut e = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
            e.write_all(bytes).unwrap();
            e.finish().unwrap();
        } else {
            f.write_all(bytes).unwrap();
        }
        let mut out = Vec::new();
        for_each_line(&p, |i, l| {
            out.push((i, l.to_vec()));
            Ok(())
        })
        .unwrap();
        out
    }

    /// The lines `BufRead::lines` gives, numbered: the reference.
    fn reference(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
        use std::io::BufRead;
        std::io::Cursor::new(bytes)
            .lines()
            .enumerate()
            .map(|(i, l)| (i as u64, l.unwrap().into_bytes()))
            .collect()
    }

    /// A file with no newline (a binary file, `/dev/zero`) was held
    /// whole, whatever its length (1.5 GB of RSS for a 300 MB file, and
    /// `/dev/zero` grew until killed): a line past [`MAX_LINE`] is refused
    /// with its number, by both readers, plain or gzipped.
    #[test]
    fn a_line_past_the_limit_is_refused_not_held() {
        let dir = tempfile::tempdir().unwrap();
        for gz in [false, true] {
            let p = dir.path().join(if gz { "t.txt.gz" } else { "t.txt" });
            let mut bytes = b"1\n2\n".to_vec();
            bytes.resize(bytes.len() + MAX_LINE + 10, b'7');
            let mut f = std::fs::File::create(&p).unwrap();
            if gz {
                let mut e = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
                e.write_all(&bytes).unwrap();
                e.finish().unwrap();
            } else {
                f.write_all(&bytes).unwrap();
            }
            let mut seen = 0;
            let e = for_each_line(&p, |_, _| {
                seen += 1;
                Ok(())
            })
            .unwrap_err();
            assert!(
                matches!(&e, TraceError::BadRecord { record: 3, .. }),
                "gz {gz}: {e}"
            );
            assert_eq!(seen, 2, "gz {gz}: the lines before it");
            let e = first_lines(&p, 5, false).unwrap_err();
            assert!(
                matches!(&e, TraceError::BadRecord { record: 3, .. }),
                "gz {gz}: {e}"
            );
            // At the limit, a line is a line.
            let mut ok = b"1\n".to_vec();
            ok.resize(ok.len() + MAX_LINE, b'7');
            std::fs::write(dir.path().join("ok.txt"), &ok).unwrap();
            assert_eq!(lines_of(&ok, false).len(), 2);
            assert_eq!(
                first_lines(&dir.path().join("ok.txt"), 5, false)
                    .unwrap()
                    .len(),
                2
            );
        }
    }

    #[test]
    fn lines_are_the_std_readers_lines() {
        let mut long = vec![b'x'; 9 << 20];
        long.extend_from_slice(b"\r\nshort\n\n");
        let cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"a".to_vec(),
            b"a\n".to_vec(),
            b"a\r\nb\r\n\r\nc".to_vec(),
            b"\n\n\nx\n".to_vec(),
            b"a\rb\n".to_vec(),
            long,
            (0..2_000_000u32)
                .map(|i| format!("{i},{}\n", i % 7))
                .collect::<String>()
                .into_bytes(),
        ];
        for c in &cases {
            for gz in [false, true] {
                let got = lines_of(c, gz);
                let want = reference(c);
                assert_eq!(got.len(), want.len(), "{} bytes, gz {gz}", c.len());
                assert!(got == want, "{} bytes, gz {gz}: lines differ", c.len());
            }
        }
    }

    /// `trim` takes what `str::trim` takes, on every string of up to four
    /// pieces drawn from blanks (ASCII, the vertical tab, Unicode's) and
    /// non-blanks (ASCII, multi-byte, a zero-width space, which is not
    /// white space); bytes that are not UTF-8 stay.
    #[test]
    fn trims_as_str_trim() {
        let pieces = [
            " ",
            "\t",
            "\x0b",
            "\x0c",
            "\r",
            "\u{a0}",
            "\u{85}",
            "\u{2003}",
            "\u{3000}",
            "\u{1680}",
            "a",
            "7",
            "\u{e9}",
            "\u{200b}",
            "\u{feff}",
            "\u{1f600}",
        ];
        let n = pieces.len();
        for code in 0..n.pow(4) {
            for len in 0..=4 {
                let mut s = String::new();
                let mut c = code;
                for _ in 0..len {
                    s.push_str(pieces[c % n]);
                    c /= n;
                }
                assert_eq!(trim(s.as_bytes()), s.trim().as_bytes(), "{s:?}");
            }
        }
        assert_eq!(trim(b"\xa0 x\xff "), b"\xa0 x\xff");
        assert_eq!(trim(b"\xc2\xa0\xff\xc2\xa0"), b"\xff");
        assert_eq!(trim(b"\xe3\x80"), b"\xe3\x80");
        assert_eq!(trim(b"\x80\x80\x80\x80\x80"), b"\x80\x80\x80\x80\x80");
    }

    /// Quoted fields as RFC 4180 writes them.
    #[test]
    fn quoted_fields_split() {
        let f = |l: &str| {
            split_quoted(l.as_bytes(), b',').map(|v| {
                v.into_iter()
                    .map(|c| String::from_utf8(c).unwrap())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(f("a,b").unwrap(), ["a", "b"]);
        assert_eq!(f("\"a,b\",c").unwrap(), ["a,b", "c"]);
        assert_eq!(f("\"say \"\"hi\"\"\",,").unwrap(), ["say \"hi\"", "", ""]);
        assert_eq!(f("x\"y,\"\"").unwrap(), ["x\"y", ""]);
        assert_eq!(f("\"a\"b,c").unwrap(), ["ab", "c"]);
        assert_eq!(f("").unwrap(), [""]);
        assert!(f("a,\"b").unwrap_err().contains("field 1"));
    }

    #[test]
    fn hex_reads_as_from_str_radix() {
        for v in [
            "0",
            "ff",
            "FF",
            "+1a",
            "+",
            "",
            "-1",
            "ffffffff",
            "100000000",
            "0000000001",
            "1g",
            " 1",
            "68fd1e64",
        ] {
            assert_eq!(
                hex_u32(v.as_bytes()),
                u32::from_str_radix(v, 16).ok(),
                "{v:?}"
            );
        }
    }

    #[test]
    fn values_are_numbered_as_strings() {
        let vals = [
            "a",
            "0a",
            "00a",
            "A",
            "10",
            "010",
            "1005",
            "abcdef012345678",
            "abcdef0123456789",
            "x",
            "",
            "a",
            "A",
            "0a",
            "zz",
            "abcdef0123456789",
            "1005",
            "fffffffffffffff",
        ];
        let mut keys = ValueKeys::default();
        let mut ids = IdTable::default();
        let mut reference: HashMap<&str, u32> = HashMap::new();
        for v in vals {
            let n = reference.len() as u32;
            let want = *reference.entry(v).or_insert(n);
            assert_eq!(ids.id(keys.key(v.as_bytes())), want, "{v:?}");
        }
        assert_eq!(ids.len(), reference.len());
    }

    /// A table with more distinct ids than an id table numbers is an
    /// error naming it, with or without a thread (the ids past the limit
    /// would alias the last one).
    #[test]
    fn a_table_past_its_ids_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.txt");
        std::fs::write(&p, "0 1\n1 1\n1 2\n1 3\n1 4\n0 1\n").unwrap();
        let parse = |_: u64, line: &[u8], out: &mut Pending| {
            let s = std::str::from_utf8(line).unwrap();
            let (t, k) = s.split_once(' ').unwrap();
            out.push(t.parse().unwrap(), k.parse().unwrap());
            out.end_record();
            Ok(())
        };
        for threaded in [true, false] {
            let mut ids = vec![IdTable::with_limit(3), IdTable::with_limit(3)];
            let mut b = Builder::new(7);
            let r = if threaded {
                number_parsed(&p, parse, &mut ids, &mut b)
            } else {
                number_here(&p, parse, &mut ids, &mut b)
                    .and_then(|()| super::super::check_numbered(&p, &ids))
            };
            match r {
                Err(TraceError::TooManyIds {
                    table: 1, limit, ..
                }) => {
                    assert_eq!(limit, IdTable::MAX_IDS as u64)
                }
                r => panic!("threaded {threaded}: {r:?}"),
            }
            let mut ids = vec![IdTable::with_limit(4), IdTable::with_limit(4)];
            let mut b = Builder::new(7);
            assert!(number_parsed(&p, parse, &mut ids, &mut b).is_ok());
        }
    }

    /// The numbering with a parsing thread and without one (where the
    /// system refuses a thread) give the same accesses, batches, ids and
    /// errors.
    #[test]
    fn numbered_alike_with_and_without_a_thread() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.txt");
        let mut text = String::new();
        let mut x = 7u64;
        for i in 0..30_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if i % 97 == 0 {
                text.push_str("-\n"); // a record with no access
            } else {
                text.push_str(&format!("{} {}\n", (x >> 60) % 3, (x >> 20) % 5000));
            }
        }
        std::fs::write(&p, &text).unwrap();
        let parse = |fail_at: u64| {
            move |i: u64, line: &[u8], out: &mut Pending| {
                if i == fail_at {
                    return Err(TraceError::BadRecord {
                        path: "t".into(),
                        record: i + 1,
                        reason: "told to".into(),
                    });
                }
                let s = std::str::from_utf8(line).unwrap();
                if let Some((t, k)) = s.split_once(' ') {
                    out.push(t.parse().unwrap(), k.parse().unwrap());
                }
                out.end_record();
                Ok(())
            }
        };
        let run = |threaded: bool, fail_at: u64| {
            let mut ids = Vec::new();
            let mut b = Builder::new(7);
            let r = if threaded {
                number_parsed(&p, parse(fail_at), &mut ids, &mut b)
            } else {
                number_here(&p, parse(fail_at), &mut ids, &mut b)
            };
            let (t, _) = b.finish(Vec::new());
            let rows: Vec<(u32, u64)> = t.accesses.iter().map(|a| (a.table, a.row)).collect();
            let lens: Vec<usize> = ids.iter().map(IdTable::len).collect();
            (r.map_err(|e| e.to_string()), rows, t.batch_ends, lens)
        };
        let (r, rows, ends, lens) = run(true, u64::MAX);
        assert!(r.is_ok());
        assert_eq!(rows.len(), 30_000 - 30_000usize.div_ceil(97));
        assert_eq!(lens.len(), 3);
        assert_eq!((r, rows, ends, lens), run(false, u64::MAX));
        let e = run(true, 20_000).0.unwrap_err();
        assert!(e.contains("record 20001"), "{e}");
        assert_eq!(run(false, 20_000).0.unwrap_err(), e);
    }
}
