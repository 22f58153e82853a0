//! Checkpoint chunking's own types, below the runtime so the checkpoint modules' host side can
//! convert to them: a range of state leaves, what a planner is asked, what a chunk holds once
//! opened and why a chunk could not be built or opened. The runtime converts to and from the
//! modules' WIT types at the call; nothing above it sees those.
//!
//! They show (`Debug`) as the WIT types did: a refused chunk's reason reaches errors and
//! upgrade-check's report in that form.

use std::fmt;

/// A half-open range of state leaves, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafRange {
    /// First leaf.
    pub start: u64,
    /// One past the last leaf.
    pub end: u64,
}

/// What a checkpoint module's planner is asked to respect.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PlanParams {
    /// Preferred chunk size in bytes (a hint; versions document what they do with it).
    pub target_chunk_bytes: u64,
}

impl fmt::Debug for PlanParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PlanParams")
            .field("target-chunk-bytes", &self.target_chunk_bytes)
            .finish()
    }
}

/// What a chunk holds, as its module decodes it; the caller verifies the proof.
#[derive(Clone, PartialEq, Eq)]
pub struct ChunkContents {
    /// The leaf range this chunk covers.
    pub range: LeafRange,
    /// Bytes of each leaf.
    pub leaf_size: u32,
    /// The leaves, in order, concatenated: `(range.end - range.start) * leaf_size` bytes.
    pub leaves: Vec<u8>,
    /// Range proof of `leaves` against the state root (empty when the chunk carries none).
    pub proof: Vec<u8>,
}

impl fmt::Debug for ChunkContents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkContents")
            .field("range", &self.range)
            .field("leaf-size", &self.leaf_size)
            .field("leaves", &self.leaves)
            .field("proof", &self.proof)
            .finish()
    }
}

/// Why a chunk could not be built or opened.
#[derive(Clone, PartialEq, Eq)]
pub enum ChunkError {
    /// The bytes are not a chunk of this version; says what is wrong.
    Malformed(String),
    /// The chunk was made by another version.
    WrongVersion(u32),
    /// A requested range lies outside the state.
    OutOfRange(LeafRange),
}

impl fmt::Debug for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(e) => f.debug_tuple("ChunkError::Malformed").field(e).finish(),
            Self::WrongVersion(e) => f.debug_tuple("ChunkError::WrongVersion").field(e).finish(),
            Self::OutOfRange(e) => f.debug_tuple("ChunkError::OutOfRange").field(e).finish(),
        }
    }
}

/// As the WIT type's: its `Debug`.
impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for ChunkError {}
