//! The validator registry in memory: records, balances, the compact pubkey index and the Merkle
//! commitment over them (the state root).

use super::chunked::ChunkedVec;
use super::merkle::{Hash32, MerkleError, MerkleTree};
use super::overlay::{RegistryDelta, RegistryRead, RegistryUndo};
use super::pubkey_index::{IndexError, PubkeyIndex};
use super::validator::{LEAF_BYTES, NewValidator, Pubkey, Validator};
use crate::crypto::sha256_many;

/// Why a registry could not be built or changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The Merkle tree refused an update.
    #[error("state tree: {0}")]
    Merkle(#[from] MerkleError),
    /// The pubkey index refused an insertion (e.g. a duplicate pubkey).
    #[error("pubkey index: {0}")]
    Index(#[from] IndexError),
    /// A delta names a validator that does not exist.
    #[error("no validator has index {0}")]
    UnknownIndex(u32),
    /// Validators and balances disagree in length.
    #[error("{validators} validators but {balances} balances")]
    LengthMismatch {
        /// Validator count.
        validators: usize,
        /// Balance count.
        balances: usize,
    },
    /// A balance would exceed 2^64 - 1 Gwei (a genesis top-up).
    #[error("the balance of validator {0} would overflow")]
    BalanceOverflow(u32),
    /// More than 2^32 - 1 validators.
    #[error("the registry is full")]
    Full,
}

/// Leaf replacements `(position, leaf)` and appended leaves of a delta.
type LeafChanges = (Vec<(u64, Hash32)>, Vec<Hash32>);

/// Validators, their balances, a pubkey → index map and the state tree.
///
/// Leaf `i` of the tree is `sha256(encode(validator i) || balance i)`; the state root is the
/// tree's root (length mixed in). Every change updates the tree in O(log n) per changed leaf.
///
/// Every part is a persistent chunked vector ([`ChunkedVec`]): `clone` copies a few thousand
/// chunk pointers at 2M validators, and the clone and the original share every chunk until one
/// of them writes to it.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    validators: ChunkedVec<Validator>,
    balances: ChunkedVec<u64>,
    index: PubkeyIndex,
    tree: MerkleTree,
    /// Sum of the effective balances (saturating: 2^64 Gwei is far beyond any supply), kept
    /// on every change so deposits@3's churn limit reads it in O(1).
    total_effective: u64,
}

/// Equality of contents; the index and tree are derived from them.
impl PartialEq for Registry {
    fn eq(&self, other: &Self) -> bool {
        self.validators == other.validators && self.balances == other.balances
    }
}

