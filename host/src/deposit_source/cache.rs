//! [`DepositCache`]: the deposit log an authority has followed, with the proofs the producer
//! needs — any deposit's 33 × 32-byte branch against the root of ANY count seen so far (the
//! agreed `eth1_data` may lag the log), in O(depth) per proof.
//!
//! Like Lighthouse's deposit cache it keeps every deposit; unlike a plain leaf list it also
//! keeps every *complete* interior node (≈ 2n nodes in all), so a proof against an older count
//! reads stored siblings, recomputes only the O(depth) nodes on that count's right edge, and
//! fills the rest with zero hashes.

use super::tree::{DEPTH, DepositTree, MAX_DEPOSIT_COUNT, Node, TreeError, count_chunk};
use super::tree::{deposit_data_root, hash_pair, mix_in_count, zero_hashes};
use crate::chain::block::DepositData;
use crate::chain::eth1::{DepositProofsError, ProvenDeposit};

/// A deposit's Merkle branch: 32 siblings, then the count mixed in (phase0 `Deposit.proof`).
pub type DepositProof = [Node; DEPTH + 1];

/// Why the cache cannot answer or take a deposit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// A proof was asked against more deposits than the cache has followed (ours: the source
    /// is behind the chain's agreed count; transient while the follower catches up).
    #[error("deposit count {count} asked for, but only {known} deposits are known yet")]
    UnknownCount {
        /// The count asked for.
        count: u64,
        /// Deposits in the cache.
        known: u64,
    },
    /// The deposit index is not below the count it is proven against.
    #[error("deposit {index} is not among the first {count} deposits")]
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The count it was to be proven against.
        count: u64,
    },
    /// The tree is full.
    #[error(transparent)]
    Tree(#[from] TreeError),
}

/// Every followed deposit, its leaf and every complete interior node.
#[derive(Debug, Clone)]
pub struct DepositCache {
    deposits: Vec<DepositData>,
    /// `levels[h][i]`: the root of the complete subtree of height `h` over leaves
    /// `[i << h, (i + 1) << h)`; `levels[0]` are the leaves.
    levels: Vec<Vec<Node>>,
    zeros: [Node; DEPTH + 1],
    tree: DepositTree,
}

