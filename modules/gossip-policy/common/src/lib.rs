//! Gossip policies as pure functions, shared by the `gossip-policy-v*` guest modules (which wrap
//! them in the WIT world) and the host's gossip engine and simulator (which run them natively
//! to design and test them).
//!
//! - [`policy`]: the WIT types mirrored in Rust, the [`policy::Policy`] trait, and
//!   [`policy::Flood`] (version 1).
//! - [`policy_v2`]: version 2 — push to a few well-placed peers, announce to the rest.
//! - [`policy_v3`]: version 3 — a self-repairing spreading tree (PlumTree), stateful.
//! - [`guest`]: WIT bindings and conversions, so a guest module is a [`policy::Policy`] plus
//!   `describe`.
#![deny(missing_docs)]

pub mod guest;
pub mod policy;
pub mod policy_v2;
// Not in the crate's wasm build: `gossip-policy-v1` and `-v2` link this crate, and more code in
// their link changes their bytes (fat LTO decides differently), which must not change — their
// hashes are pinned. The `gossip-policy-v3` module compiles this same file into itself
// (`#[path]`), so the module and the simulator run one algorithm.
#[cfg(not(target_arch = "wasm32"))]
pub mod policy_v3;

extern crate self as gossip_policy_common;

/// Opaque handle of a connected peer (the `peer` field of the WIT `peer-stats`).
pub type PeerId = u32;
