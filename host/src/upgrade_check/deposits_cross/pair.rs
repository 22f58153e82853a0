//! Both versions side by side over the same blocks ([`Pair`]) and what must hold between them:
//! acceptance and the deposit index after every block, conservation in each, and after the
//! drain every deposit index applied once with the same outcome and the registries equal but
//! for the documented differences.

use std::collections::BTreeMap;
use std::ops::Range;

use super::super::runner::CaseRun;
use super::super::versions::Version;
use super::super::{Failure, Invariant, Settings};
use super::lane::{BlockIn, Judged, Lane, balance_sum, invariant, queue_sum};
use super::{
    DifferenceClass, MAX_EFFECTIVE_BALANCE_ELECTRA, MIN_ACTIVATION_BALANCE, MIN_CHURN, PER_EPOCH,
};
use crate::chain::genesis::Genesis;
use crate::state::{PendingQueue, Registry};

/// The two versions' lanes over one sequence of blocks.
pub(super) struct Pair<'a> {
    old: Lane<'a>,
    new: Lane<'a>,
    /// The deposit index both started at.
    start: u64,
}

impl<'a> Pair<'a> {
    /// Both versions from `registry` with an empty queue at deposit index `index`.
    pub(super) fn new(from: &'a Version, to: &'a Version, registry: &Registry, index: u64) -> Self {
        Self {
            old: Lane::new(from, registry, index),
            new: Lane::new(to, registry, index),
            start: index,
        }
    }

    /// The deposit index both versions agree on.
    pub(super) fn index(&self) -> u64 {
        self.old.index
    }

    /// The @3.0.0 version's queue.
    pub(super) fn queued(&self) -> &PendingQueue {
        if self.old.queues {
            &self.old.pending
        } else {
            &self.new.pending
        }
    }

    /// Runs `block` through both and checks what must hold after it.
    pub(super) fn block(
        &mut self,
        block: &BlockIn,
        genesis: &Genesis,
        settings: &Settings,
    ) -> Judged<()> {
        let accepted_old = match self.old.step(block, genesis, settings)? {
            Ok(a) => a,
            Err(f) => return Ok(Err(f)),
        };
        let accepted_new = match self.new.step(block, genesis, settings)? {
            Ok(a) => a,
            Err(f) => return Ok(Err(f)),
        };
        Ok(
            agree(&self.old, &self.new, block, accepted_old, accepted_new)
                .and_then(|()| conserved(&self.old, block.height))
                .and_then(|()| conserved(&self.new, block.height)),
        )
    }

    /// After the drain: the documented differences seen, or what does not hold.
    pub(super) fn finish(&self) -> Result<BTreeMap<DifferenceClass, u64>, Failure> {
        compare_drained(&self.old, &self.new, self.start..self.old.index)
    }

    /// The fuel of both, for the ratio.
    pub(super) fn fuel(&self) -> CaseRun {
        CaseRun {
            fuel_old: self.old.fuel,
            fuel_new: self.new.fuel,
            divergence: None,
        }
    }
}

/// The first slot of the epoch after `slot`'s.
pub(super) fn next_epoch_slot(slot: u64, slots_per_epoch: u64) -> u64 {
    slot.checked_div(slots_per_epoch.max(1))
        .unwrap_or(0)
        .saturating_add(1)
        .saturating_mul(slots_per_epoch.max(1))
}

/// Epochs after which any queue of a case has drained: finality, the churn the amounts need
/// (at least [`MIN_CHURN`] per epoch), the per-epoch entry limit, and a margin.
pub(super) fn drain_bound(
    queued: &PendingQueue,
    amounts: &[u64],
    index: u64,
    finality: u64,
) -> u64 {
    let uncarried = amounts
        .get(usize::try_from(index).unwrap_or(usize::MAX)..)
        .unwrap_or_default();
    let count = u64::try_from(uncarried.len()).unwrap_or(u64::MAX);
    let entries = queued.len().saturating_add(count);
    let amount = queue_sum(queued).saturating_add(
        uncarried
            .iter()
            .fold(0u128, |sum, a| sum.saturating_add(u128::from(*a))),
    );
    let churn_epochs = u64::try_from(amount.div_ceil(u128::from(MIN_CHURN))).unwrap_or(u64::MAX);
    // Until the last deposit is carried (at most a block's worth per empty block) and final, an
    // epoch may stop at an entry not yet final and waste its churn; after that, each epoch
    // applies its maximum of entries or carries all of its churn forward.
    count
        .div_ceil(PER_EPOCH)
        .saturating_add(finality)
        .saturating_add(churn_epochs)
        .saturating_add(entries.div_ceil(PER_EPOCH))
        .saturating_add(4)
}

