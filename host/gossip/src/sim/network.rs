//! The event loop of the simulator: links, latency, receive bandwidth, churn, and the record
//! of who received what when. Generic over the node protocol ([`SimNode`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

use super::events::{Ev, Scheduled};
use super::node::{NodeSetup, SimNode};
use super::{Scenario, SimConfig, SimReport, percentile, topology};
use crate::engine::{EngineStats, SendId};
use crate::error::GossipError;
use crate::policy::{MessageKind, Priority};
use crate::wire::MessageId;
use crate::{PeerId, Time};

mod handle;
mod report;

struct Incoming<F> {
    from: usize,
    from_life: u64,
    send_id: SendId,
    frame: F,
    bytes: usize,
    link: u64,
}

/// One place in the network: the node living there (none while it is away), its receive link
/// and its timer.
struct Slot<N: SimNode> {
    node: Option<N>,
    /// Incremented whenever the node leaves: events of an earlier life are stale.
    life: u64,
    bps: u64,
    throttled: bool,
    link: VecDeque<Incoming<N::Frame>>,
    link_busy: bool,
    /// A frame is being serialised onto the node's upload link.
    uplink_busy: bool,
    timer_at: Option<Time>,
    timer_generation: u64,
}

struct Published {
    kind: MessageKind,
    origin: usize,
    payload: Vec<u8>,
    at: Time,
}

struct Net<N: SimNode, M> {
    cfg: SimConfig,
    make_node: M,
    adj: Vec<Vec<usize>>,
    slots: Vec<Slot<N>>,
    latency: HashMap<(usize, usize), Time>,
    queue: BinaryHeap<Reverse<Scheduled<N::Frame>>>,
    seq: u64,
    published: Vec<Published>,
    ids: HashMap<MessageId, usize>,
    /// Per message and node: the node was up when the message was published and has not
    /// left since without receiving it, so it should receive it.
    expected: Vec<Vec<bool>>,
    delivered: Vec<Vec<Option<Time>>>,
    rx_bytes: u64,
    payload_copies: u64,
    block_copies: u64,
    control: u64,
    events: u64,
    leaves: usize,
    /// Counters of node lives that ended.
    retired: EngineStats,
    /// Per node: the neighbour its latest first delivery came from.
    parent: Vec<Option<usize>>,
    /// Links cut now (lower index first).
    down: HashSet<(usize, usize)>,
    /// Generation of each link that was ever cut (frames of an earlier one are lost).
    link_gen: HashMap<(usize, usize), u64>,
    cut_rng: StdRng,
    cuts: usize,
}

pub(super) fn peer_handle(node: usize) -> PeerId {
    PeerId::try_from(node).unwrap_or(PeerId::MAX)
}

