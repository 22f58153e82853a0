//! The operator's upgrade proposals: each checked against the head's state before it is
//! taken (the schedule's rules, a migration that runs, a contract that can hold the queue),
//! kept in the store (`proposals`) and voted for in the blocks this node produces.

use super::*;

/// Why the operator's proposal was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    /// The vote would break the schedule's rules (too late, too far, nothing to cancel, …).
    #[error(transparent)]
    Schedule(#[from] crate::state::ScheduleError),
    /// Keeping the proposal in the store failed (ours).
    #[error("cannot keep the proposal in the store: {0}")]
    Store(#[from] StoreError),
    /// The operator's: a deposits module whose contract cannot hold deposits@3's queue
    /// (`modnode:deposits@2`), proposed while the queue is not empty: the queued deposits
    /// would never be applied. Wait until the queue drains (`GET /state`'s
    /// `pending_deposits` is 0) and propose again.
    #[error(
        "deposits module {module} implements modnode:deposits@{contract}, which cannot hold the \
         {queued} deposits queued under modnode:deposits@3 (they would never be applied), and \
         brings no migration that drains them: propose it once the queue has drained (GET \
         /state: pending_deposits 0), or propose a module whose down-migration applies them"
    )]
    CannotHoldQueue {
        /// The proposed module.
        module: ModuleHash,
        /// Its contract.
        contract: String,
        /// Deposits queued after the head.
        queued: u64,
    },
    /// The operator's: the authorities revoked this very upgrade (module and height) on chain;
    /// it is not voted for again. Propose the module at another height.
    #[error(
        "the upgrade to module {module} at height {height} was revoked on chain; propose it at \
         another height"
    )]
    Revoked {
        /// The proposed module.
        module: ModuleHash,
        /// The height it was revoked at.
        height: u64,
    },
    /// The proposed deposits module's migration fails on the head's state (traps, runs out of
    /// fuel, refuses the state): at its activation height it would stop import. The module's
    /// fault; fix its migration.
    #[error(
        "deposits module {module} cannot be proposed: run on the state at height {height} as \
         its activation would run it, {source}; at its height it would stop import"
    )]
    MigrationFails {
        /// The proposed module.
        module: ModuleHash,
        /// The head height whose state the migration ran on.
        height: u64,
        /// What failed.
        source: migration::MigrationError,
    },
    /// The operator's: the contract of the proposed deposits module is unknown here (the
    /// module is not prepared on this node) while deposits are queued, so whether it can hold
    /// them cannot be checked. Upload the module first.
    #[error(
        "deposits module {module} is not prepared on this node, so whether its contract can hold \
         the {queued} queued deposits cannot be checked: upload it first"
    )]
    ContractUnknown {
        /// The proposed module.
        module: ModuleHash,
        /// Deposits queued after the head.
        queued: u64,
    },
}

/// What the producer's next block says about the schedule.
#[derive(Debug, Default)]
pub(super) struct ScheduleVotes {
    pub(super) upgrades: Vec<UpgradeOp>,
    pub(super) cancels: Vec<UpgradeOp>,
    pub(super) ready: Vec<UpgradeOp>,
}

impl Chain {
    /// Records the operator's proposal: this node's blocks vote for `op` while the vote still
    /// counts (more than the genesis lead before its height) and until it is scheduled. Kept in
    /// the store, so a restart goes on voting.
    pub fn propose_upgrade(&mut self, op: UpgradeOp) -> Result<(), ProposeError> {
        self.propose(Action::Upgrade, op)
    }

    /// Records the operator's proposal to cancel the scheduled upgrade `op`: this node's blocks
    /// vote for the cancel while it still counts and until it is carried. Kept in the store.
    pub fn propose_cancel(&mut self, op: UpgradeOp) -> Result<(), ProposeError> {
        self.propose(Action::Cancel, op)
    }

