//! `checkpoint-v1`: splits the state into fixed-size runs of leaves and encodes each run with its
//! range proof, uncompressed. Deterministic: the same state and parameters give the same bytes.
//! See [`format`] for the chunk layout; the exported interface is `checkpoint-common`'s.
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

pub mod format;

use checkpoint_common::wire::Header;
use checkpoint_common::{ChunkFormat, Decoded, LeafRange, ModuleInfo, state_reader};

/// Chunks never hold fewer leaves than this, whatever the target size.
pub const MIN_LEAVES_PER_CHUNK: u64 = 64;

/// The version-1 chunker.
pub struct CheckpointV1;

impl ChunkFormat for CheckpointV1 {
    const VERSION: u32 = 1;

    fn describe() -> ModuleInfo {
        ModuleInfo {
            kind: "checkpoint".into(),
            version: Self::VERSION,
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

    fn leaves_per_chunk(target_chunk_bytes: u64, leaf_size: u32) -> u64 {
        target_chunk_bytes
            .checked_div(u64::from(leaf_size).max(1))
            .unwrap_or(0)
            .max(MIN_LEAVES_PER_CHUNK)
    }

    fn build(range: LeafRange, leaf_size: u32) -> Result<Vec<u8>, String> {
        // Leaf by leaf, as version 1 always read them.
        let leaves = state_reader::read_leaves(range);
        let proof = state_reader::range_proof(range);
        let header = Header {
            version: Self::VERSION,
            start: range.start,
            end: range.end,
            leaf_size,
        };
        format::encode(&header, &leaves, &proof)
    }

    fn decode(chunk: &[u8]) -> Result<Decoded, String> {
        format::decode(chunk)
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
checkpoint_common::export!(CheckpointV1);
