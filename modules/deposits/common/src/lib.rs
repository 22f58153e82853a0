//! Deposit processing shared by every `deposits-v*` module: the WIT bindings, the SSZ signing
//! root of a deposit message, the deposit contract's Merkle tree (also used by the host), and
//! the two processing algorithms (one-by-one and batched).
//!
//! Semantics are Ethereum phase0 `process_deposit`: each deposit's proof must verify against the
//! agreed deposit root at the running `eth1_deposit_index` (else the block is invalid), then
//! `apply_deposit`: an unknown pubkey needs a valid proof of possession and becomes a new
//! validator; a known pubkey is topped up with no signature check; an invalid signature skips
//! the deposit and the block stays valid. Lookups see validators added earlier in the same block.
//!
//! This is consensus code: it never panics, never indexes unchecked and never overflows.
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

pub mod electra;
pub mod process;
pub mod ssz;
pub mod tree;
pub mod wasm_host;

/// Bindings generated from `wit/deposits` for the `deposits` world.
#[allow(
    missing_docs,
    clippy::all,
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing
)]
pub mod bindings {
    wit_bindgen::generate!({
        path: ["../../../wit/types", "../../../wit/deposits"],
        world: "modnode:deposits/deposits",
        pub_export_macro: true,
        default_bindings_module: "deposits_common::bindings",
        generate_all,
        additional_derives: [PartialEq, Eq],
    });
}

pub use bindings::export;
pub use bindings::modnode::deposits::types::{
    BlockContext, Deposit, Eth1Data, Outcome, ProcessError, Processed, RegistryError, SignatureSet,
};
pub use bindings::modnode::types::types::ModuleInfo;

/// What `registry.index-of` returns for an unknown pubkey.
pub const NOT_FOUND: u32 = u32::MAX;

/// Gwei in one ETH.
pub const GWEI_PER_ETH: u64 = 1_000_000_000;
/// `MAX_EFFECTIVE_BALANCE` (phase0): 32 ETH.
pub const MAX_EFFECTIVE_BALANCE: u64 = 32 * GWEI_PER_ETH;
/// `EFFECTIVE_BALANCE_INCREMENT` (phase0): 1 ETH.
pub const EFFECTIVE_BALANCE_INCREMENT: u64 = GWEI_PER_ETH;
/// `DOMAIN_DEPOSIT`.
pub const DOMAIN_DEPOSIT: [u8; 4] = [3, 0, 0, 0];

/// Effective balance of a new validator: `min(amount - amount % 1 ETH, 32 ETH)`.
pub fn effective_balance(amount: u64) -> u64 {
    let remainder = amount.checked_rem(EFFECTIVE_BALANCE_INCREMENT).unwrap_or(0);
    amount.saturating_sub(remainder).min(MAX_EFFECTIVE_BALANCE)
}

/// The `ModuleInfo` every deposits version reports.
pub fn module_info(version: u32, description: &str) -> ModuleInfo {
    ModuleInfo {
        kind: "deposits".to_string(),
        version,
        description: description.to_string(),
        params: vec![
            (
                "max-effective-balance".into(),
                MAX_EFFECTIVE_BALANCE.to_string(),
            ),
            ("domain-deposit".into(), "0x03000000".into()),
        ],
    }
}
