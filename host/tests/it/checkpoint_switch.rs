//! A restore switching checkpoints: verified chunks carry over to a newer
//! checkpoint exactly when their bytes are listed by it and verify against it (sans-IO, on
//! generated states), the progress store switches in one atomic write, and over real QUIC a
//! restore whose checkpoint its peer pruned finishes on the newer one without fetching the
//! carried chunks again; a manifest whose chunks do not prove bans every peer that offered it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use modnode::checkpoint::{
    BlockRef, Checkpoint, CreateOptions, Fault, Manifest, ManifestLimits, RestoreStore, Restorer,
    carry_over, create, listed_chunks, synthetic_state, verify_all,
};
use modnode::runtime::checkpoint::CheckpointModule;
use modnode::state::State;

use super::checkpoint::{module, sha};
use super::checkpoint_sync::{
    FINALITY, admin_status, checkpoint_now, first_chunks, follows, height_at_least, kill,
    leave_restore_progress, node, seed, seeded_follower, spawn_restoring, test_genesis,
};
use super::network::{dirs, eventually};
use modnode::node::SyncMode;

/// A checkpoint of `state` at `height` with small chunks, built in the foreground.
pub(crate) fn make(m: &CheckpointModule, state: &State, height: u64) -> Checkpoint {
    let at = BlockRef {
        height,
        hash: modnode::hashes::BlockHash([height as u8; 32]),
    };
    let options = CreateOptions {
        target_chunk_bytes: 8 << 10,
        threads: 1,
        background: false,
    };
    create(m, Arc::new(state.clone()), at, options).unwrap()
}

/// The same registry with another eth1 state: another state root, the same registry root.
fn with_other_eth1(s: &State) -> State {
    let mut eth1 = s.eth1().clone();
    eth1.vote_period += 1;
    eth1.votes.clear();
    State::new(
        modnode::hashes::BlockHash::new([1; 32]),
        s.height() + 1,
        s.registry().clone(),
        eth1,
        s.schedule().clone(),
    )
}

fn restorer(manifest: &Manifest) -> Restorer {
    Restorer::new(manifest.clone(), &ManifestLimits::default()).unwrap()
}

/// The first `n` chunks of `cp`, as an old restore stored them.
fn stored(cp: &Checkpoint, n: usize) -> Vec<(usize, Vec<u8>)> {
    (0..n).map(|i| (i, cp.chunks[i].clone())).collect()
}

#[test]
fn verified_chunks_carry_over_only_when_their_bytes_verify_against_the_new_manifest() {
    for name in ["checkpoint-v1", "checkpoint-v2"] {
        let m = module(name);
        let s = synthetic_state(300, 9).unwrap();
        let old = make(&m, &s, 100);
        let n = old.chunks.len();
        assert!(n >= 4, "{name}: {n} chunks");
        let half = n / 2;

        // Same registry, another eth1 state and height: another state root, the same chunks.
        let same_registry = make(&m, &with_other_eth1(&s), 200);
        assert_ne!(same_registry.manifest.state_root, old.manifest.state_root);
        assert_eq!(
            same_registry.manifest.registry_root,
            old.manifest.registry_root
        );
        let mut r = restorer(&same_registry.manifest);
        let carried = carry_over(&mut r, &m, stored(&old, half), 2).unwrap();
        assert!(carried.refused.is_none(), "{:?}", carried.refused);
        assert_eq!(
            carried.chunks.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            (0..half).collect::<Vec<_>>(),
            "{name}"
        );
        assert_eq!(r.missing(), (half..n).collect::<Vec<_>>());
        let rest = r
            .missing()
            .into_iter()
            .map(|i| (i, same_registry.chunks[i].clone()));
        verify_all(&mut r, &m, &rest.collect::<Vec<_>>(), 2, None).unwrap();
        assert_eq!(
            r.finish().unwrap().state_root,
            same_registry.manifest.state_root
        );

        // One validator more: the first 300 leaves are the same, but the registry root is not,
        // so no old range proof holds and nothing carries over.
        let grown = make(&m, &synthetic_state(301, 9).unwrap(), 300);
        assert_ne!(grown.manifest.registry_root, old.manifest.registry_root);
        let mut r = restorer(&grown.manifest);
        let carried = carry_over(&mut r, &m, stored(&old, n), 2).unwrap();
        assert_eq!((carried.stored, carried.listed), (n, 0));
        assert!(carried.chunks.is_empty() && r.missing().len() == grown.chunks.len());
    }

    // Another version of the same state chunks differently: nothing carries.
    let (v1, v2) = (module("checkpoint-v1"), module("checkpoint-v2"));
    let s = synthetic_state(300, 9).unwrap();
    let old = make(&v1, &s, 100);
    let new = make(&v2, &s, 100);
    let mut r = restorer(&new.manifest);
    let carried = carry_over(&mut r, &v2, stored(&old, old.chunks.len()), 1).unwrap();
    assert!(carried.chunks.is_empty() && carried.listed == 0);
}

