//! Whole nodes over real QUIC on loopback: block production by two authorities, deposits
//! through the dev deposit contract reaching every node's state, a late node catching up by
//! range sync, and the refusals — wrong genesis, unexpected key, garbage on a stream.
//!
//! Waits are liveness bounds (generous, polled), not performance targets.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use modnode::chain::genesis::Genesis;
use modnode::chain::workload;
use modnode::deposit_source::client::RpcClient;
use modnode::net::codec;
use modnode::net::endpoint::{self, CLOSE_PROTOCOL_VIOLATION, TransportLimits};
use modnode::net::handshake::{self, Hello, Role};
use modnode::net::identity::NodeIdentity;
use modnode::net::rpc;
use modnode::node::{DepositSourceConfig, Node, NodeConfig};
use modnode_peers::PeerAddr;
use tempfile::TempDir;

pub(super) const SLOT_MS: u64 = 300;
pub(super) const LIVENESS: Duration = Duration::from_secs(90);

/// A genesis whose authorities are the node keys in the first `authorities` of `dirs`.
pub(super) fn genesis(chain_id: &str, dirs: &[&Path], authorities: usize) -> Genesis {
    genesis_with_finality(chain_id, dirs, authorities, 32)
}

pub(super) fn genesis_with_finality(
    chain_id: &str,
    dirs: &[&Path],
    authorities: usize,
    finality_depth: u64,
) -> Genesis {
    let text = genesis_json(chain_id, dirs, authorities, finality_depth, 8).to_string();
    Genesis::from_json(&text, "<test>").unwrap()
}

/// The genesis file's JSON behind [`genesis`] with `finality_depth` and `validators` generated
/// validators (for a node started as a process, or to adjust before parsing).
pub(super) fn genesis_json(
    chain_id: &str,
    dirs: &[&Path],
    authorities: usize,
    finality_depth: u64,
    validators: u32,
) -> serde_json::Value {
    let ids: Vec<String> = dirs
        .iter()
        .take(authorities)
        .map(|d| {
            NodeIdentity::load_or_create(d)
                .unwrap()
                .node_id()
                .to_string()
        })
        .collect();
    serde_json::json!({
        "chain_id": chain_id,
        "genesis_time_ms": modnode::clock::unix_ms(),
        "slot_ms": SLOT_MS,
        "finality_depth": finality_depth,
        "authorities": ids,
        "generated_validators": { "count": validators, "seed": 3 },
    })
}

pub(super) async fn start(dir: &Path, genesis: &Genesis, bootstrap: Vec<PeerAddr>) -> Node {
    start_with(dir, genesis, bootstrap, DepositSourceConfig::default()).await
}

/// [`start`] with a deposit source, made quick for tests: dev blocks every 100 ms, a follow
/// distance of 1 and polls every 50 ms, so a deposit reaches a block within a few slots.
pub(super) async fn start_with(
    dir: &Path,
    genesis: &Genesis,
    bootstrap: Vec<PeerAddr>,
    deposits: DepositSourceConfig,
) -> Node {
    start_edited(dir, genesis, bootstrap, deposits, |_| {}).await
}

/// [`start_with`] with `edit` applied to the configuration last.
pub(super) async fn start_edited(
    dir: &Path,
    genesis: &Genesis,
    bootstrap: Vec<PeerAddr>,
    mut deposits: DepositSourceConfig,
    edit: impl FnOnce(&mut NodeConfig),
) -> Node {
    crate::init_test_log();
    if let Some(dev) = deposits.host_dev_contract.as_mut() {
        dev.block_ms = 100;
    }
    if let Some(follow) = deposits.follow.as_mut() {
        follow.follow_distance = 1;
        follow.poll_interval = Duration::from_millis(50);
    }
    let mut config = NodeConfig::new(dir.to_path_buf(), genesis.clone());
    config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.admin_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.bootstrap = bootstrap;
    config.deposits = deposits;
    edit(&mut config);
    Node::start(config).await.unwrap()
}

