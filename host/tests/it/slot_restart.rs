//! A live activation of a local kind survives a restart: an operator's activated gossip policy
//! and a checkpoint canary are running again after the node stops and starts on the same data
//! directory.

use std::path::Path;

use modnode::admin::client::{self, Target};
use modnode::node::Node;
use modnode::runtime::{Kind, Mode};
use tempfile::TempDir;

use super::network::{dirs, eventually, genesis, start};

/// A prepared version of `kind` that is not the active one.
fn other_version(node: &Node, kind: Kind) -> modnode::hashes::ModuleHash {
    let active = node.modules().kind_status(kind).active.hash;
    node.modules()
        .prepared()
        .into_iter()
        .find(|p| p.kind == kind && p.hash != active)
        .unwrap_or_else(|| panic!("a second {kind} version prepared"))
        .hash
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activated_policy_and_a_canary_are_restored_after_a_restart() {
    let tmp: Vec<TempDir> = dirs(1);
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    let genesis = genesis("modnode-it-slot-restart", &paths, 1);
    let node = start(paths[0], &genesis, vec![]).await;
    eventually("a block", || node.status().height >= 1).await;
    let policy = other_version(&node, Kind::GossipPolicy);
    let checkpoint = other_version(&node, Kind::Checkpoint);
    let api = Target::data_dir(paths[0]).unwrap();
    client::activate_module(&api, &hex::encode(policy), Mode::Live)
        .await
        .unwrap();
    client::activate_module(&api, &hex::encode(checkpoint), Mode::Canary(30))
        .await
        .unwrap();
    let before_policy = node.modules().kind_status(Kind::GossipPolicy);
    assert_eq!(before_policy.active.hash.to_hex(), hex::encode(policy));
    node.shutdown().await;

    let node = start(paths[0], &genesis, vec![]).await;
    let policy_slot = node.modules().kind_status(Kind::GossipPolicy);
    assert_eq!(
        policy_slot.active.hash.to_hex(),
        hex::encode(policy),
        "the activated policy was lost on restart"
    );
    let checkpoint_slot = node.modules().kind_status(Kind::Checkpoint);
    let canary = checkpoint_slot
        .canary
        .expect("the canary was lost on restart");
    assert_eq!(canary.version.hash.to_hex(), hex::encode(checkpoint));
    assert_eq!(canary.percent, 30);
    // The node keeps running on them.
    let height = node.status().height;
    eventually("blocks after the restart", || node.status().height > height).await;
    node.shutdown().await;
}
