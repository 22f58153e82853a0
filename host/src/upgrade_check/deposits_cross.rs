//! Deposits across contracts: a `modnode:deposits@2.0.0` version (every deposit applied in its
//! block) against a `modnode:deposits@3.0.0` one (Electra: queued by the block, applied by an
//! epoch transition once final and within the churn limit). Their outputs differ by design, so
//! they are not compared output for output; both run the same generated blocks — the
//! generated genesis says `slots_per_epoch` and `finality_depth` — and then empty epochs until
//! the queue drains, and what must hold is checked after every block ([`Invariant`]):
//! acceptance, the eth1 deposit index, every deposit index consumed exactly once,
//! conservation of the deposited Gwei, the same outcome per deposit index, and after the drain
//! the same registry except for the documented differences ([`DifferenceClass`]).
//!
//! The cost gate: every call (block or epoch, either version) stays under
//! [`COST_GATE_PERCENT`] of its fuel budget, and an epoch transition's fuel does not grow with
//! the queue's length — it is run again with [`PAD_SHORT`] and with [`PAD_LONG`] entries that
//! are not final queued behind the real ones, and must give the same result for the same fuel
//! (within the fuel floor). Then the fuel ratio as for same-contract versions, over block calls
//! and the epoch transitions that applied something (an epoch with nothing to apply is
//! overhead the per-call gate bounds).

mod lane;
mod pair;
mod recorded;

use std::cell::RefCell;
use std::collections::BTreeMap;

use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use self::lane::{BlockIn, Judged, host, invariant, queue_sum};
use self::pair::{Pair, drain_bound, next_epoch_slot};
pub(crate) use self::recorded::on_recorded;
use super::deposit_inputs::{DepositSpec, Signer, Tamper, deposit_spec_with, tamper};
use super::runner::{CaseRun, Phase};
use super::versions::Version;
use super::{CaseInput, CheckError, Failure, Invariant, Kind, Settings};
use crate::chain::block::DepositData;
use crate::chain::eth1::DepositProofs;
use crate::chain::genesis::Genesis;
use crate::chain::workload::DevDepositLog;

const ETH: u64 = 1_000_000_000;
/// Largest generated registry (the churn limit is its 128-ETH floor for any of them).
const MAX_VALIDATORS: u32 = 256;
/// Seed of the generated registries' random pubkeys.
const GENESIS_SEED: u64 = 3;
/// Share of a call's fuel budget a call may use, in percent (try-runtime's 80 % block gate).
pub const COST_GATE_PERCENT: u64 = 80;
/// Non-final entries queued behind the real ones for the first queue-length probe.
pub const PAD_SHORT: usize = 64;
/// Non-final entries queued behind the real ones for the second queue-length probe.
pub const PAD_LONG: usize = 2048;
/// Entries one epoch transition applies at most.
const PER_EPOCH: u64 = deposits_common::electra::MAX_PENDING_DEPOSITS_PER_EPOCH as u64;
/// The smallest activation churn per epoch.
const MIN_CHURN: u64 = deposits_common::electra::MIN_PER_EPOCH_CHURN_LIMIT_ELECTRA;
/// The effective-balance cap of a validator without compounding credentials.
const MIN_ACTIVATION_BALANCE: u64 = deposits_common::electra::MIN_ACTIVATION_BALANCE;
/// The effective-balance cap of a compounding (`0x02`) validator.
const MAX_EFFECTIVE_BALANCE_ELECTRA: u64 = deposits_common::electra::MAX_EFFECTIVE_BALANCE_ELECTRA;

/// A generated deposit and the first byte of its withdrawal credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrossDeposit {
    /// Key, amount and signature.
    pub spec: DepositSpec,
    /// `0x00` (BLS), `0x01` (execution address) or `0x02` (compounding).
    pub credentials: u8,
}

/// One generated block of a cross-contract case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrossBlock {
    /// New deposits in the contract before the block.
    pub deposits: Vec<CrossDeposit>,
    /// What the block does to its due deposits.
    pub tamper: Tamper,
    /// Slots after the previous block (1 to 3).
    pub gap: u8,
}

/// One cross-contract case: a generated genesis with epochs and blocks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrossCase {
    /// Validators in the generated genesis registry.
    pub validators: u32,
    /// The genesis `slots_per_epoch`.
    pub slots_per_epoch: u8,
    /// The genesis `finality_depth`.
    pub finality_depth: u8,
    /// The blocks, in order; empty epochs follow until the queue drains.
    pub blocks: Vec<CrossBlock>,
}

