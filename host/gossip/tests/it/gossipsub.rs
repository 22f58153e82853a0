//! The simulator's gossipsub v1.2 reference model reproduces gossipsub's known behaviour; the
//! simulator with churn stays deterministic, delivers to every node that stays up, and gives
//! each node (each life of a node) its own policy instance, so stateful policies plug in.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use modnode_gossip::Payload;
use modnode_gossip::policy::{Flood, MessageKind, MessageMeta, PeerStats, Policy, SendPlan};
use modnode_gossip::policy_v2::PolicyV2;
use modnode_gossip::sim::gossipsub::{Control, Gossipsub, GossipsubConfig, GsFrame};
use modnode_gossip::sim::{self, NodeSetup, Scenario, SimConfig, SimNode, SimReport};

/// 200 nodes of 16 connections each (a gossipsub mesh of 8 needs more peers than 8), 20 ms
/// to 80 ms one way, 100 Mbit/s receive and upload links; publications start after 3 s, once
/// meshes formed.
fn network(seed: u64, churn_permille: u32) -> SimConfig {
    SimConfig {
        nodes: 200,
        degree: 16,
        seed,
        latency_min: 20_000,
        latency_max: 80_000,
        churn_permille,
        upload_bps: 100_000_000,
        max_time: 14_000_000,
        publish_start: 3_000_000,
        ..SimConfig::default()
    }
}

fn messages(count: usize, size: usize) -> Scenario {
    Scenario {
        deposits: 0,
        blocks: count,
        block_size: size,
        duration: 6_000_000,
        ..Scenario::default()
    }
}

fn gossipsub(cfg: &SimConfig, scenario: &Scenario, gs: &GossipsubConfig) -> SimReport {
    sim::run_nodes(cfg, scenario, |setup| Gossipsub::new(gs.clone(), setup)).unwrap()
}

fn v1_1() -> GossipsubConfig {
    GossipsubConfig {
        idontwant_threshold: None,
        ..GossipsubConfig::default()
    }
}

#[test]
fn gossipsub_duplicates_are_about_d_minus_one_without_idontwant() {
    for size in [1024, 100 * 1024] {
        let r = gossipsub(&network(5, 0), &messages(20, size), &v1_1());
        eprintln!("gossipsub v1.1, {size} B: {r}");
        assert_eq!(r.missed, 0);
        assert_eq!(r.pairs, 20 * 199);
        // Each node hears a message from each of its ~D mesh peers but the first.
        let d = GossipsubConfig::default().d as f64;
        assert!(
            (d - 2.0..=d).contains(&r.payload_rmr),
            "{size} B: duplicates per delivery {:.2}, expected about D - 1 = {}",
            r.payload_rmr,
            d - 1.0
        );
        assert!(r.control_per_node > 0.0);
    }
}

#[test]
fn gossipsub_idontwant_cuts_duplicates_of_large_messages() {
    let scenario = messages(20, 100 * 1024);
    let without = gossipsub(&network(5, 0), &scenario, &v1_1());
    let with = gossipsub(&network(5, 0), &scenario, &GossipsubConfig::default());
    eprintln!("v1.1: {without}\nv1.2: {with}");
    assert_eq!(with.missed, 0);
    assert!(
        with.payload_rmr < 0.8 * without.payload_rmr,
        "IDONTWANT: {:.2} duplicates per delivery against {:.2} without",
        with.payload_rmr,
        without.payload_rmr
    );
    assert!(with.bytes_per_node < without.bytes_per_node);
    assert!(with.control_per_node > without.control_per_node);
    // Below the threshold nothing changes.
    let small = messages(20, 512);
    assert_eq!(
        gossipsub(&network(5, 0), &small, &v1_1()),
        gossipsub(&network(5, 0), &small, &GossipsubConfig::default())
    );
}

