//! `checkpoint-v3`: content-addressed, incremental checkpoints.
//!
//! Every chunk covers [`LEAVES_PER_CHUNK`] leaves starting at a multiple of it — a quarter of
//! one of the registry's 1,024-leaf storage chunks, a whole subtree of the registry tree — and
//! holds only those leaves, column-transformed and
//! compressed (see [`mod@format`]). It carries no range proof: a proof names every other leaf
//! through its siblings, so it would change whenever any leaf anywhere changed, and with it
//! the chunk's hash. Instead the manifest lists each chunk's subtree root (the registry tree's
//! node above the chunk's leaves), checked against the registry root before any fetch; the host
//! holds each chunk's leaves to its listed root (`describe` says so with
//! `chunk-proof = manifest-roots`). A chunk's bytes are then a pure function of its range and
//! leaves: a chunk no block touched keeps its bytes and hash from one checkpoint to the next,
//! so the host reuses it by hash instead of building it again, and a restorer holding an older
//! checkpoint fetches only the chunks whose hashes it lacks.
//!
//! Chunks are independent (`parallel-build = yes`). The exported interface is
//! `checkpoint-common`'s.
//!
//! # Why byte columns and lz4
//!
//! Measured on 204,800 synthetic validator leaves (129 bytes; the benchmark's state), each
//! 1,024-leaf chunk compressed on its own, native code, on a machine at load average 11-15:
//!
//! | layout  | codec   | ratio | compress MB/s | decompress MB/s |
//! |---------|---------|-------|---------------|-----------------|
//! | rows    | lz4     | 1.555 | 71-85         | 520-750         |
//! | rows    | zstd -1 | 1.717 | 32            | 130-160         |
//! | rows    | zstd -3 | 1.741 | 15            | 180             |
//! | rows    | zstd -9 | 1.801 | 4             | 120-130         |
//! | columns | lz4     | 1.865 | 630           | 925-1,150       |
//! | columns | zstd -1 | 1.870 | 41-57         | 440-470         |
//! | columns | zstd -3 | 1.886 | 129           | 475-490         |
//! | columns | zstd -9 | 1.892 | 17-19         | 476             |
//!
//! In byte columns the constant and slowly changing fields become runs, so lz4 comes within
//! 1.5 % of zstd's best ratio at 5-35 times its speed, and is ~8 times faster than lz4 on
//! rows (which spends its time failing to find matches). No compression stores 1.0. zstd would
//! also need a C library or a young pure-Rust encoder inside the module; `lz4_flex` is already
//! the checkpoint-v2 dependency.
//!
//! # Fuel
//!
//! Instruction fuel stays on (it is engine-wide, one table in the genesis engine profile), and
//! a chunk is one call with the kind's whole budget — in effect a budget per chunk. Per
//! 256-leaf chunk (33 KB) v3 uses ~0.35 M fuel to build and ~0.23 M to open (v1: 0.20 M and
//! 0.21 M, v2: 1.41 M and 0.18 M) of a 2,000 M budget. What fuel did change is the code: a
//! byte-by-byte transposition cost ~17 fuel per byte, 8×8 blocks of `u64` words ~3 (build
//! 0.60 M, open 0.48 M per chunk), the 16×16 wasm SIMD blocks of [`mod@transpose`] under 1;
//! and a chunk lz4 cannot shrink is stored as rows so opening it is a copy.
//!
//! # Wasm SIMD
//!
//! The module uses wasm's fixed-width SIMD (integer byte shuffles only: no floats, nothing
//! relaxed, so the output is the same on every engine that validates it). Its native build
//! runs the same algorithm on byte arrays, and the host's tests hold the module's chunks to
//! the native encoding byte for byte.
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

pub mod format;
pub mod transpose;

use checkpoint_common::wire::Header;
use checkpoint_common::{ChunkFormat, Decoded, LeafRange, ModuleInfo, state_reader};

/// Leaves per chunk: a power of two, so every chunk but the last is one whole subtree of the
/// registry tree, and a quarter of the node's storage chunk (`state::chunked::CHUNK_LEN`).
///
/// Why not the whole storage chunk: a block that tops up one validator changes one leaf, and
/// the next checkpoint builds again every chunk holding a changed leaf. With validators topped
/// up at random, 100 blocks touch ~100 chunks whatever their size, so the chunk size sets what
/// an incremental checkpoint re-makes: at 2M validators ~5 % of 1,954 chunks of 1,024 leaves
/// (~13 MB to encode and hash), ~1.3 % of 7,813 chunks of 256 (~3.3 MB). Smaller chunks cost a
/// larger manifest (32 bytes of root per chunk) and compress slightly worse.
pub const LEAVES_PER_CHUNK: u64 = 256;

/// The version-3 chunker.
pub struct CheckpointV3;

impl ChunkFormat for CheckpointV3 {
    const VERSION: u32 = 3;

    fn describe() -> ModuleInfo {
        ModuleInfo {
            kind: "checkpoint".into(),
            version: Self::VERSION,
            description: "content-addressed 256-leaf chunks (registry subtrees), byte columns, lz4"
                .into(),
            params: vec![
                ("format".into(), "MNCK/3".into()),
                ("transform".into(), "byte-columns".into()),
                ("compression".into(), "lz4_flex-0.11-block".into()),
                ("leaves-per-chunk".into(), LEAVES_PER_CHUNK.to_string()),
                ("chunk-proof".into(), "manifest-roots".into()),
                ("parallel-build".into(), "yes".into()),
            ],
        }
    }

    /// Always [`LEAVES_PER_CHUNK`]: the chunks follow the state's storage, not a byte target.
    fn leaves_per_chunk(_target_chunk_bytes: u64, _leaf_size: u32) -> u64 {
        LEAVES_PER_CHUNK
    }

    fn build(range: LeafRange, leaf_size: u32) -> Result<Vec<u8>, String> {
        let leaves = state_reader::read_leaf_bytes(range);
        let header = Header {
            version: Self::VERSION,
            start: range.start,
            end: range.end,
            leaf_size,
        };
        format::encode(&header, &leaves)
    }

    fn decode(chunk: &[u8]) -> Result<Decoded, String> {
        format::decode(chunk)
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
checkpoint_common::export!(CheckpointV3);
