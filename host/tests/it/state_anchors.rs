//! Persisted state anchors: after a restart a state far below the head is rebuilt from the
//! anchors in the store with a replay of at most `anchor_every` blocks; a damaged anchor costs
//! time, never a wrong state. And a reorg onto a branch executed on arrival adopts its cached
//! states instead of running the blocks again.

use std::sync::Arc;

use modnode::chain::block::BlockHash;
use modnode::chain::genesis::Genesis;
use modnode::chain::workload::{self, DevDepositLog};
use modnode::chain::{Added, Chain};
use modnode::state_cache::StateCacheConfig;
use modnode::state_cache::anchors::TREE;
use modnode::store::{KvStore, MemoryStore, SledStore, WriteBatch};

use crate::state_cache::{ETH, engine, import_next};

/// Anchors every this many heights in these tests (the default).
const K: u64 = 32;

fn genesis() -> Genesis {
    Genesis::generated("state-anchors", 8, 3)
}

/// Imports `blocks` blocks, each with a new validator and a top-up of an older one (so the
/// anchors carry balances, not only validator counts); returns the canonical hashes by height.
fn grow(chain: &mut Chain, log: &mut DevDepositLog, blocks: u64) -> Vec<BlockHash> {
    let mut hashes = vec![chain.head().hash];
    for height in 1..=blocks {
        let state = chain.snapshot();
        let older = u32::try_from(height).unwrap() % state.validator_count();
        let pubkey = state.validator(older).unwrap().0.pubkey;
        log.push(workload::unsigned(pubkey, ETH));
        log.push(workload::new_validator(1000 + height, 32 * ETH, [0; 4]));
        let slot = chain.head().slot + 1;
        let block = chain
            .build_block_from(slot, 0, log.eth1_data(), log)
            .unwrap();
        chain.import(&block).unwrap();
        hashes.push(block.hash());
    }
    hashes
}

/// Asks a fresh cache (nothing but the head cached, like after a restart) for the state at
/// `height`: the stored root, from an anchor at most `K` blocks below.
fn check_regenerated(chain: &mut Chain, hashes: &[BlockHash], height: u64) {
    chain.configure_state_cache(StateCacheConfig::default());
    let states = chain.states();
    let state = states.state(&hashes[height as usize]).unwrap();
    let block = chain.block_at(height).unwrap().unwrap();
    assert_eq!(state.root(), block.header.state_root, "height {height}");
    let metrics = states.metrics();
    assert_eq!(metrics.anchors_loaded, 1, "{metrics:?}");
    assert_eq!(metrics.replayed_blocks, height % K, "{metrics:?}");
}

#[test]
fn a_restarted_node_rebuilds_a_state_far_below_its_head_from_a_persisted_anchor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let hashes = {
        let store = Arc::new(SledStore::open(&path).unwrap());
        let mut chain = Chain::open(store, genesis(), engine()).unwrap();
        grow(&mut chain, &mut DevDepositLog::new(), 170)
    };
    // Restarted on the same directory: only the head is in memory.
    let store = Arc::new(SledStore::open(&path).unwrap());
    let chain = Chain::open(store, genesis(), engine()).unwrap();
    assert_eq!(chain.head().hash, hashes[170]);
    // 130 blocks below the head (the in-memory limit was 128): anchor 32, then 8 blocks.
    let states = chain.states();
    let state = states.state(&hashes[40]).unwrap();
    let block = chain.block_at(40).unwrap().unwrap();
    assert_eq!(state.root(), block.header.state_root);
    assert_eq!(state.validator_count(), 8 + 40);
    let metrics = states.metrics();
    assert_eq!(metrics.anchors_loaded, 1, "{metrics:?}");
    assert_eq!(metrics.replayed_blocks, 8, "{metrics:?}");
    assert!(metrics.replayed_blocks <= K);
    // Every height of a span regenerates right from the same anchor.
    for height in [32, 33, 63, 64, 100, 129] {
        let state = states.state(&hashes[height]).unwrap();
        let block = chain.block_at(height as u64).unwrap().unwrap();
        assert_eq!(state.root(), block.header.state_root, "height {height}");
    }
}

