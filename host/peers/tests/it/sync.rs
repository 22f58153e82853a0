//! `RangeSync`: end-to-end runs over the simulated network, and single behaviours.

use std::collections::BTreeSet;

use modnode_peers::{RangeSync, RequestId, SECONDS, SyncConfig, SyncError, Violation};

use crate::sync_sim::{Behaviour, Sim, SimPeer, bytes, hash, node};

const MS: u64 = 1_000;

#[test]
fn syncs_from_three_peers_despite_a_silent_and_a_lying_one() {
    let peers = vec![
        SimPeer::new(1, 1_000, 30 * MS, Behaviour::Honest),
        SimPeer::new(2, 1_000, 30 * MS, Behaviour::Silent),
        SimPeer::new(3, 1_000, 30 * MS, Behaviour::BadAt(150)),
    ];
    let mut sim = Sim::new(SyncConfig::default(), peers);
    sim.run(10_000);

    let log = &sim.log;
    assert!(sim.sync.is_synced());
    assert_eq!(
        log.imported,
        (1..=1_000).collect::<Vec<_>>(),
        "in order, exactly once"
    );
    // The bad block was handed out once, then the good one from someone else; nothing else
    // was handed out twice.
    assert_eq!(log.delivered.len(), 1_001);
    assert_eq!(log.delivered.iter().filter(|(h, _)| *h == 150).count(), 2);
    assert_eq!(
        log.delivered.iter().find(|(h, _)| *h == 150).map(|d| d.1),
        Some(node(3))
    );
    assert_eq!(
        log.violations,
        vec![(node(3), Violation::BadBlock { height: 150 })]
    );
    // The silent peer was asked, timed out, and its ranges were served by others.
    let silent: Vec<_> = log
        .requests
        .iter()
        .filter(|(_, r)| r.peer == node(2))
        .collect();
    assert!(!silent.is_empty());
    for (asked_at, request) in silent {
        let retry = log.requests.iter().find(|(at, r)| {
            r.start_height == request.start_height
                && r.peer != node(2)
                && *at >= asked_at + 10 * SECONDS
        });
        assert!(
            retry.is_some(),
            "range at {} not retried elsewhere",
            request.start_height
        );
    }
    assert!(log.delivered.iter().all(|(_, from)| *from != node(2)));
}

#[test]
fn pipelining_is_bounded_and_used() {
    let peers = (1..=5)
        .map(|n| SimPeer::new(n, 3_000, u64::from(n) * 7 * MS, Behaviour::Honest))
        .collect();
    let config = SyncConfig {
        max_in_flight_per_peer: 2,
        ..SyncConfig::default()
    };
    let mut sim = Sim::new(config, peers);
    sim.run(10_000);
    assert_eq!(sim.log.imported.len(), 3_000);
    assert_eq!(sim.log.max_in_flight, 4, "pipelined, never more than M = 4");
    assert!(sim.log.max_in_flight_per_peer <= 2);
    assert!(sim.log.requests.iter().all(|(_, r)| r.count <= 64));
    assert_eq!(
        sim.log.requests.iter().map(|(_, r)| r.count).sum::<u64>(),
        3_000,
        "no height requested twice"
    );
    let used: BTreeSet<_> = sim.log.requests.iter().map(|(_, r)| r.peer).collect();
    assert!(used.len() >= 3, "requests spread over peers: {used:?}");
}

