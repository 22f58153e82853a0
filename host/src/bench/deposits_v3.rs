//! `modnode bench deposits-v3`: deposits@3 (Electra's pending-deposit queue) against a large
//! registry — the epoch transition with a long and a short queue, block import before and
//! after the switch from deposits-v2, the switch itself and a state snapshot holding the long
//! queue.
//!
//! - **Epochs** (`queue_1m`, `queue_1k`): `process-epoch` of deposits-v3 as the transition
//!   runs it — the module call over the registry and the queue, its registry and queue deltas
//!   applied, both roots — timed on the guest thread, epoch after epoch, with a queue of
//!   `queue_large` and of `queue_small` entries. Every epoch applies the most Electra allows,
//!   16 new validators of 8 ETH each (within the churn limit at any registry size), whose
//!   signatures are real; after each epoch 16 entries are pushed at the back (untimed) so the
//!   queue keeps its length. The entries never reached are fillers (unique pubkeys, no valid
//!   signature). The time inside BLS verification (`crypto::verify_time_on_this_thread`, the
//!   same thread) is taken out of each epoch's time and reported apart as the median
//!   `epoch_bls_ms`; both queues apply the same deposits to clones of one registry, on a
//!   runtime without the signature cache (the second pairs them for real like the first), so
//!   the two `epoch_p99_ms` differ only by the queue's length.
//! - **Blocks** (`block_p99_ms`, `epoch_block_p99_ms`): a producer chain on an in-memory store
//!   running deposits-v2 from genesis votes deposits-v3 in at height H and builds `blocks`
//!   blocks before H and `blocks` from H on, each carrying 16 new, signed, proven deposits
//!   (epochs of 8 slots, final after 2 blocks). A follower imports them, each timed: `v2` is the
//!   p99 of the blocks before H, `v3` of every block from H on, `epoch_block_p99_ms` of those
//!   that run an epoch transition. The follower runs its modules on a runtime of its own (so
//!   its signature cache holds nothing the producer verified) with the chain's signature
//!   pre-verifier (`chain::preverify`): after each import it verifies, on an idle-priority
//!   thread, the signatures of the queue entries the next epochs may apply into that cache.
//!   Between two imports (untimed) the bench waits until the pre-verifier is idle — a real
//!   node has a slot's time between blocks — so an epoch block answers its signature batch
//!   from the cache instead of pairing on the import path. The wait and the cache's answers
//!   are printed.
//! - **The switch** (`activation_pause_us`): the import of the block at H (the first under
//!   deposits-v3, module resolved by hash among the prepared ones) minus the median import of
//!   the deposits-v3 blocks that run no epoch transition (they do the same work: queue 16
//!   deposits), minus the migration's own time; 0 if the difference is below the noise.
//!   deposits-v3 exports no migration, so `migration_ms` is 0 (the switch starts from an empty
//!   queue and runs nothing else at H).
//! - **Snapshot** (`snapshot_us`, `snapshot_bytes`): the state after the long-queue epochs
//!   taken as the chain takes its head's snapshot (registry, eth1 state, schedule and queue
//!   cloned, root computed); the median time, and the heap bytes the snapshot adds while alive
//!   (counting allocator, this thread).
//!
//! The JSON keys name the default sizes (`queue_1m`, `queue_1k`) whatever `--queue-large` and
//! `--queue-small` say.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use modnode::chain::block::{Block, DepositData};
use modnode::chain::genesis::Genesis;
use modnode::chain::preverify::Preverifier;
use modnode::chain::workload;
use modnode::chain::{Chain, DepositEngine, DepositModules};
use modnode::crypto;
use modnode::deposit::{ChainContext, DepositOutcome};
use modnode::hashes::ModuleHash;
use modnode::runtime::deposits::DepositsModule;
use modnode::runtime::{Kind, LinkedModule, Runtime, RuntimeConfig};
use modnode::state::{PendingDelta, PendingDeposit, PendingQueue, Registry, State, UpgradeOp};
use modnode::store::MemoryStore;

