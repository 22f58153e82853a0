//! Fork choice: the longest valid chain wins, ties go to the lower tip hash, and nothing at or
//! below the finalized height (`finality`: `finality_depth` below the head and sealed over by a
//! majority of the authorities) is ever reorganised.
//!
//! A block on a side branch is executed on its parent's state (from the state cache, or
//! regenerated from the nearest cached ancestor) before it is stored, relayed or counted: an
//! invalid one is refused, never stored, and remembered so its descendants are refused too
//! (the whole branch is invalid). Only a failure the block causes makes it invalid
//! ([`FailureClass::Block`]); one of ours — the scheduled module not ready here, the host, a
//! lock, the store — leaves it unjudged ([`ForkChoiceError::NotChecked`]): not stored, not
//! remembered, so it (and its children) can be offered again once the cause is gone.
//!
//! When a valid side branch becomes preferable, the chain reverts to the common ancestor
//! (switching to cached states where it has them) and imports the branch block by block; if
//! any of them fails, the chain returns to the old branch and the error is reported, so a bad
//! branch never leaves the node on a worse head.
//!
//! An authority may sign one block per slot: a second one is evidence of equivocation, after
//! which every block of that slot and every block built on one is refused, deterministically
//! on every node that holds the evidence (`equivocation`).

use super::block::{Block, BlockHash, BlockHeader};
use super::{Chain, FailureClass, Head, ImportError, Imported, RevertError, SealLock};
use crate::consensus::shell::ShellVerified;
use crate::state_cache::StateCacheError;
use crate::store::{StoreError, WriteBatch, keys};

/// What [`Chain::add_block`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Added {
    /// The block was already known.
    Known,
    /// The block extended the head.
    Extended(Imported),
    /// The block is on a side branch that does not (yet) beat the head; it is stored.
    Stored,
    /// The block's branch beat the head: `reverted` blocks were undone and the branch imported.
    Reorganised {
        /// The new head.
        head: Head,
        /// Blocks reverted from the old branch.
        reverted: u64,
    },
}

/// Why a block was not added.
#[derive(Debug, thiserror::Error)]
pub enum ForkChoiceError {
    /// The block's parent is unknown: the caller must fetch it first (range sync).
    #[error("block {hash} at height {height}: parent {parent} is unknown; sync it first")]
    UnknownParent {
        /// The block.
        hash: BlockHash,
        /// Its height.
        height: u64,
        /// The missing parent.
        parent: BlockHash,
    },
    /// The block's height does not follow its parent's.
    #[error("block {hash} has height {height} but its parent is at height {parent_height}")]
    BadHeight {
        /// The block.
        hash: BlockHash,
        /// Its height.
        height: u64,
        /// The parent's height.
        parent_height: u64,
    },
    /// The branch forks below the finalized height.
    #[error("block {hash} forks from height {ancestor}, below the finalized height {finalized}")]
    BeyondFinality {
        /// The block.
        hash: BlockHash,
        /// Height of the common ancestor.
        ancestor: u64,
        /// The finalized height.
        finalized: u64,
    },
    /// A block of the branch is invalid (the block caused the failure:
    /// [`FailureClass::Block`]); the chain is back on its previous head.
    #[error(transparent)]
    Invalid(ImportError),
    /// A block of the branch could not be checked for a reason of ours
    /// ([`FailureClass::Ours`]: its scheduled module not ready here, the host, a lock, the
    /// store): not a verdict on the block, which is neither stored nor remembered as invalid
    /// and may be offered again; the chain is back on its previous head.
    #[error(transparent)]
    NotChecked(ImportError),
    /// Reverting failed.
    #[error(transparent)]
    Revert(#[from] RevertError),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The block descends from a block found invalid: the whole branch is invalid.
    #[error("block {hash} descends from invalid block {parent}")]
    InvalidAncestor {
        /// The block.
        hash: BlockHash,
        /// The invalid parent.
        parent: BlockHash,
    },
    /// The block's authority signed another block for the same slot: the slot is void, the
    /// block is neither stored nor executed. The authority is at fault, not necessarily the
    /// peer that relayed it (it may have seen this block first).
    #[error(
        "block {hash}: authority {proposer} signed another block ({first}) for slot {slot}; \
         equivocation, the slot is void"
    )]
    Equivocation {
        /// The block.
        hash: BlockHash,
        /// The slot.
        slot: u64,
        /// The equivocating authority's index.
        proposer: u32,
        /// The block of that slot this node saw first.
        first: BlockHash,
        /// Whether this block proved the equivocation just now (relay it once, so peers
        /// learn the evidence) rather than being one more block of a slot already void.
        new_evidence: bool,
        /// Blocks reverted from the head because they were (or built on) the void slot's.
        reverted: u64,
    },
    /// The block descends from a block of a void slot (its authority equivocated): refused,
    /// but its proposer may have built on that block before the evidence reached it, so
    /// nobody is blamed.
    #[error(
        "block {hash} descends from block {ancestor} of a void slot (its authority equivocated)"
    )]
    VoidAncestor {
        /// The block.
        hash: BlockHash,
        /// The void ancestor.
        ancestor: BlockHash,
    },
    /// The side branch's parent state could not be had (too old to regenerate, the cache
    /// budget full, a store failure): the block is neither stored nor relayed for now.
    #[error("block {hash}: cannot execute it on its parent's state: {source}")]
    ParentState {
        /// The block.
        hash: BlockHash,
        /// Why the state is unavailable.
        #[source]
        source: Box<crate::state_cache::StateCacheError>,
    },
}

