//! What the simulator drives: a sans-IO gossip node behind the [`SimNode`] trait, and its
//! implementation for modnode's [`GossipEngine`] (whatever [`Policy`] it consults).
//!
//! The simulator knows nothing of policies: it moves frames between nodes, models links,
//! latency, bandwidth and churn, and records deliveries. A node protocol plugs in by
//! implementing [`SimNode`]; a policy plugs in by being a [`Policy`] of the engine. A stateful
//! policy (one that keeps per-node state between plans and hears duplicates, missing messages,
//! peers joining and leaving and ticks) plugs in the same way: the simulator already builds one
//! node — so one policy instance — per node and incarnation ([`NodeSetup`]), tells every node
//! when a peer joins or leaves, and wakes it at the time it asks for; what the engine reports
//! to its policy is the engine's business, not the simulator's.

use crate::engine::{EngineStats, Event, GossipEngine, SendId};
use crate::error::GossipError;
use crate::policy::{MessageKind, Policy};
use crate::wire::{Frame, MessageId, Payload};
use crate::{PeerId, Time};

/// What the simulator tells a node factory about the node it wants built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeSetup {
    /// Index of the node in the network (its [`PeerId`] on every link).
    pub index: usize,
    /// 0 for the node's first life; incremented each time it rejoins after churn (a rejoining
    /// node starts from empty state, as a restarted process would).
    pub incarnation: u64,
    /// The run's seed, for nodes that need randomness of their own.
    pub seed: u64,
    /// Number of nodes in the network.
    pub network_size: usize,
    /// When the node starts (0 at the start of the run, later when it rejoins).
    pub now: Time,
}

/// What a frame costs and carries, as the simulator measures it on the receiving link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameCost {
    /// Bytes on the wire, before the simulator's per-transmission overhead.
    pub bytes: usize,
    /// Full message payloads carried, of any kind (redundancy is counted from these).
    pub payloads: u64,
    /// Block payloads carried (a subset of `payloads`).
    pub block_payloads: u64,
    /// Control messages carried (announces, requests; gossipsub GRAFT, PRUNE, IHAVE, IWANT,
    /// IDONTWANT).
    pub control: u64,
}

/// A transmission a node asks the simulator to carry.
#[derive(Clone, Debug)]
pub struct SimTransmit<F> {
    /// Destination.
    pub peer: PeerId,
    /// Handle the node wants back in [`SimNode::handle_send_complete`].
    pub send_id: SendId,
    /// What to carry.
    pub frame: F,
}

/// A sans-IO gossip node the simulator can drive: inputs through `handle_*`, outputs through
/// `poll_*`, time passed in as `now`, never read from a clock.
pub trait SimNode {
    /// What travels between two nodes.
    type Frame;

    /// What a frame costs on the wire and carries.
    fn frame_cost(frame: &Self::Frame) -> FrameCost;

    /// Publishes a message created by this node.
    fn publish(
        &mut self,
        kind: MessageKind,
        payload: Payload,
        now: Time,
    ) -> Result<MessageId, GossipError>;

    /// A frame from `from` finished arriving.
    fn handle_frame(
        &mut self,
        from: PeerId,
        frame: Self::Frame,
        now: Time,
    ) -> Result<(), GossipError>;

    /// The transport acknowledged transmission `send_id` to `peer`.
    fn handle_send_complete(&mut self, peer: PeerId, send_id: SendId, now: Time);

    /// The time the node asked for ([`SimNode::poll_timeout`]) has come.
    fn handle_timeout(&mut self, now: Time);

    /// A peer connected; `rtt_us` is the round trip the transport measured while connecting.
    fn add_peer(&mut self, peer: PeerId, rtt_us: u32, now: Time) -> Result<(), GossipError>;

    /// A peer disconnected (it left the network, or its connection broke).
    fn remove_peer(&mut self, peer: PeerId, now: Time) -> Result<(), GossipError>;

