//! The node's status snapshot as `/status` and `modnode devnet` show it.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::hashes::{BlockHash, ModuleHash};

use super::super::chain_worker::ChainView;
use super::{Metrics, RestoreCounters};

/// A snapshot of a node, as `/status` and `modnode devnet` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeStatus {
    /// The node's id (hex ed25519 public key).
    pub node_id: String,
    /// Where it accepts peer connections.
    pub p2p_addr: String,
    /// Head height.
    pub height: u64,
    /// Head hash (hex in JSON).
    pub head_hash: BlockHash,
    /// Head slot.
    pub slot: u64,
    /// Finalized height.
    pub finalized_height: u64,
    /// Lowest height above genesis whose block this node serves (`/blocks` below it answers
    /// "pruned"): 1 unless it pruned older blocks or started from a checkpoint.
    pub served_from: u64,
    /// Connected peers (handshake completed).
    pub peers: u64,
    /// Validators in the head state.
    pub validators: u32,
    /// When the head last changed (ms since the Unix epoch; 0 = not since start).
    pub last_block_unix_ms: u64,
    /// Deposits of the deposit contract applied by the head state (`eth1_deposit_index`).
    pub deposit_index: u64,
    /// Highest head a peer reported.
    pub sync_target_height: u64,
    /// Whether the node is catching up.
    pub syncing: bool,
    /// Branch switches since start.
    pub reorgs: u64,
    /// The restore from a checkpoint this node started with (all zero if none).
    pub checkpoint_restore: RestoreStatus,
    /// Equivocations found since start (an authority signing two blocks for one slot).
    pub equivocations_found: u64,
    /// The newest evidence of equivocation held (at most
    /// [`RECENT_EVIDENCE`](crate::chain::RECENT_EVIDENCE)), newest slot first.
    pub equivocations: Vec<EquivocationStatus>,
    /// The peers this node bans now (at most [`BanView::MAX`](super::BanView::MAX)).
    pub bans: Vec<BanStatus>,
    /// Why import stopped above the head, if it did: the migration of the deposits module
    /// the next height activates fails (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub import_stopped: Option<ImportStoppedStatus>,
}

/// Import stopped at a module's activation height, as `/status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportStoppedStatus {
    /// The activation height no block imports at; the node stays below it.
    pub height: u64,
    /// The deposits module whose migration fails there (hex sha256 in JSON).
    pub module: ModuleHash,
    /// What it means and what to do.
    pub reason: String,
}

/// One peer this node bans, as `/status` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BanStatus {
    /// The banned peer's node id (hex).
    pub node: String,
    /// When the ban ends (ms since the Unix epoch).
    pub until_unix_ms: u64,
}

/// One piece of equivocation evidence, as `/status` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EquivocationStatus {
    /// The slot the authority signed two blocks for.
    pub slot: u64,
    /// The authority's index in the genesis authority set.
    pub authority: u32,
    /// The block this node saw first (hex in JSON).
    pub first: BlockHash,
    /// The conflicting block (hex in JSON).
    pub second: BlockHash,
}

/// A restore from a checkpoint, as `/status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RestoreStatus {
    /// Height of the checkpoint.
    pub height: u64,
    /// Chunks in it.
    pub chunks_total: u64,
    /// Chunks verified (resumed ones included).
    pub chunks_verified: u64,
    /// Chunks found verified in stored progress, not fetched again.
    pub chunks_resumed: u64,
    /// Chunks fetched from peers and handed to verification.
    pub chunks_fetched: u64,
    /// Chunk answers not needed (late answers to requests that timed out or were taken over).
    pub chunks_duplicate: u64,
    /// Verified chunks kept across switches to another checkpoint.
    pub chunks_carried_over: u64,
    /// Switches to another checkpoint.
    pub switches: u64,
    /// Peers penalised for bad data.
    pub peers_penalised: u64,
    /// Chunk requests that reached their deadline unanswered.
    pub requests_timed_out: u64,
    /// Chunks an idle faster peer took over from a slower one before its deadline.
    pub chunks_taken_over: u64,
    /// Whether the chain started from it.
    pub done: bool,
}

impl RestoreCounters {
    /// The figures `/status` shows.
    pub fn status(&self) -> RestoreStatus {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RestoreStatus {
            height: load(&self.height),
            chunks_total: load(&self.chunks_total),
            chunks_verified: load(&self.chunks_verified),
            chunks_resumed: load(&self.chunks_resumed),
            chunks_fetched: load(&self.chunks_fetched),
            chunks_duplicate: load(&self.chunks_duplicate),
            chunks_carried_over: load(&self.chunks_carried_over),
            switches: load(&self.switches),
            peers_penalised: load(&self.peers_penalised),
            requests_timed_out: load(&self.requests_timed_out),
            chunks_taken_over: load(&self.chunks_taken_over),
            done: self.done.load(Ordering::Relaxed),
        }
    }
}

impl Metrics {
    /// The status of a node with this chain view.
    pub fn status(&self, node_id: String, p2p_addr: String, view: &ChainView) -> NodeStatus {
        NodeStatus {
            node_id,
            p2p_addr,
            height: view.head.height,
            head_hash: view.head.hash,
            slot: view.head.slot,
            finalized_height: view.finalized_height,
            served_from: view.served_from,
            peers: self.peers_connected.load(Ordering::Relaxed),
            validators: view.validators,
            last_block_unix_ms: view.last_block_unix_ms,
            deposit_index: view.deposit_index,
            sync_target_height: self.sync_target_height.load(Ordering::Relaxed),
            syncing: self.syncing.load(Ordering::Relaxed),
            reorgs: view.reorgs,
            checkpoint_restore: self.checkpoint_restore.status(),
            equivocations_found: view.equivocations,
            equivocations: view
                .recent_evidence
                .iter()
                .flatten()
                .map(|e| EquivocationStatus {
                    slot: e.slot,
                    authority: e.proposer,
                    first: e.first,
                    second: e.second,
                })
                .collect(),
            import_stopped: view.import_stopped.map(|s| ImportStoppedStatus {
                height: s.height,
                module: s.module,
                reason: format!(
                    "the migration of deposits module {} fails at its activation height {}: \
                     no block imports there (the log names the failure); the chain waits \
                     below it until the schedule names a module whose migration finishes",
                    s.module, s.height
                ),
            }),
            bans: self
                .bans
                .live(crate::clock::unix_ms())
                .into_iter()
                .map(|(node, until_unix_ms)| BanStatus {
                    node: hex::encode(node),
                    until_unix_ms,
                })
                .collect(),
        }
    }
}
