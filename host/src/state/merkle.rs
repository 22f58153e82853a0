//! Incremental binary Merkle tree over position-indexed 32-byte leaves, with range proofs.
//!
//! The tree commits to a list of leaves. Level 0 holds the leaves and level `d + 1` holds
//! `sha256(left || right)` of pairs of level `d`. Positions past the last leaf are empty and hash
//! as all-zero subtrees (`zero_hash(0) = [0; 32]`, `zero_hash(d + 1) = sha256(z || z)`), as in SSZ
//! merkleization. Only nodes that cover at least one leaf are stored, so memory is about twice
//! the leaves.
//!
//! The depth is `ceil(log2(max(len, 1)))` and the length is mixed in, so the root is a pure
//! function of the leaf list, never of how the tree was built or how much it has grown:
//!
//! ```text
//! root = sha256(tree_root || (len as u64, little-endian, zero-padded to 32 bytes))
//! ```
//!
//! This differs from an SSZ `List[T, N]`, whose depth follows the limit `N` rather than the length.
//!
//! A [`RangeProof`] for leaves `[start, end)` carries, per level, at most the sibling just left of
//! the range and the sibling just right of it, skipping siblings that are empty subtrees (the
//! verifier derives those from the length), so it holds at most `2 * depth` hashes.

// Consensus code: on top of what the crate denies outside tests (see `lib.rs`), no `panic!`.
#![cfg_attr(not(test), deny(clippy::panic))]

use std::fmt;
use std::sync::OnceLock;

use deposits_common::ssz::hash_pair;

use crate::crypto::sha256_many;

use super::chunked::{ChunkedBuilder, ChunkedVec};

mod error;
mod range_proof;

pub use error::MerkleError;
pub use range_proof::{
    ProvenTreeBuilder, RangeNodes, RangeProof, subtree_keeping_nodes, verify_range,
    verify_range_keeping_nodes,
};

/// One level of the tree: a persistent chunked vector, so clones of the tree share it.
type Level = ChunkedVec<Hash32>;

/// A 32-byte leaf or node hash.
pub type Hash32 = [u8; 32];

/// Number of precomputed zero-subtree hashes: depths `0..=64` cover every `u64` length.
const ZERO_HASH_COUNT: usize = 65;

/// Version byte that opens every encoded [`RangeProof`].
pub const RANGE_PROOF_VERSION: u8 = 1;

/// Levels at least this long are hashed on two threads.
const PARALLEL_LEVEL_LEN: usize = 1 << 16;

/// The level above `lower`: pairs hashed, an odd last node paired with `zero` (the empty
/// subtree of its height). Long levels are hashed in two halves split at an even position, so
/// every pair stays on one side; the result is the same either way.
fn hash_level(lower: &[Hash32], zero: &Hash32) -> Vec<Hash32> {
    if lower.len() < PARALLEL_LEVEL_LEN {
        return hash_pairs(lower, zero);
    }
    map_halves(lower, 2, |_, half| hash_pairs(half, zero))
}

/// `f(0, items)`, computed as `f(0, left) ++ f(left.len(), right)` on two threads when the
/// machine has two cores, with `left` a multiple of `align` items long (`f` is told where its
/// slice starts). `f` must map a slice piecewise, so the output never depends on the split; if
/// the second thread cannot start, everything runs here.
pub(crate) fn map_halves<T: Sync, U: Send>(
    items: &[T],
    align: usize,
    f: impl Fn(usize, &[T]) -> Vec<U> + Sync,
) -> Vec<U> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mid = items
        .len()
        .checked_div(align.saturating_mul(2))
        .unwrap_or(0)
        .saturating_mul(align);
    if cores < 2 || mid == 0 {
        return f(0, items);
    }
    let (left, right) = items.split_at(mid);
    let halves = std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("map-halves".into())
            .spawn_scoped(scope, || f(0, left));
        let mapped_right = f(mid, right);
        let mapped_left = worker.ok().and_then(|w| w.join().ok());
        mapped_left.map(|l| (l, mapped_right))
    });
    match halves {
        Some((mut out, mapped_right)) => {
            out.extend(mapped_right);
            out
        }
        None => f(0, items),
    }
}

/// [`hash_level`] on the calling thread.
fn hash_pairs(lower: &[Hash32], zero: &Hash32) -> Vec<Hash32> {
    let mut upper = Vec::with_capacity(lower.len().div_ceil(2));
    sha256_many::hash_pairs(lower, &mut upper);
    if let [left] = lower.chunks_exact(2).remainder() {
        upper.push(hash_pair(left, zero));
    }
    upper
}

