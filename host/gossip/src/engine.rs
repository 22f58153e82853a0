//! The sans-IO gossip engine: one per node.
//!
//! Inputs arrive through `handle_*` methods and [`GossipEngine::publish`]; outputs are pulled
//! with [`GossipEngine::poll_transmit`], [`GossipEngine::poll_event`] and
//! [`GossipEngine::poll_timeout`]. The engine never reads a clock: every time-dependent call
//! takes `now` ([`Time`], microseconds on any monotonic scale the driver chooses).
//!
//! Mechanics the engine owns, whatever the policy decides:
//! - dedup of message ids: a bounded, expiring [`SeenCache`] marks an id the moment its payload
//!   first arrives (before it is forwarded, while its forwards are queued or in flight), and
//!   ids only announced so far are tracked as fetches, so they are requested once; a bounded,
//!   expiring store of recent messages serves requests;
//! - one FIFO per priority class and peer; high is always dequeued first, and each peer's
//!   queues drain independently, limited only by that peer's `max_inflight_per_peer`;
//! - per-send timeouts, counted into [`PeerStats::recent_failures`];
//! - quorum-and-cancel: once `quorum` planned pushes of a message are delivered, its planned
//!   pushes that have not started are cancelled (downgraded to announces by default); pushes
//!   already in flight are left to finish;
//! - announce → request → push: the request goes to the announcer with the fewest recent
//!   failures and lowest RTT, moves on to another announcer if it is not acknowledged or not
//!   answered in time (timeouts double per attempt and grow with the bytes being fetched), and
//!   is hedged to a new announcer expected to answer much sooner;
//! - batching of small items queued for the same peer and class into one transmission;
//! - bounds on what a peer can make us hold: fetches per announcer and in total, announced
//!   sizes within the message limit (a larger one is a [`PeerFault`]), the answer timeout of
//!   a request grows only with the bytes asked of that same peer and never beyond
//!   [`EngineConfig::max_response_timeout`], and every per-peer queue is indexed;
//! - what a stateful policy hears ([`Policy::on_event`]): duplicates, peers joining and
//!   leaving, a tick every [`EngineConfig::policy_tick`]; and for a policy that builds a
//!   spreading tree ([`Policy::link_control`]), the PlumTree mechanics: once this node is on
//!   the tree (a link of it carried a GRAFT, or an unasked first copy), an announce of a small
//!   message is waited on for the graft timer (tuned from measured gaps, [`crate::links`])
//!   before it is pulled, and then reported `missing` and grafted; while the node is on no
//!   tree link, such an announce is pulled at once and its announcer grafted the same way (the
//!   node joins the tree through its fastest path); a duplicate push is answered with PRUNE; a
//!   peer's PRUNE / GRAFT is heard as `duplicate` / `missing` of that link, within a per-peer
//!   budget ([`EngineConfig::link_burst`]) whatever the peer sends.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::Bound;

use crate::error::{GossipError, PeerFault};
use crate::links::GapTimer;
use crate::peer::{Inflight, Item, PeerState, Tag, frame_for};
use crate::policy::{MessageKind, MessageMeta, PeerStats, Policy, PolicyEvent, Priority, SendMode};
use crate::seen::SeenCache;
use crate::wire::{AnnounceItem, Frame, LinkItem, LinkOp, MAX_PAYLOAD, MessageId, Payload};
use crate::{PeerId, Time};

/// Identifies one transmission handed out by [`GossipEngine::poll_transmit`].
pub type SendId = u64;

const MS: Time = 1_000;

/// Tunables of the engine mechanics (not of the policy).
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Transmissions a peer may have outstanding at once.
    pub max_inflight_per_peer: usize,
    /// Pushes with payloads smaller than this may be batched with other small items.
    pub batch_threshold: usize,
    /// Size cap of a batched transmission, in bytes.
    pub batch_max_bytes: usize,
    /// Ids the seen cache holds at most.
    pub seen_capacity: usize,
    /// How long an id stays in the seen cache.
    pub seen_ttl: Time,
    /// Messages the store (served to requests) holds at most.
    pub store_capacity: usize,
    /// How long a message stays in the store.
    pub store_ttl: Time,
    /// Time for a request to be acknowledged by the announcer before another announcer is
    /// asked (doubles with every attempt).
    pub request_ack_timeout: Time,
    /// How much earlier a new announcer must be expected to acknowledge a request than the
    /// current, unacknowledged one before it is asked too.
    pub request_hedge_margin: Time,
    /// Base time to wait for the answer once the request was acknowledged (doubles with every
    /// attempt).
    pub request_timeout: Time,
    /// Added to `request_timeout` per KiB of the messages being fetched from the same peer (a
    /// slow link with many fetches outstanding must not time out and re-request them all).
    pub request_timeout_per_kib: Time,
    /// Longest answer timeout of an acknowledged request, whatever was announced.
    pub max_response_timeout: Time,
    /// Fetches (ids announced but not yet received) tracked at most; announces of new ids
    /// beyond it are ignored (the message can still be pushed or announced again later).
    pub max_fetches: usize,
    /// Fetches one peer may be an announcer of; a new id announced beyond it is a
    /// [`PeerFault::TooManyFetches`] (an honest peer answers what it announced).
    pub max_fetches_per_peer: usize,
    /// Largest payload size an announce may claim; above it is a
    /// [`PeerFault::AnnouncedSizeTooLarge`] (such a message could never be delivered).
    pub max_announced_size: u32,
    /// Requests made for one id before the fetch is given up.
    pub max_request_attempts: u32,
    /// Timeout of pushes that answer requests.
    pub serve_timeout: Time,
    /// Failures older than this no longer count in `recent_failures`.
    pub failure_window: Time,
    /// RTT reported for a peer before any sample, in microseconds.
    pub initial_rtt_us: u32,
    /// Sends completing faster than this give RTT samples (larger ones measure bandwidth).
    pub rtt_sample_max_bytes: usize,
    /// Cancelled planned pushes become announces (so the peer can still pull).
    pub announce_cancelled_pushes: bool,
    /// A planned push that times out or fails is followed by an announce.
    pub announce_failed_pushes: bool,
    /// Check that a pushed payload's id is [`EngineConfig::message_id`] of it before accepting
    /// it.
    pub verify_payload_ids: bool,
    /// The id of a message of a kind: by default the sha256 of the payload
    /// ([`MessageId::of`]). An application whose messages carry a signed header can make the
    /// id cover only the header, so variants of one message that differ elsewhere share an id
    /// and deduplicate (modnode: a block's id is its header hash).
    pub message_id: fn(MessageKind, &[u8]) -> MessageId,
    /// Messages that travelled this many hops are delivered but not forwarded.
    pub max_hops: u32,
    /// Network size given to the policy; `None` = connected peers + 1.
    pub network_size: Option<u32>,
    /// Hold received messages until the application judged them
    /// ([`GossipEngine::handle_validated`]): nothing is forwarded or served before, and a
    /// rejected message never is, so an honest node relays only what it checked.
    pub validate_before_relay: bool,
    /// Shortest time between two ticks told to the policy.
    pub policy_tick: Time,
    /// PRUNE / GRAFT items one peer may make this node hear at once, and this node send it at
    /// once; beyond it, [`EngineConfig::link_per_sec`]. Items heard over it are ignored
    /// (counted), never a fault: they cannot cost more than this, nor cut a link.
    pub link_burst: u32,
    /// PRUNE / GRAFT items per second per peer and direction after the burst.
    pub link_per_sec: u32,
}

