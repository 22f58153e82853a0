//! Faulty peers over QUIC on loopback: a peer answering our range requests with blocks
//! from far-future slots, or gossiping one, is banned (no busy loop it never pays for); a
//! malformed answer to a module request bans its sender as a malformed range answer does; and
//! no per-peer table outlives a ban.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use modnode::chain::DepositModules;
use modnode::chain::block::Block;
use modnode::chain::genesis::Genesis;
use modnode::clock::unix_ms;
use modnode::hashes::ModuleHash;
use modnode::net::codec;
use modnode::net::identity::NodeIdentity;
use modnode::net::rpc::{ChainStatus, Request, Response};
use modnode::node::Node;
use modnode::runtime::Kind;
use modnode_gossip::policy::MessageKind;

use crate::hostile::quic::{
    block_at, closed_for_violation, dirs, genesis, hello, loopback, push, raw_peer, start, within,
};

/// How long a hostile peer may keep its connection: a few status intervals.
const PUNISHED_WITHIN: Duration = Duration::from_secs(20);

/// What a hostile peer answers to one request.
enum Answer {
    Response(Response),
    /// A raw frame: these bytes as they are.
    Raw(Vec<u8>),
    /// Nothing (the stream is dropped).
    Nothing,
}

/// Per request kind, how many requests the hostile peer got.
#[derive(Default)]
struct Asked {
    blocks: AtomicUsize,
    modules: AtomicUsize,
    status: AtomicUsize,
}

/// Answers every request on `conn` with `answer`, counting them in `asked`.
fn serve(
    conn: quinn::Connection,
    asked: Arc<Asked>,
    answer: impl Fn(&Request) -> Answer + Send + Sync + 'static,
) {
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut send, mut recv)) = conn.accept_bi().await {
            let (answer, asked) = (answer.clone(), asked.clone());
            tokio::spawn(async move {
                let Ok(Some(frame)) = codec::read_frame(&mut recv, 1 << 16).await else {
                    return;
                };
                let Ok(request) = Request::decode(frame.msg_type, &frame.payload) else {
                    return;
                };
                let counter = match request {
                    Request::Blocks { .. } => Some(&asked.blocks),
                    Request::Module { .. } => Some(&asked.modules),
                    Request::Status => Some(&asked.status),
                    _ => None,
                };
                if let Some(counter) = counter {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                let bytes = match answer(&request) {
                    Answer::Nothing => return,
                    Answer::Raw(bytes) => bytes,
                    Answer::Response(response) => {
                        let (t, p) = response.encode();
                        codec::encode(t, &p).unwrap()
                    }
                };
                if send.write_all(&bytes).await.is_ok() {
                    let _ = send.finish();
                    let _ = send.stopped().await;
                }
            });
        }
    });
}

/// A status answer claiming `head_height` and `ready_modules`.
fn status(head_height: u64, ready_modules: Vec<ModuleHash>) -> Response {
    Response::Status(ChainStatus {
        head_height,
        head_hash: modnode::hashes::BlockHash([0xee; 32]),
        finalized_height: 0,
        ready_modules,
    })
}

/// A slot ten thousand slots from now.
fn far_slot(genesis: &Genesis) -> u64 {
    genesis.slot_at(unix_ms()) + 10_000
}

/// A well-formed block at `height` for `slot` (the genesis block's other fields: nothing past
/// the slot check is ever reached).
fn far_future(template: &Block, slot: u64, height: u64) -> Block {
    let mut block = template.clone();
    block.header.height = height;
    block.header.slot = slot;
    block
}

/// A node that produces nothing (its genesis authority never runs), so its head stays at 0
/// while the slots (which bound what a peer may claim) go on.
async fn follower(chain_id: &str) -> (Vec<tempfile::TempDir>, Genesis, Node, [u8; 32]) {
    let tmp = dirs(2);
    let genesis = genesis(chain_id, &[tmp[1].path()]);
    let node = start(tmp[0].path(), &genesis, vec![]).await;
    let genesis_hash = block_at(&node, 0).await.hash().to_bytes();
    (tmp, genesis, node, genesis_hash)
}

