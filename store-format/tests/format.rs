//! Pins every offset of FORMAT.md to the constants of the code, and checks
//! round trips and rejections of each layout.

use embtier_format::*;

/// Rows `| offset | size | field | ... |` of the table under `heading`.
fn spec_table(heading: &str) -> Vec<(usize, usize, String)> {
    let text = include_str!("../FORMAT.md");
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("FORMAT.md has no section {heading:?}"));
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text[start..].lines().skip(1) {
        if line.starts_with("## ") {
            break;
        }
        if line.starts_with("| offset") {
            in_table = true;
            continue;
        }
        if in_table && line.starts_with('|') && !line.starts_with("|---") {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            rows.push((
                cells[1].parse().unwrap(),
                cells[2].parse().unwrap(),
                cells[3].to_string(),
            ));
        } else if in_table && !line.starts_with('|') {
            break;
        }
    }
    assert!(!rows.is_empty(), "no table under {heading:?}");
    rows
}

fn check(heading: &str, code: &[(&str, usize, usize)]) {
    let spec = spec_table(heading);
    let spec_fields: Vec<&str> = spec.iter().map(|r| r.2.as_str()).collect();
    let code_fields: Vec<&str> = code.iter().map(|c| c.0).collect();
    assert_eq!(spec_fields, code_fields, "{heading}: fields differ");
    for ((off, size, name), (cname, coff, csize)) in spec.iter().zip(code) {
        assert_eq!(
            (off, size),
            (coff, csize),
            "{heading}: field {name} ({cname})"
        );
    }
    // Fields do not overlap and appear in order.
    for w in spec.windows(2) {
        assert!(
            w[0].0 + w[0].1 <= w[1].0,
            "{heading}: {} overlaps {}",
            w[0].2,
            w[1].2
        );
    }
}

#[test]
fn superblock_offsets_match_the_spec() {
    check(
        "## Superblock",
        &[
            ("magic", sb::MAGIC, 8),
            ("version", sb::VERSION, 4),
            ("flags", sb::FLAGS, 4),
            ("store_id", sb::STORE_ID, 8),
            ("created", sb::CREATED, 8),
            ("block_size", sb::BLOCK_SIZE, 4),
            ("table_count", sb::TABLE_COUNT, 4),
            ("catalog_offset", sb::CATALOG_OFFSET, 8),
            ("catalog_len", sb::CATALOG_LEN, 8),
            ("catalog_crc", sb::CATALOG_CRC, 4),
            ("data_blocks", sb::DATA_BLOCKS, 8),
            ("generation", sb::GENERATION, 8),
            ("seq", sb::SEQ, 8),
            ("committed_epoch", sb::COMMITTED_EPOCH, 8),
            ("next_epoch", sb::NEXT_EPOCH, 8),
            ("rowlog_blocks", sb::ROWLOG_BLOCKS, 8),
            ("counters_generation", sb::COUNTERS_GENERATION, 8),
            ("dead_count", sb::DEAD_COUNT, 4),
            ("rowlog_from", sb::ROWLOG_FROM, 4),
            ("written_crc", sb::WRITTEN_CRC, 4),
            ("rowlog_start", sb::ROWLOG_START, 4),
            ("written_groups", sb::WRITTEN_GROUPS, 8),
            ("commit_id", sb::COMMIT_ID, 8),
            ("rowlog_ring", sb::ROWLOG_RING, 8),
            ("crc", sb::CRC, 4),
        ],
    );
    assert_eq!(sb::CRC + 4, BLOCK_SIZE);
}

#[test]
fn written_list_offsets_match_the_spec_and_round_trip() {
    check(
        "## Written-group list",
        &[
            ("magic", wl::MAGIC, 4),
            ("reserved", wl::RESERVED, 4),
            ("epoch", wl::EPOCH, 8),
            ("generation", wl::GENERATION, 8),
            ("count", wl::COUNT, 8),
        ],
    );
    assert_eq!((wl::ENTRIES, wl::ENTRY_SIZE), (32, 12));
    assert_eq!(WRITTEN_MAGIC.to_le_bytes(), *b"EWRT");
    let list = WrittenList {
        epoch: 9,
        generation: 4,
        groups: vec![(3, 1), (10, 2)],
    };
    let b = list.encode();
    let sb = Superblock {
        version: FormatVersion::V4,
        store_id: 1,
        created_unix: 1,
        table_count: 1,
        catalog_offset: 8192,
        catalog_len: 128,
        catalog_crc: 0,
        data_blocks: 20,
        generation: 4,
        seq: 9,
        committed_epoch: 9,
        next_epoch: 11,
        rowlog_blocks: 0,
        rowlog_from: 0,
        rowlog_start: 0,
        rowlog_ring: 0,
        commit_id: 0,
        written_groups: 2,
        written_crc: WrittenList::crc_of(&b),
        counters_generation: 0,
        dead_epochs: vec![],
    };
    assert_eq!(WrittenList::decode(&b, &sb).unwrap(), list);
    assert_eq!(WrittenList::file_name(4), "written-0.emb");
    // Another commit's list, a cut one, a flipped byte: all refused.
    let other = Superblock {
        generation: 3,
        ..sb.clone()
    };
    assert!(matches!(
        WrittenList::decode(&b, &other),
        Err(FormatError::InvalidField {
            field: "written generation",
            ..
        })
    ));
    assert!(WrittenList::decode(&b[..b.len() - 1], &sb).is_err());
    for at in [0usize, 9, 17, 25, 33, 41, b.len() - 1] {
        let mut bad = b.clone();
        bad[at] ^= 1;
        assert!(WrittenList::decode(&bad, &sb).is_err(), "byte {at}");
    }
}

