//! [`PeerManager`]: which peers a node knows, which it is connected to, and which it should
//! dial next.
//!
//! The manager keeps an address book (node id → addresses, each with where it came from), a
//! connection state per peer, and policy: keep [`PeerConfig::target_outbound`] outbound
//! connections, accept at most [`PeerConfig::max_inbound`] inbound ones, redial with
//! [`Backoff`](crate::Backoff), exchange known-good addresses with peers, and ban peers that break the
//! protocol. It does no I/O: the driver reports connection events through `handle_*` and
//! carries out the [`Action`]s returned by [`PeerManager::poll_action`].
//!
//! Driver contract:
//! - After every `handle_*` call, and when [`PeerManager::poll_timeout`] passes, call
//!   `poll_action(now)` until it returns `None`.
//! - At most one connection per peer and direction. A peer counts as connected only after
//!   [`PeerManager::handle_handshake_completed`]; transport-level connections are pending.
//! - When the manager returns [`Action::Disconnect`] it already considers the peer
//!   disconnected; a later `handle_disconnected` for it is ignored.
//! - When both nodes dial each other at once, the connection dialed by the node with the
//!   lower id survives: [`PeerManager::handle_inbound`] accepts an inbound connection that
//!   supersedes our own pending dial only if the remote id is lower — or if it comes from
//!   another address than the one we dial (our dial then targets a stale address) — and our
//!   dial's late `handle_outbound_connected` returns [`PeerError::UnexpectedState`].
//! - A new inbound connection from a peer that is already connected supersedes the old
//!   connection (the peer restarted and lost it), unless it is the other half of a
//!   simultaneous dial (our outbound connection is younger than the handshake timeout and the
//!   lower-id rule keeps ours). On `Ok` from [`PeerManager::handle_inbound`] for a connected
//!   peer the driver closes the old connection and ignores its later close.
//! - Before accepting a transport connection, ask [`PeerManager::handle_incoming`]; once its
//!   (TLS) handshake has ended either way, report [`PeerManager::handle_incoming_done`] —
//!   before `handle_inbound`.
//! - Persist what [`PeerManager::poll_ban`] returns and hand it back with
//!   [`PeerManager::restore_ban`] after a restart: keys are free, but a ban should not be.
//!
//! Keys are free, so the manager never trusts a key for more than it proves: inbound
//! connections and handshakes in progress are limited per IP and per subnet ([`origin`];
//! loopback, bootstrap and trusted addresses exempt, so a devnet on one machine works), and an
//! address learned only from an inbound connection is never dialed unless confirmed.

mod book;
mod config;
mod dial;
mod exchange;
pub mod origin;
mod state;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, SocketAddr};

use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};

pub use self::book::{AddrSource, KnownAddr};
use self::book::{Peer, exchanged, is_dialable};
pub use self::config::PeerConfig;
use self::origin::{PendingIncoming, Subnet};
pub use self::state::{Direction, PeerCounts, PeerState};
use crate::error::{ConfigError, PeerError};
use crate::peer_addr::PeerAddr;
use crate::violation::Violation;
use crate::{NodeId, Time};

/// Why the manager asks the driver to close a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisconnectReason {
    /// The peer broke the protocol and is banned until `until`.
    Banned {
        /// What it did.
        violation: Violation,
        /// When the ban ends.
        until: Time,
    },
    /// The dial did not complete within [`PeerConfig::connect_timeout`].
    ConnectTimeout,
    /// The handshake did not complete within [`PeerConfig::handshake_timeout`].
    HandshakeTimeout,
}

/// Something the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Open a connection to `node` at `addr`, then report `handle_outbound_connected` or
    /// `handle_disconnected`.
    Dial {
        /// The peer.
        node: NodeId,
        /// The address to dial.
        addr: SocketAddr,
    },
    /// Close the connection with `node` (or abandon the dial).
    Disconnect {
        /// The peer.
        node: NodeId,
        /// Why.
        reason: DisconnectReason,
    },
    /// Ask `node` for addresses; pass its answer to `handle_peers_response`.
    RequestPeers {
        /// The peer.
        node: NodeId,
    },
}

/// What [`PeerManager::handle_peers_response`] did with a peer list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// Nodes added to the book.
    pub added_nodes: usize,
    /// Addresses added to nodes already in the book.
    pub added_addrs: usize,
    /// Entries dropped: beyond K, ourselves, banned, undialable, duplicate, or over a cap.
    pub ignored: usize,
}

