//! Deposits: both versions apply the same generated blocks to the same generated registry, with
//! the deposits proven by an in-memory deposit contract the way a producer proves them (and
//! sometimes tampered with: flipped proof bits, swapped, duplicated, missing or extra deposits);
//! each block's acceptance, per-deposit outcomes, deposit index after the block and post-state
//! root must match.

use std::cell::RefCell;
use std::sync::Arc;

use proptest::prelude::*;

use super::deposit_inputs::{DepositCase, Signer, deposit_case};
use super::runner::{CaseRun, Phase};
use super::versions::{BlockRun, Version, is_host_failure};
use super::{CaseInput, CheckError, Kind};
use crate::chain::block::DepositData;
use crate::chain::eth1::DepositProofs;
use crate::chain::genesis::Genesis;
use crate::chain::workload::DevDepositLog;
use crate::deposit::{DepositContext, DepositOutcome, ProvenDeposit};
use crate::state::{Registry, RegistryDelta};

/// Largest generated registry: large enough that a registry scan per deposit costs more than
/// the rest of the deposit's processing.
const MAX_VALIDATORS: u32 = 16_384;
/// Seed of the generated registries' random pubkeys.
const GENESIS_SEED: u64 = 3;

/// What one version made of one block, in the terms that must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BlockResult {
    /// Accepted: outcomes, the deposit index and the registry root after the block.
    Imported {
        /// One per deposit.
        outcomes: Vec<DepositOutcome>,
        /// `eth1_deposit_index` after the block.
        eth1_deposit_index: u64,
        /// Registry root after the block.
        root: [u8; 32],
        /// The registry changes the block made, when known (not compared: the root commits to
        /// them; shown to say which validator and field differ when the roots do).
        delta: Option<RegistryDelta>,
    },
    /// Rejected by the module: the block is invalid (the reason is not compared).
    Rejected(String),
    /// The call trapped, ran out of fuel or hit a limit: the block is invalid.
    Failed(String),
}

impl BlockResult {
    fn same_as(&self, other: &BlockResult) -> bool {
        match (self, other) {
            (BlockResult::Rejected(_), BlockResult::Rejected(_))
            | (BlockResult::Failed(_), BlockResult::Failed(_)) => true,
            (
                BlockResult::Imported {
                    outcomes: oa,
                    eth1_deposit_index: ia,
                    root: ra,
                    ..
                },
                BlockResult::Imported {
                    outcomes: ob,
                    eth1_deposit_index: ib,
                    root: rb,
                    ..
                },
            ) => oa == ob && ia == ib && ra == rb,
            _ => false,
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            BlockResult::Imported {
                outcomes,
                eth1_deposit_index,
                root,
                ..
            } => format!(
                "imported ({} deposits, deposit index after {eth1_deposit_index}, registry root \
                 {})",
                outcomes.len(),
                hex::encode(root)
            ),
            BlockResult::Rejected(reason) => format!("rejected ({reason})"),
            BlockResult::Failed(reason) => format!("failed ({reason})"),
        }
    }
}

/// Runs one block through `version` over `registry`, applying its changes if it is accepted
/// (a rejected or failed block leaves the state as it was, like a node that refuses it).
/// Returns the result and the fuel (0 for a block that was not accepted: the runtime reports
/// fuel only for accepted ones).
pub(crate) fn run_block(
    version: &Version,
    registry: &mut Arc<Registry>,
    ctx: &DepositContext,
    deposits: &[ProvenDeposit],
) -> Result<(BlockResult, u64), CheckError> {
    Ok(
        match version.process_deposits(registry.clone(), ctx, deposits) {
            BlockRun::Applied {
                outcomes,
                delta,
                eth1_deposit_index,
                fuel,
                ..
            } => {
                let state = Arc::make_mut(registry);
                let result = match state.apply(&delta) {
                    Ok(()) => BlockResult::Imported {
                        outcomes,
                        eth1_deposit_index,
                        root: state.root(),
                        delta: Some(delta),
                    },
                    Err(e) => {
                        BlockResult::Rejected(format!("its registry changes do not apply: {e}"))
                    }
                };
                (result, fuel)
            }
            BlockRun::Rejected(e) => (BlockResult::Rejected(format!("{e:?}")), 0),
            BlockRun::Failed(e) if is_host_failure(&e) => {
                return Err(CheckError::Host {
                    reason: e.to_string(),
                });
            }
            BlockRun::Failed(e) => (BlockResult::Failed(e.to_string()), 0),
        },
    )
}

