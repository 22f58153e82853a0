//! The chunk records a block import or a revert rewrites, put into its batch.
//!
//! Both run before the in-memory registry changes (the batch is committed first), so each
//! touched chunk is rebuilt from the registry as it still is plus the change: the validators a
//! delta appends land in the last chunk and the ones after it, a balance change rewrites its
//! 8 KiB balance chunk only, and a revert truncates the last chunks (deleting a record that
//! becomes empty) and puts the restored balances back.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use super::chunk_codec::{encode_balances, encode_validators};
use crate::state::chunked::{CHUNK_LEN, ChunkedVec};
use crate::state::{NewValidator, Registry, RegistryDelta, RegistryUndo, StateError, Validator};
use crate::store::{WriteBatch, keys};

/// Puts into `batch` the chunk records of `registry` after `delta` (which has not been applied
/// to it): the chunks its appended validators land in and the balance chunks it changes.
pub(crate) fn put_delta(
    batch: &mut WriteBatch,
    registry: &Registry,
    delta: &RegistryDelta,
) -> Result<(), StateError> {
    let after = registry
        .validators()
        .len()
        .checked_add(delta.added.len())
        .filter(|&n| u32::try_from(n).is_ok())
        .ok_or(StateError::Full)?;
    let validators: Vec<Validator> = delta.added.iter().map(NewValidator::record).collect();
    let balances: Vec<u64> = delta.added.iter().map(|n| n.balance).collect();
    put_edit(
        batch,
        registry,
        &Edit {
            after,
            validators: &validators,
            balances: &balances,
            set: &delta.balances,
        },
    )
}

/// Puts into `batch` the chunk records of `registry` after rolling `undo` back (which has not
/// been done to it): the chunks that lose validators (deleted once empty) and the balance
/// chunks whose balances it restores. Refuses an undo record that keeps more validators than
/// the registry holds or restores a balance it drops.
pub(crate) fn put_rollback(
    batch: &mut WriteBatch,
    registry: &Registry,
    undo: &RegistryUndo,
) -> Result<(), StateError> {
    if undo.validators_before > registry.len() {
        return Err(StateError::UnknownIndex(undo.validators_before));
    }
    let after = usize::try_from(undo.validators_before).map_err(|_| StateError::Full)?;
    put_edit(
        batch,
        registry,
        &Edit {
            after,
            validators: &[],
            balances: &[],
            set: &undo.balances,
        },
    )
}

/// A change to the registry's records.
struct Edit<'a> {
    /// Validators after the change.
    after: usize,
    /// Validators appended after the registry's last one (empty unless it grows).
    validators: &'a [Validator],
    /// Their balances.
    balances: &'a [u64],
    /// `(index, balance)` set on validators that remain, in order (a later one wins).
    set: &'a [(u32, u64)],
}

/// Puts the records of every chunk `edit` touches.
fn put_edit(
    batch: &mut WriteBatch,
    registry: &Registry,
    edit: &Edit<'_>,
) -> Result<(), StateError> {
    let before = registry.validators().len();
    let resized = resized_chunks(before, edit.after);
    let mut set: BTreeMap<usize, Vec<(usize, u64)>> = BTreeMap::new();
    for &(index, balance) in edit.set {
        let i = usize::try_from(index)
            .ok()
            .filter(|&i| i < edit.after)
            .ok_or(StateError::UnknownIndex(index))?;
        set.entry(i / CHUNK_LEN)
            .or_default()
            .push((i % CHUNK_LEN, balance));
    }
    for chunk in resized.clone() {
        let key = keys::validator_chunk(key_index(chunk)?);
        match elements(registry.validators(), edit.validators, chunk, edit.after)? {
            None => batch.delete(key),
            Some(validators) => batch.put(key, encode_validators(validators.iter())),
        }
    }
    let touched: BTreeSet<usize> = resized.chain(set.keys().copied()).collect();
    for chunk in touched {
        let key = keys::balance_chunk(key_index(chunk)?);
        let Some(mut balances) = elements(registry.balances(), edit.balances, chunk, edit.after)?
        else {
            batch.delete(key);
            continue;
        };
        for &(offset, balance) in set.get(&chunk).into_iter().flatten() {
            let slot = balances.get_mut(offset).ok_or(StateError::UnknownIndex(
                u32::try_from(chunk.saturating_mul(CHUNK_LEN).saturating_add(offset))
                    .unwrap_or(u32::MAX),
            ))?;
            *slot = balance;
        }
        batch.put(key, encode_balances(balances.iter()));
    }
    Ok(())
}

/// The chunks whose length changes when the registry goes from `before` to `after` validators.
fn resized_chunks(before: usize, after: usize) -> Range<usize> {
    let (low, high) = (before.min(after), before.max(after));
    if low == high {
        return 0..0;
    }
    low / CHUNK_LEN..high.div_ceil(CHUNK_LEN)
}

