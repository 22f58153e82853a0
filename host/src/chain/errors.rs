//! Why opening the chain, importing a block or reverting one failed.

use crate::runtime::CallError;
use crate::runtime::deposits::ProcessError;
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
        /// Genesis hash in the store.
        stored: String,
        /// Genesis hash of the configuration.
        configured: String,
    },
    /// The store is inconsistent; says what does not match.
    #[error(
        "corrupted store: {0}; restore the data directory from a backup or delete it and resync"
    )]
    Corrupt(String),
}

/// Why a block was not imported. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The header does not extend the head.
    #[error("block {hash} does not extend the head: {reason}")]
    NotNext {
        /// The block's hash (hex).
        hash: String,
        /// What does not match.
        reason: String,
    },
    /// The proposer is not the slot's authority, or the seal does not verify.
    #[error("block {hash} is not properly sealed: {reason}")]
    BadSeal {
        /// The block's hash (hex).
        hash: String,
        /// What is wrong.
        reason: String,
    },
    /// The body does not match the header's body root, or has too many deposits.
    #[error("block {hash} has an invalid body: {reason}")]
    BadBody {
        /// The block's hash (hex).
        hash: String,
        /// What is wrong.
        reason: String,
    },
    /// The deposits module rejected the block.
    #[error("block {hash} is invalid: deposits rejected: {error:?}")]
    Rejected {
        /// The block's hash (hex).
        hash: String,
        /// The module's reason.
        error: ProcessError,
    },
    /// The deposits module failed (trap, fuel, limits).
    #[error("block {hash}: {0}", hash = .1)]
    Module(#[source] CallError, String),
    /// The state root after the block differs from the header's.
    #[error("block {hash} claims state root {claimed}, but applying it gives {computed}")]
    StateRootMismatch {
        /// The block's hash (hex).
        hash: String,
        /// Root in the header.
        claimed: String,
        /// Root computed.
        computed: String,
    },
    /// The state rejected the module's changes.
    #[error("block {hash}: state update refused: {source}")]
    State {
        /// The block's hash (hex).
        hash: String,
        /// Why.
        source: StateError,
    },
    /// Storage failed; the block was not imported.
    #[error("storing block {hash} failed: {source}")]
    Store {
        /// The block's hash (hex).
        hash: String,
        /// Why.
        source: StoreError,
    },
    /// The block is committed on disk but the in-memory state did not follow: disk and memory
    /// disagree, and the node must stop (a restart reloads the state from disk).
    #[error(
        "block {hash} at height {height} is on disk with state root {disk_root}, but the state \
         in memory did not follow ({reason}; memory root {memory_root}); stop the node and \
         restart it to reload the state from disk"
    )]
    Diverged {
        /// The block (hex).
        hash: String,
        /// Its height.
        height: u64,
        /// The root on disk (the block's state root).
        disk_root: String,
        /// The root in memory, or why it cannot be read.
        memory_root: String,
        /// What failed.
        reason: String,
    },
}

impl ImportError {
    /// Whether disk and memory disagree: the node must stop.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Self::Diverged { .. })
    }
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
        /// The head block (hex).
        hash: String,
        /// What is missing or malformed.
        reason: String,
    },
    /// The registry lock is poisoned (a thread panicked while changing the state): nothing was
    /// reverted; the node must stop.
    #[error(
        "cannot revert block {hash} at height {height}: the in-memory state is unusable (lock \
         poisoned); nothing was reverted; restart the node to reload the state from disk"
    )]
    Poisoned {
        /// The head block (hex).
        hash: String,
        /// Its height.
        height: u64,
    },
    /// The in-memory state refused the rollback after the store committed it; restart the node
    /// to reload the state from the store.
    #[error(
        "reverted block {hash} on disk, but the in-memory state did not follow ({reason}); restart the node"
    )]
    Diverged {
        /// The reverted block (hex).
        hash: String,
        /// Why.
        reason: String,
    },
}

impl RevertError {
    /// Whether disk and memory disagree or memory is unusable: the node must stop.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Self::Poisoned { .. } | Self::Diverged { .. })
    }
}
