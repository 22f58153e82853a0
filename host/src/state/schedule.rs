//! The on-chain module schedule: which version of each consensus kind runs at which height, the
//! operations authorities are voting for, and the authorities' readiness for each.
//!
//! Every block carries its proposer's votes — to *upgrade* (kind, module sha256, activation
//! height) or to *cancel* a scheduled upgrade — and its proposer's *readiness attestations*:
//! the open upgrades whose module it holds compiled and warmed. All of it is signed with the
//! block and committed by the state root.
//!
//! The rules, each there so that one authority or one operator's typo cannot stop the chain:
//! - A vote counts only while the operation's height is more than `lead` blocks ahead of the
//!   voting block, and at most `max_ahead` blocks ahead (no parking votes near `u64::MAX`).
//! - A strict majority of the authority set (distinct voters) schedules an upgrade or carries a
//!   cancel; a single authority of several never can.
//! - An authority has at most `open_per_authority` pending operations of its own; a pending
//!   operation expires `vote_ttl` blocks after its first vote, or when its vote deadline passes.
//! - **Readiness gate**: at the block `lead` blocks before a scheduled upgrade's height, an
//!   upgrade that a strict majority of authorities has not attested ready is dropped — never
//!   activated into a halt. Dropped and cancelled operations are remembered (the last
//!   [`MAX_DROPPED`]) so operators see what happened and why.
//!
//! The schedule is part of the chain state: committed by the state root, stored per block with
//! the block's other changes in one atomic batch, and the state of a block's *parent* decides
//! which module runs the block — so every replay, sync and reorg runs each height with the
//! version scheduled for it.

mod codec;
#[cfg(test)]
mod tests;

use crate::hashes::ModuleHash;
use crate::kind::{Kind, Scope};

/// A 32-byte hash.
pub type Hash32 = [u8; 32];

/// Most upgrade or cancel votes one block may carry (each list).
pub const MAX_UPGRADE_VOTES: usize = 4;
/// Most scheduled upgrades not active yet at any time.
pub const MAX_OPEN_OPS: usize = 16;
/// Most readiness attestations one block may carry.
pub const MAX_READY_ATTESTATIONS: usize = MAX_OPEN_OPS;
/// Dropped or cancelled operations the schedule remembers, newest last.
pub const MAX_DROPPED: usize = 8;
/// Default genesis `upgrade_lead_blocks`: devnet-sized.
pub const DEFAULT_UPGRADE_LEAD_BLOCKS: u64 = 4;
/// Default genesis `upgrade_max_ahead_blocks`: about 11 days of 2 s slots.
pub const DEFAULT_UPGRADE_MAX_AHEAD_BLOCKS: u64 = 500_000;
/// Default genesis `upgrade_vote_ttl_blocks`: a day of 2 s slots.
pub const DEFAULT_UPGRADE_VOTE_TTL_BLOCKS: u64 = 43_200;
/// Default genesis `upgrade_open_per_authority`.
pub const DEFAULT_UPGRADE_OPEN_PER_AUTHORITY: u16 = 4;
/// Encoded size of an [`UpgradeOp`].
pub const UPGRADE_OP_BYTES: usize = 1 + 32 + 8;

/// One upgrade operation: from `height` on, `kind` runs the module with sha256 `module`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UpgradeOp {
    /// The kind (a consensus kind for a valid vote).
    pub kind: Kind,
    /// sha256 of the module component.
    pub module: ModuleHash,
    /// First height the module runs.
    pub height: u64,
}

/// What a vote asks for.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Schedule the operation.
    Upgrade,
    /// Remove the scheduled operation before it activates.
    Cancel,
}

impl Action {
    /// Its name in JSON, logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            Action::Upgrade => "upgrade",
            Action::Cancel => "cancel",
        }
    }
}

impl DropReason {
    /// Its name in JSON, logs and metric labels.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Cancelled => "cancelled",
            DropReason::NotReady => "not_ready",
        }
    }
}

/// The governance rules of a chain (from its genesis).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Governance {
    /// Authorities (0: a single unpermissioned producer, which is then the majority).
    pub authorities: usize,
    /// Votes must be cast more than this many blocks before the activation height, and the
    /// readiness gate closes this many blocks before it.
    pub lead: u64,
    /// Votes may name an activation height at most this many blocks after the voting block.
    pub max_ahead: u64,
    /// A pending operation expires this many blocks after its first vote.
    pub vote_ttl: u64,
    /// Most pending operations one authority may have voted for at once.
    pub open_per_authority: usize,
}

