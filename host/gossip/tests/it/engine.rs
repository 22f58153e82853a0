//! Deterministic unit tests of the engine mechanics, driven by hand.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use modnode_gossip::engine::{EngineConfig, Event, GossipEngine, Transmit};
use modnode_gossip::error::{GossipError, PeerFault};
use modnode_gossip::policy::{
    Flood, MessageKind, MessageMeta, PeerStats, Policy, Priority, SendMode, SendPlan, Target,
};
use modnode_gossip::wire::{Frame, MessageId};

const MS: u64 = 1_000;

/// Sends `mode` to every peer lacking the message.
#[derive(Clone)]
struct Fixed {
    mode: SendMode,
    quorum: u32,
    timeout_ms: u32,
}

impl Fixed {
    fn push() -> Fixed {
        Fixed {
            mode: SendMode::Push,
            quorum: 0,
            timeout_ms: 1_000,
        }
    }

    fn announce() -> Fixed {
        Fixed {
            mode: SendMode::Announce,
            ..Fixed::push()
        }
    }
}

impl Policy for Fixed {
    fn plan(&mut self, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan {
        SendPlan {
            targets: peers
                .iter()
                .filter(|p| !p.has_message && !p.is_origin)
                .map(|p| Target {
                    peer: p.peer,
                    mode: self.mode,
                })
                .collect(),
            quorum: self.quorum,
            timeout_ms: self.timeout_ms,
            priority: msg.kind.default_priority(),
        }
    }
}

fn config(max_inflight: usize) -> EngineConfig {
    EngineConfig {
        max_inflight_per_peer: max_inflight,
        ..EngineConfig::default()
    }
}

fn node<P: Policy>(policy: P, peers: &[u32], max_inflight: usize) -> GossipEngine<P> {
    let mut e = GossipEngine::new(config(max_inflight), policy);
    for &p in peers {
        e.add_peer(p).unwrap();
    }
    e
}

fn drain<P: Policy>(e: &mut GossipEngine<P>, now: u64) -> Vec<Transmit> {
    std::iter::from_fn(|| e.poll_transmit(now)).collect()
}

fn events<P: Policy>(e: &mut GossipEngine<P>) -> Vec<Event> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

/// Hands `tx` (sent by the engine known as `from` to the receiver) over through the codec.
fn deliver<P: Policy>(to: &mut GossipEngine<P>, from: u32, tx: &Transmit, now: u64) {
    let bytes = tx.encode().unwrap();
    to.handle_datagram(from, &bytes, now).unwrap();
}

fn push_frame(payload: &[u8], kind: MessageKind) -> Frame {
    Frame::Push {
        origin: None,
        id: MessageId::of(payload),
        kind,
        hops: 0,
        payload: payload.to_vec().into(),
    }
}

fn big(n: u8) -> Vec<u8> {
    vec![n; 4096]
}

#[test]
fn dedup_of_published_received_and_fetched_ids() {
    // Publishing the same payload twice is refused.
    let mut a = node(Flood, &[1], 4);
    let id = a.publish(MessageKind::Deposit, b"x".to_vec(), 0).unwrap();
    assert_eq!(id, MessageId::of(b"x"));
    assert_eq!(
        a.publish(MessageKind::Deposit, b"x".to_vec(), 1),
        Err(GossipError::Duplicate)
    );

    // The same push from two peers is delivered once, and the forward queued to the second
    // sender is dropped because it evidently has the message.
    let mut b = node(Flood, &[1, 2], 4);
    let frame = push_frame(b"hello", MessageKind::Deposit);
    b.handle_frame(1, frame.clone(), 0).unwrap();
    b.handle_frame(2, frame.clone(), 1).unwrap();
    let evs = events(&mut b);
    assert_eq!(evs.len(), 1);
    assert!(matches!(
        &evs[0],
        Event::Delivered {
            from: 1,
            kind: MessageKind::Deposit,
            ..
        }
    ));
    assert_eq!(b.stats().duplicate_pushes, 1);
    assert!(drain(&mut b, 2).is_empty());
    assert_eq!(b.stats().redundant_dropped, 1);

    // An id being fetched is requested once, however many peers announce it; a push that
    // arrives meanwhile is delivered, and the late answer is a duplicate.
    let mut c = node(Fixed::push(), &[1, 2], 4);
    let payload = b"fetched".to_vec();
    let announce = Frame::Announce {
        items: vec![modnode_gossip::AnnounceItem {
            id: MessageId::of(&payload),
            kind: MessageKind::Deposit,
            size: payload.len() as u32,
        }],
    };
    c.handle_frame(1, announce.clone(), 0).unwrap();
    c.handle_frame(2, announce, 0).unwrap();
    let txs = drain(&mut c, 0);
    assert_eq!(txs.len(), 1);
    assert!(matches!(&txs[0].frame, Frame::Request { ids } if ids.len() == 1));
    assert_eq!(txs[0].peer, 1);
    c.handle_frame(2, push_frame(&payload, MessageKind::Deposit), 1)
        .unwrap();
    c.handle_frame(1, push_frame(&payload, MessageKind::Deposit), 2)
        .unwrap();
    assert_eq!(events(&mut c).len(), 1);
    assert_eq!(c.stats().duplicate_pushes, 1);
}

#[test]
fn seen_entries_expire() {
    let cfg = EngineConfig {
        seen_ttl: 1_000 * MS,
        store_ttl: 500 * MS,
        ..EngineConfig::default()
    };
    let mut b = GossipEngine::new(cfg, Flood);
    b.add_peer(1).unwrap();
    let frame = push_frame(b"again", MessageKind::Deposit);
    b.handle_frame(1, frame.clone(), 0).unwrap();
    b.handle_frame(1, frame.clone(), 999 * MS).unwrap();
    assert_eq!(events(&mut b).len(), 1);
    assert!(!b.has_message(&MessageId::of(b"again")));
    // After the seen TTL the id is forgotten and the message is new again.
    b.handle_frame(1, frame, 1_000 * MS).unwrap();
    assert_eq!(events(&mut b).len(), 1);
}

#[test]
fn payload_must_match_id() {
    let mut b = node(Flood, &[1], 4);
    let forged = Frame::Push {
        id: MessageId::of(b"real"),
        kind: MessageKind::Block,
        hops: 0,
        origin: None,
        payload: b"forged".to_vec().into(),
    };
    b.handle_frame(1, forged, 0).unwrap();
    assert!(events(&mut b).is_empty());
    assert_eq!(b.stats().invalid_pushes, 1);
}

#[test]
fn high_priority_is_dequeued_first() {
    let mut a = node(Flood, &[1], 1);
    a.publish(MessageKind::PeerExchange, big(1), 0).unwrap();
    a.publish(MessageKind::Deposit, big(2), 0).unwrap();
    a.publish(MessageKind::Block, big(3), 0).unwrap();
    a.publish(MessageKind::Consensus, big(4), 0).unwrap();
    let mut order = Vec::new();
    for t in 1..=4 {
        let txs = drain(&mut a, t);
        assert_eq!(txs.len(), 1, "one slot per peer");
        let Frame::Push { kind, .. } = &txs[0].frame else {
            panic!("expected a push");
        };
        order.push((*kind, txs[0].priority));
        assert!(a.handle_send_complete(1, txs[0].send_id, t));
    }
    assert_eq!(
        order,
        vec![
            (MessageKind::Block, Priority::High),
            (MessageKind::Consensus, Priority::High),
            (MessageKind::Deposit, Priority::Normal),
            (MessageKind::PeerExchange, Priority::Low),
        ]
    );
}

#[test]
fn slow_peer_does_not_delay_others() {
    let mut a = node(Flood, &[1, 2], 1);
    a.publish(MessageKind::Block, big(1), 0).unwrap();
    let first = drain(&mut a, 0);
    assert_eq!(first.len(), 2);
    // Peer 2 completes quickly, peer 1 never does.
    let to2 = first.iter().find(|t| t.peer == 2).unwrap();
    a.handle_send_complete(2, to2.send_id, 1);
    for n in 2..5u8 {
        a.publish(MessageKind::Block, big(n), u64::from(n)).unwrap();
        let txs = drain(&mut a, u64::from(n));
        assert_eq!(txs.len(), 1);
        assert_eq!(txs[0].peer, 2);
        a.handle_send_complete(2, txs[0].send_id, u64::from(n));
    }
    let stats = a.peer_stats(None, 5);
    assert_eq!(
        stats[0].queue_depth, 4,
        "1 in flight + 3 queued to the slow peer"
    );
    assert_eq!(stats[1].queue_depth, 0);
}

#[test]
fn quorum_cancels_queued_pushes() {
    for announce_instead in [true, false] {
        let policy = Fixed {
            quorum: 1,
            ..Fixed::push()
        };
        let cfg = EngineConfig {
            max_inflight_per_peer: 1,
            announce_cancelled_pushes: announce_instead,
            ..EngineConfig::default()
        };
        let mut a = GossipEngine::new(cfg, policy);
        for p in 1..=4 {
            a.add_peer(p).unwrap();
        }
        a.publish(MessageKind::Block, big(1), 0).unwrap();
        let m1 = drain(&mut a, 0);
        assert_eq!(m1.len(), 4);
        // m2's pushes queue behind m1 on every peer.
        a.publish(MessageKind::Block, big(2), 1).unwrap();
        assert!(drain(&mut a, 1).is_empty());
        // Peer 1 finishes m1, then m2: m2's quorum of 1 is met.
        a.handle_send_complete(1, m1[0].send_id, 2);
        let m2 = drain(&mut a, 2);
        assert_eq!(m2.len(), 1);
        assert_eq!(m2[0].peer, 1);
        a.handle_send_complete(1, m2[0].send_id, 3);
        assert_eq!(a.stats().quorum_cancelled, 3);
        // Peer 2 frees its slot: m2 is no longer pushed to it.
        a.handle_send_complete(2, m1[1].send_id, 4);
        let next = drain(&mut a, 4);
        if announce_instead {
            assert_eq!(next.len(), 1);
            assert!(
                matches!(&next[0].frame, Frame::Announce { items } if items[0].id == MessageId::of(&big(2)))
            );
        } else {
            assert!(next.is_empty());
        }
    }
}

#[test]
fn sends_time_out_and_count_as_failures() {
    let policy = Fixed {
        timeout_ms: 50,
        ..Fixed::push()
    };
    let mut a = node(policy, &[1], 4);
    a.publish(MessageKind::Deposit, big(1), 0).unwrap();
    let tx = drain(&mut a, 0);
    assert_eq!(tx.len(), 1);
    assert_eq!(a.poll_timeout(), Some(50 * MS));
    a.handle_timeout(50 * MS - 1);
    assert_eq!(a.peer_stats(None, 50 * MS - 1)[0].recent_failures, 0);
    a.handle_timeout(50 * MS);
    assert_eq!(a.stats().send_timeouts, 1);
    assert_eq!(a.peer_stats(None, 50 * MS)[0].recent_failures, 1);
    // A late completion is ignored.
    assert!(!a.handle_send_complete(1, tx[0].send_id, 60 * MS));
    // The failed push is followed by an announce so the peer can still pull.
    let next = drain(&mut a, 60 * MS);
    assert!(matches!(&next[0].frame, Frame::Announce { .. }));
    // Driver-reported failures count too; old failures age out.
    assert!(a.handle_send_failed(1, next[0].send_id, 61 * MS));
    assert_eq!(a.peer_stats(None, 61 * MS)[0].recent_failures, 2);
    let window = a.config().failure_window;
    assert_eq!(a.peer_stats(None, 61 * MS + window)[0].recent_failures, 0);
}

#[test]
fn announce_request_deliver() {
    // a (handle 1 at b) announces; b (handle 2 at a) pulls.
    let mut a = node(Fixed::announce(), &[2], 4);
    let mut b = node(Fixed::announce(), &[1], 4);
    let payload = big(7);
    let id = a.publish(MessageKind::Block, payload.clone(), 0).unwrap();
    let ann = drain(&mut a, 0);
    assert!(
        matches!(&ann[0].frame, Frame::Announce { items } if items[0].id == id && items[0].size == 4096)
    );
    deliver(&mut b, 1, &ann[0], 5 * MS);
    a.handle_send_complete(2, ann[0].send_id, 10 * MS);

    let req = drain(&mut b, 5 * MS);
    assert_eq!(req.len(), 1);
    assert!(matches!(&req[0].frame, Frame::Request { ids } if ids == &vec![id]));
    deliver(&mut a, 2, &req[0], 10 * MS);
    b.handle_send_complete(1, req[0].send_id, 15 * MS);

    let resp = drain(&mut a, 10 * MS);
    assert!(matches!(&resp[0].frame, Frame::Push { id: got, .. } if *got == id));
    deliver(&mut b, 1, &resp[0], 15 * MS);
    let evs = events(&mut b);
    assert_eq!(
        evs,
        vec![Event::Delivered {
            id,
            kind: MessageKind::Block,
            payload: payload.into(),
            from: 1
        }]
    );
    assert_eq!(a.stats().requests_served, 1);
    // b does not announce back to the peer it got the message from.
    assert!(drain(&mut b, 15 * MS).is_empty());
}

#[test]
fn request_falls_back_to_another_announcer() {
    let mut b = node(Fixed::announce(), &[1, 3], 4);
    let payload = big(9);
    let id = MessageId::of(&payload);
    let announce = Frame::Announce {
        items: vec![modnode_gossip::AnnounceItem {
            id,
            kind: MessageKind::Deposit,
            size: 4096,
        }],
    };
    b.handle_frame(1, announce.clone(), 0).unwrap();
    b.handle_frame(3, announce, 0).unwrap();
    let req = drain(&mut b, 0);
    assert_eq!(req.len(), 1);
    assert_eq!(req[0].peer, 1);
    // Peer 1 acknowledges the request but never answers.
    b.handle_send_complete(1, req[0].send_id, 10 * MS);
    let deadline = b.poll_timeout().unwrap();
    assert!(deadline > 10 * MS);
    b.handle_timeout(deadline);
    let retry = drain(&mut b, deadline);
    assert_eq!(retry.len(), 1);
    assert_eq!(retry[0].peer, 3);
    assert!(matches!(&retry[0].frame, Frame::Request { .. }));
    b.handle_frame(3, push_frame(&payload, MessageKind::Deposit), deadline + 1)
        .unwrap();
    assert_eq!(events(&mut b).len(), 1);
}

#[test]
fn small_items_are_batched_up_to_the_cap() {
    let cfg = EngineConfig {
        max_inflight_per_peer: 1,
        batch_max_bytes: 1_000,
        ..EngineConfig::default()
    };
    let mut a = GossipEngine::new(cfg, Flood);
    a.add_peer(2).unwrap();
    let mut b = node(Flood, &[1], 4);
    a.publish(MessageKind::Deposit, vec![0; 100], 0).unwrap();
    let mut pending = drain(&mut a, 0);
    // The slot is taken: the rest queue up.
    for n in 1..10u8 {
        a.publish(MessageKind::Deposit, vec![n; 100], 0).unwrap();
    }
    // A large message is never batched.
    a.publish(MessageKind::Deposit, vec![99; 2048], 0).unwrap();
    let mut sizes = Vec::new();
    for t in 1..5 {
        let txs = std::mem::take(&mut pending);
        assert_eq!(txs.len(), 1);
        let tx = &txs[0];
        let n = match &tx.frame {
            Frame::Push { payload, .. } => {
                if payload.len() > 1024 {
                    0
                } else {
                    1
                }
            }
            Frame::Batch { frames } => frames.len(),
            other => panic!("unexpected {other:?}"),
        };
        sizes.push(n);
        if n > 1 {
            assert!(tx.frame.encoded_len() <= 1_000);
        }
        deliver(&mut b, 1, tx, t);
        a.handle_send_complete(2, tx.send_id, t);
        pending = drain(&mut a, t);
    }
    assert!(pending.is_empty());
    // 1 alone (the slot was free), then 6 × 145 B = 870 B per batch, then 3, then the big one.
    assert_eq!(sizes, vec![1, 6, 3, 0]);
    assert_eq!(a.stats().batched_transmits, 2);
    assert_eq!(events(&mut b).len(), 11);
}

#[test]
fn announces_to_one_peer_share_a_frame() {
    let mut a = node(Fixed::announce(), &[2], 1);
    a.publish(MessageKind::Deposit, vec![0; 10], 0).unwrap();
    let first = drain(&mut a, 0);
    for n in 1..5u8 {
        a.publish(MessageKind::Deposit, vec![n; 10], 0).unwrap();
    }
    a.handle_send_complete(2, first[0].send_id, 1);
    let second = drain(&mut a, 1);
    assert!(matches!(&second[0].frame, Frame::Announce { items } if items.len() == 4));
}

#[test]
fn peers_and_garbage_are_checked() {
    let mut a = node(Flood, &[1], 4);
    assert_eq!(a.add_peer(1), Err(GossipError::PeerExists(1)));
    assert_eq!(
        a.handle_frame(9, push_frame(b"x", MessageKind::Deposit), 0),
        Err(GossipError::UnknownPeer(9))
    );
    assert!(matches!(
        a.handle_datagram(1, &[1, 0xee, 1, 2, 3], 0),
        Err(GossipError::Wire(_))
    ));
    assert_eq!(a.remove_peer(9, 0), Err(GossipError::UnknownPeer(9)));
    a.remove_peer(1, 0).unwrap();
    assert_eq!(a.peers().count(), 0);
}

#[test]
fn policy_sees_has_message_and_origin() {
    #[derive(Default)]
    struct Spy(Vec<(MessageMeta, Vec<PeerStats>)>);
    impl Policy for Spy {
        fn plan(&mut self, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan {
            self.0.push((msg.clone(), peers.to_vec()));
            SendPlan {
                targets: Vec::new(),
                quorum: 0,
                timeout_ms: 1,
                priority: Priority::Low,
            }
        }
    }
    let mut b = GossipEngine::new(EngineConfig::default(), Spy::default());
    for p in [1, 2, 3] {
        b.add_peer(p).unwrap();
    }
    let payload = b"seen-by-3".to_vec();
    let id = MessageId::of(&payload);
    b.handle_frame(
        3,
        Frame::Announce {
            items: vec![modnode_gossip::AnnounceItem {
                id,
                kind: MessageKind::Consensus,
                size: 9,
            }],
        },
        0,
    )
    .unwrap();
    b.handle_frame(
        1,
        Frame::Push {
            id,
            kind: MessageKind::Consensus,
            hops: 2,
            origin: None,
            payload: payload.into(),
        },
        1,
    )
    .unwrap();
    let (meta, peers) = &b.policy().0[0];
    assert_eq!(meta.hops, 3);
    assert!(!meta.local_origin);
    assert_eq!(meta.network_size, 4);
    let flags: Vec<(u32, bool, bool)> = peers
        .iter()
        .map(|p| (p.peer, p.has_message, p.is_origin))
        .collect();
    assert_eq!(
        flags,
        vec![(1, true, true), (2, false, false), (3, true, false)]
    );
}

#[test]
fn slow_announcer_is_hedged() {
    let mut b = node(Fixed::announce(), &[1, 3], 4);
    b.handle_rtt_sample(1, 500_000);
    b.handle_rtt_sample(3, 5_000);
    let item = modnode_gossip::AnnounceItem {
        id: MessageId::of(b"hedged"),
        kind: MessageKind::Block,
        size: 6,
    };
    b.handle_frame(1, Frame::Announce { items: vec![item] }, 0)
        .unwrap();
    let first = drain(&mut b, 0);
    assert_eq!(first[0].peer, 1);
    // Peer 3 is expected to answer ~480 ms sooner: ask it too, without waiting for a timeout.
    b.handle_frame(3, Frame::Announce { items: vec![item] }, 10 * MS)
        .unwrap();
    let hedge = drain(&mut b, 10 * MS);
    assert_eq!(hedge.len(), 1);
    assert_eq!(hedge[0].peer, 3);
    assert!(matches!(&hedge[0].frame, Frame::Request { .. }));
}

#[test]
fn validate_before_relay_holds_messages_until_the_verdict() {
    // b sits between a (handle 1) and c (handle 3) and validates before relaying.
    let mut b = GossipEngine::new(
        EngineConfig {
            validate_before_relay: true,
            ..config(4)
        },
        Fixed::push(),
    );
    b.add_peer(1).unwrap();
    b.add_peer(3).unwrap();
    let good = big(1);
    let bad = big(2);
    let good_id = MessageId::of(&good);
    let bad_id = MessageId::of(&bad);
    b.handle_frame(1, push_frame(&good, MessageKind::Block), 0)
        .unwrap();
    b.handle_frame(1, push_frame(&bad, MessageKind::Block), 0)
        .unwrap();
    assert_eq!(
        events(&mut b).len(),
        2,
        "delivered to the application at once"
    );
    assert!(
        drain(&mut b, MS).is_empty(),
        "nothing relayed before a verdict"
    );
    // c learnt of the messages elsewhere and asks b: not served while unjudged.
    b.handle_frame(3, Frame::Request { ids: vec![good_id] }, MS)
        .unwrap();
    assert!(drain(&mut b, MS).is_empty());

    assert!(b.handle_validated(good_id, true, 2 * MS));
    let relayed = drain(&mut b, 2 * MS);
    assert_eq!(relayed.len(), 1);
    assert_eq!(relayed[0].peer, 3, "not back to the sender");
    assert!(matches!(&relayed[0].frame, Frame::Push { id, .. } if *id == good_id));

    assert!(b.handle_validated(bad_id, false, 3 * MS));
    assert!(
        drain(&mut b, 3 * MS).is_empty(),
        "a rejected message is never relayed"
    );
    b.handle_frame(3, Frame::Request { ids: vec![bad_id] }, 4 * MS)
        .unwrap();
    assert!(drain(&mut b, 4 * MS).is_empty(), "… nor served");
    // Copies of it are still recognised as seen, and a second verdict is refused.
    b.handle_frame(1, push_frame(&bad, MessageKind::Block), 5 * MS)
        .unwrap();
    assert!(events(&mut b).is_empty());
    assert!(!b.handle_validated(bad_id, true, 5 * MS));
}

/// Ids covering only the first 4 bytes, as modnode's block ids cover only the header.
fn prefix_id(_kind: MessageKind, payload: &[u8]) -> MessageId {
    MessageId::of(payload.get(..4).unwrap_or(payload))
}

fn checking_node(peers: &[u32]) -> GossipEngine<Flood> {
    let cfg = EngineConfig {
        message_id: prefix_id,
        validate_before_relay: true,
        ..EngineConfig::default()
    };
    let mut e = GossipEngine::new(cfg, Flood);
    for &p in peers {
        e.add_peer(p).unwrap();
    }
    e
}

fn prefix_push(payload: &[u8]) -> Frame {
    Frame::Push {
        origin: None,
        id: prefix_id(MessageKind::Block, payload),
        kind: MessageKind::Block,
        hops: 0,
        payload: payload.to_vec().into(),
    }
}

/// Variants of one message (same header, other body) share an id: while the first awaits its
/// verdict a variant is a mere duplicate; once the first is judged valid a variant is a
/// peer fault; once it is judged invalid its id is forgotten and the real one gets through.
#[test]
fn variants_under_a_header_id_deduplicate_and_a_variant_of_a_checked_message_is_a_fault() {
    let mut b = checking_node(&[1, 2, 3]);
    let real = b"HEADreal-body".to_vec();
    let forged = b"HEADforged-body".to_vec();
    assert_eq!(
        prefix_id(MessageKind::Block, &real),
        prefix_id(MessageKind::Block, &forged)
    );

    b.handle_frame(1, prefix_push(&real), 0).unwrap();
    b.handle_frame(2, prefix_push(&forged), 1).unwrap();
    assert_eq!(events(&mut b).len(), 1, "a variant was delivered twice");
    assert_eq!(b.stats().duplicate_pushes, 1);

    let id = prefix_id(MessageKind::Block, &real);
    assert!(b.handle_validated(id, true, 2));
    match b.handle_frame(3, prefix_push(&forged), 3) {
        Err(GossipError::Peer(PeerFault::ConflictingPayload { id: got })) => assert_eq!(got, id),
        other => panic!("a variant of a checked message was accepted: {other:?}"),
    }
    // An identical copy stays a harmless duplicate.
    b.handle_frame(3, prefix_push(&real), 4).unwrap();

    // The forged variant arriving first and judged invalid does not lock the real one out.
    let mut c = checking_node(&[1, 2]);
    c.handle_frame(2, prefix_push(&forged), 0).unwrap();
    assert_eq!(events(&mut c).len(), 1);
    assert!(c.handle_validated(id, false, 1));
    c.handle_frame(1, prefix_push(&real), 2).unwrap();
    match events(&mut c).as_slice() {
        [
            Event::Delivered {
                from: 1, payload, ..
            },
        ] => assert_eq!(payload.as_ref(), &real[..]),
        other => panic!("the real block was not delivered after the forgery: {other:?}"),
    }
}

/// A policy whose plan names the same peer `n` times.
struct Repeat(usize);

impl Policy for Repeat {
    fn plan(&mut self, msg: &MessageMeta, _peers: &[PeerStats]) -> SendPlan {
        SendPlan {
            targets: vec![
                Target {
                    peer: 1,
                    mode: SendMode::Push,
                };
                self.0
            ],
            quorum: 0,
            timeout_ms: 1_000,
            priority: msg.kind.default_priority(),
        }
    }
}

/// A plan naming more targets than the peers it was offered is the policy's fault: its
/// targets are not walked and the message is flooded instead (a policy's
/// 3M targets were once each looked at). A plan within the bound is followed as it is.
#[test]
fn a_plan_longer_than_the_peer_set_is_replaced_by_flooding() {
    let mut a = node(Repeat(1_000_000), &[1, 2, 3], 4);
    a.publish(MessageKind::Block, big(1), 0).unwrap();
    let mut peers: Vec<u32> = drain(&mut a, 1).iter().map(|t| t.peer).collect();
    peers.sort_unstable();
    assert_eq!(peers, vec![1, 2, 3], "flooded to every peer");
    assert_eq!(a.stats().plans_over_peers, 1);

    let mut b = node(Repeat(3), &[1, 2, 3], 4);
    b.publish(MessageKind::Block, big(1), 0).unwrap();
    let peers: Vec<u32> = drain(&mut b, 1).iter().map(|t| t.peer).collect();
    assert_eq!(peers, vec![1], "the plan is followed");
    assert_eq!(b.stats().plans_over_peers, 0);
}
