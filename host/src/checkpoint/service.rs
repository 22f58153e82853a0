//! Checkpoints in a running node: created every `interval` blocks and on demand, in the
//! background from a frozen state (the chain worker only takes the snapshot), stored in their
//! own sled database with the `keep` newest kept.
//!
//! A checkpoint is only ever made at a finalized height (head − `finality_depth`; the periodic
//! ones at the multiples of `interval` among those): a node restored from it holds no undo
//! record for its base block, so the base must be a block no reorganisation can revert
//! ([`checkpoint_height`]).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use tokio::sync::oneshot;

use sha2::Digest as _;

use super::create::{BlockRef, Checkpoint, CreateOptions};
use super::incremental::{IncrementalCheckpoint, IncrementalCreator};
use super::leaves::StateLeaves;
use super::manifest::{Manifest, ManifestLimits};
use crate::runtime::checkpoint::CheckpointModule;
use crate::state::State;
use crate::state::merkle::Hash32;

/// `[checkpoint]` settings of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// Create a checkpoint at every height that is a multiple of this; 0 turns periodic
    /// creation off (on-demand creation still works).
    pub interval: u64,
    /// Checkpoints kept (the newest).
    pub keep: usize,
    /// The checkpoint module version that creates checkpoints (`checkpoint-v<N>`).
    pub create_version: u32,
    /// Target chunk size given to the module's planner.
    pub target_chunk_bytes: u64,
    /// Worker threads for versions whose chunks are independent.
    pub threads: usize,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            interval: 100,
            keep: 2,
            create_version: 1,
            target_chunk_bytes: 1 << 20,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
        }
    }
}

/// What was created.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CheckpointSummary {
    /// Checkpoint id (hex).
    pub id: String,
    /// Height.
    pub height: u64,
    /// Chunking module version.
    pub version: u32,
    /// Chunks.
    pub chunks: usize,
    /// Total chunk bytes.
    pub bytes: u64,
    /// Creation time in milliseconds (0 when listed from the store).
    pub create_ms: u64,
}

impl CheckpointSummary {
    fn of(manifest: &Manifest, create_ms: u64) -> Self {
        Self {
            id: hex::encode(manifest.id()),
            height: manifest.height,
            version: manifest.module_version,
            chunks: manifest.chunks.len(),
            bytes: manifest.total_bytes(),
            create_ms,
        }
    }
}

/// Why a checkpoint could not be created or stored. Always this node's (or its module's) fault.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointServiceError {
    /// sled failed.
    #[error("checkpoint store: {0}")]
    Sled(#[from] sled::Error),
    /// Creation failed.
    #[error(transparent)]
    Create(#[from] super::create::CreateError),
    /// A stored manifest does not decode.
    #[error("stored checkpoint manifest is unreadable: {0}")]
    Manifest(#[from] super::manifest::ManifestError),
    /// A creation is already running or queued.
    #[error("a checkpoint is already being created; try again when it is done")]
    Busy,
    /// The creation thread has stopped.
    #[error("the checkpoint creator has stopped")]
    Stopped,
    /// A manifest lists a chunk by hash that was neither built nor found stored (it was
    /// pruned, or dropped after its bytes stopped matching their hash): create the checkpoint
    /// again without reuse.
    #[error(
        "checkpoint chunk {index} ({hash}) is listed by hash but not stored; it is built again"
    )]
    MissingChunk {
        /// The chunk's index in the manifest.
        index: usize,
        /// Its hash (hex).
        hash: String,
    },
}

/// Created checkpoints on disk: manifests by height; chunks content-addressed — their bytes
/// once by hash (`blobs`), whatever number of checkpoints list them, and per checkpoint id and
/// index the hash (`refs`). Stores written before chunks were content-addressed keep their
/// chunks' bytes by id and index (`chunks`), still served.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    manifests: sled::Tree,
    chunks: sled::Tree,
    refs: sled::Tree,
    blobs: sled::Tree,
}

impl CheckpointStore {
    /// Opens (creating) the checkpoint database in `dir`.
    pub fn open(dir: &Path) -> Result<Self, CheckpointServiceError> {
        let db = crate::store::open_sled(&sled::Config::new().path(dir))?;
        Ok(Self {
            manifests: db.open_tree("manifests")?,
            chunks: db.open_tree("chunks")?,
            refs: db.open_tree("chunk-refs")?,
            blobs: db.open_tree("chunk-blobs")?,
        })
    }

