//! Why a block was not imported, and whose fault that is.

use crate::deposit::DepositRejection;
use crate::hashes::{BlockHash, ModuleHash, StateRoot};
use crate::runtime::{HostFailure, ModuleFault};
use crate::state::{Eth1Error, StateError};
use crate::store::StoreError;

/// Why a block was not imported. Nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The header does not extend the head.
    #[error("block {hash} does not extend the head: {reason}")]
    NotNext {
        /// The block's hash.
        hash: BlockHash,
        /// What does not match.
        reason: String,
    },
    /// The proposer is not the slot's authority, or the seal does not verify.
    #[error("block {hash} is not properly sealed: {reason}")]
    BadSeal {
        /// The block's hash.
        hash: BlockHash,
        /// What is wrong.
        reason: String,
    },
    /// The body does not match the header's body root, or has too many deposits.
    #[error("block {hash} has an invalid body: {reason}")]
    BadBody {
        /// The block's hash.
        hash: BlockHash,
        /// What is wrong.
        reason: String,
    },
    /// The block's eth1 vote does not fit the state (it moves the deposit count backwards).
    #[error("block {hash} has an invalid eth1 vote: {source}")]
    Eth1Vote {
        /// The block's hash.
        hash: BlockHash,
        /// Why.
        source: Eth1Error,
    },
    /// The eth1 vote of a block being built (it has no hash yet) does not fit the state it
    /// is built on.
    #[error("block being built has an invalid eth1 vote: {source}")]
    BuiltEth1Vote {
        /// Why.
        source: Eth1Error,
    },
    /// The block's upgrade votes break the schedule's rules (too late, a local kind, too many).
    #[error("block {hash} has an invalid upgrade vote: {source}")]
    UpgradeVote {
        /// The block's hash.
        hash: BlockHash,
        /// Why.
        source: crate::state::ScheduleError,
    },
    /// The schedule names a module this node does not have ready for the block's height. Not a
    /// verdict on the block: the node stops importing here, keeps fetching the module and
    /// resumes once it is ready.
    #[error(
        "the chain schedules {kind} module {module} at height {height}, and this node does not \
         have it ready; fetching it from peers (or upload it: modnode module upload)"
    )]
    ModuleMissing {
        /// The kind.
        kind: crate::runtime::Kind,
        /// The module's sha256.
        module: ModuleHash,
        /// The height that needs it.
        height: u64,
    },
    /// The block does not carry exactly the due deposits: it omits (or invents) some.
    #[error(
        "block {hash} carries {found} deposits, but {expected} are due from deposit index {from}"
    )]
    WrongDepositCount {
        /// The block's hash.
        hash: BlockHash,
        /// `min(max_deposits_per_block, deposit_count - eth1_deposit_index)`.
        expected: u64,
        /// Deposits in the body.
        found: u64,
        /// The state's `eth1_deposit_index`.
        from: u64,
    },
    /// The deposits module reported another deposit index than its deposits imply: the block
    /// is invalid under this module.
    #[error(
        "block {hash}: the deposits module reports deposit index {reported} after the block, expected {expected}"
    )]
    DepositIndexMismatch {
        /// The block's hash.
        hash: BlockHash,
        /// What the module said.
        reported: u64,
        /// Index before the block plus its deposits.
        expected: u64,
    },
    /// The deposits module rejected the block.
    #[error("block {hash} is invalid: deposits rejected: {error:?}")]
    Rejected {
        /// The block's hash.
        hash: BlockHash,
        /// The module's reason.
        error: DepositRejection,
    },
    /// The block's `modnode:deposits@3.0.0` step failed: the module rejected the block or
    /// broke the contract (the block is invalid), or the host could not apply its changes
    /// (ours: `State`, `NotAnExtension`).
    #[error("block {hash}: {source}")]
    DepositsV3 {
        /// The block's hash.
        hash: BlockHash,
        /// What failed.
        source: super::deposits_v3::V3StepError,
    },
    /// The migration of the deposits module the block's height activates failed: import stops
    /// at that height (the node stays on the parent). Not the block's fault — any block at the
    /// height fails alike — but the module's (or, for a host failure, ours): cancel the
    /// upgrade before its height, or schedule a fixed module.
    #[error(
        "block {hash} at height {height} activates deposits module {module}, and {source}; \
         import stops at this height until the schedule names a module whose migration \
         finishes"
    )]
    Migration {
        /// The block's hash.
        hash: BlockHash,
        /// The activation height.
        height: u64,
        /// The module whose migration failed.
        module: ModuleHash,
        /// What failed (boxed: it carries the module's error, and import errors travel far).
        source: Box<super::migration::MigrationError>,
    },
    /// The deposits module failed deterministically (trap, fuel, limits): the block is invalid.
    #[error("block {hash}: {0}", hash = .1)]
    Module(#[source] ModuleFault, BlockHash),
    /// The host failed while running the deposits module (poisoned lock, full instance pool,
    /// I/O): our problem, not the block's; it was not imported and is not invalid.
    #[error("block {hash} could not be checked: {0}", hash = .1)]
    Host(#[source] HostFailure, BlockHash),
    /// The state root after the block differs from the header's.
    #[error("block {hash} claims state root {claimed}, but applying it gives {computed}")]
    StateRootMismatch {
        /// The block's hash.
        hash: BlockHash,
        /// Root in the header.
        claimed: StateRoot,
        /// Root computed.
        computed: StateRoot,
    },
    /// The state rejected the module's changes.
    #[error("block {hash}: state update refused: {source}")]
    State {
        /// The block's hash.
        hash: BlockHash,
        /// Why.
        source: StateError,
    },
    /// Storage failed; the block was not imported.
    #[error("storing block {hash} failed: {source}")]
    Store {
        /// The block's hash.
        hash: BlockHash,
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
        /// The block.
        hash: BlockHash,
        /// Its height.
        height: u64,
        /// The root on disk (the block's state root).
        disk_root: StateRoot,
        /// The root in memory, or why it cannot be read.
        memory_root: String,
        /// What failed.
        reason: &'static str,
    },
}

/// Whether a failed import or execution is a verdict on the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// Caused by the block, deterministically: every honest node running it on the same state
    /// fails it the same way (a consensus rule it breaks, the module trapping or running out
    /// of fuel on it). The block is invalid, and so is every block built on it.
    Block,
    /// Ours: the scheduled module not ready here, the host failing, a poisoned lock, the
    /// store. Says nothing about the block: it stays unjudged and may be offered again.
    Ours,
}