/// The streamed encoding is the spec's byte for byte (laid out here by
/// hand, field by field) at every piece boundary, with the CRC it returns
/// the one the bytes end with, and decodes back.
#[test]
fn a_streamed_written_list_is_the_encoded_one() {
    for n in [0usize, 1, 340, 341, 342, 682, 683, 1000] {
        let groups: Vec<(u64, u32)> = (0..n as u64)
            .map(|i| (i * 7 + (i << 40), (i % 5 + 1) as u32))
            .collect();
        let mut want = Vec::new();
        want.extend_from_slice(b"EWRT");
        want.extend_from_slice(&0u32.to_le_bytes());
        want.extend_from_slice(&9u64.to_le_bytes());
        want.extend_from_slice(&4u64.to_le_bytes());
        want.extend_from_slice(&(n as u64).to_le_bytes());
        for &(f, b) in &groups {
            want.extend_from_slice(&f.to_le_bytes());
            want.extend_from_slice(&b.to_le_bytes());
        }
        let crc = crc32c::crc32c(&want);
        want.extend_from_slice(&crc.to_le_bytes());
        let mut got = Vec::new();
        let c = WrittenList::write(&mut got, 9, 4, groups.iter().copied()).unwrap();
        assert_eq!(got, want, "{n} groups");
        assert_eq!(c, crc);
        let list = WrittenList {
            epoch: 9,
            generation: 4,
            groups,
        };
        assert_eq!(list.encode(), want, "{n} groups");
        assert_eq!(WrittenList::crc_of(&want), crc);
    }
}

#[test]
fn counter_slot_offsets_match_the_spec() {
    check(
        "## Call counters",
        &[
            ("magic", cs::MAGIC, 4),
            ("count", cs::COUNT, 4),
            ("generation", cs::GENERATION, 8),
        ],
    );
    assert_eq!(cs::COUNTERS, 16);
    assert_eq!(COUNTERS_MAGIC.to_le_bytes(), *b"ECNT");
}

#[test]
fn counter_slots_round_trip_and_reject_damage() {
    let slot = CounterSlot {
        generation: 7,
        counters: vec![3, u64::MAX, 0],
    };
    let b = slot.encode();
    assert_eq!(b.len() as u64, CounterSlot::slot_len(3));
    assert_eq!(CounterSlot::slot_len(3), 4096);
    assert_eq!(CounterSlot::slot_len(510), 8192);
    assert_eq!(CounterSlot::decode_at(&b, 8192, 3, 7).unwrap(), slot);
    // Another generation's slot, another table count, a flipped byte.
    assert!(matches!(
        CounterSlot::decode_at(&b, 8192, 3, 5),
        Err(FormatError::InvalidField {
            field: "counter generation",
            offset: 8200,
            ..
        })
    ));
    assert!(matches!(
        CounterSlot::decode_at(&b, 8192, 2, 7),
        Err(FormatError::ChecksumMismatch { offset: 8192, .. })
    ));
    for at in [0usize, 5, 9, 17, 40, 43] {
        let mut bad = b.clone();
        bad[at] ^= 1;
        assert!(
            CounterSlot::decode_at(&bad, 8192, 3, 7).is_err(),
            "byte {at}"
        );
    }
    // Slots start at the block after the catalog, one after the other.
    let s = Superblock {
        version: FormatVersion::V4,
        store_id: 1,
        created_unix: 1,
        table_count: 3,
        catalog_offset: 8192,
        catalog_len: 384,
        catalog_crc: 0,
        data_blocks: 1,
        generation: 0,
        seq: 1,
        committed_epoch: 0,
        next_epoch: 1,
        rowlog_blocks: 0,
        rowlog_from: 0,
        rowlog_start: 0,
        rowlog_ring: 0,
        commit_id: 0,
        written_groups: 0,
        written_crc: 0,
        counters_generation: 0,
        dead_epochs: vec![],
    };
    assert_eq!(CounterSlot::offset(&s, 0), 12288);
    assert_eq!(CounterSlot::offset(&s, 1), 16384);
}