/// `zero_hash(d)` for `d` in `0..ZERO_HASH_COUNT`, computed once per process.
fn zero_hashes() -> &'static [Hash32; ZERO_HASH_COUNT] {
    static ZERO_HASHES: OnceLock<[Hash32; ZERO_HASH_COUNT]> = OnceLock::new();
    ZERO_HASHES.get_or_init(|| {
        let mut table = [[0u8; 32]; ZERO_HASH_COUNT];
        let mut current = [0u8; 32];
        for slot in &mut table {
            *slot = current;
            current = hash_pair(&current, &current);
        }
        table
    })
}

/// Root of an all-zero subtree of the given depth.
fn zero_hash(depth: usize) -> Hash32 {
    if let Some(hash) = zero_hashes().get(depth) {
        return *hash;
    }
    // Unreachable for u64 lengths; computed rather than panicking all the same.
    let mut current = [0u8; 32];
    for _ in 0..depth {
        current = hash_pair(&current, &current);
    }
    current
}

/// `ceil(log2(max(len, 1)))`: the number of levels above the leaves.
fn depth_for_len(len: u64) -> usize {
    match len.saturating_sub(1).checked_ilog2() {
        None => 0,
        // `ilog2` of a u64 is at most 63, so this never saturates.
        Some(log) => usize::try_from(log).map_or(ZERO_HASH_COUNT, |log| log.saturating_add(1)),
    }
}

/// Number of nodes at level `depth` that cover at least one of `len` leaves: `ceil(len / 2^depth)`.
fn level_count(len: u64, depth: usize) -> u64 {
    let Some(last) = len.checked_sub(1) else {
        return 0;
    };
    let shift = u32::try_from(depth).unwrap_or(u32::MAX);
    last.checked_shr(shift).unwrap_or(0).saturating_add(1)
}

/// `sha256(tree_root || len as 32-byte little-endian)`: the [`MerkleTree::root`] of a tree of
/// `len` leaves whose [`MerkleTree::tree_root`] is `tree_root` (a checkpoint proves the
/// pending-deposit queue's leaves against it, its manifest carrying the tree root and length).
pub fn mix_in_length(tree_root: &Hash32, len: u64) -> Hash32 {
    let mut length = [0u8; 32];
    if let Some(prefix) = length.first_chunk_mut::<8>() {
        *prefix = len.to_le_bytes();
    }
    hash_pair(tree_root, &length)
}

/// Converts a position to `usize`, reporting it as out of range if it does not fit.
fn to_usize(index: u64, len: u64) -> Result<usize, MerkleError> {
    usize::try_from(index).map_err(|_| MerkleError::IndexOutOfRange { index, len })
}

/// Checks that `[start, end)` is a non-empty range within `len` leaves.
fn check_range(start: u64, end: u64, len: u64) -> Result<(), MerkleError> {
    if start < end && end <= len {
        Ok(())
    } else {
        Err(MerkleError::InvalidRange { start, end, len })
    }
}

/// Number of hashes in the proof for `[start, end)` of a tree with `len` leaves; the range must
/// be valid.
fn proof_hash_count(len: u64, start: u64, end: u64) -> usize {
    let mut count = 0usize;
    let (mut start, mut end) = (start, end);
    for depth in 0..depth_for_len(len) {
        if start & 1 == 1 {
            count = count.saturating_add(1);
        }
        if end & 1 == 1 && end < level_count(len, depth) {
            count = count.saturating_add(1);
        }
        start >>= 1;
        end = end.div_ceil(2);
    }
    count
}

/// Parent `parent` of level `lower`, whose nodes sit at depth `lower_depth`.
fn parent_hash(lower: &Level, parent: usize, lower_depth: usize) -> Result<Hash32, MerkleError> {
    let left_index = parent
        .checked_mul(2)
        .ok_or(MerkleError::Internal("child position overflows usize"))?;
    let left = lower
        .get(left_index)
        .ok_or(MerkleError::Internal("parent has no left child"))?;
    let right = match lower.get(left_index | 1) {
        Some(right) => *right,
        None => zero_hash(lower_depth),
    };
    Ok(hash_pair(left, &right))
}

/// Stores `node` at `index` of `level`, appending it if `index` is one past the end.
fn write_node(level: &mut Level, index: usize, node: Hash32) -> Result<(), MerkleError> {
    if level.set(index, node) {
        Ok(())
    } else if index == level.len() {
        level.push(node);
        Ok(())
    } else {
        Err(MerkleError::Internal(
            "node written past the end of its level",
        ))
    }
}

