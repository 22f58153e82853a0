//! [`Host`](crate::process::Host) backed by the component's imports.

use crate::bindings::modnode::deposits::{crypto, registry};
use crate::{RegistryError, SignatureSet};

/// The host as seen from inside the component.
pub struct WasmHost;

impl crate::process::Host for WasmHost {
    fn index_of(&mut self, pubkey: &[u8]) -> Option<u32> {
        let index = registry::index_of(pubkey);
        (index != crate::NOT_FOUND).then_some(index)
    }

    fn add_validator(
        &mut self,
        pubkey: &[u8],
        withdrawal_credentials: &[u8],
        effective_balance: u64,
        balance: u64,
    ) -> Result<u32, RegistryError> {
        registry::add_validator(pubkey, withdrawal_credentials, effective_balance, balance)
    }

    fn increase_balance(&mut self, index: u32, amount: u64) -> Result<(), RegistryError> {
        registry::increase_balance(index, amount)
    }

    fn bls_verify(&mut self, pubkey: &[u8], message: &[u8], signature: &[u8]) -> bool {
        crypto::bls_verify(pubkey, message, signature)
    }

    fn bls_verify_batch(&mut self, sets: &[SignatureSet]) -> bool {
        crypto::bls_verify_batch(sets)
    }
}
