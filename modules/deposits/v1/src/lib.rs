//! `deposits-v1`: verifies each new validator's proof of possession on its own.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]

use deposits_common::bindings::exports::modnode::deposits::processor::Guest;
use deposits_common::{BlockContext, Deposit, ModuleInfo, ProcessError, Processed};

/// The exported implementation.
pub struct DepositsV1;

impl Guest for DepositsV1 {
    fn describe() -> ModuleInfo {
        deposits_common::module_info(
            1,
            "process_deposit: proofs at the running index, one signature verification per new validator",
        )
    }

    fn process(ctx: BlockContext, deposits: Vec<Deposit>) -> Result<Processed, ProcessError> {
        deposits_common::process::process_one_by_one(
            &mut deposits_common::wasm_host::WasmHost,
            &ctx,
            &deposits,
        )
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
deposits_common::export!(DepositsV1);
