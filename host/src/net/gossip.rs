//! Drives a [`GossipEngine`] over QUIC connections: the thin async shell around the sans-IO
//! gossip core.
//!
//! One task owns the engine. Every [`Transmit`] becomes its own unidirectional stream with the
//! QUIC stream priority of its class, sent concurrently with every other transmit (so a slow
//! peer delays only its own queue) and reported back as complete once the peer acknowledged the
//! whole stream, or failed. Every incoming unidirectional stream carries one framed gossip
//! message; a malformed frame closes the connection with
//! [`CLOSE_PROTOCOL_VIOLATION`](super::endpoint::CLOSE_PROTOCOL_VIOLATION) and drops the peer,
//! the node keeps running.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use modnode_gossip::policy::{MessageKind, Policy, Priority};
use modnode_gossip::{
    EngineConfig, Event, Frame, GossipEngine, MessageId, Payload, PeerId, SendId, Time,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::codec;
use super::endpoint::CLOSE_PROTOCOL_VIOLATION;
use super::identity::NodeId;

/// Codec message type of gossip frames.
pub const GOSSIP_MESSAGE: u8 = 1;

/// Tunables of the driver.
#[derive(Debug, Clone)]
pub struct GossipConfig {
    /// The engine's mechanics.
    pub engine: EngineConfig,
    /// Largest frame accepted from a peer.
    pub max_message_bytes: usize,
    /// If set, incoming data is consumed at most this fast (bits per second): a deliberately
    /// slow receiver, for tests and benchmarks.
    pub receive_rate_bps: Option<u64>,
}

impl Default for GossipConfig {
    fn default() -> Self {
        Self {
            engine: EngineConfig::default(),
            max_message_bytes: codec::MAX_MESSAGE_BYTES,
            receive_rate_bps: None,
        }
    }
}

/// What the driver tells the application.
#[derive(Debug, Clone)]
pub enum GossipEvent {
    /// A message arrived for the first time.
    Delivered {
        /// Its id.
        id: MessageId,
        /// Its kind.
        kind: MessageKind,
        /// The message.
        payload: Payload,
        /// Who sent it.
        from: NodeId,
    },
    /// A peer was dropped for sending something malformed.
    Violation {
        /// The peer.
        peer: NodeId,
        /// What it sent.
        reason: String,
    },
}

/// Counters of received traffic.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TrafficStats {
    /// Framed bytes received.
    pub bytes_received: u64,
    /// Block payloads received (pushes, duplicates included).
    pub block_copies: u64,
}

enum Command {
    AddPeer {
        node: NodeId,
        conn: quinn::Connection,
    },
    Publish {
        kind: MessageKind,
        payload: Vec<u8>,
        reply: oneshot::Sender<Result<MessageId, String>>,
    },
    Incoming {
        peer: PeerId,
        frame: Frame,
    },
    SendDone {
        peer: PeerId,
        send_id: SendId,
        ok: bool,
        rtt_us: u32,
    },
    Violation {
        peer: PeerId,
        reason: String,
    },
    Closed {
        peer: PeerId,
    },
    Stats {
        reply: oneshot::Sender<(modnode_gossip::EngineStats, TrafficStats)>,
    },
    Validated {
        id: MessageId,
        valid: bool,
    },
}

/// Handle to a running gossip driver; cheap to clone.
#[derive(Clone)]
pub struct GossipHandle {
    commands: mpsc::UnboundedSender<Command>,
}

/// Why a gossip request failed.
#[derive(Debug, thiserror::Error)]
pub enum GossipDriverError {
    /// The driver task has stopped.
    #[error("the gossip driver has stopped")]
    Stopped,
    /// The engine refused to publish.
    #[error("cannot publish: {0}")]
    Publish(String),
}

impl GossipHandle {
    /// Adds a connected, authenticated peer.
    pub fn add_peer(&self, node: NodeId, conn: quinn::Connection) -> Result<(), GossipDriverError> {
        self.commands
            .send(Command::AddPeer { node, conn })
            .map_err(|_| GossipDriverError::Stopped)
    }

    /// Publishes a message created by this node.
    pub async fn publish(
        &self,
        kind: MessageKind,
        payload: Vec<u8>,
    ) -> Result<MessageId, GossipDriverError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Publish {
                kind,
                payload,
                reply,
            })
            .map_err(|_| GossipDriverError::Stopped)?;
        rx.await
            .map_err(|_| GossipDriverError::Stopped)?
            .map_err(GossipDriverError::Publish)
    }

    /// The application's verdict on a delivered message, when the engine validates before
    /// relaying ([`EngineConfig::validate_before_relay`]): valid messages are forwarded,
    /// invalid ones dropped.
    pub fn validated(&self, id: MessageId, valid: bool) -> Result<(), GossipDriverError> {
        self.commands
            .send(Command::Validated { id, valid })
            .map_err(|_| GossipDriverError::Stopped)
    }

    /// The engine's counters and the received-traffic counters.
    pub async fn stats(
        &self,
    ) -> Result<(modnode_gossip::EngineStats, TrafficStats), GossipDriverError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Stats { reply })
            .map_err(|_| GossipDriverError::Stopped)?;
        rx.await.map_err(|_| GossipDriverError::Stopped)
    }
}

