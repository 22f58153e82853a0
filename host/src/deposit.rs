//! The chain's own deposit types, below the runtime so the deposits modules' host side can
//! convert to them: a deposit as a block carries it ([`DepositData`], [`ProvenDeposit`]), the
//! context a block's deposits call runs in, what became of each deposit, why a block's
//! deposits were refused. The runtime converts to and from the modules' WIT types at the call;
//! nothing above it sees those. The deposit's encoding, leaf and signing root are the block
//! format's (`consensus::block`, `consensus::eth1`).

use std::fmt;

pub use crate::state::Eth1Data;
use crate::state::OverlayError;
use deposits_common::tree::DepositProof;

/// One deposit with its fixed-size fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepositData {
    /// BLS public key (compressed).
    pub pubkey: [u8; 48],
    /// Withdrawal credentials.
    pub withdrawal_credentials: [u8; 32],
    /// Amount in Gwei.
    pub amount: u64,
    /// BLS signature (compressed).
    pub signature: [u8; 96],
}

/// A deposit as a block carries it: the data and its proof against the agreed deposit root at
/// the deposit's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProvenDeposit {
    /// The deposit.
    pub data: DepositData,
    /// 32 sibling hashes (leaf level first), then the deposit count chunk.
    pub proof: DepositProof,
}

/// What the deposits engine is told about the block whose deposits it processes and the
/// state before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DepositContext {
    /// Height of the block.
    pub height: u64,
    /// Slot of the block.
    pub slot: u64,
    /// The chain's genesis fork version, part of the deposit signing domain.
    pub genesis_fork_version: [u8; 4],
    /// The agreed deposit contract checkpoint after the block's vote: proofs are checked
    /// against its deposit root.
    pub eth1_data: Eth1Data,
    /// Index of the block's first deposit in the contract; deposit `i` is proven at this
    /// index + `i`.
    pub eth1_deposit_index: u64,
}

/// What a deposits call that is not a block's is told (deposits@3's epoch transition, a
/// module's migration): the height of the block whose transition runs it, the chain's finality
/// depth and its genesis fork version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainContext {
    /// Height of the block whose transition makes the call.
    pub height: u64,
    /// The chain's finality depth.
    pub finality_depth: u64,
    /// The chain's genesis fork version.
    pub genesis_fork_version: [u8; 4],
}

/// What deposits@3 reports of queuing a block's deposits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedDeposits {
    /// Deposits queued.
    pub queued: u32,
    /// `eth1_deposit_index` after the block.
    pub eth1_deposit_index: u64,
}

/// What deposits@3's epoch transition (`process_pending_deposits`) reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochDeposits {
    /// One outcome per queue entry applied, in queue order.
    pub outcomes: Vec<DepositOutcome>,
    /// The queue's `deposit_balance_to_consume` after the epoch.
    pub deposit_balance_to_consume: u64,
}

/// What became of one deposit, in block order.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum DepositOutcome {
    /// A new validator was added at this index.
    Created(u32),
    /// An existing validator's balance was increased.
    ToppedUp(u32),
    /// A new pubkey whose signature does not verify: skipped, the block stays valid.
    InvalidSignature,
}

/// Why the deposits engine refused a block's deposits: the block is invalid.
#[derive(Clone, PartialEq, Eq)]
pub enum DepositRejection {
    /// A deposit is malformed (a field of the wrong length); names the deposit and field.
    Malformed(String),
    /// The registry refused a write.
    Registry(RegistryRejection),
    /// The block context is unusable.
    BadContext(String),
    /// The proof of the deposit at this contract index does not verify against the agreed
    /// deposit root.
    BadProof(u64),
    /// deposits@3: the pending-deposit queue refused a write.
    Queue(QueueRejection),
    /// deposits@3: a sum or counter would overflow; names it.
    Overflow(String),
}

/// Why deposits@3's pending-deposit queue refused a write.
#[derive(Clone, PartialEq, Eq)]
pub enum QueueRejection {
    /// The queue holds as many entries as it can.
    Full,
    /// A field of the wrong length; names the field.
    BadLength(String),
    /// Dropping `.0` entries from a queue of `.1`.
    Short(u64, u64),
}

/// Why the registry refused a deposit's write.
#[derive(Clone, PartialEq, Eq)]
pub enum RegistryRejection {
    /// A new validator whose pubkey is already registered.
    DuplicatePubkey,
    /// A field of the wrong length; names the field.
    BadLength(String),
    /// A top-up of an index that does not exist.
    UnknownIndex(u32),
    /// A balance would exceed 2^64 − 1 Gwei.
    BalanceOverflow(u32),
    /// The registry holds 2^32 − 1 validators.
    RegistryFull,
}

impl From<&OverlayError> for RegistryRejection {
    /// The registry's refusal of a write (every refusal is the deposits' input's).
    fn from(e: &OverlayError) -> Self {
        match e {
            OverlayError::DuplicatePubkey => Self::DuplicatePubkey,
            OverlayError::BadLength(field) => Self::BadLength((*field).to_string()),
            OverlayError::UnknownIndex(i) => Self::UnknownIndex(*i),
            OverlayError::BalanceOverflow(i) => Self::BalanceOverflow(*i),
            OverlayError::RegistryFull => Self::RegistryFull,
        }
    }
}

// `Debug` shows the variants as the WIT types did (`Outcome::Created(3)`), so that log lines
// and error messages naming them read as before.

impl fmt::Debug for DepositOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Created(i) => f.debug_tuple("Outcome::Created").field(i).finish(),
            Self::ToppedUp(i) => f.debug_tuple("Outcome::ToppedUp").field(i).finish(),
            Self::InvalidSignature => f.debug_tuple("Outcome::InvalidSignature").finish(),
        }
    }
}

impl fmt::Debug for DepositRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(m) => f.debug_tuple("ProcessError::Malformed").field(m).finish(),
            Self::Registry(e) => f.debug_tuple("ProcessError::Registry").field(e).finish(),
            Self::BadContext(m) => f.debug_tuple("ProcessError::BadContext").field(m).finish(),
            Self::BadProof(i) => f.debug_tuple("ProcessError::BadProof").field(i).finish(),
            Self::Queue(e) => f.debug_tuple("ProcessError::Queue").field(e).finish(),
            Self::Overflow(m) => f.debug_tuple("ProcessError::Overflow").field(m).finish(),
        }
    }
}

impl fmt::Debug for RegistryRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DuplicatePubkey => f.debug_tuple("RegistryError::DuplicatePubkey").finish(),
            Self::BadLength(m) => f.debug_tuple("RegistryError::BadLength").field(m).finish(),
            Self::UnknownIndex(i) => f
                .debug_tuple("RegistryError::UnknownIndex")
                .field(i)
                .finish(),
            Self::BalanceOverflow(i) => f
                .debug_tuple("RegistryError::BalanceOverflow")
                .field(i)
                .finish(),
            Self::RegistryFull => f.debug_tuple("RegistryError::RegistryFull").finish(),
        }
    }
}

impl fmt::Debug for QueueRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Full => f.debug_tuple("QueueError::Full").finish(),
            Self::BadLength(m) => f.debug_tuple("QueueError::BadLength").field(m).finish(),
            Self::Short(wanted, len) => f
                .debug_tuple("QueueError::Short")
                .field(&(wanted, len))
                .finish(),
        }
    }
}
