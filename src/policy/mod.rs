//! Eviction policies, written once and driven by both the store and the
//! simulator.
//!
//! A policy orders *slots*: small dense integers `0..capacity` that the caller
//! maps to whatever it caches. The store's DRAM and PMem shards hand a policy
//! their row slots; the simulator (crate `embtier-sim`, its `SimCache` and
//! `DenseCache`) maps trace ids to slots. Both therefore run the very same
//! code, so a simulated hit ratio predicts the store's.
//!
//! The link width is a type parameter ([`Link`]): store shards use `u16`
//! links, so that per-row bookkeeping stays within 16 bytes; the simulator
//! uses `u32`.
//!
//! ```
//! use embtier::policy::{AnyPolicy, EvictionPolicy, PolicyKind};
//! let mut p = AnyPolicy::<u32>::new(PolicyKind::Lru, 2);
//! p.insert(0, 10); // slot 0 holds key 10
//! p.insert(1, 20); // slot 1 holds key 20
//! p.hit(0);
//! assert_eq!(p.evict(), 1); // key 20, the least recently used
//! p.insert(1, 30);
//! assert_eq!(p.evict(), 0); // then key 10
//! ```

mod arc;
pub mod chains;
mod clock;
mod lfu;
mod list;
mod lru;
mod s3fifo;
mod sieve;
mod slru;
mod twoq;
mod wtinylfu;

use std::fmt;
use std::str::FromStr;

pub use arc::Arc;
pub use clock::Clock;
pub use lfu::Lfu;
pub use list::{Link, List};
pub use lru::{Fifo, Lru};
pub use s3fifo::S3Fifo;
pub use sieve::Sieve;
pub use slru::Slru;
pub use twoq::TwoQ;
pub use wtinylfu::WTinyLfu;

/// A cache replacement policy over slots `0..capacity`.
///
/// The caller guarantees: `insert` is given a slot that is not resident;
/// `hit` and `remove` are given resident slots; `evict` is called only when
/// at least one slot is resident.
pub trait EvictionPolicy {
    /// A miss on `key`, before any eviction for it: returns whether the key
    /// will be admitted (inserted). Policies with ghost lists look the key up
    /// here. The default admits everything.
    fn miss(&mut self, key: u64) -> bool {
        let _ = key;
        true
    }
    /// `slot` became resident, holding `key`.
    fn insert(&mut self, slot: usize, key: u64);
    /// The resident `slot` was accessed.
    fn hit(&mut self, slot: usize);
    /// Choose a victim, stop tracking it, and return it.
    fn evict(&mut self) -> usize;
    /// Stop tracking the resident `slot` (the caller removed it).
    fn remove(&mut self, slot: usize);
    /// A slot the policy dropped on its own during the last `insert` or
    /// `hit` (2Q's second eviction, SLRU's demotion out of the cache).
    /// Callers drain it after each call and free the slots it returns.
    fn overflow(&mut self) -> Option<usize> {
        None
    }
    /// Heap bytes of the policy's own bookkeeping.
    fn meta_bytes(&self) -> usize;
    /// A hint that `key` will be accessed soon: ask for the memory its step
    /// will read (W-TinyLFU: its sketch counters). Changes no state; the
    /// default does nothing.
    fn prefetch(&self, key: u64) {
        let _ = key;
    }
    /// Every key from now on is below `n_keys` (a simulator's dense ids):
    /// ghost queues may index keys instead of hashing them
    /// ([`chains::Ghost::dense_keys`]). Decisions do not change; the
    /// default does nothing. A later call may raise `n_keys`.
    fn dense_keys(&mut self, n_keys: usize) {
        let _ = n_keys;
    }
    /// Every key from now on comes as its [`PolicyKind::key_digest`]
    /// (a simulator that digests each distinct key once, rather than the
    /// policy hashing a key per access, over and over for a sweep's sizes).
    /// Decisions do not change; the default does nothing.
    fn digested_keys(&mut self) {}
}

