//! Gossip-policy calls on reused (warm) instances answer as fresh instances do
//! (`runtime::gossip_policy::instances`).

use modnode::runtime::gossip_policy::{
    GossipPolicyModule, MessageKind, MessageMeta, PeerStats, instances,
};
use modnode::runtime::{CallError, LinkedModule, ModuleFault, Runtime};

use super::{artifact, runtime};

fn policy(rt: &Runtime, name: &str) -> GossipPolicyModule {
    match rt.load(&artifact(name)).unwrap() {
        LinkedModule::GossipPolicy(m) => m,
        _ => panic!("{name} is not a gossip policy"),
    }
}

/// `n` peers whose stats vary with `seed`.
fn peers(n: u32, seed: u32) -> Vec<PeerStats> {
    (0..n)
        .map(|i| {
            let x = i
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed.wrapping_mul(40_503));
            PeerStats {
                peer: i,
                rtt_us: 500 + x % 90_000,
                queue_depth: (x >> 7) % 9,
                recent_failures: u32::from((x >> 11) % 7 == 0),
                has_message: (x >> 3) % 4 == 0,
                is_origin: i == seed % n.max(1),
            }
        })
        .collect()
}

fn msg(seed: u32) -> MessageMeta {
    MessageMeta {
        kind: match seed % 4 {
            0 => MessageKind::Block,
            1 => MessageKind::Consensus,
            2 => MessageKind::Deposit,
            _ => MessageKind::PeerExchange,
        },
        size: 100 + (seed.wrapping_mul(7_919) % 200_000),
        local_origin: seed.is_multiple_of(5),
        hops: seed % 3,
        network_size: 2 + seed % 1_000,
    }
}

#[test]
fn reused_instances_plan_as_fresh_ones_over_many_varied_calls() {
    let rt = runtime(1_000_000_000);
    let before = instances::reused_calls();
    for name in [
        "gossip-policy-v1",
        "gossip-policy-v2",
        "gossip-policy-v2-stateful",
        "gossip-policy-v3",
    ] {
        let module = policy(&rt, name);
        for seed in 0..300u32 {
            // Mostly small peer sets, now and then a large one (the heap grows, then is reused).
            let n = if seed % 50 == 49 { 1_500 } else { seed % 40 };
            let (m, p) = (msg(seed), peers(n, seed));
            let reused = module.plan_with_state(m, p.clone(), Vec::new()).unwrap();
            let (fresh, _) = module.plan_metered(m, p).unwrap();
            assert_eq!(reused.plan, fresh, "{name}, call {seed}, {n} peers");
        }
        assert!(instances::reuses(&module), "{name} was taken for impure");
    }
    assert!(
        instances::reused_calls() >= before + 300,
        "the calls did not run on reused instances"
    );
}

#[test]
fn a_stateful_policy_on_reused_instances_follows_the_same_states_as_on_fresh_ones() {
    let rt = runtime(1_000_000_000);
    let module = policy(&rt, "gossip-policy-v2-stateful");
    let mut state = module.take_over(None, Vec::new()).unwrap();
    for seed in 0..200u32 {
        let (m, p) = (msg(seed), peers(4 + seed % 20, seed));
        let planned = module.plan_with_state(m, p, state.clone()).unwrap();
        state = planned.state.unwrap();
        if seed.is_multiple_of(3) {
            // The engine's kind of `m`'s (`msg(seed)`'s).
            let kind = match seed % 4 {
                0 => modnode_gossip::MessageKind::Block,
                1 => modnode_gossip::MessageKind::Consensus,
                2 => modnode_gossip::MessageKind::Deposit,
                _ => modnode_gossip::MessageKind::PeerExchange,
            };
            assert_eq!(modnode::runtime::gossip_policy::to_wit_kind(kind), m.kind);
            let event = modnode::runtime::gossip_policy::PolicyEvent::Duplicate {
                peer: seed % 7,
                message: u64::from(seed),
                kind,
            };
            state = module.on_event(event, state).unwrap().unwrap();
        }
    }
    // Every instance's 2nd and every 256th answer was checked against a fresh instance's.
    assert!(instances::reuses(&module));
}

