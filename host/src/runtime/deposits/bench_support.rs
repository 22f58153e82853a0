//! What `modnode bench host-call` times through the deposits world at the WIT level (compiled
//! with `test-utils` only): a fixture fed a deposit the chain's types cannot hold (an empty
//! proof), as the runtime's own tests do. The bench names no WIT type; the call and its inputs
//! are built here.

use std::time::Instant;

use super::{Deposit, DepositsModule};
use crate::deposit::{DepositContext, DepositRejection};
use crate::runtime::CallError;
use crate::state::{Eth1Data, SharedRegistry};

/// A deposits@2 module's `process` on a block at height 0 and `slot` (zero eth1 data and fork
/// version) carrying one deposit of `pubkey` (amount 1, zero credentials and signature) with an
/// empty proof: the `fixture-hostcall` module reads no proof, it loops over a host call `slot`
/// times. Returns the nanoseconds from the call to its answer, or the module's rejection.
pub fn time_unproven_process(
    module: &DepositsModule,
    registry: SharedRegistry,
    pubkey: [u8; 48],
    slot: u64,
) -> Result<Result<f64, DepositRejection>, CallError> {
    let deposit = Deposit {
        pubkey: pubkey.to_vec(),
        withdrawal_credentials: vec![0; 32],
        amount: 1,
        signature: vec![0; 96],
        proof: Vec::new(),
    };
    let ctx = super::convert::block_context(&DepositContext {
        height: 0,
        slot,
        genesis_fork_version: [0; 4],
        eth1_data: Eth1Data::default(),
        eth1_deposit_index: 0,
    });
    let start = Instant::now();
    let out = module.process(registry, ctx, vec![deposit])?;
    let elapsed = start.elapsed().as_secs_f64() * 1e9;
    Ok(out.map(|_| elapsed).map_err(DepositRejection::from))
}