/// A peer that claims a few blocks more than we hold and answers each range request
/// with a well-formed block from a far-future slot is banned at its first answer, instead of
/// being asked again at once, thousands of times a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_serving_far_future_blocks_is_banned_not_asked_again_in_a_loop() {
    let (_tmp, genesis, node, genesis_hash) = follower("peer-faults-future-range").await;
    // Claims must be within the slots elapsed to be believed.
    within(Duration::from_secs(10), "slot 3", || {
        genesis.slot_at(unix_ms()) >= 3
    })
    .await;
    let template = block_at(&node, 0).await;
    let slot = far_slot(&genesis);
    // The claimed head is the hash of the block served at its height: every answer is
    // consistent with the claim.
    let head = far_future(&template, slot, 3).hash().to_bytes();
    let asked = Arc::new(Asked::default());
    let me = NodeIdentity::generate().unwrap();
    let mut claim = hello(&genesis, genesis_hash, 3);
    claim.head_hash = modnode::hashes::BlockHash(head);
    let (_ep, liar) = raw_peer(&node, &me, loopback(), &claim).await.unwrap();
    serve(liar.clone(), asked.clone(), move |request| match request {
        // Only the first block of the range: a prefix is a well-formed answer.
        Request::Blocks { start, .. } => Answer::Response(Response::Blocks(vec![
            far_future(&template, slot, *start).encode(),
        ])),
        Request::Status => Answer::Response(Response::Status(ChainStatus {
            head_height: 3,
            head_hash: modnode::hashes::BlockHash(head),
            finalized_height: 0,
            ready_modules: Vec::new(),
        })),
        _ => Answer::Nothing,
    });
    let closed = tokio::time::timeout(PUNISHED_WITHIN, liar.closed())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the peer serving far-future blocks kept its connection after {} range requests",
                asked.blocks.load(Ordering::Relaxed)
            )
        });
    assert!(closed_for_violation(&closed), "{closed:?}");
    // At most one request per claimed height (the answers are one-block prefixes).
    let requests = asked.blocks.load(Ordering::Relaxed);
    assert!(requests <= 3, "{requests} range requests before the ban");
    assert_eq!(node.metrics().peer_future_blocks.load(Ordering::Relaxed), 1);
    assert_eq!(node.status().height, 0);
    node.shutdown().await;
}

/// A gossiped block from a far-future slot counts against its sender as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gossiped_far_future_block_bans_its_sender() {
    let (_tmp, genesis, node, genesis_hash) = follower("peer-faults-future-gossip").await;
    let template = block_at(&node, 0).await;
    let me = NodeIdentity::generate().unwrap();
    let (_ep, conn) = raw_peer(&node, &me, loopback(), &hello(&genesis, genesis_hash, 0))
        .await
        .unwrap();
    push(
        &conn,
        MessageKind::Block,
        far_future(&template, far_slot(&genesis), 1).encode(),
    )
    .await;
    let closed = tokio::time::timeout(PUNISHED_WITHIN, conn.closed())
        .await
        .expect("the sender of a far-future block kept its connection");
    assert!(closed_for_violation(&closed), "{closed:?}");
    assert_eq!(node.metrics().peer_future_blocks.load(Ordering::Relaxed), 1);
    node.shutdown().await;
}

/// A module answer announcing 100 MB is refused *and* bans its sender (one rule for
/// malformed answers on every request kind), so the peer is not asked again every 2 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_module_answer_bans_its_sender() {
    let (_tmp, genesis, node, genesis_hash) = follower("peer-faults-module").await;
    let module = ModuleHash([0x42; 32]);
    let asked = Arc::new(Asked::default());
    let me = NodeIdentity::generate().unwrap();
    let (_ep, conn) = raw_peer(&node, &me, loopback(), &hello(&genesis, genesis_hash, 0))
        .await
        .unwrap();
    serve(conn.clone(), asked.clone(), move |request| match request {
        Request::Status => Answer::Response(status(0, vec![module])),
        // A length prefix of 100 MB, then a little of it.
        Request::Module { .. } => {
            let mut bytes = (100u32 << 20).to_be_bytes().to_vec();
            bytes.extend_from_slice(&[codec::WIRE_VERSION, 0]);
            bytes.extend_from_slice(&[0; 4096]);
            Answer::Raw(bytes)
        }
        _ => Answer::Nothing,
    });
    // The chain needed the module on some branch: it is on the fetch list.
    DepositModules::missing(&**node.upgrades(), Kind::Deposits, &module, 1);
    let closed = tokio::time::timeout(PUNISHED_WITHIN, conn.closed())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the peer answering 100 MB kept its connection after {} module requests",
                asked.modules.load(Ordering::Relaxed)
            )
        });
    assert!(closed_for_violation(&closed), "{closed:?}");
    assert_eq!(asked.modules.load(Ordering::Relaxed), 1);
    assert_eq!(
        node.metrics()
            .peer_malformed_answers
            .load(Ordering::Relaxed),
        1
    );
    node.shutdown().await;
}

/// One module request on a new stream of `conn`; the answer is not read.
async fn ask_module(conn: &quinn::Connection, hash: ModuleHash) {
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    let (t, p) = Request::Module { hash }.encode();
    codec::write_frame(&mut send, t, &p, 64).await.unwrap();
    send.finish().unwrap();
}

