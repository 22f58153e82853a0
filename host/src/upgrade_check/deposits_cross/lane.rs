//! One version's chain in a cross-contract case ([`Lane`]): its registry, queue and deposit
//! index, each block run through it (an epoch transition first on an epoch's first block under
//! @3.0.0), the per-call cost gate, the checks a single version must pass on its own (exactly
//! once, outcomes naming the right validator, a live epoch transition), and the queue-length
//! probe (`probe`).

mod probe;

use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::versions::{BlockRun, V3Run, Version, is_host_failure};
use super::super::{CheckError, Failure, Invariant, Settings};
use super::{COST_GATE_PERCENT, PER_EPOCH};
use crate::chain::genesis::Genesis;
use crate::deposit::{
    ChainContext, DepositContext, DepositOutcome as Outcome, EpochDeposits, Eth1Data, ProvenDeposit,
};
use crate::state::{PendingDelta, PendingQueue, Registry, RegistryDelta};

/// A block both versions are given.
pub(super) struct BlockIn {
    pub(super) height: u64,
    pub(super) slot: u64,
    pub(super) parent_slot: u64,
    pub(super) ctx: DepositContext,
    pub(super) deposits: Vec<ProvenDeposit>,
}

/// The context of the deposits call of the block at `height` and `slot` on the chain of
/// `fork`, whose deposits prove against `eth1` from `eth1_deposit_index`.
pub(super) fn context(
    height: u64,
    slot: u64,
    fork: [u8; 4],
    eth1: &Eth1Data,
    eth1_deposit_index: u64,
) -> DepositContext {
    DepositContext {
        height,
        slot,
        genesis_fork_version: fork,
        eth1_data: *eth1,
        eth1_deposit_index,
    }
}

impl BlockIn {
    /// Sum of the block's deposit amounts.
    pub(super) fn amount(&self) -> u128 {
        self.deposits.iter().fold(0u128, |sum, d| {
            sum.saturating_add(u128::from(d.data.amount))
        })
    }
}

/// A case's result so far: `Err` is a failure found.
pub(super) type Judged<T> = Result<Result<T, Failure>, CheckError>;

pub(super) fn invariant(invariant: Invariant, detail: String) -> Failure {
    Failure::Invariant { invariant, detail }
}

pub(super) fn host(reason: String) -> CheckError {
    CheckError::Host { reason }
}

fn shared(registry: &Registry) -> crate::state::SharedRegistry {
    Arc::new(registry.clone())
}

/// One version's chain in a case: its registry and queue, the deposit index, and what it did.
pub(super) struct Lane<'a> {
    version: &'a Version,
    /// `modnode:deposits@3.0.0`: queues and runs epoch transitions.
    pub(super) queues: bool,
    pub(super) registry: Registry,
    pub(super) pending: PendingQueue,
    pub(super) index: u64,
    /// The deposit index of the queue's first entry ever (the deposit index the lane started
    /// at, with an empty queue): entry `p` of the queue is deposit index `base + p`.
    base: u64,
    /// Sum of the amounts of the deposits in blocks this version accepted.
    pub(super) deposited: u128,
    /// Sum of the amounts dropped for an invalid signature.
    pub(super) burned: u128,
    pub(super) genesis_balance: u128,
    /// Fuel for the ratio: the module's own computation.
    pub(super) fuel: u64,
    /// Each deposit index's outcome and the height it was applied at.
    pub(super) applied: BTreeMap<u64, (Outcome, u64)>,
    /// Each deposit index's block height.
    pub(super) carried_at: BTreeMap<u64, u64>,
    probed: bool,
}

pub(super) fn balance_sum(registry: &Registry) -> u128 {
    registry
        .balances()
        .iter()
        .fold(0u128, |sum, b| sum.saturating_add(u128::from(*b)))
}

