//! [`Mempool`]: deposits waiting for a block, in arrival order, deduplicated and bounded.

use std::collections::{HashSet, VecDeque};

use crate::chain::block::{DepositData, Hash};

/// Why a deposit was not added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MempoolError {
    /// The same deposit is already waiting.
    #[error("deposit {0} is already pending")]
    Duplicate(String),
    /// The pool is full.
    #[error("the mempool is full ({0} deposits pending); try again after the next block")]
    Full(usize),
    /// The deposit moves no Gwei.
    #[error("deposit {0} has amount 0")]
    ZeroAmount(String),
}

/// Pending deposits, oldest first.
#[derive(Debug)]
pub struct Mempool {
    capacity: usize,
    queue: VecDeque<(Hash, DepositData)>,
    ids: HashSet<Hash>,
}

impl Mempool {
    /// An empty pool holding at most `capacity` deposits.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            queue: VecDeque::new(),
            ids: HashSet::new(),
        }
    }

    /// Adds `deposit`; returns its id.
    pub fn insert(&mut self, deposit: DepositData) -> Result<Hash, MempoolError> {
        let id = deposit.id();
        if deposit.amount == 0 {
            return Err(MempoolError::ZeroAmount(hex::encode(id)));
        }
        if self.ids.contains(&id) {
            return Err(MempoolError::Duplicate(hex::encode(id)));
        }
        if self.queue.len() >= self.capacity {
            return Err(MempoolError::Full(self.queue.len()));
        }
        self.ids.insert(id);
        self.queue.push_back((id, deposit));
        Ok(id)
    }

    /// Up to `max` deposits for the next block, oldest first (they stay in the pool until a
    /// block carrying them is imported).
    pub fn take_for_block(&self, max: usize) -> Vec<DepositData> {
        self.queue.iter().take(max).map(|(_, d)| *d).collect()
    }

    /// Drops the deposits an imported block carried.
    pub fn remove_included(&mut self, deposits: &[DepositData]) {
        let included: HashSet<Hash> = deposits.iter().map(DepositData::id).collect();
        if included.iter().any(|id| self.ids.contains(id)) {
            self.queue.retain(|(id, _)| !included.contains(id));
            self.ids.retain(|id| !included.contains(id));
        }
    }

    /// Deposits pending.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deposit(seed: u8, amount: u64) -> DepositData {
        DepositData {
            pubkey: [seed; 48],
            withdrawal_credentials: [0; 32],
            amount,
            signature: [0; 96],
        }
    }

    #[test]
    fn dedups_bounds_and_forgets_included_deposits() {
        let mut pool = Mempool::new(2);
        pool.insert(deposit(1, 5)).unwrap();
        assert!(matches!(
            pool.insert(deposit(1, 5)),
            Err(MempoolError::Duplicate(_))
        ));
        assert!(matches!(
            pool.insert(deposit(3, 0)),
            Err(MempoolError::ZeroAmount(_))
        ));
        pool.insert(deposit(2, 5)).unwrap();
        assert_eq!(pool.insert(deposit(3, 5)), Err(MempoolError::Full(2)));
        assert_eq!(pool.take_for_block(1), vec![deposit(1, 5)]);
        pool.remove_included(&[deposit(1, 5), deposit(9, 9)]);
        assert_eq!(pool.take_for_block(5), vec![deposit(2, 5)]);
        pool.insert(deposit(1, 5)).unwrap();
        assert_eq!(pool.len(), 2);
    }
}