/// The default message id: the sha256 of the payload, whatever the kind.
pub fn payload_message_id(_kind: MessageKind, payload: &[u8]) -> MessageId {
    MessageId::of(payload)
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_inflight_per_peer: 4,
            batch_threshold: 1024,
            batch_max_bytes: 16 * 1024,
            seen_capacity: 65_536,
            seen_ttl: 120_000 * MS,
            store_capacity: 4_096,
            store_ttl: 30_000 * MS,
            request_ack_timeout: 100 * MS,
            request_hedge_margin: 20 * MS,
            request_timeout: 150 * MS,
            request_timeout_per_kib: 2 * MS,
            max_response_timeout: 10_000 * MS,
            max_fetches: 4_096,
            max_fetches_per_peer: 1_024,
            max_announced_size: MAX_PAYLOAD,
            max_request_attempts: 10,
            serve_timeout: 2_000 * MS,
            failure_window: 10_000 * MS,
            initial_rtt_us: 100_000,
            rtt_sample_max_bytes: 2048,
            announce_cancelled_pushes: true,
            announce_failed_pushes: true,
            verify_payload_ids: true,
            message_id: payload_message_id,
            max_hops: 64,
            network_size: None,
            validate_before_relay: false,
            policy_tick: 1_000 * MS,
            link_burst: 32,
            link_per_sec: 16,
        }
    }
}

/// A transmission the driver must send to `peer`, then report with
/// [`GossipEngine::handle_send_complete`] or [`GossipEngine::handle_send_failed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Destination.
    pub peer: PeerId,
    /// Handle to report completion with.
    pub send_id: SendId,
    /// Priority class (maps to a stream priority in a real transport).
    pub priority: Priority,
    /// What to send.
    pub frame: Frame,
}

impl Transmit {
    /// The wire bytes of the frame.
    pub fn encode(&self) -> Result<Vec<u8>, crate::error::WireError> {
        self.frame.encode()
    }
}

/// Something the application should know about.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A message arrived for the first time.
    Delivered {
        /// Its id.
        id: MessageId,
        /// Its kind.
        kind: MessageKind,
        /// The message.
        payload: Payload,
        /// The peer that sent it.
        from: PeerId,
    },
}

/// Counters for diagnostics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Pushes received for ids already seen.
    pub duplicate_pushes: u64,
    /// Pushes whose payload did not hash to their id.
    pub invalid_pushes: u64,
    /// Messages delivered to the application.
    pub delivered: u64,
    /// Transmissions handed to the driver.
    pub transmits: u64,
    /// Transmissions that carried more than one item.
    pub batched_transmits: u64,
    /// Transmissions that timed out.
    pub send_timeouts: u64,
    /// Transmissions the driver reported failed.
    pub send_failures: u64,
    /// Planned pushes cancelled because the quorum was met.
    pub quorum_cancelled: u64,
    /// Queued items dropped because the peer turned out to have the message.
    pub redundant_dropped: u64,
    /// Requests queued.
    pub requests_sent: u64,
    /// Pushes queued to answer requests.
    pub requests_served: u64,
    /// Fetches given up after `max_request_attempts`.
    pub fetches_abandoned: u64,
    /// Announces of new ids ignored because [`EngineConfig::max_fetches`] were in progress.
    pub announces_dropped: u64,
    /// Policy plans naming more targets than the peers offered, replaced by flooding.
    pub plans_over_peers: u64,
    /// Announced messages not delivered within the graft timer (reported `missing`).
    pub missing: u64,
    /// PRUNE items queued to peers.
    pub prunes_sent: u64,
    /// GRAFT items queued to peers.
    pub grafts_sent: u64,
    /// PRUNE / GRAFT items heard from peers and told to the policy.
    pub link_heard: u64,
    /// PRUNE / GRAFT items from peers over their budget, ignored.
    pub link_ignored: u64,
    /// Announces pulled at once, their announcer grafted, because this node was on no tree
    /// link yet (it joined the tree).
    pub joins: u64,
}

/// How much state the engine holds: what the caps bound.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateSizes {
    /// Ids in the seen cache.
    pub seen: usize,
    /// Messages in the store.
    pub stored: usize,
    /// Fetches in progress.
    pub fetches: usize,
    /// Messages awaiting the application's verdict.
    pub awaiting: usize,
    /// Items queued to or in flight to peers, over all peers.
    pub peer_items: usize,
}

