//! The steps of one block's transition over any base state, private to `consensus`: the only
//! way to run them is [`apply_block`](super::apply_block) (or
//! [`build_block`](super::build_block) for a block being built).

use std::sync::Arc;

use super::block::{BlockBody, BlockHeader, StateRoot};
use super::deposit_engine::{DepositEngine, DepositModules};
use super::errors::ImportError;
use super::eth1::{Eth1Data, Eth1State};
use super::genesis::Genesis;
use super::{DepositsResult, deposits_v3, migration};
use crate::deposit::{DepositContext, DepositOutcome};
use crate::runtime::{CallError, Kind};
use crate::state::{Eth1Error, PendingQueue, Registry, RegistryDelta, Schedule, state_root_with};

/// The major version of the deposits contract whose modules run a block through
/// [`deposits_v3::run`] (Electra's pending-deposit queue).
pub const QUEUE_CONTRACT_MAJOR: u64 = 3;

/// What a block's transition produced, before it is committed.
pub(super) struct Transition {
    pub(super) outcomes: Vec<DepositOutcome>,
    pub(super) delta: RegistryDelta,
    pub(super) eth1: Eth1State,
    pub(super) schedule: Schedule,
    /// deposits@3's queue after the block: `Some` once the chain has run that contract.
    pub(super) pending: Option<PendingQueue>,
    pub(super) root: StateRoot,
}

/// The parent's state a block's transition reads besides its registry: eth1 state, module
/// schedule, deposits@3's queue (if the parent has one) and the parent block's slot (which
/// says whether the block starts an epoch).
pub(super) struct Parent<'a> {
    pub(super) eth1: &'a Eth1State,
    pub(super) schedule: &'a Schedule,
    pub(super) pending: Option<&'a PendingQueue>,
    pub(super) slot: u64,
}

/// The deposits engine that runs the block at `height` on a state with `schedule`: the
/// scheduled module, or `default` when the schedule names none or names that very module. A
/// module `modules` does not have ready is [`ImportError::ModuleMissing`] (ours, not the
/// block's), and `modules` is told ([`DepositModules::missing`]) so the node fetches it.
pub(super) fn engine_for(
    schedule: &Schedule,
    height: u64,
    default: &DepositEngine,
    modules: Option<&Arc<dyn DepositModules>>,
) -> Result<DepositEngine, ImportError> {
    let Some(hash) = schedule.module_at(Kind::Deposits, height) else {
        return Ok(default.clone());
    };
    if default.hash() == Some(hash) {
        return Ok(default.clone());
    }
    if let Some(engine) = modules.and_then(|m| m.deposits(&hash)) {
        return Ok(engine);
    }
    if let Some(modules) = modules {
        modules.missing(Kind::Deposits, &hash, height);
    }
    Err(ImportError::ModuleMissing {
        kind: Kind::Deposits,
        module: hash,
        height,
    })
}

/// What the deposits module sees of the block and the state before it.
pub(super) fn context(genesis: &Genesis, header: &BlockHeader, eth1: &Eth1State) -> DepositContext {
    DepositContext {
        height: header.height,
        slot: header.slot,
        genesis_fork_version: genesis.genesis_fork_version,
        eth1_data: eth1.eth1_data,
        eth1_deposit_index: eth1.deposit_index,
    }
}

/// `eth1` after `proposer`'s vote at `slot` (`process_eth1_data`).
pub(super) fn voted(
    genesis: &Genesis,
    eth1: &Eth1State,
    slot: u64,
    proposer: u32,
    vote: Eth1Data,
) -> Result<Eth1State, Eth1Error> {
    eth1.with_vote(
        slot,
        proposer,
        vote,
        genesis.eth1_voting_period_slots,
        genesis.authorities.len(),
    )
}

