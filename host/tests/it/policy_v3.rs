//! gossip-policy-v3 as a wasm module (`modnode:gossip-policy@2.0.0`): it plans as the native
//! algorithm on the same state, its state round-trips and stays within bounds, a state it
//! cannot read is empty, it asks for the engine's tree mechanics — which a node gives it as a
//! canary too, never as a shadow — the simulator runs it through wasmtime — one state per
//! node — to a tree that misses nothing, and `upgrade-check` passes it against v2, its tree
//! repairing when parent links are cut.

use modnode::runtime::gossip_policy::{
    GossipPolicyModule, KeptPolicy, MessageMeta, PeerStats, PolicyEvent, from_wit_plan,
};
use modnode::runtime::inspect::validate;
use modnode::runtime::modules::InitialModules;
use modnode::runtime::slot::SlotConfig;
use modnode::runtime::{Kind, LinkedModule, Mode, Modules, Runtime};
use modnode::upgrade_check::{Checker, Kind as CheckKind, ModuleFile, Settings, Verdict};
use modnode_gossip::engine::{EngineConfig, GossipEngine};
use modnode_gossip::policy as native;
use modnode_gossip::policy_v3::{MAX_STATE_BYTES, PolicyV3, TreeState, V3Params, plan_v3};
use modnode_gossip::sim::{self, Scenario, SimConfig};
use modnode_gossip::wire::{Frame, LinkOp, MessageId};

use super::{artifact, runtime};

fn policy(rt: &Runtime, name: &str) -> GossipPolicyModule {
    match rt.load(&artifact(name)).unwrap() {
        LinkedModule::GossipPolicy(m) => m,
        _ => panic!("{name} is not a gossip policy"),
    }
}

fn native_peers(n: u32, seed: u32) -> Vec<native::PeerStats> {
    (0..n)
        .map(|i| {
            let x = i
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503));
            native::PeerStats {
                peer: i,
                rtt_us: 500 + x % 90_000,
                queue_depth: (x >> 7) % 12,
                recent_failures: u32::from((x >> 11) % 7 == 0),
                has_message: (x >> 3) % 4 == 0,
                is_origin: i == seed % n.max(1),
            }
        })
        .collect()
}

fn native_msg(seed: u32) -> native::MessageMeta {
    native::MessageMeta {
        kind: native::MessageKind::ALL[(seed % 4) as usize],
        size: 100 + (seed.wrapping_mul(7_919) % 4_000),
        local_origin: seed.is_multiple_of(5),
        hops: seed % 3,
        network_size: 1_000,
    }
}

fn wit_msg(m: &native::MessageMeta) -> MessageMeta {
    modnode::runtime::gossip_policy::to_wit_meta(m)
}

fn wit_peers(p: &[native::PeerStats]) -> Vec<PeerStats> {
    modnode::runtime::gossip_policy::to_wit_peers(p)
}

/// Events that prune, graft, join, leave and tick, varied by `seed`.
fn event(seed: u32) -> native::PolicyEvent {
    let peer = seed.wrapping_mul(31) % 40;
    match seed % 7 {
        0..=2 => native::PolicyEvent::Duplicate {
            peer,
            message: u64::from(seed),
            kind: native::MessageKind::Deposit,
        },
        3 => native::PolicyEvent::Missing {
            peer,
            message: u64::from(seed),
            kind: native::MessageKind::Block,
        },
        4 => native::PolicyEvent::PeerLeft(peer),
        5 => native::PolicyEvent::PeerJoined(peer),
        _ => native::PolicyEvent::Tick(u64::from(seed) * 700),
    }
}

