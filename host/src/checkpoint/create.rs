//! Creating a checkpoint: the module plans the chunk ranges, the host builds the chunks (on
//! several worker threads when the module declares its chunks independent, one module instance
//! per chunk), adds its own chunks of deposits@3's pending-deposit queue when the state holds
//! one ([`super::queue`]), and writes the manifest.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::{Digest, Sha256};

use super::leaves::StateLeaves;
use super::manifest::{ChunkEntry, Manifest, ManifestError, ManifestLimits};
use super::queue::QueuePart;
use crate::chunk::{ChunkError, LeafRange, PlanParams};
use crate::runtime::CallError;
use crate::runtime::checkpoint::{CheckpointModule, ChunkSession, StateReader};
use crate::runtime::threads::scoped_guest_workers;
use crate::state::merkle::Hash32;

/// The module parameter by which a version declares its chunks independent of each other.
pub const PARALLEL_PARAM: &str = "parallel-build";
/// The host parameter recorded in every manifest.
pub const TARGET_PARAM: &str = "target-chunk-bytes";
/// The module parameter by which a version says where its chunks' range proofs are.
pub const CHUNK_PROOF_PARAM: &str = "chunk-proof";
/// [`CHUNK_PROOF_PARAM`]'s value for chunks that carry no proof: the manifest lists each
/// chunk's subtree root instead (checkpoint-v3, see [`super::roots`]).
pub const MANIFEST_ROOTS: &str = "manifest-roots";

/// How to create a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateOptions {
    /// Preferred chunk size, passed to the module's planner (recorded in the manifest).
    pub target_chunk_bytes: u64,
    /// Worker threads for modules that declare `parallel-build = yes`; others get one.
    pub threads: usize,
    /// Build on low-priority dedicated threads, so a node's import preempts creation.
    pub background: bool,
}

impl Default for CreateOptions {
    fn default() -> Self {
        Self {
            target_chunk_bytes: 1 << 20,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            background: true,
        }
    }
}

/// The block a checkpoint is taken at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRef {
    /// Height.
    pub height: u64,
    /// Block hash.
    pub hash: crate::hashes::BlockHash,
}

/// A created checkpoint: the manifest and every chunk, in manifest order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The manifest.
    pub manifest: Manifest,
    /// The chunks' bytes, `chunks[i]` listed as `manifest.chunks[i]`.
    pub chunks: Vec<Vec<u8>>,
}

/// Why a checkpoint could not be created. Creation is local: a fault is the module's or ours.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// A module call failed (trap, fuel, limits, or a host failure).
    #[error("checkpoint module call failed: {0}")]
    Call(#[from] CallError),
    /// The module refused to build a chunk.
    #[error("checkpoint module refused chunk [{start}, {end}): {reason:?}")]
    Chunk {
        /// First leaf.
        start: u64,
        /// One past the last leaf.
        end: u64,
        /// The module's reason.
        reason: ChunkError,
    },
    /// The module's plan or chunks make a manifest this node would refuse from a peer.
    #[error("checkpoint module {module} produced an invalid checkpoint: {source}")]
    Invalid {
        /// The module's name.
        module: String,
        /// What is wrong.
        source: ManifestError,
    },
    /// A chunk is larger than a manifest may list.
    #[error(
        "checkpoint module built a {size}-byte chunk for [{start}, {end}); chunks are capped at {max}"
    )]
    ChunkTooLarge {
        /// First leaf.
        start: u64,
        /// One past the last leaf.
        end: u64,
        /// The chunk's size.
        size: usize,
        /// The cap.
        max: u32,
    },
    /// The worker threads could not be started.
    #[error("cannot start checkpoint worker threads: {0}")]
    Threads(std::io::Error),
    /// A pending-deposit queue chunk could not be built (ours: the queue lacks what it lists).
    #[error("cannot build the pending-deposit queue's checkpoint chunks: {0}")]
    Queue(String),
}

/// Whether `module` declares its chunks independent (so they may be built concurrently).
pub fn builds_in_parallel(module: &CheckpointModule) -> bool {
    module
        .meta()
        .info
        .params
        .iter()
        .any(|(k, v)| k == PARALLEL_PARAM && v == "yes")
}

/// Whether `module`'s chunks carry no range proof, the manifest listing their subtree roots
/// (so a chunk's bytes depend on its leaves alone and can be reused by hash).
pub fn proofs_in_manifest(module: &CheckpointModule) -> bool {
    module
        .meta()
        .info
        .params
        .iter()
        .any(|(k, v)| k == CHUNK_PROOF_PARAM && v == MANIFEST_ROOTS)
}

