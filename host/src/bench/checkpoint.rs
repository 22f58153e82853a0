//! `modnode bench checkpoint`: creating and restoring a checkpoint of a `validators`-validator
//! state with checkpoint-v1 (fixed leaves, sequential, uncompressed), checkpoint-v2
//! (byte-sized chunks, lz4, parallel) and checkpoint-v3 (content-addressed chunks aligned with
//! the registry's storage, byte columns and lz4, parallel), against the floor any chunker pays:
//! one single-threaded pass reading every leaf of the snapshot and hashing it, measured in the
//! same run.
//!
//! v3 also reports an incremental creation: the full creation seeds an
//! [`IncrementalCreator`], then [`INCREMENTAL_BLOCKS`] deposit-carrying blocks are applied to
//! the state (each as a dev block: three new validators and a top-up of an existing one, here
//! spread over the whole registry) and the next checkpoint is created, reusing every chunk
//! those blocks did not touch.
//!
//! `restore_ms` is the whole local restore as a node does it, through the restore pipeline
//! (`checkpoint::pipeline`): manifest validation, every chunk's hash, opening, leaf hashing
//! and range proof (on `threads` verifiers), overlapped with the durable write of every
//! verified chunk (the progress store's append-only chunk log, fdatasynced once per batch, and
//! a sled record per chunk), and the rebuild of the registry with its root checked. `restore_parts` splits it,
//! and measures verification alone and the durable write alone.
//!
//! Import latency: a dev chain (sled, deposits module) imports `import_blocks` blocks idle and
//! as many while v2 creations run back to back in the background (low-priority workers, as a
//! node runs them), alternating in rounds of 20 so both see the same machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::Serialize;
use sha2::{Digest, Sha256};

use modnode::chain::Chain;
use modnode::chain::genesis::Genesis;
use modnode::chain::workload;
use modnode::checkpoint::{
    BlockRef, ChunkOpener, CreateOptions, FetchConfig, IncrementalCreator, ManifestLimits, Outcome,
    Pipeline, PipelineConfig, RestoreStore, Restorer, StateLeaves, create, synthetic_state,
    verify_all,
};
use modnode::runtime::checkpoint::{CheckpointModule, StateReader as _};
use modnode::runtime::{LinkedModule, Runtime, RuntimeConfig};
use modnode::state::State;

/// One version's numbers.
#[derive(Debug, Serialize)]
pub struct VersionReport {
    /// Planning and building every chunk, manifest included.
    pub create_ms: f64,
    /// CPU time the process spent in that creation, all threads (nothing else runs in the
    /// process meanwhile): the work itself, which other load on the machine does not inflate
    /// the way it inflates `create_ms`.
    pub create_cpu_ms: f64,
    /// Chunks.
    pub chunks: usize,
    /// Total chunk bytes.
    pub bytes: u64,
    /// Verification, durable write and rebuild of the whole state.
    pub restore_ms: f64,
    /// CPU time of the restore (every thread): above `threads` × `restore_ms` it never is,
    /// and at it the restore is bound by the CPU, not by waiting.
    pub restore_cpu_ms: f64,
    /// Where `restore_ms` goes, and its parts measured alone.
    pub restore_parts: RestoreParts,
}

/// The parts of a restore: the first two add up to `restore_ms`; the others are measured
/// alone, after it, to tell verification from the durable write.
#[derive(Debug, Serialize)]
pub struct RestoreParts {
    /// Every chunk verified on `threads` workers and stored durably, overlapped (the restore
    /// pipeline with the progress store).
    pub verify_and_write_ms: f64,
    /// The registry rebuilt from the verified leaves and its root checked (`Restorer::finish`).
    pub finish_ms: f64,
    /// Every chunk verified on `threads` workers, nothing stored.
    pub verify_only_ms: f64,
    /// CPU time of that verification.
    pub verify_only_cpu_ms: f64,
    /// Every chunk stored durably in a fresh progress store, nothing verified.
    pub write_only_ms: f64,
    /// Bytes the progress store holds on disk once every chunk is stored.
    pub store_disk_bytes: u64,
}

