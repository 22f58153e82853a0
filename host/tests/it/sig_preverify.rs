//! deposits@3's signature pre-verifier (`chain::preverify`) on a real chain switching from
//! deposits-v2 to deposits-v3 at H: the same blocks imported by a follower without it and by one
//! with it end on the same roots at every height, and with it every epoch block that creates
//! validators answers its signature batch from the runtime's cache (no pairing on import). An
//! entry with an invalid signature is found invalid ahead of time, never cached, and the epoch
//! applies it one by one as without the pre-verifier.

use std::time::Duration;

use modnode::chain::Chain;
use modnode::chain::block::Block;
use modnode::chain::preverify::Preverifier;
use modnode::chain::workload::{self, DevDepositLog};
use modnode::crypto::SignatureSet;

use super::deposits_v3_chain::{H, Setup, fingerprint, open, open_switching_at_h, setup};

const ETH: u64 = 1_000_000_000;
/// Blocks the producer makes: H − 1 under v2, then four epochs of v3.
const BLOCKS: u64 = H + 16;

/// Blocks from a producer on its own runtime: `per_block` deposits each (slot = height); the
/// deposit numbered `bad` (if any, counting from 1) signed for another fork, so invalid under
/// the genesis domain.
fn produce(per_block: u64, bad: Option<u64>) -> Vec<Block> {
    let setup = setup();
    let dir = tempfile::tempdir().unwrap();
    let mut chain = open_switching_at_h(&setup, &dir.path().join("db"));
    let mut log = DevDepositLog::new();
    let mut seed = 0u64;
    let mut blocks = Vec::new();
    for _ in 0..BLOCKS {
        for _ in 0..per_block {
            seed += 1;
            let fork = if Some(seed) == bad { [9; 4] } else { [0; 4] };
            log.push(workload::new_validator(5000 + seed, 32 * ETH, fork));
        }
        let slot = chain.head().slot + 1;
        let block = chain
            .build_block_from(slot, 0, log.eth1_data(), &log)
            .unwrap();
        chain.import(&block).unwrap();
        blocks.push(block);
    }
    blocks
}

struct Follower {
    setup: Setup,
    chain: Chain,
    _dir: tempfile::TempDir,
}

fn follower(preverify: bool) -> Follower {
    let setup = setup();
    let dir = tempfile::tempdir().unwrap();
    let mut chain = open(&setup, &dir.path().join("db"));
    if preverify {
        chain.set_preverifier(Preverifier::spawn(setup.sig_cache()).unwrap());
    }
    Follower {
        setup,
        chain,
        _dir: dir,
    }
}

/// What one epoch block did with the cache of the pre-verified follower.
struct EpochBlock {
    height: u64,
    created: u32,
    answered_from_cache: u64,
    verified: u64,
}

/// Imports `blocks` on a plain follower and a pre-verified one (waiting for the pre-verifier
/// to be idle before each block, as a node has a slot between blocks); asserts equal state
/// after every block and returns the epoch blocks after H that created validators.
fn import_both(blocks: &[Block]) -> (Follower, Vec<EpochBlock>) {
    let mut plain = follower(false);
    let mut warm = follower(true);
    let cache = warm.setup.sig_cache();
    let genesis = warm.setup.genesis.clone();
    let mut epoch_blocks = Vec::new();
    let mut parent_slot = 0;
    let preverifier = warm.chain.preverifier().unwrap().clone();
    let wait_idle = || {
        assert!(
            preverifier.wait_idle(Duration::from_secs(60)),
            "the pre-verifier did not finish in a minute"
        );
    };
    for block in blocks {
        plain.chain.import(block).unwrap();
        wait_idle();
        let before = cache.stats();
        let checks_before = preverifier.stats().checks;
        let count_before = warm.chain.snapshot().validator_count();
        warm.chain.import(block).unwrap();
        // The import hands the pre-verifier the next entries as it ends, and the worker's
        // checks count in the same cache: wait for it, then leave its own checks out.
        wait_idle();
        let after = cache.stats();
        let worker_checks = preverifier.stats().checks - checks_before;
        let state = warm.chain.snapshot();
        assert_eq!(
            fingerprint(&state),
            fingerprint(&plain.chain.snapshot()),
            "height {}",
            block.header.height
        );
        let created = state.validator_count() - count_before;
        if block.header.height >= H && genesis.starts_epoch(parent_slot, block.header.slot) {
            epoch_blocks.push(EpochBlock {
                height: block.header.height,
                created,
                answered_from_cache: after.answered_from_cache - before.answered_from_cache,
                verified: after.verified - before.verified - worker_checks,
            });
        }
        parent_slot = block.header.slot;
    }
    (warm, epoch_blocks)
}

#[test]
fn pre_verified_epoch_blocks_answer_from_the_cache_with_the_same_roots() {
    let blocks = produce(2, None);
    let (warm, epoch_blocks) = import_both(&blocks);
    let creating: Vec<_> = epoch_blocks.iter().filter(|e| e.created > 0).collect();
    assert!(
        creating.len() >= 2,
        "epoch blocks creating validators: {}",
        creating.len()
    );
    for e in creating {
        assert_eq!(
            (e.answered_from_cache, e.verified),
            (1, 0),
            "epoch block {} ({} new validators): its batch from the cache, no pairing",
            e.height,
            e.created
        );
    }
    let stats = warm.chain.preverifier().unwrap().stats();
    assert_eq!(stats.invalid, 0);
    assert!(stats.valid > 0);
}

#[test]
fn an_invalid_queued_signature_is_not_cached_and_applies_one_by_one_as_before() {
    // Deposit 17 (two per block: height 9, after H) is signed for another fork.
    let bad = 17;
    let blocks = produce(2, Some(bad));
    let (warm, epoch_blocks) = import_both(&blocks);
    let preverifier = warm.chain.preverifier().unwrap();
    assert!(
        preverifier.stats().invalid >= 1,
        "{:?}",
        preverifier.stats()
    );
    let deposit = workload::new_validator(5000 + bad, 32 * ETH, [9; 4]);
    let root = deposit.signing_root(warm.setup.genesis.genesis_fork_version);
    assert!(!warm.setup.sig_cache().contains(&SignatureSet {
        pubkey: &deposit.pubkey,
        message: &root,
        signature: &deposit.signature,
    }));
    let state = warm.chain.snapshot();
    assert_eq!(
        state.index_of(&deposit.pubkey),
        None,
        "the invalid deposit created no validator"
    );
    // The epoch block holding it paired for real (its batch failed, then one by one).
    assert!(
        epoch_blocks.iter().any(|e| e.verified > 0 && e.created > 0),
        "no epoch block verified for real"
    );
}