#[test]
fn in_flight_ranges_are_disjoint_and_within_lookahead() {
    let peers = vec![
        // The slow peer gets the first range; everything else piles up behind it.
        SimPeer::new(1, 2_000, 9 * SECONDS, Behaviour::Honest),
        SimPeer::new(2, 2_000, 10 * MS, Behaviour::Honest),
    ];
    let config = SyncConfig {
        lookahead: 256,
        ..SyncConfig::default()
    };
    let mut sim = Sim::new(config, peers);
    for _ in 0..5_000 {
        let head = sim.sync.status().head_height;
        sim.issue_requests();
        for (_, request) in sim.log.requests.iter().filter(|(at, _)| *at == sim.now) {
            assert!(request.start_height + request.count - 1 <= head + 256);
        }
        // Answers not yet delivered are exactly the requests in flight; they must not overlap.
        let mut ranges: Vec<_> = sim
            .pending
            .iter()
            .map(|(_, r)| (r.start_height, r.start_height + r.count))
            .collect();
        ranges.sort();
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "{ranges:?}");
        assert!(sim.sync.status().buffered <= 256);
        if sim.sync.is_synced() || !sim.step() {
            break;
        }
    }
    assert_eq!(sim.log.imported, (1..=2_000).collect::<Vec<_>>());
}

#[test]
fn partial_answer_leaves_the_rest_to_request_again() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_peer_status(node(1), 100, hash(100), 0);
    let first = sync.poll_request(0).unwrap();
    assert_eq!((first.start_height, first.count), (1, 64));
    let second = sync.poll_request(0).unwrap();
    assert_eq!((second.start_height, second.count), (65, 36));
    assert!(sync.poll_request(0).is_none(), "nothing left to ask for");

    // The second range arrives first; then only 10 blocks of the first.
    let tail = (65..=100).map(|h| (h, hash(h), bytes(h))).collect();
    sync.handle_blocks(node(1), second.id, tail).unwrap();
    let ten = (1..=10).map(|h| (h, hash(h), bytes(h))).collect();
    sync.handle_blocks(node(1), first.id, ten).unwrap();
    let rest = sync.poll_request(0).unwrap();
    assert_eq!((rest.start_height, rest.count), (11, 54));
    for h in 1..=10 {
        assert_eq!(sync.poll_ready_block(), Some((h, bytes(h), node(1))));
        assert_eq!(sync.poll_ready_block(), None, "one block at a time");
        sync.handle_imported(h, hash(h));
    }
    assert_eq!(sync.poll_ready_block(), None);
}

#[test]
fn block_at_the_importer_is_neither_requested_again_nor_handed_out_twice() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_peer_status(node(1), 3, hash(3), 0);
    sync.handle_peer_status(node(2), 3, hash(3), 0);
    let request = sync.poll_request(0).unwrap();
    sync.handle_blocks(node(1), request.id, vec![(1, hash(1), bytes(1))])
        .unwrap();
    // Block 1 is with the importer; the rest of the range is requested, block 1 is not.
    assert_eq!(sync.poll_ready_block(), Some((1, bytes(1), node(1))));
    let rest = sync.poll_request(0).unwrap();
    assert_eq!((rest.peer, rest.start_height, rest.count), (node(1), 2, 2));
    sync.handle_blocks(
        rest.peer,
        rest.id,
        vec![(2, hash(2), bytes(2)), (3, hash(3), bytes(3))],
    )
    .unwrap();
    assert_eq!(
        sync.poll_ready_block(),
        None,
        "block 2 waits for block 1's import"
    );
    // Block 1 is rejected: everything from its peer goes (2 and 3 too), and the range is
    // asked of the other peer.
    sync.handle_import_failed(1, node(1));
    assert_eq!(
        sync.poll_violation(),
        Some((node(1), Violation::BadBlock { height: 1 }))
    );
    let again = sync.poll_request(0).unwrap();
    assert_eq!(
        (again.peer, again.start_height, again.count),
        (node(2), 1, 3)
    );
    assert_eq!(sync.poll_ready_block(), None);
}

#[test]
fn malformed_answer_is_a_violation_and_the_range_moves_on() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_peer_status(node(1), 64, hash(64), 0);
    sync.handle_peer_status(node(2), 64, hash(64), 0);
    let request = sync.poll_request(0).unwrap();
    assert_eq!(request.peer, node(1));
    let skewed = (2..=5).map(|h| (h, hash(h), bytes(h))).collect();
    sync.handle_blocks(node(1), request.id, skewed).unwrap();
    assert!(matches!(
        sync.poll_violation(),
        Some((peer, Violation::InvalidBlocks { .. })) if peer == node(1)
    ));
    // Ignored until it disconnects.
    sync.handle_peer_status(node(1), 64, hash(64), 1);
    assert_eq!(sync.status().peers, 1);
    let retry = sync.poll_request(1).unwrap();
    assert_eq!((retry.peer, retry.start_height), (node(2), 1));

    assert_eq!(sync.status().buffered, 0);
}

