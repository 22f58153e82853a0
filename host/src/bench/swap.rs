//! `modnode bench swap`: a deposits version switch under continuous block processing, warmed
//! (precompiled and dry-run before the switch, activated by a pointer swap in its slot) against
//! cold (compiled and instantiated on the first block after the switch).
//!
//! Blocks of 16 new, signed deposits are processed over a registry of `validators` through the
//! deposits slot: `blocks` with deposits-v1, the switch to deposits-v2, `blocks` more. Latency is
//! the state transition of each block (module, host calls, BLS verification), not the durable
//! commit. The cold run repeats the blocks after the switch with a fresh runtime that has no
//! artifact cache and no warm-up, so its first block pays compilation and first use.
//!
//! This is the live-swap mechanism; activation at a height agreed on chain is not measured here.

use std::sync::{Arc, RwLock};
use std::time::Instant;

use serde::Serialize;

use modnode::chain::eth1::DepositProofs as _;
use modnode::chain::genesis::Genesis;
use modnode::chain::workload;
use modnode::runtime::deposits::{
    BlockContext, Deposit, Deposits, DepositsModule, Outcome, WitEth1Data,
};
use modnode::runtime::slot::{Invocation, Ready, ShadowWorker, Slot, SlotConfig};
use modnode::runtime::{CallError, LoadedModule, Mode, Runtime, RuntimeConfig};
use modnode::state::SharedRegistry;

const BLOCK: usize = 16;
const FORK: [u8; 4] = [0; 4];

/// What `modnode bench swap --json` prints.
#[derive(Debug, Serialize)]
pub struct SwapReport {
    /// Validators in the registry.
    pub validators: u32,
    /// Blocks before and after the switch.
    pub blocks: usize,
    /// Median block transition before the switch (deposits-v1).
    pub p50_before_ms: f64,
    /// 99th percentile before the switch.
    pub p99_before_ms: f64,
    /// Median after a warmed switch (deposits-v2).
    pub p50_after_ms: f64,
    /// 99th percentile after a warmed switch.
    pub p99_after_ms: f64,
    /// The first block after a warmed switch.
    pub first_after_ms: f64,
    /// How long the slot swap itself took.
    pub activation_pause_us: f64,
    /// Compiling, linking and describing deposits-v2 ahead of the switch (off the import path).
    pub precompile_ms: f64,
    /// Its warm-up dry run ahead of the switch.
    pub warmup_ms: f64,
    /// The first block after a cold switch (compile + first instantiation + transition).
    pub cold_first_after_ms: f64,
    /// 99th percentile after a cold switch (the first block included).
    pub cold_p99_after_ms: f64,
}

/// One block's transition through the slot.
#[derive(Clone)]
struct Process {
    registry: SharedRegistry,
    ctx: BlockContext,
    deposits: Vec<Deposit>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "block {} ({} deposits)",
            self.ctx.height,
            self.deposits.len()
        )
    }
}

impl Invocation<Deposits> for Process {
    type Output = Vec<Outcome>;
    fn invoke(&self, module: &DepositsModule) -> Result<Vec<Outcome>, CallError> {
        let out = module.process(
            self.registry.clone(),
            self.ctx.clone(),
            self.deposits.clone(),
        )?;
        out.map(|o| o.outcomes).map_err(|e| {
            modnode::runtime::HostFailure::new(
                "bench",
                modnode::runtime::HostFailureKind::Runtime,
                format!("the block was rejected: {e:?}"),
            )
            .into()
        })
    }
}

fn load(runtime: &Runtime, name: &str) -> anyhow::Result<DepositsModule> {
    let bytes =
        modnode::artifacts::embedded(name).ok_or_else(|| anyhow::anyhow!("{name} not embedded"))?;
    match runtime.load(bytes)? {
        LoadedModule::Deposits(m) => Ok(m),
        _ => anyhow::bail!("{name} is not a deposits module"),
    }
}

