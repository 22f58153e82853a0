//! Restore as a pipeline: chunks as they arrive are verified (hash, opening by the module,
//! leaf hashes, range proof) on a pool of worker threads, off the task that fetches them, and
//! the verified ones are written in batches — one durable flush per batch — by one writer
//! thread; each chunk is reported back only once it is durable, so the [`Restorer`]'s rules
//! hold unchanged: a chunk counts (is inserted) only after its bytes and record are on disk,
//! and a restart resumes from exactly the chunks reported.
//!
//! ```text
//! submit ──(bounded)──▶ verifiers ×N ──(bounded)──▶ writer ──(bounded)──▶ next()
//!                       size, hash, open,           put, put, …, flush     Stored / Refused
//!                       leaf hashes, proof
//! ```
//!
//! Every queue is bounded and so is the whole: at most `capacity` chunks are between
//! [`Pipeline::submit`] and the [`Outcome`] taken by [`Pipeline::next`]. A slow disk fills the
//! writer's queue, the verifiers wait on it, the input fills, and `submit` refuses more — the
//! driver's fetcher (its `max_unverified`, set to the same capacity) makes no new request
//! meanwhile: a slow writer backs up the fetching, never memory.
//!
//! The writer gathers whatever has been verified when it is ready for more (up to
//! `batch_bytes`; while it holds less than half of that, waiting up to `GATHER`, 4 ms, for
//! more), so a slow disk amortises its flush over many chunks and a fast one still flushes a
//! few milliseconds' worth at a time, not chunk by chunk.
//!
//! [`Restorer`]: super::Restorer

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::restore::{ChunkOpener, ChunkVerifier, RestoreError, VerifiedChunk};
use super::store::{RestoreStore, RestoreStoreError};
use crate::crypto::sha256_many;
use crate::state::merkle::Hash32;

/// Jobs a verifier takes at once when they are waiting: the lanes of
/// [`sha256_many::hash_messages`], which hashes sixteen chunks for about the price of six.
const HASH_BATCH: usize = 16;

/// How long the writer waits for more verified chunks when it holds less than half a batch:
/// each flush is an `fdatasync` and a flushed sled batch, so a few chunks per flush made sled's
/// threads alone ~5 % of a fast restore's CPU.
const GATHER: Duration = Duration::from_millis(4);

/// Where a pipeline writes verified chunks: [`put`](Self::put) appends, [`flush`](Self::flush)
/// makes everything put so far durable and recorded.
pub trait ChunkSink: Send + 'static {
    /// Appends verified chunk `index` (`hash` as its manifest lists it).
    fn put(&mut self, index: usize, bytes: &[u8], hash: &Hash32) -> Result<(), RestoreStoreError>;
    /// Makes every chunk put so far durable.
    fn flush(&mut self) -> Result<(), RestoreStoreError>;
}

impl ChunkSink for RestoreStore {
    fn put(&mut self, index: usize, bytes: &[u8], hash: &Hash32) -> Result<(), RestoreStoreError> {
        self.put_chunk(index, bytes, hash)
    }

    fn flush(&mut self) -> Result<(), RestoreStoreError> {
        RestoreStore::flush(self)
    }
}

/// A sink that keeps nothing: verification only (chunks read back from the progress store
/// itself, which are durable already).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSink;

impl ChunkSink for NoSink {
    fn put(&mut self, _: usize, _: &[u8], _: &Hash32) -> Result<(), RestoreStoreError> {
        Ok(())
    }

    fn flush(&mut self) -> Result<(), RestoreStoreError> {
        Ok(())
    }
}

/// Tunables of a [`Pipeline`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Verification threads.
    pub verifiers: usize,
    /// Chunks between `submit` and the outcome taken, at most.
    pub capacity: usize,
    /// Bytes the writer gathers into one batch (one flush) at most.
    pub batch_bytes: u64,
}

impl PipelineConfig {
    /// `verifiers` threads and the fetcher's bound on chunks not yet verified and stored.
    pub fn new(verifiers: usize, capacity: usize) -> Self {
        Self {
            verifiers: verifiers.max(1),
            capacity: capacity.max(1),
            batch_bytes: 8 << 20,
        }
    }
}

