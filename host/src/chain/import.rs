//! Importing the head's next block: the checks a block must pass to follow the head, its
//! transition (or the one cached for it), and the commit — block, state records and new head
//! in one atomic flushed batch, then memory.

use super::*;

impl Chain {
    /// Imports the next block. On `Ok` the block, its state changes and the new head are on
    /// disk; on `Err` nothing changed.
    pub fn import(&mut self, block: &Block) -> Result<Imported, ImportError> {
        self.check_next(block)?;
        let shell = self.verify_shell(block)?;
        self.import_after_checks(&shell)
    }

    /// [`import`](Self::import) of a block whose shell was verified already (by fork choice):
    /// its seal is not verified again.
    pub(crate) fn import_verified(
        &mut self,
        shell: &ShellVerified<'_>,
    ) -> Result<Imported, ImportError> {
        self.check_next(shell.block())?;
        self.import_after_checks(shell)
    }

    /// Refuses a block that is not the head's child: parent, height, a later slot.
    fn check_next(&self, block: &Block) -> Result<(), ImportError> {
        let header = &block.header;
        let not_next = |reason: String| ImportError::NotNext {
            hash: block.hash(),
            reason,
        };
        if header.parent_hash != self.head.hash {
            return Err(not_next(format!(
                "parent {} is not the head {}",
                header.parent_hash, self.head.hash
            )));
        }
        if Some(header.height) != self.head.height.checked_add(1) {
            return Err(not_next(format!(
                "height {} after head height {}",
                header.height, self.head.height
            )));
        }
        if header.slot <= self.head.slot {
            return Err(not_next(format!(
                "slot {} is not after the head's slot {}",
                header.slot, self.head.slot
            )));
        }
        Ok(())
    }

    /// The rest of an import, once the block is the head's child and its shell is verified.
    fn import_after_checks(&mut self, shell: &ShellVerified<'_>) -> Result<Imported, ImportError> {
        let block = shell.block();
        let header = &block.header;
        let hash = shell.hash();
        let Applied {
            state,
            outcomes,
            delta,
        } = match self.adopt(block)? {
            Some(adopted) => adopted,
            None => {
                self.executed = self.executed.saturating_add(1);
                apply_block(&self.rules(), &self.head_state(), self.head.slot, block)?
            }
        };
        let root = state.root();
        if root != header.state_root {
            return Err(ImportError::StateRootMismatch {
                hash,
                claimed: header.state_root,
                computed: root,
            });
        }

        let head = Head {
            hash,
            height: header.height,
            slot: header.slot,
            state_root: root,
        };
        let mut batch = WriteBatch::new();
        // The chunks the delta touches, as they will be once memory follows the batch.
        let parent_state = self.head_state();
        let parent = parent_state.registry();
        let undo = registry_store::put_delta(&mut batch, parent, &delta)
            .and_then(|()| parent.undo_for(&delta))
            .map_err(|source| ImportError::State { hash, source })?;
        let warm_input = self.deposit_call(block);
        self.note_first_header(block, &mut batch)
            .map_err(|source| ImportError::Store { hash, source })?;
        batch.put(keys::block(&hash), block.encode());
        batch.put(keys::undo(&hash), undo.encode());
        batch.put(keys::eth1(&hash), state.eth1().encode());
        // The schedule is state like any other: an activation is part of this batch, never a
        // marker written after it.
        batch.put(keys::schedule(&hash), state.schedule().encode());
        // deposits@3's queue: the entries this block pushed and the extent after it.
        pending_store::put_block(&mut batch, &hash, parent_state.pending(), state.pending());
        batch.put(keys::height(head.height), hash.as_bytes().to_vec());
        batch.put(keys::HEAD, head.encode());
        // The finalized root as of the parent (never reverted): a restart walks only above it.
        if let Some(root) = self.finality.root_record() {
            batch.put(keys::FINALITY_ROOT, root.to_vec());
        }
        self.store
            .commit(&batch)
            .map_err(|source| ImportError::Store { hash, source })?;

        // The batch is durable: the new state (built, and its root checked, before the batch
        // was written) becomes the head's, in the state cache.
        drop(parent_state);
        self.head = head;
        self.finality
            .imported(head.height, header.slot, header.proposer);
        if let Some(modules) = &self.modules {
            modules.scheduled(state.schedule());
            if let Some(call) = warm_input {
                modules.imported(call);
            }
        }
        self.publish_head(state);
        self.offer_to_preverifier();
        Ok(Imported { head, outcomes })
    }

    /// Has `preverifier` verify, after each import, the signatures of the queue entries the
    /// next epoch transitions may apply (it fills the cache of the runtime the deposits
    /// modules run on). It only warms a cache: results are the same with or without it.
    pub fn set_preverifier(&mut self, preverifier: preverify::Preverifier) {
        self.preverifier = Some(preverifier);
        self.offer_to_preverifier();
    }

    /// The pre-verifier, if one is set.
    pub fn preverifier(&self) -> Option<&preverify::Preverifier> {
        self.preverifier.as_ref()
    }

    /// Sends the first [`preverify::WINDOW`] queue entries whose pubkey is not in the
    /// registry to the pre-verifier, if there is one and a queue; never blocks.
    fn offer_to_preverifier(&self) {
        let state = self.head_state();
        let (Some(preverifier), Some(queue)) = (&self.preverifier, state.pending()) else {
            return;
        };
        let entries: Vec<_> = queue
            .window(0, preverify::WINDOW)
            .filter(|e| RegistryRead::index_of(state.registry(), &e.pubkey).is_none())
            .copied()
            .collect();
        preverifier.offer(entries, self.genesis.genesis_fork_version);
    }

    /// The deposits call `block` (valid, about to become the head) makes, for the warm-up of
    /// new deposits modules: only for a block with deposits, on a chain whose modules listen.
    fn deposit_call(&self, block: &Block) -> Option<DepositCall> {
        if block.body.deposits.is_empty() || self.modules.is_none() {
            return None;
        }
        crate::consensus::deposit_call(&self.genesis, &self.head_state(), block)
    }
}
