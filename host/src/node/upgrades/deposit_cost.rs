//! Whether a proposed deposits module can always finish a full block: its fuel per deposit at
//! its worst, measured on generated blocks, against the budget the chain gives a block of
//! `max_deposits_per_block` deposits (a base plus a share per deposit, from the engine profile).
//!
//! A block must carry every due deposit, so a module that cannot finish a full block within
//! its budget would halt the chain the first time that many deposits are due. `propose` refuses
//! such a module, naming what it measured. A `modnode:deposits@3.0.0` module is measured on its
//! block call (which queues the deposits), and its epoch transition must finish a queue of a
//! full block of final deposits within its budget. A module with a migration must finish it on
//! a state with such a queue within 80 % of one call's budget.

use std::sync::{Arc, OnceLock};

use crate::chain::eth1::DepositProofs as _;
use crate::chain::workload::{self, DevDepositLog};
use crate::consensus::QUEUE_CONTRACT_MAJOR;
use crate::deposit::{ChainContext, DepositContext, Eth1Data};
use crate::runtime::deposits::DepositsModule;
use crate::state::{PendingDelta, PendingDeposit, PendingQueue, Registry};

/// The two block sizes the marginal cost is measured between, and their difference. Fuel is
/// deterministic, so small blocks measure it exactly; they keep `propose` quick.
const SMALL: u64 = 4;
const LARGE: u64 = 12;
const SPAN: u64 = 8;
/// Each generated deposit: 32 ETH in Gwei.
const AMOUNT: u64 = 32_000_000_000;

/// What a module costs at its worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepositCost {
    /// Fuel of a block of [`SMALL`] deposits (the worse of all-valid and one bad signature).
    pub small_block: u64,
    /// Fuel each further deposit adds, at the worse of the two.
    pub per_deposit: u64,
    /// Fuel a block of `max_deposits` deposits would take, extrapolated.
    pub full_block: u64,
    /// The budget of such a block.
    pub full_budget: u64,
}

/// A generated block's deposits with their proofs and the deposit contract's data.
type Inputs = (
    Vec<crate::chain::eth1::ProvenDeposit>,
    crate::chain::eth1::Eth1Data,
);

/// `n` new-validator deposits (the first signed over something else when `bad`), proven.
fn generate(n: u64, bad: bool) -> Result<Inputs, String> {
    let fork = [0u8; 4];
    let mut log = DevDepositLog::new();
    for i in 0..n {
        let mut d = workload::new_validator(1_000_000_u64.saturating_add(i), AMOUNT, fork);
        if bad && i == 0 {
            d.signature = workload::new_validator(1, AMOUNT, fork).signature;
        }
        log.push(d);
    }
    let eth1 = log.eth1_data();
    let proven = log
        .proven_deposits(0, eth1.deposit_count, eth1.deposit_count)
        .map_err(|e| format!("generated deposits do not prove: {e}"))?;
    Ok((proven, eth1))
}

/// The four generated blocks (small/large, valid/one bad), made once per process: keys,
/// signatures and proofs cost more than running a module over them.
fn inputs(n: u64, bad: bool) -> Result<&'static Inputs, String> {
    static CACHE: OnceLock<Result<[Inputs; 4], String>> = OnceLock::new();
    let all = CACHE.get_or_init(|| {
        Ok([
            generate(SMALL, false)?,
            generate(SMALL, true)?,
            generate(LARGE, false)?,
            generate(LARGE, true)?,
        ])
    });
    let all = all.as_ref().map_err(Clone::clone)?;
    let index = match (n == LARGE, bad) {
        (false, false) => 0,
        (false, true) => 1,
        (true, false) => 2,
        (true, true) => 3,
    };
    all.get(index)
        .ok_or_else(|| format!("no generated block of {n} deposits"))
}

/// The context of a generated block at height 1 and `slot` whose deposits prove against
/// `eth1` from index 0.
fn context(slot: u64, fork: [u8; 4], eth1: &Eth1Data) -> DepositContext {
    DepositContext {
        height: 1,
        slot,
        genesis_fork_version: fork,
        eth1_data: *eth1,
        eth1_deposit_index: 0,
    }
}

/// Fuel of one block of `n` new-validator deposits at `slot` (one with a signature over
/// something else when `bad`), on an empty registry.
fn block_fuel(module: &DepositsModule, n: u64, bad: bool, slot: u64) -> Result<u64, String> {
    let fork = [0u8; 4];
    let (proven, eth1) = inputs(n, bad)?;
    let ctx = context(slot, fork, eth1);
    let registry = Arc::new(Registry::new());
    let which = if bad {
        "one bad signature"
    } else {
        "all valid"
    };
    // deposits@3 queues a block's deposits (its block call); @2 applies them.
    let fuel = if module.contract().major == QUEUE_CONTRACT_MAJOR {
        module
            .queue_deposits(registry, PendingQueue::new(), &ctx, proven)
            .map(|r| r.map(|out| out.fuel_used).map_err(|e| format!("{e:?}")))
    } else {
        module
            .apply(registry, &ctx, proven)
            .map(|r| r.map(|out| out.fuel_used).map_err(|e| format!("{e:?}")))
    };
    match fuel {
        Ok(Ok(fuel)) => Ok(fuel),
        Ok(Err(e)) => Err(format!(
            "it refuses a valid block of {n} deposits ({which}): {e}"
        )),
        Err(e) if e.is_deterministic() => Err(format!(
            "it cannot finish a block of {n} deposits ({which}) within its budget: {e}"
        )),
        // Not the module's doing: say so, the operator may retry.
        Err(e) => Err(format!(
            "measuring it on a block of {n} deposits ({which}) failed on this node (not the \
             module's fault; retry): {e}"
        )),
    }
}

