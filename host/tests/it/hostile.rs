//! A hostile peer against fork choice, the chain worker and the network driver: body-swapped
//! blocks, blocks from future slots, fake head heights, unknown gossip kinds, restarts.
//!
//! Chain-level attacks run on a chain in memory (sans-IO); the ones about sockets run whole
//! nodes over QUIC on loopback. Waits are liveness bounds (generous, polled), not performance
//! targets.

use std::sync::Arc;

use modnode::chain::block::{Block, Seal};
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Added, Chain, DepositEngine, ForkChoiceError, ImportError, workload};
use modnode::net::identity::NodeIdentity;
use modnode::store::MemoryStore;

/// A chain in memory whose only authority is `authority`.
fn authority_chain(authority: &NodeIdentity) -> Chain {
    let mut genesis = Genesis::generated("hostile", 8, 7);
    genesis.authorities = vec![*authority.node_id().as_bytes()];
    Chain::open(
        Arc::new(MemoryStore::new()),
        genesis,
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap()
}

/// The next block on `chain`'s head at `slot`, sealed by `who`.
fn sealed(chain: &Chain, slot: u64, who: &NodeIdentity) -> Block {
    let mut block = chain
        .build_block(slot, 0, chain.eth1_data(), vec![])
        .unwrap();
    block.seal = Seal::Ed25519(who.sign(&chain.seal_message(&block.hash())).unwrap());
    block
}

/// `block` with its real header and seal but another body.
fn body_swapped(block: &Block) -> Block {
    let mut swapped = block.clone();
    swapped
        .body
        .deposits
        .push(modnode::chain::eth1::ProvenDeposit {
            data: workload::new_validator(77, 32_000_000_000, [0; 4]),
            proof: [[0; 32]; 33],
        });
    assert_eq!(
        swapped.hash(),
        block.hash(),
        "the header hash covers no body"
    );
    swapped
}

fn is_bad_body(result: &Result<Added, ForkChoiceError>) -> bool {
    matches!(
        result,
        Err(ForkChoiceError::Invalid(ImportError::BadBody { .. }))
    )
}

#[test]
fn body_swapped_blocks_are_refused_on_every_fork_choice_path() {
    let a = NodeIdentity::generate().unwrap();
    let mut chain = authority_chain(&a);
    let mut side = authority_chain(&a);

    // Known path: a canonical block's header and seal with another body is not "known".
    let block = sealed(&chain, 1, &a);
    assert!(matches!(chain.add_block(&block), Ok(Added::Extended(_))));
    let swapped = body_swapped(&block);
    assert!(
        is_bad_body(&chain.add_block(&swapped)),
        "known block with a swapped body"
    );

    // Extending path (import) already checked the body; it still does.
    let next = sealed(&chain, 3, &a);
    assert!(is_bad_body(&chain.add_block(&body_swapped(&next))));

    // Side-branch path: a rival at height 1 (slot 2) with a swapped body is refused before it
    // is stored, so the real rival is stored afterwards and the branch can win.
    let rival = sealed(&side, 2, &a);
    side.add_block(&rival).unwrap();
    let rival_child = sealed(&side, 4, &a);
    side.add_block(&rival_child).unwrap();
    assert!(
        is_bad_body(&chain.add_block(&body_swapped(&rival))),
        "side-branch block with a swapped body"
    );
    assert!(matches!(
        chain.add_block(&rival).unwrap(),
        Added::Stored | Added::Reorganised { .. }
    ));
    // A second copy of the stored rival (same header, another body) never replaces it.
    assert!(is_bad_body(&chain.add_block(&body_swapped(&rival))));
    assert!(matches!(
        chain.add_block(&rival_child).unwrap(),
        Added::Reorganised { .. } | Added::Extended(_)
    ));
    assert_eq!(chain.head().hash, rival_child.hash());
    assert_eq!(chain.block_at(1).unwrap().unwrap(), rival);
}

/// A block from a slot that has not started is refused by the chain worker, which
/// every network path (gossip, range sync, branch fetch) imports through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_from_future_slots_are_refused_on_import() {
    use modnode::clock::unix_ms;
    use modnode::node::chain_worker::{self, WorkerError};
    let a = NodeIdentity::generate().unwrap();
    let mut genesis = Genesis::generated("hostile-future", 8, 7);
    genesis.authorities = vec![*a.node_id().as_bytes()];
    genesis.genesis_time_ms = unix_ms();
    genesis.slot_ms = 1_000;
    let chain = Chain::open(
        Arc::new(MemoryStore::new()),
        genesis.clone(),
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap();
    let early = sealed(&chain, genesis.slot_at(unix_ms()) + 60, &a);
    let (handle, worker) = chain_worker::spawn(chain, a.clone(), None).unwrap();
    let refused = handle.add_block(early.clone()).await;
    assert!(
        matches!(refused, Err(WorkerError::FutureSlot { .. })),
        "a block 60 slots ahead was taken: {refused:?}"
    );
    assert_eq!(handle.view().head.height, 0);
    // An honest node sends only blocks whose slot has started on its clock
    // (within the one skew allowance), so a block 60 slots ahead is its sender's fault.
    assert_eq!(
        refused.unwrap_err().fault(),
        modnode::node::verdict::Fault::Peer,
        "a block from beyond the clock plus the skew allowance is not the peer's fault"
    );
    drop(handle);
    worker.join().unwrap();
}

/// Our own failures and transient ones never penalise the peer that sent a block;
/// provably invalid blocks do.
#[test]
fn local_failures_do_not_penalise_the_sender() {
    use modnode::node::chain_worker::WorkerError;
    use modnode::node::verdict::{self, Fault, RequestError};
    use modnode::store::StoreError;
    let store = || StoreError::Backend {
        path: "/data/chain".into(),
        message: "No space left on device".into(),
    };
    let hash = || modnode::hashes::BlockHash::new([0xab; 32]);
    let ours: Vec<(&str, WorkerError)> = vec![
        ("stopped worker", WorkerError::Stopped),
        (
            "store error on import",
            WorkerError::Block(ForkChoiceError::Invalid(ImportError::Store {
                hash: hash(),
                source: store(),
            })),
        ),
        (
            "store error in fork choice",
            WorkerError::Block(ForkChoiceError::Store(store())),
        ),
    ];
    for (what, error) in ours {
        assert_ne!(error.fault(), Fault::Peer, "{what}");
        let verdict = verdict::gossip_block(5, &Err(error));
        assert_eq!(verdict.penalty, None, "{what} penalised the sender");
        assert!(!verdict.relay, "{what} relayed");
    }
    assert_eq!(
        RequestError::Timeout(std::time::Duration::from_secs(10)).fault(),
        Fault::Transient
    );
    assert_eq!(
        RequestError::Transport("connection lost".into()).fault(),
        Fault::Transient
    );

    // The peer's fault: a block from beyond our clock plus the skew allowance, a bad
    // seal or a swapped body.
    let future = WorkerError::FutureSlot {
        height: 5,
        slot: 90,
        current: 10,
        ahead_ms: 80 * 1_000,
    };
    assert_eq!(future.fault(), Fault::Peer);
    // Only early by our clock (which may be the one behind): dropped, not the peer's fault.
    let early = WorkerError::FutureSlot {
        height: 5,
        slot: 11,
        current: 10,
        ahead_ms: modnode::clock::FAR_FUTURE_MS,
    };
    assert_eq!(early.fault(), Fault::Transient);
    let verdict = verdict::gossip_block(5, &Err(early));
    assert!(verdict.penalty.is_none() && !verdict.relay);
    let verdict = verdict::gossip_block(5, &Err(future));
    assert!(verdict.penalty.is_some() && !verdict.relay);
    for error in [
        ImportError::BadSeal {
            hash: hash(),
            reason: "forged".into(),
        },
        ImportError::BadBody {
            hash: hash(),
            reason: "swapped".into(),
        },
    ] {
        let verdict =
            verdict::gossip_block(5, &Err(WorkerError::Block(ForkChoiceError::Invalid(error))));
        assert!(verdict.penalty.is_some() && !verdict.relay);
    }
    // A sealed block with an unknown parent: not relayed, not penalised, the sender can be
    // synced from.
    let verdict = verdict::gossip_block(
        5,
        &Err(WorkerError::Block(ForkChoiceError::UnknownParent {
            hash: hash(),
            height: 5,
            parent: hash(),
        })),
    );
    assert_eq!(
        (verdict.relay, verdict.penalty, verdict.behind_sender),
        (false, None, true)
    );
    let verdict = verdict::gossip_block(5, &Ok(Added::Known));
    assert!(verdict.relay && verdict.penalty.is_none());
}

/// An authority that just started produces only once it tried every known
/// peer and has nothing left to sync from them, or once the bounded wait is over.
#[test]
fn a_started_authority_produces_only_after_trying_its_peers() {
    use KnownPeer::{Connected, Unreachable, Untried};
    use modnode::node::verdict::{KnownPeer, may_produce_after_start};
    assert!(may_produce_after_start(false, &[], true), "no known peers");
    assert!(!may_produce_after_start(false, &[Connected, Untried], true));
    assert!(
        !may_produce_after_start(false, &[Connected], false),
        "still syncing"
    );
    assert!(may_produce_after_start(
        false,
        &[Connected, Unreachable],
        true
    ));
    assert!(
        may_produce_after_start(true, &[Untried], false),
        "the wait is bounded"
    );
}

/// A job of the worker-scheduling model: our block for a slot, or a peer's range request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    Produce { slot: u64 },
    Serve,
}

