//! The network task: the async driver of [`PeerManager`] and [`RangeSync`] over QUIC.
//!
//! One task owns the endpoint's accept loop, the connection table, the peer manager and range
//! sync. Everything slow (dials, handshakes, requests, block import) runs in spawned tasks that
//! report back as [`Event`]s, so the loop itself never waits on a peer. Per connection:
//! - the first bidirectional stream carries the hello ([`handshake`]); the peer counts as
//!   connected only after it;
//! - unidirectional streams carry gossip (the [`gossip`](crate::net::gossip) driver reads them);
//! - later bidirectional streams carry one [`rpc`] request and its response each.
//!
//! A malformed message on any stream bans the peer ([`PeerManager::handle_violation`]) and
//! closes its connection with [`CLOSE_PROTOCOL_VIOLATION`]; the node carries on.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use modnode_gossip::MessageId;
use modnode_gossip::policy::MessageKind;
use modnode_peers::{
    Action, Direction, DisconnectReason, PeerAddr, PeerManager, PeerState, RangeSync,
    Request as SyncRequest, Violation,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::chain_worker::{CLOCK_SKEW_MS, ChainHandle, WorkerError, unix_ms};
use super::metrics::{Metrics, bump};
use super::verdict::{self, Fault, RequestError};
use crate::chain::block::{Block, DepositData};
use crate::chain::genesis::Genesis;
use crate::chain::{Added, ForkChoiceError};
use crate::net::codec;
use crate::net::endpoint::{self, CLOSE_PROTOCOL_VIOLATION, NetError, TransportLimits};
use crate::net::gossip::{GossipEvent, GossipHandle};
use crate::net::handshake::{self, HandshakeError, Hello, PROTOCOL_VERSION, Role};
use crate::net::identity::NodeId;
use crate::net::rpc::{self, ChainStatus, MAX_BLOCKS_PER_REQUEST, Request, Response};
use crate::store::BanList;

/// QUIC close code for an orderly shutdown.
const CLOSE_SHUTDOWN: u32 = 0;
/// QUIC close code for a connection the peer manager refused (duplicate, full, banned).
const CLOSE_REFUSED: u32 = 3;
/// How long a peer may take to answer one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

type PeerKey = [u8; 32];

/// A range answer as range sync takes it: `(height, hash, encoded block)`.
type SyncedBlocks = Vec<(u64, [u8; 32], Vec<u8>)>;

/// What spawned tasks report to the loop.
enum Event {
    Dialed {
        node: PeerKey,
        result: Result<(quinn::Connection, Hello), DialError>,
    },
    /// The transport handshake of an incoming connection ended (either way).
    IncomingDone {
        addr: SocketAddr,
    },
    Inbound {
        node: PeerKey,
        addr: SocketAddr,
        conn: quinn::Connection,
    },
    InboundHandshake {
        node: PeerKey,
        conn: quinn::Connection,
        result: Result<Hello, HandshakeError>,
    },
    Closed {
        node: PeerKey,
        stable_id: usize,
    },
    Violation {
        node: PeerKey,
        reason: String,
    },
    PeersQuery {
        from: PeerKey,
        reply: oneshot::Sender<Vec<PeerAddr>>,
    },
    PeersAnswer {
        node: PeerKey,
        result: Result<Vec<PeerAddr>, RequestError>,
    },
    StatusAnswer {
        node: PeerKey,
        status: ChainStatus,
    },
    BlocksAnswer {
        request: SyncRequest,
        result: Result<SyncedBlocks, RequestError>,
    },
    SyncImported {
        height: u64,
        peer: PeerKey,
        result: Result<[u8; 32], SyncImportError>,
    },
    GossipBlock {
        id: MessageId,
        from: PeerKey,
        block: Box<Block>,
        result: Result<Added, WorkerError>,
    },
}

/// Why a block from range sync was not imported.
enum SyncImportError {
    /// Its parent is unknown: the peer is on another branch; the block is kept so the branch
    /// can be fetched and tried.
    Fork(Box<Block>),
    /// The chain worker refused it (or a block of its branch).
    Refused(WorkerError),
    /// Fetching its branch failed.
    Branch(RequestError),
    /// The branch below it is too long or below finality.
    Unresolvable(String),
}

impl SyncImportError {
    fn fault(&self) -> Fault {
        match self {
            Self::Fork(_) | Self::Unresolvable(_) => Fault::Transient,
            Self::Refused(e) => e.fault(),
            Self::Branch(e) => e.fault(),
        }
    }
}

impl std::fmt::Display for SyncImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fork(block) => write!(f, "block {} is on an unknown branch", block.header.height),
            Self::Refused(e) => write!(f, "refused: {e}"),
            Self::Branch(e) => write!(f, "fetching its branch: {e}"),
            Self::Unresolvable(e) => f.write_str(e),
        }
    }
}