#[test]
fn boot_record_offsets_match_the_spec() {
    use embtier_format::boot::*;
    check(
        "## Boot record",
        &[
            ("magic", 0, 8),
            ("generation", BOOT_GENERATION, 8),
            ("boot_id", BOOT_ID, BOOT_ID_BYTES),
            ("crc", BOOT_CRC, 4),
            ("reserved", BOOT_RESERVED, 4),
        ],
    );
    assert_eq!((BOOT_RECORD, BOOT_MAGIC), (64, *b"EMBBOOT1"));
}

#[test]
fn kept_tier_offsets_match_the_spec() {
    use embtier_format::kept::*;
    check(
        "## Kept tier",
        &[
            ("magic", 0, 8),
            ("store_id", KEPT_STORE_ID, 8),
            ("generation", KEPT_GENERATION, 8),
            ("epoch", KEPT_EPOCH, 8),
            ("tier", KEPT_TIER, 4),
            ("region_count", KEPT_REGIONS, 4),
            ("file_len", KEPT_FILE_LEN, 8),
            ("commit_id", KEPT_COMMIT, 8),
        ],
    );
    assert_eq!(
        (KEPT_HEADER, REGION_HEADER, KEPT_MAGIC),
        (56, 32, *b"EMBKEPT2")
    );
    assert_eq!(FREE_SLOT, u64::MAX);
}

#[test]
fn slot_stamps_offsets_match_the_spec() {
    use embtier_format::stamps::*;
    check(
        "## Slot stamps",
        &[
            ("magic", 0, 8),
            ("store_id", STAMPS_STORE_ID, 8),
            ("boot_id", STAMPS_BOOT_ID, STAMPS_BOOT_ID_BYTES),
            ("tier", STAMPS_TIER, 4),
            ("region_count", STAMPS_REGIONS, 4),
            ("file_len", STAMPS_FILE_LEN, 8),
            ("stamps_at", STAMPS_AT, 8),
        ],
    );
    assert_eq!(
        (STAMPS_HEADER, STAMP_REGION, STAMPS_MAGIC),
        (80, 24, *b"EMBSTMP2")
    );
    assert_eq!((STAMP_ALIGN, STAMP_BYTES, NO_ROW), (4096, 16, 0));
}

#[test]
fn row_log_index_offsets_match_the_spec() {
    use embtier_format::logindex::*;
    check(
        "## Row-log index",
        &[
            ("magic", 0, 8),
            ("store_id", INDEX_STORE_ID, 8),
            ("boot_id", INDEX_BOOT_ID, INDEX_BOOT_ID_BYTES),
            ("slot_bytes", INDEX_SLOT_BYTES, 4),
            ("reserved", INDEX_RESERVED, 4),
            ("ring", INDEX_RING, 8),
            ("log_base", INDEX_LOG_BASE, 8),
            ("crc", INDEX_CRC, 4),
            ("kept_through", INDEX_KEPT_THROUGH, 8),
        ],
    );
    assert_eq!((SLOTS_AT, INDEX_MAGIC), (4096, *b"EMBLIDX1"));
    check(
        "### Row-log index slot",
        &[
            ("crc", SLOT_CRC, 4),
            ("block", SLOT_BLOCK, 4),
            ("epoch", SLOT_EPOCH, 8),
            ("table", SLOT_TABLE, 4),
            ("count", SLOT_COUNT, 4),
        ],
    );
    assert_eq!((SLOT_IDS, slot_bytes_for(15)), (24, 144));
}

#[test]
fn hot_rows_offsets_match_the_spec() {
    use embtier_format::hotrows::*;
    check(
        "## Hot rows",
        &[
            ("magic", 0, 8),
            ("generation", FILE_GENERATION, 8),
            ("reserved", FILE_RESERVED, 8),
            ("crc", FILE_CRC, 4),
            ("reserved", FILE_RESERVED2, 4),
        ],
    );
    assert_eq!(FILE_HEADER, 32);
    check(
        "### Hot-rows chunk header",
        &[
            ("magic", 0, 4),
            ("crc", CHUNK_CRC, 4),
            ("generation", CHUNK_GENERATION, 8),
            ("table", CHUNK_TABLE, 4),
            ("tier", CHUNK_TIER, 4),
            ("row_bytes", CHUNK_ROW_BYTES, 4),
            ("count", CHUNK_COUNT, 4),
        ],
    );
    assert_eq!(CHUNK_HEADER, 32);
    assert_eq!(
        (ROWS_MAGIC, CHUNK_MAGIC, END_MAGIC),
        (*b"EMBROWS1", *b"ROWS", *b"END\0")
    );
}