/// Address book, connection states and connection policy of one node. See the
/// [module docs](self) for the driver contract.
#[derive(Debug)]
pub struct PeerManager {
    config: PeerConfig,
    book: BTreeMap<NodeId, Peer>,
    /// Ban end per peer; may hold expired entries until the next `poll_action`.
    bans: BTreeMap<NodeId, Time>,
    /// Bans imposed since the driver last asked ([`PeerManager::poll_ban`]).
    new_bans: VecDeque<(NodeId, Time)>,
    /// Transport handshakes in progress per remote IP.
    pending: PendingIncoming,
    /// IPs of bootstrap entries: exempt from the per-IP and per-subnet limits.
    bootstrap_ips: BTreeSet<IpAddr>,
    actions: VecDeque<Action>,
    next_exchange_at: Time,
    rng: StdRng,
}

impl PeerManager {
    /// A manager with `bootstrap` peers, dialable at once. Bootstrap entries with our own id
    /// are skipped, so every node of a network can share one list. `seed` drives jitter and
    /// random choices.
    pub fn new(
        config: PeerConfig,
        bootstrap: impl IntoIterator<Item = PeerAddr>,
        seed: u64,
        now: Time,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut manager = Self {
            next_exchange_at: now.saturating_add(config.exchange_interval),
            config,
            book: BTreeMap::new(),
            bans: BTreeMap::new(),
            new_bans: VecDeque::new(),
            pending: PendingIncoming::default(),
            bootstrap_ips: BTreeSet::new(),
            actions: VecDeque::new(),
            rng: StdRng::seed_from_u64(seed),
        };
        for peer in bootstrap {
            manager.add_bootstrap(peer, now);
        }
        Ok(manager)
    }

