//! Lazy initialisation: a table of 10^9 rows is created in no measurable
//! time and with no row data written; its rows read as the initialiser says.

use std::os::unix::fs::MetadataExt;
use std::time::Instant;

use embtier::format::InitKind;
use embtier::{Init, IoEngineKind, Store, StoreConfig, TableConfig};

#[test]
fn billion_row_table_costs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig::builder()
        .table(
            TableConfig::new("huge", 1_000_000_000, 128)
                .init(Init::Uniform { scale: 0.05 })
                .seed(5),
        )
        .dram_capacity(8 << 20)
        .io_engine(IoEngineKind::Psync)
        .build();
    let t0 = Instant::now();
    let store = Store::create(dir.path().join("s"), cfg).unwrap();
    let took = t0.elapsed();
    let meta = std::fs::metadata(dir.path().join("s").join(embtier::DATA_FILE)).unwrap();
    let allocated = meta.blocks() * 512;
    println!(
        "created 10^9 x 128 f32 ({} GB logical) in {took:?}; data file allocates {allocated} bytes",
        meta.len() / 1_000_000_000
    );
    assert!(
        meta.len() >= 512_000_000_000,
        "logical size covers every row"
    );
    assert!(
        allocated < 1 << 20,
        "no row data written ({allocated} bytes allocated)"
    );
    assert!(took.as_secs_f64() < 2.0, "create took {took:?}");

    let ids = [0u64, 1, 999_999_999, 123_456_789, 123_456_789];
    let mut out = vec![0f32; ids.len() * 128];
    store.lookup("huge", &ids, &mut out).unwrap();
    for (i, &id) in ids.iter().enumerate() {
        let mut want = vec![0f32; 128];
        embtier::init::init_row(InitKind::Uniform, 0.05, 5, id, &mut want);
        assert_eq!(&out[i * 128..(i + 1) * 128], &want[..], "row {id}");
        assert!(want.iter().all(|v| v.abs() <= 0.05));
    }
    assert_ne!(out[..128], out[128..256], "rows differ");
}

/// A merged row log gives its blocks back: after `merge_row_log` the data
/// file holds the tables' written blocks, not the log's, the rows read
/// back as written, and the log appends again into the holes it left.
#[test]
fn a_merged_row_log_gives_its_blocks_back() {
    use embtier::{IoEngineKind, Store, StoreConfig, TableConfig};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    // 256-byte rows, 15 a block; a DRAM cache of 64 rows, so updates of
    // scattered rows are evicted to the row log.
    let t = TableConfig::new("t", 1_000_000, 64);
    let rb = t.row_bytes();
    let cfg = StoreConfig::builder()
        .table(t)
        .dram_capacity(64 * rb)
        .io_engine(IoEngineKind::Psync)
        .build();
    let s = Store::create(&path, cfg).unwrap();
    let allocated = || {
        std::fs::metadata(path.join(embtier::DATA_FILE))
            .unwrap()
            .blocks()
            * 512
    };
    let ids: Vec<u64> = (0..20_000u64).map(|i| i * 37).collect();
    let vals: Vec<f32> = ids.iter().flat_map(|&id| [id as f32; 64]).collect();
    s.update("t", &ids, &vals).unwrap();
    let c = s.checkpoint().unwrap();
    assert!(
        c.row_log_blocks > 0,
        "the updates went to the row log: {c:?}"
    );
    let with_log = allocated();
    let m = s.merge_row_log().unwrap();
    let log_bytes = c.row_log_blocks * 4096;
    // Skip only where the file system cannot punch holes (a probe).
    let probe = dir.path().join("probe");
    std::fs::write(&probe, vec![1u8; 8192]).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&probe)
        .unwrap();
    if !embtier::io::reserve::punch_hole(&f, 0, 4096).unwrap() {
        eprintln!("SKIP: this file system does not punch holes");
        return;
    }
    assert!(m.row_log_bytes_released >= log_bytes, "{m:?}");
    // The merge wrote every row home: one 4 KiB group per id (37 apart, 15
    // rows a group). Without the punch the log's blocks would stay too.
    let mut groups: Vec<u64> = ids.iter().map(|id| id / 15).collect();
    groups.dedup();
    let home = groups.len() as u64 * 4096;
    let after = allocated();
    assert!(
        after < home + log_bytes,
        "{with_log} bytes allocated with the log, {after} after the merge; home groups {home}, the log held {log_bytes}"
    );
    let mut out = vec![0f32; vals.len()];
    s.lookup("t", &ids, &mut out).unwrap();
    assert_eq!(out, vals);
    // The log is used again, over the holes.
    let vals2: Vec<f32> = vals.iter().map(|v| v + 1.0).collect();
    s.update("t", &ids, &vals2).unwrap();
    assert!(s.checkpoint().unwrap().row_log_blocks > 0);
    drop(s);
    let s = Store::open(&path).unwrap();
    s.lookup("t", &ids, &mut out).unwrap();
    assert_eq!(out, vals2);
}
