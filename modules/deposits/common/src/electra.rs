//! Electra's deposit processing (consensus-specs `specs/electra/beacon-chain.md`, EIP-6110 and
//! EIP-7251) over modnode's deposit bridge: deposits are proven against the agreed deposit root
//! exactly as in phase0, but a block no longer applies them. Every deposit becomes a
//! [`PendingDeposit`] at the end of the host-owned queue (`process_deposit_request`: new
//! validators and top-ups alike, the signature unchecked), and at each epoch boundary
//! [`process_pending_deposits`] applies at most [`MAX_PENDING_DEPOSITS_PER_EPOCH`] finalized
//! entries from the front within the activation churn limit, carrying the unused churn in
//! `deposit_balance_to_consume`. [`apply_pending_deposit`] checks a new validator's proof of
//! possession (genesis-fork deposit domain) and sets its effective balance by
//! [`get_max_effective_balance`]: 2048 ETH for `0x02` compounding credentials, 32 ETH otherwise.
//!
//! What modnode does not model, and how the modelled subset follows the spec:
//! - **Exits, withdrawals and slashing** do not exist in modnode: no validator is ever exiting or
//!   withdrawn, so the spec's "postpone the deposit of an exiting validator" and "apply the
//!   deposit of a withdrawn validator without churn" branches never fire and the queue only ever
//!   loses entries from its front (no re-append, no shifting).
//! - **Activation**: every validator in the registry counts as active; the total active balance
//!   is the sum of the registry's effective balances, kept by the host in O(1).
//! - **Effective-balance updates** (`process_effective_balance_updates`) are not modelled: a
//!   top-up changes the balance only, as in deposits@2.
//! - **Finality** is by height: an entry queued at height `h` is finalized for the epoch
//!   transition at height `H` once `H >= h + finality_depth` (the spec's
//!   `deposit.slot > finalized_slot` stop, with modnode's depth-based finality). Deterministic
//!   from the state: it depends on heights only.
//! - **The eth1-bridge / deposit-request transition** (`deposit_requests_start_index`): modnode
//!   has one deposit source, the bridge, and every deposit is a request, so there is nothing to
//!   wait for.
//!
//! Work per epoch is proportional to the deposits applied (at most 16 entries read from the
//! front of the queue), never to the queue's length or the registry's size.

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, DefaultHasher};

use crate::process::{self, Host};
use crate::ssz::{self, Root};
use crate::{BlockContext, Deposit, ProcessError, RegistryError, SignatureSet};

#[cfg(test)]
mod tests;

/// Gwei in one ETH.
const ETH: u64 = crate::GWEI_PER_ETH;
/// `MIN_ACTIVATION_BALANCE`: 32 ETH, the cap of a non-compounding validator.
pub const MIN_ACTIVATION_BALANCE: u64 = 32 * ETH;
/// `MAX_EFFECTIVE_BALANCE_ELECTRA`: 2048 ETH, the cap of a compounding validator.
pub const MAX_EFFECTIVE_BALANCE_ELECTRA: u64 = 2048 * ETH;
/// `MIN_PER_EPOCH_CHURN_LIMIT_ELECTRA`: 128 ETH.
pub const MIN_PER_EPOCH_CHURN_LIMIT_ELECTRA: u64 = 128 * ETH;
/// `MAX_PER_EPOCH_ACTIVATION_EXIT_CHURN_LIMIT`: 256 ETH.
pub const MAX_PER_EPOCH_ACTIVATION_EXIT_CHURN_LIMIT: u64 = 256 * ETH;
/// `CHURN_LIMIT_QUOTIENT`.
pub const CHURN_LIMIT_QUOTIENT: u64 = 65_536;
/// `MAX_PENDING_DEPOSITS_PER_EPOCH`.
pub const MAX_PENDING_DEPOSITS_PER_EPOCH: u32 = 16;
/// `COMPOUNDING_WITHDRAWAL_PREFIX`.
pub const COMPOUNDING_WITHDRAWAL_PREFIX: u8 = 0x02;

/// `PendingDeposit`: one queued deposit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingDeposit {
    /// BLS public key.
    pub pubkey: [u8; 48],
    /// Withdrawal credentials; the first byte is the prefix (`0x02`: compounding).
    pub withdrawal_credentials: [u8; 32],
    /// Amount in Gwei.
    pub amount: u64,
    /// Proof of possession, checked when the deposit is applied to an unknown pubkey.
    pub signature: [u8; 96],
    /// Slot of the block that queued it (the spec's `slot`).
    pub slot: u64,
    /// Height of the block that queued it: what finality is decided by.
    pub height: u64,
}

