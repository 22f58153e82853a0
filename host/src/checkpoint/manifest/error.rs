//! Why a manifest was refused: malformed, over a limit, or not matching what it claims.

use crate::hashes::{BlockHash, StateRoot};

use super::*;

/// Why a manifest is refused. Every variant is the fault of whoever produced the manifest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The bytes end inside a field.
    #[error("manifest truncated in {0}")]
    Truncated(&'static str),
    /// The bytes are not a manifest.
    #[error("not a checkpoint manifest (bad magic)")]
    BadMagic,
    /// An encoding version this node does not know.
    #[error(
        "manifest format {0} is not supported (expected {MANIFEST_FORMAT}, {MANIFEST_FORMAT_ROOTS} or {MANIFEST_FORMAT_QUEUE})"
    )]
    UnsupportedFormat(u8),
    /// Bytes after the last chunk.
    #[error("{0} trailing bytes after the manifest")]
    TrailingBytes(usize),
    /// More chunks than the limit.
    #[error("manifest lists {count} chunks, at most {max} are accepted")]
    TooManyChunks {
        /// Chunks listed.
        count: u64,
        /// The limit.
        max: usize,
    },
    /// More parameters than the limit, or one too long, or not UTF-8.
    #[error("manifest parameter {index} is refused: {reason}")]
    BadParam {
        /// Position of the parameter.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// The extras are larger than the limit.
    #[error("manifest extras are {size} bytes, at most {max} are accepted")]
    ExtrasTooLarge {
        /// Their size.
        size: u64,
        /// The limit.
        max: usize,
    },
    /// The extras are not an eth1 state and schedule encoding.
    #[error("manifest extras are not a valid eth1 state and module schedule")]
    ExtrasMalformed,
    /// A chunk is larger than the limit or empty.
    #[error("chunk {index} is {size} bytes, accepted sizes are 1..={max}")]
    ChunkSize {
        /// The chunk.
        index: usize,
        /// Its claimed size.
        size: u32,
        /// The limit.
        max: u32,
    },
    /// A chunk covers no leaf.
    #[error("chunk {index} has the empty range [{start}, {end})")]
    EmptyRange {
        /// The chunk.
        index: usize,
        /// Its start.
        start: u64,
        /// Its end.
        end: u64,
    },
    /// Leaves between two chunks (or before the first, or after the last) are in no chunk.
    #[error("the chunk ranges leave leaves [{from}, {to}) uncovered (before chunk {index})")]
    Gap {
        /// The chunk after the gap (the chunk count for a gap at the end).
        index: usize,
        /// First uncovered leaf.
        from: u64,
        /// One past the last uncovered leaf.
        to: u64,
    },
    /// A chunk starts inside the previous chunk's range.
    #[error(
        "chunk {index} starts at leaf {start}, inside the previous chunk which ends at {previous_end}"
    )]
    Overlap {
        /// The chunk.
        index: usize,
        /// Its start.
        start: u64,
        /// The previous chunk's end.
        previous_end: u64,
    },
    /// A chunk ends past the last leaf.
    #[error("chunk {index} ends at leaf {end}, past the {leaf_count} leaves of the state")]
    PastEnd {
        /// The chunk.
        index: usize,
        /// Its end.
        end: u64,
        /// The state's leaves.
        leaf_count: u64,
    },
    /// The chunk roots are not whole subtrees of the registry tree leading to its root.
    #[error("manifest chunk roots refused: {0}")]
    ChunkRoots(String),
    /// The pending-deposit queue's part or chunk list is malformed.
    #[error("manifest pending-deposit queue refused: {0}")]
    Queue(String),
    /// The state root does not follow from the registry root, the extras and the queue's
    /// root and counters: the producer's fault (for a manifest without a queue, possibly one
    /// made by a node that does not checkpoint deposits@3's queue, of a state that holds one).
    #[error("{0}")]
    StateRoot(Box<StateRootMismatch>),
}

/// A manifest's state root that does not follow from its parts (boxed in
/// [`ManifestError::StateRoot`]: three hashes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "manifest of block {block} at height {height}: state root {claimed} is not the root of {} ({computed}){}",
    state_root_parts(self.with_queue),
    state_root_hint(self.with_queue)
)]
pub struct StateRootMismatch {
    /// The checkpointed block's height.
    pub height: u64,
    /// The checkpointed block.
    pub block: BlockHash,
    /// Root in the manifest.
    pub claimed: StateRoot,
    /// Root computed from its parts.
    pub computed: StateRoot,
    /// Whether the manifest carries a pending-deposit queue.
    pub with_queue: bool,
}

/// What [`ManifestError::StateRoot`] computed the state root from.
fn state_root_parts(with_queue: bool) -> &'static str {
    if with_queue {
        "its registry root, extras and pending-deposit queue root and counters"
    } else {
        "its registry root and extras"
    }
}

/// What the producer of a manifest refused by [`ManifestError::StateRoot`] may have done wrong.
fn state_root_hint(with_queue: bool) -> &'static str {
    if with_queue {
        ""
    } else {
        "; the manifest carries no pending-deposit queue: if the state at this height holds \
         deposits@3's queue, it was made by a node that does not checkpoint the queue (a \
         format-3 manifest is needed)"
    }
}
