//! Deterministic discrete-event simulator of a gossip network of [`GossipEngine`]s.
//!
//! Model: `nodes` nodes in a seeded random connected graph where every node has about `degree`
//! neighbours; each link has a fixed one-way latency drawn uniformly from
//! `[latency_min, latency_max]`. Each node has one receive link of `bandwidth_bps` (throttled
//! nodes: `throttled_bps`) that serialises arriving frames first-come first-served, the way
//! a bottleneck router queue does. A transmission completes at the sender one latency after the
//! receiver has taken it in (the transport's acknowledgement). Time is virtual (microseconds);
//! the run ends when no event is left.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::fmt;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::engine::{EngineConfig, EngineStats, Event, GossipEngine, SendId};
use crate::error::GossipError;
use crate::policy::{MessageKind, Policy, Priority};
use crate::wire::{Frame, MessageId};
use crate::{PeerId, Time};

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
    /// Safety stop: events after this virtual time are not processed.
    pub max_time: Time,
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
    /// Publications are spread evenly over this much virtual time, microseconds.
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
/// excluding each message's origin.
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
    /// Relative message redundancy of blocks: block payload copies received / (N−1) − 1,
    /// averaged over blocks.
    pub rmr: f64,
    /// Bytes received per node (frames plus overhead).
    pub bytes_per_node: u64,
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
            "t50 {:.1} ms, t90 {:.1} ms, t99 {:.1} ms, missed {}, rmr {:.2}, {:.2} MB/node, \
             hp_p99 {:.1} ms",
            ms(self.t50),
            ms(self.t90),
            ms(self.t99),
            self.missed,
            self.rmr,
            self.bytes_per_node as f64 / 1e6,
            ms(self.hp_p99),
        )
    }
}

enum Ev {
    Publish {
        msg: usize,
    },
    Arrive {
        to: usize,
        from: usize,
        send_id: SendId,
        frame: Frame,
        bytes: usize,
    },
    LinkDone {
        node: usize,
    },
    Ack {
        node: usize,
        peer: usize,
        send_id: SendId,
    },
    Timer {
        node: usize,
        generation: u64,
    },
}

struct Scheduled {
    time: Time,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.time, self.seq).cmp(&(other.time, other.seq))
    }
}

struct Incoming {
    from: usize,
    send_id: SendId,
    frame: Frame,
    bytes: usize,
}

struct Node<P> {
    engine: GossipEngine<P>,
    bps: u64,
    throttled: bool,
    link: VecDeque<Incoming>,
    link_busy: bool,
    timer_at: Option<Time>,
    timer_generation: u64,
}

struct Published {
    kind: MessageKind,
    origin: usize,
    payload: Vec<u8>,
    at: Time,
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

struct Sim<P> {
    cfg: SimConfig,
    nodes: Vec<Node<P>>,
    latency: HashMap<(usize, usize), Time>,
    queue: BinaryHeap<Reverse<Scheduled>>,
    seq: u64,
    published: Vec<Published>,
    ids: HashMap<MessageId, usize>,
    delivered: Vec<Vec<Option<Time>>>,
    rx_bytes: u64,
    block_copies: u64,
    events: u64,
}

fn peer_handle(node: usize) -> PeerId {
    PeerId::try_from(node).unwrap_or(PeerId::MAX)
}

impl<P: Policy> Sim<P> {
    fn schedule(&mut self, time: Time, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse(Scheduled {
            time,
            seq: self.seq,
            ev,
        }));
    }

    fn latency(&self, a: usize, b: usize) -> Time {
        self.latency
            .get(&(a.min(b), a.max(b)))
            .copied()
            .unwrap_or(self.cfg.latency_max)
    }

    /// Drains the node's transmits and events and re-arms its timer.
    fn pump(&mut self, node: usize, now: Time) {
        while let Some(tx) = self.nodes[node].engine.poll_transmit(now) {
            let to = tx.peer as usize;
            let bytes = tx.frame.encoded_len() + self.cfg.frame_overhead;
            let at = now + self.latency(node, to);
            self.schedule(
                at,
                Ev::Arrive {
                    to,
                    from: node,
                    send_id: tx.send_id,
                    frame: tx.frame,
                    bytes,
                },
            );
        }
        while let Some(ev) = self.nodes[node].engine.poll_event() {
            let Event::Delivered { id, .. } = ev;
            if let Some(&msg) = self.ids.get(&id) {
                let slot = &mut self.delivered[msg][node];
                if slot.is_none() {
                    *slot = Some(now);
                }
            }
        }
        let next = self.nodes[node].engine.poll_timeout();
        let n = &mut self.nodes[node];
        if next != n.timer_at {
            n.timer_at = next;
            n.timer_generation += 1;
            let generation = n.timer_generation;
            if let Some(t) = next {
                self.schedule(t.max(now), Ev::Timer { node, generation });
            }
        }
    }

