//! Incremental creation: a checkpoint that costs what changed since the previous one.
//!
//! With a module whose chunks carry no range proof (checkpoint-v3, `chunk-proof =
//! manifest-roots`) a chunk's bytes are a pure function of its leaf range and its leaves, and
//! its chunks are whole subtrees of the registry tree. [`IncrementalCreator`] remembers every
//! chunk it listed by its range and its subtree root — the registry tree's node above the
//! chunk's leaves, read from the tree the state keeps up to date, not hashed — and lists a
//! chunk whose range and root are unchanged with the remembered hash and size, without
//! reading, encoding or hashing its leaves. Only the other chunks are built by the module.
//!
//! Why the subtree root is a safe key: equal roots over equal ranges mean equal leaves (the
//! tree is sha256), so the chunk's bytes are the ones built last time. Nothing about where the
//! leaves sit in memory is assumed, so a chunk smaller than the state's storage chunk is
//! reused as soon as its own leaves are unchanged, whatever else its storage chunk holds. The
//! module, its parameters and the leaf size are part of the key too: a change of any of them
//! rebuilds everything.

use std::sync::Arc;

use super::create::{
    BlockRef, CreateError, CreateOptions, assemble_manifest, build_all, build_queue_chunks,
    builds_in_parallel, proofs_in_manifest, worker_count,
};
use super::leaves::StateLeaves;
use super::manifest::{ChunkEntry, Manifest, ManifestLimits};
use crate::chunk::{LeafRange, PlanParams};
use crate::runtime::checkpoint::CheckpointModule;
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

/// A chunk of the previous checkpoint, remembered at its position in the tiling: its leaf
/// range, its subtree root, and the hash and size it was listed with.
#[derive(Clone, Copy)]
struct Remembered {
    start: u64,
    end: u64,
    root: Hash32,
    hash: Hash32,
    size: u32,
}

/// What was created last: every chunk by its position (chunks are whole subtrees of one
/// level, so the `i`-th chunk of any tiling at that level starts at leaf `i << level`).
struct Previous {
    module_hash: Hash32,
    target_chunk_bytes: u64,
    leaf_size: u32,
    level: usize,
    chunks: Vec<Remembered>,
}

impl Previous {
    /// The remembered hash and size of the chunk at `position` if it covered `range` at
    /// `level` with subtree root `root`: then its bytes are this chunk's.
    fn reusable(
        &self,
        level: usize,
        position: usize,
        range: &LeafRange,
        root: &Hash32,
    ) -> Option<(Hash32, u32)> {
        let r = self.chunks.get(position)?;
        (self.level == level && r.start == range.start && r.end == range.end && r.root == *root)
            .then_some((r.hash, r.size))
    }
}

/// Creates checkpoints one after another, each reusing the unchanged chunks of the one before
/// (see the module docs). Remembers one hash and size per chunk of the previous checkpoint.
#[derive(Default)]
pub struct IncrementalCreator {
    previous: Option<Previous>,
}

impl std::fmt::Debug for IncrementalCreator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IncrementalCreator")
            .field("remembered_chunks", &self.remembered())
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
        // The chunks' level in the registry tree; `None` (nothing reused) when the plan's
        // ranges are not whole subtrees of one size, which assembling the manifest refuses.
        let level = reusable
            .then(|| {
                let tiles: Vec<ChunkEntry> = ranges
                    .iter()
                    .map(|r| ChunkEntry {
                        hash: [0; 32],
                        start: r.start,
                        end: r.end,
                        size: 0,
                    })
                    .collect();
                super::roots::chunk_level(&tiles, state.leaf_count()).ok()
            })
            .flatten();
        let previous = self.previous.take().filter(|p| {
            reusable
                && p.module_hash == module.hash().0
                && p.target_chunk_bytes == options.target_chunk_bytes
                && p.leaf_size == state.leaf_size()
        });
        // Every chunk's subtree root, read once from the tree the state keeps (`None`: some
        // node is missing, nothing is reused and the manifest reads them again and says which).
        let roots: Option<(usize, Vec<Hash32>)> = level.and_then(|level| {
            (0u64..)
                .take(ranges.len())
                .map(|position| state.tree_node(level, position))
                .collect::<Option<Vec<_>>>()
                .map(|roots| (level, roots))
        });
        let mut entries: Vec<Option<ChunkEntry>> = Vec::with_capacity(ranges.len());
        let mut to_build: Vec<(usize, LeafRange)> = Vec::new();
        for (index, range) in ranges.iter().enumerate() {
            let known = previous
                .as_ref()
                .zip(roots.as_ref())
                .and_then(|(p, (level, roots))| {
                    p.reusable(*level, index, range, roots.get(index)?)
                });
            match known {
                Some((hash, size)) => entries.push(Some(ChunkEntry {
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
        let manifest = assemble_manifest(
            module,
            state.as_ref(),
            at,
            options,
            entries,
            queue_entries,
            roots.as_ref().map(|(_, roots)| roots.clone()),
        )?;
        if let Some((level, roots)) = roots.filter(|_| reusable) {
            let chunks = ranges
                .iter()
                .zip(&manifest.chunks)
                .zip(roots)
                .map(|((range, entry), root)| Remembered {
                    start: range.start,
                    end: range.end,
                    root,
                    hash: entry.hash,
                    size: entry.size,
                })
                .collect();
            self.previous = Some(Previous {
                module_hash: module.hash().0,
                target_chunk_bytes: options.target_chunk_bytes,
                leaf_size: manifest.leaf_size,
                level,
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
