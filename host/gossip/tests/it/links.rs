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
    /// Forgets what was heard so far.
    fn clear(&self) {
        self.heard.borrow_mut().clear();
    }

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

/// Drains `e` and acknowledges every transmission at once (no send deadline left armed).
fn settle(e: &mut GossipEngine<Recording>, now: u64) -> Vec<Transmit> {
    let txs = drain(e, now);
    for tx in &txs {
        e.handle_send_complete(tx.peer, tx.send_id, now);
    }
    txs
}

/// Makes `peer`'s link a tree link by its GRAFT.
fn grafted_by(e: &mut GossipEngine<Recording>, peer: u32, now: u64) {
    let graft = Frame::Link {
        items: vec![LinkItem {
            id: MessageId::of(&small(99)),
            kind: MessageKind::Deposit,
            op: LinkOp::Graft,
        }],
    };
    e.handle_frame(peer, graft, now).unwrap();
    settle(e, now);
}

/// Puts `e` on the tree: `parent` pushes it a first copy unasked, as a tree link does (its
/// forwards are sent and acknowledged).
fn on_tree(e: &mut GossipEngine<Recording>, parent: u32) {
    e.handle_frame(parent, push(&vec![200; 300]), 0).unwrap();
    for tx in drain(e, 0) {
        e.handle_send_complete(tx.peer, tx.send_id, 0);
    }
}

/// A PRUNE or GRAFT about deposit `id`.
fn link(id: &MessageId, op: LinkOp) -> LinkItem {
    LinkItem {
        id: *id,
        kind: MessageKind::Deposit,
        op,
    }
}

/// What the policy hears when the link to `peer` is grafted for deposit `id`.
fn heard_missing(peer: u32, id: &MessageId) -> PolicyEvent {
    PolicyEvent::Missing {
        peer,
        message: id_head(id),
        kind: MessageKind::Deposit,
    }
}

/// What the policy hears when the link to `peer` is pruned for deposit `id`.
fn heard_duplicate(peer: u32, id: &MessageId) -> PolicyEvent {
    PolicyEvent::Duplicate {
        peer,
        message: id_head(id),
        kind: MessageKind::Deposit,
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
        origin: None,
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
fn a_first_copy_pushed_over_a_link_off_the_tree_grafts_it_on_both_sides() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2]);
    let msg = vec![200; 300];
    let id = MessageId::of(&msg);
    e.handle_frame(2, push(&msg), 0).unwrap();
    let txs = drain(&mut e, 0);
    // The pusher took the link for a tree link: it is one now, on both sides.
    assert_eq!(links_in(&txs, 2), vec![link(&id, LinkOp::Graft)]);
    assert_eq!(policy.links(), vec![heard_missing(2, &id)]);
    // A later first copy over the same link is just the tree at work.
    policy.clear();
    e.handle_frame(2, push(&small(7)), MS).unwrap();
    assert!(links_in(&drain(&mut e, MS), 2).is_empty());
    assert!(policy.links().is_empty());
}

#[test]
fn a_large_message_pushed_unasked_makes_no_tree_link() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2]);
    // An origin pushes its large message to a few peers, off the tree.
    e.handle_frame(1, push(&vec![7; 4096]), 0).unwrap();
    let txs = settle(&mut e, 0);
    assert!(links_in(&txs, 1).is_empty(), "no graft");
    assert!(policy.links().is_empty());
    // Still on no tree link: a small message's announce is pulled at once (a join).
    let msg = small(1);
    e.handle_frame(2, announce(&msg), MS).unwrap();
    let txs = settle(&mut e, MS);
    assert_eq!(requests_in(&txs, 2), vec![MessageId::of(&msg)]);
    assert_eq!(e.stats().joins, 1);
}

