//! The gossip-policy modules drive the host's gossip engine exactly like their native twins.

use modnode::runtime::LoadedModule;
use modnode_gossip::policy::Flood;
use modnode_gossip::policy_v2::PolicyV2;
use modnode_gossip::sim::{self, Scenario, SimConfig};

use super::{artifact, runtime};

fn scenario() -> (SimConfig, Scenario) {
    let config = SimConfig {
        nodes: 16,
        degree: 6,
        seed: 11,
        ..SimConfig::default()
    };
    let scenario = Scenario {
        deposits: 40,
        blocks: 6,
        ..Scenario::default()
    };
    (config, scenario)
}

fn policy_module(name: &str) -> modnode::runtime::gossip_policy::GossipPolicyModule {
    match runtime(100_000_000).load(&artifact(name)).unwrap() {
        LoadedModule::GossipPolicy(m) => m,
        _ => panic!("{name} is not a gossip policy"),
    }
}

#[test]
fn wasm_policies_match_their_native_twins_in_simulation() {
    let (config, scenario) = scenario();
    let v2 = policy_module("gossip-policy-v2");
    assert_eq!(v2.meta().info.version, 2);
    let wasm = sim::run(&config, &scenario, |_| v2.clone()).unwrap();
    let native = sim::run(&config, &scenario, |_| PolicyV2::default()).unwrap();
    assert_eq!(wasm, native);
    assert_eq!(wasm.missed, 0);

    let v1 = policy_module("gossip-policy-v1");
    let wasm_flood = sim::run(&config, &scenario, |_| v1.clone()).unwrap();
    let native_flood = sim::run(&config, &scenario, |_| Flood).unwrap();
    assert_eq!(wasm_flood, native_flood);
    // v2 cuts duplicate block payloads relative to flooding.
    assert!(
        wasm.rmr < wasm_flood.rmr / 2.0,
        "v2 rmr {} vs flood {}",
        wasm.rmr,
        wasm_flood.rmr
    );
}