pub(super) fn queue_sum(pending: &PendingQueue) -> u128 {
    let len = usize::try_from(pending.len()).unwrap_or(usize::MAX);
    pending
        .window(0, len)
        .fold(0u128, |sum, d| sum.saturating_add(u128::from(d.amount)))
}

impl<'a> Lane<'a> {
    /// A lane starting from `registry` and an empty queue at deposit index `index`.
    pub(super) fn new(version: &'a Version, registry: &Registry, index: u64) -> Self {
        Self {
            version,
            queues: version.deposits_contract() == Some(3),
            registry: registry.clone(),
            pending: PendingQueue::new(),
            index,
            base: index,
            deposited: 0,
            burned: 0,
            genesis_balance: balance_sum(registry),
            fuel: 0,
            applied: BTreeMap::new(),
            carried_at: BTreeMap::new(),
            probed: false,
        }
    }

    pub(super) fn name(&self) -> &str {
        &self.version.name
    }

    /// The cost gate of one call over `items` deposits (entries for an epoch).
    fn gate(&self, call: &str, height: u64, items: u64, fuel: u64) -> Option<Failure> {
        let limit = self
            .version
            .deposits_budget(items)?
            .checked_div(100)?
            .checked_mul(COST_GATE_PERCENT)?;
        (fuel > limit).then(|| Failure::Cost {
            call: format!("{} {call} at height {height}", self.name()),
            fuel,
            limit,
        })
    }

    fn record(&mut self, index: u64, outcome: Outcome, height: u64) -> Result<(), Failure> {
        if self.applied.insert(index, (outcome, height)).is_some() {
            return Err(invariant(
                Invariant::ExactlyOnce,
                format!(
                    "{} applied deposit index {index} a second time at height {height}",
                    self.name()
                ),
            ));
        }
        Ok(())
    }

    /// Runs one block; `Ok(Ok(accepted))`. Nothing changes unless the block is accepted.
    pub(super) fn step(
        &mut self,
        block: &BlockIn,
        genesis: &Genesis,
        settings: &Settings,
    ) -> Judged<bool> {
        if self.queues {
            self.step_queued(block, genesis, settings)
        } else {
            self.step_immediate(block)
        }
    }

    /// A @2.0.0 block: every deposit applied at once. `Ok(Ok(accepted))`.
    fn step_immediate(&mut self, block: &BlockIn) -> Judged<bool> {
        let run =
            self.version
                .process_deposits(shared(&self.registry), &block.ctx, &block.deposits);
        let (outcomes, delta, index, fuel, total) = match run {
            BlockRun::Applied {
                outcomes,
                delta,
                eth1_deposit_index,
                fuel,
                total_fuel,
            } => (outcomes, delta, eth1_deposit_index, fuel, total_fuel),
            BlockRun::Failed(e) if is_host_failure(&e) => return Err(host(e.to_string())),
            BlockRun::Rejected(_) | BlockRun::Failed(_) => return Ok(Ok(false)),
        };
        let n = u64::try_from(block.deposits.len()).unwrap_or(u64::MAX);
        if let Some(f) = self.gate("block call", block.height, n, total) {
            return Ok(Err(f));
        }
        let mut after = self.registry.clone();
        if after.apply(&delta).is_err() {
            return Ok(Ok(false));
        }
        if outcomes.len() != block.deposits.len() {
            return Ok(Err(invariant(
                Invariant::ExactlyOnce,
                format!(
                    "{} reported {} outcomes for the {} deposits of the block at height {}",
                    self.name(),
                    outcomes.len(),
                    block.deposits.len(),
                    block.height
                ),
            )));
        }
        for ((at, outcome), d) in (block.ctx.eth1_deposit_index..)
            .zip(outcomes)
            .zip(&block.deposits)
        {
            if outcome == Outcome::InvalidSignature {
                self.burned = self.burned.saturating_add(u128::from(d.data.amount));
            }
            self.carried_at.insert(at, block.height);
            if let Err(f) = self.record(at, outcome, block.height) {
                return Ok(Err(f));
            }
        }
        self.registry = after;
        self.index = index;
        self.deposited = self.deposited.saturating_add(block.amount());
        self.fuel = self.fuel.saturating_add(fuel);
        Ok(Ok(true))
    }

