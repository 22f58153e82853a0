//! What `upgrade-check` holds a deposits module's migration to (Substrate's try-runtime runs
//! each migration twice and compares storage roots): on a copy of a state, the migration runs
//! once, then again on what it left; both runs must finish, and the second must be a no-op —
//! the same registry and queue roots as after the first. A migration runs exactly once on the
//! chain, but a migration that is not idempotent is one whose effect depends on whether some
//! other path (a replay, a re-import on another branch, a node restored mid-way) ran it
//! before, so the check refuses it.
//!
//! Used by the propose-time cost check (`node/upgrades/deposit_cost.rs`) on a generated state
//! with a queue of a full block of deposits.

use std::sync::Arc;

use crate::deposit::ChainContext;
use crate::runtime::deposits::DepositsModule;

use crate::state::{PendingQueue, Registry};

/// What two runs of a migration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwiceRun {
    /// Fuel of the first run (what the chain's run will cost on this state).
    pub fuel_once: u64,
    /// Fuel of the second run.
    pub fuel_twice: u64,
    /// Registry and queue roots after the first run.
    pub roots_once: ([u8; 32], [u8; 32]),
    /// Registry and queue roots after the second run.
    pub roots_twice: ([u8; 32], [u8; 32]),
}

/// Why a migration failed the check; each says which run and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TwiceError {
    /// A run trapped, ran out of fuel, refused the state or left changes that do not apply.
    #[error("its migration's {run} run {reason}")]
    Failed {
        /// `first` or `second`.
        run: &'static str,
        /// What failed (the module's fault unless it says otherwise).
        reason: String,
        /// Whether the module caused it, deterministically (not this node).
        module_fault: bool,
    },
    /// The second run changed the state the first left: the migration is not idempotent.
    #[error(
        "its migration is not idempotent: run again on its own result it changes the state \
         (registry root {once_registry} → {twice_registry}, queue root {once_queue} → \
         {twice_queue}); a migration must leave a state it would not change again"
    )]
    NotIdempotent {
        /// Registry root after one run (hex).
        once_registry: String,
        /// Registry root after two runs (hex).
        twice_registry: String,
        /// Queue root after one run (hex).
        once_queue: String,
        /// Queue root after two runs (hex).
        twice_queue: String,
    },
}

/// One run on `registry` and `pending`: the state after it and the fuel.
fn once(
    module: &DepositsModule,
    registry: &Registry,
    pending: &PendingQueue,
    ctx: &ChainContext,
    run: &'static str,
) -> Result<(Registry, PendingQueue, u64), TwiceError> {
    let failed = |reason: String, module_fault: bool| TwiceError::Failed {
        run,
        reason,
        module_fault,
    };
    let shared = Arc::new(registry.clone());
    let out = match module.run_migration(shared, pending.clone(), ctx) {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(failed(format!("refuses the state: {e:?}"), true)),
        Err(e) => {
            let deterministic = e.is_deterministic();
            return Err(failed(format!("fails: {e}"), deterministic));
        }
    };
    let mut after = registry.clone();
    after.apply(&out.delta).map_err(|e| {
        failed(
            format!("leaves registry changes that do not apply: {e}"),
            true,
        )
    })?;
    let mut queue = pending.clone();
    queue
        .apply(&out.pending)
        .map_err(|e| failed(format!("leaves queue changes that do not apply: {e}"), true))?;
    Ok((after, queue, out.fuel_used))
}

/// Runs `module`'s migration on a copy of (`registry`, `pending`), then again on its result,
/// and compares the roots. Neither input changes.
pub fn run_twice(
    module: &DepositsModule,
    registry: &Registry,
    pending: &PendingQueue,
    ctx: &ChainContext,
) -> Result<TwiceRun, TwiceError> {
    let (registry1, queue1, fuel_once) = once(module, registry, pending, ctx, "first")?;
    let (registry2, queue2, fuel_twice) = once(module, &registry1, &queue1, ctx, "second")?;
    let roots_once = (registry1.root(), queue1.root());
    let roots_twice = (registry2.root(), queue2.root());
    if roots_once != roots_twice {
        return Err(TwiceError::NotIdempotent {
            once_registry: hex::encode(roots_once.0),
            twice_registry: hex::encode(roots_twice.0),
            once_queue: hex::encode(roots_once.1),
            twice_queue: hex::encode(roots_twice.1),
        });
    }
    Ok(TwiceRun {
        fuel_once,
        fuel_twice,
        roots_once,
        roots_twice,
    })
}
