//! The queue-length probe of the cost gate: an epoch transition run again with [`PAD_SHORT`]
//! and with [`PAD_LONG`] entries that are not final queued behind the real ones must give the
//! same result for the same fuel (within the fuel floor) — its work follows the deposits it
//! applies, never the queue's length (Lodestar's `processPendingDeposits` spike).

use super::{EpochRun, Lane, host, invariant};
use crate::deposit::ChainContext;
use crate::state::{PendingDelta, PendingDeposit, PendingQueue, Registry};
use crate::upgrade_check::deposits_cross::{MIN_ACTIVATION_BALANCE, PAD_LONG, PAD_SHORT};
use crate::upgrade_check::{CheckError, Failure, Invariant, Settings};

use super::Judged;

impl Lane<'_> {
    /// The queue-length probe: the same epoch with [`PAD_SHORT`] and [`PAD_LONG`] non-final
    /// entries behind the real ones gives the same result for the same fuel.
    pub(super) fn probe(
        &self,
        registry: &Registry,
        pending: &PendingQueue,
        ctx: &ChainContext,
        base: &EpochRun,
        settings: &Settings,
    ) -> Judged<()> {
        let height = ctx.height;
        let short = padded(pending, 0, PAD_SHORT, height)?;
        let long = padded(&short, PAD_SHORT, PAD_LONG, height)?;
        let mut fuel = Vec::with_capacity(2);
        for (queue, behind) in [(&short, PAD_SHORT), (&long, PAD_LONG)] {
            let run = match self.epoch(registry, queue, ctx)? {
                Ok(run) => run,
                Err(f) => return Ok(Err(with_probe(f, behind))),
            };
            if run.outcomes != base.outcomes
                || run.delta != base.delta
                || run.changes.dropped != base.changes.dropped
                || run.changes.balance_to_consume != base.changes.balance_to_consume
            {
                return Ok(Err(invariant(
                    Invariant::Finality,
                    format!(
                        "{}'s epoch transition at height {height} applied {} entries with \
                         {behind} entries that are not final queued behind the real ones, {} \
                         without them",
                        self.name(),
                        run.outcomes.len(),
                        base.outcomes.len()
                    ),
                )));
            }
            fuel.push(run.total);
        }
        if let [short, long] = fuel.as_slice() {
            let (short, long) = (*short, *long);
            let limit = short.saturating_add(settings.fuel_floor);
            if long > limit {
                return Ok(Err(Failure::Cost {
                    call: format!(
                        "{} epoch transition at height {height} with {PAD_LONG} entries queued \
                         behind instead of {PAD_SHORT} (its work must follow the deposits \
                         applied, not the queue's length)",
                        self.name()
                    ),
                    fuel: long,
                    limit,
                }));
            }
        }
        Ok(Ok(()))
    }
}

fn with_probe(failure: Failure, behind: usize) -> Failure {
    match failure {
        Failure::Invariant { invariant, detail } => Failure::Invariant {
            invariant,
            detail: format!("{detail} (with {behind} non-final entries queued behind)"),
        },
        other => other,
    }
}

/// `pending` with entries `from..to` of the probe's padding appended, queued at `height` (not
/// final for the epoch transition at `height`).
fn padded(
    pending: &PendingQueue,
    from: usize,
    to: usize,
    height: u64,
) -> Result<PendingQueue, CheckError> {
    let pushed = (from..to)
        .map(|i| {
            let mut pubkey = [0xee; 48];
            if let Some(head) = pubkey.get_mut(..8) {
                head.copy_from_slice(&u64::try_from(i).unwrap_or(u64::MAX).to_le_bytes());
            }
            PendingDeposit {
                pubkey,
                withdrawal_credentials: [0x01; 32],
                amount: MIN_ACTIVATION_BALANCE,
                signature: [0xab; 96],
                slot: height,
                height,
            }
        })
        .collect();
    let mut queue = pending.clone();
    queue
        .apply(&PendingDelta {
            pushed,
            dropped: 0,
            balance_to_consume: None,
        })
        .map_err(|e| host(format!("padding the queue for the length probe: {e}")))?;
    Ok(queue)
}
