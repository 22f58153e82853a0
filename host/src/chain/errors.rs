//! Why opening the chain, building a block or reverting one failed (why a block was not
//! imported is [`crate::consensus::ImportError`]).

use crate::consensus::ImportError;
use crate::hashes::BlockHash;
use crate::state::StateError;
use crate::store::StoreError;

/// Why the chain could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The genesis state is invalid.
    #[error("genesis state: {0}")]
    Genesis(#[from] StateError),
    /// The data directory belongs to another chain.
    #[error(
        "the data directory holds chain with genesis {stored}, but the configured genesis is {configured}; \
         use another --data-dir or the matching genesis file"
    )]
    GenesisMismatch {
        /// Genesis hash in the store (hex of the bytes found, whatever their length).
        stored: String,
        /// Genesis hash of the configuration.
        configured: BlockHash,
    },
    /// The store is inconsistent; says what does not match.
    #[error(
        "corrupted store: {0}; restore the data directory from a backup or delete it and resync"
    )]
    Corrupt(String),
}

/// Why the producer could not build a block.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The deposit source could not prove the due deposits.
    #[error("cannot get the due deposits: {0}")]
    Source(#[from] super::eth1::DepositProofsError),
    /// The block would be invalid.
    #[error(transparent)]
    Invalid(#[from] ImportError),
}

/// Why the head block could not be reverted. Nothing was changed unless the error says so.
#[derive(Debug, thiserror::Error)]
pub enum RevertError {
    /// Genesis cannot be reverted.
    #[error("the head is genesis; there is nothing to revert")]
    Genesis,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A record needed to revert is missing or malformed.
    #[error("cannot revert block {hash}: {reason}")]
    Corrupt {
        /// The head block.
        hash: BlockHash,
        /// What is missing or malformed.
        reason: String,
    },
    /// The in-memory state refused the rollback after the store committed it; restart the node
    /// to reload the state from the store.
    #[error(
        "reverted block {hash} on disk, but the in-memory state did not follow ({reason}); restart the node"
    )]
    Diverged {
        /// The reverted block.
        hash: BlockHash,
        /// Why.
        reason: String,
    },
}

impl RevertError {
    /// Whether disk and memory disagree: the node must stop.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Self::Diverged { .. })
    }
}
