//! Distance-vector routing in the sans-IO engine (`EngineConfig::routing`) with v3's routed
//! plan: routes converge to the shortest paths, every message then follows its origin's
//! shortest-path tree (one copy per node, at the shortest-path latency), a lost relay is routed
//! around, a peer that lies about its routes and drops everything delays but cuts nobody off,
//! and what a peer's route frames can make a node hold is bounded.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop
)]

use modnode_gossip::engine::{EngineConfig, RoutingConfig};
use modnode_gossip::policy::RouteRole;
use modnode_gossip::policy_v3::PolicyV3;
use modnode_gossip::sim::{self, Scenario, SimConfig};
use modnode_gossip::wire::{Frame, RouteAdvert, RouteItem};

use super::tree::{Net, payload};

const MS: u64 = 1_000;

/// Six nodes; the direct links are not the shortest paths everywhere (0→2 is 20 ms through 1,
/// not 30 through 3; 3→4 is 15 through 2, not 50 through 5).
const LINKS: &[(usize, usize, u64)] = &[
    (0, 1, 10),
    (1, 2, 10),
    (0, 3, 25),
    (3, 2, 5),
    (2, 4, 10),
    (4, 5, 10),
    (3, 5, 40),
    (1, 4, 30),
];

fn routed(v: usize) -> EngineConfig {
    EngineConfig {
        routing: Some(RoutingConfig::new(v as u64)),
        ..EngineConfig::default()
    }
}

fn net(links: &[(usize, usize, u64)]) -> Net {
    Net::build(6, links, routed, |_| PolicyV3::default())
}

/// One-way shortest-path latencies (µs) between every pair, over `links` without `dead`.
fn shortest(n: usize, links: &[(usize, usize, u64)], dead: Option<usize>) -> Vec<Vec<u64>> {
    let mut d = vec![vec![u64::MAX / 4; n]; n];
    for (v, row) in d.iter_mut().enumerate() {
        row[v] = 0;
    }
    for &(a, b, ms) in links {
        if dead == Some(a) || dead == Some(b) {
            continue;
        }
        d[a][b] = ms * MS;
        d[b][a] = ms * MS;
    }
    for k in 0..n {
        for i in 0..n {
            for j in 0..n {
                d[i][j] = d[i][j].min(d[i][k] + d[k][j]);
            }
        }
    }
    d
}

#[test]
fn routes_converge_to_the_shortest_paths_and_each_message_follows_its_origins_tree() {
    let mut net = net(LINKS);
    net.run_until(2_000 * MS);
    let d = shortest(6, LINKS, None);
    for v in 0..6 {
        for o in 0..6 {
            if v == o {
                continue;
            }
            let (via, distance) = net
                .node(v)
                .route_to(o as u64)
                .unwrap_or_else(|| panic!("node {v} has no route to {o}"));
            assert_eq!(u64::from(distance), d[v][o], "node {v} → {o}");
            // The next hop is on a shortest path.
            let hop = LINKS
                .iter()
                .find(|&&(a, b, _)| (a, b) == (v, via as usize) || (b, a) == (v, via as usize))
                .map(|l| l.2 * MS)
                .unwrap();
            assert_eq!(
                hop + d[via as usize][o],
                d[v][o],
                "node {v} → {o} via {via}"
            );
        }
    }
    // Each node's parent knows it as a child, with its subtree's size class: log2 of 1 + the
    // children's 2^class, computed here from the routes' tree.
    for o in 0..6 {
        let parent: Vec<Option<usize>> = (0..6)
            .map(|v| (v != o).then(|| net.node(v).route_to(o as u64).unwrap().0 as usize))
            .collect();
        // Deepest first: a node's class needs its children's.
        let mut order: Vec<usize> = (0..6).collect();
        order.sort_by_key(|&v| std::cmp::Reverse(d[o][v]));
        let mut class = [0u8; 6];
        for &v in &order {
            let size: u64 = 1
                + (0..6)
                    .filter(|&c| parent[c] == Some(v))
                    .map(|c| 1u64 << class[c])
                    .sum::<u64>();
            class[v] = size.ilog2() as u8;
        }
        for v in (0..6).filter(|&v| v != o) {
            let p = parent[v].unwrap();
            assert_eq!(
                net.node(p).route_role(o as u64, v as u32),
                RouteRole::Child(class[v]),
                "{v} under {p} on {o}'s tree"
            );
        }
    }
    // Every origin's message reaches every node at the shortest-path latency, once.
    for o in 0..6 {
        let t0 = net.now;
        let id = net.publish(o, payload(o as u32));
        net.run_until(t0 + 500 * MS);
        for v in 0..6 {
            assert_eq!(
                net.delivered[&(v, id)] - t0,
                d[o][v],
                "message of {o} at node {v}"
            );
        }
    }
    assert_eq!(net.duplicates(), 0, "a routed message was received twice");
}

