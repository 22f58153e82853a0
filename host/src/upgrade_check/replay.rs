//! `--replay <data-dir>`: re-executes the canonical blocks a node recorded, with both versions,
//! each on its own copy of the state from genesis. Every block's post-state root must be the
//! same for both versions and equal to the root the block header commits to.

use std::path::Path;
use std::sync::Arc;

use super::deposits::{BlockResult, first_difference, run_blocks};
use super::versions::Version;
use super::{CaseInput, CheckError, Counterexample, Failure, Kind, Report, Settings, Verdict};
use crate::chain::genesis::Genesis;
use crate::chain::{Chain, DepositEngine, native_deposits, to_wit};
use crate::runtime::deposits::{BlockContext, Deposit};
use crate::store::SledStore;

/// Replays `data_dir` (a node's data dir, which must not be in use) with both versions.
pub(crate) fn replay(
    from: &Version,
    to: &Version,
    data_dir: &Path,
    genesis: Genesis,
    settings: &Settings,
) -> Result<Report, CheckError> {
    let err = |reason: String| CheckError::Replay {
        path: data_dir.display().to_string(),
        reason,
    };
    let chain_dir = data_dir.join("chain");
    if !chain_dir.is_dir() {
        return Err(err(format!(
            "{} does not exist: not a modnode data dir",
            chain_dir.display()
        )));
    }
    let store = SledStore::open(&chain_dir)
        .map_err(|e| err(format!("{e} (is a node still running on it?)")))?;
    let fork = genesis.genesis_fork_version;
    let registry = genesis
        .registry()
        .map_err(|e| err(format!("genesis registry: {e}")))?;
    // Reading blocks needs no deposits engine; the native one is never called.
    let chain = Chain::open(
        Arc::new(store),
        genesis,
        DepositEngine::Native(native_deposits::Verification::OneByOne),
    )
    .map_err(|e| err(format!("{e} (pass the genesis the node was started with)")))?;
    let head = chain.head();
    let mut blocks: Vec<(BlockContext, Vec<Deposit>)> = Vec::new();
    let mut recorded = Vec::new();
    for height in 1..=head.height {
        let block = chain
            .block_at(height)
            .map_err(|e| err(e.to_string()))?
            .ok_or_else(|| err(format!("no canonical block at height {height}")))?;
        blocks.push((
            BlockContext {
                height,
                slot: block.header.slot,
                genesis_fork_version: fork.to_vec(),
            },
            block.body.deposits.iter().map(to_wit).collect(),
        ));
        recorded.push(block.header.state_root);
    }
    let (old, fuel_old) = run_blocks(from, registry.clone(), &blocks)?;
    let (new, fuel_new) = run_blocks(to, registry, &blocks)?;
    // Fuel per block: (height, old, new, new / old) of the block with the highest ratio.
    let worst = (1u64..)
        .zip(fuel_old.iter().zip(&fuel_new))
        .filter(|(_, (old, _))| **old > 0)
        .map(|(height, (&old, &new))| {
            let ratio = new as f64 / old.max(settings.fuel_floor) as f64;
            (height, old, new, ratio)
        })
        .max_by(|a, b| a.3.total_cmp(&b.3));
    let mut failure = first_difference(&old, &new).map(|detail| Failure::Divergence { detail });
    if failure.is_none() {
        failure = (1u64..)
            .zip(new.iter().zip(&recorded))
            .find_map(|(height, (result, root))| {
                let matches = matches!(result, BlockResult::Imported { root: r, .. } if r == root);
                (!matches).then(|| Failure::Divergence {
                    detail: format!(
                        "block {height}: both versions agree, but not with the recorded state root \
                     {} (they give {result:?})",
                        hex::encode(root)
                    ),
                })
            });
    }
    if failure.is_none() {
        failure = worst
            .filter(|w| w.3 > settings.max_fuel_ratio)
            .map(|(_, old, new, r)| Failure::Fuel { old, new, ratio: r });
    }
    Ok(Report {
        kind: Kind::Deposits,
        cases: u32::try_from(blocks.len()).unwrap_or(u32::MAX),
        divergences: u32::from(failure.is_some()),
        max_fuel_ratio: worst.map_or(0.0, |w| w.3),
        verdict: match &failure {
            None => Verdict::Pass,
            Some(Failure::Divergence { .. }) => Verdict::Divergence,
            Some(Failure::Fuel { .. }) => Verdict::FuelRegression,
        },
        counterexample: failure.map(|failure| {
            let height = match &failure {
                Failure::Fuel { .. } => worst.map_or(0, |w| w.0),
                Failure::Divergence { .. } => 0,
            };
            Counterexample {
                seed: settings.seed,
                failure,
                input: CaseInput::Recorded {
                    data_dir: data_dir.display().to_string(),
                    height,
                },
                case_file: None,
            }
        }),
    })
}
