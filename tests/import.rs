//! Bulk loads (`Store::import_rows`): whole block groups go straight home,
//! never-written groups are journaled without images, and rows of the range
//! that are cached, dirty, pending or logged end with the imported values,
//! in memory and after a reopen.

mod common;

use std::collections::HashMap;

use common::{engines, with_engine, Rng};
use embtier::{Init, Store, StoreConfig, TableConfig};

const BLOCK_SIZE: usize = 4096;

const DIM: usize = 64;

fn value(seed: u64, id: u64, k: usize) -> f32 {
    ((seed.wrapping_mul(31) ^ id.wrapping_mul(1_000_003)) % 9973) as f32 / 97.0 + k as f32
}

fn check(s: &Store, rows: u64, want: &dyn Fn(u64) -> Vec<f32>, when: &str) {
    let ids: Vec<u64> = (0..rows).collect();
    for chunk in ids.chunks(997) {
        let mut out = vec![f32::NAN; chunk.len() * DIM];
        s.lookup("t", chunk, &mut out).unwrap();
        for (i, &id) in chunk.iter().enumerate() {
            assert_eq!(
                out[i * DIM..(i + 1) * DIM],
                want(id)[..],
                "{when}: row {id}"
            );
        }
    }
}

#[test]
fn a_load_of_fresh_tables_is_written_home_and_journals_no_images() {
    let rows = 40_000u64;
    for engine in engines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("t", rows, DIM as u32).init(Init::Zeros))
            .dram_capacity(256 << 10)
            .build();
        let s = Store::create(&path, with_engine(cfg, engine)).unwrap();
        let row = |id: u64| (0..DIM).map(|k| value(1, id, k)).collect::<Vec<f32>>();
        // Chunks of 4,000 rows, which do not divide into groups: most
        // chunks start and end inside a group.
        for start in (0..rows).step_by(4000) {
            let vals: Vec<f32> = (start..start + 4000).flat_map(row).collect();
            s.import_rows("t", start, &vals).unwrap();
        }
        let st = s.stats();
        let t = &st.tables[0];
        assert_eq!(t.ssd.rows_read, 0, "{engine:?}: a load reads no rows");
        assert!(
            t.ssd.rows_written >= rows - 64 * 10,
            "{engine:?}: {} rows written home of {rows}",
            t.ssd.rows_written
        );
        let c = s.checkpoint().unwrap();
        // 256-byte rows: at most 16 to a 4 KiB group. Their images would
        // take a block each; hole entries take none, only a header block
        // per batch of at most 253 entries.
        eprintln!("{engine:?}: {c:?}");
        assert!(c.groups_journaled >= rows / 16, "{c:?}");
        let headers = c.groups_journaled.div_ceil(253) + 12;
        assert!(
            c.journal_bytes <= headers * BLOCK_SIZE as u64,
            "{engine:?}: journal of {} bytes for {} fresh groups",
            c.journal_bytes,
            c.groups_journaled
        );
        check(&s, rows, &row, "after the load");
        drop(s);
        let s = Store::open(&path).unwrap();
        check(&s, rows, &row, "reopened");
    }
}

#[test]
fn an_import_over_rows_in_every_state_wins_everywhere() {
    let rows = 3000u64;
    for engine in engines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("t", rows, DIM as u32).init(Init::Zeros))
            .dram_capacity(64 << 10)
            .row_log(Some(64 * BLOCK_SIZE as u64))
            .build();
        let mut s = Some(Store::create(&path, with_engine(cfg, engine)).unwrap());
        let mut model: HashMap<u64, Vec<f32>> = HashMap::new();
        let mut rng = Rng(7);
        for round in 0..12u64 {
            let st = s.as_ref().unwrap();
            // Scattered updates: some stay cached and dirty, some are
            // evicted to pending, the row log, or home.
            for _ in 0..20 {
                let ids: Vec<u64> = (0..50).map(|_| rng.below(rows)).collect();
                let vals: Vec<f32> = ids
                    .iter()
                    .flat_map(|&id| (0..DIM).map(move |k| value(round + 100, id, k)))
                    .collect();
                st.update("t", &ids, &vals).unwrap();
                for &id in &ids {
                    model.insert(id, (0..DIM).map(|k| value(round + 100, id, k)).collect());
                }
            }
            // Reads bring some rows back into the cache, clean.
            let ids: Vec<u64> = (0..200).map(|_| rng.below(rows)).collect();
            let mut out = vec![0f32; ids.len() * DIM];
            st.lookup("t", &ids, &mut out).unwrap();
            // A range from an arbitrary start, over all of that.
            let start = rng.below(rows / 2);
            let len = 1 + rng.below(rows - start);
            let vals: Vec<f32> = (start..start + len)
                .flat_map(|id| (0..DIM).map(move |k| value(round, id, k)))
                .collect();
            st.import_rows("t", start, &vals).unwrap();
            for id in start..start + len {
                model.insert(id, (0..DIM).map(|k| value(round, id, k)).collect());
            }
            let want = |id: u64| model.get(&id).cloned().unwrap_or(vec![0.0; DIM]);
            check(st, rows, &want, &format!("{engine:?} round {round}"));
            match round % 3 {
                0 => {
                    st.checkpoint().unwrap();
                }
                1 => {
                    let st = s.take().unwrap();
                    st.checkpoint().unwrap();
                    drop(st);
                    s = Some(Store::open(&path).unwrap());
                    check(s.as_ref().unwrap(), rows, &want, "reopened");
                }
                _ => {}
            }
        }
        let st = s.take().unwrap();
        st.merge_row_log().unwrap();
        drop(st);
        let st = Store::open(&path).unwrap();
        let want = |id: u64| model.get(&id).cloned().unwrap_or(vec![0.0; DIM]);
        check(&st, rows, &want, "after the merge and a reopen");
    }
}