#[derive(Debug)]
struct Stored {
    kind: MessageKind,
    payload: Payload,
    /// Hops the message travelled to reach this node.
    hops: u32,
    expires: Time,
    /// Peers known to have it.
    have: BTreeSet<PeerId>,
    quorum: u32,
    pushes_done: u32,
    priority: Priority,
    timeout: Time,
}

#[derive(Debug)]
struct Fetch {
    kind: MessageKind,
    size: u32,
    /// Peers that announced the id, in order of arrival.
    announcers: Vec<PeerId>,
    /// Announcers asked in the current round.
    tried: Vec<PeerId>,
    attempts: u32,
    current: Option<PeerId>,
    /// The current request was acknowledged.
    acked: bool,
    /// When the current request was queued.
    asked_at: Time,
    deadline: Time,
    /// Waiting for the eager copy (the graft timer runs until `deadline`); nothing asked yet.
    waiting: bool,
    /// When the first announce arrived.
    announced_at: Time,
}

/// The gossip engine of one node, generic over its [`Policy`].
#[derive(Debug)]
pub struct GossipEngine<P> {
    cfg: EngineConfig,
    policy: P,
    peers: BTreeMap<PeerId, PeerState>,
    seen: SeenCache,
    store: BTreeMap<MessageId, Stored>,
    store_order: VecDeque<(Time, MessageId)>,
    fetches: BTreeMap<MessageId, Fetch>,
    /// Received messages waiting for the application's verdict, with the peer to not send
    /// them back to.
    awaiting: BTreeMap<MessageId, PeerId>,
    events: VecDeque<Event>,
    next_send_id: SendId,
    rr_cursor: Option<PeerId>,
    stats: EngineStats,
    /// When the policy last heard a tick.
    last_tick: Option<Time>,
    /// The graft timer of tree-building policies.
    gaps: GapTimer,
}