    /// The next transmission to carry.
    fn poll_transmit(&mut self, now: Time) -> Option<SimTransmit<Self::Frame>>;

    /// The next message delivered to the application for the first time.
    fn poll_delivered(&mut self) -> Option<MessageId>;

    /// When the node wants [`SimNode::handle_timeout`] called.
    fn poll_timeout(&self) -> Option<Time>;

    /// The engine's counters, for nodes that are a [`GossipEngine`] (zero otherwise).
    fn engine_stats(&self) -> EngineStats {
        EngineStats::default()
    }
}

/// A [`GossipEngine`] as a simulated node.
#[derive(Debug)]
pub struct EngineNode<P> {
    engine: GossipEngine<P>,
    encode_frames: bool,
}

impl<P: Policy> EngineNode<P> {
    /// Wraps `engine`; with `encode_frames`, every frame received goes through the codec.
    pub fn new(engine: GossipEngine<P>, encode_frames: bool) -> Self {
        EngineNode {
            engine,
            encode_frames,
        }
    }

    /// The engine.
    pub fn engine(&self) -> &GossipEngine<P> {
        &self.engine
    }
}

fn frame_cost(frame: &Frame) -> FrameCost {
    let mut cost = FrameCost {
        bytes: frame.encoded_len(),
        ..FrameCost::default()
    };
    add_contents(frame, &mut cost);
    cost
}

fn add_contents(frame: &Frame, cost: &mut FrameCost) {
    match frame {
        Frame::Push { kind, .. } => {
            cost.payloads += 1;
            cost.block_payloads += u64::from(*kind == MessageKind::Block);
        }
        Frame::Announce { .. }
        | Frame::Request { .. }
        | Frame::Link { .. }
        | Frame::Routes { .. } => cost.control += 1,
        Frame::Batch { frames } => {
            for inner in frames {
                add_contents(inner, cost);
            }
        }
    }
}

impl<P: Policy> SimNode for EngineNode<P> {
    type Frame = Frame;

    fn frame_cost(frame: &Frame) -> FrameCost {
        frame_cost(frame)
    }

    fn publish(
        &mut self,
        kind: MessageKind,
        payload: Payload,
        now: Time,
    ) -> Result<MessageId, GossipError> {
        self.engine.publish(kind, payload, now)
    }

    fn handle_frame(&mut self, from: PeerId, frame: Frame, now: Time) -> Result<(), GossipError> {
        if self.encode_frames {
            let bytes = frame.encode()?;
            self.engine.handle_datagram(from, &bytes, now)
        } else {
            self.engine.handle_frame(from, frame, now)
        }
    }

    fn handle_send_complete(&mut self, peer: PeerId, send_id: SendId, now: Time) {
        self.engine.handle_send_complete(peer, send_id, now);
    }

    fn handle_timeout(&mut self, now: Time) {
        self.engine.handle_timeout(now);
    }

    fn add_peer(&mut self, peer: PeerId, rtt_us: u32, _now: Time) -> Result<(), GossipError> {
        self.engine.add_peer(peer)?;
        self.engine.handle_rtt_sample(peer, rtt_us);
        Ok(())
    }

    fn remove_peer(&mut self, peer: PeerId, now: Time) -> Result<(), GossipError> {
        self.engine.remove_peer(peer, now)
    }

    fn poll_transmit(&mut self, now: Time) -> Option<SimTransmit<Frame>> {
        self.engine.poll_transmit(now).map(|tx| SimTransmit {
            peer: tx.peer,
            send_id: tx.send_id,
            frame: tx.frame,
        })
    }

    fn poll_delivered(&mut self) -> Option<MessageId> {
        self.engine.poll_event().map(|ev| match ev {
            Event::Delivered { id, .. } => id,
        })
    }

    fn poll_timeout(&self) -> Option<Time> {
        self.engine.poll_timeout()
    }

    fn engine_stats(&self) -> EngineStats {
        self.engine.stats().clone()
    }
}