    /// A @3.0.0 block: the epoch transition first on an epoch's first block, then the block's
    /// deposits queued. Nothing changes unless the whole block is accepted.
    fn step_queued(
        &mut self,
        block: &BlockIn,
        genesis: &Genesis,
        settings: &Settings,
    ) -> Judged<bool> {
        let mut registry = self.registry.clone();
        let mut pending = self.pending.clone();
        let mut burned = 0u128;
        let mut applied = Vec::new();
        let mut fuel = 0u64;
        if genesis.starts_epoch(block.parent_slot, block.slot) {
            let ctx = ChainContext {
                height: block.height,
                finality_depth: genesis.finality_depth,
                genesis_fork_version: genesis.genesis_fork_version,
            };
            let epoch = match self.epoch(&registry, &pending, &ctx)? {
                Ok(epoch) => epoch,
                Err(f) => return Ok(Err(f)),
            };
            if let Some(f) = self.gate("epoch transition", block.height, PER_EPOCH, epoch.total) {
                return Ok(Err(f));
            }
            if !self.probed {
                self.probed = true;
                if let Err(f) = self.probe(&registry, &pending, &ctx, &epoch, settings)? {
                    return Ok(Err(f));
                }
            }
            for (position, outcome, amount) in &epoch.applied {
                if *outcome == Outcome::InvalidSignature {
                    burned = burned.saturating_add(u128::from(*amount));
                }
                applied.push((*position, *outcome));
            }
            if !epoch.applied.is_empty() {
                fuel = fuel.saturating_add(epoch.fuel);
            }
            registry = epoch.registry;
            pending = epoch.pending;
        }
        let run = self.version.queue_deposits(
            shared(&registry),
            pending.clone(),
            &block.ctx,
            &block.deposits,
        );
        let (queued, delta, pushed, block_fuel, total) = match run {
            V3Run::Applied {
                result,
                delta,
                pending,
                fuel,
                total_fuel,
            } => (result, delta, pending, fuel, total_fuel),
            V3Run::Failed(e) if is_host_failure(&e) => return Err(host(e.to_string())),
            V3Run::Rejected(_) | V3Run::Failed(_) => return Ok(Ok(false)),
        };
        let n = u64::try_from(block.deposits.len()).unwrap_or(u64::MAX);
        if let Some(f) = self.gate("block call", block.height, n, total) {
            return Ok(Err(f));
        }
        if let Err(f) = self.check_queued(block, &pending, &delta, &pushed, queued.queued) {
            return Ok(Err(f));
        }
        if pending.apply(&pushed).is_err() {
            return Ok(Ok(false));
        }
        for (position, outcome) in applied {
            if let Err(f) = self.record(position, outcome, block.height) {
                return Ok(Err(f));
            }
        }
        for at in (block.ctx.eth1_deposit_index..).take(block.deposits.len()) {
            self.carried_at.insert(at, block.height);
        }
        self.registry = registry;
        self.pending = pending;
        self.index = queued.eth1_deposit_index;
        self.deposited = self.deposited.saturating_add(block.amount());
        self.burned = self.burned.saturating_add(burned);
        self.fuel = self.fuel.saturating_add(fuel).saturating_add(block_fuel);
        Ok(Ok(true))
    }