/// Both versions accepted (or both rejected) the block and agree on the deposit index.
fn agree(old: &Lane, new: &Lane, block: &BlockIn, a: bool, b: bool) -> Result<(), Failure> {
    if a != b {
        let verb = |accepted: bool| if accepted { "accepted" } else { "rejected" };
        return Err(invariant(
            Invariant::Acceptance,
            format!(
                "the block at height {} ({} deposits from index {}): {} {} it, {} {} it",
                block.height,
                block.deposits.len(),
                block.ctx.eth1_deposit_index,
                old.name(),
                verb(a),
                new.name(),
                verb(b)
            ),
        ));
    }
    let expected = if a {
        block
            .ctx
            .eth1_deposit_index
            .saturating_add(u64::try_from(block.deposits.len()).unwrap_or(u64::MAX))
    } else {
        block.ctx.eth1_deposit_index
    };
    if old.index != expected || new.index != expected {
        return Err(invariant(
            Invariant::DepositIndex,
            format!(
                "after the block at height {} ({} deposits from index {}): deposit index {} \
                 under {}, {} under {}",
                block.height,
                block.deposits.len(),
                block.ctx.eth1_deposit_index,
                old.index,
                old.name(),
                new.index,
                new.name()
            ),
        ));
    }
    Ok(())
}

/// Deposited = balance increases + still queued + dropped for an invalid signature.
fn conserved(lane: &Lane, height: u64) -> Result<(), Failure> {
    let balances = balance_sum(&lane.registry);
    let increase = balances.saturating_sub(lane.genesis_balance);
    let queued = queue_sum(&lane.pending);
    let accounted = increase.saturating_add(queued).saturating_add(lane.burned);
    if balances < lane.genesis_balance || accounted != lane.deposited {
        return Err(invariant(
            Invariant::Conservation,
            format!(
                "after height {height}, {}: {} Gwei deposited, but balances rose by {increase}, \
                 {queued} are queued and {} were dropped for invalid signatures ({accounted} \
                 accounted for)",
                lane.name(),
                lane.deposited,
                lane.burned
            ),
        ));
    }
    Ok(())
}

/// After the drain: every deposit index applied once by each version with the same outcome,
/// and the registries equal except for the documented differences, which are counted.
fn compare_drained(
    old: &Lane,
    new: &Lane,
    indices: Range<u64>,
) -> Result<BTreeMap<DifferenceClass, u64>, Failure> {
    let mut differences = BTreeMap::new();
    for index in indices {
        let (a, b) = (old.applied.get(&index), new.applied.get(&index));
        let (Some((a, at_a)), Some((b, at_b))) = (a, b) else {
            let missing = if a.is_none() { old.name() } else { new.name() };
            return Err(invariant(
                Invariant::ExactlyOnce,
                format!("deposit index {index} was never applied by {missing}"),
            ));
        };
        if a != b {
            return Err(invariant(
                Invariant::SameOutcome,
                format!(
                    "deposit index {index}: {a:?} under {}, {b:?} under {}",
                    old.name(),
                    new.name()
                ),
            ));
        }
        let carried = old.carried_at.get(&index).max(new.carried_at.get(&index));
        if carried.is_some_and(|c| at_a.max(at_b) > c) {
            let seen = differences
                .entry(DifferenceClass::AppliedLater)
                .or_insert(0u64);
            *seen = seen.saturating_add(1);
        }
    }
    let (r_old, r_new) = (&old.registry, &new.registry);
    if r_old.len() != r_new.len() {
        return Err(invariant(
            Invariant::Drain,
            format!(
                "after the drain {} has {} validators, {} has {}",
                old.name(),
                r_old.len(),
                new.name(),
                r_new.len()
            ),
        ));
    }
    let (immediate, queued) = if old.queues {
        (r_new, r_old)
    } else {
        (r_old, r_new)
    };
    for i in 0..immediate.len() {
        let (Some(a), Some(b)) = (immediate.validator(i), queued.validator(i)) else {
            continue;
        };
        let balance = |r: &Registry| {
            r.balances()
                .get(usize::try_from(i).unwrap_or(usize::MAX))
                .copied()
        };
        let mut b_as_a = *b;
        b_as_a.effective_balance = a.effective_balance;
        if *a != b_as_a || balance(immediate) != balance(queued) {
            return Err(invariant(
                Invariant::Drain,
                format!(
                    "after the drain validator {i} differs beyond the documented differences: \
                     {a:?} balance {:?} under @2.0.0, {b:?} balance {:?} under @3.0.0",
                    balance(immediate),
                    balance(queued)
                ),
            ));
        }
        if a.effective_balance != b.effective_balance {
            let compounding = b.withdrawal_credentials.first() == Some(&0x02)
                && b.effective_balance > MIN_ACTIVATION_BALANCE
                && b.effective_balance <= MAX_EFFECTIVE_BALANCE_ELECTRA
                && a.effective_balance == MIN_ACTIVATION_BALANCE;
            if !compounding {
                return Err(invariant(
                    Invariant::Drain,
                    format!(
                        "after the drain validator {i} (credentials 0x{:02x}) has effective \
                         balance {} under @2.0.0 and {} under @3.0.0: not the documented \
                         compounding difference",
                        b.withdrawal_credentials.first().copied().unwrap_or(0),
                        a.effective_balance,
                        b.effective_balance
                    ),
                ));
            }
            let seen = differences
                .entry(DifferenceClass::CompoundingEffectiveBalance)
                .or_insert(0u64);
            *seen = seen.saturating_add(1);
        }
    }
    Ok(differences)
}