#[test]
fn a_lost_relay_is_routed_around_and_every_message_still_arrives() {
    let mut net = net(LINKS);
    net.run_until(2_000 * MS);
    // Node 1 relays 0's messages to 2 and 4; it goes while one is on its way.
    let mut ids = Vec::new();
    let t0 = net.now;
    ids.push(net.publish(0, payload(1)));
    net.run_until(t0 + 5 * MS);
    net.kill(1);
    for i in 2..40 {
        let t = net.now;
        ids.push(net.publish(0, payload(i)));
        net.run_until(t + 50 * MS);
    }
    net.run_until(net.now + 2_000 * MS);
    for id in &ids {
        for v in [0, 2, 3, 4, 5] {
            assert!(
                net.delivered.contains_key(&(v, *id)),
                "node {v} missed {id}"
            );
        }
    }
    // Settled again: every node has a loop-free route, no shorter than the shortest path (not
    // always the shortest: a node that kept a feasible route through the loss does not take a
    // shorter one its feasibility distance refuses — see `routes.rs`), and a message follows
    // the routes, one copy per node, at each node's route distance.
    let d = shortest(6, LINKS, Some(1));
    let mut distance = [0u64; 6];
    for v in [2, 3, 4, 5] {
        let (via, us) = net.node(v).route_to(0).expect("a route after the loss");
        assert!(u64::from(us) >= d[v][0], "node {v} → 0: {us} µs");
        assert_ne!(via, 1, "node {v} still routes through the dead relay");
        distance[v] = u64::from(us);
    }
    assert_eq!(distance[2], d[2][0], "2 → 3 → 0 is the only way left");
    let before = net.duplicates();
    let t = net.now;
    let id = net.publish(0, payload(99));
    net.run_until(t + 500 * MS);
    for v in [2, 3, 4, 5] {
        assert_eq!(net.delivered[&(v, id)] - t, distance[v], "node {v}");
    }
    assert_eq!(net.duplicates(), before);
}

#[test]
fn a_peer_that_lies_about_its_routes_and_drops_everything_delays_but_cuts_nobody_off() {
    let mut net = net(LINKS);
    net.run_until(2_000 * MS);
    // Node 3 turns hostile: it claims to be next to every origin, and forwards nothing.
    net.silence(3);
    let lie = Frame::Routes {
        items: (0..6u64)
            .filter(|&o| o != 3)
            .map(|origin| RouteItem {
                origin,
                route: RouteAdvert::Distance(0),
            })
            .collect(),
    };
    for v in [0, 2, 5] {
        net.inject(3, v, lie.clone());
    }
    net.run_until(net.now + 500 * MS);
    // The lie is believed where it looks shortest: the black hole attracts routes.
    assert_eq!(net.node(2).route_to(0).map(|r| r.0), Some(3));
    let mut ids = Vec::new();
    for round in 0..3u32 {
        for o in [0, 1, 2, 4, 5] {
            let t = net.now;
            ids.push((o, net.publish(o, payload(100 + 10 * round + o as u32))));
            net.run_until(t + 100 * MS);
        }
    }
    net.run_until(net.now + 3_000 * MS);
    for &(o, id) in &ids {
        for v in [0, 1, 2, 4, 5] {
            assert!(
                net.delivered.contains_key(&(v, id)),
                "node {v} never got {o}'s message {id}"
            );
        }
    }
}

