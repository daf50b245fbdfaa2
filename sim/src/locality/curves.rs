//! Stack distances, reuse times, exact miss-ratio curves (by rows and by
//! bytes) and the skew figures: the algorithms `analyze` runs per table.

use super::*;

/// Prefix sums of i32 counts over positions `0..n`, in a tree of
/// 16-wide nodes of one cache line each: a node holds, for each of its 16
/// children, the sum of the children before it. A prefix is one read per
/// level (three or four levels for the pass's trees, each read's address
/// known at once), and an add is one 16-lane add per level (four SSE2
/// adds, [`add_after`]); a binary Fenwick tree's prefix and add each walk
/// a dozen and more levels.
struct WideTree {
    /// `levels[0]` over the positions, `levels[l + 1]` over the nodes of
    /// `levels[l]`; the last has one node.
    levels: Vec<Vec<Node>>,
    /// The positions.
    len: usize,
}

/// `AFTER[k][j]`: all ones where child `j` comes after child `k`, which
/// an add to `k` reaches (a mask the add's 16 lanes load as vectors; the
/// compiler builds the same masks from compares a lane at a time).
static AFTER: [[i32; 16]; 16] = {
    let mut m = [[0; 16]; 16];
    let mut k = 0;
    while k < 16 {
        let mut j = k + 1;
        while j < 16 {
            m[k][j] = -1;
            j += 1;
        }
        k += 1;
    }
    m
};

/// Add `v` to the slots of `node` that `mask` marks: four 4-lane adds
/// with SSE2 (x86-64's baseline; the compiler, left to itself, adds one
/// lane at a time).
#[inline(always)]
fn add_after(node: &mut Node, mask: &[i32; 16], v: i32) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        use std::arch::x86_64::*;
        // SAFETY: this is compiled only for targets with SSE2 (every
        // x86-64 target but the soft-float ones), so these intrinsics run
        // wherever the code does. The loads and stores are
        // unaligned 16-byte accesses at offsets 0, 16, 32 and 48 of
        // `node` (64 bytes, borrowed mutably, so no one else reads or
        // writes it meanwhile) and of `mask` (64 bytes).
        unsafe {
            let vv = _mm_set1_epi32(v);
            let n = node.0.as_mut_ptr() as *mut __m128i;
            let m = mask.as_ptr() as *const __m128i;
            for q in 0..4 {
                let add = _mm_and_si128(vv, _mm_loadu_si128(m.add(q)));
                let x = _mm_loadu_si128(n.add(q));
                _mm_storeu_si128(n.add(q), _mm_add_epi32(x, add));
            }
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    for (slot, m) in node.0.iter_mut().zip(mask) {
        *slot += v & m;
    }
}

/// A tree node: the sums before each of its children.
#[derive(Clone, Copy)]
#[repr(align(64))]
struct Node([i32; 16]);

impl WideTree {
    /// A tree over `counts.len()` positions holding `counts`.
    fn from_counts(counts: Vec<i32>) -> WideTree {
        let len = counts.len();
        let mut totals = counts;
        let mut levels = Vec::new();
        loop {
            let nodes: Vec<Node> = totals
                .chunks(16)
                .map(|c| {
                    let mut n = Node([0; 16]);
                    let mut sum = 0;
                    for (slot, &v) in n.0.iter_mut().zip(c) {
                        *slot = sum;
                        sum += v;
                    }
                    n
                })
                .collect();
            let nodes = if nodes.is_empty() {
                vec![Node([0; 16])]
            } else {
                nodes
            };
            totals = totals.chunks(16).map(|c| c.iter().sum()).collect();
            let last = nodes.len() == 1;
            levels.push(nodes);
            if last {
                return WideTree { levels, len };
            }
        }
    }
    /// Add `v` at position `i`.
    #[inline(always)]
    fn add(&mut self, i: usize, v: i32) {
        debug_assert!(i < self.len, "add at {i} of {}", self.len);
        let mut i = i;
        for level in &mut self.levels {
            add_after(&mut level[i / 16], &AFTER[i % 16], v);
            i /= 16;
        }
    }
    /// Sum of positions `0..i`, `i` a position.
    #[inline(always)]
    fn prefix(&self, i: usize) -> i64 {
        // Past the last position the padding's slots hold sums too.
        debug_assert!(i < self.len, "prefix at {i} of {}", self.len);
        let mut i = i;
        let mut s = 0i64;
        for level in &self.levels {
            s += level[i / 16].0[i % 16] as i64;
            i /= 16;
        }
        s
    }
}

