//! A block's state transition over any base state: what import runs on the head and what
//! regeneration replays on a cached ancestor ([`replay`]).

use std::sync::{Arc, RwLock};

use super::block::{Block, BlockBody, BlockHeader};
use super::deposit_engine::DepositEngine;
use super::errors::ImportError;
use super::eth1::{Eth1Data, Eth1State};
use super::genesis::Genesis;
use super::hex32;
use crate::runtime::CallError;
use crate::runtime::deposits::{BlockContext, Outcome, WitEth1Data};
use crate::state::{Registry, RegistryDelta, StateError, StateSnapshot, state_root};

/// What a block's transition produced, before it is committed.
pub(crate) struct Transition {
    pub(crate) outcomes: Vec<Outcome>,
    pub(crate) delta: RegistryDelta,
    pub(crate) eth1: Eth1State,
    pub(crate) root: [u8; 32],
}

/// What the deposits module sees of the block and the state before it.
fn context(genesis: &Genesis, header: &BlockHeader, eth1: &Eth1State) -> BlockContext {
    BlockContext {
        height: header.height,
        slot: header.slot,
        genesis_fork_version: genesis.genesis_fork_version.to_vec(),
        eth1_data: WitEth1Data {
            deposit_root: eth1.eth1_data.deposit_root.to_vec(),
            deposit_count: eth1.eth1_data.deposit_count,
            block_hash: eth1.eth1_data.block_hash.to_vec(),
        },
        eth1_deposit_index: eth1.deposit_index,
    }
}

/// `eth1` after `proposer`'s vote at `slot` (`process_eth1_data`).
pub(crate) fn voted(
    genesis: &Genesis,
    eth1: &Eth1State,
    slot: u64,
    proposer: u32,
    vote: Eth1Data,
    name: &str,
) -> Result<Eth1State, ImportError> {
    eth1.with_vote(
        slot,
        proposer,
        vote,
        genesis.eth1_voting_period_slots,
        genesis.authorities.len(),
    )
    .map_err(|source| ImportError::Eth1Vote {
        hash: name.to_string(),
        source,
    })
}

/// Runs a block's body over `registry` and `eth1` without changing either: the vote, exactly
/// the due deposits, the deposits engine, the new state root.
pub(crate) fn transition(
    genesis: &Genesis,
    deposits: &DepositEngine,
    registry: &Arc<RwLock<Registry>>,
    eth1: &Eth1State,
    header: &BlockHeader,
    body: &BlockBody,
) -> Result<Transition, ImportError> {
    let hash = hex32(&header.hash());
    let voted = voted(
        genesis,
        eth1,
        header.slot,
        header.proposer,
        body.eth1_vote,
        &hash,
    )?;
    let expected = voted.due(u64::from(genesis.max_deposits_per_block));
    let found = u64::try_from(body.deposits.len()).unwrap_or(u64::MAX);
    if found != expected {
        return Err(ImportError::WrongDepositCount {
            hash,
            expected,
            found,
            from: voted.deposit_index,
        });
    }
    let result = deposits
        .process(
            registry.clone(),
            &context(genesis, header, &voted),
            &body.deposits,
        )
        .map_err(|e| match e {
            CallError::Module(fault) => ImportError::Module(fault, hash.clone()),
            CallError::Host(failure) => ImportError::Host(failure, hash.clone()),
        })?
        .map_err(|error| ImportError::Rejected {
            hash: hash.clone(),
            error,
        })?;
    let eth1 = voted
        .after_deposits(found)
        .map_err(|source| ImportError::Eth1Vote {
            hash: hash.clone(),
            source,
        })?;
    if result.eth1_deposit_index != eth1.deposit_index {
        return Err(ImportError::DepositIndexMismatch {
            hash,
            reported: result.eth1_deposit_index,
            expected: eth1.deposit_index,
        });
    }
    let registry_root = registry
        .read()
        .map_err(|_| ImportError::State {
            hash: hash.clone(),
            source: StateError::Poisoned,
        })?
        .root_after(&result.delta)
        .map_err(|source| ImportError::State { hash, source })?;
    Ok(Transition {
        outcomes: result.outcomes,
        delta: result.delta,
        root: state_root(&registry_root, &eth1),
        eth1,
    })
}

/// The state after `block`, replayed on `base` (the state after its parent) with `deposits`:
/// the block's state root is checked like on import. `base` is never changed.
///
/// The block's header must follow `base` (parent hash, height); seal and body are not checked
/// again, as every stored block was checked before it was stored.
pub fn replay(
    genesis: &Genesis,
    deposits: &DepositEngine,
    base: &StateSnapshot,
    block: &Block,
) -> Result<StateSnapshot, ImportError> {
    let header = &block.header;
    let hash = block.hash();
    let name = hex32(&hash);
    if header.parent_hash != base.block_hash()
        || Some(header.height) != base.height().checked_add(1)
    {
        return Err(ImportError::NotNext {
            hash: name,
            reason: format!(
                "replayed on state of {} at height {}",
                hex32(&base.block_hash()),
                base.height()
            ),
        });
    }
    let registry = Arc::new(RwLock::new(base.registry().clone()));
    let done = transition(
        genesis,
        deposits,
        &registry,
        base.eth1(),
        header,
        &block.body,
    )?;
    if done.root != header.state_root {
        return Err(ImportError::StateRootMismatch {
            hash: name,
            claimed: hex32(&header.state_root),
            computed: hex32(&done.root),
        });
    }
    let poisoned = |name: &str| ImportError::State {
        hash: name.to_string(),
        source: StateError::Poisoned,
    };
    let mut registry = Arc::try_unwrap(registry)
        .map_err(|_| poisoned(&name))?
        .into_inner()
        .map_err(|_| poisoned(&name))?;
    registry
        .apply(&done.delta)
        .map_err(|source| ImportError::State {
            hash: name.clone(),
            source,
        })?;
    Ok(StateSnapshot::new(hash, header.height, registry, done.eth1))
}