enum DialError {
    Net(NetError),
    Handshake(HandshakeError),
}

struct Conn {
    conn: quinn::Connection,
    direction: Direction,
}

/// Static parts of the network task.
pub(super) struct NetworkParts {
    pub endpoint: quinn::Endpoint,
    pub limits: TransportLimits,
    pub genesis: Genesis,
    pub genesis_hash: [u8; 32],
    pub peers: PeerManager,
    pub sync: RangeSync,
    pub gossip: GossipHandle,
    pub gossip_events: mpsc::UnboundedReceiver<GossipEvent>,
    pub chain: ChainHandle,
    pub metrics: Arc<Metrics>,
    pub status_interval: Duration,
    /// Known peers to try before producing.
    pub bootstrap: Vec<PeerKey>,
    /// Longest wait for them.
    pub startup_wait: Duration,
    pub bans: BanList,
}

pub(super) struct Network {
    endpoint: quinn::Endpoint,
    limits: TransportLimits,
    genesis: Genesis,
    genesis_hash: [u8; 32],
    listen_port: u16,
    peers: PeerManager,
    sync: RangeSync,
    gossip: GossipHandle,
    chain: ChainHandle,
    metrics: Arc<Metrics>,
    conns: HashMap<PeerKey, Conn>,
    events: mpsc::UnboundedSender<Event>,
    start: Instant,
    importing: bool,
    status_interval: Duration,
    next_status_poll: Instant,
    bans: BanList,
    /// When range sync last imported a block: being behind is a fact only while sync makes
    /// progress, never on a peer's word alone.
    last_sync_import: Option<Instant>,
    bootstrap: Vec<PeerKey>,
    startup_deadline: Instant,
}

fn short(node: &PeerKey) -> String {
    hex::encode(node.get(..4).unwrap_or_default())
}

