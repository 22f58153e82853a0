//! The pyspec scenarios of Electra's pending deposits, ported one by one and named after their
//! pyspec test (`tests/core/pyspec/eth2spec/test/electra/epoch_processing/pending_deposits/
//! test_process_pending_deposits.py`, `…/test_apply_pending_deposit.py`,
//! `…/block_processing/test_process_deposit_request.py`).
//!
//! Not ported, because modnode does not model what they test:
//! - `test_process_pending_deposits_eth1_bridge_transition_{pending,not_applied,complete}` and
//!   `test_process_deposit_request_set_start_index{,_only_once}`: modnode has one deposit
//!   source (the bridge, every deposit queued as a request), no `deposit_requests_start_index`;
//!   its equivalent, the running `eth1_deposit_index`, is checked by
//!   `process_deposit_request_advances_the_eth1_deposit_index`.
//! - `test_process_pending_deposits_{skipped_deposit_exiting_validator,
//!   multiple_skipped_deposits_exiting_validators, multiple_pending_one_skipped,
//!   mixture_of_skipped_and_above_churn, withdrawable_validator,
//!   withdrawable_validator_not_churned}` and
//!   `test_apply_pending_deposit_success_top_up_to_withdrawn_validator`: no exits or
//!   withdrawals in modnode.
//! - The fork-version scenarios map onto modnode's single fork version: "current" and
//!   "previous" fork versions are versions other than the genesis one.
//!
//! The mock's BLS: a signature verifies when its first 32 bytes are the signing root it is
//! checked against and the pubkey is a valid key (not all zeros, not the infinity encoding), so
//! a deposit signed under another fork version's domain fails as it does with blst; the host's
//! real blst checks are covered by the host's tests.
#![allow(
    non_snake_case, // pyspec's names: `test_apply_pending_deposit_top_up__…`
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic
)]

use std::collections::{HashMap, VecDeque};

use super::*;
use crate::tree;

mod batch;

const GENESIS_FORK: [u8; 4] = [0, 0, 0, 1];
const FINALITY_DEPTH: u64 = 4;
const INCREMENT: u64 = crate::EFFECTIVE_BALANCE_INCREMENT;

#[derive(Clone, Debug, PartialEq)]
struct Validator {
    pubkey: [u8; 48],
    withdrawal_credentials: [u8; 32],
    effective_balance: u64,
}

/// Registry, queue and counter in memory.
#[derive(Clone, Debug, Default)]
struct MockHost {
    validators: Vec<Validator>,
    balances: Vec<u64>,
    index: HashMap<[u8; 48], u32>,
    queue: VecDeque<PendingDeposit>,
    to_consume: u64,
    /// Overrides the sum of effective balances (the scaled-churn scenario).
    total_active: Option<u64>,
    /// Entries the epoch asked to read, summed: work must follow deposits applied.
    read: u64,
    /// `bls_verify` calls made.
    single_checks: u32,
    /// The size of every `bls_verify_batch` call made, in order.
    batch_checks: Vec<usize>,
}

impl MockHost {
    /// The mock's BLS: the first 32 bytes of the signature are the message, under a valid key.
    fn verifies(pubkey: &[u8], message: &[u8], signature: &[u8]) -> bool {
        valid_key(pubkey) && signature.get(..32) == Some(message)
    }
}

fn valid_key(pubkey: &[u8]) -> bool {
    let infinity = pubkey.first() == Some(&0xc0) && pubkey.iter().skip(1).all(|b| *b == 0);
    !infinity && pubkey.iter().any(|b| *b != 0)
}

