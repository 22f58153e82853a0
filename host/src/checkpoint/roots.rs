//! Chunk roots: how a checkpoint whose chunks carry no range proof (checkpoint-v3,
//! `chunk-proof = manifest-roots`) stays provable chunk by chunk against the registry root.
//!
//! Such a manifest's chunks are whole subtrees of the registry tree: chunk `i` covers leaves
//! `[i·L, min((i+1)·L, leaf_count))` for one power of two `L`, and the manifest lists each
//! chunk's subtree root — the tree's node at level `log2 L` (level `depth` when there is a
//! single chunk: the tree root itself). [`RootTree::new`] hashes those roots up to the registry
//! root once, before any chunk is fetched (a manifest whose roots do not lead to its registry
//! root is refused: the manifest producer's fault). The restorer then hashes each chunk's
//! leaves up to its subtree root and compares it with the listed one
//! (`merkle::subtree_keeping_nodes`): the path above the chunks is hashed once for all of
//! them, here, and the restored tree takes its levels above the chunks from
//! [`RootTree::upper_levels`]. [`RootTree::hold`] is that comparison, for the restorer and for
//! `upgrade-check`, which holds a candidate module's chunks the same way.

use deposits_common::ssz::hash_pair;

use super::manifest::ChunkEntry;
use crate::state::merkle::{Hash32, MerkleError, RangeNodes, subtree_keeping_nodes};

/// `ceil(log2(max(len, 1)))`, the registry tree's depth for `len` leaves.
pub fn depth_for_len(len: u64) -> usize {
    match len.saturating_sub(1).checked_ilog2() {
        None => 0,
        Some(log) => usize::try_from(log).map_or(usize::MAX, |log| log.saturating_add(1)),
    }
}

/// Root of an all-zero subtree of `depth` levels (as the registry tree pads).
fn zero_hash(depth: usize) -> Hash32 {
    let mut current = [0u8; 32];
    for _ in 0..depth {
        current = hash_pair(&current, &current);
    }
    current
}

/// `sha256(tree_root || len as 32-byte little-endian)`, the registry root.
fn mix_in_length(tree_root: &Hash32, len: u64) -> Hash32 {
    let mut length = [0u8; 32];
    if let Some(prefix) = length.first_chunk_mut::<8>() {
        *prefix = len.to_le_bytes();
    }
    hash_pair(tree_root, &length)
}

/// The tree level whose nodes are the chunks' roots for `chunks` tiling `leaf_count` leaves,
/// or why the chunks are not whole subtrees of one size.
pub fn chunk_level(chunks: &[ChunkEntry], leaf_count: u64) -> Result<usize, String> {
    let depth = depth_for_len(leaf_count);
    let [first, rest @ ..] = chunks else {
        return Err("no chunks".into());
    };
    if rest.is_empty() {
        return Ok(depth);
    }
    let width = first.end.saturating_sub(first.start);
    if !width.is_power_of_two() {
        return Err(format!("chunk width {width} is not a power of two"));
    }
    let mut start = 0u64;
    for (index, c) in chunks.iter().enumerate() {
        let end = start.saturating_add(width).min(leaf_count);
        if (c.start, c.end) != (start, end) {
            return Err(format!(
                "chunk {index} covers [{}, {}), not the subtree [{start}, {end})",
                c.start, c.end
            ));
        }
        start = end;
    }
    Ok(usize::try_from(width.trailing_zeros()).unwrap_or(usize::MAX))
}

/// The chunk roots hashed up to the registry root: everything needed to hold each chunk to its
/// own root, and the restored tree's levels above the chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootTree {
    leaf_count: u64,
    /// The chunks' level in the registry tree.
    level: usize,
    /// `levels[0]` are the chunk roots, `levels[k]` the tree's nodes at level `level + k`; the
    /// last holds the tree root.
    levels: Vec<Vec<Hash32>>,
}

impl RootTree {
    /// Hashes `roots` (one per chunk of `chunks`) up and checks they lead to `registry_root`.
    pub fn new(
        chunks: &[ChunkEntry],
        roots: &[Hash32],
        leaf_count: u64,
        registry_root: &Hash32,
    ) -> Result<Self, String> {
        if roots.len() != chunks.len() {
            return Err(format!(
                "{} chunk roots for {} chunks",
                roots.len(),
                chunks.len()
            ));
        }
        let level = chunk_level(chunks, leaf_count)?;
        let mut levels = vec![roots.to_vec()];
        let mut depth = level;
        while let Some(lower) = levels.last().filter(|l| l.len() > 1) {
            let zero = zero_hash(depth);
            let upper = lower
                .chunks(2)
                .map(|pair| match pair {
                    [left, right] => hash_pair(left, right),
                    [left] => hash_pair(left, &zero),
                    _ => zero,
                })
                .collect();
            levels.push(upper);
            depth = depth.saturating_add(1);
        }
        if depth != depth_for_len(leaf_count) {
            return Err(format!(
                "the chunk roots reduce at level {depth}, the tree of {leaf_count} leaves has depth {}",
                depth_for_len(leaf_count)
            ));
        }
        let top = levels
            .last()
            .and_then(|l| l.first())
            .copied()
            .unwrap_or_default();
        if mix_in_length(&top, leaf_count) != *registry_root {
            return Err("the chunk roots do not lead to the registry root".into());
        }
        Ok(Self {
            leaf_count,
            level,
            levels,
        })
    }

