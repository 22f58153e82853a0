//! The registry's records in the store: written in bounded batches when a chain is initialised
//! (genesis, a restored checkpoint), read back when it opens.
//!
//! A registry of N validators is 2N records. Committed as one sled batch, a 2M-validator
//! genesis did not finish in 25 minutes. Bounded batches keep each commit's memory small (about
//! 40% less peak RSS at 200k validators) but barely change the time: sled 0.34 itself holds
//! about 5 KB per key while the records go in (41 s and 5.3 GB at 1M validators), so a 2M
//! registry needs fewer, larger records (one per in-memory chunk), not smaller batches.
//! Crash safety does not need the records in the same batch as the rest: a
//! store holds a chain only once [`keys::FORMAT`] exists, and FORMAT is written in the final
//! batch (with the head, the genesis hash and the blocks) after every record is committed.
//! Nothing reads the records of a store without FORMAT (`Chain::open` and the checkpoint
//! restore treat it as empty), and the next initialisation overwrites what an interrupted one
//! left, after deleting the records beyond its own registry's length.

use super::errors::OpenError;
use crate::state::{Registry, Validator};
use crate::store::{KvStore, StoreError, WriteBatch, keys};

/// Validators per batch when a registry is written: 2 records each, about 4 MiB a batch.
pub(crate) const VALIDATORS_PER_BATCH: usize = 16_384;

/// Writes `registry` as the validator and balance records of a store that does not hold a
/// chain yet, `per_batch` validators per committed batch (at least 1). Records an interrupted
/// earlier initialisation left beyond the registry's length are deleted first; the others are
/// overwritten. The caller commits FORMAT afterwards, in its final batch.
pub(crate) fn write_registry(
    store: &dyn KvStore,
    registry: &Registry,
    per_batch: usize,
) -> Result<(), OpenError> {
    if store.get(keys::FORMAT)?.is_some() {
        return Err(OpenError::Corrupt(format!(
            "{} already holds a chain; its registry is not rewritten",
            store.location()
        )));
    }
    let per_batch = per_batch.max(1);
    delete_beyond(store, registry.len(), per_batch)?;
    let mut batch = WriteBatch::new();
    for (i, (v, b)) in registry
        .validators()
        .iter()
        .zip(registry.balances())
        .enumerate()
    {
        let i = u32::try_from(i)
            .map_err(|_| OpenError::Corrupt("more than 2^32 validators to write".into()))?;
        batch.put(keys::validator(i), v.encode().to_vec());
        batch.put(keys::balance(i), b.to_le_bytes().to_vec());
        if batch.len() / 2 >= per_batch {
            store.commit(&batch)?;
            batch = WriteBatch::new();
        }
    }
    if !batch.is_empty() {
        store.commit(&batch)?;
    }
    Ok(())
}

/// Deletes the validator and balance records at index `len` or above (and any malformed key
/// under their prefixes): what an interrupted initialisation of a larger registry left.
fn delete_beyond(store: &dyn KvStore, len: u32, per_batch: usize) -> Result<(), StoreError> {
    let mut stale = Vec::new();
    for prefix in [keys::VALIDATOR_PREFIX, keys::BALANCE_PREFIX] {
        store.scan_prefix(prefix, &mut |key, _| {
            let index = key
                .get(prefix.len()..)
                .and_then(|rest| <[u8; 4]>::try_from(rest).ok())
                .map(u32::from_be_bytes);
            if index.is_none_or(|i| i >= len) {
                stale.push(key.to_vec());
            }
            Ok(())
        })?;
    }
    for keys in stale.chunks(per_batch.saturating_mul(2)) {
        let mut batch = WriteBatch::new();
        for key in keys {
            batch.delete(key.clone());
        }
        store.commit(&batch)?;
    }
    Ok(())
}

