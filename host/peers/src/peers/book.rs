//! Address book entries: the [`KnownAddr`] entries of a node, where each came from
//! ([`AddrSource`]), and the manager's private per-node record.

use std::net::{IpAddr, SocketAddr};

use super::state::PeerState;
use crate::{NodeId, Time};

/// Where an address in the book came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddrSource {
    /// Operator configuration; never forgotten, retried forever.
    Bootstrap,
    /// A peer's exchange answer.
    Exchange {
        /// The peer that told us.
        from: NodeId,
    },
    /// The remote address of an inbound connection (with QUIC usually the peer's listen
    /// address, but unverified until we dial it).
    Inbound,
}

impl AddrSource {
    /// Dial preference among unconfirmed addresses: lower first.
    pub(super) fn rank(&self) -> u8 {
        match self {
            Self::Bootstrap => 0,
            Self::Exchange { .. } => 1,
            Self::Inbound => 2,
        }
    }
}

/// One address of a node in the book.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownAddr {
    /// The address.
    pub addr: SocketAddr,
    /// Where it came from.
    pub source: AddrSource,
    /// Known good: our last dial to it led to a completed handshake and no dial to it has
    /// failed since. Only confirmed addresses are handed out in peer exchange.
    pub confirmed: bool,
}

impl KnownAddr {
    /// Whether we may dial it: anything but an unconfirmed address that only an inbound
    /// connection told us about (any key can connect to us, so that is no reason to dial it —
    /// sybils would get us to fill our outbound slots with them).
    pub fn may_dial(&self) -> bool {
        self.confirmed || self.source != AddrSource::Inbound
    }
}

#[derive(Debug, Clone)]
pub(super) struct Peer {
    pub(super) addrs: Vec<KnownAddr>,
    pub(super) state: PeerState,
    /// We sent `RequestPeers` on the current connection and await the answer.
    pub(super) exchange_pending: bool,
}

impl Peer {
    pub(super) fn new(now: Time) -> Self {
        Self {
            addrs: Vec::new(),
            state: PeerState::Disconnected {
                next_attempt_at: now,
                failures: 0,
            },
            exchange_pending: false,
        }
    }

    pub(super) fn is_bootstrap(&self) -> bool {
        self.addrs.iter().any(|a| a.source == AddrSource::Bootstrap)
    }

    pub(super) fn has_addr(&self, addr: SocketAddr) -> bool {
        self.addrs.iter().any(|a| a.addr == addr)
    }

    /// True if some address of the node may be dialed.
    pub(super) fn has_dial_candidate(&self) -> bool {
        self.addrs.iter().any(KnownAddr::may_dial)
    }

    /// The address for the next dial: confirmed ones first, then by source; successive
    /// failures rotate through the list so one dead address does not block the others.
    /// Addresses known only from inbound connections are never dialed.
    pub(super) fn dial_addr(&self, failures: u32) -> Option<SocketAddr> {
        let mut ordered: Vec<&KnownAddr> = self.addrs.iter().filter(|a| a.may_dial()).collect();
        ordered.sort_by_key(|a| (!a.confirmed, a.source.rank()));
        let index = usize::try_from(failures)
            .unwrap_or(usize::MAX)
            .checked_rem(ordered.len())?;
        ordered.get(index).map(|a| a.addr)
    }
}

pub(super) fn exchanged(addr: SocketAddr, from: NodeId) -> KnownAddr {
    KnownAddr {
        addr,
        source: AddrSource::Exchange { from },
        confirmed: false,
    }
}

/// Whether an address can be dialed at all (loopback and private ranges are fine: devnets).
pub(super) fn is_dialable(addr: SocketAddr) -> bool {
    let ip_ok = match addr.ip() {
        IpAddr::V4(ip) => !(ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast()),
        IpAddr::V6(ip) => !(ip.is_unspecified() || ip.is_multicast()),
    };
    ip_ok && addr.port() != 0
}
