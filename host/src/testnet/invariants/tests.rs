//! Each checker passes a clean history and fails on one doctored in exactly its way.

use super::*;

const GENESIS: u128 = 3 * 32_000_000_000;
const AMOUNT: u64 = 1_000_000_000;

fn hash(height: u64, branch: &str) -> String {
    format!("{branch}{height:04}")
}

fn root(height: u64, branch: &str) -> String {
    format!("root-{branch}{height:04}")
}

/// Node `node`'s sample at `at_ms` on branch `branch`, head `head`, finalized two below,
/// reporting its last 8 blocks, having applied `deposits` deposits of [`AMOUNT`].
fn sample(at_ms: u64, node: usize, head: u64, branch: &str, deposits: u64) -> Sample {
    Sample {
        at_ms,
        node,
        head,
        finalized: head.saturating_sub(2),
        blocks: (head.saturating_sub(7)..=head)
            .map(|h| BlockSeen {
                height: h,
                hash: hash(h, branch),
                state_root: root(h, branch),
            })
            .collect(),
        deposit_count: deposits,
        balance_sum_gwei: GENESIS + u128::from(deposits) * u128::from(AMOUNT),
        banned: Vec::new(),
        rss_bytes: Some(100 << 20),
    }
}

fn checker() -> Checker {
    Checker::new(
        vec!["aaaa0000".into(), "bbbb1111".into(), "cccc2222".into()],
        vec![true, true, false],
    )
    .with_genesis_balance(GENESIS)
    .with_allowed_errors(vec!["connection lost".into()])
}

/// A clean run: 3 nodes, 20 heights, 5 deposits, a heal and convergence.
fn clean_history(c: &mut Checker) -> Vec<Violation> {
    let mut found = Vec::new();
    for i in 0..5 {
        c.deposit_submitted(i, AMOUNT);
    }
    for head in 1..=20u64 {
        let deposits = (head / 4).min(5);
        for node in 0..3 {
            found.extend(c.record(&sample(head * 1000, node, head, "a", deposits)));
        }
    }
    found
}

#[test]
fn a_clean_history_passes_and_is_summarised() {
    let mut c = checker();
    c.heal_at(15_500);
    let mut found = clean_history(&mut c);
    found.extend(c.log_line(
        0,
        "2026-11-26T14:00:00Z  INFO modnode::node: imported block",
    ));
    found.extend(c.log_line(
        1,
        "2026-11-26T14:00:00Z ERROR modnode::net: connection lost",
    ));
    found.extend(c.node_exited(2, true));
    found.extend(c.finish(true));
    assert_eq!(found, vec![]);
    assert!(c.violations().is_empty());

    let summary = c.summary();
    assert_eq!(summary.samples, 60);
    assert_eq!((summary.max_head, summary.max_finalized), (20, 18));
    assert_eq!(summary.deposits_submitted, 5);
    assert_eq!(summary.deposits_applied_everywhere, 5);
    assert_eq!(summary.forks_seen, 0);
    // Converged at the first round of samples after the heal (16 s).
    assert_eq!(summary.convergence_ms, vec![500]);
    assert_eq!(summary.convergence_p99_ms, Some(500));
    assert_eq!(summary.max_rss_bytes, vec![Some(100 << 20); 3]);
    assert_eq!(summary.explained_errors, 1);
}

/// A node that missed ten blocks needs time to fetch them and then a moment to leave its own
/// tip: the summary keeps the two apart, so "agrees within a few slots of having synced" can be
/// judged on its own.
#[test]
fn a_convergence_is_split_into_syncing_the_missed_blocks_and_settling() {
    let mut c = checker();
    for head in 1..=10u64 {
        for node in 0..3 {
            assert!(
                c.record(&sample(head * 1000, node, head, "a", 0))
                    .is_empty()
            );
        }
    }
    for head in 11..=20u64 {
        for node in 0..2 {
            assert!(
                c.record(&sample(head * 1000, node, head, "a", 0))
                    .is_empty()
            );
        }
    }
    c.heal_after(20_500, Some(PerturbationKind::PartitionMinority));
    // Node 2 is still at 10: neither caught up nor converged.
    assert!(c.record(&sample(21_000, 0, 21, "a", 0)).is_empty());
    assert!(c.record(&sample(21_000, 1, 21, "a", 0)).is_empty());
    assert!(c.record(&sample(21_000, 2, 14, "a", 0)).is_empty());
    assert!(c.summary().convergences.is_empty());
    // At 22 s node 2 holds height 20, but its own block there: caught up, not agreeing.
    let mut own_tip = sample(22_000, 2, 20, "a", 0);
    let tip = own_tip.blocks.last_mut().unwrap();
    tip.hash = hash(20, "b");
    tip.state_root = root(20, "b");
    assert!(c.record(&own_tip).is_empty());
    assert!(c.summary().convergences.is_empty());
    // At 24 s every node is on one chain.
    for node in 0..3 {
        assert!(c.record(&sample(24_000, node, 22, "a", 0)).is_empty());
    }
    let summary = c.summary();
    assert_eq!(
        summary.convergences,
        vec![Convergence {
            total_ms: 3_500,
            sync_ms: 1_500,
            settle_ms: 2_000,
            blocks_missed: 10,
            after: Some(PerturbationKind::PartitionMinority),
        }]
    );
    assert_eq!(summary.convergence_ms, vec![3_500]);
    assert_eq!(summary.settle_p99_ms, Some(2_000));
}

