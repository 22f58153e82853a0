//! Error types of the crate.

use crate::PeerId;

/// Why a byte string is not a valid wire frame (or a frame cannot be encoded).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The input ended in the middle of a field.
    #[error("frame truncated")]
    Truncated,
    /// The frame was written by an unknown protocol version.
    #[error("unsupported wire version {0}")]
    UnsupportedVersion(u8),
    /// Unknown frame tag.
    #[error("unknown frame tag {0}")]
    UnknownTag(u8),
    /// Unknown message-kind code.
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    /// A varint is longer than five bytes, overflows `u32`, or is not minimally encoded.
    #[error("malformed varint")]
    BadVarint,
    /// A length or count is above the protocol limit.
    #[error("{what} {value} exceeds limit {limit}")]
    TooLarge {
        /// Which field.
        what: &'static str,
        /// The value found.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// An announce, request or batch frame with no items.
    #[error("empty {0} frame")]
    Empty(&'static str),
    /// A batch frame inside a batch frame.
    #[error("nested batch frame")]
    NestedBatch,
    /// Bytes left over after the frame.
    #[error("{0} trailing bytes after frame")]
    TrailingBytes(usize),
}

/// Errors returned by [`crate::engine::GossipEngine`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GossipError {
    /// The message was already seen (published, received or being fetched).
    #[error("message already seen")]
    Duplicate,
    /// The peer handle is not connected.
    #[error("unknown peer {0}")]
    UnknownPeer(PeerId),
    /// The peer handle is already connected.
    #[error("peer {0} already connected")]
    PeerExists(PeerId),
    /// The payload is larger than the wire format allows.
    #[error("payload of {0} bytes is too large")]
    PayloadTooLarge(usize),
    /// A received datagram did not decode.
    #[error("malformed frame: {0}")]
    Wire(#[from] WireError),
}
