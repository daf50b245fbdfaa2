//! Recovery of a damaged store: every row reads as its committed value or
//! fails, never a different value, never a panic.
//!
//! Once per process a small real store is built (in /dev/shm where there
//! is one): two tables of 200 rows of dimension 8, `a` with SGD and `b`
//! with row-wise Adagrad, a cache of about 140 rows and a row log of 8
//! blocks. Every row is written and checkpointed and the log merged; then
//! 60 rows of each table are rewritten and checkpointed (into the log); the
//! rows as they are now are the committed model. Then every row is
//! rewritten: the tiny cache writes back through uncommitted log appends
//! and in-place writes, with the old images in the journal, and the store
//! is dropped without a checkpoint, as a crash leaves it. Its files are the
//! template, kept in memory.
//!
//! Per input: the template's files, with the input applied as mutations
//! (below), are written to a fresh directory, and
//! (a) `Store::open`, then every row read, one lookup each;
//! (b) `Store::open`, `checkpoint()` without reading, drop, reopen, then
//!     every row read.
//! A row that reads must be bit for bit the committed one.
//!
//! Mutations, until the input ends (at most 16): a byte `op` (bits 0..2:
//! the file, `embtier.meta`, `data.emb`, `journal.emb` or, with bits 4..8
//! picking one, any other file but `store.toml` (format 4's written-group
//! lists; the journal where there is none); bits 2..4: overwrite, xor,
//! truncate, zero a range), a `u16` offset (modulo the file's length),
//! then for overwrite and xor a length byte (1 ..= 32) and that many
//! bytes, for a zeroed range a length byte (times 16 bytes). Overwrites
//! never grow a file.
//!
//! Damage the format cannot see by design is skipped, not checked: a
//! changed 4 KiB block that still passes its own checksum (a data block
//! sealed with its number, a journal block whose last 4 bytes are the
//! CRC-32C of the rest, a superblock copy, a catalog matching the
//! superblock's CRC, a written-group list ending in its own CRC), and a
//! data block zeroed whole (a hole reads as the initial values).
#![no_main]
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use embtier::format::{check_block, le_u32, le_u64, sb, BlockState, BLOCK_SIZE, CATALOG_OFFSET};
use embtier::{
    ByteSize, Init, IoEngineKind, Optimizer, Store, StoreConfig, TableConfig, CONFIG_FILE,
    DATA_FILE, JOURNAL_FILE, LOCK_FILE, META_FILE,
};
use libfuzzer_sys::fuzz_target;

const ROWS: u64 = 200;
const DIM: usize = 8;
const TABLES: [&str; 2] = ["a", "b"];
/// The files mutations reach first, in this order; any other file of the
/// store (format 4's written-group lists) follows them, and `store.toml`
/// comes last, never mutated.
const FILES: [&str; 3] = [META_FILE, DATA_FILE, JOURNAL_FILE];

type Files = Vec<(String, Vec<u8>)>;

struct Template {
    /// The crashed store's files: meta, data, journal, any others, then
    /// store.toml.
    files: Files,
    /// The committed rows of each table, as bits: `ROWS * DIM` each.
    model: [Vec<u32>; 2],
    /// Where each input's store goes.
    work: PathBuf,
}

fn config() -> StoreConfig {
    let mut c = StoreConfig::builder()
        .table(TableConfig::new("a", ROWS, DIM as u32).init(Init::Zeros))
        .table(
            TableConfig::new("b", ROWS, DIM as u32).optimizer(Optimizer::RowwiseAdagrad {
                lr: 0.1,
                eps: 1e-8,
                weight_decay: 0.0,
            }),
        )
        .dram_capacity(140 * 40)
        .dram_shards(1)
        .io_engine(IoEngineKind::Psync)
        .psync_threads(1)
        .direct_io(false)
        .build();
    c.ssd.row_log = Some(ByteSize(8 * BLOCK_SIZE as u64));
    c
}

fn values(ids: &[u64], v: f32) -> Vec<f32> {
    ids.iter()
        .flat_map(|&id| (0..DIM).map(move |j| v + id as f32 + j as f32 / 16.0))
        .collect()
}

