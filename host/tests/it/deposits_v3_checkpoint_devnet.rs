//! A node joining a deposits@3 devnet by checkpoint restore (state sync over real QUIC) after
//! the switch at H, from a checkpoint whose state holds a non-empty pending-deposit queue: it
//! restores the queue with the registry, imports the blocks after the checkpoint, and at every
//! height from the checkpoint on holds the same blocks and the same state — roots, registry,
//! deposit index, queue and balance to consume — as the authorities, through the epoch
//! transitions that drain the queue once the deposits stop.
//!
//! Waits are liveness bounds (generous, polled), not performance targets.

use std::path::Path;

use modnode::node::{DepositSourceConfig, SyncMode};
use modnode::runtime::Kind;
use tempfile::TempDir;

use super::artifact;
use super::checkpoint_sync::checkpoint_now;
use super::deposits_v3_devnet::{
    Depositor, GENESIS_VALIDATORS, VOTE_MARGIN, blocks_of, common_height, every_deposit_applied,
    num, state, until, v3_genesis,
};
use super::devnet::{height, propose, sha, share_module_cache};
use super::network::{LIVENESS, dirs, eventually, hosting, start_edited, start_with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restored_from_a_checkpoint_with_a_non_empty_deposits_v3_queue_agrees_with_the_others()
 {
    const FINALITY: u64 = 4;
    let tmp = dirs(3);
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    let (genesis, _) = v3_genesis("modnode-it-v3-checkpoint", &paths, 2, FINALITY, |_| {});
    let fork = genesis.genesis_fork_version;
    let v3 = sha(&artifact("deposits-v3"));

    // Two authorities: node 0 hosts the dev deposit contract and makes checkpoints on demand
    // (the default checkpoint module), node 1 follows the contract.
    let node0 = start_edited(paths[0], &genesis, vec![], hosting(), |c| {
        c.checkpoint.interval = 0;
    })
    .await;
    let a0 = &node0;
    share_module_cache(paths[0], &paths[1..]);
    let url = a0.deposit_contract_url().unwrap().to_string();
    let a1 = start_with(
        paths[1],
        &genesis,
        vec![a0.peer_addr().unwrap()],
        DepositSourceConfig::follow_dev(url.clone()),
    )
    .await;

    // Deposits from now on; some applied under deposits-v2, then the switch is voted in.
    let depositor = Depositor::start(&url, fork);
    eventually("deposits applied under deposits-v2", || {
        a0.status().deposit_index >= 3
    })
    .await;
    let h = height(a0) + genesis.upgrade_lead_blocks + VOTE_MARGIN;
    for dir in &paths[..2] {
        propose(dir, &v3, h).await;
    }
    let authorities = [a0, &a1];
    until(
        "deposits-v3 scheduled at H on both authorities",
        || async move {
            for node in authorities {
                let schedule = node.upgrades().schedule();
                if schedule.module_at(Kind::Deposits, h) != Some(v3) {
                    return Err(format!("H = {h}, {:?}: {schedule:?}", node.status()));
                }
            }
            Ok(())
        },
    )
    .await;

    // A checkpoint of a state after H whose queue holds deposits (checkpoints are made at the
    // finalized height; one taken where the queue happens to be empty is followed by another).
    eventually("the chain past H + finality", || height(a0) > h + FINALITY).await;
    let deadline = tokio::time::Instant::now() + LIVENESS;
    let cp = loop {
        let cp = checkpoint_now(paths[0], a0).await;
        let at = cp.manifest.height;
        let s = state(paths[0], &format!("height={at}")).await;
        if at >= h && num(&s, "pending_deposits") > 0 {
            break cp;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no checkpoint after H = {h} with a non-empty queue; last at {at}: {s}"
        );
        // Let the chain move on before the next attempt.
        let next = height(a0) + 1;
        eventually("the next block", || height(a0) >= next).await;
    };
    let m = cp.manifest.height;
    let at_m = state(paths[0], &format!("height={m}")).await;
    assert_eq!(
        hex::encode(cp.manifest.state_root),
        at_m["state_root"].as_str().unwrap()
    );
    assert!(num(&at_m, "pending_deposits") > 0, "{at_m}");

    // A fresh node restores that checkpoint from node 0 and follows the chain.
    let restored = start_edited(
        paths[2],
        &genesis,
        vec![a0.peer_addr().unwrap()],
        DepositSourceConfig::default(),
        |c| c.sync_mode = SyncMode::Checkpoint,
    )
    .await;
    let status = restored.status().checkpoint_restore;
    assert!(status.done, "{status:?}");
    assert_eq!(status.height, m, "restored {status:?}, made at {m}");
    assert_eq!(status.chunks_verified, status.chunks_total);
    assert_eq!(
        state(paths[2], &format!("height={m}")).await,
        at_m,
        "the restored state at the checkpoint"
    );
    // It imports blocks with deposits still arriving, then the deposits stop and every node
    // drains the queue.
    let past = height(a0) + 2;
    eventually(
        "the restored node past the authority's head at its start",
        || height(&restored) >= past,
    )
    .await;
    let deposits = depositor.stop().await;
    let n = deposits.len() as u64;
    every_deposit_applied(&paths, n).await;

    // From the checkpoint to the common head: the same blocks and the same state — roots,
    // registry, deposit index and queue — on the restored node as on both authorities, with
    // the queue drained in epoch transitions after the checkpoint.
    let top = common_height(&paths).await;
    let blocks = blocks_of(paths[0], m, top).await;
    for dir in &paths[1..] {
        assert_eq!(blocks_of(dir, m, top).await, blocks, "{}", dir.display());
    }
    let mut drained_in_epoch_transition = false;
    let mut previous = at_m;
    for at in m..=top {
        let query = format!("height={at}");
        let reference = state(paths[0], &query).await;
        for dir in &paths[1..] {
            assert_eq!(state(dir, &query).await, reference, "{}", dir.display());
        }
        assert_eq!(
            num(&reference, "validators") + num(&reference, "pending_deposits"),
            GENESIS_VALIDATORS + num(&reference, "eth1_deposit_index"),
            "height {at}: {reference}"
        );
        if at > m {
            let i = usize::try_from(at - m).unwrap();
            let epoch = genesis.starts_epoch(num(&blocks[i - 1], "slot"), num(&blocks[i], "slot"));
            drained_in_epoch_transition |=
                epoch && num(&reference, "validators") > num(&previous, "validators");
        }
        previous = reference;
    }
    assert!(
        drained_in_epoch_transition,
        "no queued deposit applied between {m} and {top}"
    );
    assert_eq!(num(&previous, "pending_deposits"), 0, "{previous}");

    // Each deposit exactly once on the restored node: its validator, with its amount.
    for d in &deposits {
        let s = state(paths[2], &format!("pubkey=0x{}", hex::encode(d.pubkey))).await;
        assert_eq!(s["validator"]["balance"], d.amount, "{s}");
    }

    restored.shutdown().await;
    a1.shutdown().await;
    node0.shutdown().await;
}