#[test]
fn row_log_offsets_match_the_spec() {
    check(
        "## Row log",
        &[
            ("magic", rowlog::MAGIC, 4),
            ("table", rowlog::TABLE, 4),
            ("count", rowlog::COUNT, 4),
            ("row_bytes", rowlog::ROW_BYTES, 4),
        ],
    );
    assert_eq!(rowlog::IDS, 16);
    assert_eq!(rowlog::LOG_MAGIC.to_le_bytes(), *b"ELOG");
}

#[test]
fn catalog_offsets_match_the_spec() {
    check(
        "## Catalog",
        &[
            ("name", te::NAME, MAX_NAME_LEN),
            ("rows", te::ROWS, 8),
            ("dim", te::DIM, 4),
            ("elem", te::ELEM, 1),
            ("init", te::INIT, 1),
            ("optimizer", te::OPTIMIZER, 1),
            ("row_map", te::ROW_MAP, 1),
            ("state_bytes", te::STATE_BYTES, 4),
            ("init_scale", te::INIT_SCALE, 4),
            ("seed", te::SEED, 8),
            ("base_block", te::BASE_BLOCK, 8),
            ("block_count", te::BLOCK_COUNT, 8),
            ("row_bytes", te::ROW_BYTES, 4),
            ("rows_per_group", te::ROWS_PER_GROUP, 4),
            ("blocks_per_group", te::BLOCKS_PER_GROUP, 4),
            ("reserved2", te::RESERVED2, 4),
        ],
    );
    assert_eq!(te::RESERVED2 + 4, te::SIZE);
}

#[test]
fn data_block_offsets_match_the_spec() {
    check(
        "## Data block",
        &[
            ("payload", 0, BLOCK_PAYLOAD),
            ("epoch", TRAILER_EPOCH, 8),
            ("block_no", TRAILER_BLOCK_NO, 8),
            ("magic", TRAILER_MAGIC, 4),
            ("crc", TRAILER_CRC, 4),
        ],
    );
    assert_eq!(TRAILER_CRC + 4, BLOCK_SIZE);
    assert_eq!(&BLOCK_MAGIC.to_le_bytes(), b"EBLK");
    assert_eq!(&SUPERBLOCK_MAGIC, b"EMBTIER\0");
}

fn entry(name: &str, rows: u64, dim: u32, base: u64) -> TableEntry {
    let rb = TableEntry::row_bytes_for(ElemType::F32, dim, 0) as u32;
    let layout = RowLayout::for_row_bytes(rb);
    TableEntry {
        name: name.into(),
        rows,
        dim,
        elem: ElemType::F32,
        init: InitKind::Uniform,
        init_scale: 0.25,
        seed: 42,
        state_bytes: 0,
        optimizer: OptimizerCode::Sgd,
        base_block: base,
        block_count: layout.blocks_for(rows),
        layout,
    }
}

/// The two-table catalog `bytes` at offset 4096, `patch`ed and its CRC
/// made anew, is refused naming `field` at the first entry's `at`.
fn refused_as(bytes: &[u8], patch: impl FnOnce(&mut Vec<u8>), field: &str, at: usize) {
    let mut bad = bytes.to_vec();
    patch(&mut bad);
    let c = crc32c::crc32c(&bad);
    match Catalog::decode(&bad, 2, 4096, c) {
        Err(FormatError::InvalidField {
            field: f, offset, ..
        }) if f == field => {
            assert_eq!(offset, 4096 + at as u64, "{field}")
        }
        other => panic!("{field}: {other:?}"),
    }
}

