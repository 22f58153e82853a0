//! The state's view of the deposit contract: the agreed `eth1_data`, how many of its deposits
//! the chain has applied (`eth1_deposit_index`) and the votes of the current voting period —
//! phase0's `process_eth1_data`, with votes counted per authority.
//!
//! Each block carries its proposer's vote. Within a voting period (a fixed number of slots), a
//! vote that a strict majority of the authority set has cast becomes `eth1_data`. A vote never
//! moves `deposit_count` backwards: a block voting below the agreed count is invalid, and an
//! older vote that reaches a majority after the count moved on is not adopted.

use sha2::{Digest, Sha256};

/// A 32-byte hash.
pub type Hash32 = [u8; 32];

/// Most votes an encoded [`Eth1State`] may hold (one per block of a voting period).
pub const MAX_VOTES: usize = 1 << 16;

/// A deposit contract checkpoint: its deposit root and count at a block of the deposit source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Eth1Data {
    /// The deposit root (count mixed in), as the deposit contract's `get_deposit_root`.
    pub deposit_root: Hash32,
    /// Deposits in the contract at that block.
    pub deposit_count: u64,
    /// Hash of the deposit source block the root was read at.
    pub block_hash: Hash32,
}

/// Encoded size of [`Eth1Data`].
pub const ETH1_DATA_BYTES: usize = 32 + 8 + 32;

impl Eth1Data {
    /// `deposit_root 32 | deposit_count u64 LE | block_hash 32`.
    pub fn encode(&self) -> [u8; ETH1_DATA_BYTES] {
        let mut out = [0u8; ETH1_DATA_BYTES];
        let (root, rest) = out.split_at_mut(32);
        let (count, hash) = rest.split_at_mut(8);
        root.copy_from_slice(&self.deposit_root);
        count.copy_from_slice(&self.deposit_count.to_le_bytes());
        hash.copy_from_slice(&self.block_hash);
        out
    }

    /// Decodes [`Eth1Data::encode`]'s output.
    pub fn decode(bytes: &[u8; ETH1_DATA_BYTES]) -> Self {
        let (root, rest) = bytes.split_first_chunk::<32>().unwrap_or((&[0; 32], &[]));
        let (count, hash) = rest.split_first_chunk::<8>().unwrap_or((&[0; 8], &[]));
        Self {
            deposit_root: *root,
            deposit_count: u64::from_le_bytes(*count),
            block_hash: hash.try_into().unwrap_or([0; 32]),
        }
    }
}

/// One block's vote, recorded for the current voting period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eth1Vote {
    /// The voting authority (0 on chains without authorities).
    pub proposer: u32,
    /// What it voted for.
    pub data: Eth1Data,
}

/// Why a block's eth1 vote or deposits do not fit the state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Eth1Error {
    /// The vote's deposit count is below the agreed one.
    #[error(
        "the eth1 vote has deposit count {voted}, below the agreed {agreed}; counts never go back"
    )]
    VoteBackwards {
        /// Count in the vote.
        voted: u64,
        /// Count in the state.
        agreed: u64,
    },
    /// The voting period is zero slots (a genesis that should have been refused).
    #[error("the eth1 voting period is 0 slots")]
    ZeroPeriod,
    /// Applying deposits would move the index past the agreed count, or overflow.
    #[error("eth1 deposit index {index} + {applied} deposits passes the deposit count {count}")]
    IndexPastCount {
        /// Index before.
        index: u64,
        /// Deposits applied.
        applied: u64,
        /// The agreed count.
        count: u64,
    },
    /// The period's vote list is full.
    #[error("more than {MAX_VOTES} eth1 votes in one period")]
    TooManyVotes,
}

/// The eth1 part of the state, committed by the state root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Eth1State {
    /// The agreed deposit contract checkpoint.
    pub eth1_data: Eth1Data,
    /// Deposits of the contract applied so far; the next block's first deposit has this index.
    pub deposit_index: u64,
    /// The voting period `votes` belong to (`slot / period_slots`).
    pub vote_period: u64,
    /// Votes cast in `vote_period`, in block order.
    pub votes: Vec<Eth1Vote>,
}

impl Eth1State {
    /// The state at genesis: `eth1_data` agreed, `deposit_index` deposits already applied.
    pub fn genesis(eth1_data: Eth1Data, deposit_index: u64) -> Self {
        Self {
            eth1_data,
            deposit_index,
            vote_period: 0,
            votes: Vec::new(),
        }
    }

