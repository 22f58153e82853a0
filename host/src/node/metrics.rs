//! Counters of a running node and its status snapshot, rendered for the admin API (metrics
//! through `prometheus-client`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
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
    /// Hello exchanges that completed.
    pub handshakes_completed: AtomicU64,
    /// Peers refused because they are on another chain.
    pub wrong_chain_refusals: AtomicU64,
    /// Dials that failed (unreachable, wrong key, handshake failure).
    pub dial_failures: AtomicU64,
    /// Peers disconnected and banned for a protocol violation.
    pub peer_violations: AtomicU64,
    /// Of those, peers that sent a block from a slot beyond our clock plus the skew allowance
    /// (gossiped, or served for our range request).
    pub peer_future_blocks: AtomicU64,
    /// Of those, peers that answered one of our requests (range, module, peers, status) with a
    /// malformed answer: of the wrong kind, undecodable, over the size limit.
    pub peer_malformed_answers: AtomicU64,
    /// Peers whose handshake completed and that are still connected.
    pub peers_connected: AtomicU64,
    /// Entries of the largest per-peer table (range sync's heads, rejections and back-offs,
    /// the upgrade agent's readiness, fetch pacing and serve limits): never above the
    /// connected peers for long, whichever way peers leave.
    pub peer_table_entries: AtomicU64,
    /// Highest head any peer reported.
    pub sync_target_height: AtomicU64,
    /// Whether the node is behind its best peer by more than one block.
    pub syncing: AtomicBool,
    /// Whether the node has tried its known peers and synced from them since it started (or
    /// waited long enough): an authority produces only then.
    pub started_up: AtomicBool,
    /// Checkpoint requests this node answered.
    pub checkpoint_served: crate::checkpoint::ServeCounters,
    /// This node's own restore from a checkpoint.
    pub checkpoint_restore: RestoreCounters,
    /// The deposit follower's faults of its source (shared with the `DepositSource`).
    pub eth1_follower: std::sync::Arc<crate::deposit_source::FollowerCounters>,
}

/// Progress of restoring from a checkpoint (all zero when the node did not restore).
#[derive(Debug, Default)]
pub struct RestoreCounters {
    /// Height of the checkpoint being (or last) restored.
    pub height: AtomicU64,
    /// Chunks in it.
    pub chunks_total: AtomicU64,
    /// Chunks verified and stored, resumed ones included.
    pub chunks_verified: AtomicU64,
    /// Chunks found verified in the local progress at start (not fetched again).
    pub chunks_resumed: AtomicU64,
    /// Chunks fetched from peers (verified or not).
    pub chunks_fetched: AtomicU64,
    /// Verified chunks kept when the restore switched to another checkpoint (their bytes are
    /// listed by it and verify against it).
    pub chunks_carried_over: AtomicU64,
    /// Times the restore switched to another checkpoint (the one in progress was no longer
    /// offered, or was found bad).
    pub switches: AtomicU64,
    /// Chunk bytes fetched from peers.
    pub bytes_fetched: AtomicU64,
    /// Chunks refused (bad bytes); each penalised its sender.
    pub chunks_refused: AtomicU64,
    /// Peers penalised for serving bad chunks or malformed answers.
    pub peers_penalised: AtomicU64,
    /// Peers offering the checkpoint being restored.
    pub peers: AtomicU64,
    /// Fetch rate over the restore so far, bytes per second.
    pub bytes_per_second: AtomicU64,
    /// Whether the restore finished and the chain starts from it.
    pub done: AtomicBool,
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
}

