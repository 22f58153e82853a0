//! Compact pubkey → validator index map.
//!
//! Finding a validator by its 48-byte BLS pubkey must be O(1) among millions of validators
//! without a second copy of every pubkey. [`PubkeyIndex`] is an open-addressing hash table
//! (linear probing, power-of-two capacity, at most 70% full) whose slots hold only
//! `validator index + 1` as a `u32` (`0` marks an empty slot): 4 bytes per slot, between about 5.7
//! and 11.4 bytes per validator depending on where the table is in its growth cycle (the
//! smallest table has 16 slots, so indices of fewer than 4 validators use more per validator).
//!
//! The pubkeys stay in the registry. Every operation takes a `key_at` closure that returns the
//! registry's pubkey for an index; each candidate slot is confirmed against it, so a hash
//! collision can cost a probe but never return a wrong index.
//!
//! **Hashing.** Pubkeys in deposits are chosen by whoever deposits, so an unkeyed hash would let
//! an attacker craft keys that all probe the same run of slots. Each index therefore hashes with
//! its own random 256-bit key (a keyed folded-multiply hash, see `KeyedHash`). The slot layout
//! differs between nodes and runs; only performance depends on it, never a lookup result, so the
//! index is not consensus state and is never persisted or hashed — rebuild it at startup with
//! [`PubkeyIndex::from_keys`] or [`PubkeyIndex::rebuild`].
//!
//! **Dense indices.** The registry grows only at the end and every validator is inserted, so the
//! index holds exactly `0..len()`. [`PubkeyIndex::insert`] enforces `index == len()`, and growth
//! rehashes by asking `key_at` for each of `0..len()`. A chain reorganisation shrinks the
//! registry from the end; [`PubkeyIndex::truncate`] removes the same validators, deleting them
//! by backward shift so no tombstones are left behind.

// Consensus code: on top of what the crate denies outside tests (see `lib.rs`), no `panic!`.
#![cfg_attr(not(test), deny(clippy::panic))]

use std::fmt;

use super::chunked::ChunkedVec;

mod builder;
mod error;

pub use builder::IndexBuilder;
pub use error::IndexError;

/// A compressed BLS public key.
pub type Pubkey = [u8; 48];

/// Slot value of an empty slot; occupied slots hold `validator index + 1`.
const EMPTY: u32 = 0;
/// Smallest non-zero table size.
const MIN_SLOTS: usize = 16;
/// The table grows before `len * LOAD_DEN > slots * LOAD_NUM`, i.e. above 70% full.
const LOAD_NUM: u64 = 7;
/// See [`LOAD_NUM`].
const LOAD_DEN: u64 = 10;

/// Outcome of probing for a pubkey.
enum Probe {
    /// The pubkey is held by this validator index.
    Found(u32),
    /// The pubkey is absent; this empty slot ends its probe run.
    Vacant(usize),
    /// The pubkey is absent and the table has no empty slot (only when it has no slots).
    Full,
}

/// A keyed multiply-fold hash of a 48-byte pubkey (the folded-multiply construction of
/// foldhash/ahash) under 256 bits of per-index random key. It is about five times faster than
/// SipHash on this input, which matters on the lookup hot path, and the random key still keeps
/// an attacker who chooses pubkeys from predicting which slots they collide in.
#[derive(Clone, Copy)]
struct KeyedHash {
    keys: [u64; 4],
}

impl KeyedHash {
    fn random() -> Self {
        use std::hash::{BuildHasher, Hasher};
        // RandomState is seeded from the OS once per process and varied per instance.
        let state = std::collections::hash_map::RandomState::new();
        let mut keys = [0u64; 4];
        for (i, key) in (0u64..).zip(keys.iter_mut()) {
            let mut hasher = state.build_hasher();
            hasher.write_u64(i);
            *key = hasher.finish() | 1;
        }
        Self { keys }
    }

    fn fold(a: u64, b: u64) -> u64 {
        let product = u128::from(a).wrapping_mul(u128::from(b));
        // Truncation is the point: fold the high half into the low half.
        (product as u64) ^ ((product >> 64) as u64)
    }

