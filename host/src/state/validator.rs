//! One validator record.

/// Length of a compressed BLS public key.
pub const PUBKEY_LEN: usize = 48;
/// Length of withdrawal credentials.
pub const WITHDRAWAL_CREDENTIALS_LEN: usize = 32;
/// `FAR_FUTURE_EPOCH`: an epoch that never comes.
pub const FAR_FUTURE_EPOCH: u64 = u64::MAX;

/// A compressed BLS public key.
pub type Pubkey = [u8; PUBKEY_LEN];

/// A validator in the registry (phase0 fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Validator {
    /// BLS public key.
    pub pubkey: Pubkey,
    /// Withdrawal credentials.
    pub withdrawal_credentials: [u8; WITHDRAWAL_CREDENTIALS_LEN],
    /// Effective balance in Gwei.
    pub effective_balance: u64,
    /// Whether the validator has been slashed.
    pub slashed: bool,
    /// Epoch the validator became eligible for activation.
    pub activation_eligibility_epoch: u64,
    /// Epoch the validator was activated.
    pub activation_epoch: u64,
    /// Epoch the validator exited.
    pub exit_epoch: u64,
    /// Epoch the validator may withdraw.
    pub withdrawable_epoch: u64,
}

/// A validator added by a deposit, before it is placed in the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewValidator {
    /// BLS public key.
    pub pubkey: Pubkey,
    /// Withdrawal credentials.
    pub withdrawal_credentials: [u8; WITHDRAWAL_CREDENTIALS_LEN],
    /// Effective balance in Gwei.
    pub effective_balance: u64,
    /// Initial balance in Gwei.
    pub balance: u64,
}

impl NewValidator {
    /// The registry record of a freshly deposited validator: all epochs far in the future.
    pub fn record(&self) -> Validator {
        Validator {
            pubkey: self.pubkey,
            withdrawal_credentials: self.withdrawal_credentials,
            effective_balance: self.effective_balance,
            slashed: false,
            activation_eligibility_epoch: FAR_FUTURE_EPOCH,
            activation_epoch: FAR_FUTURE_EPOCH,
            exit_epoch: FAR_FUTURE_EPOCH,
            withdrawable_epoch: FAR_FUTURE_EPOCH,
        }
    }
}