/// What became of a submitted chunk.
#[derive(Debug)]
pub enum Outcome<T> {
    /// Verified and durable: insert it into the restorer.
    Stored {
        /// The verified chunk.
        chunk: VerifiedChunk,
        /// Whoever submitted it (the peer that served it).
        from: T,
    },
    /// Refused by verification; the error says whose fault it is.
    Refused {
        /// The chunk.
        index: usize,
        /// Whoever submitted it.
        from: T,
        /// Why.
        error: RestoreError,
    },
    /// Verified, but writing it failed: this node's fault (its disk), never the peer's.
    NotStored {
        /// The chunk.
        index: usize,
        /// Whoever submitted it.
        from: T,
        /// What failed.
        reason: String,
    },
}

impl<T> Outcome<T> {
    /// The chunk it is about.
    pub fn index(&self) -> usize {
        match self {
            Self::Stored { chunk, .. } => chunk.index,
            Self::Refused { index, .. } | Self::NotStored { index, .. } => *index,
        }
    }
}

/// Why [`Pipeline::submit`] did not take a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// `capacity` chunks are in the pipeline: take outcomes first (the caller's bug if its
    /// fetcher shares the bound).
    #[error("the restore pipeline holds {capacity} chunks, its capacity; take outcomes first")]
    Full {
        /// The capacity.
        capacity: usize,
    },
    /// The chunk is in the pipeline already (a second answer for it).
    #[error("chunk {index} is being verified already")]
    Held {
        /// The chunk.
        index: usize,
    },
    /// The pipeline's threads are gone (one panicked, or it was shut down).
    #[error("the restore pipeline's threads are gone")]
    Stopped,
}

struct Job<T> {
    index: usize,
    bytes: Vec<u8>,
    from: T,
}

struct Checked<T> {
    job: Job<T>,
    verified: Result<VerifiedChunk, RestoreError>,
}

/// A running restore pipeline (see the module docs). Dropping it stops and joins its threads;
/// chunks not yet reported are abandoned (those already flushed stay in the store).
pub struct Pipeline<T> {
    input: Option<SyncSender<Job<T>>>,
    output: tokio::sync::mpsc::Receiver<Outcome<T>>,
    /// Chunks submitted whose outcome was not taken yet.
    held: BTreeSet<usize>,
    capacity: usize,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl<T> std::fmt::Debug for Pipeline<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("held", &self.held.len())
            .field("capacity", &self.capacity)
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl<T: Send + 'static> Pipeline<T> {
    /// Starts `config.verifiers` verification threads opening chunks with `opener` and
    /// checking them with `verifier`, and a writer putting the verified ones into `sink`.
    pub fn start(
        verifier: Arc<ChunkVerifier>,
        opener: Arc<dyn ChunkOpener>,
        sink: impl ChunkSink,
        config: PipelineConfig,
    ) -> Result<Self, RestoreError> {
        let capacity = config.capacity.max(1);
        let (input, jobs) = sync_channel::<Job<T>>(capacity);
        let jobs = Arc::new(Mutex::new(jobs));
        let (to_writer, checked) = sync_channel::<Checked<T>>(capacity);
        let (outcomes, output) = tokio::sync::mpsc::channel(capacity);
        let stop = Arc::new(AtomicBool::new(false));
        let mut pipeline = Self {
            input: Some(input),
            output,
            held: BTreeSet::new(),
            capacity,
            stop: stop.clone(),
            threads: Vec::new(),
        };
        let cannot_start =
            |e: std::io::Error| RestoreError::Local(format!("cannot start restore threads: {e}"));
        for n in 0..config.verifiers.max(1) {
            let (jobs, to_writer, stop) = (jobs.clone(), to_writer.clone(), stop.clone());
            let (verifier, opener) = (verifier.clone(), opener.clone());
            let thread = crate::runtime::threads::spawn_guest_thread(
                format!("modnode-verify-{n}"),
                move || verify_loop(&verifier, opener.as_ref(), &jobs, &to_writer, &stop),
            )
            .map_err(cannot_start)?;
            pipeline.threads.push(thread);
        }
        drop(to_writer);
        let writer = Writer {
            sink,
            verifier,
            batch_bytes: config.batch_bytes,
            max_batch: capacity,
        };
        let thread = std::thread::Builder::new()
            .name("modnode-restore-writer".into())
            .spawn(crate::log_span::in_current_span(move || {
                writer.run(&checked, &outcomes, &stop)
            }))
            .map_err(cannot_start)?;
        pipeline.threads.push(thread);
        Ok(pipeline)
    }

