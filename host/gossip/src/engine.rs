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
//!   queues drain independently, limited only by that peer's `max_inflight_per_peer`; peers
//!   are served round-robin, or, when the engine routes, oldest item of the highest class
//!   first, so a routed plan's targets are served in the order it names them;
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
//!   the tree (a link of it carried a GRAFT, or an unasked first copy — which grafts a link
//!   not on the tree yet, so both ends agree), an announce of a small message is waited on
//!   for the graft timer (tuned from measured gaps, [`crate::links`]) before it is pulled; it
//!   is reported `missing` and its announcer grafted only when the timer ran out
//!   [`EngineConfig::graft_after_misses`] times more with no tree link delivering in between,
//!   or a tree peer left (a late tree copy is not a lost link); while the node is on no tree
//!   link, such an announce is pulled at once and its announcer grafted (the node joins the
//!   tree through its fastest path); a duplicate push is answered with PRUNE — over a tree
//!   link only when it is the [`EngineConfig::prune_after_duplicates`]th in a row with no
//!   first copy between, and never when ours was pulled (the tree's copy is late, and two
//!   copies of one message meeting on a tree link are no cycle: pruning every such link
//!   cut the tree apart under traffic from many origins); a peer's PRUNE / GRAFT is heard as
//!   `duplicate` / `missing` of that link, within a per-peer budget
//!   ([`EngineConfig::link_burst`]) whatever the peer sends.

use std::collections::{BTreeMap, VecDeque};

mod config;
mod fetch;
mod plan;
mod routes;
mod sends;
mod store;
mod tree;

pub use config::{EngineConfig, payload_message_id};
use fetch::Fetch;
use routes::RouteTable;
pub use routes::{RouteStats, RoutingConfig};
use store::Stored;

use crate::error::{GossipError, PeerFault};
use crate::links::GapTimer;
use crate::peer::{Item, PeerState};
use crate::policy::{MessageKind, PeerStats, Policy, PolicyEvent, Priority, RouteRole};
use crate::seen::SeenCache;
use crate::wire::{Frame, LinkOp, MAX_PAYLOAD, MessageId, Payload, RouteItem};
use crate::{PeerId, Time};

/// Identifies one transmission handed out by [`GossipEngine::poll_transmit`].
pub type SendId = u64;

const MS: Time = 1_000;

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
    /// Announced messages pulled when the graft timer ran out, without a graft: the tree's
    /// links had delivered since the last miss (the tree copy is late, not lost).
    pub timer_pulls: u64,
    /// Copies a tree link pushed after this node had pulled the message: late, not redundant
    /// (no PRUNE).
    pub late_tree_copies: u64,
    /// Duplicates a tree link pushed that were not (yet) answered with PRUNE
    /// ([`EngineConfig::prune_after_duplicates`]).
    pub tolerated_duplicates: u64,
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
    stats: EngineStats,
    /// When the policy last heard a tick.
    last_tick: Option<Time>,
    /// The graft timer of tree-building policies.
    gaps: GapTimer,
    /// Graft timers run out in a row with no tree link delivering in between (a tree peer
    /// leaving counts as enough of them).
    tree_misses: u32,
    /// Distance-vector routes, when the engine routes ([`EngineConfig::routing`]).
    routes: Option<RouteTable>,
    /// Items queued so far, over all peers: the order a routing engine sends them in (oldest
    /// first among the peers that can send, highest class first).
    queued_seq: u64,
    /// The peer served last (round-robin, when the engine does not route).
    rr_cursor: Option<PeerId>,
}