impl<N: SimNode, M: FnMut(NodeSetup) -> N> Net<N, M> {
    fn schedule(&mut self, time: Time, ev: Ev<N::Frame>) {
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

    fn rtt_us(&self, a: usize, b: usize) -> u32 {
        u32::try_from(2 * self.latency(a, b)).unwrap_or(u32::MAX)
    }

    fn link_gen(&self, a: usize, b: usize) -> u64 {
        self.link_gen
            .get(&(a.min(b), a.max(b)))
            .copied()
            .unwrap_or(0)
    }

    fn link_up(&self, a: usize, b: usize) -> bool {
        !self.down.contains(&(a.min(b), a.max(b)))
    }

    /// Every node reaches every other over links that work, `(a, b)` cut too.
    fn connected_without(&self, a: usize, b: usize) -> bool {
        let n = self.slots.len();
        let mut reached = vec![false; n];
        let mut stack = vec![0];
        reached[0] = true;
        while let Some(v) = stack.pop() {
            for &u in &self.adj[v] {
                if reached[u] || !self.link_up(v, u) || (v.min(u), v.max(u)) == (a.min(b), a.max(b))
                {
                    continue;
                }
                reached[u] = true;
                stack.push(u);
            }
        }
        reached.iter().all(|&r| r)
    }

    /// Cuts the parent link of a random node (one whose cut keeps the network in one piece).
    fn cut(&mut self, now: Time) -> Result<(), GossipError> {
        let n = self.slots.len();
        let start = self.cut_rng.random_range(0..n);
        let Some((a, b)) = (0..n).map(|i| (start + i) % n).find_map(|v| {
            let p = self.parent[v]?;
            (self.up(v) && self.up(p) && self.link_up(v, p) && self.connected_without(v, p))
                .then_some((v, p))
        }) else {
            return Ok(());
        };
        let key = (a.min(b), a.max(b));
        self.down.insert(key);
        *self.link_gen.entry(key).or_insert(0) += 1;
        self.cuts += 1;
        for (x, y) in [(a, b), (b, a)] {
            if let Some(node) = self.slots[x].node.as_mut() {
                node.remove_peer(peer_handle(y), now)?;
            }
            self.pump(x, now);
        }
        self.schedule(now + self.cfg.churn_downtime, Ev::Restore { a, b });
        Ok(())
    }

    /// The cut link works again: its ends, if up, connect.
    fn restore(&mut self, a: usize, b: usize, now: Time) -> Result<(), GossipError> {
        self.down.remove(&(a.min(b), a.max(b)));
        if !(self.up(a) && self.up(b)) {
            return Ok(());
        }
        let rtt = self.rtt_us(a, b);
        for (x, y) in [(a, b), (b, a)] {
            if let Some(node) = self.slots[x].node.as_mut() {
                node.add_peer(peer_handle(y), rtt, now)?;
            }
        }
        self.pump(a, now);
        self.pump(b, now);
        Ok(())
    }

    /// Drains the node's transmits and deliveries and re-arms its timer.
    fn pump(&mut self, v: usize, now: Time) {
        let life = self.slots[v].life;
        // With an upload link, a node hands out its next frame only when the link is free:
        // until then the frame stays in the node's own queues, where the node may still drop
        // it (gossipsub's IDONTWANT) or let a more urgent one pass.
        let upload = self.cfg.upload_bps;
        while upload == 0 || !self.slots[v].uplink_busy {
            let Some(node) = self.slots[v].node.as_mut() else {
                return;
            };
            let Some(tx) = node.poll_transmit(now) else {
                break;
            };
            let to = tx.peer as usize;
            if to >= self.slots.len() || !self.link_up(v, to) {
                continue;
            }
            let bytes = N::frame_cost(&tx.frame).bytes + self.cfg.frame_overhead;
            let mut at = now + self.latency(v, to);
            if upload > 0 {
                let micros = (bytes as u64 * 8 * 1_000_000).div_ceil(upload);
                at += micros;
                self.slots[v].uplink_busy = true;
                self.schedule(now + micros, Ev::UplinkDone { node: v, life });
            }
            let to_life = self.slots[to].life;
            let link = self.link_gen(v, to);
            self.schedule(
                at,
                Ev::Arrive {
                    to,
                    to_life,
                    from: v,
                    from_life: life,
                    send_id: tx.send_id,
                    frame: tx.frame,
                    bytes,
                    link,
                },
            );
        }
        self.record_deliveries(v, now, None);
        let next = self.slots[v].node.as_ref().and_then(N::poll_timeout);
        let s = &mut self.slots[v];
        if next != s.timer_at {
            s.timer_at = next;
            s.timer_generation += 1;
            let generation = s.timer_generation;
            if let Some(t) = next {
                self.schedule(
                    t.max(now),
                    Ev::Timer {
                        node: v,
                        generation,
                    },
                );
            }
        }
    }

    /// Records what node `v` delivered, `from` the neighbour whose frame it just handled.
    fn record_deliveries(&mut self, v: usize, now: Time, from: Option<usize>) {
        while let Some(id) = self.slots[v].node.as_mut().and_then(N::poll_delivered) {
            if let Some(&msg) = self.ids.get(&id) {
                let slot = &mut self.delivered[msg][v];
                if slot.is_none() {
                    *slot = Some(now);
                    if from.is_some() {
                        self.parent[v] = from;
                    }
                }
            }
        }
    }

    fn start_link(&mut self, v: usize, now: Time) {
        let s = &mut self.slots[v];
        if s.link_busy {
            return;
        }
        let Some(head) = s.link.front() else {
            return;
        };
        s.link_busy = true;
        let micros = (head.bytes as u64 * 8 * 1_000_000).div_ceil(s.bps.max(1));
        let life = s.life;
        self.schedule(now + micros, Ev::LinkDone { node: v, life });
    }

    fn up(&self, v: usize) -> bool {
        self.slots[v].node.is_some()
    }

    /// Builds node `v` for its current life and connects it to its neighbours that are up.
    fn join(&mut self, v: usize, now: Time) -> Result<(), GossipError> {
        let mut node = (self.make_node)(NodeSetup {
            index: v,
            incarnation: self.slots[v].life,
            seed: self.cfg.seed,
            network_size: self.slots.len(),
            now,
        });
        let neighbours: Vec<usize> = self.adj[v]
            .iter()
            .copied()
            .filter(|&u| self.up(u) && self.link_up(v, u))
            .collect();
        for &u in &neighbours {
            node.add_peer(peer_handle(u), self.rtt_us(v, u), now)?;
        }
        self.slots[v].node = Some(node);
        for &u in &neighbours {
            let rtt = self.rtt_us(v, u);
            if let Some(peer) = self.slots[u].node.as_mut() {
                peer.add_peer(peer_handle(v), rtt, now)?;
            }
            self.pump(u, now);
        }
        self.pump(v, now);
        Ok(())
    }

    /// Node `v` leaves: its state is gone, its links close, what was in flight to or from it
    /// is lost, and the messages it had not received are no longer expected of it.
    fn leave(&mut self, v: usize, now: Time) -> Result<(), GossipError> {
        let Some(node) = self.slots[v].node.take() else {
            return Ok(());
        };
        self.leaves += 1;
        super::add_stats(&mut self.retired, &node.engine_stats());
        let s = &mut self.slots[v];
        s.life += 1;
        s.link.clear();
        s.link_busy = false;
        s.uplink_busy = false;
        s.timer_at = None;
        s.timer_generation += 1;
        for (expected, delivered) in self.expected.iter_mut().zip(&self.delivered) {
            if delivered[v].is_none() {
                expected[v] = false;
            }
        }
        self.parent[v] = None;
        for u in self.adj[v].clone() {
            if !self.link_up(v, u) {
                continue;
            }
            if let Some(peer) = self.slots[u].node.as_mut() {
                peer.remove_peer(peer_handle(v), now)?;
                self.pump(u, now);
            }
        }
        self.schedule(now + self.cfg.churn_downtime, Ev::Join { node: v });
        Ok(())
    }
}

/// Runs `scenario` on the network of `cfg` with the nodes `make_node` builds.
pub(super) fn simulate<N: SimNode>(
    cfg: &SimConfig,
    scenario: &Scenario,
    make_node: impl FnMut(NodeSetup) -> N,
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

    // Publications: deposits and blocks interleaved evenly, from random origins.
    let spread = |i: usize, count: usize| -> Time {
        cfg.publish_start
            + (scenario.duration as u128 * (2 * i as u128 + 1) / (2 * count.max(1) as u128)) as Time
    };
    let mut planned = Vec::new();
    for i in 0..scenario.deposits {
        planned.push((
            spread(i, scenario.deposits),
            MessageKind::Deposit,
            scenario.deposit_size,
        ));
    }
    for i in 0..scenario.blocks {
        planned.push((
            spread(i, scenario.blocks),
            MessageKind::Block,
            scenario.block_size,
        ));
    }
    planned.sort_by_key(|&(at, kind, _)| (at, kind));
    let published: Vec<Published> = planned
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

    // Churn: distinct random nodes leave at even intervals over the publications, each away
    // for `churn_downtime`. Drawn from its own stream so that the rest of the run is the same
    // with and without churn.
    let leaving = (n * cfg.churn_permille as usize / 1000).min(n);
    let mut churn_rng = StdRng::seed_from_u64(cfg.seed ^ 0xc4u64.rotate_left(56));
    let mut churn_order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = churn_rng.random_range(0..=i);
        churn_order.swap(i, j);
    }

