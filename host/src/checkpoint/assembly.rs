//! The registry rebuilt while a restore runs, not after it: each registry chunk that extends
//! the verified prefix (chunks `0..next`, in manifest order) has its validator records copied
//! into the registry's storage chunks, its balances appended and its leaf hashes and proof
//! nodes added to the tree, and is then dropped. A chunk verified out of order waits in the
//! [`Restorer`](super::Restorer) until the prefix reaches it.
//!
//! Each chunk's validators enter the pubkey index and the sum of effective balances as they
//! are taken.
//!
//! This moves the work a restore's finish used to do over the whole state (records, tree
//! levels, the pubkey index) into the time the chunks arrive, on the thread that receives
//! them while others verify, and frees what each chunk does not hand over at once, so the
//! memory the next chunks decode into is reused instead of faulted in fresh. What is left for
//! [`Assembly::finish`] is cutting the index's table into chunks and the root.

use super::restore::{RestoreError, VerifiedChunk};
use super::roots::RootTree;
use crate::state::chunked::ChunkedBuilder;
use crate::state::merkle::ProvenTreeBuilder;
use crate::state::pubkey_index::IndexBuilder;
use crate::state::{Registry, StateError, Validator};

/// How far ahead of the verified validators the pubkey index is sized, as a multiple of them:
/// growing it a few times at the start rather than at every doubling, without sizing it from
/// the manifest's claimed leaf count alone (a peer's number). Its table costs at most ~12
/// bytes per validator it is sized for, so ~100 bytes per verified validator at most, under
/// what each verified validator's record already holds.
const INDEX_AHEAD: u64 = 8;

/// The registry's parts built from the verified prefix of a restore's registry chunks.
#[derive(Debug)]
pub(super) struct Assembly {
    /// Registry chunks taken so far: manifest chunks `0..next`.
    next: usize,
    /// The manifest's leaf count: the index is never sized beyond it.
    leaf_count: u64,
    validators: ChunkedBuilder<Validator>,
    balances: ChunkedBuilder<u64>,
    index: IndexBuilder,
    /// Saturating sum of the effective balances taken so far.
    total_effective: u64,
    /// Why a chunk could not join the registry: nothing is taken after it.
    failed: Option<StateError>,
    tree: ProvenTreeBuilder,
}

impl Assembly {
    /// An empty assembly of a registry of `leaf_count` leaves. Nothing is reserved for them
    /// up front: the count comes from a manifest, and only verified chunks take memory. With
    /// the manifest's chunk roots (`roots`, already checked against the registry root) the
    /// tree's levels above the chunks are taken from them, and each chunk brings only the
    /// levels up to its subtree root.
    pub(super) fn new(leaf_count: u64, roots: Option<&RootTree>) -> Result<Self, RestoreError> {
        let tree = match roots {
            None => ProvenTreeBuilder::new(leaf_count),
            // The root tree was checked against the registry root when the manifest was
            // read: levels that do not fit the registry tree are our bug, not the manifest's.
            Some(roots) => {
                ProvenTreeBuilder::above(leaf_count, roots.level(), roots.upper_levels()).map_err(
                    |e| {
                        RestoreError::Local(format!(
                            "the manifest's checked chunk roots do not fit the registry tree: {e}"
                        ))
                    },
                )?
            }
        };
        Ok(Self {
            next: 0,
            leaf_count,
            validators: ChunkedBuilder::new(),
            balances: ChunkedBuilder::new(),
            index: IndexBuilder::new(),
            total_effective: 0,
            failed: None,
            tree,
        })
    }

    /// The manifest index of the next registry chunk to take.
    pub(super) fn next(&self) -> usize {
        self.next
    }

    /// Takes `chunk`, which must be registry chunk [`next`](Self::next) (the restorer only
    /// hands it that one): its records, balances and tree nodes move into the registry, its
    /// pubkeys into the index. A chunk that cannot join the registry (a duplicate pubkey, a
    /// tree that does not fit) fails here with `RestoreError::Registry`, and so does every
    /// later take and [`failure`](Self::failure) names it: the assembly holds part of that
    /// chunk and takes nothing more.
    pub(super) fn take(&mut self, chunk: VerifiedChunk) -> Result<(), RestoreError> {
        if let Some(failed) = &self.failed {
            return Err(RestoreError::Registry(failed.clone()));
        }
        if chunk.index != self.next {
            return Err(RestoreError::Local(format!(
                "chunk {} assembled out of order (next is {})",
                chunk.index, self.next
            )));
        }
        if let Err(e) = self.append(&chunk) {
            self.failed = Some(e.clone());
            return Err(RestoreError::Registry(e));
        }
        self.next = self.next.saturating_add(1);
        Ok(())
    }

    /// Why a chunk could not join the registry, if one could not.
    pub(super) fn failure(&self) -> Option<&StateError> {
        self.failed.as_ref()
    }

    fn append(&mut self, chunk: &VerifiedChunk) -> Result<(), StateError> {
        self.tree.push(&chunk.hashes, &chunk.nodes)?;
        self.total_effective = chunk
            .validators
            .iter()
            .fold(self.total_effective, |sum, v| {
                sum.saturating_add(v.effective_balance)
            });
        self.balances.extend_from_slice(&chunk.balances);
        self.validators.extend_from_slice(&chunk.validators);
        let len = u32::try_from(self.validators.len()).map_err(|_| StateError::Full)?;
        let ahead = u64::from(len)
            .saturating_mul(INDEX_AHEAD)
            .min(self.leaf_count)
            .max(u64::from(len));
        self.index.reserve(u32::try_from(ahead).unwrap_or(len))?;
        let validators = &self.validators;
        self.index.extend_to(len, |i| {
            validators.get(usize::try_from(i).ok()?).map(|v| &v.pubkey)
        })?;
        Ok(())
    }

    /// The registry: its tree checked to cover every leaf.
    pub(super) fn finish(self) -> Result<Registry, RestoreError> {
        let tree = self.tree.finish().map_err(StateError::from)?;
        Ok(Registry::from_assembled(
            self.validators.finish(),
            self.balances.finish(),
            self.index.finish(),
            tree,
            self.total_effective,
        )?)
    }
}