impl Eq for Registry {}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a registry from records and balances in one pass (startup, genesis).
    pub fn from_parts(validators: Vec<Validator>, balances: Vec<u64>) -> Result<Self, StateError> {
        if validators.len() != balances.len() {
            return Err(StateError::LengthMismatch {
                validators: validators.len(),
                balances: balances.len(),
            });
        }
        // Leaves written out a batch at a time and hashed together (`sha256_many`: sixteen at
        // a time where the CPU can), on two threads.
        let leaves = super::merkle::map_halves(&validators, 1, |at, half| {
            const BATCH: usize = 1024;
            let mut hashes = Vec::with_capacity(half.len());
            let mut bytes = Vec::with_capacity(BATCH.saturating_mul(LEAF_BYTES));
            let mut balances = balances.iter().skip(at);
            for batch in half.chunks(BATCH) {
                bytes.clear();
                for (validator, balance) in batch.iter().zip(balances.by_ref()) {
                    bytes.extend_from_slice(&validator.leaf_bytes(*balance));
                }
                sha256_many::hash_each(&bytes, LEAF_BYTES, &mut hashes);
            }
            hashes
        });
        Self::from_parts_and_leaves(validators, balances, leaves)
    }

    /// [`from_parts`](Self::from_parts) when the tree's leaves are already hashed (a checkpoint
    /// restore hashed them to prove them): `leaves[i]` must be
    /// `validators[i].leaf_hash(balances[i])`, or the root will not be the state's.
    pub fn from_parts_and_leaves(
        validators: Vec<Validator>,
        balances: Vec<u64>,
        leaves: Vec<Hash32>,
    ) -> Result<Self, StateError> {
        if leaves.len() != validators.len() {
            return Err(StateError::LengthMismatch {
                validators: validators.len(),
                balances: balances.len().min(leaves.len()),
            });
        }
        Self::from_parts_building_tree(validators, balances, || Ok(MerkleTree::from_leaves(leaves)))
    }

    /// [`from_parts`](Self::from_parts) with the tree made by `tree`: it must be the tree over
    /// `validators[i].leaf_hash(balances[i])`, or the root will not be the state's. `tree`
    /// runs on this thread while the pubkey index is built on another.
    pub fn from_parts_building_tree(
        validators: Vec<Validator>,
        balances: Vec<u64>,
        tree: impl FnOnce() -> Result<MerkleTree, StateError>,
    ) -> Result<Self, StateError> {
        if validators.len() != balances.len() {
            return Err(StateError::LengthMismatch {
                validators: validators.len(),
                balances: balances.len(),
            });
        }
        let build_index = || pubkey_index(validators.len(), |i| validators.get(i));
        let (index, tree, chunked) = std::thread::scope(|scope| {
            let worker = std::thread::Builder::new()
                .name("pubkey-index".into())
                .spawn_scoped(scope, build_index);
            let tree = tree();
            let chunked = ChunkedVec::from(validators.as_slice());
            let index = match worker.ok().map(|w| w.join()) {
                Some(Ok(index)) => index,
                // The worker could not start (or died): build it here.
                _ => build_index(),
            };
            (index, tree, chunked)
        });
        Self::with_index(chunked, balances, index?, tree?)
    }

    /// A registry from its parts built as a restore received them: `validators` (each chunk
    /// moved or copied once), their `balances`, their pubkey `index`, the tree over their
    /// leaves (assembled from the restore's range proofs) and `total_effective`, the saturating
    /// sum of their effective balances, which the caller added up as it appended them. The
    /// tree must be the tree over `validators[i].leaf_hash(balances[i])`, or the root will not
    /// be the state's; the lengths are checked against each other.
    pub fn from_assembled(
        validators: ChunkedVec<Validator>,
        balances: ChunkedVec<u64>,
        index: PubkeyIndex,
        tree: MerkleTree,
        total_effective: u64,
    ) -> Result<Self, StateError> {
        if usize::try_from(index.len()).ok() != Some(validators.len()) {
            return Err(StateError::Index(IndexError::Internal(
                "an assembled pubkey index does not hold every validator",
            )));
        }
        Self::checked(validators, balances, index, tree, total_effective)
    }

    /// The registry of `validators`, `balances`, their pubkey `index` and their `tree`, their
    /// lengths checked against each other.
    fn with_index(
        validators: ChunkedVec<Validator>,
        balances: Vec<u64>,
        index: PubkeyIndex,
        tree: MerkleTree,
    ) -> Result<Self, StateError> {
        let total_effective = validators
            .iter()
            .fold(0u64, |sum, v| sum.saturating_add(v.effective_balance));
        Self::checked(validators, balances.into(), index, tree, total_effective)
    }

    /// The registry of its parts, their lengths checked against each other.
    fn checked(
        validators: ChunkedVec<Validator>,
        balances: ChunkedVec<u64>,
        index: PubkeyIndex,
        tree: MerkleTree,
        total_effective: u64,
    ) -> Result<Self, StateError> {
        let count = validators.len();
        if count != balances.len() {
            return Err(StateError::LengthMismatch {
                validators: count,
                balances: balances.len(),
            });
        }
        if u64::try_from(count).ok() != Some(tree.len()) {
            return Err(StateError::LengthMismatch {
                validators: count,
                balances: usize::try_from(tree.len()).unwrap_or(usize::MAX),
            });
        }
        Ok(Self {
            validators,
            balances,
            index,
            tree,
            total_effective,
        })
    }

    /// Sum of every validator's effective balance (what deposits@3 counts as the total active
    /// balance: modnode has no exits), O(1).
    pub fn total_effective_balance(&self) -> u64 {
        self.total_effective
    }

    /// Number of validators.
    pub fn len(&self) -> u32 {
        u32::try_from(self.validators.len()).unwrap_or(u32::MAX)
    }

    /// Whether there are no validators.
    pub fn is_empty(&self) -> bool {
        self.validators.is_empty()
    }

    /// Validator `index`.
    pub fn validator(&self, index: u32) -> Option<&Validator> {
        self.validators.get(usize::try_from(index).ok()?)
    }

    /// All validators, in index order.
    pub fn validators(&self) -> &ChunkedVec<Validator> {
        &self.validators
    }

    /// All balances, in index order.
    pub fn balances(&self) -> &ChunkedVec<u64> {
        &self.balances
    }

    /// Each chunk the registry holds (records, balances, pubkey index, tree levels) by address,
    /// with its heap bytes: what a cache counts once however many states share it.
    pub fn chunk_ptrs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.validators
            .chunk_ptrs()
            .chain(self.balances.chunk_ptrs())
            .chain(self.index.chunk_ptrs())
            .chain(self.tree.chunk_ptrs())
    }

    /// Heap bytes only this registry value owns: its chunk tables (never shared).
    pub fn table_bytes(&self) -> usize {
        self.validators
            .table_bytes()
            .saturating_add(self.balances.table_bytes())
            .saturating_add(self.index.table_bytes())
            .saturating_add(self.tree.table_bytes())
    }

    /// The state root.
    pub fn root(&self) -> Hash32 {
        self.tree.root()
    }

    /// The state tree (for range proofs).
    pub fn tree(&self) -> &MerkleTree {
        &self.tree
    }

    /// Heap bytes of the pubkey index.
    pub fn index_heap_bytes(&self) -> usize {
        self.index.heap_bytes()
    }

    fn leaf_updates(&self, delta: &RegistryDelta) -> Result<LeafChanges, StateError> {
        let mut updates = Vec::with_capacity(delta.balances.len());
        for &(index, balance) in &delta.balances {
            let validator = self
                .validator(index)
                .ok_or(StateError::UnknownIndex(index))?;
            updates.push((u64::from(index), validator.leaf_hash(balance)));
        }
        let appended = delta
            .added
            .iter()
            .map(|n| n.record().leaf_hash(n.balance))
            .collect();
        Ok((updates, appended))
    }

    /// The state root after `delta`, without applying it.
    pub fn root_after(&self, delta: &RegistryDelta) -> Result<Hash32, StateError> {
        let (updates, appended) = self.leaf_updates(delta)?;
        Ok(self.tree.root_with(&updates, &appended)?)
    }

    /// Applies a delta produced by an overlay over this registry. Checked up front: on error
    /// nothing changed.
    pub fn apply(&mut self, delta: &RegistryDelta) -> Result<(), StateError> {
        let (updates, appended) = self.leaf_updates(delta)?;
        let new_len = self
            .validators
            .len()
            .checked_add(delta.added.len())
            .ok_or(StateError::Full)?;
        u32::try_from(new_len).map_err(|_| StateError::Full)?;
        // Index first: it is the only step that can refuse (a duplicate pubkey), and it is
        // rolled back by rebuilding if a later insertion in the same delta fails.
        let before = self.index.len();
        let base = self.validators.len();
        let validators = &self.validators;
        let key_at = |i: u32| -> Option<&Pubkey> {
            let i = usize::try_from(i).ok()?;
            match i.checked_sub(base) {
                None => validators.get(i).map(|v| &v.pubkey),
                Some(offset) => delta.added.get(offset).map(|a| &a.pubkey),
            }
        };
        for (offset, added) in delta.added.iter().enumerate() {
            let index = u32::try_from(base.saturating_add(offset)).map_err(|_| StateError::Full)?;
            if let Err(e) = self.index.insert(&added.pubkey, index, key_at) {
                if offset > 0 {
                    self.index = PubkeyIndex::rebuild(before, key_at)?;
                }
                return Err(e.into());
            }
        }
        self.tree.set_many(&updates)?;
        self.tree.extend_from_slice(&appended)?;
        for &(index, balance) in &delta.balances {
            if let Ok(i) = usize::try_from(index) {
                self.balances.set(i, balance);
            }
        }
        for added in &delta.added {
            self.validators.push(added.record());
            self.balances.push(added.balance);
            self.total_effective = self.total_effective.saturating_add(added.effective_balance);
        }
        Ok(())
    }
}