/// A node hosting the dev deposit contract on a free loopback port, and following it.
pub(super) fn hosting() -> DepositSourceConfig {
    DepositSourceConfig::dev(SocketAddr::from(([127, 0, 0, 1], 0)))
}

/// Polls `check` until it holds; panics with `what` after [`LIVENESS`].
pub(super) async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + LIVENESS;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(super) fn dirs(n: usize) -> Vec<TempDir> {
    (0..n).map(|_| TempDir::new().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deposits_reach_every_node_and_late_or_restarted_nodes_catch_up() {
    let tmp = dirs(4);
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    let genesis = genesis("modnode-it-four", &paths, 2);
    let mut nodes: Vec<Node> = Vec::new();
    // Node 0 hosts the dev deposit contract, node 1 (the other authority) follows it, node 2
    // needs no source. Each node bootstraps from the one before it; peer exchange finds the
    // rest.
    let mut url = String::new();
    for (i, dir) in paths[..3].iter().enumerate() {
        let bootstrap = nodes
            .last()
            .map(|n| vec![n.peer_addr().unwrap()])
            .unwrap_or_default();
        let deposits = match i {
            0 => hosting(),
            1 => DepositSourceConfig::follow_dev(url.clone()),
            _ => DepositSourceConfig::default(),
        };
        let node = start_with(dir, &genesis, bootstrap, deposits).await;
        if let Some(hosted) = node.deposit_contract_url() {
            url = hosted.to_string();
        }
        nodes.push(node);
    }
    assert!(nodes[0].deposit_source().is_some() && nodes[1].deposit_source().is_some());
    assert!(nodes[2].deposit_source().is_none());
    eventually("three nodes at height 3", || {
        nodes.iter().all(|n| n.status().height >= 3)
    })
    .await;
    eventually("node 2 connected to both others via peer exchange", || {
        nodes[2].status().peers >= 2
    })
    .await;

    // Deposits go to the dev deposit contract, the way `modnode deposit submit` does. The same
    // deposit twice is logged twice: the second copy is a top-up of the new validator.
    let fork = genesis.genesis_fork_version;
    let deposits: Vec<_> = (0..3)
        .map(|seed| workload::new_validator(1000 + seed, 32_000_000_000, fork))
        .collect();
    let contract = RpcClient::new(&url).unwrap();
    for (i, d) in deposits.iter().chain([&deposits[0]]).enumerate() {
        assert_eq!(contract.submit_deposit(d).await.unwrap(), i as u64);
    }
    let before = genesis.validators.len() as u32;
    eventually("the deposits in every node's state", || {
        nodes
            .iter()
            .all(|n| n.status().validators == before + 3 && n.status().deposit_index == 4)
    })
    .await;

    // A node started late catches up by range sync from one bootstrap peer.
    let height = nodes[0].status().height;
    let late = start(paths[3], &genesis, vec![nodes[1].peer_addr().unwrap()]).await;
    eventually("the late node reaching the others' height", || {
        late.status().height >= height + 2
    })
    .await;
    assert!(late.metrics().blocks_synced.load(Ordering::Relaxed) >= height);
    assert_eq!(late.status().validators, before + 3);
    assert_eq!(late.status().deposit_index, 4);
    // Same chain: the late node's block at some height is the others' block there.
    let probe = late.status().height.min(nodes[0].status().height) - 1;
    let ours = late.chain().blocks(probe, 1, usize::MAX).await.unwrap();
    let theirs = nodes[0].chain().blocks(probe, 1, usize::MAX).await.unwrap();
    assert_eq!(ours, theirs);
    assert!(nodes[0].metrics().blocks_produced.load(Ordering::Relaxed) > 0);
    assert!(nodes[1].metrics().blocks_produced.load(Ordering::Relaxed) > 0);
    assert_eq!(
        nodes[2].metrics().blocks_produced.load(Ordering::Relaxed),
        0,
        "a follower never produces"
    );
    // A follower that stops misses blocks; restarted on its data it catches up from there.
    let follower = nodes.pop().unwrap();
    let stopped_at = follower.status().height;
    follower.shutdown().await;
    let target = nodes[0].status().height + 4;
    eventually("the chain moving on without the follower", || {
        nodes[0].status().height >= target
    })
    .await;
    let follower = start(paths[2], &genesis, vec![nodes[0].peer_addr().unwrap()]).await;
    assert!(
        follower.status().height >= stopped_at,
        "reopened below its stored head"
    );
    eventually("the restarted follower catching up", || {
        follower.status().height >= target
    })
    .await;
    assert_eq!(follower.status().validators, before + 3);
    follower.shutdown().await;
    late.shutdown().await;
    for node in nodes {
        node.shutdown().await;
    }
}

/// Deposits sent to a follower's own dev contract would never reach the chain: only a node
/// that produces blocks hosts it, and a follower forgets the URL an earlier run left behind,
/// so `modnode deposit submit --data-dir <follower>` fails instead of logging a lost deposit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_producing_node_hosts_the_dev_deposit_contract() {
    let tmp = dirs(2);
    let genesis = genesis("modnode-it-hosting", &[tmp[0].path()], 1);
    let stale = tmp[1].path().join(modnode::node::DEPOSIT_CONTRACT_URL_FILE);
    std::fs::write(&stale, "http://127.0.0.1:1").unwrap();
    let authority = start_with(tmp[0].path(), &genesis, vec![], hosting()).await;
    let follower = start_with(
        tmp[1].path(),
        &genesis,
        vec![authority.peer_addr().unwrap()],
        hosting(),
    )
    .await;
    let url = authority
        .deposit_contract_url()
        .expect("the authority hosts the dev contract")
        .to_string();
    let written = tmp[0].path().join(modnode::node::DEPOSIT_CONTRACT_URL_FILE);
    assert_eq!(std::fs::read_to_string(&written).unwrap().trim(), url);
    assert_eq!(follower.deposit_contract_url(), None);
    assert!(
        !stale.exists(),
        "the follower kept the URL of a contract nobody follows"
    );
    follower.shutdown().await;
    authority.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_on_another_genesis_is_refused() {
    let tmp = dirs(2);
    let a = start(
        tmp[0].path(),
        &genesis("modnode-it-a", &[tmp[0].path()], 1),
        vec![],
    )
    .await;
    let b = start(
        tmp[1].path(),
        &genesis("modnode-it-b", &[tmp[1].path()], 1),
        vec![a.peer_addr().unwrap()],
    )
    .await;
    eventually("both sides refusing the other chain", || {
        a.metrics().wrong_chain_refusals.load(Ordering::Relaxed) >= 1
            && b.metrics().wrong_chain_refusals.load(Ordering::Relaxed) >= 1
    })
    .await;
    assert_eq!(a.status().peers, 0);
    assert_eq!(b.status().peers, 0);
    assert_eq!(a.metrics().handshakes_completed.load(Ordering::Relaxed), 0);
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_presenting_an_unexpected_key_is_refused() {
    let tmp = dirs(2);
    let genesis = genesis("modnode-it-key", &[tmp[0].path()], 1);
    let a = start(tmp[0].path(), &genesis, vec![]).await;
    // B believes another key lives at A's address.
    let impostor = NodeIdentity::generate().unwrap().node_id();
    let wrong: PeerAddr = format!("{impostor}@{}", a.p2p_addr()).parse().unwrap();
    let b = start(tmp[1].path(), &genesis, vec![wrong]).await;
    eventually("B's dial failing on the key", || {
        b.metrics().dial_failures.load(Ordering::Relaxed) >= 1
    })
    .await;
    assert_eq!(b.status().peers, 0);
    assert_eq!(a.status().peers, 0);
    assert_eq!(b.metrics().handshakes_completed.load(Ordering::Relaxed), 0);
    b.shutdown().await;
    a.shutdown().await;
}

/// The hash of `node`'s genesis block.
pub(super) async fn genesis_hash(node: &Node) -> [u8; 32] {
    node.chain()
        .blocks(0, 1, usize::MAX)
        .await
        .unwrap()
        .first()
        .map(|b| {
            modnode::chain::block::Block::decode(b, 16)
                .unwrap()
                .hash()
                .to_bytes()
        })
        .unwrap()
}

/// Connects to `node` as a fresh identity and completes the hello.
pub(super) async fn raw_peer(
    node: &Node,
    genesis: &Genesis,
    chain_genesis: [u8; 32],
) -> quinn::Connection {
    let limits = TransportLimits::default();
    let me = NodeIdentity::generate().unwrap();
    let ep = endpoint::make_endpoint("127.0.0.1:0".parse().unwrap(), &me, &limits).unwrap();
    let (conn, peer) = endpoint::connect(&ep, node.p2p_addr(), None, &limits)
        .await
        .unwrap();
    let hello = Hello {
        protocol_version: handshake::PROTOCOL_VERSION,
        chain_id: genesis.chain_id.clone(),
        genesis_hash: modnode::hashes::BlockHash(chain_genesis),
        head_height: 0,
        head_hash: modnode::hashes::BlockHash(chain_genesis),
        listen_port: 0,
    };
    handshake::exchange(&conn, peer, &hello, Role::Dialer, Duration::from_secs(10))
        .await
        .unwrap();
    conn
}

pub(super) fn closed_for_violation(error: &quinn::ConnectionError) -> bool {
    matches!(error, quinn::ConnectionError::ApplicationClosed(c)
        if c.error_code == quinn::VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_a_stream_disconnects_the_peer_while_the_node_keeps_producing() {
    let tmp = dirs(1);
    let genesis = genesis("modnode-it-garbage", &[tmp[0].path()], 1);
    let node = start(tmp[0].path(), &genesis, vec![]).await;
    eventually("the node producing", || node.status().height >= 2).await;
    let genesis_hash = genesis_hash(&node).await;

    // A well-behaved request is answered …
    let conn = raw_peer(&node, &genesis, genesis_hash).await;
    eventually("the raw peer counted", || node.status().peers == 1).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let (t, p) = rpc::Request::Status.encode();
    codec::write_frame(&mut send, t, &p, 64).await.unwrap();
    send.finish().unwrap();
    let frame = codec::read_frame(&mut recv, 1 << 20)
        .await
        .unwrap()
        .unwrap();
    let rpc::Response::Status(status) =
        rpc::Response::decode(&rpc::Request::Status, frame.msg_type, &frame.payload).unwrap()
    else {
        panic!("not a status answer");
    };
    assert!(status.head_height >= 2);

    // … garbage on a gossip stream gets the peer disconnected.
    let mut uni = conn.open_uni().await.unwrap();
    uni.write_all(&[0xff; 64]).await.unwrap();
    uni.finish().unwrap();
    let closed = tokio::time::timeout(LIVENESS, conn.closed()).await.unwrap();
    assert!(closed_for_violation(&closed), "{closed:?}");

    // A second peer sending a garbage request on a bidirectional stream: the same.
    let conn = raw_peer(&node, &genesis, genesis_hash).await;
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    send.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    send.finish().unwrap();
    let closed = tokio::time::timeout(LIVENESS, conn.closed()).await.unwrap();
    assert!(closed_for_violation(&closed), "{closed:?}");
    assert!(node.metrics().peer_violations.load(Ordering::Relaxed) >= 2);

    // The node kept producing throughout.
    let height = node.status().height;
    eventually("the node producing after the attacks", || {
        node.status().height >= height + 2
    })
    .await;
    assert_eq!(node.status().peers, 0);
    node.shutdown().await;
}

/// The canonical block at `height`, encoded.
async fn block_at(node: &Node, height: u64) -> Vec<Vec<u8>> {
    node.chain().blocks(height, 1, usize::MAX).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorities_that_produced_apart_converge_on_one_chain() {
    let tmp = dirs(3);
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    // Branches that split below the finalized height never merge (nothing final is
    // reorganised), and under CPU load the follower that introduces the authorities can take
    // more than `finality_depth` slots to start: finality must not end the test before the
    // fork choice it checks can act (a stress run failed this way with a depth of 32).
    let genesis = genesis_with_finality("modnode-it-fork", &paths, 2, 100_000);
    // The two authorities start unaware of each other: each builds its own branch.
    let a = start(paths[0], &genesis, vec![]).await;
    let b = start(paths[1], &genesis, vec![]).await;
    eventually("two branches of height 2", || {
        a.status().height >= 2 && b.status().height >= 2
    })
    .await;
    assert_ne!(a.status().head_hash, b.status().head_hash);
    // A follower that knows both introduces them to each other (peer exchange).
    let c = start(
        paths[2],
        &genesis,
        vec![a.peer_addr().unwrap(), b.peer_addr().unwrap()],
    )
    .await;
    eventually("the authorities connected", || a.status().peers >= 2).await;
    // Eventually all three hold the same chain, on which both authorities sealed blocks: they
    // build on each other's blocks now.
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no common chain with both proposers: a {:?} b {:?} c {:?}",
            a.status(),
            b.status(),
            c.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let height = [&a, &b, &c]
            .iter()
            .map(|n| n.status().height)
            .min()
            .unwrap()
            .saturating_sub(1);
        let blocks = [
            block_at(&a, height).await,
            block_at(&b, height).await,
            block_at(&c, height).await,
        ];
        if height < 4 || blocks[0] != blocks[1] || blocks[1] != blocks[2] {
            continue;
        }
        let proposers: std::collections::BTreeSet<u32> = c
            .chain()
            .blocks(height.saturating_sub(3), 4, usize::MAX)
            .await
            .unwrap()
            .iter()
            .map(|b| {
                modnode::chain::block::Block::decode(b, 16)
                    .unwrap()
                    .header
                    .proposer
            })
            .collect();
        if proposers.len() == 2 {
            break;
        }
    }
    assert!(
        a.status().reorgs + b.status().reorgs >= 1,
        "one authority must have left its own branch"
    );
    for node in [c, b, a] {
        node.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_relaying_an_invalid_block_is_disconnected_and_the_block_dropped() {
    use modnode::chain::block::{Block, BlockBody, BlockHeader, Seal};
    use modnode_gossip::Frame;
    use modnode_gossip::policy::MessageKind;

    // The node follows a chain whose only authority is elsewhere, so its head stays at genesis.
    let tmp = dirs(2);
    let genesis = genesis("modnode-it-invalid", &[tmp[1].path()], 1);
    let node = start(tmp[0].path(), &genesis, vec![]).await;
    let genesis_block = block_at(&node, 0).await;
    let parent = Block::decode(&genesis_block[0], 16).unwrap();
    let conn = raw_peer(&node, &genesis, parent.hash().to_bytes()).await;
    eventually("the raw peer counted", || node.status().peers == 1).await;

    // A block for the current slot, sealed by a key that is not the authority's.
    let body = BlockBody::default();
    let header = BlockHeader {
        parent_hash: parent.hash(),
        height: 1,
        slot: genesis.slot_at(modnode::clock::unix_ms()).max(1),
        proposer: 0,
        state_root: parent.header.state_root,
        body_root: body.root(),
    };
    let forger = NodeIdentity::generate().unwrap();
    let block = Block {
        seal: Seal::Ed25519(forger.sign(header.hash().as_bytes()).unwrap()),
        header,
        body,
    };
    let payload = block.encode();
    let frame = Frame::Push {
        origin: None,
        id: modnode::net::gossip::message_id(MessageKind::Block, &payload),
        kind: MessageKind::Block,
        hops: 0,
        payload: payload.into(),
    }
    .encode()
    .unwrap();
    let mut uni = conn.open_uni().await.unwrap();
    codec::write_frame(
        &mut uni,
        modnode::net::gossip::GOSSIP_MESSAGE,
        &frame,
        1 << 20,
    )
    .await
    .unwrap();
    uni.finish().unwrap();
    let closed = tokio::time::timeout(LIVENESS, conn.closed()).await.unwrap();
    assert!(closed_for_violation(&closed), "{closed:?}");
    assert_eq!(node.status().height, 0, "the forged block was not imported");
    assert_eq!(node.metrics().blocks_rejected.load(Ordering::Relaxed), 1);
    node.shutdown().await;
}
