//! The registry rebuilt while a restore runs, not after it: each registry chunk that extends
//! the verified prefix (chunks `0..next`, in manifest order) has its validator records copied
//! into the registry's storage chunks, its balances appended and its leaf hashes and proof
//! nodes added to the tree, and is then dropped. A chunk verified out of order waits in the
//! [`Restorer`](super::Restorer) until the prefix reaches it.
//!
//! This moves the copies a restore's finish used to make of the whole state (records, tree
//! levels) into the time the chunks arrive, and frees each chunk's decoded copy at once, so
//! the memory the next chunks decode into is reused instead of faulted in fresh. What is left
//! for [`Assembly::finish`] is the pubkey index and the root.

use super::restore::{RestoreError, VerifiedChunk};
use crate::state::chunked::ChunkedBuilder;
use crate::state::merkle::ProvenTreeBuilder;
use crate::state::{Registry, StateError, Validator};

/// The registry's parts built from the verified prefix of a restore's registry chunks.
#[derive(Debug)]
pub(super) struct Assembly {
    /// Registry chunks taken so far: manifest chunks `0..next`.
    next: usize,
    validators: ChunkedBuilder<Validator>,
    balances: Vec<u64>,
    tree: ProvenTreeBuilder,
}

impl Assembly {
    /// An empty assembly of a registry of `leaf_count` leaves. Nothing is reserved for them
    /// up front: the count comes from a manifest, and only verified chunks take memory.
    pub(super) fn new(leaf_count: u64) -> Self {
        Self {
            next: 0,
            validators: ChunkedBuilder::new(),
            balances: Vec::new(),
            tree: ProvenTreeBuilder::new(leaf_count),
        }
    }

    /// The manifest index of the next registry chunk to take.
    pub(super) fn next(&self) -> usize {
        self.next
    }

    /// Takes `chunk`, which must be registry chunk [`next`](Self::next) (the restorer only
    /// hands it that one): its records, balances and tree nodes move into the registry.
    pub(super) fn take(&mut self, chunk: VerifiedChunk) -> Result<(), RestoreError> {
        if chunk.index != self.next {
            return Err(RestoreError::Local(format!(
                "chunk {} assembled out of order (next is {})",
                chunk.index, self.next
            )));
        }
        self.validators.extend_from_slice(&chunk.validators);
        self.balances.extend_from_slice(&chunk.balances);
        self.tree
            .push(&chunk.hashes, &chunk.nodes)
            .map_err(StateError::from)?;
        self.next = self.next.saturating_add(1);
        Ok(())
    }

    /// The registry: its pubkey index built and its tree checked to cover every leaf.
    pub(super) fn finish(self) -> Result<Registry, RestoreError> {
        let tree = self.tree.finish().map_err(StateError::from)?;
        Ok(Registry::from_assembled(
            self.validators.finish(),
            self.balances,
            tree,
        )?)
    }
}
