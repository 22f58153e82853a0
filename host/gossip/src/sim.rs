//! Deterministic discrete-event simulator of a gossip network.
//!
//! Model: `nodes` nodes in a seeded random connected graph where every node has about `degree`
//! neighbours; each link has a fixed one-way latency drawn uniformly from
//! `[latency_min, latency_max]`. Each node has one receive link of `bandwidth_bps` (throttled
//! nodes: `throttled_bps`) that serialises arriving frames first-come first-served, the way a
//! bottleneck router queue does; with `upload_bps`, a node's frames also leave one at a time
//! over its upload link, the node choosing the next one when the link is free. A transmission
//! completes at the sender one latency after the receiver has taken it in (the transport's
//! acknowledgement). Churn: `churn_permille` of the nodes leave, one at a time at even
//! intervals over the publications, each for `churn_downtime`; a leaving node loses its state
//! and whatever was in flight to or from it, and rejoins as a fresh node connected to its
//! neighbours that are up. Parent-link cuts: `parent_cuts` times, at even intervals over the
//! publications and while a message spreads, the link over which a random node received its
//! latest message breaks for `churn_downtime` (both ends stay up and see the peer leave, then
//! come back; what was in flight over the link is lost; a cut that would split the network
//! is not made). Time is virtual (microseconds); the run ends when no event is left or at
//! `max_time`.
//!
//! The simulator drives any sans-IO node protocol behind [`SimNode`] ([`run_nodes`]): modnode's
//! [`GossipEngine`] with any [`Policy`] ([`run`]; native policies or, in the host crate, the
//! wasm modules themselves) and the [`gossipsub`] v1.2 reference model, on the same topology,
//! latencies, bandwidths, churn and publications for the same seed.

mod events;
mod network;
mod node;

pub mod gossipsub;

use std::collections::BTreeSet;
use std::fmt;

use rand::Rng;
use rand::rngs::StdRng;

use crate::Time;
use crate::engine::{EngineConfig, EngineStats, GossipEngine};
use crate::error::GossipError;
use crate::policy::Policy;

pub use node::{EngineNode, FrameCost, NodeSetup, SimNode, SimTransmit};

/// Network parameters of a simulation.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Number of nodes.
    pub nodes: usize,
    /// Target number of neighbours per node.
    pub degree: usize,
    /// Seed of the topology, latencies, throttled set, origins and payloads.
    pub seed: u64,
    /// Smallest one-way link latency, microseconds.
    pub latency_min: Time,
    /// Largest one-way link latency, microseconds.
    pub latency_max: Time,
    /// Receive bandwidth of a normal node, bits per second.
    pub bandwidth_bps: u64,
    /// Upload bandwidth of every node, bits per second: a node's frames leave one at a time,
    /// each when the previous one is on the wire. 0 = unlimited (frames leave at once).
    pub upload_bps: u64,
    /// How many nodes are throttled (chosen at random).
    pub throttled: usize,
    /// Receive bandwidth of a throttled node, bits per second.
    pub throttled_bps: u64,
    /// Per-transmission overhead added to the frame size (headers), bytes.
    pub frame_overhead: usize,
    /// Run every frame through `encode`/`decode` (slower; exercises the codec).
    pub encode_frames: bool,
    /// Engine configuration of every node (`network_size` is set to `nodes`).
    pub engine: EngineConfig,
    /// Safety stop: events after this virtual time are not processed (protocols with
    /// periodic timers, such as gossipsub's heartbeat, never go idle: set it for them).
    pub max_time: Time,
    /// Nodes that leave (and later rejoin) during the publications, per thousand nodes.
    pub churn_permille: u32,
    /// How long a leaving node stays away (and a cut link stays cut), microseconds.
    pub churn_downtime: Time,
    /// Parent links cut during the publications (see the module docs).
    pub parent_cuts: usize,
    /// Virtual time of the first publication (time for gossipsub meshes to form),
    /// microseconds.
    pub publish_start: Time,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 32,
            degree: 8,
            seed: 7,
            latency_min: 2_000,
            latency_max: 10_000,
            bandwidth_bps: 100_000_000,
            upload_bps: 0,
            throttled: 0,
            throttled_bps: 2_000_000,
            frame_overhead: 48,
            encode_frames: false,
            engine: EngineConfig {
                // Payload hashing is covered by unit tests; the simulator trusts ids.
                verify_payload_ids: false,
                ..EngineConfig::default()
            },
            max_time: 600_000_000,
            churn_permille: 0,
            churn_downtime: 2_000_000,
            parent_cuts: 0,
            publish_start: 0,
        }
    }
}