impl Network {
    /// Runs until `shutdown` turns true, then closes every connection.
    pub(super) async fn run(parts: NetworkParts, mut shutdown: watch::Receiver<bool>) {
        let (events, mut events_rx) = mpsc::unbounded_channel();
        let listen_port = parts.endpoint.local_addr().map(|a| a.port()).unwrap_or(0);
        let mut gossip_events = parts.gossip_events;
        let mut chain_view = parts.chain.watch();
        let endpoint = parts.endpoint.clone();
        let mut net = Network {
            endpoint: parts.endpoint,
            limits: parts.limits,
            genesis: parts.genesis,
            genesis_hash: parts.genesis_hash,
            listen_port,
            peers: parts.peers,
            sync: parts.sync,
            gossip: parts.gossip,
            chain: parts.chain,
            metrics: parts.metrics,
            conns: HashMap::new(),
            events,
            start: Instant::now(),
            importing: false,
            status_interval: parts.status_interval,
            next_status_poll: Instant::now() + parts.status_interval,
            bans: parts.bans,
            last_sync_import: None,
            bootstrap: parts.bootstrap,
            startup_deadline: Instant::now() + parts.startup_wait,
        };
        loop {
            net.drive();
            let wake = net.next_wake();
            tokio::select! {
                _ = shutdown.changed() => break,
                incoming = endpoint.accept() => match incoming {
                    Some(incoming) => net.on_incoming(incoming),
                    None => break,
                },
                Some(event) = events_rx.recv() => net.on_event(event),
                Some(event) = gossip_events.recv() => net.on_gossip(event),
                Ok(()) = chain_view.changed() => {
                    let view = *chain_view.borrow_and_update();
                    net.sync.handle_imported(view.head.height, view.head.hash);
                }
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
        for conn in net.conns.values() {
            conn.conn.close(
                quinn::VarInt::from_u32(CLOSE_SHUTDOWN),
                b"node shutting down",
            );
        }
        net.endpoint.close(
            quinn::VarInt::from_u32(CLOSE_SHUTDOWN),
            b"node shutting down",
        );
        let _ = tokio::time::timeout(Duration::from_secs(2), net.endpoint.wait_idle()).await;
    }

    fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn instant_at(&self, t: u64) -> Instant {
        self.start + Duration::from_micros(t)
    }

    fn next_wake(&self) -> Instant {
        let mut wake = self.next_status_poll;
        for t in [self.peers.poll_timeout(), self.sync.poll_timeout()]
            .into_iter()
            .flatten()
        {
            wake = wake.min(self.instant_at(t));
        }
        wake
    }

    fn hello(&self) -> Hello {
        let head = self.chain.view().head;
        Hello {
            protocol_version: PROTOCOL_VERSION,
            chain_id: self.genesis.chain_id.clone(),
            genesis_hash: self.genesis_hash,
            head_height: head.height,
            head_hash: head.hash,
            listen_port: self.listen_port,
        }
    }

    /// Carries out everything the state machines want done now.
    fn drive(&mut self) {
        let now = self.now();
        // No chain is longer than its slot count: claims beyond the current slot are capped.
        self.sync.handle_height_bound(
            self.genesis
                .slot_at(unix_ms().saturating_add(CLOCK_SKEW_MS)),
        );
        if Instant::now() >= self.next_status_poll {
            self.next_status_poll = Instant::now() + self.status_interval;
            for (node, conn) in &self.conns {
                self.spawn_status_request(*node, conn.conn.clone());
            }
        }
        while let Some(action) = self.peers.poll_action(now) {
            self.on_action(action);
        }
        while let Some(request) = self.sync.poll_request(now) {
            self.spawn_blocks_request(request);
        }
        if !self.importing
            && let Some((height, bytes, peer)) = self.sync.poll_ready_block()
        {
            self.import_synced(height, &bytes, peer);
        }
        while let Some((peer, violation)) = self.sync.poll_violation() {
            tracing::warn!(peer = %short(&peer), %violation, "range sync: banning peer");
            bump(&self.metrics.peer_violations);
            self.peers.handle_violation(peer, violation, now);
            while let Some(action) = self.peers.poll_action(now) {
                self.on_action(action);
            }
        }
        if !self.metrics.started_up.load(Ordering::Relaxed) && self.may_produce_after_start() {
            tracing::info!("tried the known peers and synced from them; production may start");
            self.metrics.started_up.store(true, Ordering::Relaxed);
        }
        super::bans::persist(&mut self.peers, &self.bans, now, unix_ms());
        let target = self.sync.target().map_or(0, |(h, _)| h);
        let head = self.chain.view().head.height;
        self.metrics
            .sync_target_height
            .store(target, Ordering::Relaxed);
        // Behind only while range sync is importing real blocks: a claimed head alone (which
        // a liar can make up) never stops production.
        let window = Duration::from_millis(self.genesis.slot_ms.saturating_mul(2));
        let progressing = self
            .last_sync_import
            .is_some_and(|at| at.elapsed() <= window);
        self.metrics.syncing.store(
            progressing && target > head.saturating_add(1),
            Ordering::Relaxed,
        );
        self.metrics.peers_connected.store(
            u64::try_from(self.peers.connected_count()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn may_produce_after_start(&self) -> bool {
        let known: Vec<verdict::KnownPeer> = self
            .bootstrap
            .iter()
            .map(|node| match self.peers.peer_state(node) {
                Some(PeerState::Connected { .. }) => verdict::KnownPeer::Connected,
                Some(state) if state.failures() > 0 => verdict::KnownPeer::Unreachable,
                // Ourselves (skipped by the manager), or forgotten after a ban.
                None => verdict::KnownPeer::Unreachable,
                Some(_) => verdict::KnownPeer::Untried,
            })
            .collect();
        let status = self.sync.status();
        let sync_idle = status.in_flight == 0
            && status.buffered == 0
            && !self.importing
            && self.sync.is_synced();
        verdict::may_produce_after_start(Instant::now() >= self.startup_deadline, &known, sync_idle)
    }

    fn on_action(&mut self, action: Action) {
        match action {
            Action::Dial { node, addr } => self.spawn_dial(node, addr),
            Action::Disconnect { node, reason } => {
                let code = match reason {
                    DisconnectReason::Banned { .. } => CLOSE_PROTOCOL_VIOLATION,
                    _ => CLOSE_REFUSED,
                };
                tracing::info!(peer = %short(&node), ?reason, "disconnecting peer");
                if let Some(conn) = self.conns.remove(&node) {
                    conn.conn
                        .close(quinn::VarInt::from_u32(code), b"disconnected");
                }
                self.sync.handle_peer_disconnected(node);
            }
            Action::RequestPeers { node } => {
                if let Some(conn) = self.conns.get(&node) {
                    let conn = conn.conn.clone();
                    let events = self.events.clone();
                    let max = self.limits.max_message_bytes;
                    tokio::spawn(async move {
                        let result = match request(&conn, Request::Peers, max).await {
                            Ok(Response::Peers(peers)) => Ok(peers),
                            Ok(_) => {
                                Err(RequestError::Malformed("answer of the wrong kind".into()))
                            }
                            Err(e) => Err(e),
                        };
                        let _ = events.send(Event::PeersAnswer { node, result });
                    });
                }
            }
        }
    }

    fn spawn_dial(&self, node: PeerKey, addr: SocketAddr) {
        let endpoint = self.endpoint.clone();
        let limits = self.limits.clone();
        let hello = self.hello();
        let events = self.events.clone();
        let timeout = self.limits.handshake_timeout;
        tokio::spawn(async move {
            let expected = NodeId::from_bytes(node);
            let result = match endpoint::connect(&endpoint, addr, Some(expected), &limits).await {
                Err(e) => Err(DialError::Net(e)),
                Ok((conn, id)) => {
                    match handshake::exchange(&conn, id, &hello, Role::Dialer, timeout).await {
                        Ok(theirs) => Ok((conn, theirs)),
                        Err(e) => Err(DialError::Handshake(e)),
                    }
                }
            };
            let _ = events.send(Event::Dialed { node, result });
        });
    }

    fn on_incoming(&mut self, incoming: quinn::Incoming) {
        let addr = incoming.remote_address();
        // Handshakes in progress count against the per-IP and per-subnet limits.
        if let Err(e) = self.peers.handle_incoming(addr) {
            tracing::info!(%addr, error = %e, "refused incoming connection");
            incoming.refuse();
            return;
        }
        let limits = self.limits.clone();
        let open = self.conns.len();
        let events = self.events.clone();
        tokio::spawn(async move {
            let accepted = endpoint::accept(incoming, &limits, open).await;
            let _ = events.send(Event::IncomingDone { addr });
            match accepted {
                Ok((conn, id)) => {
                    let _ = events.send(Event::Inbound {
                        node: *id.as_bytes(),
                        addr,
                        conn,
                    });
                }
                Err(e) => tracing::info!(%addr, error = %e, "refused incoming connection"),
            }
        });
    }

    fn on_event(&mut self, event: Event) {
        let now = self.now();
        match event {
            Event::IncomingDone { addr } => self.peers.handle_incoming_done(addr),
            Event::Dialed { node, result } => match result {
                Ok((conn, hello)) => {
                    let accepted = self
                        .peers
                        .handle_outbound_connected(node, now)
                        .and_then(|()| self.peers.handle_handshake_completed(node, now));
                    match accepted {
                        Ok(()) => self.connected(node, conn, Direction::Outbound, &hello),
                        Err(e) => {
                            tracing::debug!(peer = %short(&node), error = %e, "dropping superseded dial");
                            conn.close(quinn::VarInt::from_u32(CLOSE_REFUSED), b"duplicate");
                        }
                    }
                }
                Err(DialError::Handshake(e)) => {
                    self.handshake_failed(node, Direction::Outbound, &e)
                }
                Err(DialError::Net(e)) => {
                    bump(&self.metrics.dial_failures);
                    tracing::info!(peer = %short(&node), error = %e, "dial failed");
                    self.peers
                        .handle_disconnected(node, Direction::Outbound, now);
                }
            },
            Event::Inbound { node, addr, conn } => {
                if let Err(e) = self.peers.handle_inbound(node, addr, now) {
                    tracing::info!(%addr, error = %e, "refused inbound peer");
                    conn.close(quinn::VarInt::from_u32(CLOSE_REFUSED), b"refused");
                    return;
                }
                if let Some(old) = self.conns.remove(&node) {
                    // The peer connected again (it restarted): its new, authenticated
                    // connection supersedes the old one, whose close is then ignored.
                    tracing::info!(peer = %short(&node), %addr, "peer connected again; closing its old connection");
                    old.conn
                        .close(quinn::VarInt::from_u32(CLOSE_REFUSED), b"superseded");
                    self.sync.handle_peer_disconnected(node);
                }
                let hello = self.hello();
                let events = self.events.clone();
                let timeout = self.limits.handshake_timeout;
                tokio::spawn(async move {
                    let id = NodeId::from_bytes(node);
                    let result =
                        handshake::exchange(&conn, id, &hello, Role::Acceptor, timeout).await;
                    let _ = events.send(Event::InboundHandshake { node, conn, result });
                });
            }
            Event::InboundHandshake { node, conn, result } => match result {
                Ok(hello) => match self.peers.handle_handshake_completed(node, now) {
                    Ok(()) => self.connected(node, conn, Direction::Inbound, &hello),
                    Err(e) => {
                        tracing::debug!(peer = %short(&node), error = %e, "handshake no longer expected");
                        conn.close(quinn::VarInt::from_u32(CLOSE_REFUSED), b"refused");
                    }
                },
                Err(e) => self.handshake_failed(node, Direction::Inbound, &e),
            },
            Event::Closed { node, stable_id } => {
                let ours = self
                    .conns
                    .get(&node)
                    .is_some_and(|c| c.conn.stable_id() == stable_id);
                if ours && let Some(conn) = self.conns.remove(&node) {
                    tracing::info!(peer = %short(&node), reason = ?conn.conn.close_reason(), "peer disconnected");
                    self.peers.handle_disconnected(node, conn.direction, now);
                    self.sync.handle_peer_disconnected(node);
                }
            }
            Event::Violation { node, reason } => self.violation(node, reason),
            Event::PeersQuery { from, reply } => {
                let _ = reply.send(
                    self.peers
                        .handle_peers_request(from, now)
                        .unwrap_or_default(),
                );
            }
            Event::PeersAnswer { node, result } => match result {
                Ok(list) => match self.peers.handle_peers_response(node, list, now) {
                    Ok(report) => tracing::debug!(peer = %short(&node), ?report, "peer exchange"),
                    Err(e) => {
                        tracing::debug!(peer = %short(&node), error = %e, "peer list ignored")
                    }
                },
                Err(e) => tracing::debug!(peer = %short(&node), error = %e, "peer exchange failed"),
            },
            Event::StatusAnswer { node, status } => {
                if self.conns.contains_key(&node) {
                    self.sync
                        .handle_peer_status(node, status.head_height, status.head_hash, now);
                }
            }
            Event::BlocksAnswer { request, result } => {
                let outcome = match result {
                    Ok(blocks) => self.sync.handle_blocks(request.peer, request.id, blocks),
                    Err(e) => {
                        tracing::debug!(peer = %short(&request.peer), error = %e, "block request failed");
                        let outcome = self.sync.handle_request_failed(request.peer, request.id);
                        if e.fault() == Fault::Peer {
                            self.violation(request.peer, format!("block range answer: {e}"));
                        }
                        outcome
                    }
                };
                if let Err(e) = outcome {
                    tracing::debug!(error = %e, "late block answer dropped");
                }
            }
            Event::SyncImported {
                height,
                peer,
                result,
            } => {
                self.importing = false;
                match result {
                    Ok(hash) => {
                        bump(&self.metrics.blocks_synced);
                        self.last_sync_import = Some(Instant::now());
                        self.sync.handle_imported(height, hash);
                    }
                    Err(SyncImportError::Fork(block)) => self.resolve_fork(*block, peer),
                    Err(e) => {
                        bump(&self.metrics.blocks_rejected);
                        if e.fault() == Fault::Peer {
                            tracing::warn!(peer = %short(&peer), height, error = %e, "synced block invalid");
                            self.sync.handle_import_failed(height, peer);
                        } else {
                            // Our failure or a transient one: the peer is not to blame.
                            tracing::info!(peer = %short(&peer), height, error = %e, "synced block not taken");
                            self.sync.handle_import_aborted(height, peer);
                        }
                    }
                }
            }
            Event::GossipBlock {
                id,
                from,
                block,
                result,
            } => {
                let height = block.header.height;
                let verdict = verdict::gossip_block(height, &result);
                match &result {
                    Ok(Added::Extended(_) | Added::Reorganised { .. }) => {
                        bump(&self.metrics.blocks_gossip_imported)
                    }
                    Ok(_) => {}
                    Err(e) => {
                        if !verdict.behind_sender {
                            bump(&self.metrics.blocks_rejected);
                        }
                        tracing::info!(peer = %short(&from), height, error = %e, "gossiped block not taken");
                    }
                }
                if verdict.behind_sender {
                    // Seal and body checked: the sender holds a real block at this height, so
                    // range sync can fetch the gap from it.
                    self.sync
                        .handle_peer_status(from, height, block.hash(), now);
                }
                if let Some(reason) = verdict.penalty {
                    self.violation(from, reason);
                }
                self.verdict(id, verdict.relay);
            }
        }
    }

    fn verdict(&self, id: MessageId, valid: bool) {
        if self.gossip.validated(id, valid).is_err() {
            tracing::warn!("gossip driver stopped");
        }
    }

    fn handshake_failed(&mut self, node: PeerKey, direction: Direction, error: &HandshakeError) {
        let now = self.now();
        if direction == Direction::Outbound {
            bump(&self.metrics.dial_failures);
        }
        match error {
            HandshakeError::WrongChain(_) | HandshakeError::Version { .. } => {
                bump(&self.metrics.wrong_chain_refusals);
                tracing::warn!(peer = %short(&node), %error, "peer refused");
                self.peers
                    .handle_violation(node, Violation::WrongChain, now);
            }
            HandshakeError::Malformed { reason, .. } => {
                bump(&self.metrics.peer_violations);
                self.peers
                    .handle_violation(node, Violation::Malformed(reason.clone()), now);
            }
            HandshakeError::Timeout { .. } | HandshakeError::Connection { .. } => {
                tracing::info!(peer = %short(&node), %error, "handshake failed");
                self.peers.handle_disconnected(node, direction, now);
            }
        }
    }

    fn connected(
        &mut self,
        node: PeerKey,
        conn: quinn::Connection,
        direction: Direction,
        hello: &Hello,
    ) {
        bump(&self.metrics.handshakes_completed);
        tracing::info!(peer = %short(&node), addr = %conn.remote_address(), ?direction, height = hello.head_height, "peer connected");
        let id = NodeId::from_bytes(node);
        if self.gossip.add_peer(id, conn.clone()).is_err() {
            tracing::warn!("gossip driver stopped; peer not added to gossip");
        }
        let now = self.now();
        self.sync
            .handle_peer_status(node, hello.head_height, hello.head_hash, now);
        let events = self.events.clone();
        let watched = conn.clone();
        tokio::spawn(async move {
            watched.closed().await;
            let _ = events.send(Event::Closed {
                node,
                stable_id: watched.stable_id(),
            });
        });
        tokio::spawn(serve(
            node,
            conn.clone(),
            self.chain.clone(),
            self.events.clone(),
            self.limits.max_message_bytes,
        ));
        self.conns.insert(node, Conn { conn, direction });
    }

    fn violation(&mut self, node: PeerKey, reason: String) {
        let now = self.now();
        tracing::warn!(peer = %short(&node), %reason, "protocol violation: disconnecting and banning peer");
        bump(&self.metrics.peer_violations);
        if let Some(conn) = self.conns.get(&node) {
            conn.conn.close(
                quinn::VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION),
                b"protocol violation",
            );
        }
        self.peers
            .handle_violation(node, Violation::Malformed(reason), now);
    }

    fn on_gossip(&mut self, event: GossipEvent) {
        match event {
            GossipEvent::Violation { peer, reason } => self.violation(*peer.as_bytes(), reason),
            GossipEvent::Delivered {
                id,
                kind,
                payload,
                from,
            } => {
                let from = *from.as_bytes();
                if let Err(reason) = verdict::gossip_kind(kind) {
                    self.verdict(id, false);
                    self.violation(from, reason);
                    return;
                }
                match kind {
                    MessageKind::Block => self.on_gossip_block(id, from, &payload),
                    MessageKind::Deposit => match DepositData::decode(&payload) {
                        Ok(deposit) if deposit.amount > 0 => {
                            self.verdict(id, true);
                            let chain = self.chain.clone();
                            let metrics = self.metrics.clone();
                            tokio::spawn(async move {
                                if chain.submit_deposit(deposit).await.is_ok() {
                                    bump(&metrics.deposits_accepted);
                                }
                            });
                        }
                        Ok(_) => {
                            self.verdict(id, false);
                            self.violation(from, "relayed a deposit of 0 Gwei".into());
                        }
                        Err(e) => {
                            self.verdict(id, false);
                            self.violation(from, format!("relayed an undecodable deposit: {e}"));
                        }
                    },
                    // Refused by `gossip_kind` above.
                    MessageKind::Consensus | MessageKind::PeerExchange => {}
                }
            }
        }
    }

    fn on_gossip_block(&mut self, id: MessageId, from: PeerKey, payload: &[u8]) {
        let block = match Block::decode(payload, self.genesis.max_deposits_per_block) {
            Ok(block) => block,
            Err(e) => {
                bump(&self.metrics.blocks_rejected);
                self.verdict(id, false);
                self.violation(from, format!("relayed an undecodable block: {e}"));
                return;
            }
        };
        let current = self.genesis.slot_at(unix_ms().saturating_add(500));
        if block.header.slot > current {
            // Possibly our clock is behind: not relayed, not punished.
            bump(&self.metrics.blocks_rejected);
            self.verdict(id, false);
            tracing::info!(peer = %short(&from), slot = block.header.slot, current, "block from a future slot dropped");
            return;
        }
        let chain = self.chain.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let result = chain.add_block(block.clone()).await;
            let _ = events.send(Event::GossipBlock {
                id,
                from,
                block: Box::new(block),
                result,
            });
        });
    }

    fn import_synced(&mut self, height: u64, bytes: &[u8], peer: PeerKey) {
        let block = match Block::decode(bytes, self.genesis.max_deposits_per_block) {
            Ok(block) => block,
            Err(e) => {
                tracing::warn!(peer = %short(&peer), height, error = %e, "synced block undecodable");
                self.sync.handle_import_failed(height, peer);
                return;
            }
        };
        self.importing = true;
        let chain = self.chain.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let hash = block.hash();
            let result = match chain.add_block(block.clone()).await {
                Ok(_) => Ok(hash),
                Err(WorkerError::Block(ForkChoiceError::UnknownParent { .. })) => {
                    Err(SyncImportError::Fork(Box::new(block)))
                }
                Err(e) => Err(SyncImportError::Refused(e)),
            };
            let _ = events.send(Event::SyncImported {
                height,
                peer,
                result,
            });
        });
    }