#[test]
fn a_new_manifest_listing_an_old_chunk_under_another_range_carries_nothing_and_is_its_fault() {
    let m = module("checkpoint-v1");
    let s = synthetic_state(300, 9).unwrap();
    let old = make(&m, &s, 100);
    let mut hostile = make(&m, &with_other_eth1(&s), 200);
    // It lists chunk 0's bytes as its chunk 1 (same size, recomputed hash) and something else
    // as its chunk 0: the bytes are listed, but they prove another range.
    let moved = old.chunks[0].clone();
    hostile.manifest.chunks[0].hash = [0xaa; 32];
    hostile.manifest.chunks[1].hash = sha(&moved);
    hostile.manifest.chunks[1].size = moved.len() as u32;
    let mut r = restorer(&hostile.manifest);
    let listed = listed_chunks(&r, vec![(0, moved.clone())]);
    assert_eq!(listed.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![1]);
    let carried = carry_over(&mut r, &m, vec![(0, moved)], 1).unwrap();
    assert!(carried.chunks.is_empty());
    let refused = carried.refused.expect("the moved chunk is refused");
    assert_eq!(refused.fault(), Fault::Manifest, "{refused}");
    assert!(!r.has(1));
}

#[test]
fn the_progress_store_switches_checkpoints_in_one_write_that_survives_a_reopen() {
    let m = module("checkpoint-v2");
    let s = synthetic_state(300, 9).unwrap();
    let old = make(&m, &s, 100);
    let new = make(&m, &with_other_eth1(&s), 200);
    let n = old.chunks.len();
    let dir = tempfile::tempdir().unwrap();
    let open = || RestoreStore::open(dir.path()).unwrap();
    {
        let store = open();
        store.begin(&old.manifest).unwrap();
        for (i, bytes) in stored(&old, n - 1) {
            store.put_chunk(i, &bytes, &sha(&bytes)).unwrap();
        }
        store.flush().unwrap();
        // Carry over all but chunk 0 and the chunk never fetched.
        let carried: Vec<(usize, Vec<u8>)> = stored(&new, n - 1).into_iter().skip(1).collect();
        store.switch(&new.manifest, &carried).unwrap();
    }
    let store = open();
    assert_eq!(store.manifest().unwrap().unwrap(), new.manifest);
    let chunks = store.chunks().unwrap();
    assert_eq!(
        chunks.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        (1..n - 1).collect::<Vec<_>>(),
        "chunk 0 of the old checkpoint was not carried, so it is gone"
    );
    let mut r = restorer(&new.manifest);
    verify_all(&mut r, &m, &chunks, 2, None).unwrap();
    assert_eq!(r.missing(), vec![0, n - 1]);
}

/// `cp` with the bytes of its first `n` chunks flipped: a peer serving it is banned the moment
/// one of them is fetched, so a restore from it alone finishes only if it fetched none of them.
fn first_chunks_corrupt(cp: &Checkpoint, n: usize) -> Checkpoint {
    let mut cp = cp.clone();
    for chunk in &mut cp.chunks[..n] {
        for byte in chunk.iter_mut() {
            *byte ^= 0xff;
        }
    }
    cp
}

