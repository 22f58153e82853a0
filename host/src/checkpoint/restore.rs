//! Restoring a checkpoint, sans-IO: chunks arrive in any order from anyone; each is checked on
//! arrival against its manifest entry (size, hash), opened by the module that made it, and its
//! leaves proven against the manifest's registry root — or, for a pending-deposit queue chunk
//! (host-made, see [`super::queue`]), opened by the host and its entries proven against the
//! queue's tree root; coverage is tracked by leaf index and by queue entry index. The restore
//! is done only when everything is covered and the state rebuilt from the leaves and entries has
//! the manifest's state root.
//!
//! [`Restorer::verify`] takes `&self`, so a driver may verify chunks on several threads and
//! hand the results to [`Restorer::insert`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::assembly::Assembly;
use super::manifest::{Manifest, ManifestError, ManifestLimits};
use super::queue::{rebuild_queue, verify_queue_chunk};
use crate::chunk::ChunkContents;
use crate::crypto::sha256_many;
use crate::runtime::CallError;
use crate::runtime::checkpoint::{CheckpointModule, ChunkSession};
use crate::state::merkle::{
    Hash32, MerkleError, RangeNodes, RangeProof, verify_range_keeping_nodes,
};
use crate::state::{
    Eth1State, LEAF_BYTES, PendingDeposit, PendingQueue, Registry, Schedule, StateError,
    VALIDATOR_BYTES, Validator, state_root_with,
};

mod error;

pub use error::{Fault, RestoreError};

/// Opens chunks of one checkpoint version (the module that made them).
pub trait ChunkOpener: Send + Sync {
    /// Decodes `chunk`: `Ok(Err(reason))` when the bytes are not a chunk of this version.
    fn open(&self, chunk: &[u8]) -> Result<Result<ChunkContents, String>, CallError>;

    /// An opener for many chunks on the calling (guest) thread, cheaper per chunk than this
    /// one (one module instance reused); `None` when this one is as good.
    fn for_this_thread(&self) -> Option<Result<Box<dyn ChunkOpener + '_>, CallError>> {
        None
    }
}

impl ChunkOpener for CheckpointModule {
    fn open(&self, chunk: &[u8]) -> Result<Result<ChunkContents, String>, CallError> {
        // A one-off call runs on the guest pool and needs the bytes it owns.
        Ok(self
            .open_chunk(chunk.to_vec())?
            .map_err(|e| format!("{e:?}")))
    }

    fn for_this_thread(&self) -> Option<Result<Box<dyn ChunkOpener + '_>, CallError>> {
        let session = self.chunk_session(None).map(|s| {
            let opener: Box<dyn ChunkOpener> = Box::new(SessionOpener(Mutex::new(s)));
            opener
        });
        Some(session)
    }
}

/// One module instance opening chunk after chunk on one thread (the lock is never contended).
struct SessionOpener(Mutex<ChunkSession>);

impl ChunkOpener for SessionOpener {
    fn open(&self, chunk: &[u8]) -> Result<Result<ChunkContents, String>, CallError> {
        let mut session = self.0.lock().map_err(|_| {
            crate::runtime::error::HostFailure::new(
                "checkpoint",
                crate::runtime::error::HostFailureKind::Poisoned,
                "a chunk-opening session's lock is poisoned",
            )
        })?;
        Ok(session.open(chunk)?.map_err(|e| format!("{e:?}")))
    }
}

/// A chunk whose leaves are proven: ready to be written and inserted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedChunk {
    /// Position in the manifest.
    pub index: usize,
    /// First leaf.
    pub start: u64,
    /// One past the last leaf.
    pub end: u64,
    /// The validator record of each leaf.
    pub validators: Vec<Validator>,
    /// The balance of each leaf.
    pub balances: Vec<u64>,
    /// `sha256` of each leaf (the tree's leaves).
    pub hashes: Vec<Hash32>,
    /// The tree nodes its range proof computed: the rebuilt registry's (or queue's) tree is
    /// assembled from them rather than hashed again.
    pub nodes: RangeNodes,
    /// For a pending-deposit queue chunk, its entries (`start..end` are entry indices, and
    /// `validators` and `balances` are empty); empty for a registry chunk.
    pub pending: Vec<PendingDeposit>,
}

/// The restored state.
#[derive(Debug, Clone)]
pub struct RestoredState {
    /// The registry, rebuilt from the leaves.
    pub registry: Registry,
    /// The eth1 state, from the manifest's extras.
    pub eth1: Eth1State,
    /// The module schedule, from the manifest's extras.
    pub schedule: Schedule,
    /// deposits@3's pending-deposit queue, rebuilt from the queue chunks (`None`: the state
    /// has none).
    pub pending: Option<PendingQueue>,
    /// Its state root (equal to the manifest's).
    pub state_root: crate::hashes::StateRoot,
}

