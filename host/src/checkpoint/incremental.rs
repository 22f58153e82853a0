//! Incremental creation: a checkpoint that costs what changed since the previous one.
//!
//! With a module whose chunks carry no range proof (checkpoint-v3: a chunk's bytes are a pure
//! function of its range and leaves) and whose plan follows the state's storage chunks, a
//! chunk whose storage no block has written since the previous checkpoint has the previous
//! checkpoint's bytes, hash and size. [`IncrementalCreator`] recognises such a chunk by the
//! identity of that storage ([`StorageId`]: the addresses of the registry's copy-on-write
//! record and balance chunks) and lists the remembered hash and size without reading,
//! encoding or hashing its leaves; its subtree root is read from the registry tree, nothing
//! hashed. Only the other chunks are built by the module.
//!
//! Why an address is a safe key: the creator keeps the previous state (an `Arc`, so every
//! storage chunk it names stays allocated); while it holds a chunk the chunk is shared, and a
//! shared chunk is never written in place — a write copies it to a new address first. So while
//! the previous state lives, the same address in the new state is the same, unchanged memory,
//! and no freed address can have been reused for other leaves. The range is part of the key
//! too, and so are the module, its parameters and the leaf size: a change of any of them
//! rebuilds everything.

use std::collections::HashMap;
use std::sync::Arc;

use super::create::{
    BlockRef, CreateError, CreateOptions, assemble_manifest, build_all, build_queue_chunks,
    builds_in_parallel, proofs_in_manifest, worker_count,
};
use super::leaves::{StateLeaves, StorageId};
use super::manifest::{ChunkEntry, Manifest, ManifestLimits};
use crate::runtime::checkpoint::{CheckpointModule, LeafRange, PlanParams};
use crate::state::merkle::Hash32;

/// What one creation made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncrementalCheckpoint {
    /// The manifest (identical to a full creation's of the same state).
    pub manifest: Manifest,
    /// The chunks built by this creation, `(index in the manifest, bytes)`, in order (the
    /// pending-deposit queue's chunks, if any, always among them); every other chunk was reused
    /// by hash from an earlier checkpoint.
    pub built: Vec<(usize, Vec<u8>)>,
    /// Chunks reused by hash.
    pub reused: usize,
}

/// The key a reusable chunk is remembered under.
type ChunkKey = (u64, u64, StorageId);

/// What was created last: the state (kept alive, see the module docs) and every chunk's
/// hash and size by the storage it was built from.
struct Previous {
    /// Held only to keep every storage chunk named in `chunks` allocated and unwritten.
    _state: Arc<dyn StateLeaves>,
    module_hash: Hash32,
    target_chunk_bytes: u64,
    leaf_size: u32,
    chunks: HashMap<ChunkKey, (Hash32, u32)>,
}

/// Creates checkpoints one after another, each reusing the unchanged chunks of the one before
/// (see the module docs). Holds the previous checkpoint's state: one per creator.
#[derive(Default)]
pub struct IncrementalCreator {
    previous: Option<Previous>,
}

impl std::fmt::Debug for IncrementalCreator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncrementalCreator")
            .field(
                "remembered_chunks",
                &self.previous.as_ref().map_or(0, |p| p.chunks.len()),
            )
            .finish()
    }
}

impl IncrementalCreator {
    /// A creator with nothing to reuse yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets the previous checkpoint (and releases its state): the next creation builds
    /// every chunk. For when the chunks it listed may not be stored any more.
    pub fn forget(&mut self) {
        self.previous = None;
    }

    /// Chunks remembered for reuse.
    pub fn remembered(&self) -> usize {
        self.previous.as_ref().map_or(0, |p| p.chunks.len())
    }

