//! The embedding access trace format (`.etrace`): a header with a table
//! catalog, then checksummed chunks of batches of `(table, row)` accesses.
//! Specified in FORMAT.md, "Trace file". Streamable both ways: the writer
//! buffers one chunk, the reader holds one chunk.

use std::io::{self, Read, Write};

use crate::FormatError;

/// Magic at offset 0 of a trace file.
pub const TRACE_MAGIC: [u8; 8] = *b"ETRACE\0\x01";
/// Trace format version.
pub const TRACE_VERSION: u32 = 1;
/// Magic of a chunk header: `ECHK` as a little-endian u32.
pub const CHUNK_MAGIC: u32 = u32::from_le_bytes(*b"ECHK");
/// Bytes of a chunk header.
pub const CHUNK_HEADER: usize = 20;
/// A chunk's payload is flushed once it reaches this many bytes.
pub const CHUNK_TARGET: usize = 64 << 10;
/// Largest chunk payload a reader accepts.
pub const CHUNK_MAX: usize = 64 << 20;
/// Longest table name.
pub const TRACE_MAX_NAME: usize = 255;
/// Most tables in a trace.
pub const TRACE_MAX_TABLES: u32 = 1 << 20;

/// Trace header field offsets (see FORMAT.md, "Trace file").
pub mod th {
    /// `[u8; 8]` magic.
    pub const MAGIC: usize = 0;
    /// `u32` version.
    pub const VERSION: usize = 8;
    /// `u32` flags, zero.
    pub const FLAGS: usize = 12;
    /// `u32` number of tables.
    pub const TABLE_COUNT: usize = 16;
    /// `u32` bytes of the catalog that follows the fixed header.
    pub const CATALOG_LEN: usize = 20;
    /// `u32` CRC-32C of the catalog bytes.
    pub const CATALOG_CRC: usize = 24;
    /// `u32` CRC-32C of bytes `[0, CRC)`.
    pub const CRC: usize = 28;
    /// Size of the fixed header.
    pub const SIZE: usize = 32;
}

/// Chunk header field offsets, relative to the chunk.
pub mod ch {
    /// `u32` magic, [`super::CHUNK_MAGIC`].
    pub const MAGIC: usize = 0;
    /// `u32` payload bytes.
    pub const PAYLOAD_LEN: usize = 4;
    /// `u32` batches in the chunk.
    pub const BATCHES: usize = 8;
    /// `u32` accesses in the chunk.
    pub const ACCESSES: usize = 12;
    /// `u32` CRC-32C of the payload.
    pub const CRC: usize = 16;
}

/// One table of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceTable {
    /// Name (1..=255 bytes of UTF-8).
    pub name: String,
    /// Rows: every access's row is below it.
    pub rows: u64,
    /// Elements per row (0 when unknown).
    pub dim: u32,
    /// Bytes per row (0 when unknown).
    pub row_bytes: u32,
}

/// Lookup or update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// A read.
    Lookup,
    /// A write (an optimizer step or an overwrite).
    Update,
}

/// One access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Table index in the catalog.
    pub table: u32,
    /// Row id.
    pub row: u64,
    /// Lookup or update.
    pub kind: AccessKind,
}

