//! Checkpoints to and from files: a checkpoint exported from a stopped node
//! starts an empty node (`--restore-from`) on the same state as a restore from peers, and that
//! node then follows the chain; a tampered file is refused naming the chunk, a truncated one
//! naming where it ends, both naming the file.

use std::path::Path;

use modnode::admin::client::{self, Target};
use modnode::checkpoint::RestoreError;
use modnode::checkpoint::file::CheckpointFileError;
use modnode::node::checkpoint_file::{
    ExportError, FileRestoreError, FileRestoreParts, export, restore_from_file,
};
use modnode::node::metrics::RestoreCounters;
use modnode::node::{Node, NodeConfig, NodeError, ProgressDisplay, SyncMode};
use serde_json::Value;

use super::checkpoint_sync::{checkpoint_now, follows, height_at_least, node, test_genesis};
use super::network::{dirs, start_edited};

/// The state after `height` as the node's admin API answers it.
async fn state_at(dir: &Path, height: u64) -> Value {
    let target = Target::data_dir(dir).unwrap();
    client::state(&target, &format!("height={height}"))
        .await
        .unwrap()
}

/// Where chunk `index` starts in an exported file, and its size.
fn chunk_span(file: &[u8], sizes: &[u32], index: usize) -> (usize, usize) {
    let u32_at = |at: usize| u32::from_be_bytes(file[at..at + 4].try_into().unwrap()) as usize;
    let manifest_len = u32_at(10);
    let block_len = u32_at(14 + manifest_len);
    let first = 18 + manifest_len + block_len;
    let start = first + sizes[..index].iter().map(|&s| s as usize).sum::<usize>();
    (start, sizes[index] as usize)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_checkpoint_restores_the_same_state_as_peers_serve_and_follows_the_chain() {
    let d = dirs(3);
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("backup.ckpt");
    let (genesis, _) = test_genesis("ckpt-file-restore", d[0].path());
    let a = node(d[0].path(), &genesis, Vec::new(), 2, SyncMode::Full).await;
    height_at_least(&a, 5).await;
    let cp = checkpoint_now(d[0].path(), &a).await;
    assert!(cp.chunks.len() > 1);
    let height = cp.manifest.height;
    assert!(height > 1, "a block below the checkpoint to be absent");
    a.shutdown().await;

    let summary = export(d[0].path(), "latest", &file).unwrap();
    assert_eq!(summary.id, cp.manifest.id());
    assert_eq!(summary.height, height);
    assert_eq!(summary.chunks, cp.chunks.len());
    assert_eq!(summary.file_bytes, std::fs::metadata(&file).unwrap().len());
    // By id prefix too; an unknown id names what is stored.
    let by_id = files.path().join("by-id.ckpt");
    export(d[0].path(), &hex::encode(cp.manifest.id())[..12], &by_id).unwrap();
    assert_eq!(
        std::fs::read(&by_id).unwrap(),
        std::fs::read(&file).unwrap()
    );
    let unknown = export(d[0].path(), "ffffffffffff", &by_id).unwrap_err();
    assert!(matches!(unknown, ExportError::NotFound { .. }), "{unknown}");
    assert!(unknown.to_string().contains(&hex::encode(cp.manifest.id())));

    // The source runs again. The file's node starts without peers first, so its head stays at
    // H and its state there is the restored one itself (a restored node answers `/state` only
    // from its base up, and a synced one may have moved far past it).
    let a = node(d[0].path(), &genesis, Vec::new(), 2, SyncMode::Full).await;
    let bootstrap = vec![a.peer_addr().unwrap()];
    let restore_from_file = |bootstrap: Vec<modnode_peers::PeerAddr>| {
        let file = file.clone();
        start_edited(
            d[2].path(),
            &genesis,
            bootstrap,
            Default::default(),
            move |c| {
                c.sync_mode = SyncMode::Full;
                c.restore_from = Some(file);
            },
        )
    };
    let from_file = restore_from_file(Vec::new()).await;
    let status = from_file.status().checkpoint_restore;
    assert!(status.done, "{status:?}");
    assert_eq!(status.height, height);
    assert_eq!(status.chunks_total, cp.chunks.len() as u64);
    assert_eq!(status.chunks_verified, status.chunks_total);
    assert_eq!(from_file.status().height, height);
    // Restored, not replayed: nothing below the checkpoint is stored (answered "kept from the
    // checkpoint up"); block H is the source's.
    match from_file.chain().blocks(height - 1, 1, usize::MAX).await {
        Err(modnode::node::chain_worker::WorkerError::Pruned { below, .. }) => {
            assert_eq!(below, height);
        }
        other => panic!("blocks below the checkpoint: {other:?}"),
    }
    assert_eq!(
        from_file
            .chain()
            .blocks(height, 1, usize::MAX)
            .await
            .unwrap(),
        a.chain().blocks(height, 1, usize::MAX).await.unwrap()
    );
    // The rebuilt state is the source's at H, field by field.
    let (file_state, source_state) = (
        state_at(d[2].path(), height).await,
        state_at(d[0].path(), height).await,
    );
    for field in [
        "block_hash",
        "state_root",
        "registry_root",
        "validators",
        "balance_sum_gwei",
    ] {
        assert_eq!(file_state[field], source_state[field], "{field}");
    }
    assert_eq!(
        file_state["state_root"],
        hex::encode(cp.manifest.state_root)
    );
    from_file.shutdown().await;

    // A network restore of the same checkpoint, and the file's node started again with the same
    // flag and a peer: it goes on from its chain. Both import the source's blocks after H, each
    // checked against the state root its header commits to, so both restored the same state.
    let from_peers = node(
        d[1].path(),
        &genesis,
        bootstrap.clone(),
        1,
        SyncMode::Checkpoint,
    )
    .await;
    let status = from_peers.status().checkpoint_restore;
    assert!(status.done && status.height == height, "{status:?}");
    let from_file = restore_from_file(bootstrap).await;
    assert_eq!(
        from_file.status().checkpoint_restore.chunks_verified,
        0,
        "not restored twice"
    );
    follows(&from_peers, &a, height).await;
    follows(&from_file, &a, height).await;
    from_file.shutdown().await;
    from_peers.shutdown().await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_or_truncated_checkpoint_file_is_refused_naming_the_file_and_the_chunk() {
    let d = dirs(3);
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("backup.ckpt");
    let (genesis, _) = test_genesis("ckpt-file-tampered", d[0].path());
    let a = node(d[0].path(), &genesis, Vec::new(), 1, SyncMode::Full).await;
    height_at_least(&a, 3).await;
    let cp = checkpoint_now(d[0].path(), &a).await;
    assert!(cp.chunks.len() > 2);
    let modules = a.modules().clone();
    a.shutdown().await;
    export(d[0].path(), "latest", &file).unwrap();
    let good = std::fs::read(&file).unwrap();
    let sizes: Vec<u32> = cp.manifest.chunks.iter().map(|c| c.size).collect();

    // One byte of chunk 2 flipped: the node does not start, and says which chunk and file.
    let (start, len) = chunk_span(&good, &sizes, 2);
    assert_eq!(&good[start..start + len], cp.chunks[2].as_slice());
    let mut tampered = good.clone();
    tampered[start + len / 2] ^= 0x01;
    let tampered_path = files.path().join("tampered.ckpt");
    std::fs::write(&tampered_path, &tampered).unwrap();
    let mut config = NodeConfig::new(d[1].path().to_path_buf(), genesis.clone());
    config.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    config.admin_listen = None;
    config.restore_from = Some(tampered_path.clone());
    let err = match Node::start(config).await {
        Ok(_) => panic!("a tampered checkpoint file was restored"),
        Err(e) => e,
    };
    let text = err.to_string();
    assert!(
        matches!(
            &err,
            NodeError::RestoreFromFile(FileRestoreError::Verify {
                source: RestoreError::Tampered { index: 2, .. },
                ..
            })
        ),
        "{text}"
    );
    assert!(text.contains("chunk 2 is tampered"), "{text}");
    assert!(text.contains("tampered.ckpt"), "{text}");

    // Cut short inside the last chunk: refused naming that chunk and where the file ends.
    let truncated_path = files.path().join("truncated.ckpt");
    std::fs::write(&truncated_path, &good[..good.len() - 7]).unwrap();
    let counters = RestoreCounters::default();
    let parts = FileRestoreParts {
        file: &truncated_path,
        genesis: &genesis,
        modules: &modules,
        data_dir: d[2].path(),
        counters: &counters,
        threads: 1,
        progress: ProgressDisplay::Log,
    };
    let err = tokio::task::block_in_place(|| restore_from_file(&parts)).unwrap_err();
    let last = cp.chunks.len() - 1;
    match &err {
        FileRestoreError::File(CheckpointFileError::Truncated {
            what,
            offset,
            missing,
            ..
        }) => {
            assert_eq!(what, &format!("chunk {last}"));
            assert_eq!(*offset, (good.len() - 7) as u64);
            assert_eq!(*missing, 7);
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("truncated.ckpt"), "{err}");
    assert!(!counters.done.load(std::sync::atomic::Ordering::Relaxed));

    // The untouched file restores into the directory the refusals left empty.
    let restored = tokio::task::block_in_place(|| {
        restore_from_file(&FileRestoreParts {
            file: &file,
            ..parts
        })
    })
    .unwrap();
    assert_eq!(restored, Some(cp.manifest.height));
    // Again with the same file: the chain is already there and goes on from itself.
    let again = tokio::task::block_in_place(|| {
        restore_from_file(&FileRestoreParts {
            file: &file,
            ..parts
        })
    })
    .unwrap();
    assert_eq!(again, None);
}