impl<P: Policy> GossipEngine<P> {
    /// A node with no peers.
    pub fn new(cfg: EngineConfig, policy: P) -> Self {
        GossipEngine {
            seen: SeenCache::new(cfg.seen_capacity, cfg.seen_ttl),
            cfg,
            policy,
            peers: BTreeMap::new(),
            store: BTreeMap::new(),
            store_order: VecDeque::new(),
            fetches: BTreeMap::new(),
            awaiting: BTreeMap::new(),
            events: VecDeque::new(),
            next_send_id: 0,
            rr_cursor: None,
            stats: EngineStats::default(),
            last_tick: None,
            gaps: GapTimer::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// Diagnostic counters.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// Sets the network size given to the policy.
    pub fn set_network_size(&mut self, n: u32) {
        self.cfg.network_size = Some(n);
    }

    /// Connected peer handles, ascending.
    pub fn peers(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.peers.keys().copied()
    }

    /// Registers a connected peer.
    pub fn add_peer(&mut self, peer: PeerId) -> Result<(), GossipError> {
        if self.peers.contains_key(&peer) {
            return Err(GossipError::PeerExists(peer));
        }
        self.peers.insert(peer, PeerState::default());
        self.policy.on_event(&PolicyEvent::PeerJoined(peer));
        Ok(())
    }

    /// Forgets a disconnected peer: its queues and sends in flight are dropped, and fetches
    /// waiting on it move to another announcer.
    pub fn remove_peer(&mut self, peer: PeerId, now: Time) -> Result<(), GossipError> {
        self.peers
            .remove(&peer)
            .ok_or(GossipError::UnknownPeer(peer))?;
        let mut retry = Vec::new();
        for (id, fetch) in &mut self.fetches {
            fetch.announcers.retain(|&p| p != peer);
            if fetch.current == Some(peer) {
                retry.push(*id);
            }
        }
        for msg in self.store.values_mut() {
            msg.have.remove(&peer);
        }
        for id in retry {
            self.next_fetch_attempt(id, now);
        }
        self.policy.on_event(&PolicyEvent::PeerLeft(peer));
        Ok(())
    }

    /// Feeds an RTT measurement of the transport (e.g. QUIC's) for `peer`.
    pub fn handle_rtt_sample(&mut self, peer: PeerId, rtt_us: u32) {
        if let Some(state) = self.peers.get_mut(&peer) {
            state.rtt_sample(rtt_us);
        }
    }

    /// How much state the engine holds.
    pub fn state_sizes(&self) -> StateSizes {
        StateSizes {
            seen: self.seen.len(),
            stored: self.store.len(),
            fetches: self.fetches.len(),
            awaiting: self.awaiting.len(),
            peer_items: self.peers.values().map(PeerState::items_held).sum(),
        }
    }

    /// True if the message is held in the store.
    pub fn has_message(&self, id: &MessageId) -> bool {
        self.store.contains_key(id)
    }

    /// Statistics of every peer as the policy would see them for message `id`.
    pub fn peer_stats(&self, id: Option<&MessageId>, now: Time) -> Vec<PeerStats> {
        let have = id.and_then(|id| self.store.get(id)).map(|m| &m.have);
        self.stats_for(have, None, now)
    }

    /// Publishes a message created by this node and plans its first sends.
    pub fn publish(
        &mut self,
        kind: MessageKind,
        payload: impl Into<Payload>,
        now: Time,
    ) -> Result<MessageId, GossipError> {
        let payload: Payload = payload.into();
        if payload.len() > MAX_PAYLOAD as usize {
            return Err(GossipError::PayloadTooLarge(payload.len()));
        }
        self.expire(now);
        self.tick(now);
        let id = (self.cfg.message_id)(kind, &payload);
        if self.seen.contains(&id, now) || self.store.contains_key(&id) {
            return Err(GossipError::Duplicate);
        }
        self.seen.insert(id, now);
        let announcers = self.finish_fetch(&id, now);
        self.store_insert(id, kind, payload, 0, now);
        for peer in announcers {
            self.note_has(id, peer);
        }
        self.disseminate(id, None, now);
        Ok(id)
    }

    /// Decodes and handles a datagram received from `from`.
    pub fn handle_datagram(
        &mut self,
        from: PeerId,
        bytes: &[u8],
        now: Time,
    ) -> Result<(), GossipError> {
        let frame = Frame::decode(bytes)?;
        self.handle_frame(from, frame, now)
    }

    /// Handles a frame received from `from`.
    ///
    /// A [`GossipError::Peer`] means the peer broke the protocol: the rest of the frame was
    /// ignored; penalise the peer (the driver disconnects it).
    pub fn handle_frame(
        &mut self,
        from: PeerId,
        frame: Frame,
        now: Time,
    ) -> Result<(), GossipError> {
        if !self.peers.contains_key(&from) {
            return Err(GossipError::UnknownPeer(from));
        }
        self.expire(now);
        self.tick(now);
        self.on_frame(from, frame, now)?;
        Ok(())
    }

    /// Tells the policy the time, at most every [`EngineConfig::policy_tick`] (the engine also
    /// does so whenever it handles a frame, a publication or a timeout).
    pub fn handle_tick(&mut self, now: Time) {
        self.tick(now);
    }

    fn tick(&mut self, now: Time) {
        if self
            .last_tick
            .is_some_and(|t| now.saturating_sub(t) < self.cfg.policy_tick)
        {
            return;
        }
        self.last_tick = Some(now);
        self.policy.on_event(&PolicyEvent::Tick(now / MS));
    }

    /// Queues a PRUNE or GRAFT about `id` to `peer`, within the peer's outgoing budget.
    fn send_link(&mut self, peer: PeerId, id: MessageId, kind: MessageKind, op: LinkOp, now: Time) {
        let (burst, rate) = (self.cfg.link_burst, self.cfg.link_per_sec);
        let timeout = self.cfg.serve_timeout;
        let Some(state) = self.peers.get_mut(&peer) else {
            return;
        };
        if !state.link_out.take(now, burst, rate) {
            return;
        }
        // A GRAFT puts the link on the tree (the peer will push to us), a PRUNE takes it off.
        state.tree = op == LinkOp::Graft;
        if state.enqueue(
            kind.default_priority(),
            Item::Link { id, kind, op },
            timeout,
        ) {
            match op {
                LinkOp::Prune => self.stats.prunes_sent = self.stats.prunes_sent.saturating_add(1),
                LinkOp::Graft => self.stats.grafts_sent = self.stats.grafts_sent.saturating_add(1),
            }
        }
    }

    /// A peer's PRUNE / GRAFT: heard by the policy as `duplicate` / `missing` of that link,
    /// within the peer's budget (over it the item is ignored, not a fault).
    fn on_link(&mut self, from: PeerId, item: LinkItem, now: Time) {
        let (burst, rate) = (self.cfg.link_burst, self.cfg.link_per_sec);
        let Some(state) = self.peers.get_mut(&from) else {
            return;
        };
        if !state.link_in.take(now, burst, rate) {
            self.stats.link_ignored = self.stats.link_ignored.saturating_add(1);
            return;
        }
        self.stats.link_heard = self.stats.link_heard.saturating_add(1);
        state.tree = item.op == LinkOp::Graft;
        let (message, kind) = (id_head(&item.id), item.kind);
        self.policy.on_event(&match item.op {
            LinkOp::Prune => PolicyEvent::Duplicate {
                peer: from,
                message,
                kind,
            },
            LinkOp::Graft => PolicyEvent::Missing {
                peer: from,
                message,
                kind,
            },
        });
    }

    fn on_frame(&mut self, from: PeerId, frame: Frame, now: Time) -> Result<(), PeerFault> {
        match frame {
            Frame::Push {
                id,
                kind,
                hops,
                payload,
            } => self.on_push(from, id, kind, hops, payload, now)?,
            Frame::Announce { items } => {
                for item in items {
                    self.on_announce(from, item, now)?;
                }
            }
            Frame::Request { ids } => {
                for id in ids {
                    self.on_request(from, id);
                }
            }
            Frame::Link { items } => {
                for item in items {
                    self.on_link(from, item, now);
                }
            }
            Frame::Batch { frames } => {
                for inner in frames {
                    self.on_frame(from, inner, now)?;
                }
            }
        }
        Ok(())
    }

    fn on_push(
        &mut self,
        from: PeerId,
        id: MessageId,
        kind: MessageKind,
        hops: u32,
        payload: Payload,
        now: Time,
    ) -> Result<(), PeerFault> {
        // A variant of a message we checked and hold: the bytes differ under one id. Only a
        // validated copy tells who is wrong; while ours awaits its verdict it might be ours
        // that is forged, so the variant is merely a duplicate then.
        if self.cfg.validate_before_relay
            && !self.awaiting.contains_key(&id)
            && let Some(stored) = self.store.get(&id)
            && stored.payload != payload
            && (self.cfg.message_id)(kind, &payload) == id
        {
            return Err(PeerFault::ConflictingPayload { id });
        }
        if self.seen.contains(&id, now) || self.store.contains_key(&id) {
            self.stats.duplicate_pushes += 1;
            self.note_has(id, from);
            self.policy.on_event(&PolicyEvent::Duplicate {
                peer: from,
                message: id_head(&id),
                kind,
            });
            if self.policy.link_control().is_some() {
                self.send_link(from, id, kind, LinkOp::Prune, now);
            }
            return Ok(());
        }
        if self.cfg.verify_payload_ids && (self.cfg.message_id)(kind, &payload) != id {
            self.stats.invalid_pushes += 1;
            return Ok(());
        }
        // A first copy pushed unasked comes down a tree link (for a tree-building policy).
        let asked = self
            .fetches
            .get(&id)
            .is_some_and(|f| !f.waiting && f.current == Some(from));
        if !asked
            && self.policy.link_control().is_some()
            && let Some(state) = self.peers.get_mut(&from)
        {
            state.tree = true;
        }
        self.seen.insert(id, now);
        let announcers = self.finish_fetch(&id, now);
        let hops = hops.saturating_add(1);
        self.store_insert(id, kind, payload.clone(), hops, now);
        self.note_has(id, from);
        for peer in announcers {
            self.note_has(id, peer);
        }
        self.stats.delivered += 1;
        self.events.push_back(Event::Delivered {
            id,
            kind,
            payload,
            from,
        });
        if self.cfg.validate_before_relay {
            self.awaiting.insert(id, from);
        } else if hops < self.cfg.max_hops {
            self.disseminate(id, Some(from), now);
        }
        Ok(())
    }

    /// The application's verdict on a delivered message (with
    /// [`EngineConfig::validate_before_relay`]): `valid` forwards it as planned by the policy
    /// and serves it to requests; otherwise it is dropped. Its id stays seen (copies are
    /// ignored) when the id is the payload's hash; an id that covers only part of the payload
    /// (a block's header) is forgotten, so the valid variant can still arrive — the sender of
    /// the invalid one is the application's to penalise.
    /// Returns `false` if the message was not awaiting a verdict.
    pub fn handle_validated(&mut self, id: MessageId, valid: bool, now: Time) -> bool {
        let Some(from) = self.awaiting.remove(&id) else {
            return false;
        };
        if !valid {
            // An id that covers only part of the payload must not lock out the valid variant;
            // one that covers all of it stays seen, so copies of the rejected bytes are ignored.
            if let Some(rejected) = self.store.remove(&id)
                && MessageId::of(&rejected.payload) != id
            {
                self.seen.remove(&id);
            }
            return true;
        }
        let hops = self.store.get(&id).map_or(u32::MAX, |m| m.hops);
        if hops < self.cfg.max_hops {
            self.disseminate(id, Some(from), now);
        }
        true
    }

    fn on_announce(
        &mut self,
        from: PeerId,
        item: AnnounceItem,
        now: Time,
    ) -> Result<(), PeerFault> {
        let id = item.id;
        if item.size > self.cfg.max_announced_size {
            return Err(PeerFault::AnnouncedSizeTooLarge {
                id,
                size: item.size,
                limit: self.cfg.max_announced_size,
            });
        }
        if self.seen.contains(&id, now) || self.store.contains_key(&id) {
            self.note_has(id, from);
            return Ok(());
        }
        let per_peer = self.cfg.max_fetches_per_peer;
        let Some(announcer) = self.peers.get_mut(&from) else {
            return Ok(());
        };
        let at_peer_cap = announcer.fetches >= per_peer;
        if let Some(fetch) = self.fetches.get_mut(&id) {
            // Joining a fetch costs one slot too, but an honest peer can announce what many
            // others announce: over its cap it is just not asked.
            if at_peer_cap || fetch.announcers.contains(&from) {
                return Ok(());
            }
            fetch.announcers.push(from);
            announcer.fetches += 1;
            if fetch.waiting {
                // Nothing asked yet: the graft timer decides when, and whom.
                return Ok(());
            }
            // Hedge: if the unacknowledged request is expected to be acknowledged clearly later
            // (by `request_hedge_margin`) than a request to the new announcer would be, ask the
            // new announcer too.
            let rtt = |p: Option<PeerId>| {
                p.and_then(|p| self.peers.get(&p))
                    .and_then(|s| s.srtt_us)
                    .map_or(Time::from(self.cfg.initial_rtt_us), Time::from)
            };
            let (current, new) = (rtt(fetch.current), rtt(Some(from)));
            let margin = self.cfg.request_hedge_margin;
            if !fetch.acked
                && fetch.asked_at.saturating_add(current)
                    > now.saturating_add(2 * new).saturating_add(margin)
            {
                fetch.tried.retain(|&p| p != from);
                self.next_fetch_attempt(id, now);
            }
            return Ok(());
        }
        if at_peer_cap {
            return Err(PeerFault::TooManyFetches { limit: per_peer });
        }
        if self.fetches.len() >= self.cfg.max_fetches {
            self.stats.announces_dropped += 1;
            return Ok(());
        }
        announcer.fetches += 1;
        // A tree-building policy pushes small messages along its tree and announces them on
        // the other links: on the tree, wait for the tree's copy before pulling (the graft
        // timer); on no tree link yet, pull at once and graft the announcer (join the tree).
        // Larger messages it announces to every peer before sending: pulled at once.
        let control = self
            .policy
            .link_control()
            .filter(|c| item.size <= c.announce_first_above);
        let on_tree = control.is_some() && self.peers.values().any(|s| s.tree);
        let wait = control
            .filter(|_| on_tree)
            .map(|c| self.gaps.timer(&c));
        self.fetches.insert(
            id,
            Fetch {
                kind: item.kind,
                size: item.size,
                announcers: vec![from],
                tried: Vec::new(),
                attempts: 0,
                current: None,
                acked: false,
                asked_at: now,
                deadline: now.saturating_add(wait.unwrap_or(0)),
                waiting: wait.is_some(),
                announced_at: now,
            },
        );
        match (control, wait) {
            (Some(_), None) => self.graft(id, now),
            (None, _) => self.next_fetch_attempt(id, now),
            (Some(_), Some(_)) => {}
        }
        Ok(())
    }

    fn on_request(&mut self, from: PeerId, id: MessageId) {
        if self.awaiting.contains_key(&id) {
            return;
        }
        let Some(msg) = self.store.get(&id) else {
            return;
        };
        let Some(peer) = self.peers.get_mut(&from) else {
            return;
        };
        if peer.has_push(&id) {
            return;
        }
        let item = Item::Push {
            id,
            kind: msg.kind,
            hops: msg.hops,
            payload: msg.payload.clone(),
            planned: false,
        };
        if peer.enqueue(msg.kind.default_priority(), item, self.cfg.serve_timeout) {
            self.stats.requests_served += 1;
        }
    }

    /// Asks the best announcer of `id` not yet asked this round (fewest recent failures, then
    /// lowest RTT, then earliest announce), or gives the fetch up.
    fn next_fetch_attempt(&mut self, id: MessageId, now: Time) {
        let window = self.cfg.failure_window;
        let initial_rtt = self.cfg.initial_rtt_us;
        let Some(fetch) = self.fetches.get_mut(&id) else {
            return;
        };
        if fetch.announcers.is_empty() || fetch.attempts >= self.cfg.max_request_attempts {
            self.drop_fetch(&id);
            self.stats.fetches_abandoned += 1;
            return;
        }
        if fetch.announcers.iter().all(|p| fetch.tried.contains(p)) {
            fetch.tried.clear();
        }
        let peers = &self.peers;
        let best = fetch
            .announcers
            .iter()
            .enumerate()
            .filter(|(_, p)| !fetch.tried.contains(p))
            .min_by_key(|&(i, p)| {
                let (failures, rtt) = peers.get(p).map_or((u32::MAX, u32::MAX), |s| {
                    (
                        s.recent_failures(now, window),
                        s.srtt_us.unwrap_or(initial_rtt),
                    )
                });
                (failures, rtt, i)
            })
            .map(|(_, p)| *p);
        let Some(peer) = best else {
            self.drop_fetch(&id);
            self.stats.fetches_abandoned += 1;
            return;
        };
        let previous = fetch.current.replace(peer);
        let size = u64::from(fetch.size);
        fetch.tried.push(peer);
        let round = fetch.attempts.min(6);
        fetch.attempts += 1;
        fetch.acked = false;
        fetch.asked_at = now;
        // Never shorter than two round trips to the peer asked: on a loaded host (or a slow
        // link) a fixed timeout fires before an honest answer can arrive, and every early
        // re-request becomes a duplicate payload.
        let srtt = self
            .peers
            .get(&peer)
            .and_then(|s| s.srtt_us)
            .map_or(0, Time::from);
        let ack_timeout = self
            .cfg
            .request_ack_timeout
            .max(srtt.saturating_mul(2))
            .saturating_mul(1 << round);
        let priority = fetch.kind.default_priority();
        // Until the announcer acknowledges the request (which may first wait in our queue to
        // it), only the acknowledgement timeout applies.
        fetch.deadline = now.saturating_add(ack_timeout);
        // A request still queued to the previous announcer is no longer wanted; the bytes
        // asked move with the request.
        if let Some(state) = previous.and_then(|p| self.peers.get_mut(&p)) {
            state.fetch_bytes = state.fetch_bytes.saturating_sub(size);
            if previous != Some(peer) {
                state.remove_queued(&id, &[Tag::Request]);
            }
        }
        if let Some(state) = self.peers.get_mut(&peer) {
            state.fetch_bytes = state.fetch_bytes.saturating_add(size);
            if state.enqueue(priority, Item::Request { id }, ack_timeout) {
                self.stats.requests_sent += 1;
            }
        }
    }

    /// Time to wait for an acknowledged request's answer from `peer`: grows with the bytes
    /// being fetched from that peer (so no other peer's announces can stretch it), doubled per
    /// attempt round, at most [`EngineConfig::max_response_timeout`].
    fn response_timeout(&self, peer: PeerId, round: u32) -> Time {
        let bytes = self.peers.get(&peer).map_or(0, |s| s.fetch_bytes);
        let kib = bytes.div_ceil(1024);
        self.cfg
            .request_timeout
            .saturating_add(kib.saturating_mul(self.cfg.request_timeout_per_kib))
            .saturating_mul(1 << round.min(6))
            .min(self.cfg.max_response_timeout)
    }

    /// Removes a fetch and releases what it counted against its announcers.
    fn drop_fetch(&mut self, id: &MessageId) -> Option<Fetch> {
        let fetch = self.fetches.remove(id)?;
        for peer in &fetch.announcers {
            if let Some(state) = self.peers.get_mut(peer) {
                state.fetches = state.fetches.saturating_sub(1);
            }
        }
        if let Some(state) = fetch.current.and_then(|p| self.peers.get_mut(&p)) {
            state.fetch_bytes = state.fetch_bytes.saturating_sub(u64::from(fetch.size));
        }
        Some(fetch)
    }

    /// Ends a fetch because the message arrived; returns the peers that announced it. A
    /// message that arrived while the graft timer ran is a measured gap.
    fn finish_fetch(&mut self, id: &MessageId, now: Time) -> Vec<PeerId> {
        let Some(fetch) = self.drop_fetch(id) else {
            return Vec::new();
        };
        if fetch.waiting {
            self.gaps.sample(now.saturating_sub(fetch.announced_at));
        }
        for peer in self.peers.values_mut() {
            peer.remove_queued(id, &[Tag::Request]);
        }
        fetch.announcers
    }

    /// Records that `peer` has `id` and drops queued pushes/announces of it to that peer.
    fn note_has(&mut self, id: MessageId, peer: PeerId) {
        if let Some(msg) = self.store.get_mut(&id) {
            msg.have.insert(peer);
        }
        if let Some(state) = self.peers.get_mut(&peer) {
            let dropped = state.remove_queued(&id, &[Tag::Push, Tag::Announce]);
            self.stats.redundant_dropped += dropped as u64;
        }
    }

    fn network_size(&self) -> u32 {
        self.cfg.network_size.unwrap_or_else(|| {
            u32::try_from(self.peers.len())
                .unwrap_or(u32::MAX)
                .saturating_add(1)
        })
    }

    fn stats_for(
        &self,
        have: Option<&BTreeSet<PeerId>>,
        origin: Option<PeerId>,
        now: Time,
    ) -> Vec<PeerStats> {
        self.peers
            .iter()
            .map(|(&peer, state)| PeerStats {
                peer,
                rtt_us: state.srtt_us.unwrap_or(self.cfg.initial_rtt_us),
                queue_depth: u32::try_from(state.depth()).unwrap_or(u32::MAX),
                recent_failures: state.recent_failures(now, self.cfg.failure_window),
                has_message: have.is_some_and(|h| h.contains(&peer)),
                is_origin: origin == Some(peer),
            })
            .collect()
    }

    /// Asks the policy for a plan for a stored message and queues its sends.
    fn disseminate(&mut self, id: MessageId, origin: Option<PeerId>, now: Time) {
        let Some(msg) = self.store.get(&id) else {
            return;
        };
        let meta = MessageMeta {
            kind: msg.kind,
            size: u32::try_from(msg.payload.len()).unwrap_or(u32::MAX),
            local_origin: origin.is_none(),
            hops: msg.hops,
            network_size: self.network_size(),
        };
        let peer_stats = self.stats_for(Some(&msg.have), origin, now);
        let mut plan = self.policy.plan(&meta, &peer_stats);
        // A plan may name each peer it was offered once, so its length is bounded by the peer
        // set: a longer one is the policy's fault, its targets are not walked, and the message
        // is flooded instead (delivery never depends on the policy).
        if plan.targets.len() > peer_stats.len() {
            self.stats.plans_over_peers = self.stats.plans_over_peers.saturating_add(1);
            plan = crate::policy::Flood.plan(&meta, &peer_stats);
        }
        let (kind, hops, payload) = (msg.kind, msg.hops, msg.payload.clone());
        let timeout = Time::from(plan.timeout_ms.max(1)) * MS;
        let mut chosen = BTreeSet::new();
        for target in &plan.targets {
            let Some(state) = self.peers.get_mut(&target.peer) else {
                continue;
            };
            if !chosen.insert(target.peer) {
                continue;
            }
            let item = match target.mode {
                SendMode::Push => Item::Push {
                    id,
                    kind,
                    hops,
                    payload: payload.clone(),
                    planned: true,
                },
                SendMode::Announce => Item::Announce {
                    id,
                    kind,
                    size: meta.size,
                },
            };
            state.enqueue(plan.priority, item, timeout);
        }
        if let Some(msg) = self.store.get_mut(&id) {
            msg.quorum = plan.quorum;
            msg.priority = plan.priority;
            msg.timeout = timeout;
        }
    }

    fn store_insert(
        &mut self,
        id: MessageId,
        kind: MessageKind,
        payload: Payload,
        hops: u32,
        now: Time,
    ) {
        let expires = now.saturating_add(self.cfg.store_ttl);
        self.store.insert(
            id,
            Stored {
                kind,
                payload,
                hops,
                expires,
                have: BTreeSet::new(),
                quorum: 0,
                pushes_done: 0,
                priority: kind.default_priority(),
                timeout: self.cfg.serve_timeout,
            },
        );
        self.store_order.push_back((expires, id));
        while self.store.len() > self.cfg.store_capacity.max(1) {
            let Some((_, old)) = self.store_order.pop_front() else {
                break;
            };
            self.store.remove(&old);
            // An evicted message can no longer be relayed: its verdict is not awaited either
            // (or a peer's pushes would grow this map without bound).
            self.awaiting.remove(&old);
        }
    }

    fn expire(&mut self, now: Time) {
        self.seen.expire(now);
        while let Some(&(expires, id)) = self.store_order.front() {
            if expires > now {
                break;
            }
            self.store_order.pop_front();
            if self.store.get(&id).is_some_and(|m| m.expires == expires) {
                self.store.remove(&id);
                // A verdict that never came: the message is gone, forget the wait too.
                self.awaiting.remove(&id);
            }
        }
    }

    /// Reports that transmission `send_id` to `peer` was delivered. Returns `false` if it was
    /// unknown (already timed out, or never handed out).
    pub fn handle_send_complete(&mut self, peer: PeerId, send_id: SendId, now: Time) -> bool {
        let Some(state) = self.peers.get_mut(&peer) else {
            return false;
        };
        let Some(done) = state.finish(send_id) else {
            return false;
        };
        if done.rtt_sample {
            let sample = now.saturating_sub(done.started);
            state.rtt_sample(u32::try_from(sample).unwrap_or(u32::MAX));
        }
        for item in done.items {
            match item {
                Item::Push { id, planned, .. } => {
                    let Some(msg) = self.store.get_mut(&id) else {
                        continue;
                    };
                    msg.have.insert(peer);
                    if planned {
                        msg.pushes_done += 1;
                        if msg.quorum > 0 && msg.pushes_done == msg.quorum {
                            self.cancel_planned_pushes(id);
                        }
                    }
                }
                Item::Request { id } => self.request_acked(id, peer, now),
                Item::Announce { .. } | Item::Link { .. } => {}
            }
        }
        true
    }

    /// The announcer got our request: now wait for the answer.
    fn request_acked(&mut self, id: MessageId, peer: PeerId, now: Time) {
        let Some(fetch) = self.fetches.get(&id) else {
            return;
        };
        if fetch.current != Some(peer) || fetch.acked {
            return;
        }
        let round = fetch.attempts.saturating_sub(1);
        let deadline = now.saturating_add(self.response_timeout(peer, round));
        if let Some(fetch) = self.fetches.get_mut(&id) {
            fetch.acked = true;
            fetch.deadline = deadline;
        }
    }

    /// Reports that transmission `send_id` to `peer` failed (e.g. the stream was reset).
    pub fn handle_send_failed(&mut self, peer: PeerId, send_id: SendId, now: Time) -> bool {
        let Some(state) = self.peers.get_mut(&peer) else {
            return false;
        };
        let Some(failed) = state.finish(send_id) else {
            return false;
        };
        self.stats.send_failures += 1;
        self.on_send_failed(peer, failed, now);
        true
    }

    fn on_send_failed(&mut self, peer: PeerId, failed: Inflight, now: Time) {
        let window = self.cfg.failure_window;
        if let Some(state) = self.peers.get_mut(&peer) {
            state.record_failure(now, window);
        }
        for item in failed.items {
            match item {
                Item::Push {
                    id, planned: true, ..
                } if self.cfg.announce_failed_pushes => self.announce_to(peer, id),
                Item::Request { id }
                    if self
                        .fetches
                        .get(&id)
                        .is_some_and(|f| f.current == Some(peer)) =>
                {
                    self.next_fetch_attempt(id, now);
                }
                _ => {}
            }
        }
    }

    fn announce_to(&mut self, peer: PeerId, id: MessageId) {
        let Some(msg) = self.store.get(&id) else {
            return;
        };
        if msg.have.contains(&peer) {
            return;
        }
        let item = Item::Announce {
            id,
            kind: msg.kind,
            size: u32::try_from(msg.payload.len()).unwrap_or(u32::MAX),
        };
        if let Some(state) = self.peers.get_mut(&peer) {
            state.enqueue(msg.priority, item, msg.timeout);
        }
    }

    /// Quorum met: planned pushes of `id` that have not started are cancelled.
    fn cancel_planned_pushes(&mut self, id: MessageId) {
        let Some(msg) = self.store.get(&id) else {
            return;
        };
        let announce = Item::Announce {
            id,
            kind: msg.kind,
            size: u32::try_from(msg.payload.len()).unwrap_or(u32::MAX),
        };
        let replacement = self.cfg.announce_cancelled_pushes.then_some(announce);
        for state in self.peers.values_mut() {
            if state.cancel_planned_push(&id, replacement.clone()) {
                self.stats.quorum_cancelled += 1;
            }
        }
    }

    /// The graft timer of a waited-for announce ran out (or, on no tree link yet, an announce
    /// came): the message is missing. The best announcer is asked for it, told GRAFT, and the
    /// policy hears `missing` for that link.
    fn graft(&mut self, id: MessageId, now: Time) {
        let Some(fetch) = self.fetches.get_mut(&id) else {
            return;
        };
        let joining = !fetch.waiting;
        fetch.waiting = false;
        let kind = fetch.kind;
        self.next_fetch_attempt(id, now);
        let Some(peer) = self.fetches.get(&id).and_then(|f| f.current) else {
            return;
        };
        if joining {
            self.stats.joins = self.stats.joins.saturating_add(1);
        } else {
            self.stats.missing = self.stats.missing.saturating_add(1);
        }
        self.policy.on_event(&PolicyEvent::Missing {
            peer,
            message: id_head(&id),
            kind,
        });
        self.send_link(peer, id, kind, LinkOp::Graft, now);
    }

    /// Times out sends and fetches whose deadline is at or before `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        self.expire(now);
        self.tick(now);
        let mut expired = Vec::new();
        for (&peer, state) in &mut self.peers {
            expired.extend(state.take_expired(now).into_iter().map(|f| (peer, f)));
        }
        for (peer, failed) in expired {
            self.stats.send_timeouts += 1;
            // The round trip took at least this long: let the RTT estimate see it.
            if failed.rtt_sample
                && let Some(state) = self.peers.get_mut(&peer)
            {
                let elapsed = now.saturating_sub(failed.started);
                state.rtt_sample(u32::try_from(elapsed).unwrap_or(u32::MAX));
            }
            self.on_send_failed(peer, failed, now);
        }
        let due: Vec<MessageId> = self
            .fetches
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            if self.fetches.get(&id).is_some_and(|f| f.waiting) {
                self.graft(id, now);
            } else {
                self.next_fetch_attempt(id, now);
            }
        }
    }

