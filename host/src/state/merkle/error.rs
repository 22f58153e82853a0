//! Why a Merkle tree operation or a range-proof check failed.

use std::fmt;

use super::RANGE_PROOF_VERSION;

/// Why a Merkle tree operation or a proof check failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MerkleError {
    /// A leaf position at or past the number of leaves.
    IndexOutOfRange {
        /// The position asked for.
        index: u64,
        /// Number of leaves in the tree.
        len: u64,
    },
    /// A leaf range that is empty, reversed, overflows, or ends past the number of leaves.
    InvalidRange {
        /// First position of the range.
        start: u64,
        /// One past the last position of the range.
        end: u64,
        /// Number of leaves in the tree.
        len: u64,
    },
    /// The tree already holds as many leaves as a `u64` position can address.
    TreeFull,
    /// A proof holds a different number of hashes than its range and tree length require.
    ProofHashCount {
        /// Hashes required by the range and the tree length.
        expected: usize,
        /// Hashes the proof holds.
        actual: usize,
    },
    /// The root recomputed from the leaves and the proof is not the expected root.
    RootMismatch,
    /// Encoded proof bytes end inside a field.
    ProofTruncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the input.
        available: usize,
    },
    /// Encoded proof bytes start with a version this code does not know.
    UnsupportedProofVersion {
        /// The version byte found.
        version: u8,
    },
    /// An encoded proof claims more hashes than any range of its tree can need.
    ProofTooManyHashes {
        /// Hashes claimed.
        count: u64,
        /// Most hashes a proof over a tree of this length can hold.
        max: u64,
    },
    /// A truncation to more leaves than the tree holds.
    TruncateBeyondLen {
        /// The length asked for.
        new_len: u64,
        /// Number of leaves in the tree.
        len: u64,
    },
    /// An encoded proof is for a tree with no leaves, which has no non-empty range.
    ProofEmptyTree,
    /// Encoded proof bytes continue past the last hash.
    ProofTrailingBytes {
        /// Number of unread bytes.
        extra: usize,
    },
    /// An internal invariant of the tree was broken; this is a bug in this module.
    Internal(&'static str),
}

impl fmt::Display for MerkleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IndexOutOfRange { index, len } => {
                write!(
                    f,
                    "leaf index {index} is out of range for a tree of {len} leaves"
                )
            }
            Self::InvalidRange { start, end, len } => write!(
                f,
                "leaf range [{start}, {end}) is not a non-empty range within {len} leaves"
            ),
            Self::TreeFull => f.write_str("the Merkle tree cannot hold more leaves"),
            Self::ProofHashCount { expected, actual } => write!(
                f,
                "range proof holds {actual} hashes but the range and tree length need {expected}"
            ),
            Self::RootMismatch => f.write_str("range proof does not lead to the expected root"),
            Self::ProofTruncated {
                field,
                needed,
                available,
            } => write!(
                f,
                "range proof bytes truncated in field `{field}`: need {needed} bytes, {available} left"
            ),
            Self::UnsupportedProofVersion { version } => write!(
                f,
                "range proof version {version} is not supported (expected {RANGE_PROOF_VERSION})"
            ),
            Self::ProofTooManyHashes { count, max } => write!(
                f,
                "range proof claims {count} hashes but a proof over its tree holds at most {max}"
            ),
            Self::TruncateBeyondLen { new_len, len } => write!(
                f,
                "cannot truncate a tree of {len} leaves to {new_len} leaves"
            ),
            Self::ProofEmptyTree => f.write_str("range proof is for an empty tree"),
            Self::ProofTrailingBytes { extra } => {
                write!(
                    f,
                    "range proof bytes have {extra} unexpected trailing bytes"
                )
            }
            Self::Internal(what) => write!(f, "Merkle tree invariant broken (bug): {what}"),
        }
    }
}

impl std::error::Error for MerkleError {}
