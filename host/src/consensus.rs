//! What every node must compute alike: blocks and their canonical encoding, the genesis
//! configuration, the eth1 state (phase0 `process_eth1_data`), the deposits engines (the
//! scheduled module, or the native reference) and one block's state transition over any base
//! state — what import runs on the head, what the state cache replays on an ancestor and
//! executes on a side branch.
//!
//! It sits below everything that keeps states or blocks: the state cache and the chain
//! import from here, nothing here imports from them. It reads no store and no clock.
//!
//! - [`block`]: header, body, seal, canonical encoding; [`genesis`]: the configuration.
//! - [`eth1`]: the eth1 state and the deposits a block must carry.
//! - [`apply_block`]: the one transition — the [`State`] after a block from the state after
//!   its parent (its steps are private); [`build_block`] for a block being built;
//!   [`deposits_v3`]: deposits@3's pending-deposit queue; [`migration`]: a contract switch's
//!   state migration at its activation height.
//! - `native_deposits` (with the `test-utils` feature): the native reference transition
//!   (phase0 `process_deposit`), the modules' check in tests and the benchmarks' baseline.
//! - [`shell`]: a block's seal and body against its header, checked once
//!   ([`shell::verify_shell`]).
//! - [`ImportError`] says why a block was not imported and whose fault it is
//!   ([`FailureClass`]).

mod apply;
pub mod block;
mod deposit_engine;
pub mod deposits_v3;
mod errors;
pub mod eth1;
pub mod genesis;
pub mod migration;
#[cfg(any(test, feature = "test-utils"))]
pub mod native_deposits;
pub mod shell;
mod transition;

pub use crate::deposit::{
    ChainContext, DepositContext, DepositOutcome, DepositRejection, EpochDeposits, QueueRejection,
    QueuedDeposits, RegistryRejection,
};
pub use apply::{Applied, Rules, apply_block, build_block, deposit_call, due_deposits};
pub use deposit_engine::{DepositEngine, DepositModules, DepositsResult};
pub use errors::{FailureClass, ImportError};
pub use transition::QUEUE_CONTRACT_MAJOR;

/// The state after a block (re-exported from `state`, where it is defined below the runtime).
pub use crate::state::State;
