//! One block's deposits under `modnode:deposits@3.0.0` (Electra's pending-deposit queue), as
//! the transition runs them: on the first block of an epoch ([`Genesis::starts_epoch`])
//! `process-epoch` first, on the parent's registry and queue, then the block's own deposits
//! are queued on what the epoch left. Both calls write through overlays; their deltas are
//! applied here to copy-on-write clones, so nothing the caller holds changes, and the result
//! is the registry delta against the parent (one delta for the block, as under @2.0.0) and the
//! queue after the block.
//!
//! The host checks what a module cannot be trusted with: exactly the block's deposits were
//! queued (the queue delta holds one entry per deposit, in block order, each stamped with the
//! block's slot and height), the block call wrote nothing to the registry and dropped nothing,
//! and the reported `eth1_deposit_index` and `deposit_balance_to_consume` are the state's.
//!
//! The transition (`transition.rs`) calls this for every block whose scheduled deposits
//! module is on contract 3, on import, block production, replay and side-branch execution (see
//! ARCHITECTURE.md, "Contract versions").

use std::sync::Arc;

use super::eth1::ProvenDeposit;
use super::genesis::Genesis;
use crate::deposit::{ChainContext, DepositContext, EpochDeposits};
use crate::runtime::CallError;
use crate::runtime::deposits::DepositsModule;
use crate::state::{PendingError, PendingQueue, Registry, RegistryDelta, StateError};

/// Why a block's deposits@3 step failed. `Call` and `Rejected` are the module's verdicts or
/// the host's failures as for @2.0.0; the rest are the module breaking the contract (the
/// block is invalid under it) except `State`, which is ours.
#[derive(Debug, thiserror::Error)]
pub enum V3StepError {
    /// The module trapped, ran out of fuel, or the host failed serving it.
    #[error("deposits@3 call failed: {0}")]
    Call(#[from] CallError),
    /// The module rejected the block (a bad proof, a malformed deposit, a refused write).
    #[error("deposits@3 rejected the block: {0:?}")]
    Rejected(super::DepositRejection),
    /// The module's queue changes do not apply (dropping more than the queue holds).
    #[error("deposits@3's queue changes do not apply: {0}")]
    Queue(#[from] PendingError),
    /// The block call queued something else than exactly the block's deposits.
    #[error(
        "deposits@3 queued {found} entries for a block of {expected} deposits, or not as the block carries them"
    )]
    WrongQueue {
        /// Deposits in the block.
        expected: usize,
        /// Entries the call pushed.
        found: usize,
    },
    /// The block call changed the registry or dropped entries: only `process-epoch` may.
    #[error("deposits@3's block call wrote to the registry or dropped queued entries")]
    BlockCallWrote,
    /// A reported counter is not the state's: names it.
    #[error("deposits@3 reported {what} {reported}, the state holds {expected}")]
    Reported {
        /// Which counter.
        what: &'static str,
        /// What the module said.
        reported: u64,
        /// What the state holds.
        expected: u64,
    },
    /// The registry after the epoch is not the parent's plus appended validators and changed
    /// balances (ours: a bug).
    #[error("the registry after deposits@3's epoch does not extend the parent's")]
    NotAnExtension,
    /// Applying a delta to the registry failed (ours: a bug or a corrupt state).
    #[error("applying deposits@3's registry changes: {0}")]
    State(#[from] StateError),
}

/// What a block's deposits@3 step produced.
#[derive(Debug, Clone)]
pub struct V3Step {
    /// The registry changes against the parent's registry (epoch and block together).
    pub delta: RegistryDelta,
    /// The queue after the block.
    pub pending: PendingQueue,
    /// The epoch transition's result, on the first block of an epoch.
    pub epoch: Option<EpochDeposits>,
    /// `eth1_deposit_index` after the block, as the module reported it.
    pub eth1_deposit_index: u64,
    /// Fuel of both calls.
    pub fuel_used: u64,
}

/// Runs the block at `ctx.height` (child of a block at `parent_slot`) on `registry` and
/// `pending` (the parent's; a chain's first @3.0.0 block starts from an empty queue).
pub fn run(
    module: &DepositsModule,
    genesis: &Genesis,
    registry: &Registry,
    pending: &PendingQueue,
    parent_slot: u64,
    ctx: &DepositContext,
    deposits: &[ProvenDeposit],
) -> Result<V3Step, V3StepError> {
    let mut after = registry.clone();
    let mut queue = pending.clone();
    let mut fuel_used: u64 = 0;
    let epoch = if genesis.starts_epoch(parent_slot, ctx.slot) {
        let epoch_ctx = ChainContext {
            height: ctx.height,
            finality_depth: genesis.finality_depth,
            genesis_fork_version: genesis.genesis_fork_version,
        };
        let shared = Arc::new(after.clone());
        let out = module
            .apply_epoch(shared, queue.clone(), &epoch_ctx)?
            .map_err(V3StepError::Rejected)?;
        after.apply(&out.delta)?;
        queue.apply(&out.pending)?;
        if out.result.deposit_balance_to_consume != queue.balance_to_consume() {
            return Err(V3StepError::Reported {
                what: "deposit_balance_to_consume",
                reported: out.result.deposit_balance_to_consume,
                expected: queue.balance_to_consume(),
            });
        }
        fuel_used = fuel_used.saturating_add(out.fuel_used);
        Some(out.result)
    } else {
        None
    };
    let shared = Arc::new(after.clone());
    let out = module
        .queue_deposits(shared, queue.clone(), ctx, deposits)?
        .map_err(V3StepError::Rejected)?;
    if !out.delta.is_empty() || out.pending.dropped != 0 || out.pending.balance_to_consume.is_some()
    {
        return Err(V3StepError::BlockCallWrote);
    }
    let exact = out.pending.pushed.len() == deposits.len()
        && usize::try_from(out.result.queued).ok() == Some(deposits.len())
        && out.pending.pushed.iter().zip(deposits).all(|(p, d)| {
            p.pubkey == d.data.pubkey
                && p.withdrawal_credentials == d.data.withdrawal_credentials
                && p.amount == d.data.amount
                && p.signature == d.data.signature
                && p.slot == ctx.slot
                && p.height == ctx.height
        });
    if !exact {
        return Err(V3StepError::WrongQueue {
            expected: deposits.len(),
            found: out.pending.pushed.len(),
        });
    }
    queue.apply(&out.pending)?;
    fuel_used = fuel_used.saturating_add(out.fuel_used);
    let delta = registry
        .delta_to(&after)
        .ok_or(V3StepError::NotAnExtension)?;
    Ok(V3Step {
        delta,
        pending: queue,
        epoch,
        eth1_deposit_index: out.result.eth1_deposit_index,
        fuel_used,
    })
}
