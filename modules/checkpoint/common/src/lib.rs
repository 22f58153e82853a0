//! What every `checkpoint-v*` module shares: the WIT bindings of `modnode:checkpoint`, the
//! chunk header and a bounds-checked byte reader ([`wire`]), the range planner, and the exported
//! `chunker` interface implemented once over a version's [`ChunkFormat`].
//!
//! A version supplies only what makes it that version — how many leaves a chunk holds, how a
//! chunk is built and decoded, how it describes itself — and exports with
//! `checkpoint_common::export!(TheFormat)`. Range checks, planning and the version check on
//! opening are here, so every version refuses bad input the same way.
//!
//! This is consensus-adjacent code (restorers verify what it produces): it never panics, never
//! indexes unchecked and never overflows.
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

pub mod wire;

/// Bindings generated from `wit/checkpoint` for the `checkpoint` world.
#[allow(
    missing_docs,
    clippy::all,
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing
)]
pub mod bindings {
    wit_bindgen::generate!({
        path: ["../../../wit/types", "../../../wit/checkpoint"],
        world: "modnode:checkpoint/checkpoint",
        pub_export_macro: true,
        default_bindings_module: "checkpoint_common::bindings",
        generate_all,
    });
}

pub use bindings::export;
pub use bindings::modnode::checkpoint::state_reader;
pub use bindings::modnode::checkpoint::types::{ChunkContents, ChunkError, LeafRange, PlanParams};
pub use bindings::modnode::types::types::ModuleInfo;
pub use wire::Decoded;

use bindings::exports::modnode::checkpoint::chunker::Guest;

/// What one chunking version decides; the exported interface is built from it.
pub trait ChunkFormat {
    /// The version written into, and required of, every chunk.
    const VERSION: u32;
    /// The module's self-description (its output-changing parameters included).
    fn describe() -> ModuleInfo;
    /// Leaves per chunk for a chunk of about `target_chunk_bytes` with leaves of `leaf_size`.
    fn leaves_per_chunk(target_chunk_bytes: u64, leaf_size: u32) -> u64;
    /// Builds the chunk of `range` (already checked to be non-empty and inside the state),
    /// reading the state through [`state_reader`].
    fn build(range: LeafRange, leaf_size: u32) -> Result<Vec<u8>, String>;
    /// Decodes a chunk of this format, checking every length.
    fn decode(chunk: &[u8]) -> Result<Decoded, String>;
}

impl<F: ChunkFormat> Guest for F {
    fn describe() -> ModuleInfo {
        F::describe()
    }

    fn plan(leaf_count: u64, params: PlanParams) -> Vec<LeafRange> {
        let per_chunk = F::leaves_per_chunk(params.target_chunk_bytes, state_reader::leaf_size());
        wire::plan(leaf_count, per_chunk)
            .into_iter()
            .map(|(start, end)| LeafRange { start, end })
            .collect()
    }

    fn build_chunk(range: LeafRange) -> Result<Vec<u8>, ChunkError> {
        if range.start >= range.end || range.end > state_reader::leaf_count() {
            return Err(ChunkError::OutOfRange(range));
        }
        F::build(range, state_reader::leaf_size()).map_err(ChunkError::Malformed)
    }

    fn open_chunk(chunk: Vec<u8>) -> Result<ChunkContents, ChunkError> {
        let decoded = F::decode(&chunk).map_err(ChunkError::Malformed)?;
        if decoded.header.version != F::VERSION {
            return Err(ChunkError::WrongVersion(decoded.header.version));
        }
        Ok(ChunkContents {
            range: LeafRange {
                start: decoded.header.start,
                end: decoded.header.end,
            },
            leaf_size: decoded.header.leaf_size,
            leaves: decoded.leaves,
            proof: decoded.proof,
        })
    }
}
