//! A reference model of gossipsub v1.2 (libp2p's pubsub router as Ethereum runs it) for one
//! topic, so modnode's policies are compared with it on the same topology, seeds, latencies,
//! bandwidths and churn.
//!
//! What is modelled: the mesh (GRAFT up to `d` when below `d_lo`, PRUNE down to `d` when above
//! `d_hi`, at every heartbeat; a GRAFT is accepted unless the peer was pruned within the
//! backoff, which it is answered with a PRUNE; a PRUNE starts the backoff); eager forwarding of
//! a first-seen message to every mesh peer but its sender; the message cache (`history_length`
//! heartbeats, the last `history_gossip` of them announced); IHAVE to `max(d_lazy,
//! gossip_factor · non-mesh peers)` random non-mesh peers at each heartbeat, IWANT for unseen
//! ids (asked once per `iwant_followup`), answered from the cache; and v1.2's IDONTWANT: a node
//! receiving a message larger than `idontwant_threshold` tells its other mesh peers at once,
//! and never sends a message to a peer that said it does not want it.
//!
//! What is not: peer scoring (every peer here is honest), opportunistic grafting, outbound
//! quotas, fanout maps for unsubscribed topics, PX, message signing and validation delays. A
//! message's wire size is its payload plus `message_overhead` (topic, sequence number, framing).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::node::{FrameCost, NodeSetup, SimNode, SimTransmit};
use crate::engine::SendId;
use crate::error::GossipError;
use crate::policy::MessageKind;
use crate::wire::{MessageId, Payload};
use crate::{PeerId, Time};

/// Parameters of the model; the defaults are gossipsub v1.2's as Ethereum's consensus layer
/// sets them.
#[derive(Clone, Debug)]
pub struct GossipsubConfig {
    /// Target mesh degree `D`.
    pub d: usize,
    /// Below this many mesh peers a heartbeat grafts up to `d` (`D_lo`).
    pub d_lo: usize,
    /// Above this many mesh peers a heartbeat prunes down to `d` (`D_hi`).
    pub d_hi: usize,
    /// Least number of non-mesh peers a heartbeat sends IHAVE to (`D_lazy`).
    pub d_lazy: usize,
    /// Share of the non-mesh peers a heartbeat sends IHAVE to, per thousand, when more than
    /// `d_lazy`.
    pub gossip_factor_permille: usize,
    /// Heartbeat interval, microseconds.
    pub heartbeat: Time,
    /// Heartbeats a message stays in the cache (served to IWANT).
    pub history_length: usize,
    /// Most recent heartbeats whose messages are announced in IHAVE.
    pub history_gossip: usize,
    /// Most ids in one IHAVE.
    pub max_ihave_length: usize,
    /// An id asked with IWANT is not asked again before this long, microseconds.
    pub iwant_followup: Time,
    /// A pruned peer is not grafted, and its GRAFT is refused, for this long, microseconds.
    pub prune_backoff: Time,
    /// Messages whose wire size is above this many bytes trigger IDONTWANT; `None` models
    /// gossipsub v1.1 (no IDONTWANT).
    pub idontwant_threshold: Option<usize>,
    /// Bytes a message adds to its payload on the wire.
    pub message_overhead: usize,
    /// The publisher sends to all its peers, not only its mesh (v1.1's `flood_publish`).
    pub flood_publish: bool,
}

impl Default for GossipsubConfig {
    /// D = 8, D_lo = 6, D_hi = 12, D_lazy = 6, gossip factor 0.25, heartbeat 0.7 s, cache of
    /// 6 heartbeats with the last 3 announced, IDONTWANT above 1,000 wire bytes (rust-libp2p's
    /// threshold; go-libp2p's, 1 KiB of payload, fires for the same 1 KiB messages), no flood
    /// publishing.
    fn default() -> Self {
        GossipsubConfig {
            d: 8,
            d_lo: 6,
            d_hi: 12,
            d_lazy: 6,
            gossip_factor_permille: 250,
            heartbeat: 700_000,
            history_length: 6,
            history_gossip: 3,
            max_ihave_length: 5_000,
            iwant_followup: 3_000_000,
            prune_backoff: 60_000_000,
            idontwant_threshold: Some(1_000),
            message_overhead: 64,
            flood_publish: false,
        }
    }
}

