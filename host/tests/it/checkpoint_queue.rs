//! Checkpoints of a chain running deposits@3 carry its pending-deposit queue. A checkpoint taken
//! after the switch, with deposits queued, starts a fresh node through the restore a late
//! joiner runs (here from a checkpoint file: manifest decoded and validated, block `H` checked,
//! every chunk verified on its own, the state rebuilt and its root checked, the chain
//! initialised); that node then imports the source's blocks across the epoch boundaries where
//! the queue drains, to the same roots, and reopens on them. A restore interrupted half-way
//! resumes from its stored chunks, queue chunks included. A tampered queue chunk is the serving
//! peer's fault and is taken from another; forged queue bytes or counters are the producer's;
//! a manifest without the queue, for a state that holds one, is refused naming its block.

use std::sync::Arc;

use modnode::chain::block::Block;
use modnode::chain::workload::DevDepositLog;
use modnode::checkpoint::file::write_file;
use modnode::checkpoint::{
    BlockRef, Checkpoint, CreateOptions, Fault, Manifest, ManifestError, ManifestLimits,
    RestoreError, RestoreStore, Restorer, create, synthetic_state, verify_all,
};
use modnode::node::ProgressDisplay;
use modnode::node::checkpoint_file::{FileRestoreParts, restore_from_file};
use modnode::node::metrics::RestoreCounters;
use modnode::runtime::modules::{InitialModules, Modules};
use modnode::runtime::slot::SlotConfig;
use modnode::state::State;

use super::checkpoint::{SimPeer, simulate};
use super::deposits_v3_chain::{
    GENESIS_VALIDATORS, H, Setup, fingerprint, next, open, open_switching_at_h, queued, setup,
};
use super::{artifact, runtime};

/// Ids of the manifests in `manifests_of_states_without_a_queue_keep_their_format_and_bytes`.
/// `GOLDEN_V3` was taken again when checkpoint-v3 moved to 256-leaf chunks (its module hash and
/// chunks changed, the format-2 encoding did not: v1's id, same code path, is unchanged), and
/// again when its transposition moved to wasm SIMD: only the module hash changed (the previous
/// build, `eb77ce74…` rebuilt from its source, gives the previous id `987326e0…` with the new
/// build's chunks, which are the same bytes).
const GOLDEN_V1: &str = "993d99de21619ced55be5f0c2146d9e16ff285d92dab628a615e9a42e4d59e16";
const GOLDEN_V3: &str = "e8ddd86d7677e3413f7da475913a554ed6d123825bd7f994a1048d4f35967be1";

/// Height of the checkpoint: after the switch at `H`, deposits queued, the epoch boundary at
/// slot 12 (where queued deposits are applied) still ahead.
const CHECKPOINT_AT: u64 = 11;
/// The source chain's last height: every queued deposit is applied by then.
const LAST: u64 = 40;
/// Chunk size target: small, so the queue makes several chunks.
const TARGET_CHUNK_BYTES: u64 = 1000;

/// A node's modules (checkpoint-v1 creates and opens the registry chunks).
fn modules() -> Modules {
    Modules::new(
        runtime(2_000_000_000),
        InitialModules {
            deposits: &artifact("deposits-v2"),
            checkpoint: &artifact("checkpoint-v1"),
            gossip_policy: &artifact("gossip-policy-v2"),
        },
        SlotConfig::default(),
    )
    .unwrap()
}

/// The source chain: deposits-v2 until `H`, deposits-v3 from it; two deposits a block from `H`
/// to the checkpoint, one a block for three more, then empty blocks while the queue drains.
struct Source {
    blocks: Vec<Block>,
    at_checkpoint: State,
    head: State,
    deposited: u32,
    _dir: tempfile::TempDir,
}

fn source(setup: &Setup) -> Source {
    let dir = tempfile::tempdir().unwrap();
    let mut chain = open_switching_at_h(setup, &dir.path().join("db"));
    let mut log = DevDepositLog::new();
    let mut seed = 0u64;
    let mut blocks = Vec::new();
    let mut at_checkpoint = None;
    while chain.head().height < LAST {
        let height = chain.head().height + 1;
        let deposits = match height {
            h if h < H => 1,
            h if h <= CHECKPOINT_AT => 2,
            h if h <= CHECKPOINT_AT + 3 => 1,
            _ => 0,
        };
        blocks.push(next(&mut chain, &mut log, &mut seed, deposits));
        if height == CHECKPOINT_AT {
            at_checkpoint = Some(chain.snapshot());
        }
    }
    Source {
        blocks,
        at_checkpoint: at_checkpoint.unwrap(),
        head: chain.snapshot(),
        deposited: u32::try_from(seed).unwrap(),
        _dir: dir,
    }
}