/// Incremental binary Merkle tree over position-indexed 32-byte leaves.
///
/// See the module docs for the exact root definition.
#[derive(Clone, PartialEq, Eq)]
pub struct MerkleTree {
    /// `levels[0]` holds the leaves; `levels[d]` holds the `ceil(len / 2^d)` nodes of level `d`
    /// that cover at least one leaf. For a non-empty tree there are `depth + 1` levels and the
    /// last holds exactly the tree root.
    levels: Vec<Level>,
}

impl Default for MerkleTree {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MerkleTree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MerkleTree")
            .field("len", &self.len())
            .field("depth", &self.depth())
            .finish_non_exhaustive()
    }
}

impl MerkleTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self {
            levels: vec![Level::new()],
        }
    }

    /// Builds the tree over `leaves` in one pass, hashing each internal node once (O(n)).
    pub fn from_leaves(leaves: Vec<Hash32>) -> Self {
        let mut levels = vec![leaves];
        let mut depth = 0usize;
        while let Some(lower) = levels.last().filter(|level: &&Vec<Hash32>| level.len() > 1) {
            let upper = hash_level(lower, &zero_hash(depth));
            levels.push(upper);
            depth = depth.saturating_add(1);
        }
        Self {
            levels: levels.into_iter().map(Level::from).collect(),
        }
    }

    /// The tree over `len` leaves from proven ranges that tile `0..len` in order, each given
    /// as its leaf hashes and the nodes its verification computed
    /// ([`verify_range_keeping_nodes`]): nothing is hashed, every node is one a verification
    /// computed (neighbouring ranges share their boundary nodes). Fails when the ranges leave
    /// a node of some level uncovered.
    pub fn from_proven_ranges(
        len: u64,
        ranges: &[(&[Hash32], &RangeNodes)],
    ) -> Result<Self, MerkleError> {
        let mut builder = ProvenTreeBuilder::new(len);
        for (leaves, nodes) in ranges {
            builder.push(leaves, nodes)?;
        }
        builder.finish()
    }

    /// The leaves, in position order.
    fn leaves(&self) -> &Level {
        static EMPTY: Level = Level::EMPTY;
        self.levels.first().unwrap_or(&EMPTY)
    }

    /// Leaf hashes `start..end` (clamped to the length), in order.
    pub fn leaf_range(&self, start: u64, end: u64) -> impl Iterator<Item = &Hash32> + '_ {
        let start = usize::try_from(start).unwrap_or(usize::MAX);
        let end = usize::try_from(end).unwrap_or(usize::MAX);
        self.leaves().range(start, end)
    }

    /// Each stored chunk's address and heap bytes, for accounting shared chunks once.
    pub fn chunk_ptrs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.levels.iter().flat_map(Level::chunk_ptrs)
    }

    /// Heap bytes this tree alone owns however it shares chunks: its level tables.
    pub fn table_bytes(&self) -> usize {
        self.levels
            .iter()
            .map(Level::table_bytes)
            .fold(0, usize::saturating_add)
    }

    /// Number of leaves.
    pub fn len(&self) -> u64 {
        // A `usize` length always fits a `u64` on supported targets.
        u64::try_from(self.leaves().len()).unwrap_or(u64::MAX)
    }

    /// Whether the tree has no leaves.
    pub fn is_empty(&self) -> bool {
        self.leaves().is_empty()
    }

    /// Levels above the leaves: `ceil(log2(max(len, 1)))`.
    pub fn depth(&self) -> usize {
        depth_for_len(self.len())
    }

    /// Leaf at `index`, if there is one.
    pub fn leaf(&self, index: u64) -> Option<Hash32> {
        self.leaves().get(usize::try_from(index).ok()?).copied()
    }

    /// Root of the binary tree over the leaves, before the length is mixed in.
    pub fn tree_root(&self) -> Hash32 {
        match self.levels.last().and_then(|top| top.first()) {
            Some(root) => *root,
            None => zero_hash(0),
        }
    }

    /// The commitment: [`tree_root`](Self::tree_root) with the leaf count mixed in.
    pub fn root(&self) -> Hash32 {
        mix_in_length(&self.tree_root(), self.len())
    }

    /// Appends a leaf and returns its position; O(log n), plus amortised growth of the levels.
    pub fn push(&mut self, leaf: Hash32) -> Result<u64, MerkleError> {
        let index = self.leaves().len();
        let position = u64::try_from(index).map_err(|_| MerkleError::TreeFull)?;
        let new_len = position.checked_add(1).ok_or(MerkleError::TreeFull)?;
        let depth = depth_for_len(new_len);
        while self.levels.len() <= depth {
            self.levels.push(Level::new());
        }
        self.levels
            .first_mut()
            .ok_or(MerkleError::Internal("tree has no leaf level"))?
            .push(leaf);
        self.update_path(index)?;
        Ok(position)
    }

    /// Appends `leaves`, hashing each new or changed internal node once: O(k + log n) for k
    /// leaves, against O(k log n) for k calls to [`push`](Self::push).
    pub fn extend_from_slice(&mut self, leaves: &[Hash32]) -> Result<(), MerkleError> {
        if leaves.is_empty() {
            return Ok(());
        }
        let old_len = self.leaves().len();
        let new_len = old_len
            .checked_add(leaves.len())
            .and_then(|len| u64::try_from(len).ok())
            .ok_or(MerkleError::TreeFull)?;
        let depth = depth_for_len(new_len);
        while self.levels.len() <= depth {
            self.levels.push(Level::new());
        }

        let mut levels = self.levels.iter_mut();
        let stored = levels
            .next()
            .ok_or(MerkleError::Internal("tree has no leaf level"))?;
        stored.extend_from_slice(leaves);
        let mut lower: &Level = stored;
        let mut first_changed = old_len;
        for (lower_depth, upper) in levels.enumerate() {
            let first_parent = first_changed >> 1;
            for parent in first_parent..lower.len().div_ceil(2) {
                let node = parent_hash(lower, parent, lower_depth)?;
                write_node(upper, parent, node)?;
            }
            lower = upper;
            first_changed = first_parent;
        }
        Ok(())
    }

    /// Drops the leaves at positions `new_len` and up, leaving the tree identical (every level,
    /// hence the root) to [`from_leaves`](Self::from_leaves) of the leaves that remain.
    ///
    /// Chain reorganisations use it to roll the tree back to an earlier length. Costs the
    /// `depth` hashes of the new last leaf's path; the levels keep their allocations for the
    /// re-growth that usually follows (levels above the new depth are freed). Truncating to the
    /// current length changes nothing; a `new_len` past it is an error and changes nothing.
    pub fn truncate(&mut self, new_len: u64) -> Result<(), MerkleError> {
        let len = self.len();
        if new_len > len {
            return Err(MerkleError::TruncateBeyondLen { new_len, len });
        }
        if new_len == len {
            return Ok(());
        }
        let depth = depth_for_len(new_len);
        self.levels.truncate(depth.saturating_add(1));
        for (level_depth, level) in self.levels.iter_mut().enumerate() {
            // At most the current level length, so it fits `usize`.
            let count = usize::try_from(level_count(new_len, level_depth))
                .map_err(|_| MerkleError::Internal("level length does not fit usize"))?;
            level.truncate(count);
        }
        match new_len.checked_sub(1) {
            // Only the last node of each level covered dropped leaves: the new last leaf's path.
            Some(last) => self.update_path(to_usize(last, new_len)?),
            None => Ok(()),
        }
    }

    /// Replaces the leaf at `index`; O(log n).
    pub fn set(&mut self, index: u64, leaf: Hash32) -> Result<(), MerkleError> {
        let len = self.len();
        let position = to_usize(index, len)?;
        let slot = self
            .levels
            .first_mut()
            .and_then(|leaves| leaves.get_mut(position))
            .ok_or(MerkleError::IndexOutOfRange { index, len })?;
        *slot = leaf;
        self.update_path(position)
    }

    /// Replaces several leaves, recomputing each changed internal node once.
    ///
    /// All positions are checked before anything changes, so on error the tree is untouched.
    /// If a position appears more than once, its last value wins.
    pub fn set_many(&mut self, updates: &[(u64, Hash32)]) -> Result<(), MerkleError> {
        let len = self.len();
        let mut dirty = Vec::with_capacity(updates.len());
        for &(index, _) in updates {
            let position = to_usize(index, len)?;
            if position >= self.leaves().len() {
                return Err(MerkleError::IndexOutOfRange { index, len });
            }
            dirty.push(position);
        }

        let mut levels = self.levels.iter_mut();
        let leaves = levels
            .next()
            .ok_or(MerkleError::Internal("tree has no leaf level"))?;
        for (&position, &(index, leaf)) in dirty.iter().zip(updates) {
            let slot = leaves
                .get_mut(position)
                .ok_or(MerkleError::IndexOutOfRange { index, len })?;
            *slot = leaf;
        }
        dirty.sort_unstable();
        dirty.dedup();

        let mut lower: &Level = leaves;
        for (lower_depth, upper) in levels.enumerate() {
            for position in &mut dirty {
                *position >>= 1;
            }
            dirty.dedup();
            for &parent in &dirty {
                let node = parent_hash(lower, parent, lower_depth)?;
                write_node(upper, parent, node)?;
            }
            lower = upper;
        }
        Ok(())
    }

    /// The root the tree would have after replacing the leaves in `updates` and appending
    /// `appended`, computed without changing the tree: O(k log n) hashes for k changed leaves.
    ///
    /// Block import uses it to check a block's claimed state root before anything is written.
    /// If a position appears more than once in `updates`, its last value wins.
    pub fn root_with(
        &self,
        updates: &[(u64, Hash32)],
        appended: &[Hash32],
    ) -> Result<Hash32, MerkleError> {
        let len = self.len();
        let added = u64::try_from(appended.len()).map_err(|_| MerkleError::TreeFull)?;
        let new_len = len.checked_add(added).ok_or(MerkleError::TreeFull)?;
        let mut dirty: std::collections::BTreeMap<u64, Hash32> = std::collections::BTreeMap::new();
        for &(index, leaf) in updates {
            if index >= len {
                return Err(MerkleError::IndexOutOfRange { index, len });
            }
            dirty.insert(index, leaf);
        }
        for (offset, leaf) in (0u64..).zip(appended) {
            dirty.insert(len.checked_add(offset).ok_or(MerkleError::TreeFull)?, *leaf);
        }
        if dirty.is_empty() {
            return Ok(self.root());
        }
        // Walk up level by level; a clean node is read from the tree if it covers old leaves and
        // is an empty subtree otherwise (nodes covering any new leaf are dirty by construction).
        for depth in 0..depth_for_len(new_len) {
            let mut parents = std::collections::BTreeMap::new();
            for &index in dirty.keys() {
                let parent = index >> 1;
                if parents.contains_key(&parent) {
                    continue;
                }
                let left_index = parent << 1;
                let right_index = left_index | 1;
                let left = self.overlay_node(&dirty, depth, left_index);
                let right = self.overlay_node(&dirty, depth, right_index);
                parents.insert(parent, hash_pair(&left, &right));
            }
            dirty = parents;
        }
        let top = dirty.get(&0).copied().unwrap_or_else(|| self.tree_root());
        Ok(mix_in_length(&top, new_len))
    }

    /// Node `index` at level `depth` as seen through `dirty` (the overlay of that level).
    fn overlay_node(
        &self,
        dirty: &std::collections::BTreeMap<u64, Hash32>,
        depth: usize,
        index: u64,
    ) -> Hash32 {
        if let Some(node) = dirty.get(&index) {
            return *node;
        }
        usize::try_from(index)
            .ok()
            .and_then(|i| self.levels.get(depth)?.get(i))
            .copied()
            .unwrap_or_else(|| zero_hash(depth))
    }

    /// Recomputes the ancestors of leaf `index`, from the bottom up.
    fn update_path(&mut self, index: usize) -> Result<(), MerkleError> {
        let mut levels = self.levels.iter_mut();
        let mut lower: &Level = levels
            .next()
            .ok_or(MerkleError::Internal("tree has no leaf level"))?;
        let mut child = index;
        for (lower_depth, upper) in levels.enumerate() {
            let parent = child >> 1;
            let node = parent_hash(lower, parent, lower_depth)?;
            write_node(upper, parent, node)?;
            lower = upper;
            child = parent;
        }
        Ok(())
    }

    /// Stored node `index` at level `depth` (level 0 holds the leaves): the root of the
    /// subtree over leaves `[index << depth, (index + 1) << depth)`, O(1), nothing hashed
    /// (checkpoint-v3 lists these for its chunks).
    pub fn node(&self, depth: usize, index: u64) -> Result<Hash32, MerkleError> {
        usize::try_from(index)
            .ok()
            .and_then(|index| self.levels.get(depth)?.get(index))
            .copied()
            .ok_or(MerkleError::Internal("proof sibling is not stored"))
    }

    /// Proof that leaves `[start, end)` are in this tree; at most `2 * depth` hashes.
    pub fn range_proof(&self, start: u64, end: u64) -> Result<RangeProof, MerkleError> {
        let len = self.len();
        check_range(start, end, len)?;
        let mut hashes = Vec::with_capacity(proof_hash_count(len, start, end));
        let (mut start, mut end) = (start, end);
        for depth in 0..depth_for_len(len) {
            if start & 1 == 1 {
                hashes.push(self.node(depth, start & !1)?);
            }
            if end & 1 == 1 && end < level_count(len, depth) {
                hashes.push(self.node(depth, end)?);
            }
            start >>= 1;
            end = end.div_ceil(2);
        }
        Ok(RangeProof { len, hashes })
    }
}

#[cfg(test)]
mod tests;