/// Found by the multi-process testnet: an honest peer's head moves to a sibling
/// block at the same height after its status (fork choice breaks ties to the lower hash), so
/// its answer's block at the claimed height has another hash. That is a stale claim, not a
/// lie: no violation (a ban of an honest node), the claim is forgotten until its next status
/// and the range is asked again.
#[test]
fn a_head_that_moved_to_a_sibling_after_the_status_is_a_stale_claim_not_a_violation() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_peer_status(node(2), 64, hash(64), 0);
    let request = sync.poll_request(0).unwrap();
    assert_eq!((request.peer, request.start_height), (node(2), 1));
    let mut moved: Vec<_> = (1..=64).map(|h| (h, hash(h), bytes(h))).collect();
    moved[63].1 = [9; 32];
    sync.handle_blocks(node(2), request.id, moved).unwrap();
    assert_eq!(sync.poll_violation(), None);
    assert_eq!(sync.status().buffered, 0, "the stale answer is not used");
    assert_eq!(sync.status().peers, 0, "the stale claim is forgotten");
    // Its next status counts again, and the range is asked again.
    sync.handle_peer_status(node(2), 64, [9; 32], 1);
    let retry = sync.poll_request(1).unwrap();
    assert_eq!((retry.peer, retry.start_height), (node(2), 1));
}

#[test]
fn stale_and_misaddressed_answers_are_refused() {
    let config = SyncConfig {
        request_timeout: 5 * SECONDS,
        ..SyncConfig::default()
    };
    let mut sync = RangeSync::new(config, 0, hash(0)).unwrap();
    sync.handle_peer_status(node(1), 10, hash(10), 0);
    sync.handle_peer_status(node(2), 10, hash(10), 0);
    let request = sync.poll_request(0).unwrap();
    let blocks = || (1..=10).map(|h| (h, hash(h), bytes(h))).collect::<Vec<_>>();
    assert_eq!(
        sync.handle_blocks(node(2), request.id, blocks()),
        Err(SyncError::WrongPeer {
            id: request.id,
            expected: node(1),
            actual: node(2)
        })
    );
    assert_eq!(sync.poll_timeout(), Some(5 * SECONDS));
    let retry = sync.poll_request(5 * SECONDS).unwrap();
    assert_eq!(
        (retry.peer, retry.start_height),
        (node(2), 1),
        "timed out: retried elsewhere"
    );
    assert_eq!(
        sync.handle_blocks(node(1), request.id, blocks()),
        Err(SyncError::UnknownRequest { id: request.id })
    );
    assert_eq!(
        sync.handle_request_failed(node(1), RequestId(99), 5 * SECONDS),
        Err(SyncError::UnknownRequest { id: RequestId(99) })
    );
    // A failed request goes to the other peer, once its back-off after the timeout is over.
    sync.handle_request_failed(node(2), retry.id, 5 * SECONDS)
        .unwrap();
    assert_eq!(
        sync.poll_request(5 * SECONDS),
        None,
        "both peers backed off"
    );
    let third = sync.poll_request(6 * SECONDS).unwrap();
    assert_eq!((third.peer, third.start_height), (node(1), 1));
}

