//! Helpers shared by the workspace integration tests: the engines to run generated deposit
//! blocks through. The generators themselves (every corner of `process_deposit`, proofs and
//! tampering included) live in [`modnode::upgrade_check::deposit_inputs`], shared with
//! `modnode upgrade-check`.

use modnode::chain::DepositEngine;
use modnode::chain::native_deposits::Verification;
use modnode::runtime::{LinkedModule, Runtime, RuntimeConfig};

pub use modnode::upgrade_check::deposit_inputs::{
    DepositSpec, Key, Sig, Signer, Tamper, deposit_spec, tamper,
};

/// Every deposit engine: both module versions and the native reference in both modes.
pub fn all_engines(runtime: &Runtime) -> Vec<(&'static str, DepositEngine)> {
    let module =
        |name: &str| match runtime.load(modnode::artifacts::embedded(name).unwrap_or_default()) {
            Ok(LinkedModule::Deposits(m)) => m,
            other => panic!(
                "{name} did not load as a deposits module: {:?}",
                other.err()
            ),
        };
    vec![
        (
            "deposits-v1",
            DepositEngine::Module(Box::new(module("deposits-v1"))),
        ),
        (
            "deposits-v2",
            DepositEngine::Module(Box::new(module("deposits-v2"))),
        ),
        ("native", DepositEngine::Native(Verification::OneByOne)),
        (
            "native-batched",
            DepositEngine::Native(Verification::Batched),
        ),
    ]
}

/// A runtime for tests.
pub fn runtime() -> Runtime {
    match Runtime::new(RuntimeConfig::default()) {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    }
}