    fn hash(&self, pubkey: &Pubkey) -> u64 {
        let [k0, k1, k2, k3] = self.keys;
        let mut words = pubkey.chunks_exact(8).map(|w| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(w);
            u64::from_le_bytes(bytes)
        });
        let mut next = || words.next().unwrap_or(0);
        let a = Self::fold(next() ^ k0, next() ^ k1);
        let b = Self::fold(next() ^ k2, next() ^ k3);
        let c = Self::fold(next() ^ k1, next() ^ k2);
        Self::fold(a ^ c.rotate_left(23), b ^ k0)
    }
}

/// Pubkey → validator index map storing one `u32` per slot.
///
/// See the module docs for hashing, density and memory.
#[derive(Clone)]
pub struct PubkeyIndex {
    /// Power-of-two table (or empty); `EMPTY` or `validator index + 1`.
    slots: ChunkedVec<u32>,
    /// Number of occupied slots, which are exactly validators `0..len`.
    len: u32,
    /// Per-index random hash keys.
    hasher: KeyedHash,
}

impl Default for PubkeyIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for PubkeyIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PubkeyIndex")
            .field("len", &self.len)
            .field("slots", &self.slots.len())
            .field("heap_bytes", &self.heap_bytes())
            .finish_non_exhaustive()
    }
}

/// How many keys ahead an [`IndexBuilder`] prefetches home slots.
const PREFETCH_AHEAD: u32 = 16;

/// Hints the CPU to bring `slot`'s cache line in (a no-op off x86-64, and for `None`).
#[inline]
fn prefetch(slot: Option<&u32>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(slot) = slot {
        // SAFETY: a prefetch is a hint that never faults and reads nothing into the
        // program; the pointer comes from a live reference anyway.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                std::ptr::from_ref(slot).cast::<i8>(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = slot;
}

/// Puts validator `validator` in the vacant slot `cell` (`None`: a slot outside the table, our
/// bug): the slot holds `validator + 1`, 0 being empty. Returns that value.
fn occupy_cell(cell: Option<&mut u32>, validator: u32) -> Result<u32, IndexError> {
    let value = validator
        .checked_add(1)
        .ok_or(IndexError::Internal("validator below len is u32::MAX"))?;
    let cell = cell.ok_or(IndexError::Internal("vacant slot outside the table"))?;
    *cell = value;
    Ok(value)
}

/// Table size for `validators` entries: the smallest power of two, at least [`MIN_SLOTS`], that
/// keeps the load at or below 70%.
fn slots_for(validators: u64) -> Result<usize, IndexError> {
    let overflow = IndexError::CapacityOverflow { validators };
    if validators == 0 {
        return Ok(0);
    }
    let needed = validators
        .checked_mul(LOAD_DEN)
        .ok_or(overflow.clone())?
        .div_ceil(LOAD_NUM);
    let slots = needed.checked_next_power_of_two().ok_or(overflow.clone())?;
    let slots = usize::try_from(slots).map_err(|_| overflow)?;
    Ok(slots.max(MIN_SLOTS))
}

/// Whether `len` entries put a table of `slots` slots over 70% load.
fn over_load(len: u32, slots: usize) -> bool {
    let slots = u64::try_from(slots).unwrap_or(u64::MAX);
    u64::from(len).saturating_mul(LOAD_DEN) > slots.saturating_mul(LOAD_NUM)
}

/// The home slot of a key of hash `hash` in a table with the given mask.
#[allow(
    clippy::cast_possible_truncation,
    reason = "only the low bits of the hash pick the slot"
)]
fn home_slot(hash: u64, mask: usize) -> usize {
    (hash as usize) & mask
}

/// A zeroed table of `slots` slots, reporting allocation failure instead of aborting.
fn alloc_slots(slots: usize) -> Result<ChunkedVec<u32>, IndexError> {
    // Chunked so states share unchanged chunks. Sizes are bounded by `slots_for` (at most
    // 2^33 slots for u32 indices); no single allocation exceeds one chunk.
    Ok(ChunkedVec::filled(slots, EMPTY))
}

