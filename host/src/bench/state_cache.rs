//! `modnode bench state-cache`: the deposit-processing incident's scenario against the state
//! cache.
//!
//! An N-validator chain (a sled store in a temporary directory, as a node's; deposits-v2)
//! imports `blocks` consecutive blocks of
//! 16 new-validator deposits, each proven against the deposit contract. Meanwhile two reader
//! threads ask for the state at random recent heights (the last 64), 5 ms apart, and every
//! 10th block a sibling block (same parent, next slot) is executed through the cache as a side
//! branch would be. The whole run happens twice on fresh chains, tight budget first (so its
//! RSS is not inflated by the generous run's freed memory), then generous.
//!
//! `open_ms` times opening the first chain (the genesis registry built and written to sled),
//! `reopen_ms` opening it again as a restarted node does (registry read back, root checked).
//! `import_*_ms` times `Chain::import` (transition, root check, commit, publishing the head
//! state to the cache). `fell_behind`: an import took longer than a slot (imports run back to
//! back, not paced by the clock). `snapshot_us`/`snapshot_bytes`: median time and allocator
//! bytes of taking (and holding) a snapshot of the head. `peak_rss_mb` is sampled after every
//! import; `rss_growth_second_half_mb` is the RSS at the end minus at the midpoint, and
//! `allocator_growth_second_half_mb` the same for the allocator's live bytes (growth there is
//! something kept, growth only in RSS is the allocator's). An in-memory store kept every
//! imported block (about 30 KB each at 16 proven deposits): that was the tight run's RSS
//! growth; sled keeps them on disk within its fixed cache.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use rand::{Rng, SeedableRng};
use serde::Serialize;

use modnode::chain::block::Block;
use modnode::chain::genesis::Genesis;
use modnode::chain::workload::DevDepositLog;
use modnode::chain::{Chain, DepositEngine};
use modnode::runtime::{LinkedModule, Runtime, RuntimeConfig};
use modnode::state_cache::StateCacheConfig;
use modnode::store::{KvStore, MemoryStore, SledStore};

const BLOCK: usize = 16;
const SLOT_MS: f64 = 2000.0;
const MIB: f64 = 1024.0 * 1024.0;

/// One run's figures.
#[derive(Debug, Serialize)]
pub struct RunReport {
    /// The cache budget.
    pub budget_mb: f64,
    /// Median import time.
    pub import_p50_ms: f64,
    /// 99th percentile import time.
    pub import_p99_ms: f64,
    /// Replays run.
    pub regenerations: u64,
    /// Requests that joined a replay in flight.
    pub coalesced: u64,
    /// Cache hits / lookups.
    pub hit_rate: f64,
    /// Highest RSS sampled.
    pub peak_rss_mb: f64,
    /// RSS once this run's chain is open, before its first import.
    pub start_rss_mb: f64,
    /// Highest accounted bytes sampled.
    pub accounted_mb: f64,
    /// Any import slower than a slot.
    pub fell_behind: bool,
    /// State reads answered.
    pub reads: u64,
    /// State reads refused (over budget, shed).
    pub reads_refused: u64,
    /// Side-branch blocks executed through the cache.
    pub side_blocks: u64,
    /// States evicted.
    pub evictions: u64,
    /// RSS at the end minus RSS at the midpoint.
    pub rss_growth_second_half_mb: f64,
    /// Allocator live bytes at the end minus at the midpoint.
    pub allocator_growth_second_half_mb: f64,
    /// Allocator live bytes minus accounted and head bytes at the end.
    pub unexplained_mb: f64,
}

/// The report printed by `--json`.
#[derive(Debug, Serialize)]
pub struct StateCacheReport {
    /// Registry size.
    pub validators: u32,
    /// Slot length `fell_behind` is judged against.
    pub slot_ms: f64,
    /// RSS with the head state loaded and no cache.
    pub base_rss_mb: f64,
    /// Median time to snapshot the head.
    pub snapshot_us: f64,
    /// Allocator bytes one head snapshot takes.
    pub snapshot_bytes: i64,
    /// Blocks imported per run.
    pub blocks: usize,
    /// The store the chains ran on.
    pub store: StoreKind,
    /// Time to open the chain on a fresh store: the genesis registry built and written.
    pub open_ms: f64,
    /// Time to open that store again, as a restarted node: the registry read back and its root
    /// checked against the head.
    pub reopen_ms: f64,
    /// Generous budget.
    pub generous: RunReport,
    /// Tight budget (below the working set).
    pub tight: RunReport,
}

fn rss_mb() -> f64 {
    modnode::alloc_stats::rss_bytes().map_or(0.0, |b| b as f64 / MIB)
}

fn percentile(samples: &mut [f64], q: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let rank = ((samples.len() as f64) * q).ceil() as usize;
    samples.get(rank.saturating_sub(1)).copied().unwrap_or(0.0)
}

