//! The gossip-policy interface: plain-Rust mirrors of the types in
//! `wit/gossip-policy/gossip-policy.wit`, the [`Policy`] trait the engine consults for every
//! publish and forward, and the baseline [`Flood`] policy.
//!
//! Type and field names match what `wit-bindgen` generates for the WIT package, so policy code
//! written against this module can be moved into a wasm guest crate by changing only its `use`
//! lines.

/// What kind of message is being spread (WIT `message-kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MessageKind {
    /// A block.
    Block,
    /// A consensus message (votes, finality).
    Consensus,
    /// A deposit waiting for inclusion.
    Deposit,
    /// Peer exchange.
    PeerExchange,
}

impl MessageKind {
    /// All kinds, in wire-code order.
    pub const ALL: [MessageKind; 4] = [
        MessageKind::Block,
        MessageKind::Consensus,
        MessageKind::Deposit,
        MessageKind::PeerExchange,
    ];

    /// The one-byte wire code of this kind.
    pub fn code(self) -> u8 {
        match self {
            MessageKind::Block => 0,
            MessageKind::Consensus => 1,
            MessageKind::Deposit => 2,
            MessageKind::PeerExchange => 3,
        }
    }

    /// The kind for a wire code, if the code is known.
    pub fn from_code(code: u8) -> Option<MessageKind> {
        MessageKind::ALL.get(usize::from(code)).copied()
    }

    /// The conventional priority class of this kind: blocks and consensus are high, deposits
    /// normal, peer exchange low. The engine uses it for sends no plan decided (requests and
    /// answers to requests).
    pub fn default_priority(self) -> Priority {
        match self {
            MessageKind::Block | MessageKind::Consensus => Priority::High,
            MessageKind::Deposit => Priority::Normal,
            MessageKind::PeerExchange => Priority::Low,
        }
    }
}

/// Priority class (WIT `priority`); the engine keeps one send queue per class and peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Blocks and consensus; always dequeued first.
    High,
    /// Deposits.
    Normal,
    /// Peer exchange and bulk.
    Low,
}

impl Priority {
    /// All classes, highest first.
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    /// Index of the class, 0 = high.
    pub fn index(self) -> usize {
        match self {
            Priority::High => 0,
            Priority::Normal => 1,
            Priority::Low => 2,
        }
    }
}

/// Facts about the message to spread (WIT `message-meta`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageMeta {
    /// Message kind.
    pub kind: MessageKind,
    /// Payload size in bytes.
    pub size: u32,
    /// True if this node created the message (it has no origin peer).
    pub local_origin: bool,
    /// How many hops the message has travelled so far (0 at its creator).
    pub hops: u32,
    /// This node's estimate of the network size (itself included).
    pub network_size: u32,
}

/// Statistics about one connected peer (WIT `peer-stats`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStats {
    /// Opaque handle of the peer; plans refer back to it.
    pub peer: u32,
    /// Smoothed round-trip time in microseconds.
    pub rtt_us: u32,
    /// Sends queued to this peer and not yet acknowledged (queued plus in flight).
    pub queue_depth: u32,
    /// Sends to this peer that failed or timed out recently.
    pub recent_failures: u32,
    /// The peer has already announced or sent us this message.
    pub has_message: bool,
    /// The peer is the one we received the message from.
    pub is_origin: bool,
}

/// How to deliver to one target (WIT `send-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SendMode {
    /// Send the full message.
    Push,
    /// Send only the message id; the peer pulls what it lacks.
    Announce,
}

/// One target of a plan (WIT `target`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Peer handle from [`PeerStats::peer`].
    pub peer: u32,
    /// Push or announce.
    pub mode: SendMode,
}

/// The decision for one message (WIT `send-plan`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendPlan {
    /// Who gets the message, and how.
    pub targets: Vec<Target>,
    /// After this many pushes are delivered the host cancels the pending ones; 0 = wait for all.
    pub quorum: u32,
    /// Per-send timeout in milliseconds.
    pub timeout_ms: u32,
    /// Priority class for the sends.
    pub priority: Priority,
}

/// Something the engine saw happen, reported to a stateful policy between plans (the native
/// mirror of `modnode:gossip-policy@2.0.0`'s `event`). `message` is the first 8 bytes of the
/// message id, little endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyEvent {
    /// The link to `peer` delivered a redundant copy: the peer pushed a full copy of a message
    /// this node already had, or the peer told us (PRUNE) that our push was one for it.
    Duplicate {
        /// Handle of the peer.
        peer: u32,
        /// First 8 bytes of the message id.
        message: u64,
        /// Message kind.
        kind: MessageKind,
    },
    /// The link to `peer` is needed: the peer announced a message that did not arrive within
    /// the graft timer (or that this node, on no tree link yet, pulls from it at once), or the
    /// peer told us (GRAFT) that a message we announced went missing.
    Missing {
        /// Handle of the peer.
        peer: u32,
        /// First 8 bytes of the message id.
        message: u64,
        /// Message kind.
        kind: MessageKind,
    },
    /// A peer connected.
    PeerJoined(u32),
    /// A peer left; its handle may be reused later.
    PeerLeft(u32),
    /// Time passed: milliseconds on the engine's clock.
    Tick(u64),
}