/// A load that never reached a checkpoint is undone at open: the groups it
/// wrote over holes read as holes again (the journal's hole entries), and
/// those it wrote over committed rows hold those rows again.
#[test]
fn an_import_without_a_checkpoint_is_undone_hole_entries_included() {
    let rows = 5000u64;
    for engine in engines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("t", rows, DIM as u32).init(Init::Zeros))
            .dram_capacity(64 << 10)
            .build();
        let s = Store::create(&path, with_engine(cfg, engine)).unwrap();
        // Committed: rows 0..1000 (whole groups home, in a first epoch).
        let old = |id: u64| {
            if id < 1000 {
                (0..DIM).map(|k| value(5, id, k)).collect()
            } else {
                vec![0.0; DIM]
            }
        };
        let vals: Vec<f32> = (0..1000).flat_map(old).collect();
        s.import_rows("t", 0, &vals).unwrap();
        s.checkpoint().unwrap();
        // Not committed: every row, over committed groups and holes.
        let vals: Vec<f32> = (0..rows)
            .flat_map(|id| (0..DIM).map(move |k| value(6, id, k)))
            .collect();
        s.import_rows("t", 0, &vals).unwrap();
        drop(s); // no checkpoint: as a crash leaves it
        let s = Store::open(&path).unwrap();
        let r = s.recovery();
        assert!(r.rolled_back_epoch > 0, "{engine:?}: {r:?}");
        // At most 16 rows to a group: every group of the table was undone.
        assert!(r.groups_restored >= rows / 16, "{engine:?}: {r:?}");
        check(&s, rows, &old, &format!("{engine:?}: reopened"));
    }
}

/// A merge whose logged rows cover most groups of a span reads, journals
/// and writes the span in a few large operations, not one per group, the
/// groups between with their own rows, and leaves every row as it was.
#[test]
fn a_dense_merge_writes_runs_of_groups() {
    use embtier::io::fault::FaultPlan;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    let rows = 8000u64;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("t", rows, DIM as u32).init(Init::Zeros))
        .dram_capacity(32 << 10)
        .row_log(Some(2 << 20))
        .build();
    drop(Store::create(&path, cfg.clone()).unwrap());
    let plan = Arc::new(FaultPlan::default());
    let s = Store::open_with(&path, cfg, common::faulty_opts(&plan, true)).unwrap();
    // Every group written, so that the merge journals real images.
    let base = |id: u64| (0..DIM).map(|k| value(8, id, k)).collect::<Vec<f32>>();
    let all: Vec<f32> = (0..rows).flat_map(base).collect();
    s.import_rows("t", 0, &all).unwrap();
    s.checkpoint().unwrap();
    // 1,000 distinct rows of the 534 groups, scattered: written back to
    // the log. About 15% of the groups get none of them.
    let mut rng = Rng(3);
    let mut ids: Vec<u64> = (0..rows).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.below(i as u64 + 1) as usize);
    }
    ids.truncate(1000);
    let row = |id: u64| (0..DIM).map(|k| value(9, id, k)).collect::<Vec<f32>>();
    for b in ids.chunks(100) {
        let vals: Vec<f32> = b.iter().flat_map(|&id| row(id)).collect();
        s.update("t", b, &vals).unwrap();
    }
    let c = s.checkpoint().unwrap();
    assert!(c.row_log_blocks > 60, "the rows went to the log: {c:?}");
    let w0 = plan.writes.load(Ordering::SeqCst);
    let c = s.merge_row_log().unwrap();
    let writes = plan.writes.load(Ordering::SeqCst) - w0;
    assert!(c.row_log_merged_rows > 900, "{c:?}");
    assert!(
        c.journal_bytes > 400 * BLOCK_SIZE as u64,
        "images journaled: {c:?}"
    );
    // One run per chunk for the groups, a journal append per chunk, the
    // superblock, counters and hot set: tens, against about 450 groups.
    eprintln!("merge: {writes} writes, {c:?}");
    assert!(writes < 40, "{writes} write operations for a dense merge");
    let want = |id: u64| if ids.contains(&id) { row(id) } else { base(id) };
    check(&s, rows, &want, "merged");
    drop(s);
    let s = Store::open(&path).unwrap();
    check(&s, rows, &want, "merged and reopened");
}