impl Registry {
    /// The delta that turns this registry into `later`, a registry derived from it by deltas
    /// (a cached descendant's): the validators `later` appended and the balances it changed.
    /// `None` if `later` is not such a registry (fewer validators, or an appended record that
    /// is not a fresh deposit's).
    pub fn delta_to(&self, later: &Registry) -> Option<RegistryDelta> {
        let base = self.validators.len();
        if later.validators.len() < base || later.balances.len() != later.validators.len() {
            return None;
        }
        let added = later
            .validators
            .range(base, later.validators.len())
            .zip(later.balances.range(base, later.balances.len()))
            .map(|(v, &balance)| {
                let added = NewValidator {
                    pubkey: v.pubkey,
                    withdrawal_credentials: v.withdrawal_credentials,
                    effective_balance: v.effective_balance,
                    balance,
                };
                (added.record() == *v).then_some(added)
            })
            .collect::<Option<Vec<_>>>()?;
        let balances = self
            .balances
            .differing(&later.balances, base)
            .into_iter()
            .map(|i| Some((u32::try_from(i).ok()?, *later.balances.get(i)?)))
            .collect::<Option<Vec<_>>>()?;
        Some(RegistryDelta { added, balances })
    }

    /// What undoes `delta` on this registry (call before applying it).
    pub fn undo_for(&self, delta: &RegistryDelta) -> Result<RegistryUndo, StateError> {
        let balances = delta
            .balances
            .iter()
            .map(|&(index, _)| {
                self.balance(index)
                    .map(|b| (index, b))
                    .ok_or(StateError::UnknownIndex(index))
            })
            .collect::<Result<_, _>>()?;
        Ok(RegistryUndo {
            validators_before: self.len(),
            balances,
        })
    }

