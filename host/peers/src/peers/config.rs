//! [`PeerConfig`]: the tunables of a [`PeerManager`](super::PeerManager) and their defaults.

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::backoff::Backoff;
use crate::error::ConfigError;
use crate::{MILLIS, NodeId, SECONDS, Time};

/// Tunables of a [`PeerManager`](super::PeerManager). [`PeerConfig::new`] gives the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// Our own node id; never dialed, never stored, never handed out.
    pub local_id: NodeId,
    /// Outbound connections to keep (pending ones count towards it). Default 8.
    pub target_outbound: usize,
    /// Inbound connections to accept at most (pending ones count towards it). Default 32.
    pub max_inbound: usize,
    /// Inbound connections and transport handshakes in progress from one IP. Loopback,
    /// bootstrap and [`trusted_ips`](Self::trusted_ips) addresses are exempt. Default 2.
    pub max_inbound_per_ip: usize,
    /// Inbound connections and transport handshakes in progress from one /24 (IPv4) or /64
    /// (IPv6) subnet, with the same exemptions. Default 6.
    pub max_inbound_per_subnet: usize,
    /// Transport handshakes in progress at once, from anywhere (exempt addresses included).
    /// Default 16.
    pub max_pending_incoming: usize,
    /// Operator-listed addresses exempt from the per-IP and per-subnet limits (bootstrap
    /// addresses and loopback are exempt anyway).
    pub trusted_ips: BTreeSet<IpAddr>,
    /// Redial delays. Default base 500 ms, cap 60 s, jitter 50 %.
    pub backoff: Backoff,
    /// A connection that stayed up this long resets the peer's failure count. Default 30 s.
    pub reset_backoff_after: Time,
    /// Consecutive failures after which a non-bootstrap peer is forgotten. Default 10.
    pub forget_after_failures: u32,
    /// How long a dial may take before it is abandoned. Default 10 s.
    pub connect_timeout: Time,
    /// How long the application handshake may take after the transport is up. Default 10 s.
    pub handshake_timeout: Time,
    /// How long a peer stays banned after a violation. Default 10 min.
    pub ban_duration: Time,
    /// Most peers bans are kept for; the ban closest to expiry makes room. Default 4096.
    pub max_bans: usize,
    /// Most addresses returned for, and merged from, one peer exchange (K). Default 16.
    pub exchange_max: usize,
    /// How often to ask a connected peer for addresses while below the outbound target.
    /// Default 60 s.
    pub exchange_interval: Time,
    /// Most nodes in the address book; exchanged and inbound entries are dropped beyond it,
    /// bootstrap entries are always kept. Default 1024.
    pub max_known: usize,
    /// Most addresses kept per node (bootstrap addresses are always kept). Default 4.
    pub max_addrs_per_node: usize,
    /// Most addresses one peer's exchange answers may occupy in the book at once. Default 64.
    pub max_per_source: usize,
}

impl PeerConfig {
    /// The defaults for a node with id `local_id`.
    pub fn new(local_id: NodeId) -> Self {
        Self {
            local_id,
            target_outbound: 8,
            max_inbound: 32,
            max_inbound_per_ip: 2,
            max_inbound_per_subnet: 6,
            max_pending_incoming: 16,
            trusted_ips: BTreeSet::new(),
            backoff: Backoff {
                base: 500 * MILLIS,
                cap: 60 * SECONDS,
                jitter_percent: 50,
            },
            reset_backoff_after: 30 * SECONDS,
            forget_after_failures: 10,
            connect_timeout: 10 * SECONDS,
            handshake_timeout: 10 * SECONDS,
            ban_duration: 600 * SECONDS,
            max_bans: 4096,
            exchange_max: 16,
            exchange_interval: 60 * SECONDS,
            max_known: 1024,
            max_addrs_per_node: 4,
            max_per_source: 64,
        }
    }

    /// Checks that the values make sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.backoff.validate()?;
        let counts = [
            ("forget_after_failures", self.forget_after_failures > 0),
            ("max_addrs_per_node", self.max_addrs_per_node > 0),
            ("max_bans", self.max_bans > 0),
            ("max_inbound_per_ip", self.max_inbound_per_ip > 0),
            ("max_inbound_per_subnet", self.max_inbound_per_subnet > 0),
            ("max_pending_incoming", self.max_pending_incoming > 0),
        ];
        match counts.iter().find(|(_, ok)| !ok) {
            Some((name, _)) => Err(ConfigError::Zero(name)),
            None => Ok(()),
        }
    }
}
