//! Connection states: [`PeerState`] per peer, [`Direction`] of a connection, [`PeerCounts`]
//! over all peers.

use std::net::SocketAddr;

use crate::Time;

/// Which side opened a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Direction {
    /// We dialed the peer.
    Outbound,
    /// The peer dialed us.
    Inbound,
}

/// Connection state of a peer in the book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Not connected; dialed from `next_attempt_at` on when an outbound slot is free.
    Disconnected {
        /// Earliest time for the next dial (includes backoff and any ban).
        next_attempt_at: Time,
        /// Consecutive failed attempts.
        failures: u32,
    },
    /// We are dialing `addr`.
    Connecting {
        /// The address being dialed.
        addr: SocketAddr,
        /// When the dial is abandoned.
        deadline: Time,
        /// Consecutive failed attempts before this one.
        failures: u32,
    },
    /// The transport is up; the application handshake is running. Does not count as connected.
    Handshaking {
        /// Who opened the connection.
        direction: Direction,
        /// The remote address.
        addr: SocketAddr,
        /// When the handshake is abandoned.
        deadline: Time,
        /// Consecutive failed attempts before this one.
        failures: u32,
    },
    /// The handshake completed; the peer counts as connected.
    Connected {
        /// Who opened the connection.
        direction: Direction,
        /// The remote address.
        addr: SocketAddr,
        /// When the handshake completed.
        since: Time,
        /// Consecutive failed attempts before this connection; cleared when it ends after
        /// [`PeerConfig::reset_backoff_after`](super::PeerConfig::reset_backoff_after).
        failures: u32,
    },
}

impl PeerState {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Self::Disconnected { .. } => "disconnected",
            Self::Connecting { .. } => "connecting",
            Self::Handshaking { .. } => "handshaking",
            Self::Connected { .. } => "connected",
        }
    }

    /// The direction of the current connection or dial, if any.
    pub fn direction(&self) -> Option<Direction> {
        match self {
            Self::Disconnected { .. } => None,
            Self::Connecting { .. } => Some(Direction::Outbound),
            Self::Handshaking { direction, .. } | Self::Connected { direction, .. } => {
                Some(*direction)
            }
        }
    }

    /// Consecutive failed attempts recorded for the peer.
    pub fn failures(&self) -> u32 {
        match self {
            Self::Disconnected { failures, .. }
            | Self::Connecting { failures, .. }
            | Self::Handshaking { failures, .. }
            | Self::Connected { failures, .. } => *failures,
        }
    }
}

/// Number of peers per connection phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerCounts {
    /// Handshake completed, we dialed.
    pub connected_outbound: usize,
    /// Handshake completed, they dialed.
    pub connected_inbound: usize,
    /// Dialing or handshaking, we dialed.
    pub pending_outbound: usize,
    /// Handshaking, they dialed.
    pub pending_inbound: usize,
    /// Nodes in the address book, connected or not.
    pub known: usize,
}

impl PeerCounts {
    /// Outbound connections, pending or connected: what [`PeerConfig::target_outbound`](super::PeerConfig::target_outbound) limits.
    pub fn outbound(&self) -> usize {
        self.pending_outbound
            .saturating_add(self.connected_outbound)
    }

    /// Inbound connections, pending or connected: what [`PeerConfig::max_inbound`](super::PeerConfig::max_inbound) limits.
    pub fn inbound(&self) -> usize {
        self.pending_inbound.saturating_add(self.connected_inbound)
    }
}
