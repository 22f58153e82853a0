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

/// Why an index operation failed. On error the index is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexError {
    /// The pubkey is already in the index.
    Duplicate {
        /// Validator index that already holds the pubkey.
        existing: u32,
    },
    /// The index to insert is not the next one; the registry is append-only, so indices are
    /// inserted in order `0, 1, 2, ...`.
    NonDenseIndex {
        /// The next index, `len()`.
        expected: u32,
        /// The index passed in.
        got: u32,
    },
    /// The index cannot hold more validators: `u32::MAX` has no slot encoding, or the table size
    /// needed for this many validators does not fit `usize`.
    CapacityOverflow {
        /// Number of validators asked for.
        validators: u64,
    },
    /// The allocator refused the slot table.
    AllocationFailed {
        /// Number of `u32` slots requested.
        slots: usize,
    },
    /// `key_at` returned no pubkey for an index the index must rehash or build from.
    MissingKey {
        /// The validator index without a pubkey.
        index: u32,
    },
    /// `key_at` returned a pubkey under which the index does not hold that validator.
    KeyMismatch {
        /// The validator index whose pubkey does not match.
        index: u32,
    },
    /// A truncation to more validators than the index holds.
    TruncateBeyondLen {
        /// The length asked for.
        new_len: u32,
        /// Number of validators in the index.
        len: u32,
    },
    /// An internal invariant of the table was broken; this is a bug in this module.
    Internal(&'static str),
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Duplicate { existing } => {
                write!(f, "pubkey is already registered as validator {existing}")
            }
            Self::NonDenseIndex { expected, got } => write!(
                f,
                "validator index {got} inserted out of order: the next index is {expected}"
            ),
            Self::CapacityOverflow { validators } => {
                write!(f, "pubkey index cannot hold {validators} validators")
            }
            Self::AllocationFailed { slots } => {
                write!(
                    f,
                    "could not allocate a pubkey index table of {slots} slots"
                )
            }
            Self::MissingKey { index } => write!(
                f,
                "the registry has no pubkey for validator {index}, which the pubkey index holds"
            ),
            Self::KeyMismatch { index } => write!(
                f,
                "the registry's pubkey for validator {index} is not the one the pubkey index holds"
            ),
            Self::TruncateBeyondLen { new_len, len } => write!(
                f,
                "cannot truncate a pubkey index of {len} validators to {new_len} validators"
            ),
            Self::Internal(what) => write!(f, "pubkey index invariant broken (bug): {what}"),
        }
    }
}

impl std::error::Error for IndexError {}

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

