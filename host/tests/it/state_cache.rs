//! The state cache: regenerated roots, coalescing, eviction rules, byte accounting against the
//! allocator, and snapshots that do not change while blocks import.

use std::sync::{Arc, Barrier};

use modnode::chain::block::BlockHash;
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::workload::{self, DevDepositLog};
use modnode::chain::{Chain, DepositEngine};
use modnode::state::{NewValidator, Registry, RegistryDelta, State};
use modnode::state_cache::{StateCache, StateCacheConfig, StateSource};
use modnode::store::MemoryStore;

pub(crate) const ETH: u64 = 1_000_000_000;

pub(crate) fn engine() -> DepositEngine {
    DepositEngine::Native(Verification::Batched)
}

/// A chain of `blocks` blocks after genesis, each with two new validators; returns the chain,
/// the canonical hashes by height and the deposit contract log.
fn chain_with(blocks: u64, config: StateCacheConfig) -> (Chain, Vec<BlockHash>, DevDepositLog) {
    let mut chain = Chain::open(
        Arc::new(MemoryStore::new()),
        Genesis::generated("state-cache", 8, 3),
        engine(),
    )
    .unwrap();
    chain.configure_state_cache(config);
    let mut log = DevDepositLog::new();
    let mut hashes = vec![chain.head().hash];
    for height in 1..=blocks {
        import_next(&mut chain, &mut log, height);
        hashes.push(chain.head().hash);
    }
    (chain, hashes, log)
}

/// Builds and imports the next block with two new validators (seeded by `seed`).
pub(crate) fn import_next(chain: &mut Chain, log: &mut DevDepositLog, seed: u64) {
    for i in 0..2 {
        let seed = seed * 2 + i;
        log.push(workload::new_validator(seed, 32 * ETH, [0; 4]));
    }
    let slot = chain.head().slot + 1;
    let block = chain
        .build_block_from(slot, 0, log.eth1_data(), log)
        .unwrap();
    chain.import(&block).unwrap();
}

fn generous() -> StateCacheConfig {
    StateCacheConfig {
        max_bytes: 1 << 30,
        ..StateCacheConfig::default()
    }
}

#[test]
fn regenerated_roots_equal_stored_ones() {
    let (mut chain, hashes, _) = chain_with(9, generous());
    // A fresh cache holds only the head: every other state is replayed from genesis or from a
    // state an earlier request regenerated, within a budget of a few states.
    chain.configure_state_cache(StateCacheConfig {
        max_bytes: 2 << 20,
        anchor_every: 4,
        final_window: 64,
        anchors_kept: 64,
    });
    let states = chain.states();
    for (height, hash) in hashes.iter().enumerate().rev() {
        let block = chain.block_at(height as u64).unwrap().unwrap();
        let state = states.state(hash).unwrap();
        assert_eq!(state.root(), block.header.state_root, "height {height}");
        assert_eq!(state.height(), height as u64);
        assert_eq!(state.validator_count(), 8 + 2 * height as u32);
    }
    let metrics = states.metrics();
    assert!(metrics.regenerations >= 1, "{metrics:?}");
    assert!(metrics.evictions >= 1, "{metrics:?}");
    // A block that is not stored is the asker's error.
    assert!(matches!(
        states.state(&BlockHash::new([7; 32])),
        Err(modnode::state_cache::StateCacheError::UnknownBlock { .. })
    ));
}

#[test]
fn a_hundred_concurrent_requests_cause_one_replay() {
    let (mut chain, hashes, _) = chain_with(8, generous());
    chain.configure_state_cache(generous());
    let states = chain.states();
    let target = hashes[6];
    let expected = chain.block_at(6).unwrap().unwrap().header.state_root;
    let barrier = Arc::new(Barrier::new(100));
    let threads: Vec<_> = (0..100)
        .map(|_| {
            let states = states.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                states.state(&target).unwrap().root()
            })
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), expected);
    }
    let metrics = states.metrics();
    assert_eq!(metrics.regenerations, 1, "{metrics:?}");
    assert_eq!(metrics.replayed_blocks, 6, "{metrics:?}");
    // Every other request joined the replay or found its result cached.
    assert_eq!(metrics.coalesced + metrics.hits, 99, "{metrics:?}");
    // A descendant continues from the cached result: one more block, not seven.
    states.state(&hashes[7]).unwrap();
    assert_eq!(states.metrics().replayed_blocks, 7);
}