/// 0/1 markers over positions `0..n`: a bitmap in 512-position blocks
/// (one cache line each) and a [`WideTree`] over the blocks, so that a
/// count of the markers up to a position reads a few lines that stay in
/// a core's cache for millions of positions.
///
/// Markers are set in position order (the pass sets each position once,
/// at its end), so the tree learns of the sets in a block when the next
/// set leaves it: `pending` sets of block `tail`. A count up to a
/// position never reads the tree's entry of its own block or a later
/// one, so it never misses them.
struct Markers {
    bits: Vec<[u64; 8]>,
    blocks: WideTree,
    tail: usize,
    pending: i32,
}

/// The markers of a 512-position block.
#[inline]
fn block_markers(b: &[u64; 8]) -> u32 {
    b.iter().map(|w| w.count_ones()).sum()
}

impl Markers {
    /// `n` positions, the first `k` marked.
    fn ones(n: usize, k: usize) -> Markers {
        let nb = n.div_ceil(512).max(1);
        let mut bits = vec![[0u64; 8]; nb];
        for (w, b) in bits.iter_mut().flatten().enumerate() {
            let lo = w * 64;
            if k >= lo + 64 {
                *b = u64::MAX;
            } else if k > lo {
                *b = u64::MAX >> (64 - (k - lo));
            }
        }
        let blocks = WideTree::from_counts(bits.iter().map(|b| block_markers(b) as i32).collect());
        Markers {
            bits,
            blocks,
            tail: k / 512,
            pending: 0,
        }
    }
    /// Mark `i`, past every position marked before.
    #[inline(always)]
    fn set(&mut self, i: usize) {
        let b = i / 512;
        if b != self.tail {
            self.blocks.add(self.tail, self.pending);
            self.tail = b;
            self.pending = 0;
        }
        self.bits[b][(i / 64) % 8] |= 1 << (i % 64);
        self.pending += 1;
    }
    #[inline(always)]
    fn clear(&mut self, i: usize) {
        self.bits[i / 512][(i / 64) % 8] &= !(1 << (i % 64));
        self.blocks.add(i / 512, -1);
    }
    /// Markers at positions `0..=i`.
    #[inline(always)]
    fn upto(&self, i: usize) -> i64 {
        self.blocks.prefix(i / 512) + self.in_block(i) as i64
    }
    /// Markers at the positions of `i`'s block up to `i`, `i` included.
    #[inline(always)]
    fn in_block(&self, i: usize) -> u32 {
        let b = &self.bits[i / 512];
        let w = (i / 64) % 8;
        let mut n = (b[w] & (u64::MAX >> (63 - i % 64))).count_ones();
        for x in &b[..w] {
            n += x.count_ones();
        }
        n
    }
    /// The markers before each block: one pass over the bitmap, for a
    /// renumbering that counts every marker (a tree query each costs a
    /// read per level and the block's popcounts).
    fn block_starts(&self) -> Vec<u32> {
        let mut sum = 0u32;
        self.bits
            .iter()
            .map(|b| {
                let before = sum;
                sum += block_markers(b);
                before
            })
            .collect()
    }
}

/// Exact stack distances of a sequence of dense object ids `0..n_objects`:
/// returns `(distance_counts, reuse_distance_hist, reuse_time_hist)` where
/// `distance_counts[d]` counts reuses at distance `d`.
///
/// Where only some cache sizes matter, [`lru_hits`] makes the same pass
/// without a counter per distance (random memory as large as the objects).
pub fn stack_distances(seq: &[u32], n_objects: usize) -> (Vec<u64>, Log2Hist, Log2Hist) {
    let mut counts = vec![0u64; n_objects.max(1)];
    let (dh, th, _) = distance_pass(seq, n_objects, |_, last, d| {
        if last != FIRST {
            counts[d as usize] += 1
        }
    });
    (counts, dh, th)
}