#[test]
fn superblock_and_catalog_round_trip_and_reject() {
    let a = entry("a", 1_000_000_000, 128, 0);
    let b = entry("b", 77, 2000, a.block_count);
    let cat = Catalog { tables: vec![a, b] };
    let bytes = cat.encode();
    let crc = crc32c::crc32c(&bytes);
    assert_eq!(Catalog::decode(&bytes, 2, 4096, crc).unwrap(), cat);
    assert!(matches!(
        Catalog::decode(&bytes, 2, 4096, crc ^ 1),
        Err(FormatError::ChecksumMismatch { offset: 4096, .. })
    ));
    assert!(matches!(
        Catalog::decode(&bytes[..200], 2, 4096, crc),
        Err(FormatError::Truncated { .. })
    ));
    // A bad element type is named with its offset.
    refused_as(&bytes, |b| b[te::ELEM] = 9, "elem_type", te::ELEM);
    // A dim past the spec's 2^20 is refused by the catalog itself.
    refused_as(
        &bytes,
        |b| b[te::DIM..te::DIM + 4].copy_from_slice(&((1u32 << 20) + 1).to_le_bytes()),
        "dim",
        te::DIM,
    );
    // A name is zero padded with no NUL inside: bytes after its first NUL
    // are refused, not cut off ("a\0c" must not read as "a").
    refused_as(&bytes, |b| b[te::NAME + 2] = b'c', "name", te::NAME);

    let s = Superblock {
        version: FormatVersion::V5,
        store_id: 7,
        created_unix: 1,
        table_count: 2,
        catalog_offset: 4096,
        catalog_len: bytes.len() as u64,
        catalog_crc: crc,
        data_blocks: cat.data_blocks(),
        generation: 3,
        seq: 9,
        committed_epoch: 4,
        next_epoch: 6,
        rowlog_blocks: 11,
        rowlog_from: 7,
        rowlog_start: 60,
        rowlog_ring: 64,
        commit_id: 0x0123_4567_89ab_cdef,
        written_groups: 0,
        written_crc: 0,
        counters_generation: 3,
        dead_epochs: vec![(1, 2), (5, 5)],
    };
    let enc = s.encode();
    assert_eq!(Superblock::decode(&enc).unwrap(), s);
    assert_eq!(sb::COMMIT_ID, 4072);
    assert_eq!(
        u64::from_le_bytes(enc[4072..4080].try_into().unwrap()),
        0x0123_4567_89ab_cdef
    );
    assert_eq!(u32::from_le_bytes(enc[120..124].try_into().unwrap()), 2);
    assert_eq!(u64::from_le_bytes(enc[160..168].try_into().unwrap()), 5);
    assert!(s.is_dead(1) && s.is_dead(2) && !s.is_dead(3) && !s.is_dead(4) && s.is_dead(5));
    // The committed log wraps: 4 blocks at the ring's end, 7 at its start.
    assert_eq!(u32::from_le_bytes(enc[132..136].try_into().unwrap()), 60);
    assert_eq!(u64::from_le_bytes(enc[4080..4088].try_into().unwrap()), 64);
    let at: Vec<u64> = (0..11).map(|i| s.rowlog_block(i)).collect();
    assert_eq!(at, [60, 61, 62, 63, 0, 1, 2, 3, 4, 5, 6]);
    assert_eq!(s.rowlog_extent(), 64);
    let linear = Superblock {
        rowlog_start: 3,
        ..s.clone()
    };
    assert_eq!((linear.rowlog_block(10), linear.rowlog_extent()), (13, 14));
    // A start outside the ring, a log longer than it, or a start in a log
    // that does not wrap, are refused naming rowlog_start.
    for (start, ring) in [(64u32, 64u64), (0, 10), (5, 0)] {
        let bad = Superblock {
            rowlog_start: start,
            rowlog_ring: ring,
            ..s.clone()
        }
        .encode();
        match Superblock::decode(&bad) {
            Err(FormatError::InvalidField {
                field: "rowlog_start",
                offset,
                ..
            }) => assert_eq!(offset, sb::ROWLOG_START as u64, "{start} of {ring}"),
            other => panic!("{start} of {ring}: {other:?}"),
        }
    }
    // The ring's largest size is the spec's 2^32 - 2 (its blocks are u32
    // indices below it; the two highest u32 values are a reader's
    // sentinels); one more is refused.
    let largest = Superblock {
        rowlog_ring: (1 << 32) - 2,
        ..s.clone()
    };
    assert_eq!(Superblock::decode(&largest.encode()).unwrap(), largest);
    for ring in [(1u64 << 32) - 1, 1 << 32] {
        let huge = Superblock {
            rowlog_ring: ring,
            ..s.clone()
        }
        .encode();
        assert!(
            matches!(
                Superblock::decode(&huge),
                Err(FormatError::InvalidField {
                    field: "rowlog_ring",
                    offset: 4080,
                    ..
                })
            ),
            "{ring}"
        );
    }
    // Version 4 has no ring: the bytes are not read.
    let mut v4 = Superblock {
        version: FormatVersion::V4,
        rowlog_start: 0,
        rowlog_ring: 0,
        ..s.clone()
    }
    .encode();
    v4[4080] = 9;
    let crc = crc32c::crc32c(&v4[..4092]);
    v4[4092..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(Superblock::decode(&v4).unwrap().rowlog_ring, 0);
    // Dead ranges that cannot arise are refused, naming the range.
    for (ranges, i) in [
        (vec![(2u64, 1u64)], 0usize), // reversed
        (vec![(1, 2), (2, 2)], 1),    // overlapping
        (vec![(0, 1)], 0),            // epoch 0
        (vec![(5, 6)], 0),            // at or past next_epoch
        (vec![(3, 4)], 0),            // holds the committed epoch
    ] {
        let bad = Superblock {
            dead_epochs: ranges.clone(),
            ..s.clone()
        }
        .encode();
        match Superblock::decode(&bad) {
            Err(FormatError::InvalidField {
                field: "dead epoch range",
                offset,
                ..
            }) => assert_eq!(offset, (sb::DEAD_RANGES + 16 * i) as u64, "{ranges:?}"),
            other => panic!("{ranges:?}: {other:?}"),
        }
    }
    let mut many = enc;
    many[sb::DEAD_COUNT..sb::DEAD_COUNT + 4]
        .copy_from_slice(&(MAX_DEAD_RANGES as u32 + 1).to_le_bytes());
    let crc = crc32c::crc32c(&many[..4092]);
    many[4092..].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        Superblock::decode(&many),
        Err(FormatError::InvalidField {
            field: "dead_count",
            ..
        })
    ));
    // Merging: touching and overlapping ranges become one.
    let mut m = Superblock {
        dead_epochs: vec![],
        ..s.clone()
    };
    assert!(m.add_dead(3, 2)); // empty: nothing added
    assert!(m.add_dead(7, 9) && m.add_dead(1, 2) && m.add_dead(3, 5));
    assert_eq!(m.dead_epochs, vec![(1, 5), (7, 9)]);
    assert!(m.add_dead(6, 6));
    assert_eq!(m.dead_epochs, vec![(1, 9)]);
    // Version 3 had neither: its block reads with none.
    let mut v3 = Superblock {
        version: FormatVersion::V3,
        ..s.clone()
    }
    .encode();
    let crc = crc32c::crc32c(&v3[..4092]);
    v3[4092..].copy_from_slice(&crc.to_le_bytes());
    let old = Superblock::decode(&v3).unwrap();
    assert!(old.dead_epochs.is_empty() && old.counters_generation == 0);
    assert_eq!(u64::from_le_bytes(enc[104..112].try_into().unwrap()), 11);
    // Version 2 had no row log: its block reads with an empty one.
    let mut v2 = enc;
    v2[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c::crc32c(&v2[..4092]);
    v2[4092..].copy_from_slice(&crc.to_le_bytes());
    let old = Superblock::decode(&v2).unwrap();
    assert_eq!((old.version, old.rowlog_blocks), (FormatVersion::V2, 0));
    for (at, what) in [(0usize, "magic"), (20, "crc"), (90, "crc"), (4093, "crc")] {
        let mut e = enc;
        e[at] ^= 0xff;
        // The second copy's errors name its own offset.
        let err = Superblock::decode_at(&e, 4096).unwrap_err();
        match (what, err) {
            ("magic", FormatError::BadMagic { offset: 4096, .. })
            | ("crc", FormatError::ChecksumMismatch { offset: 4096, .. }) => {}
            (w, other) => panic!("{w}: {other:?}"),
        }
    }
    // An epoch pair that cannot arise is refused even with a good CRC.
    let bad = Superblock {
        next_epoch: 4,
        ..s.clone()
    }
    .encode();
    assert!(matches!(
        Superblock::decode(&bad),
        Err(FormatError::InvalidField {
            field: "next_epoch",
            ..
        })
    ));
    for v in [1, 6] {
        assert!(matches!(
            FormatVersion::try_from(v),
            Err(FormatError::UnsupportedVersion { found, supported: 5 }) if found == v
        ));
    }
}

