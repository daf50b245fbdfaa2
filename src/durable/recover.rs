//! Recovery at open: pick the committed superblock, undo the epochs after
//! it from the journal, check the written-group list and scrub for dead
//! epochs, and read the call counters.

use super::*;

impl Durable {
    /// Open the protocol's files and recover: undo every write of epochs after
    /// the committed one, then start a fresh epoch. `fresh`: just created.
    pub(crate) fn open(
        dir: &Path,
        sb: Superblock,
        data: &dyn IoEngine,
        data_path: &Path,
        wrap: &WrapFn<'_>,
    ) -> Result<(Durable, Recovery)> {
        let journal_path = dir.join(JOURNAL_FILE);
        let meta_path = dir.join(crate::files::META_FILE);
        let (jf, _) = crate::io::open_file(&journal_path, false)?;
        let journal_file = jf
            .try_clone()
            .map_err(|e| Error::io(&journal_path, "dup", e))?;
        let journal = wrap(&journal_path, crate::io::psync_engine(jf));
        let (mf, _) = crate::io::open_file(&meta_path, false)?;
        let meta = wrap(&meta_path, crate::io::psync_engine(mf));
        // Mapped, not read: the journal can be as large as the groups one
        // checkpoint interval overwrote. Read only, so a full file system
        // cannot fault it (only a store into an unallocated page of a
        // mapping needs a block; the PMem tier's writable mapping has its
        // blocks reserved, see `crate::io::reserve`); its holes read zeros.
        let map = if journal_file.metadata().map(|m| m.len()).unwrap_or(0) == 0 {
            None
        } else {
            // SAFETY: the mapping is read only and private to this call, and
            // nothing writes or truncates the journal while it lives: this
            // process holds the store's lock, and the journal is written
            // only after recovery, through `self`, once `map` is dropped.
            Some(
                unsafe { memmap2::Mmap::map(&journal_file) }
                    .map_err(|e| Error::io(&journal_path, "mmap", e))?,
            )
        };
        let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
        let mut rec = Recovery {
            generation: sb.generation,
            ..Recovery::default()
        };
        let (batches, tail) = journal::scan(bytes).map_err(|source| Error::Format {
            path: journal_path.clone(),
            source,
        })?;
        rec.torn_tail = matches!(tail, journal::JournalTail::Torn { .. });
        let mut buf = AlignedBuf::new(BLOCK_SIZE);
        for b in &batches {
            let h = &b.header;
            if h.epoch <= sb.committed_epoch {
                continue; // committed: the journal was not yet reset
            }
            if h.epoch >= sb.next_epoch {
                return Err(Error::Format {
                    path: journal_path.clone(),
                    source: FormatError::InvalidField {
                        field: "epoch",
                        offset: b.offset + journal::jh::EPOCH as u64,
                        value: format!(
                            "{}, never handed out (the superblock's next epoch is {})",
                            h.epoch, sb.next_epoch
                        ),
                    },
                });
            }
            rec.rolled_back_epoch = h.epoch;
            let mut img = b.offset + BLOCK_SIZE as u64;
            for (e, &ok) in h.entries.iter().zip(&b.image_ok) {
                let len = e.nblocks as usize * BLOCK_SIZE;
                let img_len = if e.hole { 0 } else { len };
                let at = e.first_block.saturating_mul(BLOCK_SIZE as u64);
                if at.saturating_add(len as u64) > sb.data_blocks * BLOCK_SIZE as u64 {
                    return Err(Error::Format {
                        path: journal_path.clone(),
                        source: FormatError::InvalidField {
                            field: "first_block",
                            offset: b.offset,
                            value: format!("{} is past the data file", e.first_block),
                        },
                    });
                }
                buf.ensure(len);
                if e.hole {
                    // Never written before the epoch: undone by zeros,
                    // which read as a hole again.
                    buf.as_mut_slice()[..len].fill(0);
                    data.write_extents(&[at], len, &buf)
                        .map_err(|f| f.into_error(data_path))?;
                    rec.groups_restored += 1;
                } else if ok {
                    buf.as_mut_slice()[..len]
                        .copy_from_slice(&bytes[img as usize..img as usize + len]);
                    data.write_extents(&[at], len, &buf)
                        .map_err(|f| f.into_error(data_path))?;
                    rec.groups_restored += 1;
                } else {
                    // The last batch, torn: its in-place writes cannot have
                    // begun (they wait for the journal's fsync), unless the
                    // image decayed after the fact. The group's epoch tells.
                    buf.poison(BLOCK_SIZE);
                    data.read_extents(&[at], BLOCK_SIZE, &mut buf)
                        .map_err(|f| f.into_error(data_path))?;
                    let blk = &buf.as_slice()[..BLOCK_SIZE];
                    if check_block(blk, e.first_block) == Ok(BlockState::Sealed)
                        && block_epoch(blk) == h.epoch
                    {
                        return Err(Error::Format {
                            path: journal_path.clone(),
                            source: FormatError::ChecksumMismatch {
                                offset: img,
                                stored: e.image_crc,
                                computed: crc32c::crc32c(&bytes[img as usize..img as usize + len]),
                            },
                        });
                    }
                }
                img += img_len as u64;
            }
        }
        if rec.groups_restored > 0 {
            data.sync().map_err(|f| f.into_error(data_path))?;
        }
        drop(map);
        let mut unchecked = written::Unchecked::load(dir, &sb)?;
        // Committed in this boot: nothing since could have lost an
        // acknowledged write (see `boot.rs`).
        if unchecked.is_some() && super::boot::same_boot(dir, sb.generation) {
            rec.written_trusted = unchecked.take().map_or(0, |u| u.left());
        }
        rec.written_checked = unchecked.as_ref().map_or(0, |u| u.left());
        // Every epoch between the committed one and the next is dead: it
        // was handed out and never committed. Recovery has undone what the
        // journal holds of them; whatever it missed (a lost or damaged
        // record) still carries its dead epoch, and stays unreadable even
        // after later checkpoints commit higher epochs.
        let mut sb = sb;
        if !sb.add_dead(sb.committed_epoch + 1, sb.next_epoch - 1) {
            let (dead, read, found) = scrub(data, data_path, &sb)?;
            rec.scrubbed = Some((read, found));
            sb.dead_epochs = dead;
        }
        rec.dead_epochs = sb.dead_epochs.clone();
        let counters = read_counters(&*meta, &meta_path, &sb)?;
        let d = Durable {
            journal,
            journal_file,
            journal_path,
            meta,
            meta_path,
            floor: sb.committed_epoch,
            dead: sb.dead_epochs.clone(),
            wrote: false.into(),
            counters,
            start: sb.next_epoch,
            current: sb.next_epoch.into(),
            state: Mutex::new(State {
                epoch: sb.next_epoch,
                journaled: Default::default(),
                len: 0,
                batch: 0,
                sb: sb.clone(),
            }),
            poisoned: Mutex::new(None),
            unchecked,
        };
        // Hand out this session's epoch before writing with it, then drop
        // the undone journal.
        {
            let mut st = d.state.lock();
            let next = Superblock {
                version: embtier_format::FormatVersion::CURRENT,
                seq: sb.seq + 1,
                next_epoch: sb.next_epoch + 1,
                ..sb
            };
            d.write_superblock(&next)?;
            st.sb = next;
            d.reset_journal()?;
        }
        Ok((d, rec))
    }
}

