//! Device profiles: the latency, bandwidth, IOPS and parallelism of the
//! device behind each tier, and the time a batch's accesses take on it.
//!
//! One format for every tool: `emb-replay calibrate` writes it,
//! `emb-replay simulate --profile` and `emb-locality plan --profile` read
//! it. A profile file is TOML with a table per tier (`[dram]`, `[pmem]`,
//! `[ssd]`, or any tier name of a hierarchy), each holding the five fields
//! of [`DeviceProfile`]:
//!
//! ```toml
//! [ssd]
//! latency_us = 80.0      # one access alone (queue depth 1), microseconds
//! read_gbps = 6.9        # sequential read bandwidth, 10^9 bytes per second
//! write_gbps = 4.1       # sequential write bandwidth
//! iops = 1.0e6           # random accesses per second at full parallelism
//! parallelism = 64.0     # accesses in flight at once
//! ```

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Latency, bandwidth and IOPS of one device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// Latency of one access with nothing else in flight, microseconds.
    pub latency_us: f64,
    /// Sequential read bandwidth, GB/s (10^9 bytes per second).
    pub read_gbps: f64,
    /// Sequential write bandwidth, GB/s.
    pub write_gbps: f64,
    /// Random accesses per second with `parallelism` in flight (4 KiB reads
    /// for an SSD, row reads otherwise).
    pub iops: f64,
    /// Accesses in flight at once.
    pub parallelism: f64,
}

/// The built-in profiles, by name (sources in docs/replay.md).
pub const BUILTINS: [&str; 4] = ["dram", "optane-pmem", "optane-ssd", "nand-nvme"];

impl DeviceProfile {
    /// A built-in profile by name: one of [`BUILTINS`].
    pub fn builtin(name: &str) -> Option<DeviceProfile> {
        let p = |latency_us, read_gbps, write_gbps, iops, parallelism| DeviceProfile {
            latency_us,
            read_gbps,
            write_gbps,
            iops,
            parallelism,
        };
        match name {
            "dram" => Some(p(0.1, 20.0, 15.0, 1e9, 10.0)),
            "optane-pmem" => Some(p(0.305, 6.6, 2.3, 1e8, 10.0)),
            "optane-ssd" => Some(p(10.0, 7.2, 6.2, 1.5e6, 64.0)),
            "nand-nvme" => Some(p(80.0, 6.9, 4.1, 1.0e6, 64.0)),
            _ => None,
        }
    }

    /// The built-in a tier of this name gets by default: `optane-pmem` for
    /// `pmem`, `nand-nvme` for `ssd`, `dram` otherwise.
    pub fn default_for(tier: &str) -> DeviceProfile {
        DeviceProfile::builtin(default_name(tier)).expect("a built-in")
    }

    /// Seconds for `ops` operations moving `read` and `written` bytes: the
    /// largest of the IOPS, bandwidth and latency/parallelism bounds.
    pub fn seconds(&self, ops: f64, read: f64, written: f64) -> f64 {
        if ops == 0.0 && read == 0.0 && written == 0.0 {
            return 0.0;
        }
        let by_iops = ops / self.iops;
        let by_bw = read / (self.read_gbps * 1e9) + written / (self.write_gbps * 1e9);
        let by_lat = ops * self.latency_us * 1e-6 / self.parallelism.max(1.0);
        by_iops.max(by_bw).max(by_lat)
    }

    /// Every field finite and positive.
    fn check(&self) -> Result<(), String> {
        for (k, v) in [
            ("latency_us", self.latency_us),
            ("read_gbps", self.read_gbps),
            ("write_gbps", self.write_gbps),
            ("iops", self.iops),
            ("parallelism", self.parallelism),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{k} = {v} is not a positive number"));
            }
        }
        Ok(())
    }
}

/// Device profiles by tier name, as a profile file holds them.
pub type Profiles = BTreeMap<String, DeviceProfile>;

/// Read a profile file. The error names the file and, for a bad value,
/// the tier and field.
pub fn read_profiles(path: &Path) -> Result<Profiles, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let p: Profiles = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    for (tier, d) in &p {
        d.check()
            .map_err(|e| format!("{}: [{tier}] {e}", path.display()))?;
    }
    Ok(p)
}

/// A profile file's text: `header` as comment lines, then the tables.
pub fn profiles_toml(p: &Profiles, header: &str) -> String {
    let mut o: String = header.lines().map(|l| format!("# {l}\n")).collect();
    o.push_str(&toml::to_string_pretty(p).expect("profiles always serialise"));
    o
}