    /// The chunks' level in the registry tree.
    pub fn level(&self) -> usize {
        self.level
    }

    /// Chunk `index`'s subtree root, as the manifest lists it (checked against the registry
    /// root by [`new`](Self::new)).
    pub fn chunk_root(&self, index: usize) -> Option<&Hash32> {
        self.levels.first().and_then(|roots| roots.get(index))
    }

    /// Holds chunk `index` to its listed root, as a restorer and `upgrade-check` do: `leaves`
    /// (the leaf hashes, from leaf `start`) hashed up to the chunks' level must give it. Returns
    /// the tree nodes that hashing computed, for the restored tree.
    pub fn hold(
        &self,
        index: usize,
        start: u64,
        leaves: &[Hash32],
    ) -> Result<RangeNodes, MerkleError> {
        let (node, nodes) = subtree_keeping_nodes(start, leaves, self.leaf_count, self.level)?;
        match self.chunk_root(index) {
            Some(root) if *root == node => Ok(nodes),
            _ => Err(MerkleError::RootMismatch),
        }
    }

    /// The registry tree's levels above the chunks' level, each complete, up to the tree root:
    /// `upper_levels()[k]` is level `level() + 1 + k`.
    pub fn upper_levels(&self) -> &[Vec<Hash32>] {
        self.levels.get(1..).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::merkle::MerkleTree;

    fn tiling(len: u64, width: u64) -> Vec<ChunkEntry> {
        let mut out = Vec::new();
        let mut start = 0;
        while start < len {
            let end = (start + width).min(len);
            out.push(ChunkEntry {
                hash: [0; 32],
                start,
                end,
                size: 1,
            });
            start = end;
        }
        out
    }

    /// The roots and the levels above them are the registry tree's own nodes, each chunk's
    /// leaves are held to its listed root (and only its own: an altered leaf, another chunk's
    /// leaves or an unlisted index fail), and roots that do not lead to the root are refused.
    #[test]
    fn chunk_roots_and_the_levels_above_are_the_trees_own() {
        for len in [1u64, 5, 8, 9, 16, 17, 33, 64, 100] {
            let leaves: Vec<Hash32> = (0..len).map(|i| [i as u8 ^ 0x5a; 32]).collect();
            let tree = MerkleTree::from_leaves(leaves.clone());
            for width in [4u64, 8, 16] {
                let chunks = tiling(len, width);
                let level = chunk_level(&chunks, len).unwrap();
                let roots: Vec<Hash32> = (0..chunks.len() as u64)
                    .map(|i| tree.node(level, i).unwrap())
                    .collect();
                let roots_tree = RootTree::new(&chunks, &roots, len, &tree.root()).unwrap();
                let slice = |c: &ChunkEntry| &leaves[c.start as usize..c.end as usize];
                for (i, c) in chunks.iter().enumerate() {
                    assert_eq!(roots_tree.chunk_root(i), Some(&roots[i]));
                    assert_eq!(roots[i], tree.node(level, i as u64).unwrap());
                    roots_tree.hold(i, c.start, slice(c)).unwrap();
                    let mut altered = slice(c).to_vec();
                    altered[0][5] ^= 1;
                    assert!(
                        roots_tree.hold(i, c.start, &altered).is_err(),
                        "len {len}, width {width}, chunk {i}: an altered leaf passed"
                    );
                }
                if let [first, second, ..] = chunks.as_slice() {
                    assert!(roots_tree.hold(0, first.start, slice(second)).is_err());
                }
                assert_eq!(roots_tree.chunk_root(chunks.len()), None);
                assert!(roots_tree.hold(chunks.len(), 0, slice(&chunks[0])).is_err());
                for (k, row) in roots_tree.upper_levels().iter().enumerate() {
                    let depth = level + 1 + k;
                    let own: Vec<Hash32> = (0..row.len() as u64)
                        .map(|j| tree.node(depth, j).unwrap())
                        .collect();
                    assert_eq!(row, &own, "level {depth}");
                    assert!(tree.node(depth, row.len() as u64).is_err());
                }
                let mut bad = roots.clone();
                bad[0][0] ^= 1;
                assert!(RootTree::new(&chunks, &bad, len, &tree.root()).is_err());
            }
        }
    }

    #[test]
    fn chunks_that_are_not_whole_subtrees_are_refused() {
        let mut chunks = tiling(100, 16);
        chunks[1].end -= 1;
        chunks[2].start -= 1;
        assert!(chunk_level(&chunks, 100).unwrap_err().contains("chunk 1"));
        assert!(chunk_level(&tiling(100, 12), 100).is_err());
        assert!(chunk_level(&[], 100).is_err());
    }
}