    /// A synced block's parent is unknown: `peer` is on another branch. Fetch the branch back
    /// to [`MAX_BLOCKS_PER_REQUEST`] blocks (never below the finalized height), hand it to fork
    /// choice oldest first, then the block itself. Fork choice decides whether the branch wins.
    fn resolve_fork(&mut self, block: Block, peer: PeerKey) {
        let height = block.header.height;
        let Some(conn) = self.conns.get(&peer).map(|c| c.conn.clone()) else {
            self.sync.handle_import_failed(height, peer);
            return;
        };
        tracing::info!(peer = %short(&peer), height, "peer is on another branch; fetching it");
        self.importing = true;
        let chain = self.chain.clone();
        let events = self.events.clone();
        let max = self.limits.max_message_bytes;
        let max_deposits = self.genesis.max_deposits_per_block;
        tokio::spawn(async move {
            let result = fetch_branch(&conn, &chain, block, max, max_deposits).await;
            let _ = events.send(Event::SyncImported {
                height,
                peer,
                result,
            });
        });
    }

    fn spawn_status_request(&self, node: PeerKey, conn: quinn::Connection) {
        let events = self.events.clone();
        let max = self.limits.max_message_bytes;
        tokio::spawn(async move {
            if let Ok(Response::Status(status)) = request(&conn, Request::Status, max).await {
                let _ = events.send(Event::StatusAnswer { node, status });
            }
        });
    }

