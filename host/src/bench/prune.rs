//! `modnode bench prune`: block import with and without the background pruner, on sled.
//!
//! The same blocks (deposits in every one: top-ups of existing validators, a new validator every
//! 16th block) are built once in memory, then imported into two sled chains: one without
//! pruning, one with the pruner running on its own `SCHED_IDLE` thread as a node runs it. Each
//! run reports import latency (p50, p99, max) and the data dir's bytes on disk (allocated
//! blocks, as `du` counts them) after a clean close and reopen.
//!
//! The p99 of a few thousand imports on a shared disk moves by tens of percent from one run to
//! the next, so the two kinds of run alternate (`reps` of each: none, pruned, none, …) and the
//! ratio is taken between the medians of their p99s.
//!
//! After the last block both runs finish the background work still queued (the pruner's last
//! batches, the value log's reclaiming) before closing, as a node that keeps running would.
//!
//! The disk bound: "state alone" is the data dir of a chain holding only the genesis state
//! (opened, closed, `du`); a block of history costs what the unpruned run's disk grew per block;
//! the bound is the state alone plus the window's blocks, and the pruned run is compared to it.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use modnode::chain::block::Block;
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::prune::History;
use modnode::chain::workload;
use modnode::chain::{Chain, DepositEngine};
use modnode::deposit_source::cached_log::CachedDepositLog;
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
    /// How far the serving floor fell behind head − window during the run, at most (blocks):
    /// what the store held beyond the window at its fullest (never less than what finality
    /// keeps, as blocks are pruned only below the finalized height).
    pub max_lag_blocks: u64,
    /// Of `disk_bytes`, the value log's segments (the rest is sled's own files).
    pub value_log_bytes: u64,
    /// Opening the chain again after the run (sled open and `Chain::open`), ms: a start after
    /// the process ended without the store's shutdown snapshot (killed).
    pub reopen_ms: f64,
    /// Opening it again after a clean stop (`modnode run` writes the store's recovery snapshot
    /// when it stops), ms: compare with `fresh_open_ms`.
    pub reopen_clean_ms: f64,
    /// Bytes of the keys and values stored (what `du` would be without the store's own
    /// overhead), by key prefix (the first byte, as a character; the anchors tree as
    /// `anchors`).
    pub live_bytes: std::collections::BTreeMap<String, u64>,
}

/// The report.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// Validators at genesis.
    pub validators: u32,
    /// Blocks imported per run.
    pub blocks: u64,
    /// Blocks the pruned runs keep.
    pub window: u64,
    /// Runs of each kind.
    pub reps: u32,
    /// Every run in the order run: without pruning, with the background pruner, alternating.
    pub runs: Vec<Run>,
    /// Median p99 of the runs without pruning (ms).
    pub p99_none_ms: f64,
    /// Median p99 of the runs with the pruner (ms).
    pub p99_pruned_ms: f64,
    /// `p99_pruned_ms / p99_none_ms`.
    pub p99_ratio: f64,
    /// Median disk with pruning / median disk without.
    pub disk_ratio: f64,
    /// Bytes on disk of a data dir holding only the genesis state.
    pub state_bytes: u64,
    /// Opening that state-only data dir again after a clean stop (ms): compare each run's
    /// `reopen_clean_ms` (and `reopen_ms`, the start after a kill).
    pub fresh_open_ms: f64,
    /// Validators at the end of the runs (a new one every 16th block).
    pub end_validators: u32,
    /// `fresh_open_ms` for a fresh node of the end state's size (genesis with
    /// `end_validators`): what a store after the runs should open in. Measured when the end
    /// state is more than 1 % larger than genesis, else `fresh_open_ms`.
    pub fresh_end_open_ms: f64,
    /// The state alone plus the window's share of the unpruned run's growth.
    pub bound_bytes: u64,
    /// Median disk with pruning / `bound_bytes` (the target is ≤ 1.5).
    pub bound_ratio: f64,
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

/// The blocks, and the validators after the last.
fn build(genesis: &Genesis, count: u64) -> anyhow::Result<(Vec<Block>, u32)> {
    let mut chain = Chain::open(Arc::new(MemoryStore::new()), genesis.clone(), engine())?;
    let mut log = CachedDepositLog::new();
    let mut blocks = Vec::new();
    for height in 1..=count {
        let state = chain.snapshot();
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
    Ok((blocks, chain.snapshot().validator_count()))
}

fn run(genesis: &Genesis, blocks: &[Block], history: Option<History>) -> anyhow::Result<Run> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("chain");
    let mut samples = Vec::with_capacity(blocks.len());
    let mut max_lag = 0u64;
    {
        let store = Arc::new(SledStore::open(&path)?);
        let mut chain = Chain::open(store.clone(), genesis.clone(), engine())?;
        if let Some(history) = history {
            chain.pruner(history).spawn()?;
        }
        for block in blocks {
            let start = Instant::now();
            chain.import(block)?;
            samples.push(ms_since(start));
            if let Some(History::Blocks(window)) = history {
                let target = chain.head().height.saturating_sub(window);
                max_lag = max_lag.max(target.saturating_sub(chain.served_from()));
            }
        }
        if let Some(history) = history {
            chain.pruner(history).run_until_done(256)?;
        }
        // The value log's collector runs beside import as the pruner does; like the pruner's
        // last batches above, what it has not reached yet is done before closing.
        store.collect_now()?;
    }
    // The background pruner lets go of the store between batches: wait for sled's lock to be
    // free before timing the open, so the time is the open's alone.
    anyhow::ensure!(
        modnode::store::wait_released(&path, std::time::Duration::from_secs(30))?,
        "the pruner still holds {} after 30 s",
        path.display()
    );
    let reopen = Instant::now();
    let store = SledStore::open(&path)?;
    let store: Arc<dyn modnode::store::KvStore> = Arc::new(store);
    let chain = Chain::open(store.clone(), genesis.clone(), engine())?;
    let reopen_ms = ms_since(reopen);
    let live_bytes = live_bytes(store.as_ref())?;
    let served_from = chain.served_from();
    drop(chain);
    drop(store);
    let reopen_clean_ms = reopen_after_clean_stop(&path, genesis)?;
    Ok(Run {
        pruning: history.map_or_else(|| "none".into(), |h| h.to_string()),
        import_p50_ms: percentile(&samples, 50),
        import_p99_ms: percentile(&samples, 99),
        import_max_ms: samples.iter().copied().fold(0.0, f64::max),
        disk_bytes: du(dir.path())?,
        value_log_bytes: du(&path.join("values"))?,
        served_from,
        max_lag_blocks: max_lag,
        reopen_ms,
        reopen_clean_ms,
        live_bytes,
    })
}

