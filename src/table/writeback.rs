//! Write-back of dirty rows and the whole row log: appends, merges, the
//! restore of logged rows at open, in-place group writes and flushes.

use super::*;
use crate::io::pace::Pacer;
use std::sync::Arc;

/// What a write home carries, for the row log's map.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HomeWrite {
    /// Newer bytes than any logged copy: the rows' entries go, and a log
    /// that held one is stale.
    Newer,
    /// The rows' log copies (a merge): their entries become [`MERGED`].
    LogCopy,
}

/// Rows a flush takes from the tiers before it writes them back: the
/// pending rows, and the write-back's copy of them, stay within about
/// twice this (plus the write-back batch) beyond the cache.
const FLUSH_CHUNK_BYTES: usize = 8 << 20;

/// Pending-map slots a shard keeps whatever its fill (see
/// [`Table::write_back`]).
pub(super) const PENDING_SLACK: usize = 256;

/// Fewest groups a write makes dense (see [`Table::write_rows`]): below
/// it, the random operations are few anyway.
const DENSE_MIN_GROUPS: usize = 64;

/// Ids `0..rows` cut into equal ranges of whole groups of `rows_per_group`
/// rows, as many as `live` rows need for about `list_rows` each (at least
/// one range, at most one a group), in order, covering every id once.
fn id_ranges(
    rows: u64,
    rows_per_group: u64,
    live: u64,
    list_rows: u64,
) -> Vec<std::ops::Range<u64>> {
    let rpg = rows_per_group.max(1);
    let n = live.div_ceil(list_rows.max(1)).clamp(1, rows.max(1));
    let step = rows.div_ceil(n).next_multiple_of(rpg).max(rpg);
    (0..rows.div_ceil(step))
        .map(|k| k * step..((k + 1) * step).min(rows))
        .collect()
}