const ETH: u64 = 1_000_000_000;
const FORK: [u8; 4] = [0; 4];
/// Deposits per block of the block stream.
const BLOCK: u16 = 16;
/// Electra's `MAX_PENDING_DEPOSITS_PER_EPOCH`: what one epoch applies at most.
const PER_EPOCH: usize = 16;
/// Slots per epoch of the block stream's chain.
const SLOTS_PER_EPOCH: u64 = 8;
/// Blocks after which a queued deposit is final on the block stream's chain.
const FINALITY: u64 = 2;
/// Snapshots timed.
const SNAPSHOTS: usize = 101;
/// Seeds of the epochs' deposits, apart from the block stream's.
const EPOCH_SEEDS: u64 = 1 << 40;

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// Validators at genesis.
    pub validators: u32,
    /// Entries of the long queue (1M by default).
    pub queue_large: u64,
    /// Entries of the short queue (1k by default).
    pub queue_small: u64,
    /// Epochs timed per queue.
    pub epochs: usize,
    /// Blocks timed before and after the switch each.
    pub blocks: usize,
}

/// One queue's epochs.
#[derive(Debug, Serialize)]
pub struct LongQueue {
    /// p99 of an epoch transition, BLS verification excluded.
    pub epoch_p99_ms: f64,
    /// Median time an epoch spends in BLS verification (16 signatures).
    pub epoch_bls_ms: f64,
}

/// The short queue's epochs.
#[derive(Debug, Serialize)]
pub struct ShortQueue {
    /// p99 of an epoch transition, BLS verification excluded.
    pub epoch_p99_ms: f64,
}

/// Block import p99 on each side of the switch.
#[derive(Debug, Serialize)]
pub struct BlockP99 {
    /// Under deposits-v2 (before H).
    pub v2: f64,
    /// Under deposits-v3 (from H on, epoch transitions included).
    pub v3: f64,
}

/// What `modnode bench deposits-v3 --json` prints.
#[derive(Debug, Serialize)]
pub struct DepositsV3Report {
    /// Validators at genesis.
    pub validators: u32,
    /// Epochs with the long queue.
    pub queue_1m: LongQueue,
    /// Epochs with the short queue.
    pub queue_1k: ShortQueue,
    /// Block import p99, ms.
    pub block_p99_ms: BlockP99,
    /// Import p99 of the deposits-v3 blocks that run an epoch transition, ms.
    pub epoch_block_p99_ms: f64,
    /// The import of the block at H beyond a deposits-v3 block's and beyond the migration, µs.
    pub activation_pause_us: f64,
    /// The migration at H: deposits-v3 exports none, so 0.
    pub migration_ms: f64,
    /// Median time to take a state snapshot holding the long queue, µs.
    pub snapshot_us: f64,
    /// Heap bytes such a snapshot adds.
    pub snapshot_bytes: u64,
}

/// Everything measured, with the samples the report summarises.
struct Measured {
    report: DepositsV3Report,
    long_epochs_ms: Vec<f64>,
    v3_blocks_ms: Vec<f64>,
    v3_epoch_blocks_ms: Vec<f64>,
    /// The deposits-v3 blocks after H that run no epoch transition.
    v3_plain_blocks_ms: Vec<f64>,
    /// The slowest epoch-transition block: its height and import time (ms).
    slowest_epoch_block: Option<(u64, f64)>,
}

fn load(runtime: &Runtime, name: &str) -> anyhow::Result<DepositsModule> {
    let bytes =
        modnode::artifacts::embedded(name).ok_or_else(|| anyhow::anyhow!("{name} not embedded"))?;
    match runtime.load(bytes)? {
        LinkedModule::Deposits(m) => Ok(m),
        _ => anyhow::bail!("{name} is not a deposits module"),
    }
}

/// The prepared deposits modules, by hash, as a node's upgrade agent offers them.
struct ReadyEngines(HashMap<ModuleHash, DepositEngine>);

impl DepositModules for ReadyEngines {
    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine> {
        self.0.get(hash).cloned()
    }
}

