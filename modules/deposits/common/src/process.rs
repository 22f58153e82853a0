//! The two deposit-processing algorithms. Both verify every deposit's Merkle proof first, at
//! the running deposit index, and give identical outcomes; they differ only in how many
//! signature checks they ask the host for.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher};

use crate::ssz::{self, Root};
use crate::tree::{self, DepositProof};
use crate::{BlockContext, Deposit, Outcome, ProcessError, Processed, RegistryError, SignatureSet};

/// What the algorithms need from the host: the registry overlay and BLS verification.
pub trait Host {
    /// Index of the validator with this pubkey, seeing this block's additions.
    fn index_of(&mut self, pubkey: &[u8]) -> Option<u32>;
    /// Appends a validator; returns its index.
    fn add_validator(
        &mut self,
        pubkey: &[u8],
        withdrawal_credentials: &[u8],
        effective_balance: u64,
        balance: u64,
    ) -> Result<u32, RegistryError>;
    /// Adds to a validator's balance.
    fn increase_balance(&mut self, index: u32, amount: u64) -> Result<(), RegistryError>;
    /// Verifies one proof of possession.
    fn bls_verify(&mut self, pubkey: &[u8], message: &[u8], signature: &[u8]) -> bool;
    /// Verifies several at once; true only if all verify.
    fn bls_verify_batch(&mut self, sets: &[SignatureSet]) -> bool;
}

/// A deposit whose fields have their fixed sizes.
pub(crate) struct Checked<'a> {
    pub(crate) pubkey: &'a [u8; 48],
    pub(crate) withdrawal_credentials: &'a [u8; 32],
    pub(crate) amount: u64,
    pub(crate) signature: &'a [u8; 96],
    proof: DepositProof,
}

impl Checked<'_> {
    fn leaf(&self) -> Root {
        tree::deposit_data_root(
            self.pubkey,
            self.withdrawal_credentials,
            self.amount,
            self.signature,
        )
    }

    fn signing_root(&self, domain: &Root) -> Root {
        let object =
            ssz::deposit_message_root(self.pubkey, self.withdrawal_credentials, self.amount);
        ssz::signing_root(&object, domain)
    }

    fn verify_alone<H: Host>(&self, host: &mut H, domain: &Root) -> bool {
        host.bls_verify(self.pubkey, &self.signing_root(domain), self.signature)
    }
}

fn field<'a, const N: usize>(
    bytes: &'a [u8],
    index: usize,
    name: &str,
) -> Result<&'a [u8; N], ProcessError> {
    bytes.try_into().map_err(|_| {
        ProcessError::Malformed(format!(
            "deposit {index}: {name} is {} bytes, expected {N}",
            bytes.len()
        ))
    })
}

pub(crate) fn check(deposits: &[Deposit]) -> Result<Vec<Checked<'_>>, ProcessError> {
    deposits
        .iter()
        .enumerate()
        .map(|(i, d)| {
            Ok(Checked {
                pubkey: field(&d.pubkey, i, "pubkey")?,
                withdrawal_credentials: field(
                    &d.withdrawal_credentials,
                    i,
                    "withdrawal-credentials",
                )?,
                amount: d.amount,
                signature: field(&d.signature, i, "signature")?,
                proof: tree::decode_proof(&d.proof).ok_or_else(|| {
                    ProcessError::Malformed(format!(
                        "deposit {i}: proof is {} bytes, expected {}",
                        d.proof.len(),
                        tree::DEPOSIT_PROOF_BYTES
                    ))
                })?,
            })
        })
        .collect()
}

pub(crate) fn domain(ctx: &BlockContext) -> Result<Root, ProcessError> {
    let version: [u8; 4] = ctx
        .genesis_fork_version
        .as_slice()
        .try_into()
        .map_err(|_| {
            ProcessError::BadContext(format!(
                "genesis fork version is {} bytes, expected 4",
                ctx.genesis_fork_version.len()
            ))
        })?;
    Ok(ssz::deposit_domain(version))
}