/// One piece of equivocation evidence, as `/status` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EquivocationStatus {
    /// The slot the authority signed two blocks for.
    pub slot: u64,
    /// The authority's index in the genesis authority set.
    pub authority: u32,
    /// The block this node saw first (hex).
    pub first: String,
    /// The conflicting block (hex).
    pub second: String,
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
    /// Chunks fetched from peers.
    pub chunks_fetched: u64,
    /// Verified chunks kept across switches to another checkpoint.
    pub chunks_carried_over: u64,
    /// Switches to another checkpoint.
    pub switches: u64,
    /// Peers penalised for bad data.
    pub peers_penalised: u64,
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
            chunks_carried_over: load(&self.chunks_carried_over),
            switches: load(&self.switches),
            peers_penalised: load(&self.peers_penalised),
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
            head_hash: hex::encode(view.head.hash),
            slot: view.head.slot,
            finalized_height: view.finalized_height,
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
                    first: hex::encode(e.first),
                    second: hex::encode(e.second),
                })
                .collect(),
        }
    }

    /// The counters and the chain view in the OpenMetrics text format (served with
    /// [`METRICS_CONTENT_TYPE`]), encoded by `prometheus-client`. Counter names end in `_total`.
    pub fn render(&self, view: &ChainView) -> String {
        use crate::modules_store::upload::refusals;
        use crate::runtime::Kind;
        use crate::runtime::bounds::over_bound;
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let snapshot = Snapshot {
            counters: [
                (
                    "blocks_produced",
                    "Blocks this node produced",
                    load(&self.blocks_produced),
                ),
                (
                    "blocks_gossip_imported",
                    "Gossiped blocks imported",
                    load(&self.blocks_gossip_imported),
                ),
                (
                    "blocks_synced",
                    "Blocks imported by range sync",
                    load(&self.blocks_synced),
                ),
                (
                    "blocks_rejected",
                    "Blocks refused",
                    load(&self.blocks_rejected),
                ),
                (
                    "handshakes_completed",
                    "Peer handshakes completed",
                    load(&self.handshakes_completed),
                ),
                (
                    "wrong_chain_refusals",
                    "Peers refused for another chain id or genesis",
                    load(&self.wrong_chain_refusals),
                ),
                ("dial_failures", "Failed dials", load(&self.dial_failures)),
                (
                    "peer_violations",
                    "Peers banned for protocol violations",
                    load(&self.peer_violations),
                ),
                (
                    "peer_future_blocks",
                    "Peers banned for a block from a slot starting more than FAR_FUTURE_MS (10 s) beyond our clock",
                    load(&self.peer_future_blocks),
                ),
                (
                    "peer_malformed_answers",
                    "Peers banned for a malformed answer to one of our requests",
                    load(&self.peer_malformed_answers),
                ),
                (
                    "eth1_head_went_back",
                    "Polls at which the eth1 deposit source's head was lower than before",
                    load(&self.eth1_follower.head_went_back),
                ),
                (
                    "eth1_answers_too_large",
                    "eth1 endpoint answers refused as over the bound of what was asked for",
                    load(&self.eth1_follower.answers_too_large),
                ),
                (
                    "equivocations",
                    "Authorities found signing two blocks for one slot (evidence recorded)",
                    view.equivocations,
                ),
                (
                    "module_output_over_bound_deposits",
                    "Deposits module outputs refused as over the kind's bound",
                    over_bound(Kind::Deposits),
                ),
                (
                    "module_output_over_bound_checkpoint",
                    "Checkpoint module outputs refused as over the kind's bound",
                    over_bound(Kind::Checkpoint),
                ),
                (
                    "module_output_over_bound_gossip_policy",
                    "Gossip policy outputs refused as over the kind's bound",
                    over_bound(Kind::GossipPolicy),
                ),
                (
                    "module_refused_code_too_large",
                    "Modules refused before compiling: over a code limit read off the bytes",
                    refusals("code-too-large"),
                ),
                (
                    "module_refused_compile_too_slow",
                    "Modules whose compile was stopped at its deadline",
                    refusals("compile-too-slow"),
                ),
                (
                    "module_refused_wrong_signature",
                    "Modules whose exports do not match their world's function types",
                    refusals("wrong-signature"),
                ),
            ],
            gauges: [
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
                    "eth1_deposit_index",
                    "Deposits of the deposit contract applied by the head state",
                    view.deposit_index,
                ),
                (
                    "peers_connected",
                    "Connected peers",
                    load(&self.peers_connected),
                ),
                (
                    "peer_table_entries",
                    "Entries of the largest per-peer table",
                    load(&self.peer_table_entries),
                ),
                (
                    "sync_target_height",
                    "Highest head reported by a peer",
                    load(&self.sync_target_height),
                ),
                (
                    "syncing",
                    "1 while catching up",
                    u64::from(self.syncing.load(Ordering::Relaxed)),
                ),
            ]
            .map(|(name, help, value)| (name, help, as_i64(value))),
        };
        snapshot.encode_with_prefix("modnode")
    }
}

