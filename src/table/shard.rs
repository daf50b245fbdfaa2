//! A cached table's shards: which shard a row is in, how many there are,
//! and the moves of a row between a shard's tiers and its pending map.

use super::*;
use crate::tier::cache::Dirt;

/// Positions `0..ids.len()` ordered by shard (stable: each shard sees its
/// ids in batch order), and the start of each shard's run.
pub(super) fn by_shard(
    ids: &[u64],
    n: usize,
    shard_of: impl Fn(u64) -> usize,
) -> (Vec<u32>, Vec<u32>) {
    let sh: Vec<u32> = ids.iter().map(|&id| shard_of(id) as u32).collect();
    let mut start = vec![0u32; n + 1];
    for &s in &sh {
        start[s as usize + 1] += 1;
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut next = start.clone();
    let mut order = vec![0u32; ids.len()];
    for (pos, &s) in sh.iter().enumerate() {
        order[next[s as usize] as usize] = pos as u32;
        next[s as usize] += 1;
    }
    (order, start)
}

/// Visit every position of `ids` (a batch's ids) shard by shard, each
/// shard's lock taken once and its positions in batch order, with the
/// cache misses of the ids ahead overlapped: the index entry 12 ids ahead,
/// the keys it points to 8 ahead, the row 4 ahead. A cached row costs
/// three dependent random lines; visited one id at a time they are paid
/// one after the other.
///
/// `items` holds the caller's data of each position (`ids.len()` of
/// them; `()`s where it has none): the visit gets it as `each(shard, pos,
/// id, item)`, and `ahead(pos, item)` is told of each 4 positions ahead,
/// for the caller to ask for what its visit reads then. The ids and the
/// items are gathered in the walk's order first, in a loop whose loads
/// are independent: read in the walk, at random positions of a large
/// batch (a shard's order is not the batch's), each was a cache miss
/// ahead of the prefetches that needed it.
#[inline(always)]
pub(super) fn walk_prefetched<T: Copy>(
    shards: &[Mutex<Shard>],
    ids: &[u64],
    items: &[T],
    ahead: impl Fn(usize, T),
    mut each: impl FnMut(&mut Shard, usize, u64, T),
) {
    debug_assert_eq!(ids.len(), items.len());
    let n = shards.len();
    let (order, start) = by_shard(ids, n, |id| shard_of(id, n));
    let walk_ids: Vec<u64> = order.iter().map(|&p| ids[p as usize]).collect();
    let walk_items: Vec<T> = order.iter().map(|&p| items[p as usize]).collect();
    for (s, shard) in shards.iter().enumerate() {
        let (lo, hi) = (start[s] as usize, start[s + 1] as usize);
        if lo == hi {
            continue;
        }
        let (run, run_ids, run_items) = (&order[lo..hi], &walk_ids[lo..hi], &walk_items[lo..hi]);
        let mut sh = shard.lock();
        for &id in run_ids.iter().take(12) {
            sh.top.prefetch_index(id);
        }
        // The first items have no position four before them.
        for (&pos, &item) in run.iter().zip(run_items).take(4) {
            ahead(pos as usize, item);
        }
        for (j, &pos) in run.iter().enumerate() {
            if let Some(&id) = run_ids.get(j + 12) {
                sh.top.prefetch_index(id);
            }
            if let Some(&id) = run_ids.get(j + 8) {
                sh.top.prefetch_keys(id);
            }
            if let Some(&id) = run_ids.get(j + 4) {
                sh.top.prefetch_row(id);
                ahead(run[j + 4] as usize, run_items[j + 4]);
            }
            each(&mut sh, pos as usize, run_ids[j], run_items[j]);
        }
    }
}

impl Shard {
    /// The row-log block of `id`'s newest written copy, or [`NOT_LOGGED`]
    /// (its home group holds it, [`MERGED`] rows included).
    pub(super) fn logged_at(&self, id: u64) -> u32 {
        if self.logged.is_empty() {
            return NOT_LOGGED;
        }
        match self.logged.get(id) {
            Some(b) if b != MERGED => b,
            _ => NOT_LOGGED,
        }
    }

    /// An upper bound on the rows the shard holds: cached in any tier,
    /// pending, or with a log map entry (a row may count more than once).
    pub(super) fn held_rows(&self) -> usize {
        self.top.len()
            + self.lower.iter().map(|(_, c)| c.len()).sum::<usize>()
            + self.pending.len()
            + self.later.len()
            + self.logged.len()
    }

    /// The ids in `range` that the shard holds (see
    /// [`Shard::held_rows`]), ascending, each once.
    pub(super) fn held_ids_in(&self, range: std::ops::Range<u64>) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .top
            .ids()
            .chain(self.lower.iter().flat_map(|(_, c)| c.ids()))
            .chain(self.pending.keys().copied())
            .chain(self.later.keys().copied())
            .chain(self.logged.iter().map(|(id, _)| id))
            .filter(|id| range.contains(id))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether `id` has a log map entry, [`MERGED`] or not: the log holds a
    /// copy of it that a write home with newer bytes would make stale.
    pub(super) fn in_log(&self, id: u64) -> bool {
        !self.logged.is_empty() && self.logged.get(id).is_some()
    }

    /// Point `id`'s entry at log block `b` (an append, or open's restore).
    pub(super) fn log_at(&mut self, id: u64, b: u32) {
        self.logged.insert(id, b);
    }

    /// Drop `id`'s entry: it was written home with newer bytes. Returns
    /// whether it had one (its log copy is then stale).
    pub(super) fn unlog(&mut self, id: u64) -> bool {
        !self.logged.is_empty() && self.logged.remove(id)
    }

    /// `id` was written home from its log copy (the merge): its entry
    /// becomes [`MERGED`], if it has a live one.
    pub(super) fn mark_merged(&mut self, id: u64) {
        self.logged.mark_merged(id);
    }

    /// Rows whose newest written copy is in the log only (not [`MERGED`]).
    pub(super) fn live_logged(&self) -> usize {
        self.logged.live()
    }

    /// Heap bytes of the row-log map (see [`LogMap::heap_bytes`]).
    pub(super) fn log_map_bytes(&self) -> usize {
        self.logged.heap_bytes()
    }

    /// Forget every entry: the log was emptied (every row's home is newest).
    pub(super) fn clear_log(&mut self) {
        self.logged.clear();
    }

    /// Add a dirty row leaving the cache tiers to the pending map.
    pub(super) fn add_pending(
        pending: &mut HashMap<u64, PendingRow>,
        next_gen: &mut u64,
        id: u64,
        bytes: &[u8],
        ctx: &mut Ctx,
    ) {
        *next_gen += 1;
        let old = pending.insert(
            id,
            PendingRow {
                gen: *next_gen,
                bytes: bytes.into(),
            },
        );
        if old.is_none() {
            ctx.pending_delta += bytes.len() as isize;
        }
        ctx.new_pending += 1;
    }

    /// Move the dirty rows of every tier (`old_only`: only the old ones, a
    /// snapshot's) to the pending map; the cached copies become clean.
    pub(super) fn take_dirty(&mut self, old_only: bool, ctx: &mut Ctx) {
        let Shard {
            top,
            lower,
            pending,
            next_gen,
            ..
        } = self;
        let mut add = |id: u64, b: &[u8]| Self::add_pending(pending, next_gen, id, b, ctx);
        for c in std::iter::once(top).chain(lower.iter_mut().map(|(_, c)| c)) {
            match old_only {
                true => c.drain_old(&mut add),
                false => c.drain_dirty(&mut add),
            }
        }
    }

    /// A dirty row leaving the last cache tier: an old one (see
    /// [`Dirt::Old`]) to the pending map, where the checkpoint writing its
    /// snapshot takes it; a newer one to the pending map too, unless such a
    /// checkpoint is under way: then it waits in `later` until the commit.
    #[allow(clippy::too_many_arguments)]
    fn park(
        pending: &mut HashMap<u64, PendingRow>,
        later: &mut HashMap<u64, PendingRow>,
        window: bool,
        next_gen: &mut u64,
        id: u64,
        bytes: &[u8],
        dirt: Dirt,
        ctx: &mut Ctx,
    ) {
        match dirt {
            Dirt::Clean => {}
            Dirt::Dirty if window => {
                *next_gen += 1;
                let row = PendingRow {
                    gen: *next_gen,
                    bytes: bytes.into(),
                };
                if later.insert(id, row).is_none() {
                    ctx.later_delta += bytes.len() as isize;
                }
            }
            _ => Self::add_pending(pending, next_gen, id, bytes, ctx),
        }
    }

    /// Before a write to the first tier's `slot`: an old row's bytes are
    /// handed to the checkpoint writing its snapshot first (copy-on-write).
    #[inline]
    pub(super) fn before_write(&mut self, slot: usize, ctx: &mut Ctx) {
        if self.top.take_old(slot) {
            let Shard {
                top,
                pending,
                next_gen,
                ..
            } = self;
            Self::add_pending(pending, next_gen, top.id_of(slot), top.row(slot), ctx);
        }
    }

    /// The first tier's slice: where hits are served and rows are pinned.
    #[inline]
    pub(super) fn top(&mut self) -> &mut SlotCache {
        &mut self.top
    }

    /// Every tier's slice with the store's tier index, fastest first.
    pub(super) fn caches(&self) -> impl Iterator<Item = (usize, &SlotCache)> {
        std::iter::once((0, &self.top)).chain(self.lower.iter().map(|(t, c)| (*t, c)))
    }

    /// Insert a row into the first tier; each tier's victim moves down one
    /// tier, and the last tier's victim, if dirty, to the pending map (see
    /// [`Shard::park`]). An old victim moving down is handed to the
    /// checkpoint on the way and moves as clean.
    pub(super) fn insert_top(&mut self, id: u64, src: &[u8], dirty: bool, ctx: &mut Ctx) -> usize {
        self.insert_top_gen(id, src, dirty, 0, ctx)
    }

    /// [`Shard::insert_top`] of bytes that carry stamp generation `gen`
    /// from the slot they left (`SlotCache::insert`); each victim
    /// moving down carries its own.
    fn insert_top_gen(
        &mut self,
        id: u64,
        src: &[u8],
        dirty: bool,
        gen: u64,
        ctx: &mut Ctx,
    ) -> usize {
        let Shard {
            top,
            lower,
            pending,
            later,
            window,
            next_gen,
            ..
        } = self;
        let mut spill = std::mem::take(&mut ctx.spill);
        let mut next = std::mem::take(&mut ctx.spill2);
        spill.clear();
        let slot = top.insert(id, src, dirty, gen, &mut spill);
        ctx.c.inserts[0] += 1;
        // The tier whose victim `spill` holds, and the next lower slice.
        let (mut from, mut k) = (0, 0);
        while let Some(&(vid, vdirt)) = spill.rows.first() {
            ctx.c.evictions[from] += 1;
            ctx.c.dirty_evictions[from] += vdirt.is_dirty() as u64;
            let Some((t, below)) = lower.get_mut(k) else {
                Self::park(
                    pending,
                    later,
                    *window,
                    next_gen,
                    vid,
                    &spill.bytes,
                    vdirt,
                    ctx,
                );
                break;
            };
            let vdirty = match vdirt {
                Dirt::Old => {
                    Self::add_pending(pending, next_gen, vid, &spill.bytes, ctx);
                    false
                }
                d => d == Dirt::Dirty,
            };
            next.clear();
            below.insert(vid, &spill.bytes, vdirty, spill.gens[0], &mut next);
            ctx.c.inserts[*t] += 1;
            from = *t;
            k += 1;
            std::mem::swap(&mut spill, &mut next);
        }
        ctx.spill = spill;
        ctx.spill2 = next;
        slot
    }

    /// Open's restore of the row log: put `id`'s logged copy `src` in
    /// memory as a clean row at the top, unless a tier holds it; then
    /// write `src` over its bytes if `overwrite` (the held copy is an
    /// older one the restore put). The log is restored oldest block first,
    /// so the last copy put is the newest: the committed value, which is
    /// also what a hot row put back beside it holds. Nothing is pending at
    /// open. Returns whether the row was put at the top.
    pub(super) fn restore_row(
        &mut self,
        id: u64,
        src: &[u8],
        overwrite: bool,
        ctx: &mut Ctx,
    ) -> bool {
        debug_assert!(self.pending.is_empty() && self.later.is_empty());
        let tiers = std::iter::once(&mut self.top).chain(self.lower.iter_mut().map(|(_, c)| c));
        for c in tiers {
            if let Some(slot) = c.get(id) {
                if overwrite {
                    c.row_mut(slot).copy_from_slice(src);
                }
                return false;
            }
        }
        self.insert_top(id, src, false, ctx);
        true
    }

    /// Whether `id` is anywhere in this shard's memory: a tier, or pending
    /// (either map).
    pub(super) fn holds(&self, id: u64) -> bool {
        self.caches().any(|(_, c)| c.get(id).is_some())
            || self.pending.contains_key(&id)
            || (!self.later.is_empty() && self.later.contains_key(&id))
    }

    /// The first tier's slot of `id`, moving it up from a lower tier or
    /// pending if it is there.
    #[inline]
    pub(super) fn locate(&mut self, id: u64, ctx: &mut Ctx) -> Option<usize> {
        if let Some(s) = self.top.get(id) {
            self.top.touch(s);
            ctx.c.hits[0] += 1;
            return Some(s);
        }
        self.locate_below(id, ctx)
    }

    /// [`Shard::locate`] below the first tier: a lower tier's row moves up
    /// (an old one handed to the checkpoint on the way, and moved as
    /// clean); a pending row moves up dirty, except one a checkpoint is
    /// writing, which stays pending for it and is copied up clean.
    pub(super) fn locate_below(&mut self, id: u64, ctx: &mut Ctx) -> Option<usize> {
        let mut tmp = std::mem::take(&mut ctx.scratch);
        let mut found = None;
        for k in 0..self.lower.len() {
            let (t, c) = &mut self.lower[k];
            if let Some((dirt, gen)) = c.take(id, &mut tmp) {
                ctx.c.hits[*t] += 1;
                let dirty = match dirt {
                    Dirt::Old => {
                        Self::add_pending(&mut self.pending, &mut self.next_gen, id, &tmp, ctx);
                        false
                    }
                    d => d == Dirt::Dirty,
                };
                found = Some(self.insert_top_gen(id, &tmp, dirty, gen, ctx));
                break;
            }
        }
        if found.is_none() {
            // (`later` is empty between checkpoints: skip its hash.)
            let later = match self.later.is_empty() {
                true => None,
                false => self.later.remove(&id),
            };
            if let Some(p) = later {
                ctx.c.pending_hits += 1;
                ctx.later_delta -= p.bytes.len() as isize;
                found = Some(self.insert_top(id, &p.bytes, true, ctx));
            } else if self.window {
                if let Some(p) = self.pending.get(&id) {
                    ctx.c.pending_hits += 1;
                    tmp.clear();
                    tmp.extend_from_slice(&p.bytes);
                    found = Some(self.insert_top(id, &tmp, false, ctx));
                }
            } else if let Some(p) = self.pending.remove(&id) {
                ctx.c.pending_hits += 1;
                ctx.pending_delta -= p.bytes.len() as isize;
                found = Some(self.insert_top(id, &p.bytes, true, ctx));
            }
        }
        ctx.scratch = tmp;
        found
    }
}

/// The shard of row `id` in a cached table of `n` shards: the high bits
/// of `mix64(id) x n`, so ids spread evenly whatever their pattern.
#[inline]
pub fn shard_of(id: u64, n: usize) -> usize {
    ((mix64(id) as u128 * n as u128) >> 64) as usize
}

/// The caches a cached table's shards get, as the store builds them: for
/// each shard, its capacity in rows in each tier (0 where it has no slice
/// of that tier), from the table's rows per tier ([`crate::StoreConfig::table_tier_rows`])
/// and the configured shard count. A row goes to shard [`shard_of`].
pub fn shard_capacities(
    name: &str,
    tier_rows: &[u64],
    requested: Option<usize>,
) -> Result<Vec<Vec<u64>>> {
    let n = shard_count(name, tier_rows, requested)?;
    Ok((0..n)
        .map(|i| tier_rows.iter().map(|&r| part(r, n, i) as u64).collect())
        .collect())
}

/// Number of shards for a cached table with `tier_rows` rows in each tier.
pub(super) fn shard_count(
    name: &str,
    tier_rows: &[u64],
    requested: Option<usize>,
) -> Result<usize> {
    let max = MAX_SHARD_ROWS as u64;
    let top = tier_rows[0];
    let need = tier_rows
        .iter()
        .map(|r| r.div_ceil(max))
        .max()
        .unwrap_or(1)
        .max(1);
    let want = requested
        .map(|r| r as u64)
        .unwrap_or_else(|| (top / 1024).clamp(1, 64));
    let n = want.max(need).min(top);
    if n < need {
        return Err(Error::table_config(
            name,
            format!("its lower tiers' rows need {need} shards, but the first tier's share holds only {top} rows (one per shard at least)"),
        ));
    }
    Ok(n as usize)
}

/// Split `total` over `n` parts as evenly as possible.
pub(super) fn part(total: u64, n: usize, i: usize) -> usize {
    (total / n as u64 + u64::from((i as u64) < total % n as u64)) as usize
}
