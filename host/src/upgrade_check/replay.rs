//! `--replay <data-dir>`: re-executes the canonical blocks a node recorded, with both versions.
//! Each version replays the chain from genesis in its own in-memory chain, exactly as a node
//! syncing it would (the chain checks each block's state root against the header), and is also
//! called directly on each block's context to measure its fuel. Both versions must accept every
//! recorded block with the same outcomes and roots. A version replays every height, including
//! heights where the chain's schedule names another deposits module: the question is whether it
//! would have agreed with the recorded history there ([`Substitute`]).
//!
//! Versions of different deposits contracts cannot both reproduce one history: a chain that
//! switched from @2.0.0 to @3.0.0 at H is replayed once on its own schedule instead
//! ([`replay_across`]), each height on the module and contract the schedule names for it —
//! the older version before H, the newer from H on, the queue carried — ending on the
//! recorded roots.
//!
//! A replay starts from genesis, or from a running node's verified checkpoint
//! ([`LiveCheckpoint`], `--from-node`): then each version's chain starts at the checkpoint's
//! block and state, and `blocks` are the canonical blocks after it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::deposits::{BlockResult, first_difference};
use super::deposits_cross;
use super::live::LiveCheckpoint;
use super::versions::{BlockRun, Version, is_host_failure};
use super::{
    CaseInput, CheckError, Counterexample, Failure, Findings, Kind, Report, Settings, Verdict,
};
use crate::chain::block::Block;
use crate::chain::genesis::Genesis;
use crate::chain::{Chain, DepositContext, DepositEngine, DepositModules};
use crate::hashes::ModuleHash;
use crate::store::{MemoryStore, SledStore};

fn replay_error(origin: &str, reason: String) -> CheckError {
    CheckError::Replay {
        path: origin.to_string(),
        reason,
    }
}

/// The canonical blocks recorded in `data_dir` (a node's data dir, which must not be in use),
/// from height 1 to its head, read through a chain running `reader` (a deposits version; reading
/// blocks runs none).
pub(crate) fn recorded_blocks(
    data_dir: &Path,
    genesis: &Genesis,
    reader: &Version,
) -> Result<Vec<Block>, CheckError> {
    let origin = data_dir.display().to_string();
    let err = |reason: String| replay_error(&origin, reason);
    let chain_dir = data_dir.join("chain");
    if !chain_dir.is_dir() {
        return Err(err(format!(
            "{} does not exist: not a modnode data dir",
            chain_dir.display()
        )));
    }
    let store = SledStore::open(&chain_dir)
        .map_err(|e| err(format!("{e} (is a node still running on it?)")))?;
    // Opening a chain takes a deposits engine; reading its blocks never calls it.
    let engine = reader.deposit_engine().ok_or_else(|| CheckError::Host {
        reason: format!("{} is not loaded as a deposits module", reader.name),
    })?;
    let recorded = Chain::open(Arc::new(store), genesis.clone(), engine)
        .map_err(|e| err(format!("{e} (pass the genesis the node was started with)")))?;
    let served_from = recorded.served_from();
    if served_from > 1 {
        return Err(err(format!(
            "this data dir keeps blocks from height {served_from} only (pruned, or started from \
             a checkpoint): a replay needs every block from genesis; run the node with \
             --history full to keep them"
        )));
    }
    let blocks = (1..=recorded.head().height)
        .map(|height| {
            recorded
                .block_at(height)
                .map_err(|e| err(e.to_string()))?
                .ok_or_else(|| err(format!("no canonical block at height {height}")))
        })
        .collect::<Result<Vec<Block>, CheckError>>()?;
    Ok(blocks)
}

/// An in-memory chain of `genesis` running `engine`, at genesis or at `start` (read from
/// `origin`).
pub(crate) fn memory_chain(
    genesis: &Genesis,
    start: Option<&LiveCheckpoint>,
    engine: DepositEngine,
    origin: &str,
) -> Result<Chain, CheckError> {
    match start {
        Some(checkpoint) => checkpoint.chain(genesis, engine, origin),
        None => Chain::open(Arc::new(MemoryStore::new()), genesis.clone(), engine).map_err(|e| {
            CheckError::Host {
                reason: format!("in-memory chain for the replay: {e}"),
            }
        }),
    }
}

/// The heights of `blocks`, in order.
fn heights(blocks: &[Block]) -> impl Iterator<Item = u64> + '_ {
    blocks.iter().map(|b| b.header.height)
}

