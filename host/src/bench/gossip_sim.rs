//! `modnode bench gossip-sim`: the deterministic gossip simulator (`modnode_gossip::sim`) at
//! scale, every plan of modnode's policies made by the real wasm modules through wasmtime
//! (flood = `gossip-policy-v1`, `gossip-policy-v2`, and the stateful `gossip-policy-v3`, each
//! simulated node keeping its own state and hearing the engine's events through the module's
//! `on-event`), next to the simulator's gossipsub v1.2 reference model, on the same topology,
//! latencies, bandwidths, churn and publications.
//!
//! Each policy runs with 1 KiB messages (deposits) and with 100 KiB messages (blocks), each
//! with no churn and with 10 % churn (a tenth of the nodes leave at even intervals over the
//! publications for 2 s each, and rejoin empty). Metrics per run: `rmr` = payload copies
//! received / (message, node) pairs delivered − 1; `t50_ms`/`t99_ms` = percentiles of
//! publication-to-delivery over delivered pairs; `missed` = pairs expected (node up at
//! publication and not gone before delivery) but never delivered; `bytes_per_node` and
//! `control_msgs_per_node` (announces and requests; GRAFT, PRUNE, IHAVE, IWANT, IDONTWANT)
//! received per node, without churn.
//!
//! `v3_routed_native` is a design measurement, not a module's: the native `PolicyV3` on
//! engines that route (`EngineConfig::routing`: distance-vector routes to every origin, each
//! message pushed down its origin's shortest-path tree and announced to the other peers,
//! `plan_v3_routed`). No WIT contract gives a module the routes yet, so no wasm policy can
//! plan this way; the entry shows what one will.
//!
//! JSON: `policies` holds the 100 KiB runs (the size `message_bytes` names), `by_size` both
//! sizes in the same shape, keyed by bytes; `run` says how much work and time it took.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Instant;

use serde::Serialize;

use modnode::runtime::gossip_policy::{GossipPolicyModule, KeptPolicy};
use modnode::runtime::{LinkedModule, Runtime, RuntimeConfig};
use modnode_gossip::policy::{LinkControl, MessageMeta, PeerStats, Policy, PolicyEvent, SendPlan};
use modnode_gossip::sim::gossipsub::{Gossipsub, GossipsubConfig};
use modnode_gossip::sim::{self, Scenario, SimConfig, SimReport};
use modnode_gossip::{PolicyV3, RoutingConfig};

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct GossipSimParams {
    /// Nodes.
    pub nodes: usize,
    /// Connections per node (at most); gossipsub's mesh of 8 needs more than 8.
    pub degree: usize,
    /// Seed of topology, latencies, origins, payloads, churn and gossipsub's choices.
    pub seed: u64,
    /// Messages published per run.
    pub messages: usize,
    /// Message sizes, bytes; one set of runs each.
    pub sizes: Vec<usize>,
}

impl Default for GossipSimParams {
    fn default() -> Self {
        GossipSimParams {
            nodes: 1_000,
            degree: 16,
            seed: 7,
            messages: 20,
            sizes: vec![1024, 100 * 1024],
        }
    }
}

/// One policy at one message size.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyReport {
    /// Payload copies received per delivery − 1, no churn.
    pub rmr: f64,
    /// Median coverage latency, no churn.
    pub t50_ms: f64,
    /// 99th percentile coverage latency, no churn.
    pub t99_ms: f64,
    /// Pairs never delivered, no churn.
    pub missed: usize,
    /// `rmr` with 10 % churn.
    pub rmr_churn10: f64,
    /// `t99_ms` with 10 % churn.
    pub t99_ms_churn10: f64,
    /// `missed` with 10 % churn (pairs of nodes up throughout).
    pub missed_churn10: usize,
    /// Bytes received per node, no churn.
    pub bytes_per_node: f64,
    /// Control messages received per node, no churn.
    pub control_msgs_per_node: f64,
}

/// The policies at one message size.
#[derive(Debug, Clone, Serialize)]
pub struct SizeReport {
    /// Per policy: `flood`, `v2`, `v3`, `gossipsub`, and `v3_routed_native` (see the module
    /// docs).
    pub policies: BTreeMap<String, PolicyReport>,
}