#[test]
fn what_a_peers_route_frames_can_make_a_node_hold_and_hear_is_bounded() {
    let mut cfg = routed(0);
    let routing = cfg.routing.as_mut().unwrap();
    routing.max_origins = 100;
    routing.items_burst = 1_000;
    routing.items_per_sec = 10;
    let mut engine = modnode_gossip::GossipEngine::new(cfg, PolicyV3::default());
    engine.add_peer(1).unwrap();
    engine.handle_rtt_sample(1, 20_000);
    for frame in 0..2u64 {
        let items = (0..4_096u64)
            .map(|i| RouteItem {
                origin: 1_000 + frame * 4_096 + i,
                route: RouteAdvert::Distance(5_000),
            })
            .collect();
        engine.handle_frame(1, Frame::Routes { items }, 0).unwrap();
    }
    let stats = engine.route_stats().unwrap().clone();
    assert_eq!(stats.items_heard, 1_000, "{stats:?}");
    assert_eq!(stats.items_ignored, 2 * 4_096 - 1_000, "{stats:?}");
    assert_eq!(engine.route_origins(), 100);
    assert_eq!(stats.origins_refused, 900, "{stats:?}");
    // The peer is still a peer, and a later frame within the budget is heard.
    engine
        .handle_frame(
            1,
            Frame::Routes {
                items: vec![RouteItem {
                    origin: 1_000,
                    route: RouteAdvert::Distance(1_000),
                }],
            },
            10_000_000,
        )
        .unwrap();
    assert_eq!(engine.route_to(1_000), Some((1, 11_000)));
}

#[test]
fn on_a_simulated_network_routed_messages_take_the_shortest_paths_once_even_with_churn() {
    let scenario = Scenario {
        deposits: 60,
        deposit_size: 1_024,
        blocks: 0,
        block_size: 0,
        duration: 6_000_000,
    };
    let plain = SimConfig {
        nodes: 100,
        degree: 8,
        seed: 13,
        latency_min: 10_000,
        latency_max: 100_000,
        publish_start: 3_000_000,
        ..SimConfig::default()
    };
    let mut calm = plain.clone();
    calm.engine.routing = Some(RoutingConfig::new(0));
    let tree = sim::run(&plain, &scenario, |_| PolicyV3::default()).unwrap();
    let routed = sim::run(&calm, &scenario, |_| PolicyV3::default()).unwrap();
    assert_eq!(routed.missed, 0, "{routed}");
    assert!(routed.payload_rmr < 0.01, "{routed}");
    assert!(routed.t99 < tree.t99, "routed {routed} vs tree {tree}");
    let churn = SimConfig {
        churn_permille: 100,
        ..calm
    };
    let churned = sim::run(&churn, &scenario, |_| PolicyV3::default()).unwrap();
    assert!(churned.leaves > 0);
    assert_eq!(churned.missed, 0, "{churned}");
    assert!(churned.payload_rmr < 0.2, "{churned}");
}