/// Replays `blocks` (a chain's canonical blocks after `start`, or from height 1 without one,
/// read from `origin`: a data dir or a node) with both versions.
pub(crate) fn replay(
    from: &Version,
    to: &Version,
    origin: &str,
    start: Option<&LiveCheckpoint>,
    blocks: &[Block],
    genesis: Genesis,
    settings: &Settings,
) -> Result<Report, CheckError> {
    let err = |reason: String| replay_error(origin, reason);

    let (old, fuel_old) = replay_version(from, &genesis, start, blocks, origin)?;
    if let Some((height, result)) = heights(blocks)
        .zip(&old)
        .find(|(_, r)| !matches!(r, BlockResult::Imported { .. }))
    {
        return Err(err(format!(
            "the old version {} does not reproduce recorded block {height} ({}): wrong genesis, \
             or not the version that built this chain",
            from.name,
            result.describe()
        )));
    }
    let (new, fuel_new) = replay_version(to, &genesis, start, blocks, origin)?;

    // Fuel per block: (height, old, new, new / old) of the block with the highest ratio.
    let worst = heights(blocks)
        .zip(fuel_old.iter().zip(&fuel_new))
        .filter(|(_, (old, _))| **old > 0)
        .map(|(height, (&old, &new))| {
            let ratio = new as f64 / old.max(settings.fuel_floor) as f64;
            (height, old, new, ratio)
        })
        .max_by(|a, b| a.3.total_cmp(&b.3));
    let failure = match first_difference(&old, &new) {
        Some(detail) => Some(Failure::Divergence { detail }),
        None => worst
            .filter(|w| w.3 > settings.max_fuel_ratio)
            .map(|(_, old, new, ratio)| Failure::Fuel { old, new, ratio }),
    };
    Ok(Report {
        kind: Kind::Deposits,
        cases: u32::try_from(blocks.len()).unwrap_or(u32::MAX),
        divergences: u32::from(failure.is_some()),
        max_fuel_ratio: worst.map_or(0.0, |w| w.3),
        verdict: failure.as_ref().map_or(Verdict::Pass, Failure::verdict),
        counterexample: failure.map(|failure| {
            let height = match &failure {
                Failure::Fuel { .. } => worst.map_or(0, |w| w.0),
                _ => 0,
            };
            Counterexample {
                seed: settings.seed,
                failure,
                input: CaseInput::Recorded {
                    data_dir: origin.to_string(),
                    height,
                },
                case_file: None,
            }
        }),
    })
}

/// Replays `blocks` on a fresh in-memory chain running `version`: each block's import result,
/// and the fuel of the version's call on it (0 when it was not accepted).
/// Answers every scheduled deposits module with the version under check.
struct Substitute(DepositEngine);

impl DepositModules for Substitute {
    fn deposits(&self, _hash: &ModuleHash) -> Option<DepositEngine> {
        Some(self.0.clone())
    }
}

fn replay_version(
    version: &Version,
    genesis: &Genesis,
    start: Option<&LiveCheckpoint>,
    blocks: &[Block],
    origin: &str,
) -> Result<(Vec<BlockResult>, Vec<u64>), CheckError> {
    let engine = version.deposit_engine().ok_or_else(|| CheckError::Host {
        reason: format!("{} is not loaded as a deposits module", version.name),
    })?;
    let mut chain = memory_chain(genesis, start, engine.clone(), origin)?;
    chain.set_deposit_modules(Arc::new(Substitute(engine)));
    let fork = genesis.genesis_fork_version;
    let mut results = Vec::with_capacity(blocks.len());
    let mut fuel = Vec::with_capacity(blocks.len());
    for block in blocks {
        let header = &block.header;
        let used = match chain.deposits_due(header.slot, header.proposer, &block.body.eth1_vote) {
            Ok(due) => {
                let ctx = DepositContext {
                    height: header.height,
                    slot: header.slot,
                    genesis_fork_version: fork,
                    eth1_data: due.eth1_data,
                    eth1_deposit_index: due.from,
                };
                match version.process_deposits(chain.registry(), &ctx, &block.body.deposits) {
                    BlockRun::Applied { fuel, .. } => fuel,
                    BlockRun::Failed(e) if is_host_failure(&e) => {
                        return Err(CheckError::Host {
                            reason: e.to_string(),
                        });
                    }
                    BlockRun::Rejected(_) | BlockRun::Failed(_) => 0,
                }
            }
            Err(_) => 0,
        };
        fuel.push(used);
        results.push(match chain.import(block) {
            Ok(imported) => BlockResult::Imported {
                outcomes: imported.outcomes,
                eth1_deposit_index: chain.eth1_state().deposit_index,
                root: imported.head.state_root.to_bytes(),
                delta: None,
            },
            Err(e) => BlockResult::Rejected(e.to_string()),
        });
    }
    Ok((results, fuel))
}

