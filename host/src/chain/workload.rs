//! Deterministic deposit workloads: real BLS keypairs and signatures derived from seeds, and an
//! in-memory deposit contract log ([`DevDepositLog`]) that proves them.
//!
//! Not behind the `test-utils` feature, because dev chains and tools use it —
//! `modnode deposit submit --dev-seed`, `modnode debug import-loop`, the testnet runner's
//! deposits, `modnode upgrade-check`'s generated cases — and so does a node, measuring a
//! proposed deposits module's cost on generated blocks (`node::upgrades`). Tests and
//! benchmarks use it too.

use sha2::{Digest, Sha256};

use super::block::DepositData;
use super::eth1::{DepositProofs, DepositProofsError, Eth1Data, ProvenDeposit};
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
    d.signature = kp.sign(&d.signing_root(fork_version));
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
        deposits.push(new_validator(
            seed,
            32_000_000_000u64.saturating_add(i),
            fork_version,
        ));
    }
    if let Some(pk) = existing.get(
        usize::try_from(height)
            .unwrap_or(0)
            .checked_rem(existing.len())
            .unwrap_or(0),
    ) {
        deposits.push(unsigned(*pk, 1_000_000_000));
    }
    if height.is_multiple_of(3) {
        deposits.push(unsigned(keypair(height.wrapping_add(1 << 40)).pubkey, 5));
    }
    deposits
}

/// A deposit contract log kept in memory, proving its deposits with the naive reference tree
/// (`deposits_common::tree::reference`, rebuilt per request: O(n) per call): the deposit source
/// of tests, benchmarks, `modnode debug import-loop` and the cost check of a proposed deposits
/// module (a few small blocks). Nodes follow their deposits with the deposit cache.
#[derive(Debug, Clone, Default)]
pub struct DevDepositLog {
    deposits: Vec<DepositData>,
    tree: deposits_common::tree::reference::NaiveDepositTree,
}

impl DevDepositLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a deposit (as the contract's `deposit` call would); returns its index.
    pub fn push(&mut self, deposit: DepositData) -> u64 {
        let index = self.tree.len();
        self.tree.push(deposit.leaf());
        self.deposits.push(deposit);
        index
    }

    /// Deposits in the log.
    pub fn len(&self) -> u64 {
        self.tree.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// The contract's checkpoint after its first `count` deposits (block hash: a hash of the
    /// root, standing in for the source block); `None` if the log is shorter.
    pub fn eth1_data_at(&self, count: u64) -> Option<Eth1Data> {
        let deposit_root = self.tree.root_at(count)?;
        Some(Eth1Data {
            deposit_root,
            deposit_count: count,
            block_hash: Sha256::digest(deposit_root).into(),
        })
    }

    /// The checkpoint over the whole log.
    pub fn eth1_data(&self) -> Eth1Data {
        self.eth1_data_at(self.len()).unwrap_or_default()
    }
}

impl DepositProofs for DevDepositLog {
    fn proven_deposits(
        &self,
        from: u64,
        count: u64,
        deposit_count: u64,
    ) -> Result<Vec<ProvenDeposit>, DepositProofsError> {
        let out_of_range = DepositProofsError::OutOfRange {
            from,
            count,
            deposit_count,
        };
        if deposit_count > self.len() {
            return Err(DepositProofsError::Behind {
                known: self.len(),
                deposit_count,
            });
        }
        let end = from
            .checked_add(count)
            .filter(|&end| end <= deposit_count)
            .ok_or(out_of_range.clone())?;
        let proofs = self
            .tree
            .proofs(from, end, deposit_count)
            .ok_or(out_of_range.clone())?;
        (from..end)
            .zip(proofs)
            .map(|(index, proof)| {
                usize::try_from(index)
                    .ok()
                    .and_then(|i| self.deposits.get(i))
                    .map(|data| ProvenDeposit { data: *data, proof })
                    .ok_or(out_of_range.clone())
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_log_proves_against_current_and_past_roots() {
        let mut log = DevDepositLog::new();
        for seed in 0..5u8 {
            log.push(unsigned([seed; 48], u64::from(seed)));
        }
        let past = log.eth1_data_at(3).unwrap();
        let now = log.eth1_data();
        assert_eq!(now.deposit_count, 5);
        let proven = log.proven_deposits(1, 2, 3).unwrap();
        assert_eq!(proven.len(), 2);
        assert!(proven[0].verify(1, &past.deposit_root));
        assert!(proven[1].verify(2, &past.deposit_root));
        assert!(!proven[0].verify(1, &now.deposit_root));
        assert!(!proven[1].verify(1, &past.deposit_root));
        assert_eq!(
            log.proven_deposits(2, 2, 3),
            Err(DepositProofsError::OutOfRange {
                from: 2,
                count: 2,
                deposit_count: 3
            })
        );
        assert_eq!(
            log.proven_deposits(0, 1, 6),
            Err(DepositProofsError::Behind {
                known: 5,
                deposit_count: 6
            })
        );
        assert_eq!(
            log.proven_deposits(u64::MAX, 2, 5).map(|v| v.len()).ok(),
            None
        );
        assert_eq!(
            DevDepositLog::new().eth1_data().deposit_root,
            crate::chain::eth1::empty_deposit_root()
        );
    }
}
