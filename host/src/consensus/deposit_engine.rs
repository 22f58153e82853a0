//! Which implementation of the deposits transition a chain runs, and the one place the
//! chain's deposit types ([`DepositContext`], [`DepositOutcome`], [`DepositRejection`]) are
//! converted to and from the deposits modules' WIT types.

use super::deposit_types::{
    DepositContext, DepositOutcome, DepositRejection, QueueRejection, RegistryRejection,
};
use super::eth1::{Eth1Data, ProvenDeposit};
#[cfg(any(test, feature = "test-utils"))]
use super::native_deposits;
use crate::hashes::ModuleHash;
use crate::runtime::CallError;
use crate::runtime::deposits::v3::{ProcessErrorV3, QueueError, RegistryErrorV3};
use crate::runtime::deposits::{
    BlockContext, Deposit, DepositCall, DepositsModule, Outcome, ProcessError, RegistryError,
    WitEth1Data,
};
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

    /// Runs the block's deposits over `registry` in the chain's types (what the transition
    /// calls). `Ok(Err(_))`: the block is invalid.
    pub(super) fn apply(
        &self,
        registry: SharedRegistry,
        ctx: &DepositContext,
        deposits: &[ProvenDeposit],
    ) -> Result<Result<DepositsResult, DepositRejection>, CallError> {
        Ok(self
            .process(registry, &wit_context(ctx), deposits)?
            .map_err(DepositRejection::from))
    }

    /// Runs the deposits over `registry` with the context as the module interface has it (a
    /// context the chain would never build included: the engines' checks of it are tested).
    /// `Ok(Err(_))`: the block is invalid.
    pub fn process(
        &self,
        registry: SharedRegistry,
        ctx: &BlockContext,
        deposits: &[ProvenDeposit],
    ) -> Result<Result<DepositsResult, ProcessError>, CallError> {
        match self {
            DepositEngine::Module(module) => {
                let module: &DepositsModule = module;
                let wit: Vec<Deposit> = deposits.iter().map(to_wit).collect();
                Ok(module
                    .process(registry, ctx.clone(), wit)?
                    .map(|out| DepositsResult {
                        outcomes: out.outcomes.into_iter().map(DepositOutcome::from).collect(),
                        delta: out.delta,
                        eth1_deposit_index: out.eth1_deposit_index,
                    }))
            }
            // The native reference is written against the module interface, as its oracle.
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

/// The WIT form of a deposits call's context.
pub(super) fn wit_context(ctx: &DepositContext) -> BlockContext {
    block_context(
        ctx.height,
        ctx.slot,
        ctx.genesis_fork_version,
        &ctx.eth1_data,
        ctx.eth1_deposit_index,
    )
}

/// The deposits call of a block (context and deposits) on `registry`, as the runtime warms a
/// new deposits module with it.
pub(super) fn deposit_call(
    registry: SharedRegistry,
    ctx: &DepositContext,
    deposits: &[ProvenDeposit],
) -> DepositCall {
    DepositCall {
        registry,
        ctx: wit_context(ctx),
        deposits: deposits.iter().map(to_wit).collect(),
    }
}

impl From<Outcome> for DepositOutcome {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Created(i) => Self::Created(i),
            Outcome::ToppedUp(i) => Self::ToppedUp(i),
            Outcome::InvalidSignature => Self::InvalidSignature,
        }
    }
}

impl From<DepositOutcome> for Outcome {
    fn from(outcome: DepositOutcome) -> Self {
        match outcome {
            DepositOutcome::Created(i) => Self::Created(i),
            DepositOutcome::ToppedUp(i) => Self::ToppedUp(i),
            DepositOutcome::InvalidSignature => Self::InvalidSignature,
        }
    }
}

impl From<ProcessError> for DepositRejection {
    fn from(error: ProcessError) -> Self {
        match error {
            ProcessError::Malformed(m) => Self::Malformed(m),
            ProcessError::Registry(e) => Self::Registry(e.into()),
            ProcessError::BadContext(m) => Self::BadContext(m),
            ProcessError::BadProof(i) => Self::BadProof(i),
        }
    }
}

impl From<ProcessErrorV3> for DepositRejection {
    fn from(error: ProcessErrorV3) -> Self {
        match error {
            ProcessErrorV3::Malformed(m) => Self::Malformed(m),
            ProcessErrorV3::Registry(e) => Self::Registry(e.into()),
            ProcessErrorV3::Queue(e) => Self::Queue(e.into()),
            ProcessErrorV3::BadContext(m) => Self::BadContext(m),
            ProcessErrorV3::BadProof(i) => Self::BadProof(i),
            ProcessErrorV3::Overflow(m) => Self::Overflow(m),
        }
    }
}

