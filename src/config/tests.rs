//! Unit tests of the config: parsing, both tier forms, budgets.

use super::*;

/// A config of one table ("a": 1000 rows of 4) with `set` applied: the
/// frame of the tests of one setting.
fn one_table(set: impl FnOnce(StoreConfigBuilder) -> StoreConfigBuilder) -> StoreConfig {
    set(StoreConfig::builder().table(TableConfig::new("a", 1000, 4))).build()
}

#[test]
fn byte_sizes_parse() {
    assert_eq!("64MiB".parse::<ByteSize>().unwrap().0, 64 << 20);
    assert_eq!("1.5GiB".parse::<ByteSize>().unwrap().0, 3 << 29);
    assert_eq!("100MB".parse::<ByteSize>().unwrap().0, 100_000_000);
    assert_eq!("4096".parse::<ByteSize>().unwrap().0, 4096);
    assert!("12 parsecs".parse::<ByteSize>().is_err());
    assert!("".parse::<ByteSize>().is_err());
    assert_eq!(ByteSize(64 << 20).to_string(), "64MiB");
}

#[test]
fn toml_round_trip() {
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("a", 1000, 16).placement(Placement::Pinned(MemoryKind::Dram)))
        .table(TableConfig::new("b", 1 << 40, 128).init(Init::Zeros))
        .dram_capacity(1 << 30)
        .pmem(None, 1 << 30, PolicyKind::Sieve)
        .build();
    let text = cfg.to_toml();
    assert_eq!(StoreConfig::from_toml(&text).unwrap(), cfg);
}

#[test]
fn legacy_sections_still_read_and_written() {
    // A store.toml as every store so far was written.
    let old = r#"
        [dram]
        capacity = "1MiB"
        policy = "sieve"
        shards = 4

        [pmem]
        capacity = "4MiB"
        policy = "fifo"

        [[tables]]
        name = "t"
        rows = 10
        dim = 4
        placement = "pinned-pmem"
    "#;
    let cfg = StoreConfig::from_toml(old).unwrap();
    assert_eq!(
        cfg.tiers,
        [
            TierConfig::dram(1 << 20, PolicyKind::Sieve),
            TierConfig::pmem(None, 4 << 20, PolicyKind::Fifo)
        ]
    );
    assert_eq!(cfg.shards, Some(4));
    assert_eq!(cfg.tables[0].placement, Placement::Pinned(MemoryKind::Pmem));
    // Such tiers are written back in the same form, so an older
    // embtier still opens the store.
    let text = cfg.to_toml();
    assert!(text.contains("[dram]") && text.contains("[pmem]"), "{text}");
    assert!(!text.contains("tiers"), "{text}");
    assert_eq!(StoreConfig::from_toml(&text).unwrap(), cfg);
    // No tier section at all: 256 MiB of DRAM, LRU.
    let none = StoreConfig::from_toml("[[tables]]\nname = \"t\"\nrows = 1\ndim = 1\n").unwrap();
    assert_eq!(none.tiers, default_tiers());
}

#[test]
fn tier_lists_read_and_write() {
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("t", 1 << 20, 4))
        .tiers(vec![
            TierConfig::dram(1 << 20, PolicyKind::Sieve),
            TierConfig::dram(2 << 20, PolicyKind::Lru),
            TierConfig::pmem(Some("/mnt/p".into()), 8 << 20, PolicyKind::Clock),
        ])
        .dram_shards(2)
        .build();
    let text = cfg.to_toml();
    assert!(
        text.contains("[[tiers]]") && !text.contains("[dram]"),
        "{text}"
    );
    assert_eq!(StoreConfig::from_toml(&text).unwrap(), cfg);
    let plan = cfg.plan().unwrap();
    // 16-byte rows: each tier's capacity over 16.
    assert_eq!(plan[0].rows, [1 << 16, 1 << 17, 1 << 19]);
}