    /// Adds a bootstrap address; the node is never forgotten and retried forever.
    pub fn add_bootstrap(&mut self, peer: PeerAddr, now: Time) {
        if peer.node == self.config.local_id {
            return;
        }
        self.bootstrap_ips.insert(peer.addr.ip().to_canonical());
        let entry = self.book.entry(peer.node).or_insert_with(|| Peer::new(now));
        match entry.addrs.iter_mut().find(|a| a.addr == peer.addr) {
            Some(known) => known.source = AddrSource::Bootstrap,
            None => entry.addrs.push(KnownAddr {
                addr: peer.addr,
                source: AddrSource::Bootstrap,
                confirmed: false,
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PeerConfig {
        &self.config
    }

    // ----- inputs -------------------------------------------------------------------------

    /// A transport connection from `addr` wants to start its (QUIC/TLS) handshake. On `Ok`
    /// accept it and report [`handle_incoming_done`](Self::handle_incoming_done) when the
    /// handshake ends, whatever the outcome; on `Err` refuse it. Handshakes in progress count
    /// against the per-IP and per-subnet limits like connections do, and are capped in total.
    pub fn handle_incoming(&mut self, addr: SocketAddr) -> Result<(), PeerError> {
        let max = self.config.max_pending_incoming;
        if self.pending.total() >= max {
            return Err(PeerError::TooManyPending { max });
        }
        self.check_origin(addr.ip())?;
        self.pending.add(addr.ip());
        Ok(())
    }

    /// The transport handshake of a connection from `addr` admitted by
    /// [`handle_incoming`](Self::handle_incoming) ended (established or failed).
    pub fn handle_incoming_done(&mut self, addr: SocketAddr) {
        self.pending.remove(addr.ip());
    }

    /// Our dial to `node` reached the transport level; the application handshake starts.
    ///
    /// Fails with [`PeerError::UnexpectedState`] when no dial to `node` is pending (it was
    /// abandoned, or an inbound connection superseded it): close that connection.
    pub fn handle_outbound_connected(&mut self, node: NodeId, now: Time) -> Result<(), PeerError> {
        let deadline = now.saturating_add(self.config.handshake_timeout);
        let peer = self.peer_mut(node, "outbound connected")?;
        match peer.state {
            PeerState::Connecting { addr, failures, .. } => {
                peer.state = PeerState::Handshaking {
                    direction: Direction::Outbound,
                    addr,
                    deadline,
                    failures,
                };
                Ok(())
            }
            other => Err(unexpected(node, "outbound connected", &other)),
        }
    }

    /// A peer connected to us from `addr` (its identity already verified by TLS). On `Ok`
    /// the application handshake may start; on `Err` close the connection.
    pub fn handle_inbound(
        &mut self,
        node: NodeId,
        addr: SocketAddr,
        now: Time,
    ) -> Result<(), PeerError> {
        if node == self.config.local_id {
            return Err(PeerError::SelfConnection);
        }
        if let Some(until) = self.ban_end(&node, now) {
            return Err(PeerError::Banned { node, until });
        }
        let mut replaces_inbound = false;
        let failures = match self.book.get(&node).map(|p| p.state) {
            None => 0,
            Some(PeerState::Disconnected { failures, .. }) => failures,
            // Simultaneous dial: the connection opened by the lower id survives. Nodes dial from
            // their listening socket, so an inbound connection from another address than the
            // one we are dialing means our dial chases a stale address (the peer restarted
            // elsewhere): the live inbound connection wins.
            Some(PeerState::Connecting {
                failures,
                addr: dialing,
                ..
            }) if node < self.config.local_id || dialing != addr => failures,
            // A new, authenticated connection from a connected peer supersedes the old one:
            // the peer lost it (it restarted) and its old connection would otherwise lock it
            // out until it times out. Only the other half of a simultaneous dial — our
            // outbound connection, just established — keeps the lower-id rule.
            Some(PeerState::Connected {
                direction: Direction::Inbound,
                failures,
                ..
            }) => {
                replaces_inbound = true;
                failures
            }
            Some(PeerState::Connected {
                direction: Direction::Outbound,
                since,
                failures,
                ..
            }) if node < self.config.local_id
                || now >= since.saturating_add(self.config.handshake_timeout) =>
            {
                failures
            }
            Some(_) => return Err(PeerError::DuplicateConnection { node }),
        };
        if !replaces_inbound && self.counts().inbound() >= self.config.max_inbound {
            return Err(PeerError::InboundFull {
                node,
                max: self.config.max_inbound,
            });
        }
        self.check_origin(addr.ip())?;
        let max_addrs = self.config.max_addrs_per_node;
        let deadline = now.saturating_add(self.config.handshake_timeout);
        let peer = self.book.entry(node).or_insert_with(|| Peer::new(now));
        if !peer.has_addr(addr) && peer.addrs.len() < max_addrs && is_dialable(addr) {
            peer.addrs.push(KnownAddr {
                addr,
                source: AddrSource::Inbound,
                confirmed: false,
            });
        }
        peer.state = PeerState::Handshaking {
            direction: Direction::Inbound,
            addr,
            deadline,
            failures,
        };
        Ok(())
    }

    /// The application handshake with `node` completed (chain id and genesis match): the peer
    /// now counts as connected. On an outbound connection the dialed address becomes
    /// confirmed. If we are still below the outbound target, the peer is asked for addresses.
    ///
    /// Fails with [`PeerError::UnexpectedState`] when no handshake is pending: close it.
    pub fn handle_handshake_completed(&mut self, node: NodeId, now: Time) -> Result<(), PeerError> {
        let peer = self.peer_mut(node, "handshake completed")?;
        let PeerState::Handshaking {
            direction,
            addr,
            failures,
            ..
        } = peer.state
        else {
            return Err(unexpected(node, "handshake completed", &peer.state));
        };
        if direction == Direction::Outbound {
            for known in peer.addrs.iter_mut().filter(|a| a.addr == addr) {
                known.confirmed = true;
            }
        }
        peer.state = PeerState::Connected {
            direction,
            addr,
            since: now,
            failures,
        };
        let below_target = self.counts().connected_outbound < self.config.target_outbound;
        if let Some(peer) = self
            .book
            .get_mut(&node)
            .filter(|p| below_target && !p.exchange_pending)
        {
            peer.exchange_pending = true;
            self.actions.push_back(Action::RequestPeers { node });
        }
        Ok(())
    }

    /// The `direction` connection with `node` closed, or the dial failed. Counts as a failure
    /// for backoff unless the connection stayed up [`PeerConfig::reset_backoff_after`], which
    /// restarts the backoff sequence. Reports about a connection the manager no longer tracks
    /// (already disconnected, superseded) are ignored.
    pub fn handle_disconnected(&mut self, node: NodeId, direction: Direction, now: Time) {
        let current = self.book.get(&node).and_then(|p| p.state.direction());
        if current == Some(direction) {
            self.fail(node, now);
        }
    }

    /// `node` broke the protocol: ban it for [`PeerConfig::ban_duration`], close any
    /// connection with it, and drop the unconfirmed addresses it gave us.
    pub fn handle_violation(&mut self, node: NodeId, violation: Violation, now: Time) {
        let until = now.saturating_add(self.config.ban_duration);
        if self.bans.len() >= self.config.max_bans && !self.bans.contains_key(&node) {
            let soonest = self
                .bans
                .iter()
                .min_by_key(|(_, end)| **end)
                .map(|(id, _)| *id);
            if let Some(soonest) = soonest {
                self.bans.remove(&soonest);
            }
        }
        self.bans.insert(node, until);
        if self.new_bans.len() >= self.config.max_bans {
            self.new_bans.pop_front();
        }
        self.new_bans.push_back((node, until));

        if let Some(peer) = self.book.get_mut(&node) {
            peer.exchange_pending = false;
            peer.state = match peer.state {
                PeerState::Disconnected {
                    next_attempt_at,
                    failures,
                } => PeerState::Disconnected {
                    next_attempt_at: next_attempt_at.max(until),
                    failures,
                },
                other => {
                    self.actions.push_back(Action::Disconnect {
                        node,
                        reason: DisconnectReason::Banned { violation, until },
                    });
                    PeerState::Disconnected {
                        next_attempt_at: until,
                        failures: other.failures(),
                    }
                }
            };
        }

        // What a violator told us is suspect; nodes left without addresses are forgotten
        // (the ban itself is kept apart from the book).
        let from_violator = AddrSource::Exchange { from: node };
        for peer in self.book.values_mut() {
            peer.addrs
                .retain(|a| a.confirmed || a.source != from_violator);
        }
        self.book.retain(|_, p| {
            p.has_dial_candidate() || !matches!(p.state, PeerState::Disconnected { .. })
        });
    }

    // ----- outputs ------------------------------------------------------------------------

    /// The next thing the driver must do, or `None` until the next input or
    /// [`poll_timeout`](Self::poll_timeout). Order: queued disconnects and peer requests,
    /// expired dials and handshakes, new dials (while below the outbound target), periodic
    /// peer exchange.
    pub fn poll_action(&mut self, now: Time) -> Option<Action> {
        self.bans.retain(|_, until| *until > now);
        if let Some(action) = self.actions.pop_front() {
            return Some(action);
        }
        if let Some(action) = self.expire_pending(now) {
            return Some(action);
        }
        if let Some(action) = self.next_dial(now) {
            return Some(action);
        }
        self.next_exchange(now)
    }

    /// When `poll_action` will next have work without a new input: a dial or handshake
    /// deadline, a backoff or ban ending while an outbound slot is free, or the exchange timer
    /// while below the outbound target.
    pub fn poll_timeout(&self) -> Option<Time> {
        let counts = self.counts();
        let slots_free = counts.outbound() < self.config.target_outbound;
        let mut earliest: Option<Time> = None;
        let mut consider = |t: Time| earliest = Some(earliest.map_or(t, |e| e.min(t)));
        for (node, peer) in &self.book {
            match peer.state {
                PeerState::Connecting { deadline, .. }
                | PeerState::Handshaking { deadline, .. } => {
                    consider(deadline);
                }
                PeerState::Disconnected {
                    next_attempt_at, ..
                } if slots_free && peer.has_dial_candidate() => {
                    let ban = self.bans.get(node).copied().unwrap_or(0);
                    consider(next_attempt_at.max(ban));
                }
                _ => {}
            }
        }
        if counts.connected_outbound < self.config.target_outbound && self.exchange_candidate() {
            consider(self.next_exchange_at);
        }
        earliest
    }

    // ----- queries ------------------------------------------------------------------------

    /// Peers whose handshake completed, in either direction.
    pub fn connected_count(&self) -> usize {
        let counts = self.counts();
        counts
            .connected_outbound
            .saturating_add(counts.connected_inbound)
    }

    /// Peers per connection phase.
    pub fn counts(&self) -> PeerCounts {
        let mut counts = PeerCounts {
            known: self.book.len(),
            ..PeerCounts::default()
        };
        for peer in self.book.values() {
            let slot = match peer.state {
                PeerState::Disconnected { .. } => continue,
                PeerState::Connecting { .. } => &mut counts.pending_outbound,
                PeerState::Handshaking { direction, .. } => match direction {
                    Direction::Outbound => &mut counts.pending_outbound,
                    Direction::Inbound => &mut counts.pending_inbound,
                },
                PeerState::Connected { direction, .. } => match direction {
                    Direction::Outbound => &mut counts.connected_outbound,
                    Direction::Inbound => &mut counts.connected_inbound,
                },
            };
            *slot = slot.saturating_add(1);
        }
        counts
    }

    /// Peers whose handshake completed.
    pub fn connected_peers(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.book
            .iter()
            .filter(|(_, p)| matches!(p.state, PeerState::Connected { .. }))
            .map(|(node, _)| *node)
    }

    /// The state of `node`, if it is in the book.
    pub fn peer_state(&self, node: &NodeId) -> Option<PeerState> {
        self.book.get(node).map(|p| p.state)
    }

    /// The known addresses of `node`, if it is in the book.
    pub fn addresses(&self, node: &NodeId) -> Option<&[KnownAddr]> {
        self.book.get(node).map(|p| p.addrs.as_slice())
    }

    /// When the ban on `node` ends, if it is banned at `now`.
    pub fn ban_end(&self, node: &NodeId, now: Time) -> Option<Time> {
        self.bans.get(node).copied().filter(|until| *until > now)
    }

    /// The next ban imposed since the last call, `(node, until)`: persist it, so that a
    /// restart does not lift it.
    pub fn poll_ban(&mut self) -> Option<(NodeId, Time)> {
        self.new_bans.pop_front()
    }

    /// Re-imposes a ban that was in force before a restart (`until` on this manager's clock).
    /// Keeps at most [`PeerConfig::max_bans`], dropping the one closest to expiry; not
    /// reported again by [`poll_ban`](Self::poll_ban).
    pub fn restore_ban(&mut self, node: NodeId, until: Time) {
        if node == self.config.local_id {
            return;
        }
        if self.bans.len() >= self.config.max_bans && !self.bans.contains_key(&node) {
            let soonest = self.bans.iter().min_by_key(|(_, end)| **end);
            match soonest {
                Some((id, end)) if *end < until => {
                    let id = *id;
                    self.bans.remove(&id);
                }
                _ => return,
            }
        }
        let end = self.bans.entry(node).or_insert(until);
        *end = (*end).max(until);
    }

    // ----- internals ----------------------------------------------------------------------

    /// Refuses a new inbound connection or handshake from `ip` if that IP or its subnet already
    /// has its share (handshakes in progress included), unless `ip` is exempt.
    fn check_origin(&self, ip: IpAddr) -> Result<(), PeerError> {
        let ip = ip.to_canonical();
        if ip.is_loopback()
            || self.config.trusted_ips.contains(&ip)
            || self.bootstrap_ips.contains(&ip)
        {
            return Ok(());
        }
        let subnet = Subnet::of(ip);
        let (mut from_ip, mut from_subnet) =
            (self.pending.count_ip(ip), self.pending.count_subnet(subnet));
        for peer in self.book.values() {
            let remote = match peer.state {
                PeerState::Handshaking {
                    direction: Direction::Inbound,
                    addr,
                    ..
                }
                | PeerState::Connected {
                    direction: Direction::Inbound,
                    addr,
                    ..
                } => addr.ip().to_canonical(),
                _ => continue,
            };
            from_ip = from_ip.saturating_add(usize::from(remote == ip));
            from_subnet = from_subnet.saturating_add(usize::from(Subnet::of(remote) == subnet));
        }
        if from_ip >= self.config.max_inbound_per_ip {
            return Err(PeerError::TooManyFromIp {
                ip,
                max: self.config.max_inbound_per_ip,
            });
        }
        if from_subnet >= self.config.max_inbound_per_subnet {
            return Err(PeerError::TooManyFromSubnet {
                ip,
                max: self.config.max_inbound_per_subnet,
            });
        }
        Ok(())
    }

    fn peer_mut(&mut self, node: NodeId, event: &'static str) -> Result<&mut Peer, PeerError> {
        self.book.get_mut(&node).ok_or(PeerError::UnexpectedState {
            node,
            event,
            state: "unknown",
        })
    }

    fn require_connected(&self, node: NodeId) -> Result<(), PeerError> {
        match self.book.get(&node).map(|p| p.state) {
            Some(PeerState::Connected { .. }) => Ok(()),
            _ => Err(PeerError::NotConnected { node }),
        }
    }
}

fn unexpected(node: NodeId, event: &'static str, state: &PeerState) -> PeerError {
    PeerError::UnexpectedState {
        node,
        event,
        state: state.name(),
    }
}
