//! The per-call overlay deposit modules write through.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::validator::{NewValidator, Pubkey, WITHDRAWAL_CREDENTIALS_LEN};

/// Read access to a registry, as the overlay needs it.
pub trait RegistryRead: Send + Sync {
    /// Index of the validator with this pubkey.
    fn index_of(&self, pubkey: &Pubkey) -> Option<u32>;
    /// Number of validators.
    fn validator_count(&self) -> u32;
    /// Balance of validator `index`.
    fn balance(&self, index: u32) -> Option<u64>;
    /// Sum of every validator's effective balance, O(1).
    fn total_effective_balance(&self) -> u64;
}

/// The registry a call reads: an immutable value (the importer applies the call's delta to
/// its own registry afterwards, copy-on-write), so no lock is taken on the way.
pub type SharedRegistry = Arc<dyn RegistryRead>;

/// Why the overlay refused a write. Mirrors the WIT `registry-error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverlayError {
    /// The pubkey is already registered.
    #[error("pubkey is already registered")]
    DuplicatePubkey,
    /// A field has the wrong length.
    #[error("{0} has the wrong length")]
    BadLength(&'static str),
    /// No validator has this index.
    #[error("no validator has index {0}")]
    UnknownIndex(u32),
    /// The balance would overflow.
    #[error("balance of validator {0} would overflow")]
    BalanceOverflow(u32),
    /// The registry holds 2^32 - 1 validators.
    #[error("the registry is full")]
    RegistryFull,
}

/// What undoes a [`RegistryDelta`]: the validator count before it and the balances it
/// overwrote. Kept per block so the chain can roll back to a common ancestor on a reorg.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryUndo {
    /// Validators before the delta.
    pub validators_before: u32,
    /// (index, balance before) of pre-existing validators whose balance the delta changed.
    pub balances: Vec<(u32, u64)>,
}

impl RegistryUndo {
    /// Canonical encoding: `validators_before u32 | count u32 | count × (index u32, balance u64)`,
    /// little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let count = u32::try_from(self.balances.len()).unwrap_or(u32::MAX);
        let mut out = Vec::with_capacity(self.balances.len().saturating_mul(12).saturating_add(8));
        out.extend_from_slice(&self.validators_before.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
        for (index, balance) in self.balances.iter().take(count as usize) {
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&balance.to_le_bytes());
        }
        out
    }

    /// Decodes [`RegistryUndo::encode`]'s output.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (before, rest) = bytes.split_first_chunk::<4>()?;
        let (count, mut rest) = rest.split_first_chunk::<4>()?;
        let count = usize::try_from(u32::from_le_bytes(*count)).ok()?;
        if rest.len() != count.checked_mul(12)? {
            return None;
        }
        let mut balances = Vec::with_capacity(count);
        while let Some((index, tail)) = rest.split_first_chunk::<4>() {
            let (balance, tail) = tail.split_first_chunk::<8>()?;
            balances.push((u32::from_le_bytes(*index), u64::from_le_bytes(*balance)));
            rest = tail;
        }
        Some(Self {
            validators_before: u32::from_le_bytes(*before),
            balances,
        })
    }
}

/// What a successful call changes: validators appended (in order) and final balances of
/// existing validators whose balance changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryDelta {
    /// Validators to append, in index order starting at the registry's count before the call.
    pub added: Vec<NewValidator>,
    /// (index, new balance) of pre-existing validators, sorted by index.
    pub balances: Vec<(u32, u64)>,
}

impl RegistryDelta {
    /// True if the call changed nothing.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.balances.is_empty()
    }
}

/// Pending writes over a read-only registry. Lookups see the pending additions.
pub struct RegistryOverlay {
    base: SharedRegistry,
    base_count: u32,
    base_effective: u64,
    added: Vec<NewValidator>,
    added_index: HashMap<Pubkey, u32>,
    balances: BTreeMap<u32, u64>,
}