fn read_all(s: &Store) -> [Vec<u32>; 2] {
    TABLES.map(|t| {
        let ids: Vec<u64> = (0..ROWS).collect();
        let mut out = vec![0f32; ids.len() * DIM];
        s.lookup(t, &ids, &mut out).expect("the template reads");
        out.iter().map(|x| x.to_bits()).collect()
    })
}

/// Every row of the store at `dir` is its committed value or an error.
/// With `strict`, errors are not allowed either (the undamaged template).
fn check_rows(s: &Store, model: &[Vec<u32>; 2], strict: bool, what: &str) {
    let mut out = [0f32; DIM];
    for (t, name) in TABLES.iter().enumerate() {
        for id in 0..ROWS {
            match s.lookup(name, &[id], &mut out) {
                Ok(()) => {
                    let want = &model[t][id as usize * DIM..(id as usize + 1) * DIM];
                    let got: Vec<u32> = out.iter().map(|x| x.to_bits()).collect();
                    assert_eq!(
                        got,
                        want,
                        "{what}: table {name:?} row {id} read {:?}, committed {:?}",
                        out,
                        want.iter().map(|&b| f32::from_bits(b)).collect::<Vec<_>>()
                    );
                }
                Err(e) => assert!(!strict, "{what}: table {name:?} row {id}: {e}"),
            }
        }
    }
}

fn write_store(dir: &Path, files: &Files) {
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(dir).unwrap();
    for (name, bytes) in files {
        fs::write(dir.join(name), bytes).unwrap();
    }
}

/// Procedures (a) and (b) on the store whose files are `files`.
fn recover(t: &Template, files: &Files, strict: bool) {
    write_store(&t.work, files);
    match Store::open(&t.work) {
        Ok(s) => check_rows(&s, &t.model, strict, "open, read"),
        Err(e) => assert!(!strict, "open: {e}"),
    }
    write_store(&t.work, files);
    match Store::open(&t.work) {
        Ok(s) => {
            let cp = s.checkpoint();
            assert!(!strict || cp.is_ok(), "checkpoint: {cp:?}");
        }
        Err(e) => assert!(!strict, "open: {e}"),
    }
    match Store::open(&t.work) {
        Ok(s) => check_rows(&s, &t.model, strict, "open, checkpoint, reopen, read"),
        Err(e) => assert!(!strict, "reopen after the checkpoint: {e}"),
    }
}

fn base_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let root = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    // Directories of earlier runs whose process is gone.
    if let Ok(rd) = fs::read_dir(&root) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("embtier-fuzz-recovery-") {
                if !Path::new("/proc").join(pid).exists() {
                    let _ = fs::remove_dir_all(e.path());
                }
            }
        }
    }
    root.join(format!("embtier-fuzz-recovery-{}", std::process::id()))
}

fn build() -> Template {
    let base = base_dir();
    let dir = base.join("template");
    let _ = fs::remove_dir_all(&base);
    fs::create_dir_all(&base).unwrap();
    let all: Vec<u64> = (0..ROWS).collect();
    let some: Vec<u64> = (0..60).map(|i| i * 3).collect();
    let s = Store::create(&dir, config()).unwrap();
    for t in TABLES {
        s.update(t, &all, &values(&all, 1.0)).unwrap();
    }
    s.step("b", &all, &values(&all, 0.5)).unwrap();
    s.checkpoint().unwrap();
    s.merge_row_log().unwrap();
    for t in TABLES {
        s.update(t, &some, &values(&some, -3.0)).unwrap();
    }
    s.step("b", &some, &values(&some, 0.25)).unwrap();
    let cp = s.checkpoint().unwrap();
    assert!(
        cp.row_log_blocks > 0,
        "nothing committed to the row log: {cp:?}"
    );
    let model = read_all(&s);
    // After the checkpoint: evictions write back, to the log and in place.
    for v in [7.0, 11.0] {
        for t in TABLES {
            s.update(t, &all, &values(&all, v)).unwrap();
        }
        s.step("b", &all, &values(&all, 0.125)).unwrap();
    }
    drop(s);
    let read = |f: &str| fs::read(dir.join(f)).unwrap();
    let mut files: Files = FILES.iter().map(|f| (f.to_string(), read(f))).collect();
    let mut extra: Vec<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| !FILES.contains(&f.as_str()) && f != CONFIG_FILE && f != LOCK_FILE)
        .collect();
    extra.sort();
    extra.push(CONFIG_FILE.to_string());
    files.extend(extra.iter().map(|f| (f.clone(), read(f))));
    assert!(files[2].1.len() >= 2 * BLOCK_SIZE, "no journal to recover");
    let t = Template {
        files,
        model,
        work: base.join("w"),
    };
    // The undamaged crashed store recovers exactly, both ways.
    recover(&t, &t.files, true);
    t
}

