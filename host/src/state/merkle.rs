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

use super::chunked::ChunkedVec;

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
    let pairs = lower.chunks_exact(2);
    let last = pairs.remainder();
    for pair in pairs {
        if let [left, right] = pair {
            upper.push(hash_pair(left, right));
        }
    }
    if let [left] = last {
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

/// Why a Merkle tree operation or a proof check failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MerkleError {
    /// A leaf position at or past the number of leaves.
    IndexOutOfRange {
        /// The position asked for.
        index: u64,
        /// Number of leaves in the tree.
        len: u64,
    },
    /// A leaf range that is empty, reversed, overflows, or ends past the number of leaves.
    InvalidRange {
        /// First position of the range.
        start: u64,
        /// One past the last position of the range.
        end: u64,
        /// Number of leaves in the tree.
        len: u64,
    },
    /// The tree already holds as many leaves as a `u64` position can address.
    TreeFull,
    /// A proof holds a different number of hashes than its range and tree length require.
    ProofHashCount {
        /// Hashes required by the range and the tree length.
        expected: usize,
        /// Hashes the proof holds.
        actual: usize,
    },
    /// The root recomputed from the leaves and the proof is not the expected root.
    RootMismatch,
    /// Encoded proof bytes end inside a field.
    ProofTruncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the input.
        available: usize,
    },
    /// Encoded proof bytes start with a version this code does not know.
    UnsupportedProofVersion {
        /// The version byte found.
        version: u8,
    },
    /// An encoded proof claims more hashes than any range of its tree can need.
    ProofTooManyHashes {
        /// Hashes claimed.
        count: u64,
        /// Most hashes a proof over a tree of this length can hold.
        max: u64,
    },
    /// A truncation to more leaves than the tree holds.
    TruncateBeyondLen {
        /// The length asked for.
        new_len: u64,
        /// Number of leaves in the tree.
        len: u64,
    },
    /// An encoded proof is for a tree with no leaves, which has no non-empty range.
    ProofEmptyTree,
    /// Encoded proof bytes continue past the last hash.
    ProofTrailingBytes {
        /// Number of unread bytes.
        extra: usize,
    },
    /// An internal invariant of the tree was broken; this is a bug in this module.
    Internal(&'static str),
}

impl fmt::Display for MerkleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IndexOutOfRange { index, len } => {
                write!(
                    f,
                    "leaf index {index} is out of range for a tree of {len} leaves"
                )
            }
            Self::InvalidRange { start, end, len } => write!(
                f,
                "leaf range [{start}, {end}) is not a non-empty range within {len} leaves"
            ),
            Self::TreeFull => f.write_str("the Merkle tree cannot hold more leaves"),
            Self::ProofHashCount { expected, actual } => write!(
                f,
                "range proof holds {actual} hashes but the range and tree length need {expected}"
            ),
            Self::RootMismatch => f.write_str("range proof does not lead to the expected root"),
            Self::ProofTruncated {
                field,
                needed,
                available,
            } => write!(
                f,
                "range proof bytes truncated in field `{field}`: need {needed} bytes, {available} left"
            ),
            Self::UnsupportedProofVersion { version } => write!(
                f,
                "range proof version {version} is not supported (expected {RANGE_PROOF_VERSION})"
            ),
            Self::ProofTooManyHashes { count, max } => write!(
                f,
                "range proof claims {count} hashes but a proof over its tree holds at most {max}"
            ),
            Self::TruncateBeyondLen { new_len, len } => write!(
                f,
                "cannot truncate a tree of {len} leaves to {new_len} leaves"
            ),
            Self::ProofEmptyTree => f.write_str("range proof is for an empty tree"),
            Self::ProofTrailingBytes { extra } => {
                write!(
                    f,
                    "range proof bytes have {extra} unexpected trailing bytes"
                )
            }
            Self::Internal(what) => write!(f, "Merkle tree invariant broken (bug): {what}"),
        }
    }
}

impl std::error::Error for MerkleError {}

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

/// Sibling hashes that prove a contiguous range of leaves against a [`MerkleTree::root`].
///
/// Per level, from the leaves up: the sibling left of the range if the range starts at a right
/// child, then the sibling right of the range if the range ends at a left child and that sibling
/// covers any leaf. Only hashes the verifier cannot derive from the tree length are included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeProof {
    /// Number of leaves in the tree the proof was made from.
    len: u64,
    /// Sibling hashes, in the order above.
    hashes: Vec<Hash32>,
}

impl RangeProof {
    /// Length of the encoding header: version (1) + tree length (8) + hash count (4).
    const HEADER_LEN: usize = 13;

    /// Number of leaves in the tree the proof was made from.
    pub fn tree_len(&self) -> u64 {
        self.len
    }

    /// The sibling hashes.
    pub fn hashes(&self) -> &[Hash32] {
        &self.hashes
    }

