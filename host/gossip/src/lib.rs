//! Sans-IO gossip core for modnode.
//!
//! The node's gossip *policy* (who gets a message, push or announce, quorum, timeout,
//! priority) is a pure decision function — in production a WebAssembly module implementing
//! `wit/gossip-policy/gossip-policy.wit`; here the [`Policy`] trait with the [`Flood`] baseline
//! and [`PolicyV2`]. The host-side *mechanics* live in [`GossipEngine`]: dedup, per-peer
//! priority queues, concurrent sends with timeouts, quorum-and-cancel, announce/request,
//! batching and the [`wire`] format. The engine does no I/O and reads no clock: drivers feed it
//! with `handle_*` calls and drain it with `poll_*` calls, passing virtual or real time as
//! [`Time`]. [`sim`] is such a driver: a deterministic network simulator.
//!
//! Modules: [`policy`] (WIT types, trait, flood), [`policy_v2`], [`engine`], [`wire`],
//! [`seen`], [`sim`], [`error`].

#![deny(missing_docs)]

pub mod engine;
pub mod error;
pub mod links;
mod peer;
pub mod seen;
pub mod sim;
pub mod wire;

pub use gossip_policy_common::{policy, policy_v2, policy_v3};

/// Time in microseconds on a monotonic scale chosen by the driver (virtual in simulations).
pub type Time = u64;

pub use gossip_policy_common::PeerId;

pub use engine::{
    EngineConfig, EngineStats, Event, GossipEngine, RouteStats, RoutingConfig, SendId, StateSizes,
    Transmit, id_head, payload_message_id,
};
pub use error::{GossipError, PeerFault, WireError};
pub use policy::{
    Flood, LinkControl, MessageKind, MessageMeta, PeerStats, Policy, PolicyEvent, Priority,
    RouteRole, SendMode, SendPlan, Target,
};
pub use policy_v2::{PolicyV2, V2Params, plan_v2};
pub use policy_v3::{PolicyV3, TreeState, V3Params, plan_v3};
pub use wire::{AnnounceItem, Frame, LinkItem, LinkOp, MessageId, Payload, RouteAdvert, RouteItem};