impl From<ImportError> for ForkChoiceError {
    /// [`ForkChoiceError::Invalid`] when the block caused the failure, else
    /// [`ForkChoiceError::NotChecked`].
    fn from(e: ImportError) -> Self {
        match e.class() {
            FailureClass::Block => Self::Invalid(e),
            FailureClass::Ours => Self::NotChecked(e),
        }
    }
}

impl ForkChoiceError {
    /// The scheduled module (kind, hash) this node lacked, if that is why the block was not
    /// added: on import, on executing a side branch, or on regenerating its parent's state.
    pub fn missing_module(&self) -> Option<(crate::runtime::Kind, crate::hashes::ModuleHash)> {
        match self {
            Self::Invalid(e) | Self::NotChecked(e) => e.missing_module(),
            Self::ParentState { source, .. } => source.missing_module(),
            _ => None,
        }
    }
}

/// Most blocks remembered as invalid; the memory is cleared when it fills.
const MAX_INVALID: usize = 4096;

impl Chain {
    /// Remembers `hash` as invalid (bounded: the memory is cleared when full).
    pub(super) fn remember_invalid(&mut self, hash: BlockHash) {
        if self.invalid.len() >= MAX_INVALID {
            self.invalid.clear();
        }
        self.invalid.insert(hash);
    }

    /// Height at or below which blocks are final: `finality_depth` below the head and sealed
    /// over by a majority of the authorities (`finality`). It never goes down.
    pub fn finalized_height(&self) -> u64 {
        self.finality.finalized()
    }

    /// The vote a block of `slot` built on the head casts: its epoch and the epoch of the
    /// source it votes from (`finality`). `None` on a chain that counts no votes (no
    /// authorities, or one).
    pub fn vote_at(&self, slot: u64) -> Option<(u64, u64)> {
        self.finality
            .counts_votes()
            .then(|| (self.finality.epoch_of(slot), self.finality.source_for(slot)))
    }

    /// The vote authority `proposer` cast with its last canonical block above the finalized
    /// root (epoch, source epoch): what its producer's [`SealLock`] starts from after a restart.
    pub fn last_vote_of(&self, proposer: u32) -> Option<(u64, u64)> {
        self.finality.last_vote_of(proposer)
    }

    /// Whether the authority holding `lock` may seal a block of `slot` on the head: never a
    /// vote that surrounds, or is surrounded by, one of its own (`finality`). The producer
    /// asks before it builds and records the vote in `lock` once the block is imported.
    pub fn may_seal(&self, slot: u64, lock: &SealLock) -> bool {
        self.vote_at(slot)
            .is_none_or(|(epoch, source)| lock.allows(epoch, source))
    }

    fn stored_block(&self, hash: &BlockHash) -> Result<Option<Block>, StoreError> {
        let Some(bytes) = self.store.get(&keys::block(hash))? else {
            return Ok(None);
        };
        Block::decode(&bytes, self.genesis.max_deposits_per_block)
            .map(Some)
            .map_err(|e| StoreError::Corrupt(format!("block {}: {e}", hash)))
    }

