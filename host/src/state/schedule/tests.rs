use super::*;
use crate::hashes::ModuleHash;

fn op(module: u8, height: u64) -> UpgradeOp {
    UpgradeOp {
        kind: Kind::Deposits,
        module: ModuleHash([module; 32]),
        height,
    }
}

fn rules(authorities: usize, lead: u64) -> Governance {
    Governance {
        authorities,
        lead,
        max_ahead: 1_000,
        vote_ttl: 500,
        open_per_authority: 4,
    }
}

/// A block by `who` voting `upgrades` and attesting `ready`.
fn block(
    s: &Schedule,
    height: u64,
    who: u32,
    upgrades: &[UpgradeOp],
    ready: &[UpgradeOp],
    r: &Governance,
) -> Result<Schedule, ScheduleError> {
    s.with_block(
        height,
        who,
        BlockVotes {
            upgrades,
            cancels: &[],
            ready,
        },
        r,
    )
}

fn cancel(
    s: &Schedule,
    height: u64,
    who: u32,
    cancels: &[UpgradeOp],
    r: &Governance,
) -> Result<Schedule, ScheduleError> {
    s.with_block(
        height,
        who,
        BlockVotes {
            cancels,
            ..BlockVotes::default()
        },
        r,
    )
}

#[test]
fn a_strict_majority_of_distinct_authorities_schedules_an_operation() {
    let r = rules(4, 4);
    let s = Schedule::genesis(&[(Kind::Deposits, ModuleHash([1; 32]))]);
    let v2 = op(2, 20);
    // 4 authorities: two voters are not a majority, the same one twice neither.
    let s = block(&s, 1, 0, &[v2], &[v2], &r).unwrap();
    let s = block(&s, 2, 1, &[v2], &[v2], &r).unwrap();
    let s = block(&s, 3, 1, &[v2], &[], &r).unwrap();
    assert_eq!(s.module_at(Kind::Deposits, 25), Some(ModuleHash([1; 32])));
    assert_eq!(s.pending[0].voters, vec![0, 1]);
    let s = block(&s, 4, 3, &[v2], &[v2], &r).unwrap();
    assert!(s.pending.is_empty());
    assert_eq!(s.module_at(Kind::Deposits, 19), Some(ModuleHash([1; 32])));
    assert_eq!(s.module_at(Kind::Deposits, 20), Some(ModuleHash([2; 32])));
    // Three of four attested: the upgrade passes the gate at 16.
    let s = (5..=16).fold(s, |s, h| block(&s, h, 0, &[], &[], &r).unwrap());
    assert_eq!(s.module_at(Kind::Deposits, 20), Some(ModuleHash([2; 32])));
    // Rollback: a new operation back to the old hash, later.
    let back = op(1, 30);
    let s = [0, 1, 2].iter().zip(17..).fold(s, |s, (&who, h)| {
        block(&s, h, who, &[back], &[back], &r).unwrap()
    });
    assert_eq!(s.module_at(Kind::Deposits, 29), Some(ModuleHash([2; 32])));
    assert_eq!(s.module_at(Kind::Deposits, 30), Some(ModuleHash([1; 32])));
}

#[test]
fn one_authority_of_several_cannot_schedule_alone() {
    let r = rules(3, 4);
    let mut s = Schedule::genesis(&[(Kind::Deposits, ModuleHash([1; 32]))]);
    for h in 1..15 {
        s = block(&s, h, 0, &[op(2, 20)], &[], &r).unwrap();
    }
    assert_eq!(s.module_at(Kind::Deposits, 100), Some(ModuleHash([1; 32])));
    // Once the lead is reached the pending vote expires.
    let s = block(&s, 16, 1, &[], &[], &r).unwrap();
    assert!(s.pending.is_empty());
    // Without authorities the single producer is the majority.
    let solo = block(
        &Schedule::default(),
        1,
        0,
        &[op(2, 9)],
        &[op(2, 9)],
        &rules(0, 4),
    )
    .unwrap();
    assert_eq!(solo.module_at(Kind::Deposits, 9), Some(ModuleHash([2; 32])));
}

#[test]
fn votes_must_respect_the_lead_and_the_bounds() {
    let r = rules(4, 4);
    let s = Schedule::default();
    // Block 10, lead 4: height 14 is too late, 15 is fine.
    assert!(matches!(
        block(&s, 10, 0, &[op(2, 14)], &[], &r),
        Err(ScheduleError::TooLate { height: 14, .. })
    ));
    assert!(block(&s, 10, 0, &[op(2, 15)], &[], &r).is_ok());
    // Votes counted before the deadline stay; a majority completed late is refused.
    let s = block(&s, 1, 0, &[op(2, 10)], &[], &r).unwrap();
    let s = block(&s, 2, 1, &[op(2, 10)], &[], &r).unwrap();
    assert!(block(&s, 6, 2, &[op(2, 10)], &[], &r).is_err());
    let local = UpgradeOp {
        kind: Kind::GossipPolicy,
        ..op(2, 50)
    };
    assert_eq!(
        block(&s, 3, 0, &[local], &[], &r),
        Err(ScheduleError::LocalKind(Kind::GossipPolicy))
    );
    assert!(matches!(
        block(&s, 3, 0, &[op(3, 50), op(3, 50)], &[], &r),
        Err(ScheduleError::Duplicate { .. })
    ));
    let five: Vec<UpgradeOp> = (0..5).map(|i| op(i, 50)).collect();
    assert!(matches!(
        block(&s, 3, 0, &five, &[], &r),
        Err(ScheduleError::TooManyVotes { count: 5, .. })
    ));
}

