//! checkpoint-v3: content-addressed, incremental checkpoints. Incremental creation
//! after random deposit blocks equals a full creation of the same state byte for byte and
//! builds only the chunks those blocks touched; a restorer holding checkpoint A fetches only
//! B's new chunks and ends on B's root; a carried chunk damaged on disk is detected and fetched
//! again; a manifest whose chunk roots do not lead to its registry root is refused before any
//! fetch; the creator's store keeps each chunk once and notices one missing; over QUIC a
//! node creating v3 checkpoints serves them and a fresh node restores one.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use modnode::checkpoint::{
    BlockRef, Checkpoint, CheckpointStore, CreateOptions, IncrementalCreator, Manifest,
    ManifestError, ManifestLimits, RestoreError, RestoreStore, Restorer, StateLeaves, carry_over,
    create, synthetic_state, verify_all,
};
use modnode::runtime::checkpoint::StateReader as _;
use modnode::state::merkle::Hash32;
use modnode::state::{NewValidator, RegistryDelta, State};
use proptest::prelude::*;
use sha2::{Digest, Sha256};

use super::checkpoint::{module, v3_leaves_per_chunk};

fn options() -> CreateOptions {
    CreateOptions {
        target_chunk_bytes: 1 << 20,
        threads: 2,
        background: false,
    }
}

fn at(height: u64) -> BlockRef {
    BlockRef {
        height,
        hash: modnode::hashes::BlockHash([height as u8; 32]),
    }
}

/// One deposit-carrying block: top-ups of existing validators (positions as fractions of the
/// registry) and new validators.
#[derive(Debug, Clone)]
struct Block {
    top_ups: Vec<(u16, u64)>,
    added: u8,
}

fn block() -> impl Strategy<Value = Block> {
    (
        proptest::collection::vec((any::<u16>(), 1u64..1_000_000), 0..4),
        0u8..4,
    )
        .prop_map(|(top_ups, added)| Block { top_ups, added })
}

/// `state` after `block`, and the checkpoint-v3 chunks whose leaves the block changed.
fn apply(state: &State, block: &Block, salt: u64) -> (State, BTreeSet<usize>) {
    let per_chunk = v3_leaves_per_chunk() as usize;
    let mut registry = state.registry().clone();
    let len = registry.len() as usize;
    let mut touched = BTreeSet::new();
    let mut balances: Vec<(u32, u64)> = block
        .top_ups
        .iter()
        .map(|&(at, amount)| {
            let index = (at as usize * len) >> 16;
            let old = *registry.balances().get(index).unwrap();
            (index as u32, old + amount)
        })
        .collect();
    balances.sort_by_key(|(i, _)| *i);
    balances.dedup_by_key(|(i, _)| *i);
    touched.extend(balances.iter().map(|(i, _)| *i as usize / per_chunk));
    let added: Vec<NewValidator> = (0..block.added as u64)
        .map(|k| {
            let key: [u8; 32] = Sha256::new()
                .chain_update(salt.to_le_bytes())
                .chain_update(k.to_le_bytes())
                .finalize()
                .into();
            let mut pubkey = [0u8; 48];
            pubkey[..32].copy_from_slice(&key);
            NewValidator {
                pubkey,
                withdrawal_credentials: [1; 32],
                effective_balance: 32_000_000_000,
                balance: 32_000_000_000,
            }
        })
        .collect();
    touched.extend((len..len + added.len()).map(|i| i / per_chunk));
    registry.apply(&RegistryDelta { added, balances }).unwrap();
    let next = State::new(
        modnode::hashes::BlockHash::new([salt as u8; 32]),
        state.height() + 1,
        registry,
        state.eth1().clone(),
        state.schedule().clone(),
    );
    (next, touched)
}