#[test]
fn two_state_roots_for_one_block_fail() {
    let mut c = checker();
    assert!(clean_history(&mut c).is_empty());
    let mut bad = sample(21_000, 1, 20, "a", 5);
    bad.blocks.last_mut().unwrap().state_root = "root-other".into();
    let found = c.record(&bad);
    assert!(
        matches!(
            found.as_slice(),
            [Violation::StateRootMismatch { height: 20, first_node, root, .. }]
                if first_node.starts_with("node 0") && root == "root-other"
        ),
        "{found:?}"
    );
}

#[test]
fn two_blocks_at_a_finalized_height_fail_but_an_unfinalized_fork_does_not() {
    let mut c = checker();
    assert!(clean_history(&mut c).is_empty());
    // Node 2 was on its own branch above height 20: not finalized there, a fork only.
    let mut fork = sample(21_000, 2, 21, "a", 5);
    fork.finalized = 18;
    fork.blocks.last_mut().unwrap().hash = hash(21, "b");
    fork.blocks.last_mut().unwrap().state_root = root(21, "b");
    assert_eq!(c.record(&fork), vec![]);
    assert_eq!(c.record(&sample(21_100, 0, 23, "a", 5)), vec![]);
    let summary = c.summary();
    assert_eq!((summary.forks_seen, summary.forks_resolved), (1, 1));

    // A node reporting a different block at height 17, finalized everywhere.
    let mut conflict = sample(22_000, 1, 19, "a", 5);
    let at_17 = conflict.blocks.iter_mut().find(|b| b.height == 17).unwrap();
    at_17.hash = hash(17, "x");
    at_17.state_root = root(17, "x");
    let found = c.record(&conflict);
    assert_eq!(found.len(), 1, "{found:?}");
    let message = found[0].to_string();
    assert!(
        message.contains("height 17") && message.contains("a0017") && message.contains("x0017"),
        "{message}"
    );
}

#[test]
fn a_deposit_applied_twice_fails() {
    let mut c = checker();
    assert!(clean_history(&mut c).is_empty());
    let mut doubled = sample(21_000, 0, 21, "a", 5);
    doubled.balance_sum_gwei += u128::from(AMOUNT);
    let found = c.record(&doubled);
    assert!(
        matches!(
            found.as_slice(),
            [Violation::DepositDoubled { count: 5, expected_gwei, .. }]
                if *expected_gwei == GENESIS + 5 * u128::from(AMOUNT)
        ),
        "{found:?}"
    );
}

#[test]
fn the_genesis_balance_is_learned_from_a_state_without_deposits() {
    let mut c = Checker::new(vec!["a".into()], vec![true]);
    c.deposit_submitted(0, AMOUNT);
    assert_eq!(c.record(&sample(1, 0, 1, "a", 0)), vec![]);
    let mut doubled = sample(2, 0, 2, "a", 1);
    doubled.balance_sum_gwei += u128::from(AMOUNT);
    assert_eq!(c.record(&doubled)[0].kind(), "deposit_doubled");
}

#[test]
fn a_missing_deposit_fails_at_the_end_and_an_unknown_one_too() {
    let mut c = checker();
    assert!(clean_history(&mut c).is_empty());
    // Deposit 6 arrives before 5: the gap keeps the accepted count at 5.
    c.deposit_submitted(6, AMOUNT);
    assert_eq!(c.submitted(), 5);
    c.deposit_submitted(5, AMOUNT);
    assert_eq!(c.submitted(), 7);
    assert_eq!(c.record(&sample(21_000, 0, 21, "a", 7)), vec![]);
    assert_eq!(c.record(&sample(21_000, 1, 21, "a", 6)), vec![]);
    let mut beyond = sample(21_000, 2, 21, "a", 8);
    beyond.balance_sum_gwei = GENESIS;
    assert_eq!(c.record(&beyond), vec![]);

    let found = c.finish(false);
    let kinds: Vec<_> = found.iter().map(Violation::kind).collect();
    assert_eq!(kinds, ["deposit_lost", "deposit_unknown"], "{found:?}");
    assert!(found[0].to_string().contains("node 1"), "{}", found[0]);
}