impl<P: Policy> GossipEngine<P> {
    /// A node with no peers.
    pub fn new(cfg: EngineConfig, policy: P) -> Self {
        GossipEngine {
            seen: SeenCache::new(cfg.seen_capacity, cfg.seen_ttl),
            routes: cfg.routing.clone().map(RouteTable::new),
            queued_seq: 0,
            rr_cursor: None,
            cfg,
            policy,
            peers: BTreeMap::new(),
            store: BTreeMap::new(),
            store_order: VecDeque::new(),
            fetches: BTreeMap::new(),
            awaiting: BTreeMap::new(),
            events: VecDeque::new(),
            next_send_id: 0,
            stats: EngineStats::default(),
            last_tick: None,
            gaps: GapTimer::default(),
            tree_misses: 0,
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

    /// Routing counters, when the engine routes.
    pub fn route_stats(&self) -> Option<&RouteStats> {
        self.routes.as_ref().map(|r| &r.stats)
    }

    /// The next hop towards `origin` and the distance (microseconds) through it, when the
    /// engine routes and has a route.
    pub fn route_to(&self, origin: u64) -> Option<(PeerId, u32)> {
        self.routes.as_ref().and_then(|r| r.route(origin))
    }

    /// Where `peer` stands on `origin`'s tree as this node's routes see it
    /// ([`RouteRole::Unknown`] when the engine does not route).
    pub fn route_role(&self, origin: u64, peer: PeerId) -> RouteRole {
        self.routes
            .as_ref()
            .map_or(RouteRole::Unknown, |r| r.role(origin, peer))
    }

    /// Origins the route table holds (0 when the engine does not route).
    pub fn route_origins(&self) -> usize {
        self.routes.as_ref().map_or(0, RouteTable::len)
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
        if let Some(routes) = self.routes.as_mut() {
            routes.peer_added(peer);
        }
        self.policy.on_event(&PolicyEvent::PeerJoined(peer));
        Ok(())
    }

    /// Forgets a disconnected peer: its queues and sends in flight are dropped, and fetches
    /// waiting on it move to another announcer.
    pub fn remove_peer(&mut self, peer: PeerId, now: Time) -> Result<(), GossipError> {
        let gone = self
            .peers
            .remove(&peer)
            .ok_or(GossipError::UnknownPeer(peer))?;
        if gone.tree {
            // A tree link is gone: the next message the timer misses grafts a new one.
            self.tree_misses = self.tree_misses.max(self.cfg.graft_after_misses);
        }
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
        let (peers, initial) = (&self.peers, self.cfg.initial_rtt_us);
        if let Some(routes) = self.routes.as_mut() {
            routes.peer_removed(peer, now, &|p| link_cost(peers, initial, p));
        }
        self.policy.on_event(&PolicyEvent::PeerLeft(peer));
        self.route_upkeep(now);
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
        let own = self.routes.as_ref().map(RouteTable::own);
        if let Some(stored) = self.store.get_mut(&id) {
            stored.origin = own;
        }
        for peer in announcers {
            self.note_has(id, peer);
        }
        self.disseminate(id, None, now);
        self.route_upkeep(now);
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
        let handled = self.on_frame(from, frame, now);
        self.route_upkeep(now);
        handled?;
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

    fn on_frame(&mut self, from: PeerId, frame: Frame, now: Time) -> Result<(), PeerFault> {
        match frame {
            Frame::Push {
                id,
                kind,
                hops,
                origin,
                payload,
            } => self.on_push(from, id, kind, hops, origin, payload, now)?,
            Frame::Routes { items } => self.on_routes(from, &items, now),
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

    #[allow(clippy::too_many_arguments)]
    fn on_push(
        &mut self,
        from: PeerId,
        id: MessageId,
        kind: MessageKind,
        hops: u32,
        origin: Option<u64>,
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
        // Asked once: a wasm policy's answer goes through its slot and its parameters. A
        // message that follows its origin's routes is no business of the tree mechanics: its
        // pushes come from the parent, and a duplicate is a route changing, not a link to prune.
        let routed = origin.is_some_and(|o| {
            self.routes
                .as_ref()
                .is_some_and(|r| r.route(o).is_some() || r.own() == o)
        });
        let control = if routed {
            None
        } else {
            self.policy.link_control()
        };
        if self.seen.contains(&id, now) || self.store.contains_key(&id) {
            self.stats.duplicate_pushes += 1;
            self.note_has(id, from);
            // Our first copy was pulled: a tree link's copy after it is late, not redundant —
            // the link stays on the tree (pruning it would swap the tree towards this one
            // message's origin, and messages from other origins racing on one cycle would
            // cut it twice), and its gap tunes the graft timer.
            let pulled = self.store.get(&id).and_then(|m| m.pulled);
            let from_tree = self.peers.get(&from).is_some_and(|s| s.tree);
            if let Some(announced_at) = pulled
                && from_tree
                && control.is_some()
            {
                self.stats.late_tree_copies += 1;
                self.tree_misses = 0;
                self.gaps.sample(now.saturating_sub(announced_at));
                return Ok(());
            }
            // A tree link's duplicate is pruned only when it keeps bringing nothing new.
            let limit = self.cfg.prune_after_duplicates;
            if control.is_some()
                && let Some(state) = self.peers.get_mut(&from)
                && state.tree
            {
                state.duplicate_streak = state.duplicate_streak.saturating_add(1);
                if state.duplicate_streak < limit {
                    self.stats.tolerated_duplicates += 1;
                    return Ok(());
                }
                state.duplicate_streak = 0;
            }
            self.policy.on_event(&PolicyEvent::Duplicate {
                peer: from,
                message: id_head(&id),
                kind,
            });
            if control.is_some() {
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
        let pulled = self
            .fetches
            .get(&id)
            .filter(|_| asked)
            .map(|f| f.announced_at);
        // A first copy pushed unasked comes down a tree link (for a tree-building policy). Over
        // a link not on the tree yet (say, an origin's push before it is on any tree link) the
        // pusher took the link for a tree link: it is grafted on both sides, or the two ends
        // would disagree — the pusher's part of the tree and ours joined only through graft
        // timers.
        // (Only for a size the tree carries: a larger message's origin pushes it to a few
        // peers off the tree, and that makes no link a tree link.)
        let mut graft_pusher = false;
        let tree_sized = control.is_some_and(|c| {
            payload.len() <= usize::try_from(c.announce_first_above).unwrap_or(usize::MAX)
        });
        if !asked
            && tree_sized
            && let Some(state) = self.peers.get_mut(&from)
        {
            state.duplicate_streak = 0;
            if state.tree {
                self.tree_misses = 0;
            } else {
                graft_pusher = true;
            }
            state.tree = true;
        }
        self.seen.insert(id, now);
        let announcers = self.finish_fetch(&id, now);
        let hops = hops.saturating_add(1);
        self.store_insert(id, kind, payload.clone(), hops, now);
        let routing = self.routes.is_some();
        if let Some(stored) = self.store.get_mut(&id) {
            stored.pulled = pulled;
            stored.origin = origin.filter(|_| routing);
        }
        if graft_pusher {
            self.policy.on_event(&PolicyEvent::Missing {
                peer: from,
                message: id_head(&id),
                kind,
            });
            self.send_link(from, id, kind, LinkOp::Graft, now);
        }
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

    /// The queueing order of the next item queued.
    pub(super) fn next_seq(&mut self) -> u64 {
        self.queued_seq = self.queued_seq.saturating_add(1);
        self.queued_seq
    }

    /// The next application event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// A peer's route frame (ignored when this engine does not route).
    fn on_routes(&mut self, from: PeerId, items: &[RouteItem], now: Time) {
        let (peers, initial) = (&self.peers, self.cfg.initial_rtt_us);
        if let Some(routes) = self.routes.as_mut() {
            routes.heard(from, items, now, &|p| link_cost(peers, initial, p));
        }
    }

    /// Routing's upkeep: hold-downs, the periodic refresh, and the route frames due to each
    /// peer (one queued per peer at most; what changes meanwhile goes in the next).
    fn route_upkeep(&mut self, now: Time) {
        let (peers, initial) = (&self.peers, self.cfg.initial_rtt_us);
        let Some(routes) = self.routes.as_mut() else {
            return;
        };
        routes.maintain(now, &|p| link_cost(peers, initial, p));
        let timeout = self.cfg.serve_timeout;
        let seq = &mut self.queued_seq;
        for peer in routes.peers_due() {
            let Some(state) = self.peers.get_mut(&peer) else {
                continue;
            };
            if state.has_routes_queued() {
                routes.defer(peer, now);
                continue;
            }
            if let Some(items) = routes.take_due(peer, now) {
                *seq = seq.saturating_add(1);
                state.enqueue(Priority::High, Item::Routes { items }, timeout, *seq);
            }
        }
    }
}

/// The cost of the link to `peer` for routing: half its smoothed RTT (a one-way latency),
/// microseconds; at least 1.
fn link_cost(peers: &BTreeMap<PeerId, PeerState>, initial_rtt_us: u32, peer: PeerId) -> u32 {
    peers
        .get(&peer)
        .and_then(|s| s.srtt_us)
        .unwrap_or(initial_rtt_us)
        .div_ceil(2)
        .max(1)
}

/// The first 8 bytes of a message id, little endian: how a policy names a message.
pub fn id_head(id: &MessageId) -> u64 {
    u64::from_le_bytes(id.0.first_chunk::<8>().copied().unwrap_or_default())
}