/// Every chunk of `full`, found by hash among the chunks incremental creations built.
fn assemble(full: &Checkpoint, built: &HashMap<Hash32, Vec<u8>>) -> Vec<Vec<u8>> {
    full.manifest
        .chunks
        .iter()
        .map(|entry| built.get(&entry.hash).cloned().unwrap_or_default())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, failure_persistence: None, ..ProptestConfig::default() })]

    /// After any sequence of blocks, the incremental checkpoint's manifest is the full
    /// creation's, every chunk it lists is byte for byte the full creation's, and it built
    /// exactly the chunks the blocks since the previous checkpoint touched.
    #[test]
    fn incremental_creation_equals_full_creation_byte_for_byte(
        validators in 1u32..4200,
        seed in any::<u64>(),
        blocks in proptest::collection::vec(block(), 1..7),
        every in 1usize..4,
    ) {
        let m = module("checkpoint-v3");
        let mut state = synthetic_state(validators, seed).unwrap();
        let mut creator = IncrementalCreator::new();
        let mut built: HashMap<Hash32, Vec<u8>> = HashMap::new();
        let first = creator.create(&m, Arc::new(state.clone()), at(0), options()).unwrap();
        prop_assert_eq!(first.reused, 0);
        prop_assert_eq!(first.built.len(), first.manifest.chunks.len());
        for (index, bytes) in first.built {
            built.insert(first.manifest.chunks[index].hash, bytes);
        }
        let mut touched = BTreeSet::new();
        for (n, b) in blocks.iter().enumerate() {
            let (next, wrote) = apply(&state, b, seed ^ n as u64);
            state = next;
            touched.extend(wrote);
            if n % every != every - 1 && n != blocks.len() - 1 {
                continue;
            }
            let height = n as u64 + 1;
            let shared = Arc::new(state.clone());
            let made = creator.create(&m, shared.clone(), at(height), options()).unwrap();
            let full = create(&m, shared, at(height), options()).unwrap();
            prop_assert_eq!(&made.manifest, &full.manifest);
            prop_assert_eq!(made.manifest.encode(), full.manifest.encode());
            let rebuilt: BTreeSet<usize> = made.built.iter().map(|(i, _)| *i).collect();
            prop_assert_eq!(&rebuilt, &touched, "built chunks are not the touched ones");
            prop_assert_eq!(made.reused + made.built.len(), full.chunks.len());
            for (index, bytes) in made.built {
                prop_assert_eq!(&bytes, &full.chunks[index]);
                built.insert(made.manifest.chunks[index].hash, bytes);
            }
            prop_assert_eq!(assemble(&full, &built), full.chunks.clone());
            touched.clear();
        }
    }
}

/// A checkpoint of a 10,000-validator state A and, two deposit blocks later touching 3 of its
/// chunks, B (created incrementally).
fn a_and_b() -> (Checkpoint, Checkpoint, BTreeSet<usize>) {
    let m = module("checkpoint-v3");
    let a_state = synthetic_state(10_000, 3).unwrap();
    let mut creator = IncrementalCreator::new();
    let a_made = creator
        .create(&m, Arc::new(a_state.clone()), at(10), options())
        .unwrap();
    let mut state = a_state.clone();
    for (n, block) in [
        Block {
            top_ups: vec![(20_000, 5)],
            added: 0,
        },
        Block {
            top_ups: vec![(40_000, 7)],
            added: 2,
        },
    ]
    .iter()
    .enumerate()
    {
        state = apply(&state, block, 77 + n as u64).0;
    }
    let b_made = creator
        .create(&m, Arc::new(state.clone()), at(12), options())
        .unwrap();
    let built: BTreeSet<usize> = b_made.built.iter().map(|(i, _)| *i).collect();
    assert_eq!(b_made.reused, b_made.manifest.chunks.len() - built.len());
    let a = create(&m, Arc::new(a_state), at(10), options()).unwrap();
    assert_eq!(a.manifest, a_made.manifest);
    let b = create(&m, Arc::new(state), at(12), options()).unwrap();
    assert_eq!(b.manifest, b_made.manifest);
    (a, b, built)
}

/// Restores all of `cp` into a progress store in `dir`.
fn restore_into(dir: &std::path::Path, cp: &Checkpoint) -> RestoreStore {
    let m = module("checkpoint-v3");
    let store = RestoreStore::open(dir).unwrap();
    let mut r = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
    store.begin(r.manifest()).unwrap();
    let all: Vec<(usize, Vec<u8>)> = cp.chunks.iter().cloned().enumerate().collect();
    verify_all(&mut r, &m, &all, 2, Some(&store)).unwrap();
    assert_eq!(r.finish().unwrap().state_root, cp.manifest.state_root);
    store
}

/// Switches `store`'s restore to `b`, carrying what verifies, then fetches what is missing
/// from `b`'s chunks; returns the indices fetched.
fn switch_and_finish(store: &RestoreStore, b: &Checkpoint) -> Vec<usize> {
    let m = module("checkpoint-v3");
    let mut r = Restorer::new(b.manifest.clone(), &ManifestLimits::default()).unwrap();
    let carried = carry_over(&mut r, &m, store.chunks().unwrap(), 2).unwrap();
    assert!(carried.refused.is_none(), "{:?}", carried.refused);
    let fetched = r.missing();
    let fetch: Vec<(usize, Vec<u8>)> = fetched.iter().map(|&i| (i, b.chunks[i].clone())).collect();
    verify_all(&mut r, &m, &fetch, 2, None).unwrap();
    let restored = r.finish().unwrap();
    assert_eq!(restored.state_root, b.manifest.state_root);
    fetched
}