/// Peers that reported a module ready and asked for one, then were banned, leave
/// nothing behind: every per-peer table (readiness, fetch pacing, serve limits, range sync) is
/// bounded by the connected set, the status no longer counts them, and a banned identity that
/// comes back is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_per_peer_table_outlives_a_ban() {
    const PEERS: usize = 16;
    let (_tmp, genesis, node, genesis_hash) = follower("peer-faults-tables").await;
    let module = ModuleHash([0x43; 32]);
    let hello = hello(&genesis, genesis_hash, 0);
    for i in 0..PEERS {
        let me = NodeIdentity::generate().unwrap();
        let (_ep, conn) = raw_peer(&node, &me, loopback(), &hello).await.unwrap();
        let asked = Arc::new(Asked::default());
        serve(conn.clone(), asked.clone(), move |request| match request {
            Request::Status => Answer::Response(status(0, vec![module])),
            _ => Answer::Nothing,
        });
        ask_module(&conn, module).await;
        within(
            Duration::from_secs(20),
            "the peer's readiness and serve account recorded",
            || {
                let sizes = node.upgrades().peer_table_sizes();
                sizes.readiness == 1 && sizes.serving == 1
            },
        )
        .await;
        // A gossip kind this protocol does not use: a violation, the peer is banned.
        push(&conn, MessageKind::Consensus, vec![i as u8; 64]).await;
        let closed = tokio::time::timeout(PUNISHED_WITHIN, conn.closed())
            .await
            .expect("not banned");
        assert!(closed_for_violation(&closed), "{closed:?}");
        within(Duration::from_secs(10), "the banned peer forgotten", || {
            node.upgrades().peer_table_sizes() == Default::default() && node.status().peers == 0
        })
        .await;
        // It comes back under the same identity: refused, nothing recorded.
        assert!(
            raw_peer(&node, &me, loopback(), &hello).await.is_err(),
            "a banned peer was let in again"
        );
    }
    within(Duration::from_secs(10), "every table empty", || {
        node.metrics().peer_table_entries.load(Ordering::Relaxed) == 0
    })
    .await;
    assert_eq!(node.upgrades().peer_table_sizes(), Default::default());
    assert_eq!(node.status().peers, 0);
    assert_eq!(
        node.metrics().peer_violations.load(Ordering::Relaxed),
        PEERS as u64
    );
    node.shutdown().await;
}

/// Sans-IO at scale: 10⁴ identities each connect, report a module ready, ask us for a
/// module (still being answered when the ban comes), fail a range request, break the protocol
/// and are banned, then try to come back. Every per-peer table the network task keeps is
/// driven the way it drives them — the manager's `Disconnect` action is what a ban turns into,
/// and `peer_left` is what the network task does with it — and stays bounded by the connected
/// set (here, nobody), the peer manager's book included; bans themselves are capped by
/// `PeerConfig::max_bans`.
#[test]
fn ten_thousand_banned_identities_leave_every_table_bounded_by_the_connected_set() {
    use modnode_peers::{
        Action, PeerConfig, PeerManager, RangeSync, SECONDS, SyncConfig, SyncTableSizes, Violation,
    };
    const IDENTITIES: u32 = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let agent = crate::node_agent(dir.path());
    let mut peers = PeerManager::new(PeerConfig::new([0; 32]), [], 7, 0).unwrap();
    let mut sync = RangeSync::new(SyncConfig::default(), 0, [0; 32]).unwrap();
    let module = ModuleHash([0x44; 32]);
    for i in 0..IDENTITIES {
        let now = u64::from(i) * SECONDS;
        let mut node = [0xaa; 32];
        node[..4].copy_from_slice(&i.to_be_bytes());
        let [a, b, c, d] = i.to_be_bytes();
        let addr = std::net::SocketAddr::from(([10, b, c, d.max(1)], 9000 + u16::from(a)));
        peers.handle_inbound(node, addr, now).unwrap();
        peers.handle_handshake_completed(node, now).unwrap();
        sync.handle_peer_status(node, 5, [0xee; 32], now);
        agent.peer_ready(node, vec![module]);
        agent.fetch_answered(node, &module, false);
        let in_flight = agent.serve(node, &module).unwrap();
        let request = sync.poll_request(now).unwrap();
        sync.handle_request_failed(node, request.id, now).unwrap();

        peers.handle_violation(node, Violation::Malformed("garbage".into()), now);
        while let Some(action) = peers.poll_action(now) {
            if let Action::Disconnect { node: gone, .. } = action {
                // `Network::peer_left`.
                sync.handle_peer_disconnected(gone);
                agent.peer_gone(&gone);
            }
        }
        drop(in_flight);
        assert!(
            peers.handle_inbound(node, addr, now + 1).is_err(),
            "identity {i} let in again while banned"
        );

        assert_eq!(peers.connected_count(), 0);
        assert_eq!(
            agent.peer_table_sizes(),
            Default::default(),
            "identity {i}: the upgrade agent remembers a banned peer"
        );
        assert_eq!(
            sync.peer_table_sizes(),
            SyncTableSizes::default(),
            "identity {i}: range sync remembers a banned peer"
        );
        assert!(
            peers.counts().known <= 1,
            "identity {i}: the address book holds {} peers",
            peers.counts().known
        );
    }
}