    fn spawn_blocks_request(&self, sync_request: SyncRequest) {
        let events = self.events.clone();
        let Some(conn) = self.conns.get(&sync_request.peer).map(|c| c.conn.clone()) else {
            let _ = events.send(Event::BlocksAnswer {
                request: sync_request,
                result: Err(RequestError::Transport("peer is not connected".into())),
            });
            return;
        };
        let max = self.limits.max_message_bytes;
        let max_deposits = self.genesis.max_deposits_per_block;
        let count = u16::try_from(sync_request.count)
            .unwrap_or(MAX_BLOCKS_PER_REQUEST)
            .min(MAX_BLOCKS_PER_REQUEST);
        tokio::spawn(async move {
            let rpc_request = Request::Blocks {
                start: sync_request.start_height,
                count,
            };
            // Not-connected is reported above; everything here is about the peer's answer.
            let result = request_blocks(&conn, rpc_request, max, max_deposits)
                .await
                .map(|blocks| {
                    blocks
                        .into_iter()
                        .map(|(block, bytes)| (block.header.height, block.hash(), bytes))
                        .collect::<SyncedBlocks>()
                });
            let _ = events.send(Event::BlocksAnswer {
                request: sync_request,
                result,
            });
        });
    }
}

/// Fetches the branch below `tip` from `conn` and adds it, then `tip`, through fork choice.
async fn fetch_branch(
    conn: &quinn::Connection,
    chain: &ChainHandle,
    tip: Block,
    max_message_bytes: usize,
    max_deposits: u16,
) -> Result<[u8; 32], SyncImportError> {
    let height = tip.header.height;
    let start = chain
        .view()
        .finalized_height
        .saturating_add(1)
        .max(height.saturating_sub(u64::from(MAX_BLOCKS_PER_REQUEST)));
    let count = u16::try_from(height.saturating_sub(start)).map_err(|_| {
        SyncImportError::Unresolvable(format!("branch below height {height} is too long"))
    })?;
    if count == 0 {
        return Err(SyncImportError::Unresolvable(format!(
            "block {height} forks at or below the finalized height"
        )));
    }
    let branch = request_blocks(
        conn,
        Request::Blocks { start, count },
        max_message_bytes,
        max_deposits,
    )
    .await
    .map_err(SyncImportError::Branch)?;
    for (block, _) in branch {
        match chain.add_block(block).await {
            Ok(_) => {}
            // Below the fork point on a chain we never saw: keep going up.
            Err(WorkerError::Block(ForkChoiceError::UnknownParent { .. })) => {}
            Err(e) => return Err(SyncImportError::Refused(e)),
        }
    }
    let hash = tip.hash();
    chain
        .add_block(tip)
        .await
        .map(|_| hash)
        .map_err(SyncImportError::Refused)
}

