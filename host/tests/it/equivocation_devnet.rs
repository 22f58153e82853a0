//! An authority signing many blocks for one slot, over QUIC on loopback: a 4-authority devnet
//! (three honest nodes, an equivocating authority as a raw peer) ends on one chain with the
//! evidence everywhere.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use modnode::chain::block::Block;
use modnode::chain::genesis::Genesis;
use modnode::chain::{Chain, DepositEngine};
use modnode::clock::unix_ms;
use modnode::net::codec;
use modnode::net::gossip::GOSSIP_MESSAGE;
use modnode::net::identity::NodeIdentity;
use modnode::node::{Node, NodeConfig};
use modnode::store::{KvStore, MemoryStore, SledStore};
use modnode_gossip::policy::MessageKind;
use modnode_gossip::{Frame, MessageId};
use modnode_peers::PeerAddr;
use tempfile::TempDir;

use crate::equivocation::{sealed, stored_at_slot};
use crate::hostile::quic::{block_at, closed_for_violation, hello, loopback, raw_peer};

const SLOT_MS: u64 = 400;
const LIVENESS: Duration = Duration::from_secs(90);

/// A genesis whose four authorities are the node keys in `dirs`.
fn genesis(dirs: &[TempDir]) -> Genesis {
    let ids: Vec<String> = dirs
        .iter()
        .map(|d| {
            NodeIdentity::load_or_create(d.path())
                .unwrap()
                .node_id()
                .to_string()
        })
        .collect();
    let text = serde_json::json!({
        "chain_id": "equivocation-devnet",
        "genesis_time_ms": unix_ms(),
        "slot_ms": SLOT_MS,
        "finality_depth": 32,
        "authorities": ids,
        "generated_validators": { "count": 8, "seed": 3 },
    })
    .to_string();
    Genesis::from_json(&text, "<test>").unwrap()
}

async fn start(dir: &Path, genesis: &Genesis, bootstrap: Vec<PeerAddr>) -> Node {
    let mut config = NodeConfig::new(dir.to_path_buf(), genesis.clone());
    config.listen = loopback();
    config.admin_listen = None;
    config.bootstrap = bootstrap;
    Node::start(config).await.unwrap()
}

/// Polls `check` until it holds; panics with `what` after [`LIVENESS`].
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIVENESS;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {LIVENESS:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pushes `block` to `conn` as one gossip frame; false once the connection is gone.
async fn push(conn: &quinn::Connection, block: &Block) -> bool {
    let payload = block.encode();
    let id = modnode::net::gossip::message_id(MessageKind::Block, &payload);
    let frame = Frame::Push {
        id,
        kind: MessageKind::Block,
        hops: 0,
        origin: None,
        payload: payload.into(),
    }
    .encode()
    .unwrap();
    let Ok(mut uni) = conn.open_uni().await else {
        return false;
    };
    codec::write_frame(&mut uni, GOSSIP_MESSAGE, &frame, 1 << 20)
        .await
        .is_ok()
        && uni.finish().is_ok()
}

/// The ids of every message pushed or announced to `conn`.
fn watch_gossip(conn: quinn::Connection) -> Arc<Mutex<BTreeSet<MessageId>>> {
    fn collect(frame: Frame, ids: &mut BTreeSet<MessageId>) {
        match frame {
            Frame::Push { id, .. } => {
                ids.insert(id);
            }
            Frame::Announce { items } => ids.extend(items.iter().map(|i| i.id)),
            Frame::Batch { frames } => frames.into_iter().for_each(|f| collect(f, ids)),
            Frame::Request { .. } | Frame::Link { .. } | Frame::Routes { .. } => {}
        }
    }
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let out = seen.clone();
    tokio::spawn(async move {
        while let Ok(mut recv) = conn.accept_uni().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                while let Ok(Some(frame)) = codec::read_frame(&mut recv, 1 << 24).await {
                    if let Ok(frame) = Frame::decode(&frame.payload) {
                        collect(frame, &mut seen.lock().unwrap());
                    }
                }
            });
        }
    });
    out
}

/// The canonical block hashes of `node` at heights `1..=top`.
async fn hashes(node: &Node, top: u64) -> Vec<modnode::hashes::BlockHash> {
    node.chain()
        .blocks(1, top, usize::MAX)
        .await
        .unwrap()
        .iter()
        .map(|b| Block::decode(b, 16).unwrap())
        .map(|b| b.hash())
        .collect()
}