/// The first half of `process_deposit` for the whole block: every proof must verify against the
/// agreed deposit root at the running index. Returns the index after the block.
fn verify_proofs(ctx: &BlockContext, deposits: &[Checked<'_>]) -> Result<u64, ProcessError> {
    let root: Root = ctx
        .eth1_data
        .deposit_root
        .as_slice()
        .try_into()
        .map_err(|_| {
            ProcessError::BadContext(format!(
                "deposit root is {} bytes, expected 32",
                ctx.eth1_data.deposit_root.len()
            ))
        })?;
    let mut index = ctx.eth1_deposit_index;
    for deposit in deposits {
        if !tree::verify_deposit_proof(&deposit.leaf(), &deposit.proof, index, &root) {
            return Err(ProcessError::BadProof(index));
        }
        index = index.checked_add(1).ok_or_else(|| {
            ProcessError::BadContext("the eth1 deposit index overflows".to_string())
        })?;
    }
    Ok(index)
}

/// [`verify_proofs`] with the block's proofs checked together: the paths of consecutive
/// deposits share all but their lowest levels, and shared levels are hashed once
/// ([`tree::ProofVerifier`]); the verdict for every deposit is the same. deposits-v2's path;
/// `verify_proofs` stays as deposits-v1 was released, so v1's bytes and hash do not change.
pub(crate) fn verify_proofs_shared(
    ctx: &BlockContext,
    deposits: &[Checked<'_>],
) -> Result<u64, ProcessError> {
    let root: Root = ctx
        .eth1_data
        .deposit_root
        .as_slice()
        .try_into()
        .map_err(|_| {
            ProcessError::BadContext(format!(
                "deposit root is {} bytes, expected 32",
                ctx.eth1_data.deposit_root.len()
            ))
        })?;
    let mut verifier = tree::ProofVerifier::new(root);
    let mut index = ctx.eth1_deposit_index;
    for deposit in deposits {
        if !verifier.verify(&deposit.leaf(), &deposit.proof, index) {
            return Err(ProcessError::BadProof(index));
        }
        index = index.checked_add(1).ok_or_else(|| {
            ProcessError::BadContext("the eth1 deposit index overflows".to_string())
        })?;
    }
    Ok(index)
}

/// `apply_deposit` for one deposit; `valid` is asked only when the pubkey is unknown.
fn apply<H: Host>(
    host: &mut H,
    deposit: &Checked<'_>,
    valid: impl FnOnce(&mut H) -> bool,
) -> Result<Outcome, ProcessError> {
    match host.index_of(deposit.pubkey) {
        Some(index) => {
            host.increase_balance(index, deposit.amount)
                .map_err(ProcessError::Registry)?;
            Ok(Outcome::ToppedUp(index))
        }
        None if valid(host) => {
            let index = host
                .add_validator(
                    deposit.pubkey,
                    deposit.withdrawal_credentials,
                    crate::effective_balance(deposit.amount),
                    deposit.amount,
                )
                .map_err(ProcessError::Registry)?;
            Ok(Outcome::Created(index))
        }
        None => Ok(Outcome::InvalidSignature),
    }
}

/// Version 1: each new validator's signature is verified on its own.
pub fn process_one_by_one<H: Host>(
    host: &mut H,
    ctx: &BlockContext,
    deposits: &[Deposit],
) -> Result<Processed, ProcessError> {
    let domain = domain(ctx)?;
    let checked = check(deposits)?;
    let eth1_deposit_index = verify_proofs(ctx, &checked)?;
    let mut outcomes = Vec::with_capacity(checked.len());
    for deposit in &checked {
        outcomes.push(apply(host, deposit, |host| {
            deposit.verify_alone(host, &domain)
        })?);
    }
    Ok(Processed {
        outcomes,
        eth1_deposit_index,
    })
}

/// Pubkey → index before the block, for the block's distinct pubkeys. A fixed-key hasher: the
/// guest has no randomness, and the block's size is bounded by the host.
type Seen<'a> = HashMap<&'a [u8; 48], Option<u32>, BuildHasherDefault<DefaultHasher>>;

/// Version 2: the first deposit of every pubkey unknown before the block goes into one batch
/// verification. If the batch verifies, every one of them is valid and no further checks are
/// needed (later deposits for the same pubkeys are top-ups); if it fails, signatures are checked
/// one by one exactly as in version 1. Pubkeys found before the block keep their index (the
/// registry is append-only), so their deposits are applied without a second lookup. Earlier
/// pubkeys of the block are found in a hash map: O(1) per deposit, not a scan of the block.
pub fn process_batched<H: Host>(
    host: &mut H,
    ctx: &BlockContext,
    deposits: &[Deposit],
) -> Result<Processed, ProcessError> {
    let domain = domain(ctx)?;
    let checked = check(deposits)?;
    let eth1_deposit_index = verify_proofs_shared(ctx, &checked)?;

    let mut in_batch = vec![false; checked.len()];
    let mut sets = Vec::new();
    // Every distinct pubkey of the block with its index before the block, if it had one.
    let mut seen = Seen::with_capacity_and_hasher(checked.len(), BuildHasherDefault::default());
    for (deposit, member) in checked.iter().zip(in_batch.iter_mut()) {
        if seen.contains_key(deposit.pubkey) {
            continue;
        }
        let before = host.index_of(deposit.pubkey);
        seen.insert(deposit.pubkey, before);
        if before.is_none() {
            *member = true;
            sets.push(SignatureSet {
                pubkey: deposit.pubkey.to_vec(),
                message: deposit.signing_root(&domain).to_vec(),
                signature: deposit.signature.to_vec(),
            });
        }
    }
    let batch_valid = match sets.len() {
        0 => false,
        1 => sets
            .first()
            .is_some_and(|s| host.bls_verify(&s.pubkey, &s.message, &s.signature)),
        _ => host.bls_verify_batch(&sets),
    };

    let mut outcomes = Vec::with_capacity(checked.len());
    for (deposit, member) in checked.iter().zip(in_batch) {
        let known_before = seen.get(deposit.pubkey).copied().flatten();
        let outcome = match known_before {
            Some(index) => {
                host.increase_balance(index, deposit.amount)
                    .map_err(ProcessError::Registry)?;
                Outcome::ToppedUp(index)
            }
            None => apply(host, deposit, |host| {
                (batch_valid && member) || deposit.verify_alone(host, &domain)
            })?,
        };
        outcomes.push(outcome);
    }
    Ok(Processed {
        outcomes,
        eth1_deposit_index,
    })
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A registry in a map; a signature is "valid" when its first byte is 1.
    #[derive(Default)]
    struct MockHost {
        pubkeys: Vec<Vec<u8>>,
        balances: Vec<u64>,
        single_checks: usize,
        batch_checks: usize,
    }

    impl Host for MockHost {
        fn index_of(&mut self, pubkey: &[u8]) -> Option<u32> {
            let map: HashMap<&[u8], usize> = self
                .pubkeys
                .iter()
                .enumerate()
                .map(|(i, p)| (p.as_slice(), i))
                .collect();
            map.get(pubkey).map(|&i| i as u32)
        }
        fn add_validator(
            &mut self,
            pk: &[u8],
            _: &[u8],
            _: u64,
            bal: u64,
        ) -> Result<u32, RegistryError> {
            self.pubkeys.push(pk.to_vec());
            self.balances.push(bal);
            Ok(self.pubkeys.len() as u32 - 1)
        }
        fn increase_balance(&mut self, index: u32, amount: u64) -> Result<(), RegistryError> {
            let b = self
                .balances
                .get_mut(index as usize)
                .ok_or(RegistryError::UnknownIndex(index))?;
            *b = b
                .checked_add(amount)
                .ok_or(RegistryError::BalanceOverflow(index))?;
            Ok(())
        }
        fn bls_verify(&mut self, _: &[u8], _: &[u8], sig: &[u8]) -> bool {
            self.single_checks += 1;
            sig.first() == Some(&1)
        }
        fn bls_verify_batch(&mut self, sets: &[SignatureSet]) -> bool {
            self.batch_checks += 1;
            sets.iter().all(|s| s.signature.first() == Some(&1))
        }
    }

    fn deposit(pk: u8, amount: u64, valid: bool) -> Deposit {
        Deposit {
            pubkey: vec![pk; 48],
            withdrawal_credentials: vec![0; 32],
            amount,
            signature: vec![u8::from(valid); 96],
            proof: Vec::new(),
        }
    }

    fn leaf(d: &Deposit) -> Root {
        tree::deposit_data_root(
            d.pubkey.as_slice().try_into().unwrap(),
            d.withdrawal_credentials.as_slice().try_into().unwrap(),
            d.amount,
            d.signature.as_slice().try_into().unwrap(),
        )
    }

    /// Puts `block` into a fresh deposit contract after `before` other deposits, fills in the
    /// proofs and returns the context that agrees on the contract's root.
    fn prove(block: &mut [Deposit], before: u64) -> BlockContext {
        let mut contract = tree::reference::NaiveDepositTree::new();
        for i in 0..before {
            contract.push([i as u8; 32]);
        }
        for d in block.iter() {
            contract.push(leaf(d));
        }
        let count = contract.len();
        for (i, d) in block.iter_mut().enumerate() {
            d.proof = contract.proof(before + i as u64, count).unwrap().concat();
        }
        BlockContext {
            height: 1,
            slot: 1,
            genesis_fork_version: vec![0; 4],
            eth1_data: crate::Eth1Data {
                deposit_root: contract.root().to_vec(),
                deposit_count: count,
                block_hash: vec![0; 32],
            },
            eth1_deposit_index: before,
        }
    }

    fn both(block: &[Deposit], ctx: &BlockContext) -> Result<Processed, ProcessError> {
        let a = process_one_by_one(&mut MockHost::default(), ctx, block);
        let b = process_batched(&mut MockHost::default(), ctx, block);
        assert_eq!(a, b);
        a
    }

    #[test]
    fn both_algorithms_agree_on_the_spec_traps() {
        let mut block = vec![
            deposit(1, 32 * crate::GWEI_PER_ETH, true),
            deposit(1, 5, false), // same pubkey later in the block: top-up, no signature check
            deposit(2, 7, false), // invalid: skipped
            deposit(2, 9, true),  // invalid-then-valid: the valid one creates
            deposit(3, 0, true),  // zero amount
        ];
        let ctx = prove(&mut block, 3);
        let mut a = MockHost::default();
        let mut b = MockHost::default();
        let out_a = process_one_by_one(&mut a, &ctx, &block).unwrap();
        let out_b = process_batched(&mut b, &ctx, &block).unwrap();
        assert_eq!(out_a, out_b);
        assert_eq!(
            out_a.outcomes,
            vec![
                Outcome::Created(0),
                Outcome::ToppedUp(0),
                Outcome::InvalidSignature,
                Outcome::Created(1),
                Outcome::Created(2)
            ]
        );
        assert_eq!(out_a.eth1_deposit_index, 8);
        assert_eq!(a.balances, b.balances);
        assert_eq!(a.balances, vec![32 * crate::GWEI_PER_ETH + 5, 9, 0]);
        // The batch failed (deposit 2 is invalid), so v2 fell back to single checks.
        assert_eq!(b.batch_checks, 1);
    }

    #[test]
    fn batch_that_verifies_needs_no_single_checks() {
        let mut block: Vec<_> = (1..=16).map(|i| deposit(i, 32, true)).collect();
        let ctx = prove(&mut block, 0);
        let mut host = MockHost::default();
        let out = process_batched(&mut host, &ctx, &block).unwrap();
        assert_eq!(out.outcomes.len(), 16);
        assert_eq!((host.batch_checks, host.single_checks), (1, 0));
    }

    #[test]
    fn a_deposit_out_of_place_or_with_a_bad_proof_invalidates_the_block() {
        let mut block: Vec<_> = (1..=4).map(|i| deposit(i, 32, true)).collect();
        let ctx = prove(&mut block, 2);
        assert_eq!(both(&block, &ctx).unwrap().eth1_deposit_index, 6);

        // Reordered: deposit 3 is not at index 2.
        let mut swapped = block.clone();
        swapped.swap(0, 1);
        assert_eq!(both(&swapped, &ctx), Err(ProcessError::BadProof(2)));
        // Skipped: the block starts at the second due deposit.
        assert_eq!(both(&block[1..], &ctx), Err(ProcessError::BadProof(2)));
        // Duplicated.
        let dup = vec![block[0].clone(), block[0].clone()];
        assert_eq!(both(&dup, &ctx), Err(ProcessError::BadProof(3)));
        // The state's index is elsewhere.
        let shifted = BlockContext {
            eth1_deposit_index: 3,
            ..ctx.clone()
        };
        assert_eq!(both(&block, &shifted), Err(ProcessError::BadProof(3)));
        // Another root, or another count mixed in.
        let mut other_root = ctx.clone();
        other_root.eth1_data.deposit_root[0] ^= 1;
        assert_eq!(both(&block, &other_root), Err(ProcessError::BadProof(2)));
        // A changed amount no longer matches its leaf.
        let mut minted = block.clone();
        minted[3].amount = u64::MAX;
        assert_eq!(both(&minted, &ctx), Err(ProcessError::BadProof(5)));
        // A flipped proof byte.
        let mut forged = block.clone();
        forged[1].proof[40] ^= 1;
        assert_eq!(both(&forged, &ctx), Err(ProcessError::BadProof(3)));
        // Malformed proof and root lengths are named.
        let mut short = block.clone();
        short[2].proof.pop();
        assert!(
            matches!(both(&short, &ctx), Err(ProcessError::Malformed(m)) if m.contains("deposit 2: proof is 1055 bytes"))
        );
        let mut bad_root = ctx.clone();
        bad_root.eth1_data.deposit_root.pop();
        assert!(matches!(
            both(&block, &bad_root),
            Err(ProcessError::BadContext(_))
        ));
        // The index never wraps.
        let top = BlockContext {
            eth1_deposit_index: u64::MAX,
            ..ctx
        };
        assert_eq!(both(&block, &top), Err(ProcessError::BadProof(u64::MAX)));
    }

    #[test]
    fn malformed_fields_and_overflow_invalidate_the_block() {
        let mut short = vec![deposit(1, 1, true)];
        let ctx = prove(&mut short, 0);
        short[0].pubkey.pop();
        let err = process_one_by_one(&mut MockHost::default(), &ctx, &short).unwrap_err();
        assert!(matches!(err, ProcessError::Malformed(m) if m.contains("deposit 0: pubkey is 47")));

        let mut block = vec![deposit(1, u64::MAX, true), deposit(1, 1, true)];
        let ctx = prove(&mut block, 0);
        let err = process_batched(&mut MockHost::default(), &ctx, &block).unwrap_err();
        assert!(matches!(
            err,
            ProcessError::Registry(RegistryError::BalanceOverflow(0))
        ));

        let bad_ctx = BlockContext {
            genesis_fork_version: vec![0; 3],
            ..ctx
        };
        let err = process_batched(&mut MockHost::default(), &bad_ctx, &[]).unwrap_err();
        assert!(matches!(err, ProcessError::BadContext(_)));
    }

    #[test]
    fn effective_balance_rounds_down_and_caps() {
        assert_eq!(crate::effective_balance(0), 0);
        assert_eq!(crate::effective_balance(1_500_000_000), 1_000_000_000);
        assert_eq!(
            crate::effective_balance(u64::MAX),
            crate::MAX_EFFECTIVE_BALANCE
        );
    }
}
