//! `modnode bench prune`: block import with and without the background pruner, on sled.
//!
//! The same blocks (deposits in every one: top-ups of existing validators, a new validator every
//! 16th block) are built once in memory, then imported into two sled chains: one without
//! pruning, one with the pruner running on its own `SCHED_IDLE` thread as a node runs it. Each
//! run reports import latency (p50, p99, max) and the data dir's bytes on disk (allocated
//! blocks, as `du` counts them) after a clean close and reopen.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use modnode::chain::block::Block;
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::prune::History;
use modnode::chain::workload::{self, CachedDepositLog};
use modnode::chain::{Chain, DepositEngine};
use modnode::store::{MemoryStore, SledStore};

use super::{ms_since, percentile};

/// One run's numbers.
#[derive(Debug, serde::Serialize)]
pub struct Run {
    /// `none` or the history window kept.
    pub pruning: String,
    /// Import latency, median (ms).
    pub import_p50_ms: f64,
    /// Import latency, 99th percentile (ms).
    pub import_p99_ms: f64,
    /// Slowest import (ms).
    pub import_max_ms: f64,
    /// Bytes on disk of the data dir after the run, closed and reopened.
    pub disk_bytes: u64,
    /// Lowest height above genesis still stored.
    pub served_from: u64,
    /// Opening the chain again after the run (sled open and `Chain::open`), ms.
    pub reopen_ms: f64,
}

/// The report.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// Validators at genesis.
    pub validators: u32,
    /// Blocks imported per run.
    pub blocks: u64,
    /// Without pruning, then with the background pruner.
    pub runs: Vec<Run>,
    /// p99 with pruning / p99 without.
    pub p99_ratio: f64,
    /// Disk with pruning / disk without.
    pub disk_ratio: f64,
}

fn engine() -> DepositEngine {
    DepositEngine::Native(Verification::Batched)
}

/// Bytes the files under `dir` occupy on disk.
pub fn du(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total = total.saturating_add(if meta.is_dir() {
            du(&entry.path())?
        } else {
            meta.blocks().saturating_mul(512)
        });
    }
    Ok(total)
}

fn build(genesis: &Genesis, count: u64) -> anyhow::Result<Vec<Block>> {
    let mut chain = Chain::open(Arc::new(MemoryStore::new()), genesis.clone(), engine())?;
    let mut log = CachedDepositLog::new();
    let mut blocks = Vec::new();
    for height in 1..=count {
        let state = chain.snapshot()?;
        let validators = u64::from(state.validator_count().max(1));
        for i in 0..2u64 {
            let index = u32::try_from((height * 2 + i) % validators)?;
            let (validator, _) = state
                .validator(index)
                .context("a validator below the count")?;
            log.push(workload::unsigned(validator.pubkey, 1_000_000_000));
        }
        if height % 16 == 0 {
            log.push(workload::new_validator(
                10_000 + height,
                32_000_000_000,
                genesis.genesis_fork_version,
            ));
        }
        let slot = chain.head().slot + 1;
        let block = chain.build_block_from(slot, 0, log.eth1_data(), &log)?;
        chain.import(&block)?;
        blocks.push(block);
    }
    Ok(blocks)
}

fn run(genesis: &Genesis, blocks: &[Block], history: Option<History>) -> anyhow::Result<Run> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("chain");
    let mut samples = Vec::with_capacity(blocks.len());
    {
        let store = Arc::new(SledStore::open(&path)?);
        let mut chain = Chain::open(store, genesis.clone(), engine())?;
        if let Some(history) = history {
            chain.pruner(history).spawn()?;
        }
        for block in blocks {
            let start = Instant::now();
            chain.import(block)?;
            samples.push(ms_since(start));
        }
        if let Some(history) = history {
            chain.pruner(history).run_until_done(256)?;
        }
    }
    // The background pruner lets go of the store between batches; wait for sled's lock.
    let reopen = Instant::now();
    let deadline = Instant::now() + std::time::Duration::from_secs(30);
    let store = loop {
        match SledStore::open(&path) {
            Ok(store) => break store,
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    };
    let chain = Chain::open(Arc::new(store), genesis.clone(), engine())?;
    let reopen_ms = ms_since(reopen);
    let served_from = chain.served_from();
    drop(chain);
    Ok(Run {
        pruning: history.map_or_else(|| "none".into(), |h| h.to_string()),
        import_p50_ms: percentile(&samples, 50),
        import_p99_ms: percentile(&samples, 99),
        import_max_ms: samples.iter().copied().fold(0.0, f64::max),
        disk_bytes: du(dir.path())?,
        served_from,
        reopen_ms,
    })
}

/// Runs the benchmark: `blocks` blocks on `validators` genesis validators, the pruned run
/// keeping `window` blocks.
pub fn run_all(validators: u32, blocks: u64, window: u64) -> anyhow::Result<Report> {
    let genesis = Genesis::generated("bench-prune", validators, 11);
    let built = build(&genesis, blocks)?;
    let none = run(&genesis, &built, None)?;
    let pruned = run(&genesis, &built, Some(History::Blocks(window)))?;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    Ok(Report {
        validators,
        blocks,
        p99_ratio: ratio(pruned.import_p99_ms, none.import_p99_ms),
        disk_ratio: ratio(pruned.disk_bytes as f64, none.disk_bytes as f64),
        runs: vec![none, pruned],
    })
}