/// Runs one worker over virtual time (ms): `arrivals` come in at their time and are offered to
/// `push` (which may refuse them); the worker runs whatever `pop` gives it, a block production
/// taking `produce_ms` and a range request `serve_ms`. Returns the slots whose block was
/// started after the slot had ended, and how many jobs were refused.
fn schedule(
    arrivals: &[(
        u64,
        modnode::node::worker_queue::JobClass,
        Option<[u8; 32]>,
        Job,
    )],
    slot_ms: u64,
    mut push: impl FnMut(modnode::node::worker_queue::JobClass, Option<[u8; 32]>, Job) -> bool,
    mut pop: impl FnMut() -> Option<Job>,
) -> (Vec<u64>, usize) {
    const PRODUCE_MS: u64 = 30;
    const SERVE_MS: u64 = 20;
    let (mut now, mut next, mut missed, mut refused) = (0u64, 0usize, Vec::new(), 0usize);
    loop {
        while let Some((at, class, peer, job)) = arrivals.get(next).copied() {
            if at > now {
                break;
            }
            if !push(class, peer, job) {
                refused += 1;
            }
            next += 1;
        }
        match pop() {
            Some(Job::Produce { slot }) => {
                if now >= (slot + 1) * slot_ms {
                    missed.push(slot);
                }
                now += PRODUCE_MS;
            }
            Some(Job::Serve) => now += SERVE_MS,
            None => match arrivals.get(next) {
                Some((at, ..)) => now = *at,
                None => return (missed, refused),
            },
        }
    }
}