/// A checkpoint of `state`, the state after `block`, as a node creates one.
fn checkpoint(modules: &Modules, state: &State, block: &Block) -> Checkpoint {
    create(
        &modules.checkpoint(),
        Arc::new(state.clone()),
        BlockRef {
            height: block.header.height,
            hash: block.hash(),
        },
        CreateOptions {
            target_chunk_bytes: TARGET_CHUNK_BYTES,
            threads: 1,
            background: false,
        },
    )
    .unwrap()
}

fn sha(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

#[test]
fn a_checkpoint_after_the_switch_carries_the_queue_and_the_restored_node_follows_it_draining() {
    let setup = setup();
    let src = source(&setup);
    let modules = modules();
    let block = &src.blocks[CHECKPOINT_AT as usize - 1];
    // At the checkpoint: 12 entries queued since H, the 2 final at slot 8 applied.
    assert_eq!(queued(&src.at_checkpoint), Some(10));
    let cp = checkpoint(&modules, &src.at_checkpoint, block);
    assert_eq!(cp.manifest.state_root, block.header.state_root);
    let queue = cp.manifest.queue.expect("the manifest carries the queue");
    assert_eq!((queue.total, queue.start), (12, 2));
    assert!(cp.manifest.queue_chunks().len() >= 2, "{queue:?}");
    assert_eq!(
        cp.manifest.registry_chunks().len() + cp.manifest.queue_chunks().len(),
        cp.chunks.len()
    );

    // Through a checkpoint file into an empty data directory, as `--restore-from` does.
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("after-the-switch.ckpt");
    write_file(&file, &cp.manifest, &block.encode(), |i| {
        Ok(cp.chunks[i].clone())
    })
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let counters = RestoreCounters::default();
    let restored_at = restore_from_file(&FileRestoreParts {
        file: &file,
        genesis: &setup.genesis,
        modules: &modules,
        data_dir: data.path(),
        counters: &counters,
        threads: 2,
        progress: ProgressDisplay::Log,
    })
    .unwrap();
    assert_eq!(restored_at, Some(CHECKPOINT_AT));

    // The restored chain holds the source's state at the checkpoint, queue included.
    let chain_dir = data.path().join("chain");
    let mut restored = open(&setup, &chain_dir);
    assert_eq!(restored.head().hash, block.hash());
    let state = restored.snapshot();
    assert_eq!(fingerprint(&state), fingerprint(&src.at_checkpoint));
    assert_eq!(state.pending(), src.at_checkpoint.pending());

    // It imports the source's blocks, across the epoch boundaries where the queue drains,
    // each to the root its header commits to.
    for b in &src.blocks[CHECKPOINT_AT as usize..] {
        restored.import(b).unwrap();
        assert_eq!(restored.head().state_root, b.header.state_root);
    }
    assert_eq!(fingerprint(&restored.snapshot()), fingerprint(&src.head));
    assert_eq!(queued(&src.head), Some(0));
    assert_eq!(
        src.head.validator_count(),
        GENESIS_VALIDATORS + src.deposited
    );

    // And reopens on it after a restart.
    drop(restored);
    let reopened = open(&setup, &chain_dir);
    assert_eq!(fingerprint(&reopened.snapshot()), fingerprint(&src.head));
}

/// Manifests of states without a queue keep their format and bytes: the ids of a
/// checkpoint-v1 (format 1) and a checkpoint-v3 (format 2, chunk roots) manifest of a fixed
/// synthetic state are the ones nodes made before format 3 existed (module bytes are pinned).
#[test]
fn manifests_of_states_without_a_queue_keep_their_format_and_bytes() {
    let state = Arc::new(synthetic_state(3000, 7).unwrap());
    let mut made = Vec::new();
    for name in ["checkpoint-v1", "checkpoint-v3"] {
        let module = super::checkpoint::module(name);
        let options = CreateOptions {
            target_chunk_bytes: 64 << 10,
            threads: 1,
            background: false,
        };
        let at = BlockRef {
            height: 100,
            hash: modnode::hashes::BlockHash([7; 32]),
        };
        let cp = create(&module, state.clone(), at, options).unwrap();
        made.push((cp.manifest.encode()[4], hex::encode(cp.manifest.id())));
    }
    assert_eq!(
        made,
        [(1, GOLDEN_V1.to_string()), (2, GOLDEN_V3.to_string())],
        "a manifest of a state without a queue changed its bytes"
    );
}

#[test]
fn a_tampered_queue_chunk_is_the_peers_fault_and_forged_queue_bytes_or_counters_the_producers() {
    let setup = setup();
    let src = source(&setup);
    let modules = modules();
    let opener = modules.checkpoint();
    let limits = ManifestLimits::default();
    let block = &src.blocks[CHECKPOINT_AT as usize - 1];
    let cp = checkpoint(&modules, &src.at_checkpoint, block);
    let k = cp.manifest.registry_chunk_count();
    let q = k + 1;
    assert!(q < cp.chunks.len());

    // Altered in transit: the serving peer's fault (it is dropped), the chunk fetched again.
    let mut restorer = Restorer::new(cp.manifest.clone(), &limits).unwrap();
    let mut tampered = cp.chunks[q].clone();
    let mid = tampered.len() / 2;
    tampered[mid] ^= 1;
    let err = restorer.verify(opener.as_ref(), q, &tampered).unwrap_err();
    assert!(
        matches!(err, RestoreError::Tampered { index, .. } if index == q),
        "{err}"
    );
    assert_eq!(err.fault(), Fault::ChunkPeer);
    let short = &cp.chunks[q][..cp.chunks[q].len() - 1];
    let err = restorer.verify(opener.as_ref(), q, short).unwrap_err();
    assert!(matches!(err, RestoreError::WrongSize { .. }), "{err}");
    assert_eq!(err.fault(), Fault::ChunkPeer);
    // The honest bytes, every chunk in reverse order: the queue is rebuilt, a repeat refused.
    for i in (0..cp.chunks.len()).rev() {
        let chunk = restorer.verify(opener.as_ref(), i, &cp.chunks[i]).unwrap();
        restorer.insert(chunk).unwrap();
    }
    let again = restorer
        .verify(opener.as_ref(), q, &cp.chunks[q])
        .unwrap_err();
    assert!(
        matches!(again, RestoreError::DuplicateRange { .. }),
        "{again}"
    );
    let state = restorer.finish().unwrap();
    assert_eq!(state.pending.as_ref(), src.at_checkpoint.pending());
    assert_eq!(state.state_root, block.header.state_root);

    // Listed bytes that do not prove (an entry's amount changed, its hash and size listed to
    // match): the producer's fault.
    let mut forged = cp.clone();
    // Header (21 bytes), then the first entry's pubkey (48) and credentials (32): its amount.
    forged.chunks[q][21 + 80] ^= 0x40;
    forged.manifest.chunks[q].hash = sha(&forged.chunks[q]);
    let r = Restorer::new(forged.manifest.clone(), &limits).unwrap();
    let err = r.verify(opener.as_ref(), q, &forged.chunks[q]).unwrap_err();
    assert!(
        matches!(err, RestoreError::Proof { index, .. } if index == q),
        "{err}"
    );
    assert_eq!(err.fault(), Fault::Manifest);

    // Counters that do not give the state root: refused before any fetch, naming the block.
    let mut counters = cp.manifest.clone();
    counters.queue.as_mut().unwrap().balance_to_consume += 1;
    let err = Manifest::decode(&counters.encode(), &limits).unwrap_err();
    assert!(
        matches!(&err, ManifestError::StateRoot(m) if m.height == CHECKPOINT_AT),
        "{err}"
    );
    assert!(
        err.to_string().contains(&hex::encode(block.hash())),
        "{err}"
    );

    // An old-format manifest (no queue) of this state: refused, naming the block and the queue.
    let mut old = cp.manifest.clone();
    old.queue = None;
    old.chunks.truncate(k);
    assert_eq!(old.encode()[4], 1, "format 1");
    let err = Manifest::decode(&old.encode(), &limits).unwrap_err();
    assert!(matches!(err, ManifestError::StateRoot(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&hex::encode(block.hash())) && text.contains("pending-deposit queue"),
        "{text}"
    );

    // Queue chunks that do not cover the queue's entries exactly are refused.
    let mut gap = cp.manifest.clone();
    gap.chunks[k].end -= 1;
    let err = Manifest::decode(&gap.encode(), &limits).unwrap_err();
    assert!(matches!(err, ManifestError::Queue(_)), "{err}");
    // The manifest itself round-trips through its encoding (format 3).
    assert_eq!(cp.manifest.encode()[4], 3);
    assert_eq!(
        Manifest::decode(&cp.manifest.encode(), &limits).unwrap(),
        cp.manifest
    );
}

#[test]
fn a_peer_serving_tampered_queue_chunks_is_dropped_and_they_are_fetched_from_the_others() {
    let setup = setup();
    let src = source(&setup);
    let modules = modules();
    let opener = modules.checkpoint();
    let block = &src.blocks[CHECKPOINT_AT as usize - 1];
    let cp = checkpoint(&modules, &src.at_checkpoint, block);
    let k = cp.manifest.registry_chunk_count();
    // The registry is restored already: only queue chunks are left to fetch.
    let mut r = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
    for i in 0..k {
        let chunk = r.verify(opener.as_ref(), i, &cp.chunks[i]).unwrap();
        r.insert(chunk).unwrap();
    }
    assert_eq!(r.missing(), (k..cp.chunks.len()).collect::<Vec<_>>());
    let peer = |latency_ms, corrupt| SimPeer {
        latency_ms,
        corrupt,
        silent: false,
    };
    // The fastest peer alters every chunk it serves.
    let peers = [peer(40, false), peer(5, true), peer(10, false)];
    let (fetcher, delivered, requested) = simulate(opener.as_ref(), &cp, &mut r, &peers);
    let penalised: Vec<usize> = fetcher.penalised().iter().map(|p| p.peer).collect();
    assert_eq!(penalised, vec![1]);
    assert_eq!(delivered[1], 0);
    assert!(requested.iter().all(|&i| i >= k), "{requested:?}");
    let state = r.finish().unwrap();
    assert_eq!(state.state_root, block.header.state_root);
    assert_eq!(state.pending.as_ref(), src.at_checkpoint.pending());
}

#[test]
fn a_restore_stopped_half_way_resumes_from_its_stored_chunks_queue_chunks_included() {
    let setup = setup();
    let src = source(&setup);
    let modules = modules();
    let opener = modules.checkpoint();
    let limits = ManifestLimits::default();
    let block = &src.blocks[CHECKPOINT_AT as usize - 1];
    let cp = checkpoint(&modules, &src.at_checkpoint, block);
    let n = cp.chunks.len();
    let k = cp.manifest.registry_chunk_count();
    // Every other chunk: registry and queue chunks among them.
    let first: Vec<(usize, Vec<u8>)> = (0..n)
        .filter(|i| i % 2 == 0)
        .map(|i| (i, cp.chunks[i].clone()))
        .collect();
    assert!(first.iter().any(|(i, _)| *i >= k) && first.iter().any(|(i, _)| *i < k));
    let dir = tempfile::tempdir().unwrap();
    {
        let store = RestoreStore::open(dir.path()).unwrap();
        store.begin(&cp.manifest).unwrap();
        let mut r = Restorer::new(cp.manifest.clone(), &limits).unwrap();
        verify_all(&mut r, opener.as_ref(), &first, 2, Some(&store)).unwrap();
        // The process dies here.
    }
    let store = RestoreStore::open(dir.path()).unwrap();
    assert_eq!(store.manifest().unwrap().unwrap(), cp.manifest);
    let stored = store.chunks().unwrap();
    assert_eq!(stored, first);
    // Stored chunks are verified again locally, then only the rest is fetched.
    let mut r = Restorer::new(cp.manifest.clone(), &limits).unwrap();
    verify_all(&mut r, opener.as_ref(), &stored, 2, Some(&store)).unwrap();
    let missing = r.missing();
    assert_eq!(missing, (0..n).filter(|i| i % 2 == 1).collect::<Vec<_>>());
    let rest: Vec<(usize, Vec<u8>)> = missing.iter().map(|&i| (i, cp.chunks[i].clone())).collect();
    verify_all(&mut r, opener.as_ref(), &rest, 2, Some(&store)).unwrap();
    let state = r.finish().unwrap();
    assert_eq!(state.state_root, block.header.state_root);
    assert_eq!(state.pending.as_ref(), src.at_checkpoint.pending());
}