    /// Stores `checkpoint` durably as it is, its chunks by id and index (not content-addressed:
    /// any subset of the chunks, the bytes as given, served as they are), then drops all but
    /// the `keep` newest. A node stores what it creates with [`put_listed`](Self::put_listed).
    pub fn put(&self, checkpoint: &Checkpoint, keep: usize) -> Result<(), CheckpointServiceError> {
        let id = checkpoint.manifest.id();
        for (index, chunk) in checkpoint.chunks.iter().enumerate() {
            self.chunks
                .insert(chunk_key(&id, index), chunk.as_slice())?;
        }
        self.chunks.flush()?;
        let key = manifest_key(checkpoint.manifest.height, &id);
        self.manifests.insert(key, checkpoint.manifest.encode())?;
        self.manifests.flush()?;
        self.prune(keep)
    }

    /// Stores `manifest` durably with the chunks `built` (`(index, bytes)`); every other chunk
    /// it lists must already be stored under its hash (reused from an earlier checkpoint),
    /// else nothing is recorded and [`CheckpointServiceError::MissingChunk`] says which. Then
    /// drops all but the `keep` newest checkpoints and the chunks only they listed.
    pub fn put_listed<'a>(
        &self,
        manifest: &Manifest,
        built: impl Iterator<Item = (usize, &'a [u8])>,
        keep: usize,
    ) -> Result<(), CheckpointServiceError> {
        let id = manifest.id();
        for (index, bytes) in built {
            if let Some(entry) = manifest.chunks.get(index)
                && !self.blobs.contains_key(entry.hash)?
            {
                self.blobs.insert(entry.hash, bytes)?;
            }
        }
        self.blobs.flush()?;
        let mut refs = sled::Batch::default();
        for (index, entry) in manifest.chunks.iter().enumerate() {
            if !self.blobs.contains_key(entry.hash)? {
                return Err(CheckpointServiceError::MissingChunk {
                    index,
                    hash: hex::encode(entry.hash),
                });
            }
            refs.insert(chunk_key(&id, index), &entry.hash[..]);
        }
        self.refs.apply_batch(refs)?;
        self.refs.flush()?;
        let key = manifest_key(manifest.height, &id);
        self.manifests.insert(key, manifest.encode())?;
        self.manifests.flush()?;
        self.prune(keep)
    }

    /// Stored manifests, newest first.
    pub fn list(&self) -> Result<Vec<Manifest>, CheckpointServiceError> {
        let limits = ManifestLimits::default();
        let mut out = Vec::new();
        for entry in self.manifests.iter().rev() {
            let (_, bytes) = entry?;
            out.push(Manifest::decode(&bytes, &limits)?);
        }
        Ok(out)
    }

    /// Chunk `index` of checkpoint `id`. A content-addressed chunk whose bytes no longer hash
    /// to their name (damaged on disk) is dropped and reported absent: peers fetch it
    /// elsewhere, and the next creation that lists it finds it missing and builds it again.
    pub fn chunk(
        &self,
        id: &Hash32,
        index: usize,
    ) -> Result<Option<Vec<u8>>, CheckpointServiceError> {
        let key = chunk_key(id, index);
        let Some(hash) = self.refs.get(&key)? else {
            return Ok(self.chunks.get(key)?.map(|v| v.to_vec()));
        };
        let Some(bytes) = self.blobs.get(&hash)? else {
            return Ok(None);
        };
        let found: Hash32 = sha2::Sha256::digest(&bytes).into();
        if found[..] != hash[..] {
            tracing::warn!(
                chunk = %hex::encode(&hash),
                "a stored checkpoint chunk no longer matches its hash; dropped, it is built again"
            );
            self.blobs.remove(&hash)?;
            return Ok(None);
        }
        Ok(Some(bytes.to_vec()))
    }

    fn prune(&self, keep: usize) -> Result<(), CheckpointServiceError> {
        let keys: Vec<sled::IVec> = self.manifests.iter().keys().collect::<Result<_, _>>()?;
        let drop = keys.len().saturating_sub(keep.max(1));
        for key in keys.iter().take(drop) {
            if let Some(id) = key.get(8..40) {
                for chunk in self.chunks.scan_prefix(id).keys() {
                    self.chunks.remove(chunk?)?;
                }
                for chunk in self.refs.scan_prefix(id).keys() {
                    self.refs.remove(chunk?)?;
                }
            }
            self.manifests.remove(key)?;
        }
        self.manifests.flush()?;
        self.chunks.flush()?;
        self.refs.flush()?;
        if drop > 0 {
            // Chunks no kept checkpoint lists any more.
            let mut listed = std::collections::HashSet::new();
            for hash in self.refs.iter().values() {
                listed.insert(hash?);
            }
            for blob in self.blobs.iter().keys() {
                let blob = blob?;
                if !listed.contains(&blob) {
                    self.blobs.remove(blob)?;
                }
            }
            self.blobs.flush()?;
        }
        Ok(())
    }
}