/// How much the run did.
#[derive(Debug, Clone, Serialize)]
pub struct RunStats {
    /// Plans the wasm modules made, per policy (all runs).
    pub wasm_plans: BTreeMap<String, u64>,
    /// Plans that failed in the module and were flooded instead (must be 0).
    pub wasm_plan_failures: u64,
    /// Wall-clock seconds per simulated run, per policy (mean).
    pub seconds_per_run: BTreeMap<String, f64>,
    /// Wall-clock seconds of the whole benchmark.
    pub seconds: f64,
    /// Messages per run.
    pub messages: usize,
    /// Connections per node.
    pub degree: usize,
    /// The benchmark ran in an unoptimised build (a wasm call then costs milliseconds, not
    /// microseconds: numbers of a debug build are for checking, not for the record).
    pub debug_build: bool,
}

/// The report printed by `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct GossipSimReport {
    /// Nodes.
    pub nodes: usize,
    /// Seed.
    pub seed: u64,
    /// Message size of `policies`, bytes.
    pub message_bytes: usize,
    /// The policies at `message_bytes`.
    pub policies: BTreeMap<String, PolicyReport>,
    /// Every size, keyed by bytes.
    pub by_size: BTreeMap<usize, SizeReport>,
    /// Work and time.
    pub run: RunStats,
}

/// A wasm policy module as one simulated node's policy ([`KeptPolicy`]: a stateful module's
/// state kept per node, its events heard), counting plans and failures over all nodes (a
/// failed call is flooded, as in a node, and counted: the benchmark must report none).
struct WasmPolicy {
    inner: KeptPolicy,
    plans: Rc<Cell<u64>>,
    failures: Rc<Cell<u64>>,
}

impl WasmPolicy {
    fn new(module: &GossipPolicyModule, plans: &Rc<Cell<u64>>, failures: &Rc<Cell<u64>>) -> Self {
        WasmPolicy {
            inner: KeptPolicy::new(module),
            plans: plans.clone(),
            failures: failures.clone(),
        }
    }

    fn count<T>(&mut self, call: impl FnOnce(&mut KeptPolicy) -> T) -> T {
        let (plans, failures) = (self.inner.plans(), self.inner.failures());
        let out = call(&mut self.inner);
        self.plans
            .set(self.plans.get() + self.inner.plans().saturating_sub(plans));
        self.failures
            .set(self.failures.get() + self.inner.failures().saturating_sub(failures));
        out
    }
}

