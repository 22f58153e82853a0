//! Counters of a running node and its status snapshot, rendered for the admin API.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::Serialize;

use super::chain_worker::ChainView;

/// Monotonic counters and a few gauges, updated lock-free by the node's tasks.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Blocks this node produced.
    pub blocks_produced: AtomicU64,
    /// Blocks from gossip that extended or reorganised the chain.
    pub blocks_gossip_imported: AtomicU64,
    /// Blocks from range sync that were imported.
    pub blocks_synced: AtomicU64,
    /// Blocks refused (invalid, undecodable, from the future).
    pub blocks_rejected: AtomicU64,
    /// Deposits accepted into the mempool (admin API and gossip).
    pub deposits_accepted: AtomicU64,
    /// Hello exchanges that completed.
    pub handshakes_completed: AtomicU64,
    /// Peers refused because they are on another chain.
    pub wrong_chain_refusals: AtomicU64,
    /// Dials that failed (unreachable, wrong key, handshake failure).
    pub dial_failures: AtomicU64,
    /// Peers disconnected and banned for a protocol violation.
    pub peer_violations: AtomicU64,
    /// Peers whose handshake completed and that are still connected.
    pub peers_connected: AtomicU64,
    /// Highest head any peer reported.
    pub sync_target_height: AtomicU64,
    /// Whether the node is behind its best peer by more than one block.
    pub syncing: AtomicBool,
    /// Whether the node has tried its known peers and synced from them since it started (or
    /// waited long enough): an authority produces only then.
    pub started_up: AtomicBool,
}

/// Adds one to a counter.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// A snapshot of a node, as `/status` and `modnode devnet` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    /// The node's id (hex ed25519 public key).
    pub node_id: String,
    /// Where it accepts peer connections.
    pub p2p_addr: String,
    /// Head height.
    pub height: u64,
    /// Head hash (hex).
    pub head_hash: String,
    /// Head slot.
    pub slot: u64,
    /// Finalized height.
    pub finalized_height: u64,
    /// Connected peers (handshake completed).
    pub peers: u64,
    /// Validators in the head state.
    pub validators: u32,
    /// When the head last changed (ms since the Unix epoch; 0 = not since start).
    pub last_block_unix_ms: u64,
    /// Deposits waiting for a block.
    pub mempool: usize,
    /// Highest head a peer reported.
    pub sync_target_height: u64,
    /// Whether the node is catching up.
    pub syncing: bool,
    /// Branch switches since start.
    pub reorgs: u64,
}

impl Metrics {
    /// The status of a node with this chain view.
    pub fn status(&self, node_id: String, p2p_addr: String, view: &ChainView) -> NodeStatus {
        NodeStatus {
            node_id,
            p2p_addr,
            height: view.head.height,
            head_hash: hex::encode(view.head.hash),
            slot: view.head.slot,
            finalized_height: view.finalized_height,
            peers: self.peers_connected.load(Ordering::Relaxed),
            validators: view.validators,
            last_block_unix_ms: view.last_block_unix_ms,
            mempool: view.mempool,
            sync_target_height: self.sync_target_height.load(Ordering::Relaxed),
            syncing: self.syncing.load(Ordering::Relaxed),
            reorgs: view.reorgs,
        }
    }

    /// Prometheus text exposition of the counters and the chain view.
    pub fn render(&self, view: &ChainView) -> String {
        let counters: [(&str, &str, &AtomicU64); 9] = [
            (
                "blocks_produced_total",
                "Blocks this node produced",
                &self.blocks_produced,
            ),
            (
                "blocks_gossip_imported_total",
                "Gossiped blocks imported",
                &self.blocks_gossip_imported,
            ),
            (
                "blocks_synced_total",
                "Blocks imported by range sync",
                &self.blocks_synced,
            ),
            (
                "blocks_rejected_total",
                "Blocks refused",
                &self.blocks_rejected,
            ),
            (
                "deposits_accepted_total",
                "Deposits accepted into the mempool",
                &self.deposits_accepted,
            ),
            (
                "handshakes_completed_total",
                "Peer handshakes completed",
                &self.handshakes_completed,
            ),
            (
                "wrong_chain_refusals_total",
                "Peers refused for another chain id or genesis",
                &self.wrong_chain_refusals,
            ),
            ("dial_failures_total", "Failed dials", &self.dial_failures),
            (
                "peer_violations_total",
                "Peers banned for protocol violations",
                &self.peer_violations,
            ),
        ];
        let gauges: [(&str, &str, u64); 8] = [
            ("reorgs", "Branch switches since start", view.reorgs),
            ("head_height", "Height of the head", view.head.height),
            (
                "finalized_height",
                "Finalized height",
                view.finalized_height,
            ),
            (
                "validators",
                "Validators in the head state",
                u64::from(view.validators),
            ),
            (
                "mempool_deposits",
                "Deposits waiting for a block",
                u64::try_from(view.mempool).unwrap_or(u64::MAX),
            ),
            (
                "peers_connected",
                "Connected peers",
                self.peers_connected.load(Ordering::Relaxed),
            ),
            (
                "sync_target_height",
                "Highest head reported by a peer",
                self.sync_target_height.load(Ordering::Relaxed),
            ),
            (
                "syncing",
                "1 while catching up",
                u64::from(self.syncing.load(Ordering::Relaxed)),
            ),
        ];
        let mut out = String::new();
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP modnode_{name} {help}\n# TYPE modnode_{name} counter\nmodnode_{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        for (name, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP modnode_{name} {help}\n# TYPE modnode_{name} gauge\nmodnode_{name} {value}"
            );
        }
        out
    }
}
