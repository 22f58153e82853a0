//! Background pre-verification of the deposit signatures the next epoch transition may check.
//!
//! Under deposits@3 a block only queues deposits; the epoch-boundary block verifies the
//! signatures of the new validators it applies (one `bls_verify_batch`), which made that block
//! several times slower than the others. After each import on a chain with a queue, the
//! [`Chain`](super::Chain) sends the first [`WINDOW`] queue entries whose pubkey is not in the
//! registry here ([`Preverifier::offer`]: a bounded channel, `try_send`, dropped when full —
//! import never waits). One worker thread at idle priority computes each entry's signing root
//! the way the guest does (`DepositData::signing_root` with the *genesis* fork version, Electra's
//! `is_valid_deposit_signature`) and verifies it into the runtime's [`SigCache`], so the epoch
//! block's batch is answered from the cache.
//!
//! Nothing here is consensus: the worker only fills a cache of valid verdicts, and a cached
//! verdict is the one verification gives (`crypto::cache`). A block imported before the worker
//! got to its entries verifies them itself, as without the worker; an invalid signature is
//! never cached, so the epoch applies it one by one exactly as before.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::block::DepositData;
use crate::crypto::{SigCache, SignatureSet};
use crate::state::PendingDeposit;

/// Queue entries from the front that are offered after each import: the epoch transition
/// applies at most 16 (`MAX_PENDING_DEPOSITS_PER_EPOCH`); two epochs' worth covers entries the
/// churn holds back to the next one.
pub const WINDOW: usize = 32;

/// Jobs waiting for the worker at most; more are dropped.
const CHANNEL_BOUND: usize = 4;

/// Signing roots of entries found invalid that the worker remembers (not the cache: nothing
/// consensus reads), so a bad entry at the queue's front is not re-verified after every block.
const REMEMBERED_INVALID: usize = 1024;

/// One import's entries to verify.
struct Job {
    entries: Vec<PendingDeposit>,
    genesis_fork_version: [u8; 4],
}

/// Jobs sent and not finished, for [`Preverifier::wait_idle`].
#[derive(Default)]
struct Busy {
    outstanding: Mutex<u64>,
    changed: Condvar,
}

impl Busy {
    fn started(&self) {
        if let Ok(mut count) = self.outstanding.lock() {
            *count = count.saturating_add(1);
        }
    }

    fn finished(&self) {
        if let Ok(mut count) = self.outstanding.lock() {
            *count = count.saturating_sub(1);
            self.changed.notify_all();
        }
    }
}

/// What the worker did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreverifyStats {
    /// Jobs dropped because the channel was full.
    pub dropped: u64,
    /// Entries found valid (now in the cache).
    pub valid: u64,
    /// Entries found invalid (never cached).
    pub invalid: u64,
    /// Verifications it asked the cache for (one per batch or lone entry): each is a pairing
    /// counted in the cache's own `verified`, unless another thread cached its sets first.
    pub checks: u64,
}

#[derive(Default)]
struct Counters {
    dropped: AtomicU64,
    valid: AtomicU64,
    invalid: AtomicU64,
    checks: AtomicU64,
}

/// The handle a chain sends entries through; the worker thread stops when the last clone is
/// dropped.
#[derive(Clone)]
pub struct Preverifier {
    sender: SyncSender<Job>,
    busy: Arc<Busy>,
    counters: Arc<Counters>,
    cache: Arc<SigCache>,
}