#[test]
fn an_honest_node_banning_an_honest_node_fails_once() {
    let mut c = checker();
    let mut s = sample(1_000, 0, 1, "a", 0);
    s.banned = vec!["cccc2222".into(), "bbbb1111".into(), "unknown".into()];
    let found = c.record(&s);
    assert!(
        matches!(found.as_slice(), [Violation::HonestBan { node, banned }]
            if node.starts_with("node 0") && banned.starts_with("node 1")),
        "{found:?}"
    );
    assert_eq!(c.record(&s), vec![], "reported once");
    // The dishonest node banning an honest one is its own business.
    let mut by_bad = sample(1_000, 2, 1, "a", 0);
    by_bad.banned = vec!["aaaa0000".into()];
    assert_eq!(c.record(&by_bad), vec![]);
    assert_eq!(c.summary().bans, 4);
}

#[test]
fn exits_panics_errors_and_memory_are_checked() {
    let mut c = checker().with_rss_limit(1 << 30);
    assert_eq!(c.node_exited(0, true), vec![]);
    assert_eq!(c.node_exited(1, false)[0].kind(), "unexpected_exit");
    let panic = "thread 'main' panicked at host/src/node.rs:1:1:";
    assert_eq!(c.log_line(0, panic)[0].kind(), "panic");
    let coloured = "2026-11-26T14:00:00Z \u{1b}[31mERROR\u{1b}[0m modnode::chain: bad root";
    let found = c.log_line(2, coloured);
    assert!(
        matches!(found.as_slice(), [Violation::UnexplainedError { line, .. }]
            if !line.contains('\u{1b}')),
        "{found:?}"
    );
    assert_eq!(c.log_line(2, "INFO an ERROR in the message text"), vec![]);

    let mut big = sample(1, 0, 1, "a", 0);
    big.rss_bytes = Some(2 << 30);
    assert_eq!(c.record(&big)[0].kind(), "rss_over_limit");
    assert_eq!(c.record(&big), vec![], "reported once per node");
    assert_eq!(c.summary().violations_by_kind["rss_over_limit"], 1);
    assert_eq!(c.summary().violations.len(), 4);
}

#[test]
fn a_heal_without_convergence_fails_within_the_bound_or_at_the_end() {
    let mut c = checker().with_convergence_bound(5_000);
    c.heal_at(1_000);
    for at in [2_000, 4_000] {
        assert_eq!(c.record(&sample(at, 0, 10, "a", 0)), vec![]);
        // Node 1 on a branch of its own, not finalized.
        let mut fork = sample(at, 1, 10, "b", 0);
        fork.finalized = 0;
        assert_eq!(c.record(&fork), vec![]);
        assert_eq!(c.record(&sample(at, 2, 12, "a", 0)), vec![]);
    }
    let found = c.record(&sample(7_000, 0, 10, "a", 0));
    assert!(
        matches!(found.as_slice(), [Violation::NotConverged { heal_ms: 1_000, waited_ms: 6_000, heads }]
            if heads == "0=10 1=10 2=12"),
        "{found:?}"
    );
    // Node 1 comes over; node 2 is killed by the runner: converged without it.
    assert_eq!(c.record(&sample(8_000, 1, 11, "a", 0)), vec![]);
    assert_eq!(c.node_exited(2, true), vec![]);
    assert_eq!(c.record(&sample(9_000, 0, 10, "a", 0)), vec![]);
    assert_eq!(c.summary().convergence_ms, vec![8_000]);

    let mut late = checker();
    late.heal_at(0);
    assert_eq!(late.record(&sample(10, 0, 3, "a", 0)), vec![]);
    assert_eq!(late.finish(false), vec![]);
    assert_eq!(late.finish(true)[0].kind(), "not_converged");
}

#[test]
fn percentiles_use_the_nearest_rank() {
    assert_eq!(percentile(&[], 50), None);
    assert_eq!(percentile(&[7], 99), Some(7));
    let values: Vec<u64> = (1..=100).collect();
    assert_eq!(percentile(&values, 50), Some(50));
    assert_eq!(percentile(&values, 99), Some(99));
    assert_eq!(percentile(&values[..10], 99), Some(10));
}