#[test]
fn a_restorer_holding_a_fetches_only_bs_new_chunks_and_ends_on_bs_root() {
    let (a, b, built) = a_and_b();
    assert_ne!(a.manifest.registry_root, b.manifest.registry_root);
    let dir = tempfile::tempdir().unwrap();
    let store = restore_into(dir.path(), &a);
    let fetched = switch_and_finish(&store, &b);
    let a_hashes: BTreeSet<Hash32> = a.manifest.chunks.iter().map(|c| c.hash).collect();
    let new: Vec<usize> = (0..b.chunks.len())
        .filter(|&i| !a_hashes.contains(&b.manifest.chunks[i].hash))
        .collect();
    assert_eq!(fetched, new);
    assert_eq!(fetched, built.into_iter().collect::<Vec<_>>());
    let chunks = 10_000usize.div_ceil(v3_leaves_per_chunk() as usize);
    assert_eq!((fetched.len(), b.chunks.len()), (3, chunks));
}

#[test]
fn a_reused_chunk_damaged_on_disk_is_detected_and_fetched_again() {
    let (a, b, built) = a_and_b();
    let dir = tempfile::tempdir().unwrap();
    let store = restore_into(dir.path(), &a);
    drop(store);
    // Damage chunk 0's bytes in the chunk log: B lists it unchanged, by the same hash.
    assert!(!built.contains(&0));
    assert_eq!(a.manifest.chunks[0].hash, b.manifest.chunks[0].hash);
    let log = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .expect("a chunk log");
    let mut bytes = std::fs::read(&log).unwrap();
    let at = bytes
        .windows(a.chunks[0].len())
        .position(|w| w == a.chunks[0].as_slice())
        .expect("chunk 0 in the log");
    bytes[at + a.chunks[0].len() / 2] ^= 0x40;
    std::fs::write(&log, bytes).unwrap();

    let store = RestoreStore::open(dir.path()).unwrap();
    let fetched = switch_and_finish(&store, &b);
    assert_eq!(fetched[0], 0, "the damaged chunk is fetched again");
    let expected: Vec<usize> = std::iter::once(0).chain(built).collect();
    assert_eq!(fetched, expected);
}

#[test]
fn v3_restores_in_any_order_and_bad_chunk_roots_are_refused_before_any_fetch() {
    let m = module("checkpoint-v3");
    // Three chunks, the last one partial.
    let s = Arc::new(synthetic_state(3 * v3_leaves_per_chunk() - 50, 4).unwrap());
    let cp = create(&m, s.clone(), at(5), options()).unwrap();
    assert_eq!(cp.chunks.len(), 3);
    assert_eq!(cp.manifest.chunk_roots.len(), 3);
    let v2_bytes: u64 = create(&module("checkpoint-v2"), s.clone(), at(5), options())
        .unwrap()
        .manifest
        .total_bytes();
    assert!(
        cp.manifest.total_bytes() < v2_bytes,
        "v3 {} bytes, v2 {v2_bytes}",
        cp.manifest.total_bytes()
    );
    let limits = ManifestLimits::default();
    let decoded = Manifest::decode(&cp.manifest.encode(), &limits).unwrap();
    assert_eq!(decoded, cp.manifest);
    let mut r = Restorer::new(decoded, &limits).unwrap();
    for i in [2, 0, 1] {
        let chunk = r.verify(&m, i, &cp.chunks[i]).unwrap();
        r.insert(chunk).unwrap();
    }
    let restored = r.finish().unwrap();
    assert_eq!(*restored.state_root.as_bytes(), s.state_root());
    assert_eq!(&restored.registry, s.registry());

    let mut bad = cp.manifest.clone();
    bad.chunk_roots[1][0] ^= 1;
    assert!(matches!(
        Manifest::decode(&bad.encode(), &limits),
        Err(ManifestError::ChunkRoots(_))
    ));
    let mut unaligned = cp.manifest.clone();
    unaligned.chunks[0].end -= 1;
    unaligned.chunks[1].start -= 1;
    assert!(matches!(
        unaligned.validate(&limits),
        Err(ManifestError::ChunkRoots(_))
    ));
}

