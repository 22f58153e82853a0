//! Crash safety: SIGKILL the node at random moments during continuous import, reopen, and
//! check the recovered head and state root.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Chain, DepositEngine};
use modnode::store::{MemoryStore, SledStore};
use rand::{Rng, SeedableRng};

/// Runs the import loop and kills it after a random delay; returns the last height it reported
/// as imported (durably committed).
fn run_and_kill(data_dir: &std::path::Path, rng: &mut impl Rng) -> u64 {
    // Wait for the first import so the kill lands during continuous import, then a random
    // moment more (a few blocks' worth at most).
    let delay = Duration::from_millis(rng.random_range(0..150));
    run_and_kill_after(data_dir, &[], 1, delay)
}

/// Runs `modnode debug import-loop` with `extra` arguments and SIGKILLs it `delay` after it
/// reported importing `height`; returns the last height it reported as durably committed.
pub(super) fn run_and_kill_after(
    data_dir: &std::path::Path,
    extra: &[&str],
    height: u64,
    delay: Duration,
) -> u64 {
    let mut child = Command::new(env!("CARGO_BIN_EXE_modnode"))
        .args(["debug", "import-loop", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut last = 0;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(height) = line
                .strip_prefix("imported ")
                .and_then(|l| l.split(' ').next())
            {
                last = height.parse().unwrap();
                let _ = tx.send(last);
            }
        }
        last
    });
    loop {
        let reported = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the import loop stopped reporting imports");
        if reported >= height {
            break;
        }
    }
    std::thread::sleep(delay);
    // SIGKILL: no destructors, no flush.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    reader.join().unwrap()
}

fn check_recovery(iterations: usize, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let genesis = Genesis::dev();
    let mut reported_max = 0;
    for i in 0..iterations {
        let reported = run_and_kill(dir.path(), &mut rng);
        reported_max = reported_max.max(reported);
        let chain = Chain::open(
            Arc::new(SledStore::open(&dir.path().join("chain")).unwrap()),
            genesis.clone(),
            DepositEngine::Native(Verification::Batched),
        )
        .unwrap_or_else(|e| panic!("iteration {i}: store does not reopen after SIGKILL: {e}"));
        let head = chain.head();
        assert!(
            head.height >= reported_max,
            "iteration {i}: recovered head {} is behind the last reported import {reported_max}",
            head.height
        );
        reported_max = head.height;
    }

    // Re-execute every stored block from genesis with the native reference: same roots.
    let stored = Chain::open(
        Arc::new(SledStore::open(&dir.path().join("chain")).unwrap()),
        genesis.clone(),
        DepositEngine::Native(Verification::OneByOne),
    )
    .unwrap();
    let mut replay = Chain::open(
        Arc::new(MemoryStore::new()),
        genesis,
        DepositEngine::Native(Verification::OneByOne),
    )
    .unwrap();
    assert!(stored.head().height > 0, "no block was ever imported");
    for height in 1..=stored.head().height {
        let block = stored.block_at(height).unwrap().unwrap();
        replay
            .import(&block)
            .unwrap_or_else(|e| panic!("re-executing block {height}: {e}"));
    }
    assert_eq!(replay.head(), stored.head());
    assert_eq!(*replay.registry(), *stored.registry());
}

#[test]
fn sigkill_during_import_recovers_at_or_past_the_last_reported_block() {
    check_recovery(20, 0x5eed);
}

#[test]
#[ignore = "stress: 200 kills, run with --ignored"]
fn sigkill_stress() {
    check_recovery(200, 0xdead);
}
