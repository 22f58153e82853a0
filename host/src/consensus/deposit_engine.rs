//! Which implementation of the deposits transition a chain runs: the engine dispatches a
//! block's deposits, in the chain's types ([`DepositContext`], [`DepositOutcome`],
//! [`DepositRejection`]), to the module (the runtime converts them to its WIT types) or to the
//! native reference.

use super::eth1::ProvenDeposit;
#[cfg(any(test, feature = "test-utils"))]
use super::native_deposits;
use crate::deposit::{DepositContext, DepositOutcome, DepositRejection};
use crate::hashes::ModuleHash;
use crate::runtime::CallError;
use crate::runtime::deposits::DepositsModule;
use crate::state::{RegistryDelta, SharedRegistry};

/// How deposits are processed: a wasm module (the node) or, with the `test-utils` feature, the
/// native reference (tests, benchmark baseline).
#[derive(Clone)]
pub enum DepositEngine {
    /// A loaded deposits module.
    Module(Box<DepositsModule>),
    /// The native reference.
    #[cfg(any(test, feature = "test-utils"))]
    Native(native_deposits::Verification),
}

/// What a block's deposits did, before the host checks and applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepositsResult {
    /// One outcome per deposit.
    pub outcomes: Vec<DepositOutcome>,
    /// The registry changes.
    pub delta: RegistryDelta,
    /// `eth1_deposit_index` after the block, as the engine reports it.
    pub eth1_deposit_index: u64,
}

/// Where the chain finds the deposits module the schedule names for a height: the node's
/// prepared modules (tests: a map). `None` means the module is not here (or not ready yet) —
/// a host condition, never a verdict on the block.
pub trait DepositModules: Send + Sync {
    /// The ready deposits engine with component sha256 `hash`.
    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine>;

    /// Whether the deposits module `hash` is compiled and warmed here, for the producer's
    /// readiness attestations. A module of another kind under that hash is not ready.
    fn is_ready(&self, hash: &ModuleHash) -> bool {
        self.deposits(hash).is_some()
    }

    /// Told the module schedule after every change of the head (import, revert, open), so the
    /// node can fetch and warm scheduled modules before their height.
    fn scheduled(&self, _schedule: &crate::state::Schedule) {}

    /// Told the deposits call of each block with deposits that became the head by import, so
    /// the node can warm new deposits modules on real inputs.
    fn imported(&self, _call: crate::runtime::deposits::DepositCall) {}

    /// Told that a block at `height` needed the scheduled `kind` module `hash` and it was not
    /// ready ([`ImportError::ModuleMissing`](super::ImportError::ModuleMissing)) — on any
    /// path: importing on the head, executing a side branch, regenerating a state — so the
    /// node fetches it whichever branch schedules it, not only the head's.
    fn missing(&self, _kind: crate::runtime::Kind, _hash: &ModuleHash, _height: u64) {}
}

impl DepositEngine {
    /// sha256 of the module component (`None` for the native reference).
    pub fn hash(&self) -> Option<ModuleHash> {
        match self {
            DepositEngine::Module(module) => Some(module.hash()),
            #[cfg(any(test, feature = "test-utils"))]
            DepositEngine::Native(_) => None,
        }
    }

    /// Runs the block's deposits over `registry` (what the transition calls).
    /// `Ok(Err(_))`: the block is invalid.
    pub fn apply(
        &self,
        registry: SharedRegistry,
        ctx: &DepositContext,
        deposits: &[ProvenDeposit],
    ) -> Result<Result<DepositsResult, DepositRejection>, CallError> {
        match self {
            DepositEngine::Module(module) => {
                Ok(module
                    .apply(registry, ctx, deposits)?
                    .map(|out| DepositsResult {
                        outcomes: out.outcomes,
                        delta: out.delta,
                        eth1_deposit_index: out.eth1_deposit_index,
                    }))
            }
            #[cfg(any(test, feature = "test-utils"))]
            DepositEngine::Native(verification) => Ok(native_deposits::process(
                registry,
                ctx,
                deposits,
                *verification,
            )),
        }
    }
}
