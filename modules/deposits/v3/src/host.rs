//! The host's imports behind `deposits_common`'s traits, so the Electra logic runs the same in
//! the component and natively in tests.

use deposits_common::electra::{PendingDeposit, PendingQueue, QueueError};
use deposits_common::process::Host;
use deposits_common::{RegistryError, SignatureSet};

use crate::bindings::modnode::deposits::{crypto, queue, registry, types};

/// The host as seen from inside the component.
pub struct WasmHost;

fn registry_error(e: types::RegistryError) -> RegistryError {
    match e {
        types::RegistryError::DuplicatePubkey => RegistryError::DuplicatePubkey,
        types::RegistryError::BadLength(f) => RegistryError::BadLength(f),
        types::RegistryError::UnknownIndex(i) => RegistryError::UnknownIndex(i),
        types::RegistryError::BalanceOverflow(i) => RegistryError::BalanceOverflow(i),
        types::RegistryError::RegistryFull => RegistryError::RegistryFull,
    }
}

fn queue_error(e: types::QueueError) -> QueueError {
    match e {
        types::QueueError::Short((wanted, len)) => QueueError::Short { wanted, len },
        // A field of the wrong length cannot come from an entry this module built.
        types::QueueError::Full | types::QueueError::BadLength(_) => QueueError::Full,
    }
}

impl Host for WasmHost {
    fn index_of(&mut self, pubkey: &[u8]) -> Option<u32> {
        let index = registry::index_of(pubkey);
        (index != deposits_common::NOT_FOUND).then_some(index)
    }

    fn add_validator(
        &mut self,
        pubkey: &[u8],
        withdrawal_credentials: &[u8],
        effective_balance: u64,
        balance: u64,
    ) -> Result<u32, RegistryError> {
        registry::add_validator(pubkey, withdrawal_credentials, effective_balance, balance)
            .map_err(registry_error)
    }

    fn increase_balance(&mut self, index: u32, amount: u64) -> Result<(), RegistryError> {
        registry::increase_balance(index, amount).map_err(registry_error)
    }

    fn bls_verify(&mut self, pubkey: &[u8], message: &[u8], signature: &[u8]) -> bool {
        crypto::bls_verify(pubkey, message, signature)
    }

    fn bls_verify_batch(&mut self, sets: &[SignatureSet]) -> bool {
        let sets: Vec<types::SignatureSet> = sets
            .iter()
            .map(|s| types::SignatureSet {
                pubkey: s.pubkey.clone(),
                message: s.message.clone(),
                signature: s.signature.clone(),
            })
            .collect();
        crypto::bls_verify_batch(&sets)
    }
}

impl PendingQueue for WasmHost {
    fn total_active_balance(&mut self) -> u64 {
        registry::total_active_balance()
    }

    fn queue_push(&mut self, deposit: &PendingDeposit) -> Result<(), QueueError> {
        queue::push(&types::PendingDeposit {
            pubkey: deposit.pubkey.to_vec(),
            withdrawal_credentials: deposit.withdrawal_credentials.to_vec(),
            amount: deposit.amount,
            signature: deposit.signature.to_vec(),
            slot: deposit.slot,
            height: deposit.height,
        })
        .map_err(queue_error)
    }

    fn queue_len(&mut self) -> u64 {
        queue::length()
    }

    fn queue_read(&mut self, offset: u64, count: u32) -> Vec<PendingDeposit> {
        // The host hands back entries it stored from this module's pushes; one with a field of
        // the wrong length cannot exist, and is skipped rather than trusted.
        queue::read(offset, count)
            .into_iter()
            .filter_map(|d| {
                Some(PendingDeposit {
                    pubkey: d.pubkey.as_slice().try_into().ok()?,
                    withdrawal_credentials: d.withdrawal_credentials.as_slice().try_into().ok()?,
                    amount: d.amount,
                    signature: d.signature.as_slice().try_into().ok()?,
                    slot: d.slot,
                    height: d.height,
                })
            })
            .collect()
    }

    fn queue_drop_front(&mut self, count: u64) -> Result<(), QueueError> {
        queue::drop_front(count).map_err(queue_error)
    }

    fn deposit_balance_to_consume(&mut self) -> u64 {
        queue::balance_to_consume()
    }

    fn set_deposit_balance_to_consume(&mut self, gwei: u64) {
        queue::set_balance_to_consume(gwei)
    }
}