/// 8 peers sending 64 range requests each while our slots come round: with the
/// worker's bounded priority queue the producer never misses a slot (and most of the flood is
/// refused at the door); with one FIFO, as before, it misses many.
#[test]
fn range_request_floods_never_make_the_producer_miss_a_slot() {
    use modnode::node::worker_queue::{JobClass, QueueLimits, WorkerQueue};
    const SLOT_MS: u64 = 300;
    let mut arrivals = Vec::new();
    for round in 0..64u64 {
        for peer in 0..8u8 {
            arrivals.push((round, JobClass::Serve, Some([peer; 32]), Job::Serve));
        }
    }
    for slot in 0..20u64 {
        arrivals.push((
            slot * SLOT_MS,
            JobClass::Produce,
            None,
            Job::Produce { slot },
        ));
    }
    arrivals.sort_by_key(|(at, ..)| *at);

    let queue = std::cell::RefCell::new(WorkerQueue::new(QueueLimits::default()));
    let (missed, refused) = schedule(
        &arrivals,
        SLOT_MS,
        |class, peer, job| queue.borrow_mut().push(class, peer, job).is_ok(),
        || queue.borrow_mut().pop(),
    );
    assert_eq!(
        missed,
        Vec::<u64>::new(),
        "slots missed with the priority queue"
    );
    assert!(
        refused >= 512 - 64,
        "the flood is bounded: {refused} refused"
    );

    // Today's scheduling, one unbounded FIFO, for comparison: the flood delays production.
    let fifo = std::cell::RefCell::new(std::collections::VecDeque::new());
    let (missed, _) = schedule(
        &arrivals,
        SLOT_MS,
        |_, _, job| {
            fifo.borrow_mut().push_back(job);
            true
        },
        || fifo.borrow_mut().pop_front(),
    );
    assert!(missed.len() > 10, "a FIFO misses slots: {missed:?}");
}

