//! Range proofs: the sibling hashes that prove a contiguous run of leaves against a tree's root,
//! their encoding, and the builder that assembles a tree from verified ranges (a restore).

use super::*;

/// Sibling hashes that prove a contiguous range of leaves against a [`MerkleTree::root`].
///
/// Per level, from the leaves up: the sibling left of the range if the range starts at a right
/// child, then the sibling right of the range if the range ends at a left child and that sibling
/// covers any leaf. Only hashes the verifier cannot derive from the tree length are included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeProof {
    /// Number of leaves in the tree the proof was made from.
    pub(super) len: u64,
    /// Sibling hashes, in the order above.
    pub(super) hashes: Vec<Hash32>,
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
    /// Each level appended into the chunks it keeps in the tree: no regrowth copies, and
    /// [`finish`](Self::finish) hands the chunks over without copying them again.
    levels: Vec<ChunkedBuilder<Hash32>>,
}

impl ProvenTreeBuilder {
    /// A builder of the tree over `len` leaves. Nothing is reserved for them: `len` may come
    /// from a peer, and the levels grow with the ranges actually added.
    pub fn new(len: u64) -> Self {
        let levels = if len == 0 {
            Vec::new()
        } else {
            vec![ChunkedBuilder::new(); depth_for_len(len).saturating_add(1)]
        };
        Self { len, levels }
    }

    /// A builder of the tree over `len` leaves whose levels above `level` are already known
    /// and checked: `upper[k]` is level `level + 1 + k`, complete, up to the tree root. The
    /// ranges added then need to bring only the levels up to `level`.
    pub fn above(len: u64, level: usize, upper: &[Vec<Hash32>]) -> Result<Self, MerkleError> {
        let mut builder = Self::new(len);
        let known = builder
            .levels
            .get_mut(level.saturating_add(1)..)
            .unwrap_or_default();
        if known.len() != upper.len() {
            return Err(MerkleError::Internal(
                "the known upper levels do not reach the tree root",
            ));
        }
        for (depth, (known, row)) in (level.saturating_add(1)..).zip(known.iter_mut().zip(upper)) {
            if u64::try_from(row.len()).ok() != Some(level_count(len, depth)) {
                return Err(MerkleError::Internal("a known upper level is not complete"));
            }
            known.extend_from_slice(row);
        }
        Ok(builder)
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
            levels.push(level.finish());
        }
        Ok(MerkleTree { levels })
    }
}

/// The node at `level` of the tree of `len` leaves above the leaves `start..start +
/// leaves.len()`, which must be that node's whole subtree — `start` a multiple of `2^level`,
/// every leaf below the node (fewer only at the tree's right edge, where the tree pads with
/// zero hashes) — with the nodes computed on the way up, kept as
/// [`verify_range_keeping_nodes`] keeps them (levels `1..=level`).
///
/// A restore whose manifest lists every chunk's subtree root (checked against the root once,
/// for all chunks) compares each chunk's node with its listed root: the path above it needs
/// hashing only once, not once per chunk.
pub fn subtree_keeping_nodes(
    start: u64,
    leaves: &[Hash32],
    len: u64,
    level: usize,
) -> Result<(Hash32, RangeNodes), MerkleError> {
    let count = u64::try_from(leaves.len()).unwrap_or(u64::MAX);
    let end = start.saturating_add(count);
    let invalid = MerkleError::InvalidRange { start, end, len };
    let width = u32::try_from(level)
        .ok()
        .and_then(|shift| 1u64.checked_shl(shift))
        .filter(|_| level <= depth_for_len(len))
        .ok_or(invalid.clone())?;
    if start.checked_rem(width) != Some(0)
        || start >= len
        || end != start.saturating_add(width).min(len)
    {
        return Err(invalid);
    }
    let mut rows: Vec<Vec<Hash32>> = Vec::with_capacity(level);
    for depth in 0..level {
        let nodes = rows.last().map_or(leaves, Vec::as_slice);
        rows.push(hash_pairs(nodes, &zero_hash(depth)));
    }
    match rows.last().map_or(leaves, Vec::as_slice) {
        [node] => Ok((*node, RangeNodes { start, rows })),
        _ => Err(MerkleError::Internal(
            "a subtree did not reduce to one node",
        )),
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
        // The nodes widened to the pairs they belong to (a range aligned on both sides, as a
        // checkpoint chunk's usually is, needs no copy).
        let widened;
        let row = if left.is_none() && right.is_none() {
            nodes
        } else {
            widened = left
                .into_iter()
                .chain(nodes.iter().copied())
                .chain(right)
                .collect::<Vec<_>>();
            widened.as_slice()
        };
        if row.len() % 2 != 0 {
            return Err(MerkleError::Internal("range widened to an odd width"));
        }
        let mut upper = Vec::with_capacity(row.len() / 2);
        sha256_many::hash_pairs(row, &mut upper);
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