    /// The block call queued exactly the block's deposits, stamped with its slot and height,
    /// at the queue positions of their deposit indices, and applied or dropped nothing.
    fn check_queued(
        &self,
        block: &BlockIn,
        before: &PendingQueue,
        delta: &RegistryDelta,
        pushed: &PendingDelta,
        reported: u32,
    ) -> Result<(), Failure> {
        let name = self.name();
        let height = block.height;
        if !delta.is_empty() || pushed.dropped != 0 || pushed.balance_to_consume.is_some() {
            return Err(invariant(
                Invariant::ExactlyOnce,
                format!(
                    "{name}'s block call at height {height} wrote to the registry or dropped \
                     queued entries: only the epoch transition may apply deposits"
                ),
            ));
        }
        let next = before.total().saturating_add(self.base);
        if next != block.ctx.eth1_deposit_index {
            return Err(invariant(
                Invariant::ExactlyOnce,
                format!(
                    "{name}'s queue ends at deposit index {next} before height {height}, whose \
                     first deposit index is {}",
                    block.ctx.eth1_deposit_index
                ),
            ));
        }
        let first_wrong = (0..block.deposits.len().max(pushed.pushed.len())).find(|&at| {
            match (block.deposits.get(at), pushed.pushed.get(at)) {
                (Some(d), Some(p)) => {
                    p.pubkey != d.data.pubkey
                        || p.withdrawal_credentials != d.data.withdrawal_credentials
                        || p.amount != d.data.amount
                        || p.signature != d.data.signature
                        || p.slot != block.slot
                        || p.height != height
                }
                _ => true,
            }
        });
        let count_wrong = usize::try_from(reported).ok() != Some(block.deposits.len());
        if let Some(at) = first_wrong.or(count_wrong.then_some(0)) {
            let index = block
                .ctx
                .eth1_deposit_index
                .saturating_add(u64::try_from(at).unwrap_or(u64::MAX));
            return Err(invariant(
                Invariant::ExactlyOnce,
                format!(
                    "{name} did not queue deposit index {index} exactly once, as carried, at \
                     height {height}: {} entries pushed (reported {reported}) for {} deposits",
                    pushed.pushed.len(),
                    block.deposits.len()
                ),
            ));
        }
        Ok(())
    }

    /// Runs and checks one epoch transition over `registry` and `pending`.
    fn epoch(
        &self,
        registry: &Registry,
        pending: &PendingQueue,
        ctx: &ChainContext,
    ) -> Judged<EpochRun> {
        let height = ctx.height;
        let name = self.name().to_string();
        let liveness = |what: String| {
            invariant(
                Invariant::Liveness,
                format!(
                    "{name}'s epoch transition at height {height} {what}: no block could be \
                     built on it"
                ),
            )
        };
        let (result, delta, changes, fuel, total) =
            match self
                .version
                .process_epoch(shared(registry), pending.clone(), ctx)
            {
                V3Run::Applied {
                    result,
                    delta,
                    pending,
                    fuel,
                    total_fuel,
                } => (result, delta, pending, fuel, total_fuel),
                V3Run::Failed(e) if is_host_failure(&e) => return Err(host(e.to_string())),
                V3Run::Rejected(e) => return Ok(Err(liveness(format!("rejected ({e:?})")))),
                V3Run::Failed(e) => return Ok(Err(liveness(format!("failed ({e})")))),
            };
        let EpochDeposits {
            outcomes,
            deposit_balance_to_consume,
        } = result;
        if !changes.pushed.is_empty() {
            return Ok(Err(invariant(
                Invariant::ExactlyOnce,
                format!(
                    "{name}'s epoch transition at height {height} queued {} entries: only a \
                     block's deposits may be queued",
                    changes.pushed.len()
                ),
            )));
        }
        let taken = u64::try_from(outcomes.len()).unwrap_or(u64::MAX);
        if changes.dropped != taken {
            let detail = if changes.dropped > taken {
                format!(
                    "{name}'s epoch transition at height {height} dropped {} entries from the \
                     queue and applied {taken}: deposit index {} left the queue without being \
                     applied",
                    changes.dropped,
                    self.base
                        .saturating_add(pending.start())
                        .saturating_add(taken)
                )
            } else {
                format!(
                    "{name}'s epoch transition at height {height} applied {taken} entries and \
                     dropped {}: deposit index {} stays queued although applied",
                    changes.dropped,
                    self.base
                        .saturating_add(pending.start())
                        .saturating_add(changes.dropped)
                )
            };
            return Ok(Err(invariant(Invariant::ExactlyOnce, detail)));
        }
        let mut after = registry.clone();
        let mut queue = pending.clone();
        if let Err(e) = after.apply(&delta) {
            return Ok(Err(liveness(format!(
                "made registry changes that do not apply ({e})"
            ))));
        }
        if let Err(e) = queue.apply(&changes) {
            return Ok(Err(liveness(format!(
                "made queue changes that do not apply ({e})"
            ))));
        }
        if queue.balance_to_consume() != deposit_balance_to_consume {
            return Ok(Err(liveness(format!(
                "reported deposit_balance_to_consume {deposit_balance_to_consume} but left {}",
                queue.balance_to_consume()
            ))));
        }
        let mut applied = Vec::with_capacity(outcomes.len());
        for (offset, outcome) in (0u64..).zip(&outcomes) {
            let position = self
                .base
                .saturating_add(pending.start())
                .saturating_add(offset);
            let Some(entry) = pending.get(offset) else {
                return Ok(Err(invariant(
                    Invariant::ExactlyOnce,
                    format!(
                        "{name}'s epoch transition at height {height} applied more than queued"
                    ),
                )));
            };
            let outcome = *outcome;
            let index = match outcome {
                Outcome::Created(i) | Outcome::ToppedUp(i) => Some(i),
                Outcome::InvalidSignature => None,
            };
            let wrong_pubkey =
                index.is_some_and(|i| after.validator(i).map(|v| v.pubkey) != Some(entry.pubkey));
            if wrong_pubkey {
                return Ok(Err(invariant(
                    Invariant::SameOutcome,
                    format!(
                        "{name}'s epoch transition at height {height} reports deposit index \
                         {position} as {outcome:?}, but that validator has another pubkey"
                    ),
                )));
            }
            applied.push((position, outcome, entry.amount));
        }
        Ok(Ok(EpochRun {
            outcomes,
            delta,
            changes,
            registry: after,
            pending: queue,
            applied,
            fuel,
            total,
        }))
    }
}