/// checkpoint-v3's numbers: a full creation as for the other versions, and an incremental one.
#[derive(Debug, Serialize)]
pub struct IncrementalReport {
    /// The full creation and the restore, as for v1 and v2.
    #[serde(flatten)]
    pub full: VersionReport,
    /// Creating the checkpoint [`INCREMENTAL_BLOCKS`] blocks after the full one, reusing the
    /// unchanged chunks, manifest included.
    pub incremental_create_ms: f64,
    /// CPU time of that creation.
    pub incremental_create_cpu_ms: f64,
    /// Chunks that creation built (the others were reused by hash).
    pub incremental_chunks: usize,
    /// Bytes of the chunks it built: what a peer holding the previous checkpoint fetches.
    pub incremental_bytes: u64,
    /// Creating the checkpoint of the same state once more, every chunk reused: the fixed
    /// part of an incremental creation (planning, the lookups, the chunk roots read from the
    /// tree, the manifest), which no chunk left unchanged adds work to.
    pub incremental_unchanged_ms: f64,
    /// Validators the deposit blocks topped up (one each, uniformly spread) and the distinct
    /// 1,024-leaf storage chunks they fall in: a chunk holds records and balances together
    /// (the leaf hash binds them), so each top-up re-makes its whole chunk.
    pub incremental_top_up_chunks: usize,
}

/// Deposit-carrying blocks between the full and the incremental v3 checkpoint.
pub const INCREMENTAL_BLOCKS: u64 = 100;

/// What `modnode bench checkpoint --json` prints.
#[derive(Debug, Serialize)]
pub struct CheckpointReport {
    /// Validators (state leaves).
    pub validators: u32,
    /// Bytes of the state leaves.
    pub state_bytes: u64,
    /// One single-threaded pass reading and hashing every leaf.
    pub read_hash_floor_ms: f64,
    /// CPU time of that pass (see [`VersionReport::create_cpu_ms`]).
    pub read_hash_floor_cpu_ms: f64,
    /// Worker threads for v2 creation and for restore verification.
    pub threads: usize,
    /// Whether restore verification hashed sixteen messages at a time (AVX-512 lanes,
    /// `crypto::sha256_many`); without, it hashes one at a time with `sha2` as the floor does.
    pub sha256_lanes: bool,
    /// checkpoint-v1.
    pub v1: VersionReport,
    /// checkpoint-v2.
    pub v2: VersionReport,
    /// checkpoint-v3.
    pub v3: IncrementalReport,
    /// 99th percentile of block import while v2 creations run in the background.
    pub import_p99_ms_during_create: f64,
    /// 99th percentile of block import with nothing else running.
    pub import_p99_ms_idle: f64,
}

fn load(runtime: &Runtime, name: &str) -> anyhow::Result<CheckpointModule> {
    let bytes =
        modnode::artifacts::embedded(name).ok_or_else(|| anyhow::anyhow!("{name} not embedded"))?;
    match runtime.load(bytes)? {
        LinkedModule::Checkpoint(m) => Ok(m),
        _ => anyhow::bail!("{name} is not a checkpoint module"),
    }
}

