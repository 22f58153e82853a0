//! `modnode bench swap`: a deposits version switch through the on-chain schedule under
//! continuous block import, warmed (prepared — compiled and dry-run — as soon as the schedule
//! names it, as a node's upgrade agent does) against cold (compiled on first use at the height).
//!
//! A producer chain running deposits-v1 from genesis votes deposits-v2 in at height H (a chain
//! without authorities: its vote is the majority) and builds `blocks` blocks before H and
//! `blocks` from H on, each carrying 16 new, signed, proven deposits over a registry of
//! `validators`. A follower chain then imports those blocks, timing each import (module, host
//! calls, BLS verification, state root, in-memory commit; the store is in memory so disk flushes
//! do not blur the comparison). The follower finds each height's module the way a node does:
//! by the hash its schedule names, among the prepared modules. The cold follower imports the
//! same blocks with no prepared deposits-v2 and no artifact cache: its first block at H pays
//! compilation and first use.
//!
//! deposits-v2 runs ~3× faster than v1, so that switch shows no dip even if the switch itself
//! cost something. The same run therefore measures a second switch between versions of equal
//! speed, reported under `same_speed`: deposits-v2 from genesis to deposits-v2 with a custom
//! section appended ([`inspect::with_custom_section`]) — the same code under another hash, a
//! separate version to the schedule and the module store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use sha2::{Digest, Sha256};

use modnode::chain::block::{Block, DepositData};
use modnode::chain::genesis::Genesis;
use modnode::chain::workload;
use modnode::chain::{Chain, DepositEngine, DepositModules};
use modnode::hashes::ModuleHash;
use modnode::runtime::deposits::DepositCall;
use modnode::runtime::modules::InitialModules;
use modnode::runtime::slot::SlotConfig;
use modnode::runtime::{Kind, LinkedModule, Modules, Runtime, RuntimeConfig, inspect};
use modnode::state::UpgradeOp;
use modnode::store::MemoryStore;

const BLOCK: u16 = 16;
const FORK: [u8; 4] = [0; 4];
/// The custom section that re-tags deposits-v2 for the same-speed switch.
const RETAG_SECTION: &str = "modnode-bench-retag";

/// What `modnode bench swap --json` prints: the deposits-v1 → deposits-v2 switch at the top
/// level, and the same measurement between two versions of equal speed under `same_speed`.
#[derive(Debug, Serialize)]
pub struct SwapReport {
    /// Validators in the registry.
    pub validators: u32,
    /// Blocks before and after the activation height.
    pub blocks: usize,
    /// The activation height the new version was scheduled at by the producer's vote.
    pub activation_height: u64,
    /// deposits-v1 → deposits-v2 (v2 is the faster algorithm, so "after" may beat "before").
    #[serde(flatten)]
    pub upgrade: SwitchReport,
    /// deposits-v2 → deposits-v2 with a custom section appended: the same code under another
    /// hash, so any dip after the height is the switch's own cost, not a faster algorithm's gain.
    pub same_speed: SwitchReport,
}

/// One version switch at the activation height, measured on a warm and a cold follower.
#[derive(Debug, Serialize)]
pub struct SwitchReport {
    /// Median block import before the height (the old version).
    pub p50_before_ms: f64,
    /// 99th percentile before the height.
    pub p99_before_ms: f64,
    /// Median import from the height on (the new version, prepared ahead).
    pub p50_after_ms: f64,
    /// 99th percentile from the height on.
    pub p99_after_ms: f64,
    /// The import of the block at the height.
    pub first_after_ms: f64,
    /// The switch itself: resolving the scheduled hash to the prepared module at the height.
    pub activation_pause_us: f64,
    /// Preparing the new version once the schedule named it (compile, link, describe, warm-up
    /// on the follower's latest real blocks), off the import path.
    pub precompile_ms: f64,
    /// Real blocks the warm-up replayed.
    pub warmup_real_inputs: u32,
    /// The import of the block at the height on the cold follower (compile + first
    /// instantiation + transition).
    pub cold_first_after_ms: f64,
    /// 99th percentile from the height on, on the cold follower (the first block included).
    pub cold_p99_after_ms: f64,
}

/// The follower's modules as a node's upgrade agent offers them to the chain: the prepared
/// module with the scheduled hash (cold: compiled from `bytes` on first use instead, without
/// warm-up), the time the lookup of a module not asked for before took, and imported deposits
/// kept for warm-ups.
struct Follower {
    modules: Arc<Modules>,
    cold: Option<Cold>,
    loaded: Mutex<Vec<(ModuleHash, DepositEngine)>>,
    first_lookup_ns: AtomicU64,
}

/// What a cold follower compiles on first use: the components it knows, by their hash.
struct Cold {
    runtime: Runtime,
    bytes: Vec<Vec<u8>>,
}

impl Follower {
    fn new(modules: Arc<Modules>, cold: Option<Cold>) -> Arc<Self> {
        Arc::new(Self {
            modules,
            cold,
            loaded: Mutex::new(Vec::new()),
            first_lookup_ns: AtomicU64::new(0),
        })
    }
}

