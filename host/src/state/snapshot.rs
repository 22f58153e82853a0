//! [`State`]: the immutable state after one block, cheap to clone and to share — what
//! `consensus::apply_block` takes and returns, what the state cache keeps, the head included.
//!
//! A state holds a clone of the registry (persistent chunked vectors, so the clone shares
//! every chunk with the registry it came from) and the eth1 state. Nothing can change it once
//! built: readers on any thread (state queries, checkpoint creation) see the state after its
//! block however far import has moved on. A further state component (for example a module
//! schedule, already here) is one more field and one more input to [`State::root`].

use std::sync::Arc;

use super::eth1::{Eth1State, state_root_with};
use super::merkle::Hash32;
use super::overlay::RegistryRead;
use super::pending::PendingQueue;
use super::registry::Registry;
use super::schedule::Schedule;
use super::validator::{Pubkey, Validator};
use crate::hashes::{BlockHash, StateRoot};

/// What a snapshot holds; shared behind one `Arc`.
#[derive(Debug)]
struct Inner {
    block: BlockHash,
    height: u64,
    /// Shared behind its own `Arc` so that the transition reads it without cloning its chunk
    /// tables and [`Self::shared_registry`] hands it out; never changed once here.
    registry: Arc<Registry>,
    eth1: Eth1State,
    schedule: Schedule,
    /// deposits@3's queue, once a state has run that contract (see [`state_root_with`]).
    pending: Option<PendingQueue>,
    root: StateRoot,
}

/// The immutable state after block `block_hash` at `height` (see the module docs).
///
/// `Clone` is one reference-count increment; `Send + Sync`.
#[derive(Debug, Clone)]
pub struct State(Arc<Inner>);

impl State {
    /// The state after `block` at `height`: `registry`, `eth1` and the module `schedule`. The
    /// root is computed once.
    pub fn new(
        block: BlockHash,
        height: u64,
        registry: Registry,
        eth1: Eth1State,
        schedule: Schedule,
    ) -> Self {
        Self::with_pending(block, height, registry, eth1, schedule, None)
    }

    /// [`new`](Self::new) with deposits@3's pending-deposit queue: `Some` once the chain has
    /// run that contract (the root then commits to it, [`state_root_with`]), `None` before
    /// (the root is exactly [`state_root`]'s).
    pub fn with_pending(
        block: BlockHash,
        height: u64,
        registry: Registry,
        eth1: Eth1State,
        schedule: Schedule,
        pending: Option<PendingQueue>,
    ) -> Self {
        Self::from_shared(block, height, Arc::new(registry), eth1, schedule, pending)
    }

    /// [`with_pending`](Self::with_pending) over a registry already behind an `Arc` (the
    /// transition's result: no copy of its chunk tables).
    pub fn from_shared(
        block: BlockHash,
        height: u64,
        registry: Arc<Registry>,
        eth1: Eth1State,
        schedule: Schedule,
        pending: Option<PendingQueue>,
    ) -> Self {
        let pending_root = pending.as_ref().map(PendingQueue::root);
        let root = StateRoot::new(state_root_with(
            &registry.root(),
            &eth1,
            &schedule,
            pending_root.as_ref(),
        ));
        Self(Arc::new(Inner {
            block,
            height,
            registry,
            eth1,
            schedule,
            pending,
            root,
        }))
    }

    /// deposits@3's pending-deposit queue, if this state has one.
    pub fn pending(&self) -> Option<&PendingQueue> {
        self.0.pending.as_ref()
    }