/// A chunk is held to its own listed subtree root: a manifest whose roots lead to its registry
/// root but which names, for one chunk, the bytes of another state's chunk at the same place
/// (a well-formed chunk with the right range) gets that chunk refused as a proof mismatch,
/// every other chunk verifies, and the chunks at the tree's right edge (a partial last chunk)
/// verify against roots padded as the tree pads.
#[test]
fn a_chunk_whose_leaves_do_not_lead_to_its_listed_root_is_refused() {
    let (a, b, built) = a_and_b();
    let changed = *built.iter().next().unwrap();
    assert_ne!(a.chunks[changed], b.chunks[changed]);
    let mut lying = b.manifest.clone();
    lying.chunks[changed].hash = Sha256::digest(&a.chunks[changed]).into();
    lying.chunks[changed].size = a.chunks[changed].len() as u32;
    let m = module("checkpoint-v3");
    let r = Restorer::new(lying, &ManifestLimits::default()).unwrap();
    let err = r.verify(&m, changed, &a.chunks[changed]).unwrap_err();
    assert!(
        matches!(
            err,
            RestoreError::Proof {
                index,
                source: modnode::state::merkle::MerkleError::RootMismatch
            } if index == changed
        ),
        "{err}"
    );
    for i in (0..b.chunks.len()).rev().filter(|&i| i != changed) {
        r.verify(&m, i, &b.chunks[i]).unwrap();
    }
}

/// The restorer builds the registry from the verified prefix of its chunks as they arrive:
/// chunks verified ahead of it wait, and a chunk already taken into the registry still counts
/// as verified (never fetched or inserted again).
#[test]
fn chunks_verified_ahead_of_the_prefix_wait_and_taken_chunks_stay_verified() {
    let m = module("checkpoint-v3");
    let s = Arc::new(synthetic_state(5 * v3_leaves_per_chunk() - 7, 9).unwrap());
    let cp = create(&m, s.clone(), at(5), options()).unwrap();
    assert_eq!(cp.chunks.len(), 5);
    let mut r = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
    let mut inserted = Vec::new();
    for i in [3, 1, 4, 0, 2] {
        let chunk = r.verify(&m, i, &cp.chunks[i]).unwrap();
        r.insert(chunk).unwrap();
        inserted.push(i);
        let missing: Vec<usize> = (0..5).filter(|c| !inserted.contains(c)).collect();
        assert_eq!(r.missing(), missing, "after inserting {inserted:?}");
        assert_eq!(r.progress().chunks, inserted.len());
        for &done in &inserted {
            assert!(r.has(done), "chunk {done} after {inserted:?}");
            // Taken into the registry (0 and 1 once 0 came) or waiting: a duplicate either way.
            assert!(
                matches!(
                    r.verify(&m, done, &cp.chunks[done]),
                    Err(RestoreError::DuplicateRange { index, .. }) if index == done
                ),
                "chunk {done} verified again after {inserted:?}"
            );
        }
    }
    let again = r
        .verifier()
        .verify(&m, 0, &cp.chunks[0])
        .expect("chunk 0 is still a good chunk");
    assert!(matches!(
        r.insert(again),
        Err(RestoreError::DuplicateRange { index: 0, .. })
    ));
    let restored = r.finish().unwrap();
    assert_eq!(*restored.state_root.as_bytes(), s.state_root());
    assert_eq!(&restored.registry, s.registry());
    // The pubkey index and the sum of effective balances, built as the chunks were taken
    // (the index grown on the way), are the registry's.
    use modnode::state::RegistryRead as _;
    for (i, v) in s.registry().validators().iter().enumerate() {
        assert_eq!(
            restored.registry.index_of(&v.pubkey),
            Some(i as u32),
            "validator {i}"
        );
    }
    assert_eq!(restored.registry.index_of(&[0xEE; 48]), None);
    assert_eq!(
        restored.registry.total_effective_balance(),
        s.registry().total_effective_balance()
    );
    assert!(restored.registry.total_effective_balance() > 0);
}