impl RegistryOverlay {
    /// An empty overlay over `base`.
    pub fn new(base: SharedRegistry) -> Self {
        Self {
            base_count: base.validator_count(),
            base_effective: base.total_effective_balance(),
            base,
            added: Vec::new(),
            added_index: HashMap::new(),
            balances: BTreeMap::new(),
        }
    }

    /// Index of the validator with this pubkey, pending additions included.
    pub fn index_of(&self, pubkey: &[u8]) -> Option<u32> {
        let pubkey = <&Pubkey>::try_from(pubkey).ok()?;
        if !self.added_index.is_empty()
            && let Some(&index) = self.added_index.get(pubkey)
        {
            return Some(index);
        }
        self.base.index_of(pubkey)
    }

    /// Number of validators, pending additions included.
    pub fn validator_count(&self) -> u32 {
        // Bounded by `add_validator`, which refuses to pass u32::MAX.
        self.base_count
            .saturating_add(u32::try_from(self.added.len()).unwrap_or(u32::MAX))
    }

    /// Sum of every validator's effective balance, pending additions included (saturating, as
    /// the registry's): O(additions), bounded by the call's own writes.
    pub fn total_effective_balance(&self) -> u64 {
        self.added.iter().fold(self.base_effective, |sum, v| {
            sum.saturating_add(v.effective_balance)
        })
    }

    /// Appends a validator.
    pub fn add_validator(
        &mut self,
        pubkey: &[u8],
        withdrawal_credentials: &[u8],
        effective_balance: u64,
        balance: u64,
    ) -> Result<u32, OverlayError> {
        let pubkey: Pubkey = pubkey
            .try_into()
            .map_err(|_| OverlayError::BadLength("pubkey"))?;
        let withdrawal_credentials: [u8; WITHDRAWAL_CREDENTIALS_LEN] = withdrawal_credentials
            .try_into()
            .map_err(|_| OverlayError::BadLength("withdrawal-credentials"))?;
        if self.index_of(&pubkey).is_some() {
            return Err(OverlayError::DuplicatePubkey);
        }
        let index = self.validator_count();
        if index == u32::MAX {
            return Err(OverlayError::RegistryFull);
        }
        self.added.push(NewValidator {
            pubkey,
            withdrawal_credentials,
            effective_balance,
            balance,
        });
        self.added_index.insert(pubkey, index);
        Ok(index)
    }

    /// Adds `amount` to validator `index`'s balance.
    pub fn increase_balance(&mut self, index: u32, amount: u64) -> Result<(), OverlayError> {
        if let Some(offset) = index.checked_sub(self.base_count) {
            let added = usize::try_from(offset)
                .ok()
                .and_then(|i| self.added.get_mut(i))
                .ok_or(OverlayError::UnknownIndex(index))?;
            added.balance = added
                .balance
                .checked_add(amount)
                .ok_or(OverlayError::BalanceOverflow(index))?;
            return Ok(());
        }
        let current = match self.balances.get(&index) {
            Some(&b) => b,
            None => self
                .base
                .balance(index)
                .ok_or(OverlayError::UnknownIndex(index))?,
        };
        let updated = current
            .checked_add(amount)
            .ok_or(OverlayError::BalanceOverflow(index))?;
        self.balances.insert(index, updated);
        Ok(())
    }

    /// The changes to apply if the call succeeds.
    pub fn into_delta(self) -> RegistryDelta {
        RegistryDelta {
            added: self.added,
            balances: self.balances.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undo_roundtrip_and_malformed() {
        let undo = RegistryUndo {
            validators_before: 7,
            balances: vec![(1, 2), (3, u64::MAX)],
        };
        let bytes = undo.encode();
        assert_eq!(RegistryUndo::decode(&bytes), Some(undo));
        for cut in 0..bytes.len() {
            assert_eq!(
                RegistryUndo::decode(&bytes[..cut]),
                None,
                "decoded at {cut}"
            );
        }
        let mut long = bytes;
        long.push(0);
        assert_eq!(RegistryUndo::decode(&long), None);
    }
}
