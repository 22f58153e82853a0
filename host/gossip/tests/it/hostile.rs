//! Hostile peers against the engine: every map a peer can grow stays bounded, and what one peer
//! claims cannot stretch the timeouts other peers get.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use modnode_gossip::engine::{EngineConfig, GossipEngine, Transmit};
use modnode_gossip::error::{GossipError, PeerFault};
use modnode_gossip::policy::{Flood, MessageKind};
use modnode_gossip::wire::{AnnounceItem, Frame, MAX_ITEMS, MAX_PAYLOAD, MessageId};

const MS: u64 = 1_000;
const HONEST: u32 = 0;
const ATTACKER: u32 = 1;

/// A distinct id per `(tag, n)` that no payload hashes to.
fn fake_id(tag: u8, n: u64) -> MessageId {
    let mut id = [tag; 32];
    id[..8].copy_from_slice(&n.to_le_bytes());
    MessageId(id)
}

/// One frame announcing `n` fresh ids as batches of full announce frames; `size(i)` gives the
/// announced size of the `i`-th id.
fn announce_flood(tag: u8, n: u64, size: impl Fn(u64) -> u32) -> Frame {
    let per_frame = u64::from(MAX_ITEMS);
    let frames = (0..n.div_ceil(per_frame))
        .map(|f| Frame::Announce {
            items: (f * per_frame..n.min((f + 1) * per_frame))
                .map(|i| AnnounceItem {
                    id: fake_id(tag, i),
                    kind: MessageKind::Block,
                    size: size(i),
                })
                .collect(),
        })
        .collect();
    Frame::Batch { frames }
}

fn engine(peers: &[u32]) -> GossipEngine<Flood> {
    let mut e = GossipEngine::new(EngineConfig::default(), Flood);
    for &p in peers {
        e.add_peer(p).unwrap();
    }
    e
}

fn drain(e: &mut GossipEngine<Flood>, now: u64) -> Vec<Transmit> {
    std::iter::from_fn(|| e.poll_transmit(now)).collect()
}

fn requests_to(transmits: &[Transmit], peer: u32, id: MessageId) -> usize {
    fn has(frame: &Frame, id: MessageId) -> bool {
        match frame {
            Frame::Request { ids } => ids.contains(&id),
            Frame::Batch { frames } => frames.iter().any(|f| has(f, id)),
            _ => false,
        }
    }
    transmits
        .iter()
        .filter(|t| t.peer == peer && has(&t.frame, id))
        .count()
}

const FLOOD: u64 = 250_000;

/// Announces `wanted` from `HONEST`, acknowledges our request and returns when its answer is due.
fn honest_fetch_acked(e: &mut GossipEngine<Flood>, wanted: MessageId, t0: u64) -> u64 {
    let item = AnnounceItem {
        id: wanted,
        kind: MessageKind::Block,
        size: 1024,
    };
    e.handle_frame(HONEST, Frame::Announce { items: vec![item] }, t0)
        .unwrap();
    let sent = drain(e, t0);
    let request = sent
        .iter()
        .find(|t| requests_to(std::slice::from_ref(t), HONEST, wanted) > 0)
        .expect("the honest announcer is asked");
    assert!(e.handle_send_complete(HONEST, request.send_id, t0 + MS));
    let cfg = e.config();
    t0 + MS + cfg.request_timeout + cfg.request_timeout_per_kib
}