/// Reads the registry back: validator and balance records, dense from index 0.
pub(crate) fn load_registry(store: &dyn KvStore) -> Result<Registry, OpenError> {
    let mut validators = Vec::new();
    store.scan_prefix(keys::VALIDATOR_PREFIX, &mut |key, value| {
        let expected = u32::try_from(validators.len()).unwrap_or(u32::MAX);
        if key != keys::validator(expected).as_slice() {
            return Err(StoreError::Corrupt(format!(
                "validator records are not dense at index {expected}"
            )));
        }
        validators.push(
            Validator::decode(value)
                .map_err(|e| StoreError::Corrupt(format!("validator {expected}: {e}")))?,
        );
        Ok(())
    })?;
    let mut balances = Vec::with_capacity(validators.len());
    store.scan_prefix(keys::BALANCE_PREFIX, &mut |key, value| {
        let expected = u32::try_from(balances.len()).unwrap_or(u32::MAX);
        if key != keys::balance(expected).as_slice() {
            return Err(StoreError::Corrupt(format!(
                "balances are not dense at index {expected}"
            )));
        }
        let bytes: [u8; 8] = value
            .try_into()
            .map_err(|_| StoreError::Corrupt(format!("balance {expected} malformed")))?;
        balances.push(u64::from_le_bytes(bytes));
        Ok(())
    })?;
    if validators.len() != balances.len() {
        return Err(OpenError::Corrupt(format!(
            "{} validators but {} balances",
            validators.len(),
            balances.len()
        )));
    }
    Ok(Registry::from_parts(validators, balances)?)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::chain::genesis::Genesis;
    use crate::chain::native_deposits::Verification;
    use crate::chain::{Chain, DepositEngine, Head};
    use crate::store::SledStore;

    /// Validators per batch in these tests: a 200-validator genesis takes 4 record batches.
    const PER_BATCH: usize = 64;

    /// A sled store whose commits fail once `allowed` have succeeded: a node killed part way
    /// through initialising its store (what was committed stays, nothing after it arrives).
    struct Interrupted {
        inner: SledStore,
        allowed: usize,
        commits: AtomicUsize,
    }

    impl KvStore for Interrupted {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            self.inner.get(key)
        }
        fn scan_prefix(
            &self,
            prefix: &[u8],
            visit: &mut crate::store::Visitor<'_>,
        ) -> Result<(), StoreError> {
            self.inner.scan_prefix(prefix, visit)
        }
        fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError> {
            if self.commits.fetch_add(1, Ordering::SeqCst) >= self.allowed {
                return Err(StoreError::Backend {
                    path: self.location(),
                    message: "interrupted".into(),
                });
            }
            self.inner.commit(batch)
        }
        fn tree(&self, name: &str) -> Result<Arc<dyn KvStore>, StoreError> {
            self.inner.tree(name)
        }
        fn location(&self) -> String {
            self.inner.location()
        }
    }

    fn engine() -> DepositEngine {
        DepositEngine::Native(Verification::Batched)
    }

    /// Starts writing `genesis` into the store at `path` and stops it after `allowed` commits.
    fn interrupt(path: &Path, genesis: &Genesis, allowed: usize) {
        let store = Arc::new(Interrupted {
            inner: SledStore::open(path).unwrap(),
            allowed,
            commits: AtomicUsize::new(0),
        });
        let err = Chain::open_batched(store, genesis.clone(), engine(), PER_BATCH)
            .err()
            .expect("the interrupted genesis write reported success");
        assert!(err.to_string().contains("interrupted"), "{err}");
    }

    /// Opens the store at `path` (initialising it if needed); the head and the registry.
    fn open(path: &Path, genesis: &Genesis) -> (Head, Registry) {
        let store = Arc::new(SledStore::open(path).unwrap());
        let chain = Chain::open_batched(store, genesis.clone(), engine(), PER_BATCH).unwrap();
        let registry = chain.registry().read().unwrap().clone();
        (chain.head(), registry)
    }

    fn validator_records(path: &Path) -> usize {
        let store = SledStore::open(path).unwrap();
        assert_eq!(store.get(keys::FORMAT).unwrap(), None, "FORMAT was written");
        let mut count = 0;
        store
            .scan_prefix(keys::VALIDATOR_PREFIX, &mut |_, _| {
                count += 1;
                Ok(())
            })
            .unwrap();
        count
    }

    /// Opens an interrupted store twice: the first open finishes the genesis write, the second
    /// reads the registry back from the records and checks it against the head's state root.
    fn assert_recovers_to(path: &Path, genesis: &Genesis, expected: &(Head, Registry)) {
        let first = open(path, genesis);
        assert_eq!(first.0, expected.0);
        let reopened = open(path, genesis);
        assert_eq!(reopened.0, expected.0);
        assert!(reopened.1 == expected.1, "the stored registry differs");
    }

    #[test]
    fn a_genesis_write_interrupted_at_any_batch_reopens_to_the_uninterrupted_state_root() {
        let genesis = Genesis::generated("interrupted-genesis", 200, 7);
        let dir = tempfile::tempdir().unwrap();
        let expected = open(&dir.path().join("uninterrupted"), &genesis);
        // 0: nothing written; 2: two record batches; 4: every record, not the final batch.
        for (allowed, records) in [(0, 0), (2, 2 * PER_BATCH), (4, 200)] {
            let path = dir.path().join(format!("interrupted-{allowed}"));
            interrupt(&path, &genesis, allowed);
            assert_eq!(validator_records(&path), records);
            assert_recovers_to(&path, &genesis, &expected);
        }
    }

    #[test]
    fn records_a_larger_interrupted_registry_left_are_deleted_before_a_genesis_write() {
        let larger = Genesis::generated("another-chain", 300, 8);
        let genesis = Genesis::generated("interrupted-genesis", 200, 7);
        let dir = tempfile::tempdir().unwrap();
        let expected = open(&dir.path().join("uninterrupted"), &genesis);
        let path = dir.path().join("interrupted");
        // Every record of the 300-validator registry (5 batches), not its final batch.
        interrupt(&path, &larger, 5);
        assert_eq!(validator_records(&path), 300);
        assert_recovers_to(&path, &genesis, &expected);
    }
}