/// LRU's hits at each of `sizes` (rows) over a sequence of dense object
/// ids `0..n_objects`, exactly, with the reuse-distance and reuse-time
/// histograms: `(hits, reuse_distance_hist, reuse_time_hist)`, the hits
/// in the order of `sizes`. The same figures as [`stack_distances`] and
/// [`lru_hits_from_distances`], but each reuse is counted by how many of
/// the sizes its distance reaches (a few counters that stay in cache)
/// rather than at its distance (a counter per object, random memory).
pub fn lru_hits(seq: &[u32], n_objects: usize, sizes: &[u64]) -> (Vec<u64>, Log2Hist, Log2Hist) {
    let mut b = SizeBuckets::new(sizes);
    let (dh, th, _) = distance_pass(seq, n_objects, |_, last, d| {
        if last != FIRST {
            b.add(d)
        }
    });
    (b.hits(sizes), dh, th)
}

/// Reuses counted by the sizes their distances reach: `at[j]` counts the
/// reuses at a distance `d` with exactly `j` of the (sorted, distinct)
/// sizes at most `d`, so a cache of `sorted[j]` rows hits the reuses of
/// `at[0..=j]` (a reuse hits a cache of C rows when `d < C`).
pub(super) struct SizeBuckets {
    /// The sizes, sorted, then two `u64::MAX` (never at most a distance).
    sorted: Vec<u64>,
    /// `below[k]`: the sizes under the least distance of log2 bin `k`
    /// (0 for bin 0, which holds distance 0; `2^(k-1)` for bin `k`).
    below: [u32; 65],
    /// Whether no log2 bin holds more than two sizes (log-spaced sizes
    /// closer than 2x apart hold two at most): then a distance's sizes
    /// are counted by two comparisons, not a loop whose exit the CPU
    /// mispredicts.
    two: bool,
    at: Vec<u64>,
}

impl SizeBuckets {
    pub(super) fn new(sizes: &[u64]) -> SizeBuckets {
        let mut sorted = sizes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut below = [0u32; 65];
        for (k, b) in below.iter_mut().enumerate().skip(1) {
            *b = sorted.partition_point(|&s| s < 1u64 << (k - 1)) as u32;
        }
        let mut per_bin = [0u32; 65];
        for &s in &sorted {
            per_bin[(64 - s.leading_zeros()) as usize] += 1;
        }
        let two = per_bin.iter().all(|&n| n <= 2);
        let at = vec![0; sorted.len() + 1];
        sorted.extend([u64::MAX; 2]);
        SizeBuckets {
            sorted,
            below,
            two,
            at,
        }
    }
    /// Count a reuse at distance `d` (below `u64::MAX`, the padding's
    /// value: a distance counts objects, fewer than 2^32).
    #[inline(always)]
    pub(super) fn add(&mut self, d: u64) {
        debug_assert!(d < u64::MAX);
        let k = (64 - d.leading_zeros()) as usize;
        let mut j = self.below[k] as usize;
        if self.two {
            // The sizes of `d`'s bin are the two from `j` at most; later
            // ones (a later bin's, or the padding) exceed `d`.
            j += (self.sorted[j] <= d) as usize + (self.sorted[j + 1] <= d) as usize;
        } else {
            while self.sorted[j] <= d {
                j += 1;
            }
        }
        self.at[j] += 1;
    }
    /// Hits at each of `sizes`, in their order.
    pub(super) fn hits(&self, sizes: &[u64]) -> Vec<u64> {
        let n = self.at.len() - 1;
        let mut cum = Vec::with_capacity(n);
        let mut sum = 0u64;
        for &a in &self.at[..n] {
            sum += a;
            cum.push(sum);
        }
        sizes
            .iter()
            .map(|s| cum[self.sorted[..n].binary_search(s).expect("a size given")])
            .collect()
    }
}