/// The policies available by name.
///
/// One vocabulary everywhere (the command-line tools, `store.toml`, the
/// Python binding): a name is compared after [`crate::canonical_name`]
/// (case, `-` and `_` ignored), so `S3-FIFO`, `s3_fifo` and `s3fifo` are one
/// name, and 2Q is `2q` or `twoq`. Serialised as [`PolicyKind::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PolicyKind {
    /// Least recently used.
    #[default]
    Lru,
    /// First in, first out.
    Fifo,
    /// SIEVE (Zhang et al., NSDI '24): scan-resistant, one visited bit per
    /// row, lazy promotion.
    Sieve,
    /// CLOCK (second chance), 1-bit.
    Clock,
    /// LFU, FIFO among equal frequencies.
    Lfu,
    /// S3-FIFO (Yang et al., SOSP '23).
    S3Fifo,
    /// 2Q (Johnson and Shasha, VLDB '94).
    TwoQ,
    /// Segmented LRU, four segments.
    Slru,
    /// ARC (Megiddo and Modha, FAST '03).
    Arc,
    /// W-TinyLFU (Einziger et al., TOS '17).
    WTinyLfu,
}

impl PolicyKind {
    /// Every policy.
    pub const ALL: &'static [PolicyKind] = &[
        PolicyKind::Lru,
        PolicyKind::Fifo,
        PolicyKind::Clock,
        PolicyKind::Lfu,
        PolicyKind::TwoQ,
        PolicyKind::Slru,
        PolicyKind::Arc,
        PolicyKind::WTinyLfu,
        PolicyKind::S3Fifo,
        PolicyKind::Sieve,
    ];

    /// Whether the store's tiers can run this policy. 2Q, SLRU and W-TinyLFU
    /// drop slots on their own (a second eviction, a demotion out of the
    /// cache),
    /// which the store's shards do not spill yet; they run in simulation.
    pub fn store_supported(self) -> bool {
        !matches!(
            self,
            PolicyKind::TwoQ | PolicyKind::Slru | PolicyKind::WTinyLfu
        )
    }

    /// The policies the store's tiers run ([`PolicyKind::store_supported`]),
    /// in the order of [`PolicyKind::ALL`].
    pub fn store_policies() -> impl Iterator<Item = PolicyKind> {
        PolicyKind::ALL
            .iter()
            .copied()
            .filter(|p| p.store_supported())
    }

    /// `kinds` as a comma-separated list of names, for error messages.
    pub fn list(kinds: impl IntoIterator<Item = PolicyKind>) -> String {
        let names: Vec<&str> = kinds.into_iter().map(|p| p.name()).collect();
        names.join(", ")
    }

    /// Parse a policy for a store tier: any spelling [`FromStr`] takes, and
    /// only a policy the store runs. The errors name the policies the
    /// store's tiers accept, and nothing else.
    pub fn parse_for_store(s: &str) -> Result<PolicyKind, String> {
        let accepted = PolicyKind::list(PolicyKind::store_policies());
        match s.parse::<PolicyKind>() {
            Ok(p) if p.store_supported() => Ok(p),
            Ok(p) => Err(format!(
                "policy {p} runs in simulation only (emb-replay simulate); the store's tiers accept {accepted}"
            )),
            Err(_) if SIMULATOR_POLICIES.contains(&crate::hash::canonical_name(s).as_str()) => Err(
                format!(
                    "policy {s} runs in simulation only (emb-replay simulate); the store's tiers accept {accepted}"
                ),
            ),
            Err(_) => Err(format!(
                "unknown policy {s:?}; the store's tiers accept {accepted}"
            )),
        }
    }

    /// Deserialise a store tier's policy with [`PolicyKind::parse_for_store`]
    /// (for `#[serde(deserialize_with = ...)]` on a tier's `policy` field).
    pub fn deserialize_for_store<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<PolicyKind, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        PolicyKind::parse_for_store(&s).map_err(serde::de::Error::custom)
    }

    /// Whether the policy's decisions depend on key values (W-TinyLFU's
    /// sketch hashes them), so that only the trace's own ids reproduce other
    /// simulators' results exactly.
    pub fn hashes_keys(self) -> bool {
        matches!(self, PolicyKind::WTinyLfu)
    }

    /// What the policy makes of a key's value (W-TinyLFU: its sketch's
    /// hashes; every other policy: the key itself), for a caller that
    /// tells it digests ([`EvictionPolicy::digested_keys`]).
    pub fn key_digest(self, key: u64) -> u64 {
        match self {
            PolicyKind::WTinyLfu => wtinylfu::digest(key),
            _ => key,
        }
    }

    /// Command-line name.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Lru => "lru",
            PolicyKind::Fifo => "fifo",
            PolicyKind::Sieve => "sieve",
            PolicyKind::Clock => "clock",
            PolicyKind::Lfu => "lfu",
            PolicyKind::S3Fifo => "s3fifo",
            PolicyKind::TwoQ => "2q",
            PolicyKind::Slru => "slru",
            PolicyKind::Arc => "arc",
            PolicyKind::WTinyLfu => "wtinylfu",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The simulator's policies that are not [`PolicyKind`]s (Belady's MIN,