#[test]
fn gossipsub_model_is_deterministic() {
    let scenario = messages(10, 100 * 1024);
    let gs = GossipsubConfig::default();
    let a = gossipsub(&network(9, 100), &scenario, &gs);
    let b = gossipsub(&network(9, 100), &scenario, &gs);
    assert_eq!(a, b);
    assert!(a.leaves > 0);
    let c = gossipsub(&network(10, 100), &scenario, &gs);
    assert_ne!(a, c, "another seed, another network");
}

#[test]
fn churn_loses_no_message_for_nodes_that_stay_up() {
    let scenario = messages(10, 100 * 1024);
    let cfg = network(3, 100);
    let flood = sim::run(&cfg, &scenario, |_| Flood).unwrap();
    let v2 = sim::run(&cfg, &scenario, |_| PolicyV2::default()).unwrap();
    let gs = gossipsub(&cfg, &scenario, &GossipsubConfig::default());
    eprintln!("churn 10%\n flood: {flood}\n v2: {v2}\n gossipsub: {gs}");
    for r in [&flood, &v2, &gs] {
        assert_eq!(r.leaves, 20, "10 % of 200 nodes leave");
        // Pairs of nodes away when a message was published, or gone before it arrived, are
        // not expected.
        assert!(
            r.pairs < 10 * 199 && r.pairs > 10 * 199 * 8 / 10,
            "{} pairs",
            r.pairs
        );
    }
    assert_eq!(flood.missed, 0);
    assert_eq!(v2.missed, 0);
    assert_eq!(
        sim::run(&cfg, &scenario, |_| PolicyV2::default()).unwrap(),
        v2
    );
}

/// A policy with memory: how many plans this instance made. Stands for the coming stateful
/// policies (state kept between calls, per node).
struct Remembering {
    plans: u32,
    log: Rc<RefCell<Vec<(usize, u32)>>>,
    node: usize,
}

