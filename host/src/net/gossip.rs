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

mod driver;

use driver::Driver;

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
pub type PolicyEvents = Box<dyn FnMut(modnode_gossip::PolicyEvent) + Send>;

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
            tell(*event);
        }
    }

    fn link_control(&self) -> Option<modnode_gossip::LinkControl> {
        self.inner.link_control()
    }
}