/// Why the host's queue refused an operation; any of these makes the block invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueError {
    /// The queue holds its maximum number of entries (the host's bound, 2^32 - 1).
    Full,
    /// Asked to drop more entries than the queue holds.
    Short {
        /// Entries asked for.
        wanted: u64,
        /// Entries the queue holds.
        len: u64,
    },
}

impl fmt::Display for QueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full => write!(f, "the pending-deposit queue is full"),
            Self::Short { wanted, len } => {
                write!(
                    f,
                    "dropping {wanted} pending deposits from a queue of {len}"
                )
            }
        }
    }
}

/// What Electra processing needs from the host beyond the registry and BLS of [`Host`]: the
/// pending-deposit queue and its counter, and the total active balance. Writes go to the call's
/// overlay like the registry's.
pub trait PendingQueue {
    /// Sum of the registry's effective balances (before the spec's 1-ETH floor).
    fn total_active_balance(&mut self) -> u64;
    /// Appends an entry at the end of the queue.
    fn queue_push(&mut self, deposit: &PendingDeposit) -> Result<(), QueueError>;
    /// Number of entries queued.
    fn queue_len(&mut self) -> u64;
    /// Up to `count` entries starting `offset` entries after the front, in queue order.
    fn queue_read(&mut self, offset: u64, count: u32) -> Vec<PendingDeposit>;
    /// Removes `count` entries from the front.
    fn queue_drop_front(&mut self, count: u64) -> Result<(), QueueError>;
    /// `deposit_balance_to_consume`.
    fn deposit_balance_to_consume(&mut self) -> u64;
    /// Sets `deposit_balance_to_consume`.
    fn set_deposit_balance_to_consume(&mut self, gwei: u64);
}

/// Why a block's deposits or an epoch's queue could not be processed; the block is invalid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The deposits themselves (malformed, bad proof, bad context) or a registry write.
    Process(ProcessError),
    /// The host's queue refused an operation.
    Queue(QueueError),
    /// A Gwei sum would exceed 2^64 - 1; names the sum.
    Overflow(&'static str),
}

impl From<ProcessError> for Error {
    fn from(e: ProcessError) -> Self {
        Self::Process(e)
    }
}

impl From<RegistryError> for Error {
    fn from(e: RegistryError) -> Self {
        Self::Process(ProcessError::Registry(e))
    }
}

impl From<QueueError> for Error {
    fn from(e: QueueError) -> Self {
        Self::Queue(e)
    }
}

/// What a block's deposits did under Electra: all of them were queued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queued {
    /// Entries this block appended to the queue (one per deposit).
    pub queued: u32,
    /// The state's `eth1_deposit_index` after the block.
    pub eth1_deposit_index: u64,
}

/// Chain facts the epoch transition depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochContext {
    /// Height of the first block of the epoch, whose transition runs it.
    pub height: u64,
    /// The genesis `finality_depth`: entries at most this deep are not yet final.
    pub finality_depth: u64,
    /// The genesis fork version: the deposit signing domain.
    pub genesis_fork_version: [u8; 4],
}

/// What applying one pending deposit did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// A new validator was added at this index.
    Created(u32),
    /// An existing validator's balance was increased.
    ToppedUp(u32),
    /// Unknown pubkey with a signature that does not verify: dropped.
    InvalidSignature,
}

/// What one epoch's `process_pending_deposits` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochProcessed {
    /// One outcome per entry taken from the front of the queue, in queue order.
    pub applied: Vec<Applied>,
    /// `deposit_balance_to_consume` after the epoch.
    pub deposit_balance_to_consume: u64,
}

/// `has_compounding_withdrawal_credential`.
pub fn has_compounding_withdrawal_credential(withdrawal_credentials: &[u8; 32]) -> bool {
    withdrawal_credentials.first() == Some(&COMPOUNDING_WITHDRAWAL_PREFIX)
}

/// `get_max_effective_balance`: 2048 ETH for compounding credentials, else 32 ETH.
pub fn get_max_effective_balance(withdrawal_credentials: &[u8; 32]) -> u64 {
    if has_compounding_withdrawal_credential(withdrawal_credentials) {
        MAX_EFFECTIVE_BALANCE_ELECTRA
    } else {
        MIN_ACTIVATION_BALANCE
    }
}