/// Runs the benchmark.
pub fn run(validators: u32, blocks: usize) -> anyhow::Result<SwapReport> {
    anyhow::ensure!(blocks >= 1, "--blocks must be at least 1");
    eprintln!("building a {validators}-validator registry …");
    let registry: SharedRegistry = Arc::new(RwLock::new(
        Genesis::generated("bench-swap", validators, 42).registry()?,
    ));
    eprintln!("signing {} deposits …", 3 * blocks * BLOCK);
    // Every deposit comes from one deposit log and is proven against its root, as in a block.
    let mut log = workload::DevDepositLog::new();
    for n in 0..3 * blocks * BLOCK {
        log.push(workload::new_validator(n as u64, 32_000_000_000, FORK));
    }
    let eth1 = log.eth1_data();
    let proven = log
        .proven_deposits(0, eth1.deposit_count, eth1.deposit_count)
        .map_err(|e| anyhow::anyhow!("proving the bench's deposits: {e}"))?;
    let calls: Vec<Process> = proven
        .chunks(BLOCK)
        .zip(0u64..)
        .map(|(chunk, b)| Process {
            registry: registry.clone(),
            ctx: BlockContext {
                height: b + 1,
                slot: b + 1,
                genesis_fork_version: FORK.to_vec(),
                eth1_data: WitEth1Data {
                    deposit_root: eth1.deposit_root.to_vec(),
                    deposit_count: eth1.deposit_count,
                    block_hash: eth1.block_hash.to_vec(),
                },
                eth1_deposit_index: b * BLOCK as u64,
            },
            deposits: chunk.iter().map(modnode::chain::to_wit).collect(),
        })
        .collect();
    let (before, rest) = calls.split_at(blocks);
    let (after, cold_after) = rest.split_at(blocks);

    let cache = tempfile::tempdir()?;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    })?;
    let v1 = Ready::warm(load(&runtime, "deposits-v1")?)?;
    let slot = Slot::new(v1, SlotConfig::default(), ShadowWorker::start(4)?);

    let time = |call: &Process, slot: &Slot<Deposits>| -> anyhow::Result<f64> {
        let start = Instant::now();
        slot.call(call.clone())?;
        Ok(super::ms_since(start))
    };
    eprintln!("{blocks} blocks through deposits-v1, switch, {blocks} through deposits-v2 …");
    let mut before_ms = Vec::with_capacity(blocks);
    for call in before {
        before_ms.push(time(call, &slot)?);
    }
    let start = Instant::now();
    let v2 = load(&runtime, "deposits-v2")?;
    let precompile_ms = super::ms_since(start);
    let start = Instant::now();
    let v2 = Ready::warm(v2)?;
    let warmup_ms = super::ms_since(start);
    let start = Instant::now();
    slot.activate(v2, Mode::Live)?;
    let activation_pause_us = start.elapsed().as_secs_f64() * 1e6;
    let mut after_ms = Vec::with_capacity(blocks);
    for call in after {
        after_ms.push(time(call, &slot)?);
    }

    eprintln!("cold switch: no artifact cache, no warm-up …");
    let cold_runtime = Runtime::new(RuntimeConfig::default())?;
    let mut cold_ms = Vec::with_capacity(blocks);
    let start = Instant::now();
    let cold_v2 = load(&cold_runtime, "deposits-v2")?;
    let cold = Slot::new(
        Ready {
            module: Arc::new(cold_v2),
            warmup: modnode::runtime::WarmupReport {
                fuel: 0,
                latency_us: 0,
                real_inputs: 0,
            },
        },
        SlotConfig::default(),
        ShadowWorker::start(4)?,
    );
    let mut first = true;
    for call in cold_after {
        let block_start = if first { start } else { Instant::now() };
        first = false;
        cold.call(call.clone())?;
        cold_ms.push(super::ms_since(block_start));
    }

    Ok(SwapReport {
        validators,
        blocks,
        p50_before_ms: super::percentile(&before_ms, 50),
        p99_before_ms: super::percentile(&before_ms, 99),
        p50_after_ms: super::percentile(&after_ms, 50),
        p99_after_ms: super::percentile(&after_ms, 99),
        first_after_ms: after_ms.first().copied().unwrap_or(0.0),
        activation_pause_us,
        precompile_ms,
        warmup_ms,
        cold_first_after_ms: cold_ms.first().copied().unwrap_or(0.0),
        cold_p99_after_ms: super::percentile(&cold_ms, 99),
    })
}