/// The head's registry is an immutable value readers hold (there is no lock a panic could
/// poison): a reader keeps the view it took while the chain reverts under it, and disk and
/// memory agree afterwards (the chain reopens on the same head and registry).
#[test]
fn a_reader_holding_the_head_registry_keeps_its_view_and_revert_stays_consistent() {
    let store = Arc::new(MemoryStore::new());
    let genesis = Genesis::generated("hostile-poison", 8, 7);
    let open = || {
        Chain::open(
            store.clone(),
            genesis.clone(),
            DepositEngine::Native(Verification::Batched),
        )
        .unwrap()
    };
    let mut chain = open();
    let deposit = workload::new_validator(900, 32_000_000_000, genesis.genesis_fork_version);
    let mut contract = workload::DevDepositLog::new();
    contract.push(deposit);
    let block = chain
        .build_block_from(1, 0, contract.eth1_data(), &contract)
        .unwrap();
    let before = chain.registry();
    chain.import(&block).unwrap();
    let held = chain.registry();
    assert_eq!(held.len(), before.len() + 1, "the block added a validator");

    let reverted = chain.revert_head().unwrap();
    assert_eq!(chain.head(), reverted);
    assert_eq!(
        chain.registry().len(),
        before.len(),
        "memory follows the revert"
    );
    assert_eq!(*chain.registry(), *before);
    assert_eq!(
        held.len(),
        before.len() + 1,
        "the reader's view did not change under it"
    );
    let memory = chain.registry();
    drop(chain);
    let reopened = Chain::open(
        store.clone(),
        genesis.clone(),
        DepositEngine::Native(Verification::Batched),
    )
    .expect("disk left consistent");
    assert_eq!(reopened.head(), reverted, "disk has the revert");
    assert_eq!(*reopened.registry(), *memory, "disk and memory agree");
}

// ----- over QUIC on loopback ---------------------------------------------------------------

pub(crate) mod quic {
    use std::collections::BTreeSet;
    use std::net::SocketAddr;
    use std::path::Path;
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use modnode::chain::block::Block;
    use modnode::chain::genesis::Genesis;
    use modnode::net::codec;
    use modnode::net::endpoint::{self, CLOSE_PROTOCOL_VIOLATION, TransportLimits};
    use modnode::net::gossip::GOSSIP_MESSAGE;
    use modnode::net::handshake::{self, Hello, Role};
    use modnode::net::identity::NodeIdentity;
    use modnode::net::rpc::{ChainStatus, Request, Response};
    use modnode::node::{Node, NodeConfig};
    use modnode_gossip::policy::MessageKind;
    use modnode_gossip::{Frame, MessageId};
    use modnode_peers::PeerAddr;
    use tempfile::TempDir;

    use super::body_swapped;

    const SLOT_MS: u64 = 300;
    pub(crate) const LIVENESS: Duration = Duration::from_secs(90);

    pub(crate) fn dirs(n: usize) -> Vec<TempDir> {
        (0..n).map(|_| TempDir::new().unwrap()).collect()
    }

    /// A genesis whose authorities are the node keys in `authorities`.
    pub(crate) fn genesis(chain_id: &str, authorities: &[&Path]) -> Genesis {
        let ids: Vec<String> = authorities
            .iter()
            .map(|d| {
                NodeIdentity::load_or_create(d)
                    .unwrap()
                    .node_id()
                    .to_string()
            })
            .collect();
        let text = serde_json::json!({
            "chain_id": chain_id,
            "genesis_time_ms": modnode::clock::unix_ms(),
            "slot_ms": SLOT_MS,
            "finality_depth": 32,
            "authorities": ids,
            "generated_validators": { "count": 8, "seed": 3 },
        })
        .to_string();
        Genesis::from_json(&text, "<test>").unwrap()
    }

