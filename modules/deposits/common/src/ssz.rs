//! SSZ `hash_tree_root` of the few containers deposit verification needs.

use sha2::{Digest, Sha256};

/// A 32-byte SSZ chunk or root.
pub type Root = [u8; 32];

/// `sha256(left ‖ right)`: an inner node of an SSZ (and deposit contract) Merkle tree.
pub fn hash_pair(left: &[u8; 32], right: &[u8; 32]) -> Root {
    let mut hasher = Sha256::new();
    hasher.update(left);
    hasher.update(right);
    hasher.finalize().into()
}

/// `hash_tree_root(DepositMessage{pubkey, withdrawal_credentials, amount})`.
pub fn deposit_message_root(
    pubkey: &[u8; 48],
    withdrawal_credentials: &[u8; 32],
    amount: u64,
) -> Root {
    // Bytes48 packs into two chunks, the second zero-padded.
    let mut first = [0u8; 32];
    let mut second = [0u8; 32];
    let (head, tail) = pubkey.split_at(32);
    first.copy_from_slice(head);
    if let Some(dst) = second.get_mut(..tail.len()) {
        dst.copy_from_slice(tail);
    }
    let pubkey_root = hash_pair(&first, &second);
    let mut amount_chunk = [0u8; 32];
    if let Some(dst) = amount_chunk.get_mut(..8) {
        dst.copy_from_slice(&amount.to_le_bytes());
    }
    // Three fields, padded to four leaves.
    let left = hash_pair(&pubkey_root, withdrawal_credentials);
    let right = hash_pair(&amount_chunk, &[0u8; 32]);
    hash_pair(&left, &right)
}

/// `compute_domain(DOMAIN_DEPOSIT, fork_version, genesis_validators_root = 0)`.
pub fn deposit_domain(fork_version: [u8; 4]) -> Root {
    let mut version_chunk = [0u8; 32];
    if let Some(dst) = version_chunk.get_mut(..4) {
        dst.copy_from_slice(&fork_version);
    }
    let fork_data_root = hash_pair(&version_chunk, &[0u8; 32]);
    let mut domain = [0u8; 32];
    let (kind, rest) = domain.split_at_mut(4);
    kind.copy_from_slice(&crate::DOMAIN_DEPOSIT);
    if let Some(src) = fork_data_root.get(..28) {
        rest.copy_from_slice(src);
    }
    domain
}

/// `compute_signing_root(object_root, domain)`: `hash_tree_root(SigningData{object_root, domain})`.
pub fn signing_root(object_root: &Root, domain: &Root) -> Root {
    hash_pair(object_root, domain)
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]
mod tests {
    use super::*;

    #[test]
    fn domain_starts_with_deposit_type_and_depends_on_fork() {
        let a = deposit_domain([0, 0, 0, 0]);
        let b = deposit_domain([1, 0, 0, 0]);
        assert_eq!(&a[..4], &[3, 0, 0, 0]);
        assert_ne!(a, b);
        // Mainnet's deposit domain (genesis fork 0x00000000), as used by the deposit CLI.
        assert_eq!(
            hex(&a),
            "03000000f5a5fd42d16a20302798ef6ed309979b43003d2320d9f0e8ea9831a9"
        );
    }

    #[test]
    fn message_root_depends_on_every_field() {
        let root = deposit_message_root(&[1; 48], &[2; 32], 32);
        assert_ne!(root, deposit_message_root(&[9; 48], &[2; 32], 32));
        assert_ne!(root, deposit_message_root(&[1; 48], &[9; 32], 32));
        assert_ne!(root, deposit_message_root(&[1; 48], &[2; 32], 33));
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