fn manifest_key(height: u64, id: &Hash32) -> Vec<u8> {
    [&height.to_be_bytes()[..], id].concat()
}

fn chunk_key(id: &Hash32, index: usize) -> Vec<u8> {
    let index = u64::try_from(index).unwrap_or(u64::MAX);
    [&id[..], &index.to_be_bytes()].concat()
}

/// The answer to an on-demand creation.
pub type CreateReply = oneshot::Sender<Result<CheckpointSummary, String>>;

/// The state a checkpoint is made of, resolved on the creator thread: a cached snapshot handed
/// over as it is (one reference count), or the regeneration that rebuilds an uncached finalized
/// state — so a replay runs on the creator's low-priority thread, never on the chain worker.
/// An `Err` says why the state could not be had.
pub type FrozenState = Box<dyn FnOnce() -> Result<State, String> + Send>;

struct Job {
    state: FrozenState,
    reply: Option<CreateReply>,
}

/// The module that creates checkpoints, asked at each creation (so a live switch applies to
/// the next one).
pub type ModuleSource = Arc<dyn Fn() -> Arc<CheckpointModule> + Send + Sync>;

/// Hands snapshots to the background creator; cheap to clone.
#[derive(Clone)]
pub struct Checkpointer {
    jobs: mpsc::SyncSender<Job>,
    config: CheckpointConfig,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The background creator's thread: [`join`](Self::join) it after dropping every
/// [`Checkpointer`].
#[derive(Debug)]
pub struct CreatorThread {
    handle: std::thread::JoinHandle<()>,
    /// The thread's Linux thread id once it has started (0 before).
    tid: Arc<AtomicI32>,
}

impl CreatorThread {
    /// Moves the thread back to normal priority (best effort; see
    /// [`raise_to_normal`](crate::thread_priority::raise_to_normal)): someone now waits for it.
    fn raise_priority(&self) {
        let tid = self.tid.load(Ordering::Acquire);
        if tid != 0 {
            crate::thread_priority::raise_to_normal(tid);
        }
    }

    /// Waits for the thread to end (once every [`Checkpointer`] is dropped), first raising it to
    /// normal priority: at `SCHED_IDLE` on a busy machine it took seconds (up to 20 s measured
    /// in debug-built test nodes with both cores busy) to wake, drop its checkpoint store and
    /// exit, and a node's shutdown waited that long. A creation in progress still finishes first.
    pub fn join(self) -> std::thread::Result<()> {
        self.raise_priority();
        self.handle.join()
    }
}

impl Checkpointer {
    /// Starts the creator thread. It stops when every [`Checkpointer`] is dropped.
    pub fn start(
        module: ModuleSource,
        store: CheckpointStore,
        config: CheckpointConfig,
    ) -> std::io::Result<(Self, CreatorThread)> {
        // One job running and one queued: a creation that cannot keep up skips heights
        // instead of piling up snapshots (each pins the chunks import has since replaced).
        let (jobs, rx) = mpsc::sync_channel::<Job>(1);
        let tid = Arc::new(AtomicI32::new(0));
        let shared_tid = Arc::clone(&tid);
        let handle = std::thread::Builder::new()
            .name("checkpoint-creator".into())
            .spawn(crate::log_span::in_current_span(move || {
                shared_tid.store(crate::thread_priority::this_threads_id(), Ordering::Release);
                // Planning, the manifest and the sled writes are background work too.
                crate::runtime::threads::lower_this_threads_priority();
                // The previous checkpoint's chunks, reused by the next creation.
                let mut creator = IncrementalCreator::new();
                while let Ok(job) = rx.recv() {
                    let outcome = (job.state)().and_then(|state| {
                        run_job(&module(), &store, &config, &mut creator, state)
                            .map_err(|e| e.to_string())
                    });
                    match &outcome {
                        Ok(s) => tracing::info!(
                            height = s.height,
                            id = %s.id,
                            version = s.version,
                            chunks = s.chunks,
                            bytes = s.bytes,
                            ms = s.create_ms,
                            "checkpoint created"
                        ),
                        Err(e) => tracing::warn!(error = %e, "checkpoint creation failed"),
                    }
                    if let Some(reply) = job.reply {
                        let _ = reply.send(outcome);
                    }
                }
            }))?;
        Ok((Self { jobs, config }, CreatorThread { handle, tid }))
    }

    /// The configuration.
    pub fn config(&self) -> &CheckpointConfig {
        &self.config
    }

