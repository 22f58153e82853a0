//! `modnode bench host-call`: the runtime's fixed costs.
//!
//! - `host_call_ns`: one guest→host call passing a 48-byte list (`registry.index-of`), from the
//!   `fixture-hostcall` module looping over the call; the loop-free run is subtracted.
//! - `instantiate_us`: instantiating a deposits module from its `InstancePre` in a fresh store.
//! - `compile_ms`: compiling the deposits-v1 component.
//! - `cached_load_ms`: loading deposits-v1's compiled artifact from the on-disk cache.
//! - `plan_call_us`: one gossip-policy-v2 plan over 8 peers, end to end as the node calls it
//!   (from the gossip engine's types: arguments converted and lowered, a warm instance checked
//!   out with fresh fuel, run, the plan lifted, bounds-checked and converted back), on a
//!   guest thread as the other figures; `plan_call_stateful_us` the same for
//!   gossip-policy-v2-stateful (`@2.0.0`, its state passed in and out); `plan_call_handoff_us`
//!   the gossip-policy-v2 plan called from a thread that is not a guest thread (the gossip
//!   driver's case: the call is handed to a guest thread and back).

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::{median, ms_since};
use modnode::runtime::cache::ArtifactCache;
use modnode::runtime::deposits::bench_support::time_unproven_process;
use modnode::runtime::gossip_policy::GossipPolicyModule;
use modnode::runtime::{LinkedModule, Runtime, RuntimeConfig};
use modnode::state::{NewValidator, Registry, RegistryDelta, SharedRegistry};
use modnode_gossip::policy::{MessageKind, MessageMeta, PeerStats};

/// Results, as printed by `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct HostCallReport {
    /// Median nanoseconds per guest→host call with a small list argument.
    pub host_call_ns: f64,
    /// Median microseconds to instantiate from an `InstancePre`.
    pub instantiate_us: f64,
    /// Median milliseconds to compile deposits-v1.
    pub compile_ms: f64,
    /// Median milliseconds to load deposits-v1 from the artifact cache.
    pub cached_load_ms: f64,
    /// Median microseconds of a whole call that makes no host calls: fresh store, instantiate,
    /// lift arguments, run, drop.
    pub empty_call_us: f64,
    /// `compile_ms / cached_load_ms`.
    pub compile_to_cached_ratio: f64,
    /// Host calls per timed run.
    pub calls_per_run: u64,
    /// Median microseconds of a gossip-policy-v2 plan over 8 peers, end to end, on a guest
    /// thread.
    pub plan_call_us: f64,
    /// The same for gossip-policy-v2-stateful (`@2.0.0`), its kept state passed in and out.
    pub plan_call_stateful_us: f64,
    /// `plan_call_us` called from a thread that is not a guest thread (handoff included).
    pub plan_call_handoff_us: f64,
}

/// Parameters.
#[derive(Debug, Clone)]
pub struct HostCallParams {
    /// Host calls per timed run.
    pub calls: u64,
    /// Timed runs per measurement.
    pub runs: usize,
}

impl Default for HostCallParams {
    fn default() -> Self {
        Self {
            calls: 200_000,
            runs: 9,
        }
    }
}

/// Runs the benchmark on a guest thread (as the importer does, so calls run in place).
/// `hostcall_fixture` is the `fixture-hostcall` component.
pub fn run(params: &HostCallParams, hostcall_fixture: &[u8]) -> anyhow::Result<HostCallReport> {
    let params = params.clone();
    let fixture = hostcall_fixture.to_vec();
    let mut report =
        modnode::runtime::threads::run_on_guest_thread(move || run_here(&params, &fixture))?;
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let v2 = policy(&runtime, "gossip-policy-v2")?;
    report.plan_call_handoff_us = time_plans(&v2, Vec::new())?;
    Ok(report)
}

fn policy(runtime: &Runtime, name: &str) -> anyhow::Result<GossipPolicyModule> {
    let bytes = modnode::artifacts::embedded(name)
        .ok_or_else(|| anyhow::anyhow!("{name} is not embedded in this build"))?;
    match runtime.load(bytes)? {
        LinkedModule::GossipPolicy(m) => Ok(m),
        _ => anyhow::bail!("{name} is not a gossip-policy module"),
    }
}