/// Whether a changed block of file `f` is damage the format cannot see.
fn undetectable(f: usize, old: &[u8], new: &[u8]) -> bool {
    if f >= FILES.len() {
        // A written-group list ends in the CRC of the rest.
        return old != new
            && new.len() >= 4
            && le_u32(new, new.len() - 4) == crc32c::crc32c(&new[..new.len() - 4]);
    }
    let blocks = new.len() / BLOCK_SIZE;
    for i in 0..blocks {
        let b = &new[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
        if old.get(i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE) == Some(b) {
            continue;
        }
        let sealed = le_u32(b, BLOCK_SIZE - 4) == crc32c::crc32c(&b[..BLOCK_SIZE - 4]);
        match f {
            0 | 2 if sealed => return true,
            1 if matches!(
                check_block(b, i as u64),
                Ok(BlockState::Sealed | BlockState::Hole)
            ) =>
            {
                return true
            }
            _ => {}
        }
    }
    if f == 0 {
        // The catalog, against either superblock copy's CRC of it. (The
        // call-counter slots after it carry their own CRC, but only
        // stochastic rounding reads them, and these tables are f32.)
        let cat = CATALOG_OFFSET as usize;
        let end = cat + le_u64(old, sb::CATALOG_LEN) as usize;
        if new.len() >= end && old.get(cat..end) != new.get(cat..end) {
            let crc = crc32c::crc32c(&new[cat..end]);
            for slot in [0, BLOCK_SIZE] {
                if new.len() >= slot + BLOCK_SIZE && le_u32(new, slot + sb::CATALOG_CRC) == crc {
                    return true;
                }
            }
        }
    }
    false
}

fn mutate(t: &Template, data: &[u8]) -> Option<Files> {
    let mut files = t.files.clone();
    let mut at = 0;
    let mut next = || {
        let b = data.get(at).copied();
        at += 1;
        b
    };
    for _ in 0..16 {
        let Some(op) = next() else { break };
        let (Some(lo), Some(hi)) = (next(), next()) else {
            break;
        };
        // Selector 3: the other files (bit 4 picks one), else the journal.
        let others = files.len() - 1 - FILES.len();
        let f = match op & 3 {
            3 if others > 0 => FILES.len() + (op as usize >> 4) % others,
            3 => 2,
            f => f as usize,
        };
        let file = &mut files[f].1;
        let off = u16::from_le_bytes([lo, hi]) as usize;
        match (op >> 2) & 3 {
            k @ (0 | 1) => {
                let n = next().unwrap_or(0) as usize % 32 + 1;
                let len = file.len();
                for j in 0..n {
                    let Some(v) = next() else { break };
                    if len > 0 {
                        let p = (off + j) % len;
                        file[p] = if k == 0 { v } else { file[p] ^ v };
                    }
                }
            }
            2 => {
                let len = off % (file.len() + 1);
                file.truncate(len);
            }
            _ => {
                let n = next().unwrap_or(0) as usize * 16 + 1;
                let len = file.len();
                if len > 0 {
                    let p = off % len;
                    let end = (p + n).min(len);
                    file[p..end].fill(0);
                }
            }
        }
    }
    for (f, file) in files.iter().enumerate().take(files.len() - 1) {
        if undetectable(f, &t.files[f].1, &file.1) {
            return None;
        }
    }
    Some(files)
}

fuzz_target!(|data: &[u8]| {
    static TEMPLATE: OnceLock<Template> = OnceLock::new();
    let t = TEMPLATE.get_or_init(build);
    if let Some(files) = mutate(t, data) {
        recover(t, &files, false);
    }
});