impl Policy for Remembering {
    fn plan(&mut self, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan {
        self.plans += 1;
        self.log.borrow_mut().push((self.node, self.plans));
        Flood.plan(msg, peers)
    }
}

#[test]
fn a_stateful_policy_keeps_state_per_node_and_starts_empty_after_rejoining() {
    let cfg = network(3, 100);
    let scenario = messages(10, 1024);
    let built = RefCell::new(Vec::new());
    let log = Rc::new(RefCell::new(Vec::new()));
    let r = sim::run(&cfg, &scenario, |node| {
        built.borrow_mut().push(node);
        Remembering {
            plans: 0,
            log: log.clone(),
            node,
        }
    })
    .unwrap();
    assert_eq!(r.missed, 0);
    // One instance per node, and a fresh one for each node that rejoined.
    assert_eq!(built.borrow().len(), 200 + r.leaves);
    let log = log.borrow();
    let mut last: HashMap<usize, u32> = HashMap::new();
    let mut restarts = 0;
    for &(node, count) in log.iter() {
        let previous = last.insert(node, count).unwrap_or(0);
        if count == previous + 1 {
            continue;
        }
        // A count that went back to 1 is a rejoined node's new instance.
        assert_eq!(count, 1, "node {node}: plan {count} after {previous}");
        restarts += 1;
    }
    assert!(restarts > 0 && restarts <= r.leaves, "{restarts} restarts");
    // Every node planned each message it received once, in its one instance at the time.
    assert!(log.len() >= 10 * 180, "{} plans", log.len());
}

fn lone_node(peers: u32) -> Gossipsub {
    let mut node = Gossipsub::new(
        GossipsubConfig::default(),
        NodeSetup {
            index: 0,
            incarnation: 0,
            seed: 1,
            network_size: 100,
            now: 0,
        },
    );
    for p in 1..=peers {
        node.add_peer(p, 10_000, 0).unwrap();
    }
    node
}

fn drain(node: &mut Gossipsub) -> Vec<(u32, GsFrame)> {
    std::iter::from_fn(|| node.poll_transmit(0).map(|t| (t.peer, t.frame))).collect()
}

fn control(frames: &[(u32, GsFrame)], pick: fn(&Control) -> bool) -> Vec<u32> {
    frames
        .iter()
        .filter_map(|(p, f)| match f {
            GsFrame::Control(c) if pick(c) => Some(*p),
            _ => None,
        })
        .collect()
}

#[test]
fn gossipsub_mesh_grafts_to_d_and_prunes_back_to_d() {
    let mut node = lone_node(20);
    let first = node.poll_timeout().unwrap();
    assert!(first < GossipsubConfig::default().heartbeat);
    node.handle_timeout(first);
    let grafts = control(&drain(&mut node), |c| c.graft);
    assert_eq!(grafts.len(), 8, "grafts up to D");
    assert_eq!(node.mesh().count(), 8);
    // Twelve more peers graft us: the mesh holds 20 > D_hi until the next heartbeat.
    let grafting: Vec<u32> = (1..=20).filter(|p| !grafts.contains(p)).collect();
    for &p in &grafting {
        let graft = Control {
            graft: true,
            ..Control::default()
        };
        node.handle_frame(p, GsFrame::Control(graft), first + 1)
            .unwrap();
    }
    assert_eq!(node.mesh().count(), 20);
    let next = node.poll_timeout().unwrap();
    node.handle_timeout(next);
    let prunes = control(&drain(&mut node), |c| c.prune);
    assert_eq!(prunes.len(), 12, "prunes back to D");
    assert_eq!(node.mesh().count(), 8);
    // A pruned peer grafting again within the backoff is answered with a PRUNE.
    let graft = Control {
        graft: true,
        ..Control::default()
    };
    node.handle_frame(prunes[0], GsFrame::Control(graft), next + 1)
        .unwrap();
    assert_eq!(control(&drain(&mut node), |c| c.prune), vec![prunes[0]]);
    assert_eq!(node.mesh().count(), 8);
}

#[test]
fn gossipsub_announces_to_non_mesh_peers_and_serves_iwant() {
    let mut node = lone_node(20);
    let first = node.poll_timeout().unwrap();
    node.handle_timeout(first);
    drain(&mut node);
    let payload: Payload = vec![7u8; 2048].into();
    let id = node
        .publish(MessageKind::Block, payload.clone(), first + 1)
        .unwrap();
    let sent = drain(&mut node);
    let mesh: Vec<u32> = node.mesh().collect();
    let pushed: Vec<u32> = sent
        .iter()
        .filter(|(_, f)| matches!(f, GsFrame::Message { .. }))
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(pushed, mesh, "published to the mesh only");
    let next = node.poll_timeout().unwrap();
    node.handle_timeout(next);
    let ihave = control(&drain(&mut node), |c| !c.ihave.is_empty());
    // max(D_lazy = 6, 0.25 × 12 non-mesh peers) non-mesh peers hear of it.
    assert_eq!(ihave.len(), 6);
    assert!(ihave.iter().all(|p| !mesh.contains(p)));
    let iwant = Control {
        iwant: vec![id],
        ..Control::default()
    };
    node.handle_frame(ihave[0], GsFrame::Control(iwant), next + 1)
        .unwrap();
    let answer = drain(&mut node);
    assert!(
        matches!(answer.as_slice(), [(p, GsFrame::Message { id: got, .. })] if *p == ihave[0] && *got == id)
    );
    // A peer that said IDONTWANT is not sent the message, even when it asks.
    let dont = Control {
        idontwant: vec![id],
        ..Control::default()
    };
    node.handle_frame(ihave[1], GsFrame::Control(dont), next + 2)
        .unwrap();
    let iwant = Control {
        iwant: vec![id],
        ..Control::default()
    };
    node.handle_frame(ihave[1], GsFrame::Control(iwant), next + 3)
        .unwrap();
    assert!(drain(&mut node).is_empty());
    assert_eq!(node.stats().idontwant_skips, 1);
}
