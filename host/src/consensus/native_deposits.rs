//! A native Rust reference of the deposits transition (phase0 `process_deposit`: the Merkle
//! proof at the running index, then `apply_deposit`), written independently of the guest
//! modules — its own SSZ leaf and branch check: the oracle for property tests and the
//! baseline of `modnode bench deposits`. Test and bench code: built with the `test-utils`
//! feature only; no node runs it.

use std::collections::HashSet;

use sha2::{Digest, Sha256};

use super::block::DepositData;
use super::deposit_engine::DepositsResult;
use super::eth1::ProvenDeposit;
use crate::crypto::{self, SignatureSet};
use crate::deposit::{DepositContext, DepositOutcome, DepositRejection, RegistryRejection};
use crate::state::{RegistryOverlay, SharedRegistry};

const GWEI_PER_ETH: u64 = 1_000_000_000;
const MAX_EFFECTIVE_BALANCE: u64 = 32 * GWEI_PER_ETH;

fn sha256_pair(a: &[u8], b: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(a);
    h.update(b);
    h.finalize().into()
}

/// `hash_tree_root(DepositData)`: pubkey (2 chunks), withdrawal credentials, amount (uint64
/// chunk), signature (3 chunks padded to 4).
pub fn deposit_leaf(deposit: &DepositData) -> [u8; 32] {
    let mut pubkey_chunks = [0u8; 64];
    pubkey_chunks[..48].copy_from_slice(&deposit.pubkey);
    let mut signature_chunks = [0u8; 128];
    signature_chunks[..96].copy_from_slice(&deposit.signature);
    let mut amount = [0u8; 32];
    amount[..8].copy_from_slice(&deposit.amount.to_le_bytes());
    let signature_root = sha256_pair(
        &Sha256::digest(&signature_chunks[..64]),
        &Sha256::digest(&signature_chunks[64..]),
    );
    sha256_pair(
        &sha256_pair(
            &Sha256::digest(pubkey_chunks),
            &deposit.withdrawal_credentials,
        ),
        &sha256_pair(&amount, &signature_root),
    )
}

/// Whether `proof` places `leaf` at deposit `index` (below 2^32) under `root`: 33 levels, the
/// last one the count chunk.
pub fn proof_is_valid(leaf: [u8; 32], proof: &[[u8; 32]; 33], index: u64, root: &[u8; 32]) -> bool {
    if index >= 1 << 32 {
        return false;
    }
    let node = proof
        .iter()
        .enumerate()
        .fold(leaf, |node, (level, sibling)| {
            if (index >> level) & 1 == 1 {
                sha256_pair(sibling, &node)
            } else {
                sha256_pair(&node, sibling)
            }
        });
    node == *root
}

/// How the reference checks signatures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// One verification per new validator.
    OneByOne,
    /// One batch per block, falling back to one by one if it fails.
    Batched,
}

/// Applies `deposits` over `registry`; returns the outcomes, the delta and the deposit index
/// after the block, or why the block is invalid. Written against the chain's deposit types: it
/// is the oracle of what a deposits module does, not of how the module interface encodes it.
pub fn process(
    registry: SharedRegistry,
    ctx: &DepositContext,
    proven: &[ProvenDeposit],
    verification: Verification,
) -> Result<DepositsResult, DepositRejection> {
    let fork_version = ctx.genesis_fork_version;
    let root = ctx.eth1_data.deposit_root;
    let mut index = ctx.eth1_deposit_index;
    for p in proven {
        if !proof_is_valid(deposit_leaf(&p.data), &p.proof, index, &root) {
            return Err(DepositRejection::BadProof(index));
        }
        index = index.checked_add(1).ok_or_else(|| {
            DepositRejection::BadContext("the eth1 deposit index overflows".into())
        })?;
    }
    let deposits: Vec<DepositData> = proven.iter().map(|p| p.data).collect();
    let deposits = deposits.as_slice();
    let mut overlay = RegistryOverlay::new(registry);
    let lookup_err = |e| DepositRejection::Registry(RegistryRejection::from(&e));

    // Batch pass: first deposit of each pubkey unknown before the block.
    let mut prevalidated = vec![false; deposits.len()];
    if verification == Verification::Batched {
        let mut members = Vec::new();
        let mut roots = Vec::new();
        let mut seen = HashSet::with_capacity(deposits.len());
        for (i, d) in deposits.iter().enumerate() {
            if !seen.insert(d.pubkey) {
                continue;
            }
            if overlay.index_of(&d.pubkey).is_none() {
                members.push(i);
                roots.push(d.signing_root(fork_version));
            }
        }
        let sets: Vec<SignatureSet<'_>> = members
            .iter()
            .zip(&roots)
            .filter_map(|(&i, root)| {
                let d = deposits.get(i)?;
                Some(SignatureSet {
                    pubkey: &d.pubkey,
                    message: root,
                    signature: &d.signature,
                })
            })
            .collect();
        let valid = match sets.as_slice() {
            [] => false,
            [one] => crypto::verify(one.pubkey, one.message, one.signature),
            many => crypto::verify_batch(many),
        };
        if valid {
            for i in members {
                if let Some(pre) = prevalidated.get_mut(i) {
                    *pre = true;
                }
            }
        }
    }

    let mut outcomes = Vec::with_capacity(deposits.len());
    for (d, pre) in deposits.iter().zip(prevalidated) {
        let outcome = match overlay.index_of(&d.pubkey) {
            Some(index) => {
                overlay
                    .increase_balance(index, d.amount)
                    .map_err(lookup_err)?;
                DepositOutcome::ToppedUp(index)
            }
            None => {
                let valid =
                    pre || crypto::verify(&d.pubkey, &d.signing_root(fork_version), &d.signature);
                if valid {
                    let effective = d
                        .amount
                        .checked_rem(GWEI_PER_ETH)
                        .and_then(|rem| d.amount.checked_sub(rem))
                        .unwrap_or(0)
                        .min(MAX_EFFECTIVE_BALANCE);
                    let index = overlay
                        .add_validator(&d.pubkey, &d.withdrawal_credentials, effective, d.amount)
                        .map_err(lookup_err)?;
                    DepositOutcome::Created(index)
                } else {
                    DepositOutcome::InvalidSignature
                }
            }
        };
        outcomes.push(outcome);
    }
    Ok(DepositsResult {
        outcomes,
        delta: overlay.into_delta(),
        eth1_deposit_index: index,
    })
}