impl Default for DepositCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DepositCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self {
            deposits: Vec::new(),
            levels: vec![Vec::new(); DEPTH],
            zeros: zero_hashes(),
            tree: DepositTree::new(),
        }
    }

    /// Deposits in the cache.
    pub fn len(&self) -> u64 {
        self.tree.count()
    }

    /// Whether the cache holds no deposit.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The deposit at `index`.
    pub fn deposit(&self, index: u64) -> Option<&DepositData> {
        self.deposits.get(usize::try_from(index).ok()?)
    }

    /// Appends the next deposit; returns its index.
    pub fn push(&mut self, deposit: DepositData) -> Result<u64, CacheError> {
        let index = self.len();
        if index >= MAX_DEPOSIT_COUNT {
            return Err(TreeError::Full.into());
        }
        let leaf = deposit_data_root(&deposit);
        self.tree.push(leaf)?;
        self.deposits.push(deposit);
        let mut node = leaf;
        for h in 0..DEPTH {
            let Some(level) = self.levels.get_mut(h) else {
                break;
            };
            level.push(node);
            if level.len() % 2 == 1 {
                break;
            }
            let (Some(left), Some(right)) = (level.iter().rev().nth(1), level.last()) else {
                break;
            };
            node = hash_pair(left, right);
        }
        Ok(index)
    }

    /// The deposit root of the whole cache (the contract's current `get_deposit_root`).
    pub fn root(&self) -> Node {
        self.tree.root()
    }

    fn stored(&self, height: usize, index: u64) -> Option<Node> {
        let level = self.levels.get(height)?;
        level.get(usize::try_from(index).ok()?).copied()
    }

    /// The nodes on the right edge of the tree of the first `count` deposits: `edge[h]` is the
    /// root (over those deposits only) of the height-`h` subtree holding deposit `count - 1`,
    /// for `h` in `0..=DEPTH`. `count` must be in `1..=len`.
    fn right_edge(&self, count: u64) -> Option<[Node; DEPTH + 1]> {
        let last = count.checked_sub(1)?;
        let mut edge = [[0u8; 32]; DEPTH + 1];
        let mut node = self.stored(0, last)?;
        for (h, slot) in edge.iter_mut().enumerate() {
            *slot = node;
            if h == DEPTH {
                break;
            }
            let position = last >> h;
            node = if position & 1 == 1 {
                hash_pair(&self.stored(h, position ^ 1)?, &node)
            } else {
                hash_pair(&node, self.zeros.get(h)?)
            };
        }
        Some(edge)
    }

    /// The deposit root when the contract held its first `count` deposits.
    pub fn root_at(&self, count: u64) -> Result<Node, CacheError> {
        if count > self.len() {
            return Err(CacheError::UnknownCount {
                count,
                known: self.len(),
            });
        }
        let top = match self.right_edge(count) {
            Some(edge) => edge[DEPTH],
            None => self.zeros[DEPTH],
        };
        Ok(mix_in_count(&top, count))
    }

    /// Deposit `index`'s branch against the root of the first `count` deposits
    /// ([`root_at`](Self::root_at)`(count)`), as phase0 `is_valid_merkle_branch` checks it with
    /// depth 33.
    pub fn proof(&self, index: u64, count: u64) -> Result<DepositProof, CacheError> {
        if count > self.len() {
            return Err(CacheError::UnknownCount {
                count,
                known: self.len(),
            });
        }
        if index >= count {
            return Err(CacheError::IndexOutOfRange { index, count });
        }
        let unknown = CacheError::UnknownCount {
            count,
            known: self.len(),
        };
        let edge = self.right_edge(count).ok_or(unknown)?;
        let last = count.checked_sub(1).ok_or(unknown)?;
        let mut proof = [[0u8; 32]; DEPTH + 1];
        for (h, slot) in proof.iter_mut().take(DEPTH).enumerate() {
            let sibling = (index >> h) ^ 1;
            let boundary = last >> h;
            *slot = if sibling < boundary {
                self.stored(h, sibling).ok_or(unknown)?
            } else if sibling == boundary {
                *edge.get(h).ok_or(unknown)?
            } else {
                *self.zeros.get(h).ok_or(unknown)?
            };
        }
        proof[DEPTH] = count_chunk(count);
        Ok(proof)
    }

    /// Deposits `from..from + count` with their proofs against the root over the first
    /// `deposit_count` deposits, as a block producer asks for them ([`DepositProofs`]):
    /// `Behind` while fewer are known, `OutOfRange` for a range past `deposit_count`.
    ///
    /// [`DepositProofs`]: crate::chain::eth1::DepositProofs
    pub fn proven_range(
        &self,
        from: u64,
        count: u64,
        deposit_count: u64,
    ) -> Result<Vec<ProvenDeposit>, DepositProofsError> {
        if deposit_count > self.len() {
            return Err(DepositProofsError::Behind {
                known: self.len(),
                deposit_count,
            });
        }
        let out_of_range = DepositProofsError::OutOfRange {
            from,
            count,
            deposit_count,
        };
        let end = from
            .checked_add(count)
            .filter(|&end| end <= deposit_count)
            .ok_or(out_of_range.clone())?;
        (from..end)
            .map(|index| {
                let data = *self.deposit(index).ok_or(out_of_range.clone())?;
                let proof = self
                    .proof(index, deposit_count)
                    .map_err(|_| out_of_range.clone())?;
                Ok(ProvenDeposit { data, proof })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::deposit_source::tree::tests::{naive_proof, naive_root, verify};

    fn deposit(seed: u64) -> DepositData {
        let mut pubkey = [0u8; 48];
        pubkey[..8].copy_from_slice(&seed.to_le_bytes());
        DepositData {
            pubkey,
            withdrawal_credentials: [seed as u8; 32],
            amount: 1_000_000_000 + seed,
            signature: [seed.wrapping_mul(7) as u8; 96],
        }
    }

    fn filled(n: u64) -> (DepositCache, Vec<Node>) {
        let mut cache = DepositCache::new();
        let mut leaves = Vec::new();
        for i in 0..n {
            assert_eq!(cache.push(deposit(i)).unwrap(), i);
            leaves.push(deposit_data_root(&deposit(i)));
        }
        (cache, leaves)
    }

    #[test]
    fn every_proof_against_every_past_count_matches_a_full_tree() {
        let (cache, leaves) = filled(21);
        assert_eq!(cache.root_at(0).unwrap(), naive_root(&[]));
        for count in 1..=21usize {
            let root = naive_root(&leaves[..count]);
            assert_eq!(cache.root_at(count as u64).unwrap(), root, "count {count}");
            for (index, leaf) in leaves.iter().enumerate().take(count) {
                let proof = cache.proof(index as u64, count as u64).unwrap();
                assert_eq!(
                    proof.to_vec(),
                    naive_proof(&leaves[..count], index),
                    "index {index} count {count}"
                );
                assert!(verify(*leaf, &proof, index as u64, root));
            }
        }
        assert_eq!(cache.root(), naive_root(&leaves));
    }

    #[test]
    fn proofs_past_the_known_log_are_refused_by_name() {
        let (cache, _) = filled(3);
        assert_eq!(
            cache.proof(1, 4),
            Err(CacheError::UnknownCount { count: 4, known: 3 })
        );
        assert_eq!(
            cache.proof(3, 3),
            Err(CacheError::IndexOutOfRange { index: 3, count: 3 })
        );
        assert!(matches!(
            cache.root_at(9),
            Err(CacheError::UnknownCount { count: 9, .. })
        ));
    }

    #[test]
    fn a_proof_does_not_verify_for_another_index_or_count() {
        let (cache, leaves) = filled(6);
        let proof = cache.proof(2, 5).unwrap();
        let root5 = cache.root_at(5).unwrap();
        assert!(verify(leaves[2], &proof, 2, root5));
        assert!(!verify(leaves[2], &proof, 3, root5));
        assert!(!verify(leaves[2], &proof, 2, cache.root_at(6).unwrap()));
        assert!(!verify(leaves[3], &proof, 2, root5));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn random_logs_agree_with_the_reference(
            seeds in proptest::collection::vec(any::<u64>(), 1..80),
            picks in proptest::collection::vec((any::<u64>(), any::<u64>()), 1..8),
        ) {
            let mut cache = DepositCache::new();
            let mut leaves = Vec::new();
            for &seed in &seeds {
                cache.push(deposit(seed)).unwrap();
                leaves.push(deposit_data_root(&deposit(seed)));
            }
            let n = seeds.len() as u64;
            prop_assert_eq!(cache.root(), naive_root(&leaves));
            for (a, b) in picks {
                let count = 1 + a % n;
                let index = b % count;
                let prefix = &leaves[..count as usize];
                let proof = cache.proof(index, count).unwrap();
                prop_assert_eq!(proof.to_vec(), naive_proof(prefix, index as usize));
                prop_assert_eq!(cache.root_at(count).unwrap(), naive_root(prefix));
                prop_assert!(verify(leaves[index as usize], &proof, index, naive_root(prefix)));
            }
        }
    }
}
