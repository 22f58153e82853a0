//! Serving checkpoints to peers, sans-IO: the answers to a checkpoint list request and a chunk
//! request, from the node's [`CheckpointStore`]. Every stored checkpoint is served, whatever
//! module version made it, so a node offers v1 and v2 checkpoints side by side. Answers are
//! bounded: at most [`MAX_CHECKPOINTS_PER_ANSWER`] manifests, and nothing that would not fit
//! one frame. An unknown checkpoint or chunk is an ordinary "not here" answer: the requester
//! may have learned of it from another peer, or this node may have pruned it since. Only
//! checkpoints at or below this node's finalized height are listed: a restorer cannot undo its
//! base block, so a checkpoint a reorganisation could still revert is never offered (this
//! node makes none, but its store may hold one made by an older version).

use std::sync::atomic::{AtomicU64, Ordering};

use super::service::{CheckpointServiceError, CheckpointStore};
use crate::state::merkle::Hash32;

/// Most manifests a checkpoint list answer carries (a node keeps a few checkpoints). The wire
/// format (`net::rpc`, which re-exports it) refuses a longer list from a peer.
pub const MAX_CHECKPOINTS_PER_ANSWER: usize = 8;

/// Bytes of a frame's answer that are not the payload itself (flag, length, count).
const ANSWER_OVERHEAD: usize = 16;

/// What this node served, for `/metrics`.
#[derive(Debug, Default)]
pub struct ServeCounters {
    /// Checkpoint list requests answered.
    pub lists: AtomicU64,
    /// Chunks sent.
    pub chunks: AtomicU64,
    /// Chunk bytes sent.
    pub bytes: AtomicU64,
    /// Chunk requests answered "not here".
    pub not_found: AtomicU64,
}

/// Answers peers' checkpoint requests from a [`CheckpointStore`].
#[derive(Debug, Clone)]
pub struct CheckpointServer {
    store: CheckpointStore,
    max_answer_bytes: usize,
}

impl CheckpointServer {
    /// Serves `store`; no answer is larger than `max_answer_bytes` (the frame limit).
    pub fn new(store: CheckpointStore, max_answer_bytes: usize) -> Self {
        Self {
            store,
            max_answer_bytes,
        }
    }

    /// The stored manifests at or below `finalized` (this node's finalized height), encoded,
    /// newest first: at most [`MAX_CHECKPOINTS_PER_ANSWER`], and only as many as fit one answer
    /// together.
    pub fn list(
        &self,
        counters: &ServeCounters,
        finalized: u64,
    ) -> Result<Vec<Vec<u8>>, CheckpointServiceError> {
        let mut budget = self.max_answer_bytes.saturating_sub(ANSWER_OVERHEAD);
        let mut out = Vec::new();
        for manifest in self.store.list()? {
            if manifest.height > finalized {
                continue;
            }
            if out.len() >= MAX_CHECKPOINTS_PER_ANSWER {
                break;
            }
            let encoded = manifest.encode();
            let cost = encoded.len().saturating_add(4);
            if cost > budget {
                continue;
            }
            budget = budget.saturating_sub(cost);
            out.push(encoded);
        }
        counters.lists.fetch_add(1, Ordering::Relaxed);
        Ok(out)
    }

    /// Chunk `index` of checkpoint `id`, or `None` when this node does not have it (or it
    /// would not fit one answer).
    pub fn chunk(
        &self,
        id: &Hash32,
        index: u32,
        counters: &ServeCounters,
    ) -> Result<Option<Vec<u8>>, CheckpointServiceError> {
        let found = match usize::try_from(index) {
            Ok(index) => self.store.chunk(id, index)?,
            Err(_) => None,
        }
        .filter(|bytes| bytes.len().saturating_add(ANSWER_OVERHEAD) <= self.max_answer_bytes);
        match &found {
            Some(bytes) => {
                counters.chunks.fetch_add(1, Ordering::Relaxed);
                counters.bytes.fetch_add(
                    u64::try_from(bytes.len()).unwrap_or(u64::MAX),
                    Ordering::Relaxed,
                );
            }
            None => {
                counters.not_found.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(found)
    }
}
