//! The bytes of one chunk record, and reading every chunk record of one kind back.
//!
//! A validator chunk record is the [`Validator::encode`] encodings of up to [`CHUNK_LEN`]
//! validators, concatenated; a balance chunk record is their balances, 8 bytes little-endian
//! each. Every chunk but the last is full. Reading is hostile-input safe: a record of the wrong
//! length, a gap in the chunk indices, a chunk after a partial one or a validator that does not
//! decode is [`StoreError::Corrupt`] naming the chunk.

use crate::state::chunked::CHUNK_LEN;
use crate::state::{VALIDATOR_BYTES, Validator};
use crate::store::{KvStore, StoreError};

/// Bytes of a balance.
const BALANCE_BYTES: usize = 8;

/// The record of a validator chunk.
pub(super) fn encode_validators<'a>(validators: impl Iterator<Item = &'a Validator>) -> Vec<u8> {
    let mut out = Vec::with_capacity(CHUNK_LEN.saturating_mul(VALIDATOR_BYTES));
    for validator in validators {
        out.extend_from_slice(&validator.encode());
    }
    out
}

/// The record of a balance chunk.
pub(super) fn encode_balances<'a>(balances: impl Iterator<Item = &'a u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(CHUNK_LEN.saturating_mul(BALANCE_BYTES));
    for balance in balances {
        out.extend_from_slice(&balance.to_le_bytes());
    }
    out
}

/// One kind of chunk record: how it is named, keyed and decoded.
pub(super) trait ChunkKind {
    /// The element a record holds up to [`CHUNK_LEN`] of.
    type Item;
    /// "validator" or "balance", for messages.
    const NAME: &'static str;
    /// Bytes of one element.
    const ITEM_BYTES: usize;
    /// Key prefix of the records.
    const PREFIX: &'static [u8];
    /// Decodes one element; `index` is the validator's index, for messages.
    fn decode(index: usize, bytes: &[u8]) -> Result<Self::Item, String>;
}

/// Validator chunk records.
pub(super) struct Validators;

impl ChunkKind for Validators {
    type Item = Validator;
    const NAME: &'static str = "validator";
    const ITEM_BYTES: usize = VALIDATOR_BYTES;
    const PREFIX: &'static [u8] = crate::store::keys::VALIDATOR_CHUNK_PREFIX;
    fn decode(index: usize, bytes: &[u8]) -> Result<Validator, String> {
        Validator::decode(bytes).map_err(|e| format!("validator {index}: {e}"))
    }
}

/// Balance chunk records.
pub(super) struct Balances;

impl ChunkKind for Balances {
    type Item = u64;
    const NAME: &'static str = "balance";
    const ITEM_BYTES: usize = BALANCE_BYTES;
    const PREFIX: &'static [u8] = crate::store::keys::BALANCE_CHUNK_PREFIX;
    fn decode(index: usize, bytes: &[u8]) -> Result<u64, String> {
        <[u8; BALANCE_BYTES]>::try_from(bytes)
            .map(u64::from_le_bytes)
            .map_err(|_| format!("balance {index} is {} bytes", bytes.len()))
    }
}

/// Decodes chunk `chunk`'s record `bytes` onto `out`; returns how many elements it held.
fn decode_chunk<K: ChunkKind>(
    chunk: u32,
    bytes: &[u8],
    out: &mut Vec<K::Item>,
) -> Result<usize, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt(format!("{} chunk {chunk}: {what}", K::NAME));
    let max = CHUNK_LEN.saturating_mul(K::ITEM_BYTES);
    if bytes.is_empty() || !bytes.len().is_multiple_of(K::ITEM_BYTES) || bytes.len() > max {
        return Err(corrupt(format!(
            "the record is {} bytes, expected a non-zero multiple of {} up to {max}",
            bytes.len(),
            K::ITEM_BYTES
        )));
    }
    let first = usize::try_from(chunk)
        .ok()
        .and_then(|c| c.checked_mul(CHUNK_LEN))
        .ok_or_else(|| corrupt("chunk index out of range".into()))?;
    let mut count = 0usize;
    for (offset, item) in bytes.chunks_exact(K::ITEM_BYTES).enumerate() {
        out.push(K::decode(first.saturating_add(offset), item).map_err(corrupt)?);
        count = offset.saturating_add(1);
    }
    Ok(count)
}

/// Every element of `K`'s chunk records, in index order: the records must be dense from chunk 0
/// and every chunk but the last full.
pub(super) fn load_chunks<K: ChunkKind>(store: &dyn KvStore) -> Result<Vec<K::Item>, StoreError> {
    let mut out = Vec::new();
    let mut next: u32 = 0;
    // (chunk, elements) of a chunk that was not full: only the last may be.
    let mut partial: Option<(u32, usize)> = None;
    store.scan_prefix(K::PREFIX, &mut |key, value| {
        let found = key
            .get(K::PREFIX.len()..)
            .and_then(|rest| <[u8; 4]>::try_from(rest).ok())
            .map(u32::from_be_bytes);
        match found {
            Some(chunk) if chunk == next => {}
            Some(chunk) => {
                return Err(StoreError::Corrupt(format!(
                    "{} chunk records are not dense: chunk {next} is missing (the next record \
                     is chunk {chunk})",
                    K::NAME
                )));
            }
            None => {
                return Err(StoreError::Corrupt(format!(
                    "a {} chunk record has the malformed key {} (expected chunk {next})",
                    K::NAME,
                    hex::encode(key)
                )));
            }
        }
        if let Some((chunk, held)) = partial {
            return Err(StoreError::Corrupt(format!(
                "{} chunk {next} follows chunk {chunk}, which holds {held} of {CHUNK_LEN}: only \
                 the last chunk may be partial",
                K::NAME
            )));
        }
        let held = decode_chunk::<K>(next, value, &mut out)?;
        if held < CHUNK_LEN {
            partial = Some((next, held));
        }
        next = next.checked_add(1).ok_or_else(|| {
            StoreError::Corrupt(format!("more than 2^32 {} chunk records", K::NAME))
        })?;
        Ok(())
    })?;
    Ok(out)
}