#[test]
fn layout_rules() {
    let l = RowLayout::for_row_bytes(512);
    assert_eq!((l.rows_per_group, l.blocks_per_group), (7, 1));
    let l = RowLayout::for_row_bytes(4072);
    assert_eq!((l.rows_per_group, l.blocks_per_group), (1, 1));
    let l = RowLayout::for_row_bytes(4076);
    assert_eq!((l.rows_per_group, l.blocks_per_group), (1, 2));
    assert_eq!(l.blocks_for(10), 20);
    assert_eq!(RowLayout::for_row_bytes(16).rows_per_group, 254);
}

/// `locate` and `rows_of` agree: every row is in the group `locate` names,
/// at a distinct offset inside the group's slots, and `rows_of` lists each
/// row once; groups, slots and blocks add up.
#[test]
fn locate_and_rows_of_agree() {
    for rb in [4u32, 16, 12, 500, 4072, 4076, 9000] {
        let l = RowLayout::for_row_bytes(rb);
        assert_eq!(l.map, RowMap::Dense);
        for rows in [1u64, 7, 254, 255, 1000] {
            let mut seen = vec![false; rows as usize];
            for g in 0..l.groups_for(rows) {
                let mut offsets = Vec::new();
                for r in l.rows_of(g, rows) {
                    assert!(
                        !std::mem::replace(&mut seen[r as usize], true),
                        "row {r} twice"
                    );
                    let p = l.locate(r);
                    assert_eq!(p.group, g, "rb {rb} row {r}");
                    assert!(p.offset + rb as usize <= l.slot_bytes().max(rb as usize));
                    offsets.push(p.offset);
                }
                assert_eq!(offsets.len(), l.rows_in_group(g, rows));
                offsets.sort_unstable();
                offsets.dedup();
                assert_eq!(offsets.len(), l.rows_in_group(g, rows), "distinct offsets");
            }
            assert!(
                seen.iter().all(|&s| s),
                "rb {rb}, {rows} rows: every row in a group"
            );
            assert_eq!(
                l.groups_for(rows) * l.blocks_per_group as u64,
                l.blocks_for(rows)
            );
            // Places are ordered as rows are (the dense map).
            let places: Vec<RowPlace> = (0..rows).map(|r| l.locate(r)).collect();
            assert!(places.windows(2).all(|w| w[0] < w[1]));
        }
    }
}

