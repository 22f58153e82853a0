//! Building a [`PubkeyIndex`] over validators that arrive in order, in pieces: a restore
//! indexes each verified chunk's validators as it takes the chunk, so the index is done when
//! the last chunk is, instead of being built from scratch after it.
//!
//! The builder keeps every key's 64-bit hash beside its flat table (8 bytes per validator,
//! dropped by [`IndexBuilder::finish`]). A probe compares hashes before it reads a key — at
//! millions of validators a key read per occupied slot passed is a cache miss each, and it only
//! matters for a duplicate — and growing the table re-places validators from their hashes
//! without reading a key again.
//!
//! The finished table is the one [`PubkeyIndex::insert`]ing the same validators in order
//! makes: linear probing places a key by the keys inserted before it, and growth re-places
//! them in order.

use super::{EMPTY, IndexError, KeyedHash, PREFETCH_AHEAD, Pubkey, PubkeyIndex};
use super::{home_slot as home, occupy_cell, over_load, prefetch, slots_for};
use crate::state::chunked::ChunkedVec;

/// A [`PubkeyIndex`] under construction over validators `0..len()`, appended in order.
#[derive(Clone)]
pub struct IndexBuilder {
    /// Power-of-two table (or empty); `EMPTY` or `validator index + 1`.
    table: Vec<u32>,
    /// `hashes[i]` is validator `i`'s key hash under `hasher`.
    hashes: Vec<u64>,
    /// The finished index's hash keys.
    hasher: KeyedHash,
}

impl Default for IndexBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for IndexBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexBuilder")
            .field("len", &self.hashes.len())
            .field("slots", &self.table.len())
            .finish_non_exhaustive()
    }
}

/// The first empty slot of `table` at or after `slot`, wrapping.
fn vacant(table: &[u32], mut slot: usize, mask: usize) -> Result<usize, IndexError> {
    for _ in 0..table.len() {
        match table.get(slot) {
            Some(&EMPTY) => return Ok(slot),
            Some(_) => slot = slot.wrapping_add(1) & mask,
            None => break,
        }
    }
    Err(IndexError::Internal("no empty slot below the load cap"))
}

impl IndexBuilder {
    /// An empty builder; allocates nothing until validators are added.
    pub fn new() -> Self {
        Self::with_hasher(KeyedHash::random())
    }

    /// An empty builder hashing with `hasher` (random in use; fixed in tests, so that a
    /// failing case replays).
    pub(super) fn with_hasher(hasher: KeyedHash) -> Self {
        Self {
            table: Vec::new(),
            hashes: Vec::new(),
            hasher,
        }
    }

    /// Slots in the table (tests).
    #[cfg(test)]
    pub(super) fn table_len(&self) -> usize {
        self.table.len()
    }

    /// Validators added so far.
    pub fn len(&self) -> u32 {
        u32::try_from(self.hashes.len()).unwrap_or(u32::MAX)
    }

    /// Whether no validator was added.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }

    /// Sizes the table for `validators` in all, so that adding up to them rehashes nothing;
    /// never shrinks it. Re-places the validators held from their hashes.
    pub fn reserve(&mut self, validators: u32) -> Result<(), IndexError> {
        let slots = slots_for(u64::from(validators))?;
        if slots <= self.table.len() {
            return Ok(());
        }
        let mut table = vec![EMPTY; slots];
        let mask = slots.wrapping_sub(1);
        for (validator, &hash) in (0u32..).zip(&self.hashes) {
            let slot = vacant(&table, home(hash, mask), mask)?;
            occupy_cell(table.get_mut(slot), validator)?;
        }
        self.table = table;
        Ok(())
    }

    /// Adds validators `len()..end`, reading their pubkeys (and a candidate's, to confirm a
    /// duplicate) through `key_at`, which must give every validator below `end`. Fails on a
    /// duplicate pubkey or a missing one; after an error the builder holds part of the batch
    /// and is only fit to be dropped.
    pub fn extend_to<'k>(
        &mut self,
        end: u32,
        key_at: impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Result<(), IndexError> {
        let start = self.len();
        if end < start {
            return Err(IndexError::NonDenseIndex {
                expected: start,
                got: end,
            });
        }
        if self.over_load(end) {
            // Doubling at least, so that adding one validator at a time stays linear.
            self.reserve(end.max(start.saturating_mul(2)))?;
        }
        // Every batch key hashed first (they were just appended, so in cache), then placed
        // with the home slot `PREFETCH_AHEAD` keys on asked for: every home slot is a miss.
        // A missing key fails after the keys before it are placed, as inserting in order
        // does: a duplicate before it is the error.
        let first = self.hashes.len();
        let mut missing = None;
        for validator in start..end {
            let Some(key) = key_at(validator) else {
                missing = Some(IndexError::MissingKey { index: validator });
                break;
            };
            self.hashes.push(self.hasher.hash(key));
        }
        let mask = self.table.len().wrapping_sub(1);
        let batch = self.hashes.get(first..).unwrap_or_default();
        let ahead = usize::try_from(PREFETCH_AHEAD).unwrap_or(0);
        for ((position, &hash), validator) in batch.iter().enumerate().zip(start..end) {
            if let Some(&next) = batch.get(position.saturating_add(ahead)) {
                prefetch(self.table.get(home(next, mask)));
            }
            let slot = self.vacant_for(validator, hash, mask, &key_at)?;
            occupy_cell(self.table.get_mut(slot), validator)?;
        }
        missing.map_or(Ok(()), Err)
    }

    /// The empty slot where `validator` (of key hash `hash`) goes, checking every validator
    /// of the same hash on its probe run for the same key.
    fn vacant_for<'k>(
        &self,
        validator: u32,
        hash: u64,
        mask: usize,
        key_at: &impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Result<usize, IndexError> {
        let mut slot = home(hash, mask);
        for _ in 0..self.table.len() {
            match self.table.get(slot) {
                None => break,
                Some(&EMPTY) => return Ok(slot),
                Some(&value) => {
                    let candidate = value.wrapping_sub(1);
                    let same_hash = usize::try_from(candidate)
                        .ok()
                        .and_then(|c| self.hashes.get(c))
                        .is_some_and(|&h| h == hash);
                    if same_hash && key_at(candidate).is_some_and(|k| Some(k) == key_at(validator))
                    {
                        return Err(IndexError::Duplicate {
                            existing: candidate,
                        });
                    }
                }
            }
            slot = slot.wrapping_add(1) & mask;
        }
        Err(IndexError::Internal("no empty slot below the load cap"))
    }

    fn over_load(&self, len: u32) -> bool {
        over_load(len, self.table.len())
    }

    /// The index of every validator added, its table cut into shared chunks.
    pub fn finish(self) -> PubkeyIndex {
        PubkeyIndex {
            slots: ChunkedVec::from(self.table.as_slice()),
            len: self.len(),
            hasher: self.hasher,
        }
    }
}