impl Host for MockHost {
    fn index_of(&mut self, pubkey: &[u8]) -> Option<u32> {
        let key: [u8; 48] = pubkey.try_into().ok()?;
        self.index.get(&key).copied()
    }
    fn add_validator(
        &mut self,
        pubkey: &[u8],
        withdrawal_credentials: &[u8],
        effective_balance: u64,
        balance: u64,
    ) -> Result<u32, RegistryError> {
        let pubkey: [u8; 48] = pubkey.try_into().unwrap();
        if self.index.contains_key(&pubkey) {
            return Err(RegistryError::DuplicatePubkey);
        }
        let index = self.validators.len() as u32;
        self.validators.push(Validator {
            pubkey,
            withdrawal_credentials: withdrawal_credentials.try_into().unwrap(),
            effective_balance,
        });
        self.balances.push(balance);
        self.index.insert(pubkey, index);
        Ok(index)
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
    fn bls_verify(&mut self, pubkey: &[u8], message: &[u8], signature: &[u8]) -> bool {
        self.single_checks += 1;
        Self::verifies(pubkey, message, signature)
    }
    fn bls_verify_batch(&mut self, sets: &[SignatureSet]) -> bool {
        self.batch_checks.push(sets.len());
        // blst's batch: false when empty, else true only if every set verifies.
        !sets.is_empty()
            && sets
                .iter()
                .all(|s| Self::verifies(&s.pubkey, &s.message, &s.signature))
    }
}

impl PendingQueue for MockHost {
    fn total_active_balance(&mut self) -> u64 {
        self.total_active
            .unwrap_or_else(|| self.validators.iter().map(|v| v.effective_balance).sum())
    }
    fn queue_push(&mut self, deposit: &PendingDeposit) -> Result<(), QueueError> {
        self.queue.push_back(deposit.clone());
        Ok(())
    }
    fn queue_len(&mut self) -> u64 {
        self.queue.len() as u64
    }
    fn queue_read(&mut self, offset: u64, count: u32) -> Vec<PendingDeposit> {
        let out: Vec<_> = self
            .queue
            .iter()
            .skip(offset as usize)
            .take(count as usize)
            .cloned()
            .collect();
        self.read += out.len() as u64;
        out
    }
    fn queue_drop_front(&mut self, count: u64) -> Result<(), QueueError> {
        let len = self.queue.len() as u64;
        if count > len {
            return Err(QueueError::Short { wanted: count, len });
        }
        self.queue.drain(..count as usize);
        Ok(())
    }
    fn deposit_balance_to_consume(&mut self) -> u64 {
        self.to_consume
    }
    fn set_deposit_balance_to_consume(&mut self, gwei: u64) {
        self.to_consume = gwei;
    }
}

fn pubkey(i: u32) -> [u8; 48] {
    let mut key = [0x11u8; 48];
    key[..4].copy_from_slice(&(i + 1).to_be_bytes());
    key[4] = 0x5a;
    key
}

fn credentials(prefix: u8) -> [u8; 32] {
    let mut wc = [0u8; 32];
    wc[0] = prefix;
    wc[12..].fill(0x59);
    wc
}

/// The minimal preset's state of pyspec's `spec_state_test`: 64 validators at 32 ETH, with
/// `0x00` credentials, balances equal to effective balances.
fn state() -> MockHost {
    let mut host = MockHost::default();
    for i in 0..64 {
        host.add_validator(
            &pubkey(i),
            &credentials(0),
            MIN_ACTIVATION_BALANCE,
            MIN_ACTIVATION_BALANCE,
        )
        .unwrap();
    }
    host
}

/// pyspec's `prepare_pending_deposit`: for `validator_index` (an existing validator's pubkey or
/// the next new one), signed under `fork_version`'s deposit domain when `signed`.
fn pending(
    validator_index: u32,
    amount: u64,
    withdrawal_credentials: [u8; 32],
    signed: Option<[u8; 4]>,
    height: u64,
) -> PendingDeposit {
    pending_for(
        pubkey(validator_index),
        amount,
        withdrawal_credentials,
        signed,
        height,
    )
}

fn pending_for(
    pubkey: [u8; 48],
    amount: u64,
    withdrawal_credentials: [u8; 32],
    signed: Option<[u8; 4]>,
    height: u64,
) -> PendingDeposit {
    let mut deposit = PendingDeposit {
        pubkey,
        withdrawal_credentials,
        amount,
        signature: [0; 96],
        slot: height * 2,
        height,
    };
    if let Some(version) = signed {
        let root = signing_root(&deposit, &ssz::deposit_domain(version));
        deposit.signature[..32].copy_from_slice(&root);
    }
    deposit
}

fn signed(validator_index: u32, amount: u64) -> PendingDeposit {
    pending(
        validator_index,
        amount,
        credentials(0),
        Some(GENESIS_FORK),
        0,
    )
}

/// An epoch transition at a height where everything queued at height 0 is final.
fn epoch(host: &mut MockHost) -> EpochProcessed {
    epoch_at(host, FINALITY_DEPTH)
}

fn epoch_at(host: &mut MockHost, height: u64) -> EpochProcessed {
    process_pending_deposits(
        host,
        &EpochContext {
            height,
            finality_depth: FINALITY_DEPTH,
            genesis_fork_version: GENESIS_FORK,
        },
    )
    .unwrap()
}

fn churn(host: &mut MockHost) -> u64 {
    get_activation_exit_churn_limit(host.total_active_balance())
}

/// pyspec's `run_pending_deposit_applying`: applies one deposit through an epoch with enough
/// churn and checks the post-state the way the helper does.
fn run_pending_deposit_applying(
    host: &mut MockHost,
    deposit: PendingDeposit,
    validator_index: u32,
    effective: bool,
) {
    let pre_count = host.validators.len();
    let pre_balance = host.balances.get(validator_index as usize).copied();
    let pre_effective = host
        .validators
        .get(validator_index as usize)
        .map(|v| v.effective_balance);
    host.queue.push_back(deposit.clone());
    host.to_consume = deposit.amount;
    let out = epoch(host);
    assert!(host.queue.is_empty());
    match (pre_balance, effective) {
        (None, true) => {
            assert_eq!(out.applied, vec![Applied::Created(validator_index)]);
            assert_eq!(host.validators.len(), pre_count + 1);
            let v = &host.validators[validator_index as usize];
            assert_eq!(v.pubkey, deposit.pubkey);
            assert_eq!(v.withdrawal_credentials, deposit.withdrawal_credentials);
            assert_eq!(host.balances[validator_index as usize], deposit.amount);
            let max = get_max_effective_balance(&deposit.withdrawal_credentials);
            assert_eq!(
                v.effective_balance,
                (deposit.amount - deposit.amount % INCREMENT).min(max)
            );
        }
        (None, false) => {
            assert_eq!(out.applied, vec![Applied::InvalidSignature]);
            assert_eq!(host.validators.len(), pre_count);
            assert_eq!(host.index_of(&deposit.pubkey), None);
        }
        (Some(balance), _) => {
            assert_eq!(out.applied, vec![Applied::ToppedUp(validator_index)]);
            assert_eq!(host.validators.len(), pre_count);
            assert_eq!(
                host.balances[validator_index as usize],
                balance + deposit.amount
            );
            assert_eq!(
                Some(host.validators[validator_index as usize].effective_balance),
                pre_effective
            );
        }
    }
}

// ---- epoch_processing/pending_deposits/test_process_pending_deposits.py ----

#[test]
fn test_process_pending_deposits_not_finalized() {
    let mut host = state();
    let pre_count = host.validators.len() as u32;
    for i in 0..2 {
        host.queue.push_back(pending(
            pre_count + i,
            MIN_ACTIVATION_BALANCE,
            credentials(0),
            Some(GENESIS_FORK),
            10 + u64::from(i),
        ));
    }
    let queued = host.queue.clone();
    host.to_consume = 2 * MIN_ACTIVATION_BALANCE;
    // Height 14: the entry of height 10 is final (10 + 4 ≤ 14), the one of height 11 is not.
    let out = epoch_at(&mut host, 14);
    assert_eq!(out.deposit_balance_to_consume, 0);
    assert_eq!(
        host.queue,
        queued.iter().skip(1).cloned().collect::<Vec<_>>()
    );
    assert_eq!(out.applied, vec![Applied::Created(pre_count)]);
    assert_eq!(host.balances[pre_count as usize], MIN_ACTIVATION_BALANCE);
    // Deposit requests get their effective balance at once.
    assert_eq!(
        host.validators[pre_count as usize].effective_balance,
        MIN_ACTIVATION_BALANCE
    );
    // One height later the second one is final too.
    let out = epoch_at(&mut host, 15);
    assert_eq!(out.applied, vec![Applied::Created(pre_count + 1)]);
    assert!(host.queue.is_empty());
}

#[test]
fn test_process_pending_deposits_limit_is_reached() {
    let mut host = state();
    let amount = INCREMENT;
    let max = MAX_PENDING_DEPOSITS_PER_EPOCH;
    for i in 0..max + 2 {
        host.queue.push_back(signed(i, amount));
    }
    let queued = host.queue.clone();
    let pre_balances = host.balances.clone();
    host.to_consume = queued.iter().map(|d| d.amount).sum();
    let out = epoch(&mut host);
    assert_eq!(out.deposit_balance_to_consume, 0);
    assert_eq!(
        host.queue,
        queued
            .iter()
            .skip(max as usize)
            .cloned()
            .collect::<Vec<_>>()
    );
    let expected: Vec<u64> = pre_balances
        .iter()
        .enumerate()
        .map(|(i, b)| if i < max as usize { b + amount } else { *b })
        .collect();
    assert_eq!(host.balances, expected);
    // Only the window of 16 was read, not the queue.
    assert_eq!(host.read, u64::from(max));
}

#[test]
fn test_process_pending_deposits_balance_equal_churn() {
    let mut host = state();
    let amount = churn(&mut host);
    host.queue.push_back(signed(0, amount));
    let pre_balance = host.balances[0];
    let out = epoch(&mut host);
    assert_eq!(host.balances[0], pre_balance + amount);
    assert_eq!(out.deposit_balance_to_consume, 0);
    assert_eq!(host.to_consume, 0);
    assert!(host.queue.is_empty());
}

#[test]
fn test_process_pending_deposits_balance_above_churn() {
    let mut host = state();
    let amount = churn(&mut host) + 1;
    host.queue.push_back(signed(0, amount));
    let pre_balance = host.balances[0];
    epoch(&mut host);
    assert_eq!(host.balances[0], pre_balance);
    let limit = churn(&mut host);
    assert_eq!(host.to_consume, limit);
    assert_eq!(host.queue, vec![signed(0, amount)]);
    // The next epoch carries the unused churn: two limits cover it.
    let out = epoch(&mut host);
    assert_eq!(out.applied, vec![Applied::ToppedUp(0)]);
    assert_eq!(host.balances[0], pre_balance + amount);
    assert_eq!(host.to_consume, 0);
}

#[test]
fn test_process_pending_deposits_preexisting_churn() {
    let mut host = state();
    let amount = INCREMENT + 1;
    host.to_consume = 2 * amount;
    host.queue.push_back(signed(0, amount));
    let pre_balance = host.balances[0];
    epoch(&mut host);
    assert_eq!(host.balances[0], pre_balance + amount);
    assert_eq!(host.to_consume, 0);
    assert!(host.queue.is_empty());
}

#[test]
fn test_process_pending_deposits_multiple_pending_deposits_below_churn() {
    let mut host = state();
    let amount = INCREMENT;
    host.queue.push_back(signed(0, amount));
    host.queue.push_back(signed(1, amount));
    let pre_balances = host.balances.clone();
    epoch(&mut host);
    for i in [0, 1] {
        assert_eq!(host.balances[i], pre_balances[i] + amount);
    }
    assert_eq!(host.to_consume, 0);
    assert!(host.queue.is_empty());
}

#[test]
fn test_process_pending_deposits_multiple_pending_deposits_above_churn() {
    let mut host = state();
    let amount = churn(&mut host) / 3 + 1;
    for i in 0..3 {
        host.queue.push_back(signed(i, amount));
    }
    let pre_balances = host.balances.clone();
    epoch(&mut host);
    for i in [0, 1] {
        assert_eq!(host.balances[i], pre_balances[i] + amount);
    }
    assert_eq!(host.balances[2], pre_balances[2]);
    let limit = churn(&mut host);
    assert_eq!(host.to_consume, limit - 2 * amount);
    assert_eq!(host.queue, vec![signed(2, amount)]);
}

#[test]
fn test_process_pending_deposits_invalid_sig_then_valid_sig() {
    let mut host = state();
    let validator_index = host.validators.len() as u32;
    let amount = MIN_ACTIVATION_BALANCE;
    let unsigned = pending(validator_index, amount, credentials(0), None, 0);
    assert!(!is_valid_deposit_signature(
        &mut host,
        &unsigned,
        &ssz::deposit_domain(GENESIS_FORK)
    ));
    let valid = signed(validator_index, amount);
    assert!(is_valid_deposit_signature(
        &mut host,
        &valid,
        &ssz::deposit_domain(GENESIS_FORK)
    ));
    host.queue.push_back(unsigned);
    host.queue.push_back(valid);
    let out = epoch(&mut host);
    assert_eq!(
        out.applied,
        vec![Applied::InvalidSignature, Applied::Created(validator_index)]
    );
    assert_eq!(host.balances[validator_index as usize], amount);
    assert_eq!(host.to_consume, 0);
    assert!(host.queue.is_empty());
}

#[test]
fn test_process_pending_deposits_scaled_churn() {
    let mut host = state();
    // A total active balance whose balance churn exceeds the activation cap (256 ETH).
    host.total_active = Some(CHURN_LIMIT_QUOTIENT * 300 * INCREMENT);
    let amount = churn(&mut host);
    assert_eq!(amount, MAX_PER_EPOCH_ACTIVATION_EXIT_CHURN_LIMIT);
    host.queue.push_back(signed(0, amount));
    let pre_balance = host.balances[0];
    epoch(&mut host);
    assert_eq!(host.balances[0], pre_balance + amount);
    assert_eq!(host.to_consume, 0);
    assert!(host.queue.is_empty());
}

// ---- epoch_processing/pending_deposits/test_apply_pending_deposit.py ----

/// A fresh deposit: the next validator index, appended to the registry.
fn fresh(host: &MockHost, amount: u64, withdrawal_credentials: [u8; 32]) -> (PendingDeposit, u32) {
    let index = host.validators.len() as u32;
    let deposit = pending(index, amount, withdrawal_credentials, Some(GENESIS_FORK), 0);
    (deposit, index)
}

#[test]
fn test_apply_pending_deposit_under_min_activation() {
    let mut host = state();
    let (deposit, index) = fresh(&host, MIN_ACTIVATION_BALANCE - 1, credentials(0));
    run_pending_deposit_applying(&mut host, deposit, index, true);
    assert_eq!(
        host.validators[index as usize].effective_balance,
        MIN_ACTIVATION_BALANCE - INCREMENT
    );
}

#[test]
fn test_apply_pending_deposit_min_activation() {
    let mut host = state();
    let (deposit, index) = fresh(&host, MIN_ACTIVATION_BALANCE, credentials(0));
    run_pending_deposit_applying(&mut host, deposit, index, true);
}

#[test]
fn test_apply_pending_deposit_over_min_activation() {
    let mut host = state();
    let (deposit, index) = fresh(&host, MIN_ACTIVATION_BALANCE + 1, credentials(0));
    run_pending_deposit_applying(&mut host, deposit, index, true);
    assert_eq!(
        host.validators[index as usize].effective_balance,
        MIN_ACTIVATION_BALANCE
    );
}

#[test]
fn test_apply_pending_deposit_over_min_activation_next_increment() {
    let mut host = state();
    let (deposit, index) = fresh(&host, MIN_ACTIVATION_BALANCE + INCREMENT, credentials(0));
    run_pending_deposit_applying(&mut host, deposit, index, true);
    assert_eq!(
        host.validators[index as usize].effective_balance,
        crate::MAX_EFFECTIVE_BALANCE
    );
}

#[test]
fn test_apply_pending_deposit_eth1_withdrawal_credentials() {
    let mut host = state();
    let (deposit, index) = fresh(&host, MIN_ACTIVATION_BALANCE, credentials(0x01));
    run_pending_deposit_applying(&mut host, deposit, index, true);
}

#[test]
fn test_apply_pending_deposit_compounding_withdrawal_credentials_under_max() {
    let mut host = state();
    let amount = MAX_EFFECTIVE_BALANCE_ELECTRA - 1;
    let (deposit, index) = fresh(&host, amount, credentials(COMPOUNDING_WITHDRAWAL_PREFIX));
    run_pending_deposit_applying(&mut host, deposit, index, true);
    assert_eq!(
        host.validators[index as usize].effective_balance,
        MAX_EFFECTIVE_BALANCE_ELECTRA - INCREMENT
    );
}

#[test]
fn test_apply_pending_deposit_compounding_withdrawal_credentials_max() {
    let mut host = state();
    let amount = MAX_EFFECTIVE_BALANCE_ELECTRA;
    let (deposit, index) = fresh(&host, amount, credentials(COMPOUNDING_WITHDRAWAL_PREFIX));
    run_pending_deposit_applying(&mut host, deposit, index, true);
    assert_eq!(
        host.validators[index as usize].effective_balance,
        MAX_EFFECTIVE_BALANCE_ELECTRA
    );
}

#[test]
fn test_apply_pending_deposit_compounding_withdrawal_credentials_over_max() {
    let mut host = state();
    let amount = MAX_EFFECTIVE_BALANCE_ELECTRA + 1;
    let (deposit, index) = fresh(&host, amount, credentials(COMPOUNDING_WITHDRAWAL_PREFIX));
    run_pending_deposit_applying(&mut host, deposit, index, true);
    assert_eq!(
        host.validators[index as usize].effective_balance,
        MAX_EFFECTIVE_BALANCE_ELECTRA
    );
}

#[test]
fn test_apply_pending_deposit_compounding_withdrawal_credentials_over_max_next_increment() {
    let mut host = state();
    let amount = MAX_EFFECTIVE_BALANCE_ELECTRA + INCREMENT;
    let (deposit, index) = fresh(&host, amount, credentials(COMPOUNDING_WITHDRAWAL_PREFIX));
    run_pending_deposit_applying(&mut host, deposit, index, true);
    assert_eq!(
        host.validators[index as usize].effective_balance,
        MAX_EFFECTIVE_BALANCE_ELECTRA
    );
}

#[test]
fn test_apply_pending_deposit_non_versioned_withdrawal_credentials() {
    let mut host = state();
    let mut wc = [0x02u8; 32];
    wc[0] = 0xff;
    let (deposit, index) = fresh(&host, MIN_ACTIVATION_BALANCE, wc);
    run_pending_deposit_applying(&mut host, deposit, index, true);
}

#[test]
fn test_apply_pending_deposit_non_versioned_withdrawal_credentials_over_min_activation() {
    let mut host = state();
    let mut wc = [0x02u8; 32];
    wc[0] = 0xff;
    let (deposit, index) = fresh(&host, MIN_ACTIVATION_BALANCE + 1, wc);
    run_pending_deposit_applying(&mut host, deposit, index, true);
    assert_eq!(
        host.validators[index as usize].effective_balance,
        MIN_ACTIVATION_BALANCE
    );
}

#[test]
fn test_apply_pending_deposit_correct_sig_but_forked_state() {
    // Deposits are signed under the genesis fork version whatever fork the chain is on: the
    // epoch context carries only the genesis version.
    let mut host = state();
    let (deposit, index) = fresh(&host, MIN_ACTIVATION_BALANCE, credentials(0));
    run_pending_deposit_applying(&mut host, deposit, index, true);
}

#[test]
fn test_apply_pending_deposit_incorrect_sig_new_deposit() {
    let mut host = state();
    let index = host.validators.len() as u32;
    let deposit = pending(index, MIN_ACTIVATION_BALANCE, credentials(0), None, 0);
    run_pending_deposit_applying(&mut host, deposit, index, false);
}

fn top_up_state(balance: u64, effective: u64, wc: [u8; 32]) -> MockHost {
    let mut host = state();
    host.balances[0] = balance;
    host.validators[0].effective_balance = effective;
    host.validators[0].withdrawal_credentials = wc;
    host
}

#[test]
fn test_apply_pending_deposit_top_up__min_activation_balance() {
    let mut host = top_up_state(
        MIN_ACTIVATION_BALANCE,
        MIN_ACTIVATION_BALANCE,
        credentials(0),
    );
    let amount = MIN_ACTIVATION_BALANCE / 4;
    run_pending_deposit_applying(&mut host, signed(0, amount), 0, true);
    assert_eq!(host.balances[0], MIN_ACTIVATION_BALANCE + amount);
    assert_eq!(host.validators[0].effective_balance, MIN_ACTIVATION_BALANCE);
}

#[test]
fn test_apply_pending_deposit_top_up__min_activation_balance_compounding() {
    let mut host = top_up_state(
        MIN_ACTIVATION_BALANCE,
        MIN_ACTIVATION_BALANCE,
        credentials(COMPOUNDING_WITHDRAWAL_PREFIX),
    );
    let amount = MIN_ACTIVATION_BALANCE / 4;
    run_pending_deposit_applying(&mut host, signed(0, amount), 0, true);
    assert_eq!(host.balances[0], MIN_ACTIVATION_BALANCE + amount);
    assert_eq!(host.validators[0].effective_balance, MIN_ACTIVATION_BALANCE);
}

#[test]
fn test_apply_pending_deposit_top_up__max_effective_balance_compounding() {
    let mut host = top_up_state(
        MAX_EFFECTIVE_BALANCE_ELECTRA,
        MAX_EFFECTIVE_BALANCE_ELECTRA,
        credentials(COMPOUNDING_WITHDRAWAL_PREFIX),
    );
    let amount = MAX_EFFECTIVE_BALANCE_ELECTRA / 4;
    run_pending_deposit_applying(&mut host, signed(0, amount), 0, true);
    assert_eq!(host.balances[0], MAX_EFFECTIVE_BALANCE_ELECTRA + amount);
    assert_eq!(
        host.validators[0].effective_balance,
        MAX_EFFECTIVE_BALANCE_ELECTRA
    );
}

#[test]
fn test_apply_pending_deposit_top_up__less_effective_balance() {
    let initial_balance = MIN_ACTIVATION_BALANCE - 1000;
    let initial_effective = MIN_ACTIVATION_BALANCE - INCREMENT;
    let mut host = top_up_state(initial_balance, initial_effective, credentials(0));
    let amount = MIN_ACTIVATION_BALANCE / 4;
    run_pending_deposit_applying(&mut host, signed(0, amount), 0, true);
    assert_eq!(host.balances[0], initial_balance + amount);
    assert_eq!(host.validators[0].effective_balance, initial_effective);
}

#[test]
fn test_apply_pending_deposit_top_up__zero_balance() {
    let mut host = top_up_state(0, 0, credentials(0));
    let amount = MIN_ACTIVATION_BALANCE / 4;
    run_pending_deposit_applying(&mut host, signed(0, amount), 0, true);
    assert_eq!(host.balances[0], amount);
    assert_eq!(host.validators[0].effective_balance, 0);
}

#[test]
fn test_apply_pending_deposit_incorrect_sig_top_up() {
    let mut host = state();
    let deposit = pending(0, MIN_ACTIVATION_BALANCE / 4, credentials(0), None, 0);
    assert!(!is_valid_deposit_signature(
        &mut host,
        &deposit,
        &ssz::deposit_domain(GENESIS_FORK)
    ));
    // Invalid signatures are allowed in top-ups.
    run_pending_deposit_applying(&mut host, deposit, 0, true);
}

#[test]
fn test_apply_pending_deposit_incorrect_withdrawal_credentials_top_up() {
    let mut host = state();
    let mut wc = [0x6au8; 32];
    wc[0] = 0x00;
    let deposit = pending(0, MIN_ACTIVATION_BALANCE / 4, wc, Some(GENESIS_FORK), 0);
    // Inconsistent withdrawal credentials are allowed in top-ups, and do not change them.
    run_pending_deposit_applying(&mut host, deposit, 0, true);
    assert_eq!(host.validators[0].withdrawal_credentials, credentials(0));
}

#[test]
fn test_apply_pending_deposit_key_validate_invalid_subgroup() {
    let mut host = state();
    let index = host.validators.len() as u32;
    let deposit = pending_for(
        [0; 48],
        MIN_ACTIVATION_BALANCE,
        credentials(0),
        Some(GENESIS_FORK),
        0,
    );
    run_pending_deposit_applying(&mut host, deposit, index, false);
}

#[test]
fn test_apply_pending_deposit_key_validate_invalid_decompression() {
    let mut host = state();
    let index = host.validators.len() as u32;
    let mut key = [0u8; 48];
    key[0] = 0xc0;
    let deposit = pending_for(
        key,
        MIN_ACTIVATION_BALANCE,
        credentials(0),
        Some(GENESIS_FORK),
        0,
    );
    run_pending_deposit_applying(&mut host, deposit, index, false);
}

#[test]
fn test_apply_pending_deposit_ineffective_deposit_with_bad_fork_version() {
    let mut host = state();
    let index = host.validators.len() as u32;
    let deposit = pending(
        index,
        MIN_ACTIVATION_BALANCE,
        credentials(0),
        Some([0xaa, 0xbb, 0xcc, 0xdd]),
        0,
    );
    run_pending_deposit_applying(&mut host, deposit, index, false);
}

#[test]
fn test_apply_pending_deposit_with_previous_fork_version() {
    let mut host = state();
    let index = host.validators.len() as u32;
    let deposit = pending(
        index,
        MIN_ACTIVATION_BALANCE,
        credentials(0),
        Some([1, 0, 0, 1]),
        0,
    );
    run_pending_deposit_applying(&mut host, deposit, index, false);
}

#[test]
fn test_ineffective_deposit_with_current_fork_version() {
    let mut host = state();
    let index = host.validators.len() as u32;
    let deposit = pending(
        index,
        MIN_ACTIVATION_BALANCE,
        credentials(0),
        Some([5, 0, 0, 1]),
        0,
    );
    run_pending_deposit_applying(&mut host, deposit, index, false);
}

#[test]
fn test_apply_pending_deposit_effective_deposit_with_genesis_fork_version() {
    let mut host = state();
    let (deposit, index) = fresh(&host, MIN_ACTIVATION_BALANCE, credentials(0));
    run_pending_deposit_applying(&mut host, deposit, index, true);
}

// ---- block_processing/test_process_deposit_request.py ----

fn leaf(d: &Deposit) -> Root {
    tree::deposit_data_root(
        d.pubkey.as_slice().try_into().unwrap(),
        d.withdrawal_credentials.as_slice().try_into().unwrap(),
        d.amount,
        d.signature.as_slice().try_into().unwrap(),
    )
}

/// The block deposit of a pending deposit, proven in a deposit contract holding `before` other
/// deposits; the context of a block at height 7 (slot 9) that agrees on the contract's root.
fn block_with(deposits: &[PendingDeposit], before: u64) -> (Vec<Deposit>, BlockContext) {
    let mut block: Vec<Deposit> = deposits
        .iter()
        .map(|d| Deposit {
            pubkey: d.pubkey.to_vec(),
            withdrawal_credentials: d.withdrawal_credentials.to_vec(),
            amount: d.amount,
            signature: d.signature.to_vec(),
            proof: Vec::new(),
        })
        .collect();
    let mut contract = tree::reference::NaiveDepositTree::new();
    for i in 0..before {
        contract.push([i as u8; 32]);
    }
    for d in &block {
        contract.push(leaf(d));
    }
    let count = contract.len();
    for (i, d) in block.iter_mut().enumerate() {
        d.proof = contract.proof(before + i as u64, count).unwrap().concat();
    }
    let ctx = BlockContext {
        height: 7,
        slot: 9,
        genesis_fork_version: GENESIS_FORK.to_vec(),
        eth1_data: crate::Eth1Data {
            deposit_root: contract.root().to_vec(),
            deposit_count: count,
            block_hash: vec![0; 32],
        },
        eth1_deposit_index: before,
    };
    (block, ctx)
}

/// pyspec's `run_deposit_request_processing`: the request is queued with the block's slot and
/// the registry is unchanged.
fn run_deposit_request_processing(host: &mut MockHost, request: PendingDeposit) {
    let pre_validators = host.validators.clone();
    let pre_balances = host.balances.clone();
    let pre_len = host.queue.len();
    let (block, ctx) = block_with(std::slice::from_ref(&request), 0);
    let queued = queue_block_deposits(host, &ctx, &block).unwrap();
    assert_eq!(queued.queued, 1);
    assert_eq!(host.validators, pre_validators);
    assert_eq!(host.balances, pre_balances);
    assert_eq!(host.queue.len(), pre_len + 1);
    let expected = PendingDeposit {
        slot: ctx.slot,
        height: ctx.height,
        ..request
    };
    assert_eq!(host.queue.back(), Some(&expected));
}

#[test]
fn test_process_deposit_request_min_activation() {
    let mut host = state();
    let (request, _) = fresh(&host, MIN_ACTIVATION_BALANCE, credentials(0));
    run_deposit_request_processing(&mut host, request);
}

#[test]
fn test_process_deposit_request_max_effective_balance_compounding() {
    let mut host = state();
    let wc = credentials(COMPOUNDING_WITHDRAWAL_PREFIX);
    let (request, _) = fresh(&host, MAX_EFFECTIVE_BALANCE_ELECTRA, wc);
    run_deposit_request_processing(&mut host, request);
}

#[test]
fn test_process_deposit_request_top_up_min_activation() {
    let mut host = top_up_state(
        MIN_ACTIVATION_BALANCE,
        MIN_ACTIVATION_BALANCE,
        credentials(0),
    );
    run_deposit_request_processing(&mut host, signed(0, MIN_ACTIVATION_BALANCE / 4));
}

#[test]
fn test_process_deposit_request_top_up_max_effective_balance_compounding() {
    let wc = credentials(COMPOUNDING_WITHDRAWAL_PREFIX);
    let mut host = top_up_state(
        crate::MAX_EFFECTIVE_BALANCE,
        crate::MAX_EFFECTIVE_BALANCE,
        wc,
    );
    let request = pending(0, MIN_ACTIVATION_BALANCE / 4, wc, Some(GENESIS_FORK), 0);
    run_deposit_request_processing(&mut host, request);
}

#[test]
fn test_process_deposit_request_invalid_sig() {
    let mut host = state();
    let index = host.validators.len() as u32;
    let request = pending(index, MIN_ACTIVATION_BALANCE, credentials(0), None, 0);
    run_deposit_request_processing(&mut host, request);
}

#[test]
fn test_process_deposit_request_top_up_invalid_sig() {
    let mut host = top_up_state(
        MIN_ACTIVATION_BALANCE,
        MIN_ACTIVATION_BALANCE,
        credentials(0),
    );
    let request = pending(0, MIN_ACTIVATION_BALANCE / 4, credentials(0), None, 0);
    run_deposit_request_processing(&mut host, request);
}

/// modnode's equivalent of `test_process_deposit_request_set_start_index`: the running
/// `eth1_deposit_index` advances by the block's deposits, and a deposit out of place is refused
/// before anything is queued.
#[test]
fn process_deposit_request_advances_the_eth1_deposit_index() {
    let mut host = state();
    let requests: Vec<_> = (0..3).map(|i| signed(100 + i, INCREMENT)).collect();
    let (block, ctx) = block_with(&requests, 5);
    let queued = queue_block_deposits(&mut host, &ctx, &block).unwrap();
    assert_eq!(
        queued,
        Queued {
            queued: 3,
            eth1_deposit_index: 8
        }
    );
    let mut swapped = block.clone();
    swapped.swap(0, 1);
    let mut fresh_host = state();
    assert_eq!(
        queue_block_deposits(&mut fresh_host, &ctx, &swapped),
        Err(Error::Process(ProcessError::BadProof(5)))
    );
    assert!(fresh_host.queue.is_empty());
}

// ---- beyond pyspec: the queue end to end ----

/// A block's deposits are applied by the epochs after them, 16 at a time, once final, and end
/// with the registry deposits-v2 would have built for the same deposits (0x00/0x01 credentials,
/// at most 32 ETH each, the signatures valid).
#[test]
fn queued_deposits_drain_to_the_registry_deposits_v2_builds() {
    let requests: Vec<_> = (0..40)
        .map(|i| signed(200 + i % 30, INCREMENT * (1 + u64::from(i % 3))))
        .collect();
    let (block, ctx) = block_with(&requests, 0);
    let mut v3 = MockHost::default();
    queue_block_deposits(&mut v3, &ctx, &block).unwrap();
    let mut v2 = MockHost::default();
    crate::process::process_batched(&mut v2, &ctx, &block).unwrap();
    // Not final before height 7 + 4.
    assert!(epoch_at(&mut v3, 10).applied.is_empty());
    let mut epochs = 0;
    while !v3.queue.is_empty() {
        let before = v3.queue.len();
        let out = epoch_at(&mut v3, 11 + epochs);
        assert!(out.applied.len() <= MAX_PENDING_DEPOSITS_PER_EPOCH as usize);
        assert!(v3.queue.len() < before);
        epochs += 1;
    }
    assert_eq!(epochs, 3);
    assert_eq!(v3.validators, v2.validators);
    assert_eq!(v3.balances, v2.balances);
    assert_eq!(v3.to_consume, 0);
}

#[test]
fn churn_limits_follow_the_spec() {
    assert_eq!(
        get_balance_churn_limit(0),
        MIN_PER_EPOCH_CHURN_LIMIT_ELECTRA
    );
    let big = CHURN_LIMIT_QUOTIENT * 1000 * INCREMENT + CHURN_LIMIT_QUOTIENT * 7;
    assert_eq!(get_balance_churn_limit(big), 1000 * INCREMENT);
    assert_eq!(
        get_activation_exit_churn_limit(big),
        MAX_PER_EPOCH_ACTIVATION_EXIT_CHURN_LIMIT
    );
    assert_eq!(
        get_activation_exit_churn_limit(u64::MAX),
        MAX_PER_EPOCH_ACTIVATION_EXIT_CHURN_LIMIT
    );
    assert!(is_finalized(3, 7, 4));
    assert!(!is_finalized(4, 7, 4));
    assert!(!is_finalized(u64::MAX, u64::MAX, 1));
}

#[test]
fn amounts_past_u64_are_over_the_churn_not_an_overflow() {
    let mut host = state();
    host.queue.push_back(signed(0, INCREMENT));
    host.queue.push_back(signed(1, u64::MAX));
    let out = epoch(&mut host);
    assert_eq!(out.applied, vec![Applied::ToppedUp(0)]);
    assert_eq!(host.queue.len(), 1);
    host.to_consume = u64::MAX;
    let limit = churn(&mut host);
    assert_eq!(
        process_pending_deposits(
            &mut host,
            &EpochContext {
                height: FINALITY_DEPTH,
                finality_depth: FINALITY_DEPTH,
                genesis_fork_version: GENESIS_FORK,
            },
        ),
        Err(Error::Overflow(
            "deposit balance to consume plus the churn limit"
        ))
    );
    assert!(limit > 0);
}