#[test]
fn the_module_plans_as_the_native_algorithm_on_the_same_state_and_keeps_it_in_bounds() {
    let rt = runtime(1_000_000_000);
    let module = policy(&rt, "gossip-policy-v3");
    let info = validate(&artifact("gossip-policy-v3")).unwrap();
    assert_eq!(info.contract.to_string(), "2.0.0");
    let mut native = PolicyV3::default();
    let mut state = module.take_over(None, Vec::new()).unwrap();
    assert_eq!(TreeState::decode(&state), TreeState::default());
    for seed in 0..200u32 {
        let ev = event(seed);
        native::Policy::on_event(&mut native, &ev);
        state = module
            .on_event(ev, state)
            .unwrap()
            .expect("a stateful module keeps state");
        assert!(state.len() <= MAX_STATE_BYTES);
        assert_eq!(
            TreeState::decode(&state),
            native.state,
            "after event {seed}"
        );
        let (m, p) = (native_msg(seed), native_peers(40, seed));
        let planned = module
            .plan_with_state(wit_msg(&m), wit_peers(&p), state.clone())
            .unwrap();
        // Planning changes no state, and the same inputs on the same state plan the same.
        assert_eq!(planned.state.as_deref(), Some(&state[..]));
        assert_eq!(
            from_wit_plan(&planned.plan),
            plan_v3(&V3Params::default(), &native.state, &m, &p),
            "plan {seed}"
        );
        let again = module
            .plan_with_state(wit_msg(&m), wit_peers(&p), state.clone())
            .unwrap();
        assert_eq!(again.plan, planned.plan);
    }
    // Many peers pruned: the state stays within its bound, far under the host's.
    for peer in 0..5_000u32 {
        let dup = PolicyEvent::Duplicate {
            peer,
            message: 1,
            kind: native::MessageKind::Deposit,
        };
        state = module.on_event(dup, state).unwrap().unwrap();
    }
    assert!(state.len() <= MAX_STATE_BYTES, "{} bytes", state.len());
}

#[test]
fn a_state_it_cannot_read_is_empty_and_a_take_over_reads_only_its_own_format() {
    let rt = runtime(1_000_000_000);
    let v3 = policy(&rt, "gossip-policy-v3");
    let stateful_v2 = policy(&rt, "gossip-policy-v2-stateful");
    let (m, p) = (native_msg(2), native_peers(20, 2));
    let empty = v3
        .plan_with_state(wit_msg(&m), wit_peers(&p), Vec::new())
        .unwrap();
    let garbage = v3
        .plan_with_state(wit_msg(&m), wit_peers(&p), b"not a tree state".to_vec())
        .unwrap();
    assert_eq!(empty.plan, garbage.plan);
    // v2-stateful's state is not v3's: v3 starts empty.
    let mut v2_state = Vec::new();
    for peer in 0..4 {
        let dup = PolicyEvent::Duplicate {
            peer,
            message: 1,
            kind: native::MessageKind::Deposit,
        };
        v2_state = stateful_v2.on_event(dup, v2_state).unwrap().unwrap();
    }
    let taken = v3
        .take_over(Some(stateful_v2.meta().info.clone()), v2_state)
        .unwrap();
    assert_eq!(TreeState::decode(&taken), TreeState::default());
    // Its own state carries over to a version of the same format (itself here).
    let mut own = Vec::new();
    for seed in 0..10 {
        own = v3.on_event(event(seed), own).unwrap().unwrap();
    }
    let carried = v3
        .take_over(Some(v3.meta().info.clone()), own.clone())
        .unwrap();
    assert_eq!(carried, own);
}

#[test]
fn v3_asks_for_the_tree_mechanics_and_the_older_policies_do_not() {
    let rt = runtime(1_000_000_000);
    let p = V3Params::default();
    assert_eq!(
        policy(&rt, "gossip-policy-v3").link_control(),
        Some(p.link_control())
    );
    for name in [
        "gossip-policy-v1",
        "gossip-policy-v2",
        "gossip-policy-v2-stateful",
    ] {
        assert_eq!(policy(&rt, name).link_control(), None, "{name}");
    }
}

#[test]
fn the_simulator_runs_the_wasm_module_to_a_tree_that_misses_nothing() {
    let rt = runtime(1_000_000_000);
    let module = policy(&rt, "gossip-policy-v3");
    let flood = policy(&rt, "gossip-policy-v1");
    let cfg = SimConfig {
        nodes: 24,
        degree: 6,
        seed: 5,
        latency_min: 5_000,
        latency_max: 30_000,
        ..SimConfig::default()
    };
    let scenario = Scenario {
        deposits: 40,
        deposit_size: 300,
        blocks: 2,
        block_size: 20 * 1024,
        duration: 8_000_000,
    };
    let tree = sim::run(&cfg, &scenario, |_| KeptPolicy::new(&module)).unwrap();
    let flooded = sim::run(&cfg, &scenario, |_| KeptPolicy::new(&flood)).unwrap();
    assert_eq!(tree.missed, 0, "{tree}");
    assert!(tree.engine.grafts_sent > 0, "no tree: {tree}");
    assert!(
        tree.payload_rmr * 3.0 < flooded.payload_rmr,
        "v3 {tree} vs flood {flooded}"
    );
    // The wasm module and the native algorithm build the same network behaviour.
    let native = sim::run(&cfg, &scenario, |_| PolicyV3::default()).unwrap();
    assert_eq!(tree.payload_rmr, native.payload_rmr);
    assert_eq!(tree.t99, native.t99);
}