    async fn start_with(
        dir: &Path,
        genesis: &Genesis,
        bootstrap: Vec<PeerAddr>,
        tune: impl FnOnce(&mut NodeConfig),
    ) -> Node {
        let mut config = NodeConfig::new(dir.to_path_buf(), genesis.clone());
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.admin_listen = None;
        config.bootstrap = bootstrap;
        tune(&mut config);
        Node::start(config).await.unwrap()
    }

    pub(crate) async fn start(dir: &Path, genesis: &Genesis, bootstrap: Vec<PeerAddr>) -> Node {
        start_with(dir, genesis, bootstrap, |_| {}).await
    }

    /// Polls `check` until it holds; panics with `what` after `bound`.
    pub(crate) async fn within(bound: Duration, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + bound;
        while !check() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "not within {bound:?}: {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn eventually(what: &str, check: impl FnMut() -> bool) {
        within(LIVENESS, what, check).await;
    }

    pub(crate) async fn block_at(node: &Node, height: u64) -> Block {
        let encoded = node.chain().blocks(height, 1, usize::MAX).await.unwrap();
        Block::decode(&encoded[0], 16).unwrap()
    }

    /// A hello on `genesis` claiming `head_height`.
    pub(crate) fn hello(genesis: &Genesis, genesis_hash: [u8; 32], head_height: u64) -> Hello {
        Hello {
            protocol_version: handshake::PROTOCOL_VERSION,
            chain_id: genesis.chain_id.clone(),
            genesis_hash: modnode::hashes::BlockHash(genesis_hash),
            head_height,
            head_hash: modnode::hashes::BlockHash([0xee; 32]),
            listen_port: 0,
        }
    }

    /// Connects `me` (bound to `bind`) to `node` and completes the hello.
    pub(crate) async fn raw_peer(
        node: &Node,
        me: &NodeIdentity,
        bind: SocketAddr,
        hello: &Hello,
    ) -> Result<(quinn::Endpoint, quinn::Connection), String> {
        let limits = TransportLimits::default();
        let ep = endpoint::make_endpoint(bind, me, &limits).map_err(|e| e.to_string())?;
        let (conn, peer) = endpoint::connect(&ep, node.p2p_addr(), None, &limits)
            .await
            .map_err(|e| e.to_string())?;
        handshake::exchange(&conn, peer, hello, Role::Dialer, Duration::from_secs(10))
            .await
            .map_err(|e| e.to_string())?;
        Ok((ep, conn))
    }