/// A 4-authority devnet: authorities 1–3 are honest nodes, authority 0 a raw peer that
/// signs 200 valid blocks for one of its slots and sends different ones to different
/// nodes. Every honest node records the evidence, keeps at most one block of that slot,
/// relays at most two of them (its first and the one proving the equivocation), bans the
/// equivocator, and all three end on the same chain without the void slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_equivocating_authority_splits_no_honest_node_of_a_4_node_devnet() {
    let tmp: Vec<TempDir> = (0..4).map(|_| TempDir::new().unwrap()).collect();
    let genesis = genesis(&tmp);
    let n1 = start(tmp[1].path(), &genesis, vec![]).await;
    let n2 = start(tmp[2].path(), &genesis, vec![n1.peer_addr().unwrap()]).await;
    let n3 = start(
        tmp[3].path(),
        &genesis,
        vec![n1.peer_addr().unwrap(), n2.peer_addr().unwrap()],
    )
    .await;
    let honest = [&n1, &n2, &n3];
    eventually("the three honest authorities at height 3", || {
        honest.iter().all(|n| n.status().height >= 3)
    })
    .await;
    let genesis_hash = block_at(&n1, 0).await.hash().to_bytes();
    let hello = hello(&genesis, genesis_hash, 0);

    // A watcher on n1 sees what n1 relays; the equivocator connects to all three.
    let watcher_key = NodeIdentity::generate().unwrap();
    let (_wep, watcher) = raw_peer(&n1, &watcher_key, loopback(), &hello)
        .await
        .unwrap();
    let relayed = watch_gossip(watcher.clone());
    let equivocator = NodeIdentity::load_or_create(tmp[0].path()).unwrap();
    let mut conns = Vec::new();
    let mut endpoints = Vec::new();
    for node in honest {
        let (ep, conn) = raw_peer(node, &equivocator, loopback(), &hello)
            .await
            .unwrap();
        endpoints.push(ep);
        conns.push(conn);
    }

    // Wait for the start of one of authority 0's slots, then build on n1's head.
    let mut slot = genesis.slot_at(unix_ms());
    eventually("one of authority 0's slots starting", || {
        slot = genesis.slot_at(unix_ms());
        let into = unix_ms().saturating_sub(genesis.genesis_time_ms) % SLOT_MS;
        genesis.proposer_for(slot) == Some(0) && into < SLOT_MS / 4
    })
    .await;
    let mut mirror = Chain::open(
        Arc::new(MemoryStore::new()) as Arc<dyn KvStore>,
        genesis.clone(),
        DepositEngine::Native(modnode::chain::native_deposits::Verification::Batched),
    )
    .unwrap();
    let top = n1.status().height;
    for height in 1..=top {
        mirror.add_block(&block_at(&n1, height).await).unwrap();
    }
    let keys: Vec<NodeIdentity> = (0..4)
        .map(|i| NodeIdentity::load_or_create(tmp[i].path()).unwrap())
        .collect();
    let blocks: Vec<Block> = (0..200).map(|i| sealed(&mirror, &keys, slot, i)).collect();
    let ids: BTreeSet<MessageId> = blocks
        .iter()
        .map(|b| modnode::net::gossip::message_id(MessageKind::Block, &b.encode()))
        .collect();

    // Each node gets its own first block, then the rest round robin.
    for (i, block) in blocks.iter().enumerate() {
        let conn = &conns[i % conns.len()];
        if conn.close_reason().is_none() {
            push(conn, block).await;
        }
    }

    eventually("evidence recorded on every honest node", || {
        honest.iter().all(|n| {
            n.status()
                .equivocations
                .iter()
                .any(|e| e.slot == slot && e.authority == 0)
        })
    })
    .await;
    // Each node closed the equivocator's connection for the violation (seen as a reset when
    // the close frame is lost on a busy loopback).
    for (i, conn) in conns.iter().enumerate() {
        let closed = tokio::time::timeout(LIVENESS, conn.closed())
            .await
            .unwrap_or_else(|_| panic!("node {} keeps the equivocator", i + 1));
        assert!(
            closed_for_violation(&closed) || closed == quinn::ConnectionError::Reset,
            "{closed:?}"
        );
    }

    // The chain moves on and all three agree on it, without a block of the void slot.
    let height = honest.iter().map(|n| n.status().height).max().unwrap();
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        let top = honest.iter().map(|n| n.status().height).min().unwrap();
        if top >= height + 4 {
            let common = top - 1;
            let chains = [
                hashes(&n1, common).await,
                hashes(&n2, common).await,
                hashes(&n3, common).await,
            ];
            if chains[0] == chains[1] && chains[1] == chains[2] {
                let void: Vec<_> = blocks.iter().map(|b| b.hash()).collect();
                assert!(
                    !chains[0].iter().any(|h| void.contains(h)),
                    "a block of the void slot {slot} is canonical"
                );
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the honest nodes did not agree on one chain within {LIVENESS:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let relayed_of_slot = relayed.lock().unwrap().intersection(&ids).count();
    assert!(
        relayed_of_slot <= 2,
        "n1 relayed {relayed_of_slot} blocks of the equivocated slot"
    );
    // Each node penalised the equivocator. (Whether an honest peer is ever banned is not
    // asserted here: range sync bans a peer whose answer shows another block at the head
    // height it claimed, or none, which an honest node whose head went back below a void
    // slot can do — a `modnode-peers` sync rule, reported as a follow-up. The equivocation
    // verdict itself blames only the authority: see
    // `only_the_equivocating_authority_itself_is_penalised`.)
    for (name, node) in [("n1", &n1), ("n2", &n2), ("n3", &n3)] {
        assert!(
            node.metrics().peer_violations.load(Ordering::Relaxed) >= 1,
            "{name}"
        );
        assert_eq!(node.status().equivocations_found, 1, "{name}");
        assert!(
            node.metrics()
                .render(&node.chain().view())
                .contains("modnode_equivocations_total 1"),
            "{name}: metrics"
        );
    }
    watcher.close(0u32.into(), b"done");
    for node in [n3, n2, n1] {
        node.shutdown().await;
    }
    // Storage per slot is bounded: at most one block of the slot on each node's disk.
    for dir in &tmp[1..] {
        let store = SledStore::open(&dir.path().join("chain")).unwrap();
        let stored = stored_at_slot(&store, slot);
        assert!(stored <= 1, "{stored} blocks of slot {slot} stored");
    }
}
