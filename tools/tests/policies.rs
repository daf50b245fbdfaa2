//! Every policy name the docs list works in every subcommand that takes
//! policies: `emb-replay simulate --policies`, a tier of `--tiers`, and a
//! tier of the `store.toml` that `emb-replay run` reads where the store
//! runs the policy (elsewhere the error names the policies it accepts).
//! The names are read from `docs/replay.md` (its policy list and its
//! semantics table), so a policy added to the docs is covered at once.

mod common;

use std::path::Path;

use common::{gen_trace, replay, stderr};

/// Backquoted names in `text`.
fn quoted(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The policy names of docs/replay.md: the "**Policies** are named" bullet,
/// and the first column of the table under "## Policies and their
/// semantics". Both must list the same names.
fn documented() -> Vec<String> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/replay.md"))
            .unwrap();
    let bullet = doc
        .split("**Policies** are named")
        .nth(1)
        .expect("docs/replay.md lists the policies")
        .split(". ")
        .next()
        .unwrap();
    let listed = quoted(bullet);
    let table = doc
        .split("## Policies and their semantics")
        .nth(1)
        .expect("docs/replay.md has the semantics table");
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and rule
        .collect();
    let tabled: Vec<String> = rows
        .iter()
        .flat_map(|r| quoted(r.split('|').nth(1).unwrap()))
        .collect();
    assert!(listed.len() >= 13, "{listed:?}");
    assert_eq!(listed, tabled, "the bullet and the table disagree");
    listed
}

#[test]
fn every_documented_policy_runs_in_every_subcommand() {
    let names = documented();
    let dir = tempfile::tempdir().unwrap();
    let tr = dir.path().join("t.etrace");
    gen_trace(&tr, 8, 64, Some("a:3000:2:1.0"));
    let tr = tr.to_str().unwrap();
    let help = String::from_utf8_lossy(&replay(&["simulate", "--help"]).stdout).into_owned();
    let store_accepts: Vec<&str> = embtier::PolicyKind::store_policies()
        .map(|p| p.name())
        .collect();
    for name in &names {
        assert!(help.contains(name.as_str()), "simulate --help omits {name}");
        // simulate --policies, as written and in another spelling.
        for spelling in [name.clone(), name.to_uppercase().replace('-', "_")] {
            let o = replay(&[
                "simulate",
                tr,
                "--policies",
                &spelling,
                "--sizes",
                "128",
                "--csv",
            ]);
            assert!(o.status.success(), "--policies {spelling}: {}", stderr(&o));
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.contains(&format!("\n{name},128,")), "{spelling}: {out}");
        }
        let Ok(kind) = name.parse::<embtier::PolicyKind>() else {
            // Offline policies run in sweeps only; a tier refuses them,
            // naming what a tier runs.
            let o = replay(&["simulate", tr, "--tiers", &format!("dram:{name}:100,ssd")]);
            assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
            assert!(stderr(&o).contains("a tier runs lru,"), "{}", stderr(&o));
            continue;
        };
        // A tier of a simulated hierarchy.
        let tiers = format!("dram:{name}:200,pmem:{name}:400,ssd");
        let o = replay(&["simulate", tr, "--tiers", &tiers, "--json"]);
        assert!(o.status.success(), "--tiers {tiers}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["results"][0]["tiers"][0]["policy"], kind.name());
        // A tier of the real store.
        let cfg = dir.path().join("store.toml");
        std::fs::write(
            &cfg,
            format!(
                "[dram]\ncapacity = \"64KiB\"\npolicy = \"{}\"\n[ssd]\nio_engine = \"psync\"\n",
                name.to_uppercase()
            ),
        )
        .unwrap();
        let o = replay(&["run", tr, "--config", cfg.to_str().unwrap(), "--json"]);
        if store_accepts.contains(&kind.name()) {
            assert!(o.status.success(), "run with {name}: {}", stderr(&o));
        } else {
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "run with {name}: {e}");
            assert_eq!(e.trim().lines().count(), 1, "{e}");
            assert!(e.contains("simulation only"), "{e}");
            let accepted = e.rsplit("accept ").next().unwrap().trim();
            assert_eq!(accepted, store_accepts.join(", "), "{e}");
        }
    }
}

/// The CLI and `store.toml` take the same spellings, and an unknown name's
/// error lists only what is accepted where it was given.
#[test]
fn one_vocabulary_for_cli_and_store_toml() {
    let dir = tempfile::tempdir().unwrap();
    let tr = dir.path().join("t.etrace");
    gen_trace(&tr, 4, 32, Some("a:1000:1:1.0"));
    let tr = tr.to_str().unwrap();
    let cfg = dir.path().join("store.toml");
    for spelling in ["S3-FIFO", "s3_fifo", "Sieve", "LRU"] {
        let o = replay(&["simulate", tr, "--policies", spelling, "--sizes", "64"]);
        assert!(o.status.success(), "{spelling}: {}", stderr(&o));
        std::fs::write(
            &cfg,
            format!("[dram]\ncapacity = \"64KiB\"\npolicy = \"{spelling}\"\n[pmem]\ncapacity = \"64KiB\"\npolicy = \"{spelling}\"\n[ssd]\nio_engine = \"psync\"\n"),
        )
        .unwrap();
        let o = replay(&["run", tr, "--config", cfg.to_str().unwrap()]);
        assert!(o.status.success(), "{spelling}: {}", stderr(&o));
    }
    // 2Q by either name in both places: the simulator runs it, the store
    // refuses it for a reason, not as an unknown name.
    for spelling in ["2q", "twoq", "2Q"] {
        let o = replay(&["simulate", tr, "--policies", spelling, "--sizes", "64"]);
        assert!(o.status.success(), "{spelling}: {}", stderr(&o));
        std::fs::write(&cfg, format!("[dram]\npolicy = \"{spelling}\"\n")).unwrap();
        let o = replay(&["run", tr, "--config", cfg.to_str().unwrap()]);
        assert!(
            stderr(&o).contains("runs in simulation only"),
            "{}",
            stderr(&o)
        );
    }
    // Unknown names: the store's error lists the store's policies only;
    // simulate's lists everything it runs.
    std::fs::write(&cfg, "[dram]\npolicy = \"mru\"\n").unwrap();
    let e = stderr(&replay(&["run", tr, "--config", cfg.to_str().unwrap()]));
    assert!(
        e.trim_end()
            .ends_with("the store's tiers accept lru, fifo, clock, lfu, arc, s3fifo, sieve"),
        "{e}"
    );
    let o = replay(&["simulate", tr, "--policies", "mru"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("belady") && stderr(&o).contains("wtinylfu"),
        "{}",
        stderr(&o)
    );
}
