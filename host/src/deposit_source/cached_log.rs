//! A deposit contract log over the node's deposit cache, for runs of thousands of blocks with
//! deposits (pruning tests, `modnode bench prune`). Test and bench code: built with the
//! `test-utils` feature only.

use sha2::{Digest, Sha256};

use super::cache::DepositCache;
use crate::chain::block::DepositData;
use crate::chain::eth1::{DepositProofs, DepositProofsError, Eth1Data, ProvenDeposit};

/// A deposit contract log over the node's deposit cache ([`DepositCache`]): roots and
/// proofs in O(log n), for runs of thousands of blocks with deposits (pruning tests and
/// `modnode bench prune`), where `chain::workload::DevDepositLog`'s O(n) per call dominates.
#[derive(Debug, Clone, Default)]
pub struct CachedDepositLog {
    cache: DepositCache,
}

impl CachedDepositLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a deposit; `None` once the contract's tree is full (2^32 deposits).
    pub fn push(&mut self, deposit: DepositData) -> Option<u64> {
        self.cache.push(deposit).ok()
    }

    /// The checkpoint over the whole log (block hash: a hash of the root).
    pub fn eth1_data(&self) -> Eth1Data {
        let count = self.cache.len();
        let deposit_root = self.cache.root_at(count).unwrap_or_default();
        Eth1Data {
            deposit_root,
            deposit_count: count,
            block_hash: Sha256::digest(deposit_root).into(),
        }
    }
}

impl DepositProofs for CachedDepositLog {
    fn proven_deposits(
        &self,
        from: u64,
        count: u64,
        deposit_count: u64,
    ) -> Result<Vec<ProvenDeposit>, DepositProofsError> {
        self.cache.proven_range(from, count, deposit_count)
    }
}