impl Policy for WasmPolicy {
    fn plan(&mut self, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan {
        self.count(|p| p.plan(msg, peers))
    }

    fn on_event(&mut self, event: &PolicyEvent) {
        self.count(|p| p.on_event(event));
    }

    fn link_control(&self) -> Option<LinkControl> {
        self.inner.link_control()
    }
}

fn module(runtime: &Runtime, name: &str) -> anyhow::Result<GossipPolicyModule> {
    let bytes =
        modnode::artifacts::embedded(name).ok_or_else(|| anyhow::anyhow!("{name} not embedded"))?;
    match runtime.load(bytes)? {
        LinkedModule::GossipPolicy(m) => Ok(m),
        _ => anyhow::bail!("{name} is not a gossip policy"),
    }
}

/// The network: 10–100 ms one way, 100 Mbit/s down and up, publications over 10 s from 3 s
/// on (gossipsub meshes form in the first heartbeats), 10 s to drain.
fn network(params: &GossipSimParams, churn_permille: u32) -> SimConfig {
    let publish_start = 3_000_000;
    let duration = 10_000_000;
    SimConfig {
        nodes: params.nodes,
        degree: params.degree,
        seed: params.seed,
        latency_min: 10_000,
        latency_max: 100_000,
        bandwidth_bps: 100_000_000,
        upload_bps: 100_000_000,
        churn_permille,
        churn_downtime: 2_000_000,
        publish_start,
        max_time: publish_start + duration + 10_000_000,
        ..SimConfig::default()
    }
}

fn scenario(messages: usize, size: usize) -> Scenario {
    // Small messages go as deposits (normal priority), large ones as blocks (high).
    let small = size < 16 * 1024;
    Scenario {
        deposits: if small { messages } else { 0 },
        deposit_size: size,
        blocks: if small { 0 } else { messages },
        block_size: size,
        duration: 10_000_000,
    }
}

fn ms(t: u64) -> f64 {
    t as f64 / 1e3
}

fn policy_report(calm: &SimReport, churn: &SimReport) -> PolicyReport {
    PolicyReport {
        rmr: calm.payload_rmr,
        t50_ms: ms(calm.t50),
        t99_ms: ms(calm.t99),
        missed: calm.missed,
        rmr_churn10: churn.payload_rmr,
        t99_ms_churn10: ms(churn.t99),
        missed_churn10: churn.missed,
        bytes_per_node: calm.bytes_per_node as f64,
        control_msgs_per_node: calm.control_per_node,
    }
}

/// Runs the benchmark.
pub fn run(params: &GossipSimParams) -> anyhow::Result<GossipSimReport> {
    anyhow::ensure!(params.nodes >= 2, "--nodes must be at least 2");
    anyhow::ensure!(params.degree >= 1, "--degree must be at least 1");
    anyhow::ensure!(params.messages >= 1, "--messages must be at least 1");
    let started = Instant::now();
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let modules = [
        ("flood", module(&runtime, "gossip-policy-v1")?),
        ("v2", module(&runtime, "gossip-policy-v2")?),
        ("v3", module(&runtime, "gossip-policy-v3")?),
    ];
    let failures = Rc::new(Cell::new(0));
    let mut wasm_plans = BTreeMap::new();
    let mut seconds: BTreeMap<String, (f64, u32)> = BTreeMap::new();
    let mut timed = |name: &str, f: &mut dyn FnMut() -> anyhow::Result<SimReport>| {
        let t = Instant::now();
        let report = f()?;
        let entry = seconds.entry(name.to_owned()).or_default();
        entry.0 += t.elapsed().as_secs_f64();
        entry.1 += 1;
        eprintln!("{name}: {report}");
        anyhow::Ok(report)
    };
    let mut by_size = BTreeMap::new();
    for &size in &params.sizes {
        let scenario = scenario(params.messages, size);
        let mut policies = BTreeMap::new();
        for (name, module) in &modules {
            let plans = Rc::new(Cell::new(0));
            let mut reports = Vec::new();
            for churn in [0, 100] {
                eprintln!("{size} B, churn {}%: {name} …", churn / 10);
                let cfg = network(params, churn);
                reports.push(timed(name, &mut || {
                    Ok(sim::run(&cfg, &scenario, |_| {
                        WasmPolicy::new(module, &plans, &failures)
                    })?)
                })?);
            }
            *wasm_plans.entry((*name).to_owned()).or_insert(0) += plans.get();
            policies.insert((*name).to_owned(), policy_report(&reports[0], &reports[1]));
        }
        let mut reports = Vec::new();
        for churn in [0, 100] {
            eprintln!("{size} B, churn {}%: v3_routed_native …", churn / 10);
            let mut cfg = network(params, churn);
            // Each node's id is set by the simulator (its place in the network).
            cfg.engine.routing = Some(RoutingConfig::new(0));
            reports.push(timed("v3_routed_native", &mut || {
                Ok(sim::run(&cfg, &scenario, |_| PolicyV3::default())?)
            })?);
        }
        policies.insert(
            "v3_routed_native".to_owned(),
            policy_report(&reports[0], &reports[1]),
        );
        let mut reports = Vec::new();
        for churn in [0, 100] {
            eprintln!("{size} B, churn {}%: gossipsub …", churn / 10);
            let cfg = network(params, churn);
            reports.push(timed("gossipsub", &mut || {
                Ok(sim::run_nodes(&cfg, &scenario, |setup| {
                    Gossipsub::new(GossipsubConfig::default(), setup)
                })?)
            })?);
        }
        policies.insert(
            "gossipsub".to_owned(),
            policy_report(&reports[0], &reports[1]),
        );
        by_size.insert(size, SizeReport { policies });
    }
    let message_bytes = params.sizes.iter().copied().max().unwrap_or(0);
    let policies = by_size
        .get(&message_bytes)
        .map(|s| s.policies.clone())
        .unwrap_or_default();
    Ok(GossipSimReport {
        nodes: params.nodes,
        seed: params.seed,
        message_bytes,
        policies,
        by_size,
        run: RunStats {
            wasm_plans,
            wasm_plan_failures: failures.get(),
            seconds_per_run: seconds
                .into_iter()
                .map(|(name, (s, n))| (name, s / f64::from(n.max(1))))
                .collect(),
            seconds: started.elapsed().as_secs_f64(),
            messages: params.messages,
            degree: params.degree,
            debug_build: cfg!(debug_assertions),
        },
    })
}
