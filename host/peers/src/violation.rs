//! [`Violation`]: a peer broke the protocol. [`RangeSync`](crate::RangeSync) reports the ones it
//! detects through `poll_violation`; the driver adds its own (failed chain check, undecodable
//! message) and passes all of them to [`PeerManager::handle_violation`](crate::PeerManager::handle_violation),
//! which bans the peer.

use crate::sync::RequestId;

/// Why a peer is banned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// The peer served a block that the importer rejected.
    #[error("served block {height} that failed to import")]
    BadBlock {
        /// Height of the rejected block.
        height: u64,
    },
    /// The peer answered a block request with blocks it was not asked for.
    #[error("answered request {request} with an invalid block list: {reason}")]
    InvalidBlocks {
        /// The request that was answered.
        request: RequestId,
        /// What was wrong with the answer.
        reason: &'static str,
    },
    /// The peer answered a range it claimed to hold with no blocks: its claimed head is a lie
    /// (an honest head never shrinks).
    #[error("answered request {request} with no blocks although it claimed height {start}")]
    UnservedClaim {
        /// The request that was answered.
        request: RequestId,
        /// First height of the request.
        start: u64,
    },
    /// The application handshake failed: another chain id or genesis hash.
    #[error("is on another chain (chain id or genesis hash mismatch)")]
    WrongChain,
    /// The peer sent a message that could not be decoded or exceeded a size limit.
    #[error("sent a malformed message: {0}")]
    Malformed(String),
}