/// Table size for `validators` entries: the smallest power of two, at least [`MIN_SLOTS`], that
/// keeps the load at or below 70%.
/// How many keys ahead [`PubkeyIndex::rebuild`] prefetches home slots.
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

    /// An empty index that holds `validators` entries without growing.
    pub fn with_capacity(validators: u32) -> Result<Self, IndexError> {
        Ok(Self {
            slots: alloc_slots(slots_for(u64::from(validators))?)?,
            len: 0,
            hasher: KeyedHash::random(),
        })
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
    /// the errors, but a probe compares the high half of the keys' hashes, kept in a small
    /// array that stays in cache, before it reads a key: at millions of validators a key read
    /// per occupied slot on the way is a cache miss each, and it only matters for a duplicate.
    pub fn rebuild<'k>(
        count: u32,
        key_at: impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Result<Self, IndexError> {
        let mut index = Self::with_capacity(count)?;
        index.fill_in_order(count, &key_at)?;
        Ok(index)
    }

    /// Inserts validators `0..count` into this empty index, sized for them (see
    /// [`rebuild`](Self::rebuild)).
    fn fill_in_order<'k>(
        &mut self,
        count: u32,
        key_at: &impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Result<(), IndexError> {
        if self.len != 0 || self.over_load(count) {
            return Err(IndexError::Internal(
                "filling an index that is not empty and sized",
            ));
        }
        // Filled as one flat table, then cut into the shared chunks once: a probe is one
        // bounds-checked read, not a chunk lookup, and a write no copy-on-write check.
        let mut table = vec![EMPTY; self.slots.len()];
        let mask = table.len().wrapping_sub(1);
        let mut tags: Vec<u32> = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        for validator in 0..count {
            // The table is tens of megabytes at millions of validators and every home slot a
            // cache miss: ask for the slot of the key `PREFETCH_AHEAD` places on now.
            if let Some(ahead) = validator
                .checked_add(PREFETCH_AHEAD)
                .filter(|&a| a < count)
                .and_then(key_at)
            {
                prefetch(table.get(self.home(ahead, mask)));
            }
            let key = key_at(validator).ok_or(IndexError::MissingKey { index: validator })?;
            let hash = self.hasher.hash(key);
            let tag = u32::try_from(hash >> 32).unwrap_or(0);
            let mut slot = self.home(key, mask);
            let mut steps = 0usize;
            loop {
                match table.get(slot) {
                    None => return Err(IndexError::Internal("probe left the table")),
                    Some(&EMPTY) => break,
                    Some(&value) => {
                        let candidate = value.wrapping_sub(1);
                        let same_tag = usize::try_from(candidate)
                            .ok()
                            .and_then(|c| tags.get(c))
                            .is_some_and(|&t| t == tag);
                        if same_tag && key_at(candidate).is_some_and(|k| k == key) {
                            return Err(IndexError::Duplicate {
                                existing: candidate,
                            });
                        }
                    }
                }
                slot = slot.wrapping_add(1) & mask;
                steps = steps.wrapping_add(1);
                // Sized under the load cap there is always an empty slot; this only makes
                // termination obvious.
                if steps > mask {
                    return Err(IndexError::Internal("no empty slot below the load cap"));
                }
            }
            let value = validator
                .checked_add(1)
                .ok_or(IndexError::Internal("validator below len is u32::MAX"))?;
            let cell = table
                .get_mut(slot)
                .ok_or(IndexError::Internal("vacant slot outside the table"))?;
            *cell = value;
            tags.push(tag);
        }
        self.slots = ChunkedVec::from(table.as_slice());
        self.len = count;
        Ok(())
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
        let value = validator
            .checked_add(1)
            .ok_or(IndexError::Internal("validator below len is u32::MAX"))?;
        let cell = self
            .slots
            .get_mut(slot)
            .ok_or(IndexError::Internal("vacant slot outside the table"))?;
        *cell = value;
        self.len = value;
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
        let slots = u64::try_from(self.slots.len()).unwrap_or(u64::MAX);
        u64::from(len).saturating_mul(LOAD_DEN) > slots.saturating_mul(LOAD_NUM)
    }

    /// Home slot of `pubkey` in a table with the given mask.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "only the low bits of the hash pick the slot"
    )]
    fn home(&self, pubkey: &Pubkey, mask: usize) -> usize {
        (self.hasher.hash(pubkey) as usize) & mask
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
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};
    use std::collections::HashMap;
    use std::time::Instant;

    fn key(i: u64) -> Pubkey {
        let mut k = [0x5Au8; 48];
        k[40..].copy_from_slice(&i.to_le_bytes());
        k
    }

    /// An append-only registry standing in for the real one.
    #[derive(Default)]
    struct Registry {
        keys: Vec<Pubkey>,
        index: PubkeyIndex,
    }

    impl Registry {
        fn add(&mut self, pubkey: Pubkey) -> Result<u32, IndexError> {
            let next = self.index.len();
            let keys = &self.keys;
            self.index.insert(&pubkey, next, |i| keys.get(i as usize))?;
            self.keys.push(pubkey);
            Ok(next)
        }

        fn get(&self, pubkey: &Pubkey) -> Option<u32> {
            self.index.get(pubkey, |i| self.keys.get(i as usize))
        }

        /// Truncates the index while the registry still holds every key, then the registry.
        fn truncate(&mut self, len: u32) -> Result<(), IndexError> {
            let keys = &self.keys;
            self.index.truncate(len, |i| keys.get(i as usize))?;
            self.keys.truncate(len as usize);
            Ok(())
        }

        /// A registry whose index hashes with fixed keys, so a failing case replays.
        fn with_hash_keys(keys: [u64; 4]) -> Self {
            Self {
                keys: Vec::new(),
                index: fixed_index(keys),
            }
        }
    }

    /// An empty index with the given hash keys instead of random ones.
    fn fixed_index(keys: [u64; 4]) -> PubkeyIndex {
        PubkeyIndex {
            slots: ChunkedVec::new(),
            len: 0,
            hasher: KeyedHash {
                keys: keys.map(|k| k | 1),
            },
        }
    }

    /// Checks the table itself: the occupied slots hold exactly `1..=len`, once each, and each
    /// entry is reachable from its home slot without crossing an empty slot (which a deletion
    /// that left a gap would break).
    fn check_table(index: &PubkeyIndex, keys: &[Pubkey]) -> Result<(), TestCaseError> {
        let mut seen = vec![false; index.len() as usize];
        let mask = index.slots.len().wrapping_sub(1);
        for (slot, &value) in index.slots.iter().enumerate() {
            if value == EMPTY {
                continue;
            }
            let validator = value as usize - 1;
            prop_assert!(validator < seen.len(), "slot {} holds {}", slot, value);
            prop_assert!(!seen[validator], "validator {} held twice", validator);
            seen[validator] = true;
            let mut probe = index.home(&keys[validator], mask);
            while probe != slot {
                prop_assert_ne!(
                    *index.slots.get(probe).unwrap(),
                    EMPTY,
                    "gap before validator {}",
                    validator
                );
                probe = (probe + 1) & mask;
            }
        }
        prop_assert!(seen.iter().all(|&s| s), "a validator below len has no slot");
        prop_assert!(!index.over_load(index.len()));
        prop_assert_eq!(index.heap_bytes(), index.slots.heap_bytes());
        Ok(())
    }

    /// `get` on every key of `keys`: index `i` for `i < len`, nothing for the rest.
    fn check_gets(index: &PubkeyIndex, keys: &[Pubkey], len: u32) {
        for (i, k) in keys.iter().enumerate() {
            let expected = (i < len as usize).then_some(i as u32);
            assert_eq!(index.get(k, |j| keys.get(j as usize)), expected, "key {i}");
        }
    }

    #[test]
    fn truncate_one_at_a_time_then_regrow() {
        let keys: Vec<Pubkey> = (0..3000).map(key).collect();
        let mut reg = Registry::with_hash_keys([1, 2, 3, 4]);
        for k in &keys {
            reg.add(*k).unwrap();
        }
        let slots = reg.index.slot_count();
        let heap = reg.index.heap_bytes();
        for len in (0..3000u32).rev() {
            reg.truncate(len).unwrap();
            assert_eq!(reg.index.len(), len);
            if len % 97 == 0 {
                check_table(&reg.index, &keys).unwrap();
                check_gets(&reg.index, &keys, len);
            }
        }
        assert!(reg.index.slots.iter().all(|&v| v == EMPTY));
        assert_eq!(
            (reg.index.slot_count(), reg.index.heap_bytes()),
            (slots, heap)
        );
        // The same pubkeys come back at the same indices, without growing the table.
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(reg.add(*k).unwrap(), i as u32);
        }
        assert_eq!(reg.index.slot_count(), slots);
        check_table(&reg.index, &keys).unwrap();
        check_gets(&reg.index, &keys, 3000);
    }

    #[test]
    fn truncate_in_bulk_keeps_the_table_size() {
        let keys: Vec<Pubkey> = (0..3000).map(key).collect();
        let mut index = PubkeyIndex::from_keys(&keys).unwrap();
        let slots = index.slot_count();
        let key_at = |i: u32| keys.get(i as usize);
        // More than half removed: rebuilt, at the same size.
        index.truncate(1000, key_at).unwrap();
        assert_eq!(index.slot_count(), slots);
        assert_eq!(
            index.heap_bytes(),
            ChunkedVec::<u32>::filled(slots, 0).heap_bytes()
        );
        check_table(&index, &keys).unwrap();
        check_gets(&index, &keys, 1000);
        // No-op, then to zero.
        index.truncate(1000, |_| None).unwrap();
        check_gets(&index, &keys, 1000);
        index.truncate(0, |_| None).unwrap();
        assert!(index.is_empty());
        assert_eq!(index.slot_count(), slots);
        check_gets(&index, &keys, 0);
        index.truncate(0, |_| None).unwrap();
        for (i, k) in keys.iter().enumerate() {
            index.insert(k, i as u32, key_at).unwrap();
        }
        check_table(&index, &keys).unwrap();
        check_gets(&index, &keys, 3000);
    }

    #[test]
    fn truncate_failures_leave_contents_unchanged() {
        let keys: Vec<Pubkey> = (0..1000).map(key).collect();
        let mut reg = Registry::with_hash_keys([5, 6, 7, 8]);
        for k in &keys {
            reg.add(*k).unwrap();
        }
        let mut index = reg.index;
        let heap = index.heap_bytes();
        let key_at = |i: u32| keys.get(i as usize);
        let unchanged = |index: &PubkeyIndex| {
            assert_eq!(index.len(), 1000);
            assert_eq!(index.heap_bytes(), heap);
            check_table(index, &keys).unwrap();
            check_gets(index, &keys, 1000);
        };

        let before = index.slots.clone();
        assert_eq!(
            index.truncate(1001, key_at),
            Err(IndexError::TruncateBeyondLen {
                new_len: 1001,
                len: 1000
            })
        );
        assert_eq!(index.slots, before);

        // The last removed validator's pubkey is missing: the other 399 are put back.
        let missing_last = |i: u32| if i == 600 { None } else { keys.get(i as usize) };
        assert_eq!(
            index.truncate(600, missing_last),
            Err(IndexError::MissingKey { index: 600 })
        );
        unchanged(&index);

        // Surviving validators' pubkeys are missing: some backward shift needs one.
        let survivors_missing = |i: u32| if i < 600 { None } else { keys.get(i as usize) };
        let result = index.truncate(600, survivors_missing);
        assert!(
            matches!(result, Err(IndexError::MissingKey { index }) if index < 600),
            "{result:?}"
        );
        unchanged(&index);

        // The registry's pubkey for a removed validator is not the one inserted.
        let stranger = key(1_000_000);
        let mismatched = |i: u32| {
            if i == 700 {
                Some(&stranger)
            } else {
                keys.get(i as usize)
            }
        };
        assert_eq!(
            index.truncate(600, mismatched),
            Err(IndexError::KeyMismatch { index: 700 })
        );
        unchanged(&index);

        // The bulk path (more than half removed) reads only the survivors' pubkeys, and fails
        // before replacing the table.
        let mut bulk = index.clone();
        bulk.truncate(100, missing_last).unwrap();
        check_gets(&bulk, &keys, 100);
        let missing_survivor = |i: u32| if i == 50 { None } else { keys.get(i as usize) };
        assert_eq!(
            index.truncate(100, missing_survivor),
            Err(IndexError::MissingKey { index: 50 })
        );
        check_gets(&index, &keys, 1000);

        index.truncate(600, key_at).unwrap();
        check_table(&index, &keys).unwrap();
        check_gets(&index, &keys, 600);
        assert!(
            IndexError::TruncateBeyondLen { new_len: 3, len: 2 }
                .to_string()
                .contains("truncate")
        );
        assert!(
            IndexError::KeyMismatch { index: 7 }
                .to_string()
                .contains('7')
        );
    }

    fn bytes_per_validator(index: &PubkeyIndex) -> f64 {
        index.heap_bytes() as f64 / f64::from(index.len())
    }

    #[test]
    fn empty_index() {
        let index = PubkeyIndex::new();
        assert_eq!(index.get(&key(0), |_| None), None);
        assert_eq!(index.heap_bytes(), 0);
        assert!(index.is_empty());
        let index = PubkeyIndex::from_keys(&[]).unwrap();
        assert_eq!(index.get(&key(0), |_| None), None);
        assert!(format!("{index:?}").contains("len: 0"));
    }

    #[test]
    fn insert_get_duplicate_and_order() {
        let mut reg = Registry::default();
        for i in 0..1000 {
            assert_eq!(reg.add(key(i)).unwrap(), i as u32);
        }
        for i in 0..1000 {
            assert_eq!(reg.get(&key(i)), Some(i as u32));
        }
        assert_eq!(reg.get(&key(1000)), None);
        assert_eq!(
            reg.add(key(17)),
            Err(IndexError::Duplicate { existing: 17 })
        );
        assert_eq!(reg.index.len(), 1000);

        let keys = &reg.keys;
        let mut index = reg.index.clone();
        assert_eq!(
            index.insert(&key(5000), 7, |i| keys.get(i as usize)),
            Err(IndexError::NonDenseIndex {
                expected: 1000,
                got: 7
            })
        );
        // Hits are confirmed against the registry: a different registry finds nothing.
        let other: Vec<Pubkey> = (0..1000).map(|i| key(i + 1_000_000)).collect();
        assert_eq!(index.get(&key(3), |i| other.get(i as usize)), None);
        assert_eq!(index.get(&key(3), |_| None), None);
    }

    #[test]
    fn growth_failure_leaves_index_unchanged() {
        let keys: Vec<Pubkey> = (0..11).map(key).collect();
        let mut index = PubkeyIndex::from_keys(&keys).unwrap();
        assert_eq!(index.slot_count(), 16);
        let before = index.heap_bytes();
        // The 12th insert must grow; a registry that lost key 4 makes the rehash fail.
        let broken = |i: u32| if i == 4 { None } else { keys.get(i as usize) };
        assert_eq!(
            index.insert(&key(11), 11, broken),
            Err(IndexError::MissingKey { index: 4 })
        );
        assert_eq!((index.len(), index.heap_bytes()), (11, before));
        for i in 0..11 {
            assert_eq!(index.get(&key(i), |i| keys.get(i as usize)), Some(i as u32));
        }
        index
            .insert(&key(11), 11, |i| keys.get(i as usize))
            .unwrap();
        assert_eq!(index.slot_count(), 32);
    }

    #[test]
    fn rebuild_rejects_duplicates_and_gaps() {
        let mut keys: Vec<Pubkey> = (0..100).map(key).collect();
        keys.push(key(42));
        assert_eq!(
            PubkeyIndex::from_keys(&keys).unwrap_err(),
            IndexError::Duplicate { existing: 42 }
        );
        assert_eq!(
            PubkeyIndex::rebuild(200, |i| keys.get(i as usize)).unwrap_err(),
            IndexError::Duplicate { existing: 42 }
        );
        keys.pop();
        assert_eq!(
            PubkeyIndex::rebuild(200, |i| keys.get(i as usize)).unwrap_err(),
            IndexError::MissingKey { index: 100 }
        );
        assert!(
            IndexError::MissingKey { index: 100 }
                .to_string()
                .contains("100")
        );
    }

    #[test]
    fn capacity_limits() {
        assert_eq!(slots_for(0).unwrap(), 0);
        assert_eq!(slots_for(1).unwrap(), 16);
        assert_eq!(slots_for(11).unwrap(), 16);
        assert_eq!(slots_for(12).unwrap(), 32);
        assert_eq!(slots_for(2_000_000).unwrap(), 1 << 22);
        assert_eq!(slots_for(u64::from(u32::MAX)).unwrap(), 1 << 33);
        assert!(slots_for(u64::MAX).is_err());
        let mut index = PubkeyIndex::new();
        index.len = u32::MAX;
        assert_eq!(
            index.insert(&key(0), u32::MAX, |_| None),
            Err(IndexError::CapacityOverflow {
                validators: 1 << 32
            })
        );
    }

    #[test]
    fn memory_per_validator_stays_under_16_bytes() {
        for n in [1_000u64, 100_000] {
            let keys: Vec<Pubkey> = (0..n).map(key).collect();
            let built = PubkeyIndex::from_keys(&keys).unwrap();
            // Slots, plus chunk headers and the chunk table (about 1%).
            let slots = built.slot_count() * 4;
            assert!(built.heap_bytes() >= slots && built.heap_bytes() <= slots + slots / 64 + 64);
            assert!(
                bytes_per_validator(&built) <= 16.0,
                "{n}: {}",
                bytes_per_validator(&built)
            );
        }
        // Incrementally, including the entry right after every growth (the worst case).
        let mut reg = Registry::default();
        let mut growths = 0;
        for i in 0..100_000 {
            let slots = reg.index.slot_count();
            reg.add(key(i)).unwrap();
            let bytes = bytes_per_validator(&reg.index);
            // Below 16 entries the 16-slot minimum table (64 bytes) and the chunk's fixed
            // overhead (about 50 bytes) dominate.
            if i + 1 >= 16 {
                assert!(bytes <= 16.0, "after {} inserts: {bytes}", i + 1);
            }
            // Small tables pay the chunks' fixed overhead; large ones about 1% on top of 11.4.
            if reg.index.slot_count() != slots && slots >= 1024 {
                growths += 1;
                assert!(
                    bytes <= 11.6,
                    "just after growth to {}: {bytes}",
                    reg.index.slot_count()
                );
            }
        }
        assert_eq!(growths, 8, "growths from 1024 slots up");
        assert!(bytes_per_validator(&reg.index) <= 16.0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert a key from the small pool (often a duplicate) or a fresh one.
        Insert(Result<usize, Pubkey>),
        /// Look up a key from the pool (hit or miss) or a fresh one (miss).
        Get(Result<usize, Pubkey>),
        /// Insert with a wrong index.
        InsertAt(u32, Pubkey),
        /// Truncate the registry and the index.
        Truncate(Cut),
    }

    /// Where a truncation cuts, relative to the current length.
    #[derive(Debug, Clone, Copy)]
    enum Cut {
        /// To `seed % (len + 1)`.
        Within(u32),
        /// Remove only the last `n % (len + 1)` (the backward-shift path).
        Last(u32),
        ToZero,
        /// To the current length: a no-op.
        ToLen,
        /// To `len + 1 + extra`: an error.
        Past(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        let pick = prop_oneof![(0usize..24).prop_map(Ok), any::<[u8; 48]>().prop_map(Err)];
        prop_oneof![
            4 => pick.clone().prop_map(Op::Insert),
            4 => pick.prop_map(Op::Get),
            1 => (any::<u32>(), any::<[u8; 48]>()).prop_map(|(i, k)| Op::InsertAt(i, k)),
            2 => prop_oneof![
                3 => any::<u32>().prop_map(Cut::Within),
                3 => (0u32..4).prop_map(Cut::Last),
                1 => Just(Cut::ToZero),
                1 => Just(Cut::ToLen),
                1 => (0u32..3).prop_map(Cut::Past),
            ]
            .prop_map(Op::Truncate),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        /// Inserts (often of pubkeys removed by an earlier truncation), lookups and truncations
        /// against a `HashMap` model, checking the table layout after every step.
        #[test]
        fn matches_hashmap_model(
            hash_keys in any::<[u64; 4]>(),
            pool in vec(any::<[u8; 48]>(), 24),
            ops in vec(op(), 0..200),
        ) {
            let mut reg = Registry::with_hash_keys(hash_keys);
            let mut model: HashMap<Pubkey, u32> = HashMap::new();
            let resolve = |k: &Result<usize, Pubkey>| match k {
                Ok(i) => pool[*i],
                Err(k) => *k,
            };
            for op in ops {
                match op {
                    Op::Insert(k) => {
                        let k = resolve(&k);
                        let expected = match model.get(&k) {
                            Some(&existing) => Err(IndexError::Duplicate { existing }),
                            None => Ok(model.len() as u32),
                        };
                        let got = reg.add(k);
                        prop_assert_eq!(&got, &expected);
                        if let Ok(i) = got {
                            model.insert(k, i);
                        }
                    }
                    Op::Get(k) => {
                        let k = resolve(&k);
                        prop_assert_eq!(reg.get(&k), model.get(&k).copied());
                    }
                    Op::InsertAt(i, k) => {
                        let len = reg.index.len();
                        if i != len {
                            let keys = &reg.keys;
                            prop_assert_eq!(
                                reg.index.insert(&k, i, |j| keys.get(j as usize)),
                                Err(IndexError::NonDenseIndex { expected: len, got: i })
                            );
                        }
                    }
                    Op::Truncate(cut) => {
                        let len = reg.index.len();
                        let (slots, heap) = (reg.index.slots.clone(), reg.index.heap_bytes());
                        let new_len = match cut {
                            Cut::Within(seed) => seed % (len + 1),
                            Cut::Last(n) => len - n % (len + 1),
                            Cut::ToZero => 0,
                            Cut::ToLen => len,
                            Cut::Past(extra) => len + 1 + extra,
                        };
                        if new_len > len {
                            prop_assert_eq!(
                                reg.truncate(new_len),
                                Err(IndexError::TruncateBeyondLen { new_len, len })
                            );
                            prop_assert_eq!(&reg.index.slots, &slots);
                        } else {
                            reg.truncate(new_len).unwrap();
                            model.retain(|_, i| *i < new_len);
                            prop_assert_eq!(reg.index.slot_count(), slots.len());
                            if new_len == len {
                                prop_assert_eq!(&reg.index.slots, &slots);
                            }
                        }
                        prop_assert_eq!(reg.index.heap_bytes(), heap);
                        // Every pool key: found exactly if the model holds it.
                        for k in &pool {
                            prop_assert_eq!(reg.get(k), model.get(k).copied());
                        }
                    }
                }
                prop_assert_eq!(reg.index.len() as usize, model.len());
                check_table(&reg.index, &reg.keys)?;
                // History independence: the layout is that of inserting `0..len` in order.
                let keys = &reg.keys;
                let fresh = reg
                    .index
                    .rehashed(reg.index.slot_count(), reg.index.len(), &|j| keys.get(j as usize))
                    .unwrap();
                prop_assert_eq!(&reg.index.slots, &fresh.slots);
            }
            for (k, i) in &model {
                prop_assert_eq!(reg.get(k), Some(*i));
            }
            let rebuilt = PubkeyIndex::from_keys(&reg.keys).unwrap();
            for (k, i) in &model {
                prop_assert_eq!(rebuilt.get(k, |j| reg.keys.get(j as usize)), Some(*i));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// `rebuild` lays the table out exactly as inserting `0..n` one by one does, and fails
        /// the same way on a duplicate; keys are drawn from a small set, so duplicates and
        /// shared home slots are common.
        #[test]
        fn rebuild_is_inserting_in_order(
            hash_keys in any::<[u64; 4]>(),
            picks in prop_oneof![vec(0u64..60, 1..120), vec(0u64..1_000_000, 1..120)],
        ) {
            let keys: Vec<Pubkey> = picks.iter().map(|&p| key(p)).collect();
            let n = keys.len() as u32;
            let key_at = |i: u32| keys.get(i as usize);
            let mut inserted = fixed_index(hash_keys);
            inserted.slots = alloc_slots(slots_for(u64::from(n)).unwrap()).unwrap();
            let mut expected = Ok(());
            for (i, k) in keys.iter().enumerate() {
                if let Err(e) = inserted.insert(k, i as u32, key_at) {
                    expected = Err(e);
                    break;
                }
            }
            let mut filled = fixed_index(hash_keys);
            filled.slots = alloc_slots(slots_for(u64::from(n)).unwrap()).unwrap();
            let built = filled.fill_in_order(n, &key_at);
            prop_assert_eq!(
                PubkeyIndex::rebuild(n, key_at).map(|_| ()),
                built.clone(),
                "rebuild fails as filling does, whatever its hash keys"
            );
            match (expected, built) {
                (Ok(()), Ok(())) => {
                    prop_assert!(filled.slots == inserted.slots);
                    prop_assert_eq!(filled.len, n);
                    check_table(&filled, &keys)?;
                    check_gets(&filled, &keys, n);
                }
                (Err(a), Err(b)) => prop_assert_eq!(a, b),
                (a, b) => prop_assert!(false, "insert: {:?}, rebuild: {:?}", a, b),
            }
        }

        /// The public operations only produce in-order layouts, where deleting the last
        /// validator moves nothing; this lays validators out in a random insertion order so
        /// the backward shift has entries to move.
        #[test]
        fn backward_shift_handles_any_layout(
            hash_keys in any::<[u64; 4]>(),
            keys in vec(any::<[u8; 48]>(), 1..80),
            shuffle_seed in any::<u64>(),
            cut in any::<u32>(),
            first_missing in any::<u32>(),
        ) {
            let n = keys.len() as u32;
            let mut index = fixed_index(hash_keys);
            index.slots = alloc_slots(slots_for(u64::from(n)).unwrap()).unwrap();
            let mut order: Vec<u32> = (0..n).collect();
            order.shuffle(&mut StdRng::seed_from_u64(shuffle_seed));
            for &v in &order {
                let slot = index.vacant_slot(&keys[v as usize]).unwrap();
                index.slots.set(slot, v + 1);
            }
            index.len = n;
            check_table(&index, &keys)?;
            let key_at = |i: u32| keys.get(i as usize);

            // At most half removed, so the backward-shift path runs.
            let new_len = n - cut % (n / 2 + 1);

            // A missing survivor pubkey may stop it; the contents then stay the same.
            let missing = first_missing % n;
            let partial = |i: u32| if i == missing { None } else { keys.get(i as usize) };
            let mut failing = index.clone();
            match failing.truncate(new_len, partial) {
                Ok(()) => prop_assert_eq!(failing.len(), new_len),
                Err(e) => {
                    prop_assert_eq!(e, IndexError::MissingKey { index: missing });
                    check_table(&failing, &keys)?;
                    check_gets(&failing, &keys, n);
                }
            }

            index.truncate(new_len, key_at).unwrap();
            check_table(&index, &keys)?;
            check_gets(&index, &keys, new_len);
            for v in new_len..n {
                index.insert(&keys[v as usize], v, key_at).unwrap();
            }
            check_table(&index, &keys)?;
            check_gets(&index, &keys, n);
        }
    }

    /// Run with `cargo test --release -- --ignored --nocapture`.
    #[test]
    #[ignore = "timing; run in release"]
    fn timing_two_million_pubkeys() {
        const N: usize = 2_000_000;
        let mut rng = StdRng::seed_from_u64(7);
        let mut random_keys = |n: usize| -> Vec<Pubkey> {
            (0..n)
                .map(|_| {
                    let mut k = [0u8; 48];
                    rng.fill(&mut k[..]);
                    k
                })
                .collect()
        };
        let keys = random_keys(N);
        let misses = random_keys(N);
        let key_at = |i: u32| keys.get(i as usize);

        let t = Instant::now();
        let index = PubkeyIndex::from_keys(&keys).unwrap();
        println!("from_keys({N}): {:?}", t.elapsed());

        let t = Instant::now();
        let mut grown = PubkeyIndex::new();
        for (i, k) in keys.iter().enumerate() {
            grown.insert(k, i as u32, key_at).unwrap();
        }
        println!("insert x {N} from empty (with growth): {:?}", t.elapsed());

        let mut order: Vec<u32> = (0..N as u32).collect();
        order.shuffle(&mut StdRng::seed_from_u64(8));
        // Baseline: fetching the query key at random and hashing it, without the table.
        let t = Instant::now();
        let mut sink = 0u64;
        for &i in &order {
            sink ^= index.hasher.hash(&keys[i as usize]);
        }
        let base_ns = t.elapsed().as_nanos() as f64 / N as f64;
        println!(
            "baseline (random key fetch + keyed hash, no table): {base_ns:.1} ns ({})",
            sink & 1
        );

        let t = Instant::now();
        let mut found = 0u64;
        for &i in &order {
            found += u64::from(index.get(&keys[i as usize], key_at) == Some(i));
        }
        let hit_ns = t.elapsed().as_nanos() as f64 / N as f64;
        assert_eq!(found, N as u64);

        let t = Instant::now();
        let mut missed = 0u64;
        for k in &misses {
            missed += u64::from(index.get(k, key_at).is_none());
        }
        let miss_ns = t.elapsed().as_nanos() as f64 / N as f64;
        assert_eq!(missed, N as u64);

        println!("hit lookup (random order): {hit_ns:.1} ns; miss lookup: {miss_ns:.1} ns");
        println!(
            "memory: {} bytes = {:.2} bytes/validator ({} slots, load {:.2}); grown incrementally: {:.2}",
            index.heap_bytes(),
            bytes_per_validator(&index),
            index.slot_count(),
            N as f64 / index.slot_count() as f64,
            bytes_per_validator(&grown),
        );
    }
}