/// What the stack-distance pass hands on as the last access of an
/// object's first access.
pub(super) const FIRST: u32 = u32::MAX;

/// What the stack-distance pass tells of each access: `visit(t, last, d)`
/// with `last` the object's previous access ([`FIRST`] for its first)
/// and `d` a reuse's distance (distinct objects since `last`; 0 for a
/// first access). A type of its own, not a closure, where its work must
/// be inlined into the pass.
pub(super) trait Visit {
    fn visit(&mut self, t: usize, last: u32, d: u64);
}

impl<F: FnMut(usize, u32, u64)> Visit for F {
    #[inline(always)]
    fn visit(&mut self, t: usize, last: u32, d: u64) {
        self(t, last, d)
    }
}

/// The stack-distance pass over dense object ids `0..n_objects`: tells
/// `visit` of each access in order ([`Visit`]) and returns
/// `(reuse_distance_hist, reuse_time_hist, accesses_per_object)`.
///
/// Each object keeps one marker at its last access in a prefix-sum tree; the
/// distance of a reuse is the markers after the previous one. The tree
/// holds `4 x n_objects` positions, renumbered in order when full (every
/// `3 x n_objects` accesses at least), as a bitmap and a tree over its
/// words, so it stays small and in cache however long the sequence; the
/// markers after a position are the objects seen minus those up to it:
/// one prefix query per reuse. An object's marker, last access and
/// access count share one record: the pass's one random memory access
/// per access.
pub(super) fn distance_pass(
    seq: &[u32],
    n_objects: usize,
    visit: impl Visit,
) -> (Log2Hist, Log2Hist, Vec<u64>) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("popcnt") {
        // SAFETY: `distance_pass_popcnt` is compiled for one feature
        // beyond the build's target, POPCNT, and this CPU has it (asked
        // just above).
        return unsafe { distance_pass_popcnt(seq, n_objects, visit) };
    }
    distance_pass_any(seq, n_objects, visit)
}

/// [`distance_pass_any`] with the POPCNT instruction (the build's
/// baseline, x86-64 v1, counts a word's bits in a dozen instructions).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "popcnt")]
fn distance_pass_popcnt(
    seq: &[u32],
    n_objects: usize,
    visit: impl Visit,
) -> (Log2Hist, Log2Hist, Vec<u64>) {
    distance_pass_any(seq, n_objects, visit)
}

/// [`distance_pass`] for any CPU.
#[inline(always)]
fn distance_pass_any(
    seq: &[u32],
    n_objects: usize,
    mut visit: impl Visit,
) -> (Log2Hist, Log2Hist, Vec<u64>) {
    const NONE: u32 = u32::MAX;
    let cap = (4 * n_objects).max(1024);
    // Per object: its marker's position, its last access and its
    // accesses (one cache line for all three).
    let mut of: Vec<[u32; 4]> = vec![[NONE, FIRST, 0, 0]; n_objects];
    let mut marks = Markers::ones(cap, 0);
    let mut next = 0usize;
    let mut seen = 0i64;
    let mut dist_hist = Bins::default();
    let mut time_hist = Bins::default();
    for (t, &o) in seq.iter().enumerate() {
        // Objects are random memory: ask for the line of an object a few
        // accesses ahead.
        if let Some(&o2) = seq.get(t + 16) {
            embtier::hint::prefetch(of.as_ptr().wrapping_add(o2 as usize));
        }
        if next == cap {
            // Renumber the markers 0..seen in order (each object's new
            // position is its marker's rank), then rebuild the tree.
            let before = marks.block_starts();
            for x in of.iter_mut().filter(|x| x[0] != NONE) {
                let p = x[0] as usize;
                x[0] = before[p / 512] + marks.in_block(p) - 1;
            }
            marks = Markers::ones(cap, seen as usize);
            next = seen as usize;
        }
        let [p, last_t, n, _] = of[o as usize];
        if p == NONE {
            dist_hist.cold += 1;
            time_hist.cold += 1;
            seen += 1;
            visit.visit(t, FIRST, 0);
        } else {
            let p = p as usize;
            let d = (seen - marks.upto(p)) as u64;
            visit.visit(t, last_t, d);
            dist_hist.add(d);
            time_hist.add((t as u32 - last_t) as u64);
            marks.clear(p);
        }
        marks.set(next);
        of[o as usize] = [next as u32, t as u32, n + 1, 0];
        next += 1;
    }
    let counts = of.iter().map(|x| x[2] as u64).collect();
    (dist_hist.into(), time_hist.into(), counts)
}