/// Requests a block range and decodes every block of the answer, keeping its bytes.
async fn request_blocks(
    conn: &quinn::Connection,
    blocks: Request,
    max_message_bytes: usize,
    max_deposits: u16,
) -> Result<Vec<(Block, Vec<u8>)>, RequestError> {
    let Response::Blocks(encoded) = request(conn, blocks, max_message_bytes).await? else {
        return Err(RequestError::Malformed("answer of the wrong kind".into()));
    };
    encoded
        .into_iter()
        .map(|bytes| {
            let block = Block::decode(&bytes, max_deposits).map_err(|e| {
                RequestError::Malformed(format!("undecodable block in the answer: {e}"))
            })?;
            Ok((block, bytes))
        })
        .collect()
}

/// Sends one request on a new bidirectional stream and reads its answer.
async fn request(
    conn: &quinn::Connection,
    request: Request,
    max_message_bytes: usize,
) -> Result<Response, RequestError> {
    let transport = |e: &dyn std::fmt::Display| RequestError::Transport(e.to_string());
    let exchange = async {
        let (mut send, mut recv) = conn.open_bi().await.map_err(|e| transport(&e))?;
        let (msg_type, payload) = request.encode();
        codec::write_frame(&mut send, msg_type, &payload, rpc::MAX_REQUEST_BYTES)
            .await
            .map_err(|e| transport(&e))?;
        send.finish().map_err(|e| transport(&e))?;
        let frame = match codec::read_frame(&mut recv, max_message_bytes).await {
            Ok(Some(frame)) => frame,
            // A server that cannot answer (its worker failed) resets the stream.
            Ok(None) => return Err(transport(&"stream ended without an answer")),
            Err(e) if e.is_protocol_violation() => {
                return Err(RequestError::Malformed(e.to_string()));
            }
            Err(e) => return Err(transport(&e)),
        };
        Response::decode(&request, frame.msg_type, &frame.payload)
            .map_err(|e| RequestError::Malformed(e.to_string()))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| RequestError::Timeout(REQUEST_TIMEOUT))?
}