    /// Records the vote of `proposer`'s block at `slot` (`process_eth1_data`): votes of an
    /// earlier period are dropped; a vote cast by a strict majority of `authorities` distinct
    /// voters in this period is adopted (with no authorities, the single producer is the
    /// majority), unless it would move the deposit count backwards.
    pub fn with_vote(
        &self,
        slot: u64,
        proposer: u32,
        vote: Eth1Data,
        period_slots: u64,
        authorities: usize,
    ) -> Result<Self, Eth1Error> {
        if vote.deposit_count < self.eth1_data.deposit_count {
            return Err(Eth1Error::VoteBackwards {
                voted: vote.deposit_count,
                agreed: self.eth1_data.deposit_count,
            });
        }
        let period = slot
            .checked_div(period_slots)
            .ok_or(Eth1Error::ZeroPeriod)?;
        let mut next = self.clone();
        if period != next.vote_period {
            next.vote_period = period;
            next.votes.clear();
        }
        if next.votes.len() >= MAX_VOTES {
            return Err(Eth1Error::TooManyVotes);
        }
        next.votes.push(Eth1Vote {
            proposer,
            data: vote,
        });
        let mut voters: Vec<u32> = next
            .votes
            .iter()
            .filter(|v| v.data == vote)
            .map(|v| v.proposer)
            .collect();
        voters.sort_unstable();
        voters.dedup();
        let electorate = authorities.max(1);
        if voters.len().saturating_mul(2) > electorate {
            next.eth1_data = vote;
        }
        Ok(next)
    }

    /// How many deposits the next block must carry: `min(max, deposit_count - deposit_index)`.
    pub fn due(&self, max: u64) -> u64 {
        self.eth1_data
            .deposit_count
            .saturating_sub(self.deposit_index)
            .min(max)
    }

    /// The state after `applied` deposits.
    pub fn after_deposits(&self, applied: u64) -> Result<Self, Eth1Error> {
        let past = || Eth1Error::IndexPastCount {
            index: self.deposit_index,
            applied,
            count: self.eth1_data.deposit_count,
        };
        let index = self.deposit_index.checked_add(applied).ok_or_else(past)?;
        if index > self.eth1_data.deposit_count {
            return Err(past());
        }
        Ok(Self {
            deposit_index: index,
            ..self.clone()
        })
    }

    /// Canonical encoding: `eth1_data 72 | deposit_index u64 | vote_period u64 | count u32 |
    /// count × (proposer u32 | eth1_data 72)`, integers little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            self.votes
                .len()
                .saturating_mul(4 + ETH1_DATA_BYTES)
                .saturating_add(ETH1_DATA_BYTES + 20),
        );
        out.extend_from_slice(&self.eth1_data.encode());
        out.extend_from_slice(&self.deposit_index.to_le_bytes());
        out.extend_from_slice(&self.vote_period.to_le_bytes());
        let count = u32::try_from(self.votes.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&count.to_le_bytes());
        for vote in &self.votes {
            out.extend_from_slice(&vote.proposer.to_le_bytes());
            out.extend_from_slice(&vote.data.encode());
        }
        out
    }

    /// Decodes [`Eth1State::encode`]'s output; `None` if malformed, over [`MAX_VOTES`] or with
    /// trailing bytes.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (data, rest) = bytes.split_first_chunk::<ETH1_DATA_BYTES>()?;
        let (index, rest) = rest.split_first_chunk::<8>()?;
        let (period, rest) = rest.split_first_chunk::<8>()?;
        let (count, mut rest) = rest.split_first_chunk::<4>()?;
        let count = usize::try_from(u32::from_le_bytes(*count)).ok()?;
        if count > MAX_VOTES {
            return None;
        }
        let mut votes = Vec::with_capacity(count);
        for _ in 0..count {
            let (proposer, after) = rest.split_first_chunk::<4>()?;
            let (data, after) = after.split_first_chunk::<ETH1_DATA_BYTES>()?;
            votes.push(Eth1Vote {
                proposer: u32::from_le_bytes(*proposer),
                data: Eth1Data::decode(data),
            });
            rest = after;
        }
        if !rest.is_empty() {
            return None;
        }
        Some(Self {
            eth1_data: Eth1Data::decode(data),
            deposit_index: u64::from_le_bytes(*index),
            vote_period: u64::from_le_bytes(*period),
            votes,
        })
    }

    /// `sha256("modnode-eth1-state-v1" ‖ encode())`.
    pub fn root(&self) -> Hash32 {
        let mut h = Sha256::new();
        h.update(b"modnode-eth1-state-v1");
        h.update(self.encode());
        h.finalize().into()
    }
}

/// The state root: the registry's root, the eth1 state's and the module schedule's,
/// domain-separated.
pub fn state_root(
    registry_root: &Hash32,
    eth1: &Eth1State,
    schedule: &super::schedule::Schedule,
) -> Hash32 {
    let mut h = Sha256::new();
    h.update(b"modnode-state-v3");
    h.update(registry_root);
    h.update(eth1.root());
    h.update(schedule.root());
    h.finalize().into()
}