impl DepositModules for Follower {
    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine> {
        let start = Instant::now();
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, engine)) = loaded.iter().find(|(h, _)| h == hash) {
            return Some(engine.clone());
        }
        let engine = match (&self.cold, self.modules.prepared_deposits(hash)) {
            (None, Some(m)) => DepositEngine::Module(Box::new((*m).clone())),
            (Some(cold), _) => {
                let bytes = cold.bytes.iter().find(|b| sha(b) == *hash)?;
                match cold.runtime.load(bytes).ok()? {
                    LinkedModule::Deposits(m) => DepositEngine::Module(Box::new(m)),
                    _ => return None,
                }
            }
            (None, None) => return None,
        };
        loaded.push((*hash, engine.clone()));
        let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.first_lookup_ns.store(ns, Ordering::Relaxed);
        Some(engine)
    }

    fn imported(&self, call: DepositCall) {
        self.modules.record_deposits(call);
    }
}

fn embedded(name: &str) -> anyhow::Result<&'static [u8]> {
    modnode::artifacts::embedded(name).ok_or_else(|| anyhow::anyhow!("{name} not embedded"))
}

fn sha(bytes: &[u8]) -> ModuleHash {
    ModuleHash(Sha256::digest(bytes).into())
}

/// The node's modules with `deposits` active, on `runtime`.
fn modules(runtime: Runtime, deposits: &[u8]) -> anyhow::Result<Arc<Modules>> {
    Ok(Arc::new(Modules::new(
        runtime,
        InitialModules {
            deposits,
            checkpoint: embedded("checkpoint-v1")?,
            gossip_policy: embedded("gossip-policy-v1")?,
        },
        SlotConfig::default(),
    )?))
}

/// No signature cache: followers import blocks the producer already verified (on the same
/// runtime), which a cache would answer without BLS; the switch is timed with BLS as before.
fn no_sig_cache() -> Arc<modnode::crypto::SigCache> {
    Arc::new(modnode::crypto::SigCache::off())
}

/// A runtime with an artifact cache in `dir`.
fn cached_runtime(dir: &tempfile::TempDir) -> anyhow::Result<Runtime> {
    Ok(Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..RuntimeConfig::default()
    })?
    .with_sig_cache(no_sig_cache()))
}

fn open(genesis: &Genesis, modules: &Arc<Modules>, agent: Arc<Follower>) -> anyhow::Result<Chain> {
    let active = DepositEngine::Module(Box::new((*modules.deposits()).clone()));
    let mut chain = Chain::open(Arc::new(MemoryStore::new()), genesis.clone(), active)?;
    chain.set_deposit_modules(agent);
    Ok(chain)
}

/// Where the switch happens, in blocks.
#[derive(Clone, Copy)]
struct Heights {
    /// Blocks measured on each side of the height.
    blocks: usize,
    /// Blocks before the height (at least `blocks`; more if the vote's lead needs them).
    before: u64,
    /// The activation height.
    at: u64,
    /// Blocks produced.
    total: u64,
}

/// A switch from `from` (active from genesis) to `to` (voted in by the first block).
struct Switch<'a> {
    name: &'a str,
    from: &'a [u8],
    to: &'a [u8],
}

/// The producer's blocks: the first votes `to` in at the height; each carries 16 deposits.
fn produce(
    genesis: &Genesis,
    switch: &Switch<'_>,
    deposits: &[DepositData],
    heights: Heights,
) -> anyhow::Result<Vec<Block>> {
    let cache = tempfile::tempdir()?;
    let modules = modules(cached_runtime(&cache)?, switch.from)?;
    modules.prepare(switch.to)?;
    let mut chain = open(genesis, &modules, Follower::new(modules.clone(), None))?;
    chain.propose_upgrade(UpgradeOp {
        kind: Kind::Deposits,
        module: sha(switch.to),
        height: heights.at,
    })?;
    let mut log = workload::DevDepositLog::new();
    for d in deposits {
        log.push(*d);
    }
    eprintln!("{}: producing {} blocks …", switch.name, heights.total);
    let mut blocks = Vec::new();
    for slot in 1..=heights.total {
        let block = chain.build_block_from(slot, 0, log.eth1_data(), &log)?;
        anyhow::ensure!(
            block.body.deposits.len() == usize::from(BLOCK),
            "block {slot} carries {} deposits",
            block.body.deposits.len()
        );
        chain.import(&block)?;
        blocks.push(block);
    }
    Ok(blocks)
}