#[test]
fn a_missed_announce_is_pulled_and_a_second_miss_in_a_row_grafts() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2]);
    on_tree(&mut e, 2);
    policy.clear();
    let msg = small(1);
    let id = MessageId::of(&msg);
    e.handle_frame(1, announce(&msg), 0).unwrap();
    // Waiting for the eager copy: nothing is asked, the timer (the longest before any gap
    // was measured) is armed.
    assert!(drain(&mut e, 0).is_empty());
    assert_eq!(e.poll_timeout(), Some(100 * MS));
    e.handle_timeout(100 * MS);
    // The first miss since the tree last delivered: pulled, the tree kept (its copy may be
    // late, not lost).
    let txs = drain(&mut e, 100 * MS);
    assert_eq!(requests_in(&txs, 1), vec![id]);
    assert!(links_in(&txs, 1).is_empty());
    assert!(policy.links().is_empty());
    assert_eq!((e.stats().timer_pulls, e.stats().missing), (1, 0));
    // The pulled copy is no tree copy.
    e.handle_frame(1, push(&msg), 150 * MS).unwrap();
    settle(&mut e, 150 * MS);
    // A second miss with no tree copy in between: the announcer is grafted.
    let next = small(2);
    let next_id = MessageId::of(&next);
    e.handle_frame(1, announce(&next), 200 * MS).unwrap();
    e.handle_timeout(300 * MS);
    let txs = drain(&mut e, 300 * MS);
    assert_eq!(requests_in(&txs, 1), vec![next_id]);
    assert_eq!(links_in(&txs, 1), vec![link(&next_id, LinkOp::Graft)]);
    assert_eq!(policy.links(), vec![heard_missing(1, &next_id)]);
    assert_eq!((e.stats().timer_pulls, e.stats().missing), (1, 1));
    assert_eq!(e.stats().grafts_sent, 2, "the join of on_tree and this one");
}

#[test]
fn a_tree_copy_between_two_misses_keeps_the_tree_and_a_lost_tree_peer_grafts_at_once() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2, 3]);
    on_tree(&mut e, 2);
    grafted_by(&mut e, 3, MS);
    policy.clear();
    // Miss, pulled (and answered).
    e.handle_frame(1, announce(&small(1)), 10 * MS).unwrap();
    e.handle_timeout(110 * MS);
    settle(&mut e, 110 * MS);
    e.handle_frame(1, push(&small(1)), 120 * MS).unwrap();
    settle(&mut e, 120 * MS);
    // The tree delivers a first copy: the misses start over.
    e.handle_frame(2, push(&small(2)), 150 * MS).unwrap();
    settle(&mut e, 150 * MS);
    e.handle_frame(1, announce(&small(3)), 200 * MS).unwrap();
    e.handle_timeout(300 * MS);
    settle(&mut e, 300 * MS);
    e.handle_frame(1, push(&small(3)), 310 * MS).unwrap();
    settle(&mut e, 310 * MS);
    assert_eq!((e.stats().timer_pulls, e.stats().missing), (2, 0));
    assert!(policy.links().is_empty());
    // A tree peer leaves (3 is still a tree link): the next miss grafts at once.
    e.remove_peer(2, 320 * MS).unwrap();
    e.handle_frame(1, announce(&small(4)), 330 * MS).unwrap();
    e.handle_timeout(430 * MS);
    let txs = settle(&mut e, 430 * MS);
    let ops: Vec<LinkOp> = links_in(&txs, 1).into_iter().map(|l| l.op).collect();
    assert_eq!(ops, vec![LinkOp::Graft]);
    assert_eq!((e.stats().timer_pulls, e.stats().missing), (2, 1));
}

