//! Compares gossip-policy v3's spreading tree (the native twin of the wasm module: one
//! algorithm, `gossip_policy_common::policy_v3`) with the simulator's gossipsub v1.2 model on
//! the network of `modnode bench gossip-sim` (10–100 ms one way, 100 Mbit/s down and up,
//! publications over 10 s from 3 s on), at a size that runs in seconds in a debug build:
//!
//! `cargo run -p modnode-gossip --example tree_vs_gossipsub -- [nodes] [messages] [seed]`
//!
//! Prints, per message size (1 KiB, 100 KiB) and churn (0 %, 10 %), each protocol's report.
//! For design work (`V3_EAGER_MAX`, `V3_GRAFT_MIN_MS`, `V3_GRAFT_MAX_MS`, `V3_CHURN_MS`,
//! `V3_ANNOUNCE_FIRST_ABOVE`, `V3_LARGE_PUSHES`, `V3_LARGE_QUORUM`, `V3_BASE_TIMEOUT_MS` in the
//! environment override v3's parameters, `GRAFT_AFTER_MISSES`, `PRUNE_AFTER`, `MAX_INFLIGHT` the
//! engine's; `ROUTED=1` gives the engines distance-vector routes (v3 then plans along each
//! origin's shortest-path tree), `HOP_COST_US` the routes' cost per hop; `SIM_SIZES=1024,102400`
//! picks the sizes, `SIM_CHURN=0,100` the churn (per mille), `SKIP_GOSSIPSUB=1` runs v3 only);
//! the numbers of record come from the benchmark (the wasm modules).

use std::error::Error;

use modnode_gossip::engine::{EngineConfig, RoutingConfig};
use modnode_gossip::policy_v3::{PolicyV3, V3Params};
use modnode_gossip::sim::gossipsub::{Gossipsub, GossipsubConfig};
use modnode_gossip::sim::{self, Scenario, SimConfig};

fn arg(n: usize, default: u64) -> Result<u64, Box<dyn Error>> {
    match std::env::args().nth(n) {
        Some(a) => Ok(a.parse()?),
        None => Ok(default),
    }
}

fn env(name: &str, default: u32) -> Result<u32, Box<dyn Error>> {
    match std::env::var(name) {
        Ok(v) => Ok(v.parse()?),
        Err(_) => Ok(default),
    }
}

fn sizes() -> Result<Vec<usize>, Box<dyn Error>> {
    match std::env::var("SIM_SIZES") {
        Ok(v) => v.split(',').map(|s| Ok(s.parse()?)).collect(),
        Err(_) => Ok(vec![1024, 100 * 1024]),
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let defaults = V3Params::default();
    let params = V3Params {
        eager_max: env("V3_EAGER_MAX", defaults.eager_max)?,
        graft_min_ms: env("V3_GRAFT_MIN_MS", defaults.graft_min_ms)?,
        graft_max_ms: env("V3_GRAFT_MAX_MS", defaults.graft_max_ms)?,
        large_origin_pushes: env("V3_LARGE_PUSHES", defaults.large_origin_pushes)?,
        large_origin_quorum: env("V3_LARGE_QUORUM", defaults.large_origin_quorum)?,
        churn_ms: env("V3_CHURN_MS", u32::try_from(defaults.churn_ms)?)?.into(),
        announce_first_above: env("V3_ANNOUNCE_FIRST_ABOVE", defaults.announce_first_above)?,
        base_timeout_ms: env("V3_BASE_TIMEOUT_MS", defaults.base_timeout_ms)?,
        ..defaults
    };
    let sim_defaults = SimConfig::default().engine;
    let engine = EngineConfig {
        graft_after_misses: env("GRAFT_AFTER_MISSES", sim_defaults.graft_after_misses)?,
        prune_after_duplicates: env("PRUNE_AFTER", sim_defaults.prune_after_duplicates)?,
        max_inflight_per_peer: usize::try_from(env(
            "MAX_INFLIGHT",
            u32::try_from(sim_defaults.max_inflight_per_peer)?,
        )?)?,
        routing: std::env::var_os("ROUTED")
            .map(|_| -> Result<_, Box<dyn Error>> {
                Ok(RoutingConfig {
                    hop_cost_us: env("HOP_COST_US", 0)?,
                    ..RoutingConfig::new(0)
                })
            })
            .transpose()?,
        ..sim_defaults
    };
    let nodes = usize::try_from(arg(1, 200)?)?;
    let messages = usize::try_from(arg(2, 20)?)?;
    let seed = arg(3, 7)?;
    for size in sizes()? {
        let small = size < 16 * 1024;
        let scenario = Scenario {
            deposits: if small { messages } else { 0 },
            deposit_size: size,
            blocks: if small { 0 } else { messages },
            block_size: size,
            duration: 10_000_000,
        };
        let churns: Vec<u32> = match std::env::var("SIM_CHURN") {
            Ok(v) => v.split(',').map(str::parse).collect::<Result<_, _>>()?,
            Err(_) => vec![0, 100],
        };
        for churn_permille in churns {
            let cfg = SimConfig {
                nodes,
                degree: 16,
                seed,
                latency_min: 10_000,
                latency_max: 100_000,
                bandwidth_bps: 100_000_000,
                upload_bps: 100_000_000,
                churn_permille,
                churn_downtime: 2_000_000,
                publish_start: 3_000_000,
                max_time: 23_000_000,
                engine: engine.clone(),
                ..SimConfig::default()
            };
            let tree = sim::run(&cfg, &scenario, |_| PolicyV3 {
                params: params.clone(),
                ..PolicyV3::default()
            })?;
            let gs = if std::env::var_os("SKIP_GOSSIPSUB").is_some() {
                None
            } else {
                Some(sim::run_nodes(&cfg, &scenario, |setup| {
                    Gossipsub::new(GossipsubConfig::default(), setup)
                })?)
            };
            println!("{size} B, churn {}%:", churn_permille / 10);
            println!("  v3        {tree}");
            println!(
                "            rmr {:.4} grafts {} prunes {} missing {} dup pushes {} timer pulls {} late tree copies {} tolerated {}",
                tree.payload_rmr,
                tree.engine.grafts_sent,
                tree.engine.prunes_sent,
                tree.engine.missing,
                tree.engine.duplicate_pushes,
                tree.engine.timer_pulls,
                tree.engine.late_tree_copies,
                tree.engine.tolerated_duplicates
            );
            if let Some(gs) = gs {
                println!("  gossipsub {gs}");
            }
        }
    }
    Ok(())
}