/// Creates a checkpoint of `state` at `at` with `module`.
///
/// Chunks are independent module calls, so the output does not depend on `options.threads`.
pub fn create(
    module: &CheckpointModule,
    state: Arc<dyn StateLeaves>,
    at: BlockRef,
    options: CreateOptions,
) -> Result<Checkpoint, CreateError> {
    let limits = ManifestLimits::default();
    let params = PlanParams {
        target_chunk_bytes: options.target_chunk_bytes,
    };
    let ranges = module.plan(state.clone(), params)?;
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let threads = worker_count(options, builds_in_parallel(module), ranges.len(), cores);
    let built = build_all(
        module,
        &state,
        &ranges,
        threads,
        options.background,
        limits.max_chunk_bytes,
    )?;
    let mut entries = Vec::with_capacity(ranges.len());
    let mut chunks = Vec::with_capacity(ranges.len());
    for (range, (bytes, hash)) in ranges.iter().zip(built) {
        entries.push(ChunkEntry {
            hash,
            start: range.start,
            end: range.end,
            // Checked against the cap in `build_one`.
            size: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
        });
        chunks.push(bytes);
    }
    let queue = build_queue_chunks(state.as_ref(), options, limits.max_chunk_bytes)?;
    let queue_entries = queue.iter().map(|(entry, _)| *entry).collect();
    chunks.extend(queue.into_iter().map(|(_, bytes)| bytes));
    let manifest = assemble_manifest(
        module,
        state.as_ref(),
        at,
        options,
        entries,
        queue_entries,
        None,
    )?;
    Ok(Checkpoint { manifest, chunks })
}

/// The host's chunks of the state's pending-deposit queue, in entry order (none without a
/// queue): about `options.target_chunk_bytes` each, every entry ever pushed covered.
pub(super) fn build_queue_chunks(
    state: &dyn StateLeaves,
    options: CreateOptions,
    max: u32,
) -> Result<Vec<(ChunkEntry, Vec<u8>)>, CreateError> {
    let Some(queue) = state.pending() else {
        return Ok(Vec::new());
    };
    let ranges = super::queue::plan(queue.total(), options.target_chunk_bytes);
    let mut out = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        let bytes = super::queue::build_chunk(queue, start, end).map_err(CreateError::Queue)?;
        let size = u32::try_from(bytes.len())
            .ok()
            .filter(|&size| size <= max)
            .ok_or_else(|| {
                CreateError::Queue(format!(
                    "the chunk of entries [{start}, {end}) is {} bytes; chunks are capped at {max}",
                    bytes.len()
                ))
            })?;
        let entry = ChunkEntry {
            hash: Sha256::digest(&bytes).into(),
            start,
            end,
            size,
        };
        out.push((entry, bytes));
        if options.background {
            std::thread::yield_now();
        }
    }
    Ok(out)
}