/// A way the registries after the drain may differ, by design of the newer contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DifferenceClass {
    /// A `0x02` (compounding) validator created with more than 32 ETH: @3.0.0 caps its
    /// effective balance at 2048 ETH (EIP-7251), @2.0.0 at 32 ETH.
    CompoundingEffectiveBalance,
    /// A deposit applied by a later block than the one that carried it: @3.0.0 queues it and
    /// applies it at the first epoch boundary where it is final and within the churn limit
    /// (new validators and top-ups alike), so the registries differ until then.
    AppliedLater,
}

impl DifferenceClass {
    /// The documented rule, in words.
    pub fn rule(self) -> &'static str {
        match self {
            DifferenceClass::CompoundingEffectiveBalance => {
                "0x02 credentials: effective balance min(amount, 2048 ETH) under @3.0.0, \
                 min(amount, 32 ETH) under @2.0.0"
            }
            DifferenceClass::AppliedLater => {
                "deposit applied at an epoch boundary after the block that carried it (queued \
                 until final and within the activation churn limit)"
            }
        }
    }
}

/// How often a documented difference was seen over the passing cases of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Difference {
    /// Which difference.
    pub class: DifferenceClass,
    /// What the rule is.
    pub rule: String,
    /// Validators (compounding) or deposits (applied later) it was seen on.
    pub count: u64,
}

fn cross_amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        1 => Just(1u64),
        6 => ETH..=40 * ETH,
        3 => Just(32 * ETH),
        2 => (0u32..38).prop_map(|bit| 1u64 << bit),
        1 => Just(2048 * ETH),
    ]
}

/// Strategy for a [`CrossCase`]: 1 to 4 blocks of up to 8 deposits (amounts up to 2048 ETH, so
/// the queue drains within a bounded number of epochs), every credential prefix, 1 to 4 slots
/// per epoch, a finality depth of 1 to 3.
pub fn cross_case() -> impl Strategy<Value = CrossCase> {
    let credentials = prop_oneof![1 => Just(0u8), 2 => Just(1u8), 2 => Just(2u8)];
    let deposit = (deposit_spec_with(cross_amount()), credentials)
        .prop_map(|(spec, credentials)| CrossDeposit { spec, credentials });
    let block = (proptest::collection::vec(deposit, 0..=8), tamper(), 1u8..=3).prop_map(
        |(deposits, tamper, gap)| CrossBlock {
            deposits,
            tamper,
            gap,
        },
    );
    (
        proptest::collection::vec(block, 1..=4),
        1u8..=4,
        1u8..=3,
        prop_oneof![1u32..=16, 1u32..=MAX_VALIDATORS],
    )
        .prop_map(
            |(blocks, slots_per_epoch, finality_depth, validators)| CrossCase {
                validators,
                slots_per_epoch,
                finality_depth,
                blocks,
            },
        )
}

/// The cross-contract deposits phase.
pub(crate) struct CrossCheck<'a> {
    from: &'a Version,
    to: &'a Version,
    signer: RefCell<Signer>,
    differences: RefCell<BTreeMap<DifferenceClass, u64>>,
}

impl<'a> CrossCheck<'a> {
    /// `from` and `to` must be deposits versions of contracts 2 and 3, in either order.
    pub(crate) fn new(from: &'a Version, to: &'a Version) -> Result<Self, CheckError> {
        let mut majors = [from.deposits_contract(), to.deposits_contract()];
        majors.sort();
        if majors != [Some(2), Some(3)] {
            return Err(CheckError::Unsupported(format!(
                "the cross-contract deposits check compares a modnode:deposits@2.0.0 version \
                 with a @3.0.0 one; {} is on @{}.x, {} on @{}.x",
                from.name,
                from.deposits_contract().unwrap_or(0),
                to.name,
                to.deposits_contract().unwrap_or(0)
            )));
        }
        Ok(Self {
            from,
            to,
            signer: RefCell::new(Signer::default()),
            differences: RefCell::new(BTreeMap::new()),
        })
    }

    /// The documented differences seen over the passing cases run so far.
    pub(crate) fn differences(&self) -> Vec<Difference> {
        self.differences
            .borrow()
            .iter()
            .map(|(class, count)| Difference {
                class: *class,
                rule: class.rule().to_string(),
                count: *count,
            })
            .collect()
    }

    /// The case's blocks, signed: each block's new deposits, its tampering and its slot gap.
    fn blocks(&self, input: &CrossCase, genesis: &Genesis) -> Vec<(Vec<DepositData>, Tamper, u8)> {
        let existing: Vec<[u8; 48]> = genesis.validators.iter().map(|v| v.pubkey).collect();
        let fork = genesis.genesis_fork_version;
        let mut signer = self.signer.borrow_mut();
        input
            .blocks
            .iter()
            .map(|block| {
                let deposits = block
                    .deposits
                    .iter()
                    .map(|d| {
                        signer.deposit_with_credentials(
                            &d.spec,
                            [d.credentials; 32],
                            &existing,
                            fork,
                        )
                    })
                    .collect();
                (deposits, block.tamper, block.gap)
            })
            .collect()
    }