#[test]
fn tier_lists_are_checked() {
    let both = "[dram]\ncapacity = 100\n[[tiers]]\nkind = \"dram\"\ncapacity = 100\n";
    let e = StoreConfig::from_toml(both).unwrap_err().to_string();
    assert!(e.contains("not both"), "{e}");
    let shards = "shards = 2\n[dram]\ncapacity = 100\nshards = 3\n";
    let e = StoreConfig::from_toml(shards).unwrap_err().to_string();
    assert!(e.contains("not both"), "{e}");
    let unknown = "[[tiers]]\nkind = \"hbm\"\ncapacity = 100\n";
    let e = StoreConfig::from_toml(unknown).unwrap_err().to_string();
    assert!(e.contains("hbm"), "{e}");
    let t = || TableConfig::new("t", 1000, 4);
    let check = |tiers: Vec<TierConfig>, placement: Placement| {
        StoreConfig::builder()
            .table(t().placement(placement))
            .tiers(tiers)
            .build()
            .validate()
            .unwrap_err()
            .to_string()
    };
    let e = check(vec![], Placement::Cached);
    assert!(e.contains("0 cache tiers"), "{e}");
    let e = check(
        vec![TierConfig::dram(1 << 20, PolicyKind::Lru); 5],
        Placement::Cached,
    );
    assert!(e.contains("5 cache tiers"), "{e}");
    let e = check(
        vec![TierConfig::dram(1 << 20, PolicyKind::Lru)],
        Placement::Pinned(MemoryKind::Pmem),
    );
    assert!(e.contains("no pmem tier"), "{e}");
    let p = TierConfig::pmem(Some("/x".into()), 1 << 20, PolicyKind::Lru);
    let e = check(
        vec![TierConfig::dram(1 << 20, PolicyKind::Lru), p.clone(), p],
        Placement::Cached,
    );
    assert!(e.contains("tiers[2]: its path is another tier's"), "{e}");
    let e = check(
        vec![
            TierConfig::dram(1 << 20, PolicyKind::Lru),
            TierConfig::dram(1 << 20, PolicyKind::Slru),
        ],
        Placement::Cached,
    );
    assert!(e.starts_with("invalid config: tiers[1].policy slru"), "{e}");
}

#[test]
fn budgets_split_by_size() {
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("small", 100, 1).placement(Placement::Pinned(MemoryKind::Dram)))
        .table(TableConfig::new("a", 3000, 1))
        .table(TableConfig::new("b", 1000, 1))
        .dram_capacity(400 + 4 * 400)
        .build();
    let plan = cfg.plan().unwrap();
    assert_eq!(plan[0].rows[0], 100);
    assert_eq!(plan[1].rows[0], 300);
    assert_eq!(plan[2].rows[0], 100);
}

#[test]
fn simulation_only_policies_are_refused() {
    let cfg = one_table(|b| b.dram_policy(PolicyKind::Slru));
    assert!(cfg
        .plan()
        .unwrap_err()
        .to_string()
        .contains("simulation only"));
}

#[test]
fn an_empty_merge_list_is_refused() {
    let cfg = one_table(|b| b.merge_list_rows(0));
    let e = cfg.plan().unwrap_err().to_string();
    assert!(e.contains("ssd.merge_list_rows 0"), "{e}");
    let ok = one_table(|b| b.merge_list_rows(1));
    ok.plan().unwrap();
}

#[test]
fn a_checkpoint_rest_out_of_range_is_refused() {
    for bad in [-0.5, f64::NAN, f64::INFINITY, 101.0] {
        let cfg = one_table(|b| b.checkpoint_rest(bad));
        let e = cfg.plan().unwrap_err().to_string();
        assert!(e.contains("ssd.checkpoint_rest"), "{bad}: {e}");
    }
    for good in [0.0, 1.0, 3.5] {
        let cfg = one_table(|b| b.checkpoint_rest(good));
        cfg.plan().unwrap();
    }
    let toml: StoreConfig = toml::from_str(
        "[ssd]\ncheckpoint_rest = 2.0\n[[tables]]\nname = \"a\"\nrows = 1000\ndim = 4\n",
    )
    .unwrap();
    assert_eq!(toml.ssd.checkpoint_rest, 2.0);
}