/// The effective balance `get_validator_from_deposit` gives a new validator:
/// `min(amount - amount % EFFECTIVE_BALANCE_INCREMENT, get_max_effective_balance)`.
pub fn effective_balance_from_deposit(withdrawal_credentials: &[u8; 32], amount: u64) -> u64 {
    let remainder = amount
        .checked_rem(crate::EFFECTIVE_BALANCE_INCREMENT)
        .unwrap_or(0);
    amount
        .saturating_sub(remainder)
        .min(get_max_effective_balance(withdrawal_credentials))
}

/// `get_total_active_balance`: the sum, floored at `EFFECTIVE_BALANCE_INCREMENT`.
pub fn get_total_active_balance(sum_of_effective_balances: u64) -> u64 {
    sum_of_effective_balances.max(crate::EFFECTIVE_BALANCE_INCREMENT)
}

/// `get_balance_churn_limit`: `max(128 ETH, total active / 65536)`, rounded down to 1 ETH.
pub fn get_balance_churn_limit(total_active_balance: u64) -> u64 {
    let churn = MIN_PER_EPOCH_CHURN_LIMIT_ELECTRA.max(
        get_total_active_balance(total_active_balance)
            .checked_div(CHURN_LIMIT_QUOTIENT)
            .unwrap_or(0),
    );
    let remainder = churn
        .checked_rem(crate::EFFECTIVE_BALANCE_INCREMENT)
        .unwrap_or(0);
    churn.saturating_sub(remainder)
}

/// `get_activation_exit_churn_limit`: `min(256 ETH, get_balance_churn_limit)`.
pub fn get_activation_exit_churn_limit(total_active_balance: u64) -> u64 {
    MAX_PER_EPOCH_ACTIVATION_EXIT_CHURN_LIMIT.min(get_balance_churn_limit(total_active_balance))
}

/// Block processing under Electra (`process_deposit_request` for each deposit, after the
/// phase0 proof check at the running deposit index that modnode's bridge keeps): every deposit
/// is appended to the queue with the including block's slot and height; nothing is applied and
/// no signature is checked.
pub fn queue_block_deposits<H: PendingQueue>(
    host: &mut H,
    ctx: &BlockContext,
    deposits: &[Deposit],
) -> Result<Queued, Error> {
    let checked = process::check(deposits)?;
    let eth1_deposit_index = process::verify_proofs_shared(ctx, &checked)?;
    let mut queued: u32 = 0;
    for deposit in &checked {
        host.queue_push(&PendingDeposit {
            pubkey: *deposit.pubkey,
            withdrawal_credentials: *deposit.withdrawal_credentials,
            amount: deposit.amount,
            signature: *deposit.signature,
            slot: ctx.slot,
            height: ctx.height,
        })?;
        queued = queued
            .checked_add(1)
            .ok_or(Error::Overflow("deposits queued by one block"))?;
    }
    Ok(Queued {
        queued,
        eth1_deposit_index,
    })
}

/// Whether an entry queued at `queued_at` is final for the transition at `height`.
pub fn is_finalized(queued_at: u64, height: u64, finality_depth: u64) -> bool {
    queued_at
        .checked_add(finality_depth)
        .is_some_and(|final_at| final_at <= height)
}

/// `process_pending_deposits` for the modelled subset (no exits, no withdrawals): reads at most
/// [`MAX_PENDING_DEPOSITS_PER_EPOCH`] entries from the front of the queue, stops at the first
/// one not finalized or over the churn available (`deposit_balance_to_consume` plus the
/// activation churn limit), applies the ones before it, drops them from the front and carries
/// the unused churn only when the churn limit was what stopped it.
pub fn process_pending_deposits<H: Host + PendingQueue>(
    host: &mut H,
    ctx: &EpochContext,
) -> Result<EpochProcessed, Error> {
    let churn = get_activation_exit_churn_limit(host.total_active_balance());
    let available_for_processing =
        host.deposit_balance_to_consume()
            .checked_add(churn)
            .ok_or(Error::Overflow(
                "deposit balance to consume plus the churn limit",
            ))?;
    let window = host.queue_read(0, MAX_PENDING_DEPOSITS_PER_EPOCH);
    let mut processed_amount: u64 = 0;
    let mut is_churn_limit_reached = false;
    let mut taken = Vec::new();
    for deposit in window.iter().take(MAX_PENDING_DEPOSITS_PER_EPOCH as usize) {
        if !is_finalized(deposit.height, ctx.height, ctx.finality_depth) {
            break;
        }
        // A sum past 2^64 - 1 Gwei is over any churn.
        let after = processed_amount.checked_add(deposit.amount);
        is_churn_limit_reached = after.is_none_or(|after| after > available_for_processing);
        let Some(after) = after.filter(|_| !is_churn_limit_reached) else {
            break;
        };
        processed_amount = after;
        taken.push(deposit);
    }
    let domain = ssz::deposit_domain(ctx.genesis_fork_version);
    let applied = apply_pending_deposits(host, &taken, &domain)?;
    let count = u64::try_from(taken.len()).map_err(|_| Error::Overflow("entries taken"))?;
    host.queue_drop_front(count)?;
    let deposit_balance_to_consume = if is_churn_limit_reached {
        available_for_processing.saturating_sub(processed_amount)
    } else {
        0
    };
    host.set_deposit_balance_to_consume(deposit_balance_to_consume);
    Ok(EpochProcessed {
        applied,
        deposit_balance_to_consume,
    })
}

