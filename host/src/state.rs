//! Chain state: the validator registry, its balances, and the overlay modules write through.
//!
//! Modules never mutate the state directly. A call gets a [`RegistryOverlay`] over a read-only
//! view of the state; the host turns the overlay into a [`RegistryDelta`] and applies it only
//! when the whole call succeeded, so a trap or a rejected block leaves the state untouched.

mod overlay;
mod registry;
mod validator;

pub use overlay::{OverlayError, RegistryDelta, RegistryOverlay, RegistryRead, SharedRegistry};
pub use registry::Registry;
pub use validator::{
    FAR_FUTURE_EPOCH, NewValidator, PUBKEY_LEN, Pubkey, Validator, WITHDRAWAL_CREDENTIALS_LEN,
};
