//! One validator record and its canonical encoding.

/// Length of a compressed BLS public key.
pub const PUBKEY_LEN: usize = 48;
/// Length of withdrawal credentials.
pub const WITHDRAWAL_CREDENTIALS_LEN: usize = 32;
/// `FAR_FUTURE_EPOCH`: an epoch that never comes.
pub const FAR_FUTURE_EPOCH: u64 = u64::MAX;
/// Bytes of an encoded [`Validator`].
pub const VALIDATOR_BYTES: usize = PUBKEY_LEN + WITHDRAWAL_CREDENTIALS_LEN + 8 + 1 + 4 * 8;
/// Bytes of a state leaf: an encoded validator followed by its balance.
pub const LEAF_BYTES: usize = VALIDATOR_BYTES + 8;

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

/// Why bytes are not a validator record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Wrong length.
    #[error("validator record is {0} bytes, expected {VALIDATOR_BYTES}")]
    Length(usize),
    /// The slashed flag is neither 0 nor 1.
    #[error("validator record has slashed flag {0}, expected 0 or 1")]
    SlashedFlag(u8),
}

impl Validator {
    /// Canonical encoding: pubkey, withdrawal credentials, effective balance (LE), slashed
    /// (one byte), the four epochs (LE).
    pub fn encode(&self) -> [u8; VALIDATOR_BYTES] {
        let mut out = [0u8; VALIDATOR_BYTES];
        let mut w = Writer {
            out: &mut out,
            at: 0,
        };
        w.put(&self.pubkey);
        w.put(&self.withdrawal_credentials);
        w.put(&self.effective_balance.to_le_bytes());
        w.put(&[u8::from(self.slashed)]);
        w.put(&self.activation_eligibility_epoch.to_le_bytes());
        w.put(&self.activation_epoch.to_le_bytes());
        w.put(&self.exit_epoch.to_le_bytes());
        w.put(&self.withdrawable_epoch.to_le_bytes());
        out
    }

    /// Decodes [`Validator::encode`]'s output.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        let bytes: &[u8; VALIDATOR_BYTES] = bytes
            .try_into()
            .map_err(|_| RecordError::Length(bytes.len()))?;
        let (pubkey, rest) = bytes
            .split_first_chunk::<PUBKEY_LEN>()
            .ok_or(RecordError::Length(0))?;
        let (wc, rest) = rest
            .split_first_chunk::<WITHDRAWAL_CREDENTIALS_LEN>()
            .ok_or(RecordError::Length(0))?;
        let (eff, rest) = rest
            .split_first_chunk::<8>()
            .ok_or(RecordError::Length(0))?;
        let (slashed, rest) = rest
            .split_first_chunk::<1>()
            .ok_or(RecordError::Length(0))?;
        let (e1, rest) = rest
            .split_first_chunk::<8>()
            .ok_or(RecordError::Length(0))?;
        let (e2, rest) = rest
            .split_first_chunk::<8>()
            .ok_or(RecordError::Length(0))?;
        let (e3, rest) = rest
            .split_first_chunk::<8>()
            .ok_or(RecordError::Length(0))?;
        let (e4, _) = rest
            .split_first_chunk::<8>()
            .ok_or(RecordError::Length(0))?;
        let slashed = match slashed {
            [0] => false,
            [1] => true,
            [other] => return Err(RecordError::SlashedFlag(*other)),
        };
        Ok(Self {
            pubkey: *pubkey,
            withdrawal_credentials: *wc,
            effective_balance: u64::from_le_bytes(*eff),
            slashed,
            activation_eligibility_epoch: u64::from_le_bytes(*e1),
            activation_epoch: u64::from_le_bytes(*e2),
            exit_epoch: u64::from_le_bytes(*e3),
            withdrawable_epoch: u64::from_le_bytes(*e4),
        })
    }

    /// The state leaf of this validator with `balance`.
    pub fn leaf_bytes(&self, balance: u64) -> [u8; LEAF_BYTES] {
        let mut out = [0u8; LEAF_BYTES];
        let (record, tail) = out.split_at_mut(VALIDATOR_BYTES);
        record.copy_from_slice(&self.encode());
        tail.copy_from_slice(&balance.to_le_bytes());
        out
    }

    /// The Merkle leaf: `sha256(leaf_bytes)`.
    pub fn leaf_hash(&self, balance: u64) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        Sha256::digest(self.leaf_bytes(balance)).into()
    }
}

struct Writer<'a> {
    out: &'a mut [u8; VALIDATOR_BYTES],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        let end = self.at.saturating_add(bytes.len());
        if let Some(dst) = self.out.get_mut(self.at..end) {
            dst.copy_from_slice(bytes);
        }
        self.at = end;
    }
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

    /// A validator for tests, told apart by `tag` (its pubkey is `[tag; 48]`), balance 32.
    #[cfg(test)]
    pub(crate) fn tagged(tag: u8) -> Self {
        Self {
            pubkey: [tag; PUBKEY_LEN],
            withdrawal_credentials: [0; WITHDRAWAL_CREDENTIALS_LEN],
            effective_balance: 32,
            balance: 32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_roundtrip_and_rejects() {
        let v = NewValidator {
            pubkey: [9; 48],
            withdrawal_credentials: [8; 32],
            effective_balance: 7,
            balance: 6,
        }
        .record();
        let bytes = v.encode();
        assert_eq!(Validator::decode(&bytes), Ok(v));
        assert_eq!(
            Validator::decode(&bytes[1..]),
            Err(RecordError::Length(VALIDATOR_BYTES - 1))
        );
        let mut bad = bytes;
        bad[PUBKEY_LEN + WITHDRAWAL_CREDENTIALS_LEN + 8] = 2;
        assert_eq!(Validator::decode(&bad), Err(RecordError::SlashedFlag(2)));
        assert_ne!(v.leaf_hash(6), v.leaf_hash(7));
    }
}
