//! A block's shell: what can be checked of a block without any state — its seal is its slot's
//! authority's, and its body is the one its header commits to, within the genesis deposit
//! limit. [`verify_shell`] is the one place both are checked; a [`ShellVerified`] is the proof
//! that they were, so a path that already checked a block (fork choice, before it decides
//! where the block goes) hands the import that proof instead of checking the seal again.
//!
//! Whether the block's slot has started is not part of it: that depends on the local clock,
//! and is the block intake's (`node::intake`, with `clock`'s one skew rule).

use super::ImportError;
use super::block::{self, Block, BlockHash};
use super::genesis::Genesis;

/// A block whose shell was verified (seal and body against its header), with its hash.
#[derive(Debug, Clone, Copy)]
pub struct ShellVerified<'a> {
    block: &'a Block,
    hash: BlockHash,
}

impl<'a> ShellVerified<'a> {
    /// The block.
    pub fn block(&self) -> &'a Block {
        self.block
    }

    /// Its hash (the header's).
    pub fn hash(&self) -> BlockHash {
        self.hash
    }
}

/// Checks `block`'s seal (chains with authorities: its slot's authority signed it, over the
/// chain's `genesis_hash`) and its body (the one the header commits to, at most the genesis
/// `max_deposits_per_block` deposits). The errors name the block.
pub fn verify_shell<'a>(
    block: &'a Block,
    genesis: &Genesis,
    genesis_hash: &BlockHash,
) -> Result<ShellVerified<'a>, ImportError> {
    let hash = block.hash();
    check_seal(genesis, genesis_hash, block, hash)?;
    check_body(block, genesis.max_deposits_per_block, hash)?;
    Ok(ShellVerified { block, hash })
}

/// Checks that `block` comes from its slot's authority (chains with an authority set).
pub(crate) fn check_seal(
    genesis: &Genesis,
    genesis_hash: &BlockHash,
    block: &Block,
    hash: BlockHash,
) -> Result<(), ImportError> {
    let bad = |reason: String| ImportError::BadSeal { hash, reason };
    let Some(expected) = genesis.proposer_for(block.header.slot) else {
        return Ok(());
    };
    if block.header.proposer != expected {
        return Err(bad(format!(
            "slot {} belongs to authority {expected}, the header names {}",
            block.header.slot, block.header.proposer
        )));
    }
    let authority = usize::try_from(expected)
        .ok()
        .and_then(|i| genesis.authorities.get(i))
        .ok_or_else(|| bad(format!("authority {expected} does not exist")))?;
    match &block.seal {
        block::Seal::Unsigned => Err(bad("unsigned, but this chain has authorities".into())),
        block::Seal::Ed25519(signature) => {
            let id = crate::crypto::identity::NodeId::from_bytes(*authority);
            if id.verify(&block::seal_message(genesis_hash, &block.hash()), signature) {
                Ok(())
            } else {
                Err(bad(format!(
                    "signature does not verify against authority {id}"
                )))
            }
        }
    }
}

/// Checks that the body is the one the header commits to and within the deposit limit.
pub(crate) fn check_body(
    block: &Block,
    max_deposits: u16,
    hash: BlockHash,
) -> Result<(), ImportError> {
    let bad = |reason: String| ImportError::BadBody { hash, reason };
    if block.body.deposits.len() > usize::from(max_deposits) {
        return Err(bad(format!(
            "{} deposits, limit {max_deposits}",
            block.body.deposits.len()
        )));
    }
    if block.body.root() != block.header.body_root {
        return Err(bad("body does not match the header's body root".into()));
    }
    Ok(())
}
