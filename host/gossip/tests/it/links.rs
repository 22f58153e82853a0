//! The engine's mechanics for spreading-tree policies, driven by hand in virtual time: the
//! graft timer, `missing`, PRUNE / GRAFT on the wire, and their bounds against a hostile peer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::RefCell;
use std::rc::Rc;

use modnode_gossip::engine::{EngineConfig, GossipEngine, Transmit, id_head};
use modnode_gossip::policy::{
    Flood, LinkControl, MessageKind, MessageMeta, PeerStats, Policy, PolicyEvent, SendPlan,
};
use modnode_gossip::wire::{AnnounceItem, Frame, LinkItem, LinkOp, MessageId};

const MS: u64 = 1_000;

const CONTROL: LinkControl = LinkControl {
    graft_min_ms: 20,
    graft_max_ms: 100,
    announce_first_above: 1024,
};

/// Floods, records every event it hears, and asks for the tree mechanics.
#[derive(Clone, Default)]
struct Recording {
    heard: Rc<RefCell<Vec<PolicyEvent>>>,
}

impl Policy for Recording {
    fn plan(&mut self, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan {
        Flood.plan(msg, peers)
    }

    fn on_event(&mut self, event: &PolicyEvent) {
        self.heard.borrow_mut().push(*event);
    }

    fn link_control(&self) -> Option<LinkControl> {
        Some(CONTROL)
    }
}

impl Recording {
    fn links(&self) -> Vec<PolicyEvent> {
        self.heard
            .borrow()
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    PolicyEvent::Duplicate { .. } | PolicyEvent::Missing { .. }
                )
            })
            .copied()
            .collect()
    }
}

fn node(policy: Recording, peers: &[u32]) -> GossipEngine<Recording> {
    let mut e = GossipEngine::new(EngineConfig::default(), policy);
    for &p in peers {
        e.add_peer(p).unwrap();
    }
    e
}

fn drain(e: &mut GossipEngine<Recording>, now: u64) -> Vec<Transmit> {
    std::iter::from_fn(|| e.poll_transmit(now)).collect()
}

/// Puts `e` on the tree: `parent` pushes it a first copy unasked, as a tree link does (its
/// forwards are sent and acknowledged).
fn on_tree(e: &mut GossipEngine<Recording>, parent: u32) {
    e.handle_frame(parent, push(&vec![200; 300]), 0).unwrap();
    for tx in drain(e, 0) {
        e.handle_send_complete(tx.peer, tx.send_id, 0);
    }
}

fn small(n: u8) -> Vec<u8> {
    vec![n; 200]
}

fn announce(payload: &[u8]) -> Frame {
    Frame::Announce {
        items: vec![AnnounceItem {
            id: MessageId::of(payload),
            kind: MessageKind::Deposit,
            size: u32::try_from(payload.len()).unwrap(),
        }],
    }
}

fn push(payload: &[u8]) -> Frame {
    Frame::Push {
        id: MessageId::of(payload),
        kind: MessageKind::Deposit,
        hops: 0,
        payload: payload.to_vec().into(),
    }
}

/// The inner frames of a transmission.
fn parts(frame: &Frame) -> Vec<Frame> {
    match frame {
        Frame::Batch { frames } => frames.clone(),
        other => vec![other.clone()],
    }
}

fn links_in(txs: &[Transmit], to: u32) -> Vec<LinkItem> {
    txs.iter()
        .filter(|t| t.peer == to)
        .flat_map(|t| parts(&t.frame))
        .flat_map(|f| match f {
            Frame::Link { items } => items,
            _ => Vec::new(),
        })
        .collect()
}

fn requests_in(txs: &[Transmit], to: u32) -> Vec<MessageId> {
    txs.iter()
        .filter(|t| t.peer == to)
        .flat_map(|t| parts(&t.frame))
        .flat_map(|f| match f {
            Frame::Request { ids } => ids,
            _ => Vec::new(),
        })
        .collect()
}

