//! The sans-IO follower: ranges a follow distance behind, the adaptive page, and every log it
//! refuses (gaps, reorgs, foreign, out of range, malformed ABI, below 1 ETH).

use super::*;
use crate::deposit_source::abi::encode_deposit_event;

const CONTRACT: [u8; 20] = [7; 20];

fn config(distance: u64, max_blocks: u64) -> FollowerConfig {
    let mut config = FollowerConfig::new("http://127.0.0.1:1".into(), CONTRACT);
    config.follow_distance = distance;
    config.max_blocks_per_query = max_blocks;
    config
}

fn block(number: u64) -> Eth1Block {
    let hash = |n: u64| {
        let mut h = [0u8; 32];
        h[..8].copy_from_slice(&n.to_le_bytes());
        h[31] = 1;
        h
    };
    Eth1Block {
        number,
        hash: hash(number),
        parent_hash: number.checked_sub(1).map_or([0; 32], hash),
        timestamp: number,
    }
}

fn deposit(i: u64) -> DepositData {
    DepositData {
        pubkey: [i as u8; 48],
        withdrawal_credentials: [0; 32],
        amount: 32_000_000_000,
        signature: [0; 96],
    }
}

fn log(index: u64, block_number: u64) -> RawLog {
    RawLog {
        address: CONTRACT,
        topics: vec![deposit_event_topic()],
        data: encode_deposit_event(&deposit(index), index),
        block_number,
        block_hash: block(block_number).hash,
        removed: false,
        log_index: None,
        transaction_hash: None,
    }
}

#[test]
fn follows_a_distance_behind_in_bounded_ranges() {
    let mut f = Follower::new(&config(3, 4));
    assert_eq!(f.next_range(2), None);
    assert_eq!(f.next_range(3), Some(0..=0));
    assert_eq!(f.next_range(20), Some(0..=3));
    let got = f
        .handle_range(0..=3, &[log(0, 1), log(1, 1), log(2, 3)], block(3), None)
        .unwrap();
    assert_eq!(got.deposits, vec![deposit(0), deposit(1), deposit(2)]);
    assert_eq!((got.first_index, got.deposit_count), (0, 3));
    assert_eq!(got.block, block(3));
    assert_eq!(f.next_range(6), None);
    assert_eq!(f.next_range(7), Some(4..=4));
    let got = f
        .handle_range(4..=4, &[], block(4), Some(block(3)))
        .unwrap();
    assert_eq!((got.first_index, got.deposit_count), (3, 3));
    assert!(got.deposits.is_empty());
}

#[test]
fn a_gap_in_indices_is_an_error_naming_the_index_and_changes_nothing() {
    let mut f = Follower::new(&config(0, 100));
    f.handle_range(0..=1, &[log(0, 1)], block(1), None).unwrap();
    let err = f
        .handle_range(2..=5, &[log(1, 2), log(3, 4)], block(5), Some(block(1)))
        .unwrap_err();
    assert_eq!(
        err,
        FollowError::Gap {
            expected: 2,
            found: 3,
            block: 4
        }
    );
    assert!(err.to_string().contains("expected deposit index 2"));
    assert_eq!(f.next_index(), 1);
    assert_eq!(f.next_range(5), Some(2..=5));
    // A replayed index is a gap too.
    assert!(matches!(
        f.handle_range(2..=5, &[log(0, 2)], block(5), Some(block(1))),
        Err(FollowError::Gap {
            expected: 1,
            found: 0,
            ..
        })
    ));
}

#[test]
fn a_reorg_of_followed_blocks_is_an_error() {
    let mut f = Follower::new(&config(0, 100));
    f.handle_range(0..=2, &[log(0, 2)], block(2), None).unwrap();
    let mut changed = block(2);
    changed.hash = [9; 32];
    assert!(matches!(
        f.handle_range(3..=4, &[], block(4), Some(changed)),
        Err(FollowError::Reorg { number: 2, .. })
    ));
    let mut orphan = block(3);
    orphan.parent_hash = [8; 32];
    assert!(matches!(
        f.handle_range(3..=3, &[], orphan, Some(block(2))),
        Err(FollowError::Reorg { number: 2, .. })
    ));
    assert_eq!(f.last(), Some(block(2)));
}

