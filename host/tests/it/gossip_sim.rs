//! The gossip simulator at 1,000 nodes with 10 % churn runs the real wasm policies through
//! wasmtime, and each decides exactly as its native twin (so the simulator's numbers are the
//! modules' numbers); on the benchmark's network, the wasm gossip-policy-v3 spreads 1 KiB and
//! 100 KiB messages with at most 0.15 redundant copies per delivery and a fifth of the gossipsub
//! model's duplicates at most, missing nothing.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use modnode::runtime::LinkedModule;
use modnode::runtime::gossip_policy::{GossipPolicyModule, KeptPolicy};
use modnode_gossip::policy::{Flood, MessageMeta, PeerStats, Policy, SendPlan};
use modnode_gossip::policy_v2::PolicyV2;
use modnode_gossip::sim::gossipsub::{Gossipsub, GossipsubConfig};
use modnode_gossip::sim::{self, Scenario, SimConfig};

use super::{artifact, runtime};

fn policy_module(name: &str) -> GossipPolicyModule {
    match runtime(100_000_000).load(&artifact(name)).unwrap() {
        LinkedModule::GossipPolicy(m) => m,
        _ => panic!("{name} is not a gossip policy"),
    }
}

/// Builds the native twin of a module.
type Twin = fn() -> Box<dyn Policy>;

fn flood() -> Box<dyn Policy> {
    Box::new(Flood)
}

fn v2() -> Box<dyn Policy> {
    Box::new(PolicyV2::default())
}

/// Counts the plans a policy makes.
struct Counted<P> {
    inner: P,
    calls: Rc<Cell<u64>>,
}

impl<P: Policy> Policy for Counted<P> {
    fn plan(&mut self, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan {
        self.calls.set(self.calls.get() + 1);
        self.inner.plan(msg, peers)
    }
}

fn counted<P: Policy>(inner: P, calls: &Rc<Cell<u64>>) -> Counted<P> {
    Counted {
        inner,
        calls: calls.clone(),
    }
}

#[test]
fn thousand_nodes_with_churn_run_the_wasm_policies() {
    let config = SimConfig {
        nodes: 1_000,
        degree: 16,
        latency_min: 10_000,
        latency_max: 100_000,
        upload_bps: 100_000_000,
        churn_permille: 100,
        ..SimConfig::default()
    };
    let scenario = Scenario {
        deposits: 2,
        deposit_size: 1024,
        blocks: 2,
        block_size: 100 * 1024,
        duration: 4_000_000,
    };
    let twins: [(&str, Twin); 2] = [("gossip-policy-v1", flood), ("gossip-policy-v2", v2)];
    for (name, native) in twins {
        let module: GossipPolicyModule = policy_module(name);
        let wasm_calls = Rc::new(Cell::new(0));
        let started = Instant::now();
        let wasm = sim::run(&config, &scenario, |_| counted(module.clone(), &wasm_calls)).unwrap();
        let wasm_secs = started.elapsed().as_secs_f64();
        let native_calls = Rc::new(Cell::new(0));
        let started = Instant::now();
        let twin = sim::run(&config, &scenario, |_| counted(native(), &native_calls)).unwrap();
        eprintln!(
            "{name}: {wasm}\n  {} plans through wasmtime in {wasm_secs:.1} s, native twin {:.1} s",
            wasm_calls.get(),
            started.elapsed().as_secs_f64()
        );
        assert_eq!(
            wasm, twin,
            "{name} decided differently from its native twin"
        );
        assert_eq!(wasm_calls.get(), native_calls.get());
        // One plan per message per node that received or published it.
        assert!(wasm_calls.get() >= 4 * 900, "{} plans", wasm_calls.get());
        assert_eq!(wasm.leaves, 100);
        assert_eq!(wasm.missed, 0, "{name} missed deliveries under churn");
    }
}

#[test]
fn v3_spreads_with_a_fifth_of_the_gossipsub_models_duplicates_at_most() {
    // The network of `modnode bench gossip-sim` (10–100 ms one way, 100 Mbit/s down and up,
    // 16 connections per node, 20 messages over 10 s from 3 s on), at 150 nodes; virtual time,
    // so the comparison is exact and the same on every run.
    let v3 = policy_module("gossip-policy-v3");
    let config = SimConfig {
        nodes: 150,
        degree: 16,
        seed: 7,
        latency_min: 10_000,
        latency_max: 100_000,
        bandwidth_bps: 100_000_000,
        upload_bps: 100_000_000,
        publish_start: 3_000_000,
        max_time: 23_000_000,
        ..SimConfig::default()
    };
    for size in [1024, 100 * 1024] {
        let small = size == 1024;
        let scenario = Scenario {
            deposits: if small { 20 } else { 0 },
            deposit_size: size,
            blocks: if small { 0 } else { 20 },
            block_size: size,
            duration: 10_000_000,
        };
        let tree = sim::run(&config, &scenario, |_| KeptPolicy::new(&v3)).unwrap();
        let gossipsub = sim::run_nodes(&config, &scenario, |setup| {
            Gossipsub::new(GossipsubConfig::default(), setup)
        })
        .unwrap();
        eprintln!("{size} B\n  v3        {tree}\n  gossipsub {gossipsub}");
        assert_eq!(tree.missed, 0, "{size} B: v3 missed deliveries: {tree}");
        assert!(
            tree.payload_rmr <= 0.15,
            "{size} B: v3 RMR {:.3} > 0.15",
            tree.payload_rmr
        );
        // Same pairs delivered (none missed by either): duplicates compare as RMRs.
        assert_eq!(gossipsub.missed, 0, "{gossipsub}");
        assert!(
            tree.payload_rmr * 5.0 <= gossipsub.payload_rmr,
            "{size} B: v3 RMR {:.3} vs gossipsub's {:.3}",
            tree.payload_rmr,
            gossipsub.payload_rmr
        );
        // Not (yet) the target t99 ≤ gossipsub's: a shared tree is not every origin's
        // fastest path, and a large message is pulled hop by hop. Bounded here so that it
        // cannot silently get worse than measured (2.6× for 1 KiB, 1.3× for 100 KiB at 200
        // nodes).
        assert!(
            tree.t99 <= gossipsub.t99 * 3,
            "{size} B: v3 t99 {} µs vs gossipsub's {} µs",
            tree.t99,
            gossipsub.t99
        );
    }
}
