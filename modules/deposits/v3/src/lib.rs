//! `deposits-v3`: Electra deposit processing (`modnode:deposits@3.0.0`). A block's deposits are
//! proven at the running deposit index and queued, new validators and top-ups alike
//! (`process_deposit_request`); at each epoch boundary the host calls `process-epoch`, which
//! applies at most 16 finalized entries from the front of the host's queue within the
//! activation churn limit (`process_pending_deposits`, `apply_pending_deposit`; 2048-ETH
//! effective balance for `0x02` compounding credentials, 32 ETH otherwise).
//!
//! The logic is `deposits_common::electra`, which also documents what modnode does not model:
//! exits, withdrawals and slashing (no validator is ever exiting or withdrawn, so no deposit is
//! postponed), effective-balance updates after top-ups, and the eth1-bridge-to-requests
//! transition. Finality is by height: an entry queued at height `h` is final at `h +
//! finality_depth`.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]

/// Bindings generated from `wit/deposits-3` for the `deposits` world.
#[allow(
    missing_docs,
    clippy::all,
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing
)]
mod bindings {
    wit_bindgen::generate!({
        path: ["../../../wit/types", "../../../wit/deposits-3"],
        world: "modnode:deposits/deposits",
        generate_all,
    });
}

mod host;

use bindings::exports::modnode::deposits::processor::Guest;
use bindings::modnode::deposits::types::{
    BlockContext, Deposit, EpochContext, EpochProcessed, Outcome, ProcessError, QueueError, Queued,
    RegistryError,
};
use bindings::modnode::types::types::ModuleInfo;
use deposits_common::electra::{self, Applied};

/// The exported implementation.
pub struct DepositsV3;

fn registry_error(e: deposits_common::RegistryError) -> RegistryError {
    use deposits_common::RegistryError as C;
    match e {
        C::DuplicatePubkey => RegistryError::DuplicatePubkey,
        C::BadLength(f) => RegistryError::BadLength(f),
        C::UnknownIndex(i) => RegistryError::UnknownIndex(i),
        C::BalanceOverflow(i) => RegistryError::BalanceOverflow(i),
        C::RegistryFull => RegistryError::RegistryFull,
    }
}

fn process_error(e: electra::Error) -> ProcessError {
    use deposits_common::ProcessError as C;
    match e {
        electra::Error::Process(C::Malformed(m)) => ProcessError::Malformed(m),
        electra::Error::Process(C::Registry(r)) => ProcessError::Registry(registry_error(r)),
        electra::Error::Process(C::BadContext(m)) => ProcessError::BadContext(m),
        electra::Error::Process(C::BadProof(i)) => ProcessError::BadProof(i),
        electra::Error::Queue(electra::QueueError::Full) => ProcessError::Queue(QueueError::Full),
        electra::Error::Queue(electra::QueueError::Short { wanted, len }) => {
            ProcessError::Queue(QueueError::Short((wanted, len)))
        }
        electra::Error::Overflow(what) => ProcessError::Overflow(what.to_string()),
    }
}

impl Guest for DepositsV3 {
    fn describe() -> ModuleInfo {
        let info = deposits_common::module_info(
            3,
            "Electra: deposits queued per block, process_pending_deposits per epoch under the activation churn limit",
        );
        let mut params = info.params;
        params.push((
            "max-effective-balance-electra".into(),
            electra::MAX_EFFECTIVE_BALANCE_ELECTRA.to_string(),
        ));
        params.push((
            "max-pending-deposits-per-epoch".into(),
            electra::MAX_PENDING_DEPOSITS_PER_EPOCH.to_string(),
        ));
        ModuleInfo {
            kind: info.kind,
            version: info.version,
            description: info.description,
            params,
        }
    }

    fn process(ctx: BlockContext, deposits: Vec<Deposit>) -> Result<Queued, ProcessError> {
        let ctx = deposits_common::BlockContext {
            height: ctx.height,
            slot: ctx.slot,
            genesis_fork_version: ctx.genesis_fork_version,
            eth1_data: deposits_common::Eth1Data {
                deposit_root: ctx.eth1_data.deposit_root,
                deposit_count: ctx.eth1_data.deposit_count,
                block_hash: ctx.eth1_data.block_hash,
            },
            eth1_deposit_index: ctx.eth1_deposit_index,
        };
        let deposits: Vec<deposits_common::Deposit> = deposits
            .into_iter()
            .map(|d| deposits_common::Deposit {
                pubkey: d.pubkey,
                withdrawal_credentials: d.withdrawal_credentials,
                amount: d.amount,
                signature: d.signature,
                proof: d.proof,
            })
            .collect();
        let queued = electra::queue_block_deposits(&mut host::WasmHost, &ctx, &deposits)
            .map_err(process_error)?;
        Ok(Queued {
            queued: queued.queued,
            eth1_deposit_index: queued.eth1_deposit_index,
        })
    }

    fn process_epoch(ctx: EpochContext) -> Result<EpochProcessed, ProcessError> {
        let genesis_fork_version: [u8; 4] = ctx
            .genesis_fork_version
            .as_slice()
            .try_into()
            .map_err(|_| {
                ProcessError::BadContext(format!(
                    "genesis fork version is {} bytes, expected 4",
                    ctx.genesis_fork_version.len()
                ))
            })?;
        let done = electra::process_pending_deposits(
            &mut host::WasmHost,
            &electra::EpochContext {
                height: ctx.height,
                finality_depth: ctx.finality_depth,
                genesis_fork_version,
            },
        )
        .map_err(process_error)?;
        Ok(EpochProcessed {
            outcomes: done
                .applied
                .into_iter()
                .map(|a| match a {
                    Applied::Created(i) => Outcome::Created(i),
                    Applied::ToppedUp(i) => Outcome::ToppedUp(i),
                    Applied::InvalidSignature => Outcome::InvalidSignature,
                })
                .collect(),
            deposit_balance_to_consume: done.deposit_balance_to_consume,
        })
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
bindings::export!(DepositsV3 with_types_in bindings);
