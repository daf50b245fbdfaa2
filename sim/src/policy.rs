//! Every policy the simulator runs, by name: the store's online policies
//! ([`PolicyKind`], the engine's own code), Belady's MIN, and FBGEMM-style
//! set-associative caches. One vocabulary for every tool: names are
//! compared after [`embtier::canonical_name`] (case, `-` and `_` ignored).

use std::fmt;
use std::str::FromStr;

use embtier::PolicyKind;

use crate::offline::{belady, set_associative, SetPolicy};
use crate::{simulate_dense, simulate_dense_keyed, SimResult};

/// Ways per set of the set-associative caches (`lru-32way`, `lfu-32way`).
pub const WAYS: usize = 32;

/// A policy the simulator runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SimPolicy {
    /// One of the store's policies.
    Online(PolicyKind),
    /// Belady's MIN (offline: it reads the future).
    Belady,
    /// A set-associative cache of [`WAYS`] ways per set.
    SetAssoc(SetPolicy),
}

impl SimPolicy {
    /// Every policy, online ones first, in the order the docs list them.
    pub fn all() -> Vec<SimPolicy> {
        PolicyKind::ALL
            .iter()
            .map(|&k| SimPolicy::Online(k))
            .chain([
                SimPolicy::Belady,
                SimPolicy::SetAssoc(SetPolicy::Lru),
                SimPolicy::SetAssoc(SetPolicy::Lfu),
            ])
            .collect()
    }

    /// Its name, as the tools print it and parse it back.
    pub fn name(self) -> &'static str {
        match self {
            SimPolicy::Online(k) => k.name(),
            SimPolicy::Belady => "belady",
            SimPolicy::SetAssoc(SetPolicy::Lru) => "lru-32way",
            SimPolicy::SetAssoc(SetPolicy::Lfu) => "lfu-32way",
        }
    }

    /// Every name, comma separated (for help texts and errors).
    pub fn names() -> String {
        let v: Vec<&str> = SimPolicy::all().into_iter().map(SimPolicy::name).collect();
        v.join(", ")
    }

    /// The store policy this is, if it is one (a tier of a hierarchy runs
    /// only these).
    pub fn online(self) -> Option<PolicyKind> {
        match self {
            SimPolicy::Online(k) => Some(k),
            _ => None,
        }
    }

    /// Run a cache of `size` objects over `keys`; `dense` is `keys`
    /// densified to `0..n` ([`crate::densify()`]), which the policies that
    /// do not hash key values run on.
    pub fn run(self, size: u64, keys: &[u64], dense: &[u32], n: usize) -> SimResult {
        let size = size as usize;
        match self {
            // W-TinyLFU's sketch hashes key values: keep the trace's.
            SimPolicy::Online(k) if k.hashes_keys() => {
                simulate_dense_keyed(k, size, dense, keys, n)
            }
            SimPolicy::Online(k) => simulate_dense(k, size, dense, n),
            SimPolicy::Belady => belady(keys, size),
            SimPolicy::SetAssoc(p) => set_associative(keys, size, WAYS, p),
        }
    }
}

impl fmt::Display for SimPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SimPolicy {
    type Err = String;
    /// A name of [`SimPolicy::names`] in any case, `-` and `_` ignored;
    /// also `min` and `opt` for Belady, `twoq` for 2Q.
    fn from_str(s: &str) -> Result<SimPolicy, String> {
        match embtier::canonical_name(s).as_str() {
            "belady" | "min" | "opt" => Ok(SimPolicy::Belady),
            "lru32way" => Ok(SimPolicy::SetAssoc(SetPolicy::Lru)),
            "lfu32way" => Ok(SimPolicy::SetAssoc(SetPolicy::Lfu)),
            _ => s
                .parse::<PolicyKind>()
                .map(SimPolicy::Online)
                .map_err(|_| format!("unknown policy {s:?} (known: {})", SimPolicy::names())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back() {
        for p in SimPolicy::all() {
            assert_eq!(p.name().parse::<SimPolicy>(), Ok(p));
            assert_eq!(p.name().to_uppercase().parse::<SimPolicy>(), Ok(p));
        }
        assert_eq!(
            "W-TinyLFU".parse(),
            Ok(SimPolicy::Online(PolicyKind::WTinyLfu))
        );
        assert_eq!("LRU_32way".parse(), Ok(SimPolicy::SetAssoc(SetPolicy::Lru)));
        let e = "bogus".parse::<SimPolicy>().unwrap_err();
        assert!(e.contains("wtinylfu") && e.contains("lfu-32way"), "{e}");
    }

    /// Every policy runs, and none beats MIN (at a size the 32-way caches
    /// hold exactly: they round capacity up to whole sets).
    #[test]
    fn every_policy_runs_and_min_bounds_them() {
        let keys: Vec<u64> = (0..5000u64).map(|i| (i * i) % 701).collect();
        let (dense, n) = crate::densify(&keys);
        let min = SimPolicy::Belady.run(64, &keys, &dense, n);
        for p in SimPolicy::all() {
            let r = p.run(64, &keys, &dense, n);
            assert_eq!(r.hits + r.misses, keys.len() as u64, "{p}");
            assert!(min.misses <= r.misses, "{p}");
        }
    }
}