    /// Canonical encoding: version byte, tree length (u64 LE), hash count (u32 LE), hashes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(
            self.hashes
                .len()
                .saturating_mul(32)
                .saturating_add(Self::HEADER_LEN),
        );
        bytes.push(RANGE_PROOF_VERSION);
        bytes.extend_from_slice(&self.len.to_le_bytes());
        // Proofs are built by `range_proof` or `from_bytes`, both capped at 128 hashes.
        let count = u32::try_from(self.hashes.len()).unwrap_or(u32::MAX);
        bytes.extend_from_slice(&count.to_le_bytes());
        for hash in &self.hashes {
            bytes.extend_from_slice(hash);
        }
        bytes
    }

    /// Decodes [`to_bytes`](Self::to_bytes) output, rejecting anything that is not canonical.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, MerkleError> {
        let (&version, rest) = bytes.split_first().ok_or(MerkleError::ProofTruncated {
            field: "version",
            needed: 1,
            available: 0,
        })?;
        if version != RANGE_PROOF_VERSION {
            return Err(MerkleError::UnsupportedProofVersion { version });
        }
        let (len, rest) = rest
            .split_first_chunk::<8>()
            .ok_or(MerkleError::ProofTruncated {
                field: "tree length",
                needed: 8,
                available: rest.len(),
            })?;
        let len = u64::from_le_bytes(*len);
        let (count, rest) = rest
            .split_first_chunk::<4>()
            .ok_or(MerkleError::ProofTruncated {
                field: "hash count",
                needed: 4,
                available: rest.len(),
            })?;
        let count = u32::from_le_bytes(*count);
        if len == 0 {
            return Err(MerkleError::ProofEmptyTree);
        }
        let max = u64::try_from(depth_for_len(len))
            .unwrap_or(u64::MAX)
            .saturating_mul(2);
        if u64::from(count) > max {
            return Err(MerkleError::ProofTooManyHashes {
                count: u64::from(count),
                max,
            });
        }
        let count = usize::try_from(count).map_err(|_| MerkleError::ProofTooManyHashes {
            count: u64::from(count),
            max,
        })?;
        let (hashes, extra) = rest.as_chunks::<32>();
        if hashes.len() < count {
            return Err(MerkleError::ProofTruncated {
                field: "hashes",
                needed: count.saturating_mul(32),
                available: rest.len(),
            });
        }
        if hashes.len() > count || !extra.is_empty() {
            return Err(MerkleError::ProofTrailingBytes {
                extra: rest.len().saturating_sub(count.saturating_mul(32)),
            });
        }
        Ok(Self {
            len,
            hashes: hashes.to_vec(),
        })
    }
}

/// Checks that `leaves` sit at positions `start..start + leaves.len()` of the tree whose
/// [`MerkleTree::root`] is `root`, using `proof`.
pub fn verify_range(
    root: &Hash32,
    start: u64,
    leaves: &[Hash32],
    proof: &RangeProof,
) -> Result<(), MerkleError> {
    verify_range_keeping_nodes(root, start, leaves, proof).map(drop)
}

/// The inner nodes a successful [`verify_range_keeping_nodes`] computed for a range that
/// starts at leaf `start`: `rows[d]` holds level `d + 1`'s nodes from position
/// `start >> (d + 1)` on. Each is the tree's node at its position, since the range proved
/// against the root; [`MerkleTree::from_proven_ranges`] builds a tree from them unhashed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeNodes {
    start: u64,
    rows: Vec<Vec<Hash32>>,
}

/// [`MerkleTree::from_proven_ranges`] one range at a time, in leaf order: a restore adds each
/// verified chunk's leaf hashes and nodes as it arrives and drops the chunk's copy at once.
#[derive(Debug, Clone)]
pub struct ProvenTreeBuilder {
    len: u64,
    levels: Vec<Vec<Hash32>>,
}

impl ProvenTreeBuilder {
    /// A builder of the tree over `len` leaves. Nothing is reserved for them: `len` may come
    /// from a peer, and the levels grow with the ranges actually added.
    pub fn new(len: u64) -> Self {
        let levels = if len == 0 {
            Vec::new()
        } else {
            vec![Vec::new(); depth_for_len(len).saturating_add(1)]
        };
        Self { len, levels }
    }

    /// Adds the range whose leaf hashes are `leaves` and whose verification computed `nodes`;
    /// it must start where the ranges added so far end (fails on a gap).
    pub fn push(&mut self, leaves: &[Hash32], nodes: &RangeNodes) -> Result<(), MerkleError> {
        let uncovered = || MerkleError::Internal("the proven ranges do not cover the tree");
        for (depth, level) in self.levels.iter_mut().enumerate() {
            let row: &[Hash32] = match depth.checked_sub(1) {
                None => leaves,
                Some(d) => nodes.rows.get(d).map_or(&[], Vec::as_slice),
            };
            let shift = u32::try_from(depth).map_err(|_| uncovered())?;
            let first = nodes.start.checked_shr(shift).unwrap_or(0);
            let have = u64::try_from(level.len()).map_err(|_| uncovered())?;
            let skip = have
                .checked_sub(first)
                .and_then(|skip| usize::try_from(skip).ok())
                .ok_or_else(uncovered)?;
            if let Some(rest) = row.get(skip..) {
                level.extend_from_slice(rest);
            }
        }
        Ok(())
    }

