//! Error types of the crate.

use crate::PeerId;
use crate::wire::MessageId;

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
    /// Unknown link operation code (neither PRUNE nor GRAFT).
    #[error("unknown link operation {0}")]
    UnknownLinkOp(u8),
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
    /// A received datagram did not decode (the sending peer's fault).
    #[error("malformed frame: {0}")]
    Wire(#[from] WireError),
    /// The sending peer broke the protocol with a well-formed frame; penalise it.
    #[error("peer broke the protocol: {0}")]
    Peer(#[from] PeerFault),
}

/// What a peer did wrong in a well-formed frame. Always the peer's fault, never transient.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PeerFault {
    /// An announce claimed a size no message may have.
    #[error("announced message {id} with size {size} bytes, above the limit of {limit}")]
    AnnouncedSizeTooLarge {
        /// The announced id.
        id: MessageId,
        /// The claimed size.
        size: u32,
        /// The largest size a message may have.
        limit: u32,
    },
    /// The peer announced a new id while already being an announcer of `limit` messages we
    /// are still fetching: it announces faster than it answers.
    #[error(
        "announced a new message while {limit} of its announced messages are still being fetched"
    )]
    TooManyFetches {
        /// [`crate::EngineConfig::max_fetches_per_peer`].
        limit: usize,
    },
    /// The peer pushed, under the id of a message we hold, a payload that differs from it.
    /// With ids that cover only part of a payload (a block's header), honest peers always
    /// send the same bytes for one id; a different payload is a forged variant.
    #[error("pushed a payload for message {id} that differs from the one we hold under that id")]
    ConflictingPayload {
        /// The id both payloads claim.
        id: MessageId,
    },
}
