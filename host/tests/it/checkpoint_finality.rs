//! Checkpoints only at finalized heights. A node restored from a checkpoint
//! holds no undo record for its base block, so a reorganisation across the base would leave it
//! stuck for good: checkpoints are made only at finalized heights (periodic and on demand),
//! offered only when final on the server, and taken by a restorer only when final on the peer
//! offering them. A chain restored at a finalized height follows any reorganisation its peers
//! can still make.

use std::sync::Arc;

use modnode::chain::block::Block;
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::workload::DevDepositLog;
use modnode::chain::{Added, Chain, CheckpointStart, DepositEngine, init_from_checkpoint};
use modnode::checkpoint::{Manifest, checkpoint_height, final_offers};
use modnode::store::MemoryStore;

use super::checkpoint_sync::height_at_least;
use super::network::{eventually, genesis_with_finality, start_edited};

/// Finality depth of the node-level test.
const DEPTH: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_made_only_at_finalized_heights() {
    let dir = tempfile::TempDir::new().unwrap();
    let genesis = genesis_with_finality("ckpt-final", &[dir.path()], 1, DEPTH);
    let node = start_edited(dir.path(), &genesis, Vec::new(), Default::default(), |c| {
        c.checkpoint.interval = 2;
        c.checkpoint.keep = 8;
    })
    .await;
    let target = modnode::admin::client::Target::data_dir(dir.path()).unwrap();

    // On demand: at the finalized height of the moment, never at the head.
    height_at_least(&node, DEPTH + 2).await;
    let before = node.status().height;
    // A periodic creation may be running (interval 2): ask again as the 503 says.
    let made = super::checkpoint::create_when_free(&target).await;
    let after = node.status().height;
    let height = made["height"].as_u64().unwrap();
    assert!(
        height + DEPTH >= before && height + DEPTH <= after,
        "on-demand checkpoint at {height}; the head was {before} before and {after} after, \
         finality depth {DEPTH}"
    );

    // Periodic: at the multiples of the interval once they are final.
    eventually("two periodic checkpoints", || {
        node.checkpoints()
            .list()
            .is_ok_and(|l| l.iter().filter(|m| m.height != height).count() >= 2)
    })
    .await;
    let head = node.status().height;
    let listed: Vec<Manifest> = node.checkpoints().list().unwrap();
    for manifest in &listed {
        assert!(
            manifest.height + DEPTH <= head,
            "checkpoint at {} with the head at {head}: not final",
            manifest.height
        );
        // The state is the canonical block's at that height.
        let block = node
            .chain()
            .blocks(manifest.height, 1, usize::MAX)
            .await
            .unwrap();
        let block = Block::decode(&block[0], u16::MAX).unwrap();
        assert_eq!(manifest.block_hash, block.hash());
        assert_eq!(manifest.state_root, block.header.state_root);
    }
    let periodic: Vec<u64> = listed
        .iter()
        .map(|m| m.height)
        .filter(|&h| h != height)
        .collect();
    assert!(periodic.iter().all(|h| h % 2 == 0), "{periodic:?}");
    node.shutdown().await;
}

#[test]
fn the_checkpoint_height_is_the_finalized_one_or_the_newest_multiple_below_it() {
    assert_eq!(checkpoint_height(10, 3, 0), Some(7));
    assert_eq!(checkpoint_height(10, 3, 2), Some(6));
    assert_eq!(checkpoint_height(10, 3, 7), Some(7));
    assert_eq!(checkpoint_height(10, 3, 8), None, "0 is the genesis");
    assert_eq!(checkpoint_height(3, 3, 0), None);
    assert_eq!(checkpoint_height(2, 3, 0), None);
}