impl PubkeyIndex {
    /// An empty index; allocates nothing until the first insert.
    pub fn new() -> Self {
        Self {
            slots: ChunkedVec::new(),
            len: 0,
            hasher: KeyedHash::random(),
        }
    }

    /// Builds the index over `keys`, where `keys[i]` is validator `i`'s pubkey.
    pub fn from_keys(keys: &[Pubkey]) -> Result<Self, IndexError> {
        let count = u32::try_from(keys.len()).map_err(|_| IndexError::CapacityOverflow {
            validators: u64::try_from(keys.len()).unwrap_or(u64::MAX),
        })?;
        Self::rebuild(count, |index| keys.get(usize::try_from(index).ok()?))
    }

    /// Builds the index over validators `0..count`, reading pubkeys through `key_at`; sized once,
    /// so it never rehashes. Fails on a duplicate pubkey or a missing one.
    ///
    /// The table is the one [`insert`](Self::insert)ing `0..count` in order makes, and so are
    /// the errors, but it is built by an [`IndexBuilder`], whose probes compare the keys'
    /// hashes before they read a key (see its docs).
    pub fn rebuild<'k>(
        count: u32,
        key_at: impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Result<Self, IndexError> {
        let mut builder = IndexBuilder::new();
        builder.reserve(count)?;
        builder.extend_to(count, key_at)?;
        Ok(builder.finish())
    }

