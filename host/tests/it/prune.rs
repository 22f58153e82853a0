//! Pruning below finality (`chain::prune`): the data dir of a long run stays bounded (real bytes
//! on disk, as `du` counts them), a SIGKILL during pruning reopens consistent and still serves
//! the window, and a request for a pruned range is answered "pruned below H".

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use modnode::chain::Chain;
use modnode::chain::block::Block;
use modnode::chain::genesis::Genesis;
use modnode::chain::prune::History;
use modnode::chain::workload::{self, DevDepositLog};
use modnode::deposit_source::cached_log::CachedDepositLog;
use modnode::net::identity::NodeIdentity;
use modnode::node::chain_worker::{self, WorkerError};
use modnode::store::{MemoryStore, SledStore};

use crate::state_cache::{ETH, engine};

/// Bytes the files under `dir` occupy on disk (allocated blocks, as `du` counts them).
fn du(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            du(&entry.path())
        } else {
            meta.blocks() * 512
        };
    }
    total
}

fn genesis() -> Genesis {
    Genesis::generated("prune", 64, 7)
}

/// `count` blocks with deposits in every one (two top-ups of existing validators, and a new
/// validator every 16th block), built once on an in-memory chain.
fn blocks_with_deposits(count: u64) -> Vec<Block> {
    let mut chain = Chain::open(Arc::new(MemoryStore::new()), genesis(), engine()).unwrap();
    let mut log = CachedDepositLog::new();
    let mut blocks = Vec::new();
    for height in 1..=count {
        let state = chain.snapshot();
        for i in 0..2u64 {
            let index = u32::try_from((height * 2 + i) % u64::from(state.validator_count()));
            let pubkey = state.validator(index.unwrap()).unwrap().0.pubkey;
            log.push(workload::unsigned(pubkey, ETH));
        }
        if height % 16 == 0 {
            log.push(workload::new_validator(10_000 + height, 32 * ETH, [0; 4]));
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

/// Imports `blocks` into a sled store in `dir`, pruning with `history` (if any) every 64
/// blocks as the background pruner would; returns the data dir's bytes on disk after a clean
/// close and reopen, and the longest import.
fn run(dir: &Path, blocks: &[Block], history: Option<History>) -> (u64, std::time::Duration) {
    let path = dir.join("chain");
    let mut slowest = std::time::Duration::ZERO;
    {
        let store = Arc::new(SledStore::open(&path).unwrap());
        let mut chain = Chain::open(store, genesis(), engine()).unwrap();
        for block in blocks {
            let start = Instant::now();
            chain.import(block).unwrap();
            slowest = slowest.max(start.elapsed());
            if let Some(history) = history
                && block.header.height % 64 == 0
            {
                chain.pruner(history).run_until_done(256).unwrap();
            }
        }
        if let Some(history) = history {
            chain.pruner(history).run_until_done(256).unwrap();
        }
    }
    // Reopened: what a restarted node finds.
    let store = Arc::new(SledStore::open(&path).unwrap());
    let chain = Chain::open(store, genesis(), engine()).unwrap();
    assert_eq!(chain.head().height, blocks.len() as u64);
    drop(chain);
    (du(dir), slowest)
}

/// The window kept in the bounded run.
const WINDOW: u64 = 256;

/// The bound the pruned 5,000-block data dir stays under, and the unpruned one exceeds. Live
/// data is well under 1 MiB (a 256-block window of ~2.7 KB blocks, ~380 validators); sled's
/// files are not: measured 10.0–10.5 MB pruned against 94–98 MB unpruned here, and
/// 13.9–15.0 MB pruned at 2,500 and at 5,000 blocks with the pruner in the background
/// (`modnode bench prune`): flat in the block count, sled reusing freed segments but never
/// shrinking its file below its own ~10 MB floor. The bound leaves room for that floor.
const BOUND_BYTES: u64 = 20 << 20;

#[test]
fn a_5000_block_run_with_deposits_keeps_its_data_dir_under_a_bound_only_when_pruned() {
    let blocks = blocks_with_deposits(5_000);
    let pruned_dir = tempfile::tempdir().unwrap();
    let (pruned, _) = run(pruned_dir.path(), &blocks, Some(History::Blocks(WINDOW)));
    let full_dir = tempfile::tempdir().unwrap();
    let (full, _) = run(full_dir.path(), &blocks, None);
    eprintln!(
        "data dir after 5,000 blocks with deposits: pruned (window {WINDOW}) {pruned} bytes, \
         unpruned {full} bytes"
    );
    assert!(
        pruned < BOUND_BYTES,
        "pruned data dir is {pruned} bytes, bound {BOUND_BYTES}"
    );
    assert!(
        full > BOUND_BYTES,
        "the unpruned run ({full} bytes) does not exceed the bound: the test cannot fail"
    );

    // The pruned chain serves its window and nothing below it.
    let store = Arc::new(SledStore::open(&pruned_dir.path().join("chain")).unwrap());
    let chain = Chain::open(store, genesis(), engine()).unwrap();
    let floor = chain.served_from();
    assert_eq!(floor, 5_000 - WINDOW);
    assert!(chain.block_at(floor - 1).unwrap().is_none());
    for height in floor..=5_000 {
        let block = chain.block_at(height).unwrap().unwrap();
        assert_eq!(block.hash(), blocks[height as usize - 1].hash());
    }
    assert!(chain.block_at(0).unwrap().is_some(), "genesis is kept");
}

/// A chain of `count` dev-workload blocks in memory, as `modnode debug import-loop` builds
/// them (same blocks, same hashes).
fn dev_chain_to(count: u64) -> Chain {
    let mut chain = Chain::open(Arc::new(MemoryStore::new()), Genesis::dev(), engine()).unwrap();
    let existing: Vec<[u8; 48]> = Genesis::dev().validators.iter().map(|v| v.pubkey).collect();
    let fork = Genesis::dev().genesis_fork_version;
    let mut log = DevDepositLog::new();
    for height in 1..=count {
        for d in workload::dev_block(height, &existing, fork) {
            log.push(d);
        }
        let slot = chain.head().slot + 1;
        let block = chain
            .build_block_from(slot, 0, log.eth1_data(), &log)
            .unwrap();
        chain.import(&block).unwrap();
    }
    chain
}

#[test]
fn sigkill_during_pruning_reopens_consistent_and_still_serves_the_window() {
    use rand::{Rng as _, SeedableRng as _};
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x9e5);
    let mut reported_max = 0;
    let mut floors = Vec::new();
    for i in 0..3 {
        // Past finality (32) and the window (16) first, so every kill lands with pruning
        // going on: one small batch after each import.
        let after = if i == 0 { 70 } else { reported_max + 8 };
        let delay = std::time::Duration::from_millis(rng.random_range(0..120));
        let reported =
            crate::crash::run_and_kill_after(dir.path(), &["--history", "16"], after, delay);
        reported_max = reported_max.max(reported);
        let store = Arc::new(SledStore::open(&dir.path().join("chain")).unwrap());
        let chain = Chain::open(store, Genesis::dev(), engine())
            .unwrap_or_else(|e| panic!("kill {i}: the store does not reopen: {e}"));
        let head = chain.head();
        assert!(
            head.height >= reported_max,
            "kill {i}: head {} behind {reported_max}",
            head.height
        );
        reported_max = head.height;
        let floor = chain.served_from();
        assert!(
            floor <= chain.finalized_height(),
            "kill {i}: floor {floor} above finality"
        );
        // Below the floor nothing but genesis; from it to the head every block, linked.
        for height in 1..floor {
            assert!(
                chain.block_at(height).unwrap().is_none(),
                "kill {i}: {height} kept"
            );
        }
        let mut parent = None;
        for height in floor..=head.height {
            let block = chain
                .block_at(height)
                .unwrap()
                .unwrap_or_else(|| panic!("kill {i}: block {height} in the window is missing"));
            if let Some(parent) = parent {
                assert_eq!(
                    block.header.parent_hash, parent,
                    "kill {i}: height {height}"
                );
            }
            parent = Some(block.hash());
        }
        floors.push(floor);
    }
    assert!(
        *floors.last().unwrap() > 1,
        "pruning never ran: floors {floors:?}"
    );

    // The head can still be reverted (undo records above finality were kept) and imported
    // again, and a peer within the window syncs from this node's blocks to the same head.
    let store = Arc::new(SledStore::open(&dir.path().join("chain")).unwrap());
    let mut chain = Chain::open(store, Genesis::dev(), engine()).unwrap();
    let head = chain.head();
    let tip = chain.block_at(head.height).unwrap().unwrap();
    chain.revert_head().unwrap();
    chain.import(&tip).unwrap();
    assert_eq!(chain.head(), head);
    let floor = chain.served_from();
    let mut peer = dev_chain_to(floor - 1);
    for height in floor..=head.height {
        peer.import(&chain.block_at(height).unwrap().unwrap())
            .unwrap_or_else(|e| panic!("the peer cannot import served block {height}: {e}"));
    }
    assert_eq!(peer.head(), head);
}

#[test]
fn a_request_below_the_pruned_floor_is_answered_pruned_below_h() {
    let blocks = blocks_with_deposits(200);
    let mut chain = Chain::open(Arc::new(MemoryStore::new()), genesis(), engine()).unwrap();
    for block in &blocks {
        chain.import(block).unwrap();
    }
    chain
        .pruner(History::Blocks(50))
        .run_until_done(64)
        .unwrap();
    let floor = chain.served_from();
    // The window (200 − 50) reaches above the finalized height less a finality depth of
    // margin (200 − 32 − 32): that one holds.
    assert_eq!(floor, 136);
    let (handle, _thread) =
        chain_worker::spawn(chain, NodeIdentity::generate().unwrap(), None).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for start in [1, 100, floor - 1] {
            match handle.blocks(start, 64, usize::MAX).await {
                Err(WorkerError::Pruned { start: s, below }) => {
                    assert_eq!((s, below), (start, floor));
                }
                other => panic!("blocks from {start}: {other:?}"),
            }
        }
        let served = handle.blocks(floor, 64, usize::MAX).await.unwrap();
        assert_eq!(served.len(), 64);
        assert_eq!(served[0], blocks[floor as usize - 1].encode());
    });
}