/// User plus system CPU time of this process so far (every thread, exited ones included).
fn process_cpu_ms() -> f64 {
    // SAFETY: `rusage` is plain integers, valid when zeroed.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage for the call's duration.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

/// The floor: every leaf read from the snapshot and hashed, on one thread.
fn read_hash_floor(state: &State) -> (f64, [u8; 32]) {
    const STEP: u64 = 1 << 16;
    let leaf = state.leaf_size() as usize;
    let start = Instant::now();
    let mut fold = Sha256::new();
    let mut at = 0;
    while at < state.leaf_count() {
        let end = (at + STEP).min(state.leaf_count());
        let bytes = state.read_leaf_bytes(at, end);
        for l in bytes.chunks_exact(leaf) {
            fold.update(Sha256::digest(l));
        }
        at = end;
    }
    (super::ms_since(start), fold.finalize().into())
}

fn measure_version(
    module: &CheckpointModule,
    state: &Arc<State>,
    threads: usize,
    target_chunk_bytes: u64,
) -> anyhow::Result<VersionReport> {
    let options = CreateOptions {
        target_chunk_bytes,
        threads,
        background: false,
    };
    let cpu_start = process_cpu_ms();
    let start = Instant::now();
    let checkpoint = create(module, state.clone(), AT, options)?;
    let create_ms = super::ms_since(start);
    let create_cpu_ms = process_cpu_ms() - cpu_start;

    let dir = tempfile::tempdir()?;
    let store = RestoreStore::open(dir.path())?;
    let chunks: Vec<(usize, Vec<u8>)> = checkpoint.chunks.iter().cloned().enumerate().collect();
    // As a node receives them: owned buffers, one per chunk (copied before the clock starts).
    let arriving = chunks.clone();
    let start = Instant::now();
    let cpu_start = process_cpu_ms();
    let mut restorer = Restorer::new(checkpoint.manifest.clone(), &ManifestLimits::default())?;
    store.begin(restorer.manifest())?;
    restore_through_pipeline(&mut restorer, module, arriving, threads, store.clone())?;
    let verify_and_write_ms = super::ms_since(start);
    let finishing = Instant::now();
    let restored = restorer.finish()?;
    let finish_ms = super::ms_since(finishing);
    let restore_ms = super::ms_since(start);
    let restore_cpu_ms = process_cpu_ms() - cpu_start;
    anyhow::ensure!(
        *restored.state_root.as_bytes() == state.state_root(),
        "the restored state root differs from the snapshot's"
    );
    drop(restored);
    let store_disk_bytes = disk_bytes(dir.path())?;
    drop(store);

    let mut restorer = Restorer::new(checkpoint.manifest.clone(), &ManifestLimits::default())?;
    let start = Instant::now();
    let cpu_start = process_cpu_ms();
    verify_all(&mut restorer, module, &chunks, threads, None)?;
    let verify_only_ms = super::ms_since(start);
    let verify_only_cpu_ms = process_cpu_ms() - cpu_start;
    drop(restorer);

    let dir = tempfile::tempdir()?;
    let store = RestoreStore::open(dir.path())?;
    store.begin(&checkpoint.manifest)?;
    let start = Instant::now();
    for ((index, bytes), entry) in chunks.iter().zip(&checkpoint.manifest.chunks) {
        store.put_chunk(*index, bytes, &entry.hash)?;
    }
    store.flush()?;
    let write_only_ms = super::ms_since(start);

    Ok(VersionReport {
        create_ms,
        create_cpu_ms,
        chunks: checkpoint.chunks.len(),
        bytes: checkpoint.manifest.total_bytes(),
        restore_ms,
        restore_cpu_ms,
        restore_parts: RestoreParts {
            verify_and_write_ms,
            finish_ms,
            verify_only_ms,
            verify_only_cpu_ms,
            write_only_ms,
            store_disk_bytes,
        },
    })
}

/// Restores `chunks` (in memory, as if they arrived from peers) the way a node does: through
/// a [`Pipeline`] of `threads` verifiers and one batching writer into `store`, as many chunks
/// in it at once as a node's fetcher allows, each inserted once durable.
fn restore_through_pipeline(
    restorer: &mut Restorer,
    module: &CheckpointModule,
    chunks: Vec<(usize, Vec<u8>)>,
    threads: usize,
    store: RestoreStore,
) -> anyhow::Result<()> {
    let fetch = FetchConfig::for_manifest(restorer.manifest());
    let config = PipelineConfig::new(threads, fetch.max_unverified);
    let opener: Arc<dyn ChunkOpener> = Arc::new(module.clone());
    let mut pipeline = Pipeline::start(restorer.verifier(), opener, store, config)?;
    let mut next = chunks.into_iter();
    loop {
        while pipeline.has_room()
            && let Some((index, bytes)) = next.next()
        {
            pipeline.submit(index, bytes, ())?;
        }
        match pipeline.next_blocking() {
            None => break,
            Some(Outcome::Stored { chunk, .. }) => {
                restorer.insert(chunk)?;
            }
            Some(Outcome::Refused { error, .. }) => return Err(error.into()),
            Some(Outcome::NotStored { reason, .. }) => anyhow::bail!("{reason}"),
        }
    }
    Ok(())
}

/// The validator [`after_deposit_blocks`] tops up at `height` in a registry of `len`.
fn topped_up(height: u64, len: u64) -> u64 {
    (height.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) % len.max(1)
}

/// Distinct 1,024-leaf storage chunks the top-ups of `blocks` blocks fall in, starting from a
/// registry of `len` validators (three are added per block).
fn top_up_chunks(len: u32, blocks: u64) -> usize {
    let chunk = modnode::state::chunked::CHUNK_LEN as u64;
    (1..=blocks)
        .map(|h| topped_up(h, u64::from(len) + 3 * (h - 1)) / chunk)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// `state` after `blocks` dev-like deposit blocks: each appends three validators and tops up
/// one existing validator, spread over the registry (a multiplicative hash of the height).
fn after_deposit_blocks(state: &State, blocks: u64) -> anyhow::Result<State> {
    use modnode::state::{NewValidator, RegistryDelta};
    let mut registry = state.registry().clone();
    for height in 1..=blocks {
        let len = u64::from(registry.len());
        let index = topped_up(height, len);
        let balance = registry
            .balances()
            .get(index as usize)
            .copied()
            .unwrap_or(0)
            + 1_000_000_000;
        let added = (0..3u64)
            .map(|i| {
                let key: [u8; 32] = Sha256::new()
                    .chain_update(b"bench-deposit")
                    .chain_update(height.to_le_bytes())
                    .chain_update(i.to_le_bytes())
                    .finalize()
                    .into();
                let mut pubkey = [0u8; 48];
                pubkey[..32].copy_from_slice(&key);
                NewValidator {
                    pubkey,
                    withdrawal_credentials: workload::withdrawal_credentials(height * 16 + i),
                    effective_balance: 32_000_000_000,
                    balance: 32_000_000_000 + i,
                }
            })
            .collect();
        registry.apply(&RegistryDelta {
            added,
            balances: vec![(index as u32, balance)],
        })?;
    }
    Ok(State::new(
        modnode::hashes::BlockHash::new([2; 32]),
        state.height() + blocks,
        registry,
        state.eth1().clone(),
        state.schedule().clone(),
    ))
}

/// v3's incremental creation [`INCREMENTAL_BLOCKS`] blocks after a full one.
fn measure_incremental(
    module: &CheckpointModule,
    state: &Arc<State>,
    threads: usize,
    target_chunk_bytes: u64,
    full: VersionReport,
) -> anyhow::Result<IncrementalReport> {
    let options = CreateOptions {
        target_chunk_bytes,
        threads,
        background: false,
    };
    let mut creator = IncrementalCreator::new();
    creator.create(module, state.clone(), AT, options)?;
    let later = Arc::new(after_deposit_blocks(state, INCREMENTAL_BLOCKS)?);
    let at = BlockRef {
        height: AT.height + INCREMENTAL_BLOCKS,
        hash: modnode::hashes::BlockHash([2; 32]),
    };
    let cpu_start = process_cpu_ms();
    let start = Instant::now();
    let made = creator.create(module, later.clone(), at, options)?;
    let incremental_create_ms = super::ms_since(start);
    let incremental_create_cpu_ms = process_cpu_ms() - cpu_start;
    let start = Instant::now();
    let again = creator.create(module, later.clone(), at, options)?;
    let incremental_unchanged_ms = super::ms_since(start);
    anyhow::ensure!(
        again.built.is_empty() && again.manifest == made.manifest,
        "a creation of the same state again built {} chunks",
        again.built.len()
    );
    anyhow::ensure!(
        *made.manifest.state_root.as_bytes() == later.state_root(),
        "the incremental checkpoint's state root differs from the state's"
    );
    Ok(IncrementalReport {
        full,
        incremental_create_ms,
        incremental_create_cpu_ms,
        incremental_chunks: made.built.len(),
        incremental_bytes: made.built.iter().map(|(_, b)| b.len() as u64).sum(),
        incremental_unchanged_ms,
        incremental_top_up_chunks: top_up_chunks(state.registry().len(), INCREMENTAL_BLOCKS),
    })
}

/// Bytes of the files under `dir`.
fn disk_bytes(dir: &std::path::Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            disk_bytes(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// The block every benchmark checkpoint is said to be taken at.
const AT: BlockRef = BlockRef {
    height: 1,
    hash: modnode::hashes::BlockHash([1; 32]),
};

/// Blocks per round when idle and during-creation imports alternate.
const IMPORT_ROUND: usize = 20;

/// A dev chain on sled and a generator of its next blocks.
struct ImportWorkload {
    chain: Chain,
    log: workload::DevDepositLog,
    existing: Vec<[u8; 48]>,
    _dir: tempfile::TempDir,
}

impl ImportWorkload {
    fn new() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let chain = modnode::node::open_chain(dir.path(), Genesis::dev())?;
        let existing = chain
            .genesis()
            .validators
            .iter()
            .map(|v| v.pubkey)
            .collect();
        Ok(Self {
            chain,
            log: workload::DevDepositLog::new(),
            existing,
            _dir: dir,
        })
    }

    /// Builds the next block (not timed) and imports it; returns the import's milliseconds.
    fn next(&mut self) -> anyhow::Result<f64> {
        let head = self.chain.head();
        let fork = self.chain.genesis().genesis_fork_version;
        for d in workload::dev_block(head.height + 1, &self.existing, fork) {
            self.log.push(d);
        }
        let block =
            self.chain
                .build_block_from(head.slot + 1, 0, self.log.eth1_data(), &self.log)?;
        let start = Instant::now();
        self.chain.import(&block)?;
        Ok(super::ms_since(start))
    }
}

/// Runs the benchmark.
pub fn run(
    validators: u32,
    target_chunk_bytes: u64,
    import_blocks: usize,
) -> anyhow::Result<CheckpointReport> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    eprintln!("building a {validators}-validator state …");
    let state = Arc::new(synthetic_state(validators, 42)?);
    let state_bytes = state.leaf_count() * u64::from(state.leaf_size());
    let runtime = Runtime::new(RuntimeConfig::default())?;
    let v1 = load(&runtime, "checkpoint-v1")?;
    let v2 = load(&runtime, "checkpoint-v2")?;
    let v3 = load(&runtime, "checkpoint-v3")?;

    eprintln!("read-and-hash floor …");
    let cpu_start = process_cpu_ms();
    let (read_hash_floor_ms, _) = read_hash_floor(&state);
    let read_hash_floor_cpu_ms = process_cpu_ms() - cpu_start;
    eprintln!("checkpoint-v1: create and restore …");
    let v1_report = measure_version(&v1, &state, threads, target_chunk_bytes)?;
    eprintln!("checkpoint-v2: create and restore on {threads} threads …");
    let v2_report = measure_version(&v2, &state, threads, target_chunk_bytes)?;
    eprintln!("checkpoint-v3: create and restore on {threads} threads, then incrementally …");
    let v3_report = measure_version(&v3, &state, threads, target_chunk_bytes)?;
    let v3_report = measure_incremental(&v3, &state, threads, target_chunk_bytes, v3_report)?;

    eprintln!("import of {import_blocks} dev blocks idle, then during v2 creations …");
    let mut chain = ImportWorkload::new()?;
    // One block first: the deposits module's first call and sled's first write are not import.
    chain.next()?;
    // Idle and during-creation imports alternate in rounds, so that what else the machine is
    // doing at the time hits both alike (one idle phase then one busy phase compared two
    // moments: idle p99 alone ranged 6-10 ms between back-to-back runs). Each busy round
    // starts a creator and joins it, creation in flight included, before the next idle round.
    let mut idle = Vec::with_capacity(import_blocks);
    let mut during = Vec::with_capacity(import_blocks);
    let mut created = 0usize;
    while idle.len() < import_blocks || during.len() < import_blocks {
        for _ in 0..IMPORT_ROUND.min(import_blocks - idle.len()) {
            idle.push(chain.next()?);
        }
        let busy = IMPORT_ROUND.min(import_blocks - during.len());
        if busy == 0 {
            continue;
        }
        let stop = AtomicBool::new(false);
        std::thread::scope(|scope| -> anyhow::Result<()> {
            let creator = scope.spawn(|| -> anyhow::Result<usize> {
                let mut created = 0;
                while !stop.load(Ordering::Relaxed) {
                    let options = CreateOptions {
                        target_chunk_bytes,
                        threads,
                        background: true,
                    };
                    create(&v2, state.clone(), AT, options)?;
                    created += 1;
                }
                Ok(created)
            });
            let imported = (|| -> anyhow::Result<()> {
                for _ in 0..busy {
                    during.push(chain.next()?);
                }
                Ok(())
            })();
            stop.store(true, Ordering::Relaxed);
            created += creator
                .join()
                .map_err(|_| anyhow::anyhow!("the creation thread panicked"))??;
            imported
        })?;
    }
    eprintln!("{created} v2 checkpoints created while importing");

    Ok(CheckpointReport {
        validators,
        state_bytes,
        read_hash_floor_ms,
        read_hash_floor_cpu_ms,
        threads,
        sha256_lanes: modnode::crypto::sha256_many::runs_sixteen_lanes(),
        v1: v1_report,
        v2: v2_report,
        v3: v3_report,
        import_p99_ms_during_create: super::percentile(&during, 99),
        import_p99_ms_idle: super::percentile(&idle, 99),
    })
}