/// `is_valid_deposit_signature` of one pending deposit, on its own.
fn is_valid_deposit_signature<H: Host>(
    host: &mut H,
    deposit: &PendingDeposit,
    domain: &Root,
) -> bool {
    let message = signing_root(deposit, domain);
    host.bls_verify(&deposit.pubkey, &message, &deposit.signature)
}

fn signing_root(deposit: &PendingDeposit, domain: &Root) -> Root {
    let object = ssz::deposit_message_root(
        &deposit.pubkey,
        &deposit.withdrawal_credentials,
        deposit.amount,
    );
    ssz::signing_root(&object, domain)
}

/// `apply_pending_deposit`: an unknown pubkey with a valid proof of possession becomes a new
/// validator (`add_validator_to_registry`, balance = amount, effective balance by
/// [`effective_balance_from_deposit`]); an invalid one is dropped; a known pubkey is topped up
/// whatever its signature and credentials. `valid` is asked only for an unknown pubkey.
pub fn apply_pending_deposit<H: Host>(
    host: &mut H,
    deposit: &PendingDeposit,
    valid: impl FnOnce(&mut H) -> bool,
) -> Result<Applied, Error> {
    match host.index_of(&deposit.pubkey) {
        Some(index) => {
            host.increase_balance(index, deposit.amount)?;
            Ok(Applied::ToppedUp(index))
        }
        None if valid(host) => {
            let index = host.add_validator(
                &deposit.pubkey,
                &deposit.withdrawal_credentials,
                effective_balance_from_deposit(&deposit.withdrawal_credentials, deposit.amount),
                deposit.amount,
            )?;
            Ok(Applied::Created(index))
        }
        None => Ok(Applied::InvalidSignature),
    }
}

/// Pubkey → index before the epoch's deposits, for their distinct pubkeys.
type Seen<'a> = HashMap<&'a [u8; 48], Option<u32>, BuildHasherDefault<DefaultHasher>>;

/// Applies the entries in order with deposits-v2's batching: the first entry of every pubkey
/// unknown before goes into one batch verification; if it fails, each is checked on its own.
/// The outcomes are those of applying the entries one by one.
fn apply_pending_deposits<H: Host>(
    host: &mut H,
    deposits: &[&PendingDeposit],
    domain: &Root,
) -> Result<Vec<Applied>, Error> {
    let mut in_batch = vec![false; deposits.len()];
    let mut sets = Vec::new();
    let mut seen = Seen::with_capacity_and_hasher(deposits.len(), BuildHasherDefault::default());
    for (deposit, member) in deposits.iter().zip(in_batch.iter_mut()) {
        if seen.contains_key(&deposit.pubkey) {
            continue;
        }
        let before = host.index_of(&deposit.pubkey);
        seen.insert(&deposit.pubkey, before);
        if before.is_none() {
            *member = true;
            sets.push(SignatureSet {
                pubkey: deposit.pubkey.to_vec(),
                message: signing_root(deposit, domain).to_vec(),
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
    let mut applied = Vec::with_capacity(deposits.len());
    for (deposit, member) in deposits.iter().zip(in_batch) {
        let outcome = match seen.get(&deposit.pubkey).copied().flatten() {
            Some(index) => {
                host.increase_balance(index, deposit.amount)?;
                Applied::ToppedUp(index)
            }
            None => apply_pending_deposit(host, deposit, |host| {
                (batch_valid && member) || is_valid_deposit_signature(host, deposit, domain)
            })?,
        };
        applied.push(outcome);
    }
    Ok(applied)
}