/// Follows `v`'s next hops towards `origin`: `Err` names a loop (a node visited twice);
/// `Ok(false)` a path that ends at a node with no route, or at a dead one (routes still
/// converging); `Ok(true)` a path to the origin.
fn follow(net: &mut Net, alive: &[bool], v: usize, origin: usize) -> Result<bool, Vec<usize>> {
    let mut path = vec![v];
    let mut at = v;
    while at != origin {
        if !alive[at] {
            return Ok(false);
        }
        let Some((via, _)) = net.node(at).route_to(origin as u64) else {
            return Ok(false);
        };
        at = via as usize;
        if path.contains(&at) {
            path.push(at);
            return Err(path);
        }
        path.push(at);
    }
    Ok(true)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 24,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Whatever the topology and whichever nodes die when, no route ever runs in a loop — not
    /// even while the routes converge again — and once they settle every node reaches every
    /// origin it is still connected to.
    #[test]
    fn routes_never_loop_and_settle_to_every_reachable_origin(
        extra in proptest::collection::vec((0usize..8, 0usize..8, 1u64..60), 4..14),
        chain in proptest::collection::vec(1u64..60, 7),
        deaths in proptest::collection::vec((0usize..8, 1u64..400), 1..3),
    ) {
        // A chain keeps the graph connected at first; extra links make cycles.
        let mut links: Vec<(usize, usize, u64)> =
            chain.iter().enumerate().map(|(i, &ms)| (i, i + 1, ms)).collect();
        for (a, b, ms) in extra {
            if a != b && !links.iter().any(|&(x, y, _)| (x, y) == (a, b) || (x, y) == (b, a)) {
                links.push((a, b, ms));
            }
        }
        let mut net = Net::build(8, &links, routed, |_| PolicyV3::default());
        net.run_until(1_500 * MS);
        let mut alive = [true; 8];
        let mut t = net.now;
        for (v, after_ms) in deaths {
            t += after_ms * MS;
            net.run_until(t);
            if alive[v] {
                net.kill(v);
                alive[v] = false;
            }
            // Watch the routes converge again, every 5 ms for a second.
            for _ in 0..200 {
                t += 5 * MS;
                net.run_until(t);
                for v in (0..8).filter(|&v| alive[v]) {
                    for o in (0..8).filter(|&o| o != v) {
                        let path = follow(&mut net, &alive, v, o);
                        proptest::prop_assert!(path.is_ok(), "loop {:?} at {} ms", path, t / MS);
                    }
                }
            }
        }
        net.run_until(t + 3_000 * MS);
        // Settled: whatever is still connected is reached.
        let d = {
            let live: Vec<(usize, usize, u64)> = links
                .iter()
                .copied()
                .filter(|&(a, b, _)| alive[a] && alive[b])
                .collect();
            shortest(8, &live, None)
        };
        for v in (0..8).filter(|&v| alive[v]) {
            for o in (0..8).filter(|&o| o != v && alive[o]) {
                let connected = d[v][o] < u64::MAX / 4;
                let reached = follow(&mut net, &alive, v, o);
                proptest::prop_assert_eq!(reached, Ok(connected), "{} → {}", v, o);
            }
        }
    }
}

/// A peer that makes our route frames to it fail must not refill its own budget: a failed
/// send is re-sent, the peer's allowance of route items it sends us stays spent.
#[test]
fn a_failed_route_frame_does_not_refill_the_peers_budget() {
    let mut cfg = routed(0);
    let routing = cfg.routing.as_mut().unwrap();
    routing.items_burst = 1_000;
    routing.items_per_sec = 1;
    let mut engine = modnode_gossip::GossipEngine::new(cfg, PolicyV3::default());
    engine.add_peer(1).unwrap();
    let frame = |base: u64| Frame::Routes {
        items: (0..1_000u64)
            .map(|i| RouteItem {
                origin: base + i,
                route: RouteAdvert::Distance(5_000),
            })
            .collect(),
    };
    engine.handle_frame(1, frame(1_000), 0).unwrap();
    let tx = engine
        .poll_transmit(0)
        .expect("our route frame to the peer");
    assert!(engine.handle_send_failed(1, tx.send_id, 1));
    engine.handle_frame(1, frame(5_000), 2).unwrap();
    let stats = engine.route_stats().unwrap();
    assert_eq!(stats.items_heard, 1_000, "{stats:?}");
    assert_eq!(stats.items_ignored, 1_000, "{stats:?}");
}