impl Governance {
    /// The rules of a genesis file that sets none of them, for `authorities` authorities.
    pub fn defaults(authorities: usize) -> Self {
        Self {
            authorities,
            lead: DEFAULT_UPGRADE_LEAD_BLOCKS,
            max_ahead: DEFAULT_UPGRADE_MAX_AHEAD_BLOCKS,
            vote_ttl: DEFAULT_UPGRADE_VOTE_TTL_BLOCKS,
            open_per_authority: usize::from(DEFAULT_UPGRADE_OPEN_PER_AUTHORITY),
        }
    }

    /// The size of the electorate: the authorities, or the single producer.
    fn electorate(&self) -> usize {
        self.authorities.max(1)
    }

    /// Whether `count` distinct authorities are a strict majority.
    pub fn is_majority(&self, count: usize) -> bool {
        count.saturating_mul(2) > self.electorate()
    }

    /// How many distinct authorities make a strict majority.
    pub fn majority(&self) -> usize {
        (self.electorate() / 2).saturating_add(1)
    }
}

/// What one block says about the schedule.
#[derive(Debug, Clone, Copy, Default)]
pub struct BlockVotes<'a> {
    /// Votes to schedule upgrades.
    pub upgrades: &'a [UpgradeOp],
    /// Votes to cancel scheduled upgrades.
    pub cancels: &'a [UpgradeOp],
    /// Open upgrades whose module the proposer holds compiled and warmed.
    pub ready: &'a [UpgradeOp],
}

/// Why bytes are not an upgrade operation, or a block's votes do not fit the schedule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The kind code is unknown.
    #[error("unknown module kind code {0}")]
    UnknownKind(u8),
    /// The kind switches live on each node; it is never scheduled on chain.
    #[error("{0} is a local kind; only consensus kinds are scheduled on chain")]
    LocalKind(Kind),
    /// The block carries more votes than allowed.
    #[error("{count} {action:?} votes in one block, the limit is {MAX_UPGRADE_VOTES}")]
    TooManyVotes {
        /// Which list.
        action: Action,
        /// Votes in the block.
        count: usize,
    },
    /// The block votes twice for the same operation.
    #[error("the block votes twice to {action:?} {kind} module {module} at height {height}")]
    Duplicate {
        /// Which list.
        action: Action,
        /// Kind.
        kind: Kind,
        /// Module (hex).
        module: String,
        /// Height.
        height: u64,
    },
    /// The operation's height is not far enough ahead of the voting block.
    #[error(
        "a vote in block {block} for {kind} module {module} at height {height} comes too late: \
         votes must be cast more than {lead} blocks before the activation height"
    )]
    TooLate {
        /// The voting block's height.
        block: u64,
        /// Kind.
        kind: Kind,
        /// Module (hex).
        module: String,
        /// Activation height.
        height: u64,
        /// The chain's lead.
        lead: u64,
    },
    /// The operation's height is further ahead than the chain allows.
    #[error(
        "a vote in block {block} for {kind} module {module} at height {height} is too far \
         ahead: activation heights may be at most {max_ahead} blocks after the voting block"
    )]
    TooFar {
        /// The voting block's height.
        block: u64,
        /// Kind.
        kind: Kind,
        /// Module (hex).
        module: String,
        /// Activation height.
        height: u64,
        /// The chain's bound.
        max_ahead: u64,
    },
    /// Too many operations are open.
    #[error(
        "{MAX_OPEN_OPS} upgrades are already scheduled, or every authority's quota of pending \
         operations is taken; no new one can be proposed until one activates, expires or is \
         cancelled"
    )]
    TooManyOpen,
    /// The proposer already has its quota of pending operations.
    #[error(
        "authority {proposer} already has {limit} pending operations of its own; it can vote \
         for a new one when one of them is scheduled or expires"
    )]
    TooManyForAuthority {
        /// The voting authority.
        proposer: u32,
        /// The chain's per-authority limit.
        limit: usize,
    },
    /// A cancel vote names no scheduled, not yet active upgrade.
    #[error("no scheduled {kind} upgrade to module {module} at height {height} to cancel")]
    NothingToCancel {
        /// Kind.
        kind: Kind,
        /// Module (hex).
        module: String,
        /// Height.
        height: u64,
    },
    /// A readiness attestation names an operation that is not open, or repeats one.
    #[error(
        "authority {proposer} attests readiness for {kind} module {module} at height {height}, \
         which is not an open upgrade or was attested by it already"
    )]
    BadAttestation {
        /// The attesting authority.
        proposer: u32,
        /// Kind.
        kind: Kind,
        /// Module (hex).
        module: String,
        /// Height.
        height: u64,
    },
    /// The block carries more readiness attestations than allowed.
    #[error("{count} readiness attestations in one block, the limit is {MAX_READY_ATTESTATIONS}")]
    TooManyAttestations {
        /// Attestations in the block.
        count: usize,
    },
}