#[test]
fn a_damaged_anchor_costs_time_never_a_wrong_state() {
    let store = Arc::new(MemoryStore::new());
    let mut chain = Chain::open(store.clone(), genesis(), engine()).unwrap();
    let hashes = grow(&mut chain, &mut DevDepositLog::new(), 140);
    let anchors = store.tree(TREE).unwrap();
    let key = |height: u64| height.to_be_bytes().to_vec();
    // Finalized at 108: anchors 0, 32 and 64 have their K blocks above final.
    for height in [0, 32, 64] {
        assert!(anchors.get(&key(height)).unwrap().is_some(), "{height}");
    }
    assert!(anchors.get(&key(96)).unwrap().is_none());
    check_regenerated(&mut chain, &hashes, 40);

    // The record at 64 decodes but says the registry had two validators fewer: the rebuilt
    // root does not match, so the anchor is rebuilt from the per-block undo records.
    let mut wrong = anchors.get(&key(64)).unwrap().unwrap();
    let count = u32::from_le_bytes(wrong[65..69].try_into().unwrap());
    wrong[65..69].copy_from_slice(&(count - 2).to_le_bytes());
    // The record at 32 is garbage: skipped for the undo records of its span.
    let mut batch = WriteBatch::new();
    batch.put(key(64), wrong);
    batch.put(key(32), vec![1, 2, 3]);
    anchors.commit(&batch).unwrap();
    check_regenerated(&mut chain, &hashes, 40);
    check_regenerated(&mut chain, &hashes, 70);

    // Keeping one anchor below finality (108): the records below 64 are pruned.
    chain.configure_state_cache(StateCacheConfig {
        anchors_kept: 1,
        ..StateCacheConfig::default()
    });
    assert!(anchors.get(&key(0)).unwrap().is_none());
    assert!(anchors.get(&key(32)).unwrap().is_none());
    assert!(anchors.get(&key(64)).unwrap().is_some());
}

#[test]
fn a_reorg_onto_an_executed_branch_adopts_its_cached_states() {
    let store = Arc::new(MemoryStore::new());
    let mut chain = Chain::open(store, genesis(), engine()).unwrap();
    let mut log = DevDepositLog::new();
    for height in 1..=4 {
        import_next(&mut chain, &mut log, height);
    }
    // Another node shares blocks 1 and 2, then builds a longer branch 3'..6' (later slots).
    let mut other = Chain::open(Arc::new(MemoryStore::new()), genesis(), engine()).unwrap();
    for height in 1..=2 {
        other
            .import(&chain.block_at(height).unwrap().unwrap())
            .unwrap();
    }
    let mut branch = Vec::new();
    for _ in 3..=6 {
        let slot = other.head().slot + 10;
        let block = other
            .build_block_from(slot, 0, log.eth1_data(), &log)
            .unwrap();
        other.import(&block).unwrap();
        branch.push(block);
    }
    let mut adopted = 0;
    for block in &branch {
        let executed = chain.executed_blocks();
        match chain.add_block(block).unwrap() {
            Added::Stored => {}
            // Extending the head after the reorg (if a tie already reorganised) runs the block.
            Added::Extended(_) => {}
            // The reorg imported every branch block above the common ancestor, and ran no
            // transition: each was executed once, on arrival, and import adopted its state.
            Added::Reorganised { head, .. } => {
                assert_eq!(chain.executed_blocks(), executed);
                adopted = head.height - 2;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(adopted >= 2, "no reorg adopted the branch");
    assert_eq!(chain.head(), other.head());
    assert_eq!(chain.snapshot().root(), branch[3].header.state_root);
    // The store agrees: a restart-free reopen of the same state is the cached one.
    assert_eq!(
        chain.snapshot().validator_count(),
        other.snapshot().validator_count()
    );
}

#[test]
fn a_chain_started_from_a_checkpoint_persists_anchors_from_its_base_up() {
    // The source chain, 200 blocks; the checkpoint is taken at 50 (not an anchor height).
    let mut source = Chain::open(Arc::new(MemoryStore::new()), genesis(), engine()).unwrap();
    let hashes = grow(&mut source, &mut DevDepositLog::new(), 200);
    let base = source.states().state(&hashes[50]).unwrap();
    let base_block = source.block_at(50).unwrap().unwrap();

    let store = Arc::new(MemoryStore::new());
    modnode::chain::init_from_checkpoint(
        store.as_ref(),
        &genesis(),
        &modnode::chain::CheckpointStart {
            block: &base_block,
            registry: base.registry(),
            eth1: base.eth1(),
            schedule: base.schedule(),
            pending: base.pending(),
        },
    )
    .unwrap();
    let mut chain = Chain::open(store.clone(), genesis(), engine()).unwrap();
    for height in 51..=200 {
        let block = source.block_at(height).unwrap().unwrap();
        chain.import(&block).unwrap();
    }
    assert_eq!(chain.head().hash, hashes[200]);
    // Finalized at 168. Blocks below 51 are not stored, so the first anchor is the first
    // multiple of K above the base: 64, then 96 and 128.
    let anchors = store.tree(TREE).unwrap();
    let key = |height: u64| height.to_be_bytes().to_vec();
    for height in [64, 96, 128] {
        assert!(
            anchors.get(&key(height)).unwrap().is_some(),
            "anchor {height}"
        );
    }
    for height in [0, 32, 160] {
        assert!(
            anchors.get(&key(height)).unwrap().is_none(),
            "anchor {height}"
        );
    }
    // A state far below the head comes from the anchor at 64.
    check_regenerated(&mut chain, &hashes, 70);
}