/// What a tree-building (PlumTree-style) policy asks of the engine's mechanics: once the node
/// is on the tree, wait for the tree's push of an announced small message before pulling it;
/// report `missing` when it does not come (or at once while the node is on no tree link) and
/// graft the announcer; tell peers PRUNE / GRAFT. A policy that asks nothing (`None`) gets today's
/// mechanics: an announce is pulled at once and no control messages are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkControl {
    /// Shortest graft timer, milliseconds: the engine tunes the timer from the gaps it
    /// measures between an announce and the eager copy that follows it, within these bounds.
    pub graft_min_ms: u32,
    /// Longest graft timer, milliseconds (also the timer before any gap was measured).
    pub graft_max_ms: u32,
    /// Announces of messages larger than this (bytes) are pulled at once: the policy announces
    /// them before sending (to every peer), so there is no eager copy to wait for.
    pub announce_first_above: u32,
}

/// Where a peer stands on the shortest-path tree of a message's origin, as the engine's
/// distance-vector routes know it (host-side only: no WIT contract carries it yet).
#[cfg(not(target_arch = "wasm32"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteRole {
    /// No route to the origin is known (or the message names none).
    Unknown,
    /// The peer is this node's next hop towards the origin.
    Parent,
    /// The peer's route to the origin runs through this node; about 2^`n` nodes' routes run
    /// through the peer (its subtree's size class, itself included): a large subtree is served
    /// first.
    Child(u8),
    /// Neither.
    Other,
}

/// A gossip policy: decides, for one message, who gets it and how.
///
/// The engine calls [`Policy::plan`] once per message this node publishes or receives for the
/// first time. The real node implements it by calling the `plan` export of a wasm module.
pub trait Policy {
    /// Decides who gets `msg`. `peers` lists every connected peer, sorted by handle.
    fn plan(&mut self, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan;

    /// Hears what happened between plans (a stateless policy ignores it).
    fn on_event(&mut self, _event: &PolicyEvent) {}

    /// The tree mechanics the policy wants from the engine ([`LinkControl`]); `None` for
    /// policies that build no tree.
    fn link_control(&self) -> Option<LinkControl> {
        None
    }

    /// Decides who gets `msg` knowing each peer's place on the origin's shortest-path tree
    /// (`routes[i]` is `peers[i]`'s), when the engine routes. A policy that does not use
    /// routes plans as [`Policy::plan`].
    #[cfg(not(target_arch = "wasm32"))]
    fn plan_routed(
        &mut self,
        msg: &MessageMeta,
        peers: &[PeerStats],
        routes: &[RouteRole],
    ) -> SendPlan {
        let _ = routes;
        self.plan(msg, peers)
    }
}

impl<P: Policy + ?Sized> Policy for Box<P> {
    fn plan(&mut self, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan {
        (**self).plan(msg, peers)
    }

    fn on_event(&mut self, event: &PolicyEvent) {
        (**self).on_event(event);
    }

    fn link_control(&self) -> Option<LinkControl> {
        (**self).link_control()
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn plan_routed(
        &mut self,
        msg: &MessageMeta,
        peers: &[PeerStats],
        routes: &[RouteRole],
    ) -> SendPlan {
        (**self).plan_routed(msg, peers, routes)
    }
}

/// Baseline policy (the same decision as the `gossip-policy-v1` module): push the full message
/// to every peer that lacks it and is not its origin, wait for all sends.
#[derive(Clone, Copy, Debug, Default)]
pub struct Flood;

impl Flood {
    /// Per-send timeout, as in `gossip-policy-v1`.
    pub const TIMEOUT_MS: u32 = 2_000;
}

impl Policy for Flood {
    fn plan(&mut self, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan {
        SendPlan {
            targets: peers
                .iter()
                .filter(|p| !p.has_message && !p.is_origin)
                .map(|p| Target {
                    peer: p.peer,
                    mode: SendMode::Push,
                })
                .collect(),
            quorum: 0,
            timeout_ms: Flood::TIMEOUT_MS,
            priority: msg.kind.default_priority(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(peer: u32, has: bool, origin: bool) -> PeerStats {
        PeerStats {
            peer,
            rtt_us: 1_000,
            queue_depth: 0,
            recent_failures: 0,
            has_message: has,
            is_origin: origin,
        }
    }

    #[test]
    fn flood_skips_holders_and_origin() {
        let meta = MessageMeta {
            kind: MessageKind::Deposit,
            size: 100,
            local_origin: false,
            hops: 1,
            network_size: 10,
        };
        let peers = [
            stats(1, false, true),
            stats(2, true, false),
            stats(3, false, false),
        ];
        let plan = Flood.plan(&meta, &peers);
        assert_eq!(
            plan.targets,
            vec![Target {
                peer: 3,
                mode: SendMode::Push
            }]
        );
        assert_eq!(plan.quorum, 0);
        assert_eq!(plan.priority, Priority::Normal);
    }

    #[test]
    fn kind_codes_roundtrip() {
        for kind in MessageKind::ALL {
            assert_eq!(MessageKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(MessageKind::from_code(4), None);
        assert_eq!(MessageKind::Block.default_priority(), Priority::High);
        assert_eq!(MessageKind::PeerExchange.default_priority(), Priority::Low);
    }
}
