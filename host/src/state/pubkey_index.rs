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
//! **Dense indices.** The registry is append-only and every validator is inserted, so the index
//! holds exactly `0..len()`. [`PubkeyIndex::insert`] enforces `index == len()`, and growth
//! rehashes by asking `key_at` for each of `0..len()`.

// Consensus code: no panics, no unchecked indexing or arithmetic. Tests opt out below.
#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::fmt;

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
    slots: Vec<u32>,
    /// Number of occupied slots, which are exactly validators `0..len`.
    len: u32,
    /// Per-index SipHash keys.
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
fn alloc_slots(slots: usize) -> Result<Vec<u32>, IndexError> {
    let mut table = Vec::new();
    table
        .try_reserve_exact(slots)
        .map_err(|_| IndexError::AllocationFailed { slots })?;
    table.resize(slots, EMPTY);
    Ok(table)
}

impl PubkeyIndex {
    /// An empty index; allocates nothing until the first insert.
    pub fn new() -> Self {
        Self {
            slots: Vec::new(),
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
    pub fn rebuild<'k>(
        count: u32,
        key_at: impl Fn(u32) -> Option<&'k Pubkey>,
    ) -> Result<Self, IndexError> {
        let mut index = Self::with_capacity(count)?;
        for validator in 0..count {
            let key = key_at(validator).ok_or(IndexError::MissingKey { index: validator })?;
            index.insert(key, validator, &key_at)?;
        }
        Ok(index)
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

    /// Exact heap memory of the table: allocated slots × 4 bytes.
    pub fn heap_bytes(&self) -> usize {
        self.slots
            .capacity()
            .saturating_mul(std::mem::size_of::<u32>())
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
        let cell = self
            .slots
            .get_mut(slot)
            .ok_or(IndexError::Internal("vacant slot outside the table"))?;
        // `new_len == index + 1`, the slot encoding of `index`.
        *cell = new_len;
        self.len = new_len;
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
        let mut grown = Self {
            slots: alloc_slots(slots)?,
            len: 0,
            hasher: self.hasher,
        };
        for validator in 0..self.len {
            let key = key_at(validator).ok_or(IndexError::MissingKey { index: validator })?;
            let slot = grown.vacant_slot(key)?;
            let value = validator
                .checked_add(1)
                .ok_or(IndexError::Internal("validator below len is u32::MAX"))?;
            let cell = grown
                .slots
                .get_mut(slot)
                .ok_or(IndexError::Internal("vacant slot outside the table"))?;
            *cell = value;
        }
        grown.len = self.len;
        *self = grown;
        Ok(())
    }
}

#[cfg(test)]
#[allow(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
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
            assert_eq!(built.heap_bytes(), built.slot_count() * 4);
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
            // Below 4 entries the 16-slot minimum table (64 bytes) dominates.
            if i + 1 >= 4 {
                assert!(bytes <= 16.0, "after {} inserts: {bytes}", i + 1);
            }
            if reg.index.slot_count() != slots && slots != 0 {
                growths += 1;
                assert!(
                    bytes <= 11.5,
                    "just after growth to {}: {bytes}",
                    reg.index.slot_count()
                );
            }
        }
        assert_eq!(growths, 14);
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
    }

    fn op() -> impl Strategy<Value = Op> {
        let pick = prop_oneof![(0usize..24).prop_map(Ok), any::<[u8; 48]>().prop_map(Err)];
        prop_oneof![
            4 => pick.clone().prop_map(Op::Insert),
            4 => pick.prop_map(Op::Get),
            1 => (any::<u32>(), any::<[u8; 48]>()).prop_map(|(i, k)| Op::InsertAt(i, k)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn matches_hashmap_model(
            pool in vec(any::<[u8; 48]>(), 24),
            ops in vec(op(), 0..200),
        ) {
            let mut reg = Registry::default();
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
                }
                prop_assert_eq!(reg.index.len() as usize, model.len());
                prop_assert!(!reg.index.over_load(reg.index.len()));
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
            "baseline (random key fetch + SipHash, no table): {base_ns:.1} ns ({})",
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