#[test]
fn a_merge_start_out_of_range_is_refused() {
    for bad in [0.0, -0.1, 0.76, 1.0, f64::NAN, f64::INFINITY] {
        let cfg = one_table(|b| b.merge_start(bad));
        let e = cfg.plan().unwrap_err().to_string();
        assert!(e.contains("ssd.merge_start"), "{bad}: {e}");
    }
    for good in [0.01, 0.25, 0.5, 0.75] {
        let cfg = one_table(|b| b.merge_start(good));
        cfg.plan().unwrap();
    }
    assert_eq!(StoreConfig::default().ssd.merge_start, 0.5);
    let toml: StoreConfig = toml::from_str(
        "[ssd]\nmerge_start = 0.5\n[[tables]]\nname = \"a\"\nrows = 1000\ndim = 4\n",
    )
    .unwrap();
    assert_eq!(toml.ssd.merge_start, 0.5);
}

#[test]
fn tier_too_small_is_an_error() {
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("a", 1000, 128))
        .dram_capacity(100)
        .build();
    assert!(matches!(cfg.plan(), Err(Error::TierTooSmall { .. })));
    let cfg = StoreConfig::builder()
        .table(TableConfig::new("a", 1000, 128).placement(Placement::Pinned(MemoryKind::Dram)))
        .dram_capacity(1000)
        .build();
    assert!(matches!(
        cfg.plan(),
        Err(Error::TierTooSmall {
            needed: 512_000,
            ..
        })
    ));
}

/// A small cached table beside a huge one: the first tier's split by
/// size gave the small one 0 rows, and a store of the two could not be
/// made with any capacity short of exabytes without an explicit share
/// ("dram budget of 0 bytes for table \"t1\""). A table whose share
/// rounds to no row takes one from the largest share; the split is as
/// before where every share holds a row, and a tier that cannot give
/// each cached table a row is still refused.
#[test]
fn a_small_table_beside_a_huge_one_gets_a_row() {
    let cfg = |dram: u64| {
        StoreConfig::builder()
            .table(TableConfig::new("t0", 1 << 60, 64))
            .table(TableConfig::new("t1", 1000, 64))
            .table(TableConfig::new("t2", 10, 64))
            .dram_capacity(dram)
            .build()
    };
    let first = |c: StoreConfig| {
        c.plan()
            .unwrap()
            .iter()
            .map(|p| p.rows[0])
            .collect::<Vec<_>>()
    };
    assert_eq!(first(cfg(64 << 10)), vec![256 - 2, 1, 1]);
    // Every share a row already: untouched.
    let two = StoreConfig::builder()
        .table(TableConfig::new("a", 3000, 64))
        .table(TableConfig::new("b", 1000, 64))
        .dram_capacity(400 * 256)
        .build();
    assert_eq!(first(two), vec![300, 100]);
    // Two rows of room for three tables: refused, naming a table left out.
    match cfg(2 * 256).plan() {
        Err(Error::TierTooSmall { table, needed, .. }) => {
            assert_eq!((table.as_str(), needed), ("t2", 256))
        }
        other => panic!("{other:?}"),
    }
}

/// `[ssd] overhead_in_budget` charges a cached row of the first DRAM
/// tier its bytes, 16 of bookkeeping and 5/24 of its bytes; a pinned
/// table and the PMem tier pay only their rows' bytes; a capacity that
/// holds a row's bytes but not its charge is refused, naming the charge.
#[test]
fn overhead_in_budget_charges_cached_rows_of_the_first_dram_tier() {
    assert_eq!(charged_row_bytes(256, true), 256 + 54 + 16);
    assert_eq!(charged_row_bytes(256, false), 256);
    let cfg = |on: bool, dram: u64| {
        StoreConfig::builder()
            .table(TableConfig::new("p", 100, 64).placement(Placement::Pinned(MemoryKind::Dram)))
            .table(TableConfig::new("c", 1 << 20, 64))
            .dram_capacity(dram)
            .pmem(None, 326 * 1000, PolicyKind::Lru)
            .overhead_in_budget(on)
            .build()
    };
    let pinned = 100 * 256;
    let plan = cfg(true, pinned + 326 * 2000).plan().unwrap();
    assert_eq!(plan[0].rows, vec![100, 0]);
    assert_eq!(plan[1].rows, vec![2000, 326 * 1000 / 256]);
    let plan = cfg(false, pinned + 326 * 2000).plan().unwrap();
    assert_eq!(plan[1].rows[0], 326 * 2000 / 256);
    match cfg(true, pinned + 300).plan() {
        Err(Error::TierTooSmall {
            needed, row_bytes, ..
        }) => assert_eq!((needed, row_bytes), (326, 256)),
        other => panic!("{other:?}"),
    }
}