#[test]
fn an_announce_waits_for_the_graft_timer_then_is_reported_missing_and_grafted() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2]);
    on_tree(&mut e, 2);
    let msg = small(1);
    let id = MessageId::of(&msg);
    e.handle_frame(1, announce(&msg), 0).unwrap();
    // Waiting for the eager copy: nothing is asked, the timer (the longest before any gap
    // was measured) is armed.
    assert!(drain(&mut e, 0).is_empty());
    assert_eq!(e.poll_timeout(), Some(100 * MS));
    assert!(policy.links().is_empty());
    e.handle_timeout(100 * MS);
    let txs = drain(&mut e, 100 * MS);
    assert_eq!(requests_in(&txs, 1), vec![id]);
    assert_eq!(
        links_in(&txs, 1),
        vec![LinkItem {
            id,
            kind: MessageKind::Deposit,
            op: LinkOp::Graft
        }]
    );
    assert_eq!(
        policy.links(),
        vec![PolicyEvent::Missing {
            peer: 1,
            message: id_head(&id),
            kind: MessageKind::Deposit
        }]
    );
    assert_eq!(e.stats().missing, 1);
    assert_eq!(e.stats().grafts_sent, 1);
}

#[test]
fn an_eager_copy_within_the_timer_is_a_measured_gap_that_tunes_the_timer() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2]);
    on_tree(&mut e, 2);
    let msg = small(1);
    e.handle_frame(1, announce(&msg), 0).unwrap();
    e.handle_frame(2, push(&msg), 30 * MS).unwrap();
    // Delivered in time: nothing asked, nothing missing, no graft.
    let txs = drain(&mut e, 30 * MS);
    assert!(requests_in(&txs, 1).is_empty());
    assert!(links_in(&txs, 1).is_empty());
    assert_eq!(e.stats().missing, 0);
    // The next announce waits 1.5 × the measured gap.
    e.handle_frame(1, announce(&small(2)), 40 * MS).unwrap();
    assert_eq!(e.poll_timeout(), Some(40 * MS + 45 * MS));
}

#[test]
fn on_no_tree_link_an_announce_is_pulled_at_once_and_its_announcer_grafted() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2]);
    let msg = small(1);
    let id = MessageId::of(&msg);
    e.handle_frame(1, announce(&msg), 0).unwrap();
    let txs = drain(&mut e, 0);
    assert_eq!(requests_in(&txs, 1), vec![id]);
    assert_eq!(
        links_in(&txs, 1),
        vec![LinkItem {
            id,
            kind: MessageKind::Deposit,
            op: LinkOp::Graft
        }]
    );
    assert_eq!(
        policy.links(),
        vec![PolicyEvent::Missing {
            peer: 1,
            message: id_head(&id),
            kind: MessageKind::Deposit
        }]
    );
    assert_eq!((e.stats().joins, e.stats().missing), (1, 0));
    // Now on the tree: the next announce waits for the tree's copy.
    let next = small(2);
    e.handle_frame(2, announce(&next), MS).unwrap();
    assert!(requests_in(&drain(&mut e, MS), 2).is_empty());
    e.handle_timeout(MS + 100 * MS);
    let txs = drain(&mut e, MS + 100 * MS);
    assert_eq!(requests_in(&txs, 2), vec![MessageId::of(&next)]);
    assert_eq!(e.stats().missing, 1);
}

#[test]
fn large_announces_are_pulled_at_once_even_on_the_tree() {
    let mut e = node(Recording::default(), &[1, 2]);
    on_tree(&mut e, 2);
    let msg = vec![3; 4096];
    e.handle_frame(1, announce(&msg), MS).unwrap();
    let txs = drain(&mut e, MS);
    assert_eq!(requests_in(&txs, 1), vec![MessageId::of(&msg)]);
    assert!(links_in(&txs, 1).is_empty(), "no graft for a large message");
    assert_eq!((e.stats().joins, e.stats().missing), (0, 0));
}

