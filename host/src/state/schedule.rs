//! The on-chain module schedule: which version of each consensus kind runs at which height, and
//! the upgrade operations authorities are voting for.
//!
//! Every block carries its proposer's votes for upgrade operations (kind, module sha256,
//! activation height). A vote counts only while the operation's height is more than `lead`
//! blocks ahead of the voting block. Once a strict majority of the authority set (distinct
//! voters) has voted for the same operation, it moves from `pending` to `entries`: from its
//! height on, the kind runs that module. A single authority of several can never reach a
//! majority alone. Rolling back is a new operation back to the old hash at a later height.
//!
//! The schedule is part of the chain state: committed by the state root, stored per block with
//! the block's other changes in one atomic batch, and the state of a block's *parent* decides
//! which module runs the block — so every replay, sync and reorg runs each height with the
//! version scheduled for it.

use sha2::{Digest, Sha256};

use crate::runtime::{Kind, Scope};

/// A 32-byte hash.
pub type Hash32 = [u8; 32];

/// Most upgrade votes one block may carry.
pub const MAX_UPGRADE_VOTES: usize = 4;
/// Most open operations (pending votes plus scheduled entries not yet active) at any time.
pub const MAX_OPEN_OPS: usize = 16;
/// Encoded size of an [`UpgradeOp`].
pub const UPGRADE_OP_BYTES: usize = 1 + 32 + 8;

/// One upgrade operation: from `height` on, `kind` runs the module with sha256 `module`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UpgradeOp {
    /// The kind (a consensus kind for a valid vote).
    pub kind: Kind,
    /// sha256 of the module component.
    pub module: Hash32,
    /// First height the module runs.
    pub height: u64,
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
    #[error("{count} upgrade votes in one block, the limit is {MAX_UPGRADE_VOTES}")]
    TooManyVotes {
        /// Votes in the block.
        count: usize,
    },
    /// The block votes twice for the same operation.
    #[error("the block votes twice for {kind} module {module} at height {height}")]
    Duplicate {
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
    /// Too many operations are open.
    #[error("{MAX_OPEN_OPS} upgrade operations are already open; no new one can be proposed")]
    TooManyOpen,
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
    /// `kind u8 | module 32 | height u64 LE`.
    pub fn encode(&self) -> [u8; UPGRADE_OP_BYTES] {
        let mut out = [0u8; UPGRADE_OP_BYTES];
        let (kind, rest) = out.split_at_mut(1);
        let (module, height) = rest.split_at_mut(32);
        kind.copy_from_slice(&[kind_code(self.kind)]);
        module.copy_from_slice(&self.module);
        height.copy_from_slice(&self.height.to_le_bytes());
        out
    }

    /// Decodes [`UpgradeOp::encode`]'s output.
    pub fn decode(bytes: &[u8; UPGRADE_OP_BYTES]) -> Result<Self, ScheduleError> {
        let (kind, rest) = bytes
            .split_first()
            .ok_or(ScheduleError::UnknownKind(0xff))?;
        let (module, height) = rest
            .split_first_chunk::<32>()
            .ok_or(ScheduleError::UnknownKind(0xff))?;
        let height: [u8; 8] = height
            .try_into()
            .map_err(|_| ScheduleError::UnknownKind(0xff))?;
        Ok(Self {
            kind: kind_from_code(*kind)?,
            module: *module,
            height: u64::from_le_bytes(height),
        })
    }

    fn module_hex(&self) -> String {
        hex::encode(self.module)
    }
}

/// An operation being voted on, with its distinct voters (sorted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingOp {
    /// The operation.
    pub op: UpgradeOp,
    /// Authorities that voted for it, ascending.
    pub voters: Vec<u32>,
}

/// The schedule part of the state (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Scheduled modules, sorted by (kind, height); the last entry of a kind at or below a
    /// height is the module that runs there.
    pub entries: Vec<UpgradeOp>,
    /// Operations with votes but no majority yet, in order of their first vote.
    pub pending: Vec<PendingOp>,
}

