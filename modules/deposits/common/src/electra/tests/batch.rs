//! One batch verification per epoch: `process_pending_deposits` asks the host for one
//! `bls_verify_batch` over the first entry of every pubkey unknown before the epoch, and its
//! outcomes are exactly those of checking every signature on its own (pyspec's
//! `apply_pending_deposit` in a loop), whatever the batch holds. The reference here is that
//! loop: [`apply_pending_deposit`] with [`is_valid_deposit_signature`] for each entry in turn.

use super::*;

/// Enough carried churn that no scenario here is stopped by the churn limit.
const PLENTY: u64 = 1 << 60;

/// Applies `entries` one by one on `host`, each new pubkey's signature checked on its own.
fn one_by_one(host: &mut MockHost, entries: &[PendingDeposit]) -> Vec<Applied> {
    let domain = ssz::deposit_domain(GENESIS_FORK);
    entries
        .iter()
        .map(|d| {
            apply_pending_deposit(host, d, |h| is_valid_deposit_signature(h, d, &domain)).unwrap()
        })
        .collect()
}

/// Runs one epoch over `entries` queued on `host` and checks it against the one-by-one loop on
/// a copy of `host`: same outcomes, same registry. Returns the outcomes and the epoch's host
/// (for its counters).
fn epoch_matches_one_by_one(
    host: &MockHost,
    entries: &[PendingDeposit],
) -> (Vec<Applied>, MockHost) {
    let mut batched = host.clone();
    batched.queue.extend(entries.iter().cloned());
    batched.to_consume = PLENTY;
    let out = epoch(&mut batched);
    assert_eq!(out.applied.len(), entries.len(), "every entry is taken");
    let mut reference = host.clone();
    let expected = one_by_one(&mut reference, entries);
    assert_eq!(out.applied, expected, "outcomes of {entries:?}");
    assert_eq!(batched.validators, reference.validators);
    assert_eq!(batched.balances, reference.balances);
    assert!(batched.queue.is_empty());
    (out.applied, batched)
}

/// A deposit for `pubkey(index)` with 0x01 credentials, signed under the genesis fork's deposit
/// domain when `valid`, else unsigned.
fn deposit(index: u32, amount: u64, valid: bool) -> PendingDeposit {
    pending(
        index,
        amount,
        credentials(1),
        valid.then_some(GENESIS_FORK),
        0,
    )
}

#[test]
fn an_epoch_of_16_new_validators_makes_one_batch_call_and_no_single_call() {
    let host = state();
    let first = host.validators.len() as u32;
    let entries: Vec<_> = (first..first + MAX_PENDING_DEPOSITS_PER_EPOCH)
        .map(|i| deposit(i, 8 * INCREMENT, true))
        .collect();
    let (_, after) = epoch_matches_one_by_one(&host, &entries);
    assert_eq!(
        after.batch_checks,
        vec![MAX_PENDING_DEPOSITS_PER_EPOCH as usize]
    );
    assert_eq!(after.single_checks, 0);
    assert_eq!(after.validators.len(), host.validators.len() + 16);
}

#[test]
fn an_invalid_signature_in_the_batch_gives_the_one_by_one_outcomes() {
    let host = state();
    let next = host.validators.len() as u32;
    let mut wrong_fork = deposit(next + 3, 2 * INCREMENT, false);
    let root = signing_root(&wrong_fork, &ssz::deposit_domain([9, 9, 9, 9]));
    wrong_fork.signature[..32].copy_from_slice(&root);
    let entries = [
        deposit(next, INCREMENT, true),
        deposit(next + 1, INCREMENT, false),
        deposit(next + 2, INCREMENT, true),
        // A top-up: no signature asked for, whatever it carries.
        deposit(5, INCREMENT, false),
        wrong_fork,
    ];
    let (applied, after) = epoch_matches_one_by_one(&host, &entries);
    assert_eq!(
        applied,
        vec![
            Applied::Created(next),
            Applied::InvalidSignature,
            Applied::Created(next + 1),
            Applied::ToppedUp(5),
            Applied::InvalidSignature,
        ]
    );
    // The batch of the four new pubkeys fails, then each of them is checked on its own.
    assert_eq!(after.batch_checks, vec![4]);
    assert_eq!(after.single_checks, 4);
}

