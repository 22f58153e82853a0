//! modnode: a blockchain node whose algorithms are WebAssembly components.
//!
//! The host owns everything that touches the outside world or must be trusted — storage, the
//! state, cryptography — and loads WIT-described components that decide *how*: deposit
//! processing, checkpoint chunking, gossip policy. `ARCHITECTURE.md` at the repository root maps
//! the crates and how blocks, messages and modules flow through them.
//!
//! - [`admin`]: the localhost admin HTTP API (status, metrics, deposit submission).
//! - [`node`]: the node itself: chain worker, peers, sync, gossip and block production.
//! - [`deposit_source`]: the deposit contract an authority follows, and the proofs it needs.
//! - [`chain`]: blocks, genesis, block import with atomic durable commits.
//! - [`runtime`]: the sandboxed, deterministic wasmtime runtime, one host module per WIT world.
//! - [`net`]: QUIC transport with mutually authenticated TLS 1.3 and message framing.
//! - [`clock`]: the one wall clock and the one rule for blocks from slots not yet started.
//! - [`files`]: crash-safe writes of small private files (node key, admin token).
//! - [`hashes`]: one type per kind of 32-byte hash (block, state root, module).
//! - [`http_server`]: HTTP/1.1 serving with bounded connections, the slowest evicted to make
//!   room (the admin API and the dev deposit contract's endpoint).
//! - [`crypto`]: BLS12-381 verification (blst) offered to modules, and the ed25519 node id.
//! - [`deposit`]: the chain's own deposit types (a proven deposit, a block's deposits call's
//!   context, outcomes and rejections), below the runtime that converts to them.
//! - [`state`]: the validator registry, pubkey index, state tree and the per-call overlay.
//! - [`state_cache`]: immutable states of recent blocks within a byte budget, regenerated on demand.
//! - [`alloc_stats`]: allocator-reported live bytes and RSS, next to what the cache accounts.
//! - [`store`]: durable storage (sled) behind a small trait, with an in-memory twin.
//! - [`upgrade_check`]: runs two versions of a module side by side on generated inputs.
//! - [`testnet`]: a fault-injecting relay, invariant checkers and reports for multi-process testnets.
//!
//! The `test-utils` feature (on by default, because the binary's `modnode bench` needs it; off
//! for the library as a workspace dependency) adds the code that exists only for tests and
//! benchmarks: the native deposits reference, generated deposit logs and states, the dev
//! contract's reorg hook. `ARCHITECTURE.md` ("Test and bench code") says what is in it and why.
#![deny(missing_docs)]
// Consensus code lives in this crate: no panics, no unchecked indexing or arithmetic outside
// tests (as lighthouse's `state_processing`). Arithmetic is checked and names what overflowed;
// it saturates only where that is the meaning (timers, metrics).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]

pub mod admin;
pub mod alloc_stats;
pub mod chain;
pub mod checkpoint;
pub mod chunk;
pub mod clock;
pub mod consensus;
pub mod crypto;
pub mod deposit;
pub mod deposit_source;
pub mod files;
pub mod hashes;
pub mod http_server;
pub mod kind;
pub mod log_span;
pub mod modules_store;
pub mod net;
pub mod node;
pub mod progress;
pub mod runtime;
pub mod state;
pub mod state_cache;
pub mod store;
pub mod testnet;
pub mod thread_priority;
pub mod upgrade_check;

/// Build artifacts produced by `build.rs`: every module component, and the default ones
/// embedded in the binary.
pub mod artifacts {
    include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));

    /// The embedded component with this artifact name, e.g. `deposits-v1`.
    pub fn embedded(name: &str) -> Option<&'static [u8]> {
        EMBEDDED
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, bytes)| *bytes)
    }

    /// Path of an artifact (fixture or not) in [`MODULES_DIR`].
    pub fn path(name: &str) -> std::path::PathBuf {
        std::path::Path::new(MODULES_DIR).join(format!("{name}.wasm"))
    }
}