/// FBGEMM's set-associative caches), by [`crate::hash::canonical_name`]:
/// a store tier refuses them as simulation-only, not as unknown.
const SIMULATOR_POLICIES: &[&str] = &["belady", "min", "opt", "lru32way", "lfu32way"];

impl FromStr for PolicyKind {
    type Err = String;
    /// Case, `-` and `_` are ignored: `S3-FIFO`, `s3_fifo` and `s3fifo` are
    /// one name; 2Q is also `twoq` (the name `store.toml` once required).
    fn from_str(s: &str) -> Result<Self, String> {
        let norm = crate::hash::canonical_name(s);
        if norm == "twoq" {
            return Ok(PolicyKind::TwoQ);
        }
        PolicyKind::ALL
            .iter()
            .copied()
            .find(|p| p.name() == norm)
            .ok_or_else(|| {
                format!(
                    "unknown policy {s:?} (expected one of {})",
                    PolicyKind::list(PolicyKind::ALL.iter().copied())
                )
            })
    }
}

impl serde::Serialize for PolicyKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for PolicyKind {
    /// Any spelling [`FromStr`] takes.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PolicyKind, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One policy of any kind, dispatched by `match` (no virtual call on the hot path).
#[derive(Debug, Clone)]
pub enum AnyPolicy<L: Link> {
    /// LRU.
    Lru(Lru<L>),
    /// FIFO.
    Fifo(Fifo<L>),
    /// SIEVE.
    Sieve(Sieve<L>),
    /// CLOCK.
    Clock(Clock<L>),
    /// LFU.
    Lfu(Lfu<L>),
    /// S3-FIFO.
    S3Fifo(S3Fifo<L>),
    /// 2Q.
    TwoQ(TwoQ<L>),
    /// SLRU.
    Slru(Slru<L>),
    /// ARC.
    Arc(Arc<L>),
    /// W-TinyLFU.
    WTinyLfu(WTinyLfu<L>),
}

impl<L: Link> AnyPolicy<L> {
    /// A policy of `kind` for `capacity` slots (`capacity <= L::MAX_SLOTS`).
    pub fn new(kind: PolicyKind, capacity: usize) -> AnyPolicy<L> {
        match kind {
            PolicyKind::Lru => AnyPolicy::Lru(Lru::new(capacity)),
            PolicyKind::Fifo => AnyPolicy::Fifo(Fifo::new(capacity)),
            PolicyKind::Sieve => AnyPolicy::Sieve(Sieve::new(capacity)),
            PolicyKind::Clock => AnyPolicy::Clock(Clock::new(capacity)),
            PolicyKind::Lfu => AnyPolicy::Lfu(Lfu::new(capacity)),
            PolicyKind::S3Fifo => AnyPolicy::S3Fifo(S3Fifo::new(capacity)),
            PolicyKind::TwoQ => AnyPolicy::TwoQ(TwoQ::new(capacity)),
            PolicyKind::Slru => AnyPolicy::Slru(Slru::new(capacity)),
            PolicyKind::Arc => AnyPolicy::Arc(Arc::new(capacity)),
            PolicyKind::WTinyLfu => AnyPolicy::WTinyLfu(WTinyLfu::new(capacity)),
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            AnyPolicy::Lru($p) => $e,
            AnyPolicy::Fifo($p) => $e,
            AnyPolicy::Sieve($p) => $e,
            AnyPolicy::Clock($p) => $e,
            AnyPolicy::Lfu($p) => $e,
            AnyPolicy::S3Fifo($p) => $e,
            AnyPolicy::TwoQ($p) => $e,
            AnyPolicy::Slru($p) => $e,
            AnyPolicy::Arc($p) => $e,
            AnyPolicy::WTinyLfu($p) => $e,
        }
    };
}

impl<L: Link> EvictionPolicy for AnyPolicy<L> {
    #[inline]
    fn miss(&mut self, key: u64) -> bool {
        dispatch!(self, p => p.miss(key))
    }
    #[inline]
    fn insert(&mut self, slot: usize, key: u64) {
        dispatch!(self, p => p.insert(slot, key))
    }
    #[inline]
    fn hit(&mut self, slot: usize) {
        dispatch!(self, p => p.hit(slot))
    }
    #[inline]
    fn evict(&mut self) -> usize {
        dispatch!(self, p => p.evict())
    }
    #[inline]
    fn remove(&mut self, slot: usize) {
        dispatch!(self, p => p.remove(slot))
    }
    #[inline]
    fn overflow(&mut self) -> Option<usize> {
        dispatch!(self, p => p.overflow())
    }
    fn meta_bytes(&self) -> usize {
        dispatch!(self, p => p.meta_bytes())
    }
    #[inline]
    fn prefetch(&self, key: u64) {
        dispatch!(self, p => p.prefetch(key))
    }
    fn dense_keys(&mut self, n_keys: usize) {
        dispatch!(self, p => p.dense_keys(n_keys))
    }
    fn digested_keys(&mut self) {
        dispatch!(self, p => p.digested_keys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_ignore_case_and_separators() {
        assert_eq!("LRU".parse::<PolicyKind>().unwrap(), PolicyKind::Lru);
        assert_eq!("Si-e_ve".parse::<PolicyKind>().unwrap(), PolicyKind::Sieve);
        assert_eq!("S3-FIFO".parse::<PolicyKind>().unwrap(), PolicyKind::S3Fifo);
        assert_eq!(
            "W-TinyLFU".parse::<PolicyKind>().unwrap(),
            PolicyKind::WTinyLfu
        );
        for two_q in ["2q", "2Q", "twoq", "Two-Q"] {
            assert_eq!(two_q.parse::<PolicyKind>().unwrap(), PolicyKind::TwoQ);
        }
        assert!("belady2".parse::<PolicyKind>().is_err());
        // Every name parses back to its policy.
        for p in PolicyKind::ALL {
            assert_eq!(p.name().parse::<PolicyKind>().unwrap(), *p);
        }
    }

    /// A store tier takes the same spellings, refuses simulation-only
    /// policies, and its errors list only what a store tier accepts.
    #[test]
    fn store_tiers_take_the_same_names_and_list_only_theirs() {
        assert_eq!(
            PolicyKind::parse_for_store("S3-FIFO"),
            Ok(PolicyKind::S3Fifo)
        );
        for bad in ["2q", "twoq", "SLRU", "w-tinylfu", "bogus"] {
            let e = PolicyKind::parse_for_store(bad).unwrap_err();
            assert!(
                e.ends_with("the store's tiers accept lru, fifo, clock, lfu, arc, s3fifo, sieve"),
                "{e}"
            );
            for sim_only in ["slru", "2q", "wtinylfu", "twoq"] {
                assert!(!e.contains(&format!(" {sim_only},")), "{e}");
            }
        }
        #[derive(serde::Deserialize)]
        struct Tier {
            #[serde(deserialize_with = "PolicyKind::deserialize_for_store")]
            policy: PolicyKind,
        }
        let t: Tier = toml::from_str("policy = \"Sieve\"").unwrap();
        assert_eq!(t.policy, PolicyKind::Sieve);
        let e = toml::from_str::<Tier>("policy = \"2Q\"")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("runs in simulation only"), "{e}");
        // The simulator's own policies too (they were "unknown").
        for name in ["belady", "OPT", "min", "LRU_32way", "lfu-32way"] {
            let e = PolicyKind::parse_for_store(name).unwrap_err();
            assert!(
                e.contains("runs in simulation only") && e.contains("sieve"),
                "{e}"
            );
        }
        // Serialised as the command-line name, and read back.
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Any {
            policy: PolicyKind,
        }
        let text = toml::to_string(&Any {
            policy: PolicyKind::TwoQ,
        })
        .unwrap();
        assert_eq!(text.trim(), "policy = \"2q\"");
        assert_eq!(
            toml::from_str::<Any>(&text).unwrap().policy,
            PolicyKind::TwoQ
        );
    }
}