/// Runs generated blocks through `version`: each block's new deposits enter the contract, the
/// block carries the due ones (at most `max_per_block`, from the version's own deposit index)
/// with their proofs, tampered as the block says.
fn run_generated(
    version: &Version,
    registry: Registry,
    blocks: &[(Vec<DepositData>, super::deposit_inputs::Tamper)],
    fork: [u8; 4],
    max_per_block: u64,
) -> Result<(Vec<BlockResult>, u64), CheckError> {
    let mut registry = Arc::new(registry);
    let mut contract = DevDepositLog::new();
    let mut index = 0u64;
    let mut fuel = 0u64;
    let mut results = Vec::with_capacity(blocks.len());
    for (height, (deposits, tamper)) in (1u64..).zip(blocks) {
        for d in deposits {
            contract.push(*d);
        }
        let eth1 = contract.eth1_data();
        let due = eth1.deposit_count.saturating_sub(index).min(max_per_block);
        let honest = contract
            .proven_deposits(index, due, eth1.deposit_count)
            .map_err(|e| CheckError::Host {
                reason: format!("the generated deposit contract: {e}"),
            })?;
        let deposits = tamper.apply(honest);
        let ctx = DepositContext {
            height,
            slot: height,
            genesis_fork_version: fork,
            eth1_data: eth1,
            eth1_deposit_index: index,
        };
        let (result, used) = run_block(version, &mut registry, &ctx, &deposits)?;
        if let BlockResult::Imported {
            eth1_deposit_index, ..
        } = &result
        {
            index = *eth1_deposit_index;
        }
        fuel = fuel.saturating_add(used);
        results.push(result);
    }
    Ok((results, fuel))
}

/// Where two block sequences first differ, in words; `None` if they agree.
pub(crate) fn first_difference(old: &[BlockResult], new: &[BlockResult]) -> Option<String> {
    let n = old.len();
    old.iter()
        .zip(new)
        .enumerate()
        .find(|(_, (a, b))| !a.same_as(b))
        .map(|(i, (a, b))| {
            let place = format!("block {} of {n}", i.saturating_add(1));
            match (a, b) {
                (
                    BlockResult::Imported {
                        outcomes: oa,
                        eth1_deposit_index: ia,
                        root: ra,
                        delta: da,
                    },
                    BlockResult::Imported {
                        outcomes: ob,
                        eth1_deposit_index: ib,
                        root: rb,
                        delta: db,
                    },
                ) => match oa.iter().zip(ob).position(|(x, y)| x != y) {
                    Some(j) => format!(
                        "{place}, deposit {j}: old version {:?}, new version {:?}",
                        oa.get(j),
                        ob.get(j)
                    ),
                    None if oa.len() != ob.len() => format!(
                        "{place}: old version gave {} outcomes, new version {}",
                        oa.len(),
                        ob.len()
                    ),
                    None if ia != ib => format!(
                        "{place}: deposit index after the block: old version {ia}, new {ib}"
                    ),
                    None => {
                        let changes = match (da, db) {
                            (Some(da), Some(db)) => delta_difference(da, db)
                                .map(|d| format!("; {d}"))
                                .unwrap_or_default(),
                            _ => String::new(),
                        };
                        format!(
                            "{place}: same outcomes, different post-state roots (old {}, new \
                             {}){changes}",
                            hex::encode(ra),
                            hex::encode(rb)
                        )
                    }
                },
                _ => format!(
                    "{place}: old version {}, new version {}",
                    a.describe(),
                    b.describe()
                ),
            }
        })
}

