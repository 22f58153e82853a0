//! An in-memory validator registry.

use std::collections::HashMap;

use super::overlay::{RegistryDelta, RegistryRead};
use super::validator::{Pubkey, Validator};

/// Validators, their balances and a pubkey index, all in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registry {
    validators: Vec<Validator>,
    balances: Vec<u64>,
    index: HashMap<Pubkey, u32>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Validator `index`.
    pub fn validator(&self, index: u32) -> Option<&Validator> {
        self.validators.get(usize::try_from(index).ok()?)
    }

    /// All balances, in index order.
    pub fn balances(&self) -> &[u64] {
        &self.balances
    }

    /// Applies a delta produced by an overlay over this registry.
    pub fn apply(&mut self, delta: &RegistryDelta) {
        for (index, balance) in &delta.balances {
            if let Some(slot) = usize::try_from(*index)
                .ok()
                .and_then(|i| self.balances.get_mut(i))
            {
                *slot = *balance;
            }
        }
        for added in &delta.added {
            let index = u32::try_from(self.validators.len()).unwrap_or(u32::MAX);
            self.validators.push(added.record());
            self.balances.push(added.balance);
            self.index.insert(added.pubkey, index);
        }
    }
}

impl RegistryRead for Registry {
    fn index_of(&self, pubkey: &Pubkey) -> Option<u32> {
        self.index.get(pubkey).copied()
    }

    fn validator_count(&self) -> u32 {
        u32::try_from(self.validators.len()).unwrap_or(u32::MAX)
    }

    fn balance(&self, index: u32) -> Option<u64> {
        self.balances.get(usize::try_from(index).ok()?).copied()
    }
}