    /// Number of validators in the index.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of slots in the table.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
    }

    /// Heap memory of the table: slots × 4 bytes in chunks, plus the chunk table.
    pub fn heap_bytes(&self) -> usize {
        self.slots.heap_bytes()
    }

    /// Each slot chunk's address and heap bytes, for accounting shared chunks once.
    pub fn chunk_ptrs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.slots.chunk_ptrs()
    }

    /// Heap bytes this index alone owns however it shares chunks: its chunk table.
    pub fn table_bytes(&self) -> usize {
        self.slots.table_bytes()
    }

    /// Validator index holding `pubkey`, confirmed against `key_at(candidate)`.
    pub fn get<'k>(
        &self,
        pubkey: &Pubkey,
        key_at: impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Option<u32> {
        match self.probe(pubkey, &key_at) {
            Probe::Found(index) => Some(index),
            Probe::Vacant(_) | Probe::Full => None,
        }
    }

    /// Adds `pubkey` as validator `index`, which must be `len()`.
    ///
    /// The new validator may or may not be in the registry yet: `key_at` is only asked for
    /// indices below `len()`, to confirm probe candidates and, when the table grows (doubling
    /// past 70% load), to rehash. On error the index is unchanged.
    pub fn insert<'k>(
        &mut self,
        pubkey: &Pubkey,
        index: u32,
        key_at: impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Result<(), IndexError> {
        if index != self.len {
            return Err(IndexError::NonDenseIndex {
                expected: self.len,
                got: index,
            });
        }
        let new_len = index.checked_add(1).ok_or(IndexError::CapacityOverflow {
            validators: u64::from(index).saturating_add(1),
        })?;
        let slot = match self.probe(pubkey, &key_at) {
            Probe::Found(existing) => return Err(IndexError::Duplicate { existing }),
            Probe::Vacant(slot) if !self.over_load(new_len) => slot,
            Probe::Vacant(_) | Probe::Full => {
                self.grow(new_len, &key_at)?;
                self.vacant_slot(pubkey)?
            }
        };
        self.occupy(slot, index)
    }

    /// Puts validator `validator`, the next one, in vacant `slot`: the slot holds
    /// `validator + 1` (0 is empty), which is also the new length.
    fn occupy(&mut self, slot: usize, validator: u32) -> Result<(), IndexError> {
        self.len = occupy_cell(self.slots.get_mut(slot), validator)?;
        Ok(())
    }

    /// Removes validators `new_len..len()`, the most recently inserted, so that afterwards
    /// [`get`](Self::get) finds exactly validators `0..new_len` and the next
    /// [`insert`](Self::insert) is validator `new_len`.
    ///
    /// Chain reorganisations use it to roll the index back with the registry. `key_at` must
    /// still return the pubkey of every validator below the *old* `len()`, so truncate the
    /// registry after the index: each removed validator's slot is found through its pubkey, and
    /// backward-shift deletion (no tombstones) rehashes the entries that follow it in its probe
    /// run. That costs O(1) expected hashes per removed validator. When more than half of the
    /// validators go, the table is instead rebuilt from `key_at` for `0..new_len`: O(new_len)
    /// hashes plus a fresh table of the same size.
    ///
    /// The table never shrinks here (the registry usually grows back), so
    /// [`heap_bytes`](Self::heap_bytes) stays where it was; [`rebuild`](Self::rebuild) gives a
    /// table sized for the new length. Truncating to `len()` changes nothing. On error the
    /// index holds the same validators as before (slots may have moved): `new_len > len()` is
    /// [`IndexError::TruncateBeyondLen`]; a pubkey `key_at` cannot give is
    /// [`IndexError::MissingKey`]; a removed validator not held under `key_at`'s pubkey is
    /// [`IndexError::KeyMismatch`].
    pub fn truncate<'k>(
        &mut self,
        new_len: u32,
        key_at: impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Result<(), IndexError> {
        let len = self.len;
        if new_len > len {
            return Err(IndexError::TruncateBeyondLen { new_len, len });
        }
        if new_len == len {
            return Ok(());
        }
        if new_len == 0 {
            self.slots.fill(EMPTY);
            self.len = 0;
            return Ok(());
        }
        // `new_len < len`, so this never saturates.
        if len.saturating_sub(new_len) > new_len {
            *self = self.rehashed(self.slots.len(), new_len, &key_at)?;
            return Ok(());
        }
        let mut homes = Vec::new();
        while self.len > new_len {
            if let Err(error) = self.remove_last(&key_at, &mut homes) {
                self.restore(len, &key_at)?;
                return Err(error);
            }
        }
        Ok(())
    }

    /// Removes validator `len() - 1` by backward-shift deletion. Every `key_at` call happens
    /// before the first write, so on error the table is unchanged. `homes` is scratch space.
    fn remove_last<'k>(
        &mut self,
        key_at: &impl Fn(u32) -> Option<&'k Pubkey>,
        homes: &mut Vec<usize>,
    ) -> Result<(), IndexError> {
        // `self.len` is the slot encoding of validator `self.len - 1`.
        let value = self.len;
        let validator = value
            .checked_sub(1)
            .ok_or(IndexError::Internal("removing from an empty index"))?;
        let key = key_at(validator).ok_or(IndexError::MissingKey { index: validator })?;
        let size = self.slots.len();
        let mask = size.wrapping_sub(1);

        // The slot holding `value`, in the probe run of its pubkey.
        let mut hole = self.home(key, mask);
        let mut found = false;
        for _ in 0..size {
            match self.slots.get(hole) {
                Some(&held) if held == value => {
                    found = true;
                    break;
                }
                Some(&EMPTY) | None => break,
                Some(_) => hole = hole.wrapping_add(1) & mask,
            }
        }
        if !found {
            return Err(IndexError::KeyMismatch { index: validator });
        }

        // Home slots of the entries between the hole and the next empty slot.
        homes.clear();
        for step in 1..size {
            match self.slots.get(hole.wrapping_add(step) & mask) {
                Some(&EMPTY) => break,
                Some(&held) => {
                    let other = held.wrapping_sub(1);
                    let other_key = key_at(other).ok_or(IndexError::MissingKey { index: other })?;
                    homes.push(self.home(other_key, mask));
                }
                None => return Err(IndexError::Internal("probe left the table")),
            }
        }

        // Shift back each entry whose probe run passes through the hole, i.e. whose home is not
        // cyclically within (hole, slot]; the last hole becomes empty.
        //
        // Inserts, growth and truncation all place validators in index order, so the table is
        // always laid out as if `0..len` had been inserted in order into it; then no entry's run
        // passes through the last validator's slot and nothing moves. The shift keeps deletion
        // correct for any linear-probing layout all the same.
        let mut slot = hole;
        for &home in homes.iter() {
            slot = slot.wrapping_add(1) & mask;
            let from_home = slot.wrapping_sub(home) & mask;
            let from_hole = slot.wrapping_sub(hole) & mask;
            if from_home >= from_hole {
                let held = *self
                    .slots
                    .get(slot)
                    .ok_or(IndexError::Internal("probe left the table"))?;
                let cell = self
                    .slots
                    .get_mut(hole)
                    .ok_or(IndexError::Internal("hole outside the table"))?;
                *cell = held;
                hole = slot;
            }
        }
        let cell = self
            .slots
            .get_mut(hole)
            .ok_or(IndexError::Internal("hole outside the table"))?;
        *cell = EMPTY;
        self.len = validator;
        Ok(())
    }

    /// Re-inserts validators `len()..old_len`, which [`remove_last`](Self::remove_last) removed
    /// with the same `key_at`, so a failed truncation leaves the contents unchanged.
    fn restore<'k>(
        &mut self,
        old_len: u32,
        key_at: &impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Result<(), IndexError> {
        while self.len < old_len {
            let validator = self.len;
            let key = key_at(validator).ok_or(IndexError::Internal(
                "key_at forgot a pubkey during truncation",
            ))?;
            let slot = self.vacant_slot(key)?;
            self.occupy(slot, validator)?;
        }
        Ok(())
    }

    /// Whether holding `len` entries would put the table over 70% load.
    fn over_load(&self, len: u32) -> bool {
        over_load(len, self.slots.len())
    }

    /// Home slot of `pubkey` in a table with the given mask.
    fn home(&self, pubkey: &Pubkey, mask: usize) -> usize {
        home_slot(self.hasher.hash(pubkey), mask)
    }

    /// Walks the probe run of `pubkey`, confirming each candidate through `key_at`.
    fn probe<'k>(&self, pubkey: &Pubkey, key_at: &impl Fn(u32) -> Option<&'k Pubkey>) -> Probe {
        let mask = self.slots.len().wrapping_sub(1);
        let mut slot = self.home(pubkey, mask);
        // The load cap guarantees an empty slot; the bound only makes termination obvious.
        for _ in 0..self.slots.len() {
            match self.slots.get(slot) {
                None => return Probe::Full,
                Some(&EMPTY) => return Probe::Vacant(slot),
                Some(&value) => {
                    let candidate = value.wrapping_sub(1);
                    if key_at(candidate).is_some_and(|key| key == pubkey) {
                        return Probe::Found(candidate);
                    }
                }
            }
            slot = slot.wrapping_add(1) & mask;
        }
        Probe::Full
    }

    /// First empty slot in the probe run of a pubkey known to be absent (no key comparisons).
    fn vacant_slot(&self, pubkey: &Pubkey) -> Result<usize, IndexError> {
        let mask = self.slots.len().wrapping_sub(1);
        let mut slot = self.home(pubkey, mask);
        for _ in 0..self.slots.len() {
            match self.slots.get(slot) {
                Some(&EMPTY) => return Ok(slot),
                Some(_) => slot = slot.wrapping_add(1) & mask,
                None => break,
            }
        }
        Err(IndexError::Internal("no empty slot below the load cap"))
    }

    /// Replaces the table with one of at least twice the size that fits `len` entries,
    /// re-inserting validators `0..self.len` from `key_at`. Leaves `self` unchanged on error.
    fn grow<'k>(
        &mut self,
        len: u32,
        key_at: &impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Result<(), IndexError> {
        let doubled = self.slots.len().saturating_mul(2);
        let slots = slots_for(u64::from(len))?.max(doubled);
        *self = self.rehashed(slots, self.len, key_at)?;
        Ok(())
    }

    /// A new table of `slots` slots, with this index's hash keys, holding validators `0..count`
    /// read from `key_at`. `slots` must be a power of two that keeps `count` under the load cap.
    fn rehashed<'k>(
        &self,
        slots: usize,
        count: u32,
        key_at: &impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Result<Self, IndexError> {
        let mut table = Self {
            slots: alloc_slots(slots)?,
            len: 0,
            hasher: self.hasher,
        };
        for validator in 0..count {
            let key = key_at(validator).ok_or(IndexError::MissingKey { index: validator })?;
            let slot = table.vacant_slot(key)?;
            table.occupy(slot, validator)?;
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests;