#[test]
fn eviction_never_drops_the_head_or_a_state_in_use() {
    let (mut chain, _, mut log) = chain_with(0, generous());
    chain.configure_state_cache(StateCacheConfig {
        max_bytes: 0,
        anchor_every: 1000,
        final_window: 64,
        anchors_kept: 64,
    });
    let states = chain.states();
    let mut held: Option<State> = None;
    let mut hashes = Vec::new();
    for height in 1..=8 {
        import_next(&mut chain, &mut log, height);
        hashes.push(chain.head().hash);
        let head = states.head();
        assert_eq!(head.block_hash(), chain.head().hash);
        assert_eq!(head.root(), chain.head().state_root);
        if height == 3 {
            held = Some(head);
        }
    }
    let held = held.unwrap();
    assert!(states.peek(&held.block_hash()).is_some(), "in use, kept");
    assert!(states.peek(&hashes[4]).is_none(), "neither head nor in use");
    drop(held);
    import_next(&mut chain, &mut log, 9);
    assert!(states.peek(&hashes[2]).is_none(), "released, evicted");
    assert_eq!(
        states.metrics().states,
        2,
        "the head and the genesis anchor"
    );
}

fn new_validator(tag: u32) -> NewValidator {
    let mut pubkey = [0u8; 48];
    pubkey[..4].copy_from_slice(&tag.to_le_bytes());
    pubkey[4] = 0xaa;
    NewValidator {
        pubkey,
        withdrawal_credentials: [0; 32],
        effective_balance: 32 * ETH,
        balance: 32 * ETH,
    }
}

#[test]
fn accounted_bytes_match_allocator_growth_within_ten_percent() {
    let genesis = Genesis::generated("accounting", 8, 1);
    let source = StateSource::new(Arc::new(MemoryStore::new()), genesis, engine());
    let mut registry = Registry::new();
    registry
        .apply(&RegistryDelta {
            added: (0..50_000).map(new_validator).collect(),
            balances: vec![],
        })
        .unwrap();
    let head = State::new(
        modnode::hashes::BlockHash::new([0; 32]),
        0,
        registry.clone(),
        Default::default(),
        Default::default(),
    );
    let cache = StateCache::new(
        StateCacheConfig {
            max_bytes: 24 << 20,
            anchor_every: 1 << 40,
            final_window: 1 << 40,
            anchors_kept: 0,
        },
        source,
        head.clone(),
    );
    cache.set_head(head, 0);
    let explained = |cache: &StateCache| {
        let m = cache.metrics();
        (m.accounted_bytes + m.head_bytes) as i64
    };
    // Everything below runs on this thread, so its allocator balance is the cache's growth
    // (plus the working registry's chunk tables, a few KiB).
    let before = (modnode::alloc_stats::thread_net_bytes(), explained(&cache));
    let mut next = 50_000u32;
    for height in 1..=400u64 {
        let delta = RegistryDelta {
            added: (next..next + 16).map(new_validator).collect(),
            balances: vec![(u32::try_from(height * 97).unwrap() % next, 33 * ETH)],
        };
        next += 16;
        registry.apply(&delta).unwrap();
        let mut block = [0u8; 32];
        block[..8].copy_from_slice(&height.to_le_bytes());
        cache.insert(State::new(
            BlockHash::new(block),
            height,
            registry.clone(),
            Default::default(),
            Default::default(),
        ));
    }
    let metrics = cache.metrics();
    assert!(metrics.evictions > 0, "filled past the budget: {metrics:?}");
    assert!(metrics.accounted_bytes <= 24 << 20, "{metrics:?}");
    let allocated = modnode::alloc_stats::thread_net_bytes() - before.0;
    let accounted = explained(&cache) - before.1;
    let gap = (allocated - accounted).abs() as f64 / allocated as f64;
    eprintln!("allocator +{allocated} B, accounted +{accounted} B, {metrics:?}");
    assert!(
        gap <= 0.10,
        "allocator grew {allocated} bytes, the cache accounted {accounted} ({:.1}% apart)",
        gap * 100.0
    );
}