    /// Rolls back a delta: drops the validators it added and restores the balances it changed.
    /// Checked up front; on error nothing changed.
    pub fn rollback(&mut self, undo: &RegistryUndo) -> Result<(), StateError> {
        let keep = undo.validators_before;
        if keep > self.len() {
            return Err(StateError::UnknownIndex(keep));
        }
        let mut updates = Vec::with_capacity(undo.balances.len());
        for &(index, balance) in &undo.balances {
            if index >= keep {
                return Err(StateError::UnknownIndex(index));
            }
            let validator = self
                .validator(index)
                .ok_or(StateError::UnknownIndex(index))?;
            updates.push((u64::from(index), validator.leaf_hash(balance)));
        }
        // The index needs every pubkey while it removes entries: truncate it first.
        let validators = &self.validators;
        self.index.truncate(keep, |i| {
            validators.get(usize::try_from(i).ok()?).map(|v| &v.pubkey)
        })?;
        self.tree.truncate(u64::from(keep))?;
        self.tree.set_many(&updates)?;
        let keep = usize::try_from(keep).map_err(|_| StateError::Full)?;
        let dropped = self
            .validators
            .range(keep, self.validators.len())
            .fold(0u64, |sum, v| sum.saturating_add(v.effective_balance));
        self.total_effective = self.total_effective.saturating_sub(dropped);
        self.validators.truncate(keep);
        self.balances.truncate(keep);
        for &(index, balance) in &undo.balances {
            if let Ok(i) = usize::try_from(index) {
                self.balances.set(i, balance);
            }
        }
        Ok(())
    }
}

impl RegistryRead for Registry {
    fn index_of(&self, pubkey: &Pubkey) -> Option<u32> {
        let validators = &self.validators;
        self.index.get(pubkey, |i| {
            validators.get(usize::try_from(i).ok()?).map(|v| &v.pubkey)
        })
    }

    fn validator_count(&self) -> u32 {
        self.len()
    }

    fn balance(&self, index: u32) -> Option<u64> {
        self.balances.get(usize::try_from(index).ok()?).copied()
    }

    fn total_effective_balance(&self) -> u64 {
        self.total_effective
    }
}

/// The pubkey index of `count` validators, validator `i` being `validator(i)`.
fn pubkey_index<'v>(
    count: usize,
    validator: impl Fn(usize) -> Option<&'v Validator>,
) -> Result<PubkeyIndex, StateError> {
    let count = u32::try_from(count).map_err(|_| StateError::Full)?;
    Ok(PubkeyIndex::rebuild(count, |index| {
        validator(usize::try_from(index).ok()?).map(|v| &v.pubkey)
    })?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `from_parts` writes leaves out in batches and hashes them together: past one batch,
    /// over two halves and not a multiple of sixteen, its root is that of the leaves hashed
    /// one by one.
    #[test]
    fn a_registry_from_parts_has_the_root_of_its_leaves_hashed_one_by_one() {
        let count = 2_501u32;
        let validators: Vec<Validator> = (0..count)
            .map(|i| {
                let mut pubkey = [0u8; 48];
                pubkey[..4].copy_from_slice(&i.to_le_bytes());
                NewValidator {
                    pubkey,
                    withdrawal_credentials: [i as u8; 32],
                    effective_balance: u64::from(i),
                    balance: 0,
                }
                .record()
            })
            .collect();
        let balances: Vec<u64> = (0..u64::from(count)).map(|i| i * 7 + 1).collect();
        let leaves = validators
            .iter()
            .zip(&balances)
            .map(|(v, b)| v.leaf_hash(*b))
            .collect();
        let expected =
            Registry::from_parts_and_leaves(validators.clone(), balances.clone(), leaves).unwrap();
        let built = Registry::from_parts(validators, balances).unwrap();
        assert_eq!(built.root(), expected.root());
    }

    #[test]
    fn delta_to_a_descendant_is_the_delta_that_made_it() {
        let mut base = Registry::new();
        base.apply(&RegistryDelta {
            added: (1..=200).map(NewValidator::tagged).collect(),
            balances: vec![],
        })
        .unwrap();
        let delta = RegistryDelta {
            added: vec![NewValidator::tagged(201), NewValidator::tagged(202)],
            balances: vec![(3, 7), (150, 9)],
        };
        let mut later = base.clone();
        later.apply(&delta).unwrap();
        assert_eq!(base.delta_to(&later), Some(delta));
        assert_eq!(base.delta_to(&base), Some(RegistryDelta::default()));
        // Not a descendant: fewer validators.
        assert_eq!(later.delta_to(&base), None);
    }
}
