//! A deposits module's migration (`modnode:deposits/migration@3.0.0`, `wit/deposits-3`), as
//! the transition runs it: exactly once, in the transition of the block at the height the
//! schedule activates the module ([`activates`]), on that block's parent registry and queue and
//! before the block's deposits. Its changes become part of the block's one registry delta and
//! its queue, so they are committed by the block's state root and batch and undone by its
//! revert; replay, side-branch execution and regeneration run it again exactly where import
//! did, since they run the same transition on the same parent state.
//!
//! A migration that traps, runs out of fuel or refuses the state stops import at the
//! activation height ([`MigrationError`], naming the module): every node fails the same way,
//! so the chain waits at the parent instead of splitting, and `module propose` refuses such a
//! module beforehand by running its migration on the head's state
//! ([`check`]).

use std::sync::Arc;

use super::genesis::Genesis;
use crate::deposit::ChainContext;
use crate::runtime::CallError;
use crate::runtime::Kind;
use crate::runtime::deposits::DepositsModule;
use crate::state::{PendingError, PendingQueue, Registry, RegistryDelta, Schedule, StateError};

/// Why a module's migration failed. Every variant stops import at the activation height.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// The migration trapped, ran out of fuel or hit a pinned limit (the module's fault), or
    /// the host failed serving it (ours).
    #[error("its migration failed: {0}")]
    Call(#[from] CallError),
    /// The migration refused the state it was given (the module's verdict).
    #[error("its migration refused the state: {0:?}")]
    Rejected(super::DepositRejection),
    /// The migration's queue changes do not apply (dropping more than the queue holds: the
    /// module's fault).
    #[error("its migration's queue changes do not apply: {0}")]
    Queue(#[from] PendingError),
    /// The migration's registry changes do not apply (a write the overlay took but the
    /// registry refuses: ours).
    #[error("its migration's registry changes do not apply: {0}")]
    State(#[from] StateError),
    /// The registry after the migration and the block does not extend the parent's (ours: a
    /// bug).
    #[error("the registry after the migration and the block does not extend the parent's")]
    NotAnExtension,
}

impl MigrationError {
    /// Whether the module caused it (deterministically, on every node), rather than the host.
    pub fn is_module_fault(&self) -> bool {
        match self {
            Self::Call(e) => e.is_deterministic(),
            Self::Rejected(_) | Self::Queue(_) => true,
            Self::State(_) | Self::NotAnExtension => false,
        }
    }
}

/// The parent state after a migration.
#[derive(Debug, Clone)]
pub struct Migrated {
    /// The registry after the migration.
    pub registry: Registry,
    /// The queue after the migration (an empty queue when the parent had none).
    pub pending: PendingQueue,
    /// Fuel the migration used.
    pub fuel_used: u64,
    /// What the module reports it changed.
    pub changed: u64,
}

/// Whether the block at `height`, on a parent state whose schedule is `schedule`, activates
/// the deposits module `module`: the schedule has an entry for it at exactly `height` and a
/// different module (or none) runs at `height − 1`. Re-scheduling the module already running
/// migrates nothing; genesis (height 0) activates nothing.
pub fn activates(schedule: &Schedule, height: u64, module: &crate::hashes::ModuleHash) -> bool {
    let Some(before) = height.checked_sub(1) else {
        return false;
    };
    schedule.module_at(Kind::Deposits, height).as_ref() == Some(module)
        && schedule
            .entries
            .iter()
            .any(|e| e.kind == Kind::Deposits && e.height == height && e.module == *module)
        && schedule.module_at(Kind::Deposits, before).as_ref() != Some(module)
}

/// Runs `module`'s migration for the block at `height` on `registry` and `pending` (the
/// parent's; `None`: the chain has no queue yet, the migration sees an empty one). Neither is
/// changed: the result holds copy-on-write successors.
pub fn run(
    module: &DepositsModule,
    genesis: &Genesis,
    registry: &Registry,
    pending: Option<&PendingQueue>,
    height: u64,
) -> Result<Migrated, MigrationError> {
    let queue = pending.cloned().unwrap_or_else(PendingQueue::new);
    let ctx = ChainContext {
        height,
        finality_depth: genesis.finality_depth,
        genesis_fork_version: genesis.genesis_fork_version,
    };
    let shared = Arc::new(registry.clone());
    let out = module
        .run_migration(shared, queue.clone(), &ctx)?
        .map_err(MigrationError::Rejected)?;
    let mut after = registry.clone();
    after.apply(&out.delta)?;
    let mut queue = queue;
    queue.apply(&out.pending)?;
    Ok(Migrated {
        registry: after,
        pending: queue,
        fuel_used: out.fuel_used,
        changed: out.migrated,
    })
}

/// `delta` (against `migrated`, the registry after a migration) as a delta against `parent`,
/// the registry the migration ran on: one delta for the whole block.
pub(crate) fn rebase(
    parent: &Registry,
    migrated: &Registry,
    delta: &RegistryDelta,
) -> Result<RegistryDelta, MigrationError> {
    let mut after = migrated.clone();
    after.apply(delta)?;
    // A migration appends validators and changes balances, as any deposits call does.
    parent
        .delta_to(&after)
        .ok_or(MigrationError::NotAnExtension)
}

/// What `module propose` checks of a module with a migration: that it finishes on the head's
/// state (`registry`, `pending`) as the block at `height` would run it. `Ok(None)` for a
/// module without a migration. The error says what failed.
pub fn check(
    module: &DepositsModule,
    genesis: &Genesis,
    registry: &Registry,
    pending: Option<&PendingQueue>,
    height: u64,
) -> Result<Option<Migrated>, MigrationError> {
    if !module.has_migration() {
        return Ok(None);
    }
    run(module, genesis, registry, pending, height).map(Some)
}