/// Stable one-byte code of a kind in blocks and the state.
pub fn kind_code(kind: Kind) -> u8 {
    match kind {
        Kind::Deposits => 0,
        Kind::Checkpoint => 1,
        Kind::GossipPolicy => 2,
    }
}

/// The kind with code `code`.
pub fn kind_from_code(code: u8) -> Result<Kind, ScheduleError> {
    match code {
        0 => Ok(Kind::Deposits),
        1 => Ok(Kind::Checkpoint),
        2 => Ok(Kind::GossipPolicy),
        other => Err(ScheduleError::UnknownKind(other)),
    }
}

impl UpgradeOp {
    fn module_hex(&self) -> String {
        self.module.to_hex()
    }
}

/// An operation being voted on, with its distinct voters (sorted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingOp {
    /// What the votes ask for.
    pub action: Action,
    /// The operation.
    pub op: UpgradeOp,
    /// Authorities that voted for it, ascending.
    pub voters: Vec<u32>,
    /// Height of the block with its first vote (it expires `vote_ttl` blocks later).
    pub since: u64,
}

/// The authorities that attested an open upgrade ready (sorted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// The upgrade.
    pub op: UpgradeOp,
    /// Authorities that attested it, ascending.
    pub attesters: Vec<u32>,
}

/// Why a scheduled upgrade will not activate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// A majority voted to cancel it.
    Cancelled,
    /// Fewer than a strict majority of authorities attested it ready by `height − lead`.
    NotReady,
}

/// A scheduled upgrade that was dropped before its height.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DroppedOp {
    /// The upgrade.
    pub op: UpgradeOp,
    /// Why.
    pub reason: DropReason,
    /// The block that dropped it.
    pub at: u64,
    /// Readiness attestations it had then.
    pub ready: u32,
}

/// The schedule part of the state (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Scheduled modules, sorted by (kind, height); the last entry of a kind at or below a
    /// height is the module that runs there.
    pub entries: Vec<UpgradeOp>,
    /// Operations with votes but no majority yet, in order of their first vote.
    pub pending: Vec<PendingOp>,
    /// Readiness attestations of open upgrades (pending or scheduled, not active yet).
    pub ready: Vec<Readiness>,
    /// The latest dropped or cancelled upgrades, oldest first (at most [`MAX_DROPPED`]).
    pub dropped: Vec<DroppedOp>,
}

impl Schedule {
    /// The schedule at genesis: each named module runs from height 0.
    pub fn genesis(initial: &[(Kind, ModuleHash)]) -> Self {
        let mut entries: Vec<UpgradeOp> = initial
            .iter()
            .map(|&(kind, module)| UpgradeOp {
                kind,
                module,
                height: 0,
            })
            .collect();
        entries.sort();
        entries.dedup_by_key(|e| e.kind);
        Self {
            entries,
            ..Self::default()
        }
    }

    /// The module `kind` runs at `height`, if the schedule names one.
    pub fn module_at(&self, kind: Kind, height: u64) -> Option<ModuleHash> {
        self.entries
            .iter()
            .filter(|e| e.kind == kind && e.height <= height)
            .max_by_key(|e| e.height)
            .map(|e| e.module)
    }

    /// Scheduled entries that are not active yet at `height`.
    pub fn upcoming(&self, height: u64) -> impl Iterator<Item = &UpgradeOp> {
        self.entries.iter().filter(move |e| e.height > height)
    }

    /// Upgrades the block at `height` may attest ready: pending upgrades and scheduled ones
    /// not active at `height`.
    pub fn open_upgrades(&self, height: u64) -> impl Iterator<Item = &UpgradeOp> {
        self.pending
            .iter()
            .filter(|p| p.action == Action::Upgrade)
            .map(|p| &p.op)
            .chain(self.entries.iter().filter(move |e| e.height > height))
    }

