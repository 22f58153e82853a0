//! What blocks carry from the deposit contract, and how the producer gets it.
//!
//! A block carries its proposer's [`Eth1Data`] vote and the deposits due at the state's
//! `eth1_deposit_index`, each a [`ProvenDeposit`]: the deposit data with its 33-hash Merkle
//! proof against the agreed deposit root (Ethereum's deposit contract tree, byte-compatible).
//!
//! The producer asks a [`DepositProofs`] implementation — the node's deposit cache, or
//! [`workload::DevDepositLog`](crate::chain::workload::DevDepositLog) in tests and dev tools — for the
//! due deposits, after asking the chain which ones are due ([`Chain::deposits_due`]):
//!
//! ```ignore
//! let due = chain.deposits_due(slot, proposer, &vote)?;
//! let deposits = source.proven_deposits(due.from, due.count, due.eth1_data.deposit_count)?;
//! let block = chain.build_block(slot, proposer, vote, deposits)?;
//! ```
//!
//! [`Chain::build_block_from`] does exactly this.
//!
//! [`Chain::deposits_due`]: crate::chain::Chain::deposits_due
//! [`Chain::build_block_from`]: crate::chain::Chain::build_block_from

use sha2::{Digest, Sha256};

use super::block::{DepositData, Digest32};
/// A deposit as a block carries it (defined in [`crate::deposit`], below the runtime).
pub use crate::deposit::ProvenDeposit;
pub use crate::state::{ETH1_DATA_BYTES, Eth1Data, Eth1State};
pub use deposits_common::tree::{
    DEPOSIT_CONTRACT_TREE_DEPTH, DEPOSIT_PROOF_BYTES, DEPOSIT_PROOF_LEN, DepositProof,
    empty_deposit_root,
};

impl ProvenDeposit {
    /// The deposit's leaf in the deposit tree: `hash_tree_root(DepositData)`.
    pub fn leaf(&self) -> Digest32 {
        self.data.leaf()
    }

    /// Whether the proof places this deposit at `index` under `deposit_root`.
    pub fn verify(&self, index: u64, deposit_root: &Digest32) -> bool {
        deposits_common::tree::verify_deposit_proof(&self.leaf(), &self.proof, index, deposit_root)
    }
}

impl DepositData {
    /// The deposit's leaf in the deposit tree: `hash_tree_root(DepositData)`.
    pub fn leaf(&self) -> Digest32 {
        deposits_common::tree::deposit_data_root(
            &self.pubkey,
            &self.withdrawal_credentials,
            self.amount,
            &self.signature,
        )
    }

    /// What the deposit's signature signs:
    /// `compute_signing_root(DepositMessage, compute_domain(DOMAIN_DEPOSIT, fork_version, 0))`.
    pub fn signing_root(&self, fork_version: [u8; 4]) -> Digest32 {
        let mut pubkey_chunks = [0u8; 64];
        pubkey_chunks[..48].copy_from_slice(&self.pubkey);
        let pubkey_root: [u8; 32] = Sha256::digest(pubkey_chunks).into();
        let mut amount = [0u8; 32];
        amount[..8].copy_from_slice(&self.amount.to_le_bytes());
        let message_root = sha256_pair(
            &sha256_pair(&pubkey_root, &self.withdrawal_credentials),
            &sha256_pair(&amount, &[0u8; 32]),
        );
        let mut version = [0u8; 32];
        version[..4].copy_from_slice(&fork_version);
        let fork_data_root = sha256_pair(&version, &[0u8; 32]);
        let mut domain = [0u8; 32];
        domain[..4].copy_from_slice(&[3, 0, 0, 0]);
        domain[4..].copy_from_slice(&fork_data_root[..28]);
        sha256_pair(&message_root, &domain)
    }
}

fn sha256_pair(a: &[u8], b: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(a);
    h.update(b);
    h.finalize().into()
}

/// The deposits the next block must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueDeposits {
    /// Index of the first due deposit (the state's `eth1_deposit_index`).
    pub from: u64,
    /// How many: `min(max_deposits_per_block, deposit_count - from)`.
    pub count: u64,
    /// The `eth1_data` after the block's vote: proofs are against its deposit root.
    pub eth1_data: Eth1Data,
}

/// Why a deposit source could not produce proven deposits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DepositProofsError {
    /// The source has not seen `deposit_count` deposits yet (it lags the agreed root); transient.
    #[error("the deposit source knows {known} deposits, the agreed root covers {deposit_count}")]
    Behind {
        /// Deposits the source knows.
        known: u64,
        /// The count asked for.
        deposit_count: u64,
    },
    /// The range does not lie below `deposit_count`: the caller's mistake.
    #[error(
        "deposits [{from}, {from} + {count}) do not lie below the deposit count {deposit_count}"
    )]
    OutOfRange {
        /// First index asked for.
        from: u64,
        /// How many.
        count: u64,
        /// The count of the root.
        deposit_count: u64,
    },
    /// The source's root for `deposit_count` differs from the agreed one: the source follows
    /// another contract or chain, or the authorities agreed on a wrong root.
    #[error(
        "the deposit source's root over {deposit_count} deposits is not the agreed root: {reason}"
    )]
    RootMismatch {
        /// The count.
        deposit_count: u64,
        /// The source's account of the disagreement and what to do.
        reason: String,
    },
    /// The source failed (I/O, its store); transient from the chain's point of view.
    #[error("deposit source: {0}")]
    Unavailable(String),
}

/// Something that holds the deposit contract's log and proves its deposits: the node's deposit
/// cache, or [`DevDepositLog`](crate::chain::workload::DevDepositLog).
pub trait DepositProofs {
    /// Checks, before proofs against `eth1_data` are asked for, that the source's tree over
    /// the first `eth1_data.deposit_count` deposits has `eth1_data.deposit_root`: a source
    /// whose log disagrees with the chain says why instead of handing over proofs the block
    /// check refuses. The default accepts (a source that is the chain's own log).
    fn check_root(&self, eth1_data: &Eth1Data) -> Result<(), DepositProofsError> {
        let _ = eth1_data;
        Ok(())
    }

    /// Deposits `[from, from + count)` with their proofs against the deposit root over the
    /// first `deposit_count` deposits (a past root, if the contract has grown since).
    fn proven_deposits(
        &self,
        from: u64,
        count: u64,
        deposit_count: u64,
    ) -> Result<Vec<ProvenDeposit>, DepositProofsError>;
}
