//! `deposits-v2`: batch-verifies a block's new-validator signatures with random blinding (done
//! by the host) and falls back to one-by-one checks when the batch fails.
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
pub struct DepositsV2;

impl Guest for DepositsV2 {
    fn describe() -> ModuleInfo {
        deposits_common::module_info(
            2,
            "process_deposit: proofs at the running index, one batch verification per block with fallback",
        )
    }

    fn process(ctx: BlockContext, deposits: Vec<Deposit>) -> Result<Processed, ProcessError> {
        deposits_common::process::process_batched(
            &mut deposits_common::wasm_host::WasmHost,
            &ctx,
            &deposits,
        )
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
deposits_common::export!(DepositsV2);