/// The manifest of `entries` (every registry chunk, in order) and `queue_entries` (every chunk
/// of the state's pending-deposit queue, in order; empty without a queue) of `state`: the
/// module's parameters and the host's, the state's roots and extras, the queue's part, and —
/// for a module whose chunks carry no proof — each registry chunk's subtree root read from the
/// registry tree (`read_roots`, when the caller read them already: one per entry). Validated as
/// a peer's would be.
pub(super) fn assemble_manifest(
    module: &CheckpointModule,
    state: &dyn StateLeaves,
    at: BlockRef,
    options: CreateOptions,
    entries: Vec<ChunkEntry>,
    queue_entries: Vec<ChunkEntry>,
    read_roots: Option<Vec<Hash32>>,
) -> Result<Manifest, CreateError> {
    let limits = ManifestLimits::default();
    let invalid = |source| CreateError::Invalid {
        module: module.meta().name(),
        source,
    };
    let chunk_roots = if let Some(roots) =
        read_roots.filter(|r| proofs_in_manifest(module) && r.len() == entries.len())
    {
        roots
    } else if proofs_in_manifest(module) {
        let level = super::roots::chunk_level(&entries, state.leaf_count())
            .map_err(|e| invalid(ManifestError::ChunkRoots(e)))?;
        (0u64..)
            .zip(&entries)
            .map(|(index, _)| {
                state.tree_node(level, index).ok_or_else(|| {
                    invalid(ManifestError::ChunkRoots(format!(
                        "the state has no tree node {index} at level {level}"
                    )))
                })
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    let info = &module.meta().info;
    let mut manifest_params = info.params.clone();
    manifest_params.push((TARGET_PARAM.into(), options.target_chunk_bytes.to_string()));
    let queue = match state.pending() {
        None => None,
        Some(queue) => {
            let chunks = u32::try_from(queue_entries.len()).map_err(|_| {
                invalid(ManifestError::Queue(format!(
                    "{} queue chunks",
                    queue_entries.len()
                )))
            })?;
            Some(QueuePart::of(queue, chunks))
        }
    };
    let mut entries = entries;
    entries.extend(queue_entries);
    let manifest = Manifest {
        module_hash: module.hash(),
        module_version: info.version,
        params: manifest_params,
        height: at.height,
        block_hash: at.hash,
        state_root: crate::hashes::StateRoot(state.state_root()),
        registry_root: state.registry_root(),
        leaf_count: state.leaf_count(),
        leaf_size: state.leaf_size(),
        extras: state.extras(),
        chunks: entries,
        chunk_roots,
        queue,
    };
    manifest.validate(&limits).map_err(invalid)?;
    Ok(manifest)
}

/// Worker threads for a creation: one for modules that build sequentially, else
/// `options.threads`, at most one per chunk — and in the background at most `cores - 1`
/// (at least one), so import always finds a core without a checkpoint worker on it.
/// `SCHED_IDLE` alone still cost import ~1.3x its idle p99 with a worker on every core
/// (cache and memory bandwidth); with one core left free it measured ~1.15x.
pub(super) fn worker_count(
    options: CreateOptions,
    parallel: bool,
    chunks: usize,
    cores: usize,
) -> usize {
    let threads = if parallel {
        options.threads.clamp(1, chunks.max(1))
    } else {
        1
    };
    if options.background {
        threads.min(cores.saturating_sub(1)).max(1)
    } else {
        threads
    }
}

pub(super) type Built = (Vec<u8>, Hash32);

/// Builds one chunk on a worker's session and hashes it.
fn build_one(session: &mut ChunkSession, range: LeafRange, max: u32) -> Result<Built, CreateError> {
    let bytes = session.build(range)?.map_err(|reason| CreateError::Chunk {
        start: range.start,
        end: range.end,
        reason,
    })?;
    if u32::try_from(bytes.len()).map_or(true, |size| size > max) {
        return Err(CreateError::ChunkTooLarge {
            start: range.start,
            end: range.end,
            size: bytes.len(),
            max,
        });
    }
    let hash = Sha256::digest(&bytes).into();
    Ok((bytes, hash))
}

/// Builds every range on `threads` workers taking the next unbuilt range in turn, each on
/// one module instance of its own (a [`ChunkSession`]: instantiated once, its memory reused for
/// every chunk); results land at their range's position, so the order never depends on
/// scheduling. Workers are dedicated guest threads, not the shared pool import uses.
pub(super) fn build_all(
    module: &CheckpointModule,
    state: &Arc<dyn StateLeaves>,
    ranges: &[LeafRange],
    threads: usize,
    background: bool,
    max: u32,
) -> Result<Vec<Built>, CreateError> {
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<Built>>> = Mutex::new(vec![None; ranges.len()]);
    let failure: Mutex<Option<CreateError>> = Mutex::new(None);
    let fail = |e: CreateError| {
        if let Ok(mut f) = failure.lock() {
            f.get_or_insert(e);
        }
    };
    let work = |_worker: usize| {
        let reader: Arc<dyn StateReader> = state.clone();
        let mut session = match module.chunk_session(Some(reader)) {
            Ok(session) => session,
            Err(e) => return fail(e.into()),
        };
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let Some(range) = ranges.get(index) else {
                return;
            };
            if failure.lock().map_or(true, |f| f.is_some()) {
                return;
            }
            match build_one(&mut session, *range, max) {
                Ok(built) => {
                    if let Ok(mut slots) = slots.lock()
                        && let Some(slot) = slots.get_mut(index)
                    {
                        *slot = Some(built);
                    }
                }
                Err(e) => return fail(e),
            }
            if background {
                // Between chunks, let anything runnable at normal priority go first.
                std::thread::yield_now();
            }
        }
    };
    scoped_guest_workers(threads.max(1), background, &work).map_err(CreateError::Threads)?;
    if let Some(e) = failure.into_inner().ok().flatten() {
        return Err(e);
    }
    let slots = slots.into_inner().unwrap_or_default();
    let mut out = Vec::with_capacity(ranges.len());
    for (slot, range) in slots.into_iter().zip(ranges) {
        out.push(slot.ok_or(CreateError::Chunk {
            start: range.start,
            end: range.end,
            reason: ChunkError::Malformed("a worker stopped before building this chunk".into()),
        })?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(threads: usize, background: bool) -> CreateOptions {
        CreateOptions {
            target_chunk_bytes: 1 << 20,
            threads,
            background,
        }
    }

    #[test]
    fn background_creation_leaves_a_core_for_import() {
        // Foreground: what was asked, at most one per chunk.
        assert_eq!(worker_count(options(8, false), true, 100, 2), 8);
        assert_eq!(worker_count(options(8, false), true, 3, 2), 3);
        // Background: never a worker on every core, but always one.
        assert_eq!(worker_count(options(2, true), true, 100, 2), 1);
        assert_eq!(worker_count(options(8, true), true, 100, 8), 7);
        assert_eq!(worker_count(options(4, true), true, 100, 16), 4);
        assert_eq!(worker_count(options(2, true), true, 100, 1), 1);
        // Sequential modules get one whatever was asked.
        assert_eq!(worker_count(options(8, false), false, 100, 8), 1);
        assert_eq!(worker_count(options(0, false), true, 100, 8), 1);
    }
}