    let slots = throttled
        .iter()
        .map(|&slow| Slot {
            node: None,
            life: 0,
            bps: if slow {
                cfg.throttled_bps
            } else {
                cfg.bandwidth_bps
            },
            throttled: slow,
            link: VecDeque::new(),
            link_busy: false,
            uplink_busy: false,
            timer_at: None,
            timer_generation: 0,
        })
        .collect();
    let mut net = Net {
        cfg: cfg.clone(),
        make_node,
        adj,
        slots,
        latency,
        queue: BinaryHeap::new(),
        seq: 0,
        expected: vec![vec![false; n]; published.len()],
        delivered: vec![vec![None; n]; published.len()],
        published: Vec::new(),
        ids,
        rx_bytes: 0,
        payload_copies: 0,
        block_copies: 0,
        control: 0,
        events: 0,
        leaves: 0,
        retired: EngineStats::default(),
        parent: vec![None; n],
        down: HashSet::new(),
        link_gen: HashMap::new(),
        cut_rng: StdRng::seed_from_u64(cfg.seed ^ 0x5eedu64.rotate_left(40)),
        cuts: 0,
    };
    // Everyone starts up: build all nodes first, then connect them, so no node's first
    // outputs go to a neighbour that does not exist yet.
    for v in 0..n {
        let mut node = (net.make_node)(NodeSetup {
            index: v,
            incarnation: 0,
            seed: cfg.seed,
            network_size: n,
            now: 0,
        });
        for &u in &net.adj[v] {
            node.add_peer(peer_handle(u), net.rtt_us(v, u), 0)?;
        }
        net.slots[v].node = Some(node);
    }
    for v in 0..n {
        net.pump(v, 0);
    }
    for (msg, p) in published.iter().enumerate() {
        net.schedule(p.at, Ev::Publish { msg });
    }
    net.published = published;
    for (i, &v) in churn_order.iter().take(leaving).enumerate() {
        net.schedule(spread(i, leaving), Ev::Leave { node: v });
    }
    // Parent-link cuts: while a message spreads (one largest latency after a point between
    // publications).
    for i in 0..cfg.parent_cuts {
        let at = spread(i, cfg.parent_cuts) + cfg.latency_max;
        net.schedule(at, Ev::Cut);
    }

    let mut now = 0;
    while let Some(Reverse(next)) = net.queue.pop() {
        if next.time > cfg.max_time {
            break;
        }
        now = next.time;
        net.events += 1;
        net.handle(now, next.ev)?;
    }
    Ok(net.report(now))
}