/// deposits@3: `process-epoch` over a queue of a full block of final deposits (valid, one bad
/// signature) must finish within its budget, or the first epoch with them would halt the
/// chain.
fn epoch_fits(module: &DepositsModule, slot: u64) -> Result<(), String> {
    for bad in [false, true] {
        let (proven, eth1) = inputs(LARGE, bad)?;
        let ctx = context(slot, [0u8; 4], eth1);
        let registry = Arc::new(Registry::new());
        let queued =
            match module.queue_deposits(registry.clone(), PendingQueue::new(), &ctx, proven) {
                Ok(Ok(out)) => out.pending,
                Ok(Err(e)) => {
                    return Err(format!(
                        "it refuses to queue a valid block of {LARGE} deposits: {e:?}"
                    ));
                }
                Err(e) => return Err(format!("it cannot queue a block of {LARGE} deposits: {e}")),
            };
        let mut queue = PendingQueue::new();
        queue
            .apply(&queued)
            .map_err(|e| format!("its queued deposits do not apply: {e}"))?;
        let epoch = ChainContext {
            height: 1,
            finality_depth: 0,
            genesis_fork_version: [0; 4],
        };
        match module.apply_epoch(registry, queue, &epoch) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(format!(
                    "its epoch transition refuses a queue of {LARGE} final deposits: {e:?}"
                ));
            }
            Err(e) if e.is_deterministic() => {
                return Err(format!(
                    "its epoch transition cannot finish a queue of {LARGE} final deposits \
                     within its budget: {e}"
                ));
            }
            Err(e) => {
                return Err(format!(
                    "measuring its epoch transition failed on this node (not the module's \
                     fault; retry): {e}"
                ));
            }
        }
    }
    Ok(())
}

/// The share of one call's budget a migration may use on the generated state (the cost gate:
/// a migration near its budget on a small queue would run out on a real one).
const MIGRATION_BUDGET_PERCENT: u64 = 80;

/// A module with a migration (`modnode:deposits/migration@3.0.0`): it must finish on a state
/// with a queue of a full generated block of deposits (one with a bad signature) within
/// [`MIGRATION_BUDGET_PERCENT`] of one call's budget — a migration that traps, refuses the
/// state or runs out of fuel would stop import at its activation height — and run again on its
/// own result change nothing (`upgrade_check::migration::run_twice`). `Chain::propose` also
/// runs it on the head's real state.
fn migration_fits(module: &DepositsModule) -> Result<Option<u64>, String> {
    if !module.has_migration() {
        return Ok(None);
    }
    let (proven, _) = inputs(LARGE, true)?;
    let pushed = proven
        .iter()
        .map(|d| PendingDeposit {
            pubkey: d.data.pubkey,
            withdrawal_credentials: d.data.withdrawal_credentials,
            amount: d.data.amount,
            signature: d.data.signature,
            slot: 1,
            height: 1,
        })
        .collect();
    let mut queue = PendingQueue::new();
    queue
        .apply(&PendingDelta {
            pushed,
            dropped: 0,
            balance_to_consume: None,
        })
        .map_err(|e| format!("the generated queue does not build: {e}"))?;
    let ctx = ChainContext {
        height: 2,
        finality_depth: 0,
        genesis_fork_version: [0; 4],
    };
    let budget = module.fuel_budget();
    match crate::upgrade_check::migration::run_twice(module, &Registry::new(), &queue, &ctx) {
        Ok(twice) => {
            let gate = (budget / 100).saturating_mul(MIGRATION_BUDGET_PERCENT);
            if twice.fuel_once > gate {
                return Err(format!(
                    "its migration takes {} fuel on a queue of {LARGE} deposits, over \
                     {MIGRATION_BUDGET_PERCENT} % of its budget of {budget}",
                    twice.fuel_once
                ));
            }
            Ok(Some(twice.fuel_once))
        }
        Err(crate::upgrade_check::migration::TwiceError::Failed {
            module_fault: false,
            reason,
            ..
        }) => Err(format!(
            "measuring its migration failed on this node (not the module's fault; retry): \
             {reason}"
        )),
        Err(e) => Err(format!(
            "on a state with a queue of {LARGE} deposits and a budget of {budget}: {e}"
        )),
    }
}

/// Measures `module` at `slot` (the chain's current slot: a module may cost more as slots
/// grow) and checks a block of `max_deposits` fits its budget. Blocking: runs the module on
/// `2 × (SMALL + LARGE)` deposits with their BLS checks.
pub fn check(module: &DepositsModule, slot: u64, max_deposits: u16) -> Result<DepositCost, String> {
    if module.contract().major == QUEUE_CONTRACT_MAJOR {
        epoch_fits(module, slot)?;
    }
    migration_fits(module)?;
    let mut worst: Option<(u64, u64)> = None;
    for bad in [false, true] {
        let small = block_fuel(module, SMALL, bad, slot)?;
        let large = block_fuel(module, LARGE, bad, slot)?;
        let per = large.saturating_sub(small) / SPAN;
        if worst.is_none_or(|(_, p)| per > p) {
            worst = Some((small, per));
        }
    }
    let (small_block, per_deposit) = worst.unwrap_or_default();
    let max = u64::from(max_deposits);
    let full_block =
        small_block.saturating_add(per_deposit.saturating_mul(max.saturating_sub(SMALL)));
    let full_budget = module.budget_for(max).unwrap_or(u64::MAX);
    let cost = DepositCost {
        small_block,
        per_deposit,
        full_block,
        full_budget,
    };
    if full_block > full_budget {
        return Err(format!(
            "it needs {per_deposit} fuel per deposit at its worst, so a full block of \
             {max_deposits} deposits would take about {full_block} fuel against a budget of \
             {full_budget}: the first full block would halt the chain"
        ));
    }
    Ok(cost)
}