/// A [`Log2Hist`] of fixed size, for the pass (no bound to grow).
struct Bins {
    bins: [u64; 65],
    cold: u64,
}

impl Default for Bins {
    fn default() -> Bins {
        Bins {
            bins: [0; 65],
            cold: 0,
        }
    }
}

impl Bins {
    #[inline(always)]
    fn add(&mut self, v: u64) {
        self.bins[(64 - v.leading_zeros()) as usize] += 1;
    }
}

impl From<Bins> for Log2Hist {
    fn from(b: Bins) -> Log2Hist {
        let len = b.bins.iter().rposition(|&c| c != 0).map_or(0, |k| k + 1);
        Log2Hist {
            bins: b.bins[..len].to_vec(),
            cold: b.cold,
        }
    }
}

/// Reuse times (accesses since the previous access of the same object).
pub fn reuse_times(seq: &[u32], n_objects: usize) -> Log2Hist {
    let mut last = vec![u64::MAX; n_objects];
    let mut h = Log2Hist::default();
    for (t, &o) in seq.iter().enumerate() {
        let p = last[o as usize];
        if p == u64::MAX {
            h.cold += 1;
        } else {
            h.add(t as u64 - p);
        }
        last[o as usize] = t as u64;
    }
    h
}

/// LRU's hits at each of `sizes` (rows) from stack-distance `counts`
/// (from [`stack_distances`]): a request hits a cache of C rows when
/// fewer than C distinct rows came since its row's last request, so
/// hits(C) is the sum of `counts[d]` for d < C. Exact, as a simulation.
pub fn lru_hits_from_distances(counts: &[u64], sizes: &[u64]) -> Vec<u64> {
    let mut prefix = Vec::with_capacity(counts.len() + 1);
    prefix.push(0u64);
    for &c in counts {
        prefix.push(prefix.last().expect("non-empty") + c);
    }
    sizes
        .iter()
        .map(|&c| prefix[(c as usize).min(counts.len())])
        .collect()
}

/// The LRU miss-ratio curve at `sizes` from distance counts.
pub fn mrc_from_distances(counts: &[u64], accesses: u64, sizes: &[u64]) -> Vec<MrcPoint> {
    mrc_from_hits(sizes, &lru_hits_from_distances(counts, sizes), accesses)
}

/// The miss-ratio curve of `hits` at `sizes` (rows) out of `accesses`.
pub fn mrc_from_hits(sizes: &[u64], hits: &[u64], accesses: u64) -> Vec<MrcPoint> {
    sizes
        .iter()
        .zip(hits)
        .map(|(&c, &hits)| MrcPoint {
            cache_rows: c,
            cache_bytes: None,
            miss_ratio: if accesses == 0 {
                0.0
            } else {
                1.0 - hits as f64 / accesses as f64
            },
        })
        .collect()
}

