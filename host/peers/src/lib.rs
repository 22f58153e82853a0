//! Sans-IO peer management and range sync for modnode.
//!
//! Two state machines that do no I/O and read no clock, in the style of `quinn-proto`: the
//! driver (later an async task over QUIC) feeds them with `handle_*` calls, drains them with
//! `poll_*` calls and passes the current [`Time`] in. Tests drive them with virtual time.
//!
//! - [`peers`]: [`PeerManager`] — address book, connection states, outbound target and inbound
//!   limit, reconnect backoff ([`backoff`]), peer exchange, bans.
//! - [`sync`]: [`RangeSync`] — requests missing blocks by height range from peers with higher
//!   heads, pipelined, with timeouts and retries, and hands blocks to the importer in order.
//! - [`peer_addr`]: [`PeerAddr`], the `NodeId@addr` form used for bootstrap configuration and
//!   peer exchange.
//! - [`violation`]: [`Violation`], why a peer gets banned; [`sync`] reports them, [`peers`]
//!   acts on them.
//! - [`error`]: the error enums.
//!
//! The driver's loop, in outline:
//!
//! ```
//! use modnode_peers::{Action, PeerAddr, PeerConfig, PeerManager, RangeSync, SyncConfig};
//!
//! let bootstrap: PeerAddr = format!("{}@127.0.0.1:9000", "02".repeat(32)).parse()?;
//! let mut peers = PeerManager::new(PeerConfig::new([1; 32]), [bootstrap], 7, 0)?;
//! let mut sync = RangeSync::new(SyncConfig::default(), 0, [0; 32])?;
//! let now = 0; // from the driver's clock
//! while let Some(action) = peers.poll_action(now) {
//!     match action {
//!         Action::Dial { node, addr: _ } => {
//!             // Connect over QUIC; on success, and after the chain-id/genesis handshake:
//!             peers.handle_outbound_connected(node, now)?;
//!             peers.handle_handshake_completed(node, now)?;
//!             sync.handle_peer_status(node, 10, [9; 32], now);
//!         }
//!         Action::Disconnect { node, reason: _ } => sync.handle_peer_disconnected(node),
//!         Action::RequestPeers { node: _ } => { /* send a peer-list request */ }
//!     }
//! }
//! let mut sent = 0;
//! while let Some(_request) = sync.poll_request(now) {
//!     sent += 1; // send it; answer with handle_blocks / handle_request_failed
//! }
//! assert_eq!(sent, 1); // blocks 1..=10 in one request
//! while let Some((peer, violation)) = sync.poll_violation() {
//!     peers.handle_violation(peer, violation, now);
//! }
//! // Then wait for I/O or until the earlier of peers.poll_timeout() and sync.poll_timeout().
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]
// Peers' claims and range answers are hostile input on the block path: no panicking shortcuts
// outside tests, as in the `modnode` crate.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]

pub mod backoff;
pub mod error;
pub mod peer_addr;
pub mod peers;
pub mod sync;
pub mod violation;

/// Time in microseconds on a monotonic scale chosen by the driver (virtual in tests).
pub type Time = u64;

/// One millisecond in [`Time`] units.
pub const MILLIS: Time = 1_000;

/// One second in [`Time`] units.
pub const SECONDS: Time = 1_000_000;

/// A node's identity: its ed25519 public key.
pub type NodeId = [u8; 32];

/// A block hash.
pub type BlockHash = [u8; 32];

pub use backoff::Backoff;
pub use error::{ConfigError, PeerAddrParseError, PeerError, SyncError};
pub use peer_addr::{PeerAddr, ShortId};
pub use peers::origin::Subnet;
pub use peers::{
    Action, AddrSource, Direction, DisconnectReason, KnownAddr, MergeReport, PeerConfig,
    PeerCounts, PeerManager, PeerState,
};
pub use sync::{RangeSync, Request, RequestId, SyncConfig, SyncStatus, SyncTableSizes};
pub use violation::Violation;