/// Median microseconds of a plan over 8 peers (a relayed block, 3 peers already holding it),
/// each call on the state the previous one left.
fn time_plans(module: &GossipPolicyModule, mut state: Vec<u8>) -> anyhow::Result<f64> {
    let peers: Vec<PeerStats> = (0..8u32)
        .map(|i| PeerStats {
            peer: i,
            rtt_us: 1_000 + 3_000 * i,
            queue_depth: i % 3,
            recent_failures: u32::from(i == 5),
            has_message: i % 3 == 0,
            is_origin: i == 0,
        })
        .collect();
    let msg = MessageMeta {
        kind: MessageKind::Block,
        size: 4_096,
        local_origin: false,
        hops: 1,
        network_size: 32,
    };
    let plan = |state: &mut Vec<u8>| -> anyhow::Result<f64> {
        let start = Instant::now();
        let planned = module.engine_plan_with_state(&msg, &peers, std::mem::take(state))?;
        let elapsed = start.elapsed().as_secs_f64() * 1e6;
        *state = planned.state.unwrap_or_default();
        anyhow::ensure!(!planned.plan.targets.is_empty(), "the plan sends to nobody");
        Ok(elapsed)
    };
    for _ in 0..100 {
        plan(&mut state)?; // warm instances and caches
    }
    let mut samples = Vec::with_capacity(2_000);
    for _ in 0..2_000 {
        samples.push(plan(&mut state)?);
    }
    Ok(median(&mut samples))
}

fn run_here(params: &HostCallParams, hostcall_fixture: &[u8]) -> anyhow::Result<HostCallReport> {
    let runtime = Runtime::new(RuntimeConfig {
        fuel_per_call: Some(u64::MAX / 2),
        ..RuntimeConfig::default()
    })?;
    let deposits_v1 = modnode::artifacts::embedded("deposits-v1")
        .ok_or_else(|| anyhow::anyhow!("deposits-v1 is not embedded in this build"))?;

    // A small registry holding the pubkey the fixture looks up.
    let pubkey = [7u8; 48];
    let mut registry = Registry::new();
    registry.apply(&RegistryDelta {
        added: vec![NewValidator {
            pubkey,
            withdrawal_credentials: [0; 32],
            effective_balance: 1,
            balance: 1,
        }],
        balances: Vec::new(),
    })?;
    let registry: SharedRegistry = Arc::new(registry);

    let LinkedModule::Deposits(fixture) = runtime.load(hostcall_fixture)? else {
        anyhow::bail!("fixture-hostcall is not a deposits module");
    };
    let timed = |calls: u64| -> anyhow::Result<f64> {
        time_unproven_process(&fixture, registry.clone(), pubkey, calls)?
            .map_err(|e| anyhow::anyhow!("fixture rejected the block: {e:?}"))
    };
    timed(params.calls)?; // warm caches and the pool
    let mut base = Vec::with_capacity(params.runs);
    let mut looped = Vec::with_capacity(params.runs);
    for _ in 0..params.runs {
        base.push(timed(0)?);
        looped.push(timed(params.calls)?);
    }
    let base_ns = median(&mut base);
    let host_call_ns = ((median(&mut looped) - base_ns) / params.calls as f64).max(0.0);
    let mut empty = Vec::with_capacity(200);
    for _ in 0..200 {
        empty.push(timed(0)?);
    }
    let empty_call_us = median(&mut empty) / 1e3;

    let LinkedModule::Deposits(v1) = runtime.load(deposits_v1)? else {
        anyhow::bail!("deposits-v1 is not a deposits module");
    };
    let mut inst: Vec<f64> = v1
        .time_instantiation(2_000)?
        .into_iter()
        .map(|ns| ns as f64 / 1e3)
        .collect();
    let instantiate_us = median(&mut inst);

    let engine = runtime.engine();
    let sha = v1.meta().component.sha256.0;
    let mut compile = Vec::new();
    for _ in 0..5 {
        let cache = ArtifactCache::new(engine, None)?;
        let start = Instant::now();
        cache.load(engine, deposits_v1, &sha, "deposits-v1")?;
        compile.push(ms_since(start));
    }
    let compile_ms = median(&mut compile);

    let dir = tempfile::tempdir()?;
    ArtifactCache::new(engine, Some(dir.path().to_path_buf()))?.load(
        engine,
        deposits_v1,
        &sha,
        "deposits-v1",
    )?;
    let mut cached = Vec::new();
    for _ in 0..9 {
        let cache = ArtifactCache::new(engine, Some(dir.path().to_path_buf()))?;
        let start = Instant::now();
        cache.load(engine, deposits_v1, &sha, "deposits-v1")?;
        cached.push(ms_since(start));
        anyhow::ensure!(cache.stats().hits() == 1, "cached artifact was not used");
    }
    let cached_load_ms = median(&mut cached);

    let plan_call_us = time_plans(&policy(&runtime, "gossip-policy-v2")?, Vec::new())?;
    let stateful = policy(&runtime, "gossip-policy-v2-stateful")?;
    let initial = stateful.take_over(None, Vec::new())?;
    let plan_call_stateful_us = time_plans(&stateful, initial)?;

    Ok(HostCallReport {
        host_call_ns,
        instantiate_us,
        compile_ms,
        cached_load_ms,
        empty_call_us,
        compile_to_cached_ratio: compile_ms / cached_load_ms.max(1e-9),
        calls_per_run: params.calls,
        plan_call_us,
        plan_call_stateful_us,
        plan_call_handoff_us: 0.0,
    })
}