impl Access {
    /// One key over (table, row) for the simulators: the table in the top
    /// 24 bits, the row in the low 40 (rows past 2^40 share keys with the
    /// next table's: no trace in the field comes near).
    #[inline]
    pub fn key(&self) -> u64 {
        (self.table as u64) << 40 | self.row
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn get_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    // Fast paths: a one-byte varint, and any varint with ten bytes left
    // (no bounds check per byte); the same values and errors as the loop.
    match b.get(*pos) {
        Some(&x) if x < 0x80 => {
            *pos += 1;
            return Some(x as u64);
        }
        _ => {}
    }
    if let Some(w) = b.get(*pos..*pos + 10) {
        let mut v = 0u64;
        for (i, &byte) in w.iter().enumerate() {
            if i == 9 && byte > 1 {
                return None;
            }
            v |= ((byte & 0x7f) as u64) << (7 * i);
            if byte < 0x80 {
                *pos += i + 1;
                return Some(v);
            }
        }
        return None;
    }
    get_varint_slow(b, pos)
}

fn get_varint_slow(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        if shift == 63 && byte > 1 {
            return None;
        }
        v |= ((byte & 0x7f) as u64) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

fn encode_header(tables: &[TraceTable]) -> Vec<u8> {
    let mut cat = Vec::new();
    for t in tables {
        cat.push(t.name.len() as u8);
        cat.extend_from_slice(t.name.as_bytes());
        cat.extend_from_slice(&t.rows.to_le_bytes());
        cat.extend_from_slice(&t.dim.to_le_bytes());
        cat.extend_from_slice(&t.row_bytes.to_le_bytes());
    }
    let mut h = vec![0u8; th::SIZE];
    h[..8].copy_from_slice(&TRACE_MAGIC);
    h[th::VERSION..th::VERSION + 4].copy_from_slice(&TRACE_VERSION.to_le_bytes());
    h[th::TABLE_COUNT..th::TABLE_COUNT + 4].copy_from_slice(&(tables.len() as u32).to_le_bytes());
    h[th::CATALOG_LEN..th::CATALOG_LEN + 4].copy_from_slice(&(cat.len() as u32).to_le_bytes());
    h[th::CATALOG_CRC..th::CATALOG_CRC + 4].copy_from_slice(&crc32c::crc32c(&cat).to_le_bytes());
    let crc = crc32c::crc32c(&h[..th::CRC]);
    h[th::CRC..th::CRC + 4].copy_from_slice(&crc.to_le_bytes());
    h.extend_from_slice(&cat);
    h
}

/// Writes a trace: call [`TraceWriter::access`] for each access,
/// [`TraceWriter::end_batch`] after each batch, and [`TraceWriter::finish`].
pub struct TraceWriter<W: Write> {
    out: W,
    tables: Vec<TraceTable>,
    payload: Vec<u8>,
    batch: Vec<u8>,
    batch_len: u64,
    chunk_batches: u32,
    chunk_accesses: u32,
    total_accesses: u64,
    bytes_written: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Start a trace with `tables` (1..=2^20 tables, names 1..=255 bytes).
    pub fn new(mut out: W, tables: Vec<TraceTable>) -> io::Result<TraceWriter<W>> {
        if tables.is_empty() || tables.len() as u64 > TRACE_MAX_TABLES as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a trace has 1 to 2^20 tables",
            ));
        }
        if let Some(t) = tables
            .iter()
            .find(|t| t.name.is_empty() || t.name.len() > TRACE_MAX_NAME)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("table name {:?} must be 1 to 255 bytes", t.name),
            ));
        }
        let h = encode_header(&tables);
        out.write_all(&h)?;
        Ok(TraceWriter {
            out,
            bytes_written: h.len() as u64,
            tables,
            payload: Vec::with_capacity(CHUNK_TARGET + 1024),
            batch: Vec::new(),
            batch_len: 0,
            chunk_batches: 0,
            chunk_accesses: 0,
            total_accesses: 0,
        })
    }

    /// The catalog.
    pub fn tables(&self) -> &[TraceTable] {
        &self.tables
    }

    /// Append an access to the current batch. The table must exist and the
    /// row must be below its `rows`.
    #[inline]
    pub fn access(&mut self, table: u32, row: u64, kind: AccessKind) -> io::Result<()> {
        let t = self.tables.get(table as usize).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("no table {table}"))
        })?;
        if row >= t.rows {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "row {row} of table {:?} is not below its {} rows",
                    t.name, t.rows
                ),
            ));
        }
        put_varint(
            &mut self.batch,
            (table as u64) << 1 | (kind == AccessKind::Update) as u64,
        );
        put_varint(&mut self.batch, row);
        self.batch_len += 1;
        Ok(())
    }

    /// Close the current batch (an empty batch is dropped).
    pub fn end_batch(&mut self) -> io::Result<()> {
        if self.batch_len == 0 {
            return Ok(());
        }
        // A batch never spans chunks; a huge batch makes a big chunk.
        if !self.payload.is_empty() && self.payload.len() + self.batch.len() > CHUNK_TARGET {
            self.flush_chunk()?;
        }
        if self.chunk_accesses as u64 + self.batch_len > u32::MAX as u64
            || self.payload.len() + self.batch.len() + 10 > CHUNK_MAX
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "batch too large for one chunk",
            ));
        }
        put_varint(&mut self.payload, self.batch_len);
        self.payload.extend_from_slice(&self.batch);
        self.chunk_batches += 1;
        self.chunk_accesses += self.batch_len as u32;
        self.total_accesses += self.batch_len;
        self.batch.clear();
        self.batch_len = 0;
        if self.payload.len() >= CHUNK_TARGET {
            self.flush_chunk()?;
        }
        Ok(())
    }

    fn flush_chunk(&mut self) -> io::Result<()> {
        if self.payload.is_empty() {
            return Ok(());
        }
        let mut h = [0u8; CHUNK_HEADER];
        h[ch::MAGIC..ch::MAGIC + 4].copy_from_slice(&CHUNK_MAGIC.to_le_bytes());
        h[ch::PAYLOAD_LEN..ch::PAYLOAD_LEN + 4]
            .copy_from_slice(&(self.payload.len() as u32).to_le_bytes());
        h[ch::BATCHES..ch::BATCHES + 4].copy_from_slice(&self.chunk_batches.to_le_bytes());
        h[ch::ACCESSES..ch::ACCESSES + 4].copy_from_slice(&self.chunk_accesses.to_le_bytes());
        h[ch::CRC..ch::CRC + 4].copy_from_slice(&crc32c::crc32c(&self.payload).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&self.payload)?;
        self.bytes_written += (CHUNK_HEADER + self.payload.len()) as u64;
        self.payload.clear();
        self.chunk_batches = 0;
        self.chunk_accesses = 0;
        Ok(())
    }

    /// Close the last batch and chunk; returns the writer, the accesses
    /// written and the bytes written.
    pub fn finish(mut self) -> io::Result<(W, u64, u64)> {
        self.end_batch()?;
        self.flush_chunk()?;
        self.out.flush()?;
        Ok((self.out, self.total_accesses, self.bytes_written))
    }
}

