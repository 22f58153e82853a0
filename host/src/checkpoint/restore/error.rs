//! Why a restore refused a chunk or a manifest, and whose fault that is.

use super::*;

/// Who is to blame for a failed restore step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The peer that served the chunk: its bytes are not the ones the manifest lists. Penalise
    /// it and fetch the chunk elsewhere.
    ChunkPeer,
    /// Whoever produced the manifest: the listed bytes themselves are bad. Abandon the checkpoint.
    Manifest,
    /// The restoring side (a bug, a duplicate delivery, a call that failed on our side).
    Ours,
}

/// Why a chunk or the restore as a whole was refused. Each check has its own variant.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The manifest itself is refused.
    #[error("checkpoint manifest refused: {0}")]
    Manifest(#[from] ManifestError),
    /// No chunk has this index in the manifest.
    #[error("chunk {index} is not in the manifest ({count} chunks)")]
    UnknownChunk {
        /// The index asked for.
        index: usize,
        /// Chunks in the manifest.
        count: usize,
    },
    /// The chunk's bytes are not the listed size.
    #[error("chunk {index} is {size} bytes, the manifest lists {expected}")]
    WrongSize {
        /// The chunk.
        index: usize,
        /// Bytes received.
        size: usize,
        /// Bytes listed.
        expected: u32,
    },
    /// The chunk's bytes do not hash to the listed hash: altered or swapped in transit.
    #[error("chunk {index} is tampered: its hash is {found}, the manifest lists {expected}")]
    Tampered {
        /// The chunk.
        index: usize,
        /// Listed hash (hex).
        expected: String,
        /// Hash of the bytes received (hex).
        found: String,
    },
    /// The listed bytes are not a chunk of the manifest's version.
    #[error("chunk {index} does not open: {reason}")]
    Malformed {
        /// The chunk.
        index: usize,
        /// The module's reason.
        reason: String,
    },
    /// The chunk covers another leaf range than its manifest entry.
    #[error(
        "chunk {index} covers leaves [{found_start}, {found_end}), the manifest lists [{start}, {end})"
    )]
    WrongRange {
        /// The chunk.
        index: usize,
        /// Listed start.
        start: u64,
        /// Listed end.
        end: u64,
        /// Start in the chunk.
        found_start: u64,
        /// End in the chunk.
        found_end: u64,
    },
    /// The chunk's leaves are not `leaf_size` bytes each.
    #[error("chunk {index} holds {bytes} leaf bytes, not {count} leaves of {leaf_size} bytes")]
    LeafBytes {
        /// The chunk.
        index: usize,
        /// Leaf bytes in the chunk.
        bytes: usize,
        /// Leaves in its range.
        count: u64,
        /// The manifest's leaf size.
        leaf_size: u32,
    },
    /// The chunk's range proof does not prove its leaves against the registry root.
    #[error("chunk {index}: the range proof does not hold: {source}")]
    Proof {
        /// The chunk.
        index: usize,
        /// What failed.
        source: MerkleError,
    },
    /// Leaves already covered by a verified chunk arrived again.
    #[error("chunk {index} repeats leaves [{start}, {end}), already covered")]
    DuplicateRange {
        /// The chunk.
        index: usize,
        /// Its start.
        start: u64,
        /// Its end.
        end: u64,
    },
    /// The restore was finished with leaves still uncovered.
    #[error("{missing} chunks are missing, the first is chunk {first} (leaves [{start}, {end}))")]
    MissingChunks {
        /// Chunks not yet verified.
        missing: usize,
        /// The first of them.
        first: usize,
        /// Its start.
        start: u64,
        /// Its end.
        end: u64,
    },
    /// A proven leaf is not a valid validator record.
    #[error("leaf {leaf} is not a validator record: {reason}")]
    BadLeaf {
        /// The leaf's position.
        leaf: u64,
        /// What is wrong.
        reason: String,
    },
    /// The leaves cannot form a registry (e.g. a duplicate pubkey).
    #[error("the restored leaves do not form a registry: {0}")]
    Registry(#[from] StateError),
    /// The proven queue entries do not form the manifest's queue.
    #[error("the restored pending-deposit queue entries do not form a queue: {0}")]
    Queue(String),
    /// The rebuilt state's root is not the manifest's.
    #[error("the rebuilt state root is {computed}, the manifest's is {expected}")]
    RootMismatch {
        /// Rebuilt root (hex).
        computed: String,
        /// Manifest root (hex).
        expected: String,
    },
    /// A module call failed on our side.
    #[error("opening a chunk failed on this node: {0}")]
    Call(#[from] CallError),
    /// Storing progress or starting threads failed on this node.
    #[error("restoring on this node failed: {0}")]
    Local(String),
}

impl RestoreError {
    /// Who is to blame.
    pub fn fault(&self) -> Fault {
        match self {
            Self::WrongSize { .. } | Self::Tampered { .. } => Fault::ChunkPeer,
            // The registry's own invariant broken while assembling it: a bug here, whatever
            // the leaves (a peer is banned for a manifest's fault).
            Self::Registry(StateError::Index(
                crate::state::pubkey_index::IndexError::Internal(_),
            )) => Fault::Ours,
            Self::Manifest(_)
            | Self::Malformed { .. }
            | Self::WrongRange { .. }
            | Self::LeafBytes { .. }
            | Self::Proof { .. }
            | Self::BadLeaf { .. }
            | Self::Registry(_)
            | Self::Queue(_)
            | Self::RootMismatch { .. } => Fault::Manifest,
            Self::UnknownChunk { .. }
            | Self::DuplicateRange { .. }
            | Self::MissingChunks { .. }
            | Self::Call(_)
            | Self::Local(_) => Fault::Ours,
        }
    }
}