    fn propose(&mut self, action: Action, op: UpgradeOp) -> Result<(), ProposeError> {
        self.check_proposal(action, op)?;
        if action == Action::Upgrade && op.kind == Kind::Deposits {
            self.check_holds_queue(&op)?;
        }
        if action == Action::Upgrade && self.cancelled_on_chain(&op) {
            return Err(ProposeError::Revoked {
                module: op.module,
                height: op.height,
            });
        }
        // One standing vote per upgrade: a revoke withdraws this node's vote for the upgrade
        // (else its next block votes it back into the schedule), and proposing the upgrade again
        // withdraws the revoke.
        let mut proposals = self.proposals.clone();
        proposals.retain(|(_, p)| *p != op);
        proposals.push((action, op));
        let mut batch = WriteBatch::new();
        batch.put(keys::PROPOSALS, proposals::encode(&proposals));
        self.store.commit(&batch)?;
        self.proposals = proposals;
        Ok(())
    }

    /// A proposed deposits module's migration, run now on the head's state as the block at
    /// `op.height` would run it: one that fails is refused (it would stop import at that
    /// height). Returns the queue's length after it (`None`: the module has no migration).
    fn check_migration(
        &self,
        op: &UpgradeOp,
        engine: Option<&DepositEngine>,
    ) -> Result<Option<u64>, ProposeError> {
        let Some(DepositEngine::Module(module)) = engine else {
            return Ok(None);
        };
        let state = self.head_state();
        let migrated = migration::check(
            module,
            &self.genesis,
            state.registry(),
            state.pending(),
            op.height,
        )
        .map_err(|source| ProposeError::MigrationFails {
            module: op.module,
            height: self.head.height,
            source,
        })?;
        Ok(migrated.map(|m| m.pending.len()))
    }

    /// The downgrade rule: while deposits are queued under deposits@3, a deposits module whose
    /// contract cannot hold the queue (an older major) is refused, unless its migration drains
    /// the queue (a down-migration: run on the head's state, it leaves the queue empty). Any
    /// proposed module with a migration must finish it on the head's state.
    fn check_holds_queue(&self, op: &UpgradeOp) -> Result<(), ProposeError> {
        let module = &op.module;
        let engine = if self.deposits.hash() == Some(*module) {
            Some(self.deposits.clone())
        } else {
            self.modules.as_ref().and_then(|m| m.deposits(module))
        };
        let after_migration = self.check_migration(op, engine.as_ref())?;
        let queued = self.head_state().pending().map_or(0, PendingQueue::len);
        if queued == 0 || after_migration == Some(0) {
            return Ok(());
        }
        let contract = match engine {
            Some(DepositEngine::Module(m)) => m.contract(),
            // The native reference is deposits@2's phase0 semantics.
            #[cfg(any(test, feature = "test-utils"))]
            Some(DepositEngine::Native(_)) => crate::runtime::inspect::Version {
                major: 2,
                minor: 0,
                patch: 0,
            },
            None => {
                return Err(ProposeError::ContractUnknown {
                    module: *module,
                    queued,
                });
            }
        };
        if contract.major >= crate::consensus::QUEUE_CONTRACT_MAJOR {
            return Ok(());
        }
        Err(ProposeError::CannotHoldQueue {
            module: *module,
            contract: contract.to_string(),
            queued,
        })
    }

    /// The same rules a block's votes meet, checked now so the operator hears of them; drops
    /// proposals that can no longer count.
    fn check_proposal(
        &mut self,
        action: Action,
        op: UpgradeOp,
    ) -> Result<(), crate::state::ScheduleError> {
        let next = self.head.height.saturating_add(1);
        let rules = self.genesis.governance();
        let one = [op];
        let votes = match action {
            Action::Upgrade => BlockVotes {
                upgrades: &one,
                ..BlockVotes::default()
            },
            Action::Cancel => BlockVotes {
                cancels: &one,
                ..BlockVotes::default()
            },
        };
        // The proposer's own quota is checked when its block is built; here any index that
        // holds no pending vote stands in for it.
        self.head_state()
            .schedule()
            .with_block(next, u32::MAX, votes, &rules)?;
        self.proposals
            .retain(|(_, p)| p.height > next.saturating_add(rules.lead));
        Ok(())
    }