/// Reads a trace chunk by chunk.
pub struct TraceReader<R: Read> {
    input: R,
    tables: Vec<TraceTable>,
    offset: u64,
    payload: Vec<u8>,
    pos: usize,
    batches_left: u32,
    chunk_offset: u64,
    /// Offset of the first chunk (after the catalog).
    first_chunk: u64,
}

fn read_exact_or(input: &mut impl Read, buf: &mut [u8], offset: u64) -> Result<usize, FormatError> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(FormatError::InvalidField {
                    field: "io",
                    offset: offset + got as u64,
                    value: e.to_string(),
                })
            }
        }
    }
    Ok(got)
}

impl<R: Read + io::Seek> TraceReader<R> {
    /// Batches and accesses of the chunks not yet read, from their headers
    /// alone (payloads are skipped here and checked when read); the reader
    /// stays where it was. Call it before the first batch or between chunks.
    pub fn totals(&mut self) -> Result<(u64, u64), FormatError> {
        let io_err = |offset: u64, e: io::Error| FormatError::InvalidField {
            field: "io",
            offset,
            value: e.to_string(),
        };
        let start = self.offset;
        let mut offset = start;
        let (mut batches, mut accesses) = (0u64, 0u64);
        loop {
            self.input
                .seek(io::SeekFrom::Start(offset))
                .map_err(|e| io_err(offset, e))?;
            let mut h = [0u8; CHUNK_HEADER];
            let got = read_exact_or(&mut self.input, &mut h, offset)?;
            if got == 0 {
                break;
            }
            if got < CHUNK_HEADER {
                return Err(FormatError::Truncated {
                    offset,
                    needed: CHUNK_HEADER as u64,
                    have: got as u64,
                });
            }
            let le = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
            if le(ch::MAGIC) != CHUNK_MAGIC {
                return Err(FormatError::BadMagic {
                    offset,
                    found: h[..4].to_vec(),
                    expected: CHUNK_MAGIC.to_le_bytes().to_vec(),
                });
            }
            batches += le(ch::BATCHES) as u64;
            accesses += le(ch::ACCESSES) as u64;
            offset += (CHUNK_HEADER + le(ch::PAYLOAD_LEN) as usize) as u64;
        }
        self.input
            .seek(io::SeekFrom::Start(start))
            .map_err(|e| io_err(start, e))?;
        Ok((batches, accesses))
    }

