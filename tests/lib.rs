//! Helpers shared by the workspace integration tests: generated deposit blocks that exercise
//! every corner of `process_deposit` (proofs included), and the engines to run them through.

use std::collections::HashMap;

use modnode::chain::DepositEngine;
use modnode::chain::block::DepositData;
use modnode::chain::eth1::ProvenDeposit;
use modnode::chain::native_deposits::{Verification, deposit_signing_root};
use modnode::chain::workload;
use modnode::runtime::{LoadedModule, Runtime, RuntimeConfig};
use proptest::prelude::*;

/// Which pubkey a generated deposit uses.
#[derive(Debug, Clone, Copy)]
pub enum Key {
    /// One of a small pool of real keypairs (so repeats within and across blocks happen).
    Fresh(u8),
    /// An existing genesis validator.
    Existing(u8),
    /// 48 bytes that do not decode as a point.
    Undecodable,
    /// The compressed point at infinity.
    Infinity,
}

/// How a generated deposit is signed.
#[derive(Debug, Clone, Copy)]
pub enum Sig {
    /// A valid proof of possession.
    Valid,
    /// Signed by the right key over another amount.
    WrongMessage,
    /// Garbage bytes.
    Garbage,
}

/// A generated deposit, before signing.
#[derive(Debug, Clone, Copy)]
pub struct DepositSpec {
    /// The pubkey.
    pub key: Key,
    /// Amount in Gwei.
    pub amount: u64,
    /// The signature.
    pub sig: Sig,
}

/// Strategy for one deposit: new, top-up, invalid signature, malformed pubkey; zero and huge
/// amounts.
pub fn deposit_spec() -> impl Strategy<Value = DepositSpec> {
    let key = prop_oneof![
        6 => (0u8..6).prop_map(Key::Fresh),
        2 => (0u8..4).prop_map(Key::Existing),
        1 => Just(Key::Undecodable),
        1 => Just(Key::Infinity),
    ];
    let amount = prop_oneof![
        Just(0u64),
        Just(1u64),
        1_000_000_000u64..40_000_000_000,
        Just(32_000_000_000u64),
        Just(u64::MAX / 2),
        Just(u64::MAX),
    ];
    let sig =
        prop_oneof![6 => Just(Sig::Valid), 2 => Just(Sig::WrongMessage), 1 => Just(Sig::Garbage)];
    (key, amount, sig).prop_map(|(key, amount, sig)| DepositSpec { key, amount, sig })
}

/// Turns specs into signed deposits, caching signatures (signing dominates otherwise).
#[derive(Default)]
pub struct Signer {
    cache: HashMap<(u8, u64), [u8; 96]>,
}

impl Signer {
    /// The deposit for `spec`; `existing` are the genesis pubkeys.
    pub fn deposit(
        &mut self,
        spec: &DepositSpec,
        existing: &[[u8; 48]],
        fork: [u8; 4],
    ) -> DepositData {
        let pubkey = match spec.key {
            Key::Fresh(i) => workload::keypair(u64::from(i)).pubkey,
            Key::Existing(i) => existing[usize::from(i) % existing.len()],
            Key::Undecodable => [0x11; 48],
            Key::Infinity => {
                let mut k = [0u8; 48];
                k[0] = 0xc0;
                k
            }
        };
        let mut d = DepositData {
            pubkey,
            withdrawal_credentials: [0x01; 32],
            amount: spec.amount,
            signature: [0xab; 96],
        };
        if let (Key::Fresh(i), Sig::Valid | Sig::WrongMessage) = (spec.key, spec.sig) {
            let signed_amount = match spec.sig {
                Sig::Valid => spec.amount,
                _ => spec.amount.wrapping_add(1),
            };
            d.signature = *self.cache.entry((i, signed_amount)).or_insert_with(|| {
                let mut message = d;
                message.amount = signed_amount;
                workload::keypair(u64::from(i)).sign(&deposit_signing_root(&message, fork))
            });
        }
        d
    }
}

/// Every deposit engine: both module versions and the native reference in both modes.
pub fn all_engines(runtime: &Runtime) -> Vec<(&'static str, DepositEngine)> {
    let module =
        |name: &str| match runtime.load(modnode::artifacts::embedded(name).unwrap_or_default()) {
            Ok(LoadedModule::Deposits(m)) => m,
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

/// How a generated block departs from the honest one (every engine must agree on the verdict).
#[derive(Debug, Clone, Copy)]
pub enum Tamper {
    /// The due deposits, in order, with their proofs.
    Honest,
    /// One bit of one proof flipped (deposit and hash chosen by the value).
    FlipProof(u16),
    /// The first two deposits swapped (wrong indices).
    Swap,
    /// The first deposit repeated in place of the second (a duplicate).
    Duplicate,
    /// The last due deposit left out (wrong deposit count).
    DropLast,
    /// The first deposit carried twice (one more than due).
    Extra,
}

/// Strategy for [`Tamper`]: mostly honest blocks.
pub fn tamper() -> impl Strategy<Value = Tamper> {
    prop_oneof![
        5 => Just(Tamper::Honest),
        1 => any::<u16>().prop_map(Tamper::FlipProof),
        1 => Just(Tamper::Swap),
        1 => Just(Tamper::Duplicate),
        1 => Just(Tamper::DropLast),
        1 => Just(Tamper::Extra),
    ]
}

impl Tamper {
    /// Applies the tampering to the honest list of due deposits.
    pub fn apply(self, mut deposits: Vec<ProvenDeposit>) -> Vec<ProvenDeposit> {
        match self {
            Tamper::Honest => {}
            Tamper::FlipProof(at) => {
                if !deposits.is_empty() {
                    let at = usize::from(at);
                    let n = deposits.len();
                    deposits[at % n].proof[at % 33][at % 32] ^= 1 << (at % 8);
                }
            }
            Tamper::Swap => {
                if deposits.len() >= 2 {
                    deposits.swap(0, 1);
                }
            }
            Tamper::Duplicate => {
                if deposits.len() >= 2 {
                    deposits[1] = deposits[0];
                }
            }
            Tamper::DropLast => {
                deposits.pop();
            }
            Tamper::Extra => {
                if let Some(first) = deposits.first().copied() {
                    deposits.push(first);
                }
            }
        }
        deposits
    }
}