/// Closes the chain at `path` as `modnode run` does when it stops cleanly (the store's recovery
/// snapshot written: `SledStore::write_recovery_snapshot`), then times opening it again (ms).
fn reopen_after_clean_stop(path: &Path, genesis: &Genesis) -> anyhow::Result<f64> {
    SledStore::write_recovery_snapshot(path, std::time::Duration::from_secs(30))?;
    let start = Instant::now();
    let chain = Chain::open(Arc::new(SledStore::open(path)?), genesis.clone(), engine())?;
    let open_ms = ms_since(start);
    drop(chain);
    anyhow::ensure!(
        modnode::store::wait_released(path, std::time::Duration::from_secs(30))?,
        "{} still held after 30 s",
        path.display()
    );
    Ok(open_ms)
}

/// Bytes of keys and values in `store`, by key prefix.
fn live_bytes(
    store: &dyn modnode::store::KvStore,
) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
    let mut out = std::collections::BTreeMap::<String, u64>::new();
    let mut add = |name: String, key: &[u8], value: &[u8]| {
        let size = u64::try_from(key.len().saturating_add(value.len())).unwrap_or(u64::MAX);
        let entry = out.entry(name).or_default();
        *entry = entry.saturating_add(size);
    };
    store.scan_prefix(&[], &mut |key, value| {
        let name = key
            .first()
            .map_or_else(String::new, |b| char::from(*b).to_string());
        add(name, key, value);
        Ok(())
    })?;
    store
        .tree(modnode::state_cache::anchors::TREE)?
        .scan_prefix(&[], &mut |key, value| {
            add("anchors".into(), key, value);
            Ok(())
        })?;
    Ok(out)
}

/// Bytes on disk of a sled data dir holding only the genesis state of `genesis`, and how long
/// opening it again after a clean stop takes (ms): what a fresh node of the same state size
/// costs to open.
fn state_alone(genesis: &Genesis) -> anyhow::Result<(u64, f64)> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("chain");
    {
        let store = Arc::new(SledStore::open(&path)?);
        let chain = Chain::open(store, genesis.clone(), engine())?;
        drop(chain);
    }
    let bytes = du(dir.path())?;
    // Stopped cleanly, as `reopen_clean_ms` is measured.
    let open_ms = reopen_after_clean_stop(&path, genesis)?;
    Ok((bytes, open_ms))
}

/// Runs the benchmark: `blocks` blocks on `validators` genesis validators, `reps` runs without
/// pruning (unless `unpruned` is false) and `reps` with the pruner keeping `window` blocks,
/// alternating. Without unpruned runs the ratios and the bound are 0.
pub fn run_all(
    validators: u32,
    blocks: u64,
    window: u64,
    reps: u32,
    unpruned: bool,
) -> anyhow::Result<Report> {
    let genesis = Genesis::generated("bench-prune", validators, 11);
    let (built, end_validators) = build(&genesis, blocks)?;
    let (state_bytes, fresh_open_ms) = state_alone(&genesis)?;
    let fresh_end_open_ms = if u64::from(end_validators).saturating_mul(100)
        > u64::from(validators).saturating_mul(101)
    {
        state_alone(&Genesis::generated("bench-prune-end", end_validators, 11))?.1
    } else {
        fresh_open_ms
    };
    let mut runs = Vec::new();
    for _ in 0..reps.max(1) {
        if unpruned {
            runs.push(run(&genesis, &built, None)?);
        }
        runs.push(run(&genesis, &built, Some(History::Blocks(window)))?);
    }
    let of = |pruned: bool, field: fn(&Run) -> f64| {
        let mut values: Vec<f64> = runs
            .iter()
            .filter(|r| (r.pruning != "none") == pruned)
            .map(field)
            .collect();
        super::median(&mut values)
    };
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let p99_none_ms = of(false, |r| r.import_p99_ms);
    let p99_pruned_ms = of(true, |r| r.import_p99_ms);
    let disk_none = of(false, |r| r.disk_bytes as f64);
    let disk_pruned = of(true, |r| r.disk_bytes as f64);
    let per_block = (disk_none - state_bytes as f64).max(0.0) / blocks.max(1) as f64;
    let bound = if unpruned {
        state_bytes as f64 + per_block * window.min(blocks) as f64
    } else {
        0.0
    };
    Ok(Report {
        validators,
        blocks,
        window,
        reps: reps.max(1),
        p99_none_ms,
        p99_pruned_ms,
        p99_ratio: ratio(p99_pruned_ms, p99_none_ms),
        disk_ratio: ratio(disk_pruned, disk_none),
        state_bytes,
        fresh_open_ms,
        end_validators,
        fresh_end_open_ms,
        bound_bytes: bound as u64,
        bound_ratio: ratio(disk_pruned, bound),
        runs,
    })
}