/// Answers the requests `node` sends on `conn` until it closes; a malformed request is
/// reported as a violation.
async fn serve(
    node: PeerKey,
    conn: quinn::Connection,
    chain: ChainHandle,
    events: mpsc::UnboundedSender<Event>,
    max_message_bytes: usize,
) {
    while let Ok((send, recv)) = conn.accept_bi().await {
        let chain = chain.clone();
        let events = events.clone();
        tokio::spawn(async move {
            let served = tokio::time::timeout(
                REQUEST_TIMEOUT,
                serve_one(node, send, recv, &chain, &events, max_message_bytes),
            )
            .await;
            match served {
                Ok(Err(Some(reason))) => {
                    let _ = events.send(Event::Violation { node, reason });
                }
                Ok(Err(None)) | Ok(Ok(())) => {}
                Err(_) => tracing::debug!(peer = %short(&node), "request not completed in time"),
            }
        });
    }
}

/// `Err(Some(reason))` is a protocol violation, `Err(None)` a broken stream.
async fn serve_one(
    node: PeerKey,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    chain: &ChainHandle,
    events: &mpsc::UnboundedSender<Event>,
    max_message_bytes: usize,
) -> Result<(), Option<String>> {
    let frame = match codec::read_frame(&mut recv, rpc::MAX_REQUEST_BYTES).await {
        Ok(Some(frame)) => frame,
        Ok(None) => return Err(Some("request stream ended without a request".into())),
        Err(e) if e.is_protocol_violation() => return Err(Some(format!("request: {e}"))),
        Err(_) => return Err(None),
    };
    let request = Request::decode(frame.msg_type, &frame.payload)
        .map_err(|e| Some(format!("request: {e}")))?;
    let response = match request {
        Request::Status => {
            let view = chain.view();
            Response::Status(ChainStatus {
                head_height: view.head.height,
                head_hash: view.head.hash,
                finalized_height: view.finalized_height,
            })
        }
        Request::Blocks { start, count } => {
            // Leave room for the length prefixes and the count.
            let budget = max_message_bytes.saturating_sub(1024);
            // On our own failure say nothing (the requester sees a failed request), never
            // "no blocks": that is what a liar answers, and the requester bans for it.
            let blocks = chain
                .blocks(start, u64::from(count), budget)
                .await
                .map_err(|e| {
                    tracing::warn!(peer = %short(&node), error = %e, "cannot serve a block range");
                    None
                })?;
            Response::Blocks(blocks)
        }
        Request::Peers => {
            let (reply, rx) = oneshot::channel();
            let _ = events.send(Event::PeersQuery { from: node, reply });
            Response::Peers(rx.await.unwrap_or_default())
        }
    };
    let (msg_type, payload) = response.encode();
    codec::write_frame(&mut send, msg_type, &payload, max_message_bytes)
        .await
        .map_err(|_| None)?;
    send.finish().map_err(|_| None)?;
    let _ = send.stopped().await;
    Ok(())
}