/// What one epoch transition did, checked.
struct EpochRun {
    outcomes: Vec<Outcome>,
    delta: RegistryDelta,
    changes: PendingDelta,
    registry: Registry,
    pending: PendingQueue,
    /// (deposit index, outcome, amount) per entry applied.
    applied: Vec<(u64, Outcome, u64)>,
    fuel: u64,
    total: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upgrade_check::{Kind, ModuleFile, versions};

    #[test]
    fn the_cost_gate_allows_80_percent_of_a_calls_budget_and_names_the_call() {
        let runtime = versions::runtime().unwrap();
        let file = ModuleFile::read(&crate::artifacts::path("deposits-v3")).unwrap();
        let v3 = versions::load(&runtime, &file, Kind::Deposits).unwrap();
        let lane = Lane::new(&v3, &Registry::new(), 7);
        let budget = v3.deposits_budget(PER_EPOCH).unwrap();
        let limit = budget / 100 * COST_GATE_PERCENT;
        assert!(limit > 0 && limit < budget);
        assert_eq!(lane.gate("epoch transition", 12, PER_EPOCH, limit), None);
        let Some(Failure::Cost {
            call,
            fuel,
            limit: l,
        }) = lane.gate("epoch transition", 12, PER_EPOCH, limit + 1)
        else {
            panic!("a call over 80 % of its budget passed the gate")
        };
        assert_eq!((fuel, l), (limit + 1, limit));
        assert!(
            call.starts_with(&v3.name) && call.ends_with("epoch transition at height 12"),
            "{call}"
        );
        // A block's budget grows with its deposits, and so does what the gate allows.
        let block = |n| lane.gate("block call", 3, n, limit + 1).is_some();
        assert!(block(0) && block(PER_EPOCH) && !block(PER_EPOCH + 1));
    }
}