/// Import times (ms) of `blocks` on a fresh follower; before each block, `before` may prepare.
fn follow(
    genesis: &Genesis,
    blocks: &[Block],
    modules: &Arc<Modules>,
    agent: Arc<Follower>,
    mut before: impl FnMut(&Chain) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<f64>> {
    let mut chain = open(genesis, modules, agent)?;
    let mut times = Vec::with_capacity(blocks.len());
    for block in blocks {
        before(&chain)?;
        let start = Instant::now();
        chain.import(block)?;
        times.push(super::ms_since(start));
    }
    Ok(times)
}

/// Produces the blocks of `switch` and imports them on a warm and a cold follower.
fn measure(
    genesis: &Genesis,
    switch: &Switch<'_>,
    deposits: &[DepositData],
    heights: Heights,
) -> anyhow::Result<SwitchReport> {
    let mut genesis = genesis.clone();
    genesis.deposits_module = Some(sha(switch.from).0);
    let produced = produce(&genesis, switch, deposits, heights)?;
    let Heights { blocks, at, .. } = heights;

    eprintln!(
        "{}: warm follower, the new version prepared once scheduled …",
        switch.name
    );
    let cache = tempfile::tempdir()?;
    let modules_warm = modules(cached_runtime(&cache)?, switch.from)?;
    let agent = Follower::new(modules_warm.clone(), None);
    let to = sha(switch.to);
    let mut prepared = None;
    let times = follow(&genesis, &produced, &modules_warm, agent.clone(), |chain| {
        // The agent's job, off the import path: prepare what the schedule names, a few
        // blocks ahead of the height (so the warm-up has real blocks to replay).
        let scheduled = chain.schedule().module_at(Kind::Deposits, at) == Some(to);
        if prepared.is_none() && scheduled && chain.head().height + 3 >= at {
            let start = Instant::now();
            let p = modules_warm.prepare(switch.to)?;
            prepared = Some((super::ms_since(start), p.warmup.real_inputs));
        }
        Ok(())
    })?;
    let (precompile_ms, warmup_real_inputs) =
        prepared.ok_or_else(|| anyhow::anyhow!("{}: never scheduled", switch.name))?;
    let activation_pause_us = agent.first_lookup_ns.load(Ordering::Relaxed) as f64 / 1e3;
    let split = usize::try_from(heights.before)?;
    let (before_ms, after_ms) = times.split_at(split);
    let before_ms = &before_ms[before_ms.len().saturating_sub(blocks)..];

    eprintln!(
        "{}: cold follower, compiled on first use, no cache …",
        switch.name
    );
    let modules_cold = modules(
        Runtime::new(RuntimeConfig::default())?.with_sig_cache(no_sig_cache()),
        switch.from,
    )?;
    let cold_agent = Follower::new(
        modules_cold.clone(),
        Some(Cold {
            runtime: Runtime::new(RuntimeConfig::default())?.with_sig_cache(no_sig_cache()),
            bytes: vec![switch.from.to_vec(), switch.to.to_vec()],
        }),
    );
    let cold = follow(&genesis, &produced, &modules_cold, cold_agent, |_| Ok(()))?;
    let cold_after = &cold[split..];

    Ok(SwitchReport {
        p50_before_ms: super::percentile(before_ms, 50),
        p99_before_ms: super::percentile(before_ms, 99),
        p50_after_ms: super::percentile(after_ms, 50),
        p99_after_ms: super::percentile(after_ms, 99),
        first_after_ms: after_ms.first().copied().unwrap_or(0.0),
        activation_pause_us,
        precompile_ms,
        warmup_real_inputs,
        cold_first_after_ms: cold_after.first().copied().unwrap_or(0.0),
        cold_p99_after_ms: super::percentile(cold_after, 99),
    })
}

/// Runs the benchmark.
pub fn run(validators: u32, blocks: usize) -> anyhow::Result<SwapReport> {
    anyhow::ensure!(blocks >= 1, "--blocks must be at least 1");
    let mut genesis = Genesis::generated("bench-swap", validators, 42);
    genesis.max_deposits_per_block = BLOCK;
    // The vote in block 1 must count: more than the lead before the height.
    let before = u64::try_from(blocks)?.max(genesis.upgrade_lead_blocks.saturating_add(1));
    let at = before + 1;
    let total = before + u64::try_from(blocks)?;
    let heights = Heights {
        blocks,
        before,
        at,
        total,
    };
    eprintln!("signing {} deposits …", total * u64::from(BLOCK));
    let deposits = super::signed_deposits(0, FORK, usize::try_from(total)? * usize::from(BLOCK));

    let v1 = embedded("deposits-v1")?;
    let v2 = embedded("deposits-v2")?;
    let upgrade = Switch {
        name: "deposits-v1 -> deposits-v2",
        from: v1,
        to: v2,
    };
    let upgrade = measure(&genesis, &upgrade, &deposits, heights)?;
    let retagged = inspect::with_custom_section(v2, RETAG_SECTION, b"same code, another hash");
    let same_speed = Switch {
        name: "deposits-v2 -> deposits-v2 re-tagged",
        from: v2,
        to: &retagged,
    };
    let same_speed = measure(&genesis, &same_speed, &deposits, heights)?;
    Ok(SwapReport {
        validators,
        blocks,
        activation_height: at,
        upgrade,
        same_speed,
    })
}
