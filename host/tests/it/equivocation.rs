//! An authority signing many blocks for one of its slots. Each node keeps at
//! most one of them, records the evidence (two signed headers), relays one conflicting block
//! so its peers learn it, and voids the slot: every honest node ends on the same chain
//! whatever order it saw the blocks in.
//!
//! These tests run on chains in memory (sans-IO); `equivocation_devnet` runs three honest
//! nodes over QUIC on loopback against an equivocating authority that is a raw peer.

use std::sync::Arc;

use modnode::chain::block::{Block, Seal};
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Added, Chain, DepositEngine, ForkChoiceError};
use modnode::net::identity::NodeIdentity;
use modnode::node::chain_worker::WorkerError;
use modnode::node::verdict;
use modnode::store::{KvStore, MemoryStore, SledStore};

/// Four authority keys; slot `s` belongs to authority `s % 4`.
fn keys() -> Vec<NodeIdentity> {
    (0..4).map(|_| NodeIdentity::generate().unwrap()).collect()
}

fn genesis(keys: &[NodeIdentity]) -> Genesis {
    let mut genesis = Genesis::generated("equivocation", 8, 7);
    genesis.authorities = keys.iter().map(|k| *k.node_id().as_bytes()).collect();
    genesis
}

fn open(genesis: &Genesis, store: Arc<dyn KvStore>) -> Chain {
    Chain::open(
        store,
        genesis.clone(),
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap()
}

/// A valid block on `chain`'s head at `slot`, sealed by the slot's authority; `variant` picks
/// one of many different valid blocks (it is the eth1 block hash voted for).
pub(crate) fn sealed(chain: &Chain, keys: &[NodeIdentity], slot: u64, variant: u8) -> Block {
    let proposer = chain.genesis().proposer_for(slot).unwrap();
    let mut vote = chain.eth1_data();
    vote.block_hash = [variant; 32];
    let mut block = chain.build_block(slot, proposer, vote, vec![]).unwrap();
    let key = &keys[proposer as usize];
    block.seal = Seal::Ed25519(key.sign(&chain.seal_message(&block.hash())).unwrap());
    block
}

/// Stored blocks of `slot`.
pub(crate) fn stored_at_slot(store: &dyn KvStore, slot: u64) -> usize {
    let mut count = 0;
    store
        .scan_prefix(b"b", &mut |_, value| {
            let block = Block::decode(value, 16).unwrap();
            if block.header.slot == slot {
                count += 1;
            }
            Ok(())
        })
        .unwrap();
    count
}

/// Whether a node relays a gossiped block the chain answered `result` for.
fn relayed(height: u64, result: Result<Added, ForkChoiceError>) -> bool {
    verdict::gossip_block(height, &result.map_err(WorkerError::Block)).relay
}

#[test]
fn two_hundred_blocks_for_one_slot_store_one_relay_two_and_leave_evidence() {
    let keys = keys();
    let genesis = genesis(&keys);
    let dir = tempfile::TempDir::new().unwrap();
    let store: Arc<dyn KvStore> = Arc::new(SledStore::open(dir.path()).unwrap());
    let mut chain = open(&genesis, store.clone());
    for slot in 1..=3 {
        let block = sealed(&chain, &keys, slot, 0);
        chain.add_block(&block).unwrap();
    }
    let before = chain.head();

    // Slot 4 is authority 0's: it signs 200 different valid blocks on the head.
    let blocks: Vec<Block> = (0..200).map(|i| sealed(&chain, &keys, 4, i)).collect();
    let mut relays = 0;
    let mut results = Vec::new();
    for block in &blocks {
        let result = chain.add_block(block);
        results.push(format!("{result:?}"));
        if relayed(block.header.height, result) {
            relays += 1;
        }
    }
    assert!(
        stored_at_slot(store.as_ref(), 4) <= 1,
        "{} blocks of slot 4 stored",
        stored_at_slot(store.as_ref(), 4)
    );
    assert_eq!(
        relays, 2,
        "the first block and the one proving the equivocation are relayed, no other: {results:?}"
    );
    let evidence = chain.evidence(4, 0).expect("evidence recorded");
    assert!(evidence.verify(&genesis, &chain.genesis_hash()));
    assert_eq!(evidence.first.header.hash(), blocks[0].hash());
    assert_eq!(evidence.second.header.hash(), blocks[1].hash());
    assert_eq!(chain.equivocations_found(), 1);
    // The slot is void: the head is back where it was, and the next authority builds there.
    assert_eq!(chain.head(), before);
    let next = sealed(&chain, &keys, 5, 0);
    assert!(matches!(chain.add_block(&next), Ok(Added::Extended(_))));
    for block in &blocks {
        assert!(
            matches!(
                chain.add_block(block),
                Err(ForkChoiceError::Equivocation {
                    new_evidence: false,
                    ..
                })
            ),
            "a block of the void slot was taken again"
        );
    }

    // The evidence is persisted: after a restart the slot is still void.
    let head = chain.head();
    drop(chain);
    drop(store);
    let store: Arc<dyn KvStore> = Arc::new(SledStore::open(dir.path()).unwrap());
    let mut reopened = open(&genesis, store);
    assert_eq!(reopened.head(), head);
    assert_eq!(reopened.evidence(4, 0), Some(evidence));
    assert!(matches!(
        reopened.add_block(&blocks[0]),
        Err(ForkChoiceError::Equivocation { .. })
    ));
}

#[test]
fn nodes_fed_equivocating_blocks_in_different_orders_end_on_the_same_head() {
    let keys = keys();
    let genesis = genesis(&keys);
    let mut builder = open(&genesis, Arc::new(MemoryStore::new()));
    let mut prefix = Vec::new();
    for slot in 1..=3 {
        let block = sealed(&builder, &keys, slot, 0);
        builder.add_block(&block).unwrap();
        prefix.push(block);
    }
    // Authority 0 signs A, B and C for slot 4; authority 1 builds D at slot 5 on A before
    // anyone knows.
    let a = sealed(&builder, &keys, 4, 1);
    let b = sealed(&builder, &keys, 4, 2);
    let c = sealed(&builder, &keys, 4, 3);
    let mut on_a = open(&genesis, Arc::new(MemoryStore::new()));
    for block in prefix.iter().chain([&a]) {
        on_a.add_block(block).unwrap();
    }
    let d = sealed(&on_a, &keys, 5, 0);

    // Each node sees a different first block; one sees a single block before the evidence
    // a peer relays (the conflicting block) reaches it; one builds on A first.
    let orders: [(&str, Vec<&Block>); 5] = [
        ("A, D, then B", vec![&a, &d, &b]),
        ("B, then A", vec![&b, &a]),
        ("C, then A, B", vec![&c, &a, &b]),
        ("A only, then the relayed C", vec![&a, &c]),
        ("D's parent A, D, then C, A", vec![&a, &d, &c, &a]),
    ];
    let mut nodes = Vec::new();
    for (what, order) in orders {
        let mut node = open(&genesis, Arc::new(MemoryStore::new()));
        for block in &prefix {
            node.add_block(block).unwrap();
        }
        for block in order {
            let _ = node.add_block(block);
        }
        assert!(node.evidence(4, 0).is_some(), "{what}: no evidence");
        nodes.push((what, node));
    }
    let heads: Vec<_> = nodes.iter().map(|(w, n)| (*w, n.head())).collect();
    assert!(
        heads.iter().all(|(_, h)| *h == heads[0].1),
        "different heads: {heads:?}"
    );

    // The next honest block (slot 6, on the common head) is taken by every node; blocks of
    // the void slot and their descendants are refused by all.
    let e = sealed(&nodes[0].1, &keys, 6, 0);
    for (what, node) in &mut nodes {
        assert!(
            matches!(node.add_block(&e), Ok(Added::Extended(_))),
            "{what}: the next honest block"
        );
        for block in [&a, &b, &c, &d] {
            assert!(node.add_block(block).is_err(), "{what}: took a void block");
        }
        assert_eq!(node.head().hash, e.hash(), "{what}");
    }
}

#[test]
fn a_block_not_attached_yet_still_counts_as_the_first_of_its_slot() {
    let keys = keys();
    let genesis = genesis(&keys);
    let mut chain = open(&genesis, Arc::new(MemoryStore::new()));
    let mut other = open(&genesis, Arc::new(MemoryStore::new()));
    for slot in 1..=3 {
        let block = sealed(&chain, &keys, slot, 0);
        chain.add_block(&block).unwrap();
    }
    // Authority 0 signs a slot-4 block on another branch (unknown here) and one on our head.
    other.add_block(&sealed(&other, &keys, 2, 9)).unwrap();
    let detached = sealed(&other, &keys, 4, 1);
    let on_head = sealed(&chain, &keys, 4, 2);
    assert!(matches!(
        chain.add_block(&detached),
        Err(ForkChoiceError::UnknownParent { .. })
    ));
    assert!(matches!(
        chain.add_block(&on_head),
        Err(ForkChoiceError::Equivocation {
            new_evidence: true,
            ..
        })
    ));
    assert_eq!(chain.head().height, 3);
    assert!(chain.has_block_for_slot(4, 0).unwrap());
}

/// Records under `prefix` in `store`.
fn records(store: &dyn KvStore, prefix: &[u8]) -> usize {
    let mut count = 0;
    store
        .scan_prefix(prefix, &mut |_, _| {
            count += 1;
            Ok(())
        })
        .unwrap();
    count
}

/// A block at `slot` sealed by its authority on an unknown parent, `variant` telling several
/// apart: nothing to execute, only the header matters.
fn detached(
    genesis: &Genesis,
    chain: &Chain,
    keys: &[NodeIdentity],
    slot: u64,
    variant: u32,
) -> Block {
    use modnode::chain::block::{BlockBody, BlockHeader};
    let body = BlockBody::default();
    let proposer = genesis.proposer_for(slot).unwrap();
    let mut state_root = [0xaa; 32];
    state_root[..4].copy_from_slice(&variant.to_le_bytes());
    let header = BlockHeader {
        parent_hash: modnode::hashes::BlockHash::new([0xee; 32]),
        height: 1_000,
        slot,
        proposer,
        state_root: modnode::hashes::StateRoot::new(state_root),
        body_root: body.root(),
    };
    let seal = keys[proposer as usize]
        .sign(&chain.seal_message(&header.hash()))
        .unwrap();
    Block {
        header,
        body,
        seal: Seal::Ed25519(seal),
    }
}

#[test]
fn evidence_and_header_records_stay_bounded_whatever_authorities_sign() {
    let keys = keys();
    let mut genesis = genesis(&keys);
    genesis.finality_depth = 2;
    let store: Arc<dyn KvStore> = Arc::new(MemoryStore::new());
    let mut chain = open(&genesis, store.clone());
    for slot in 3..=14 {
        let block = sealed(&chain, &keys, slot, 0);
        chain.add_block(&block).unwrap();
    }
    // Epoch 3 (slots 12..=14) voted from epoch 2's checkpoint: the block of slot 7 (height
    // 5) is final. Headers for the empty slots 1 and 2 below it are not kept.
    assert_eq!(chain.finalized_height(), 5);
    let headers = records(store.as_ref(), b"q");
    for variant in 0..50 {
        let _ = chain.add_block(&detached(
            &genesis,
            &chain,
            &keys,
            1 + u64::from(variant % 2),
            variant,
        ));
    }
    assert_eq!(
        records(store.as_ref(), b"q"),
        headers,
        "records for final slots"
    );

    // Two headers for each of MAX_EVIDENCE + 100 slots after the head's: the newest
    // MAX_EVIDENCE kept.
    let slots = 20..20 + modnode::chain::MAX_EVIDENCE as u64 + 100;
    for slot in slots.clone() {
        for variant in 0..2 {
            let _ = chain.add_block(&detached(&genesis, &chain, &keys, slot, variant));
        }
    }
    assert_eq!(records(store.as_ref(), b"x"), modnode::chain::MAX_EVIDENCE);
    let (first, last) = (slots.start, slots.end - 1);
    assert!(
        chain
            .evidence(first, genesis.proposer_for(first).unwrap())
            .is_none()
    );
    assert!(
        chain
            .evidence(last, genesis.proposer_for(last).unwrap())
            .is_some()
    );
    // One header record per slot, whatever is signed for it.
    let per_slot = records(store.as_ref(), b"q");
    assert_eq!(per_slot, headers + slots.clone().count());
    for variant in 2..300 {
        let _ = chain.add_block(&detached(&genesis, &chain, &keys, last, variant));
    }
    assert_eq!(records(store.as_ref(), b"q"), per_slot);
    assert_eq!(records(store.as_ref(), b"x"), modnode::chain::MAX_EVIDENCE);
    assert_eq!(stored_at_slot(store.as_ref(), last), 0);
}

/// The chain worker's view (what `/status` and `/metrics` show) counts the evidence and the
/// head moving back as a branch switch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_view_shows_the_evidence_and_counts_the_void_head_as_a_reorg() {
    use modnode::node::chain_worker;
    let keys = keys();
    let genesis = genesis(&keys);
    let mut chain = open(&genesis, Arc::new(MemoryStore::new()));
    for slot in 1..=3 {
        let block = sealed(&chain, &keys, slot, 0);
        chain.add_block(&block).unwrap();
    }
    let a = sealed(&chain, &keys, 4, 1);
    let b = sealed(&chain, &keys, 4, 2);
    let (handle, worker) = chain_worker::spawn(chain, keys[1].clone(), None).unwrap();
    assert!(matches!(
        handle.add_block(a.clone()).await,
        Ok(Added::Extended(_))
    ));
    assert!(handle.add_block(b.clone()).await.is_err());
    // The worker publishes its view right after answering.
    let mut watch = handle.watch();
    let view = *tokio::time::timeout(
        std::time::Duration::from_secs(30),
        watch.wait_for(|v| v.equivocations == 1),
    )
    .await
    .expect("the view shows the evidence")
    .unwrap();
    assert_eq!(view.head.height, 3);
    assert_eq!(view.reorgs, 1, "the head moved back below the void slot");
    let evidence = view.recent_evidence[0].expect("the evidence listed");
    assert_eq!(
        (
            evidence.slot,
            evidence.proposer,
            evidence.first,
            evidence.second
        ),
        (4, 0, a.hash(), b.hash())
    );
    drop(handle);
    worker.join().unwrap();
}

#[test]
fn only_the_equivocating_authority_itself_is_penalised() {
    let keys = keys();
    let genesis = genesis(&keys);
    let mut chain = open(&genesis, Arc::new(MemoryStore::new()));
    for slot in 1..=3 {
        let block = sealed(&chain, &keys, slot, 0);
        chain.add_block(&block).unwrap();
    }
    let a = sealed(&chain, &keys, 4, 1);
    let b = sealed(&chain, &keys, 4, 2);
    chain.add_block(&a).unwrap();
    let result = chain.add_block(&b).map_err(WorkerError::Block);
    let verdict = verdict::gossip_block(4, &result);
    assert!(verdict.relay && verdict.penalty.is_none(), "{verdict:?}");
    let honest_relayer = *keys[2].node_id().as_bytes();
    let equivocator = *keys[0].node_id().as_bytes();
    assert_eq!(
        verdict::equivocation_penalty(&honest_relayer, &genesis.authorities, &result),
        None
    );
    assert!(verdict::equivocation_penalty(&equivocator, &genesis.authorities, &result).is_some());
}
