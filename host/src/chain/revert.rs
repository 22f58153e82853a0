//! Reverting the head block with its undo record: the basis of reorganisations.

use std::sync::Arc;

use super::block::Block;
use super::{Chain, Head, RevertError, load_eth1, load_schedule, pending_store, registry_store};
use crate::state::{RegistryUndo, State};
use crate::store::{WriteBatch, keys};

impl Chain {
    /// Reverts the head block: its state changes are undone and its parent becomes the head,
    /// on disk (one flushed batch) and then in memory. The block itself stays stored so it can
    /// be imported again. Fork choice uses this to roll back to a common ancestor.
    pub fn revert_head(&mut self) -> Result<Head, RevertError> {
        let head = self.head;
        if head.height == 0 {
            return Err(RevertError::Genesis);
        }
        let corrupt = |reason: String| RevertError::Corrupt {
            hash: head.hash,
            reason,
        };
        let max = self.genesis.max_deposits_per_block;
        let block = self
            .store
            .get(&keys::block(&head.hash))?
            .ok_or_else(|| corrupt("head block missing".into()))?;
        let block = Block::decode(&block, max).map_err(|e| corrupt(format!("head block: {e}")))?;
        let undo = self
            .store
            .get(&keys::undo(&head.hash))?
            .ok_or_else(|| corrupt("undo record missing".into()))?;
        let undo =
            RegistryUndo::decode(&undo).ok_or_else(|| corrupt("undo record malformed".into()))?;
        let parent_hash = block.header.parent_hash;
        let parent = self
            .store
            .get(&keys::block(&parent_hash))?
            .ok_or_else(|| corrupt(format!("parent block {} missing", parent_hash)))?;
        let parent =
            Block::decode(&parent, max).map_err(|e| corrupt(format!("parent block: {e}")))?;
        let new_head = Head {
            hash: parent_hash,
            height: parent.header.height,
            slot: parent.header.slot,
            state_root: parent.header.state_root,
        };

        let current = self.head_state();
        let eth1 = load_eth1(self.store.as_ref(), &parent_hash)
            .map_err(|e| corrupt(format!("parent eth1 state: {e}")))?;
        let schedule = load_schedule(self.store.as_ref(), &parent_hash)
            .map_err(|e| corrupt(format!("parent module schedule: {e}")))?;
        let parent_extent = pending_store::load_extent(self.store.as_ref(), &parent_hash)
            .map_err(|e| corrupt(format!("parent pending-deposit extent: {e}")))?;
        let pending = pending_store::rolled_back(current.pending(), parent_extent.as_ref())
            .map_err(|e| corrupt(format!("parent pending-deposit extent: {e}")))?;

        let mut batch = WriteBatch::new();
        batch.delete(keys::height(head.height));
        // The block stays stored, now off the canonical chain: indexed so pruning finds it.
        batch.put(keys::side_block(head.height, &head.hash), Vec::new());
        batch.delete(keys::undo(&head.hash));
        batch.delete(keys::eth1(&head.hash));
        batch.delete(keys::schedule(&head.hash));
        pending_store::put_revert(
            &mut batch,
            &head.hash,
            current.pending(),
            parent_extent.as_ref(),
        );
        // The chunks the rollback touches, as they will be once memory follows the batch; an
        // undo record that does not fit the registry is refused before anything is written.
        registry_store::put_rollback(&mut batch, current.registry(), &undo).map_err(|e| {
            corrupt(format!(
                "undo record (keeps {} validators of {}, restores {} balances) does not fit the \
                 registry: {e}",
                undo.validators_before,
                current.registry().len(),
                undo.balances.len()
            ))
        })?;
        batch.put(keys::HEAD, new_head.encode());
        self.store.commit(&batch)?;

        let diverged = |reason: String| RevertError::Diverged {
            hash: head.hash,
            reason,
        };
        // A cached parent state is the registry after rollback: switch to it (a clone of its
        // registry, shared) instead of undoing block by block. Its root is checked below all the
        // same.
        let registry = match self.states.peek(&parent_hash) {
            Some(cached) => cached.shared_registry().clone(),
            None => {
                let mut registry = current.shared_registry().clone();
                Arc::make_mut(&mut registry)
                    .rollback(&undo)
                    .map_err(|e| diverged(e.to_string()))?;
                registry
            }
        };
        let state = State::from_shared(
            parent_hash,
            new_head.height,
            registry,
            eth1,
            schedule,
            pending,
        );
        let root = state.root();
        if root != new_head.state_root {
            return Err(diverged(format!(
                "state root {} after rollback, parent commits to {}",
                root, new_head.state_root
            )));
        }
        drop(current);
        self.head = new_head;
        self.finality.reverted(head.height);
        if let Some(modules) = &self.modules {
            modules.scheduled(state.schedule());
        }
        self.publish_head(state);
        Ok(new_head)
    }
}