/// Exact LRU miss-ratio curve with cache sizes in bytes, for objects of
/// different sizes: `size_of[o]` bytes for object `o`. O(N log N).
pub fn byte_mrc(seq: &[u32], size_of: &[u64], sizes: &[u64]) -> Vec<MrcPoint> {
    const NONE: u32 = u32::MAX;
    let mut last = vec![NONE; size_of.len()];
    // Fenwick over positions of byte weights (i64).
    let mut tree = vec![0i64; seq.len() + 1];
    let add = |tree: &mut Vec<i64>, i: usize, v: i64| {
        let mut i = i + 1;
        while i < tree.len() {
            tree[i] += v;
            i += i & i.wrapping_neg();
        }
    };
    let prefix = |tree: &Vec<i64>, mut i: usize| {
        let mut s = 0i64;
        while i > 0 {
            s += tree[i];
            i &= i - 1;
        }
        s
    };
    let mut need: Vec<u64> = Vec::with_capacity(seq.len());
    for (t, &o) in seq.iter().enumerate() {
        let sz = size_of[o as usize] as i64;
        let p = last[o as usize];
        if p != NONE {
            let p = p as usize;
            let between = prefix(&tree, t) - prefix(&tree, p + 1);
            need.push((between + sz) as u64);
            add(&mut tree, p, -sz);
        }
        add(&mut tree, t, sz);
        last[o as usize] = t as u32;
    }
    need.sort_unstable();
    sizes
        .iter()
        .map(|&c| {
            let hits = need.partition_point(|&n| n <= c);
            MrcPoint {
                cache_rows: 0,
                cache_bytes: Some(c),
                miss_ratio: if seq.is_empty() {
                    0.0
                } else {
                    1.0 - hits as f64 / seq.len() as f64
                },
            }
        })
        .collect()
}

/// Default MRC sizes: 24 log-spaced sizes from 1 to `unique`.
pub fn default_sizes(unique: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..24)
        .map(|i| ((unique.max(1) as f64).powf(i as f64 / 23.0)).round() as u64)
        .collect();
    v.dedup();
    v
}

pub(super) fn skew(counts_desc: &[u64], accesses: u64) -> (f64, f64, f64, f64, f64) {
    let n = counts_desc.len();
    let share = |p: f64| {
        let k = ((n as f64 * p).ceil() as usize).clamp(1, n.max(1));
        counts_desc[..k.min(n)].iter().sum::<u64>() as f64 / accesses.max(1) as f64
    };
    // Gini over touched rows, ascending order.
    let mut g = 0f64;
    for (i, &c) in counts_desc.iter().rev().enumerate() {
        g += (i as f64 + 1.0) * c as f64;
    }
    let gini = if n == 0 {
        0.0
    } else {
        2.0 * g / (n as f64 * accesses as f64) - (n as f64 + 1.0) / n as f64
    };
    (
        share(0.001),
        share(0.01),
        share(0.1),
        fit_zipf(counts_desc),
        gini,
    )
}

