//! Deterministic deposit workloads for development, benchmarks and crash tests: real BLS
//! keypairs and signatures derived from seeds.

use sha2::{Digest, Sha256};

use super::block::DepositData;
use super::native_deposits::deposit_signing_root;
use crate::crypto::Keypair;

/// The keypair of workload seed `seed`.
pub fn keypair(seed: u64) -> Keypair {
    Keypair::from_seed(
        Sha256::digest([b"modnode-workload".as_slice(), &seed.to_le_bytes()].concat()).into(),
    )
}

/// A deposit for a new validator with a valid proof of possession.
pub fn new_validator(seed: u64, amount: u64, fork_version: [u8; 4]) -> DepositData {
    let kp = keypair(seed);
    let mut d = DepositData {
        pubkey: kp.pubkey,
        withdrawal_credentials: withdrawal_credentials(seed),
        amount,
        signature: [0; 96],
    };
    d.signature = kp.sign(&deposit_signing_root(&d, fork_version));
    d
}

/// A deposit for `pubkey` whose signature is garbage: a valid top-up if the pubkey exists, an
/// invalid deposit otherwise.
pub fn unsigned(pubkey: [u8; 48], amount: u64) -> DepositData {
    DepositData {
        pubkey,
        withdrawal_credentials: [0x01; 32],
        amount,
        signature: [0xab; 96],
    }
}

/// Withdrawal credentials of workload seed `seed` (BLS-style prefix 0x00).
pub fn withdrawal_credentials(seed: u64) -> [u8; 32] {
    let mut wc: [u8; 32] = Sha256::digest(seed.to_le_bytes()).into();
    wc[0] = 0;
    wc
}

/// The deposits of dev block `height`: new validators (seeded by height), a top-up of an
/// existing genesis validator and, every third block, a deposit with a bad signature.
pub fn dev_block(height: u64, existing: &[[u8; 48]], fork_version: [u8; 4]) -> Vec<DepositData> {
    let mut deposits = Vec::new();
    for i in 0..3u64 {
        let seed = height.wrapping_mul(16).wrapping_add(i);
        deposits.push(new_validator(seed, 32_000_000_000 + i, fork_version));
    }
    if let Some(pk) = existing.get(usize::try_from(height).unwrap_or(0) % existing.len().max(1)) {
        deposits.push(unsigned(*pk, 1_000_000_000));
    }
    if height.is_multiple_of(3) {
        deposits.push(unsigned(keypair(height.wrapping_add(1 << 40)).pubkey, 5));
    }
    deposits
}