    /// The authorities that attested `op` ready.
    pub fn attesters(&self, op: &UpgradeOp) -> &[u32] {
        self.ready
            .iter()
            .find(|r| r.op == *op)
            .map_or(&[], |r| r.attesters.as_slice())
    }

    /// The schedule after the block at `height` by `proposer`, carrying `votes`, under the
    /// chain's `rules`. Fails if a vote or attestation is invalid.
    pub fn with_block(
        &self,
        height: u64,
        proposer: u32,
        votes: BlockVotes<'_>,
        rules: &Governance,
    ) -> Result<Self, ScheduleError> {
        check_votes(height, votes.upgrades, Action::Upgrade, rules)?;
        check_votes(height, votes.cancels, Action::Cancel, rules)?;
        if votes.ready.len() > MAX_READY_ATTESTATIONS {
            return Err(ScheduleError::TooManyAttestations {
                count: votes.ready.len(),
            });
        }
        let deadline = height.saturating_add(rules.lead);
        let mut next = self.clone();
        // Expire what can no longer count: past its vote deadline, or older than the TTL.
        next.pending
            .retain(|p| p.op.height > deadline && height < p.since.saturating_add(rules.vote_ttl));
        for cancel in votes.cancels {
            if !next.upcoming(height).any(|e| e == cancel) {
                return Err(ScheduleError::NothingToCancel {
                    kind: cancel.kind,
                    module: cancel.module_hex(),
                    height: cancel.height,
                });
            }
        }
        let tagged = votes
            .upgrades
            .iter()
            .map(|op| (Action::Upgrade, op))
            .chain(votes.cancels.iter().map(|op| (Action::Cancel, op)));
        for (action, op) in tagged {
            next.tally(height, proposer, action, *op, rules)?;
        }
        next.attest(height, proposer, votes.ready)?;
        next.adopt(height, rules);
        next.gate(height, rules);
        next.retire(height);
        Ok(next)
    }

    /// Counts `proposer`'s vote for `(action, op)`.
    fn tally(
        &mut self,
        height: u64,
        proposer: u32,
        action: Action,
        op: UpgradeOp,
        rules: &Governance,
    ) -> Result<(), ScheduleError> {
        if let Some(p) = self
            .pending
            .iter_mut()
            .find(|p| p.action == action && p.op == op)
        {
            if let Err(at) = p.voters.binary_search(&proposer) {
                p.voters.insert(at, proposer);
            }
            return Ok(());
        }
        let own = self
            .pending
            .iter()
            .filter(|p| p.voters.contains(&proposer))
            .count();
        if own >= rules.open_per_authority {
            return Err(ScheduleError::TooManyForAuthority {
                proposer,
                limit: rules.open_per_authority,
            });
        }
        // Each pending operation has a voter and each voter holds at most its quota, so on a
        // chain with authorities there are never more than authorities × quota (the bound is
        // checked anyway: a dev chain without authorities does not check proposer indices).
        // Scheduled upgrades are only made by a majority, and bounded here.
        let pending_cap = rules.electorate().saturating_mul(rules.open_per_authority);
        if self.pending.len() >= pending_cap
            || (action == Action::Upgrade && self.upcoming(height).count() >= MAX_OPEN_OPS)
        {
            return Err(ScheduleError::TooManyOpen);
        }
        self.pending.push(PendingOp {
            action,
            op,
            voters: vec![proposer],
            since: height,
        });
        Ok(())
    }

    /// Records `proposer`'s readiness attestations; each must name an open upgrade it has not
    /// attested yet.
    fn attest(
        &mut self,
        height: u64,
        proposer: u32,
        ready: &[UpgradeOp],
    ) -> Result<(), ScheduleError> {
        for (i, op) in ready.iter().enumerate() {
            let open = self.open_upgrades(height).any(|o| o == op);
            let repeated = ready.get(..i).is_some_and(|before| before.contains(op))
                || self.attesters(op).contains(&proposer);
            if !open || repeated {
                return Err(ScheduleError::BadAttestation {
                    proposer,
                    kind: op.kind,
                    module: op.module_hex(),
                    height: op.height,
                });
            }
            match self.ready.iter_mut().find(|r| r.op == *op) {
                Some(r) => {
                    if let Err(at) = r.attesters.binary_search(&proposer) {
                        r.attesters.insert(at, proposer);
                    }
                }
                None => self.ready.push(Readiness {
                    op: *op,
                    attesters: vec![proposer],
                }),
            }
        }
        Ok(())
    }