#[test]
fn the_creators_store_keeps_each_chunk_once_and_notices_one_missing() {
    let (a, b, built) = a_and_b();
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(dir.path()).unwrap();
    let all_of_a = a.chunks.iter().enumerate().map(|(i, c)| (i, c.as_slice()));
    store.put_listed(&a.manifest, all_of_a, 2).unwrap();
    // B stored with only its new chunks: the rest are A's, by hash.
    let only_new = built.iter().map(|&i| (i, b.chunks[i].as_slice()));
    store.put_listed(&b.manifest, only_new, 2).unwrap();
    let id = b.manifest.id();
    for (i, chunk) in b.chunks.iter().enumerate() {
        assert_eq!(
            store.chunk(&id, i).unwrap().as_ref(),
            Some(chunk),
            "chunk {i}"
        );
    }
    // A third checkpoint listing a chunk nobody stored is refused, nothing recorded.
    let mut c = b.manifest.clone();
    c.height += 1;
    c.chunks[0].hash = [9; 32];
    let err = store.put_listed(&c, std::iter::empty(), 2).unwrap_err();
    assert!(err.to_string().contains("chunk 0"), "{err}");
    assert_eq!(store.list().unwrap().len(), 2);
    // Pruning A keeps the chunks B still lists, and drops those only A listed.
    let mut d = b.clone();
    d.manifest.height += 5;
    store
        .put_listed(&d.manifest, std::iter::empty(), 2)
        .unwrap();
    assert_eq!(store.list().unwrap().len(), 2);
    for (i, chunk) in b.chunks.iter().enumerate() {
        assert_eq!(
            store.chunk(&id, i).unwrap().as_ref(),
            Some(chunk),
            "chunk {i}"
        );
    }
    assert_eq!(store.chunk(&a.manifest.id(), 0).unwrap(), None);
    let only_a = built.iter().next().copied().unwrap();
    let mut e = d.manifest.clone();
    e.height += 1;
    e.chunks[only_a].hash = a.manifest.chunks[only_a].hash;
    assert!(
        store.put_listed(&e, std::iter::empty(), 2).is_err(),
        "a chunk only the pruned checkpoint listed is gone"
    );
}

/// Over QUIC: a node creating v3 checkpoints (twice: the second reuses the first's chunks)
/// serves them, and a fresh node restores the newest and follows the chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_node_restores_a_v3_checkpoint_and_follows_the_chain() {
    use super::checkpoint_sync::{
        FINALITY, checkpoint_now, follows, height_at_least, node, test_genesis,
    };
    use super::network::dirs;
    use modnode::node::SyncMode;

    let d = dirs(2);
    let (genesis, _) = test_genesis("ckpt-sync-v3", d[0].path());
    let a = node(d[0].path(), &genesis, Vec::new(), 3, SyncMode::Full).await;
    height_at_least(&a, 3).await;
    let first = checkpoint_now(d[0].path(), &a).await;
    // A later finalized height: the head one past where it made `first` final.
    height_at_least(&a, first.manifest.height + FINALITY + 1).await;
    let cp = checkpoint_now(d[0].path(), &a).await;
    assert_eq!(cp.manifest.module_version, 3);
    assert_eq!(cp.manifest.chunk_roots.len(), cp.chunks.len());
    assert!(cp.manifest.height > first.manifest.height);

    let restored = node(
        d[1].path(),
        &genesis,
        vec![a.peer_addr().unwrap()],
        1,
        SyncMode::Checkpoint,
    )
    .await;
    let status = restored.status().checkpoint_restore;
    assert!(status.done, "{status:?}");
    assert!(status.height >= cp.manifest.height, "{status:?}");
    assert_eq!(status.chunks_verified, status.chunks_total);
    follows(&restored, &a, status.height).await;
    restored.shutdown().await;
    a.shutdown().await;
}