#[test]
fn a_restorer_takes_only_offers_final_on_the_peer_offering_them() {
    let manifest = |height: u64| {
        let state = modnode::checkpoint::synthetic_state(16, 1).unwrap();
        let at = modnode::checkpoint::BlockRef {
            height,
            hash: modnode::hashes::BlockHash([height as u8; 32]),
        };
        let options = modnode::checkpoint::CreateOptions {
            target_chunk_bytes: 1 << 20,
            threads: 1,
            background: false,
        };
        let module = super::checkpoint::module("checkpoint-v1");
        modnode::checkpoint::create(&module, Arc::new(state), at, options)
            .unwrap()
            .manifest
    };
    let (m5, m8) = (manifest(5), manifest(8));
    // Peer 1's head is 10, peer 2's is 9, peer 3 is unknown; finality depth 2.
    let heads = |peer: &u8| match peer {
        1 => Some(10),
        2 => Some(9),
        _ => None,
    };
    let offers = vec![
        (1u8, m5.clone()),
        (1, m8.clone()),
        (2, m5.clone()),
        (2, m8.clone()),
        (3, m5.clone()),
    ];
    let kept: Vec<(u8, u64)> = final_offers(offers, heads, 2)
        .into_iter()
        .map(|(p, m)| (p, m.height))
        .collect();
    assert_eq!(kept, vec![(1, 5), (1, 8), (2, 5)]);
    // Two peers agree only on 5 now: 8 is not final on peer 2.
    let chosen = modnode::checkpoint::choose(
        &final_offers(
            vec![(1u8, m5.clone()), (1, m8.clone()), (2, m5), (2, m8)],
            heads,
            2,
        ),
        2,
    )
    .unwrap();
    assert_eq!(chosen.0.height, 5);
}

fn shallow() -> Genesis {
    let mut genesis = Genesis::generated("ckpt-final-chain", 8, 5);
    genesis.finality_depth = 2;
    genesis
}

fn fresh(store: Arc<MemoryStore>) -> Chain {
    Chain::open(
        store,
        shallow(),
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap()
}

/// Builds and imports `n` empty blocks on `chain`, `gap` slots apart.
fn grow(chain: &mut Chain, n: u64, gap: u64) -> Vec<Block> {
    let log = DevDepositLog::new();
    (0..n)
        .map(|_| {
            let slot = chain.head().slot + gap;
            let block = chain
                .build_block_from(slot, 0, chain.eth1_data(), &log)
                .unwrap();
            chain.import(&block).unwrap();
            block
        })
        .collect()
}

/// A chain started from `source`'s state at `height`, as a restore starts one.
fn restored_at(source: &Chain, height: u64) -> Chain {
    let block = source.block_at(height).unwrap().unwrap();
    let state = source.states().state(&block.hash()).unwrap();
    let store = Arc::new(MemoryStore::new());
    init_from_checkpoint(
        store.as_ref(),
        &shallow(),
        &CheckpointStart {
            block: &block,
            registry: state.registry(),
            eth1: state.eth1(),
            schedule: state.schedule(),
            pending: state.pending(),
        },
    )
    .unwrap();
    fresh(store)
}

#[test]
fn a_chain_restored_at_the_finalized_height_follows_every_reorganisation_its_peers_can_make() {
    // A reaches 6 (finalized: 4). B shares A's first 4 blocks, then builds a longer branch:
    // the deepest reorganisation fork choice still allows on A.
    let mut a = fresh(Arc::new(MemoryStore::new()));
    let common = grow(&mut a, 4, 1);
    let a_tip = grow(&mut a, 2, 1);
    let mut b = fresh(Arc::new(MemoryStore::new()));
    for block in &common {
        b.import(block).unwrap();
    }
    let b_tip = grow(&mut b, 3, 2);
    let base = checkpoint_height(a.head().height, a.genesis().finality_depth, 0).unwrap();
    assert_eq!(base, 4);

    // Restored at A's finalized height, the node follows A, then B's reorganisation.
    let mut restored = restored_at(&a, base);
    for block in &a_tip {
        assert!(matches!(
            restored.add_block(block).unwrap(),
            Added::Extended(_)
        ));
    }
    let mut last = None;
    for block in &b_tip {
        last = Some(restored.add_block(block).unwrap());
    }
    assert!(
        matches!(last, Some(Added::Reorganised { .. } | Added::Extended(_))),
        "{last:?}"
    );
    assert_eq!(restored.head(), b.head());

    // What a checkpoint at the head (A's 6) led to: the reorganisation reaches below its base,
    // which it can never revert; it stays on A.
    let mut at_head = restored_at(&a, a.head().height);
    for block in &b_tip {
        assert!(at_head.add_block(block).is_err());
    }
    assert_eq!(at_head.head(), a.head());
}
