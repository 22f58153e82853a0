//! Checkpoints: restore(create_vN(S)) gives S's root for v1 and v2, both versions
//! restore to the same state, v2 is byte-identical for 1, 2 and 8 threads, and each way a chunk
//! or manifest can be wrong is refused with its own error. Restore progress survives a restart;
//! the fetch scheduler (virtual time, simulated peers) finishes despite a corrupt or a silent
//! peer and penalises only the corrupt one; a running node creates checkpoints periodically and
//! on demand.

use std::sync::Arc;

use modnode::checkpoint::{
    BlockRef, Checkpoint, CreateOptions, Fault, FetchConfig, Fetcher, Manifest, ManifestError,
    ManifestLimits, RestoreError, Restorer, StateLeaves, choose, create, synthetic_state,
};
use modnode::chunk::LeafRange;
use modnode::runtime::LinkedModule;
use modnode::runtime::checkpoint::{CheckpointModule, StateReader};
use modnode::state::State;
use proptest::prelude::*;

use super::network::{eventually, genesis_with_finality, start_edited};
use super::{artifact, runtime};

pub(super) fn module(name: &str) -> CheckpointModule {
    match runtime(2_000_000_000).load(&artifact(name)).unwrap() {
        LinkedModule::Checkpoint(m) => m,
        _ => panic!("{name} is not a checkpoint module"),
    }
}

/// checkpoint-v3's leaves per chunk, as the module describes itself (`leaves-per-chunk`).
pub(super) fn v3_leaves_per_chunk() -> u32 {
    static LEAVES: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *LEAVES.get_or_init(|| {
        let m = module("checkpoint-v3");
        let (_, value) = m
            .meta()
            .info
            .params
            .iter()
            .find(|(key, _)| key == "leaves-per-chunk")
            .expect("checkpoint-v3 describes its leaves per chunk");
        value.parse().unwrap()
    })
}

fn at() -> BlockRef {
    BlockRef {
        height: 100,
        hash: modnode::hashes::BlockHash([7; 32]),
    }
}

fn make(m: &CheckpointModule, state: &Arc<State>, target: u64, threads: usize) -> Checkpoint {
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
        let chunk = restorer.verify(m, i, &cp.chunks[i])?;
        restorer.insert(chunk)?;
    }
    restorer.finish()
}

fn state(validators: u32, seed: u64) -> Arc<State> {
    Arc::new(synthetic_state(validators, seed).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, failure_persistence: None, ..ProptestConfig::default() })]

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
            prop_assert_eq!(*cp.manifest.state_root.as_bytes(), s.state_root());
            prop_assert_eq!(cp.manifest.leaf_count, u64::from(validators));
            let n = cp.chunks.len();
            let order: Vec<usize> = (0..n).map(|i| (i + rotate % n) % n).rev().collect();
            let r = restore(&m, &cp, order).unwrap();
            prop_assert_eq!(*r.state_root.as_bytes(), s.state_root());
            prop_assert_eq!(&r.registry, s.registry());
            // The tree assembled from the range proofs' nodes is the tree, every level of it,
            // and the pubkey index finds every validator.
            prop_assert!(r.registry.tree() == s.registry().tree());
            for (i, v) in s.registry().validators().iter().enumerate() {
                prop_assert_eq!(
                    modnode::state::RegistryRead::index_of(&r.registry, &v.pubkey),
                    Some(i as u32)
                );
            }
            prop_assert_eq!(&r.eth1, s.eth1());
            restored.push(r.registry);
        }
        prop_assert_eq!(&restored[0], &restored[1]);
    }
}

/// The snapshot read leaf by leaf: the `StateReader` default `read_leaf_bytes` (concatenating
/// `read_leaves`), not the snapshot's chunk-wise encoder.
struct LeafByLeaf(Arc<State>);

impl StateReader for LeafByLeaf {
    fn leaf_count(&self) -> u64 {
        self.0.leaf_count()
    }
    fn leaf_size(&self) -> u32 {
        self.0.leaf_size()
    }
    fn read_leaves(&self, start: u64, end: u64) -> Vec<Vec<u8>> {
        self.0.read_leaves(start, end)
    }
    fn range_proof(&self, start: u64, end: u64) -> Vec<u8> {
        self.0.range_proof(start, end)
    }
}

