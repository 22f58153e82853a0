//! Checkpoints of the full state at a height: versioned chunking modules, provable
//! chunks and a restorer that verifies each chunk on arrival.
//!
//! - [`manifest`]: the manifest (module hash, version, every output-changing parameter, the
//!   block, the roots, the leaf count, the non-leaf state parts, the ordered chunk list), its
//!   canonical encoding, id and validation before anything is fetched.
//! - [`leaves`]: the immutable state a checkpoint is made from ([`StateLeaves`]).
//! - [`create`]: planning and building the chunks with a checkpoint module, in parallel for
//!   versions whose chunks are independent, byte-identical for any thread count.
//! - [`restore`]: the sans-IO restorer: per-chunk size, hash, range and Merkle range-proof
//!   checks, coverage by leaf index, and the final rebuilt-root check; [`verify_all`] verifies
//!   on several threads.
//! - [`pipeline`]: restore as a pipeline — chunks verified on worker threads as they arrive,
//!   written in batches, each reported once durable; bounded end to end, so a slow disk backs
//!   up the fetching.
//! - [`queue`]: deposits@3's pending-deposit queue in a checkpoint — host-made chunks of queue
//!   entries with range proofs against the queue's tree, and the manifest's queue part (tree
//!   root and counters) from which, with the registry root and the extras, the state root
//!   follows (manifest format 3).
//! - [`roots`]: checkpoint-v3's chunk roots: chunks that carry no range proof (so an
//!   unchanged chunk keeps its bytes and hash from one checkpoint to the next) are proven
//!   against the registry root through the subtree roots their manifest lists.
//! - [`incremental`]: checkpoint-v3 creation that reuses, by the identity of the registry's
//!   copy-on-write storage chunks, every chunk unchanged since the previous checkpoint.
//! - [`carry`]: which verified chunks carry over when a restore switches to another
//!   checkpoint (bytes the new manifest lists that verify against it), sans-IO.
//! - [`file`]: a checkpoint in one file (header, manifest, block `H`, chunks) for
//!   `modnode checkpoint export` and `modnode run --restore-from`; read back, it is verified
//!   by the same [`Restorer`] as chunks from peers.
//! - [`fetch`]: choosing the checkpoint offered by enough peers and scheduling chunk fetches
//!   across them (adaptive timeouts, a slow peer's share shrinking, a corrupt peer dropped),
//!   sans-IO; `node/network/checkpoint_restore.rs` drives it over QUIC.
//! - [`service`]: creation in a running node (every `interval` blocks and on demand, in the
//!   background, the `keep` newest stored).
//! - [`serve`]: the answers to peers' checkpoint list and chunk requests (every stored
//!   version, bounded).
//! - [`store`]: durable restore progress (the manifest and each verified chunk's record in
//!   sled, the chunks' bytes in an append-only log), so a restart resumes without fetching
//!   verified chunks again.
//!
//! A chunk is a contiguous range of state leaves (validator record and balance) with a range
//! proof against the registry root, or — for a state holding deposits@3's queue — a contiguous
//! range of queue entries with a range proof against the queue's tree; the eth1 state, the
//! schedule and the queue's counters travel in the manifest, so the restorer recomputes the
//! full state root.

mod assembly;
pub mod carry;
pub mod create;
pub mod fetch;
pub mod file;
pub mod incremental;
pub mod leaves;
pub mod manifest;
pub mod pipeline;
pub mod queue;
pub mod restore;
pub mod roots;
pub mod serve;
pub mod service;
pub mod store;

pub use carry::{CarriedOver, carry_over, listed_chunks};
pub use create::{BlockRef, Checkpoint, CreateError, CreateOptions, create};
pub use fetch::{ChunkRequest, FetchConfig, FetchError, Fetcher, Penalty, choose, final_offers};
pub use incremental::{IncrementalCheckpoint, IncrementalCreator};
pub use leaves::StateLeaves;
#[cfg(any(test, feature = "test-utils"))]
pub use leaves::synthetic_state;
pub use manifest::{ChunkEntry, Manifest, ManifestError, ManifestLimits};
pub use pipeline::{ChunkSink, NoSink, Outcome, Pipeline, PipelineConfig, SubmitError};
pub use queue::QueuePart;
pub use restore::{
    ChunkOpener, ChunkVerifier, Fault, Progress, RestoreError, RestoredState, Restorer,
    VerifiedChunk, verify_all,
};
pub use serve::{CheckpointServer, MAX_CHECKPOINTS_PER_ANSWER, ServeCounters};
pub use service::{
    CheckpointConfig, CheckpointServiceError, CheckpointStore, CheckpointSummary, Checkpointer,
    CreatorThread, FrozenState, checkpoint_height, checkpoint_height_at,
};
pub use store::{RestoreStore, RestoreStoreError};