    /// Hands a state (its block is the checkpoint's, at a finalized height) to the creator
    /// unless one is already waiting; never blocks.
    pub fn offer(
        &self,
        state: FrozenState,
        reply: Option<CreateReply>,
    ) -> Result<(), CheckpointServiceError> {
        match self.jobs.try_send(Job { state, reply }) {
            Ok(()) => Ok(()),
            Err(mpsc::TrySendError::Full(job)) => {
                if let Some(reply) = job.reply {
                    let _ = reply.send(Err(CheckpointServiceError::Busy.to_string()));
                }
                Err(CheckpointServiceError::Busy)
            }
            Err(mpsc::TrySendError::Disconnected(_)) => Err(CheckpointServiceError::Stopped),
        }
    }
}

fn run_job(
    module: &CheckpointModule,
    store: &CheckpointStore,
    config: &CheckpointConfig,
    creator: &mut IncrementalCreator,
    state: State,
) -> Result<CheckpointSummary, CheckpointServiceError> {
    let start = Instant::now();
    let at = BlockRef {
        height: state.height(),
        hash: state.block_hash(),
    };
    let options = CreateOptions {
        target_chunk_bytes: config.target_chunk_bytes,
        threads: config.threads,
        background: true,
    };
    let state: Arc<dyn StateLeaves> = Arc::new(state);
    let mut made = creator.create(module, state.clone(), at, options)?;
    let mut stored = put_made(store, &made, config.keep);
    if let Err(CheckpointServiceError::MissingChunk { index, hash }) = &stored {
        tracing::warn!(index, chunk = %hash, "a reused checkpoint chunk is not stored; building every chunk");
        creator.forget();
        made = creator.create(module, state, at, options)?;
        stored = put_made(store, &made, config.keep);
    }
    if stored.is_err() {
        // What the creator remembers may not be stored: reuse nothing next time.
        creator.forget();
    }
    stored?;
    let ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(CheckpointSummary::of(&made.manifest, ms))
}

fn put_made(
    store: &CheckpointStore,
    made: &IncrementalCheckpoint,
    keep: usize,
) -> Result<(), CheckpointServiceError> {
    let built = made
        .built
        .iter()
        .map(|(index, bytes)| (*index, bytes.as_slice()));
    store.put_listed(&made.manifest, built, keep)
}

/// The height a checkpoint is made at when the head is at `head`: the finalized height
/// (`head − finality_depth`), or with `interval > 0` the newest multiple of `interval` at or
/// below it. `None` while no block but genesis is final (a checkpoint at height 0 is the
/// genesis itself).
///
/// Fork choice never reverts a block at or below the finalized height, so a node restored from
/// a checkpoint at this height never has to undo its base block (for which it holds no undo
/// record): every reorganisation it follows starts above it.
pub fn checkpoint_height(head: u64, finality_depth: u64, interval: u64) -> Option<u64> {
    checkpoint_height_at(head.checked_sub(finality_depth)?, interval)
}

/// [`checkpoint_height`] for a node that knows its finalized height (which may be below
/// `head − finality_depth` while fewer than a majority of the authorities produce).
pub fn checkpoint_height_at(finalized: u64, interval: u64) -> Option<u64> {
    let height = match finalized.checked_rem(interval) {
        Some(rest) => finalized.checked_sub(rest)?,
        None => finalized,
    };
    (height > 0).then_some(height)
}

/// Summaries of the stored checkpoints, newest first.
pub fn summaries(
    store: &CheckpointStore,
) -> Result<Vec<CheckpointSummary>, CheckpointServiceError> {
    Ok(store
        .list()?
        .iter()
        .map(|m| CheckpointSummary::of(m, 0))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheduling class of thread `tid`.
    fn class(tid: i32) -> i32 {
        // SAFETY: only reads the scheduling class of a thread of this process.
        unsafe { libc::sched_getscheduler(tid) }
    }

    #[test]
    fn joining_the_creator_raises_it_from_idle_priority_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path()).unwrap();
        let module: ModuleSource = Arc::new(|| panic!("no checkpoint is created here"));
        let (checkpointer, creator) =
            Checkpointer::start(module, store, CheckpointConfig::default()).unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        let tid = loop {
            let tid = creator.tid.load(Ordering::Acquire);
            if tid != 0 && class(tid) == libc::SCHED_IDLE {
                break tid;
            }
            assert!(
                Instant::now() < deadline,
                "the creator never ran at idle priority"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        creator.raise_priority();
        // Root (as on CI) may leave SCHED_IDLE; others only with a nice limit allowing it.
        // SAFETY: geteuid only reads the process's effective user id.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(class(tid), libc::SCHED_OTHER);
        }
        drop(checkpointer);
        creator.join().unwrap();
    }
}