/// Runs the benchmark on a guest thread, as the node's importer does.
pub fn run(
    validators: u32,
    blocks: usize,
    generous_mb: u64,
    tight_mb: u64,
    store: StoreKind,
) -> anyhow::Result<StateCacheReport> {
    modnode::runtime::threads::run_on_guest_thread(move || {
        run_here(validators, blocks, generous_mb, tight_mb, store)
    })
}

/// Where the benchmark's chains keep their blocks and registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    /// sled in a temporary directory, as a node's.
    Sled,
    /// The in-memory store: the cache measured without sled's memory and disk.
    Memory,
}

/// A chain on a fresh store (a sled one in a temporary directory, deleted when the directory
/// handle drops, so keep it as long as the chain), and the store.
fn open(
    genesis: &Genesis,
    engine: &DepositEngine,
    max_bytes: u64,
    kind: StoreKind,
) -> anyhow::Result<(Chain, tempfile::TempDir, Arc<dyn KvStore>)> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn KvStore> = match kind {
        StoreKind::Sled => Arc::new(SledStore::open(&dir.path().join("db"))?),
        StoreKind::Memory => Arc::new(MemoryStore::new()),
    };
    let chain = open_on(store.clone(), genesis, engine, max_bytes)?;
    Ok((chain, dir, store))
}

/// The chain in `store` with a state cache of `max_bytes`.
fn open_on(
    store: Arc<dyn KvStore>,
    genesis: &Genesis,
    engine: &DepositEngine,
    max_bytes: u64,
) -> anyhow::Result<Chain> {
    let mut chain = Chain::open(store, genesis.clone(), engine.clone())?;
    // As a node does after opening its chain (`node::open_store`).
    modnode::alloc_stats::release_free_memory();
    chain.configure_state_cache(StateCacheConfig {
        max_bytes,
        ..StateCacheConfig::default()
    });
    Ok(chain)
}

/// Closes `chain` and opens its store again as a restarted node would (sled: the database
/// reopened from its directory); the chain and the milliseconds the reopening took.
fn reopen(
    chain: Chain,
    store: Arc<dyn KvStore>,
    dir: &tempfile::TempDir,
    kind: StoreKind,
    genesis: &Genesis,
    engine: &DepositEngine,
    max_bytes: u64,
) -> anyhow::Result<(Chain, f64)> {
    drop(chain);
    let start = Instant::now();
    let store: Arc<dyn KvStore> = match kind {
        StoreKind::Sled => {
            drop(store);
            Arc::new(SledStore::open(&dir.path().join("db"))?)
        }
        StoreKind::Memory => store,
    };
    let chain = open_on(store, genesis, engine, max_bytes)?;
    Ok((chain, super::ms_since(start)))
}

/// Deletes a closed chain's directory once sled has let go of it (its flusher drops the page
/// cache up to a tick after the last handle), then hands the freed memory back: the next run
/// then starts from what a fresh node would hold, not from the previous run's leftovers.
fn release(dir: tempfile::TempDir) -> anyhow::Result<()> {
    let db = dir.path().join("db");
    if !modnode::store::wait_released(&db, std::time::Duration::from_secs(10))? {
        anyhow::bail!(
            "{} is still open 10 s after its chain was dropped",
            db.display()
        );
    }
    drop(dir);
    modnode::alloc_stats::release_free_memory();
    Ok(())
}

fn allocated_mb() -> f64 {
    modnode::alloc_stats::allocated_bytes().map_or(0.0, |b| b as f64 / MIB)
}

fn run_here(
    validators: u32,
    blocks: usize,
    generous_mb: u64,
    tight_mb: u64,
    store: StoreKind,
) -> anyhow::Result<StateCacheReport> {
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let bytes = modnode::artifacts::embedded("deposits-v2")
        .ok_or_else(|| anyhow::anyhow!("deposits-v2 not embedded"))?;
    let engine = match runtime.load(bytes)? {
        LinkedModule::Deposits(m) => DepositEngine::Module(Box::new(m)),
        _ => anyhow::bail!("deposits-v2 is not a deposits module"),
    };
    let genesis = Genesis::generated("bench-state-cache", validators, 42);

    eprintln!("signing {} deposits …", blocks * BLOCK);
    let deposits = super::signed_deposits(5_000_000, [0; 4], blocks * BLOCK);

    eprintln!("opening a {validators}-validator chain …");
    let start = Instant::now();
    let (chain, dir, kept) = open(&genesis, &engine, generous_mb << 20, store)?;
    let open_ms = super::ms_since(start);
    let base_rss_mb = rss_mb();
    let mut times = Vec::new();
    let mut sizes = Vec::new();
    for _ in 0..101 {
        let before = modnode::alloc_stats::thread_net_bytes();
        let start = Instant::now();
        let snapshot = chain.snapshot();
        times.push(start.elapsed().as_secs_f64() * 1e6);
        sizes.push((modnode::alloc_stats::thread_net_bytes() - before) as f64);
        drop(snapshot);
    }
    let snapshot_us = super::median(&mut times);
    let snapshot_bytes = super::median(&mut sizes) as i64;
    eprintln!("reopening it …");
    let (chain, reopen_ms) = reopen(
        chain,
        kept,
        &dir,
        store,
        &genesis,
        &engine,
        generous_mb << 20,
    )?;

    eprintln!("building {blocks} blocks …");
    let (main, side) = build_blocks(chain, &deposits)?;
    release(dir)?;

    eprintln!("tight run ({tight_mb} MiB) …");
    let tight = one_run(&genesis, &engine, tight_mb, store, &main, &side)?;
    eprintln!("generous run ({generous_mb} MiB) …");
    let generous = one_run(&genesis, &engine, generous_mb, store, &main, &side)?;
    Ok(StateCacheReport {
        validators,
        slot_ms: SLOT_MS,
        base_rss_mb,
        snapshot_us,
        snapshot_bytes,
        blocks,
        store,
        open_ms,
        reopen_ms,
        generous,
        tight,
    })
}