#[test]
fn the_page_halves_on_refusal_down_to_one_block_and_grows_back_slowly() {
    let mut f = Follower::new(&config(0, 100));
    assert_eq!(f.next_range(1_000), Some(0..=99));
    let mut pages = vec![f.page()];
    while f.shrink_page() {
        pages.push(f.page());
    }
    assert_eq!(pages, vec![100, 50, 25, 13, 7, 4, 2, 1]);
    assert!(!f.shrink_page(), "one block is the floor");
    assert_eq!(f.next_range(1_000), Some(0..=0));
    // Each range read grows the page by a quarter, at least one block, up to the maximum.
    let mut grown = Vec::new();
    for n in 0..12u64 {
        let range = f.next_range(1_000).unwrap();
        let end = *range.end();
        let previous = n.checked_sub(1).map(|_| block(f.last().unwrap().number));
        f.handle_range(range, &[], block(end), previous).unwrap();
        grown.push(f.page());
    }
    assert_eq!(grown, vec![2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 18, 22]);
    for _ in 0..30 {
        let range = f.next_range(10_000).unwrap();
        let end = *range.end();
        let previous = Some(block(f.last().unwrap().number));
        f.handle_range(range, &[], block(end), previous).unwrap();
    }
    assert_eq!(f.page(), 100);
    // A refusal changes nothing else: the same blocks are asked for, fewer of them.
    let next = f.next_range(10_000).unwrap();
    f.shrink_page();
    assert_eq!(
        f.next_range(10_000),
        Some(*next.start()..=*next.start() + 49)
    );
}

#[test]
fn a_restored_follower_confirms_its_block_or_names_the_reorg() {
    let f = Follower::resume(&config(2, 100), block(7), 3);
    f.check_followed(Some(block(7))).unwrap();
    let mut changed = block(7);
    changed.hash = [9; 32];
    assert!(matches!(
        f.check_followed(Some(changed)),
        Err(FollowError::Reorg { number: 7, .. })
    ));
    assert!(matches!(
        f.check_followed(None),
        Err(FollowError::WrongBlock { asked: 7, .. })
    ));
    Follower::new(&config(2, 100)).check_followed(None).unwrap();
}

#[test]
fn a_head_going_back_is_reported_once_per_change_with_both_heights() {
    let mut f = Follower::new(&config(2, 100));
    assert_eq!(f.observe_head(10), None);
    assert_eq!(f.observe_head(12), None);
    assert_eq!(
        f.observe_head(7),
        Some(HeadWentBack {
            previous: 12,
            now: 7
        })
    );
    assert_eq!(
        f.observe_head(7),
        None,
        "a head that stays back is told once"
    );
    assert_eq!(
        f.observe_head(6),
        Some(HeadWentBack {
            previous: 7,
            now: 6
        })
    );
    assert_eq!(f.observe_head(13), None);
}

#[test]
fn a_deposit_below_one_eth_is_a_malformed_log_named_by_index_and_transaction() {
    for amount in [0, 999_999_999] {
        let mut f = Follower::new(&config(0, 100));
        let mut low = deposit(1);
        low.amount = amount;
        let mut bad = log(1, 2);
        bad.data = encode_deposit_event(&low, 1);
        bad.log_index = Some(3);
        bad.transaction_hash = Some([0xcd; 32]);
        let err = f
            .handle_range(0..=2, &[log(0, 1), bad], block(2), None)
            .unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, FollowError::LowAmount { block: 2, .. }),
            "{text}"
        );
        assert!(text.contains("log 3"), "{text}");
        assert!(text.contains(&"cd".repeat(32)), "{text}");
        assert!(text.contains(&format!("amount {amount} Gwei")), "{text}");
        assert_eq!(f.next_index(), 0, "nothing followed");
    }
    // The contract's minimum itself is a deposit.
    let mut f = Follower::new(&config(0, 100));
    let mut min = deposit(0);
    min.amount = 1_000_000_000;
    let mut ok = log(0, 1);
    ok.data = encode_deposit_event(&min, 0);
    assert_eq!(
        f.handle_range(0..=1, &[ok], block(1), None)
            .unwrap()
            .deposits,
        vec![min]
    );
}

#[test]
fn foreign_removed_out_of_range_and_malformed_logs_are_refused() {
    let mut f = Follower::new(&config(0, 100));
    let mut other = log(0, 1);
    other.address = [1; 20];
    assert!(matches!(
        f.handle_range(0..=2, &[other], block(2), None),
        Err(FollowError::Foreign { .. })
    ));
    let mut topic = log(0, 1);
    topic.topics = vec![[0; 32]];
    assert!(matches!(
        f.handle_range(0..=2, &[topic], block(2), None),
        Err(FollowError::Foreign { .. })
    ));
    let mut removed = log(0, 1);
    removed.removed = true;
    assert!(matches!(
        f.handle_range(0..=2, &[removed], block(2), None),
        Err(FollowError::Foreign { .. })
    ));
    assert!(matches!(
        f.handle_range(0..=2, &[log(0, 3)], block(2), None),
        Err(FollowError::OutOfRange { block: 3, .. })
    ));
    assert!(matches!(
        f.handle_range(0..=2, &[log(0, 2), log(1, 1)], block(2), None),
        Err(FollowError::OutOfRange { block: 1, .. })
    ));
    let mut short = log(0, 1);
    short.data.truncate(100);
    assert!(matches!(
        f.handle_range(0..=2, &[short], block(2), None),
        Err(FollowError::Abi { block: 1, .. })
    ));
    assert!(matches!(
        f.handle_range(0..=2, &[], block(1), None),
        Err(FollowError::WrongBlock { asked: 2, got: 1 })
    ));
    assert_eq!(f.next_index(), 0);
    assert_eq!(f.last(), None);
}