    /// The earliest time [`GossipEngine::handle_timeout`] has work to do, if any.
    pub fn poll_timeout(&self) -> Option<Time> {
        let sends = self.peers.values().flat_map(PeerState::inflight_deadlines);
        let fetches = self.fetches.values().map(|f| f.deadline);
        sends.chain(fetches).min()
    }

    /// The next transmission, if some peer has queued work and a free in-flight slot. Peers are
    /// served round-robin so none is starved.
    pub fn poll_transmit(&mut self, now: Time) -> Option<Transmit> {
        let max = self.cfg.max_inflight_per_peer.max(1);
        let ready = |state: &PeerState| state.inflight_len() < max && state.queued() > 0;
        let peer = match self.rr_cursor {
            Some(c) => self
                .peers
                .range((Bound::Excluded(c), Bound::Unbounded))
                .chain(self.peers.range(..=c))
                .find(|(_, s)| ready(s))
                .map(|(p, _)| *p),
            None => self.peers.iter().find(|(_, s)| ready(s)).map(|(p, _)| *p),
        }?;
        self.rr_cursor = Some(peer);
        let (threshold, max_bytes) = (self.cfg.batch_threshold, self.cfg.batch_max_bytes);
        let rtt_max = self.cfg.rtt_sample_max_bytes;
        let state = self.peers.get_mut(&peer)?;
        let (priority, items, timeout) = state.take_next(threshold, max_bytes)?;
        let send_id = self.next_send_id;
        self.next_send_id += 1;
        let frame = frame_for(&items);
        self.stats.transmits += 1;
        if items.len() > 1 {
            self.stats.batched_transmits += 1;
        }
        let bytes: usize = items.iter().map(Item::wire_len).sum();
        state.start(Inflight {
            send_id,
            started: now,
            deadline: now.saturating_add(timeout),
            items,
            rtt_sample: bytes <= rtt_max,
        });
        Some(Transmit {
            peer,
            send_id,
            priority,
            frame,
        })
    }

    /// The next application event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

/// The first 8 bytes of a message id, little endian: how a policy names a message.
pub fn id_head(id: &MessageId) -> u64 {
    u64::from_le_bytes(id.0.first_chunk::<8>().copied().unwrap_or_default())
}
