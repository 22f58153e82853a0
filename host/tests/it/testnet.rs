//! The short multi-process testnet run, in CI: 5 `modnode run` processes behind the
//! fault-injecting relay, one kill and restart, one partition and heal, one pause, deposits
//! flowing, one deposits upgrade voted at a height — every invariant checked continuously by
//! the runner, and asserted here: no violation, every node converged on one head with every
//! deposit exactly once, the upgrade active everywhere, traffic through the relay (dropped
//! during the partition).

use modnode::testnet::manifest::Manifest;
use modnode::testnet::runner::{self, RunOptions};

/// The manifest of `examples/testnet/short.toml`, shared with the CLI.
const SHORT: &str = include_str!("../../../examples/testnet/short.toml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_perturbed_testnet_keeps_every_invariant() {
    let manifest = Manifest::parse(SHORT, "examples/testnet/short.toml").unwrap();
    let out = tempfile::tempdir().unwrap();
    let outcome = runner::run(
        manifest.clone(),
        RunOptions {
            binary: env!("CARGO_BIN_EXE_modnode").into(),
            out_dir: out.path().to_path_buf(),
            progress: true,
        },
    )
    .await
    .unwrap();
    let logs = || {
        (0..manifest.nodes)
            .map(|i| out.path().join("logs").join(format!("node-{i}.log")))
            .map(|p| {
                format!(
                    "{}: {} bytes",
                    p.display(),
                    p.metadata().map_or(0, |m| m.len())
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        outcome.violations.is_empty(),
        "{:#?}\n{}",
        outcome.violations,
        logs()
    );
    assert!(
        outcome.converged,
        "no convergence: {:?}\n{}",
        outcome.final_nodes,
        logs()
    );
    for kind in ["kill", "partition-minority", "pause", "deposits-upgrade"] {
        assert_eq!(
            outcome.perturbations.get(kind),
            Some(&1),
            "{kind}: {:?}",
            outcome.perturbations
        );
    }
    // Deposits flowed and every node applied each exactly once (the checker compares balance
    // sums with the accepted amounts; here the counts).
    assert!(
        outcome.deposits_accepted >= 20,
        "{} deposits",
        outcome.deposits_accepted
    );
    for (i, last) in outcome.final_nodes.iter().enumerate() {
        let (head, deposits) = last.unwrap_or_else(|| panic!("node {i} never observed"));
        assert!(head > 20, "node {i} at height {head}");
        assert_eq!(deposits, outcome.deposits_accepted, "node {i}");
    }
    // The upgrade was voted in by a majority and every node runs it past its height.
    assert_eq!(outcome.upgrades.len(), 1, "{:?}", outcome.upgrades);
    let (height, module) = &outcome.upgrades[0];
    assert_eq!(module, "deposits-v2");
    assert!(
        outcome
            .final_nodes
            .iter()
            .flatten()
            .all(|(head, _)| head >= height),
        "{:?} vs height {height}",
        outcome.final_nodes
    );
    assert!(
        outcome
            .active_deposits
            .iter()
            .all(|m| m.as_deref() == Some("deposits-v2")),
        "{:?}",
        outcome.active_deposits
    );
    // Every packet went through the relay, and the partition dropped some.
    assert!(
        outcome.relay.total.forwarded > 1_000,
        "{:?}",
        outcome.relay.total
    );
    assert!(outcome.relay.total.dropped > 0, "{:?}", outcome.relay.total);
    assert!(outcome.report_json.exists() && outcome.report_png.exists());
}

/// `modnode testnet run` refuses a manifest with a misspelt key before starting anything,
/// naming the key, and exits non-zero.
#[test]
fn the_command_refuses_a_manifest_with_an_unknown_key_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("typo.toml");
    std::fs::write(
        &manifest,
        SHORT.replace("seed = 25", "seed = 25\ndeposit_rate = 3"),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_modnode"))
        .args(["testnet", "run"])
        .arg(&manifest)
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("deposit_rate"), "{stderr}");
    assert!(!dir.path().join("out").exists(), "nothing started");
}

/// The `modnode run` processes whose command line names `dir`.
fn processes_under(dir: &std::path::Path) -> Vec<u32> {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let line = String::from_utf8_lossy(&c).replace('\0', " ");
                line.contains(" run ") && !line.contains(" testnet ") && line.contains(&needle)
            })
        })
        .collect()
}

/// Polls `check` every 100 ms until it holds; panics naming `what` after `deadline`.
fn wait_for(what: &str, deadline: std::time::Duration, mut check: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !check() {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// SIGTERM (or Ctrl-C) to `modnode testnet run` stops the run and kills every node process it
/// started: none is left running on the operator's machine, and the command says why it
/// stopped.
#[test]
fn a_stopped_run_kills_every_node_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("short.toml");
    std::fs::write(&manifest, SHORT).unwrap();
    let out = dir.path().join("out");
    // Into a file: a pipe nobody reads while the nodes start could fill and stall the runner.
    let log = dir.path().join("runner.log");
    let runner = std::process::Command::new(env!("CARGO_BIN_EXE_modnode"))
        .args(["testnet", "run"])
        .arg(&manifest)
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut runner = super::cli::KillOnDrop(runner);
    // Up and answering, not just spawned.
    wait_for(
        "the five nodes",
        std::time::Duration::from_secs(120),
        || {
            processes_under(&out).len() == 5
                && (0..5).all(|i| out.join(format!("node-{i}/admin.addr")).exists())
        },
    );
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(runner.0.id() as i32, libc::SIGTERM) };
    let status = runner.0.wait().unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("SIGTERM: the run stopped early"),
        "{stderr}"
    );
    wait_for(
        "every node process to be gone",
        std::time::Duration::from_secs(10),
        || processes_under(&out).is_empty(),
    );
}