/// The traffic to publish.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Number of deposits.
    pub deposits: usize,
    /// Deposit payload size, bytes.
    pub deposit_size: usize,
    /// Number of blocks.
    pub blocks: usize,
    /// Block payload size, bytes.
    pub block_size: usize,
    /// Publications are spread evenly over this much virtual time, microseconds (from
    /// [`SimConfig::publish_start`] on).
    pub duration: Time,
}

impl Default for Scenario {
    /// 200 × 1 KiB deposits and 20 × 128 KiB blocks over 3 s.
    fn default() -> Self {
        Scenario {
            deposits: 200,
            deposit_size: 1024,
            blocks: 20,
            block_size: 128 * 1024,
            duration: 3_000_000,
        }
    }
}

/// Results of one run. Latencies are from publication to delivery, over (message, node) pairs
/// excluding each message's origin. With churn, a pair counts only if the node was up when the
/// message was published and did not leave before receiving it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SimReport {
    /// Messages published.
    pub messages: usize,
    /// (message, node) pairs that should be delivered.
    pub pairs: usize,
    /// Median coverage latency, microseconds.
    pub t50: Time,
    /// 90th percentile coverage latency, microseconds.
    pub t90: Time,
    /// 99th percentile coverage latency, microseconds.
    pub t99: Time,
    /// Pairs never delivered.
    pub missed: usize,
    /// Relative message redundancy of blocks: block payload copies received / block pairs
    /// delivered − 1 (without churn and misses: copies / (N−1) − 1, averaged over blocks).
    pub rmr: f64,
    /// The same over every message, whatever its kind: payload copies received / pairs
    /// delivered − 1.
    pub payload_rmr: f64,
    /// Bytes received per node (frames plus overhead).
    pub bytes_per_node: u64,
    /// Control messages received per node (announces, requests; gossipsub GRAFT, PRUNE,
    /// IHAVE, IWANT, IDONTWANT).
    pub control_per_node: f64,
    /// Nodes that left during the run.
    pub leaves: usize,
    /// Parent links cut during the run.
    pub cuts: usize,
    /// p99 coverage latency of high-priority messages over unthrottled nodes, microseconds.
    pub hp_p99: Time,
    /// Median coverage latency of high-priority messages over unthrottled nodes, microseconds.
    pub hp_p50: Time,
    /// p99 coverage latency of normal- and low-priority messages over all nodes, microseconds.
    pub other_p99: Time,
    /// Virtual time when the network went idle, microseconds.
    pub end_time: Time,
    /// Events processed.
    pub events: u64,
    /// Engine counters summed over nodes.
    pub engine: EngineStats,
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |t: Time| t as f64 / 1000.0;
        write!(
            f,
            "t50 {:.1} ms, t90 {:.1} ms, t99 {:.1} ms, missed {}, rmr {:.2} (blocks {:.2}), \
             {:.2} MB/node, {:.0} control/node, hp_p99 {:.1} ms",
            ms(self.t50),
            ms(self.t90),
            ms(self.t99),
            self.missed,
            self.payload_rmr,
            self.rmr,
            self.bytes_per_node as f64 / 1e6,
            self.control_per_node,
            ms(self.hp_p99),
        )?;
        if self.leaves > 0 {
            write!(f, ", {} left", self.leaves)?;
        }
        if self.cuts > 0 {
            write!(f, ", {} parent links cut", self.cuts)?;
        }
        Ok(())
    }
}

