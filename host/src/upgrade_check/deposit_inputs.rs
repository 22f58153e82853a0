//! Generated deposit blocks that exercise every corner of `process_deposit`: new validators,
//! top-ups, bad and malformed signatures and keys, repeats within a block, invalid-then-valid
//! for one pubkey, balance overflow, amounts with edge bit patterns, and blocks whose proofs or
//! indices are tampered with. Shared by `upgrade-check` and the workspace's equivalence tests.

use std::collections::HashMap;

use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use crate::chain::block::DepositData;
use crate::chain::eth1::ProvenDeposit;
use crate::chain::workload;

/// Which pubkey a generated deposit uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Key {
    /// One of a small pool of real keypairs (so repeats within and across blocks happen).
    Fresh(u8),
    /// An existing validator of the registry (index modulo its size).
    Existing(u8),
    /// 48 bytes that do not decode as a point.
    Undecodable,
    /// The compressed point at infinity.
    Infinity,
}

/// How a generated deposit is signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sig {
    /// A valid proof of possession.
    Valid,
    /// Signed by the right key over another amount.
    WrongMessage,
    /// Garbage bytes.
    Garbage,
}

/// A generated deposit, before signing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepositSpec {
    /// The pubkey.
    pub key: Key,
    /// Amount in Gwei.
    pub amount: u64,
    /// The signature.
    pub sig: Sig,
}

/// Strategy for an amount: zero, one, ordinary amounts, exactly 32 ETH, single bits (edge bit
/// patterns a rare-case bug hides behind) and the overflow-prone extremes.
pub fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1u64),
        1_000_000_000u64..40_000_000_000,
        Just(32_000_000_000u64),
        (0u32..64).prop_map(|bit| 1u64 << bit),
        Just(u64::MAX / 2),
        Just(u64::MAX),
    ]
}

/// Strategy for one deposit: new, top-up, invalid signature, malformed pubkey.
pub fn deposit_spec() -> impl Strategy<Value = DepositSpec> {
    deposit_spec_with(amount())
}

/// [`deposit_spec`] with amounts from `amount`.
pub fn deposit_spec_with(amount: impl Strategy<Value = u64>) -> impl Strategy<Value = DepositSpec> {
    let key = prop_oneof![
        6 => (0u8..6).prop_map(Key::Fresh),
        2 => (0u8..4).prop_map(Key::Existing),
        1 => Just(Key::Undecodable),
        1 => Just(Key::Infinity),
    ];
    let sig =
        prop_oneof![6 => Just(Sig::Valid), 2 => Just(Sig::WrongMessage), 1 => Just(Sig::Garbage)];
    (key, amount, sig).prop_map(|(key, amount, sig)| DepositSpec { key, amount, sig })
}

/// How a generated block departs from the honest one (every version must agree on the verdict).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
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
                let at = usize::from(at);
                if let Some(byte) = at
                    .checked_rem(deposits.len())
                    .and_then(|i| deposits.get_mut(i))
                    .and_then(|d| d.proof.get_mut(at % 33))
                    .and_then(|hash| hash.get_mut(at % 32))
                {
                    *byte ^= 1 << (at % 8);
                }
            }
            Tamper::Swap => {
                if deposits.len() >= 2 {
                    deposits.swap(0, 1);
                }
            }
            Tamper::Duplicate => {
                if let (Some(first), Some(second)) =
                    (deposits.first().copied(), deposits.get_mut(1))
                {
                    *second = first;
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

/// One generated block: the deposits that enter the deposit contract before it, and how the
/// block's due deposits are tampered with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSpec {
    /// New deposits in the contract.
    pub deposits: Vec<DepositSpec>,
    /// What the block does to the due deposits.
    pub tamper: Tamper,
}

/// A registry size and the blocks applied to it: one `upgrade-check deposits` case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DepositCase {
    /// Validators in the generated genesis registry (random pubkeys, 32 ETH each).
    pub validators: u32,
    /// The blocks, in order.
    pub blocks: Vec<BlockSpec>,
}

/// Strategy for a [`DepositCase`]: registries from 1 to `max_validators` validators (half of
/// them small, the others large enough that a per-deposit registry scan shows in the fuel) and
/// 1 to 3 blocks, mostly honest.
pub fn deposit_case(max_validators: u32) -> impl Strategy<Value = DepositCase> {
    let max = max_validators.max(1);
    let validators = prop_oneof![1u32..=max.min(16), 1u32..=max];
    let block = (proptest::collection::vec(deposit_spec(), 0..=16), tamper())
        .prop_map(|(deposits, tamper)| BlockSpec { deposits, tamper });
    // Blocks first: the shrinker simplifies the blocks, then finds the smallest registry on
    // which the simplified blocks still fail.
    (proptest::collection::vec(block, 1..=3), validators)
        .prop_map(|(blocks, validators)| DepositCase { validators, blocks })
}

/// Turns specs into signed deposits, caching signatures (signing dominates otherwise).
#[derive(Default)]
pub struct Signer {
    cache: HashMap<(u8, u64, [u8; 32]), [u8; 96]>,
}

impl Signer {
    /// The deposit for `spec`; `existing` are the registry's pubkeys (a `Key::Existing` of an
    /// empty registry uses a fresh key no other spec uses).
    pub fn deposit(
        &mut self,
        spec: &DepositSpec,
        existing: &[[u8; 48]],
        fork: [u8; 4],
    ) -> DepositData {
        self.deposit_with_credentials(spec, [0x01; 32], existing, fork)
    }

    /// [`deposit`](Self::deposit) with these withdrawal credentials (signed over them).
    pub fn deposit_with_credentials(
        &mut self,
        spec: &DepositSpec,
        withdrawal_credentials: [u8; 32],
        existing: &[[u8; 48]],
        fork: [u8; 4],
    ) -> DepositData {
        let pubkey = match spec.key {
            Key::Fresh(i) => workload::keypair(u64::from(i)).pubkey,
            Key::Existing(i) => usize::from(i)
                .checked_rem(existing.len())
                .and_then(|i| existing.get(i))
                .copied()
                .unwrap_or_else(|| workload::keypair(1000 + u64::from(i)).pubkey),
            Key::Undecodable => [0x11; 48],
            Key::Infinity => {
                let mut k = [0u8; 48];
                k[0] = 0xc0;
                k
            }
        };
        let mut d = DepositData {
            pubkey,
            withdrawal_credentials,
            amount: spec.amount,
            signature: [0xab; 96],
        };
        if let (Key::Fresh(i), Sig::Valid | Sig::WrongMessage) = (spec.key, spec.sig) {
            let signed_amount = match spec.sig {
                Sig::Valid => spec.amount,
                _ => spec.amount.wrapping_add(1),
            };
            let key = (i, signed_amount, withdrawal_credentials);
            d.signature = *self.cache.entry(key).or_insert_with(|| {
                let mut message = d;
                message.amount = signed_amount;
                workload::keypair(u64::from(i)).sign(&message.signing_root(fork))
            });
        }
        d
    }
}
