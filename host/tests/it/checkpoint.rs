//! Checkpoints (issue 12): restore(create_vN(S)) gives S's root for v1 and v2, both versions
//! restore to the same state, v2 is byte-identical for 1, 2 and 8 threads, and each way a chunk
//! or manifest can be wrong is refused with its own error.

use std::sync::Arc;

use modnode::checkpoint::{
    BlockRef, Checkpoint, CreateOptions, Fault, Manifest, ManifestError, ManifestLimits,
    RegistrySnapshot, RestoreError, Restorer, StateLeaves, create, synthetic_state,
};
use modnode::runtime::LoadedModule;
use modnode::runtime::checkpoint::CheckpointModule;
use proptest::prelude::*;

use super::{artifact, runtime};

fn module(name: &str) -> CheckpointModule {
    match runtime(2_000_000_000).load(&artifact(name)).unwrap() {
        LoadedModule::Checkpoint(m) => m,
        _ => panic!("{name} is not a checkpoint module"),
    }
}

fn at() -> BlockRef {
    BlockRef {
        height: 100,
        hash: [7; 32],
    }
}

fn make(
    m: &CheckpointModule,
    state: &Arc<RegistrySnapshot>,
    target: u64,
    threads: usize,
) -> Checkpoint {
    let options = CreateOptions {
        target_chunk_bytes: target,
        threads,
        background: threads > 1,
    };
    create(m, state.clone(), at(), options).unwrap()
}

/// Restores `cp` delivering its chunks in `order`.
fn restore(
    m: &CheckpointModule,
    cp: &Checkpoint,
    order: impl IntoIterator<Item = usize>,
) -> Result<modnode::checkpoint::RestoredState, RestoreError> {
    let bytes = Manifest::decode(&cp.manifest.encode(), &ManifestLimits::default())?;
    assert_eq!(bytes, cp.manifest);
    let mut restorer = Restorer::new(cp.manifest.clone(), &ManifestLimits::default())?;
    for i in order {
        let chunk = restorer.verify(m, i, cp.chunks[i].clone())?;
        restorer.insert(chunk)?;
    }
    restorer.finish()
}

