//! A live gossip-policy swap on a running network over real QUIC: canary, activation and
//! rollback on a relaying node while blocks flow; every node keeps following the chain.
//! (Deposits no longer come from the admin mempool since blocks carry only contract deposits
//! with proofs, so the blocks themselves are the traffic that must cross the switching node.)
//!
//! Waits are liveness bounds (generous, polled), not performance targets.

use std::path::Path;

use modnode::node::Node;
use modnode::runtime::{Kind, Mode};
use tempfile::TempDir;

use super::network::{eventually, genesis, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_policy_swaps_on_a_live_network_keep_every_node_following() {
    let tmp: Vec<TempDir> = (0..3).map(|_| TempDir::new().unwrap()).collect();
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    // Nodes 0 and 1 are the authorities; node 2 follows behind the relaying node 1.
    let genesis = genesis("modnode-it-live-swap", &paths, 2);
    let mut nodes: Vec<Node> = Vec::new();
    for dir in &paths {
        let bootstrap = nodes
            .last()
            .map(|n: &Node| vec![n.peer_addr().unwrap()])
            .unwrap_or_default();
        nodes.push(start(dir, &genesis, bootstrap).await);
    }
    eventually("three nodes at height 3", || {
        nodes.iter().all(|n| n.status().height >= 3)
    })
    .await;

    // The relaying middle node switches its policy step by step; every embedded version was
    // prepared (warmed) at start.
    let modules = nodes[1].modules().clone();
    let v1 = modules
        .prepare(modnode::artifacts::embedded("gossip-policy-v1").unwrap())
        .unwrap();
    assert!(!v1.new, "embedded versions are prepared at start");
    let steps: [&dyn Fn(); 3] = [
        &|| {
            modules
                .activate(Kind::GossipPolicy, v1.hash, Mode::Canary(50))
                .unwrap();
        },
        &|| {
            modules
                .activate(Kind::GossipPolicy, v1.hash, Mode::Live)
                .unwrap();
        },
        &|| {
            modules.rollback(Kind::GossipPolicy).unwrap();
        },
    ];
    for step in &steps {
        step();
        // Blocks are produced at both ends' authorities and must cross the node that just
        // switched: every node, the far follower included, gets three blocks further.
        let target = nodes.iter().map(|n| n.status().height).max().unwrap_or(0) + 3;
        eventually("three more blocks at every node", || {
            nodes.iter().all(|n| n.status().height >= target)
        })
        .await;
    }
    let status = modules.kind_status(Kind::GossipPolicy);
    assert_eq!(status.breaker_trips, 0);
    assert_eq!(status.previous.map(|p| p.hash), Some(hex::encode(v1.hash)));
    assert!(status.canary.is_none());
    for node in nodes {
        node.shutdown().await;
    }
}