/// A control message of the model (several may share a frame).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Control {
    /// "Add me to your mesh."
    pub graft: bool,
    /// "I removed you from my mesh."
    pub prune: bool,
    /// "I have these recent messages."
    pub ihave: Vec<MessageId>,
    /// "Send me these messages."
    pub iwant: Vec<MessageId>,
    /// "Do not send me these messages: I have them."
    pub idontwant: Vec<MessageId>,
}

/// What travels between two gossipsub nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GsFrame {
    /// A full message.
    Message {
        /// Its id.
        id: MessageId,
        /// Its kind (for the simulator's block counts; gossipsub ignores it).
        kind: MessageKind,
        /// The payload.
        payload: Payload,
        /// Bytes the message adds to the payload on the wire.
        overhead: usize,
    },
    /// Control messages.
    Control(Control),
}

/// Counters of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GossipsubStats {
    /// Messages received that were already seen.
    pub duplicates: u64,
    /// Message sends skipped because the peer had said IDONTWANT.
    pub idontwant_skips: u64,
}

/// One gossipsub node, subscribed to the one topic every message is published on.
#[derive(Debug)]
pub struct Gossipsub {
    cfg: GossipsubConfig,
    rng: StdRng,
    peers: BTreeSet<PeerId>,
    mesh: BTreeSet<PeerId>,
    backoff: BTreeMap<PeerId, Time>,
    seen: HashSet<MessageId>,
    cache: HashMap<MessageId, (MessageKind, Payload)>,
    /// Ids received in each of the last heartbeats, newest first.
    windows: VecDeque<Vec<MessageId>>,
    dont_want: HashMap<PeerId, HashSet<MessageId>>,
    asked: HashMap<MessageId, Time>,
    out: VecDeque<(PeerId, GsFrame)>,
    delivered: VecDeque<MessageId>,
    next_heartbeat: Time,
    next_send: SendId,
    stats: GossipsubStats,
}