#[test]
fn a_snapshot_is_unchanged_while_fifty_blocks_import() {
    let (mut chain, _, mut log) = chain_with(1, generous());
    let snapshot = chain.states().head();
    let (root, count) = (snapshot.root(), snapshot.validator_count());
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let snapshot = snapshot.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut reads = 0u32;
            loop {
                let registry_root = snapshot.registry().root();
                assert_eq!(
                    modnode::state::state_root(
                        &registry_root,
                        snapshot.eth1(),
                        snapshot.schedule()
                    ),
                    root.to_bytes()
                );
                assert_eq!(snapshot.validator_count(), count);
                assert_eq!(snapshot.validators(0, u32::MAX).count(), count as usize);
                reads += 1;
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    return reads;
                }
            }
        })
    };
    for height in 2..=51 {
        import_next(&mut chain, &mut log, height);
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(chain.head().height, 51);
    assert_eq!(snapshot.root(), root);
    assert_eq!(snapshot.validator_count(), count);
    assert_ne!(chain.head().state_root, root);
    drop(snapshot);
    assert!(reader.join().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_at_a_height_over_the_admin_api() {
    use modnode::admin::AdminError;
    use modnode::admin::client::{self, Target};

    let dir = tempfile::tempdir().unwrap();
    let genesis = super::network::genesis("state-query", &[dir.path()], 1);
    let node = super::network::start(dir.path(), &genesis, Vec::new()).await;
    super::network::eventually("three blocks", || node.status().height >= 3).await;
    let target = Target::data_dir(dir.path()).unwrap();

    let at_two = client::state(&target, "height=2&index=1").await.unwrap();
    assert_eq!(at_two["height"], 2);
    assert_eq!(at_two["validators"], 8);
    assert_eq!(at_two["validator"]["index"], 1);
    let pubkey = hex::encode(genesis.validators[1].pubkey);
    assert_eq!(at_two["validator"]["pubkey"], pubkey.as_str());
    let by_key = client::state(&target, &format!("height=2&pubkey=0x{pubkey}"))
        .await
        .unwrap();
    assert_eq!(by_key["validator"]["index"], 1);
    assert_eq!(by_key["state_root"], at_two["state_root"]);
    let head = client::state(&target, "").await.unwrap();
    assert!(head["height"].as_u64().unwrap() >= 3);

    for (query, status) in [
        ("height=999999", 404),
        ("height=x", 400),
        ("index=1&pubkey=00", 400),
    ] {
        match client::state(&target, query).await {
            Err(AdminError::Refused { status: got, .. }) => assert_eq!(got, status, "{query}"),
            other => panic!("{query}: {other:?}"),
        }
    }
    node.shutdown().await;
}

#[test]
fn a_side_branch_with_an_invalid_block_is_not_stored_relayed_or_counted() {
    use modnode::chain::block::{Block, BlockBody, BlockHeader, Seal};
    use modnode::chain::{Added, ForkChoiceError};
    use modnode::node::chain_worker::WorkerError;
    use modnode::node::verdict::gossip_block;
    use modnode::store::{KvStore, keys};

    let genesis = Genesis::generated("state-cache", 8, 3);
    let store = Arc::new(MemoryStore::new());
    let mut chain = Chain::open(store.clone(), genesis.clone(), engine()).unwrap();
    let mut log = DevDepositLog::new();
    for height in 1..=5 {
        import_next(&mut chain, &mut log, height);
    }
    // A second node shares blocks 1..=3, then builds its own 4' and 5' (later slots).
    let mut other = Chain::open(Arc::new(MemoryStore::new()), genesis, engine()).unwrap();
    for height in 1..=3 {
        other
            .import(&chain.block_at(height).unwrap().unwrap())
            .unwrap();
    }
    let mut side = Vec::new();
    for _ in 4..=5 {
        let slot = other.head().slot + 10;
        let block = other
            .build_block_from(slot, 0, log.eth1_data(), &log)
            .unwrap();
        other.import(&block).unwrap();
        side.push(block);
    }
    let head = chain.head();
    assert_eq!(chain.add_block(&side[0]).unwrap(), Added::Stored);

    // 5' with a wrong state root: executed on 4's cached state, refused, not stored.
    let mut bad = side[1].clone();
    bad.header.state_root = modnode::hashes::StateRoot::new([9; 32]);
    let result = chain.add_block(&bad);
    assert!(
        matches!(result, Err(ForkChoiceError::Invalid(_))),
        "{result:?}"
    );
    let verdict = gossip_block(5, &result.map_err(WorkerError::Block));
    assert!(!verdict.relay && verdict.penalty.is_some(), "{verdict:?}");
    assert!(store.get(&keys::block(&bad.hash())).unwrap().is_none());

    // 6' on top of it would make the longer branch: refused as part of an invalid branch.
    let body = BlockBody {
        eth1_vote: log.eth1_data(),
        deposits: Vec::new(),
        ..BlockBody::default()
    };
    let child = Block {
        header: BlockHeader {
            parent_hash: bad.hash(),
            height: 6,
            slot: bad.header.slot + 1,
            proposer: 0,
            state_root: modnode::hashes::StateRoot::new([0; 32]),
            body_root: body.root(),
        },
        body,
        seal: Seal::Unsigned,
    };
    let result = chain.add_block(&child);
    assert!(
        matches!(result, Err(ForkChoiceError::InvalidAncestor { .. })),
        "{result:?}"
    );
    assert!(!gossip_block(6, &result.map_err(WorkerError::Block)).relay);
    assert_eq!(chain.head(), head, "fork choice did not move");
}
