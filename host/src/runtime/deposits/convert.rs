//! The one place the chain's deposit types ([`crate::deposit`]) are converted to and from the
//! deposits modules' WIT types (`@2.0.0`'s, `@3.0.0`'s and the migration's): nothing outside
//! the runtime names those. The conversions to WIT are public for the runtime's own tests,
//! which call a module through its WIT-level API.

use super::migration::MigrationContext;
use super::v3::{
    EpochContext, EpochOutcome, EpochProcessed, ProcessErrorV3, QueueError, Queued, RegistryErrorV3,
};
use super::{BlockContext, Deposit, Outcome, ProcessError, RegistryError, WitEth1Data};
use crate::deposit::{
    ChainContext, DepositContext, DepositOutcome, DepositRejection, EpochDeposits, ProvenDeposit,
    QueueRejection, QueuedDeposits, RegistryRejection,
};

/// What the deposits module sees of a block: the context of its deposits call in WIT types.
pub fn block_context(ctx: &DepositContext) -> BlockContext {
    BlockContext {
        height: ctx.height,
        slot: ctx.slot,
        genesis_fork_version: ctx.genesis_fork_version.to_vec(),
        eth1_data: WitEth1Data {
            deposit_root: ctx.eth1_data.deposit_root.to_vec(),
            deposit_count: ctx.eth1_data.deposit_count,
            block_hash: ctx.eth1_data.block_hash.to_vec(),
        },
        eth1_deposit_index: ctx.eth1_deposit_index,
    }
}

/// The WIT form of a proven deposit.
pub fn deposit(d: &ProvenDeposit) -> Deposit {
    Deposit {
        pubkey: d.data.pubkey.to_vec(),
        withdrawal_credentials: d.data.withdrawal_credentials.to_vec(),
        amount: d.data.amount,
        signature: d.data.signature.to_vec(),
        proof: d.proof.concat(),
    }
}

/// The WIT form of deposits@3's epoch context.
pub fn epoch_context(ctx: &ChainContext) -> EpochContext {
    EpochContext {
        height: ctx.height,
        finality_depth: ctx.finality_depth,
        genesis_fork_version: ctx.genesis_fork_version.to_vec(),
    }
}

/// The WIT form of a migration's context.
pub fn migration_context(ctx: &ChainContext) -> MigrationContext {
    MigrationContext {
        height: ctx.height,
        finality_depth: ctx.finality_depth,
        genesis_fork_version: ctx.genesis_fork_version.to_vec(),
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

impl From<EpochOutcome> for DepositOutcome {
    fn from(outcome: EpochOutcome) -> Self {
        match outcome {
            EpochOutcome::Created(i) => Self::Created(i),
            EpochOutcome::ToppedUp(i) => Self::ToppedUp(i),
            EpochOutcome::InvalidSignature => Self::InvalidSignature,
        }
    }
}

impl From<Queued> for QueuedDeposits {
    fn from(queued: Queued) -> Self {
        Self {
            queued: queued.queued,
            eth1_deposit_index: queued.eth1_deposit_index,
        }
    }
}

impl From<EpochProcessed> for EpochDeposits {
    fn from(epoch: EpochProcessed) -> Self {
        Self {
            outcomes: epoch.outcomes.into_iter().map(Into::into).collect(),
            deposit_balance_to_consume: epoch.deposit_balance_to_consume,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::OverlayError;

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

    /// The native reference's registry refusals are the ones the host serves a module.
    #[test]
    fn an_overlay_refusal_is_the_same_rejection_either_way() {
        let refusals = [
            OverlayError::DuplicatePubkey,
            OverlayError::BadLength("pubkey"),
            OverlayError::UnknownIndex(7),
            OverlayError::BalanceOverflow(8),
            OverlayError::RegistryFull,
        ];
        for e in refusals {
            assert_eq!(
                RegistryRejection::from(&e),
                RegistryRejection::from(super::super::registry_error(&e))
            );
        }
    }
}
