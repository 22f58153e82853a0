//! Which implementation of the deposits transition a chain runs.

use super::block::DepositData;
use super::native_deposits;
use crate::runtime::CallError;
use crate::runtime::deposits::{BlockContext, Deposit, DepositsModule, Outcome, ProcessError};
use crate::state::{RegistryDelta, SharedRegistry};

/// How deposits are processed: a wasm module (the node) or the native reference (tests,
/// benchmark baseline).
#[derive(Clone)]
pub enum DepositEngine {
    /// A loaded deposits module.
    Module(Box<DepositsModule>),
    /// The native reference.
    Native(native_deposits::Verification),
}

impl DepositEngine {
    /// Runs the transition over `registry`. `Ok(Err(_))`: the block is invalid.
    pub fn process(
        &self,
        registry: SharedRegistry,
        ctx: &BlockContext,
        deposits: &[DepositData],
    ) -> Result<Result<(Vec<Outcome>, RegistryDelta), ProcessError>, CallError> {
        match self {
            DepositEngine::Module(module) => {
                let module: &DepositsModule = module;
                let wit: Vec<Deposit> = deposits.iter().map(to_wit).collect();
                Ok(module
                    .process(registry, ctx.clone(), wit)?
                    .map(|out| (out.outcomes, out.delta)))
            }
            DepositEngine::Native(verification) => {
                let Ok(fork) = <[u8; 4]>::try_from(ctx.genesis_fork_version.as_slice()) else {
                    return Ok(Err(ProcessError::BadContext(format!(
                        "genesis fork version is {} bytes, expected 4",
                        ctx.genesis_fork_version.len()
                    ))));
                };
                Ok(native_deposits::process(
                    registry,
                    fork,
                    deposits,
                    *verification,
                ))
            }
        }
    }
}

/// The WIT form of a deposit.
pub fn to_wit(d: &DepositData) -> Deposit {
    Deposit {
        pubkey: d.pubkey.to_vec(),
        withdrawal_credentials: d.withdrawal_credentials.to_vec(),
        amount: d.amount,
        signature: d.signature.to_vec(),
    }
}