    fn is_canonical(&self, header: &BlockHeader) -> Result<bool, StoreError> {
        let Some(hash) = self.store.get(&keys::height(header.height))? else {
            return Ok(false);
        };
        Ok(hash.as_slice() == header.hash().as_bytes())
    }

    /// Adds a block from the network: extends the head, is stored as a side branch, or
    /// reorganises the chain onto its branch (longest chain, ties to the lower hash, never
    /// below the finalized height).
    pub fn add_block(&mut self, block: &Block) -> Result<Added, ForkChoiceError> {
        let hash = block.hash();
        // The hash covers the header only. Before a block is believed on any path (known,
        // extending, side branch, unknown parent) its seal and its body must match the header:
        // a forged seal or a swapped body is never "known", relayed or stored, and a sealed
        // header is what makes its height worth believing.
        let shell = self.verify_shell(block)?;
        if hash == self.head.hash || self.is_canonical(&block.header)? {
            return Ok(Added::Known);
        }
        // Below the pruned floor nothing is stored to tell a canonical block from another,
        // and every such height is final: the block cannot change the chain.
        if block.header.height > 0 && block.header.height < self.served_from() {
            return Err(ForkChoiceError::BeyondFinality {
                hash,
                ancestor: block.header.height.saturating_sub(1),
                finalized: self.finalized_height(),
            });
        }
        // One block per authority per slot: a second one is never executed, stored or
        // weighed, and it voids the slot on this node.
        self.check_equivocation(block, hash)?;
        let added = self.add_unequivocal(&shell);
        // The first signed header of the slot is remembered in the batch that stores or
        // imports the block (no flush of its own on those paths); a block refused or not
        // attached yet is remembered on its own, so a conflicting one is caught even then.
        if let Err(e) = &added
            && !matches!(e, ForkChoiceError::Store(_))
            && let Err(store) = self.note_first_header_alone(block)
        {
            tracing::warn!(block = %hash, error = %store, "cannot remember the block's signed header");
        }
        added
    }

