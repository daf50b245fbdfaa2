//! The `store.toml` of a [`Plan`]: the [`embtier::StoreConfig`] it
//! describes, and that config's text as a person would write it: sizes in
//! binary units rounded to three significant digits (never above what the
//! plan gave), floats as written (`lr = 0.01`), defaults left out, and a
//! comment per table saying why it is pinned or cached.

use std::fmt::Write as _;

use embtier::{ByteSize, MemoryKind, Placement, PolicyKind, StoreConfig, TableConfig, TierConfig};

use super::plan::{Budgets, Decision, Plan, TablePlan};

/// The choices a plan leaves to the user: the tiers' policies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policies {
    /// Of the DRAM caches.
    pub dram: PolicyKind,
    /// Of the PMem caches.
    pub pmem: PolicyKind,
}

impl Default for Policies {
    /// SIEVE for DRAM (`docs/tuning.md`), LRU for PMem.
    fn default() -> Policies {
        Policies {
            dram: PolicyKind::Sieve,
            pmem: PolicyKind::Lru,
        }
    }
}

/// `bytes` rounded down to three significant digits of the largest binary
/// unit it reaches (`459KiB`, `1.99MiB`), and the text that says so;
/// below 1 KiB, exact.
pub fn round_size(bytes: u64) -> (u64, String) {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (name, unit) in UNITS {
        if bytes < unit {
            continue;
        }
        let v = bytes as f64 / unit as f64;
        let decimals = if v >= 100.0 {
            0
        } else if v >= 10.0 {
            1
        } else {
            2
        };
        let scale = 10f64.powi(decimals);
        // A size text means the truncation of its value times the unit
        // (`ByteSize`), so one byte more finds the text of a size this
        // function made (it rounds to itself); never above `bytes`.
        let mut q = ((bytes + 1) as f64 / unit as f64 * scale).floor();
        loop {
            let text = trim_zeros(&format!("{:.*}{name}", decimals as usize, q / scale));
            let exact: ByteSize = text.parse().expect("a size this module wrote");
            if exact.0 <= bytes {
                return (exact.0, text);
            }
            q -= 1.0;
        }
    }
    (bytes, bytes.to_string())
}

/// `1.50MiB` -> `1.5MiB`, `2.0GiB` -> `2GiB`.
fn trim_zeros(s: &str) -> String {
    let split = s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num = if num.contains('.') {
        num.trim_end_matches('0').trim_end_matches('.')
    } else {
        num
    };
    format!("{num}{unit}")
}

/// A size for the text: [`ByteSize`]'s unit form where exact, else bytes.
fn size_text(b: u64) -> String {
    let (r, text) = round_size(b);
    if r == b && !text.chars().all(|c| c.is_ascii_digit()) {
        format!("{text:?}")
    } else {
        b.to_string()
    }
}

/// A cache share of `rows` rows of `row_bytes`: rounded down, but never
/// below one row.
fn share(rows: u64, row_bytes: u64) -> u64 {
    let (r, _) = round_size(rows * row_bytes);
    r.max(row_bytes)
}

/// The store config of plan `p`. `shapes[i]` gives table i's dim, element
/// type and optimizer (and its rows, when they exceed the plan's);
/// `budgets` the tier capacities asked for.
pub fn store_config(
    p: &Plan,
    shapes: &[TableConfig],
    budgets: Budgets,
    policies: Policies,
) -> StoreConfig {
    let mut cfg = StoreConfig::default();
    let (mut dram, mut pmem) = (0u64, 0u64);
    for (t, shape) in p.tables.iter().zip(shapes) {
        let mut tc = shape.clone();
        tc.rows = tc.rows.max(t.rows).max(1);
        let rb = t.row_bytes;
        match t.placement {
            Decision::PinnedDram => {
                tc.placement = Placement::Pinned(MemoryKind::Dram);
                dram += tc.rows * rb;
            }
            Decision::PinnedPmem => {
                tc.placement = Placement::Pinned(MemoryKind::Pmem);
                pmem += tc.rows * rb;
            }
            Decision::Cached => {
                // Every cached table stages rows through at least one DRAM row.
                let d = share(t.dram_rows.max(1), rb);
                tc.dram_bytes = Some(ByteSize(d));
                dram += d;
                if budgets.pmem > 0 {
                    let m = if t.pmem_rows > 0 {
                        share(t.pmem_rows, rb)
                    } else {
                        0
                    };
                    tc.pmem_bytes = Some(ByteSize(m));
                    pmem += m;
                }
            }
        }
        cfg.tables.push(tc);
    }
    cfg.tiers = vec![TierConfig::dram(dram.max(budgets.dram), policies.dram)];
    if budgets.pmem > 0 || pmem > 0 {
        cfg.tiers.push(TierConfig::pmem(
            None,
            pmem.max(budgets.pmem),
            policies.pmem,
        ));
    }
    cfg
}

