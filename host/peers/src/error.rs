//! Error enums. Each message names the peer, request or setting at fault and, where the
//! caller has a choice, what to do.

use std::net::{AddrParseError, IpAddr};

use crate::peer_addr::ShortId;
use crate::sync::RequestId;
use crate::{NodeId, Time};

/// A configuration value is out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `backoff.base` is zero, which would redial a failing peer in a tight loop.
    #[error("backoff.base is 0; set it to at least 1 µs (default 500 ms)")]
    ZeroBackoffBase,
    /// `backoff.cap` is below `backoff.base`.
    #[error("backoff.cap ({cap} µs) is below backoff.base ({base} µs)")]
    BackoffCapBelowBase {
        /// The configured base delay.
        base: Time,
        /// The configured cap.
        cap: Time,
    },
    /// `backoff.jitter_percent` is above 100.
    #[error("backoff.jitter_percent is {0}; it must be at most 100")]
    JitterPercent(u8),
    /// A count that must be at least 1 is 0.
    #[error("{0} is 0; it must be at least 1")]
    Zero(&'static str),
    /// `SyncConfig::lookahead` is smaller than one batch.
    #[error("lookahead ({lookahead}) is smaller than batch_size ({batch_size})")]
    LookaheadBelowBatch {
        /// The configured lookahead.
        lookahead: u64,
        /// The configured batch size.
        batch_size: u64,
    },
    /// `SyncConfig::retry_backoff_max` is shorter than the first back-off.
    #[error("retry_backoff_max ({max} µs) is shorter than retry_backoff ({first} µs)")]
    BackoffMaxBelowFirst {
        /// The first back-off.
        first: u64,
        /// The longest back-off.
        max: u64,
    },
}

/// A `NodeId@addr` string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerAddrParseError {
    /// There is no `@` between node id and address.
    #[error("peer address {0:?} has no '@'; write it as <64 hex digits>@<ip>:<port>")]
    MissingAt(String),
    /// The node id does not have 64 hex digits.
    #[error("node id has {0} characters; it must be 64 hex digits")]
    IdLength(usize),
    /// The node id contains a character that is not a hex digit.
    #[error("node id contains {0:?}, which is not a hex digit")]
    IdDigit(char),
    /// The part after `@` is not a socket address.
    #[error("{addr:?} is not a socket address (<ip>:<port> or [<ipv6>]:<port>)")]
    Addr {
        /// The text after `@`.
        addr: String,
        /// Why it did not parse.
        source: AddrParseError,
    },
}

/// An input to [`PeerManager`](crate::PeerManager) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// The remote has our own node id; a bootstrap or exchanged address points back at us.
    #[error("connection to our own node id; close it")]
    SelfConnection,
    /// The peer is banned; refuse its connection.
    #[error("peer {} is banned until {until} µs; refuse the connection", ShortId(.node))]
    Banned {
        /// The banned peer.
        node: NodeId,
        /// When the ban ends.
        until: Time,
    },
    /// All inbound slots are taken; refuse the connection.
    #[error("inbound limit of {max} reached; refuse the connection from {}", ShortId(.node))]
    InboundFull {
        /// The refused peer.
        node: NodeId,
        /// The configured maximum.
        max: usize,
    },
    /// Too many inbound connections or handshakes from this IP; refuse the connection.
    #[error("{max} inbound connections or handshakes from {ip} already; refuse the connection")]
    TooManyFromIp {
        /// The remote IP.
        ip: IpAddr,
        /// [`PeerConfig::max_inbound_per_ip`](crate::PeerConfig::max_inbound_per_ip).
        max: usize,
    },
    /// Too many inbound connections or handshakes from this IP's subnet (/24 or /64); refuse.
    #[error(
        "{max} inbound connections or handshakes from the subnet of {ip} already; refuse the \
         connection"
    )]
    TooManyFromSubnet {
        /// The remote IP.
        ip: IpAddr,
        /// [`PeerConfig::max_inbound_per_subnet`](crate::PeerConfig::max_inbound_per_subnet).
        max: usize,
    },
    /// Too many transport handshakes in progress; refuse the connection.
    #[error("{max} incoming handshakes in progress already; refuse the connection")]
    TooManyPending {
        /// [`PeerConfig::max_pending_incoming`](crate::PeerConfig::max_pending_incoming).
        max: usize,
    },
    /// We already have a connection with this peer; close the new one.
    #[error("already connected or connecting to {}; close the duplicate connection", ShortId(.node))]
    DuplicateConnection {
        /// The peer.
        node: NodeId,
    },
    /// The event does not fit the peer's state (a stale or superseded connection); close it.
    #[error("peer {}: {event} while {state}; close that connection", ShortId(.node))]
    UnexpectedState {
        /// The peer.
        node: NodeId,
        /// What the driver reported.
        event: &'static str,
        /// The state the manager has for the peer.
        state: &'static str,
    },
    /// A peer that has not completed the handshake sent an application request.
    #[error("peer {} has not completed the handshake; ignore its request", ShortId(.node))]
    NotConnected {
        /// The peer.
        node: NodeId,
    },
    /// A peer list arrived from a peer we did not ask; it was ignored.
    #[error("peer {} sent a peer list we did not ask for; it was ignored", ShortId(.node))]
    UnsolicitedPeers {
        /// The peer.
        node: NodeId,
    },
}

/// An input to [`RangeSync`](crate::RangeSync) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyncError {
    /// No request with this id is in flight (it timed out, failed or was never sent); drop the response.
    #[error("request {id} is not in flight (timed out, failed or never sent); drop the response")]
    UnknownRequest {
        /// The request id.
        id: RequestId,
    },
    /// The request was sent to another peer; the response was ignored.
    #[error("request {id} was sent to {} but answered by {}; ignored", ShortId(.expected), ShortId(.actual))]
    WrongPeer {
        /// The request id.
        id: RequestId,
        /// The peer the request was sent to.
        expected: NodeId,
        /// The peer that answered.
        actual: NodeId,
    },
}