#[test]
fn a_lone_peer_that_failed_is_tried_again_after_a_growing_backoff() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_peer_status(node(1), 10, hash(10), 0);
    let request = sync.poll_request(0).unwrap();
    sync.handle_request_failed(node(1), request.id, 0).unwrap();
    assert_eq!(sync.poll_violation(), None, "a failure is no violation");
    assert_eq!(sync.poll_request(0), None, "asked again at once");
    assert_eq!(
        sync.poll_timeout(),
        Some(SECONDS),
        "the back-off is a timer"
    );
    let again = sync.poll_request(SECONDS).unwrap();
    assert_eq!((again.peer, again.start_height), (node(1), 1));
    // A second failure doubles the back-off; an import of a block it served resets it.
    sync.handle_request_failed(node(1), again.id, SECONDS)
        .unwrap();
    assert_eq!(sync.poll_request(2 * SECONDS), None);
    let third = sync.poll_request(3 * SECONDS).unwrap();
    sync.handle_blocks(node(1), third.id, vec![(1, hash(1), bytes(1))])
        .unwrap();
    assert_eq!(sync.poll_ready_block().map(|b| b.0), Some(1));
    sync.handle_imported(1, hash(1));
    assert!(!sync.is_backed_off(&node(1), 3 * SECONDS));
}

/// A block the importer cannot take for a reason that is not proven the
/// peer's (it would be refused again at once) is asked for again only after a back-off, not
/// in a loop of range requests and imports as fast as the peer answers.
#[test]
fn an_aborted_import_backs_off_from_its_peer_instead_of_looping() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_peer_status(node(1), 10, hash(10), 0);
    let mut now = 0;
    let mut requests = 0;
    // Ten virtual seconds of a peer answering at once with a block that is aborted every time.
    while now < 10 * SECONDS {
        while let Some(request) = sync.poll_request(now) {
            requests += 1;
            let blocks = (request.start_height..request.start_height + request.count)
                .map(|h| (h, hash(h), bytes(h)))
                .collect();
            sync.handle_blocks(request.peer, request.id, blocks)
                .unwrap();
        }
        if let Some((height, _, peer)) = sync.poll_ready_block() {
            sync.handle_import_aborted(height, peer, now);
        }
        // The peer answers within 10 ms.
        now += 10 * MS;
        sync.handle_time(now);
    }
    assert!(
        requests <= 6,
        "{requests} range requests in 10 s to a peer whose block is always aborted"
    );
}

/// A claim the peer then does not serve twice in a row is a lie: the first empty answer might be
/// an honest head that went back (a void slot reverts it), the second is not believed.
#[test]
fn an_empty_answer_to_a_claimed_range_is_a_violation_and_the_liar_is_not_asked_again() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_peer_status(node(1), u64::MAX, [0xee; 32], 0);
    let request = sync.poll_request(0).unwrap();
    assert_eq!(request.peer, node(1));
    sync.handle_blocks(node(1), request.id, Vec::new()).unwrap();
    assert_eq!(
        sync.poll_violation(),
        None,
        "one empty answer may be a stale claim"
    );
    assert_eq!(sync.target(), None, "the unserved claim is dropped");
    // It claims the same again and serves nothing again.
    sync.handle_peer_status(node(1), u64::MAX, [0xee; 32], SECONDS);
    let request = sync.poll_request(SECONDS).unwrap();
    assert_eq!(request.peer, node(1));
    sync.handle_blocks(node(1), request.id, Vec::new()).unwrap();
    assert!(
        matches!(
            sync.poll_violation(),
            Some((peer, Violation::UnservedClaim { .. })) if peer == node(1)
        ),
        "a claim the peer does not serve twice is a violation"
    );
    assert_eq!(sync.target(), None, "the unserved claim is dropped");
    assert_eq!(
        sync.poll_request(2 * SECONDS),
        None,
        "the liar is not asked again"
    );
    // Its next status report is not believed either (until it reconnects).
    sync.handle_peer_status(node(1), u64::MAX, [0xee; 32], 3 * SECONDS);
    assert_eq!(sync.poll_request(4 * SECONDS), None);
    assert!(sync.is_synced());
}