impl From<QueueError> for QueueRejection {
    fn from(error: QueueError) -> Self {
        match error {
            QueueError::Full => Self::Full,
            QueueError::BadLength(m) => Self::BadLength(m),
            QueueError::Short((wanted, len)) => Self::Short(wanted, len),
        }
    }
}

impl From<RegistryErrorV3> for RegistryRejection {
    fn from(error: RegistryErrorV3) -> Self {
        match error {
            RegistryErrorV3::DuplicatePubkey => Self::DuplicatePubkey,
            RegistryErrorV3::BadLength(m) => Self::BadLength(m),
            RegistryErrorV3::UnknownIndex(i) => Self::UnknownIndex(i),
            RegistryErrorV3::BalanceOverflow(i) => Self::BalanceOverflow(i),
            RegistryErrorV3::RegistryFull => Self::RegistryFull,
        }
    }
}

impl From<RegistryError> for RegistryRejection {
    fn from(error: RegistryError) -> Self {
        match error {
            RegistryError::DuplicatePubkey => Self::DuplicatePubkey,
            RegistryError::BadLength(m) => Self::BadLength(m),
            RegistryError::UnknownIndex(i) => Self::UnknownIndex(i),
            RegistryError::BalanceOverflow(i) => Self::BalanceOverflow(i),
            RegistryError::RegistryFull => Self::RegistryFull,
        }
    }
}

/// What the deposits module sees of a block at `height` and `slot` on the chain of `fork`,
/// whose deposits prove against `eth1` from `eth1_deposit_index`.
pub fn block_context(
    height: u64,
    slot: u64,
    fork: [u8; 4],
    eth1: &Eth1Data,
    eth1_deposit_index: u64,
) -> BlockContext {
    BlockContext {
        height,
        slot,
        genesis_fork_version: fork.to_vec(),
        eth1_data: WitEth1Data {
            deposit_root: eth1.deposit_root.to_vec(),
            deposit_count: eth1.deposit_count,
            block_hash: eth1.block_hash.to_vec(),
        },
        eth1_deposit_index,
    }
}

/// The WIT form of a proven deposit.
pub fn to_wit(d: &ProvenDeposit) -> Deposit {
    Deposit {
        pubkey: d.data.pubkey.to_vec(),
        withdrawal_credentials: d.data.withdrawal_credentials.to_vec(),
        amount: d.data.amount,
        signature: d.data.signature.to_vec(),
        proof: d.proof.concat(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Log lines and error messages name outcomes and rejections as the WIT types did.
    #[test]
    fn the_chain_types_show_as_the_wit_types_did() {
        let outcomes = [
            Outcome::Created(3),
            Outcome::ToppedUp(u32::MAX),
            Outcome::InvalidSignature,
        ];
        for wit in outcomes {
            let shown = format!("{wit:?}");
            let ours = DepositOutcome::from(wit);
            assert_eq!(format!("{ours:?}"), shown);
            assert_eq!(format!("{:?}", Outcome::from(ours)), shown);
        }
        let errors = [
            ProcessError::Malformed("deposit 1: pubkey".into()),
            ProcessError::Registry(RegistryError::DuplicatePubkey),
            ProcessError::Registry(RegistryError::BadLength("pubkey".into())),
            ProcessError::Registry(RegistryError::UnknownIndex(7)),
            ProcessError::Registry(RegistryError::BalanceOverflow(8)),
            ProcessError::Registry(RegistryError::RegistryFull),
            ProcessError::BadContext("fork".into()),
            ProcessError::BadProof(9),
        ];
        for wit in errors {
            let shown = format!("{wit:?}");
            assert_eq!(format!("{:?}", DepositRejection::from(wit)), shown);
        }
        let errors = [
            ProcessErrorV3::Malformed("deposit 1: pubkey".into()),
            ProcessErrorV3::Registry(RegistryErrorV3::RegistryFull),
            ProcessErrorV3::Registry(RegistryErrorV3::UnknownIndex(7)),
            ProcessErrorV3::Queue(QueueError::Full),
            ProcessErrorV3::Queue(QueueError::BadLength("amount".into())),
            ProcessErrorV3::Queue(QueueError::Short((5, 2))),
            ProcessErrorV3::BadContext("fork".into()),
            ProcessErrorV3::BadProof(9),
            ProcessErrorV3::Overflow("balance".into()),
        ];
        for wit in errors {
            let shown = format!("{wit:?}");
            assert_eq!(format!("{:?}", DepositRejection::from(wit)), shown);
        }
    }
}