/// Starts a driver with `policy`; returns its handle and the application's event stream. Must
/// be called within a tokio runtime. The driver stops when every handle is dropped.
pub fn spawn<P: Policy + Send + 'static>(
    config: GossipConfig,
    policy: P,
) -> (GossipHandle, mpsc::UnboundedReceiver<GossipEvent>) {
    let (commands, rx) = mpsc::unbounded_channel();
    let (events, events_rx) = mpsc::unbounded_channel();
    // No message larger than a frame can ever arrive: an announce claiming one is a lie.
    let mut engine = config.engine.clone();
    let frame_limit = u32::try_from(config.max_message_bytes).unwrap_or(u32::MAX);
    engine.max_announced_size = engine.max_announced_size.min(frame_limit);
    let driver = Driver {
        engine: GossipEngine::new(engine, policy),
        config,
        start: Instant::now(),
        peers: HashMap::new(),
        next_peer: 0,
        commands: commands.downgrade(),
        events,
        traffic: Arc::new(Mutex::new(TrafficStats::default())),
        throttle: Arc::new(Mutex::new(Instant::now())),
    };
    tokio::spawn(driver.run(rx));
    (GossipHandle { commands }, events_rx)
}

struct Driver<P> {
    engine: GossipEngine<P>,
    config: GossipConfig,
    start: Instant,
    peers: HashMap<PeerId, (NodeId, quinn::Connection)>,
    next_peer: PeerId,
    commands: mpsc::WeakUnboundedSender<Command>,
    events: mpsc::UnboundedSender<GossipEvent>,
    traffic: Arc<Mutex<TrafficStats>>,
    /// When the throttled receiver may consume its next bytes.
    throttle: Arc<Mutex<Instant>>,
}

fn quic_priority(priority: Priority) -> i32 {
    match priority {
        Priority::High => 2,
        Priority::Normal => 1,
        Priority::Low => 0,
    }
}

impl<P: Policy> Driver<P> {
    fn now(&self) -> Time {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        loop {
            self.flush();
            let deadline = self
                .engine
                .poll_timeout()
                .map(|t| self.start + Duration::from_micros(t));
            let command = match deadline {
                Some(deadline) => tokio::select! {
                    c = rx.recv() => c,
                    _ = tokio::time::sleep_until(deadline) => {
                        let now = self.now();
                        self.engine.handle_timeout(now);
                        continue;
                    }
                },
                None => rx.recv().await,
            };
            let Some(command) = command else { return };
            self.handle(command);
        }
    }

    fn handle(&mut self, command: Command) {
        let now = self.now();
        match command {
            Command::AddPeer { node, conn } => {
                let peer = self.next_peer;
                self.next_peer = self.next_peer.wrapping_add(1);
                if self.engine.add_peer(peer).is_ok() {
                    self.spawn_reader(peer, conn.clone());
                    self.peers.insert(peer, (node, conn));
                }
            }
            Command::Publish {
                kind,
                payload,
                reply,
            } => {
                let _ = reply.send(
                    self.engine
                        .publish(kind, payload, now)
                        .map_err(|e| e.to_string()),
                );
            }
            Command::Incoming { peer, frame } => {
                if let Err(e) = self.engine.handle_frame(peer, frame, now) {
                    self.violation(peer, e.to_string());
                }
            }
            Command::SendDone {
                peer,
                send_id,
                ok,
                rtt_us,
            } => {
                self.engine.handle_rtt_sample(peer, rtt_us);
                if ok {
                    self.engine.handle_send_complete(peer, send_id, now);
                } else {
                    self.engine.handle_send_failed(peer, send_id, now);
                }
            }
            Command::Violation { peer, reason } => self.violation(peer, reason),
            Command::Closed { peer } => {
                if self.peers.remove(&peer).is_some() {
                    let _ = self.engine.remove_peer(peer, now);
                }
            }
            Command::Validated { id, valid } => {
                self.engine.handle_validated(id, valid, now);
            }
            Command::Stats { reply } => {
                let traffic = self.traffic.lock().map(|t| *t).unwrap_or_default();
                let _ = reply.send((self.engine.stats().clone(), traffic));
            }
        }
    }