/// The row map is recorded in the catalog, and a map this build does not
/// know is refused by name, not read as dense.
#[test]
fn unknown_row_maps_are_refused() {
    let cat = Catalog {
        tables: vec![entry("a", 100, 8, 0)],
    };
    let bytes = cat.encode();
    assert_eq!(bytes[te::ROW_MAP], RowMap::Dense as u8);
    let mut bad = bytes.clone();
    bad[te::ROW_MAP] = 1;
    let c = crc32c::crc32c(&bad);
    match Catalog::decode(&bad, 1, 4096, c) {
        Err(FormatError::InvalidField {
            field: "row_map",
            offset,
            ..
        }) => assert_eq!(offset, 4096 + te::ROW_MAP as u64),
        other => panic!("{other:?}"),
    }
}

#[test]
fn blocks_seal_check_and_detect() {
    let mut b = vec![0u8; BLOCK_SIZE];
    assert_eq!(check_block(&b, 5).unwrap(), BlockState::Hole);
    b[10] = 1;
    seal_block(&mut b, 5, 11);
    assert_eq!(check_block(&b, 5).unwrap(), BlockState::Sealed);
    assert_eq!(block_epoch(&b), 11);
    assert!(matches!(
        check_block(&b, 6),
        Err(FormatError::MisplacedBlock {
            found: 5,
            expected: 6,
            ..
        })
    ));
    for at in [0usize, 100, 4071, 4072, 4080, 4090, 4095] {
        let mut c = b.clone();
        c[at] ^= 0x20;
        assert!(check_block(&c, 5).is_err(), "flip at {at} undetected");
    }
    // Group payload helpers skip trailers.
    let mut blocks = vec![0u8; 2 * BLOCK_SIZE];
    let data: Vec<u8> = (0..4200u32).map(|i| i as u8).collect();
    write_group_payload(&mut blocks, 0, &data);
    assert_eq!(&blocks[4072..4096], &[0u8; 24]);
    let mut back = vec![0u8; 4200];
    read_group_payload(&blocks, 0, &mut back);
    assert_eq!(back, data);
}

#[test]
fn trace_offsets_match_the_spec() {
    use embtier_format::trace::{ch, th, CHUNK_HEADER, CHUNK_MAGIC, TRACE_MAGIC};
    // The trace section has two tables: the fixed header, then the chunk header.
    let text = include_str!("../FORMAT.md");
    let start = text.find("## Trace file").expect("section");
    let section = &text[start..];
    let chunk_at = section.find("Chunk header").expect("chunk header table");
    let header_rows = rows_in(&section[..chunk_at]);
    let chunk_rows = rows_in(&section[chunk_at..]);
    let want_header = [
        ("magic", th::MAGIC, 8),
        ("version", th::VERSION, 4),
        ("flags", th::FLAGS, 4),
        ("table_count", th::TABLE_COUNT, 4),
        ("catalog_len", th::CATALOG_LEN, 4),
        ("catalog_crc", th::CATALOG_CRC, 4),
        ("crc", th::CRC, 4),
    ];
    let want_chunk = [
        ("chunk_magic", ch::MAGIC, 4),
        ("payload_len", ch::PAYLOAD_LEN, 4),
        ("batches", ch::BATCHES, 4),
        ("accesses", ch::ACCESSES, 4),
        ("chunk_crc", ch::CRC, 4),
    ];
    for (got, want) in [
        (header_rows, &want_header[..]),
        (chunk_rows, &want_chunk[..]),
    ] {
        let got: Vec<(String, usize, usize)> = got;
        assert_eq!(got.len(), want.len());
        for ((name, off, size), (wn, wo, ws)) in got.iter().zip(want) {
            assert_eq!((name.as_str(), *off, *size), (*wn, *wo, *ws));
        }
    }
    assert_eq!(th::CRC + 4, th::SIZE);
    assert_eq!(ch::CRC + 4, CHUNK_HEADER);
    assert_eq!(&CHUNK_MAGIC.to_le_bytes(), b"ECHK");
    assert_eq!(&TRACE_MAGIC, b"ETRACE\0\x01");
}