/// Why table `t` is placed as it is, in a line.
fn reason(t: &TablePlan, tc: &TableConfig) -> String {
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let size = |b: u64| round_size(b).1;
    match t.placement {
        Decision::PinnedDram => format!(
            "pinned to DRAM: all {} rows ({}) serve every one of its {} accesses for less DRAM than a cache as good would take",
            tc.rows,
            size(tc.rows * t.row_bytes),
            t.accesses
        ),
        Decision::PinnedPmem => format!(
            "pinned to PMem: all {} rows ({}) serve its {} accesses from PMem; the DRAM went to tables it buys more hits for",
            tc.rows,
            size(tc.rows * t.row_bytes),
            t.accesses
        ),
        Decision::Cached => {
            let d = tc.dram_bytes.map_or(0, |b| b.0);
            let mut s = format!(
                "cached: {} of DRAM ({} rows) serve {} of its {} accesses",
                size(d),
                d / t.row_bytes,
                pct(t.dram_hit_ratio),
                t.accesses
            );
            if let Some(m) = tc.pmem_bytes.filter(|m| m.0 > 0) {
                let _ = write!(
                    s,
                    ", {} of PMem ({} rows) {}",
                    size(m.0),
                    m.0 / t.row_bytes,
                    pct(t.pmem_hit_ratio)
                );
            }
            let _ = write!(s, ", SSD the other {}", pct(t.ssd_ratio));
            if t.dram_rows <= 1 {
                s.push_str(" (one DRAM row, the least a cached table takes: other tables buy more hits per byte)");
            }
            s
        }
    }
}