    fn start_link(&mut self, node: usize, now: Time) {
        let n = &mut self.nodes[node];
        if n.link_busy {
            return;
        }
        let Some(head) = n.link.front() else {
            return;
        };
        n.link_busy = true;
        let micros = (head.bytes as u64 * 8 * 1_000_000).div_ceil(n.bps.max(1));
        self.schedule(now + micros, Ev::LinkDone { node });
    }

    fn handle(&mut self, now: Time, ev: Ev) -> Result<(), GossipError> {
        match ev {
            Ev::Publish { msg } => {
                let p = &self.published[msg];
                let (origin, kind) = (p.origin, p.kind);
                let payload = p.payload.clone();
                self.delivered[msg][origin] = Some(now);
                self.nodes[origin].engine.publish(kind, payload, now)?;
                self.pump(origin, now);
            }
            Ev::Arrive {
                to,
                from,
                send_id,
                frame,
                bytes,
            } => {
                self.nodes[to].link.push_back(Incoming {
                    from,
                    send_id,
                    frame,
                    bytes,
                });
                self.start_link(to, now);
            }
            Ev::LinkDone { node } => {
                self.nodes[node].link_busy = false;
                if let Some(inc) = self.nodes[node].link.pop_front() {
                    self.rx_bytes += inc.bytes as u64;
                    self.block_copies += inc.frame.block_pushes();
                    let from = peer_handle(inc.from);
                    if self.cfg.encode_frames {
                        let bytes = inc.frame.encode()?;
                        self.nodes[node].engine.handle_datagram(from, &bytes, now)?;
                    } else {
                        self.nodes[node].engine.handle_frame(from, inc.frame, now)?;
                    }
                    let ack_at = now + self.latency(node, inc.from);
                    self.schedule(
                        ack_at,
                        Ev::Ack {
                            node: inc.from,
                            peer: node,
                            send_id: inc.send_id,
                        },
                    );
                    self.pump(node, now);
                }
                self.start_link(node, now);
            }
            Ev::Ack {
                node,
                peer,
                send_id,
            } => {
                self.nodes[node]
                    .engine
                    .handle_send_complete(peer_handle(peer), send_id, now);
                self.pump(node, now);
            }
            Ev::Timer { node, generation } => {
                if self.nodes[node].timer_generation == generation {
                    self.nodes[node].timer_at = None;
                    self.nodes[node].engine.handle_timeout(now);
                    self.pump(node, now);
                }
            }
        }
        Ok(())
    }

    fn report(&self, end_time: Time) -> SimReport {
        let mut all = Vec::new();
        let mut high = Vec::new();
        let mut other = Vec::new();
        let mut missed = 0;
        let mut blocks = 0u64;
        for (m, p) in self.published.iter().enumerate() {
            if p.kind == MessageKind::Block {
                blocks += 1;
            }
            for (node, slot) in self.delivered[m].iter().enumerate() {
                if node == p.origin {
                    continue;
                }
                match slot {
                    Some(t) => {
                        let lat = t.saturating_sub(p.at);
                        all.push(lat);
                        if p.kind.default_priority() != Priority::High {
                            other.push(lat);
                        } else if !self.nodes[node].throttled {
                            high.push(lat);
                        }
                    }
                    None => missed += 1,
                }
            }
        }
        all.sort_unstable();
        high.sort_unstable();
        other.sort_unstable();
        let n = self.nodes.len();
        let denominators = blocks * (n as u64).saturating_sub(1);
        let rmr = if denominators == 0 {
            0.0
        } else {
            self.block_copies as f64 / denominators as f64 - 1.0
        };
        let mut engine = EngineStats::default();
        for node in &self.nodes {
            add_stats(&mut engine, node.engine.stats());
        }
        SimReport {
            messages: self.published.len(),
            pairs: all.len() + missed,
            t50: percentile(&all, 50),
            t90: percentile(&all, 90),
            t99: percentile(&all, 99),
            missed,
            rmr,
            bytes_per_node: self.rx_bytes / n.max(1) as u64,
            hp_p99: percentile(&high, 99),
            hp_p50: percentile(&high, 50),
            other_p99: percentile(&other, 99),
            end_time,
            events: self.events,
            engine,
        }
    }
}