impl std::fmt::Debug for Preverifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preverifier")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Preverifier {
    /// Starts the worker thread, filling `cache` (the runtime's whose deposits modules the
    /// chain runs: `Runtime::sig_cache`).
    pub fn spawn(cache: Arc<SigCache>) -> std::io::Result<Self> {
        let (sender, receiver) = std::sync::mpsc::sync_channel(CHANNEL_BOUND);
        let busy = Arc::new(Busy::default());
        let counters = Arc::new(Counters::default());
        let worker = Worker {
            cache: cache.clone(),
            busy: busy.clone(),
            counters: counters.clone(),
            invalid: HashSet::new(),
        };
        std::thread::Builder::new()
            .name("modnode-preverify".into())
            .spawn(crate::log_span::in_current_span(move || {
                worker.run(&receiver)
            }))?;
        Ok(Self {
            sender,
            busy,
            counters,
            cache,
        })
    }

    /// The cache it fills.
    pub fn cache(&self) -> &Arc<SigCache> {
        &self.cache
    }

    /// Offers `entries` (queue entries of unknown pubkeys) for verification; never blocks.
    /// False when the job was dropped (the worker is behind or gone).
    pub fn offer(&self, entries: Vec<PendingDeposit>, genesis_fork_version: [u8; 4]) -> bool {
        if entries.is_empty() {
            return true;
        }
        self.busy.started();
        match self.sender.try_send(Job {
            entries,
            genesis_fork_version,
        }) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.busy.finished();
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Waits until every offered job is done, at most `timeout`; whether it is idle. (A node
    /// has a slot's time between blocks; tests and the benchmark wait for it explicitly.)
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let Ok(mut count) = self.busy.outstanding.lock() else {
            return false;
        };
        while *count > 0 {
            let left = deadline.map_or(timeout, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return false;
            }
            count = match self.busy.changed.wait_timeout(count, left) {
                Ok((count, _)) => count,
                Err(_) => return false,
            };
        }
        true
    }

    /// What the worker did so far.
    pub fn stats(&self) -> PreverifyStats {
        PreverifyStats {
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            valid: self.counters.valid.load(Ordering::Relaxed),
            invalid: self.counters.invalid.load(Ordering::Relaxed),
            checks: self.counters.checks.load(Ordering::Relaxed),
        }
    }
}

/// An entry the worker found invalid: its signing root and signature.
type InvalidKey = ([u8; 32], [u8; 96]);

struct Worker {
    cache: Arc<SigCache>,
    busy: Arc<Busy>,
    counters: Arc<Counters>,
    /// Entries found invalid, bounded.
    invalid: HashSet<InvalidKey>,
}

impl Worker {
    fn run(mut self, receiver: &Receiver<Job>) {
        crate::runtime::threads::lower_this_threads_priority();
        while let Ok(job) = receiver.recv() {
            self.verify(&job);
            self.busy.finished();
        }
    }

    fn verify(&mut self, job: &Job) {
        let roots: Vec<[u8; 32]> = job
            .entries
            .iter()
            .map(|e| {
                let data = DepositData {
                    pubkey: e.pubkey,
                    withdrawal_credentials: e.withdrawal_credentials,
                    amount: e.amount,
                    signature: e.signature,
                };
                data.signing_root(job.genesis_fork_version)
            })
            .collect();
        let todo: Vec<(SignatureSet<'_>, InvalidKey)> = job
            .entries
            .iter()
            .zip(&roots)
            .map(|(e, root)| {
                let set = SignatureSet {
                    pubkey: &e.pubkey,
                    message: root,
                    signature: &e.signature,
                };
                (set, (*root, e.signature))
            })
            .filter(|(set, key)| !self.invalid.contains(key) && !self.cache.contains(set))
            .collect();
        let sets: Vec<SignatureSet<'_>> = todo.iter().map(|(s, _)| *s).collect();
        if sets.is_empty() {
            return;
        }
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        if sets.len() > 1 && self.check(|cache| cache.verify_batch(&sets)) {
            self.counters
                .valid
                .fetch_add(count(sets.len()), Ordering::Relaxed);
            return;
        }
        // One alone, or a batch with a bad set in it: each on its own, so the valid ones are
        // cached and the bad ones remembered here.
        for (set, key) in &todo {
            if self.check(|cache| cache.verify(set.pubkey, set.message, set.signature)) {
                self.counters.valid.fetch_add(1, Ordering::Relaxed);
            } else {
                self.counters.invalid.fetch_add(1, Ordering::Relaxed);
                if self.invalid.len() >= REMEMBERED_INVALID {
                    self.invalid.clear();
                }
                self.invalid.insert(*key);
            }
        }
    }

    /// One verification through the cache, counted.
    fn check(&self, verify: impl FnOnce(&SigCache) -> bool) -> bool {
        self.counters.checks.fetch_add(1, Ordering::Relaxed);
        verify(&self.cache)
    }
}