#[test]
fn a_registry_holding_a_pubkey_twice_fails_the_restore_naming_the_duplicate() {
    // No chain holds such a state (deposits never register a pubkey twice); it is built here
    // around the registry's own checks, with an index over other keys. The restore proves its
    // leaves against its root and must refuse it as a registry — when the chunk holding the
    // second copy is taken, and again at `finish` — not report an assembly that stopped.
    use modnode::state::chunked::ChunkedVec;
    use modnode::state::merkle::MerkleTree;
    use modnode::state::pubkey_index::IndexError;
    use modnode::state::pubkey_index::PubkeyIndex;
    use modnode::state::{Registry, StateError};

    let m = module("checkpoint-v3");
    let per_chunk = v3_leaves_per_chunk();
    let s = synthetic_state(3 * per_chunk, 9).unwrap();
    let mut validators: Vec<_> = s.registry().validators().iter().cloned().collect();
    let balances: Vec<u64> = s.registry().balances().iter().copied().collect();
    let second = per_chunk as usize + 10;
    validators[second].pubkey = validators[5].pubkey;
    let leaves: Vec<Hash32> = validators
        .iter()
        .zip(&balances)
        .map(|(v, b)| v.leaf_hash(*b))
        .collect();
    let other_keys: Vec<[u8; 48]> = (0..validators.len() as u64)
        .map(|i| {
            let mut k = [7u8; 48];
            k[..8].copy_from_slice(&i.to_le_bytes());
            k
        })
        .collect();
    let total = validators.iter().map(|v| v.effective_balance).sum();
    let registry = Registry::from_assembled(
        ChunkedVec::from(validators.as_slice()),
        ChunkedVec::from(balances.as_slice()),
        PubkeyIndex::from_keys(&other_keys).unwrap(),
        MerkleTree::from_leaves(leaves),
        total,
    )
    .unwrap();
    let state = State::new(
        modnode::hashes::BlockHash([3; 32]),
        s.height(),
        registry,
        s.eth1().clone(),
        s.schedule().clone(),
    );
    let cp = create(&m, Arc::new(state), at(5), options()).unwrap();
    assert_eq!(cp.chunks.len(), 3);
    let duplicate = |e: &RestoreError| {
        matches!(
            e,
            RestoreError::Registry(StateError::Index(IndexError::Duplicate { existing: 5 }))
        )
    };
    let mut r = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
    let mut refused = Vec::new();
    for i in 0..cp.chunks.len() {
        let chunk = r
            .verify(&m, i, &cp.chunks[i])
            .expect("every leaf is proven");
        if let Err(e) = r.insert(chunk) {
            assert!(duplicate(&e), "chunk {i}: {e}");
            refused.push(i);
        }
    }
    // The chunk holding the second copy is refused; the one after it is held, never taken.
    assert_eq!(refused, vec![1]);
    let e = r.finish().unwrap_err();
    assert!(duplicate(&e), "{e}");
    assert!(e.to_string().contains("validator 5"), "{e}");
    // Proven leaves that cannot form a registry are the manifest's fault (its offerers are
    // blamed); the index's own invariant failing while it is built is ours.
    use modnode::checkpoint::Fault;
    assert_eq!(e.fault(), Fault::Manifest);
    let bug = RestoreError::Registry(StateError::Index(IndexError::Internal("probe left")));
    assert_eq!(bug.fault(), Fault::Ours, "{bug}");
}

/// The wasm module's chunks are exactly what the `checkpoint-v3` crate's format, built
/// natively, makes of the same leaves: the module transposes with wasm SIMD, the native build
/// runs the same blocks on byte arrays, so this holds the vector code to the reference (and
/// the native decoding gives the state's leaves back). Synthetic states whose last chunk is
/// partial (1,000 and 2,500 validators: 232 and 196 leaves, so the 16×16 blocks, the 8×8
/// strips and the single bytes all run), and one with every balance scrambled.
#[test]
fn the_modules_chunks_are_the_native_format_byte_for_byte() {
    let m = module("checkpoint-v3");
    let small = synthetic_state(1_000, 9).unwrap();
    let mut registry = small.registry().clone();
    let balances = (0..1_000u32)
        .map(|i| (i, u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 3))
        .collect();
    registry
        .apply(&RegistryDelta {
            added: Vec::new(),
            balances,
        })
        .unwrap();
    let scrambled = State::new(
        modnode::hashes::BlockHash::new([1; 32]),
        small.height() + 1,
        registry,
        small.eth1().clone(),
        small.schedule().clone(),
    );
    let states = [
        ("1,000 validators", small),
        ("2,500 validators", synthetic_state(2_500, 4).unwrap()),
        ("scrambled balances", scrambled),
    ];
    for (name, state) in states {
        let cp = create(&m, Arc::new(state.clone()), at(5), options()).unwrap();
        assert!(cp.chunks.len() >= 4, "{name}: {} chunks", cp.chunks.len());
        for (entry, bytes) in cp.manifest.chunks.iter().zip(&cp.chunks) {
            let leaves = state.read_leaf_bytes(entry.start, entry.end);
            let header = checkpoint_common::wire::Header {
                version: 3,
                start: entry.start,
                end: entry.end,
                leaf_size: cp.manifest.leaf_size,
            };
            let native = checkpoint_v3::format::encode(&header, &leaves).unwrap();
            assert!(
                native == *bytes,
                "{name}: chunk {}..{} is not the native encoding",
                entry.start,
                entry.end
            );
            assert_eq!(checkpoint_v3::format::decode(bytes).unwrap().leaves, leaves);
        }
        let dir = tempfile::tempdir().unwrap();
        restore_into(dir.path(), &cp);
    }
}