    /// [`Chain::add_block`] for a sealed, non-canonical block that is the first (or the same)
    /// its authority signed for its slot.
    fn add_unequivocal(&mut self, shell: &ShellVerified<'_>) -> Result<Added, ForkChoiceError> {
        let (block, hash) = (shell.block(), shell.hash());
        if block.header.parent_hash == self.head.hash {
            return Ok(Added::Extended(self.import_verified(shell)?));
        }
        // A child of a block found invalid is part of an invalid branch (the parent was never
        // stored, so without this it would look merely unknown and be fetched).
        if self.invalid.contains(&block.header.parent_hash) {
            self.remember_invalid(hash);
            return Err(ForkChoiceError::InvalidAncestor {
                hash,
                parent: block.header.parent_hash,
            });
        }
        if self.is_void_block(&block.header.parent_hash) {
            self.remember_void(hash);
            return Err(ForkChoiceError::VoidAncestor {
                hash,
                ancestor: block.header.parent_hash,
            });
        }
        let Some(parent) = self.stored_block(&block.header.parent_hash)? else {
            return Err(ForkChoiceError::UnknownParent {
                hash,
                height: block.header.height,
                parent: block.header.parent_hash,
            });
        };
        if self.is_void(&parent.header) {
            self.remember_void(hash);
            return Err(ForkChoiceError::VoidAncestor {
                hash,
                ancestor: block.header.parent_hash,
            });
        }
        if Some(block.header.height) != parent.header.height.checked_add(1) {
            return Err(ForkChoiceError::BadHeight {
                hash,
                height: block.header.height,
                parent_height: parent.header.height,
            });
        }
        // Executed on the parent's state before it is stored: an invalid block (and later its
        // descendants) is refused here, so it is never relayed nor counted for fork choice.
        match self.states.execute(block) {
            Ok(_) => {}
            Err(StateCacheError::InvalidBlock(e)) => {
                tracing::warn!(block = %hash, error = %e, "invalid block on a side branch; the branch is invalid");
                self.remember_invalid(hash);
                return Err(ForkChoiceError::Invalid(e));
            }
            // Ours, not the block's: not stored, not remembered; offered again (by sync, once
            // the module is ready) it is executed again.
            Err(StateCacheError::NotExecuted(e)) => {
                tracing::info!(block = %hash, error = %e, "side-branch block not checked for now (not its fault)");
                return Err(ForkChoiceError::NotChecked(e));
            }
            Err(source) => {
                return Err(ForkChoiceError::ParentState {
                    hash,
                    source: Box::new(source),
                });
            }
        }
        // A stored block is never overwritten.
        if self.store.get(&keys::block(&hash))?.is_none() {
            let mut batch = WriteBatch::new();
            batch.put(keys::block(&hash), block.encode());
            // Indexed by height so pruning finds it: no height index names a side block.
            batch.put(keys::side_block(block.header.height, &hash), Vec::new());
            self.note_first_header(block, &mut batch)?;
            self.store.commit(&batch)?;
        }

        let head = self.head;
        let longer = block.header.height > head.height
            || (block.header.height == head.height && hash < head.hash);
        // The higher justified checkpoint wins first (`finality`), then the longer chain.
        let better = match self.branch_justification(block)? {
            Some(justified) => {
                let ours = self.finality.justified_epoch();
                justified > ours || (justified == ours && longer)
            }
            None => longer,
        };
        if !better {
            return Ok(Added::Stored);
        }

        // The branch, tip first, back to the first canonical ancestor.
        let mut branch = vec![block.clone()];
        let mut cursor = parent;
        while !self.is_canonical(&cursor.header)? {
            // A branch through a void slot is invalid, however it was stored.
            if self.is_void(&cursor.header) {
                self.remember_void(hash);
                return Err(ForkChoiceError::VoidAncestor {
                    hash,
                    ancestor: cursor.hash(),
                });
            }
            let parent_hash = cursor.header.parent_hash;
            branch.push(cursor);
            cursor = self
                .stored_block(&parent_hash)?
                .ok_or(ForkChoiceError::UnknownParent {
                    hash,
                    height: block.header.height,
                    parent: parent_hash,
                })?;
        }
        let ancestor = cursor.header.height;
        let finalized = self.finalized_height();
        if ancestor < finalized {
            return Err(ForkChoiceError::BeyondFinality {
                hash,
                ancestor,
                finalized,
            });
        }

        // Revert to the ancestor, keeping the old branch (and what was final on it) to restore
        // on failure: finality may advance while the new branch is imported.
        let finality = self.finality.clone();
        let mut old_branch = Vec::new();
        while self.head.height > ancestor {
            if let Some(old) = self.block_at(self.head.height)? {
                old_branch.push(old);
            }
            self.revert_head()?;
        }
        for new in branch.iter().rev() {
            if let Err(e) = self.import(new) {
                tracing::warn!(block = %new.hash(), error = %e, "block of a competing branch not imported; staying on the current one");
                while self.head.height > ancestor {
                    self.revert_head()?;
                }
                for old in old_branch.iter().rev() {
                    self.import(old)?;
                }
                self.finality = finality;
                return Err(e.into());
            }
        }
        Ok(Added::Reorganised {
            head: self.head,
            reverted: head.height.saturating_sub(ancestor),
        })
    }
}

impl Chain {
    /// Epoch of the highest justified checkpoint on the chain ending with stored side block
    /// `block`, or `None` if the chain counts no votes or the branch cannot be weighed here (it
    /// runs through a void or missing block, or forks below the finalized height: the caller's
    /// checks refuse it).
    fn branch_justification(&self, block: &Block) -> Result<Option<u64>, StoreError> {
        if !self.finality.counts_votes() {
            return Ok(None);
        }
        let mut branch = vec![(
            block.header.height,
            block.header.slot,
            block.header.proposer,
        )];
        let mut parent = block.header.parent_hash;
        let ancestor = loop {
            let Some(cursor) = self.stored_block(&parent)? else {
                return Ok(None);
            };
            if self.is_canonical(&cursor.header)? {
                break cursor.header.height;
            }
            if self.is_void(&cursor.header) {
                return Ok(None);
            }
            branch.push((
                cursor.header.height,
                cursor.header.slot,
                cursor.header.proposer,
            ));
            parent = cursor.header.parent_hash;
        };
        if ancestor < self.finalized_height() {
            return Ok(None);
        }
        let mut finality = self.finality.clone();
        finality.reverted(ancestor.saturating_add(1));
        for (height, slot, proposer) in branch.into_iter().rev() {
            finality.imported(height, slot, proposer);
        }
        Ok(Some(finality.justified_epoch()))
    }
}