/// Deposits modules by component hash: what a node that has both versions prepared answers.
struct ByHash(HashMap<ModuleHash, DepositEngine>);

impl DepositModules for ByHash {
    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine> {
        self.0.get(hash).cloned()
    }
}

/// An in-memory chain of `genesis` (read from `origin`), at genesis or at `start`, that runs
/// `from` and `to` by hash, as a node with both versions prepared: the genesis's deposits
/// module (`from` when it names none) must be one of them.
pub(crate) fn chain_running(
    from: &Version,
    to: &Version,
    genesis: &Genesis,
    start: Option<&LiveCheckpoint>,
    origin: &str,
) -> Result<Chain, CheckError> {
    let engine = |v: &Version| {
        v.deposit_engine().ok_or_else(|| CheckError::Host {
            reason: format!("{} is not loaded as a deposits module", v.name),
        })
    };
    let engines = HashMap::from([
        (ModuleHash(from.sha256), engine(from)?),
        (ModuleHash(to.sha256), engine(to)?),
    ]);
    let genesis_module = ModuleHash(genesis.deposits_module.unwrap_or(from.sha256));
    let Some(genesis_engine) = engines.get(&genesis_module).cloned() else {
        return Err(replay_error(
            origin,
            format!(
                "the genesis runs deposits module {}, which is neither --from nor --to",
                genesis_module.to_hex()
            ),
        ));
    };
    let mut chain = memory_chain(genesis, start, genesis_engine, origin)?;
    chain.set_deposit_modules(Arc::new(ByHash(engines)));
    Ok(chain)
}

/// Replays `blocks` (read from `origin`) with `from` and `to` of different contracts. A chain
/// whose schedule switches between them is replayed on its own schedule: every height on the
/// module and contract the schedule names for it, each block's state root checked against its
/// header as a syncing node checks it, ending on the recorded head. A chain that runs only one
/// of them (the upgrade not proposed yet) has its real deposits run through both versions and
/// checked for what must hold across contracts ([`deposits_cross::on_recorded`]).
pub(crate) fn replay_across(
    from: &Version,
    to: &Version,
    origin: &str,
    start: Option<&LiveCheckpoint>,
    blocks: &[Block],
    genesis: Genesis,
    settings: &Settings,
) -> Result<Findings, CheckError> {
    let err = |reason: String| replay_error(origin, reason);
    let name_of = |hash: &ModuleHash| {
        [from, to]
            .into_iter()
            .find(|v| &v.sha256 == hash.as_bytes())
            .map(|v| v.name.clone())
    };
    let genesis_module = ModuleHash(genesis.deposits_module.unwrap_or(from.sha256));
    let mut chain = chain_running(from, to, &genesis, start, origin)?;
    let mut heights: HashMap<ModuleHash, u64> = HashMap::new();
    let mut failure = None;
    for block in blocks {
        let height = block.header.height;
        let module = chain
            .schedule()
            .module_at(crate::runtime::Kind::Deposits, height)
            .unwrap_or(genesis_module);
        if name_of(&module).is_none() {
            return Err(err(format!(
                "height {height} runs deposits module {} by the chain's schedule, which is \
                 neither --from nor --to",
                module.to_hex()
            )));
        }
        let ran = heights.entry(module).or_insert(0);
        *ran = ran.saturating_add(1);
        if let Err(e) = chain.import(block) {
            failure = Some((
                height,
                Failure::Divergence {
                    detail: format!(
                        "recorded block {height} does not replay on {} (the module its \
                         height is scheduled to run): {e}",
                        name_of(&module).unwrap_or_default()
                    ),
                },
            ));
            break;
        }
    }
    // From a checkpoint taken after the switch, every replayed height runs the newer
    // version: that is a replay on the chain's own schedule too.
    let switched = heights.contains_key(&ModuleHash(to.sha256))
        && (heights.contains_key(&ModuleHash(from.sha256)) || start.is_some());
    if failure.is_none() && !switched {
        return deposits_cross::on_recorded(from, to, origin, start, blocks, &genesis, settings);
    }
    let report = Report {
        kind: Kind::Deposits,
        cases: u32::try_from(blocks.len()).unwrap_or(u32::MAX),
        divergences: u32::from(failure.is_some()),
        max_fuel_ratio: 0.0,
        verdict: failure.as_ref().map_or(Verdict::Pass, |(_, f)| f.verdict()),
        counterexample: failure.map(|(height, failure)| Counterexample {
            seed: 0,
            failure,
            input: CaseInput::Recorded {
                data_dir: origin.to_string(),
                height,
            },
            case_file: None,
        }),
    };
    Ok(Findings {
        report,
        differences: Vec::new(),
    })
}
