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
//!
//! What a peer's incoming streams cost us is bounded: every stream must deliver its frame within
//! [`GossipConfig::stream_read_timeout`], and the bytes buffered for all of a peer's unfinished
//! streams together stay within [`GossipConfig::peer_read_budget`]. A stream that misses its
//! deadline or would go over the budget is stopped ([`STREAM_DEADLINE`], [`STREAM_OVER_BUDGET`])
//! and the peer is reported as a violator.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicUsize, Ordering};
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
use crate::runtime::gossip_policy::PolicyEvent;

/// Codec message type of gossip frames.
pub const GOSSIP_MESSAGE: u8 = 1;

/// Application code of a `STOP_SENDING` for a stream that missed its read deadline.
pub const STREAM_DEADLINE: u32 = 1;

/// Application code of a `STOP_SENDING` for a stream that would take its peer over its
/// read budget.
pub const STREAM_OVER_BUDGET: u32 = 2;

/// Bytes read per call from a stream: the unit the read budget is charged in.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// modnode's gossip message ids: a block's id is its header hash (the header is the first
/// [`HEADER_BYTES`](crate::chain::block::HEADER_BYTES) bytes of its encoding, and its sha256 is
/// the block hash), so copies of one block with different bodies share an id and deduplicate;
/// every other kind is identified by the sha256 of its payload.
pub fn message_id(kind: MessageKind, payload: &[u8]) -> MessageId {
    match (kind, payload.get(..crate::chain::block::HEADER_BYTES)) {
        (MessageKind::Block, Some(header)) => MessageId::of(header),
        _ => MessageId::of(payload),
    }
}

/// Frames and send results the driver's stream tasks may have waiting for it; a task that finds
/// the channel full waits, and with it the peer's stream (QUIC flow control pushes back).
const IO_CAPACITY: usize = 256;

/// Events the application may have waiting; beyond, a delivered message is dropped (rejected
/// in the engine, so it is not relayed) and counted, rather than held without bound.
const EVENT_CAPACITY: usize = 1024;

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
    /// Time an incoming stream has to deliver its whole frame (a full-size frame at 400 KiB/s
    /// by default): a peer cannot pin a stream, and the buffer behind it, forever.
    pub stream_read_timeout: Duration,
    /// Bytes all of one peer's unfinished incoming streams may hold in memory together
    /// (default: two full-size frames, whatever the number of streams).
    pub peer_read_budget: usize,
}

impl Default for GossipConfig {
    fn default() -> Self {
        Self {
            engine: EngineConfig::default(),
            max_message_bytes: codec::MAX_MESSAGE_BYTES,
            receive_rate_bps: None,
            stream_read_timeout: Duration::from_secs(20),
            peer_read_budget: 2 * codec::MAX_MESSAGE_BYTES,
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
    /// Most bytes one peer's unfinished streams held at once.
    pub peak_held_bytes: u64,
    /// Streams stopped for missing their read deadline.
    pub streams_timed_out: u64,
    /// Streams stopped because they would have taken their peer over its read budget.
    pub streams_over_budget: u64,
    /// Events the application was too far behind to take (dropped; delivered messages among
    /// them are not relayed).
    pub events_dropped: u64,
}

/// Bytes one peer's unfinished incoming streams hold, against its budget.
#[derive(Debug)]
struct ReadBudget {
    held: AtomicUsize,
    limit: usize,
}

impl ReadBudget {
    /// Charges `bytes`, or returns `None` if they would exceed the limit. The returned total
    /// is what the peer holds afterwards.
    fn try_charge(&self, bytes: usize) -> Option<usize> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .ok()
            .and_then(|before| before.checked_add(bytes))
    }
}

/// What one stream has charged to its peer's budget; released when the stream is done.
struct Charge<'a> {
    budget: &'a ReadBudget,
    bytes: usize,
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Why reading one stream failed.
enum StreamError {
    /// The peer broke the framing or sent another message type.
    Violation(String),
    /// The stream would take the peer over its read budget.
    OverBudget { held: usize, limit: usize },
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

/// Where the driver reports what a stateful gossip policy (`modnode:gossip-policy@2.0.0`)
/// learns from between plans, as the engine hears it ([`modnode_gossip::PolicyEvent`]): peers
/// joining and leaving, a peer pushing a message this node already had or telling us PRUNE
/// (`duplicate`), an announced message not delivered within a tree-building policy's graft
/// timer or a peer telling us GRAFT (`missing`), and the clock (a tick at most every
/// [`POLICY_TICK`]).
pub type PolicyEvents = Box<dyn FnMut(PolicyEvent) + Send>;

/// Shortest time between two ticks reported to the policy.
pub const POLICY_TICK: Duration = Duration::from_secs(1);

/// Starts a driver with `policy`; returns its handle and the application's event stream. Must
/// be called within a tokio runtime. The driver stops when every handle is dropped.
pub fn spawn<P: Policy + Send + 'static>(
    config: GossipConfig,
    policy: P,
) -> (GossipHandle, mpsc::Receiver<GossipEvent>) {
    spawn_with_policy_events(config, policy, None)
}

/// [`spawn`], also reporting the policy's events to `policy_events` (called on the driver's
/// task, between the engine's steps).
pub fn spawn_with_policy_events<P: Policy + Send + 'static>(
    config: GossipConfig,
    policy: P,
    policy_events: Option<PolicyEvents>,
) -> (GossipHandle, mpsc::Receiver<GossipEvent>) {
    // The handle's commands stay unbounded: the application sends one publish per message it
    // creates and one verdict per delivered message, and deliveries are bounded by the event
    // channel. Everything that comes from peers goes through the bounded `io` channel.
    let (commands, rx) = mpsc::unbounded_channel();
    let (io, io_rx) = mpsc::channel(IO_CAPACITY);
    let (events, events_rx) = mpsc::channel(EVENT_CAPACITY);
    // No message larger than a frame can ever arrive: an announce claiming one is a lie.
    let mut engine = config.engine.clone();
    let frame_limit = u32::try_from(config.max_message_bytes).unwrap_or(u32::MAX);
    engine.max_announced_size = engine.max_announced_size.min(frame_limit);
    engine.policy_tick = Time::try_from(POLICY_TICK.as_micros()).unwrap_or(Time::MAX);
    let policy = Reporting {
        inner: policy,
        tell: policy_events,
    };
    let driver = Driver {
        engine: GossipEngine::new(engine, policy),
        config,
        start: Instant::now(),
        peers: HashMap::new(),
        next_peer: 0,
        io,
        events,
        traffic: Arc::new(Mutex::new(TrafficStats::default())),
        throttle: Arc::new(Mutex::new(Instant::now())),
    };
    tokio::spawn(tracing::Instrument::in_current_span(driver.run(rx, io_rx)));
    (GossipHandle { commands }, events_rx)
}