/// The node in `dir` restores from `peers` in the background; returns the task.
fn restoring(
    dir: &Path,
    genesis: &modnode::chain::genesis::Genesis,
    peers: Vec<modnode_peers::PeerAddr>,
) -> tokio::task::JoinHandle<modnode::node::Node> {
    let dir = dir.to_path_buf();
    let genesis = genesis.clone();
    tokio::spawn(async move { node(&dir, &genesis, peers, 1, SyncMode::Checkpoint).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_checkpoint_is_replaced_by_the_newer_one_keeping_its_verified_chunks() {
    let d = dirs(3);
    let (genesis, _) = test_genesis("ckpt-switch-pruned", d[0].path());
    let a = node(d[0].path(), &genesis, Vec::new(), 1, SyncMode::Full).await;
    height_at_least(&a, 3).await;
    let old = checkpoint_now(d[0].path(), &a).await;
    let n = old.chunks.len();
    let half = n / 2;
    assert!(half >= 2, "{n} chunks");
    // P offers the old checkpoint but holds only its first half.
    let p = seeded_follower(d[1].path(), &genesis, &a, &first_chunks(&old, half), 1).await;
    height_at_least(&p, old.manifest.height + FINALITY).await;
    let served = &p.metrics().checkpoint_served;
    let task = restoring(d[2].path(), &genesis, vec![p.peer_addr().unwrap()]);
    eventually("the restore asked again after P ran out of chunks", || {
        served.lists.load(Ordering::Relaxed) >= 2
    })
    .await;
    assert!(served.chunks.load(Ordering::Relaxed) >= half as u64);

    // A newer checkpoint of the same registry (no deposits in between) replaces the old one
    // on P, which prunes the old one (keep 1). P serves the new one's first half corrupt: the
    // restore can only carry those chunks over.
    height_at_least(&a, old.manifest.height + 1 + FINALITY).await;
    let new = checkpoint_now(d[0].path(), &a).await;
    assert!(new.manifest.height > old.manifest.height);
    assert_eq!(new.manifest.registry_root, old.manifest.registry_root);
    height_at_least(&p, new.manifest.height + FINALITY).await;
    p.checkpoints()
        .put(&first_chunks_corrupt(&new, half), 1)
        .unwrap();
    assert_eq!(p.checkpoints().list().unwrap(), vec![new.manifest.clone()]);

    let restored = task.await.unwrap();
    let status = restored.status().checkpoint_restore;
    assert!(status.done, "{status:?}");
    assert_eq!(status.height, new.manifest.height, "{status:?}");
    assert_eq!(status.switches, 1, "{status:?}");
    assert_eq!(status.chunks_carried_over, half as u64, "{status:?}");
    assert_eq!(
        status.chunks_verified,
        new.chunks.len() as u64,
        "{status:?}"
    );
    assert_eq!(
        status.peers_penalised, 0,
        "a carried-over chunk was fetched again: {status:?}"
    );
    follows(&restored, &a, new.manifest.height).await;
    for node in [restored, p, a] {
        node.shutdown().await;
    }
}

/// Whether the (killed) node in `dir` left a restore to finish: restore progress stored and
/// the chain not initialised yet. Both stores are released before this returns, so the next
/// process opens them without waiting for this one's.
fn restore_unfinished(dir: &Path) -> bool {
    let wait = Duration::from_secs(30);
    let chain = dir.join("chain");
    let initialised = {
        let store = modnode::store::SledStore::open(&chain).unwrap();
        modnode::store::KvStore::get(&store, modnode::store::keys::FORMAT)
            .unwrap()
            .is_some()
    };
    assert!(modnode::store::wait_released(&chain, wait).unwrap());
    let path = dir.join(modnode::node::RESTORE_DIR);
    let stored = RestoreStore::open(&path)
        .unwrap()
        .manifest()
        .unwrap()
        .is_some();
    // The progress's sled database (`checkpoint::store` describes the layout).
    assert!(modnode::store::wait_released(&path.join("progress"), wait).unwrap());
    stored && !initialised
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_killed_around_its_switch_to_a_newer_checkpoint_loses_no_verified_chunk() {
    let d = dirs(3);
    let (genesis, text) = test_genesis("ckpt-switch-kill", d[0].path());
    let genesis_file = d[2].path().join("genesis.json");
    std::fs::write(&genesis_file, text).unwrap();
    let restoring = d[2].path().join("node");
    let a = node(d[0].path(), &genesis, Vec::new(), 2, SyncMode::Full).await;
    height_at_least(&a, 3).await;
    let old = checkpoint_now(d[0].path(), &a).await;
    height_at_least(&a, old.manifest.height + 1 + FINALITY).await;
    let new = checkpoint_now(d[0].path(), &a).await;
    let n = new.chunks.len();
    let half = n / 2;
    assert_eq!(new.manifest.registry_root, old.manifest.registry_root);
    // An earlier run verified and stored the first half of the old checkpoint, which no peer
    // offers any more: P offers only the new one.
    let seed_progress = || {
        let _ = std::fs::remove_dir_all(&restoring);
        leave_restore_progress(&restoring, &old.manifest, &stored(&old, half));
    };
    // P serves the first half corrupt: a restore from it alone cannot fetch those chunks.
    let p = seeded_follower(
        d[1].path(),
        &genesis,
        &a,
        &first_chunks_corrupt(&new, half),
        2,
    )
    .await;
    height_at_least(&p, new.manifest.height + FINALITY).await;
    let served = &p.metrics().checkpoint_served;

    // Killed as soon as it has asked P for its list: before, during or after the switch. The
    // whole restore takes tens of milliseconds here, so the kill can come too late, after the
    // restore initialised the chain (whether or not it then cleared its progress, which the
    // next start removes): then the run proves nothing and is repeated.
    let peers = [p.peer_addr().unwrap()];
    let mut killed_mid_restore = false;
    for _attempt in 0..10 {
        seed_progress();
        let lists_before = served.lists.load(Ordering::Relaxed);
        let mut child = spawn_restoring(&restoring, &genesis_file, &peers);
        eventually("the restoring node asked P for its checkpoints", || {
            served.lists.load(Ordering::Relaxed) > lists_before
        })
        .await;
        kill(&mut child);
        if restore_unfinished(&restoring) {
            killed_mid_restore = true;
            break;
        }
    }
    assert!(
        killed_mid_restore,
        "every kill came after the restore had finished"
    );

    let mut child = spawn_restoring(&restoring, &genesis_file, &peers);
    let mut status = serde_json::Value::Null;
    eventually("the restarted node restored", || {
        if let Ok(s) = admin_status(&restoring) {
            status = s;
        }
        status["checkpoint_restore"]["done"] == true
    })
    .await;
    kill(&mut child);
    let restore = &status["checkpoint_restore"];
    assert_eq!(restore["height"], new.manifest.height, "{restore}");
    let kept = restore["chunks_resumed"].as_u64().unwrap()
        + restore["chunks_carried_over"].as_u64().unwrap();
    // Switched before the kill: resumed (plus what the first run fetched); not yet: carried.
    assert!(
        kept >= half as u64,
        "{kept} of {half} chunks kept: {restore}"
    );
    assert_eq!(restore["chunks_verified"], n as u64, "{restore}");
    assert_eq!(restore["peers_penalised"], 0, "{restore}");
    p.shutdown().await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_offering_a_manifest_whose_chunks_do_not_prove_are_banned_and_the_restore_goes_on() {
    let d = dirs(5);
    let (genesis, _) = test_genesis("ckpt-switch-bad-manifest", d[0].path());
    let a = node(d[0].path(), &genesis, Vec::new(), 1, SyncMode::Full).await;
    height_at_least(&a, 3).await;
    let older = checkpoint_now(d[0].path(), &a).await;
    height_at_least(&a, older.manifest.height + 1 + FINALITY).await;
    let newer = checkpoint_now(d[0].path(), &a).await;
    // Its makers alter a chunk's leaves and list the altered bytes (hash and size recomputed):
    // the hashes check out, the range proof does not.
    let mut bad = newer.clone();
    let last = bad.chunks.len() - 1;
    let leaf_byte = 4 + 4 + 8 + 8 + 4 + 10;
    bad.chunks[last][leaf_byte] ^= 0x40;
    bad.manifest.chunks[last].hash = sha(&bad.chunks[last]);
    seed(d[1].path(), &older);
    seed(d[2].path(), &bad);
    seed(d[3].path(), &bad);
    let bootstrap = vec![a.peer_addr().unwrap()];
    let mut peers = vec![a.peer_addr().unwrap()];
    let mut others = Vec::new();
    for dir in &d[1..4] {
        let n = node(dir.path(), &genesis, bootstrap.clone(), 1, SyncMode::Full).await;
        peers.push(n.peer_addr().unwrap());
        others.push(n);
    }
    for n in &others {
        height_at_least(n, newer.manifest.height + FINALITY).await;
    }
    // At the newest height only the bad manifest is offered by two peers: it is chosen first.
    let restored = node(
        d[4].path(),
        &genesis,
        peers.clone(),
        1,
        SyncMode::Checkpoint,
    )
    .await;
    let status = restored.status().checkpoint_restore;
    assert!(status.done, "{status:?}");
    assert_eq!(status.height, older.manifest.height, "{status:?}");
    assert_eq!(status.peers_penalised, 2, "{status:?}");
    follows(&restored, &a, older.manifest.height).await;
    restored.shutdown().await;
    let store = modnode::store::SledStore::open(&d[4].path().join("chain")).unwrap();
    let mut banned: Vec<[u8; 32]> = store
        .ban_list()
        .unwrap()
        .load(modnode::clock::unix_ms())
        .unwrap()
        .into_iter()
        .map(|(node, _)| node)
        .collect();
    banned.sort();
    let mut offerers = vec![peers[2].node, peers[3].node];
    offerers.sort();
    assert_eq!(
        banned, offerers,
        "exactly the bad manifest's offerers are banned"
    );
    for n in others {
        n.shutdown().await;
    }
    a.shutdown().await;
}