/// The state root of a state that may hold deposits@3's pending-deposit queue: without one,
/// exactly [`state_root`] (`modnode-state-v3`: every root of a chain that never ran deposits@3
/// is unchanged); with one, `sha256("modnode-state-v4" ‖ registry ‖ eth1 ‖ schedule ‖
/// pending)`, where `pending` is [`PendingQueue::root`](super::PendingQueue::root).
pub fn state_root_with(
    registry_root: &Hash32,
    eth1: &Eth1State,
    schedule: &super::schedule::Schedule,
    pending_root: Option<&Hash32>,
) -> Hash32 {
    let Some(pending_root) = pending_root else {
        return state_root(registry_root, eth1, schedule);
    };
    let mut h = Sha256::new();
    h.update(b"modnode-state-v4");
    h.update(registry_root);
    h.update(eth1.root());
    h.update(schedule.root());
    h.update(pending_root);
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(count: u64, tag: u8) -> Eth1Data {
        Eth1Data {
            deposit_root: [tag; 32],
            deposit_count: count,
            block_hash: [tag ^ 0xff; 32],
        }
    }

    #[test]
    fn a_strict_majority_of_authorities_adopts_a_vote_within_a_period() {
        let s = Eth1State::genesis(data(0, 0), 0);
        let a = data(3, 1);
        // 4 authorities: 2 distinct voters are not a strict majority, 3 are.
        let s = s.with_vote(8, 0, a, 8, 4).unwrap();
        let s = s.with_vote(9, 1, a, 8, 4).unwrap();
        assert_eq!(s.eth1_data, data(0, 0));
        // The same authority again does not count twice.
        let s = s.with_vote(12, 1, a, 8, 4).unwrap();
        assert_eq!(s.eth1_data, data(0, 0));
        let s2 = s.with_vote(13, 2, a, 8, 4).unwrap();
        assert_eq!(s2.eth1_data, a);
        assert_eq!(s2.due(16), 3);
        // A new period forgets the votes.
        let s3 = s.with_vote(16, 2, a, 8, 4).unwrap();
        assert_eq!(s3.eth1_data, data(0, 0));
        assert_eq!((s3.vote_period, s3.votes.len()), (2, 1));
        // Without authorities the single producer is the majority.
        let solo = Eth1State::default().with_vote(1, 0, a, 8, 0).unwrap();
        assert_eq!(solo.eth1_data, a);
    }

    #[test]
    fn counts_never_go_back() {
        let s = Eth1State::genesis(data(5, 1), 2);
        assert_eq!(
            s.with_vote(1, 0, data(4, 2), 8, 0),
            Err(Eth1Error::VoteBackwards {
                voted: 4,
                agreed: 5
            })
        );
        // A stale vote cast earlier in the period is not adopted once the count moved on.
        let s = Eth1State::genesis(data(0, 0), 0);
        let s = s.with_vote(0, 0, data(2, 1), 8, 3).unwrap();
        let s = s.with_vote(1, 1, data(4, 2), 8, 3).unwrap();
        let s = s.with_vote(2, 2, data(4, 2), 8, 3).unwrap();
        assert_eq!(s.eth1_data, data(4, 2));
        let err = s.with_vote(3, 1, data(2, 1), 8, 3).unwrap_err();
        assert!(matches!(err, Eth1Error::VoteBackwards { .. }));
        assert_eq!(
            Eth1State::default().with_vote(1, 0, data(0, 0), 0, 0),
            Err(Eth1Error::ZeroPeriod)
        );
    }

    #[test]
    fn deposits_move_the_index_up_to_the_count_only() {
        let s = Eth1State::genesis(data(5, 1), 2);
        assert_eq!(s.due(16), 3);
        assert_eq!(s.due(2), 2);
        assert_eq!(s.after_deposits(3).unwrap().deposit_index, 5);
        assert!(s.after_deposits(4).is_err());
        assert!(s.after_deposits(u64::MAX).is_err());
    }

    #[test]
    fn encoding_roundtrips_strictly_and_the_root_commits_to_everything() {
        let s = Eth1State::genesis(data(0, 0), 0)
            .with_vote(1, 3, data(2, 1), 8, 4)
            .unwrap()
            .with_vote(2, 1, data(2, 2), 8, 4)
            .unwrap();
        let bytes = s.encode();
        assert_eq!(Eth1State::decode(&bytes), Some(s.clone()));
        assert_eq!(Eth1State::decode(&bytes[..bytes.len() - 1]), None);
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(Eth1State::decode(&long), None);
        let mut huge = Eth1State::default().encode();
        let at = ETH1_DATA_BYTES + 16;
        huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Eth1State::decode(&huge), None);
        let other = Eth1State {
            deposit_index: 1,
            ..s.clone()
        };
        assert_ne!(s.root(), other.root());
        let none = super::super::schedule::Schedule::default();
        assert_ne!(
            state_root(&[0; 32], &s, &none),
            state_root(&[0; 32], &other, &none)
        );
        assert_ne!(
            state_root(&[0; 32], &s, &none),
            state_root(&[1; 32], &s, &none)
        );
        let scheduled = super::super::schedule::Schedule::genesis(&[(
            crate::runtime::Kind::Deposits,
            crate::hashes::ModuleHash([1; 32]),
        )]);
        assert_ne!(
            state_root(&[0; 32], &s, &none),
            state_root(&[0; 32], &s, &scheduled)
        );
    }
}