/// The first validator and field on which two versions' registry changes for one block
/// differ, in words: a balance they set differently, a balance one set and the other did not,
/// or a field of an added validator. `None` when the changes are the same.
pub(crate) fn delta_difference(old: &RegistryDelta, new: &RegistryDelta) -> Option<String> {
    let old_balances: std::collections::BTreeMap<u32, u64> = old.balances.iter().copied().collect();
    let new_balances: std::collections::BTreeMap<u32, u64> = new.balances.iter().copied().collect();
    let indices: std::collections::BTreeSet<u32> = old_balances
        .keys()
        .chain(new_balances.keys())
        .copied()
        .collect();
    for index in indices {
        let (a, b) = (old_balances.get(&index), new_balances.get(&index));
        if a != b {
            let show = |v: Option<&u64>| v.map_or("unchanged".to_string(), |v| format!("{v} Gwei"));
            return Some(format!(
                "validator {index}: balance set by the old version {}, by the new {}",
                show(a),
                show(b)
            ));
        }
    }
    for (k, (a, b)) in old.added.iter().zip(&new.added).enumerate() {
        let field = if a.pubkey != b.pubkey {
            Some(("pubkey", hex::encode(a.pubkey), hex::encode(b.pubkey)))
        } else if a.withdrawal_credentials != b.withdrawal_credentials {
            Some((
                "withdrawal_credentials",
                hex::encode(a.withdrawal_credentials),
                hex::encode(b.withdrawal_credentials),
            ))
        } else if a.effective_balance != b.effective_balance {
            Some((
                "effective_balance",
                a.effective_balance.to_string(),
                b.effective_balance.to_string(),
            ))
        } else if a.balance != b.balance {
            Some(("balance", a.balance.to_string(), b.balance.to_string()))
        } else {
            None
        };
        if let Some((name, x, y)) = field {
            return Some(format!(
                "validator added {k} of the block: {name} old {x}, new {y}"
            ));
        }
    }
    (old.added.len() != new.added.len()).then(|| {
        format!(
            "validators added: old version {}, new version {}",
            old.added.len(),
            new.added.len()
        )
    })
}

/// The deposits phase.
pub(crate) struct DepositsCheck<'a> {
    from: &'a Version,
    to: &'a Version,
    signer: RefCell<Signer>,
}

impl<'a> DepositsCheck<'a> {
    pub(crate) fn new(from: &'a Version, to: &'a Version) -> Self {
        Self {
            from,
            to,
            signer: RefCell::new(Signer::default()),
        }
    }
}

impl Phase for DepositsCheck<'_> {
    type Input = DepositCase;

    fn kind(&self) -> Kind {
        Kind::Deposits
    }

    fn strategy(&self) -> BoxedStrategy<DepositCase> {
        deposit_case(MAX_VALIDATORS).boxed()
    }

    fn wrap(input: DepositCase) -> CaseInput {
        CaseInput::Deposits(input)
    }

    fn run_case(&self, input: &DepositCase) -> Result<CaseRun, CheckError> {
        let genesis = Genesis::generated("upgrade-check", input.validators, GENESIS_SEED);
        let registry = genesis.registry().map_err(|e| CheckError::Host {
            reason: format!("generated registry of {} validators: {e}", input.validators),
        })?;
        let existing: Vec<[u8; 48]> = genesis.validators.iter().map(|v| v.pubkey).collect();
        let fork = genesis.genesis_fork_version;
        let mut signer = self.signer.borrow_mut();
        let blocks: Vec<_> = input
            .blocks
            .iter()
            .map(|block| {
                let deposits = block
                    .deposits
                    .iter()
                    .map(|s| signer.deposit(s, &existing, fork))
                    .collect();
                (deposits, block.tamper)
            })
            .collect();
        drop(signer);
        let max = u64::from(genesis.max_deposits_per_block);
        let (old, fuel_old) = run_generated(self.from, registry.clone(), &blocks, fork, max)?;
        let (new, fuel_new) = run_generated(self.to, registry, &blocks, fork, max)?;
        Ok(CaseRun {
            fuel_old,
            fuel_new,
            divergence: first_difference(&old, &new),
        })
    }
}
