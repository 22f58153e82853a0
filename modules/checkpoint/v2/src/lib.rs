//! `checkpoint-v2`: splits the state into chunks of about `target-chunk-bytes` (leaves plus the
//! largest range proof), and compresses each chunk's leaves with lz4 inside the module.
//!
//! Every chunk depends only on its range, so the host builds chunks on several worker threads
//! (one module instance each) and the output is byte-identical whatever the thread count;
//! `describe` says so with `parallel-build = yes`. See [`format`] for the chunk layout; the
//! exported interface is `checkpoint-common`'s.
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
pub const MIN_LEAVES_PER_CHUNK: u64 = 16;

/// The version-2 chunker.
pub struct CheckpointV2;

impl ChunkFormat for CheckpointV2 {
    const VERSION: u32 = 2;

    fn describe() -> ModuleInfo {
        ModuleInfo {
            kind: "checkpoint".into(),
            version: Self::VERSION,
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

    fn leaves_per_chunk(target_chunk_bytes: u64, leaf_size: u32) -> u64 {
        format::leaves_per_chunk(target_chunk_bytes, leaf_size, MIN_LEAVES_PER_CHUNK)
    }

    fn build(range: LeafRange, leaf_size: u32) -> Result<Vec<u8>, String> {
        let leaves = state_reader::read_leaf_bytes(range);
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
checkpoint_common::export!(CheckpointV2);