impl Schedule {
    /// The schedule at genesis: each named module runs from height 0.
    pub fn genesis(initial: &[(Kind, Hash32)]) -> Self {
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
            pending: Vec::new(),
        }
    }

    /// The module `kind` runs at `height`, if the schedule names one.
    pub fn module_at(&self, kind: Kind, height: u64) -> Option<Hash32> {
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

    /// The schedule after the block at `height` by `proposer`, carrying `votes`, on a chain
    /// with `authorities` authorities (0: a single unpermissioned producer, which is then the
    /// majority) and a vote lead of `lead` blocks. Fails if a vote is invalid.
    pub fn with_block(
        &self,
        height: u64,
        proposer: u32,
        votes: &[UpgradeOp],
        authorities: usize,
        lead: u64,
    ) -> Result<Self, ScheduleError> {
        if votes.len() > MAX_UPGRADE_VOTES {
            return Err(ScheduleError::TooManyVotes { count: votes.len() });
        }
        // Votes count only for operations more than `lead` blocks ahead.
        let deadline = height.saturating_add(lead);
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
                    lead,
                });
            }
            if votes.get(..i).is_some_and(|before| before.contains(vote)) {
                return Err(ScheduleError::Duplicate {
                    kind: vote.kind,
                    module: vote.module_hex(),
                    height: vote.height,
                });
            }
        }
        let mut next = self.clone();
        next.pending.retain(|p| p.op.height > deadline);
        for vote in votes {
            match next.pending.iter_mut().find(|p| p.op == *vote) {
                Some(p) => {
                    if let Err(at) = p.voters.binary_search(&proposer) {
                        p.voters.insert(at, proposer);
                    }
                }
                None => {
                    let open = next
                        .pending
                        .len()
                        .saturating_add(next.upcoming(height).count());
                    if open >= MAX_OPEN_OPS {
                        return Err(ScheduleError::TooManyOpen);
                    }
                    next.pending.push(PendingOp {
                        op: *vote,
                        voters: vec![proposer],
                    });
                }
            }
        }
        let electorate = authorities.max(1);
        let (adopted, pending): (Vec<PendingOp>, Vec<PendingOp>) = next
            .pending
            .into_iter()
            .partition(|p| p.voters.len().saturating_mul(2) > electorate);
        next.pending = pending;
        for p in adopted {
            next.entries
                .retain(|e| !(e.kind == p.op.kind && e.height == p.op.height));
            next.entries.push(p.op);
        }
        next.entries.sort();
        // Entries that can never run again: an older entry of a kind already superseded at the
        // next height.
        let next_height = height.saturating_add(1);
        let superseded: Vec<UpgradeOp> =
            next.entries
                .iter()
                .filter(|e| {
                    e.height <= next_height
                        && next.entries.iter().any(|l| {
                            l.kind == e.kind && l.height > e.height && l.height <= next_height
                        })
                })
                .copied()
                .collect();
        next.entries.retain(|e| !superseded.contains(e));
        Ok(next)
    }

    /// Canonical encoding: `entries u16 | entries × op | pending u16 | pending × (op | voters
    /// u16 | voters × u32)`, integers little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let entries = u16::try_from(self.entries.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&entries.to_le_bytes());
        for e in self.entries.iter().take(usize::from(entries)) {
            out.extend_from_slice(&e.encode());
        }
        let pending = u16::try_from(self.pending.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&pending.to_le_bytes());
        for p in self.pending.iter().take(usize::from(pending)) {
            out.extend_from_slice(&p.op.encode());
            let voters = u16::try_from(p.voters.len()).unwrap_or(u16::MAX);
            out.extend_from_slice(&voters.to_le_bytes());
            for v in p.voters.iter().take(usize::from(voters)) {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    /// Decodes [`Schedule::encode`]'s output; `None` if malformed or with trailing bytes.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        fn u16_at(rest: &mut &[u8]) -> Option<usize> {
            let (n, after) = rest.split_first_chunk::<2>()?;
            *rest = after;
            Some(usize::from(u16::from_le_bytes(*n)))
        }
        fn op_at(rest: &mut &[u8]) -> Option<UpgradeOp> {
            let (op, after) = rest.split_first_chunk::<UPGRADE_OP_BYTES>()?;
            *rest = after;
            UpgradeOp::decode(op).ok()
        }
        let mut rest = bytes;
        let count = u16_at(&mut rest)?;
        let mut entries = Vec::with_capacity(count.min(MAX_OPEN_OPS));
        for _ in 0..count {
            entries.push(op_at(&mut rest)?);
        }
        let count = u16_at(&mut rest)?;
        let mut pending = Vec::with_capacity(count.min(MAX_OPEN_OPS));
        for _ in 0..count {
            let op = op_at(&mut rest)?;
            let voters_count = u16_at(&mut rest)?;
            let mut voters = Vec::with_capacity(voters_count.min(1024));
            for _ in 0..voters_count {
                let (v, after) = rest.split_first_chunk::<4>()?;
                rest = after;
                voters.push(u32::from_le_bytes(*v));
            }
            pending.push(PendingOp { op, voters });
        }
        rest.is_empty().then_some(Self { entries, pending })
    }

    /// `sha256("modnode-schedule-v1" ‖ encode())`.
    pub fn root(&self) -> Hash32 {
        let mut h = Sha256::new();
        h.update(b"modnode-schedule-v1");
        h.update(self.encode());
        h.finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(module: u8, height: u64) -> UpgradeOp {
        UpgradeOp {
            kind: Kind::Deposits,
            module: [module; 32],
            height,
        }
    }

    #[test]
    fn a_strict_majority_of_distinct_authorities_schedules_an_operation() {
        let s = Schedule::genesis(&[(Kind::Deposits, [1; 32])]);
        let v2 = op(2, 20);
        // 4 authorities, lead 4: two voters are not a majority, the same one twice neither.
        let s = s.with_block(1, 0, &[v2], 4, 4).unwrap();
        let s = s.with_block(2, 1, &[v2], 4, 4).unwrap();
        let s = s.with_block(3, 1, &[v2], 4, 4).unwrap();
        assert_eq!(s.module_at(Kind::Deposits, 25), Some([1; 32]));
        assert_eq!(s.pending[0].voters, vec![0, 1]);
        let s = s.with_block(4, 3, &[v2], 4, 4).unwrap();
        assert!(s.pending.is_empty());
        assert_eq!(s.module_at(Kind::Deposits, 19), Some([1; 32]));
        assert_eq!(s.module_at(Kind::Deposits, 20), Some([2; 32]));
        // Rollback: a new operation back to the old hash, later.
        let back = op(1, 30);
        let s = [0, 1, 2].iter().zip(5..).fold(s, |s, (&who, h)| {
            s.with_block(h, who, &[back], 4, 4).unwrap()
        });
        assert_eq!(s.module_at(Kind::Deposits, 29), Some([2; 32]));
        assert_eq!(s.module_at(Kind::Deposits, 30), Some([1; 32]));
    }

    #[test]
    fn one_authority_of_several_cannot_schedule_alone() {
        let mut s = Schedule::genesis(&[(Kind::Deposits, [1; 32])]);
        for h in 1..15 {
            s = s.with_block(h, 0, &[op(2, 20)], 3, 4).unwrap();
        }
        assert_eq!(s.module_at(Kind::Deposits, 100), Some([1; 32]));
        // Once the lead is reached the pending vote expires.
        let s = s.with_block(16, 1, &[], 3, 4).unwrap();
        assert!(s.pending.is_empty());
        // Without authorities the single producer is the majority.
        let solo = Schedule::default()
            .with_block(1, 0, &[op(2, 9)], 0, 4)
            .unwrap();
        assert_eq!(solo.module_at(Kind::Deposits, 9), Some([2; 32]));
    }

    #[test]
    fn votes_must_respect_the_lead_and_the_bounds() {
        let s = Schedule::default();
        // Block 10, lead 4: height 14 is too late, 15 is fine.
        assert!(matches!(
            s.with_block(10, 0, &[op(2, 14)], 4, 4),
            Err(ScheduleError::TooLate { height: 14, .. })
        ));
        assert!(s.with_block(10, 0, &[op(2, 15)], 4, 4).is_ok());
        // Votes counted before the deadline stay; a majority completed late is refused.
        let s = s.with_block(1, 0, &[op(2, 10)], 4, 4).unwrap();
        let s = s.with_block(2, 1, &[op(2, 10)], 4, 4).unwrap();
        assert!(s.with_block(6, 2, &[op(2, 10)], 4, 4).is_err());
        let local = UpgradeOp {
            kind: Kind::GossipPolicy,
            ..op(2, 50)
        };
        assert_eq!(
            s.with_block(3, 0, &[local], 4, 4),
            Err(ScheduleError::LocalKind(Kind::GossipPolicy))
        );
        assert!(matches!(
            s.with_block(3, 0, &[op(3, 50), op(3, 50)], 4, 4),
            Err(ScheduleError::Duplicate { .. })
        ));
        let five: Vec<UpgradeOp> = (0..5).map(|i| op(i, 50)).collect();
        assert_eq!(
            s.with_block(3, 0, &five, 4, 4),
            Err(ScheduleError::TooManyVotes { count: 5 })
        );
        let mut s = Schedule::default();
        for chunk in (0..MAX_OPEN_OPS as u8).collect::<Vec<_>>().chunks(4) {
            let ops: Vec<UpgradeOp> = chunk.iter().map(|&i| op(i, 100)).collect();
            s = s.with_block(1, 0, &ops, 4, 4).unwrap();
        }
        assert_eq!(
            s.with_block(2, 0, &[op(200, 100)], 4, 4),
            Err(ScheduleError::TooManyOpen)
        );
    }

    #[test]
    fn superseded_entries_are_dropped_and_the_encoding_is_strict() {
        let s = Schedule::default()
            .with_block(1, 0, &[op(2, 6)], 0, 4)
            .unwrap();
        let s = s.with_block(2, 0, &[op(3, 8)], 0, 4).unwrap();
        assert_eq!(s.entries.len(), 2);
        let s = s.with_block(5, 0, &[], 0, 4).unwrap();
        assert_eq!(s.entries, vec![op(2, 6), op(3, 8)]);
        let s = s.with_block(7, 0, &[], 0, 4).unwrap();
        assert_eq!(s.entries, vec![op(3, 8)]);
        assert_eq!(s.module_at(Kind::Deposits, 8), Some([3; 32]));

        let s = Schedule::genesis(&[(Kind::Deposits, [1; 32])])
            .with_block(1, 2, &[op(2, 20)], 4, 4)
            .unwrap();
        let bytes = s.encode();
        assert_eq!(Schedule::decode(&bytes), Some(s.clone()));
        assert_eq!(Schedule::decode(&bytes[..bytes.len() - 1]), None);
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(Schedule::decode(&long), None);
        let other = s.with_block(2, 3, &[op(2, 20)], 4, 4).unwrap();
        assert_ne!(s.root(), other.root());
        assert_eq!(
            UpgradeOp::decode(&[9; UPGRADE_OP_BYTES]),
            Err(ScheduleError::UnknownKind(9))
        );
    }
}