    pub(crate) fn loopback() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    pub(crate) fn closed_for_violation(error: &quinn::ConnectionError) -> bool {
        matches!(error, quinn::ConnectionError::ApplicationClosed(c)
            if c.error_code == quinn::VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION))
    }

    /// Pushes `payload` of `kind` to the node behind `conn` as one gossip frame.
    pub(crate) async fn push(
        conn: &quinn::Connection,
        kind: MessageKind,
        payload: Vec<u8>,
    ) -> MessageId {
        let id = modnode::net::gossip::message_id(kind, &payload);
        let frame = Frame::Push {
            id,
            kind,
            hops: 0,
            origin: None,
            payload: payload.into(),
        }
        .encode()
        .unwrap();
        let mut uni = conn.open_uni().await.unwrap();
        codec::write_frame(&mut uni, GOSSIP_MESSAGE, &frame, 1 << 20)
            .await
            .unwrap();
        uni.finish().unwrap();
        id
    }

    /// Records the id of every message announced to `conn`, and of every message pushed to it
    /// both its id and the sha256 of its payload (a block's id covers only its header).
    fn watch_gossip(conn: quinn::Connection) -> Arc<Mutex<BTreeSet<MessageId>>> {
        fn collect(frame: Frame, ids: &mut BTreeSet<MessageId>) {
            match frame {
                Frame::Push { id, payload, .. } => {
                    ids.insert(id);
                    ids.insert(MessageId::of(&payload));
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

    /// A body-swapped copy of a canonical block, pushed to B in the line A–B–C, is
    /// refused by B (its sender banned), relayed to nobody, and no honest peer is banned.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_swapped_block_is_relayed_by_nobody_and_bans_no_honest_peer() {
        let tmp = dirs(3);
        let genesis = genesis("hostile-swap", &[tmp[0].path()]);
        let a = start_with(tmp[0].path(), &genesis, vec![], |c| c.max_inbound = 1).await;
        let b = start(tmp[1].path(), &genesis, vec![a.peer_addr().unwrap()]).await;
        let c = start_with(tmp[2].path(), &genesis, vec![b.peer_addr().unwrap()], |c| {
            c.target_outbound = 1
        })
        .await;
        eventually("the line at height 3", || {
            [&a, &b, &c].iter().all(|n| n.status().height >= 3)
        })
        .await;
        let genesis_hash = block_at(&b, 0).await.hash().to_bytes();

        // A watcher on B sees everything B relays; an attacker pushes the forgery to B.
        let hello = hello(&genesis, genesis_hash, 0);
        let me = NodeIdentity::generate().unwrap();
        let (_wep, watcher) = raw_peer(&b, &me, loopback(), &hello).await.unwrap();
        let relayed = watch_gossip(watcher.clone());
        let me = NodeIdentity::generate().unwrap();
        let (_aep, attacker) = raw_peer(&b, &me, loopback(), &hello).await.unwrap();
        eventually("B counting both raw peers", || b.status().peers >= 4).await;

        let real = block_at(&b, 2).await;
        let forged = body_swapped(&real);
        let forged_bytes = forged.encode();
        let forged_hash = MessageId::of(&forged_bytes);
        assert_eq!(
            push(&attacker, MessageKind::Block, forged_bytes).await,
            modnode::net::gossip::message_id(MessageKind::Block, &real.encode()),
            "a body variant has its block's gossip id"
        );
        let closed = tokio::time::timeout(LIVENESS, attacker.closed())
            .await
            .expect("B keeps the peer that pushed a body-swapped block");
        assert!(closed_for_violation(&closed), "{closed:?}");

        // The chain moves on and the watcher hears new blocks, never the forgery.
        let height = b.status().height;
        eventually("the watcher hearing new blocks", || {
            relayed.lock().unwrap().len() >= 3 && b.status().height >= height + 2
        })
        .await;
        assert!(
            !relayed.lock().unwrap().contains(&forged_hash),
            "B relayed the body-swapped block"
        );
        assert_eq!(block_at(&b, 2).await, real, "the stored block was replaced");
        assert_eq!(b.metrics().peer_violations.load(Ordering::Relaxed), 1);
        for (name, node) in [("A", &a), ("C", &c)] {
            assert_eq!(
                node.metrics().peer_violations.load(Ordering::Relaxed),
                0,
                "{name} banned an honest peer"
            );
        }
        assert_eq!(a.status().peers, 1, "A lost B");
        assert_eq!(c.status().peers, 1, "C lost B");
        watcher.close(0u32.into(), b"done");
        for node in [c, b, a] {
            node.shutdown().await;
        }
    }

    /// A UDP relay on loopback to `target` that drops every datagram, both ways, until
    /// `blackout` has passed, then forwards them: a peer whose path comes up late.
    async fn late_relay(target: SocketAddr, blackout: Duration) -> SocketAddr {
        let listen = Arc::new(tokio::net::UdpSocket::bind(loopback()).await.unwrap());
        let upstream = Arc::new(tokio::net::UdpSocket::bind(loopback()).await.unwrap());
        upstream.connect(target).await.unwrap();
        let addr = listen.local_addr().unwrap();
        let open_at = tokio::time::Instant::now() + blackout;
        let client: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let (down_listen, down_client, down_upstream) =
            (listen.clone(), client.clone(), upstream.clone());
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while let Ok(n) = down_upstream.recv(&mut buf).await {
                let to = *down_client.lock().unwrap();
                if let Some(to) = to
                    && tokio::time::Instant::now() >= open_at
                {
                    let _ = down_listen.send_to(&buf[..n], to).await;
                }
            }
        });
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while let Ok((n, from)) = listen.recv_from(&mut buf).await {
                *client.lock().unwrap() = Some(from);
                if tokio::time::Instant::now() >= open_at {
                    let _ = upstream.send(&buf[..n]).await;
                }
            }
        });
        addr
    }

    /// An authority restarts while its only
    /// peer is reachable but slow to answer (the path comes up after several of its slots).
    /// It must wait for the peer it knows (within its bounded startup wait) and sync, not
    /// produce on its stale head in the meantime and reorganise later.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restarted_authority_waits_for_a_slow_known_peer_instead_of_forking() {
        let tmp = dirs(2);
        let genesis = genesis("hostile-restart-slow-peer", &[tmp[0].path(), tmp[1].path()]);
        let b = start(tmp[1].path(), &genesis, vec![]).await;
        let a = start(tmp[0].path(), &genesis, vec![b.peer_addr().unwrap()]).await;
        eventually("both authorities producing on one chain", || {
            a.metrics().blocks_produced.load(Ordering::Relaxed) >= 2
                && b.metrics().blocks_produced.load(Ordering::Relaxed) >= 2
        })
        .await;
        a.shutdown().await;
        let height = b.status().height;
        eventually("B going on alone for 6 blocks", || {
            b.status().height >= height + 6
        })
        .await;
        // Several of A's slots (every 2 × SLOT_MS) pass before A can reach B.
        let b_addr = b.peer_addr().unwrap();
        let relay = late_relay(b_addr.addr, Duration::from_millis(SLOT_MS * 5)).await;
        let via_relay = PeerAddr {
            node: b_addr.node,
            addr: relay,
        };
        let b_height = b.status().height;
        let a = start(tmp[0].path(), &genesis, vec![via_relay]).await;
        // The height A stands at when its first block after the restart shows up: on its stale
        // head that is at most `height + 1`; after syncing from B, above `b_height`. (Reorgs
        // are not counted: under load two authorities can swap a tip block now and then.)
        let mut first_at = None;
        eventually("A producing again", || {
            let produced = a.metrics().blocks_produced.load(Ordering::Relaxed);
            if produced >= 1 && first_at.is_none() {
                first_at = Some(a.status().height);
            }
            produced >= 2
        })
        .await;
        let first_at = first_at.unwrap();
        assert!(
            first_at > b_height,
            "A produced at height {first_at}, on its stale head (B was at {b_height}) before \
             reaching B"
        );
        assert_eq!(block_at(&a, b_height).await, block_at(&b, b_height).await);
        for node in [a, b] {
            node.shutdown().await;
        }
    }

    /// Answers every request on `conn` as a liar: head `u64::MAX`, no blocks.
    fn serve_lies(conn: quinn::Connection) {
        tokio::spawn(async move {
            while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                tokio::spawn(async move {
                    let Ok(Some(frame)) = codec::read_frame(&mut recv, 1 << 16).await else {
                        return;
                    };
                    let Ok(request) = Request::decode(frame.msg_type, &frame.payload) else {
                        return;
                    };
                    let response = match request {
                        Request::Status => Response::Status(ChainStatus {
                            head_height: u64::MAX,
                            head_hash: modnode::hashes::BlockHash([0xee; 32]),
                            finalized_height: u64::MAX - 32,
                            ready_modules: Vec::new(),
                        }),
                        Request::Blocks { .. } => Response::Blocks(Vec::new()),
                        Request::Peers => Response::Peers(Vec::new()),
                        Request::Module { .. } => Response::Module(None),
                        Request::Checkpoints => Response::Checkpoints(Vec::new()),
                        Request::Chunk { .. } => Response::Chunk(None),
                    };
                    let (t, p) = response.encode();
                    if codec::write_frame(&mut send, t, &p, 1 << 20).await.is_ok() {
                        let _ = send.finish();
                        let _ = send.stopped().await;
                    }
                });
            }
        });
    }

    /// A peer claiming head `u64::MAX` and answering empty ranges neither stops the
    /// authority's production nor keeps its connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_claiming_a_huge_head_does_not_stop_production() {
        let tmp = dirs(1);
        let genesis = genesis("hostile-height", &[tmp[0].path()]);
        let node = start(tmp[0].path(), &genesis, vec![]).await;
        eventually("the node producing", || node.status().height >= 2).await;
        let genesis_hash = block_at(&node, 0).await.hash().to_bytes();
        let me = NodeIdentity::generate().unwrap();
        let (_ep, liar) = raw_peer(
            &node,
            &me,
            loopback(),
            &hello(&genesis, genesis_hash, u64::MAX),
        )
        .await
        .unwrap();
        serve_lies(liar.clone());
        let height = node.status().height;
        eventually("the authority producing 5 more blocks", || {
            node.status().height >= height + 5
        })
        .await;
        let closed = tokio::time::timeout(LIVENESS, liar.closed())
            .await
            .expect("the liar keeps its connection");
        assert!(closed_for_violation(&closed), "{closed:?}");
        assert!(
            node.status().sync_target_height <= genesis.slot_at(modnode::clock::unix_ms()) + 1,
            "a claim beyond the current slot is believed: {:?}",
            node.status()
        );
        node.shutdown().await;
    }

    /// Message kinds this protocol does not use are violations, not silently dropped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unused_gossip_kinds_are_violations() {
        let tmp = dirs(1);
        let genesis = genesis("hostile-kinds", &[tmp[0].path()]);
        let node = start(tmp[0].path(), &genesis, vec![]).await;
        let genesis_hash = block_at(&node, 0).await.hash().to_bytes();
        // Deposits come only from the deposit contract: a gossiped one is a violation too.
        for (byte, kind) in [
            (7, MessageKind::Consensus),
            (8, MessageKind::PeerExchange),
            (9, MessageKind::Deposit),
        ] {
            let me = NodeIdentity::generate().unwrap();
            let (_ep, conn) = raw_peer(&node, &me, loopback(), &hello(&genesis, genesis_hash, 0))
                .await
                .unwrap();
            push(&conn, kind, vec![byte; 64]).await;
            let closed = tokio::time::timeout(LIVENESS, conn.closed())
                .await
                .unwrap_or_else(|_| panic!("a {kind:?} message went unpunished"));
            assert!(closed_for_violation(&closed), "{kind:?}: {closed:?}");
        }
        assert_eq!(node.metrics().peer_violations.load(Ordering::Relaxed), 3);
        node.shutdown().await;
    }

    /// A peer that crashed (no close sent) and restarts on the same address with the
    /// same key is let in again at once, not refused as "already connected" until the dead
    /// connection times out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_restarted_on_the_same_address_reconnects_within_2_s() {
        let tmp = dirs(1);
        let genesis = genesis("hostile-restart", &[tmp[0].path()]);
        let node = start(tmp[0].path(), &genesis, vec![]).await;
        let genesis_hash = block_at(&node, 0).await.hash().to_bytes();
        let me = NodeIdentity::generate().unwrap();
        let hello = hello(&genesis, genesis_hash, 0);

        // The first incarnation runs on its own runtime, which is then dropped without the
        // connection being closed: a crash. Its address is free for the second incarnation.
        let addr = {
            let (node_addr, me, hello) = (node.p2p_addr(), me.clone(), hello.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let (ep, conn, addr) = rt.block_on(async {
                    let limits = TransportLimits::default();
                    let ep =
                        endpoint::make_endpoint(super::quic::loopback(), &me, &limits).unwrap();
                    let (conn, peer) = endpoint::connect(&ep, node_addr, None, &limits)
                        .await
                        .unwrap();
                    handshake::exchange(&conn, peer, &hello, Role::Dialer, Duration::from_secs(10))
                        .await
                        .unwrap();
                    let addr = ep.local_addr().unwrap();
                    (ep, conn, addr)
                });
                // The runtime goes first, so nothing is left to send a close when the handles
                // are dropped.
                drop(rt);
                drop(conn);
                drop(ep);
                addr
            })
            .join()
            .unwrap()
        };
        // The handshake is counted when it completes, the peer when the network task has
        // finished handling the connection: wait for both, not just the first.
        eventually(
            "the first incarnation connected and counted as a peer",
            || {
                node.metrics().handshakes_completed.load(Ordering::Relaxed) == 1
                    && node.status().peers == 1
            },
        )
        .await;

        let restarted = tokio::time::timeout(Duration::from_secs(2), async {
            let (_ep, conn) = raw_peer(&node, &me, addr, &hello).await?;
            within(Duration::from_secs(2), "the restarted peer counted", || {
                node.metrics().handshakes_completed.load(Ordering::Relaxed) == 2
                    && node.status().peers == 1
            })
            .await;
            Ok::<_, String>(conn)
        })
        .await
        .expect("the restarted peer was not let in within 2 s")
        .expect("the restarted peer was refused");
        assert!(
            restarted.close_reason().is_none(),
            "{:?}",
            restarted.close_reason()
        );
        node.shutdown().await;
    }
}
