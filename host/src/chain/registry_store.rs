//! The registry's records in the store: one validator chunk record and one balance chunk
//! record per in-memory chunk of [`CHUNK_LEN`] validators (store format 4), written in bounded
//! batches when a chain is initialised (genesis, a restored checkpoint), rewritten chunk by
//! chunk by block import and revert ([`put_delta`], [`put_rollback`]), read back when it opens.
//!
//! Store format 3 kept two records per validator. sled 0.34 holds about 5 KB of memory per key
//! while records go in, so a 1M-validator genesis took 41 s and 5.3 GB, and a 2M one did not
//! finish; chunk records make that about 2,000 keys per million validators (`bench
//! state-cache`, release build, load average about 2.5 on 2 cores: a 2M genesis opens in 1.5 s
//! and reopens in 1.6 s, the whole benchmark peaking at 1.7 GB RSS). Balances have
//! records of their own so that a top-up rewrites 8 KiB, not 124 KiB of validator records.
//! A format-3 store is migrated when it opens ([`legacy`]).
//!
//! Crash safety does not need the records in the same batch as the rest: a store holds a chain
//! only once [`keys::FORMAT`] exists, and FORMAT is written in the final batch (with the head,
//! the genesis hash and the blocks) after every record is committed. Nothing reads the records
//! of a store without FORMAT (`Chain::open` and the checkpoint restore treat it as empty), and
//! the next initialisation overwrites what an interrupted one left, after deleting the records
//! beyond its own registry's length.

mod chunk_codec;
mod chunk_edit;
pub(crate) mod legacy;
mod migration_progress;
#[cfg(test)]
mod tests;

use chunk_codec::{Balances, Validators, encode_balances, encode_validators, load_chunks};
pub(crate) use chunk_edit::{put_delta, put_rollback};

use super::errors::OpenError;
use crate::state::chunked::CHUNK_LEN;
use crate::state::{Registry, Validator};
use crate::store::{KvStore, StoreError, WriteBatch, keys};

/// Validators per batch when a registry is written: 16 chunks, about 2 MiB a batch.
pub(crate) const VALIDATORS_PER_BATCH: usize = 16 * CHUNK_LEN;

/// Writes `registry` as the chunk records of a store that does not hold a chain yet, about
/// `per_batch` validators (whole chunks, at least one) per committed batch. Records an
/// interrupted earlier initialisation left beyond the registry's length, and records of the
/// per-validator format, are deleted first; the others are overwritten. The caller commits
/// FORMAT afterwards, in its final batch.
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
    legacy::delete_records(store, per_batch)?;
    write_chunks(
        store,
        registry
            .validators()
            .chunks()
            .zip(registry.balances().chunks()),
        per_batch,
    )
}

/// Writes the chunk records of a registry given chunk by chunk (validators and their
/// balances, [`CHUNK_LEN`] each but the last) in batches of about `per_batch` validators, after
/// deleting any chunk record beyond the last.
fn write_chunks<'a>(
    store: &dyn KvStore,
    chunks: impl ExactSizeIterator<Item = (&'a [Validator], &'a [u64])>,
    per_batch: usize,
) -> Result<(), OpenError> {
    delete_chunks_from(store, chunks.len(), per_batch)?;
    let last = chunks.len().saturating_sub(1);
    let mut batch = WriteBatch::new();
    let mut in_batch = 0usize;
    for (chunk, (validators, balances)) in chunks.enumerate() {
        let held = validators.len();
        if held != balances.len()
            || held == 0
            || held > CHUNK_LEN
            || (chunk < last && held < CHUNK_LEN)
        {
            return Err(OpenError::Corrupt(format!(
                "registry chunk {chunk} to write holds {held} validators and {} balances",
                balances.len()
            )));
        }
        let index = u32::try_from(chunk)
            .map_err(|_| OpenError::Corrupt("more than 2^32 registry chunks to write".into()))?;
        batch.put(
            keys::validator_chunk(index),
            encode_validators(validators.iter()),
        );
        batch.put(keys::balance_chunk(index), encode_balances(balances.iter()));
        in_batch = in_batch.saturating_add(held);
        if in_batch >= per_batch {
            store.commit(&batch)?;
            batch = WriteBatch::new();
            in_batch = 0;
        }
    }
    if !batch.is_empty() {
        store.commit(&batch)?;
    }
    Ok(())
}

/// Deletes the validator and balance chunk records from chunk `chunks` on (and any malformed
/// key under their prefixes): what an interrupted write of a larger registry left.
fn delete_chunks_from(
    store: &dyn KvStore,
    chunks: usize,
    per_batch: usize,
) -> Result<(), StoreError> {
    let mut stale = Vec::new();
    for prefix in [keys::VALIDATOR_CHUNK_PREFIX, keys::BALANCE_CHUNK_PREFIX] {
        store.scan_prefix(prefix, &mut |key, _| {
            let chunk = key
                .get(prefix.len()..)
                .and_then(|rest| <[u8; 4]>::try_from(rest).ok())
                .map(u32::from_be_bytes)
                .and_then(|c| usize::try_from(c).ok());
            if chunk.is_none_or(|c| c >= chunks) {
                stale.push(key.to_vec());
            }
            Ok(())
        })?;
    }
    delete_keys(store, &stale, per_batch)
}

/// Deletes `stale`, `per_batch` keys (at least one) per committed batch.
fn delete_keys(store: &dyn KvStore, stale: &[Vec<u8>], per_batch: usize) -> Result<(), StoreError> {
    for keys in stale.chunks(per_batch.max(1)) {
        let mut batch = WriteBatch::new();
        for key in keys {
            batch.delete(key.clone());
        }
        store.commit(&batch)?;
    }
    Ok(())
}

/// Reads the registry back from its chunk records, refusing records that are not dense from
/// chunk 0, a partial chunk before the last, a record that does not decode, and validator and
/// balance records that disagree in count.
pub(crate) fn load_registry(store: &dyn KvStore) -> Result<Registry, OpenError> {
    let validators = load_chunks::<Validators>(store)?;
    let balances = load_chunks::<Balances>(store)?;
    if validators.len() != balances.len() {
        let chunk = validators.len().min(balances.len()) / CHUNK_LEN;
        let held = |len: usize| {
            len.saturating_sub(chunk.saturating_mul(CHUNK_LEN))
                .min(CHUNK_LEN)
        };
        return Err(OpenError::Corrupt(format!(
            "registry chunk {chunk} holds {} validators but {} balances ({} validators and {} \
             balances in all)",
            held(validators.len()),
            held(balances.len()),
            validators.len(),
            balances.len()
        )));
    }
    Ok(Registry::from_parts(validators, balances)?)
}
