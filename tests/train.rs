//! The trainer example's semantics do not depend on tiering: the same run
//! pinned to DRAM and over tiny DRAM and PMem caches (most rows read back
//! from SSD, with the next batch read concurrently) ends with bit-identical
//! weights and losses, and the loss falls.

#[allow(dead_code)]
#[path = "../examples/train.rs"]
mod train;

use train::{synthetic, train, Params, Tiering};

#[test]
fn final_weights_do_not_depend_on_tiering() {
    let data = synthetic(3, 6_000, 4, 600);
    let p = Params {
        epochs: 3,
        batch: 128,
        lr: 0.05,
        prefetch: true,
        holdout: 1_000,
    };
    let mut runs = Vec::new();
    for tiering in [Tiering::Pinned, Tiering::Tiny] {
        let dir = tempfile::tempdir().unwrap();
        runs.push(train(&data, tiering, &dir.path().join("s"), p).unwrap());
    }
    let (pinned, tiny) = (&runs[0], &runs[1]);
    assert_eq!(pinned.ssd_rows_read, 0);
    assert!(
        tiny.ssd_rows_read > 10_000,
        "the tiny caches must actually go to SSD ({} rows read)",
        tiny.ssd_rows_read
    );
    assert!(
        pinned.losses.last().unwrap() < &pinned.losses[0],
        "loss must fall: {:?}",
        pinned.losses
    );
    assert!(pinned.val_losses.last().unwrap() < &pinned.val_losses[0]);
    assert_eq!(pinned.losses, tiny.losses);
    assert_eq!(pinned.bias.to_bits(), tiny.bias.to_bits());
    assert_eq!(pinned.weights.len(), tiny.weights.len());
    let differ = pinned
        .weights
        .iter()
        .zip(&tiny.weights)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    assert_eq!(differ, 0, "{differ} weights differ between tierings");
}