/// A first DRAM tier that lives in a file (on tmpfs, to be kept across
/// restarts) also keeps a stamp per slot beside it, in the same memory:
/// `overhead_in_budget` charges a cached row those bytes too, and a tier
/// of its own memory does not.
#[test]
fn overhead_in_budget_charges_the_stamps_of_a_dram_tier_in_a_file() {
    let stamp = embtier_format::stamps::STAMP_BYTES;
    let cfg = |on: bool, path: Option<&str>| {
        let mut c = StoreConfig::builder()
            .table(TableConfig::new("c", 1 << 20, 64))
            .dram_capacity(1 << 20)
            .overhead_in_budget(on)
            .build();
        c.tiers[0].path = path.map(Into::into);
        c
    };
    let rows = |c: StoreConfig| c.plan().unwrap()[0].rows[0];
    let charged = charged_row_bytes(256, true);
    assert_eq!(rows(cfg(true, None)), (1 << 20) / charged);
    assert_eq!(
        rows(cfg(true, Some("/dev/shm/t.tier"))),
        (1 << 20) / (charged + stamp)
    );
    // Off, a row is its bytes, in a file or not.
    assert_eq!(rows(cfg(false, Some("/dev/shm/t.tier"))), (1 << 20) / 256);
}

#[test]
fn huge_pages_are_on_unless_a_tier_turns_them_off() {
    let cfg = one_table(|b| b);
    assert!(cfg.tiers[0].huge_pages);
    assert!(
        !cfg.to_toml().contains("huge_pages"),
        "the default is not written"
    );
    // Legacy `[dram]`, read and written back.
    let off = one_table(|b| b.dram_huge_pages(false));
    let text = off.to_toml();
    assert!(text.contains("huge_pages = false"), "{text}");
    assert_eq!(StoreConfig::from_toml(&text).unwrap(), off);
    // A tier list.
    let listed = "[[tiers]]\nkind = \"dram\"\ncapacity = \"64MiB\"\nhuge_pages = false\n\
                  [[tiers]]\nkind = \"dram\"\ncapacity = \"64MiB\"\n\
                  [[tables]]\nname = \"t\"\nrows = 1000\ndim = 4\n";
    let cfg = StoreConfig::from_toml(listed).unwrap();
    assert!(!cfg.tiers[0].huge_pages);
    assert!(cfg.tiers[1].huge_pages);
    assert_eq!(StoreConfig::from_toml(&cfg.to_toml()).unwrap(), cfg);
}

#[test]
fn a_negative_learning_rate_or_weight_decay_is_refused() {
    // As torch.optim refuses them: a negative rate climbs the loss, and a
    // negative decay grows the weights, silently, for the whole run.
    use crate::Optimizer;
    let with = |o: Optimizer| {
        StoreConfig::builder()
            .table(TableConfig::new("a", 1000, 4).optimizer(o))
            .build()
            .plan()
    };
    let bad = [
        Optimizer::Sgd {
            lr: -0.1,
            weight_decay: 0.0,
        },
        Optimizer::Sgd {
            lr: 0.1,
            weight_decay: -1e-4,
        },
        Optimizer::RowwiseAdagrad {
            lr: -0.01,
            eps: 1e-8,
            weight_decay: 0.0,
        },
        Optimizer::Adagrad {
            lr: 0.01,
            eps: 1e-8,
            weight_decay: -0.5,
        },
        Optimizer::Adam {
            lr: -1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        },
    ];
    for o in bad {
        let e = with(o).unwrap_err().to_string();
        assert!(
            e.contains("table \"a\"") && e.contains("negative"),
            "{o:?}: {e}"
        );
    }
    // Zero is a frozen table (torch takes lr 0 too).
    with(Optimizer::Sgd {
        lr: 0.0,
        weight_decay: 0.0,
    })
    .unwrap();
    let toml = "[[tables]]\nname = \"a\"\nrows = 10\ndim = 4\n[tables.optimizer]\nkind = \"sgd\"\nlr = -1\n";
    let e = StoreConfig::from_toml(toml)
        .unwrap()
        .plan()
        .unwrap_err()
        .to_string();
    assert!(e.contains("lr -1"), "{e}");
}