/// An honest peer's head can go back: a slot found void (its authority equivocated) reverts
/// the blocks built on it. Asked for heights it claimed before that, it answers empty; that is
/// a stale claim, not a lie. Its next, lower claim is served and counts as usual.
#[test]
fn an_honest_peer_whose_head_went_back_answers_empty_once_and_is_not_banned() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    // Synced to 10 from the peer.
    sync.handle_peer_status(node(1), 10, hash(10), 0);
    let request = sync.poll_request(0).unwrap();
    sync.handle_blocks(
        node(1),
        request.id,
        (1..=10).map(|h| (h, hash(h), bytes(h))).collect(),
    )
    .unwrap();
    for h in 1..=10 {
        let (height, _, peer) = sync.poll_ready_block().unwrap();
        assert_eq!((height, peer), (h, node(1)));
        sync.handle_imported(h, hash(h));
    }
    // It claims 12; by the time it is asked, its head went back to 10.
    sync.handle_peer_status(node(1), 12, hash(12), SECONDS);
    let request = sync.poll_request(SECONDS).unwrap();
    assert_eq!(request.start_height, 11);
    sync.handle_blocks(node(1), request.id, Vec::new()).unwrap();
    assert_eq!(sync.poll_violation(), None, "an honest head went back");
    // It grows again and serves what it claims: nothing held against it.
    sync.handle_peer_status(node(1), 11, [0x11; 32], 2 * SECONDS);
    let request = sync.poll_request(2 * SECONDS).unwrap();
    assert_eq!((request.peer, request.start_height), (node(1), 11));
    sync.handle_blocks(node(1), request.id, vec![(11, [0x11; 32], bytes(11))])
        .unwrap();
    assert_eq!(sync.poll_violation(), None);
    // Later, another head going back is again one stale claim, not a lie.
    sync.handle_peer_status(node(1), 13, hash(13), 3 * SECONDS);
    let request = sync.poll_request(3 * SECONDS).unwrap();
    sync.handle_blocks(node(1), request.id, Vec::new()).unwrap();
    assert_eq!(sync.poll_violation(), None);
}

#[test]
fn claimed_heights_are_bounded() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_height_bound(100);
    sync.handle_peer_status(node(1), u64::MAX, [0xee; 32], 0);
    assert_eq!(sync.target().map(|(h, _)| h), Some(100));
    let requests: Vec<_> = std::iter::from_fn(|| sync.poll_request(0)).collect();
    let end = requests
        .iter()
        .map(|r| r.start_height + r.count - 1)
        .max()
        .unwrap();
    assert_eq!(end, 100, "nothing beyond the bound is requested");
    // The bound moves with the clock; a capped claim follows it.
    sync.handle_height_bound(150);
    assert_eq!(sync.target().map(|(h, _)| h), Some(150));
}

#[test]
fn target_is_the_highest_head_with_ties_to_the_lower_hash() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    assert!(sync.is_synced());
    sync.handle_peer_status(node(1), 50, [7; 32], 0);
    sync.handle_peer_status(node(2), 50, [3; 32], 0);
    sync.handle_peer_status(node(3), 40, [1; 32], 0);
    assert_eq!(sync.target(), Some((50, [3; 32])));
    sync.handle_peer_status(node(3), 51, [9; 32], 0);
    assert_eq!(sync.target(), Some((51, [9; 32])));
    sync.handle_peer_disconnected(node(3));
    assert_eq!(sync.target(), Some((50, [3; 32])));
    assert!(!sync.is_synced());
}

#[test]
fn ranges_only_go_to_peers_that_claim_them() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_peer_status(node(1), 30, hash(30), 0);
    sync.handle_peer_status(node(2), 200, hash(200), 0);
    let requests: Vec<_> = std::iter::from_fn(|| sync.poll_request(0)).collect();
    assert_eq!(requests.len(), 4);
    for request in &requests {
        if request.peer == node(1) {
            assert!(request.start_height + request.count - 1 <= 30);
        }
    }
    assert_eq!(
        requests.iter().map(|r| r.count).sum::<u64>(),
        200,
        "the short peer's range ends at its head; the rest covers up to the target"
    );
}

