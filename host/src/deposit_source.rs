//! The deposit source of an authority: the deposit contract (the built-in dev contract by
//! default, any Ethereum execution client by configuration), followed over the Ethereum
//! JSON-RPC subset, into a deposit cache that proves deposits for the block producer.
//!
//! - [`tree`]: the deposit contract's incremental Merkle tree, byte-compatible with Ethereum.
//! - [`cache`]: every followed deposit with proofs against any past root.
//! - [`abi`]: the `DepositEvent` log encoding.
//! - [`dev_contract`]: the built-in dev deposit contract, persisted in sled.
//! - [`rpc`], [`server`]: the JSON-RPC subset, and its HTTP endpoint.
//! - [`client`]: a small JSON-RPC client.
//! - [`follower`]: the sans-IO follower and its polling driver.
//!
//! [`DepositSource`] is what the node shares between the follower and the producer.

pub mod abi;
pub mod cache;
pub mod client;
pub mod dev_contract;
pub mod follower;
pub mod rpc;
pub mod server;
pub mod tree;

use std::sync::Mutex;

use self::cache::{CacheError, DepositCache, DepositProof};
use self::dev_contract::Eth1Block;
use self::follower::Followed;
use crate::chain::block::DepositData;

/// The producer's vote: the deposit root and count at the followed block, and its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eth1Vote {
    /// `root_at(deposit_count)`.
    pub deposit_root: [u8; 32],
    /// Deposits in the log up to the followed block.
    pub deposit_count: u64,
    /// The followed block's hash.
    pub block_hash: [u8; 32],
}

#[derive(Debug, Default)]
struct SourceState {
    cache: DepositCache,
    followed: Option<(Eth1Block, u64)>,
}

/// The followed deposit log, shared by the follower (writes) and the producer (reads).
#[derive(Debug, Default)]
pub struct DepositSource {
    state: Mutex<SourceState>,
}

/// Why the source cannot prove what the producer asks for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The cache cannot answer (usually: the follower is behind the agreed count; transient).
    #[error("deposit cache: {0}")]
    Cache(#[from] CacheError),
    /// The source's lock was poisoned by a panic (ours).
    #[error("the deposit source's lock is poisoned")]
    Poisoned,
}

impl DepositSource {
    /// An empty source.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> Result<std::sync::MutexGuard<'_, SourceState>, SourceError> {
        self.state.lock().map_err(|_| SourceError::Poisoned)
    }

    /// Appends what the follower read. The follower checked the indices are contiguous; a
    /// `Followed` that does not start at the cache's length is refused (and logged).
    pub fn append(&self, followed: Followed) {
        let Ok(mut state) = self.state() else {
            tracing::error!("deposit source lock poisoned; follower update dropped");
            return;
        };
        if followed.first_index != state.cache.len() {
            tracing::error!(
                first = followed.first_index,
                cached = state.cache.len(),
                "follower update does not continue the deposit cache; dropped"
            );
            return;
        }
        for deposit in followed.deposits {
            if let Err(e) = state.cache.push(deposit) {
                tracing::error!(error = %e, "deposit cache refused a followed deposit");
                return;
            }
        }
        state.followed = Some((followed.block, followed.deposit_count));
    }

    /// Deposits known.
    pub fn len(&self) -> u64 {
        self.state().map(|s| s.cache.len()).unwrap_or(0)
    }

    /// Whether no deposit is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The vote for the last followed block, once one is followed.
    pub fn eth1_vote(&self) -> Result<Option<Eth1Vote>, SourceError> {
        let state = self.state()?;
        let Some((block, count)) = state.followed else {
            return Ok(None);
        };
        Ok(Some(Eth1Vote {
            deposit_root: state.cache.root_at(count)?,
            deposit_count: count,
            block_hash: block.hash,
        }))
    }

    /// Deposits `from..from + count` with their branches against the root of the first
    /// `deposit_count` deposits.
    pub fn proven_deposits(
        &self,
        from: u64,
        count: u64,
        deposit_count: u64,
    ) -> Result<Vec<(DepositData, DepositProof)>, SourceError> {
        let state = self.state()?;
        let end = from.saturating_add(count);
        let mut out = Vec::new();
        for index in from..end {
            let proof = state.cache.proof(index, deposit_count)?;
            let deposit = *state
                .cache
                .deposit(index)
                .ok_or(CacheError::IndexOutOfRange {
                    index,
                    count: deposit_count,
                })?;
            out.push((deposit, proof));
        }
        Ok(out)
    }
}
