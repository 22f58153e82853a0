//! Ethereum's deposit contract tree: an incremental Merkle tree of depth 32 whose root mixes in
//! the deposit count, exactly as `deposit_contract.sol` keeps it (`branch` + `zero_hashes`,
//! `get_deposit_root`), with leaves `hash_tree_root(DepositData)`.
//!
//! [`DepositTree`] is what the dev deposit contract runs; the proofs the producer needs come
//! from [`DepositCache`](super::cache::DepositCache), which keeps every complete node.

use crate::chain::block::DepositData;

/// Depth of the deposit contract's tree (`DEPOSIT_CONTRACT_TREE_DEPTH`).
pub const DEPTH: usize = 32;
/// Most deposits the tree holds: `2^32 - 1`, as the contract enforces.
pub const MAX_DEPOSIT_COUNT: u64 = (1 << DEPTH) - 1;

/// A 32-byte node of the tree.
pub type Node = [u8; 32];

/// `sha256(left ‖ right)`, the empty-subtree roots (`zero_hashes()[h]` for `h` in `0..=DEPTH`),
/// the count as a chunk and the contract's `get_deposit_root` mix-in: the guests' own functions
/// (`deposits-common`), so the host and the deposits modules hash the tree one way.
pub use deposits_common::ssz::hash_pair;
pub use deposits_common::tree::{count_chunk, mix_in_count, zero_hashes};

/// `hash_tree_root(DepositData)` as phase0 SSZ defines it (deposits-common's, shared with the
/// deposits module that verifies the proofs).
pub fn deposit_data_root(deposit: &DepositData) -> Node {
    deposit.leaf()
}

/// Why a deposit cannot be added to the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// The tree already holds [`MAX_DEPOSIT_COUNT`] deposits (the contract's "merkle tree full").
    #[error("the deposit tree is full ({MAX_DEPOSIT_COUNT} deposits)")]
    Full,
}

/// The deposit contract's incremental tree: O(depth) memory, O(depth) per deposit.
#[derive(Debug, Clone)]
pub struct DepositTree {
    branch: [Node; DEPTH],
    zero_hashes: [Node; DEPTH + 1],
    count: u64,
}

impl Default for DepositTree {
    fn default() -> Self {
        Self::new()
    }
}