/// The `| offset | size | field |` rows of the first table in `text`.
fn rows_in(text: &str) -> Vec<(String, usize, usize)> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("| offset") {
            in_table = true;
            continue;
        }
        if in_table && line.starts_with("|---") {
            continue;
        }
        if in_table && line.starts_with('|') {
            let c: Vec<&str> = line.split('|').map(str::trim).collect();
            rows.push((
                c[3].to_string(),
                c[1].parse().unwrap(),
                c[2].parse().unwrap(),
            ));
        } else if in_table {
            break;
        }
    }
    rows
}

#[test]
fn journal_header_offsets_match_the_spec() {
    use embtier_format::journal::{jh, JOURNAL_MAGIC, MAX_ENTRIES};
    check(
        "## Journal",
        &[
            ("magic", jh::MAGIC, 8),
            ("epoch", jh::EPOCH, 8),
            ("seq", jh::SEQ, 8),
            ("count", jh::COUNT, 4),
            ("image_blocks", jh::IMAGE_BLOCKS, 4),
            ("entries", jh::ENTRIES, MAX_ENTRIES * jh::ENTRY_SIZE),
            ("crc", jh::CRC, 4),
        ],
    );
    assert_eq!(&JOURNAL_MAGIC, b"EJOURNAL");
    assert_eq!(MAX_ENTRIES, 253);
}

/// Regression: the `catalog` fuzz target's first find. A catalog entry whose
/// rows times blocks per group overflows u64 is rejected, not a panic (in
/// debug builds) or a wrapped block count that might match (in release).
#[test]
fn catalog_rows_that_overflow_the_block_count_are_rejected() {
    let mut e = entry("big", 1, 1100, 0); // 4400-byte rows: 2 blocks per group
    e.rows = u64::MAX / 2 + 3;
    e.block_count = e.rows.wrapping_mul(2);
    let cat = Catalog { tables: vec![e] };
    let bytes = cat.encode();
    match Catalog::decode(&bytes, 1, CATALOG_OFFSET, crc32c::crc32c(&bytes)) {
        Err(FormatError::InvalidField {
            field: "block_count",
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

/// Regression: the `catalog` fuzz target's second find. A NaN, infinite or
/// negative initialiser scale is rejected, naming the field.
#[test]
fn catalog_init_scale_must_be_finite_and_non_negative() {
    for scale in [f32::NAN, f32::INFINITY, -1.0] {
        let mut e = entry("t", 10, 4, 0);
        e.init_scale = scale;
        let bytes = Catalog { tables: vec![e] }.encode();
        match Catalog::decode(&bytes, 1, CATALOG_OFFSET, crc32c::crc32c(&bytes)) {
            Err(FormatError::InvalidField {
                field: "init_scale",
                offset,
                ..
            }) => assert_eq!(offset, CATALOG_OFFSET + te::INIT_SCALE as u64),
            other => panic!("{scale}: {other:?}"),
        }
    }
}

/// Found by the `data_block` fuzz target: a block number of 2^52 or more
/// saturates the block's byte offset, and adding the magic's offset to it
/// overflowed (a panic with overflow checks, a wrapped offset without).
#[test]
fn a_huge_block_number_does_not_overflow_the_error_offset() {
    let mut b = vec![0u8; BLOCK_SIZE];
    b[0] = 1;
    b[TRAILER_MAGIC..TRAILER_MAGIC + 4].copy_from_slice(b"NOPE");
    let crc = crc32c::crc32c(&b[..TRAILER_CRC]);
    b[TRAILER_CRC..].copy_from_slice(&crc.to_le_bytes());
    match check_block(&b, 0x3f88_7e5f_0000_0084) {
        Err(FormatError::BadMagic { offset, .. }) => assert_eq!(offset, u64::MAX),
        other => panic!("{other:?}"),
    }
}