/// Chunk `chunk`'s elements once `stored` is cut or extended with `appended` to `after`
/// elements; `None` if it is empty then.
fn elements<T: Clone>(
    stored: &ChunkedVec<T>,
    appended: &[T],
    chunk: usize,
    after: usize,
) -> Result<Option<Vec<T>>, StateError> {
    let start = chunk.saturating_mul(CHUNK_LEN);
    if start >= after {
        return Ok(None);
    }
    let end = start.saturating_add(CHUNK_LEN).min(after);
    let before = stored.len();
    let tail = appended
        .get(start.max(before).saturating_sub(before)..end.saturating_sub(before))
        .ok_or(StateError::UnknownIndex(
            u32::try_from(end).unwrap_or(u32::MAX),
        ))?;
    let mut out = Vec::with_capacity(end.saturating_sub(start));
    out.extend(stored.range(start, end.min(before)).cloned());
    out.extend_from_slice(tail);
    Ok(Some(out))
}

/// A chunk's index as its key holds it.
fn key_index(chunk: usize) -> Result<u32, StateError> {
    u32::try_from(chunk).map_err(|_| StateError::Full)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::chain::registry_store::{VALIDATORS_PER_BATCH, write_registry};
    use crate::store::{KvStore, MemoryStore};

    /// Validator `i`: its pubkey holds `i`, its balance is `i`.
    fn validator(i: usize) -> NewValidator {
        let mut pubkey = [0u8; 48];
        pubkey[..8].copy_from_slice(&(i as u64).to_le_bytes());
        NewValidator {
            pubkey,
            withdrawal_credentials: [1; 32],
            effective_balance: 32,
            balance: i as u64,
        }
    }

    fn registry(len: usize) -> Registry {
        let (validators, balances) = (0..len)
            .map(|i| (validator(i).record(), validator(i).balance))
            .unzip();
        Registry::from_parts(validators, balances).unwrap()
    }

    /// A store holding `registry`'s records as an initialisation writes them.
    fn stored(registry: &Registry) -> MemoryStore {
        let store = MemoryStore::new();
        write_registry(&store, registry, VALIDATORS_PER_BATCH).unwrap();
        store
    }

    /// Every chunk record, in key order.
    fn records(store: &MemoryStore) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for prefix in [keys::VALIDATOR_CHUNK_PREFIX, keys::BALANCE_CHUNK_PREFIX] {
            store
                .scan_prefix(prefix, &mut |key, value| {
                    out.push((key.to_vec(), value.to_vec()));
                    Ok(())
                })
                .unwrap();
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

        /// The records an import's batch leaves are exactly those of the registry after the
        /// block, and the records its revert's batch leaves exactly those of the registry
        /// before: registries of 0 to about 3 chunks, near a chunk boundary.
        #[test]
        fn an_import_and_its_revert_leave_the_records_of_the_registry_they_make(
            boundary in 0usize..3,
            offset in 0usize..80,
            added in 0usize..40,
            set in proptest::collection::btree_map(any::<u16>(), any::<u64>(), 0..8),
        ) {
            let len = (boundary * CHUNK_LEN + offset).saturating_sub(40);
            let before = registry(len);
            let balances: BTreeMap<u32, u64> = set
                .into_iter()
                .filter(|_| len > 0)
                .map(|(i, b)| ((usize::from(i) % len.max(1)) as u32, b))
                .collect();
            let delta = RegistryDelta {
                added: (len..len + added).map(validator).collect(),
                balances: balances.into_iter().collect(),
            };
            let undo = before.undo_for(&delta).unwrap();
            let mut after = before.clone();
            after.apply(&delta).unwrap();

            let store = stored(&before);
            let mut batch = WriteBatch::new();
            put_delta(&mut batch, &before, &delta).unwrap();
            store.commit(&batch).unwrap();
            prop_assert_eq!(records(&store), records(&stored(&after)));

            let mut batch = WriteBatch::new();
            put_rollback(&mut batch, &after, &undo).unwrap();
            store.commit(&batch).unwrap();
            prop_assert_eq!(records(&store), records(&stored(&before)));
        }
    }

    #[test]
    fn an_undo_record_that_does_not_fit_the_registry_writes_nothing() {
        let registry = registry(10);
        let mut batch = WriteBatch::new();
        let keeps_more = RegistryUndo {
            validators_before: 11,
            balances: vec![],
        };
        assert_eq!(
            put_rollback(&mut batch, &registry, &keeps_more),
            Err(StateError::UnknownIndex(11))
        );
        let restores_a_dropped_balance = RegistryUndo {
            validators_before: 5,
            balances: vec![(7, 1)],
        };
        assert_eq!(
            put_rollback(&mut batch, &registry, &restores_a_dropped_balance),
            Err(StateError::UnknownIndex(7))
        );
        assert!(batch.is_empty());
    }
}