    /// Hands chunk `index`'s bytes (served by `from`) to verification. Never blocks: refused
    /// when `capacity` chunks are in the pipeline or this one is already.
    pub fn submit(&mut self, index: usize, bytes: Vec<u8>, from: T) -> Result<(), SubmitError> {
        if self.held.contains(&index) {
            return Err(SubmitError::Held { index });
        }
        if self.held.len() >= self.capacity {
            return Err(SubmitError::Full {
                capacity: self.capacity,
            });
        }
        let input = self.input.as_ref().ok_or(SubmitError::Stopped)?;
        // Never full: the channel holds `capacity` and fewer are held.
        input
            .try_send(Job { index, bytes, from })
            .map_err(|_| SubmitError::Stopped)?;
        self.held.insert(index);
        Ok(())
    }

    /// Whether another chunk may be submitted.
    pub fn has_room(&self) -> bool {
        self.held.len() < self.capacity
    }

    /// Whether chunk `index` is in the pipeline.
    pub fn holds(&self, index: usize) -> bool {
        self.held.contains(&index)
    }

    /// Chunks in the pipeline.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The next outcome, once there is one; `None` when no chunk is in the pipeline (or its
    /// threads are gone).
    pub async fn next(&mut self) -> Option<Outcome<T>> {
        if self.held.is_empty() {
            return None;
        }
        let outcome = self.output.recv().await?;
        self.held.remove(&outcome.index());
        Some(outcome)
    }

    /// [`next`](Self::next) for a caller outside an async runtime (blocks the thread).
    pub fn next_blocking(&mut self) -> Option<Outcome<T>> {
        if self.held.is_empty() {
            return None;
        }
        let outcome = self.output.blocking_recv()?;
        self.held.remove(&outcome.index());
        Some(outcome)
    }
}

impl<T> Drop for Pipeline<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.input = None;
        self.output.close();
        // Drain what the writer already sent, so it is not blocked on a full channel.
        while self.output.try_recv().is_ok() {}
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// One verification thread: takes jobs until the input closes or the pipeline stops.
fn verify_loop<T>(
    verifier: &ChunkVerifier,
    opener: &dyn ChunkOpener,
    jobs: &Mutex<Receiver<Job<T>>>,
    to_writer: &SyncSender<Checked<T>>,
    stop: &AtomicBool,
) {
    let local = match opener.for_this_thread() {
        Some(Ok(local)) => Some(local),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "no chunk-opening session on a restore thread; opening chunk by chunk");
            None
        }
        None => None,
    };
    let opener = local.as_deref().unwrap_or(opener);
    loop {
        // Every job waiting, up to a group of the hash lanes: their SHA-256s are computed
        // together (`sha256_many::hash_messages`), then each is verified in turn.
        let batch = match jobs.lock() {
            Ok(jobs) => {
                let Ok(first) = jobs.recv() else { return };
                let mut batch = vec![first];
                while batch.len() < HASH_BATCH {
                    match jobs.try_recv() {
                        Ok(job) => batch.push(job),
                        Err(_) => break,
                    }
                }
                batch
            }
            Err(_) => return,
        };
        if stop.load(Ordering::Relaxed) {
            return;
        }
        // Only chunks of their manifest size are hashed (the others fail on their size). A
        // panic while hashing leaves every chunk to hash its own bytes below, under the
        // per-chunk guard.
        let sized: Vec<bool> = batch
            .iter()
            .map(|job| verifier.has_size(job.index, job.bytes.len()))
            .collect();
        let to_hash: Vec<&[u8]> = batch
            .iter()
            .zip(&sized)
            .filter(|(_, sized)| **sized)
            .map(|(job, _)| job.bytes.as_slice())
            .collect();
        let hashes = std::panic::catch_unwind(|| {
            let mut hashes = Vec::with_capacity(to_hash.len());
            sha256_many::hash_messages(&to_hash, &mut hashes);
            hashes
        })
        .unwrap_or_default();
        let mut hashes = hashes.into_iter();
        for (job, sized) in batch.into_iter().zip(sized) {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let hash = if sized { hashes.next() } else { None };
            // A panic here would leave the chunk held forever (its outcome never sent): it
            // is refused as our fault instead, and fetched again.
            let verified = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                verifier.verify_hashed(opener, job.index, &job.bytes, hash.as_ref())
            }))
            .unwrap_or_else(|_| {
                Err(RestoreError::Local(format!(
                    "verifying chunk {} panicked",
                    job.index
                )))
            });
            if to_writer.send(Checked { job, verified }).is_err() {
                return;
            }
        }
    }
}