/// The call counters committed by the checkpoint `sb` names: zeros before
/// the first counted commit (or in a store of version 3 and before).
fn read_counters(meta: &dyn IoEngine, meta_path: &Path, sb: &Superblock) -> Result<Vec<u64>> {
    let n = sb.table_count as usize;
    if sb.counters_generation == 0 {
        return Ok(vec![0; n]);
    }
    let len = CounterSlot::slot_len(n) as usize;
    let at = CounterSlot::offset(sb, sb.counters_generation % 2);
    let mut buf = AlignedBuf::new(len);
    buf.poison(len);
    meta.read_extents(&[at], len, &mut buf)
        .map_err(|f| f.into_error(meta_path))?;
    CounterSlot::decode_at(&buf.as_slice()[..len], at, n, sb.counters_generation)
        .map(|s| s.counters)
        .map_err(|source| Error::Format {
            path: meta_path.into(),
            source,
        })
}

/// Read every sealed block of the data file (tables and committed row
/// log; holes are skipped) and find those of dead epochs. Run at open when
/// the dead epoch list no longer fits the superblock: the dead epochs that
/// no block carries any more are forgotten. Returns the new list (the
/// epochs of dead blocks found, each its own range), the blocks read and
/// the dead blocks found. More dead epochs with blocks than a superblock
/// holds is an error naming the first such block.
fn scrub(data: &dyn IoEngine, data_path: &Path, sb: &Superblock) -> Result<(DeadRanges, u64, u64)> {
    const CHUNK: u64 = 256; // blocks a read
    let end = sb.data_blocks + sb.rowlog_extent();
    let segments = data_segments(data_path, end)?;
    let mut buf = AlignedBuf::new(CHUNK as usize * BLOCK_SIZE);
    let (mut read, mut found) = (0u64, 0u64);
    let mut epochs: Vec<(u64, u64)> = Vec::new(); // (epoch, first block seen)
    for (lo, hi) in segments {
        let mut b = lo;
        while b < hi {
            let n = (hi - b).min(CHUNK);
            let len = n as usize * BLOCK_SIZE;
            buf.poison(len);
            data.read_extents(&[b * BLOCK_SIZE as u64], len, &mut buf)
                .map_err(|f| f.into_error(data_path))?;
            for k in 0..n {
                let blk = &buf.as_slice()[k as usize * BLOCK_SIZE..(k as usize + 1) * BLOCK_SIZE];
                read += 1;
                // Damaged blocks are reported when read; only a sealed
                // block's epoch is evidence here.
                if check_block(blk, b + k) != Ok(BlockState::Sealed) {
                    continue;
                }
                let e = block_epoch(blk);
                if sb.is_dead(e) {
                    found += 1;
                    if !epochs.iter().any(|&(x, _)| x == e) {
                        epochs.push((e, b + k));
                    }
                }
            }
            b += n;
        }
    }
    epochs.sort_unstable();
    if epochs.len() > MAX_DEAD_RANGES {
        let (e, blk) = epochs[0];
        return Err(Error::Format {
            path: data_path.into(),
            source: FormatError::InvalidField {
                field: "epoch",
                offset: blk * BLOCK_SIZE as u64 + TRAILER_EPOCH as u64,
                value: format!(
                    "{e}: a dead epoch, one of {} with blocks recovery could not undo \
                     (more than a superblock can list)",
                    epochs.len()
                ),
            },
        });
    }
    Ok((epochs.iter().map(|&(e, _)| (e, e)).collect(), read, found))
}

/// The ranges `[lo, hi)` of blocks below `end` that hold data (holes
/// skipped with `SEEK_DATA`/`SEEK_HOLE`; the whole range where the file
/// system cannot say).
fn data_segments(path: &Path, end: u64) -> Result<Vec<(u64, u64)>> {
    use std::os::fd::AsRawFd;
    let bs = BLOCK_SIZE as u64;
    let f = File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut at = 0u64;
    let limit = end * bs;
    while at < limit {
        // SAFETY: lseek on a descriptor this function owns; no memory is
        // passed to the kernel.
        let d = unsafe { libc::lseek(fd, at as libc::off_t, libc::SEEK_DATA) };
        if d < 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENXIO) => Ok(out), // no data past `at`
                Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => {
                    out.push((at / bs, end));
                    Ok(out)
                }
                _ => Err(Error::io(path, "lseek", err)),
            };
        }
        // SAFETY: as above.
        let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
        let h = if h < 0 { limit as i64 } else { h };
        let (lo, hi) = (d as u64 / bs, (h as u64).div_ceil(bs).min(end));
        if lo >= end {
            break;
        }
        out.push((lo, hi));
        at = hi * bs;
    }
    Ok(out)
}