/// The driver's policy: `inner` plans; every event the engine tells it also goes to `tell`.
struct Reporting<P> {
    inner: P,
    tell: Option<PolicyEvents>,
}

impl<P: Policy> Policy for Reporting<P> {
    fn plan(
        &mut self,
        msg: &modnode_gossip::MessageMeta,
        peers: &[modnode_gossip::PeerStats],
    ) -> modnode_gossip::SendPlan {
        self.inner.plan(msg, peers)
    }

    fn on_event(&mut self, event: &modnode_gossip::PolicyEvent) {
        self.inner.on_event(event);
        if let Some(tell) = &mut self.tell {
            tell(crate::runtime::gossip_policy::to_wit_event(*event));
        }
    }

    fn link_control(&self) -> Option<modnode_gossip::LinkControl> {
        self.inner.link_control()
    }
}

struct Driver<P> {
    engine: GossipEngine<Reporting<P>>,
    config: GossipConfig,
    start: Instant,
    peers: HashMap<PeerId, (NodeId, quinn::Connection)>,
    next_peer: PeerId,
    io: mpsc::Sender<Command>,
    events: mpsc::Sender<GossipEvent>,
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

    /// Runs until every handle is dropped.
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Command>,
        mut io_rx: mpsc::Receiver<Command>,
    ) {
        loop {
            self.flush();
            // A deadline past what `Instant` can represent is no deadline.
            let deadline = self
                .engine
                .poll_timeout()
                .and_then(|t| self.start.checked_add(Duration::from_micros(t)));
            let command = tokio::select! {
                c = rx.recv() => match c {
                    Some(c) => c,
                    None => return,
                },
                Some(c) = io_rx.recv() => c,
                // Without a deadline the branch is disabled and its sleep never polled.
                _ = tokio::time::sleep_until(deadline.unwrap_or(self.start)), if deadline.is_some() => {
                    let now = self.now();
                    self.engine.handle_timeout(now);
                    continue;
                }
            };
            self.handle(command);
            self.tick();
        }
    }

    /// Reports the clock to the policy, at most every [`POLICY_TICK`] (the engine's
    /// `policy_tick`).
    fn tick(&mut self) {
        let now = self.now();
        self.engine.handle_tick(now);
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
            if self
                .events
                .try_send(GossipEvent::Violation { peer: node, reason })
                .is_err()
            {
                bump_traffic(&self.traffic, |t| &mut t.events_dropped);
            }
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
            let io = self.io.clone();
            let max = self.config.max_message_bytes;
            tokio::spawn(tracing::Instrument::in_current_span(async move {
                let ok = send(&conn, quic_priority(transmit.priority), &bytes, max)
                    .await
                    .is_ok();
                let rtt_us = u32::try_from(conn.rtt().as_micros()).unwrap_or(u32::MAX);
                let _ = io
                    .send(Command::SendDone {
                        peer: transmit.peer,
                        send_id: transmit.send_id,
                        ok,
                        rtt_us,
                    })
                    .await;
            }));
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
                let delivered = from.is_some_and(|from| {
                    self.events
                        .try_send(GossipEvent::Delivered {
                            id,
                            kind,
                            payload,
                            from,
                        })
                        .is_ok()
                });
                if !delivered {
                    // Nobody will judge it: never relay it.
                    self.engine.handle_validated(id, false, now);
                    bump_traffic(&self.traffic, |t| &mut t.events_dropped);
                }
            }
        }
    }

    fn spawn_reader(&self, peer: PeerId, conn: quinn::Connection) {
        let io = self.io.clone();
        let max = self.config.max_message_bytes;
        let deadline = self.config.stream_read_timeout;
        let budget = Arc::new(ReadBudget {
            held: AtomicUsize::new(0),
            limit: self.config.peer_read_budget,
        });
        let traffic = self.traffic.clone();
        let throttle = self.config.receive_rate_bps.map(|bps| {
            let bps = NonZeroU64::new(bps).unwrap_or(NonZeroU64::MIN);
            (bps, self.throttle.clone())
        });
        tokio::spawn(tracing::Instrument::in_current_span(async move {
            loop {
                let mut stream = match conn.accept_uni().await {
                    Ok(stream) => stream,
                    Err(_) => {
                        let _ = io.send(Command::Closed { peer }).await;
                        return;
                    }
                };
                let io = io.clone();
                let traffic = traffic.clone();
                let throttle = throttle.clone();
                let budget = budget.clone();
                tokio::spawn(tracing::Instrument::in_current_span(async move {
                    let read = read_within_budget(&mut stream, max, &budget, &traffic);
                    let outcome = match tokio::time::timeout(deadline, read).await {
                        Ok(Ok(None)) => Ok(None),
                        Ok(Ok(Some(frame))) => decode(frame, &traffic, throttle).await,
                        Ok(Err(StreamError::Violation(reason))) => Err(reason),
                        Ok(Err(StreamError::OverBudget { held, limit })) => {
                            let _ = stream.stop(quinn::VarInt::from_u32(STREAM_OVER_BUDGET));
                            bump_traffic(&traffic, |t| &mut t.streams_over_budget);
                            Err(format!(
                                "unfinished gossip streams would hold {held} bytes, over the \
                                 budget of {limit}"
                            ))
                        }
                        Err(_) => {
                            let _ = stream.stop(quinn::VarInt::from_u32(STREAM_DEADLINE));
                            bump_traffic(&traffic, |t| &mut t.streams_timed_out);
                            Err(format!(
                                "gossip stream not finished within {} ms",
                                deadline.as_millis()
                            ))
                        }
                    };
                    let command = match outcome {
                        Ok(Some(frame)) => Command::Incoming { peer, frame },
                        Ok(None) => return,
                        Err(reason) => Command::Violation { peer, reason },
                    };
                    let _ = io.send(command).await;
                }));
            }
        }));
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

fn bump_traffic(traffic: &Mutex<TrafficStats>, field: impl FnOnce(&mut TrafficStats) -> &mut u64) {
    if let Ok(mut t) = traffic.lock() {
        let counter = field(&mut t);
        *counter = counter.saturating_add(1);
    }
}

/// Reads one codec frame from `stream`, charging every buffered byte to the peer's `budget`
/// until the frame is complete. `Ok(None)`: the stream ended before a frame started, or the
/// connection went away (not the peer's fault as far as we know).
async fn read_within_budget(
    stream: &mut quinn::RecvStream,
    max: usize,
    budget: &ReadBudget,
    traffic: &Mutex<TrafficStats>,
) -> Result<Option<codec::Frame>, StreamError> {
    let mut decoder = codec::FrameDecoder::new(max);
    let mut charge = Charge { budget, bytes: 0 };
    loop {
        match decoder.next_frame() {
            Ok(Some(frame)) => return Ok(Some(frame)),
            Ok(None) => {}
            Err(e) => return Err(StreamError::Violation(e.to_string())),
        }
        let chunk = match stream.read_chunk(READ_CHUNK_BYTES, true).await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => {
                return match decoder.finish() {
                    Ok(()) => Ok(None),
                    Err(e) => Err(StreamError::Violation(e.to_string())),
                };
            }
            Err(_) => return Ok(None),
        };
        let bytes = chunk.bytes.len();
        let Some(held) = budget.try_charge(bytes) else {
            return Err(StreamError::OverBudget {
                held: budget.held.load(Ordering::Acquire).saturating_add(bytes),
                limit: budget.limit,
            });
        };
        charge.bytes = charge.bytes.saturating_add(bytes);
        if let Ok(mut t) = traffic.lock() {
            t.peak_held_bytes = t
                .peak_held_bytes
                .max(u64::try_from(held).unwrap_or(u64::MAX));
        }
        decoder.push(&chunk.bytes);
    }
}

/// Checks and decodes a gossip frame read from a stream; `Err` is a protocol violation.
async fn decode(
    frame: codec::Frame,
    traffic: &Mutex<TrafficStats>,
    throttle: Option<(NonZeroU64, Arc<Mutex<Instant>>)>,
) -> Result<Option<Frame>, String> {
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
            let mut next = next_free.lock().unwrap_or_else(|e| e.into_inner());
            let from = (*next).max(Instant::now());
            // Overflowing `Instant` takes a delay of centuries: then stop throttling.
            *next = from.checked_add(delay).unwrap_or(from);
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