#[test]
fn a_trap_does_not_poison_the_next_call() {
    let rt = runtime(1_000_000_000);
    let module = policy(&rt, "fixture-policy-trap");
    let ok = msg(3); // hops 0
    let trapping = MessageMeta { hops: 5, ..ok };
    let (expected, _) = module.plan_metered(ok, peers(10, 1)).unwrap();
    for round in 0..20 {
        let err = module.plan(trapping, peers(10, 1)).unwrap_err();
        assert!(
            matches!(err, CallError::Module(ModuleFault::Trap { .. })),
            "round {round}: {err}"
        );
        assert_eq!(
            module.plan(ok, peers(10, 1)).unwrap(),
            expected,
            "round {round}"
        );
    }
}

#[test]
fn growing_memory_or_leaving_garbage_does_not_change_the_next_plan() {
    let rt = runtime(1_000_000_000);
    // v2 over 4,000 peers grows its heap and leaves it full of freed peer lists.
    let module = policy(&rt, "gossip-policy-v2");
    let small = (msg(10), peers(8, 10));
    let (expected, _) = module.plan_metered(small.0, small.1.clone()).unwrap();
    for round in 0..10u32 {
        assert_eq!(
            module.plan(small.0, small.1.clone()).unwrap(),
            expected,
            "round {round}"
        );
        module.plan(msg(round), peers(4_000, round)).unwrap();
    }
    // A policy whose oversized state (1 MiB, grown in its memory) is a module fault.
    let big = policy(&rt, "fixture-policy-big-state");
    let local = MessageMeta { hops: 0, ..msg(4) };
    let far = MessageMeta { hops: 3, ..local };
    let (expected, _) = big.plan_metered(local, peers(8, 4)).unwrap();
    for round in 0..10 {
        assert!(big.plan_with_state(far, peers(8, 4), Vec::new()).is_err());
        let planned = big.plan_with_state(local, peers(8, 4), Vec::new()).unwrap();
        assert_eq!(planned.plan, expected, "round {round}");
    }
}

#[test]
fn fuel_is_per_call_and_a_call_that_runs_out_does_not_starve_the_next() {
    let probe = policy(&runtime(1_000_000_000), "gossip-policy-v2");
    let small = (msg(1), peers(8, 1));
    let large = (msg(1), peers(2_000, 1));
    let (expected, small_fuel) = probe.plan_metered(small.0, small.1.clone()).unwrap();
    let (_, large_fuel) = probe.plan_metered(large.0, large.1.clone()).unwrap();
    // Room for many small calls (and the warm-up's), never for a large one.
    let budget = large_fuel / 2;
    assert!(budget > 10 * small_fuel, "{large_fuel} vs {small_fuel}");
    let module = policy(&runtime(budget), "gossip-policy-v2");
    for round in 0..20 {
        let err = module.plan(large.0, large.1.clone()).unwrap_err();
        assert!(
            matches!(err, CallError::Module(ModuleFault::OutOfFuel { .. })),
            "round {round}: {err}"
        );
        // Small calls in a row, each of which gets the whole budget again: together they use
        // more than one budget.
        for _ in 0..12 {
            assert_eq!(module.plan(small.0, small.1.clone()).unwrap(), expected);
        }
    }
}

#[test]
fn a_policy_keeping_hidden_state_is_caught_and_then_runs_fresh() {
    let rt = runtime(1_000_000_000);
    let module = policy(&rt, "fixture-policy-hidden-state");
    let (m, p) = (msg(2), peers(6, 2));
    // On fresh instances the plan never changes: the quorum is always the first call's.
    let (fresh, _) = module.plan_metered(m, p.clone()).unwrap();
    assert_eq!(fresh.quorum, 1);
    assert!(instances::reuses(&module));
    // Every answer is a fresh instance's; the verification of a reused instance's second call
    // catches the divergence.
    for call in 0..50 {
        assert_eq!(module.plan(m, p.clone()).unwrap(), fresh, "call {call}");
    }
    assert!(
        !instances::reuses(&module),
        "the hidden state went unnoticed"
    );
}