/// `count` signed new-validator deposits of `amount` (keys seeded from `first_seed` on),
/// spread over the cores.
fn signed(first_seed: u64, count: usize, amount: u64) -> Vec<DepositData> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let chunk = count.div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..count)
            .step_by(chunk)
            .map(|start| {
                scope.spawn(move || {
                    (start..(start + chunk).min(count))
                        .map(|i| workload::new_validator(first_seed + i as u64, amount, FORK))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// A queue entry for `d`, final from the start.
fn entry(d: &DepositData) -> PendingDeposit {
    PendingDeposit {
        pubkey: d.pubkey,
        withdrawal_credentials: d.withdrawal_credentials,
        amount: d.amount,
        signature: d.signature,
        slot: 0,
        height: 0,
    }
}

/// The `i`-th filler entry: a pubkey no validator has, never reached by the epochs timed.
fn filler(i: u64) -> PendingDeposit {
    let mut pubkey = [0xf1; 48];
    pubkey[..8].copy_from_slice(&i.to_le_bytes());
    PendingDeposit {
        pubkey,
        withdrawal_credentials: [0; 32],
        amount: 8 * ETH,
        signature: [0; 96],
        slot: 0,
        height: 0,
    }
}

/// A queue of `len` entries: `front` first, then fillers.
fn queue_of(front: &[DepositData], len: u64) -> anyhow::Result<PendingQueue> {
    let mut pushed: Vec<PendingDeposit> = front.iter().take(len as usize).map(entry).collect();
    pushed.extend((pushed.len() as u64..len).map(filler));
    let mut queue = PendingQueue::new();
    queue.apply(&PendingDelta {
        pushed,
        dropped: 0,
        balance_to_consume: None,
    })?;
    Ok(queue)
}

/// One queue's epochs: per epoch, the time without BLS and the time in BLS (ms).
struct Epochs {
    without_bls: Vec<f64>,
    bls: Vec<f64>,
    registry: Registry,
    queue: PendingQueue,
}

/// Runs `epochs` epoch transitions of `module` over `registry` and `queue`; after each, the
/// next 16 of `refill` are pushed at the back (untimed).
fn epochs(
    module: &DepositsModule,
    genesis: &Genesis,
    mut registry: Registry,
    mut queue: PendingQueue,
    epochs: usize,
    mut refill: impl FnMut(usize) -> Vec<PendingDeposit>,
) -> anyhow::Result<Epochs> {
    let mut without_bls = Vec::with_capacity(epochs);
    let mut bls = Vec::with_capacity(epochs);
    for e in 0..epochs {
        let ctx = ChainContext {
            height: 1_000 + e as u64,
            finality_depth: genesis.finality_depth,
            genesis_fork_version: FORK,
        };
        let verify_before = crypto::verify_time_on_this_thread();
        let start = Instant::now();
        let shared = Arc::new(registry.clone());
        let out = module
            .apply_epoch(shared, queue.clone(), &ctx)?
            .map_err(|err| anyhow::anyhow!("epoch {e} rejected: {err:?}"))?;
        registry.apply(&out.delta)?;
        queue.apply(&out.pending)?;
        std::hint::black_box((registry.root(), queue.root()));
        let took = super::ms_since(start);
        let in_bls = crypto::verify_time_on_this_thread()
            .saturating_sub(verify_before)
            .as_secs_f64()
            * 1e3;
        let created = out
            .result
            .outcomes
            .iter()
            .filter(|o| matches!(o, DepositOutcome::Created(_)))
            .count();
        anyhow::ensure!(
            created == PER_EPOCH,
            "epoch {e} created {created} validators, not {PER_EPOCH}"
        );
        without_bls.push((took - in_bls).max(0.0));
        bls.push(in_bls);
        queue.apply(&PendingDelta {
            pushed: refill(e),
            dropped: 0,
            balance_to_consume: None,
        })?;
    }
    Ok(Epochs {
        without_bls,
        bls,
        registry,
        queue,
    })
}

/// Import times (ms) of the block stream on a follower, with the heights that ran an epoch
/// transition, and the follower's head state.
struct Stream {
    times: Vec<f64>,
    epoch: Vec<bool>,
    head: State,
}

/// The deposits modules of one chain: v2, then v3.
type Pair<'a> = (&'a DepositsModule, &'a DepositsModule);

fn block_stream(
    genesis: &Genesis,
    (v2, v3): Pair<'_>,
    follower_modules: Pair<'_>,
    before: u64,
    total: u64,
) -> anyhow::Result<Stream> {
    let open = |(v2, v3): Pair<'_>| -> anyhow::Result<Chain> {
        let active = DepositEngine::Module(Box::new(v2.clone()));
        let mut chain = Chain::open(Arc::new(MemoryStore::new()), genesis.clone(), active)?;
        chain.set_deposit_modules(Arc::new(ReadyEngines(HashMap::from([
            (v2.hash(), DepositEngine::Module(Box::new(v2.clone()))),
            (v3.hash(), DepositEngine::Module(Box::new(v3.clone()))),
        ]))));
        Ok(chain)
    };
    let mut producer = open((v2, v3))?;
    producer.propose_upgrade(UpgradeOp {
        kind: Kind::Deposits,
        module: v3.hash(),
        height: before + 1,
    })?;
    let count = usize::try_from(total)? * usize::from(BLOCK);
    eprintln!("signing {count} deposits …");
    let mut log = workload::DevDepositLog::new();
    for d in signed(0, count, 32 * ETH) {
        log.push(d);
    }
    eprintln!(
        "producing {total} blocks (deposits-v3 from height {}) …",
        before + 1
    );
    let mut blocks: Vec<Block> = Vec::new();
    for slot in 1..=total {
        let block = producer.build_block_from(slot, 0, log.eth1_data(), &log)?;
        anyhow::ensure!(
            block.body.deposits.len() == usize::from(BLOCK),
            "block {slot} carries {} deposits",
            block.body.deposits.len()
        );
        producer.import(&block)?;
        blocks.push(block);
    }
    drop(producer);
    eprintln!("importing them on a follower …");
    let mut follower = open(follower_modules)?;
    let cache = follower_modules.1.sig_cache();
    let preverifier = Preverifier::spawn(cache.clone())?;
    follower.set_preverifier(preverifier.clone());
    let mut times = Vec::with_capacity(blocks.len());
    let mut epoch = Vec::with_capacity(blocks.len());
    let mut parent_slot = 0;
    let mut waited_ms = Vec::with_capacity(blocks.len());
    for block in &blocks {
        // Untimed: a node has a slot between blocks for the pre-verifier.
        let wait = Instant::now();
        anyhow::ensure!(
            preverifier.wait_idle(Duration::from_secs(600)),
            "the signature pre-verifier was not idle after 10 minutes"
        );
        waited_ms.push(super::ms_since(wait));
        let start = Instant::now();
        follower.import(block)?;
        times.push(super::ms_since(start));
        epoch.push(genesis.starts_epoch(parent_slot, block.header.slot));
        parent_slot = block.header.slot;
    }
    let waited: f64 = waited_ms.iter().sum();
    let max_wait = waited_ms.iter().copied().fold(0.0, f64::max);
    eprintln!(
        "between blocks (untimed) waited for the signature pre-verifier: {waited:.1} ms in all, \
         at most {max_wait:.1} ms; it found {:?}; the follower's signature cache: {:?}",
        preverifier.stats(),
        cache.stats()
    );
    anyhow::ensure!(
        follower.schedule().module_at(Kind::Deposits, before + 1) == Some(v3.hash()),
        "deposits-v3 was not scheduled at {}",
        before + 1
    );
    Ok(Stream {
        times,
        epoch,
        head: follower.snapshot(),
    })
}

/// The snapshot of `head`'s state with `registry` and `queue` in it, as the chain takes it:
/// median time (µs) and the heap bytes one adds.
fn snapshots(head: &State, registry: &Registry, queue: &PendingQueue) -> (f64, u64) {
    let mut times = Vec::with_capacity(SNAPSHOTS);
    let mut bytes = Vec::with_capacity(SNAPSHOTS);
    for _ in 0..SNAPSHOTS {
        let before = modnode::alloc_stats::thread_net_bytes();
        let start = Instant::now();
        let snapshot = State::with_pending(
            head.block_hash(),
            head.height(),
            registry.clone(),
            head.eth1().clone(),
            head.schedule().clone(),
            Some(queue.clone()),
        );
        times.push(super::ms_since(start) * 1e3);
        bytes.push(modnode::alloc_stats::thread_net_bytes() - before);
        std::hint::black_box(snapshot.root());
        drop(snapshot);
    }
    bytes.sort_unstable();
    let median_bytes = bytes.get(bytes.len() / 2).copied().unwrap_or(0);
    (
        super::median(&mut times),
        u64::try_from(median_bytes).unwrap_or(0),
    )
}

/// Runs the benchmark on a guest thread, as the node's importer does, so module calls run in
/// place (and their BLS time is this thread's).
pub fn run(params: Params) -> anyhow::Result<DepositsV3Report> {
    let measured = measure(params)?;
    let spread = |name: &str, samples: &[f64]| {
        let mut sorted = samples.to_vec();
        let median = super::median(&mut sorted);
        let max = sorted.last().copied().unwrap_or(0.0);
        eprintln!(
            "{name}: {} samples, median {median:.3} ms, max {max:.3} ms",
            samples.len()
        );
    };
    spread(
        "epochs with the long queue (BLS excluded)",
        &measured.long_epochs_ms,
    );
    spread("deposits-v3 blocks", &measured.v3_blocks_ms);
    spread(
        "deposits-v3 blocks with an epoch transition",
        &measured.v3_epoch_blocks_ms,
    );
    // `block_p99_ms.v3` counts the epoch blocks too, and with one epoch block in
    // `SLOTS_PER_EPOCH` its nearest-rank p99 is one of them; `epoch_block_p99_ms` over a few
    // dozen epoch blocks is their maximum. These two lines show what the JSON's ratio is made of.
    spread(
        "deposits-v3 blocks without an epoch transition",
        &measured.v3_plain_blocks_ms,
    );
    if let Some((height, ms)) = measured.slowest_epoch_block {
        eprintln!(
            "slowest deposits-v3 block with an epoch transition: height {height}, {ms:.3} ms"
        );
    }
    Ok(measured.report)
}

fn measure(params: Params) -> anyhow::Result<Measured> {
    modnode::runtime::threads::run_on_guest_thread(move || measure_here(params))
}

fn measure_here(params: Params) -> anyhow::Result<Measured> {
    let Params {
        validators,
        queue_large,
        queue_small,
        epochs: epoch_count,
        blocks,
    } = params;
    anyhow::ensure!(validators >= 1, "--validators must be at least 1");
    anyhow::ensure!(
        epoch_count >= 1 && blocks >= 1,
        "--epochs and --blocks: at least 1"
    );
    anyhow::ensure!(
        queue_small >= PER_EPOCH as u64 && queue_large >= queue_small,
        "--queue-small must be at least {PER_EPOCH} and --queue-large at least --queue-small"
    );
    anyhow::ensure!(
        queue_large >= (epoch_count * PER_EPOCH) as u64,
        "--queue-large must hold the {} deposits the epochs apply",
        epoch_count * PER_EPOCH
    );
    // The producer and the epochs run without the signature cache: both queues apply the same
    // deposits, and the second must pair them for real like the first.
    let runtime = Runtime::new(RuntimeConfig::default())?
        .with_sig_cache(Arc::new(modnode::crypto::SigCache::off()));
    let v2 = load(&runtime, "deposits-v2")?;
    let v3 = load(&runtime, "deposits-v3")?;
    let mut genesis = Genesis::generated("bench-deposits-v3", validators, 42);
    genesis.max_deposits_per_block = BLOCK;
    genesis.slots_per_epoch = Some(SLOTS_PER_EPOCH);
    genesis.finality_depth = FINALITY;
    genesis.deposits_module = Some(v2.hash().0);

    // Blocks: the vote in block 1 must count, more than the lead before H.
    let before = (blocks as u64).max(genesis.upgrade_lead_blocks + 1);
    // The follower on a runtime of its own: nothing the producer verified is in its cache.
    let follower_runtime = Runtime::new(RuntimeConfig::default())?;
    let follower_v2 = load(&follower_runtime, "deposits-v2")?;
    let follower_v3 = load(&follower_runtime, "deposits-v3")?;
    let stream = block_stream(
        &genesis,
        (&v2, &v3),
        (&follower_v2, &follower_v3),
        before,
        before + blocks as u64,
    )?;
    let split = usize::try_from(before)?;
    let v2_ms = &stream.times[split - blocks.min(split)..split];
    let v3_ms = &stream.times[split..];
    let v3_epoch = &stream.epoch[split..];
    let v3_epoch_blocks_ms: Vec<f64> = v3_ms
        .iter()
        .zip(v3_epoch)
        .filter(|(_, e)| **e)
        .map(|(t, _)| *t)
        .collect();
    let v3_plain_blocks_ms: Vec<f64> = v3_ms
        .iter()
        .zip(v3_epoch)
        .skip(1)
        .filter(|(_, e)| !**e)
        .map(|(t, _)| *t)
        .collect();
    // Block `i` of the stream is at height `i + 1` (one block per slot from slot 1).
    let slowest_epoch_block = v3_ms
        .iter()
        .zip(v3_epoch)
        .enumerate()
        .filter(|(_, (_, e))| **e)
        .map(|(i, (t, _))| ((split + i + 1) as u64, *t))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let mut v3_plain = v3_plain_blocks_ms.clone();
    let migration_ms = 0.0;
    let at_h = v3_ms.first().copied().unwrap_or(0.0);
    let activation_pause_us = ((at_h - super::median(&mut v3_plain) - migration_ms) * 1e3).max(0.0);

    // Epochs: the same deposits applied to clones of the follower's registry.
    let base = stream.head.registry().clone();
    let applied = epoch_count * PER_EPOCH;
    let small = usize::try_from(queue_small)?;
    eprintln!("signing {} deposits for the epochs …", applied + small);
    let deposits = signed(EPOCH_SEEDS, applied + small, 8 * ETH);
    eprintln!("building a queue of {queue_large} …");
    let large = queue_of(&deposits, queue_large)?;
    let mut next_filler = queue_large;
    eprintln!("{epoch_count} epochs with {queue_large} queued …");
    let long = epochs(&v3, &genesis, base.clone(), large, epoch_count, |_| {
        let pushed = (next_filler..next_filler + PER_EPOCH as u64)
            .map(filler)
            .collect();
        next_filler += PER_EPOCH as u64;
        pushed
    })?;
    eprintln!("{epoch_count} epochs with {queue_small} queued …");
    let short = epochs(
        &v3,
        &genesis,
        base,
        queue_of(&deposits, queue_small)?,
        epoch_count,
        |e| {
            let from = small + e * PER_EPOCH;
            deposits[from..from + PER_EPOCH].iter().map(entry).collect()
        },
    )?;
    let (snapshot_us, snapshot_bytes) = snapshots(&stream.head, &long.registry, &long.queue);
    drop(short.registry);
    drop(short.queue);

    let mut bls = long.bls.clone();
    let report = DepositsV3Report {
        validators,
        queue_1m: LongQueue {
            epoch_p99_ms: super::percentile(&long.without_bls, 99),
            epoch_bls_ms: super::median(&mut bls),
        },
        queue_1k: ShortQueue {
            epoch_p99_ms: super::percentile(&short.without_bls, 99),
        },
        block_p99_ms: BlockP99 {
            v2: super::percentile(v2_ms, 99),
            v3: super::percentile(v3_ms, 99),
        },
        epoch_block_p99_ms: super::percentile(&v3_epoch_blocks_ms, 99),
        activation_pause_us,
        migration_ms,
        snapshot_us,
        snapshot_bytes,
    };
    Ok(Measured {
        report,
        long_epochs_ms: long.without_bls,
        v3_blocks_ms: v3_ms.to_vec(),
        v3_epoch_blocks_ms,
        v3_plain_blocks_ms,
        slowest_epoch_block,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The benchmark at toy sizes: exactly the report's keys, and values that can be true.
    #[test]
    fn deposits_v3_bench_reports_its_keys_with_sane_values() {
        let params = Params {
            validators: 64,
            queue_large: 600,
            queue_small: 40,
            epochs: 4,
            blocks: 12,
        };
        let measured = measure(params).unwrap();
        let json = serde_json::to_value(&measured.report).unwrap();
        let keys = |v: &serde_json::Value| -> Vec<String> {
            let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            keys
        };
        assert_eq!(
            keys(&json),
            [
                "activation_pause_us",
                "block_p99_ms",
                "epoch_block_p99_ms",
                "migration_ms",
                "queue_1k",
                "queue_1m",
                "snapshot_bytes",
                "snapshot_us",
                "validators"
            ]
        );
        assert_eq!(keys(&json["queue_1m"]), ["epoch_bls_ms", "epoch_p99_ms"]);
        assert_eq!(keys(&json["queue_1k"]), ["epoch_p99_ms"]);
        assert_eq!(keys(&json["block_p99_ms"]), ["v2", "v3"]);
        assert_eq!(json["validators"], 64);

        let r = &measured.report;
        for (name, value) in [
            ("queue_1m.epoch_p99_ms", r.queue_1m.epoch_p99_ms),
            ("queue_1m.epoch_bls_ms", r.queue_1m.epoch_bls_ms),
            ("queue_1k.epoch_p99_ms", r.queue_1k.epoch_p99_ms),
            ("block_p99_ms.v2", r.block_p99_ms.v2),
            ("block_p99_ms.v3", r.block_p99_ms.v3),
            ("epoch_block_p99_ms", r.epoch_block_p99_ms),
            ("snapshot_us", r.snapshot_us),
        ] {
            assert!(value.is_finite() && value > 0.0, "{name} = {value}");
        }
        assert!(r.activation_pause_us.is_finite() && r.activation_pause_us >= 0.0);
        assert_eq!(r.migration_ms, 0.0);
        // 16 signatures per epoch are checked, and the snapshot owns its tables, not the
        // registry's or the queue's chunks.
        assert!(
            r.snapshot_bytes > 0 && r.snapshot_bytes < 1 << 20,
            "{}",
            r.snapshot_bytes
        );
        // p99s are of their samples: at least the median, at most the maximum.
        let max = |s: &[f64]| s.iter().copied().fold(0.0, f64::max);
        let mut long = measured.long_epochs_ms.clone();
        assert!(r.queue_1m.epoch_p99_ms >= super::super::median(&mut long));
        assert!(r.queue_1m.epoch_p99_ms <= max(&measured.long_epochs_ms));
        let mut v3 = measured.v3_blocks_ms.clone();
        assert!(r.block_p99_ms.v3 >= super::super::median(&mut v3));
        assert!(r.block_p99_ms.v3 <= max(&measured.v3_blocks_ms));
        let mut epoch_blocks = measured.v3_epoch_blocks_ms.clone();
        assert!(!epoch_blocks.is_empty());
        assert!(r.epoch_block_p99_ms >= super::super::median(&mut epoch_blocks));
        assert!(r.epoch_block_p99_ms <= max(&epoch_blocks));
        // The split is by epoch transition: every v3 block after H is in exactly one part
        // (the block at H is in the epoch part only if it starts an epoch).
        let parts = measured.v3_plain_blocks_ms.len() + epoch_blocks.len();
        let v3_blocks = measured.v3_blocks_ms.len();
        assert!(
            parts == v3_blocks - 1 || parts == v3_blocks,
            "{parts} of {v3_blocks}"
        );
        let (height, slowest) = measured.slowest_epoch_block.unwrap();
        assert_eq!(slowest, max(&epoch_blocks));
        assert!(height > params.blocks as u64, "{height} is not after H");
    }
}