impl ImportError {
    /// Whether disk and memory disagree: the node must stop.
    pub fn is_fatal(&self) -> bool {
        matches!(self, Self::Diverged { .. })
    }

    /// Whether the failure is the block's (it is invalid) or ours (it is not judged).
    pub fn class(&self) -> FailureClass {
        match self {
            Self::NotNext { .. }
            | Self::BadSeal { .. }
            | Self::BadBody { .. }
            | Self::Rejected { .. }
            | Self::StateRootMismatch { .. }
            // A vote, deposit count or deposit index the chain's rules refuse: the block is
            // invalid whoever checks it.
            | Self::Eth1Vote { .. }
            | Self::BuiltEth1Vote { .. }
            | Self::UpgradeVote { .. }
            | Self::WrongDepositCount { .. }
            | Self::DepositIndexMismatch { .. }
            // Out of fuel, limits and traps are deterministic outcomes of the block.
            | Self::Module(..) => FailureClass::Block,
            // The state refused the module's changes: a deterministic outcome of the block.
            Self::State { .. } => FailureClass::Block,
            Self::DepositsV3 { source, .. } => match source {
                super::deposits_v3::V3StepError::Call(crate::runtime::CallError::Host(_))
                | super::deposits_v3::V3StepError::State(_)
                | super::deposits_v3::V3StepError::NotAnExtension => FailureClass::Ours,
                _ => FailureClass::Block,
            },
            // The scheduled module is not here yet, the host failed, storage failed, or disk
            // and memory disagree: never the block's.
            // A failed migration fails every block at its height, whoever built it: not a
            // verdict on the block, so no peer is blamed and the node waits at the parent.
            Self::ModuleMissing { .. }
            | Self::Migration { .. }
            | Self::Host(..)
            | Self::Store { .. }
            | Self::Diverged { .. } => FailureClass::Ours,
        }
    }

    /// The scheduled module this node lacked, if that is why the block failed.
    pub fn missing_module(&self) -> Option<(crate::runtime::Kind, crate::hashes::ModuleHash)> {
        match self {
            Self::ModuleMissing { kind, module, .. } => Some((*kind, *module)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(seed: u8) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = seed.wrapping_mul(31).wrapping_add(u8::try_from(i).unwrap());
        }
        out
    }

    /// The typed hashes display as the hex `String`s the errors carried before.
    #[test]
    fn messages_read_as_with_hex_strings() {
        let (block, claimed, computed) = (bytes(1), bytes(2), bytes(3));
        let seal = ImportError::BadSeal {
            hash: BlockHash::new(block),
            reason: "forged".into(),
        };
        assert_eq!(
            seal.to_string(),
            format!(
                "block {} is not properly sealed: forged",
                hex::encode(block)
            )
        );
        let root = ImportError::StateRootMismatch {
            hash: BlockHash::new(block),
            claimed: StateRoot::new(claimed),
            computed: StateRoot::new(computed),
        };
        assert_eq!(
            root.to_string(),
            format!(
                "block {} claims state root {}, but applying it gives {}",
                hex::encode(block),
                hex::encode(claimed),
                hex::encode(computed)
            )
        );
        let missing = ImportError::ModuleMissing {
            kind: crate::runtime::Kind::Deposits,
            module: ModuleHash::new(claimed),
            height: 7,
        };
        assert!(
            missing
                .to_string()
                .contains(&format!("module {} at height 7", hex::encode(claimed))),
            "{missing}"
        );
        assert_eq!(
            missing.missing_module(),
            Some((crate::runtime::Kind::Deposits, ModuleHash::new(claimed)))
        );
    }
}