/// Content type of [`Metrics::render`]'s output.
pub const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The values of one scrape (name, help, value), handed to `prometheus-client` as a collector;
/// the node's and the state cache's metrics both go through it.
#[derive(Debug)]
struct Snapshot<const C: usize, const G: usize> {
    counters: [(&'static str, &'static str, u64); C],
    gauges: [(&'static str, &'static str, i64); G],
}

impl<const C: usize, const G: usize> Snapshot<C, G> {
    /// These figures as OpenMetrics text under `prefix`, ending with `# EOF`.
    fn encode_with_prefix(self, prefix: &str) -> String {
        let mut registry = Registry::with_prefix(prefix);
        registry.register_collector(Box::new(self));
        let mut out = String::new();
        // Writing into a String cannot fail; the encoder only fails when its writer does.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// A gauge value as `prometheus-client` takes it (clamped at `i64::MAX`).
fn as_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl<const C: usize, const G: usize> Collector for Snapshot<C, G> {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for &(name, help, value) in &self.counters {
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(
                name,
                help,
                None,
                counter.metric_type(),
            )?)?;
        }
        for &(name, help, value) in &self.gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

/// The state cache's figures as OpenMetrics lines (prefix `modnode_state_cache_`), without the
/// closing `# EOF`: accounted, allocator-reported and resident bytes side by side, the
/// unexplained gap, and the cache's counters.
pub fn render_state_cache(m: &crate::state_cache::CacheMetrics) -> String {
    let snapshot = Snapshot {
        gauges: [
            ("states", "States cached", as_i64(m.states as u64)),
            (
                "accounted_bytes",
                "Bytes the budget counts (states beyond the head, reservations)",
                as_i64(m.accounted_bytes),
            ),
            (
                "reserved_bytes",
                "Bytes reserved for regenerations in flight",
                as_i64(m.reserved_bytes),
            ),
            (
                "head_bytes",
                "Bytes of the head state",
                as_i64(m.head_bytes),
            ),
            ("max_bytes", "The budget", as_i64(m.max_bytes)),
            (
                "allocator_bytes",
                "Live heap bytes the allocator reports",
                as_i64(m.allocator_bytes),
            ),
            (
                "rss_bytes",
                "Resident set size of the process",
                as_i64(m.rss_bytes),
            ),
            (
                "unexplained_bytes",
                "Allocator bytes minus accounted and head bytes",
                m.unexplained_bytes,
            ),
        ],
        counters: [
            ("hits", "Lookups answered from the cache", m.hits),
            ("misses", "Lookups that missed", m.misses),
            ("regenerations", "Replays run", m.regenerations),
            ("replayed_blocks", "Blocks replayed", m.replayed_blocks),
            (
                "coalesced",
                "Requests that joined another request's replay",
                m.coalesced,
            ),
            ("evictions", "States evicted for the budget", m.evictions),
            ("shed", "Queries refused while import was behind", m.shed),
            (
                "anchors_loaded",
                "Anchors rebuilt from the persisted anchor records",
                m.anchors_loaded,
            ),
        ],
    };
    let mut out = snapshot.encode_with_prefix("modnode_state_cache");
    // Appended to the node's scrape, which carries the one closing `# EOF`.
    if let Some(at) = out.rfind("# EOF") {
        out.truncate(at);
    }
    out
}

/// Checkpoint serving and restore figures as OpenMetrics lines (prefix `modnode_checkpoint_`),
/// without the closing `# EOF`.
pub fn render_checkpoints(m: &Metrics) -> String {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let served = &m.checkpoint_served;
    let restore = &m.checkpoint_restore;
    let snapshot = Snapshot {
        counters: [
            (
                "served_lists",
                "Checkpoint list requests answered",
                load(&served.lists),
            ),
            (
                "served_chunks",
                "Checkpoint chunks sent to peers",
                load(&served.chunks),
            ),
            (
                "served_bytes",
                "Checkpoint chunk bytes sent to peers",
                load(&served.bytes),
            ),
            (
                "served_not_found",
                "Chunk requests answered not here",
                load(&served.not_found),
            ),
            (
                "restore_chunks_fetched",
                "Chunks fetched from peers while restoring",
                load(&restore.chunks_fetched),
            ),
            (
                "restore_bytes_fetched",
                "Chunk bytes fetched from peers while restoring",
                load(&restore.bytes_fetched),
            ),
            (
                "restore_chunks_refused",
                "Fetched chunks refused as bad",
                load(&restore.chunks_refused),
            ),
            (
                "restore_peers_penalised",
                "Peers penalised while restoring",
                load(&restore.peers_penalised),
            ),
            (
                "restore_chunks_carried_over",
                "Verified chunks kept when the restore switched checkpoints",
                load(&restore.chunks_carried_over),
            ),
            (
                "restore_switches",
                "Switches of the restore to another checkpoint",
                load(&restore.switches),
            ),
        ],
        gauges: [
            (
                "restore_height",
                "Height of the checkpoint restored",
                load(&restore.height),
            ),
            (
                "restore_chunks_total",
                "Chunks in it",
                load(&restore.chunks_total),
            ),
            (
                "restore_chunks_verified",
                "Chunks verified and stored",
                load(&restore.chunks_verified),
            ),
            (
                "restore_chunks_resumed",
                "Chunks found verified in stored progress",
                load(&restore.chunks_resumed),
            ),
            (
                "restore_peers",
                "Peers offering the checkpoint",
                load(&restore.peers),
            ),
            (
                "restore_bytes_per_second",
                "Fetch rate of the restore",
                load(&restore.bytes_per_second),
            ),
            (
                "restore_done",
                "1 once the chain starts from the restored checkpoint",
                u64::from(restore.done.load(Ordering::Relaxed)),
            ),
        ]
        .map(|(name, help, value)| (name, help, as_i64(value))),
    };
    let mut out = snapshot.encode_with_prefix("modnode_checkpoint");
    // Appended to the node's scrape, which carries the one closing `# EOF`.
    if let Some(at) = out.rfind("# EOF") {
        out.truncate(at);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::Head;

    #[test]
    fn render_is_openmetrics_with_every_counter_and_gauge() {
        let metrics = Metrics::default();
        bump(&metrics.blocks_produced);
        bump(&metrics.blocks_produced);
        metrics.syncing.store(true, Ordering::Relaxed);
        let view = ChainView {
            head: Head {
                hash: [0; 32],
                height: 42,
                slot: 50,
                state_root: [0; 32],
            },
            finalized_height: 10,
            validators: 5,
            last_block_unix_ms: 0,
            deposit_index: 3,
            reorgs: 1,
            equivocations: 2,
            recent_evidence: [None; crate::chain::RECENT_EVIDENCE],
        };
        let text = metrics.render(&view);
        for line in [
            "# TYPE modnode_blocks_produced counter",
            "modnode_blocks_produced_total 2",
            "modnode_peer_violations_total 0",
            "modnode_peer_future_blocks_total 0",
            "modnode_peer_malformed_answers_total 0",
            "modnode_eth1_head_went_back_total 0",
            "modnode_eth1_answers_too_large_total 0",
            "modnode_equivocations_total 2",
            "# TYPE modnode_module_output_over_bound_gossip_policy counter",
            "# TYPE modnode_head_height gauge",
            "modnode_head_height 42",
            "modnode_finalized_height 10",
            "modnode_eth1_deposit_index 3",
            "modnode_syncing 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line:?} missing from\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
