//! `checkpoint-v2`: splits the state into chunks of about `target-chunk-bytes` (leaves plus the
//! largest range proof), and compresses each chunk's leaves with lz4 inside the module.
//!
//! Every chunk depends only on its range, so the host builds chunks on several worker threads
//! (one module instance each) and the output is byte-identical whatever the thread count;
//! `describe` says so with `parallel-build = yes`. See [`format`] for the chunk layout.
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

#[allow(
    missing_docs,
    clippy::all,
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing
)]
mod bindings {
    wit_bindgen::generate!({
        path: ["../../../wit/types", "../../../wit/checkpoint"],
        world: "modnode:checkpoint/checkpoint",
        generate_all,
    });
}

pub mod format;

use bindings::exports::modnode::checkpoint::chunker::Guest;
use bindings::modnode::checkpoint::state_reader;
use bindings::modnode::checkpoint::types::{ChunkContents, ChunkError, LeafRange, PlanParams};
use bindings::modnode::types::types::ModuleInfo;

/// This algorithm's version, written into every chunk.
pub const VERSION: u32 = 2;
/// Chunks never hold fewer leaves than this, whatever the target size.
pub const MIN_LEAVES_PER_CHUNK: u64 = 16;

/// The exported implementation.
pub struct CheckpointV2;

impl Guest for CheckpointV2 {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            kind: "checkpoint".into(),
            version: VERSION,
            description: "byte-sized chunks, lz4-compressed leaves, independent chunks".into(),
            params: vec![
                ("format".into(), "MNCK/2".into()),
                ("compression".into(), "lz4_flex-0.11-block".into()),
                (
                    "min-leaves-per-chunk".into(),
                    MIN_LEAVES_PER_CHUNK.to_string(),
                ),
                ("parallel-build".into(), "yes".into()),
            ],
        }
    }

    fn plan(leaf_count: u64, params: PlanParams) -> Vec<LeafRange> {
        let per_chunk = format::leaves_per_chunk(
            params.target_chunk_bytes,
            state_reader::leaf_size(),
            MIN_LEAVES_PER_CHUNK,
        );
        format::plan(leaf_count, per_chunk)
            .into_iter()
            .map(|(start, end)| LeafRange { start, end })
            .collect()
    }

    fn build_chunk(range: LeafRange) -> Result<Vec<u8>, ChunkError> {
        let count = state_reader::leaf_count();
        if range.start >= range.end || range.end > count {
            return Err(ChunkError::OutOfRange(range));
        }
        let leaf_size = state_reader::leaf_size();
        let leaves = state_reader::read_leaf_bytes(range);
        let proof = state_reader::range_proof(range);
        format::encode(VERSION, range.start, range.end, leaf_size, &leaves, &proof)
            .map_err(ChunkError::Malformed)
    }

    fn open_chunk(chunk: Vec<u8>) -> Result<ChunkContents, ChunkError> {
        let decoded = format::decode(&chunk).map_err(ChunkError::Malformed)?;
        if decoded.version != VERSION {
            return Err(ChunkError::WrongVersion(decoded.version));
        }
        Ok(ChunkContents {
            range: LeafRange {
                start: decoded.start,
                end: decoded.end,
            },
            leaf_size: decoded.leaf_size,
            leaves: decoded.leaves,
            proof: decoded.proof,
        })
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
bindings::export!(CheckpointV2 with_types_in bindings);