/// One call of many 4 MiB chunks (each staged on a helper thread while the
/// one before is written): every row takes the imported values, in memory
/// and after a reopen. Then the same call with a write failing at its
/// first, second, third or fifth write (the journal's, then the chunks'):
/// on a full disk each row ends wholly old or wholly new, the store
/// checkpoints what it shows and a reopen shows the same; on EIO the store
/// refuses to commit and a reopen shows the old rows.
#[test]
fn a_call_of_many_chunks_imports_whole_and_fails_whole_rows() {
    use embtier::io::fault::FaultPlan;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    // 100,000 rows of 256 bytes: about six chunks in one call.
    let rows = 100_000u64;
    let cfg = || {
        StoreConfig::builder()
            .table(TableConfig::new("t", rows, DIM as u32).init(Init::Zeros))
            .dram_capacity(1 << 20)
            .build()
    };
    let all = |seed: u64| -> Vec<f32> {
        (0..rows)
            .flat_map(|id| (0..DIM).map(move |k| value(seed, id, k)))
            .collect()
    };
    let row = |seed: u64| move |id: u64| (0..DIM).map(|k| value(seed, id, k)).collect::<Vec<f32>>();
    let read = |s: &Store| -> Vec<f32> {
        let ids: Vec<u64> = (0..rows).collect();
        let mut out = vec![f32::NAN; rows as usize * DIM];
        for (c, o) in ids.chunks(4096).zip(out.chunks_mut(4096 * DIM)) {
            s.lookup("t", c, o).unwrap();
        }
        out
    };
    for engine in engines() {
        // Whole: some rows cached and dirty first, then one call.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let s = Store::create(&path, with_engine(cfg(), engine)).unwrap();
        let some: Vec<u64> = (0..rows).step_by(97).collect();
        let vals: Vec<f32> = some.iter().flat_map(|&id| row(9)(id)).collect();
        s.update("t", &some, &vals).unwrap();
        s.import_rows("t", 0, &all(1)).unwrap();
        check(&s, rows, &row(1), &format!("{engine:?}: after one call"));
        s.checkpoint().unwrap();
        drop(s);
        let s = Store::open(&path).unwrap();
        check(&s, rows, &row(1), &format!("{engine:?}: reopened"));
        drop(s);

        for (errno, at) in [libc::ENOSPC, libc::EIO]
            .into_iter()
            .flat_map(|e| [1u64, 2, 3, 5].map(|k| (e, k)))
        {
            let when = format!("{engine:?}, errno {errno}, write {at}");
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s");
            drop(Store::create(&path, with_engine(cfg(), engine)).unwrap());
            let plan = Arc::new(FaultPlan::default());
            let s = Store::open_with(
                &path,
                with_engine(cfg(), engine),
                common::faulty_opts(&plan, true),
            )
            .unwrap();
            s.import_rows("t", 0, &all(1)).unwrap();
            s.checkpoint().unwrap();
            plan.errno.store(errno, Ordering::SeqCst);
            plan.fail_writes_from.store(
                plan.writes.load(Ordering::SeqCst) + at - 1,
                Ordering::SeqCst,
            );
            assert!(s.import_rows("t", 0, &all(2)).is_err(), "{when}");
            plan.heal();
            let (old, new) = (all(1), all(2));
            let seen = read(&s);
            for id in 0..rows as usize {
                let r = id * DIM..(id + 1) * DIM;
                assert!(
                    seen[r.clone()] == old[r.clone()] || seen[r.clone()] == new[r.clone()],
                    "{when}: row {id} is neither old nor new"
                );
            }
            let committed = s.checkpoint();
            drop(s);
            let s = Store::open(&path).unwrap();
            let after = read(&s);
            // The journal's write failing (the first) writes no data and
            // leaves the store whole; a chunk's EIO leaves its groups
            // unknown, and the store takes no more writes.
            let poisoned = errno == libc::EIO && at > 1;
            match committed {
                Ok(_) => {
                    assert!(!poisoned, "{when}: a poisoned store committed");
                    assert!(
                        after == seen,
                        "{when}: the reopen differs from what was shown"
                    );
                }
                Err(e) => {
                    assert!(poisoned, "{when}: {e}");
                    assert!(after == old, "{when}: the reopen is not the committed rows");
                }
            }
            if at == 1 {
                assert!(after == old, "{when}: rows imported past a failed journal");
            } else if errno == libc::ENOSPC {
                // The chunks before the failed one were written.
                assert!(after != old, "{when}: nothing imported");
            }
        }
    }
}