fn add_stats(sum: &mut EngineStats, s: &EngineStats) {
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
}

/// Nearest-rank percentile of sorted values (0 if empty).
pub fn percentile(sorted: &[Time], pct: usize) -> Time {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() * pct).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

/// Runs `scenario` on the network described by `cfg`; `make_policy(node)` builds each node's
/// policy.
pub fn run<P: Policy>(
    cfg: &SimConfig,
    scenario: &Scenario,
    mut make_policy: impl FnMut(usize) -> P,
) -> Result<SimReport, GossipError> {
    let n = cfg.nodes.max(2);
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let adj = topology(n, cfg.degree.max(1), &mut rng);

    let mut throttled = vec![false; n];
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.random_range(0..=i);
        order.swap(i, j);
    }
    for &v in order.iter().take(cfg.throttled.min(n)) {
        throttled[v] = true;
    }

    let mut latency = HashMap::new();
    for (a, neighbours) in adj.iter().enumerate() {
        for &b in neighbours {
            if a < b {
                let lat = rng.random_range(cfg.latency_min..=cfg.latency_max.max(cfg.latency_min));
                latency.insert((a, b), lat);
            }
        }
    }

    let mut engine_cfg = cfg.engine.clone();
    engine_cfg.network_size = Some(u32::try_from(n).unwrap_or(u32::MAX));
    let mut nodes = Vec::with_capacity(n);
    for (v, neighbours) in adj.iter().enumerate() {
        let mut engine = GossipEngine::new(engine_cfg.clone(), make_policy(v));
        for &u in neighbours {
            engine.add_peer(peer_handle(u))?;
            // The transport measured the RTT while connecting (QUIC handshake).
            let rtt = 2 * latency.get(&(v.min(u), v.max(u))).copied().unwrap_or(0);
            engine.handle_rtt_sample(peer_handle(u), u32::try_from(rtt).unwrap_or(u32::MAX));
        }
        nodes.push(Node {
            engine,
            bps: if throttled[v] {
                cfg.throttled_bps
            } else {
                cfg.bandwidth_bps
            },
            throttled: throttled[v],
            link: VecDeque::new(),
            link_busy: false,
            timer_at: None,
            timer_generation: 0,
        });
    }

    // Publications: deposits and blocks interleaved evenly, from random origins.
    let mut published = Vec::new();
    let spread = |i: usize, count: usize| -> Time {
        (scenario.duration as u128 * (2 * i as u128 + 1) / (2 * count.max(1) as u128)) as Time
    };
    for i in 0..scenario.deposits {
        published.push((
            spread(i, scenario.deposits),
            MessageKind::Deposit,
            scenario.deposit_size,
        ));
    }
    for i in 0..scenario.blocks {
        published.push((
            spread(i, scenario.blocks),
            MessageKind::Block,
            scenario.block_size,
        ));
    }
    published.sort_by_key(|&(at, kind, _)| (at, kind));
    let published: Vec<Published> = published
        .into_iter()
        .enumerate()
        .map(|(i, (at, kind, size))| {
            let mut payload = vec![0u8; size.max(8)];
            rng.fill_bytes(&mut payload);
            payload[..8].copy_from_slice(&(i as u64).to_le_bytes());
            Published {
                kind,
                origin: rng.random_range(0..n),
                payload,
                at,
            }
        })
        .collect();
    let ids = published
        .iter()
        .enumerate()
        .map(|(i, p)| (MessageId::of(&p.payload), i))
        .collect();

    let mut sim = Sim {
        cfg: cfg.clone(),
        delivered: vec![vec![None; n]; published.len()],
        nodes,
        latency,
        queue: BinaryHeap::new(),
        seq: 0,
        published: Vec::new(),
        ids,
        rx_bytes: 0,
        block_copies: 0,
        events: 0,
    };
    for (msg, p) in published.iter().enumerate() {
        sim.schedule(p.at, Ev::Publish { msg });
    }
    sim.published = published;

    let mut now = 0;
    while let Some(Reverse(next)) = sim.queue.pop() {
        if next.time > cfg.max_time {
            break;
        }
        now = next.time;
        sim.events += 1;
        sim.handle(now, next.ev)?;
    }
    Ok(sim.report(now))
}