/// Progress of a restore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Chunks verified.
    pub chunks: usize,
    /// Chunks in the manifest.
    pub total_chunks: usize,
    /// Leaves covered.
    pub leaves: u64,
    /// Leaves in the state.
    pub total_leaves: u64,
    /// Encoded bytes of the verified chunks (as the manifest lists their sizes).
    pub bytes: u64,
    /// Encoded bytes of every chunk in the manifest.
    pub total_bytes: u64,
}

/// What verifies a chunk of one checkpoint on its own: the manifest and, for a manifest
/// listing chunk roots, those roots hashed up to the registry root (each chunk is held to its
/// own). Shared read-only between
/// verification threads (a restore pipeline's workers) while the [`Restorer`] that made it
/// tracks coverage.
#[derive(Debug)]
pub struct ChunkVerifier {
    manifest: Manifest,
    /// For a manifest listing chunk roots (checkpoint-v3): the roots, checked against the
    /// registry root, that its chunks (carrying no proof) are held to.
    roots: Option<super::roots::RootTree>,
}

/// The restore of one checkpoint.
#[derive(Debug)]
pub struct Restorer {
    verifier: Arc<ChunkVerifier>,
    id: Hash32,
    /// Verified chunks not yet taken into `assembly`: the queue's, and registry chunks verified
    /// ahead of the prefix. A registry chunk below `assembly.next()` is verified and taken.
    chunks: Vec<Option<VerifiedChunk>>,
    /// The registry, built from the verified prefix of its chunks as they come.
    assembly: Assembly,
    /// Verified leaf ranges, `start -> end`.
    covered: BTreeMap<u64, u64>,
    /// Verified queue entry ranges, `start -> end`.
    covered_queue: BTreeMap<u64, u64>,
    covered_leaves: u64,
    verified: usize,
    verified_bytes: u64,
    total_bytes: u64,
}

impl ChunkVerifier {
    /// The manifest the chunks are verified against.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Checks chunk `index`'s bytes as [`Restorer::verify`] does, except whether it is
    /// verified already (the [`Restorer`] refuses a duplicate when it is inserted).
    pub fn verify(
        &self,
        opener: &dyn ChunkOpener,
        index: usize,
        bytes: &[u8],
    ) -> Result<VerifiedChunk, RestoreError> {
        self.verify_hashed(opener, index, bytes, None)
    }

    /// Whether `len` is chunk `index`'s size in the manifest: the chunks worth hashing.
    pub(crate) fn has_size(&self, index: usize, len: usize) -> bool {
        self.manifest
            .chunks
            .get(index)
            .is_some_and(|entry| u32::try_from(len).ok() == Some(entry.size))
    }