#[test]
fn a_duplicate_push_is_heard_and_pruned() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2, 3]);
    let msg = small(1);
    let id = MessageId::of(&msg);
    e.handle_frame(1, push(&msg), 0).unwrap();
    drain(&mut e, 0);
    e.handle_frame(2, push(&msg), MS).unwrap();
    let txs = drain(&mut e, MS);
    assert_eq!(
        links_in(&txs, 2),
        vec![LinkItem {
            id,
            kind: MessageKind::Deposit,
            op: LinkOp::Prune
        }]
    );
    assert!(links_in(&txs, 1).is_empty() && links_in(&txs, 3).is_empty());
    assert_eq!(
        policy.links(),
        vec![PolicyEvent::Duplicate {
            peer: 2,
            message: id_head(&id),
            kind: MessageKind::Deposit
        }]
    );
}

#[test]
fn a_peers_prune_and_graft_are_heard_as_that_links_duplicate_and_missing() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2]);
    let id = MessageId::of(&small(9));
    let item = |op| LinkItem {
        id,
        kind: MessageKind::Block,
        op,
    };
    e.handle_frame(
        2,
        Frame::Link {
            items: vec![item(LinkOp::Prune), item(LinkOp::Graft)],
        },
        0,
    )
    .unwrap();
    let (message, kind) = (id_head(&id), MessageKind::Block);
    assert_eq!(
        policy.links(),
        vec![
            PolicyEvent::Duplicate {
                peer: 2,
                message,
                kind
            },
            PolicyEvent::Missing {
                peer: 2,
                message,
                kind
            }
        ]
    );
}

#[test]
fn a_hostile_flood_of_prune_and_graft_is_capped_and_cuts_no_link() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2, 666]);
    let burst = e.config().link_burst;
    // 3 × 4,096 items in one second: no fault, the policy hears the burst and the rate.
    for round in 0..3u64 {
        let items = (0..4096u32)
            .map(|i| LinkItem {
                id: MessageId::of(&i.to_le_bytes()),
                kind: MessageKind::Block,
                op: if i % 2 == 0 {
                    LinkOp::Prune
                } else {
                    LinkOp::Graft
                },
            })
            .collect();
        e.handle_frame(666, Frame::Link { items }, round * 300 * MS)
            .unwrap();
    }
    let heard = policy.links().len() as u64;
    let rate = u64::from(e.config().link_per_sec);
    assert!(heard <= u64::from(burst) + rate, "heard {heard}");
    assert!(heard >= u64::from(burst));
    assert_eq!(e.stats().link_heard + e.stats().link_ignored, 3 * 4096);
    assert!(policy.links().iter().all(|ev| matches!(
        ev,
        PolicyEvent::Duplicate { peer: 666, .. } | PolicyEvent::Missing { peer: 666, .. }
    )));
    // The node still receives from its honest peer and passes the message on to every link,
    // the hostile one included.
    let msg = small(7);
    e.handle_frame(1, push(&msg), 2 * 1_000 * MS).unwrap();
    let txs = drain(&mut e, 2 * 1_000 * MS);
    let pushed_to = |p: u32| {
        txs.iter().any(|t| {
            t.peer == p
                && parts(&t.frame)
                    .iter()
                    .any(|f| matches!(f, Frame::Push { .. }))
        })
    };
    assert!(pushed_to(2) && pushed_to(666));
    assert_eq!(e.peers().count(), 3);
}

#[test]
fn a_policy_without_link_control_keeps_the_old_mechanics() {
    let mut e = GossipEngine::new(EngineConfig::default(), Flood);
    e.add_peer(1).unwrap();
    e.add_peer(2).unwrap();
    let msg = small(1);
    e.handle_frame(1, announce(&msg), 0).unwrap();
    let txs: Vec<Transmit> = std::iter::from_fn(|| e.poll_transmit(0)).collect();
    assert_eq!(requests_in(&txs, 1), vec![MessageId::of(&msg)]);
    let msg = small(2);
    e.handle_frame(1, push(&msg), MS).unwrap();
    e.handle_frame(2, push(&msg), MS).unwrap();
    let txs: Vec<Transmit> = std::iter::from_fn(|| e.poll_transmit(MS)).collect();
    assert!(links_in(&txs, 2).is_empty());
    assert_eq!(e.stats().prunes_sent, 0);
}
