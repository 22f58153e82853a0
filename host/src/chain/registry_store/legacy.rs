//! Store format 3, two records per validator ([`keys::legacy`]), migrated to chunk records
//! when the store opens.
//!
//! The migration is crash-safe without one big batch: the chunk records are written in
//! bounded batches while FORMAT still says 3 (a format-3 reader ignores them, and an
//! interrupted migration simply runs again and overwrites them); FORMAT becomes the current
//! format in a batch of its own once every chunk record is committed; only then are the old
//! records deleted, in bounded batches, and every later open finishes a deletion a crash
//! interrupted ([`delete_records`]). At every point the store opens to the same state.

use std::time::Instant;

use super::migration_progress::MigrationProgress;
use super::write_chunks;
use crate::chain::OpenError;
use crate::progress::ProgressDisplay;
use crate::state::Validator;
use crate::state::chunked::CHUNK_LEN;
use crate::store::{KvStore, StoreError, WriteBatch, keys};

/// The store format that kept the registry as two records per validator.
pub(crate) const PER_VALIDATOR_FORMAT: u32 = 3;

/// Migrates a format-3 store to chunk records and stamps it `format`, in bounded batches of
/// about `per_batch` validators (see the module docs for why a crash at any point is safe),
/// showing its progress as `display` says.
pub(crate) fn migrate(
    store: &dyn KvStore,
    format: u32,
    per_batch: usize,
    display: ProgressDisplay,
) -> Result<(), OpenError> {
    let started = Instant::now();
    let (validators, balances) = read_records(store)?;
    tracing::info!(
        validators = validators.len(),
        store = %store.location(),
        "migrating the registry from per-validator records (store format \
         {PER_VALIDATOR_FORMAT}) to chunk records (format {format})"
    );
    // A migration of millions of validators takes a while: a bar, or a line every few seconds,
    // says how far it got, so an operator does not take a long open for a hang.
    let total = u64::try_from(validators.len()).unwrap_or(u64::MAX);
    let mut progress = MigrationProgress::new(display, total, Instant::now());
    let mut written = 0u64;
    let chunks = validators
        .chunks(CHUNK_LEN)
        .zip(balances.chunks(CHUNK_LEN))
        .inspect(|(chunk, _)| {
            written = written.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
            progress.on_written(written, Instant::now());
        });
    write_chunks(store, chunks, per_batch)?;
    progress.finish();
    let mut batch = WriteBatch::new();
    batch.put(keys::FORMAT, format.to_le_bytes().to_vec());
    store.commit(&batch)?;
    delete_records(store, per_batch)?;
    tracing::info!(
        validators = validators.len(),
        ms = started.elapsed().as_millis(),
        "registry migrated to chunk records"
    );
    Ok(())
}

/// Deletes every per-validator record, two per validator `per_batch` (at least one) validators
/// per committed batch: after a migration, or what an interrupted one or an interrupted
/// format-3 initialisation left.
pub(crate) fn delete_records(store: &dyn KvStore, per_batch: usize) -> Result<(), StoreError> {
    let mut stale = Vec::new();
    for prefix in [keys::legacy::VALIDATOR_PREFIX, keys::legacy::BALANCE_PREFIX] {
        store.scan_prefix(prefix, &mut |key, _| {
            stale.push(key.to_vec());
            Ok(())
        })?;
    }
    super::delete_keys(store, &stale, per_batch.saturating_mul(2))
}

/// The validators and balances of a format-3 store: records dense from index 0, as many
/// balances as validators.
fn read_records(store: &dyn KvStore) -> Result<(Vec<Validator>, Vec<u64>), OpenError> {
    let mut validators = Vec::new();
    store.scan_prefix(keys::legacy::VALIDATOR_PREFIX, &mut |key, value| {
        let expected = u32::try_from(validators.len()).unwrap_or(u32::MAX);
        if key != keys::legacy::validator(expected).as_slice() {
            return Err(StoreError::Corrupt(format!(
                "format-{PER_VALIDATOR_FORMAT} validator records are not dense at index {expected}"
            )));
        }
        validators.push(Validator::decode(value).map_err(|e| {
            StoreError::Corrupt(format!(
                "format-{PER_VALIDATOR_FORMAT} validator record {expected}: {e}"
            ))
        })?);
        Ok(())
    })?;
    let mut balances = Vec::with_capacity(validators.len());
    store.scan_prefix(keys::legacy::BALANCE_PREFIX, &mut |key, value| {
        let expected = u32::try_from(balances.len()).unwrap_or(u32::MAX);
        if key != keys::legacy::balance(expected).as_slice() {
            return Err(StoreError::Corrupt(format!(
                "format-{PER_VALIDATOR_FORMAT} balance records are not dense at index {expected}"
            )));
        }
        let bytes: [u8; 8] = value.try_into().map_err(|_| {
            StoreError::Corrupt(format!(
                "format-{PER_VALIDATOR_FORMAT} balance record {expected} is {} bytes, expected 8",
                value.len()
            ))
        })?;
        balances.push(u64::from_le_bytes(bytes));
        Ok(())
    })?;
    if validators.len() != balances.len() {
        return Err(OpenError::Corrupt(format!(
            "the format-{PER_VALIDATOR_FORMAT} store holds {} validator records but {} balances",
            validators.len(),
            balances.len()
        )));
    }
    Ok((validators, balances))
}