    /// [`verify`](Self::verify), with the SHA-256 of `bytes` when it was computed already
    /// (with other chunks', [`sha256_many::hash_messages`]). Crate-only: the caller vouches
    /// that `hash` is the SHA-256 of `bytes`.
    pub(crate) fn verify_hashed(
        &self,
        opener: &dyn ChunkOpener,
        index: usize,
        bytes: &[u8],
        hash: Option<&Hash32>,
    ) -> Result<VerifiedChunk, RestoreError> {
        let entry = *self
            .manifest
            .chunks
            .get(index)
            .ok_or(RestoreError::UnknownChunk {
                index,
                count: self.manifest.chunks.len(),
            })?;
        if u32::try_from(bytes.len()).ok() != Some(entry.size) {
            return Err(RestoreError::WrongSize {
                index,
                size: bytes.len(),
                expected: entry.size,
            });
        }
        let hash: Hash32 = match hash {
            Some(hash) => *hash,
            None => Sha256::digest(bytes).into(),
        };
        if hash != entry.hash {
            return Err(RestoreError::Tampered {
                index,
                expected: hex::encode(entry.hash),
                found: hex::encode(hash),
            });
        }
        if let Some(part) = &self.manifest.queue
            && index >= self.manifest.registry_chunk_count()
        {
            return verify_queue_chunk(part, index, entry, bytes);
        }
        let contents = opener
            .open(bytes)?
            .map_err(|reason| RestoreError::Malformed { index, reason })?;
        if (contents.range.start, contents.range.end) != (entry.start, entry.end) {
            return Err(RestoreError::WrongRange {
                index,
                start: entry.start,
                end: entry.end,
                found_start: contents.range.start,
                found_end: contents.range.end,
            });
        }
        let count = entry.end.saturating_sub(entry.start);
        let leaf_size = self.manifest.leaf_size;
        let leaf_bytes = usize::try_from(leaf_size).unwrap_or(usize::MAX);
        let bad_bytes = || RestoreError::LeafBytes {
            index,
            bytes: contents.leaves.len(),
            count,
            leaf_size,
        };
        if contents.leaf_size != leaf_size
            || leaf_bytes == 0
            || count.checked_mul(u64::from(leaf_size)) != u64::try_from(contents.leaves.len()).ok()
        {
            return Err(bad_bytes());
        }
        let mut hashes: Vec<Hash32> = Vec::new();
        sha256_many::hash_each(&contents.leaves, leaf_bytes, &mut hashes);
        let proof_error = |source| RestoreError::Proof { index, source };
        let nodes = match &self.roots {
            None => {
                let proof = RangeProof::from_bytes(&contents.proof).map_err(proof_error)?;
                if proof.tree_len() != self.manifest.leaf_count {
                    return Err(proof_error(MerkleError::RootMismatch));
                }
                verify_range_keeping_nodes(
                    &self.manifest.registry_root,
                    entry.start,
                    &hashes,
                    &proof,
                )
                .map_err(proof_error)?
            }
            Some(_) if !contents.proof.is_empty() => {
                return Err(RestoreError::Malformed {
                    index,
                    reason: "the chunk carries a range proof, but its manifest lists chunk roots"
                        .into(),
                });
            }
            // The listed roots were hashed up to the registry root once (`RootTree::new`): the
            // chunk's leaves have to lead to its own.
            Some(roots) => roots
                .hold(index, entry.start, &hashes)
                .map_err(proof_error)?,
        };
        let (validators, balances) = decode_leaves(entry.start, &contents.leaves, leaf_bytes)?;
        Ok(VerifiedChunk {
            index,
            start: entry.start,
            end: entry.end,
            validators,
            balances,
            hashes,
            nodes,
            pending: Vec::new(),
        })
    }
}

impl Restorer {
    /// Starts restoring `manifest`, validating it first.
    pub fn new(manifest: Manifest, limits: &ManifestLimits) -> Result<Self, RestoreError> {
        manifest.validate(limits)?;
        let count = manifest.chunks.len();
        let roots = if manifest.chunk_roots.is_empty() {
            None
        } else {
            Some(manifest.root_tree()?)
        };
        Ok(Self {
            id: manifest.id(),
            total_bytes: manifest.total_bytes(),
            assembly: Assembly::new(manifest.leaf_count, roots.as_ref())?,
            verifier: Arc::new(ChunkVerifier { manifest, roots }),
            chunks: vec![None; count],
            covered: BTreeMap::new(),
            covered_queue: BTreeMap::new(),
            covered_leaves: 0,
            verified: 0,
            verified_bytes: 0,
        })
    }

    /// The manifest being restored.
    pub fn manifest(&self) -> &Manifest {
        &self.verifier.manifest
    }

    /// What verifies this checkpoint's chunks, for verification on other threads (the
    /// results come back through [`insert`](Self::insert), which refuses duplicates).
    pub fn verifier(&self) -> Arc<ChunkVerifier> {
        self.verifier.clone()
    }

    /// The checkpoint id.
    pub fn id(&self) -> Hash32 {
        self.id
    }

    /// Whether chunk `index` is verified.
    pub fn has(&self, index: usize) -> bool {
        index < self.assembly.next() || self.chunks.get(index).is_some_and(Option::is_some)
    }

    /// Indices of the chunks not yet verified, in order.
    pub fn missing(&self) -> Vec<usize> {
        (0..self.chunks.len()).filter(|&i| !self.has(i)).collect()
    }

    /// How far the restore is.
    pub fn progress(&self) -> Progress {
        Progress {
            chunks: self.verified,
            total_chunks: self.chunks.len(),
            leaves: self.covered_leaves,
            total_leaves: self.verifier.manifest.leaf_count,
            bytes: self.verified_bytes,
            total_bytes: self.total_bytes,
        }
    }

    /// Whether every leaf (and queue entry) is covered.
    pub fn is_complete(&self) -> bool {
        self.covered_leaves == self.verifier.manifest.leaf_count
            && self.verified == self.chunks.len()
    }