    /// The tree; fails when the ranges added leave a node of some level uncovered.
    pub fn finish(self) -> Result<MerkleTree, MerkleError> {
        if self.len == 0 {
            return Ok(MerkleTree::from_leaves(Vec::new()));
        }
        let mut levels = Vec::with_capacity(self.levels.len());
        for (depth, level) in self.levels.into_iter().enumerate() {
            let want = level_count(self.len, depth);
            if u64::try_from(level.len()).ok() != Some(want) {
                return Err(MerkleError::Internal(
                    "the proven ranges do not cover the tree",
                ));
            }
            levels.push(Level::from(level));
        }
        Ok(MerkleTree { levels })
    }
}

/// [`verify_range`], returning the nodes it computed on the way to the root.
pub fn verify_range_keeping_nodes(
    root: &Hash32,
    start: u64,
    leaves: &[Hash32],
    proof: &RangeProof,
) -> Result<RangeNodes, MerkleError> {
    let len = proof.len;
    let count = u64::try_from(leaves.len()).map_err(|_| MerkleError::InvalidRange {
        start,
        end: u64::MAX,
        len,
    })?;
    let end = start.checked_add(count).ok_or(MerkleError::InvalidRange {
        start,
        end: u64::MAX,
        len,
    })?;
    check_range(start, end, len)?;
    let expected = proof_hash_count(len, start, end);
    if proof.hashes.len() != expected {
        return Err(MerkleError::ProofHashCount {
            expected,
            actual: proof.hashes.len(),
        });
    }

    let mut siblings = proof.hashes.iter().copied();
    let mut next_sibling = || {
        siblings
            .next()
            .ok_or(MerkleError::Internal("proof hash count checked"))
    };
    let first = start;
    let mut rows: Vec<Vec<Hash32>> = Vec::with_capacity(depth_for_len(len));
    let (mut start, mut end) = (start, end);
    for depth in 0..depth_for_len(len) {
        let nodes = rows.last().map_or(leaves, Vec::as_slice);
        let left = if start & 1 == 1 {
            Some(next_sibling()?)
        } else {
            None
        };
        let right = if end & 1 == 0 {
            None
        } else if end < level_count(len, depth) {
            Some(next_sibling()?)
        } else {
            Some(zero_hash(depth))
        };
        let mut row = left.into_iter().chain(nodes.iter().copied()).chain(right);
        let mut upper = Vec::with_capacity(nodes.len().div_ceil(2).saturating_add(1));
        while let Some(first) = row.next() {
            let second = row
                .next()
                .ok_or(MerkleError::Internal("range widened to an odd width"))?;
            upper.push(hash_pair(&first, &second));
        }
        rows.push(upper);
        start >>= 1;
        end = end.div_ceil(2);
    }

    match rows.last().map_or(leaves, Vec::as_slice) {
        [tree_root] if mix_in_length(tree_root, len) == *root => {
            Ok(RangeNodes { start: first, rows })
        }
        [_] => Err(MerkleError::RootMismatch),
        _ => Err(MerkleError::Internal("range did not reduce to one root")),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn root_with_matches_applying_the_changes() {
        for len in [0usize, 1, 2, 3, 5, 8, 9, 33] {
            let leaves: Vec<Hash32> = (0..len).map(|i| [i as u8; 32]).collect();
            let tree = MerkleTree::from_leaves(leaves.clone());
            for appended in [0usize, 1, 3, 9] {
                let new: Vec<Hash32> = (0..appended).map(|i| [200 - i as u8; 32]).collect();
                let updates: Vec<(u64, Hash32)> =
                    (0..len).step_by(3).map(|i| (i as u64, [77; 32])).collect();
                let predicted = tree.root_with(&updates, &new).unwrap();
                let mut applied = tree.clone();
                applied.set_many(&updates).unwrap();
                applied.extend_from_slice(&new).unwrap();
                assert_eq!(predicted, applied.root(), "len {len}, appended {appended}");
            }
        }
        let tree = MerkleTree::from_leaves(vec![[1; 32]]);
        assert!(tree.root_with(&[(1, [0; 32])], &[]).is_err());
    }
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use sha2::{Digest, Sha256};
    use std::time::Instant;

    fn h(left: &Hash32, right: &Hash32) -> Hash32 {
        let mut buf = [0u8; 64];
        buf[..32].copy_from_slice(left);
        buf[32..].copy_from_slice(right);
        Sha256::digest(buf).into()
    }

    fn len_leaf(len: u64) -> Hash32 {
        let mut out = [0u8; 32];
        out[..8].copy_from_slice(&len.to_le_bytes());
        out
    }

    fn leaf(i: u64) -> Hash32 {
        let mut out = [0xA5u8; 32];
        out[..8].copy_from_slice(&i.to_le_bytes());
        out
    }

    /// Independent reference: pad to a power of two with zero leaves and hash up.
    fn naive_root(leaves: &[Hash32]) -> Hash32 {
        let width = leaves.len().max(1).next_power_of_two();
        let mut level = leaves.to_vec();
        level.resize(width, [0u8; 32]);
        while level.len() > 1 {
            level = level.chunks(2).map(|p| h(&p[0], &p[1])).collect();
        }
        h(&level[0], &len_leaf(leaves.len() as u64))
    }

    fn pushed(leaves: &[Hash32]) -> MerkleTree {
        let mut tree = MerkleTree::new();
        for (i, l) in leaves.iter().enumerate() {
            assert_eq!(tree.push(*l).unwrap(), i as u64);
        }
        tree
    }

    #[test]
    fn zero_hashes_chain() {
        let z = zero_hashes();
        assert_eq!(z[0], [0u8; 32]);
        for d in 0..64 {
            assert_eq!(z[d + 1], h(&z[d], &z[d]));
        }
        let z65 = h(&z[64], &z[64]);
        assert_eq!(zero_hash(65), z65);
        assert_eq!(zero_hash(66), h(&z65, &z65));
    }

    #[test]
    fn known_small_vectors() {
        let z0 = [0u8; 32];
        let z1 = h(&z0, &z0);
        let (a, b, c, d, e) = (leaf(1), leaf(2), leaf(3), leaf(4), leaf(5));

        assert_eq!(MerkleTree::new().root(), h(&z0, &len_leaf(0)));
        assert_eq!(MerkleTree::from_leaves(vec![a]).root(), h(&a, &len_leaf(1)));
        assert_eq!(
            MerkleTree::from_leaves(vec![a, b]).root(),
            h(&h(&a, &b), &len_leaf(2))
        );
        assert_eq!(
            MerkleTree::from_leaves(vec![a, b, c]).root(),
            h(&h(&h(&a, &b), &h(&c, &z0)), &len_leaf(3))
        );
        assert_eq!(
            MerkleTree::from_leaves(vec![a, b, c, d, e]).root(),
            h(
                &h(&h(&h(&a, &b), &h(&c, &d)), &h(&h(&e, &z0), &z1)),
                &len_leaf(5)
            )
        );
        // A zero leaf is indistinguishable from padding in the tree root, but not in the root.
        assert_eq!(
            MerkleTree::from_leaves(vec![a, b, c, z0]).tree_root(),
            MerkleTree::from_leaves(vec![a, b, c]).tree_root()
        );
        assert_ne!(
            MerkleTree::from_leaves(vec![a, b, c, z0]).root(),
            MerkleTree::from_leaves(vec![a, b, c]).root()
        );
    }

    #[test]
    fn levels_long_enough_to_hash_on_two_threads_give_the_serial_tree() {
        // Odd and even lengths around the threshold: the halves split at an even position and
        // only the right one may end in a lone node.
        for n in [PARALLEL_LEVEL_LEN + 1, PARALLEL_LEVEL_LEN + 3] {
            let leaves: Vec<Hash32> = (0..n as u64).map(leaf).collect();
            let built = MerkleTree::from_leaves(leaves.clone());
            assert_eq!(built.root(), naive_root(&leaves), "len {n}");
        }
    }

    #[test]
    fn map_halves_is_the_serial_map_whatever_the_length_and_alignment() {
        for len in [0usize, 1, 2, 3, 4, 5, 17, 1000, 1001] {
            let items: Vec<u64> = (0..len as u64).collect();
            for align in [1usize, 2, 3, 8] {
                // A map that depends on the offset, so a wrong offset shows.
                let mapped = map_halves(&items, align, |at, half| {
                    half.iter()
                        .enumerate()
                        .map(|(i, x)| (x * 10, (at + i) as u64))
                        .collect()
                });
                let serial: Vec<(u64, u64)> = items.iter().map(|x| (x * 10, *x)).collect();
                assert_eq!(mapped, serial, "len {len} align {align}");
            }
        }
        // Pairs never straddle the split.
        let items: Vec<u64> = (0..11).collect();
        let sums = map_halves(&items, 2, |_, half| {
            half.chunks(2).map(|p| p.iter().sum::<u64>()).collect()
        });
        assert_eq!(sums, vec![1, 5, 9, 13, 17, 10]);
    }

    #[test]
    fn push_matches_from_leaves_for_all_small_lengths() {
        let leaves: Vec<Hash32> = (0..=70).map(leaf).collect();
        let mut tree = MerkleTree::new();
        for n in 0..=70usize {
            let built = MerkleTree::from_leaves(leaves[..n].to_vec());
            assert_eq!(tree.root(), built.root(), "len {n}");
            assert_eq!(tree, built, "len {n}");
            assert_eq!(tree.root(), naive_root(&leaves[..n]), "len {n}");
            for split in [0, n / 3, n] {
                let mut extended = MerkleTree::from_leaves(leaves[..split].to_vec());
                extended.extend_from_slice(&leaves[split..n]).unwrap();
                assert_eq!(extended, built, "len {n} split {split}");
            }
            assert_eq!(tree.len(), n as u64);
            assert_eq!(
                tree.depth(),
                (n.max(1) as u64).next_power_of_two().trailing_zeros() as usize
            );
            if n < 70 {
                tree.push(leaves[n]).unwrap();
            }
        }
    }

    #[test]
    fn truncate_to_every_length_matches_from_leaves() {
        let leaves: Vec<Hash32> = (0..=70).map(leaf).collect();
        let full = MerkleTree::from_leaves(leaves.clone());
        for n in 0..=70usize {
            let mut tree = full.clone();
            tree.truncate(n as u64).unwrap();
            let built = MerkleTree::from_leaves(leaves[..n].to_vec());
            assert_eq!(tree.levels, built.levels, "len {n}");
            assert_eq!(tree.root(), naive_root(&leaves[..n]), "len {n}");
            // Growing back gives the original tree.
            tree.extend_from_slice(&leaves[n..]).unwrap();
            assert_eq!(tree, full, "len {n}");
        }
        let mut tree = full.clone();
        assert_eq!(
            tree.truncate(72),
            Err(MerkleError::TruncateBeyondLen {
                new_len: 72,
                len: 71
            })
        );
        assert_eq!(
            tree.truncate(u64::MAX),
            Err(MerkleError::TruncateBeyondLen {
                new_len: u64::MAX,
                len: 71
            })
        );
        tree.truncate(71).unwrap();
        assert_eq!(tree, full);
        tree.truncate(0).unwrap();
        assert_eq!(tree, MerkleTree::new());
        assert_eq!(tree.root(), MerkleTree::new().root());
        tree.truncate(0).unwrap();
        assert!(MerkleTree::new().truncate(1).is_err());
        assert!(
            MerkleError::TruncateBeyondLen { new_len: 3, len: 2 }
                .to_string()
                .contains("truncate")
        );
    }

    #[test]
    fn out_of_range_updates_are_rejected_without_change() {
        let mut tree = MerkleTree::from_leaves((0..5).map(leaf).collect());
        let before = tree.clone();
        assert_eq!(
            tree.set(5, leaf(9)),
            Err(MerkleError::IndexOutOfRange { index: 5, len: 5 })
        );
        assert_eq!(
            tree.set_many(&[(1, leaf(9)), (7, leaf(9))]),
            Err(MerkleError::IndexOutOfRange { index: 7, len: 5 })
        );
        assert_eq!(tree, before);
        assert_eq!(tree.leaf(4), Some(leaf(4)));
        assert_eq!(tree.leaf(5), None);
        tree.set_many(&[(1, leaf(8)), (1, leaf(9))]).unwrap();
        assert_eq!(tree.leaf(1), Some(leaf(9)));
        assert_eq!(
            MerkleTree::new().set(0, leaf(0)),
            Err(MerkleError::IndexOutOfRange { index: 0, len: 0 })
        );
    }

    #[test]
    fn invalid_ranges_are_rejected() {
        let tree = MerkleTree::from_leaves((0..5).map(leaf).collect());
        for (s, e) in [(0, 0), (3, 2), (0, 6), (5, 6), (u64::MAX, 0)] {
            assert_eq!(
                tree.range_proof(s, e),
                Err(MerkleError::InvalidRange {
                    start: s,
                    end: e,
                    len: 5
                })
            );
        }
        assert!(MerkleTree::new().range_proof(0, 1).is_err());
        let proof = tree.range_proof(0, 5).unwrap();
        assert!(verify_range(&tree.root(), 0, &[], &proof).is_err());
        assert!(verify_range(&tree.root(), u64::MAX, &[leaf(0)], &proof).is_err());
    }

    #[test]
    fn proof_sizes_are_bounded() {
        for len in 1..=70u64 {
            let tree = MerkleTree::from_leaves((0..len).map(leaf).collect());
            for s in 0..len {
                for e in s + 1..=len {
                    let p = tree.range_proof(s, e).unwrap();
                    assert!(p.hashes().len() <= 2 * tree.depth());
                    let leaves: Vec<_> = (s..e).map(leaf).collect();
                    verify_range(&tree.root(), s, &leaves, &p).unwrap();
                }
            }
            // The full range needs no siblings at all.
            assert!(tree.range_proof(0, len).unwrap().hashes().is_empty());
        }
    }

    #[test]
    fn from_bytes_reports_what_is_wrong() {
        let tree = MerkleTree::from_leaves((0..10).map(leaf).collect());
        let bytes = tree.range_proof(3, 7).unwrap().to_bytes();
        assert!(matches!(
            RangeProof::from_bytes(&[]),
            Err(MerkleError::ProofTruncated {
                field: "version",
                ..
            })
        ));
        assert_eq!(
            RangeProof::from_bytes(&[2]),
            Err(MerkleError::UnsupportedProofVersion { version: 2 })
        );
        assert!(matches!(
            RangeProof::from_bytes(&bytes[..5]),
            Err(MerkleError::ProofTruncated {
                field: "tree length",
                ..
            })
        ));
        assert!(matches!(
            RangeProof::from_bytes(&bytes[..11]),
            Err(MerkleError::ProofTruncated {
                field: "hash count",
                ..
            })
        ));
        assert!(matches!(
            RangeProof::from_bytes(&bytes[..bytes.len() - 1]),
            Err(MerkleError::ProofTruncated {
                field: "hashes",
                ..
            })
        ));
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(
            RangeProof::from_bytes(&long),
            Err(MerkleError::ProofTrailingBytes { extra: 1 })
        );
        let mut empty_tree = bytes.clone();
        empty_tree[1..9].fill(0);
        assert_eq!(
            RangeProof::from_bytes(&empty_tree),
            Err(MerkleError::ProofEmptyTree)
        );
        let mut huge = bytes.clone();
        huge[9..13].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            RangeProof::from_bytes(&huge),
            Err(MerkleError::ProofTooManyHashes {
                count: u32::MAX as u64,
                max: 8
            })
        );
        for n in 0..bytes.len() {
            assert!(RangeProof::from_bytes(&bytes[..n]).is_err(), "prefix {n}");
        }
        // Every error renders a message.
        assert!(MerkleError::RootMismatch.to_string().contains("root"));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(Hash32),
        Extend(Vec<Hash32>),
        Set(usize, Hash32),
        SetMany(Vec<(usize, Hash32)>),
        Truncate(Cut),
    }

    /// Where a truncation cuts, relative to the current length.
    #[derive(Debug, Clone, Copy)]
    enum Cut {
        /// To `seed % (len + 1)`.
        Within(usize),
        ToZero,
        /// To the current length: a no-op.
        ToLen,
        /// To `len + 1 + extra`: an error.
        Past(u64),
    }

    fn cut() -> impl Strategy<Value = Cut> {
        prop_oneof![
            6 => any::<usize>().prop_map(Cut::Within),
            1 => Just(Cut::ToZero),
            1 => Just(Cut::ToLen),
            1 => (0u64..3).prop_map(Cut::Past),
        ]
    }

    /// Applies `cut` to both `tree` and `model`, checking the outcome.
    fn apply_cut(
        tree: &mut MerkleTree,
        model: &mut Vec<Hash32>,
        cut: Cut,
    ) -> Result<(), TestCaseError> {
        let len = model.len();
        let new_len = match cut {
            Cut::Within(seed) => seed % (len + 1),
            Cut::ToZero => 0,
            Cut::ToLen => len,
            Cut::Past(extra) => {
                let before = tree.clone();
                let new_len = len as u64 + 1 + extra;
                prop_assert_eq!(
                    tree.truncate(new_len),
                    Err(MerkleError::TruncateBeyondLen {
                        new_len,
                        len: len as u64
                    })
                );
                prop_assert_eq!(&*tree, &before);
                return Ok(());
            }
        };
        tree.truncate(new_len as u64).unwrap();
        model.truncate(new_len);
        Ok(())
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            any::<Hash32>().prop_map(Op::Push),
            vec(any::<Hash32>(), 0..40).prop_map(Op::Extend),
            (any::<usize>(), any::<Hash32>()).prop_map(|(i, l)| Op::Set(i, l)),
            vec((any::<usize>(), any::<Hash32>()), 0..20).prop_map(Op::SetMany),
            cut().prop_map(Op::Truncate),
        ]
    }

    /// A non-empty range inside `len` from two seeds.
    fn range(len: usize, a: usize, b: usize) -> (u64, u64) {
        let start = a % len;
        let end = start + 1 + b % (len - start);
        (start as u64, end as u64)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn incremental_updates_match_rebuild(
            initial in vec(any::<Hash32>(), 0..90),
            ops in vec(op(), 0..30),
        ) {
            let mut tree = MerkleTree::from_leaves(initial.clone());
            let mut model = initial;
            for op in ops {
                match op {
                    Op::Push(l) => {
                        prop_assert_eq!(tree.push(l).unwrap(), model.len() as u64);
                        model.push(l);
                    }
                    Op::Extend(leaves) => {
                        tree.extend_from_slice(&leaves).unwrap();
                        model.extend_from_slice(&leaves);
                    }
                    Op::Set(i, l) if model.is_empty() => {
                        prop_assert!(tree.set(i as u64, l).is_err());
                    }
                    Op::Set(i, l) => {
                        let i = i % model.len();
                        tree.set(i as u64, l).unwrap();
                        model[i] = l;
                    }
                    Op::SetMany(updates) => {
                        if model.is_empty() {
                            prop_assert_eq!(tree.set_many(&[]), Ok(()));
                            continue;
                        }
                        let updates: Vec<(u64, Hash32)> = updates
                            .into_iter()
                            .map(|(i, l)| ((i % model.len()) as u64, l))
                            .collect();
                        tree.set_many(&updates).unwrap();
                        for (i, l) in updates {
                            model[i as usize] = l;
                        }
                    }
                    Op::Truncate(cut) => apply_cut(&mut tree, &mut model, cut)?,
                }
                let rebuilt = MerkleTree::from_leaves(model.clone());
                prop_assert_eq!(tree.root(), rebuilt.root());
                prop_assert_eq!(&tree, &rebuilt);
            }
            prop_assert_eq!(tree.root(), naive_root(&model));
        }

        /// Push / set / truncate, truncation-heavy, compared after every step with a rebuild of
        /// a model `Vec` (root and every level), with `root_with` predicting each push and set.
        #[test]
        fn truncate_push_set_match_rebuild(
            initial in vec(any::<Hash32>(), 0..200),
            ops in vec(
                prop_oneof![
                    3 => any::<Hash32>().prop_map(Op::Push),
                    2 => (any::<usize>(), any::<Hash32>()).prop_map(|(i, l)| Op::Set(i, l)),
                    2 => cut().prop_map(Op::Truncate),
                ],
                0..40,
            ),
        ) {
            let mut tree = MerkleTree::from_leaves(initial.clone());
            let mut model = initial;
            for op in ops {
                match op {
                    Op::Push(l) => {
                        let predicted = tree.root_with(&[], &[l]).unwrap();
                        prop_assert_eq!(tree.push(l).unwrap(), model.len() as u64);
                        prop_assert_eq!(tree.root(), predicted);
                        model.push(l);
                    }
                    Op::Set(i, l) if model.is_empty() => {
                        prop_assert!(tree.set(i as u64, l).is_err());
                    }
                    Op::Set(i, l) => {
                        let i = i % model.len();
                        let predicted = tree.root_with(&[(i as u64, l)], &[]).unwrap();
                        tree.set(i as u64, l).unwrap();
                        prop_assert_eq!(tree.root(), predicted);
                        model[i] = l;
                    }
                    Op::Truncate(cut) => apply_cut(&mut tree, &mut model, cut)?,
                    Op::Extend(_) | Op::SetMany(_) => unreachable!("not generated"),
                }
                let rebuilt = MerkleTree::from_leaves(model.clone());
                prop_assert_eq!(tree.len(), model.len() as u64);
                prop_assert_eq!(tree.depth(), rebuilt.depth());
                prop_assert_eq!(tree.root(), rebuilt.root());
                // Every level, node for node (the derived `PartialEq` compares `levels`).
                prop_assert_eq!(&tree.levels, &rebuilt.levels);
            }
            prop_assert_eq!(tree.root(), naive_root(&model));
        }

        #[test]
        fn range_proofs_verify_and_detect_tampering(
            leaves in vec(any::<Hash32>(), 1..150),
            a in any::<usize>(),
            b in any::<usize>(),
            which in any::<usize>(),
            bit in 0u8..8,
        ) {
            let tree = MerkleTree::from_leaves(leaves.clone());
            let root = tree.root();
            let (start, end) = range(leaves.len(), a, b);
            let slice = &leaves[start as usize..end as usize];
            let proof = tree.range_proof(start, end).unwrap();
            prop_assert!(proof.hashes().len() <= 2 * tree.depth());
            prop_assert_eq!(verify_range(&root, start, slice, &proof), Ok(()));

            let bytes = proof.to_bytes();
            prop_assert_eq!(RangeProof::from_bytes(&bytes), Ok(proof.clone()));

            // Any flipped leaf bit.
            let mut bad = slice.to_vec();
            let n = bad.len();
            bad[which % n][(which / n) % 32] ^= 1 << bit;
            prop_assert!(verify_range(&root, start, &bad, &proof).is_err());

            // Any flipped proof byte: rejected when decoding or when verifying.
            for i in 0..bytes.len() {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                let rejected = match RangeProof::from_bytes(&bad) {
                    Err(_) => true,
                    Ok(p) => verify_range(&root, start, slice, &p).is_err(),
                };
                prop_assert!(rejected, "flipping byte {} bit {} went unnoticed", i, bit);
            }

            // Shifted start.
            prop_assert!(verify_range(&root, start + 1, slice, &proof).is_err());
            if start > 0 {
                prop_assert!(verify_range(&root, start - 1, slice, &proof).is_err());
            }
            // Wrong root, dropped or extra leaf.
            let mut other = root;
            other[0] ^= 1;
            prop_assert!(verify_range(&other, start, slice, &proof).is_err());
            prop_assert!(verify_range(&root, start, &slice[..slice.len() - 1], &proof).is_err());
            if (end as usize) < leaves.len() {
                let wider = &leaves[start as usize..end as usize + 1];
                prop_assert!(verify_range(&root, start, wider, &proof).is_err());
            }
        }

        #[test]
        fn a_tree_from_proven_ranges_is_the_tree_from_its_leaves(
            leaves in vec(any::<Hash32>(), 1..300),
            cuts in vec(any::<usize>(), 0..12),
            dropped in any::<usize>(),
        ) {
            let tree = MerkleTree::from_leaves(leaves.clone());
            let root = tree.root();
            let n = leaves.len();
            let mut bounds: Vec<usize> = cuts.iter().map(|c| c % n).collect();
            bounds.extend([0, n]);
            bounds.sort();
            bounds.dedup();
            let proven: Vec<(&[Hash32], RangeNodes)> = bounds
                .windows(2)
                .map(|w| {
                    let (start, end) = (w[0] as u64, w[1] as u64);
                    let proof = tree.range_proof(start, end).unwrap();
                    let slice = &leaves[w[0]..w[1]];
                    (slice, verify_range_keeping_nodes(&root, start, slice, &proof).unwrap())
                })
                .collect();
            let ranges: Vec<(&[Hash32], &RangeNodes)> =
                proven.iter().map(|(l, r)| (*l, r)).collect();
            let rebuilt = MerkleTree::from_proven_ranges(n as u64, &ranges).unwrap();
            prop_assert!(rebuilt == tree);
            // A range left out leaves nodes uncovered.
            let mut gapped = ranges.clone();
            gapped.remove(dropped % ranges.len());
            prop_assert!(MerkleTree::from_proven_ranges(n as u64, &gapped).is_err());
        }

        #[test]
        fn from_bytes_never_panics_and_accepts_only_canonical(
            bytes in vec(any::<u8>(), 0..300),
        ) {
            if let Ok(proof) = RangeProof::from_bytes(&bytes) {
                prop_assert_eq!(proof.to_bytes(), bytes);
            }
        }

        #[test]
        fn structured_garbage_never_panics(
            len in any::<u64>(),
            count in 0u32..140,
            hashes in vec(any::<Hash32>(), 0..140),
            start in any::<u64>(),
            leaves in vec(any::<Hash32>(), 0..40),
        ) {
            let mut bytes = vec![RANGE_PROOF_VERSION];
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(&count.to_le_bytes());
            for hash in &hashes {
                bytes.extend_from_slice(hash);
            }
            if let Ok(proof) = RangeProof::from_bytes(&bytes) {
                prop_assert_eq!(proof.hashes().len(), count as usize);
                let _ = verify_range(&[0u8; 32], start % len.max(1), &leaves, &proof);
                let _ = verify_range(&[0u8; 32], start, &leaves, &proof);
            }
        }
    }

    /// Run with `cargo test --release -- --ignored --nocapture`.
    #[test]
    #[ignore = "timing; run in release"]
    fn timing_two_million_leaves() {
        const N: u64 = 2_000_000;
        let leaves: Vec<Hash32> = (0..N).map(leaf).collect();

        let t = Instant::now();
        let mut acc = [7u8; 32];
        for _ in 0..1_000_000 {
            acc = hash_pair(&acc, &acc);
        }
        println!(
            "sha256(64 bytes): {:?} per hash ({})",
            t.elapsed() / 1_000_000,
            acc[0]
        );

        let t = Instant::now();
        let mut tree = MerkleTree::from_leaves(leaves.clone());
        println!("from_leaves({N}): {:?}", t.elapsed());

        let t = Instant::now();
        let mut extended = MerkleTree::new();
        for chunk in leaves.chunks(100_000) {
            extended.extend_from_slice(chunk).unwrap();
        }
        println!("extend_from_slice x 20 chunks of 100k: {:?}", t.elapsed());
        assert_eq!(extended, tree);
        drop(extended);

        let t = Instant::now();
        let pushed_tree = pushed(&leaves);
        println!("push x {N}: {:?}", t.elapsed());
        assert_eq!(pushed_tree.root(), tree.root());
        drop(pushed_tree);

        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        const REPS: u32 = 1000;
        let t = Instant::now();
        for r in 0..REPS {
            let updates: Vec<(u64, Hash32)> =
                (0..16).map(|_| (next() % N, leaf(u64::from(r)))).collect();
            tree.set_many(&updates).unwrap();
        }
        println!(
            "set_many(16 random leaves): {:?} per batch",
            t.elapsed() / REPS
        );

        let t = Instant::now();
        for r in 0..REPS {
            for _ in 0..16 {
                tree.set(next() % N, leaf(u64::from(r))).unwrap();
            }
        }
        println!("16 x set: {:?} per batch", t.elapsed() / REPS);

        let t = Instant::now();
        let root = tree.root();
        let proof = tree.range_proof(1_000_000, 1_001_024).unwrap();
        let elapsed = t.elapsed();
        let slice: Vec<Hash32> = (1_000_000..1_001_024)
            .map(|i| tree.leaf(i).unwrap())
            .collect();
        let t = Instant::now();
        verify_range(&root, 1_000_000, &slice, &proof).unwrap();
        println!(
            "range proof of 1024 leaves: {} hashes, {} bytes, prove {:?}, verify {:?}",
            proof.hashes().len(),
            proof.to_bytes().len(),
            elapsed,
            t.elapsed()
        );
        assert_eq!(
            tree.root(),
            MerkleTree::from_leaves((0..N).map(|i| tree.leaf(i).unwrap()).collect()).root()
        );
    }
}
