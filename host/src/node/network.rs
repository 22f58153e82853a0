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
//! Requests and imports of range sync live in [`sync_driver`], the answers to peers' requests
//! in [`rpc_server`], and the verdict on what peers send in [`verdict`](super::verdict).
//!
//! A malformed message on any stream bans the peer ([`PeerManager::handle_violation`]) and
//! closes its connection with [`CLOSE_PROTOCOL_VIOLATION`]; the node carries on.

pub mod checkpoint_progress;
pub mod checkpoint_restore;
mod connections;
mod gossip_blocks;
mod module_fetch;
mod rpc_server;
mod sync_driver;
mod sync_progress;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use modnode_gossip::MessageId;
use modnode_peers::{
    Action, Direction, DisconnectReason, NodeId, PeerAddr, PeerManager, PeerState, RangeSync,
    Request as SyncRequest, Violation,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use self::checkpoint_progress::ProgressDisplay;
use self::sync_progress::SyncProgress;
use super::chain_worker::{ChainHandle, WorkerError};
use super::intake::{BlockIntake, IntakeLimits};
use super::metrics::{Metrics, bump};
use super::upgrades::UpgradeAgent;
use super::verdict::{self, RequestError};
use crate::chain::Added;
use crate::chain::block::{Block, BlockHash};
use crate::chain::genesis::Genesis;
use crate::clock::{self, unix_ms};
use crate::net::endpoint::{CLOSE_PROTOCOL_VIOLATION, NetError, TransportLimits};
use crate::net::gossip::{GossipEvent, GossipHandle};
use crate::net::handshake::{HandshakeError, Hello, PROTOCOL_VERSION};
use crate::net::rpc::{ChainStatus, Request, Response};
use crate::store::BanList;

use self::rpc_server::serve;
use self::sync_driver::{SyncImportError, request};

/// QUIC close code for an orderly shutdown.
const CLOSE_SHUTDOWN: u32 = 0;
/// QUIC close code for a connection the peer manager refused (duplicate, full, banned).
const CLOSE_REFUSED: u32 = 3;
/// How long a peer may take to answer one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A range answer as range sync takes it: `(height, hash, encoded block)`.
type SyncedBlocks = Vec<(u64, [u8; 32], Vec<u8>)>;

/// What spawned tasks report to the loop.
enum Event {
    Dialed {
        node: NodeId,
        result: Result<(quinn::Connection, Hello), DialError>,
    },
    /// The transport handshake of an incoming connection ended (either way).
    IncomingDone {
        addr: SocketAddr,
    },
    Inbound {
        node: NodeId,
        addr: SocketAddr,
        conn: quinn::Connection,
    },
    InboundHandshake {
        node: NodeId,
        conn: quinn::Connection,
        result: Result<Hello, HandshakeError>,
    },
    Closed {
        node: NodeId,
        stable_id: usize,
    },
    Violation {
        node: NodeId,
        reason: String,
    },
    /// A request of ours to `node` (`what`: its kind) got no usable answer.
    AnswerFailed {
        node: NodeId,
        what: &'static str,
        error: RequestError,
    },
    PeersQuery {
        from: NodeId,
        reply: oneshot::Sender<Vec<PeerAddr>>,
    },
    PeersAnswer {
        node: NodeId,
        result: Result<Vec<PeerAddr>, RequestError>,
    },
    StatusAnswer {
        node: NodeId,
        status: ChainStatus,
    },
    BlocksAnswer {
        request: SyncRequest,
        result: Result<SyncedBlocks, RequestError>,
    },
    SyncImported {
        height: u64,
        peer: NodeId,
        result: Result<[u8; 32], SyncImportError>,
    },
    GossipBlock {
        id: MessageId,
        from: NodeId,
        block: Box<Block>,
        result: Result<Added, WorkerError>,
    },
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
    pub genesis_hash: BlockHash,
    pub peers: PeerManager,
    pub sync: RangeSync,
    pub gossip: GossipHandle,
    pub gossip_events: mpsc::Receiver<GossipEvent>,
    pub chain: ChainHandle,
    pub metrics: Arc<Metrics>,
    pub status_interval: Duration,
    /// Known peers to try before producing.
    pub bootstrap: Vec<NodeId>,
    /// Longest wait for them.
    pub startup_wait: Duration,
    pub bans: BanList,
    /// Scheduled modules: readiness, fetching by hash, serving.
    pub upgrades: Arc<UpgradeAgent>,
    /// The stored checkpoints peers may fetch.
    pub checkpoints: crate::checkpoint::CheckpointServer,
    /// Whether this node produces blocks (for what the start-up line says).
    pub produces: bool,
    /// How a long range sync shows its progress (a bar on a terminal, else log lines).
    pub progress: ProgressDisplay,
}

pub(super) struct Network {
    endpoint: quinn::Endpoint,
    limits: TransportLimits,
    genesis: Genesis,
    genesis_hash: BlockHash,
    listen_port: u16,
    peers: PeerManager,
    sync: RangeSync,
    gossip: GossipHandle,
    chain: ChainHandle,
    metrics: Arc<Metrics>,
    conns: HashMap<NodeId, Conn>,
    events: mpsc::Sender<Event>,
    start: Instant,
    importing: bool,
    status_interval: Duration,
    next_status_poll: Instant,
    bans: BanList,
    /// When range sync last imported a block: being behind is a fact only while sync makes
    /// progress, never on a peer's word alone.
    last_sync_import: Option<Instant>,
    bootstrap: Vec<NodeId>,
    startup_deadline: Instant,
    upgrades: Arc<UpgradeAgent>,
    /// Range sync holds off after the chain could not check a block for a reason of ours,
    /// until the instant (then it tries once more) or until the scheduled module it waits for,
    /// if any, is ready (see [`Network::waiting_for_module`]).
    module_wait: Option<(Option<crate::hashes::ModuleHash>, Instant)>,
    checkpoints: crate::checkpoint::CheckpointServer,
    produces: bool,
    /// The verdict on gossiped blocks (sans-IO; driven in `gossip_blocks`).
    intake: BlockIntake,
    /// Shows a long range sync's progress.
    sync_progress: SyncProgress,
}

/// Events the network task's helpers may have waiting for it. Every helper task sends at most
/// a few, and there are as many helpers as connections and requests in flight (each bounded),
/// so this is head-room, not a limit ever met in normal running; a full channel makes helpers
/// wait (backpressure), never the network task itself, which only receives.
const EVENT_CAPACITY: usize = 1024;

/// When a timer armed at `from` for `wait` fires. A wait past what `Instant` can represent
/// (centuries) fires after a day instead: the timer finds nothing due and is armed again.
fn timer_deadline(from: Instant, wait: Duration) -> Instant {
    const LONGEST: Duration = Duration::from_secs(24 * 60 * 60);
    from.checked_add(wait)
        .or_else(|| from.checked_add(LONGEST))
        .unwrap_or(from)
}

fn short(node: &NodeId) -> String {
    hex::encode(node.get(..4).unwrap_or_default())
}

impl Network {
    /// Runs until `shutdown` turns true, then closes every connection.
    pub(super) async fn run(parts: NetworkParts, mut shutdown: watch::Receiver<bool>) {
        let (events, mut events_rx) = mpsc::channel(EVENT_CAPACITY);
        let listen_port = parts.endpoint.local_addr().map(|a| a.port()).unwrap_or(0);
        let mut gossip_events = parts.gossip_events;
        let mut chain_view = parts.chain.watch();
        let endpoint = parts.endpoint.clone();
        let intake = BlockIntake::new(
            parts.genesis.clone(),
            parts.genesis_hash,
            IntakeLimits::default(),
        );
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
            next_status_poll: timer_deadline(Instant::now(), parts.status_interval),
            bans: parts.bans,
            upgrades: parts.upgrades,
            checkpoints: parts.checkpoints,
            produces: parts.produces,
            last_sync_import: None,
            module_wait: None,
            bootstrap: parts.bootstrap,
            startup_deadline: timer_deadline(Instant::now(), parts.startup_wait),
            intake,
            sync_progress: SyncProgress::new(parts.progress),
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
                    net.sync.handle_imported(view.head.height, view.head.hash.to_bytes());
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
        timer_deadline(self.start, Duration::from_micros(t))
    }

    fn next_wake(&self) -> Instant {
        let mut wake = self.next_status_poll;
        if let Some((_, until)) = self.module_wait {
            wake = wake.min(until);
        }
        for t in [self.peers.poll_timeout(), self.sync.poll_timeout()]
            .into_iter()
            .flatten()
        {
            wake = wake.min(self.instant_at(t));
        }
        if let Some(release_ms) = self.intake.poll_timeout() {
            let wait = Duration::from_millis(release_ms.saturating_sub(unix_ms()));
            wake = wake.min(timer_deadline(Instant::now(), wait));
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
        // Expired requests and back-offs first, so `poll_timeout` never names a past time.
        self.sync.handle_time(now);
        // Early gossiped blocks whose slot has started go to import.
        self.intake.handle_time(unix_ms());
        self.run_intake();
        // No chain is longer than its slot count: claims beyond the current slot are capped.
        self.sync
            .handle_height_bound(self.genesis.slot_at(clock::latest_slot_start_ms(unix_ms())));
        if Instant::now() >= self.next_status_poll {
            self.next_status_poll = timer_deadline(Instant::now(), self.status_interval);
            for (node, conn) in &self.conns {
                self.spawn_status_request(*node, conn.conn.clone());
            }
            self.poll_module_fetch();
        }
        while let Some(action) = self.peers.poll_action(now) {
            self.on_action(action);
        }
        if !self.waiting_for_module() {
            while let Some(request) = self.sync.poll_request(now) {
                self.spawn_blocks_request(request);
            }
            if !self.importing
                && let Some((height, bytes, peer)) = self.sync.poll_ready_block()
            {
                self.import_synced(height, &bytes, peer);
            }
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
            if self.produces {
                tracing::info!("tried the known peers and synced from them; production may start");
            } else {
                tracing::info!(
                    "tried the known peers and synced from them (this node does not produce)"
                );
            }
            self.metrics.started_up.store(true, Ordering::Relaxed);
        }
        super::bans::persist(
            &mut self.peers,
            &self.bans,
            &self.metrics.bans,
            now,
            unix_ms(),
        );
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
        let sync = self.sync.peer_table_sizes();
        let upgrades = self.upgrades.peer_table_sizes();
        let entries = [
            sync.peers,
            sync.rejected,
            sync.backoff,
            sync.unserved,
            upgrades.readiness,
            upgrades.pacing,
            upgrades.serving,
        ]
        .into_iter()
        .max()
        .unwrap_or(0);
        self.metrics.peer_table_entries.store(
            u64::try_from(entries).unwrap_or(u64::MAX),
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
                self.peer_left(node);
            }
            Action::RequestPeers { node } => {
                if let Some(conn) = self.conns.get(&node) {
                    let conn = conn.conn.clone();
                    let events = self.events.clone();
                    let max = self.limits.max_message_bytes;
                    tokio::spawn(tracing::Instrument::in_current_span(async move {
                        let result = match request(&conn, Request::Peers, max).await {
                            Ok(Response::Peers(peers)) => Ok(peers),
                            Ok(_) => {
                                Err(RequestError::Malformed("answer of the wrong kind".into()))
                            }
                            Err(e) => Err(e),
                        };
                        let _ = events.send(Event::PeersAnswer { node, result }).await;
                    }));
                }
            }
        }
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::IncomingDone { addr } => self.peers.handle_incoming_done(addr),
            Event::Dialed { node, result } => self.on_dialed(node, result),
            Event::Inbound { node, addr, conn } => self.on_inbound(node, addr, conn),
            Event::InboundHandshake { node, conn, result } => {
                self.on_inbound_handshake(node, conn, result)
            }
            Event::Closed { node, stable_id } => self.on_closed(node, stable_id),
            Event::Violation { node, reason } => self.violation(node, reason),
            Event::AnswerFailed { node, what, error } => self.answer_failed(node, what, &error),
            Event::PeersQuery { from, reply } => {
                let now = self.now();
                let _ = reply.send(
                    self.peers
                        .handle_peers_request(from, now)
                        .unwrap_or_default(),
                );
            }
            Event::PeersAnswer { node, result } => self.on_peers_answer(node, result),
            Event::StatusAnswer { node, status } => {
                if self.conns.contains_key(&node) {
                    let now = self.now();
                    self.upgrades.peer_ready(node, status.ready_modules.clone());
                    self.sync.handle_peer_status(
                        node,
                        status.head_height,
                        status.head_hash.to_bytes(),
                        now,
                    );
                }
            }
            Event::BlocksAnswer { request, result } => self.on_blocks_answer(request, result),
            Event::SyncImported {
                height,
                peer,
                result,
            } => self.on_sync_imported(height, peer, result),
            Event::GossipBlock {
                id,
                from,
                block,
                result,
            } => self.on_gossip_block_added(id, from, &block, &result),
        }
    }

    fn verdict(&self, id: MessageId, valid: bool) {
        if self.gossip.validated(id, valid).is_err() {
            tracing::warn!("gossip driver stopped");
        }
    }

    /// The one rule for a request of ours of any kind (range, module, peers, status) that got
    /// no usable answer from `node`: a malformed answer — of the wrong kind, undecodable, over
    /// the size limit — is the peer's protocol violation and bans it, as range sync always
    /// did; a timeout or a broken stream is not (the retry paths back off instead).
    fn answer_failed(&mut self, node: NodeId, what: &str, error: &RequestError) {
        if error.fault() == verdict::Fault::Peer {
            bump(&self.metrics.peer_malformed_answers);
            self.violation(node, format!("{what} answer: {error}"));
        } else {
            tracing::debug!(peer = %short(&node), what, %error, "request failed");
        }
    }

    fn violation(&mut self, node: NodeId, reason: String) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_too_far_for_instant_fires_within_a_day_instead_of_panicking() {
        let now = Instant::now();
        let soon = Duration::from_secs(3);
        assert_eq!(timer_deadline(now, soon), now + soon);
        let far = timer_deadline(now, Duration::MAX);
        assert!(far > now, "{far:?} is not after {now:?}");
        assert!(far <= now + Duration::from_secs(24 * 60 * 60));
    }
}