/// The writing stage.
struct Writer<S> {
    sink: S,
    verifier: Arc<ChunkVerifier>,
    batch_bytes: u64,
    max_batch: usize,
}

impl<S: ChunkSink> Writer<S> {
    fn run<T>(
        mut self,
        checked: &Receiver<Checked<T>>,
        outcomes: &tokio::sync::mpsc::Sender<Outcome<T>>,
        stop: &AtomicBool,
    ) {
        while let Ok(first) = checked.recv() {
            let mut batch = vec![first];
            let mut bytes = batch_len(&batch);
            let started = Instant::now();
            while bytes < self.batch_bytes && batch.len() < self.max_batch {
                let next = match checked.try_recv() {
                    Ok(next) => next,
                    Err(TryRecvError::Disconnected) => break,
                    // Less than half a batch: wait a little for more rather than flush
                    // (and record in sled) a few chunks at a time.
                    Err(TryRecvError::Empty) if bytes < self.batch_bytes / 2 => {
                        let left = GATHER.saturating_sub(started.elapsed());
                        match checked.recv_timeout(left) {
                            Ok(next) => next,
                            Err(_) => break,
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                };
                bytes =
                    bytes.saturating_add(u64::try_from(next.job.bytes.len()).unwrap_or(u64::MAX));
                batch.push(next);
            }
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let failed = self.write(&batch);
            for Checked { job, verified } in batch {
                let outcome = match (verified, &failed) {
                    (Err(error), _) => Outcome::Refused {
                        index: job.index,
                        from: job.from,
                        error,
                    },
                    (Ok(_), Some(reason)) => Outcome::NotStored {
                        index: job.index,
                        from: job.from,
                        reason: reason.clone(),
                    },
                    (Ok(chunk), None) => Outcome::Stored {
                        chunk,
                        from: job.from,
                    },
                };
                if outcomes.blocking_send(outcome).is_err() {
                    return;
                }
            }
        }
    }

    /// Puts every verified chunk of `batch`, then flushes once; what failed, if anything.
    fn write<T>(&mut self, batch: &[Checked<T>]) -> Option<String> {
        let mut any = false;
        for Checked { job, verified } in batch {
            if verified.is_err() {
                continue;
            }
            let Some(entry) = self.verifier.manifest().chunks.get(job.index) else {
                continue;
            };
            if let Err(e) = self.sink.put(job.index, &job.bytes, &entry.hash) {
                return Some(e.to_string());
            }
            any = true;
        }
        if any && let Err(e) = self.sink.flush() {
            return Some(e.to_string());
        }
        None
    }
}

fn batch_len<T>(batch: &[Checked<T>]) -> u64 {
    batch
        .iter()
        .map(|c| u64::try_from(c.job.bytes.len()).unwrap_or(u64::MAX))
        .fold(0, u64::saturating_add)
}
