//! The gossip simulator at 1,000 nodes with 10 % churn runs the real wasm policies through
//! wasmtime, and each decides exactly as its native twin (so the simulator's numbers are the
//! modules' numbers).

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use modnode::runtime::LoadedModule;
use modnode::runtime::gossip_policy::GossipPolicyModule;
use modnode_gossip::policy::{Flood, MessageMeta, PeerStats, Policy, SendPlan};
use modnode_gossip::policy_v2::PolicyV2;
use modnode_gossip::sim::{self, Scenario, SimConfig};

use super::{artifact, runtime};

fn policy_module(name: &str) -> GossipPolicyModule {
    match runtime(100_000_000).load(&artifact(name)).unwrap() {
        LoadedModule::GossipPolicy(m) => m,
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