    fn run_cross(&self, input: &CrossCase, settings: &Settings) -> Judged<CaseRun> {
        let mut genesis = Genesis::generated("upgrade-check", input.validators, GENESIS_SEED);
        genesis.slots_per_epoch = Some(u64::from(input.slots_per_epoch.max(1)));
        genesis.finality_depth = u64::from(input.finality_depth.max(1));
        let registry = genesis.registry().map_err(|e| {
            host(format!(
                "generated registry of {} validators: {e}",
                input.validators
            ))
        })?;
        let blocks = self.blocks(input, &genesis);
        let mut pair = Pair::new(self.from, self.to, &registry, 0);
        let max = u64::from(genesis.max_deposits_per_block);
        let spe = genesis.slots_per_epoch.unwrap_or(1);
        let mut contract = DevDepositLog::new();
        // Every amount the contract holds, by deposit index (for the drain bound).
        let mut amounts: Vec<u64> = Vec::new();
        let (mut height, mut slot) = (0u64, 0u64);
        let mut drain_left: Option<u64> = None;
        let mut generated = blocks.into_iter();
        loop {
            let index = pair.index();
            let (tamper, parent_slot) = match generated.next() {
                Some((deposits, tamper, gap)) => {
                    for d in deposits {
                        amounts.push(d.amount);
                        contract.push(d);
                    }
                    let parent = slot;
                    slot = slot.saturating_add(u64::from(gap.max(1)));
                    (tamper, parent)
                }
                None => {
                    let queued = pair.queued();
                    let count = contract.len();
                    if queued.is_empty() && index == count {
                        break;
                    }
                    let left = *drain_left.get_or_insert_with(|| {
                        drain_bound(queued, &amounts, index, genesis.finality_depth)
                    });
                    if left == 0 {
                        let detail = format!(
                            "{} entries ({} Gwei) still queued and {} deposits not carried \
                             after the empty epochs that drain any queue of this case",
                            queued.len(),
                            queue_sum(queued),
                            count.saturating_sub(index)
                        );
                        return Ok(Err(invariant(Invariant::Drain, detail)));
                    }
                    drain_left = Some(left.saturating_sub(1));
                    let parent = slot;
                    slot = next_epoch_slot(slot, spe);
                    (Tamper::Honest, parent)
                }
            };
            height = height.saturating_add(1);
            let eth1 = contract.eth1_data();
            let due = eth1.deposit_count.saturating_sub(index).min(max);
            let honest = contract
                .proven_deposits(index, due, eth1.deposit_count)
                .map_err(|e| host(format!("the generated deposit contract: {e}")))?;
            let block = BlockIn {
                height,
                slot,
                parent_slot,
                ctx: lane::context(height, slot, genesis.genesis_fork_version, &eth1, index),
                deposits: tamper.apply(honest),
            };
            if let Err(f) = pair.block(&block, &genesis, settings)? {
                return Ok(Err(f));
            }
        }
        match pair.finish() {
            Ok(counts) => {
                self.count(counts);
                Ok(Ok(pair.fuel()))
            }
            Err(f) => Ok(Err(f)),
        }
    }

    /// Adds the differences a passing case showed to the run's.
    pub(crate) fn count(&self, counts: BTreeMap<DifferenceClass, u64>) {
        let mut differences = self.differences.borrow_mut();
        for (class, count) in counts {
            let seen = differences.entry(class).or_insert(0);
            *seen = seen.saturating_add(count);
        }
    }
}

impl Phase for CrossCheck<'_> {
    type Input = CrossCase;

    fn kind(&self) -> Kind {
        Kind::Deposits
    }

    fn strategy(&self) -> BoxedStrategy<CrossCase> {
        cross_case().boxed()
    }

    fn wrap(input: CrossCase) -> CaseInput {
        CaseInput::DepositsCross(input)
    }

    fn run_case(&self, input: &CrossCase) -> Result<CaseRun, CheckError> {
        let (run, failure) = self.run_judged(input, &Settings::default())?;
        Ok(CaseRun {
            divergence: failure.map(|f| f.to_string()),
            ..run
        })
    }

    fn run_judged(
        &self,
        input: &CrossCase,
        settings: &Settings,
    ) -> Result<(CaseRun, Option<Failure>), CheckError> {
        match self.run_cross(input, settings)? {
            Ok(run) => {
                let failure = run.judge(settings);
                Ok((run, failure))
            }
            Err(failure) => Ok((
                CaseRun {
                    fuel_old: 0,
                    fuel_new: 0,
                    divergence: None,
                },
                Some(failure),
            )),
        }
    }
}