    /// Creates a checkpoint of `state` at `at` with `module`, building only the chunks that
    /// cannot be reused from the previous creation (all of them for a module whose chunks
    /// carry their proofs). The manifest is the one [`super::create`] makes of the same state.
    pub fn create(
        &mut self,
        module: &CheckpointModule,
        state: Arc<dyn StateLeaves>,
        at: BlockRef,
        options: CreateOptions,
    ) -> Result<IncrementalCheckpoint, CreateError> {
        let limits = ManifestLimits::default();
        let params = PlanParams {
            target_chunk_bytes: options.target_chunk_bytes,
        };
        let ranges = module.plan(state.clone(), params)?;
        let reusable = proofs_in_manifest(module);
        let storage: HashMap<(u64, u64), StorageId> = if reusable {
            state
                .storage()
                .into_iter()
                .map(|(start, end, id)| ((start, end), id))
                .collect()
        } else {
            HashMap::new()
        };
        let previous = self.previous.take().filter(|p| {
            reusable
                && p.module_hash == module.hash()
                && p.target_chunk_bytes == options.target_chunk_bytes
                && p.leaf_size == state.leaf_size()
        });
        let key = |range: &LeafRange| -> Option<ChunkKey> {
            let id = storage.get(&(range.start, range.end))?;
            Some((range.start, range.end, *id))
        };
        let mut entries: Vec<Option<ChunkEntry>> = Vec::with_capacity(ranges.len());
        let mut to_build: Vec<(usize, LeafRange)> = Vec::new();
        for (index, range) in ranges.iter().enumerate() {
            let known = previous
                .as_ref()
                .zip(key(range))
                .and_then(|(p, k)| p.chunks.get(&k));
            match known {
                Some(&(hash, size)) => entries.push(Some(ChunkEntry {
                    hash,
                    start: range.start,
                    end: range.end,
                    size,
                })),
                None => {
                    entries.push(None);
                    to_build.push((index, *range));
                }
            }
        }
        let reused = ranges.len().saturating_sub(to_build.len());
        let build_ranges: Vec<LeafRange> = to_build.iter().map(|(_, r)| *r).collect();
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let threads = worker_count(
            options,
            builds_in_parallel(module),
            build_ranges.len(),
            cores,
        );
        let built = if build_ranges.is_empty() {
            Vec::new()
        } else {
            build_all(
                module,
                &state,
                &build_ranges,
                threads,
                options.background,
                limits.max_chunk_bytes,
            )?
        };
        let mut built_chunks = Vec::with_capacity(built.len());
        for ((index, range), (bytes, hash)) in to_build.into_iter().zip(built) {
            if let Some(slot) = entries.get_mut(index) {
                *slot = Some(ChunkEntry {
                    hash,
                    start: range.start,
                    end: range.end,
                    // Checked against the cap in `build_one`.
                    size: u32::try_from(bytes.len()).unwrap_or(u32::MAX),
                });
            }
            built_chunks.push((index, bytes));
        }
        let entries: Vec<ChunkEntry> = entries.into_iter().flatten().collect();
        // The pending-deposit queue's chunks (a state holding one) are the host's, built every
        // time and listed after the registry's; unchanged bytes are stored once by hash.
        let queue = build_queue_chunks(state.as_ref(), options, limits.max_chunk_bytes)?;
        let mut queue_entries = Vec::with_capacity(queue.len());
        for (offset, (entry, bytes)) in queue.into_iter().enumerate() {
            queue_entries.push(entry);
            built_chunks.push((entries.len().saturating_add(offset), bytes));
        }
        let manifest =
            assemble_manifest(module, state.as_ref(), at, options, entries, queue_entries)?;
        if reusable {
            let chunks = ranges
                .iter()
                .zip(&manifest.chunks)
                .filter_map(|(range, entry)| Some((key(range)?, (entry.hash, entry.size))))
                .collect();
            self.previous = Some(Previous {
                _state: state,
                module_hash: module.hash(),
                target_chunk_bytes: options.target_chunk_bytes,
                leaf_size: manifest.leaf_size,
                chunks,
            });
        }
        Ok(IncrementalCheckpoint {
            manifest,
            built: built_chunks,
            reused,
        })
    }
}