/// A float as a person writes it: an f32 value in its shortest form.
fn float(x: f64) -> String {
    let f = x as f32;
    // An f32 setting comes as the f32's value or as its shortest decimal
    // (the store writes that: `embtier::optim`'s `short_f32`).
    if f as f64 == x || f.to_string().parse::<f64>().ok() == Some(x) {
        if f != 0.0 && f.abs() < 1e-3 {
            return format!("{f:e}");
        }
        let s = f.to_string();
        if s.contains(['.', 'e', 'i', 'N']) {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        x.to_string()
    }
}

/// A TOML value on one line, floats by [`float`].
fn inline(v: &toml::Value) -> String {
    match v {
        toml::Value::Float(f) => float(*f),
        toml::Value::Table(t) => {
            // A tagged enum's tag first (`kind`), then the fields.
            let mut entries: Vec<(&String, &toml::Value)> = t.iter().collect();
            entries.sort_by_key(|(k, _)| *k != "kind");
            let parts: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{k} = {}", inline(v)))
                .collect();
            format!("{{ {} }}", parts.join(", "))
        }
        other => other.to_string(),
    }
}

/// The text of `cfg` (made by [`store_config`] from `p`): `header` as
/// comment lines, the tiers, then each table with a comment saying why it
/// is placed so. [`embtier::StoreConfig::from_toml`] reads it back equal to
/// `cfg`.
pub fn store_toml(p: &Plan, cfg: &StoreConfig, header: &str) -> String {
    let mut o: String = header.lines().map(|l| format!("# {l}\n")).collect();
    // A plan's tiers are one DRAM tier and at most one PMem tier: the
    // `[dram]`/`[pmem]` form a person would write.
    for t in &cfg.tiers {
        let _ = writeln!(
            o,
            "\n[{}]\ncapacity = {}\npolicy = \"{}\"",
            t.kind,
            size_text(t.capacity.0),
            t.policy
        );
    }
    let default = TableConfig::new("", 1, 1);
    for (t, tc) in p.tables.iter().zip(&cfg.tables) {
        let _ = writeln!(o, "\n# {}: {}", tc.name, reason(t, tc));
        let _ = writeln!(
            o,
            "[[tables]]\nname = {:?}\nrows = {}\ndim = {}",
            tc.name, tc.rows, tc.dim
        );
        if tc.elem != default.elem {
            let _ = writeln!(
                o,
                "elem = {}",
                inline(&toml::Value::try_from(tc.elem).expect("an element type serialises"))
            );
        }
        if tc.placement != Placement::Cached {
            let _ = writeln!(
                o,
                "placement = {}",
                inline(&toml::Value::try_from(tc.placement).expect("a placement serialises"))
            );
        }
        if let Some(b) = tc.dram_bytes {
            let _ = writeln!(o, "dram_bytes = {}", size_text(b.0));
        }
        if let Some(b) = tc.pmem_bytes {
            let _ = writeln!(o, "pmem_bytes = {}", size_text(b.0));
        }
        if tc.optimizer != default.optimizer {
            let _ = writeln!(
                o,
                "optimizer = {}",
                inline(&toml::Value::try_from(tc.optimizer).expect("an optimizer serialises"))
            );
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locality::{analyze, Options};
    use crate::profile::TierDevices;
    use crate::trace::gen::{GenSpec, GenTable};

    /// The text reads back as the config it was written from, with every
    /// table explained.
    #[test]
    fn text_reads_back_as_the_config() {
        let g = |name: &str, rows, pooling, alpha| GenTable {
            name: name.into(),
            rows,
            dim: 16,
            pooling,
            alpha,
            drift: 0.0,
        };
        let t = GenSpec {
            seed: 2,
            batches: 100,
            batch_size: 128,
            tables: vec![
                g("tiny", 60, 2.0, 0.5),
                g("big", 100_000, 4.0, 1.1),
                g("flat", 100_000, 1.0, 0.0),
            ],
        }
        .generate();
        let r = analyze(&t, &Options::default());
        let shapes: Vec<TableConfig> = t
            .tables
            .iter()
            .map(|tt| {
                TableConfig::new(tt.name.clone(), tt.rows, 16)
                    .elem(embtier::Elem::Bf16)
                    .optimizer(embtier::Optimizer::RowwiseAdagrad {
                        lr: 0.05,
                        eps: 1e-8,
                        weight_decay: 0.0,
                    })
            })
            .collect();
        let rb: Vec<u64> = shapes.iter().map(|c| c.row_bytes()).collect();
        for pmem in [0u64, 1 << 20] {
            let budgets = Budgets {
                dram: 300 << 10,
                pmem,
            };
            let p = super::super::plan::plan(&r, &rb, budgets, &TierDevices::default(), 100);
            let cfg = store_config(&p, &shapes, budgets, Policies::default());
            cfg.validate().unwrap();
            let text = store_toml(&p, &cfg, "a plan\nof tests");
            assert_eq!(StoreConfig::from_toml(&text).unwrap(), cfg, "{text}");
            assert!(text.starts_with("# a plan\n# of tests\n"), "{text}");
            assert!(
                text.contains("lr = 0.05") && !text.contains("0.0500000"),
                "{text}"
            );
            assert_eq!(text.matches("[[tables]]").count(), 3);
            for name in ["tiny", "big", "flat"] {
                assert!(
                    text.contains(&format!("# {name}: pinned"))
                        || text.contains(&format!("# {name}: cached")),
                    "{name}: {text}"
                );
            }
            assert!(text.contains("policy = \"sieve\""), "{text}");
        }
    }

    #[test]
    fn sizes_round_down_to_three_digits() {
        assert_eq!(round_size(470_528), (459 << 10, "459KiB".into()));
        assert_eq!(round_size(1022 << 10), (1022 << 10, "1022KiB".into()));
        assert_eq!(round_size(3 << 20), (3 << 20, "3MiB".into()));
        assert_eq!(round_size((3 << 20) + (1 << 19)).1, "3.5MiB");
        assert_eq!(round_size(2_000_000).1, "1.9MiB");
        assert_eq!(round_size(700), (700, "700".into()));
        for b in [1u64, 1023, 1024, 5000, 15_616, 123_456_789, 1 << 40] {
            let (r, t) = round_size(b);
            assert!(r <= b && r as f64 >= b as f64 * 0.99, "{b}: {r}");
            assert_eq!(t.parse::<ByteSize>().unwrap().0, r, "{t}");
            // A rounded size rounds to itself, with the same text.
            assert_eq!(round_size(r), (r, t), "{b}");
        }
        assert_eq!(size_text(256), "256");
        assert_eq!(size_text(15_564), "\"15.2KiB\"");
        assert_eq!(size_text(15_616), "15616");
        assert_eq!(float(0.01f32 as f64), "0.01");
        assert_eq!(float(0.0), "0.0");
        assert_eq!(float(1e-8f32 as f64), "1e-8");
        assert_eq!(
            "x = 1e-8".parse::<toml::Table>().unwrap()["x"].as_float(),
            Some(1e-8)
        );
    }
}
