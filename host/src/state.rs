//! Chain state: the validator registry, its balances, the pubkey index and the state tree, the
//! eth1 part (agreed deposit root, deposit index, votes), the on-chain module schedule
//! ([`schedule`]), and the overlay modules write through.
//!
//! Modules never mutate the state directly. A call gets a [`RegistryOverlay`] over a read-only
//! view of the state; the host turns the overlay into a [`RegistryDelta`] and applies it only
//! when the whole call succeeded and the resulting root matches the block, so a trap or a
//! rejected block leaves the state untouched.

pub mod chunked;
mod eth1;
pub mod merkle;
mod overlay;
pub mod pending;
pub mod pubkey_index;
mod registry;
pub mod schedule;
mod snapshot;
mod validator;

pub use eth1::{
    ETH1_DATA_BYTES, Eth1Data, Eth1Error, Eth1State, Eth1Vote, MAX_VOTES, state_root,
    state_root_with,
};
pub use overlay::{
    OverlayError, RegistryDelta, RegistryOverlay, RegistryRead, RegistryUndo, SharedRegistry,
};
pub use pending::{
    PendingDelta, PendingDeposit, PendingError, PendingOverlay, PendingQueue, PendingUndo,
    pending_root,
};
pub use registry::{Registry, StateError};
pub use schedule::{Schedule, ScheduleError, UpgradeOp};
pub use snapshot::{State, StatePart};
pub use validator::{
    FAR_FUTURE_EPOCH, LEAF_BYTES, NewValidator, PUBKEY_LEN, Pubkey, RecordError, VALIDATOR_BYTES,
    Validator, WITHDRAWAL_CREDENTIALS_LEN,
};