#[test]
fn activation_heights_are_bounded_ahead() {
    let r = rules(4, 4);
    let s = Schedule::default();
    assert!(block(&s, 10, 0, &[op(2, 10 + r.max_ahead)], &[], &r).is_ok());
    assert!(matches!(
        block(&s, 10, 0, &[op(2, 11 + r.max_ahead)], &[], &r),
        Err(ScheduleError::TooFar { .. })
    ));
    assert!(matches!(
        block(&s, 10, 0, &[op(2, u64::MAX - 1)], &[], &r),
        Err(ScheduleError::TooFar { .. })
    ));
}

#[test]
fn junk_votes_from_one_authority_do_not_block_a_majority_upgrade() {
    let r = rules(4, 4);
    let mut s = Schedule::genesis(&[(Kind::Deposits, ModuleHash([1; 32]))]);
    // Authority 3 votes for 16 junk operations as far ahead as allowed, 4 per block.
    let junk: Vec<UpgradeOp> = (0..16u8).map(|i| op(100 + i, 900)).collect();
    let mut accepted = 0;
    for (h, chunk) in (1..).zip(junk.chunks(4)) {
        match block(&s, h, 3, chunk, &[], &r) {
            Ok(next) => {
                s = next;
                accepted += chunk.len();
            }
            Err(e) => assert!(matches!(
                e,
                ScheduleError::TooManyForAuthority { proposer: 3, .. }
            )),
        }
    }
    assert_eq!(accepted, r.open_per_authority);
    // A majority still schedules its upgrade.
    let v2 = op(2, 40);
    for (h, who) in (10..).zip([0, 1, 2]) {
        s = block(&s, h, who, &[v2], &[v2], &r).unwrap();
    }
    assert_eq!(s.module_at(Kind::Deposits, 40), Some(ModuleHash([2; 32])));
    // The junk expires by age (vote_ttl after its first vote), freeing authority 3's quota.
    let s = block(&s, 1 + r.vote_ttl, 0, &[], &[], &r).unwrap();
    assert!(s.pending.iter().all(|p| p.voters != vec![3]));
    assert!(block(&s, 2 + r.vote_ttl, 3, &[op(7, 900)], &[], &r).is_ok());
}

#[test]
fn an_upgrade_without_majority_readiness_is_dropped_at_the_gate() {
    let r = rules(3, 4);
    let v2 = op(2, 20);
    let s = Schedule::genesis(&[(Kind::Deposits, ModuleHash([1; 32]))]);
    // Scheduled by two votes, but only authority 0 ever attests.
    let s = block(&s, 1, 0, &[v2], &[v2], &r).unwrap();
    let s = block(&s, 2, 1, &[v2], &[], &r).unwrap();
    assert_eq!(s.module_at(Kind::Deposits, 20), Some(ModuleHash([2; 32])));
    let s = (3..16).fold(s, |s, h| block(&s, h, 2, &[], &[], &r).unwrap());
    assert_eq!(
        s.module_at(Kind::Deposits, 20),
        Some(ModuleHash([2; 32])),
        "dropped too early"
    );
    // Block 16 = 20 − lead: the gate closes.
    let s = block(&s, 16, 2, &[], &[], &r).unwrap();
    assert_eq!(s.module_at(Kind::Deposits, 20), Some(ModuleHash([1; 32])));
    assert_eq!(
        s.dropped,
        vec![DroppedOp {
            op: v2,
            reason: DropReason::NotReady,
            at: 16,
            ready: 1
        }]
    );
    assert!(s.ready.is_empty());

    // The same with a second attestation before the gate activates.
    let s = Schedule::genesis(&[(Kind::Deposits, ModuleHash([1; 32]))]);
    let s = block(&s, 1, 0, &[v2], &[v2], &r).unwrap();
    let s = block(&s, 2, 1, &[v2], &[], &r).unwrap();
    let s = block(&s, 16, 2, &[], &[v2], &r).unwrap();
    assert_eq!(s.module_at(Kind::Deposits, 20), Some(ModuleHash([2; 32])));
    assert!(s.dropped.is_empty());
}