/// The canonical blocks (16 deposits each) and, every 10th height, a sibling of the canonical
/// block (same parent and deposits, next slot): the side branches.
fn build_blocks(
    mut chain: Chain,
    deposits: &[modnode::chain::block::DepositData],
) -> anyhow::Result<(Vec<Block>, Vec<Block>)> {
    let mut log = DevDepositLog::new();
    let mut main = Vec::new();
    let mut side = Vec::new();
    for (i, batch) in deposits.chunks(BLOCK).enumerate() {
        for d in batch {
            log.push(*d);
        }
        let slot = chain.head().slot + 1;
        let block = chain.build_block_from(slot, 0, log.eth1_data(), &log)?;
        if i % 10 == 9 {
            side.push(chain.build_block_from(slot + 1, 0, log.eth1_data(), &log)?);
        }
        chain.import(&block)?;
        main.push(block);
    }
    Ok((main, side))
}

fn one_run(
    genesis: &Genesis,
    engine: &DepositEngine,
    budget_mb: u64,
    store: StoreKind,
    main: &[Block],
    side: &[Block],
) -> anyhow::Result<RunReport> {
    let (mut chain, dir, store) = open(genesis, engine, budget_mb << 20, store)?;
    let start_rss_mb = rss_mb();
    let states = chain.states();
    let head = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2u64)
        .map(|seed| {
            let (states, head, stop) = (states.clone(), head.clone(), stop.clone());
            let (reads, refused) = (reads.clone(), refused.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                while !stop.load(Ordering::Relaxed) {
                    let top = head.load(Ordering::Relaxed);
                    let height = top.saturating_sub(rng.random_range(0..64u64));
                    match states.query_height(height) {
                        Ok(state) => {
                            let _ = state.validator(rng.random_range(0..state.validator_count()));
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            })
        })
        .collect();
    let mut imports = Vec::with_capacity(main.len());
    let (mut peak_rss, mut peak_accounted, mut mid_rss) = (0f64, 0u64, 0f64);
    let mut mid_allocated = 0f64;
    let mut side_blocks = 0u64;
    let mut sides = side.iter();
    for (i, block) in main.iter().enumerate() {
        let start = Instant::now();
        chain.import(block)?;
        imports.push(super::ms_since(start));
        head.store(block.header.height, Ordering::Relaxed);
        if i % 10 == 9
            && let Some(sibling) = sides.next()
        {
            match states.execute(sibling) {
                Ok(_) => side_blocks += 1,
                Err(e) => eprintln!("side block at height {}: {e}", sibling.header.height),
            }
        }
        peak_rss = peak_rss.max(rss_mb());
        peak_accounted = peak_accounted.max(states.metrics().accounted_bytes);
        if i == main.len() / 2 {
            mid_rss = rss_mb();
            mid_allocated = allocated_mb();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        let _ = reader.join();
    }
    let end_rss = rss_mb();
    let end_allocated = allocated_mb();
    let m = states.metrics();
    let fell_behind = imports.iter().any(|&ms| ms > SLOT_MS);
    // The store before its directory: sled flushes when its last handle drops, and a flush into
    // a deleted directory hangs sled 0.34's flusher for good.
    drop((chain, states, store));
    release(dir)?;
    Ok(RunReport {
        budget_mb: budget_mb as f64,
        import_p50_ms: percentile(&mut imports, 0.5),
        import_p99_ms: percentile(&mut imports, 0.99),
        regenerations: m.regenerations,
        coalesced: m.coalesced,
        hit_rate: m.hits as f64 / (m.hits + m.misses).max(1) as f64,
        peak_rss_mb: peak_rss,
        start_rss_mb,
        accounted_mb: peak_accounted as f64 / MIB,
        fell_behind,
        reads: reads.load(Ordering::Relaxed),
        reads_refused: refused.load(Ordering::Relaxed),
        side_blocks,
        evictions: m.evictions,
        rss_growth_second_half_mb: end_rss - mid_rss,
        allocator_growth_second_half_mb: end_allocated - mid_allocated,
        unexplained_mb: m.unexplained_bytes as f64 / MIB,
    })
}