/// A seeded random connected graph: a random spanning tree, then random extra edges between
/// nodes below `degree`. Returns sorted adjacency lists.
pub fn topology(nodes: usize, degree: usize, rng: &mut StdRng) -> Vec<Vec<usize>> {
    let mut adj: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); nodes];
    let mut order: Vec<usize> = (0..nodes).collect();
    for i in (1..nodes).rev() {
        let j = rng.random_range(0..=i);
        order.swap(i, j);
    }
    for i in 1..nodes {
        let open: Vec<usize> = order[..i]
            .iter()
            .copied()
            .filter(|&v| adj[v].len() < degree)
            .collect();
        let pool = if open.is_empty() { &order[..i] } else { &open };
        let v = pool[rng.random_range(0..pool.len())];
        let u = order[i];
        adj[u].insert(v);
        adj[v].insert(u);
    }
    let mut attempts = nodes * degree * 50;
    while attempts > 0 && nodes > 1 {
        attempts -= 1;
        let a = rng.random_range(0..nodes);
        let b = rng.random_range(0..nodes);
        if a == b || adj[a].contains(&b) || adj[a].len() >= degree || adj[b].len() >= degree {
            continue;
        }
        adj[a].insert(b);
        adj[b].insert(a);
    }
    adj.into_iter().map(|s| s.into_iter().collect()).collect()
}

pub(crate) fn add_stats(sum: &mut EngineStats, s: &EngineStats) {
    sum.duplicate_pushes += s.duplicate_pushes;
    sum.invalid_pushes += s.invalid_pushes;
    sum.delivered += s.delivered;
    sum.transmits += s.transmits;
    sum.batched_transmits += s.batched_transmits;
    sum.send_timeouts += s.send_timeouts;
    sum.send_failures += s.send_failures;
    sum.quorum_cancelled += s.quorum_cancelled;
    sum.redundant_dropped += s.redundant_dropped;
    sum.requests_sent += s.requests_sent;
    sum.requests_served += s.requests_served;
    sum.fetches_abandoned += s.fetches_abandoned;
    sum.announces_dropped += s.announces_dropped;
    sum.plans_over_peers += s.plans_over_peers;
    sum.missing += s.missing;
    sum.prunes_sent += s.prunes_sent;
    sum.grafts_sent += s.grafts_sent;
    sum.link_heard += s.link_heard;
    sum.link_ignored += s.link_ignored;
    sum.joins += s.joins;
    sum.timer_pulls += s.timer_pulls;
    sum.late_tree_copies += s.late_tree_copies;
    sum.tolerated_duplicates += s.tolerated_duplicates;
}

/// Nearest-rank percentile of sorted values (0 if empty).
pub fn percentile(sorted: &[Time], pct: usize) -> Time {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() * pct).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// Runs `scenario` on the network described by `cfg` with modnode's [`GossipEngine`] on every
/// node; `make_policy(node)` builds each node's policy (again when a node rejoins after churn:
/// a restarted node starts from a fresh policy).
pub fn run<P: Policy>(
    cfg: &SimConfig,
    scenario: &Scenario,
    mut make_policy: impl FnMut(usize) -> P,
) -> Result<SimReport, GossipError> {
    let mut engine_cfg = cfg.engine.clone();
    engine_cfg.network_size = Some(u32::try_from(cfg.nodes.max(2)).unwrap_or(u32::MAX));
    let encode = cfg.encode_frames;
    run_nodes(cfg, scenario, |setup| {
        let mut node_cfg = engine_cfg.clone();
        // A node's routing id is its place in the network: the same in every life.
        if let Some(routing) = node_cfg.routing.as_mut() {
            routing.node_id = u64::try_from(setup.index).unwrap_or(u64::MAX);
        }
        EngineNode::new(
            GossipEngine::new(node_cfg, make_policy(setup.index)),
            encode,
        )
    })
}

/// Runs `scenario` on the network described by `cfg` with any node protocol: `make_node`
/// builds the node at a place of the network, for each of its lives.
pub fn run_nodes<N: SimNode>(
    cfg: &SimConfig,
    scenario: &Scenario,
    make_node: impl FnMut(NodeSetup) -> N,
) -> Result<SimReport, GossipError> {
    network::simulate(cfg, scenario, make_node)
}