#[test]
fn a_v3_canary_gets_the_tree_mechanics_and_a_v3_shadow_sends_nothing() {
    let modules = Modules::new(
        runtime(1_000_000_000),
        InitialModules {
            deposits: &artifact("deposits-v2"),
            checkpoint: &artifact("checkpoint-v1"),
            gossip_policy: &artifact("gossip-policy-v2"),
        },
        SlotConfig::default(),
    )
    .unwrap();
    let v3 = modules.prepare(&artifact("gossip-policy-v3")).unwrap();
    let control = || native::Policy::link_control(&modules.gossip_policy());
    assert_eq!(control(), None, "v2 builds no tree");
    // A shadow's plans are never sent: nothing of it may reach the network, control frames
    // included (it hears the node's events, as the active version does).
    modules
        .activate(Kind::GossipPolicy, v3.hash, Mode::Shadow)
        .unwrap();
    assert_eq!(control(), None, "a shadow got the tree mechanics");
    // A canary's plans are sent: its tree needs PRUNE, GRAFT and `missing`.
    modules
        .activate(Kind::GossipPolicy, v3.hash, Mode::Canary(10))
        .unwrap();
    assert_eq!(control(), Some(V3Params::default().link_control()));
    let mut engine = GossipEngine::new(EngineConfig::default(), modules.gossip_policy());
    for peer in 1..=3 {
        engine.add_peer(peer).unwrap();
    }
    let payload = vec![5u8; 300];
    let id = MessageId::of(&payload);
    let push = Frame::Push {
        id,
        kind: native::MessageKind::Deposit,
        hops: 0,
        origin: None,
        payload: payload.into(),
    };
    engine.handle_frame(1, push.clone(), 0).unwrap();
    engine.handle_frame(2, push, 1_000).unwrap();
    let pruned = std::iter::from_fn(|| engine.poll_transmit(1_000)).any(|tx| {
        tx.peer == 2
            && match tx.frame {
                Frame::Link { items } => items.iter().any(|i| i.op == LinkOp::Prune),
                Frame::Batch { frames } => frames.iter().any(
                    |f| matches!(f, Frame::Link { items } if items.iter().any(|i| i.op == LinkOp::Prune)),
                ),
                _ => false,
            }
    });
    assert!(pruned, "the duplicate was not pruned");
    assert_eq!(engine.stats().prunes_sent, 1);
}

#[test]
fn upgrade_check_passes_v2_to_v3_with_its_tree_repairing_when_parent_links_are_cut() {
    let module = |name: &str| ModuleFile::read(&modnode::artifacts::path(name)).unwrap();
    let checker = Checker::new(
        CheckKind::GossipPolicy,
        &module("gossip-policy-v2"),
        &module("gossip-policy-v3"),
    )
    .unwrap();
    let report = checker
        .run(&Settings {
            cases: 32,
            seed: 11,
            ..Settings::default()
        })
        .unwrap();
    assert_eq!(report.verdict, Verdict::Pass, "{:?}", report.counterexample);
    assert!(report.cases >= 32, "{report:?}");
    // The cut runs happen: on one of the check's networks, v3 repairs around every cut.
    let cfg = SimConfig {
        nodes: 16,
        degree: 4,
        seed: 3,
        parent_cuts: 4,
        ..SimConfig::default()
    };
    let scenario = Scenario {
        deposits: 12,
        deposit_size: 1024,
        blocks: 3,
        block_size: 32 * 1024,
        duration: 1_000_000,
    };
    let v3 = policy(&runtime(1_000_000_000), "gossip-policy-v3");
    let repaired = sim::run(&cfg, &scenario, |_| KeptPolicy::new(&v3)).unwrap();
    assert_eq!(repaired.cuts, 4, "{repaired}");
    assert_eq!(repaired.missed, 0, "{repaired}");
}