    /// Carries out the operations that reached a majority.
    fn adopt(&mut self, height: u64, rules: &Governance) {
        let (adopted, pending): (Vec<PendingOp>, Vec<PendingOp>) =
            std::mem::take(&mut self.pending)
                .into_iter()
                .partition(|p| rules.is_majority(p.voters.len()));
        self.pending = pending;
        for p in adopted {
            match p.action {
                Action::Upgrade => {
                    self.entries
                        .retain(|e| !(e.kind == p.op.kind && e.height == p.op.height));
                    self.entries.push(p.op);
                }
                Action::Cancel => {
                    if self.entries.contains(&p.op) {
                        self.entries.retain(|e| *e != p.op);
                        self.record_drop(p.op, DropReason::Cancelled, height);
                    }
                }
            }
        }
        self.entries.sort();
    }

    /// The readiness gate: a scheduled upgrade within `lead` blocks of its height without a
    /// majority's attestations is dropped.
    fn gate(&mut self, height: u64, rules: &Governance) {
        let deadline = height.saturating_add(rules.lead);
        let unready: Vec<UpgradeOp> = self
            .entries
            .iter()
            .filter(|e| e.height > height && e.height <= deadline)
            .filter(|e| !rules.is_majority(self.attesters(e).len()))
            .copied()
            .collect();
        for op in unready {
            self.entries.retain(|e| *e != op);
            self.record_drop(op, DropReason::NotReady, height);
        }
    }

    fn record_drop(&mut self, op: UpgradeOp, reason: DropReason, at: u64) {
        let ready = u32::try_from(self.attesters(&op).len()).unwrap_or(u32::MAX);
        self.pending
            .retain(|p| !(p.action == Action::Cancel && p.op == op));
        self.dropped.push(DroppedOp {
            op,
            reason,
            at,
            ready,
        });
        let excess = self.dropped.len().saturating_sub(MAX_DROPPED);
        self.dropped.drain(..excess);
    }

    /// Forgets what can never matter again after the block at `height`: entries superseded at
    /// the next height, and attestations of upgrades that are neither pending nor upcoming.
    fn retire(&mut self, height: u64) {
        let next_height = height.saturating_add(1);
        let entries = &self.entries;
        let superseded: Vec<UpgradeOp> = entries
            .iter()
            .filter(|e| {
                e.height <= next_height
                    && entries
                        .iter()
                        .any(|l| l.kind == e.kind && l.height > e.height && l.height <= next_height)
            })
            .copied()
            .collect();
        self.entries.retain(|e| !superseded.contains(e));
        let open: Vec<UpgradeOp> = self.open_upgrades(height).copied().collect();
        self.ready.retain(|r| open.contains(&r.op));
        // A cancel whose upgrade is gone (active, dropped) has nothing left to do.
        let upcoming: Vec<UpgradeOp> = self.upcoming(height).copied().collect();
        self.pending
            .retain(|p| p.action == Action::Upgrade || upcoming.contains(&p.op));
    }
}

/// The checks every vote list of a block meets on its own.
fn check_votes(
    height: u64,
    votes: &[UpgradeOp],
    action: Action,
    rules: &Governance,
) -> Result<(), ScheduleError> {
    if votes.len() > MAX_UPGRADE_VOTES {
        return Err(ScheduleError::TooManyVotes {
            action,
            count: votes.len(),
        });
    }
    let deadline = height.saturating_add(rules.lead);
    let furthest = height.saturating_add(rules.max_ahead);
    for (i, vote) in votes.iter().enumerate() {
        if vote.kind.scope() != Scope::Consensus {
            return Err(ScheduleError::LocalKind(vote.kind));
        }
        if vote.height <= deadline {
            return Err(ScheduleError::TooLate {
                block: height,
                kind: vote.kind,
                module: vote.module_hex(),
                height: vote.height,
                lead: rules.lead,
            });
        }
        if vote.height > furthest {
            return Err(ScheduleError::TooFar {
                block: height,
                kind: vote.kind,
                module: vote.module_hex(),
                height: vote.height,
                max_ahead: rules.max_ahead,
            });
        }
        if votes.get(..i).is_some_and(|before| before.contains(vote)) {
            return Err(ScheduleError::Duplicate {
                action,
                kind: vote.kind,
                module: vote.module_hex(),
                height: vote.height,
            });
        }
    }
    Ok(())
}