/// The built-in profile a tier named `tier` runs on by default:
/// `optane-pmem` for `pmem`, `nand-nvme` for `ssd`, `dram` otherwise.
pub fn default_name(tier: &str) -> &'static str {
    match tier {
        "pmem" => "optane-pmem",
        "ssd" => "nand-nvme",
        _ => "dram",
    }
}

/// The device of each of `tiers`: the profile file's entry for the tier,
/// else the built-in `chosen` names for it (`--devices TIER=PROFILE`), else
/// [`DeviceProfile::default_for`] the tier.
pub fn resolve(
    tiers: &[&str],
    file: &Profiles,
    chosen: &HashMap<String, String>,
) -> Result<Vec<DeviceProfile>, String> {
    tiers
        .iter()
        .map(|&tier| {
            if let Some(p) = file.get(tier) {
                return Ok(*p);
            }
            match chosen.get(tier) {
                Some(name) => DeviceProfile::builtin(name).ok_or_else(|| {
                    format!(
                        "unknown profile {name:?} for {tier} (built-in: {})",
                        BUILTINS.join(", ")
                    )
                }),
                None => Ok(DeviceProfile::default_for(tier)),
            }
        })
        .collect()
}

/// The devices a store's three tiers run on, for the planner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TierDevices {
    /// DRAM.
    pub dram: DeviceProfile,
    /// PMem.
    pub pmem: DeviceProfile,
    /// SSD.
    pub ssd: DeviceProfile,
}

impl Default for TierDevices {
    /// The built-ins `dram`, `optane-pmem` and `nand-nvme`.
    fn default() -> TierDevices {
        TierDevices {
            dram: DeviceProfile::default_for("dram"),
            pmem: DeviceProfile::default_for("pmem"),
            ssd: DeviceProfile::default_for("ssd"),
        }
    }
}

impl TierDevices {
    /// [`resolve`] for the tiers `dram`, `pmem` and `ssd`.
    pub fn resolve(file: &Profiles, chosen: &HashMap<String, String>) -> Result<Self, String> {
        let v = resolve(&["dram", "pmem", "ssd"], file, chosen)?;
        Ok(TierDevices {
            dram: v[0],
            pmem: v[1],
            ssd: v[2],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_round_trip_and_bad_values_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p: Profiles = [("dram", "dram"), ("ssd", "optane-ssd")]
            .into_iter()
            .map(|(t, b)| (t.to_string(), DeviceProfile::builtin(b).unwrap()))
            .collect();
        let path = dir.path().join("profile.toml");
        std::fs::write(&path, profiles_toml(&p, "measured\nsomewhere")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("# measured\n# somewhere\n[dram]"),
            "{text}"
        );
        assert_eq!(read_profiles(&path).unwrap(), p);
        let devs = TierDevices::resolve(&p, &HashMap::new()).unwrap();
        assert_eq!(devs.ssd, DeviceProfile::builtin("optane-ssd").unwrap());
        assert_eq!(devs.pmem, DeviceProfile::builtin("optane-pmem").unwrap());
        std::fs::write(&path, text.replace("iops = 1000000000.0", "iops = -1.0")).unwrap();
        let e = read_profiles(&path).unwrap_err();
        assert!(e.contains("[dram] iops = -1"), "{e}");
        std::fs::write(&path, "[dram]\nbandwidth_gbps = 1.0\n").unwrap();
        assert!(read_profiles(&path).unwrap_err().contains("profile.toml"));
        let chosen = HashMap::from([("ssd".to_string(), "floppy".to_string())]);
        assert!(resolve(&["ssd"], &Profiles::new(), &chosen)
            .unwrap_err()
            .contains("nand-nvme"));
    }

    #[test]
    fn time_is_the_tightest_bound() {
        let d = DeviceProfile::builtin("nand-nvme").unwrap();
        assert_eq!(d.seconds(0.0, 0.0, 0.0), 0.0);
        // 64 reads of 4 KiB: latency-bound (80 us at 64 in flight).
        assert!((d.seconds(64.0, 64.0 * 4096.0, 0.0) - 80e-6).abs() < 1e-12);
        // A million reads: 80 us at 64 in flight (1.25 s) is slower than
        // a million IOPS (1 s).
        assert!((d.seconds(1e6, 0.0, 0.0) - 1.25).abs() < 1e-9);
    }
}
