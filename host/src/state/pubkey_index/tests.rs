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
        let mut builder = IndexBuilder::with_hasher(fixed_index(hash_keys).hasher);
        let built = builder.reserve(n).and_then(|()| builder.extend_to(n, key_at));
        prop_assert_eq!(
            PubkeyIndex::rebuild(n, key_at).map(|_| ()),
            built.clone(),
            "rebuild fails as the builder does, whatever its hash keys"
        );
        match (expected, built) {
            (Ok(()), Ok(())) => {
                let filled = builder.finish();
                prop_assert!(filled.slots == inserted.slots);
                prop_assert_eq!(filled.len, n);
                check_table(&filled, &keys)?;
                check_gets(&filled, &keys, n);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "insert: {:?}, rebuild: {:?}", a, b),
        }
    }

    /// Built in pieces, growing as it goes (sized ahead or not), the builder's index is the
    /// table inserting `0..n` one by one into a table of its final size makes, and a duplicate
    /// fails in the piece that holds it, naming the validator inserting found.
    #[test]
    fn building_in_pieces_is_inserting_in_order(
        hash_keys in any::<[u64; 4]>(),
        picks in prop_oneof![vec(0u64..60, 1..200), vec(0u64..1_000_000, 1..200)],
        cuts in vec(0usize..200, 0..8),
        ahead in 0u32..400,
    ) {
        let keys: Vec<Pubkey> = picks.iter().map(|&p| key(p)).collect();
        let n = keys.len() as u32;
        let key_at = |i: u32| keys.get(i as usize);
        let mut ends: Vec<u32> = cuts.iter().map(|&c| (c as u32).min(n)).collect();
        ends.push(n);
        ends.sort_unstable();
        let mut builder = IndexBuilder::with_hasher(fixed_index(hash_keys).hasher);
        let mut built = Ok(());
        for &end in &ends {
            built = builder
                .reserve(end.saturating_add(ahead).min(n))
                .and_then(|()| builder.extend_to(end, key_at));
            if built.is_err() {
                break;
            }
            prop_assert_eq!(builder.len(), end);
        }
        let mut inserted = fixed_index(hash_keys);
        inserted.slots = alloc_slots(builder.table_len().max(16)).unwrap();
        let mut expected = Ok(());
        for (i, k) in keys.iter().enumerate() {
            if let Err(e) = inserted.insert(k, i as u32, key_at) {
                expected = Err(e);
                break;
            }
        }
        match (expected, built) {
            (Ok(()), Ok(())) => {
                let filled = builder.finish();
                prop_assert!(filled.slots == inserted.slots);
                check_table(&filled, &keys)?;
                check_gets(&filled, &keys, n);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "insert: {:?}, builder: {:?}", a, b),
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

    // As a restore builds it: 256 validators at a time, sized up to 8× ahead of them.
    let t = Instant::now();
    let mut builder = IndexBuilder::new();
    for end in (256..N as u32).step_by(256).chain([N as u32]) {
        builder.reserve((end * 8).min(N as u32)).unwrap();
        builder.extend_to(end, key_at).unwrap();
    }
    let built = builder.finish();
    println!("built 256 at a time, 8x ahead ({N}): {:?}", t.elapsed());
    assert_eq!(built.len(), N as u32);

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