impl Gossipsub {
    /// A node with no peers, whose first heartbeat comes at a random phase after `setup.now`.
    pub fn new(cfg: GossipsubConfig, setup: NodeSetup) -> Self {
        let stream = (setup.index as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(setup.incarnation.wrapping_mul(0xbf58_476d_1ce4_e5b9));
        let mut rng = StdRng::seed_from_u64(setup.seed ^ stream);
        let phase = rng.random_range(0..cfg.heartbeat.max(1));
        Gossipsub {
            next_heartbeat: setup.now + phase,
            rng,
            peers: BTreeSet::new(),
            mesh: BTreeSet::new(),
            backoff: BTreeMap::new(),
            seen: HashSet::new(),
            cache: HashMap::new(),
            windows: VecDeque::from([Vec::new()]),
            dont_want: HashMap::new(),
            asked: HashMap::new(),
            out: VecDeque::new(),
            delivered: VecDeque::new(),
            next_send: 0,
            stats: GossipsubStats::default(),
            cfg,
        }
    }

    /// The mesh peers.
    pub fn mesh(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.mesh.iter().copied()
    }

    /// The counters.
    pub fn stats(&self) -> &GossipsubStats {
        &self.stats
    }

    fn control(&mut self, peer: PeerId, control: Control) {
        self.out.push_back((peer, GsFrame::Control(control)));
    }

    fn send_message(&mut self, peer: PeerId, id: MessageId, kind: MessageKind, payload: &Payload) {
        if self
            .dont_want
            .get(&peer)
            .is_some_and(|ids| ids.contains(&id))
        {
            self.stats.idontwant_skips += 1;
            return;
        }
        self.out.push_back((
            peer,
            GsFrame::Message {
                id,
                kind,
                payload: payload.clone(),
                overhead: self.cfg.message_overhead,
            },
        ));
    }

    /// Records a message seen for the first time: cache, current window, delivery.
    fn accept(&mut self, id: MessageId, kind: MessageKind, payload: Payload) {
        self.seen.insert(id);
        self.asked.remove(&id);
        self.cache.insert(id, (kind, payload));
        if let Some(window) = self.windows.front_mut() {
            window.push(id);
        }
        self.delivered.push_back(id);
    }

    fn heartbeat(&mut self, now: Time) {
        self.backoff.retain(|_, until| *until > now);
        if self.mesh.len() < self.cfg.d_lo {
            let mut candidates: Vec<PeerId> = self
                .peers
                .iter()
                .copied()
                .filter(|p| !self.mesh.contains(p) && !self.backoff.contains_key(p))
                .collect();
            candidates.shuffle(&mut self.rng);
            let wanted = self.cfg.d.saturating_sub(self.mesh.len());
            for peer in candidates.into_iter().take(wanted) {
                self.mesh.insert(peer);
                self.control(
                    peer,
                    Control {
                        graft: true,
                        ..Control::default()
                    },
                );
            }
        } else if self.mesh.len() > self.cfg.d_hi {
            let mut members: Vec<PeerId> = self.mesh.iter().copied().collect();
            members.shuffle(&mut self.rng);
            for peer in members.into_iter().skip(self.cfg.d) {
                self.mesh.remove(&peer);
                self.backoff.insert(peer, now + self.cfg.prune_backoff);
                self.control(
                    peer,
                    Control {
                        prune: true,
                        ..Control::default()
                    },
                );
            }
        }

        let ids: Vec<MessageId> = self
            .windows
            .iter()
            .take(self.cfg.history_gossip)
            .flatten()
            .copied()
            .take(self.cfg.max_ihave_length)
            .collect();
        if !ids.is_empty() {
            let mut candidates: Vec<PeerId> = self
                .peers
                .iter()
                .copied()
                .filter(|p| !self.mesh.contains(p))
                .collect();
            candidates.shuffle(&mut self.rng);
            let count = self
                .cfg
                .d_lazy
                .max(candidates.len() * self.cfg.gossip_factor_permille / 1000);
            for peer in candidates.into_iter().take(count) {
                self.control(
                    peer,
                    Control {
                        ihave: ids.clone(),
                        ..Control::default()
                    },
                );
            }
        }

        self.windows.push_front(Vec::new());
        while self.windows.len() > self.cfg.history_length.max(1) {
            for id in self.windows.pop_back().unwrap_or_default() {
                self.cache.remove(&id);
            }
        }
    }

    fn handle_control(&mut self, from: PeerId, c: Control, now: Time) {
        if c.graft {
            if self.backoff.contains_key(&from) {
                self.control(
                    from,
                    Control {
                        prune: true,
                        ..Control::default()
                    },
                );
            } else if self.peers.contains(&from) {
                self.mesh.insert(from);
            }
        }
        if c.prune {
            self.mesh.remove(&from);
            self.backoff.insert(from, now + self.cfg.prune_backoff);
        }
        if !c.idontwant.is_empty() {
            self.dont_want.entry(from).or_default().extend(c.idontwant);
        }
        let followup = self.cfg.iwant_followup;
        let wanted: Vec<MessageId> = c
            .ihave
            .into_iter()
            .filter(|id| {
                !self.seen.contains(id)
                    && self
                        .asked
                        .get(id)
                        .is_none_or(|&at| now >= at.saturating_add(followup))
            })
            .collect();
        if !wanted.is_empty() {
            for id in &wanted {
                self.asked.insert(*id, now);
            }
            self.control(
                from,
                Control {
                    iwant: wanted,
                    ..Control::default()
                },
            );
        }
        for id in c.iwant {
            if let Some((kind, payload)) = self.cache.get(&id).cloned() {
                self.send_message(from, id, kind, &payload);
            }
        }
    }
}

impl SimNode for Gossipsub {
    type Frame = GsFrame;