/// Runs a block's body over `registry` and `parent` without changing any: the eth1 vote, the
/// upgrade votes, exactly the due deposits through the engine `engine_at` gives for the
/// block's height — a `modnode:deposits@3.0.0` module through [`deposits_v3::run`] on the
/// parent's queue (an empty one for the chain's first such block), any other engine as
/// before, the queue carried unchanged —, the new state root (with the queue, if any,
/// [`state_root_with`]).
pub(super) fn transition(
    genesis: &Genesis,
    engine_at: &dyn Fn(u64) -> Result<DepositEngine, ImportError>,
    registry: &Arc<Registry>,
    parent: &Parent<'_>,
    header: &BlockHeader,
    body: &BlockBody,
) -> Result<Transition, ImportError> {
    let eth1 = parent.eth1;
    let schedule = parent.schedule;
    let hash = header.hash();
    let voted = voted(genesis, eth1, header.slot, header.proposer, body.eth1_vote)
        .map_err(|source| ImportError::Eth1Vote { hash, source })?;
    let schedule = schedule
        .with_block(
            header.height,
            header.proposer,
            body.schedule_votes(),
            &genesis.governance(),
        )
        .map_err(|source| ImportError::UpgradeVote { hash, source })?;
    let deposits = engine_at(header.height)?;
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
    let call_error = |e: CallError| match e {
        CallError::Module(fault) => ImportError::Module(fault, hash),
        CallError::Host(failure) => ImportError::Host(failure, hash),
    };
    let ctx = context(genesis, header, &voted);
    // The module the height activates migrates the parent's state first, if it brings a
    // migration: the block's deposits then run on what it left.
    let migrated = match &deposits {
        DepositEngine::Module(module)
            if module.has_migration()
                && migration::activates(parent.schedule, header.height, &module.hash()) =>
        {
            let done = migration::run(module, genesis, registry, parent.pending, header.height)
                .map_err(|source| ImportError::Migration {
                    hash,
                    height: header.height,
                    module: module.hash(),
                    source: Box::new(source),
                })?;
            tracing::info!(
                module = %module.hash(),
                height = header.height,
                fuel = done.fuel_used,
                changed = done.changed,
                "ran the deposits module's migration at its activation height"
            );
            Some(done)
        }
        _ => None,
    };
    let migration_error = |source: migration::MigrationError| ImportError::Migration {
        hash,
        height: header.height,
        module: deposits.hash().unwrap_or_default(),
        source: Box::new(source),
    };
    // The registry and queue the block's deposits run on.
    let work = match &migrated {
        Some(m) => Arc::new(m.registry.clone()),
        None => registry.clone(),
    };
    let parent_pending = match &migrated {
        Some(m) => Some(&m.pending),
        None => parent.pending,
    };
    let (mut result, pending) = match &deposits {
        DepositEngine::Module(module) if module.contract().major == QUEUE_CONTRACT_MAJOR => {
            let empty = PendingQueue::new();
            let queue = parent_pending.unwrap_or(&empty);
            let step = deposits_v3::run(
                module,
                genesis,
                &work,
                queue,
                parent.slot,
                &ctx,
                &body.deposits,
            )
            .map_err(|source| match source {
                deposits_v3::V3StepError::Call(e) => call_error(e),
                source => ImportError::DepositsV3 { hash, source },
            })?;
            let result = DepositsResult {
                outcomes: Vec::new(),
                delta: step.delta,
                eth1_deposit_index: step.eth1_deposit_index,
            };
            (result, Some(step.pending))
        }
        _ => {
            let result = deposits
                .apply(work.clone(), &ctx, &body.deposits)
                .map_err(call_error)?
                .map_err(|error| ImportError::Rejected { hash, error })?;
            (result, parent_pending.cloned())
        }
    };
    if let Some(m) = &migrated {
        // One delta for the block: the migration's and the deposits' together.
        result.delta =
            migration::rebase(registry, &m.registry, &result.delta).map_err(migration_error)?;
    }
    let eth1 = voted
        .after_deposits(found)
        .map_err(|source| ImportError::Eth1Vote { hash, source })?;
    if result.eth1_deposit_index != eth1.deposit_index {
        return Err(ImportError::DepositIndexMismatch {
            hash,
            reported: result.eth1_deposit_index,
            expected: eth1.deposit_index,
        });
    }
    let registry_root = registry
        .root_after(&result.delta)
        .map_err(|source| ImportError::State { hash, source })?;
    let pending_root = pending.as_ref().map(PendingQueue::root);
    Ok(Transition {
        outcomes: result.outcomes,
        delta: result.delta,
        root: StateRoot::new(state_root_with(
            &registry_root,
            &eth1,
            &schedule,
            pending_root.as_ref(),
        )),
        eth1,
        schedule,
        pending,
    })
}
