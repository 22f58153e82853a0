//! A real chain's deposits through both versions of different contracts (try-runtime's "live"
//! mode, for a chain that does not run the newer version yet): the recorded blocks are
//! imported on an in-memory chain with the module its schedule names (which must be one of the
//! two), which gives each block's deposits their context — the agreed eth1 data and the
//! running deposit index — as the chain saw them; the same deposits go through both versions
//! from the genesis registry, with epoch transitions at the chain's epoch boundaries, then
//! empty epochs until the queue drains, and what must hold is checked as on generated cases.

use super::super::versions::Version;
use super::super::{CaseInput, CheckError, Counterexample, Failure, Findings, Invariant, Kind};
use super::super::{Report, Settings, Verdict};
use super::Difference;
use super::lane::{BlockIn, context, invariant, queue_sum};
use super::pair::{Pair, drain_bound, next_epoch_slot};
use crate::chain::block::Block;
use crate::chain::genesis::Genesis;
use crate::upgrade_check::live::LiveCheckpoint;

/// Runs `blocks` (a chain's canonical blocks after `start`, or from height 1 without one, read
/// from `origin`) through `from` and `to`, one of which the chain runs; see the module docs.
/// From a checkpoint, both versions start from its registry and deposit index; a checkpoint
/// whose state holds a queue (the chain already runs deposits@3) is refused, since the
/// @2.0.0 version cannot start from it.
pub(crate) fn on_recorded(
    from: &Version,
    to: &Version,
    origin: &str,
    start: Option<&LiveCheckpoint>,
    blocks: &[Block],
    genesis: &Genesis,
    settings: &Settings,
) -> Result<Findings, CheckError> {
    let err = |reason: String| CheckError::Replay {
        path: origin.to_string(),
        reason,
    };
    let Some(slots_per_epoch) = genesis.slots_per_epoch else {
        return Err(err(
            "the chain's genesis has no slots_per_epoch, so a modnode:deposits@3.0.0 module \
             cannot run on it (its epoch transitions have no boundaries)"
                .into(),
        ));
    };
    if let Some(checkpoint) = start
        && checkpoint
            .state
            .pending
            .as_ref()
            .is_some_and(|q| !q.is_empty())
    {
        return Err(err(format!(
            "the checkpoint at height {} holds queued deposits, which a modnode:deposits@2.0.0 \
             version cannot start from; replay from genesis (--from-genesis)",
            checkpoint.height()
        )));
    }
    let mut chain = super::super::replay::chain_running(from, to, genesis, start, origin)?;
    let registry = crate::state::Registry::clone(&chain.registry());
    let mut pair = Pair::new(from, to, &registry, chain.eth1_state().deposit_index);
    let fork = genesis.genesis_fork_version;
    let mut parent_slot = chain.head().slot;
    let mut last_eth1 = chain.eth1_state().eth1_data;
    let mut failure: Option<(u64, Failure)> = None;
    for block in blocks {
        let header = &block.header;
        let due = chain
            .deposits_due(header.slot, header.proposer, &block.body.eth1_vote)
            .map_err(|e| {
                err(format!(
                    "recorded block {}: {e} (pass the genesis the node was started with)",
                    header.height
                ))
            })?;
        let input = BlockIn {
            height: header.height,
            slot: header.slot,
            parent_slot,
            ctx: context(header.height, header.slot, fork, &due.eth1_data, due.from),
            deposits: block.body.deposits.clone(),
        };
        if let Err(f) = pair.block(&input, genesis, settings)? {
            failure = Some((header.height, f));
            break;
        }
        chain.import(block).map_err(|e| {
            err(format!(
                "recorded block {} does not replay on the module its chain runs: {e} (pass the \
                 genesis the node was started with, and the module it runs as --from or --to)",
                header.height
            ))
        })?;
        parent_slot = header.slot;
        last_eth1 = due.eth1_data;
    }
    if failure.is_none() {
        // Empty epochs after the head until the queue drains.
        let start = pair.queued().clone();
        let mut left = drain_bound(&start, &[], pair.index(), genesis.finality_depth);
        let (mut height, mut slot) = (chain.head().height, chain.head().slot);
        while !pair.queued().is_empty() {
            if left == 0 {
                let queued = pair.queued();
                failure = Some((
                    height,
                    invariant(
                        Invariant::Drain,
                        format!(
                            "{} entries ({} Gwei) still queued after the empty epochs that \
                             drain any queue of this chain",
                            queued.len(),
                            queue_sum(queued)
                        ),
                    ),
                ));
                break;
            }
            left = left.saturating_sub(1);
            height = height.saturating_add(1);
            let parent = slot;
            slot = next_epoch_slot(slot, slots_per_epoch);
            let input = BlockIn {
                height,
                slot,
                parent_slot: parent,
                ctx: context(height, slot, fork, &last_eth1, pair.index()),
                deposits: Vec::new(),
            };
            if let Err(f) = pair.block(&input, genesis, settings)? {
                failure = Some((height, f));
                break;
            }
        }
    }
    let run = pair.fuel();
    let mut differences = Vec::new();
    if failure.is_none() {
        match pair.finish() {
            Ok(counts) => {
                differences = counts
                    .into_iter()
                    .map(|(class, count)| Difference {
                        class,
                        rule: class.rule().to_string(),
                        count,
                    })
                    .collect();
            }
            Err(f) => failure = Some((chain.head().height, f)),
        }
    }
    let failure = failure.or_else(|| run.judge(settings).map(|f| (0, f)));
    let report = Report {
        kind: Kind::Deposits,
        cases: u32::try_from(blocks.len()).unwrap_or(u32::MAX),
        divergences: u32::from(failure.is_some()),
        max_fuel_ratio: run.ratio(settings.fuel_floor).unwrap_or(0.0),
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
        differences,
    })
}
