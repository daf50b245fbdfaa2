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