impl Table {
    /// Write every pending row of a cached table to SSD.
    pub(crate) fn write_back(&self, ssd: &Ssd) -> Result<()> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Ok(());
        };
        let mut buf = self.wb_lock.lock();
        // id, gen, the row's bytes (shared with the pending map: no copy),
        // whether the log holds a copy of it. Sized from the pending bytes
        // (updates may add a few meanwhile), not a doubling vector's.
        let pending = self.pending_bytes.load(Ordering::Relaxed).max(0) as usize;
        let mut snap: Vec<(u64, u64, Arc<[u8]>, bool)> =
            Vec::with_capacity(pending / self.row_bytes);
        for sh in shards {
            let sh = sh.lock();
            for (&id, p) in &sh.pending {
                snap.push((id, p.gen, p.bytes.clone(), sh.in_log(id)));
            }
        }
        if snap.is_empty() {
            return Ok(());
        }
        let layout = self.entry.layout;
        snap.sort_unstable_by_key(|s| layout.locate(s.0));
        let rb = self.row_bytes;
        let rows: Vec<(u64, &[u8])> = snap.iter().map(|(id, _, b, _)| (*id, &b[..])).collect();
        // Rows of partly covered groups are appended to the row log while
        // it has room, in chunks of at most WB_CHUNK_BYTES of log blocks.
        // Whole groups (a bulk load, a dense table) go home: their write
        // needs no read, and leaves nothing for a merge to do; unless the
        // log holds a copy of one of their rows, which a write home would
        // make stale, and so force the next checkpoint to merge.
        let mut rows = rows;
        if self.log_rows > 0 {
            let e = &self.entry;
            let (mut home, mut partial): (Vec<RowRef<'_>>, Vec<RowRef<'_>>) = (vec![], vec![]);
            let mut at = 0;
            for run in rows.chunk_by(|a, b| layout.locate(a.0).group == layout.locate(b.0).group) {
                let g = layout.locate(run[0].0).group;
                let in_log = snap[at..at + run.len()].iter().any(|s| s.3);
                at += run.len();
                let whole = run.len() == layout.rows_in_group(g, e.rows) && !in_log;
                if whole { &mut home } else { &mut partial }.extend_from_slice(run);
            }
            let per_chunk = (WB_CHUNK_BYTES / BLOCK_SIZE) * self.log_rows;
            let mut start = 0;
            while start < partial.len() {
                let end = (start + per_chunk).min(partial.len());
                match self.append_log(ssd, shards, &partial[start..end], &mut buf)? {
                    0 => break, // no room: the rest goes home
                    n => start += n,
                }
            }
            home.extend_from_slice(&partial[start..]);
            home.sort_unstable_by_key(|r| layout.locate(r.0));
            rows = home;
        }
        let mut start = 0;
        // Written home in chunks of at most WB_CHUNK_BYTES of block groups:
        // scattered rows cost a whole group each, so a 64 MiB flush of
        // 256-byte rows would otherwise stage a 1 GiB buffer (and keep it in
        // `wb_lock`).
        let gb = self.entry.layout.group_bytes();
        let max_groups = (WB_CHUNK_BYTES / gb).max(1);
        while start < rows.len() {
            let mut end = start;
            let mut groups = 0;
            let mut last = u64::MAX;
            while end < rows.len() {
                let g = layout.locate(rows[end].0).group;
                if g != last {
                    if groups == max_groups {
                        break;
                    }
                    groups += 1;
                    last = g;
                }
                end += 1;
            }
            self.write_rows(ssd, &rows[start..end], &mut buf)?;
            start = end;
        }
        let mut freed = 0;
        for &(id, gen, _, _) in &snap {
            let mut sh = shards[self.shard_of(id, shards.len())].lock();
            if sh.pending.get(&id).is_some_and(|p| p.gen == gen) {
                sh.pending.remove(&id);
                sh.wb_seq += 1;
                freed += rb;
            }
        }
        // A map never shrinks on removal: one that a flush grew gives its
        // room back, so that memory beyond the cache stays bounded.
        for sh in shards {
            let mut sh = sh.lock();
            if sh.pending.capacity() > 4 * sh.pending.len() + PENDING_SLACK {
                let keep = 2 * sh.pending.len();
                sh.pending.shrink_to(keep);
            }
        }
        self.pending_bytes
            .fetch_sub(freed as i64, Ordering::Relaxed);
        Ok(())
    }

    /// Append `rows` (sorted by place (`RowLayout::locate`), unique), or as many of the first of
    /// them as the log has room for, to the row log, packed `log_rows` to a
    /// block, and point the shards' log maps at them. Returns the rows
    /// appended (0: the log is full or closed, nothing was written).
    /// A failed append closes the log until the next merge, so that its
    /// blocks are never committed; the rows stay pending. Caller holds
    /// `wb_lock` (and passes its buffer) and the store's gate.
    pub(super) fn append_log(
        &self,
        ssd: &Ssd,
        shards: &[Mutex<Shard>],
        rows: &[RowRef<'_>],
        buf: &mut AlignedBuf,
    ) -> Result<usize> {
        ssd.durable().check_writable()?;
        let rb = self.row_bytes;
        let Some((first, n)) = ssd.log().reserve(rows.len().div_ceil(self.log_rows) as u64) else {
            return Ok(0);
        };
        let n = n as usize;
        let rows = &rows[..rows.len().min(n * self.log_rows)];
        buf.ensure(n * BLOCK_SIZE);
        let epoch = ssd.durable().seal_epoch();
        let index = ssd.log().index();
        // The blocks' slots in the row-log index, written once the blocks
        // are (a slot names what its block holds, never what it may).
        let slot_bytes = index.as_ref().map_or(0, |ix| ix.slot_bytes());
        let mut slots = vec![0u8; n * slot_bytes];
        let mut ids = Vec::with_capacity(self.log_rows);
        let mut bytes = Vec::with_capacity(self.log_rows * rb);
        for (bi, chunk) in rows.chunks(self.log_rows).enumerate() {
            ids.clear();
            bytes.clear();
            for (id, data) in chunk {
                ids.push(*id);
                bytes.extend_from_slice(data);
            }
            let blk = &mut buf.as_mut_slice()[bi * BLOCK_SIZE..(bi + 1) * BLOCK_SIZE];
            embtier_format::rowlog::encode(blk, self.index, rb, &ids, &bytes);
            embtier_format::seal_block(blk, ssd.log_block(first + bi as u32), epoch);
            if slot_bytes > 0 {
                let slot = &mut slots[bi * slot_bytes..(bi + 1) * slot_bytes];
                embtier_format::logindex::encode_slot(
                    slot,
                    first + bi as u32,
                    epoch,
                    self.index,
                    &ids,
                );
            }
        }
        let at = ssd.log_block(first) * BLOCK_SIZE as u64;
        if let Err(f) = ssd.engine().write_extents(&[at], n * BLOCK_SIZE, buf) {
            ssd.log().close();
            return Err(ssd.err(f));
        }
        if let Some(ix) = index.as_ref() {
            ix.write_slots(first as u64, &slots);
        }
        drop(index);
        for (bi, chunk) in rows.chunks(self.log_rows).enumerate() {
            for (id, _) in chunk {
                let mut sh = shards[self.shard_of(*id, shards.len())].lock();
                sh.log_at(*id, first + bi as u32);
            }
        }
        let c = &self.counters;
        c.ssd_write_ops.fetch_add(1, Ordering::Relaxed);
        c.ssd_bytes_written
            .fetch_add((n * BLOCK_SIZE) as u64, Ordering::Relaxed);
        c.ssd_rows_written
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        c.log_rows_written
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        c.log_blocks_written.fetch_add(n as u64, Ordering::Relaxed);
        Ok(rows.len())
    }

    /// The entry `(id, block)` of every logged row whose id is in `ids` and
    /// whose block is in `span`, in place order (not the [`MERGED`] ones:
    /// their homes are current).
    pub(crate) fn logged_in_place_order(
        &self,
        ids: std::ops::Range<u64>,
        span: LogSpan,
    ) -> Vec<(u64, u32)> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Vec::new();
        };
        let mut logged: Vec<(u64, u32)> = Vec::new();
        for sh in shards {
            let sh = sh.lock();
            logged.extend(
                sh.logged
                    .iter()
                    .filter(|&(id, b)| b != MERGED && ids.contains(&id) && span.contains(b)),
            );
        }
        let layout = self.entry.layout;
        logged.sort_unstable_by_key(|&(id, _)| layout.locate(id));
        logged
    }

    /// The table's ids cut into ranges, in place order, that a merge lists
    /// one at a time ([`Table::logged_in_place_order`]): as many equal
    /// ranges of whole groups as the live logged rows need for `list_rows`
    /// each if they were spread evenly over the ids (16 bytes a row), so
    /// that the list does not grow with the log; a range holding more of
    /// them lists more. Each range costs one scan of the log maps.
    pub(crate) fn merge_ranges(&self, list_rows: usize) -> Vec<std::ops::Range<u64>> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Vec::new();
        };
        let live: usize = shards.iter().map(|sh| sh.lock().live_logged()).sum();
        id_ranges(
            self.entry.rows,
            self.entry.layout.rows_per_group as u64,
            live as u64,
            list_rows as u64,
        )
    }

    /// The length of the merge chunk starting at `rest[0]` (`rest` in
    /// place order): at most WB_CHUNK_BYTES of home groups spanned and of
    /// log blocks read. A dense chunk is read and written as one run of
    /// groups (`write_rows`).
    pub(crate) fn merge_chunk_len(&self, rest: &[(u64, u32)]) -> usize {
        self.merge_chunk_len_reading(rest, true)
    }

    /// [`Table::merge_chunk_len`], bounding the log blocks read only if
    /// `reads` (not when the rows' bytes are at hand).
    pub(crate) fn merge_chunk_len_reading(&self, rest: &[(u64, u32)], reads: bool) -> usize {
        let layout = self.entry.layout;
        let max_groups = (WB_CHUNK_BYTES / layout.group_bytes()).max(1) as u64;
        let max_blocks = if reads {
            WB_CHUNK_BYTES / BLOCK_SIZE
        } else {
            usize::MAX
        };
        let Some(&(first, _)) = rest.first() else {
            return 0;
        };
        let g0 = layout.locate(first).group;
        let mut seen: rustc_hash::FxHashSet<u32> = Default::default();
        let mut end = 0;
        while end < rest.len()
            && layout.locate(rest[end].0).group < g0 + max_groups
            && (seen.len() < max_blocks || seen.contains(&rest[end].1))
        {
            seen.insert(rest[end].1);
            end += 1;
        }
        end
    }

    /// Write every logged row to its home group (the newest written copy of
    /// each, which is the log's), leaving only [`MERGED`] entries in the
    /// log maps (the caller empties them with [`Table::clear_log_map`] once
    /// the emptied log is committed). The caller holds the store's gate
    /// exclusively and has flushed the dirty rows home, so no newer copy
    /// exists anywhere. Returns the rows merged.
    pub(crate) fn merge_log(&self, ssd: &Ssd) -> Result<u64> {
        let mut merged = 0;
        for ids in self.merge_ranges(ssd.log().merge_list_rows) {
            let logged = self.logged_in_place_order(ids, LogSpan::all());
            let mut rest = &logged[..];
            while !rest.is_empty() {
                let n = self.merge_chunk_len(rest);
                merged += self.merge_chunk(ssd, &rest[..n])?;
                rest = &rest[n..];
            }
        }
        Ok(merged)
    }

    /// The bytes of the rows of `logged` (entries `(id, block)` of blocks
    /// in `span`), in its order, read by walking the span's blocks in
    /// order, 4 MiB at a time (windows holding none of them are skipped):
    /// a background pass whose rows are dense in the span reads it at
    /// sequential speed instead of one random block per row. Each window is
    /// read under the store's shared gate; `None` if the log's start moved
    /// (`moved()`) meanwhile, since the blocks may then hold other rows.
    /// `rest()` runs after each window.
    pub(crate) fn read_logged_in_span(
        &self,
        ssd: &Ssd,
        logged: &[(u64, u32)],
        span: LogSpan,
        moved: &dyn Fn() -> bool,
        rest: &mut dyn FnMut(std::time::Duration),
    ) -> Result<Option<Vec<u8>>> {
        let rb = self.row_bytes;
        let mut out = vec![0u8; logged.len() * rb];
        // Positions in `logged`, by block.
        let mut by_block: Vec<u32> = (0..logged.len() as u32).collect();
        by_block.sort_unstable_by_key(|&i| logged[i as usize].1);
        let mut buf = AlignedBuf::new(BLOCK_SIZE);
        for (at, n) in span.windows(LOG_WINDOW_BLOCKS) {
            {
                let lo = by_block.partition_point(|&i| (logged[i as usize].1 as u64) < at);
                let hi = by_block.partition_point(|&i| (logged[i as usize].1 as u64) < at + n);
                if lo == hi {
                    continue;
                }
                let began = std::time::Instant::now();
                if !self.read_log_window(ssd, at, n, &mut buf, moved)? {
                    return Ok(None);
                }
                let mut k = lo;
                while k < hi {
                    let b = logged[by_block[k] as usize].1;
                    let i0 = ((b as u64 - at) as usize) * BLOCK_SIZE;
                    let raw = &buf.as_slice()[i0..i0 + BLOCK_SIZE];
                    let mut end = k;
                    while end < hi && logged[by_block[end] as usize].1 == b {
                        end += 1;
                    }
                    let first_id = logged[by_block[k] as usize].0;
                    let corrupt = |id, source| Error::Corrupt {
                        path: ssd.path().to_path_buf(),
                        table: self.name.clone(),
                        id,
                        source,
                    };
                    let lb = self
                        .checked_log_block(ssd, b, raw)
                        .map_err(|e| corrupt(first_id, e))?;
                    for &i in &by_block[k..end] {
                        let id = logged[i as usize].0;
                        let row = self
                            .logged_row(ssd, Loc::Log(b), &lb, id)
                            .map_err(|e| corrupt(id, e))?;
                        out[i as usize * rb..(i as usize + 1) * rb].copy_from_slice(row);
                    }
                    k = end;
                }
                rest(began.elapsed());
            }
        }
        Ok(Some(out))
    }

    /// Read ring blocks `at..at + n` of the log into `buf` under the read
    /// gate, counted as one read: `false`, with nothing read, when
    /// `moved` says the pass must stop.
    pub(super) fn read_log_window(
        &self,
        ssd: &Ssd,
        at: u64,
        n: u64,
        buf: &mut AlignedBuf,
        moved: &dyn Fn() -> bool,
    ) -> Result<bool> {
        {
            let _gate = ssd.read_gate();
            if moved() {
                return Ok(false);
            }
            let off = ssd.log_block(at as u32) * BLOCK_SIZE as u64;
            ssd.read_extents_each(&[off], n as usize * BLOCK_SIZE, buf, &mut |_, _| {})?;
        }
        let c = &self.counters;
        c.ssd_read_ops.fetch_add(1, Ordering::Relaxed);
        c.ssd_bytes_read
            .fetch_add(n * BLOCK_SIZE as u64, Ordering::Relaxed);
        Ok(true)
    }

    /// Write the rows of `chunk` (entries from
    /// [`Table::logged_in_place_order`], one merge chunk) home from
    /// `bytes` (theirs, in order, read from the blocks the entries name),
    /// each if that is still its entry, as [`Table::merge_chunk`] does.
    /// Returns the rows written home.
    pub(crate) fn merge_chunk_from(
        &self,
        ssd: &Ssd,
        chunk: &[(u64, u32)],
        bytes: &[u8],
    ) -> Result<u64> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Ok(0);
        };
        let rb = self.row_bytes;
        let mut wb = self.wb_lock.lock();
        let rows: Vec<RowRef<'_>> = chunk
            .iter()
            .enumerate()
            .filter(|&(_, &(id, b))| {
                shards[self.shard_of(id, shards.len())].lock().logged_at(id) == b
            })
            .map(|(i, &(id, _))| (id, &bytes[i * rb..(i + 1) * rb]))
            .collect();
        if rows.is_empty() {
            return Ok(0);
        }
        self.write_log_copies_home(ssd, &rows, &mut wb)
    }

    /// Write `rows`, the log's copies of logged rows, home: each row's
    /// entry becomes [`MERGED`], and the log is not stale (its copies equal
    /// home's). Caller holds `wb_lock` (and passes its buffer). Returns the
    /// rows written.
    fn write_log_copies_home(
        &self,
        ssd: &Ssd,
        rows: &[RowRef<'_>],
        wb: &mut AlignedBuf,
    ) -> Result<u64> {
        self.write_rows_as(ssd, rows, wb, true, HomeWrite::LogCopy)?;
        self.counters
            .log_rows_merged
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        Ok(rows.len() as u64)
    }

    /// Write the logged rows of `chunk` (entries from
    /// [`Table::logged_in_place_order`], one merge chunk) home, each from
    /// the log block its entry names, if that is still its entry: a row
    /// since written home, or logged again, is skipped (its newer copy
    /// stays where it is). Runs beside lookups and updates (a background
    /// merge) as well as inside a checkpoint: it holds `wb_lock`, so no
    /// append or home write of the table moves an entry meanwhile, and
    /// writing the log's copy home changes no row's value. Returns the rows
    /// written home.
    pub(crate) fn merge_chunk(&self, ssd: &Ssd, chunk: &[(u64, u32)]) -> Result<u64> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Ok(0);
        };
        let rb = self.row_bytes;
        let mut wb = self.wb_lock.lock();
        let chunk: Vec<(u64, u32)> = chunk
            .iter()
            .copied()
            .filter(|&(id, b)| shards[self.shard_of(id, shards.len())].lock().logged_at(id) == b)
            .collect();
        if chunk.is_empty() {
            return Ok(0);
        }
        let mut blocks: Vec<u32> = chunk.iter().map(|&(_, b)| b).collect();
        blocks.sort_unstable();
        blocks.dedup();
        let offsets: Vec<u64> = blocks
            .iter()
            .map(|&b| ssd.loc_offset(&self.entry, Loc::Log(b)))
            .collect();
        // The store's read buffers: a merge reads thousands of chunks.
        let mut lbuf = ssd.take_buf();
        ssd.read_extents_windowed(&offsets, BLOCK_SIZE, &mut lbuf, &mut |_, _| {})?;
        self.counters
            .ssd_read_ops
            .fetch_add(blocks.len() as u64, Ordering::Relaxed);
        self.counters
            .ssd_bytes_read
            .fetch_add((blocks.len() * BLOCK_SIZE) as u64, Ordering::Relaxed);
        let mut bytes = vec![0u8; chunk.len() * rb];
        for (i, &(id, b)) in chunk.iter().enumerate() {
            let k = blocks.binary_search(&b).expect("read above");
            let raw = &lbuf.as_slice()[k * BLOCK_SIZE..(k + 1) * BLOCK_SIZE];
            let corrupt = |source| Error::Corrupt {
                path: ssd.path().to_path_buf(),
                table: self.name.clone(),
                id,
                source,
            };
            let lb = self.checked_log_block(ssd, b, raw).map_err(corrupt)?;
            let row = self
                .logged_row(ssd, Loc::Log(b), &lb, id)
                .map_err(corrupt)?;
            bytes[i * rb..(i + 1) * rb].copy_from_slice(row);
        }
        ssd.put_buf(lbuf);
        let rows: Vec<RowRef<'_>> = chunk
            .iter()
            .enumerate()
            .map(|(i, &(id, _))| (id, &bytes[i * rb..(i + 1) * rb]))
            .collect();
        self.write_log_copies_home(ssd, &rows, &mut wb)
    }

    /// The ids of `ids` (a hot set's, for the row log's restore) as a
    /// set of this table's rows.
    pub(crate) fn hot_ids(&self, ids: &[u64]) -> HotIds {
        HotIds::new(self.entry.rows, ids)
    }

    /// Recovery: the rows `ids` of row-log block `b` (`rows`: their bytes,
    /// in order) have their newest committed copy there, as far as the log
    /// has been read (it is read oldest block first). A cached table maps
    /// each row there, and puts those in `cache` (the hot set's) in memory
    /// too ([`Shard::restore_row`]), since the open has just read their
    /// bytes, and records in `cache` which it put; a pinned table (one
    /// whose placement changed since it was logged) takes the bytes and
    /// marks them dirty. Returns whether the log must be merged at the
    /// next checkpoint (the pinned case), and the rows put in memory that
    /// were not there.
    pub(crate) fn restore_logged_block(
        &self,
        b: u32,
        ids: &[u64],
        rows: &[u8],
        cache: &mut HotIds,
    ) -> (bool, u64) {
        let rb = self.row_bytes;
        match &self.kind {
            TableKind::Cached { shards, .. } => {
                let mut ctx = Ctx::new();
                let mut put = 0;
                for (k, &id) in ids.iter().enumerate() {
                    let mut sh = shards[self.shard_of(id, shards.len())].lock();
                    sh.log_at(id, b);
                    if cache.contains(id) {
                        // A row in memory that this restore did not put
                        // there came from the hot rows: the committed
                        // value already. One it put is an older copy.
                        let ours = cache.was_put(id);
                        let src = &rows[k * rb..(k + 1) * rb];
                        if sh.restore_row(id, src, ours, &mut ctx) && !ours {
                            cache.set_put(id);
                            put += 1;
                        }
                    }
                }
                if put > 0 {
                    self.close_fill();
                    ctx.c.warmed = put;
                    self.publish_pending(&mut ctx);
                    ctx.c.publish(&self.counters);
                }
                (false, put)
            }
            TableKind::Pinned { chunks, .. } => {
                for (k, &id) in ids.iter().enumerate() {
                    let p = self.pinned_place(id);
                    let mut ch = chunks[p.chunk].lock();
                    ch.row_mut(p, rb)
                        .copy_from_slice(&rows[k * rb..(k + 1) * rb]);
                    ch.mark(p.local_group);
                }
                (true, 0)
            }
        }
    }

    /// Row-log block `b` holds `ids` of this cached table, as the row-log
    /// index says (the open, in log order, without reading the block):
    /// point the log map at it for the ids whose shard is `part` of every
    /// `parts` (the open splits the map's work by shard over threads).
    pub(crate) fn map_logged_block(&self, b: u32, ids: &[u64], part: usize, parts: usize) {
        if let TableKind::Cached { shards, .. } = &self.kind {
            for &id in ids {
                let s = self.shard_of(id, shards.len());
                if s % parts == part {
                    shards[s].lock().log_at(id, b);
                }
            }
        }
    }

    /// The warm restart's order: keep in `ids` (unique, in range) the rows
    /// no tier holds whose newest copy is home, and return those no tier
    /// holds whose newest copy is in the row log, by log block, to be read
    /// first: a batch of them falls in few windows of the log, read
    /// sequentially where dense. Each entry packs its block (high 32 bits)
    /// and id (low 32) in one word, sorted (8 bytes a logged row; a table
    /// of 2^32 rows or more keeps them all in `ids`, in id order). A row that moves
    /// meanwhile is read from where it is then: the miss path looks each
    /// up again. Rows held now are not read later even if evicted
    /// meanwhile, as before the split.
    pub(crate) fn split_for_warm(&self, ids: &mut Vec<u64>) -> Vec<u64> {
        let TableKind::Cached { shards, .. } = &self.kind else {
            return Vec::new();
        };
        let wide = self.entry.rows > u32::MAX as u64;
        let mut logged: Vec<u64> = Vec::new();
        ids.retain(|&id| {
            let sh = shards[self.shard_of(id, shards.len())].lock();
            if sh.holds(id) {
                return false;
            }
            match sh.logged_at(id) {
                NOT_LOGGED => true,
                _ if wide => true,
                b => {
                    logged.push((b as u64) << 32 | id);
                    false
                }
            }
        });
        logged.sort_unstable();
        logged
    }

    /// Rows of this table a row-log block holds (0: the table does not
    /// use the log).
    pub(crate) fn log_rows(&self) -> usize {
        self.log_rows
    }

    /// Rows whose newest written copy is in the row log only (not the
    /// ones the background merge has written home).
    pub(crate) fn logged_rows(&self) -> u64 {
        match &self.kind {
            TableKind::Cached { shards, .. } => {
                shards.iter().map(|s| s.lock().live_logged() as u64).sum()
            }
            TableKind::Pinned { .. } => 0,
        }
    }

    /// Bytes of rows the first tier holds at capacity (0 for a pinned
    /// table).
    pub(crate) fn first_tier_bytes(&self) -> u64 {
        match &self.kind {
            TableKind::Cached { tier_rows, .. } => {
                tier_rows.first().copied().unwrap_or(0) * self.row_bytes as u64
            }
            TableKind::Pinned { .. } => 0,
        }
    }

    /// Heap bytes of the shards' row-log maps.
    pub(crate) fn log_map_bytes(&self) -> u64 {
        match &self.kind {
            TableKind::Cached { shards, .. } => {
                shards.iter().map(|s| s.lock().log_map_bytes() as u64).sum()
            }
            TableKind::Pinned { .. } => 0,
        }
    }

    /// Debug builds: check that no live row-log map entry names one of the
    /// `freed` runs `(first, blocks)` of ring blocks (the background pass
    /// wrote every such row home before the checkpoint freed them).
    #[cfg(debug_assertions)]
    pub(crate) fn debug_check_freed(&self, freed: &[(u64, u64)]) {
        if let TableKind::Cached { shards, .. } = &self.kind {
            for sh in shards {
                for (id, b) in sh.lock().logged.iter() {
                    let hit = freed.iter().any(|&(f, n)| (f..f + n).contains(&(b as u64)));
                    assert!(
                        !hit,
                        "{}: row {id} still logged in freed block {b}",
                        self.name
                    );
                }
            }
        }
    }

    /// Drop the [`MERGED`] row-log map entries: the commit that moved the
    /// log's start past their copies is durable.
    pub(crate) fn drop_merged_log_entries(&self) {
        if let TableKind::Cached { shards, .. } = &self.kind {
            for sh in shards {
                sh.lock().logged.drop_merged();
            }
        }
    }

    /// Forget every row-log map entry: the commit that emptied the log is
    /// durable, and every row's home holds its newest written copy.
    pub(crate) fn clear_log_map(&self) {
        if let TableKind::Cached { shards, .. } = &self.kind {
            for sh in shards {
                sh.lock().clear_log();
            }
        }
    }

    /// Read-modify-write the block groups of `rows` (sorted by place (`RowLayout::locate`), unique),
    /// and drop their row-log map entries (their logged copies are older).
    /// Caller holds `wb_lock` (and passes its buffer).
    pub(super) fn write_rows(
        &self,
        ssd: &Ssd,
        rows: &[RowRef<'_>],
        buf: &mut AlignedBuf,
    ) -> Result<()> {
        self.write_rows_as(ssd, rows, buf, true, HomeWrite::Newer)
    }

    /// [`Table::write_rows`]; `may_span`: dense groups may be written with
    /// the untouched groups between them (not when one of those failed its
    /// check: a damaged group nobody writes is reported when read, not
    /// made every write's error); `what`: whether the rows are newer than
    /// their log copies or are those copies.
    fn write_rows_as(
        &self,
        ssd: &Ssd,
        rows: &[RowRef<'_>],
        buf: &mut AlignedBuf,
        may_span: bool,
        what: HomeWrite,
    ) -> Result<()> {
        let e = &self.entry;
        let l = e.layout;
        let gb = l.group_bytes();
        // Groups, partly covered ones (which need a read) first.
        let mut runs: Vec<(u64, &[RowRef<'_>])> = rows
            .chunk_by(|a, b| l.locate(a.0).group == l.locate(b.0).group)
            .map(|r| (l.locate(r[0].0).group, r))
            .collect();
        let rows_in = |g: u64| l.rows_in_group(g, e.rows);
        // Dense: the groups fill most of their span (a merge, a large
        // write-back). Then every group of the span is read, changed and
        // written in place order, the untouched ones with their own
        // bytes: one sequential read, one journal append and one
        // sequential write instead of a random operation per group.
        let span = match (runs.first(), runs.last()) {
            (Some(a), Some(b)) => b.0 - a.0 + 1,
            _ => 0,
        };
        let dense = may_span && runs.len() >= DENSE_MIN_GROUPS && runs.len() as u64 * 4 >= span * 3;
        let nread = if dense {
            let first = runs[0].0;
            let mut all: Vec<(u64, &[RowRef<'_>])> = Vec::with_capacity(span as usize);
            let mut it = runs.into_iter().peekable();
            for g in first..first + span {
                match it.next_if(|r| r.0 == g) {
                    Some(r) => all.push(r),
                    None => all.push((g, &[])),
                }
            }
            runs = all;
            runs.len()
        } else {
            runs.sort_by_key(|(g, r)| (r.len() == rows_in(*g), *g));
            runs.iter().filter(|(g, r)| r.len() < rows_in(*g)).count()
        };
        let groups: Vec<u64> = runs.iter().map(|(g, _)| *g).collect();
        buf.ensure(groups.len() * gb);
        if nread > 0 {
            ssd.read_groups(e, &groups[..nread], buf)?;
            self.counters
                .ssd_read_ops
                .fetch_add(nread as u64, Ordering::Relaxed);
            self.counters
                .ssd_bytes_read
                .fetch_add((nread * gb) as u64, Ordering::Relaxed);
        }
        // Check what was read, and journal it (the old images of groups
        // first overwritten since the last checkpoint) before changing it;
        // `write_groups` journals the groups written whole itself.
        let states = (0..nread)
            .map(|gi| self.checked_group(ssd, groups[gi], &buf.as_slice()[gi * gb..(gi + 1) * gb]))
            .collect::<Vec<Result<_>>>();
        if dense && (0..nread).any(|gi| runs[gi].1.is_empty() && states[gi].is_err()) {
            return self.write_rows_as(ssd, rows, buf, false, what);
        }
        let states = states.into_iter().collect::<Result<Vec<_>>>()?;
        ssd.journal(
            e,
            &groups[..nread],
            Some(&buf.as_slice()[..nread * gb]),
            false,
        )?;
        let mut tmp = vec![0u8; self.row_bytes];
        for (gi, (g, run)) in runs.iter().enumerate() {
            let blocks = &mut buf.as_mut_slice()[gi * gb..(gi + 1) * gb];
            if let Some(&state) = states.get(gi) {
                if state == BlockState::Hole {
                    for id in l.rows_of(*g, e.rows) {
                        row_from_group(e, state, &[], id, &mut tmp);
                        write_group_payload(blocks, l.locate(id).offset, &tmp);
                    }
                }
            } else {
                blocks.fill(0);
            }
            for (id, data) in run.iter() {
                write_group_payload(blocks, l.locate(*id).offset, data);
            }
        }
        self.wb_epoch.fetch_add(1, Ordering::AcqRel);
        let r = ssd.write_groups(e, &groups, &mut *buf);
        self.wb_epoch.fetch_add(1, Ordering::AcqRel);
        r?;
        self.counters
            .wrote_groups(groups.len(), gb, rows.len() as u64);
        // Nothing is logged while the log is empty: skip the shard locks.
        if let (TableKind::Cached { shards, .. }, true) = (&self.kind, ssd.log().len() > 0) {
            let mut stale = false;
            for (id, _) in rows {
                let mut sh = shards[self.shard_of(*id, shards.len())].lock();
                match what {
                    HomeWrite::Newer => stale |= sh.unlog(*id),
                    HomeWrite::LogCopy => sh.mark_merged(*id),
                }
            }
            if stale {
                ssd.log().mark_stale();
            }
        }
        Ok(())
    }

    /// Write every dirty row of the table to SSD (no fsync).
    pub(crate) fn flush(&self, ssd: &Ssd) -> Result<()> {
        match &self.kind {
            TableKind::Cached { shards, .. } => {
                self.flush_shards(ssd, shards, false, &mut Pacer::new(0.0))
            }
            TableKind::Pinned { chunks, .. } => self.flush_pinned(ssd, chunks),
        }
    }

    /// Move the dirty rows (`old_only`: a snapshot's) of each shard in turn
    /// to the pending map, and write back every `FLUSH_CHUNK_BYTES` of rows
    /// taken, which bounds the memory of a flush.
    pub(super) fn flush_shards(
        &self,
        ssd: &Ssd,
        shards: &[Mutex<Shard>],
        old_only: bool,
        pacer: &mut Pacer,
    ) -> Result<()> {
        let mut ctx = Ctx::new();
        for sh in shards {
            sh.lock().take_dirty(old_only, &mut ctx);
            if ctx.new_pending * self.row_bytes > FLUSH_CHUNK_BYTES {
                self.finish_flush(ssd, &mut ctx)?;
                pacer.chunk_done();
            }
        }
        self.finish_flush(ssd, &mut ctx)
    }

    pub(super) fn finish_flush(&self, ssd: &Ssd, ctx: &mut Ctx) -> Result<()> {
        self.publish_pending(ctx);
        ctx.new_pending = 0;
        self.write_back(ssd)
    }

    /// Check group `g`'s blocks as read, naming the table and the group's
    /// first row in the error.
    pub(super) fn checked_group(&self, ssd: &Ssd, g: u64, blocks: &[u8]) -> Result<BlockState> {
        ssd.check_group(&self.entry, g, blocks)
            .map_err(|source| Error::Corrupt {
                path: ssd.path().to_path_buf(),
                table: self.name.clone(),
                id: self.entry.layout.rows_of(g, self.entry.rows).start,
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::id_ranges;
    use crate::table::{WB_CHUNK_BYTES, WB_KEEP_BYTES};
    use crate::{Init, Store, StoreConfig, TableConfig};

    /// A table's write buffer grows for a large write (the log appends and
    /// the merge home of some 5 MiB of rows) and goes back to at most
    /// `WB_KEEP_BYTES` when the checkpoint (or merge) is done, whatever
    /// wrote; the rows read back.
    #[test]
    fn a_large_write_does_not_keep_its_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let (rows, dim) = (40_000u64, 64u32);
        let d = dim as usize;
        let cfg = StoreConfig::builder()
            .table(TableConfig::new("t", rows, dim).init(Init::Zeros))
            .dram_capacity(64 << 10)
            .build();
        let store = Store::create(dir.path().join("s"), cfg).unwrap();
        let ids: Vec<u64> = (0..rows).step_by(2).collect();
        let vals: Vec<f32> = ids.iter().flat_map(|&id| vec![id as f32; d]).collect();
        let t = store.table("t").unwrap();
        let mut written = 0;
        for step in 0..3 {
            store.update("t", &ids, &vals).unwrap();
            match step {
                0 => drop(store.checkpoint().unwrap()),
                _ => drop(store.merge_row_log().unwrap()),
            }
            let held = t.wb_lock.lock().len();
            assert!(held <= WB_KEEP_BYTES, "step {step}: {held} bytes kept");
            written = t
                .counters
                .ssd_bytes_written
                .load(std::sync::atomic::Ordering::Relaxed);
        }
        // The writes were far larger than what is kept.
        assert!(
            written as usize > 2 * WB_CHUNK_BYTES,
            "{written} bytes written"
        );
        let mut out = vec![0f32; 4 * d];
        store.lookup("t", &[0, 2, 39_998, 1], &mut out).unwrap();
        assert_eq!(out[0], 0.0);
        assert_eq!(out[d], 2.0);
        assert_eq!(out[2 * d], 39_998.0);
        assert_eq!(out[3 * d], 0.0);
    }

    /// Ranges cover every id once, in order, end on group boundaries
    /// (except the table's end), and number about `live / list_rows`.
    #[test]
    fn merge_ranges_cover_the_table_in_whole_groups() {
        for (rows, rpg, live, list) in [
            (20_000u64, 16u64, 2_200u64, 300u64),
            (20_001, 16, 2_200, 300),
            (7, 16, 5, 1),
            (1_000_000, 15, 0, 1 << 20),
            (1_000_000, 15, 5_000_000, 1 << 20),
            (100, 1, 1_000, 1),
            (1, 4, 1, 1),
        ] {
            let r = id_ranges(rows, rpg, live, list);
            assert!(!r.is_empty());
            assert_eq!(r[0].start, 0);
            assert_eq!(r.last().unwrap().end, rows);
            for w in r.windows(2) {
                assert_eq!(w[0].end, w[1].start, "{rows} {rpg} {live} {list}");
                assert_eq!(w[0].end % rpg, 0, "{rows} {rpg} {live} {list}: {r:?}");
                assert!(w[0].start < w[0].end);
            }
            let want = live.div_ceil(list).clamp(1, rows.div_ceil(rpg));
            assert!(
                (r.len() as u64) <= want && r.len() as u64 * 2 >= want,
                "{rows} {rpg} {live} {list}: {} ranges, want about {want}",
                r.len()
            );
        }
    }
}

/// A table's ids of the hot set, which the row log's restore puts in memory
/// ([`Table::restore_logged_block`]), probed once per logged row, and
/// which of them it put there: a bitmap over the table's rows where that
/// is at most 64 bytes an id (or 8 MiB), in cache for most tables, else a
/// hash set (about 16 bytes an id, a cache miss per probe: with it for
/// every table, a SIGKILLed W5 store's open spent a quarter of its time
/// probing).
#[derive(Debug, Default)]
pub(crate) enum HotIds {
    /// No id.
    #[default]
    None,
    /// Bit `id` set for each id, and for each id the restore put.
    Bits { want: Vec<u64>, put: Vec<u64> },
    /// The ids, and those the restore put.
    Set {
        want: rustc_hash::FxHashSet<u64>,
        put: rustc_hash::FxHashSet<u64>,
    },
}

impl HotIds {
    /// The set of `ids`, all below `rows`.
    pub(crate) fn new(rows: u64, ids: &[u64]) -> HotIds {
        if ids.is_empty() {
            return HotIds::None;
        }
        let words = rows.div_ceil(64);
        if words * 8 <= (64 * ids.len() as u64).max(8 << 20) {
            let mut want = vec![0u64; words as usize];
            for &id in ids {
                want[(id / 64) as usize] |= 1 << (id % 64);
            }
            HotIds::Bits {
                put: vec![0u64; want.len()],
                want,
            }
        } else {
            HotIds::Set {
                want: ids.iter().copied().collect(),
                put: Default::default(),
            }
        }
    }

    /// Whether `id` is one of the ids.
    #[inline]
    pub(crate) fn contains(&self, id: u64) -> bool {
        match self {
            HotIds::None => false,
            HotIds::Bits { want, .. } => bit(want, id),
            HotIds::Set { want, .. } => want.contains(&id),
        }
    }

    /// Whether the restore put `id` in memory.
    #[inline]
    fn was_put(&self, id: u64) -> bool {
        match self {
            HotIds::None => false,
            HotIds::Bits { put, .. } => bit(put, id),
            HotIds::Set { put, .. } => put.contains(&id),
        }
    }

    /// Record that the restore put `id` in memory.
    #[inline]
    fn set_put(&mut self, id: u64) {
        match self {
            HotIds::None => {}
            HotIds::Bits { put, .. } => put[(id / 64) as usize] |= 1 << (id % 64),
            HotIds::Set { put, .. } => {
                put.insert(id);
            }
        }
    }
}

#[inline]
fn bit(words: &[u64], id: u64) -> bool {
    words
        .get((id / 64) as usize)
        .is_some_and(|w| w & (1 << (id % 64)) != 0)
}