    /// The on-chain module schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.0.schedule
    }

    /// Hash of the block this is the state after.
    pub fn block_hash(&self) -> BlockHash {
        self.0.block
    }

    /// Height of that block.
    pub fn height(&self) -> u64 {
        self.0.height
    }

    /// The state root (registry and eth1 state), as the block's header commits to it.
    pub fn root(&self) -> StateRoot {
        self.0.root
    }

    /// The registry's Merkle root alone.
    pub fn registry_root(&self) -> Hash32 {
        self.0.registry.root()
    }

    /// The registry (records, balances, pubkey index, tree).
    pub fn registry(&self) -> &Registry {
        &self.0.registry
    }

    /// The registry as a shared value: a reader keeps it as it is here however far the chain
    /// moves on (one reference count; a later transition copies the chunk tables it changes).
    pub fn shared_registry(&self) -> &Arc<Registry> {
        &self.0.registry
    }

    /// The eth1 state: agreed eth1 data, deposit index, this period's votes.
    pub fn eth1(&self) -> &Eth1State {
        &self.0.eth1
    }

    /// Number of validators.
    pub fn validator_count(&self) -> u32 {
        self.0.registry.len()
    }

    /// Validator `index` and its balance.
    pub fn validator(&self, index: u32) -> Option<(Validator, u64)> {
        let validator = *self.0.registry.validator(index)?;
        Some((validator, self.0.registry.balance(index)?))
    }

    /// Index of the validator with `pubkey`.
    pub fn index_of(&self, pubkey: &Pubkey) -> Option<u32> {
        self.0.registry.index_of(pubkey)
    }

    /// Validators `start..end` (clamped to the count) with their balances, in index order.
    pub fn validators(&self, start: u32, end: u32) -> impl Iterator<Item = (&Validator, u64)> {
        let (start, end) = (start as usize, end as usize);
        let registry = &self.0.registry;
        registry
            .validators()
            .range(start, end)
            .zip(registry.balances().range(start, end).copied())
    }

    /// Registry leaf hashes `start..end` (clamped to the count), for range proofs.
    pub fn leaves(&self, start: u64, end: u64) -> impl Iterator<Item = &Hash32> {
        self.0.registry.tree().leaf_range(start, end)
    }

    /// Whether a clone of this snapshot exists besides this one (someone is using it).
    pub fn is_shared(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    /// Each chunk the snapshot holds, by address, with its heap bytes (see
    /// [`Registry::chunk_ptrs`]).
    pub fn chunk_ptrs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.0.registry.chunk_ptrs()
    }

    /// Heap bytes this snapshot alone owns whatever it shares: chunk tables, the eth1 votes and
    /// the snapshot itself.
    pub fn own_bytes(&self) -> usize {
        let votes = self
            .0
            .eth1
            .votes
            .capacity()
            .saturating_mul(std::mem::size_of::<super::eth1::Eth1Vote>());
        let pending = self.0.pending.as_ref().map_or(0, PendingQueue::table_bytes);
        self.0
            .registry
            .table_bytes()
            .saturating_add(pending)
            .saturating_add(votes)
            .saturating_add(std::mem::size_of::<Inner>())
            .saturating_add(16)
    }
}

/// One part of a [`State`] (its schedule, its eth1 state), held through the state itself:
/// what an accessor of a shared state hands out instead of a reference into a field. Derefs
/// to the part; the state stays alive (and unchanged) while it is held.
pub struct StatePart<T: 'static> {
    state: State,
    part: fn(&State) -> &T,
}

impl<T> StatePart<T> {
    /// `part` of `state` (for example `State::schedule`).
    pub fn new(state: State, part: fn(&State) -> &T) -> Self {
        Self { state, part }
    }

    /// The whole state the part is of.
    pub fn state(&self) -> &State {
        &self.state
    }
}

impl<T> std::ops::Deref for StatePart<T> {
    type Target = T;

    fn deref(&self) -> &T {
        (self.part)(&self.state)
    }
}

impl<T: PartialEq> PartialEq for StatePart<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for StatePart<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{NewValidator, RegistryDelta, state_root};

    #[test]
    fn a_snapshot_never_sees_later_writes() {
        let mut registry = Registry::new();
        registry
            .apply(&RegistryDelta {
                added: (1..=3).map(NewValidator::tagged).collect(),
                balances: vec![],
            })
            .unwrap();
        let snapshot = State::new(
            BlockHash::new([1; 32]),
            1,
            registry.clone(),
            Eth1State::default(),
            Schedule::default(),
        );
        let root = snapshot.root();
        registry
            .apply(&RegistryDelta {
                added: vec![NewValidator::tagged(9)],
                balances: vec![(0, 99)],
            })
            .unwrap();
        assert_eq!(snapshot.validator_count(), 3);
        assert_eq!(snapshot.validator(0).unwrap().1, 32);
        assert_eq!(snapshot.index_of(&[9; 48]), None);
        assert_eq!(
            snapshot.root(),
            StateRoot::new(state_root(
                &snapshot.registry().root(),
                snapshot.eth1(),
                snapshot.schedule()
            ))
        );
        assert_eq!(snapshot.root(), root);
        assert_eq!(snapshot.validators(1, 10).count(), 2);
        assert_eq!(snapshot.leaves(0, 3).count(), 3);
    }

    #[test]
    fn a_state_with_a_queue_commits_it_and_one_without_hashes_as_before() {
        let registry = Registry::new();
        let plain = State::new(
            BlockHash::new([1; 32]),
            1,
            registry.clone(),
            Eth1State::default(),
            Schedule::default(),
        );
        let v3 = StateRoot::new(state_root(
            &registry.root(),
            &Eth1State::default(),
            &Schedule::default(),
        ));
        assert_eq!(plain.root(), v3);
        assert!(plain.pending().is_none());
        let mut queue = PendingQueue::new();
        let empty = State::with_pending(
            BlockHash::new([1; 32]),
            1,
            registry.clone(),
            Eth1State::default(),
            Schedule::default(),
            Some(queue.clone()),
        );
        // Present, even empty, the queue enters the root under the v4 tag.
        assert_ne!(empty.root(), v3);
        queue
            .apply(&crate::state::PendingDelta {
                balance_to_consume: Some(1),
                ..Default::default()
            })
            .unwrap();
        let counted = State::with_pending(
            BlockHash::new([1; 32]),
            1,
            registry,
            Eth1State::default(),
            Schedule::default(),
            Some(queue),
        );
        assert_ne!(counted.root(), empty.root());
        assert_eq!(
            counted.pending().map(PendingQueue::balance_to_consume),
            Some(1)
        );
    }
}