impl DepositTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self {
            branch: [[0u8; 32]; DEPTH],
            zero_hashes: zero_hashes(),
            count: 0,
        }
    }

    /// Deposits in the tree.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Adds a leaf (the contract's `deposit`, after its checks).
    pub fn push(&mut self, leaf: Node) -> Result<(), TreeError> {
        if self.count >= MAX_DEPOSIT_COUNT {
            return Err(TreeError::Full);
        }
        self.count = self.count.checked_add(1).ok_or(TreeError::Full)?;
        let mut size = self.count;
        let mut node = leaf;
        for slot in self.branch.iter_mut() {
            if size & 1 == 1 {
                *slot = node;
                return Ok(());
            }
            node = hash_pair(slot, &node);
            size >>= 1;
        }
        // Unreachable while count < 2^32: some bit below 32 is set.
        Err(TreeError::Full)
    }

    /// The contract's `get_deposit_root`.
    pub fn root(&self) -> Node {
        let mut node = [0u8; 32];
        let mut size = self.count;
        for (slot, zero) in self.branch.iter().zip(self.zero_hashes.iter()) {
            node = if size & 1 == 1 {
                hash_pair(slot, &node)
            } else {
                hash_pair(&node, zero)
            };
            size >>= 1;
        }
        mix_in_count(&node, self.count)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    /// A from-scratch reference: the whole tree of the first `leaves.len()` leaves, level by
    /// level, padded with zero hashes, then the count mixed in. O(n · depth) — tests only.
    pub(crate) fn naive_levels(leaves: &[Node]) -> Vec<Vec<Node>> {
        let zeros = zero_hashes();
        let mut levels = vec![leaves.to_vec()];
        for zero in zeros.iter().take(DEPTH) {
            let below = levels.last().unwrap();
            let mut above: Vec<Node> = below
                .chunks(2)
                .map(|pair| hash_pair(&pair[0], pair.get(1).unwrap_or(zero)))
                .collect();
            if above.is_empty() {
                above.push(hash_pair(zero, zero));
            }
            levels.push(above);
        }
        levels
    }

    pub(crate) fn naive_root(leaves: &[Node]) -> Node {
        mix_in_count(&naive_levels(leaves)[DEPTH][0], leaves.len() as u64)
    }

    pub(crate) fn naive_proof(leaves: &[Node], index: usize) -> Vec<Node> {
        let zeros = zero_hashes();
        let levels = naive_levels(leaves);
        let mut proof = Vec::new();
        for (h, level) in levels.iter().take(DEPTH).enumerate() {
            let sibling = (index >> h) ^ 1;
            proof.push(level.get(sibling).copied().unwrap_or(zeros[h]));
        }
        proof.push(count_chunk(leaves.len() as u64));
        proof
    }

    /// phase0 `is_valid_merkle_branch`, written out here so the tests do not trust the code
    /// under test.
    pub(crate) fn verify(leaf: Node, proof: &[Node], index: u64, root: Node) -> bool {
        let mut value = leaf;
        for (i, sibling) in proof.iter().enumerate() {
            value = if (index >> i) & 1 == 1 {
                hash_pair(sibling, &value)
            } else {
                hash_pair(&value, sibling)
            };
        }
        value == root
    }

    pub(crate) fn leaf(seed: u64) -> Node {
        let mut hasher = Sha256::new();
        hasher.update(seed.to_le_bytes());
        hasher.finalize().into()
    }

    /// Every `.rs` file under `dir`, recursively.
    fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(path);
            }
        }
    }

    /// The host hashes deposit-tree and SSZ pairs with one function, the guests'
    /// (`deposits_common::ssz::hash_pair`), and takes the deposit tree's empty-subtree roots,
    /// count chunk and count mix-in from `deposits_common::tree`: no module of the host defines
    /// its own copy.
    #[test]
    fn the_host_defines_no_copy_of_the_deposit_tree_hasher() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        assert!(
            files.len() > 50,
            "host sources not found under {}",
            src.display()
        );
        let shared = ["hash_pair", "count_chunk", "mix_in_count"];
        let mut copies = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let line = line.trim_start();
                let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
                let line = line.strip_prefix("pub ").unwrap_or(line);
                let defines = |name: &str| line.starts_with(&format!("fn {name}("));
                let deposit_zeros = defines("zero_hashes") && line.contains("DEPTH + 1]");
                if shared.iter().any(|name| defines(name)) || deposit_zeros {
                    copies.push(format!("{}:{}: {line}", file.display(), n + 1));
                }
            }
        }
        assert!(
            copies.is_empty(),
            "own copies of the shared hasher: {copies:#?}"
        );
    }

    #[test]
    fn the_empty_tree_has_the_deposit_contracts_empty_root() {
        assert_eq!(
            hex::encode(DepositTree::new().root()),
            "d70a234731285c6804c2a4f56711ddb8c82c99740f207854891028af34e27e5e"
        );
        assert_eq!(DepositTree::new().root(), naive_root(&[]));
        // zero_hashes[1] is sha256 of 64 zero bytes, a widely published constant.
        assert_eq!(
            hex::encode(zero_hashes()[1]),
            "f5a5fd42d16a20302798ef6ed309979b43003d2320d9f0e8ea9831a92759fb4b"
        );
    }

    #[test]
    fn incremental_roots_match_a_full_tree_at_every_count() {
        let mut tree = DepositTree::new();
        let mut leaves = Vec::new();
        for i in 0..70u64 {
            let l = leaf(i);
            tree.push(l).unwrap();
            leaves.push(l);
            assert_eq!(tree.root(), naive_root(&leaves), "count {}", i + 1);
            assert_eq!(tree.count(), i + 1);
        }
    }

    #[test]
    fn deposit_data_root_follows_phase0_ssz() {
        // Computed independently: the four field roots merkleised as SSZ lays them out.
        let deposit = DepositData {
            pubkey: [0x11; 48],
            withdrawal_credentials: [0x22; 32],
            amount: 32_000_000_000,
            signature: [0x33; 96],
        };
        let mut pk = [0u8; 64];
        pk[..48].copy_from_slice(&deposit.pubkey);
        let pubkey_root: Node = Sha256::digest(pk).into();
        let mut sig = [0u8; 128];
        sig[..96].copy_from_slice(&deposit.signature);
        let sig_left: Node = Sha256::digest(&sig[..64]).into();
        let sig_right: Node = Sha256::digest(&sig[64..]).into();
        let signature_root = hash_pair(&sig_left, &sig_right);
        let mut amount = [0u8; 32];
        amount[..8].copy_from_slice(&32_000_000_000u64.to_le_bytes());
        let mut fields = Vec::new();
        fields.extend_from_slice(&pubkey_root);
        fields.extend_from_slice(&deposit.withdrawal_credentials);
        fields.extend_from_slice(&amount);
        fields.extend_from_slice(&signature_root);
        let left: Node = Sha256::digest(&fields[..64]).into();
        let right: Node = Sha256::digest(&fields[64..]).into();
        assert_eq!(deposit_data_root(&deposit), hash_pair(&left, &right));
    }
}