    fn frame_cost(frame: &GsFrame) -> FrameCost {
        match frame {
            GsFrame::Message {
                kind,
                payload,
                overhead,
                ..
            } => FrameCost {
                bytes: payload.len() + overhead,
                payloads: 1,
                block_payloads: u64::from(*kind == MessageKind::Block),
                control: 0,
            },
            GsFrame::Control(c) => {
                let ids = c.ihave.len() + c.iwant.len() + c.idontwant.len();
                let lists = [&c.ihave, &c.iwant, &c.idontwant]
                    .iter()
                    .filter(|l| !l.is_empty())
                    .count();
                FrameCost {
                    bytes: 8 + 2 * usize::from(c.graft) + 2 * usize::from(c.prune) + 34 * ids,
                    payloads: 0,
                    block_payloads: 0,
                    control: u64::from(c.graft) + u64::from(c.prune) + lists as u64,
                }
            }
        }
    }

    fn publish(
        &mut self,
        kind: MessageKind,
        payload: Payload,
        _now: Time,
    ) -> Result<MessageId, GossipError> {
        let id = MessageId::of(&payload);
        if self.seen.contains(&id) {
            return Err(GossipError::Duplicate);
        }
        self.accept(id, kind, payload.clone());
        let mut targets: Vec<PeerId> = if self.cfg.flood_publish {
            self.peers.iter().copied().collect()
        } else {
            self.mesh.iter().copied().collect()
        };
        if targets.is_empty() {
            // No mesh yet: gossipsub's fanout, `d` random peers.
            targets = self.peers.iter().copied().collect();
            targets.shuffle(&mut self.rng);
            targets.truncate(self.cfg.d);
        }
        for peer in targets {
            self.send_message(peer, id, kind, &payload);
        }
        Ok(id)
    }

    fn handle_frame(&mut self, from: PeerId, frame: GsFrame, now: Time) -> Result<(), GossipError> {
        match frame {
            GsFrame::Control(c) => self.handle_control(from, c, now),
            GsFrame::Message {
                id,
                kind,
                payload,
                overhead,
            } => {
                if self.seen.contains(&id) {
                    self.stats.duplicates += 1;
                    return Ok(());
                }
                self.accept(id, kind, payload.clone());
                let others: Vec<PeerId> =
                    self.mesh.iter().copied().filter(|&p| p != from).collect();
                if self
                    .cfg
                    .idontwant_threshold
                    .is_some_and(|t| payload.len() + overhead > t)
                {
                    for &peer in &others {
                        self.control(
                            peer,
                            Control {
                                idontwant: vec![id],
                                ..Control::default()
                            },
                        );
                    }
                }
                for peer in others {
                    self.send_message(peer, id, kind, &payload);
                }
            }
        }
        Ok(())
    }

    fn handle_send_complete(&mut self, _peer: PeerId, _send_id: SendId, _now: Time) {}

    fn handle_timeout(&mut self, now: Time) {
        if now >= self.next_heartbeat {
            self.heartbeat(now);
            self.next_heartbeat = self
                .next_heartbeat
                .saturating_add(self.cfg.heartbeat)
                .max(now + 1);
        }
    }

    fn add_peer(&mut self, peer: PeerId, _rtt_us: u32, _now: Time) -> Result<(), GossipError> {
        if !self.peers.insert(peer) {
            return Err(GossipError::PeerExists(peer));
        }
        Ok(())
    }

    fn remove_peer(&mut self, peer: PeerId, _now: Time) -> Result<(), GossipError> {
        if !self.peers.remove(&peer) {
            return Err(GossipError::UnknownPeer(peer));
        }
        self.mesh.remove(&peer);
        self.dont_want.remove(&peer);
        Ok(())
    }

    fn poll_transmit(&mut self, _now: Time) -> Option<SimTransmit<GsFrame>> {
        let (peer, frame) = loop {
            let (peer, frame) = self.out.pop_front()?;
            // An IDONTWANT that arrived while the message waited for the link cancels it.
            if let GsFrame::Message { id, .. } = &frame
                && self
                    .dont_want
                    .get(&peer)
                    .is_some_and(|ids| ids.contains(id))
            {
                self.stats.idontwant_skips += 1;
                continue;
            }
            break (peer, frame);
        };
        self.next_send += 1;
        Some(SimTransmit {
            peer,
            send_id: self.next_send,
            frame,
        })
    }

    fn poll_delivered(&mut self) -> Option<MessageId> {
        self.delivered.pop_front()
    }

    fn poll_timeout(&self) -> Option<Time> {
        Some(self.next_heartbeat)
    }
}