#[test]
fn announce_flood_stays_bounded_and_does_not_stretch_honest_timeouts() {
    let cfg = EngineConfig::default();
    let sybils: Vec<u32> = (ATTACKER..ATTACKER + 8).collect();
    let mut e = engine(&[&[HONEST][..], &sybils].concat());

    // Each sybil sends 250k unseen ids in one frame, announced with the largest legal size.
    for &sybil in &sybils {
        let flood = announce_flood(sybil as u8, FLOOD, |_| MAX_PAYLOAD);
        let result = e.handle_frame(sybil, flood, 0);
        let sizes = e.state_sizes();
        assert!(sizes.fetches <= cfg.max_fetches, "{sizes:?}");
        assert!(sizes.peer_items <= cfg.max_fetches, "{sizes:?}");
        if sizes.fetches < cfg.max_fetches {
            // Over its own cap the peer is penalised.
            assert!(
                matches!(
                    result,
                    Err(GossipError::Peer(PeerFault::TooManyFetches { .. }))
                ),
                "{result:?}"
            );
        }
    }
    assert_eq!(e.state_sizes().fetches, cfg.max_fetches);
    assert!(e.stats().announces_dropped > 0);
    assert!(e.stats().requests_sent <= cfg.max_fetches as u64);

    // Claims of sizes no message can have are refused, wherever they sit in the frame.
    let liar = ATTACKER + 8;
    e.add_peer(liar).unwrap();
    let before = e.state_sizes();
    let lies = announce_flood(0xee, FLOOD, |i| if i % 1000 == 999 { u32::MAX } else { 1 });
    assert!(matches!(
        e.handle_frame(liar, lies, 0),
        Err(GossipError::Peer(PeerFault::AnnouncedSizeTooLarge {
            size: u32::MAX,
            ..
        }))
    ));
    assert_eq!(e.state_sizes(), before, "a refused frame grew no state");

    // An honest announce still gets an answer timeout of its own size, not the attackers'.
    e.remove_peer(liar, 0).unwrap();
    let wanted = fake_id(0x99, 0);
    // Make room: the flood's fetches time out and are given up, as they would in a node.
    let mut now = 0;
    while e.state_sizes().fetches > 0 {
        now = e.poll_timeout().unwrap();
        e.handle_timeout(now);
        for t in drain(&mut e, now) {
            e.handle_send_failed(t.peer, t.send_id, now);
        }
    }
    let flood = announce_flood(1, FLOOD, |_| MAX_PAYLOAD);
    let _ = e.handle_frame(ATTACKER, flood, now);
    let due = honest_fetch_acked(&mut e, wanted, now);
    e.handle_timeout(due + 1);
    let again = drain(&mut e, due + 1);
    assert_eq!(
        requests_to(&again, HONEST, wanted),
        1,
        "the honest fetch was not retried after its own timeout"
    );
}

/// A valid push of a fresh payload `n` (so its id is right and it is delivered).
fn push(n: u64) -> Frame {
    let payload = n.to_le_bytes().to_vec();
    Frame::Push {
        origin: None,
        id: MessageId::of(&payload),
        kind: MessageKind::Deposit,
        hops: 0,
        payload: payload.into(),
    }
}

const HOSTILE_INPUTS: u64 = 100_000;

#[test]
fn a_hundred_thousand_pushes_and_requests_leave_every_map_bounded() {
    let cfg = EngineConfig {
        // Like the node: nothing is relayed before the application judged it, and this
        // application never answers.
        validate_before_relay: true,
        ..EngineConfig::default()
    };
    let mut e = GossipEngine::new(cfg.clone(), Flood);
    for p in [HONEST, ATTACKER] {
        e.add_peer(p).unwrap();
    }
    let bounded = |e: &GossipEngine<Flood>| {
        let sizes = e.state_sizes();
        assert!(sizes.seen <= cfg.seen_capacity, "{sizes:?}");
        assert!(sizes.stored <= cfg.store_capacity, "{sizes:?}");
        assert!(sizes.awaiting <= cfg.store_capacity, "{sizes:?}");
        assert!(sizes.fetches <= cfg.max_fetches, "{sizes:?}");
        assert!(sizes.peer_items <= 2 * cfg.store_capacity, "{sizes:?}");
    };
    for n in 0..HOSTILE_INPUTS {
        e.handle_frame(ATTACKER, push(n), n).unwrap();
        while e.poll_event().is_some() {}
    }
    bounded(&e);
    assert_eq!(e.stats().delivered, HOSTILE_INPUTS);

    // Everything this node holds becomes servable; then the attacker asks for it over and
    // over, and for ids nobody has.
    let now = HOSTILE_INPUTS;
    let held: Vec<MessageId> = (0..HOSTILE_INPUTS)
        .map(|n| MessageId::of(&n.to_le_bytes()))
        .filter(|id| e.has_message(id))
        .collect();
    for id in &held {
        e.handle_validated(*id, true, now);
    }
    for round in 0..HOSTILE_INPUTS / u64::from(MAX_ITEMS) {
        let ids = (0..u64::from(MAX_ITEMS))
            .map(|i| match held.get(usize::try_from(i).unwrap()) {
                Some(id) if round % 2 == 0 => *id,
                _ => fake_id(0x77, round * u64::from(MAX_ITEMS) + i),
            })
            .collect();
        e.handle_frame(ATTACKER, Frame::Request { ids }, now)
            .unwrap();
        bounded(&e);
    }
}
