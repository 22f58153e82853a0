//! Why the pubkey index refused an operation or could not be built.

use std::fmt;

/// Why an index operation failed. On error the index is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexError {
    /// The pubkey is already in the index.
    Duplicate {
        /// Validator index that already holds the pubkey.
        existing: u32,
    },
    /// The index to insert is not the next one; the registry is append-only, so indices are
    /// inserted in order `0, 1, 2, ...`.
    NonDenseIndex {
        /// The next index, `len()`.
        expected: u32,
        /// The index passed in.
        got: u32,
    },
    /// The index cannot hold more validators: `u32::MAX` has no slot encoding, or the table size
    /// needed for this many validators does not fit `usize`.
    CapacityOverflow {
        /// Number of validators asked for.
        validators: u64,
    },
    /// The allocator refused the slot table.
    AllocationFailed {
        /// Number of `u32` slots requested.
        slots: usize,
    },
    /// `key_at` returned no pubkey for an index the index must rehash or build from.
    MissingKey {
        /// The validator index without a pubkey.
        index: u32,
    },
    /// `key_at` returned a pubkey under which the index does not hold that validator.
    KeyMismatch {
        /// The validator index whose pubkey does not match.
        index: u32,
    },
    /// A truncation to more validators than the index holds.
    TruncateBeyondLen {
        /// The length asked for.
        new_len: u32,
        /// Number of validators in the index.
        len: u32,
    },
    /// An internal invariant of the table was broken; this is a bug in this module.
    Internal(&'static str),
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Duplicate { existing } => {
                write!(f, "pubkey is already registered as validator {existing}")
            }
            Self::NonDenseIndex { expected, got } => write!(
                f,
                "validator index {got} inserted out of order: the next index is {expected}"
            ),
            Self::CapacityOverflow { validators } => {
                write!(f, "pubkey index cannot hold {validators} validators")
            }
            Self::AllocationFailed { slots } => {
                write!(
                    f,
                    "could not allocate a pubkey index table of {slots} slots"
                )
            }
            Self::MissingKey { index } => write!(
                f,
                "the registry has no pubkey for validator {index}, which the pubkey index holds"
            ),
            Self::KeyMismatch { index } => write!(
                f,
                "the registry's pubkey for validator {index} is not the one the pubkey index holds"
            ),
            Self::TruncateBeyondLen { new_len, len } => write!(
                f,
                "cannot truncate a pubkey index of {len} validators to {new_len} validators"
            ),
            Self::Internal(what) => write!(f, "pubkey index invariant broken (bug): {what}"),
        }
    }
}

impl std::error::Error for IndexError {}