#[test]
fn the_same_new_pubkey_twice_first_invalid_the_second_is_checked_on_its_own() {
    let host = state();
    let next = host.validators.len() as u32;
    let entries = [
        deposit(next, INCREMENT, false),
        deposit(next, 2 * INCREMENT, true),
        deposit(next + 1, INCREMENT, true),
    ];
    let (applied, after) = epoch_matches_one_by_one(&host, &entries);
    assert_eq!(
        applied,
        vec![
            Applied::InvalidSignature,
            Applied::Created(next),
            Applied::Created(next + 1),
        ]
    );
    assert_eq!(after.balances[next as usize], 2 * INCREMENT);
    // The batch holds each pubkey's first entry only; the second entry of the invalid pubkey
    // is checked on its own after the batch failed.
    assert_eq!(after.batch_checks, vec![2]);
    assert_eq!(after.single_checks, 3);
}

#[test]
fn the_same_new_pubkey_twice_first_valid_the_second_is_a_top_up() {
    let host = state();
    let next = host.validators.len() as u32;
    let entries = [
        deposit(next, 8 * INCREMENT, true),
        // Unsigned: a top-up of the validator the first entry created, not checked.
        deposit(next, 4 * INCREMENT, false),
        deposit(next + 1, INCREMENT, true),
    ];
    let (applied, after) = epoch_matches_one_by_one(&host, &entries);
    assert_eq!(
        applied,
        vec![
            Applied::Created(next),
            Applied::ToppedUp(next),
            Applied::Created(next + 1),
        ]
    );
    assert_eq!(after.balances[next as usize], 12 * INCREMENT);
    assert_eq!(
        after.validators[next as usize].effective_balance,
        8 * INCREMENT
    );
    assert_eq!(after.batch_checks, vec![2]);
    assert_eq!(after.single_checks, 0);
}

/// A lone new deposit goes to `bls_verify` alone; a false answer is then checked once more on
/// its own (the fallback of a failed batch), one extra host call for an invalid lone deposit.
/// deposits-v3's bytes are pinned since it landed (a chain that ran it must find the same
/// module), so this cost stays; outcomes are the one-by-one loop's either way.
#[test]
fn a_lone_new_deposit_is_checked_alone_and_once_more_when_invalid() {
    let host = state();
    let next = host.validators.len() as u32;
    for (valid, checks) in [(true, 1), (false, 2)] {
        let (_, after) = epoch_matches_one_by_one(&host, &[deposit(next, INCREMENT, valid)]);
        assert!(after.batch_checks.is_empty(), "valid: {valid}");
        assert_eq!(after.single_checks, checks, "valid: {valid}");
    }
}

#[test]
fn no_new_pubkey_means_no_signature_check() {
    let host = state();
    let entries = [deposit(0, INCREMENT, false), deposit(3, INCREMENT, true)];
    let (_, after) = epoch_matches_one_by_one(&host, &entries);
    assert!(after.batch_checks.is_empty());
    assert_eq!(after.single_checks, 0);
}

/// Every sequence of four entries drawn from new and known pubkeys, valid and invalid
/// signatures, a key that cannot verify and a repeated pubkey: the epoch's outcomes and
/// registry are the one-by-one loop's.
#[test]
fn every_mix_of_four_entries_matches_the_one_by_one_loop() {
    let host = state();
    let next = host.validators.len() as u32;
    let mut infinity = [0u8; 48];
    infinity[0] = 0xc0;
    let alphabet = [
        deposit(next, INCREMENT, true),
        deposit(next, 2 * INCREMENT, false),
        deposit(next + 1, 3 * INCREMENT, true),
        deposit(next + 1, INCREMENT, false),
        deposit(7, INCREMENT, true),
        deposit(7, 2 * INCREMENT, false),
        pending_for(infinity, INCREMENT, credentials(1), Some(GENESIS_FORK), 0),
    ];
    let n = alphabet.len();
    let mut batches = 0;
    for code in 0..n.pow(4) {
        let entries: Vec<_> = (0..4)
            .map(|digit| alphabet[code / n.pow(digit) % n].clone())
            .collect();
        let (_, after) = epoch_matches_one_by_one(&host, &entries);
        batches += after.batch_checks.len();
        assert!(after.batch_checks.len() <= 1, "{entries:?}");
    }
    assert!(batches > 0);
}