#[test]
fn import_from_elsewhere_skips_ahead() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_peer_status(node(1), 1_000, hash(1_000), 0);
    let first = sync.poll_request(0).unwrap();
    sync.handle_blocks(
        node(1),
        first.id,
        (1..=64).map(|h| (h, hash(h), bytes(h))).collect(),
    )
    .unwrap();
    // Gossip delivered up to 100 meanwhile.
    sync.handle_imported(100, hash(100));
    assert_eq!(sync.status().buffered, 0);
    assert_eq!(sync.poll_ready_block(), None);
    let requests: Vec<_> = std::iter::from_fn(|| sync.poll_request(0)).collect();
    assert!(requests.iter().all(|r| r.start_height > 100));
    assert_eq!(sync.status().head_height, 100);
    // Older heights are ignored (no reorgs).
    sync.handle_imported(50, hash(50));
    assert_eq!(sync.status().head_hash, hash(100));
}

#[test]
fn config_is_validated() {
    let zero = SyncConfig {
        batch_size: 0,
        ..SyncConfig::default()
    };
    assert!(RangeSync::new(zero, 0, hash(0)).is_err());
    let short = SyncConfig {
        lookahead: 10,
        ..SyncConfig::default()
    };
    assert!(RangeSync::new(short, 0, hash(0)).is_err());
}

#[test]
fn a_pruned_answer_sends_the_range_elsewhere_without_a_violation_or_back_off() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_peer_status(node(1), 1_000, [0xee; 32], 0);
    let request = sync.poll_request(0).unwrap();
    assert_eq!((request.peer, request.start_height), (node(1), 1));
    // Node 1 keeps heights 900 and up only.
    sync.handle_pruned(node(1), request.id, 900).unwrap();
    assert_eq!(sync.poll_violation(), None, "pruning is not a violation");
    assert!(
        !sync.is_backed_off(&node(1), 0),
        "nor a failure to back off from"
    );
    assert_eq!(
        sync.target().map(|(h, _)| h),
        Some(1_000),
        "its claim stands"
    );
    // Nobody else claims height 1: nothing to ask, and the driver learns why.
    assert_eq!(sync.poll_request(0), None);
    assert_eq!(sync.pruned_everywhere(), Some(1));
    // Its floor survives its next status; a peer keeping everything gets the range.
    sync.handle_peer_status(node(1), 1_001, [0xef; 32], 0);
    assert_eq!(sync.poll_request(0), None);
    sync.handle_peer_status(node(2), 1_000, [0xee; 32], 0);
    assert_eq!(sync.pruned_everywhere(), None);
    let retry = sync.poll_request(0).unwrap();
    assert_eq!((retry.peer, retry.start_height), (node(2), 1));
    let blocks = (1..=retry.count).map(|h| (h, hash(h), bytes(h))).collect();
    sync.handle_blocks(node(2), retry.id, blocks).unwrap();
    // Heights the pruned peer keeps are asked of it again once the head gets there.
    while let Some((height, _, _)) = sync.poll_ready_block() {
        sync.handle_imported(height, hash(height));
    }
    assert_eq!(sync.status().head_height, 64);
    sync.handle_peer_disconnected(node(2));
    assert_eq!(sync.poll_request(0), None, "65 is below node 1's floor");
}

#[test]
fn a_pruned_answer_that_does_not_cover_the_start_is_a_violation() {
    let mut sync = RangeSync::new(SyncConfig::default(), 0, hash(0)).unwrap();
    sync.handle_peer_status(node(1), 1_000, [0xee; 32], 0);
    let request = sync.poll_request(0).unwrap();
    // "I keep heights 1 and up" as the answer to a request for height 1: a refusal.
    sync.handle_pruned(node(1), request.id, 1).unwrap();
    assert!(matches!(
        sync.poll_violation(),
        Some((peer, Violation::InvalidBlocks { .. })) if peer == node(1)
    ));
}