    /// Checks chunk `index`'s bytes: size and hash against the manifest entry (the serving
    /// peer's fault if wrong), then opens it with `opener` and proves its leaves (the manifest
    /// producer's fault if wrong). Cheap checks come first.
    pub fn verify(
        &self,
        opener: &dyn ChunkOpener,
        index: usize,
        bytes: &[u8],
    ) -> Result<VerifiedChunk, RestoreError> {
        if self.has(index)
            && let Some(entry) = self.manifest().chunks.get(index)
        {
            return Err(RestoreError::DuplicateRange {
                index,
                start: entry.start,
                end: entry.end,
            });
        }
        self.verifier.verify(opener, index, bytes)
    }

    /// Records a verified chunk; refuses leaves (or queue entries) that are already covered.
    pub fn insert(&mut self, chunk: VerifiedChunk) -> Result<Progress, RestoreError> {
        let duplicate = RestoreError::DuplicateRange {
            index: chunk.index,
            start: chunk.start,
            end: chunk.end,
        };
        let queue = self.verifier.manifest.queue.is_some()
            && chunk.index >= self.verifier.manifest.registry_chunk_count();
        let covered = if queue {
            &self.covered_queue
        } else {
            &self.covered
        };
        let overlaps_before = covered
            .range(..=chunk.start)
            .next_back()
            .is_some_and(|(_, &end)| end > chunk.start);
        let overlaps_after = covered.range(chunk.start..chunk.end).next().is_some();
        if overlaps_before || overlaps_after || self.has(chunk.index) {
            return Err(duplicate);
        }
        let slot = self
            .chunks
            .get_mut(chunk.index)
            .ok_or(RestoreError::UnknownChunk {
                index: chunk.index,
                count: self.verifier.manifest.chunks.len(),
            })?;
        if queue {
            self.covered_queue.insert(chunk.start, chunk.end);
        } else {
            self.covered.insert(chunk.start, chunk.end);
            self.covered_leaves = self
                .covered_leaves
                .saturating_add(chunk.end.saturating_sub(chunk.start));
        }
        self.verified = self.verified.saturating_add(1);
        let size = self
            .verifier
            .manifest
            .chunks
            .get(chunk.index)
            .map_or(0, |e| e.size);
        self.verified_bytes = self.verified_bytes.saturating_add(u64::from(size));
        *slot = Some(chunk);
        self.assemble()?;
        Ok(self.progress())
    }

    /// Moves the registry chunks that now extend the verified prefix into the assembly.
    fn assemble(&mut self) -> Result<(), RestoreError> {
        let registry_chunks = self.verifier.manifest.registry_chunk_count();
        while self.assembly.next() < registry_chunks {
            let Some(chunk) = self
                .chunks
                .get_mut(self.assembly.next())
                .and_then(Option::take)
            else {
                break;
            };
            self.assembly.take(chunk)?;
        }
        Ok(())
    }

    /// Rebuilds the state from the verified leaves (and queue entries); refuses an incomplete
    /// restore and a rebuilt root that is not the manifest's.
    pub fn finish(self) -> Result<RestoredState, RestoreError> {
        if !self.is_complete() {
            let missing = self.missing();
            let first = missing.first().copied().unwrap_or(0);
            let entry = self.verifier.manifest.chunks.get(first);
            return Err(RestoreError::MissingChunks {
                missing: missing.len(),
                first,
                start: entry.map_or(0, |e| e.start),
                end: entry.map_or(0, |e| e.end),
            });
        }
        let (eth1, schedule) = super::manifest::decode_extras(&self.verifier.manifest.extras)
            .ok_or(RestoreError::Manifest(ManifestError::ExtrasMalformed))?;
        let registry_chunks = self.verifier.manifest.registry_chunk_count();
        if let Some(failed) = self.assembly.failure() {
            return Err(RestoreError::Registry(failed.clone()));
        }
        if self.assembly.next() != registry_chunks {
            return Err(RestoreError::Local(format!(
                "{} of {registry_chunks} registry chunks assembled in a complete restore",
                self.assembly.next()
            )));
        }
        // Complete: every registry chunk is in the assembly, the queue's are held, in order.
        let queue_chunks: Vec<VerifiedChunk> = self
            .chunks
            .into_iter()
            .skip(registry_chunks)
            .flatten()
            .collect();
        // Every node of the tree was computed by some chunk's range proof (the chunks tile
        // the leaves, in order), each leaf hash from the bytes its record and balance were
        // decoded from (the encoding is canonical): the tree was assembled, not hashed again.
        let registry = self.assembly.finish()?;
        let pending = match &self.verifier.manifest.queue {
            None => None,
            Some(part) => Some(rebuild_queue(part, queue_chunks)?),
        };
        let pending_root = pending.as_ref().map(PendingQueue::root);
        let root = state_root_with(&registry.root(), &eth1, &schedule, pending_root.as_ref());
        if root != *self.verifier.manifest.state_root.as_bytes() {
            return Err(RestoreError::RootMismatch {
                computed: hex::encode(root),
                expected: hex::encode(self.verifier.manifest.state_root),
            });
        }
        Ok(RestoredState {
            registry,
            eth1,
            schedule,
            pending,
            state_root: crate::hashes::StateRoot(root),
        })
    }
}