#[test]
fn floats_are_written_short_and_read_back_the_same() {
    let cfg = StoreConfig::builder()
        .table(
            TableConfig::new("a", 1000, 4).optimizer(crate::Optimizer::Adam {
                lr: 0.001,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            }),
        )
        .build();
    let text = cfg.to_toml();
    for want in [
        "lr = 0.001\n",
        "beta1 = 0.9\n",
        "beta2 = 0.999\n",
        "scale = 0.01\n",
    ] {
        assert!(text.contains(want), "{want:?} not in\n{text}");
    }
    assert_eq!(StoreConfig::from_toml(&text).unwrap(), cfg);
    // Any finite f32 reads back as itself: a spread of bit patterns over
    // every sign and exponent, the extremes and subnormals among them, and
    // 7.038531e-26, whose shortest decimal read as an f64 and rounded to
    // f32 lands one value off (a review found it in all 2^31).
    let mut x = 0x9E37_79B9u32;
    for i in 0..20_000u32 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let v = match i {
            0 => f32::MIN_POSITIVE,
            1 => f32::MAX,
            2 => 1e-45,
            3 => f32::from_bits(0x15ae_43fd),
            4 => -f32::from_bits(0x15ae_43fd),
            _ if !f32::from_bits(x).is_finite() => continue,
            _ => f32::from_bits(x),
        };
        let c = StoreConfig::builder()
            .table(TableConfig::new("a", 10, 4).init(Init::Uniform { scale: v }))
            .build();
        let back = StoreConfig::from_toml(&c.to_toml()).unwrap();
        assert_eq!(back.tables[0].init, Init::Uniform { scale: v }, "{v:e}");
    }
}

#[test]
fn a_table_s_config_error_names_the_table_apart() {
    let bad = StoreConfig::builder()
        .table(TableConfig::new("ok", 10, 4))
        .table(TableConfig::new("wide", 10, 0))
        .build();
    match bad.plan().unwrap_err() {
        Error::Config { reason, table } => {
            assert_eq!(table.as_deref(), Some("wide"));
            assert!(reason.starts_with("table \"wide\": dim 0"), "{reason}");
        }
        e => panic!("{e:?}"),
    }
    let e = StoreConfig::builder().build().plan().unwrap_err();
    assert!(matches!(e, Error::Config { table: None, .. }), "{e:?}");
}

#[test]
fn integers_past_what_store_toml_holds_are_refused_not_a_panic() {
    let past = i64::MAX as u64 + 1;
    let e = StoreConfig::builder()
        .table(TableConfig::new("a", 10, 4).seed(past))
        .build()
        .plan()
        .unwrap_err();
    assert!(
        matches!(&e, Error::Config { table: Some(t), .. } if t == "a")
            && e.to_string().contains("seed"),
        "{e}"
    );
    let e = one_table(|b| b.merge_list_rows(usize::MAX))
        .plan()
        .unwrap_err();
    assert!(e.to_string().contains("ssd.merge_list_rows"), "{e}");
    // At the edge it renders and reads back.
    let edge = StoreConfig::builder()
        .table(TableConfig::new("a", 10, 4).seed(i64::MAX as u64))
        .build();
    edge.plan().unwrap();
    assert_eq!(StoreConfig::from_toml(&edge.to_toml()).unwrap(), edge);
}

#[test]
fn a_byte_size_of_the_wrong_kind_says_what_a_size_is() {
    let with = |cap: &str| {
        StoreConfig::from_toml(&format!(
            "[dram]\ncapacity = {cap}\n[[tables]]\nname = \"a\"\nrows = 10\ndim = 4\n"
        ))
    };
    assert_eq!(with("4096").unwrap().tiers[0].capacity.0, 4096);
    assert_eq!(with("\"64MiB\"").unwrap().tiers[0].capacity.0, 64 << 20);
    let e = with("-5").unwrap_err().to_string();
    assert!(e.contains("cannot be negative (-5)"), "{e}");
    let e = with("1.5").unwrap_err().to_string();
    assert!(
        e.contains("a whole number of bytes or a size such as \"64MiB\""),
        "{e}"
    );
    assert!(!e.contains("untagged"), "{e}");
}