/// Least-squares slope of log(count) against log(rank), over ranks at
/// geometric spacing (ratio 1.1) among rows accessed at least twice, so that
/// the head and the tail weigh alike and singletons (the flat tail) do not
/// dominate. Returns 0 when fewer than 3 such ranks exist.
pub fn fit_zipf(counts_desc: &[u64]) -> f64 {
    let k = counts_desc.iter().take_while(|&&c| c >= 2).count();
    let mut pts = Vec::new();
    let mut r = 1f64;
    let mut last = 0usize;
    while (r as usize) <= k {
        let rank = r as usize;
        if rank != last {
            pts.push(((rank as f64).ln(), (counts_desc[rank - 1] as f64).ln()));
            last = rank;
        }
        r *= 1.1;
    }
    if pts.len() < 3 {
        return 0.0;
    }
    let n = pts.len() as f64;
    let (sx, sy) = pts.iter().fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
    let (mx, my) = (sx / n, sy / n);
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, y) in &pts {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx) * (x - mx);
    }
    if sxx == 0.0 {
        0.0
    } else {
        -sxy / sxx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Size buckets count each distance at the sizes it reaches, as a
    /// plain count does, with at most two sizes a log2 bin (the
    /// branch-free count) and with more (the loop), at every distance
    /// near the sizes and past them.
    #[test]
    fn size_buckets_count_as_a_plain_count() {
        let sets: [(&[u64], bool); 4] = [
            (&[1, 3, 5, 9, 17, 33, 64, 100, 200, 256, 10_000], true),
            (&[0, 1, 2, 3, 4, 7, 8, 15, 16, 1 << 40, u64::MAX], true),
            (&[300, 1, 64, 0, 64, 2, 128, 256, 257, 10_000, 3, 65], false),
            (&[4, 5, 6, 7], false),
        ];
        for (sizes, two) in sets {
            let mut b = SizeBuckets::new(sizes);
            assert_eq!(b.two, two, "{sizes:?}");
            let mut ds: Vec<u64> = (0..1100).collect();
            for &s in sizes {
                ds.extend([s.saturating_sub(1), s, s.saturating_add(1)]);
            }
            ds.extend([(1 << 40) - 1, 1 << 41, u64::MAX - 2, u64::MAX - 1]);
            ds.retain(|&d| d < u64::MAX);
            for &d in &ds {
                b.add(d);
            }
            let want: Vec<u64> = sizes
                .iter()
                .map(|&c| ds.iter().filter(|&&d| d < c).count() as u64)
                .collect();
            assert_eq!(b.hits(sizes), want, "{sizes:?}");
        }
    }

    /// The wide tree's prefixes are a plain vector's, for trees of one to
    /// four levels (sizes at and past each level's edge), built from
    /// counts and then added to at random.
    #[test]
    fn wide_tree_sums_as_a_plain_vector() {
        let mut x = 11u64;
        let mut rnd = |k: u64| {
            x = embtier::init::mix64(x);
            x % k
        };
        for n in [1usize, 15, 16, 17, 255, 256, 257, 4_096, 4_097, 9_000] {
            let mut plain: Vec<i32> = (0..n).map(|_| rnd(600) as i32).collect();
            let mut t = WideTree::from_counts(plain.clone());
            let check = |t: &WideTree, plain: &[i32], i: usize| {
                let want: i64 = plain[..i].iter().map(|&v| v as i64).sum();
                assert_eq!(t.prefix(i), want, "n {n}, prefix {i}");
            };
            for round in 0..3 * n.min(2_000) {
                let i = rnd(n as u64) as usize;
                let v = rnd(41) as i32 - 20;
                t.add(i, v);
                plain[i] += v;
                for j in [i, i + 1, rnd(n as u64) as usize, n - 1, 0] {
                    if j < n {
                        check(&t, &plain, j);
                    }
                }
                if round % 997 == 0 {
                    (0..n).for_each(|j| check(&t, &plain, j));
                }
            }
        }
    }

    /// The markers count as a plain vector of flags does: over 400,000
    /// positions (800 blocks), marked from a renumbered start, set in
    /// order and cleared at random, with counts at random positions, at
    /// block edges near and far, and at the tail.
    #[test]
    fn markers_count_as_plain_flags() {
        let n = 3 * 131_072 + 5_000;
        for start in [0usize, 511, 8_192 * 3 + 17] {
            let mut m = Markers::ones(n, start);
            let mut plain = vec![false; n];
            plain[..start].iter_mut().for_each(|f| *f = true);
            let mut x = 7u64;
            let mut rnd = |k: usize| {
                x = embtier::init::mix64(x);
                (x % k as u64) as usize
            };
            let check = |m: &Markers, plain: &[bool], i: usize| {
                let want = plain[..=i].iter().filter(|&&f| f).count() as i64;
                assert_eq!(m.upto(i), want, "start {start}, position {i}");
            };
            for next in start..n {
                m.set(next);
                plain[next] = true;
                if rnd(3) == 0 {
                    let p = rnd(next + 1);
                    if plain[p] {
                        m.clear(p);
                        plain[p] = false;
                    }
                }
                if next % 4_099 == 0 || next + 1 == n {
                    for i in [rnd(next + 1), next, next.saturating_sub(1)] {
                        check(&m, &plain, i);
                    }
                    for edge in [511usize, 512, 8_191, 8_192, 131_071, 131_072, 262_144] {
                        if edge <= next {
                            check(&m, &plain, edge);
                        }
                    }
                }
            }
        }
    }
}
