//! Peer-to-peer transport: QUIC (quinn) with mutually authenticated TLS 1.3.
//!
//! - [`identity`]: the node's persistent ed25519 key; its [`identity::NodeId`] is
//!   `crypto::identity`'s, re-exported.
//! - [`tls`]: rustls configurations that pin peers by `NodeId`.
//! - [`codec`]: length-prefixed message framing.
//! - [`gossip`]: the QUIC driver of the sans-IO gossip engine.
//! - [`rpc`]: request/response messages (status, block ranges, peer lists).
//! - [`handshake`]: the hello exchange that checks chain id and genesis hash.
//! - [`endpoint`]: quinn endpoints with explicit resource limits.

pub mod codec;
pub mod endpoint;
pub mod gossip;
pub mod handshake;
pub mod identity;
pub mod rpc;
pub mod tls;