#[test]
fn attestations_must_name_open_upgrades_once() {
    let r = rules(3, 4);
    let v2 = op(2, 20);
    let s = Schedule::genesis(&[(Kind::Deposits, ModuleHash([1; 32]))]);
    assert!(matches!(
        block(&s, 1, 0, &[], &[v2], &r),
        Err(ScheduleError::BadAttestation { .. })
    ));
    let s = block(&s, 1, 0, &[v2], &[v2], &r).unwrap();
    assert!(matches!(
        block(&s, 2, 0, &[], &[v2], &r),
        Err(ScheduleError::BadAttestation { .. })
    ));
    assert!(matches!(
        block(&s, 2, 1, &[], &[v2, v2], &r),
        Err(ScheduleError::BadAttestation { .. })
    ));
    let many: Vec<UpgradeOp> = (0..=MAX_READY_ATTESTATIONS as u8)
        .map(|i| op(i, 20))
        .collect();
    assert!(matches!(
        block(&s, 2, 1, &[], &many, &r),
        Err(ScheduleError::TooManyAttestations { .. })
    ));
}

#[test]
fn a_majority_cancels_a_scheduled_upgrade_before_the_lead_and_not_after() {
    let r = rules(3, 4);
    let v2 = op(2, 20);
    let s = Schedule::genesis(&[(Kind::Deposits, ModuleHash([1; 32]))]);
    let s = block(&s, 1, 0, &[v2], &[v2], &r).unwrap();
    let s = block(&s, 2, 1, &[v2], &[v2], &r).unwrap();
    // Nothing to cancel that is not scheduled.
    assert!(matches!(
        cancel(&s, 3, 0, &[op(9, 20)], &r),
        Err(ScheduleError::NothingToCancel { .. })
    ));
    // One vote is not enough; two of three cancel it.
    let one = cancel(&s, 3, 0, &[v2], &r).unwrap();
    assert_eq!(one.module_at(Kind::Deposits, 20), Some(ModuleHash([2; 32])));
    let two = cancel(&one, 4, 2, &[v2], &r).unwrap();
    assert_eq!(two.module_at(Kind::Deposits, 20), Some(ModuleHash([1; 32])));
    assert_eq!(two.dropped.len(), 1);
    assert_eq!(two.dropped[0].reason, DropReason::Cancelled);
    assert!(two.pending.is_empty() && two.ready.is_empty());
    // At 20 − lead the cancel comes too late: the upgrade stays.
    let late = (5..16).fold(s, |s, h| block(&s, h, 2, &[], &[], &r).unwrap());
    assert!(matches!(
        cancel(&late, 16, 0, &[v2], &r),
        Err(ScheduleError::TooLate { .. })
    ));
    let after = block(&late, 16, 0, &[], &[], &r).unwrap();
    assert_eq!(
        after.module_at(Kind::Deposits, 20),
        Some(ModuleHash([2; 32]))
    );
}

#[test]
fn dropped_history_is_bounded() {
    let r = rules(0, 2);
    let mut s = Schedule::genesis(&[(Kind::Deposits, ModuleHash([1; 32]))]);
    for i in 0..(MAX_DROPPED as u64 + 3) {
        let h = 1 + i * 10;
        let up = op(2 + i as u8, h + 5);
        s = block(&s, h, 0, &[up], &[], &r).unwrap();
        s = (h + 1..=h + 3).fold(s, |s, b| block(&s, b, 0, &[], &[], &r).unwrap());
        assert_eq!(s.dropped.last().map(|d| d.op), Some(up));
    }
    assert_eq!(s.dropped.len(), MAX_DROPPED);
}

#[test]
fn superseded_entries_are_dropped_and_the_encoding_is_strict() {
    let r = rules(0, 4);
    let s = block(&Schedule::default(), 1, 0, &[op(2, 6)], &[op(2, 6)], &r).unwrap();
    let s = block(&s, 2, 0, &[op(3, 8)], &[op(3, 8)], &r).unwrap();
    assert_eq!(s.entries.len(), 2);
    let s = block(&s, 5, 0, &[], &[], &r).unwrap();
    assert_eq!(s.entries, vec![op(2, 6), op(3, 8)]);
    let s = block(&s, 7, 0, &[], &[], &r).unwrap();
    assert_eq!(s.entries, vec![op(3, 8)]);
    assert_eq!(s.module_at(Kind::Deposits, 8), Some(ModuleHash([3; 32])));

    let r = rules(4, 4);
    let s = Schedule::genesis(&[(Kind::Deposits, ModuleHash([1; 32]))]);
    let s = block(&s, 1, 2, &[op(2, 20)], &[op(2, 20)], &r).unwrap();
    let s = cancel(&s, 2, 1, &[], &r).unwrap();
    let mut with_all = s.clone();
    with_all.dropped.push(DroppedOp {
        op: op(5, 9),
        reason: DropReason::Cancelled,
        at: 3,
        ready: 2,
    });
    for s in [s.clone(), with_all] {
        let bytes = s.encode();
        assert_eq!(Schedule::decode(&bytes), Some(s.clone()));
        assert_eq!(Schedule::decode(&bytes[..bytes.len() - 1]), None);
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(Schedule::decode(&long), None);
    }
    let other = block(&s, 2, 3, &[op(2, 20)], &[], &r).unwrap();
    assert_ne!(s.root(), other.root());
    assert_eq!(
        UpgradeOp::decode(&[9; UPGRADE_OP_BYTES]),
        Err(ScheduleError::UnknownKind(9))
    );
}