/// The validator records and balances of `leaves` (`leaf_bytes` each, the first at position
/// `start` of the state).
fn decode_leaves(
    start: u64,
    leaves: &[u8],
    leaf_bytes: usize,
) -> Result<(Vec<Validator>, Vec<u64>), RestoreError> {
    let count = leaves.len().checked_div(leaf_bytes).unwrap_or(0);
    let mut validators = Vec::with_capacity(count);
    let mut balances = Vec::with_capacity(count);
    let mut position = start;
    for leaf in leaves.chunks_exact(leaf_bytes) {
        let bad = |reason: String| RestoreError::BadLeaf {
            leaf: position,
            reason,
        };
        let (record, balance) = leaf
            .split_at_checked(VALIDATOR_BYTES)
            .ok_or_else(|| bad(format!("leaf is not {LEAF_BYTES} bytes")))?;
        let validator = Validator::decode(record).map_err(|e| bad(e.to_string()))?;
        let balance: [u8; 8] = balance
            .try_into()
            .map_err(|_| bad(format!("leaf is not {LEAF_BYTES} bytes")))?;
        validators.push(validator);
        balances.push(u64::from_le_bytes(balance));
        position = position.saturating_add(1);
    }
    Ok((validators, balances))
}

/// How many chunk bytes [`verify_all`] stores between two flushes of the store: the disk
/// writes back while verification goes on, not all at the end.
const FLUSH_EVERY_BYTES: u64 = 8 << 20;

/// Verifies `chunks` (`(index, bytes)`, any order) on `threads` workers, storing each verified
/// chunk in `store` (when given) and inserting it; flushes the store every few MiB and at the
/// end. Returns the first refusal, leaving every chunk verified before it inserted (and
/// stored).
pub fn verify_all(
    restorer: &mut Restorer,
    opener: &dyn ChunkOpener,
    chunks: &[(usize, Vec<u8>)],
    threads: usize,
    store: Option<&super::store::RestoreStore>,
) -> Result<Progress, RestoreError> {
    use std::sync::atomic::{AtomicUsize, Ordering};

    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Result<VerifiedChunk, RestoreError>>> = Mutex::new(Vec::new());
    let stored: Mutex<Option<super::store::RestoreStoreError>> = Mutex::new(None);
    let shared: &Restorer = restorer;
    let opened: Mutex<Option<CallError>> = Mutex::new(None);
    let worker = |_: usize| {
        let local = match opener.for_this_thread() {
            None => None,
            Some(Ok(local)) => Some(local),
            Some(Err(e)) => {
                if let Ok(mut o) = opened.lock() {
                    o.get_or_insert(e);
                }
                return;
            }
        };
        let opener = local.as_deref().unwrap_or(opener);
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some((index, bytes)) = chunks.get(i) else {
                return;
            };
            let outcome = shared.verify(opener, *index, bytes).inspect(|_| {
                let hash = shared.manifest().chunks.get(*index).map(|e| e.hash);
                if let Some(store) = store
                    && let Some(hash) = hash
                    && let Err(e) = store
                        .put_chunk(*index, bytes, &hash)
                        .and_then(|()| store.flush_every(FLUSH_EVERY_BYTES))
                    && let Ok(mut s) = stored.lock()
                {
                    s.get_or_insert(e);
                }
            });
            if let Ok(mut r) = results.lock() {
                r.push(outcome);
            }
        }
    };
    crate::runtime::threads::scoped_guest_workers(threads.max(1), false, &worker)
        .map_err(|e| RestoreError::Local(format!("cannot start verification threads: {e}")))?;
    if let Some(e) = opened.into_inner().ok().flatten() {
        return Err(RestoreError::Call(e));
    }
    if let Some(e) = stored.into_inner().ok().flatten() {
        return Err(RestoreError::Local(e.to_string()));
    }
    if let Some(store) = store {
        store
            .flush()
            .map_err(|e| RestoreError::Local(e.to_string()))?;
    }
    let mut first_error = None;
    for outcome in results.into_inner().unwrap_or_default() {
        match outcome.and_then(|chunk| restorer.insert(chunk)) {
            Ok(_) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(restorer.progress()),
    }
}
