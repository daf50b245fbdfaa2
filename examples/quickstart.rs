//! The main job on an embedded default: a store of a few million rows whose
//! DRAM and PMem budgets are much smaller than the table, driven by Zipf
//! batches of lookups and SGD steps for about ten seconds. It prints hit
//! ratios per tier and rows/s, then flushes, reopens and verifies a sample of
//! rows bit for bit.
//!
//! `cargo run --release --example quickstart`
//! (`EMBTIER_QUICKSTART_SECS` changes the duration.)

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use embtier::{Init, PolicyKind, Store, StoreConfig, TableConfig};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

const ROWS: u64 = 4_000_000;
const DIM: usize = 64;
const BATCH: usize = 4096;
const LR: f32 = 0.05;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: u64 = std::env::var("EMBTIER_QUICKSTART_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("store");
    // Emulate PMem with a file on tmpfs where there is one.
    let shm = tempfile::Builder::new().prefix("embtier-pmem").tempdir_in(
        if PathBuf::from("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            tmp.path().to_str().unwrap()
        },
    )?;
    let table_bytes = ROWS * DIM as u64 * 4;
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("items", ROWS, DIM as u32).init(Init::Uniform { scale: 0.05 }))
        .dram_capacity(table_bytes / 32) // 32 MiB
        .dram_policy(PolicyKind::Sieve)
        .pmem(
            Some(shm.path().join("pmem.emb")),
            table_bytes / 8,
            PolicyKind::Lru,
        ) // 128 MiB
        .build();
    println!(
        "embtier quickstart: table of {ROWS} rows x {DIM} f32 ({} MiB), DRAM {} MiB, PMem {} MiB (file {}), SSD {}",
        table_bytes >> 20,
        cfg.tiers[0].capacity.0 >> 20,
        (table_bytes / 8) >> 20,
        shm.path().join("pmem.emb").display(),
        dir.join(embtier::DATA_FILE).display()
    );
    let store = Store::create(&dir, cfg)?;
    let st = store.stats();
    println!(
        "I/O engine: {} ({}), O_DIRECT: {}",
        st.io_engine, st.io_engine_reason, st.direct_io
    );

    // Zipf(1.05) ranks, scattered over the id space by a bijection.
    let zipf = Zipf::new(ROWS, 1.05)?;
    let scatter = |rank: u64| (rank.wrapping_mul(2_654_435_761)) % ROWS;
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);

    // A shadow copy of a sample of rows, updated with the store's exact
    // arithmetic, to verify after reopen.
    let sample: Vec<u64> = (0..2000).map(|i| scatter(i * 97 + 1)).collect();
    let mut shadow: HashMap<u64, Vec<f32>> = HashMap::new();
    let mut init = vec![0f32; sample.len() * DIM];
    store.lookup("items", &sample, &mut init)?;
    for (i, &id) in sample.iter().enumerate() {
        shadow.insert(id, init[i * DIM..(i + 1) * DIM].to_vec());
    }

    let bar = ProgressBar::new(secs);
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} s  {msg}",
    )?);
    let mut ids = vec![0u64; BATCH];
    let mut out = vec![0f32; BATCH * DIM];
    let mut grads = vec![0f32; BATCH * DIM];
    let start = Instant::now();
    let mut rows_done = 0u64;
    let mut batches = 0u64;
    while start.elapsed() < Duration::from_secs(secs) {
        for id in ids.iter_mut() {
            *id = scatter(zipf.sample(&mut rng) as u64 - 1);
        }
        store.lookup("items", &ids, &mut out)?;
        // A toy gradient: zero-mean noise scaled by the row's magnitude
        // (hot rows appear hundreds of times per batch, and their gradients
        // are summed, so anything proportional to the row would diverge).
        for (g, w) in grads.iter_mut().zip(&out) {
            *g = rng.gen_range(-0.01f32..0.01) * (1.0 + w.abs());
        }
        store.apply_sgd("items", &ids, &grads, LR)?;
        apply_to_shadow(&mut shadow, &ids, &grads);
        rows_done += BATCH as u64;
        batches += 1;
        if batches % 16 == 0 {
            let el = start.elapsed();
            bar.set_position(el.as_secs());
            bar.set_message(format!(
                "{:.2} M rows/s",
                rows_done as f64 / el.as_secs_f64() / 1e6
            ));
        }
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();

    let st = store.stats();
    let t = st.table("items").expect("table exists");
    println!(
        "\n{batches} batches of {BATCH} lookups + {BATCH} SGD updates in {:.1} s: {:.2} M rows/s (lookup + update counted once)",
        elapsed.as_secs_f64(),
        rows_done as f64 / elapsed.as_secs_f64() / 1e6
    );
    println!("| tier | lookups | hits | hit ratio | evictions | dirty evictions | resident / capacity rows |");
    println!("|---|---|---|---|---|---|---|");
    for (name, tier) in [("DRAM", t.dram()), ("PMem", t.pmem())] {
        println!(
            "| {name} | {} | {} | {:.4} | {} | {} | {} / {} |",
            tier.lookups,
            tier.hits,
            tier.hit_ratio(),
            tier.evictions,
            tier.dirty_evictions,
            tier.resident_rows,
            tier.capacity_rows
        );
    }
    let l = &st.ssd_read_latency;
    println!(
        "| SSD | {} rows read, {} rows written | {} read ops, {} write ops | {:.1} MiB read, {:.1} MiB written | read latency p50 {:.0} us, p99 {:.0} us |",
        t.ssd.rows_read,
        t.ssd.rows_written,
        t.ssd.read_ops,
        t.ssd.write_ops,
        t.ssd.bytes_read as f64 / (1 << 20) as f64,
        t.ssd.bytes_written as f64 / (1 << 20) as f64,
        l.p50 as f64 / 1e3,
        l.p99 as f64 / 1e3
    );

    let t0 = Instant::now();
    store.flush()?;
    println!("\nflush: {:.2} s", t0.elapsed().as_secs_f64());
    drop(store);
    let store = Store::open(&dir)?;
    let mut got = vec![0f32; sample.len() * DIM];
    store.lookup("items", &sample, &mut got)?;
    let mut bad = 0;
    for (i, id) in sample.iter().enumerate() {
        let want = &shadow[id];
        if got[i * DIM..(i + 1) * DIM]
            .iter()
            .zip(want)
            .any(|(a, b)| a.to_bits() != b.to_bits())
        {
            bad += 1;
        }
    }
    if bad > 0 {
        return Err(format!("{bad} of {} sampled rows differ after reopen", sample.len()).into());
    }
    println!(
        "reopened and verified {} sampled rows bit for bit: ok",
        sample.len()
    );
    Ok(())
}

/// The store's SGD arithmetic for the sampled rows: duplicate ids' gradients
/// summed in batch order, then `w -= lr * sum`.
fn apply_to_shadow(shadow: &mut HashMap<u64, Vec<f32>>, ids: &[u64], grads: &[f32]) {
    let mut sums: HashMap<u64, Vec<f32>> = HashMap::new();
    for (k, id) in ids.iter().enumerate() {
        if !shadow.contains_key(id) {
            continue;
        }
        let g = &grads[k * DIM..(k + 1) * DIM];
        sums.entry(*id)
            .and_modify(|s| s.iter_mut().zip(g).for_each(|(a, b)| *a += *b))
            .or_insert_with(|| g.to_vec());
    }
    for (id, s) in sums {
        let w = shadow.get_mut(&id).expect("sampled");
        for (wi, gi) in w.iter_mut().zip(&s) {
            *wi -= LR * gi;
        }
    }
}