    /// Go back to the first batch (the header is not read again).
    pub fn rewind(&mut self) -> Result<(), FormatError> {
        let at = self.first_chunk;
        self.input
            .seek(io::SeekFrom::Start(at))
            .map_err(|e| FormatError::InvalidField {
                field: "io",
                offset: at,
                value: e.to_string(),
            })?;
        self.offset = at;
        self.payload.clear();
        self.pos = 0;
        self.batches_left = 0;
        Ok(())
    }
}

impl<R: Read> TraceReader<R> {
    /// Read and validate the header.
    pub fn new(mut input: R) -> Result<TraceReader<R>, FormatError> {
        let mut h = [0u8; th::SIZE];
        let got = read_exact_or(&mut input, &mut h, 0)?;
        if got < 8 || h[..8] != TRACE_MAGIC {
            return Err(FormatError::BadMagic {
                offset: 0,
                found: h[..got.min(8)].to_vec(),
                expected: TRACE_MAGIC.to_vec(),
            });
        }
        if got < th::SIZE {
            return Err(FormatError::Truncated {
                offset: 0,
                needed: th::SIZE as u64,
                have: got as u64,
            });
        }
        let le = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
        let crc = crc32c::crc32c(&h[..th::CRC]);
        if crc != le(th::CRC) {
            return Err(FormatError::ChecksumMismatch {
                offset: 0,
                stored: le(th::CRC),
                computed: crc,
            });
        }
        if le(th::VERSION) != TRACE_VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: le(th::VERSION),
                supported: TRACE_VERSION,
            });
        }
        let count = le(th::TABLE_COUNT);
        let cat_len = le(th::CATALOG_LEN) as usize;
        if count == 0
            || count > TRACE_MAX_TABLES
            || cat_len > count as usize * (1 + TRACE_MAX_NAME + 16)
        {
            return Err(FormatError::InvalidField {
                field: "table_count",
                offset: th::TABLE_COUNT as u64,
                value: format!("{count} tables, {cat_len} catalog bytes"),
            });
        }
        let mut cat = vec![0u8; cat_len];
        let got = read_exact_or(&mut input, &mut cat, th::SIZE as u64)?;
        if got < cat_len {
            return Err(FormatError::Truncated {
                offset: th::SIZE as u64,
                needed: cat_len as u64,
                have: got as u64,
            });
        }
        let crc = crc32c::crc32c(&cat);
        if crc != le(th::CATALOG_CRC) {
            return Err(FormatError::ChecksumMismatch {
                offset: th::SIZE as u64,
                stored: le(th::CATALOG_CRC),
                computed: crc,
            });
        }
        let mut tables = Vec::with_capacity(count as usize);
        let mut p = 0usize;
        let bad = |p: usize, what: &str| FormatError::InvalidField {
            field: "catalog",
            offset: (th::SIZE + p) as u64,
            value: what.to_string(),
        };
        for _ in 0..count {
            let n = *cat.get(p).ok_or_else(|| bad(p, "truncated entry"))? as usize;
            let end = p + 1 + n + 16;
            if n == 0 || end > cat.len() {
                return Err(bad(p, "bad table entry"));
            }
            let name = std::str::from_utf8(&cat[p + 1..p + 1 + n])
                .map_err(|_| bad(p, "table name is not UTF-8"))?
                .to_string();
            let q = p + 1 + n;
            let rows = u64::from_le_bytes(cat[q..q + 8].try_into().expect("8"));
            let dim = u32::from_le_bytes(cat[q + 8..q + 12].try_into().expect("4"));
            let row_bytes = u32::from_le_bytes(cat[q + 12..q + 16].try_into().expect("4"));
            tables.push(TraceTable {
                name,
                rows,
                dim,
                row_bytes,
            });
            p = end;
        }
        if p != cat.len() {
            return Err(bad(p, "trailing catalog bytes"));
        }
        Ok(TraceReader {
            input,
            tables,
            offset: (th::SIZE + cat_len) as u64,
            payload: Vec::new(),
            pos: 0,
            batches_left: 0,
            chunk_offset: 0,
            first_chunk: (th::SIZE + cat_len) as u64,
        })
    }

    /// The catalog.
    pub fn tables(&self) -> &[TraceTable] {
        &self.tables
    }

    /// Load the next chunk; false at a clean end of file.
    fn next_chunk(&mut self) -> Result<bool, FormatError> {
        let mut h = [0u8; CHUNK_HEADER];
        let got = read_exact_or(&mut self.input, &mut h, self.offset)?;
        if got == 0 {
            return Ok(false);
        }
        if got < CHUNK_HEADER {
            return Err(FormatError::Truncated {
                offset: self.offset,
                needed: CHUNK_HEADER as u64,
                have: got as u64,
            });
        }
        let le = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
        if le(ch::MAGIC) != CHUNK_MAGIC {
            return Err(FormatError::BadMagic {
                offset: self.offset,
                found: h[..4].to_vec(),
                expected: CHUNK_MAGIC.to_le_bytes().to_vec(),
            });
        }
        let len = le(ch::PAYLOAD_LEN) as usize;
        if len == 0 || len > CHUNK_MAX {
            return Err(FormatError::InvalidField {
                field: "chunk payload_len",
                offset: self.offset + ch::PAYLOAD_LEN as u64,
                value: len.to_string(),
            });
        }
        self.payload.resize(len, 0);
        let got = read_exact_or(
            &mut self.input,
            &mut self.payload,
            self.offset + CHUNK_HEADER as u64,
        )?;
        if got < len {
            return Err(FormatError::Truncated {
                offset: self.offset,
                needed: (CHUNK_HEADER + len) as u64,
                have: (CHUNK_HEADER + got) as u64,
            });
        }
        let crc = crc32c::crc32c(&self.payload);
        if crc != le(ch::CRC) {
            return Err(FormatError::ChecksumMismatch {
                offset: self.offset,
                stored: le(ch::CRC),
                computed: crc,
            });
        }
        self.chunk_offset = self.offset;
        self.offset += (CHUNK_HEADER + len) as u64;
        self.pos = 0;
        self.batches_left = le(ch::BATCHES);
        Ok(true)
    }

    /// Read the next batch into `out` (cleared first). Returns false at the
    /// end of the trace.
    pub fn next_batch(&mut self, out: &mut Vec<Access>) -> Result<bool, FormatError> {
        out.clear();
        self.next_batch_with(|a| out.push(a))
    }

    /// Read the next batch, handing each access to `f` in order (no
    /// buffer). Returns false at the end of the trace. On an error, `f`
    /// may have seen part of the batch.
    pub fn next_batch_with(&mut self, mut f: impl FnMut(Access)) -> Result<bool, FormatError> {
        while self.batches_left == 0 {
            if self.pos != self.payload.len() {
                return Err(self.corrupt("bytes after the last batch of the chunk"));
            }
            if !self.next_chunk()? {
                return Ok(false);
            }
        }
        let n = get_varint(&self.payload, &mut self.pos)
            .ok_or_else(|| self.corrupt("bad batch length"))?;
        if n == 0 || n > self.payload.len() as u64 {
            return Err(self.corrupt("bad batch length"));
        }
        for _ in 0..n {
            let tag = get_varint(&self.payload, &mut self.pos)
                .ok_or_else(|| self.corrupt("bad table"))?;
            let row =
                get_varint(&self.payload, &mut self.pos).ok_or_else(|| self.corrupt("bad row"))?;
            let table = tag >> 1;
            let t = self
                .tables
                .get(table as usize)
                .ok_or_else(|| self.corrupt("unknown table"))?;
            if row >= t.rows {
                return Err(self.corrupt("row beyond its table"));
            }
            f(Access {
                table: table as u32,
                row,
                kind: if tag & 1 == 1 {
                    AccessKind::Update
                } else {
                    AccessKind::Lookup
                },
            });
        }
        self.batches_left -= 1;
        Ok(true)
    }

    fn corrupt(&self, what: &str) -> FormatError {
        FormatError::InvalidField {
            field: "chunk payload",
            offset: self.chunk_offset,
            value: format!("{what} (payload byte {})", self.pos),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables() -> Vec<TraceTable> {
        vec![
            TraceTable {
                name: "a".into(),
                rows: 1000,
                dim: 16,
                row_bytes: 64,
            },
            TraceTable {
                name: "big".into(),
                rows: u64::MAX,
                dim: 0,
                row_bytes: 0,
            },
        ]
    }

    fn sample(n: usize) -> Vec<Vec<Access>> {
        let mut x = 7u64;
        (0..n)
            .map(|b| {
                (0..(b % 300) + 1)
                    .map(|i| {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let table = (x >> 63) as u32;
                        let row = if table == 0 {
                            (x >> 20) % 1000
                        } else {
                            x >> (x % 64)
                        };
                        Access {
                            table,
                            row: row.min(u64::MAX - 1),
                            kind: if i % 3 == 0 {
                                AccessKind::Update
                            } else {
                                AccessKind::Lookup
                            },
                        }
                    })
                    .collect()
            })
            .collect()
    }

    fn write(batches: &[Vec<Access>]) -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new(), tables()).unwrap();
        for b in batches {
            for a in b {
                w.access(a.table, a.row, a.kind).unwrap();
            }
            w.end_batch().unwrap();
        }
        w.finish().unwrap().0
    }

    #[test]
    fn totals_count_the_chunks_and_leave_the_reader_in_place() {
        let batches = sample(3000);
        let bytes = write(&batches);
        let mut r = TraceReader::new(io::Cursor::new(&bytes)).unwrap();
        let n: usize = batches.iter().map(Vec::len).sum();
        assert_eq!(r.totals().unwrap(), (batches.len() as u64, n as u64));
        let mut b = Vec::new();
        let mut got = Vec::new();
        while r.next_batch(&mut b).unwrap() {
            got.push(b.clone());
        }
        assert_eq!(got, batches);
        // Rewound mid-chunk, the reader reads the whole trace again.
        let mut r2 = TraceReader::new(io::Cursor::new(&bytes)).unwrap();
        r2.next_batch(&mut b).unwrap();
        r2.next_batch(&mut b).unwrap();
        r2.rewind().unwrap();
        let mut again = Vec::new();
        while r2.next_batch(&mut b).unwrap() {
            again.push(b.clone());
        }
        assert_eq!(again, batches);
        // A cut inside a chunk header is an error, not a short count.
        let mut r = TraceReader::new(io::Cursor::new(&bytes[..bytes.len() - 1])).unwrap();
        assert!(r.totals().is_ok()); // the cut is in the last payload
        let first_chunk_end = {
            let mut r = TraceReader::new(io::Cursor::new(&bytes)).unwrap();
            r.next_batch(&mut b).unwrap();
            r.offset as usize
        };
        let mut r = TraceReader::new(io::Cursor::new(&bytes[..first_chunk_end + 5])).unwrap();
        assert!(matches!(r.totals(), Err(FormatError::Truncated { .. })));
    }

    #[test]
    fn round_trip_streaming() {
        let batches = sample(2000);
        let bytes = write(&batches);
        let mut r = TraceReader::new(&bytes[..]).unwrap();
        assert_eq!(r.tables(), &tables()[..]);
        let mut got = Vec::new();
        let mut b = Vec::new();
        while r.next_batch(&mut b).unwrap() {
            got.push(b.clone());
        }
        assert_eq!(got, batches);
        assert!(bytes.len() > 2 * CHUNK_TARGET, "several chunks");
    }

    #[test]
    fn every_corruption_and_truncation_is_an_error() {
        let bytes = write(&sample(300));
        for cut in [0usize, 5, 31, 40, bytes.len() - 1, bytes.len() - 25] {
            let r = TraceReader::new(&bytes[..cut]).and_then(|mut r| {
                let mut b = Vec::new();
                while r.next_batch(&mut b)? {}
                Ok(())
            });
            assert!(r.is_err(), "truncated at {cut} accepted");
        }
        let step = (bytes.len() / 97).max(1);
        for at in (0..bytes.len()).step_by(step) {
            let mut c = bytes.clone();
            c[at] ^= 0x41;
            let r = TraceReader::new(&c[..]).and_then(|mut r| {
                let mut b = Vec::new();
                while r.next_batch(&mut b)? {}
                Ok(())
            });
            assert!(r.is_err(), "flip at {at} accepted");
        }
    }

    #[test]
    fn writer_rejects_bad_accesses() {
        let mut w = TraceWriter::new(Vec::new(), tables()).unwrap();
        assert!(w.access(0, 1000, AccessKind::Lookup).is_err());
        assert!(w.access(2, 0, AccessKind::Lookup).is_err());
        assert!(TraceWriter::new(Vec::new(), vec![]).is_err());
    }

    /// The fast decoding paths agree with the byte-by-byte loop on any
    /// bytes, at any position: values, errors and where they stop.
    #[test]
    fn fast_varints_agree_with_the_loop() {
        let mut x = 1u64;
        for len in 0..40usize {
            for _ in 0..300 {
                let bytes: Vec<u8> = (0..len)
                    .map(|_| {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        // Mostly continuation bytes, some ends, some 0/1/2.
                        match (x >> 60) % 4 {
                            0 => (x >> 33) as u8 & 0x7f,
                            1 => (x >> 40) as u8 % 3,
                            _ => (x >> 33) as u8 | 0x80,
                        }
                    })
                    .collect();
                for start in 0..=len {
                    let (mut p1, mut p2) = (start, start);
                    let fast = get_varint(&bytes, &mut p1);
                    let slow = get_varint_slow(&bytes, &mut p2);
                    assert_eq!(fast, slow, "{bytes:?} at {start}");
                    if fast.is_some() {
                        assert_eq!(p1, p2, "{bytes:?} at {start}");
                    }
                }
            }
        }
    }

    #[test]
    fn varints() {
        for v in [0u64, 1, 127, 128, 16383, 16384, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let mut p = 0;
            assert_eq!(get_varint(&b, &mut p), Some(v));
            assert_eq!(p, b.len());
        }
        let mut p = 0;
        assert_eq!(get_varint(&[0xff; 11], &mut p), None);
    }
}