/// The reference for creation's fast paths (one instance reused per worker, leaves encoded
/// chunk-wise): every v2 chunk equals a one-shot `build-chunk` on a fresh instance reading the
/// state leaf by leaf, and opens to exactly the leaves `read-leaves` gives.
#[test]
fn v2_chunks_equal_fresh_instances_reading_leaf_by_leaf() {
    // 3000 leaves span three storage chunks of 1024; 64 KiB chunks cut across their seams.
    let s = state(3000, 11);
    let v2 = module("checkpoint-v2");
    let cp = make(&v2, &s, 64 << 10, 2);
    assert!(cp.chunks.len() > 5, "{} chunks", cp.chunks.len());
    let reader: Arc<dyn StateReader> = Arc::new(LeafByLeaf(s.clone()));
    for (entry, bytes) in cp.manifest.chunks.iter().zip(&cp.chunks) {
        let range = LeafRange {
            start: entry.start,
            end: entry.end,
        };
        let fresh = v2.build_chunk(reader.clone(), range).unwrap().unwrap();
        assert!(
            fresh == *bytes,
            "chunk [{}, {}) differs",
            range.start,
            range.end
        );
        let opened = v2.open_chunk(bytes.clone()).unwrap().unwrap();
        assert_eq!(
            opened.leaves,
            s.read_leaves(range.start, range.end).concat()
        );
        assert_eq!(opened.proof, s.range_proof(range.start, range.end));
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
    let err = r.verify(&m, 1, &bad).unwrap_err();
    assert!(
        matches!(err, RestoreError::Tampered { index: 1, .. }),
        "{err}"
    );
    assert_eq!(err.fault(), Fault::ChunkPeer);
    let short = cp.chunks[1][1..].to_vec();
    let err = r.verify(&m, 1, &short).unwrap_err();
    assert!(
        matches!(err, RestoreError::WrongSize { index: 1, .. }),
        "{err}"
    );
    for i in 0..cp.chunks.len() {
        let chunk = r.verify(&m, i, &cp.chunks[i]).unwrap();
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
    let err = r.verify(&m, 2, &cp.chunks[2]).unwrap_err();
    assert!(matches!(err, RestoreError::Proof { index: 2, .. }), "{err}");
    assert_eq!(err.fault(), Fault::Manifest);
}

/// SHA-256 of `bytes`, as manifests list chunk hashes.
pub(super) fn sha(bytes: &[u8]) -> [u8; 32] {
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
    let err = r.verify(&m, 0, &cp.chunks[1]).unwrap_err();
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
    let first = r.verify(&m, 0, &cp.chunks[0]).unwrap();
    r.insert(first.clone()).unwrap();
    let err = r.insert(first).unwrap_err();
    assert!(
        matches!(err, RestoreError::DuplicateRange { index: 0, .. }),
        "{err}"
    );
    let err = r.verify(&m, 0, &cp.chunks[0]).unwrap_err();
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
        let chunk = r.verify(&m, i, &cp.chunks[i]).unwrap();
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
    lying.state_root.0[0] ^= 1;
    assert!(matches!(
        lying.validate(&limits),
        Err(ManifestError::StateRoot(_))
    ));
    let mut other = cp.manifest.clone();
    other.params.push(("extra".into(), "1".into()));
    assert_ne!(other.id(), cp.manifest.id());
}

#[test]
fn a_restart_resumes_from_the_stored_chunks_without_fetching_them_again() {
    use modnode::checkpoint::{RestoreStore, verify_all};
    let (m, cp) = sample("checkpoint-v2");
    let dir = tempfile::tempdir().unwrap();
    let limits = ManifestLimits::default();
    let half = cp.chunks.len() / 2;
    {
        let store = RestoreStore::open(dir.path()).unwrap();
        let mut r = restorer(&cp.manifest);
        store.begin(r.manifest()).unwrap();
        let first: Vec<(usize, Vec<u8>)> = (0..half).map(|i| (i, cp.chunks[i].clone())).collect();
        verify_all(&mut r, &m, &first, 2, Some(&store)).unwrap();
        // A tampered chunk is refused and not stored.
        let mut bad = cp.chunks[half].clone();
        bad[10] ^= 1;
        assert!(verify_all(&mut r, &m, &[(half, bad)], 1, Some(&store)).is_err());
        // The process dies here: nothing but the store survives.
    }
    let store = RestoreStore::open(dir.path()).unwrap();
    let manifest = store.manifest().unwrap().unwrap();
    assert_eq!(manifest, cp.manifest);
    let stored = store.chunks().unwrap();
    assert_eq!(
        stored.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        (0..half).collect::<Vec<_>>()
    );
    let mut r = Restorer::new(manifest, &limits).unwrap();
    verify_all(&mut r, &m, &stored, 2, None).unwrap();
    let fetched: Vec<usize> = r.missing();
    assert_eq!(fetched, (half..cp.chunks.len()).collect::<Vec<_>>());
    let rest: Vec<_> = fetched.iter().map(|&i| (i, cp.chunks[i].clone())).collect();
    verify_all(&mut r, &m, &rest, 2, Some(&store)).unwrap();
    assert_eq!(r.finish().unwrap().state_root, cp.manifest.state_root);
    // Beginning another checkpoint drops the old progress.
    let mut other = cp.manifest.clone();
    other.height += 1;
    store.begin(&other).unwrap();
    assert!(store.chunks().unwrap().is_empty());
}

#[test]
fn the_checkpoint_store_keeps_the_newest() {
    use modnode::checkpoint::CheckpointStore;
    let dir = tempfile::tempdir().unwrap();
    let store = CheckpointStore::open(dir.path()).unwrap();
    let m = module("checkpoint-v1");
    let s = state(100, 1);
    let mut ids = Vec::new();
    for height in [10, 20, 30] {
        let at = BlockRef {
            height,
            hash: modnode::hashes::BlockHash([height as u8; 32]),
        };
        let cp = create(&m, s.clone(), at, CreateOptions::default()).unwrap();
        store.put(&cp, 2).unwrap();
        ids.push((cp.manifest.id(), cp.chunks[0].clone()));
    }
    let heights: Vec<u64> = store.list().unwrap().iter().map(|m| m.height).collect();
    assert_eq!(heights, vec![30, 20]);
    assert_eq!(store.chunk(&ids[0].0, 0).unwrap(), None);
    assert_eq!(store.chunk(&ids[2].0, 0).unwrap(), Some(ids[2].1.clone()));
}

/// A node creates a checkpoint every `interval` blocks and on demand, keeps the newest, and
/// what it stored restores to the state root of the block it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_creates_checkpoints_periodically_and_on_demand() {
    let dir = tempfile::TempDir::new().unwrap();
    let genesis = genesis_with_finality("checkpoints", &[dir.path()], 1, 2);
    let node = start_edited(dir.path(), &genesis, Vec::new(), Default::default(), |c| {
        c.checkpoint.interval = 3;
        c.checkpoint.keep = 3;
        c.checkpoint.create_version = 2;
    })
    .await;
    eventually("two periodic checkpoints", || {
        node.checkpoints().list().is_ok_and(|l| l.len() >= 2)
    })
    .await;
    let target = modnode::admin::client::Target::data_dir(dir.path()).unwrap();
    let made = create_when_free(&target).await;
    assert_eq!(made["version"], 2);
    let height = made["height"].as_u64().unwrap();
    let listed = modnode::admin::client::checkpoints(&target).await.unwrap();
    let listed = listed["checkpoints"].as_array().unwrap().clone();
    assert!(
        listed.iter().any(|c| c["id"] == made["id"]),
        "{made} not listed: {listed:?}"
    );
    let manifest = node
        .checkpoints()
        .list()
        .unwrap()
        .into_iter()
        .find(|m| hex::encode(m.id()) == made["id"].as_str().unwrap())
        .expect("the on-demand checkpoint is stored");
    let block = node.chain().blocks(height, 1, usize::MAX).await.unwrap();
    let block = modnode::chain::block::Block::decode(&block[0], u16::MAX).unwrap();
    assert_eq!(manifest.state_root, block.header.state_root);
    assert_eq!(manifest.block_hash, block.hash());
    let id = manifest.id();
    let chunks: Vec<(usize, Vec<u8>)> = (0..manifest.chunks.len())
        .map(|i| (i, node.checkpoints().chunk(&id, i).unwrap().unwrap()))
        .collect();
    let module = module("checkpoint-v2");
    let mut restorer =
        modnode::checkpoint::Restorer::new(manifest.clone(), &Default::default()).unwrap();
    modnode::checkpoint::verify_all(&mut restorer, &module, &chunks, 2, None).unwrap();
    assert_eq!(
        restorer.finish().unwrap().state_root,
        block.header.state_root
    );
    // Only `keep` are kept — checked once no creation is running: a creation stores its
    // checkpoint and then prunes, so a listing in between shows keep + 1.
    let store = node.checkpoints().clone();
    node.shutdown().await;
    let kept = store.list().unwrap();
    assert!(
        (1..=3).contains(&kept.len()),
        "{:?}",
        kept.iter().map(|m| m.height).collect::<Vec<_>>()
    );
}

/// `POST /checkpoints` as its answer asks: a node that is already creating one (a periodic
/// creation running with the next queued — every 3 blocks here, so often) refuses with 503
/// "try again when it is done", and the client tries again, for up to `LIVENESS`.
pub(super) async fn create_when_free(target: &modnode::admin::client::Target) -> serde_json::Value {
    use modnode::admin::AdminError;
    let deadline = tokio::time::Instant::now() + super::network::LIVENESS;
    loop {
        match modnode::admin::client::create_checkpoint(target).await {
            Ok(made) => return made,
            Err(AdminError::Refused {
                status: 503,
                message,
                ..
            }) if message.contains("already being created")
                && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no checkpoint on demand: {e}"),
        }
    }
}

/// One simulated peer: how long it takes to answer and whether it corrupts what it serves.
#[derive(Clone, Copy)]
pub(super) struct SimPeer {
    pub(super) latency_ms: u64,
    pub(super) corrupt: bool,
    pub(super) silent: bool,
}

/// Fetches `cp`'s missing chunks (per `restorer`) from simulated peers with virtual time;
/// returns how many chunks each peer delivered and every chunk index requested.
pub(super) fn simulate(
    m: &CheckpointModule,
    cp: &Checkpoint,
    restorer: &mut Restorer,
    peers: &[SimPeer],
) -> (Fetcher<usize>, Vec<usize>, Vec<usize>) {
    use std::time::{Duration, Instant};
    let mut fetcher = Fetcher::new(
        restorer.missing(),
        0..peers.len(),
        FetchConfig {
            initial_timeout: Duration::from_millis(400),
            ..FetchConfig::default()
        },
    );
    let start = Instant::now();
    let mut now = start;
    let mut delivered = vec![0; peers.len()];
    let mut requested = Vec::new();
    // (arrival, peer, chunk)
    let mut inbox: Vec<(Instant, usize, usize)> = Vec::new();
    for _ in 0..100_000 {
        while let Some(request) = fetcher.poll_request(now).unwrap() {
            let (peer, index) = (request.peer, request.index);
            requested.push(index);
            if !peers[peer].silent {
                let arrival = now + Duration::from_millis(peers[peer].latency_ms);
                inbox.push((arrival, peer, index));
            }
        }
        if fetcher.is_done() {
            break;
        }
        inbox.sort();
        let next_arrival = inbox.first().map(|a| a.0);
        let next = match (next_arrival, fetcher.next_deadline()) {
            (Some(a), Some(d)) => a.min(d),
            (a, d) => a.or(d).expect("something to wait for"),
        };
        now = now.max(next);
        fetcher.handle_timeouts(now);
        while inbox.first().is_some_and(|a| a.0 <= now) {
            let (_, peer, index) = inbox.remove(0);
            if !fetcher.peers().any(|p| *p == peer) {
                continue;
            }
            let mut bytes = cp.chunks[index].clone();
            if peers[peer].corrupt {
                let last = bytes.len() - 1;
                bytes[last] ^= 0x80;
            }
            match restorer.verify(m, index, &bytes) {
                Ok(chunk) => {
                    restorer.insert(chunk).unwrap();
                    fetcher.handle_verified(&peer, index, now);
                    delivered[peer] += 1;
                }
                Err(RestoreError::DuplicateRange { .. }) => {
                    fetcher.handle_verified(&peer, index, now)
                }
                Err(e) => fetcher
                    .handle_refused(&peer, index, e.fault(), e.to_string())
                    .unwrap(),
            }
        }
    }
    assert!(fetcher.is_done(), "the simulation did not finish");
    (fetcher, delivered, requested)
}

fn many_chunks() -> (CheckpointModule, Checkpoint) {
    let m = module("checkpoint-v2");
    let cp = make(&m, &state(1200, 5), 4 << 10, 2);
    assert!(cp.chunks.len() >= 30, "{} chunks", cp.chunks.len());
    (m, cp)
}

#[test]
fn three_peers_one_corrupt_the_restore_finishes_and_only_the_corrupt_one_is_penalised() {
    let (m, cp) = many_chunks();
    let mut r = restorer(&cp.manifest);
    let peers = [
        SimPeer {
            latency_ms: 10,
            corrupt: false,
            silent: false,
        },
        SimPeer {
            latency_ms: 40,
            corrupt: false,
            silent: false,
        },
        SimPeer {
            latency_ms: 5,
            corrupt: true,
            silent: false,
        },
    ];
    let (fetcher, delivered, _) = simulate(&m, &cp, &mut r, &peers);
    let penalised: Vec<usize> = fetcher.penalised().iter().map(|p| p.peer).collect();
    assert_eq!(penalised, vec![2]);
    assert_eq!(delivered[2], 0);
    assert!(
        delivered[0] > delivered[1],
        "fast {} vs slow {}",
        delivered[0],
        delivered[1]
    );
    assert_eq!(r.finish().unwrap().state_root, cp.manifest.state_root);
}

#[test]
fn a_silent_peer_times_out_and_its_chunks_are_fetched_elsewhere() {
    let (m, cp) = many_chunks();
    let mut r = restorer(&cp.manifest);
    let peers = [
        SimPeer {
            latency_ms: 20,
            corrupt: false,
            silent: true,
        },
        SimPeer {
            latency_ms: 20,
            corrupt: false,
            silent: false,
        },
    ];
    let (fetcher, delivered, requested) = simulate(&m, &cp, &mut r, &peers);
    assert!(fetcher.penalised().is_empty());
    assert_eq!(delivered[1], cp.chunks.len());
    assert!(requested.len() > cp.chunks.len());
    assert!(r.finish().is_ok());
}

#[test]
fn a_resumed_restore_requests_only_the_chunks_it_lacks() {
    let (m, cp) = many_chunks();
    let mut r = restorer(&cp.manifest);
    let verified = cp.chunks.len() / 2;
    for i in 0..verified {
        let chunk = r.verify(&m, i, &cp.chunks[i]).unwrap();
        r.insert(chunk).unwrap();
    }
    let peers = [SimPeer {
        latency_ms: 3,
        corrupt: false,
        silent: false,
    }; 2];
    let (_, _, requested) = simulate(&m, &cp, &mut r, &peers);
    assert!(requested.iter().all(|&i| i >= verified), "{requested:?}");
    assert_eq!(requested.len(), cp.chunks.len() - verified);
    assert!(r.finish().is_ok());
}

#[test]
fn the_newest_checkpoint_offered_by_enough_peers_is_chosen() {
    let (_, old) = sample("checkpoint-v1");
    let mut new = old.manifest.clone();
    new.height += 100;
    let offers = vec![
        ("a", old.manifest.clone()),
        ("b", old.manifest.clone()),
        ("c", new.clone()),
        ("c", new.clone()),
    ];
    let (chosen, peers) = choose(&offers, 2).unwrap();
    assert_eq!(chosen.height, old.manifest.height);
    assert_eq!(peers, vec!["a", "b"]);
    assert_eq!(choose(&offers, 1).unwrap().0.height, new.height);
    assert!(choose(&offers, 3).is_none());
}