    /// The operator's proposals not yet expired: what this node's blocks vote for.
    pub fn proposals(&self) -> &[(Action, UpgradeOp)] {
        &self.proposals
    }

    /// The votes and readiness attestations `proposer`'s block at `height` carries: the
    /// operator's proposals that still count, are not carried yet and lack this proposer's
    /// vote, and every open deposits upgrade whose module this node holds ready that it has not
    /// attested yet. Never what would make the block invalid.
    pub(super) fn schedule_votes_for(&self, height: u64, proposer: u32) -> ScheduleVotes {
        let rules = self.genesis.governance();
        let state = self.head_state();
        let schedule = state.schedule();
        let voted = |action: Action, op: &UpgradeOp| {
            schedule
                .pending
                .iter()
                .any(|p| p.action == action && p.op == *op && p.voters.contains(&proposer))
        };
        let wanted = |action: Action| -> Vec<UpgradeOp> {
            self.proposals
                .iter()
                .filter(|(a, op)| *a == action && op.height > height.saturating_add(rules.lead))
                .filter(|(a, op)| match a {
                    // An upgrade the chain revoked is not voted back: the revoke was the
                    // authorities' answer to it (proposing it again is refused: `Revoked`).
                    Action::Upgrade => {
                        !schedule.entries.contains(op) && !cancelled(&schedule.dropped, op)
                    }
                    Action::Cancel => schedule.upcoming(height).any(|e| e == op),
                })
                .filter(|(a, op)| !voted(*a, op))
                .map(|(_, op)| *op)
                .take(MAX_UPGRADE_VOTES)
                .collect()
        };
        let upgrades = wanted(Action::Upgrade);
        let cancels = wanted(Action::Cancel);
        let mut ready: Vec<UpgradeOp> = Vec::new();
        for op in schedule.open_upgrades(height).chain(upgrades.iter()) {
            if op.kind == Kind::Deposits
                && !ready.contains(op)
                && !schedule.attesters(op).contains(&proposer)
                && self.holds_ready(&op.module)
            {
                ready.push(*op);
            }
        }
        ready.truncate(MAX_READY_ATTESTATIONS);
        let fits = |votes: BlockVotes<'_>| {
            schedule
                .with_block(height, proposer, votes, &rules)
                .map_err(|e| tracing::warn!(error = %e, "not casting these upgrade votes"))
                .is_ok()
        };
        let all = BlockVotes {
            upgrades: &upgrades,
            cancels: &cancels,
            ready: &ready,
        };
        if fits(all) {
            return ScheduleVotes {
                upgrades,
                cancels,
                ready,
            };
        }
        let attested_only = ready
            .iter()
            .filter(|op| schedule.open_upgrades(height).any(|o| o == *op))
            .copied()
            .collect::<Vec<_>>();
        let only_ready = BlockVotes {
            ready: &attested_only,
            ..BlockVotes::default()
        };
        ScheduleVotes {
            ready: if fits(only_ready) {
                attested_only
            } else {
                Vec::new()
            },
            ..ScheduleVotes::default()
        }
    }

    /// Whether the head's schedule records `op` as revoked by the authorities.
    fn cancelled_on_chain(&self, op: &UpgradeOp) -> bool {
        cancelled(&self.head_state().schedule().dropped, op)
    }

    /// Whether this node holds the deposits module `hash` compiled and warmed: the engine the
    /// chain was opened with, or a prepared module.
    fn holds_ready(&self, hash: &crate::hashes::ModuleHash) -> bool {
        self.deposits.hash() == Some(*hash)
            || self.modules.as_ref().is_some_and(|m| m.is_ready(hash))
    }
}

/// Whether `dropped` records `op` as revoked (cancelled by the authorities' votes).
fn cancelled(dropped: &[crate::state::schedule::DroppedOp], op: &UpgradeOp) -> bool {
    dropped
        .iter()
        .any(|d| d.op == *op && d.reason == crate::state::schedule::DropReason::Cancelled)
}
