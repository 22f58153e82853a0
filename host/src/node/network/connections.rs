//! Connection lifecycle for [`Network`]: dialling, accepting, the hello exchange, a restarted
//! peer's connection superseding its old one, and disconnects.

use std::net::SocketAddr;

use modnode_peers::{Direction, NodeId, PeerAddr, Violation};

use super::{CLOSE_REFUSED, Conn, DialError, Event, Network, serve, short};
use crate::net::endpoint;
use crate::net::handshake::{self, HandshakeError, Hello, Role};
use crate::net::identity;
use crate::node::metrics::bump;
use crate::node::verdict::RequestError;

impl Network {
    pub(super) fn spawn_dial(&self, node: NodeId, addr: SocketAddr) {
        let endpoint = self.endpoint.clone();
        let limits = self.limits.clone();
        let hello = self.hello();
        let events = self.events.clone();
        let timeout = self.limits.handshake_timeout;
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let expected = identity::NodeId::from_bytes(node);
            let result = match endpoint::connect(&endpoint, addr, Some(expected), &limits).await {
                Err(e) => Err(DialError::Net(e)),
                Ok((conn, id)) => {
                    match handshake::exchange(&conn, id, &hello, Role::Dialer, timeout).await {
                        Ok(theirs) => Ok((conn, theirs)),
                        Err(e) => Err(DialError::Handshake(e)),
                    }
                }
            };
            let _ = events.send(Event::Dialed { node, result }).await;
        }));
    }

    pub(super) fn on_incoming(&mut self, incoming: quinn::Incoming) {
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
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let accepted = endpoint::accept(incoming, &limits, open).await;
            let _ = events.send(Event::IncomingDone { addr }).await;
            match accepted {
                Ok((conn, id)) => {
                    let _ = events
                        .send(Event::Inbound {
                            node: *id.as_bytes(),
                            addr,
                            conn,
                        })
                        .await;
                }
                Err(e) => tracing::info!(%addr, error = %e, "refused incoming connection"),
            }
        }));
    }

    pub(super) fn on_dialed(
        &mut self,
        node: NodeId,
        result: Result<(quinn::Connection, Hello), DialError>,
    ) {
        let now = self.now();
        match result {
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
            Err(DialError::Handshake(e)) => self.handshake_failed(node, Direction::Outbound, &e),
            Err(DialError::Net(e)) => {
                bump(&self.metrics.dial_failures);
                tracing::info!(peer = %short(&node), error = %e, "dial failed");
                self.peers
                    .handle_disconnected(node, Direction::Outbound, now);
            }
        }
    }

    /// An authenticated incoming connection: admitted by the peer manager, it supersedes any
    /// older connection of the same node (which restarted), then exchanges hellos.
    pub(super) fn on_inbound(&mut self, node: NodeId, addr: SocketAddr, conn: quinn::Connection) {
        let now = self.now();
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
            self.peer_left(node);
        }
        let hello = self.hello();
        let events = self.events.clone();
        let timeout = self.limits.handshake_timeout;
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            let id = identity::NodeId::from_bytes(node);
            let result = handshake::exchange(&conn, id, &hello, Role::Acceptor, timeout).await;
            let _ = events
                .send(Event::InboundHandshake { node, conn, result })
                .await;
        }));
    }

    pub(super) fn on_inbound_handshake(
        &mut self,
        node: NodeId,
        conn: quinn::Connection,
        result: Result<Hello, HandshakeError>,
    ) {
        let now = self.now();
        match result {
            Ok(hello) => match self.peers.handle_handshake_completed(node, now) {
                Ok(()) => self.connected(node, conn, Direction::Inbound, &hello),
                Err(e) => {
                    tracing::debug!(peer = %short(&node), error = %e, "handshake no longer expected");
                    conn.close(quinn::VarInt::from_u32(CLOSE_REFUSED), b"refused");
                }
            },
            Err(e) => self.handshake_failed(node, Direction::Inbound, &e),
        }
    }

    /// A connection closed; ignored unless it is the peer's current one (a superseded
    /// connection's close must not disconnect its successor).
    pub(super) fn on_closed(&mut self, node: NodeId, stable_id: usize) {
        let ours = self
            .conns
            .get(&node)
            .is_some_and(|c| c.conn.stable_id() == stable_id);
        if ours && let Some(conn) = self.conns.remove(&node) {
            let now = self.now();
            tracing::info!(peer = %short(&node), reason = ?conn.conn.close_reason(), "peer disconnected");
            self.peers.handle_disconnected(node, conn.direction, now);
            self.peer_left(node);
        }
    }

    /// `node`'s connection is gone, whichever way it went — closed by it, broken, banned by us
    /// (the ban removes the connection, so its close is ignored by [`Network::on_closed`]),
    /// superseded by its restarted self: every per-peer table forgets it, so none outlives the
    /// connected set. (The gossip engine forgets the peer when its connection closes: its
    /// driver watches the connection itself.)
    pub(super) fn peer_left(&mut self, node: NodeId) {
        self.sync.handle_peer_disconnected(node);
        self.intake.handle_peer_left(&node);
        self.upgrades.peer_gone(&node);
    }

    pub(super) fn on_peers_answer(
        &mut self,
        node: NodeId,
        result: Result<Vec<PeerAddr>, RequestError>,
    ) {
        let now = self.now();
        match result {
            Ok(list) => match self.peers.handle_peers_response(node, list, now) {
                Ok(report) => tracing::debug!(peer = %short(&node), ?report, "peer exchange"),
                Err(e) => tracing::debug!(peer = %short(&node), error = %e, "peer list ignored"),
            },
            Err(e) => self.answer_failed(node, "peer list", &e),
        }
    }

    pub(super) fn handshake_failed(
        &mut self,
        node: NodeId,
        direction: Direction,
        error: &HandshakeError,
    ) {
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

    pub(super) fn connected(
        &mut self,
        node: NodeId,
        conn: quinn::Connection,
        direction: Direction,
        hello: &Hello,
    ) {
        bump(&self.metrics.handshakes_completed);
        tracing::info!(peer = %short(&node), addr = %conn.remote_address(), ?direction, height = hello.head_height, "peer connected");
        let id = identity::NodeId::from_bytes(node);
        if self.gossip.add_peer(id, conn.clone()).is_err() {
            tracing::warn!("gossip driver stopped; peer not added to gossip");
        }
        let now = self.now();
        self.sync
            .handle_peer_status(node, hello.head_height, hello.head_hash.to_bytes(), now);
        let events = self.events.clone();
        let watched = conn.clone();
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            watched.closed().await;
            let _ = events
                .send(Event::Closed {
                    node,
                    stable_id: watched.stable_id(),
                })
                .await;
        }));
        tokio::spawn(tracing::Instrument::in_current_span(serve(
            node,
            conn.clone(),
            self.chain.clone(),
            super::rpc_server::Served {
                upgrades: self.upgrades.clone(),
                checkpoints: self.checkpoints.clone(),
                metrics: self.metrics.clone(),
            },
            self.events.clone(),
            self.limits.max_message_bytes,
        )));
        self.conns.insert(node, Conn { conn, direction });
    }
}