fn state(validators: u32, seed: u64) -> Arc<RegistrySnapshot> {
    Arc::new(synthetic_state(validators, seed).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn v1_and_v2_restore_the_state_root_in_any_order(
        validators in prop_oneof![1u32..=70, 1u32..=700],
        seed in any::<u64>(),
        target in prop_oneof![Just(0u64), 1u64..=20_000, 20_000u64..=200_000],
        rotate in any::<usize>(),
    ) {
        let s = state(validators, seed);
        let mut restored = Vec::new();
        for name in ["checkpoint-v1", "checkpoint-v2"] {
            let m = module(name);
            let cp = make(&m, &s, target, 2);
            prop_assert_eq!(cp.manifest.state_root, s.state_root());
            prop_assert_eq!(cp.manifest.leaf_count, u64::from(validators));
            let n = cp.chunks.len();
            let order: Vec<usize> = (0..n).map(|i| (i + rotate % n) % n).rev().collect();
            let r = restore(&m, &cp, order).unwrap();
            prop_assert_eq!(r.state_root, s.state_root());
            prop_assert_eq!(&r.registry, s.registry());
            prop_assert_eq!(&r.eth1, s.eth1());
            restored.push(r.registry);
        }
        prop_assert_eq!(&restored[0], &restored[1]);
    }
}

#[test]
fn v2_output_is_identical_for_1_2_and_8_threads_and_differs_from_v1() {
    let s = state(1500, 3);
    let v2 = module("checkpoint-v2");
    let one = make(&v2, &s, 16 << 10, 1);
    assert!(one.chunks.len() > 8, "{} chunks", one.chunks.len());
    for threads in [2, 8] {
        let many = make(&v2, &s, 16 << 10, threads);
        assert_eq!(many, one, "{threads} threads");
        assert_eq!(many.manifest.id(), one.manifest.id());
    }
    let v1 = make(&module("checkpoint-v1"), &s, 16 << 10, 8);
    assert_ne!(v1.manifest.id(), one.manifest.id());
    assert_eq!(v1.manifest.state_root, one.manifest.state_root);
    assert!(
        one.manifest.total_bytes() < v1.manifest.total_bytes(),
        "v2 {} bytes, v1 {} bytes",
        one.manifest.total_bytes(),
        v1.manifest.total_bytes()
    );
    assert_eq!(
        one.manifest.param("compression"),
        Some("lz4_flex-0.11-block")
    );
    assert_eq!(one.manifest.param("target-chunk-bytes"), Some("16384"));
}

/// A checkpoint of a small state with several chunks, for the rejection tests.
fn sample(name: &str) -> (CheckpointModule, Checkpoint) {
    let m = module(name);
    let cp = make(&m, &state(300, 9), 8 << 10, 2);
    assert!(cp.chunks.len() >= 4, "{} chunks", cp.chunks.len());
    (m, cp)
}

fn restorer(manifest: &Manifest) -> Restorer {
    Restorer::new(manifest.clone(), &ManifestLimits::default()).unwrap()
}

#[test]
fn a_tampered_chunk_is_the_serving_peers_fault_and_the_right_bytes_still_restore() {
    let (m, cp) = sample("checkpoint-v2");
    let mut r = restorer(&cp.manifest);
    let mut bad = cp.chunks[1].clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let err = r.verify(&m, 1, bad).unwrap_err();
    assert!(
        matches!(err, RestoreError::Tampered { index: 1, .. }),
        "{err}"
    );
    assert_eq!(err.fault(), Fault::ChunkPeer);
    let short = cp.chunks[1][1..].to_vec();
    let err = r.verify(&m, 1, short).unwrap_err();
    assert!(
        matches!(err, RestoreError::WrongSize { index: 1, .. }),
        "{err}"
    );
    for i in 0..cp.chunks.len() {
        let chunk = r.verify(&m, i, cp.chunks[i].clone()).unwrap();
        r.insert(chunk).unwrap();
    }
    assert!(r.finish().is_ok());
}

#[test]
fn a_chunk_whose_leaves_do_not_prove_is_the_manifests_fault() {
    // The manifest producer lists a chunk it altered (hash recomputed): the proof catches it.
    let (m, mut cp) = sample("checkpoint-v1");
    let leaf_byte = 4 + 4 + 8 + 8 + 4 + 10;
    cp.chunks[2][leaf_byte] ^= 0x40;
    cp.manifest.chunks[2].hash = sha(&cp.chunks[2]);
    let r = restorer(&cp.manifest);
    let err = r.verify(&m, 2, cp.chunks[2].clone()).unwrap_err();
    assert!(matches!(err, RestoreError::Proof { index: 2, .. }), "{err}");
    assert_eq!(err.fault(), Fault::Manifest);
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

#[test]
fn a_chunk_listed_under_another_range_is_a_wrong_range() {
    let (m, mut cp) = sample("checkpoint-v2");
    let (a, b) = (cp.manifest.chunks[0], cp.manifest.chunks[1]);
    cp.manifest.chunks[0].hash = b.hash;
    cp.manifest.chunks[0].size = b.size;
    cp.manifest.chunks[1].hash = a.hash;
    cp.manifest.chunks[1].size = a.size;
    let r = restorer(&cp.manifest);
    let err = r.verify(&m, 0, cp.chunks[1].clone()).unwrap_err();
    assert!(
        matches!(err, RestoreError::WrongRange { index: 0, start: 0, found_start, .. } if found_start == a.end),
        "{err}"
    );
    assert_eq!(err.fault(), Fault::Manifest);
}

#[test]
fn a_duplicated_range_is_refused_in_a_manifest_and_on_arrival() {
    let (m, cp) = sample("checkpoint-v2");
    let mut r = restorer(&cp.manifest);
    let first = r.verify(&m, 0, cp.chunks[0].clone()).unwrap();
    r.insert(first.clone()).unwrap();
    let err = r.insert(first).unwrap_err();
    assert!(
        matches!(err, RestoreError::DuplicateRange { index: 0, .. }),
        "{err}"
    );
    let err = r.verify(&m, 0, cp.chunks[0].clone()).unwrap_err();
    assert!(
        matches!(err, RestoreError::DuplicateRange { index: 0, .. }),
        "{err}"
    );

    let mut overlapping = cp.manifest.clone();
    let repeated = overlapping.chunks[1];
    overlapping.chunks.insert(2, repeated);
    assert!(matches!(
        overlapping.validate(&ManifestLimits::default()),
        Err(ManifestError::Overlap { index: 2, .. })
    ));
    assert!(matches!(
        Manifest::decode(&overlapping.encode(), &ManifestLimits::default()),
        Err(ManifestError::Overlap { index: 2, .. })
    ));
}

#[test]
fn finishing_with_a_missing_chunk_names_it() {
    let (m, cp) = sample("checkpoint-v1");
    let mut r = restorer(&cp.manifest);
    for i in (0..cp.chunks.len()).filter(|&i| i != 2) {
        let chunk = r.verify(&m, i, cp.chunks[i].clone()).unwrap();
        r.insert(chunk).unwrap();
    }
    assert_eq!(r.missing(), vec![2]);
    let err = r.finish().unwrap_err();
    assert!(
        matches!(
            err,
            RestoreError::MissingChunks {
                missing: 1,
                first: 2,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_manifest_whose_ranges_leave_a_gap_is_refused_before_any_fetch() {
    let (_, cp) = sample("checkpoint-v1");
    let limits = ManifestLimits::default();
    let mut gapped = cp.manifest.clone();
    let removed = gapped.chunks.remove(1);
    let err = Manifest::decode(&gapped.encode(), &limits).unwrap_err();
    assert_eq!(
        err,
        ManifestError::Gap {
            index: 1,
            from: removed.start,
            to: removed.end
        }
    );
    assert!(matches!(
        Restorer::new(gapped, &limits),
        Err(RestoreError::Manifest(ManifestError::Gap { .. }))
    ));
    let mut short = cp.manifest.clone();
    short.chunks.pop();
    assert!(matches!(
        short.validate(&limits),
        Err(ManifestError::Gap { to, .. }) if to == cp.manifest.leaf_count
    ));
}

#[test]
fn manifest_decoding_is_bounded_and_checks_the_state_root() {
    let (_, cp) = sample("checkpoint-v2");
    let bytes = cp.manifest.encode();
    let limits = ManifestLimits::default();
    for cut in 0..bytes.len() {
        assert!(
            Manifest::decode(&bytes[..cut], &limits).is_err(),
            "cut {cut}"
        );
    }
    let tight = ManifestLimits {
        max_chunks: cp.chunks.len() - 1,
        ..limits
    };
    assert!(matches!(
        Manifest::decode(&bytes, &tight),
        Err(ManifestError::TooManyChunks { .. })
    ));
    let mut lying = cp.manifest.clone();
    lying.state_root[0] ^= 1;
    assert!(matches!(
        lying.validate(&limits),
        Err(ManifestError::StateRoot { .. })
    ));
    let mut other = cp.manifest.clone();
    other.params.push(("extra".into(), "1".into()));
    assert_ne!(other.id(), cp.manifest.id());
}
