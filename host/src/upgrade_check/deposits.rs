//! Deposits: both versions apply the same generated blocks to the same generated registry;
//! each block's acceptance, per-deposit outcomes and post-state root must match.

use std::cell::RefCell;
use std::sync::{Arc, RwLock};

use proptest::prelude::*;

use super::deposit_inputs::{DepositCase, Signer, deposit_case};
use super::runner::{CaseRun, Phase};
use super::versions::{BlockRun, Version, is_host_failure};
use super::{CaseInput, CheckError, Kind};
use crate::chain::genesis::Genesis;
use crate::chain::to_wit;
use crate::runtime::deposits::{BlockContext, Deposit, Outcome};
use crate::state::Registry;

/// Largest generated registry: large enough that a registry scan per deposit costs more than
/// the rest of the deposit's processing.
const MAX_VALIDATORS: u32 = 4096;
/// Seed of the generated registries' random pubkeys.
const GENESIS_SEED: u64 = 3;

/// What one version made of one block, in the terms that must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BlockResult {
    /// Accepted: outcomes and the state root after the block.
    Imported {
        /// One per deposit.
        outcomes: Vec<Outcome>,
        /// State root after the block.
        root: [u8; 32],
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
            _ => self == other,
        }
    }

    fn describe(&self) -> String {
        match self {
            BlockResult::Imported { outcomes, root } => format!(
                "imported ({} deposits, state root {})",
                outcomes.len(),
                hex::encode(root)
            ),
            BlockResult::Rejected(reason) => format!("rejected ({reason})"),
            BlockResult::Failed(reason) => format!("failed ({reason})"),
        }
    }
}

/// Runs `blocks` through `version` from `registry`; a rejected or failed block leaves the
/// state as it was, like a node that refuses it. Returns each block's result and fuel (0 for a
/// block that was not accepted: the runtime reports fuel only for accepted ones).
pub(crate) fn run_blocks(
    version: &Version,
    registry: Registry,
    blocks: &[(BlockContext, Vec<Deposit>)],
) -> Result<(Vec<BlockResult>, Vec<u64>), CheckError> {
    let registry = Arc::new(RwLock::new(registry));
    let mut fuel = Vec::with_capacity(blocks.len());
    let mut results = Vec::with_capacity(blocks.len());
    let poisoned = || CheckError::Host {
        reason: "registry lock poisoned".into(),
    };
    for (ctx, deposits) in blocks {
        let run = version.process_deposits(registry.clone(), ctx.clone(), deposits.clone());
        let mut used_fuel = 0;
        let result = match run {
            BlockRun::Applied {
                outcomes,
                delta,
                fuel: used,
            } => {
                used_fuel = used;
                let mut state = registry.write().map_err(|_| poisoned())?;
                match state.apply(&delta) {
                    Ok(()) => BlockResult::Imported {
                        outcomes,
                        root: state.root(),
                    },
                    Err(e) => {
                        BlockResult::Rejected(format!("its registry changes do not apply: {e}"))
                    }
                }
            }
            BlockRun::Rejected(e) => BlockResult::Rejected(format!("{e:?}")),
            BlockRun::Failed(e) if is_host_failure(&e) => {
                return Err(CheckError::Host {
                    reason: e.to_string(),
                });
            }
            BlockRun::Failed(e) => BlockResult::Failed(e.to_string()),
        };
        results.push(result);
        fuel.push(used_fuel);
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
                        root: ra,
                    },
                    BlockResult::Imported {
                        outcomes: ob,
                        root: rb,
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
                    None => format!(
                        "{place}: same outcomes, different post-state roots (old {}, new {})",
                        hex::encode(ra),
                        hex::encode(rb)
                    ),
                },
                _ => format!(
                    "{place}: old version {}, new version {}",
                    a.describe(),
                    b.describe()
                ),
            }
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
        let blocks: Vec<(BlockContext, Vec<Deposit>)> = (1u64..)
            .zip(&input.blocks)
            .map(|(height, specs)| {
                let ctx = BlockContext {
                    height,
                    slot: height,
                    genesis_fork_version: fork.to_vec(),
                };
                let deposits = specs
                    .iter()
                    .map(|s| to_wit(&signer.deposit(s, &existing, fork)))
                    .collect();
                (ctx, deposits)
            })
            .collect();
        drop(signer);
        let (old, fuel_old) = run_blocks(self.from, registry.clone(), &blocks)?;
        let (new, fuel_new) = run_blocks(self.to, registry, &blocks)?;
        Ok(CaseRun {
            fuel_old: fuel_old.iter().fold(0, |a, &b| a.saturating_add(b)),
            fuel_new: fuel_new.iter().fold(0, |a, &b| a.saturating_add(b)),
            divergence: first_difference(&old, &new),
        })
    }
}