    fn violation(&mut self, peer: PeerId, reason: String) {
        if let Some((node, conn)) = self.peers.remove(&peer) {
            tracing::warn!(peer = %node, %reason, "gossip protocol violation; disconnecting");
            conn.close(
                quinn::VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION),
                b"gossip protocol violation",
            );
            let _ = self.engine.remove_peer(peer, self.now());
            let _ = self
                .events
                .send(GossipEvent::Violation { peer: node, reason });
        }
    }

    /// Hands every pending transmit to its own send task and every event to the application.
    fn flush(&mut self) {
        let now = self.now();
        while let Some(transmit) = self.engine.poll_transmit(now) {
            let Some((_, conn)) = self.peers.get(&transmit.peer) else {
                self.engine
                    .handle_send_failed(transmit.peer, transmit.send_id, now);
                continue;
            };
            let Ok(bytes) = transmit.encode() else {
                self.engine
                    .handle_send_failed(transmit.peer, transmit.send_id, now);
                continue;
            };
            let conn = conn.clone();
            let commands = self.commands.clone();
            let max = self.config.max_message_bytes;
            tokio::spawn(async move {
                let ok = send(&conn, quic_priority(transmit.priority), &bytes, max)
                    .await
                    .is_ok();
                let rtt_us = u32::try_from(conn.rtt().as_micros()).unwrap_or(u32::MAX);
                if let Some(commands) = commands.upgrade() {
                    let _ = commands.send(Command::SendDone {
                        peer: transmit.peer,
                        send_id: transmit.send_id,
                        ok,
                        rtt_us,
                    });
                }
            });
        }
        while let Some(event) = self.engine.poll_event() {
            if let Event::Delivered {
                id,
                kind,
                payload,
                from,
            } = event
            {
                let from = self.peers.get(&from).map(|(node, _)| *node);
                if let Some(from) = from {
                    let _ = self.events.send(GossipEvent::Delivered {
                        id,
                        kind,
                        payload,
                        from,
                    });
                }
            }
        }
    }

    fn spawn_reader(&self, peer: PeerId, conn: quinn::Connection) {
        let commands = self.commands.clone();
        let max = self.config.max_message_bytes;
        let traffic = self.traffic.clone();
        let throttle = self
            .config
            .receive_rate_bps
            .map(|bps| (bps.max(1), self.throttle.clone()));
        tokio::spawn(async move {
            loop {
                let mut stream = match conn.accept_uni().await {
                    Ok(stream) => stream,
                    Err(_) => {
                        if let Some(commands) = commands.upgrade() {
                            let _ = commands.send(Command::Closed { peer });
                        }
                        return;
                    }
                };
                let commands = commands.clone();
                let traffic = traffic.clone();
                let throttle = throttle.clone();
                tokio::spawn(async move {
                    let outcome = read_one(&mut stream, max, &traffic, throttle).await;
                    let Some(commands) = commands.upgrade() else {
                        return;
                    };
                    let _ = match outcome {
                        Ok(Some(frame)) => commands.send(Command::Incoming { peer, frame }),
                        Ok(None) => Ok(()),
                        Err(reason) => commands.send(Command::Violation { peer, reason }),
                    };
                });
            }
        });
    }
}

async fn send(
    conn: &quinn::Connection,
    priority: i32,
    bytes: &[u8],
    max: usize,
) -> Result<(), String> {
    let mut stream = conn.open_uni().await.map_err(|e| e.to_string())?;
    stream.set_priority(priority).map_err(|e| e.to_string())?;
    codec::write_frame(&mut stream, GOSSIP_MESSAGE, bytes, max)
        .await
        .map_err(|e| e.to_string())?;
    stream.finish().map_err(|e| e.to_string())?;
    // Resolves once the peer has acknowledged every byte (or stopped the stream).
    match stream.stopped().await {
        Ok(None) => Ok(()),
        Ok(Some(code)) => Err(format!("peer stopped the stream with code {code}")),
        Err(e) => Err(e.to_string()),
    }
}

/// Reads one gossip frame; `Err` is a protocol violation.
async fn read_one(
    stream: &mut quinn::RecvStream,
    max: usize,
    traffic: &Mutex<TrafficStats>,
    throttle: Option<(u64, Arc<Mutex<Instant>>)>,
) -> Result<Option<Frame>, String> {
    let frame = match codec::read_frame(stream, max).await {
        Ok(Some(frame)) => frame,
        Ok(None) => return Ok(None),
        Err(e) if e.is_protocol_violation() => return Err(e.to_string()),
        // The connection went away mid-stream: not the peer's fault as far as we know.
        Err(_) => return Ok(None),
    };
    if frame.msg_type != GOSSIP_MESSAGE {
        return Err(format!(
            "unexpected message type {} on a gossip stream",
            frame.msg_type
        ));
    }
    let len = u64::try_from(frame.payload.len()).unwrap_or(u64::MAX);
    if let Some((bps, next_free)) = throttle {
        let delay = Duration::from_micros(len.saturating_mul(8_000_000) / bps);
        let wake = {
            let mut next = next_free
                .lock()
                .map_err(|_| "throttle lock poisoned".to_string())?;
            *next = (*next).max(Instant::now()) + delay;
            *next
        };
        tokio::time::sleep_until(wake).await;
    }
    let decoded = Frame::decode(&frame.payload).map_err(|e| e.to_string())?;
    if let Ok(mut t) = traffic.lock() {
        t.bytes_received = t.bytes_received.saturating_add(len);
        t.block_copies = t.block_copies.saturating_add(decoded.block_pushes());
    }
    Ok(Some(decoded))
}