#[test]
fn a_tree_copy_after_our_pull_is_late_not_redundant() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2]);
    on_tree(&mut e, 2);
    policy.clear();
    let msg = small(1);
    e.handle_frame(1, announce(&msg), 0).unwrap();
    e.handle_timeout(100 * MS);
    let txs = settle(&mut e, 100 * MS);
    assert_eq!(requests_in(&txs, 1), vec![MessageId::of(&msg)]);
    e.handle_frame(1, push(&msg), 130 * MS).unwrap();
    settle(&mut e, 130 * MS);
    // The tree's copy comes after the pulled one: no PRUNE, nothing heard, a measured gap.
    e.handle_frame(2, push(&msg), 180 * MS).unwrap();
    let txs = settle(&mut e, 180 * MS);
    assert!(links_in(&txs, 2).is_empty());
    assert!(policy.links().is_empty());
    assert_eq!(e.stats().late_tree_copies, 1);
    assert_eq!(e.stats().prunes_sent, 0);
    // The gap (180 ms from the announce) tunes the timer: 1.5 × it, within the bounds.
    e.handle_frame(1, announce(&small(2)), 200 * MS).unwrap();
    assert_eq!(e.poll_timeout(), Some(200 * MS + 100 * MS));
}

#[test]
fn a_tree_link_is_pruned_only_when_its_duplicates_keep_coming() {
    let policy = Recording::default();
    let mut e = node(policy.clone(), &[1, 2, 3]);
    on_tree(&mut e, 2);
    // Peer 3 is grafted too (its GRAFT heard): two tree links.
    grafted_by(&mut e, 3, MS);
    policy.clear();
    let limit = EngineConfig::default().prune_after_duplicates;
    assert!(limit >= 2);
    let mut t = 10 * MS;
    // A duplicate from 3, then a first copy from 3: the streak starts over, no PRUNE.
    for n in 0..u8::try_from(limit).unwrap() - 1 {
        let msg = small(10 + n);
        e.handle_frame(2, push(&msg), t).unwrap();
        e.handle_frame(3, push(&msg), t + MS).unwrap();
        t += 10 * MS;
    }
    e.handle_frame(3, push(&small(50)), t).unwrap();
    t += 10 * MS;
    assert!(links_in(&drain(&mut e, t), 3).is_empty());
    assert!(policy.links().is_empty());
    // `limit` duplicates in a row: pruned.
    for n in 0..u8::try_from(limit).unwrap() {
        let msg = small(60 + n);
        e.handle_frame(2, push(&msg), t).unwrap();
        e.handle_frame(3, push(&msg), t + MS).unwrap();
        t += 10 * MS;
    }
    let txs = drain(&mut e, t);
    let prunes: Vec<LinkOp> = links_in(&txs, 3).into_iter().map(|l| l.op).collect();
    assert_eq!(prunes, vec![LinkOp::Prune]);
    assert!(matches!(
        policy.links().as_slice(),
        [PolicyEvent::Duplicate { peer: 3, .. }]
    ));
    assert_eq!(
        e.stats().tolerated_duplicates,
        u64::from(2 * limit - 2),
        "the ones before each PRUNE or first copy"
    );
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
    assert_eq!(links_in(&txs, 1), vec![link(&id, LinkOp::Graft)]);
    assert_eq!(policy.links(), vec![heard_missing(1, &id)]);
    assert_eq!((e.stats().joins, e.stats().missing), (1, 0));
    // Now on the tree: the next announce waits for the tree's copy.
    let next = small(2);
    e.handle_frame(2, announce(&next), MS).unwrap();
    assert!(requests_in(&drain(&mut e, MS), 2).is_empty());
    e.handle_timeout(MS + 100 * MS);
    let txs = drain(&mut e, MS + 100 * MS);
    assert_eq!(requests_in(&txs, 2), vec![MessageId::of(&next)]);
    // The first miss is pulled without a graft.
    assert_eq!((e.stats().timer_pulls, e.stats().missing), (1, 0));
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
    // (Peer 1's unasked first copy grafted its link.)
    policy.clear();
    e.handle_frame(2, push(&msg), MS).unwrap();
    let txs = drain(&mut e, MS);
    assert_eq!(links_in(&txs, 2), vec![link(&id, LinkOp::Prune)]);
    assert!(links_in(&txs, 1).is_empty() && links_in(&txs, 3).is_empty());
    assert_eq!(policy.links(), vec![heard_duplicate(2, &id)]);
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
