//! `checkpoint-v1`: splits the state into fixed-size runs of leaves and encodes each run with its
//! range proof. Deterministic: the same state and parameters give the same bytes.
//!
//! Chunk format (all integers little-endian):
//! `"MNCK" | version u32 | start u64 | end u64 | leaf-size u32 | leaves | proof-len u32 | proof`.
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
pub const VERSION: u32 = 1;
/// Chunks never hold fewer leaves than this, whatever the target size.
pub const MIN_LEAVES_PER_CHUNK: u64 = 64;

/// The exported implementation.
pub struct CheckpointV1;

impl Guest for CheckpointV1 {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            kind: "checkpoint".into(),
            version: VERSION,
            description: "fixed-size leaf ranges, each with its range proof".into(),
            params: vec![
                ("format".into(), "MNCK/1".into()),
                (
                    "min-leaves-per-chunk".into(),
                    MIN_LEAVES_PER_CHUNK.to_string(),
                ),
            ],
        }
    }

    fn plan(leaf_count: u64, params: PlanParams) -> Vec<LeafRange> {
        let leaf_size = u64::from(state_reader::leaf_size()).max(1);
        let per_chunk = params
            .target_chunk_bytes
            .checked_div(leaf_size)
            .unwrap_or(0)
            .max(MIN_LEAVES_PER_CHUNK);
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
        let leaves = state_reader::read_leaves(range);
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
            leaves: decoded.leaves.concat(),
            proof: decoded.proof,
        })
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
bindings::export!(CheckpointV1 with_types_in bindings);
