//! The restore progress store on real disk: verified chunks go to an append-only
//! log and get a sled record each only once they are durable; what a crash or a damaged file
//! leaves behind is dropped (and fetched again), never a failed restore; a switch keeps the
//! carried chunks where they are, and one abandoning most of the log starts a new file;
//! finishing or dropping the progress removes the log.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use modnode::checkpoint::{
    Checkpoint, ManifestLimits, RestoreStore, Restorer, synthetic_state, verify_all,
};
use modnode::state::State;

use super::checkpoint::{module, sha};
use super::checkpoint_switch::make;

/// Two checkpoints of the same registry at different heights (the same chunks, different ids).
fn two_checkpoints() -> (Checkpoint, Checkpoint) {
    let m = module("checkpoint-v1");
    let s = synthetic_state(300, 9).unwrap();
    let mut eth1 = s.eth1().clone();
    eth1.vote_period += 1;
    let later = State::new(
        modnode::hashes::BlockHash::new([1; 32]),
        s.height() + 1,
        s.registry().clone(),
        eth1,
        s.schedule().clone(),
    );
    let old = make(&m, &s, 100);
    let new = make(&m, &later, 200);
    assert!(old.chunks.len() >= 4, "{} chunks", old.chunks.len());
    assert_eq!(old.chunks, new.chunks);
    assert_ne!(old.manifest.id(), new.manifest.id());
    (old, new)
}

/// The chunk log files in `dir`, sorted, with their lengths.
fn logs(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("chunks-") && name.ends_with(".log")
        })
        .map(|p| {
            let len = std::fs::metadata(&p).unwrap().len();
            (p, len)
        })
        .collect();
    out.sort();
    out
}

fn only_log(dir: &Path) -> (PathBuf, u64) {
    let all = logs(dir);
    assert_eq!(all.len(), 1, "{all:?}");
    all.into_iter().next().unwrap()
}

fn indices(chunks: &[(usize, Vec<u8>)]) -> Vec<usize> {
    chunks.iter().map(|(i, _)| *i).collect()
}

fn put(store: &RestoreStore, cp: &Checkpoint, range: std::ops::Range<usize>) {
    for i in range {
        store
            .put_chunk(i, &cp.chunks[i], &sha(&cp.chunks[i]))
            .unwrap();
    }
}

/// Progress in `dir` restoring `cp`, its chunks `range` stored and flushed, the store closed.
fn stored_progress(dir: &Path, cp: &Checkpoint, range: std::ops::Range<usize>) {
    let store = RestoreStore::open(dir).unwrap();
    store.begin(&cp.manifest).unwrap();
    put(&store, cp, range);
    store.flush().unwrap();
}

fn bytes_of(cp: &Checkpoint, range: std::ops::Range<usize>) -> u64 {
    cp.chunks[range].iter().map(|c| c.len() as u64).sum()
}

#[test]
fn a_chunk_is_recorded_only_once_flushed_and_an_unrecorded_tail_is_cut_on_open() {
    let (cp, _) = two_checkpoints();
    let n = cp.chunks.len();
    let half = n / 2;
    let dir = tempfile::tempdir().unwrap();
    {
        let store = RestoreStore::open(dir.path()).unwrap();
        store.begin(&cp.manifest).unwrap();
        put(&store, &cp, 0..half);
        store.flush().unwrap();
        // Put, never flushed: the process dies here (whatever of them reached the log —
        // written through the page cache, or a full stage of direct writes — is unrecorded).
        put(&store, &cp, half..n);
        let written = only_log(dir.path()).1;
        assert!(
            (bytes_of(&cp, 0..half)..=bytes_of(&cp, 0..n)).contains(&written),
            "{written}"
        );
        // And bytes of an append torn by the crash follow them.
        OpenOptions::new()
            .append(true)
            .open(only_log(dir.path()).0)
            .unwrap()
            .write_all(&[0xab; 1000])
            .unwrap();
    }
    let store = RestoreStore::open(dir.path()).unwrap();
    assert_eq!(store.manifest().unwrap().unwrap(), cp.manifest);
    let chunks = store.chunks().unwrap();
    assert_eq!(indices(&chunks), (0..half).collect::<Vec<_>>());
    for (i, bytes) in &chunks {
        assert_eq!(bytes, &cp.chunks[*i]);
    }
    assert_eq!(
        only_log(dir.path()).1,
        bytes_of(&cp, 0..half),
        "the unrecorded tail is cut"
    );
    put(&store, &cp, half..n);
    store.flush().unwrap();
    drop(store);
    let store = RestoreStore::open(dir.path()).unwrap();
    assert_eq!(
        indices(&store.chunks().unwrap()),
        (0..n).collect::<Vec<_>>()
    );
}

#[test]
fn a_torn_tail_a_truncated_log_or_damaged_bytes_lose_only_their_chunks_and_the_restore_finishes() {
    let (cp, _) = two_checkpoints();
    let m = module("checkpoint-v1");
    let n = cp.chunks.len();
    let dir = tempfile::tempdir().unwrap();
    {
        let store = RestoreStore::open(dir.path()).unwrap();
        store.begin(&cp.manifest).unwrap();
        let all: Vec<(usize, Vec<u8>)> = cp.chunks.iter().cloned().enumerate().collect();
        let mut r = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
        verify_all(&mut r, &m, &all, 2, Some(&store)).unwrap();
    }
    let (log, full) = only_log(dir.path());
    assert_eq!(full, bytes_of(&cp, 0..n));

    // A torn append after the last record: ignored, and cut.
    OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(&[0xab; 1000])
        .unwrap();
    let store = RestoreStore::open(dir.path()).unwrap();
    assert_eq!(
        indices(&store.chunks().unwrap()),
        (0..n).collect::<Vec<_>>()
    );
    assert_eq!(only_log(dir.path()).1, full);
    drop(store);

    // The file lost its last byte: the record pointing past the end is dropped, no error.
    let file = OpenOptions::new().write(true).open(&log).unwrap();
    file.set_len(full - 1).unwrap();
    drop(file);
    let store = RestoreStore::open(dir.path()).unwrap();
    let chunks = store.chunks().unwrap();
    assert_eq!(chunks.len(), n - 1, "only the chunk that was cut is lost");
    drop(store);

    // A byte flipped inside a recorded chunk: that record goes when it is read back.
    let file = OpenOptions::new().write(true).open(&log).unwrap();
    file.write_all_at(&[0x5a], 3).unwrap();
    drop(file);
    let store = RestoreStore::open(dir.path()).unwrap();
    let chunks = store.chunks().unwrap();
    assert_eq!(chunks.len(), n - 2);
    assert_eq!(store.chunks().unwrap().len(), n - 2, "the record is gone");

    // The restore goes on from what is left, fetching the two lost chunks again.
    let mut r = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
    verify_all(&mut r, &m, &chunks, 2, None).unwrap();
    let missing = r.missing();
    assert_eq!(missing.len(), 2, "{missing:?}");
    let fetched: Vec<_> = missing.iter().map(|&i| (i, cp.chunks[i].clone())).collect();
    verify_all(&mut r, &m, &fetched, 1, Some(&store)).unwrap();
    assert_eq!(r.finish().unwrap().state_root, cp.manifest.state_root);
    drop(store);

    // The log removed altogether: every record is dropped, nothing fails.
    std::fs::remove_file(&log).unwrap();
    let store = RestoreStore::open(dir.path()).unwrap();
    assert!(store.chunks().unwrap().is_empty());
    assert_eq!(store.manifest().unwrap().unwrap(), cp.manifest);
}

#[test]
fn a_switch_keeps_carried_chunks_in_place_and_one_abandoning_most_of_the_log_starts_a_new_one() {
    let (old, new) = two_checkpoints();
    let n = old.chunks.len();
    let full = bytes_of(&old, 0..n);
    let dir = tempfile::tempdir().unwrap();
    let store = RestoreStore::open(dir.path()).unwrap();
    store.begin(&old.manifest).unwrap();
    put(&store, &old, 0..n);
    store.flush().unwrap();
    let (first_log, len) = only_log(dir.path());
    assert_eq!(len, full);

    // Every chunk carries over: the records are re-keyed, no byte is written.
    let all: Vec<(usize, Vec<u8>)> = new.chunks.iter().cloned().enumerate().collect();
    store.switch(&new.manifest, &all).unwrap();
    assert_eq!(only_log(dir.path()), (first_log.clone(), full));
    assert_eq!(store.chunks().unwrap(), all);

    // Only chunk 1 carries back: most of the log would be abandoned, so it moves to a new
    // file and the old one goes.
    let one = vec![(1, old.chunks[1].clone())];
    store.switch(&old.manifest, &one).unwrap();
    let (second_log, len) = only_log(dir.path());
    assert_ne!(second_log, first_log);
    assert_eq!(len, old.chunks[1].len() as u64);
    assert_eq!(store.chunks().unwrap(), one);
    drop(store);
    let store = RestoreStore::open(dir.path()).unwrap();
    assert_eq!(store.manifest().unwrap().unwrap(), old.manifest);
    assert_eq!(store.chunks().unwrap(), one);

    // Switching back and forth, fetching everything in between each time: the log never
    // holds more than one restore's worth plus what the last switch carried.
    for round in 0..6 {
        let cp = if round % 2 == 0 { &new } else { &old };
        let carried: Vec<_> = store.chunks().unwrap();
        store.switch(&cp.manifest, &carried).unwrap();
        let missing: Vec<usize> = (0..n).filter(|i| !indices(&carried).contains(i)).collect();
        for &i in &missing {
            put(&store, cp, i..i + 1);
        }
        store.flush().unwrap();
        assert_eq!(only_log(dir.path()).1, full, "round {round}");
        let keep = vec![(round % n, cp.chunks[round % n].clone())];
        let other = if round % 2 == 0 { &old } else { &new };
        store.switch(&other.manifest, &keep).unwrap();
        let (_, len) = only_log(dir.path());
        assert_eq!(len, keep[0].1.len() as u64, "round {round}");
    }

    // Beginning another checkpoint drops every chunk, and the log with them.
    let mut other = old.manifest.clone();
    other.height += 7;
    store.begin(&other).unwrap();
    assert!(store.chunks().unwrap().is_empty());
    assert!(logs(dir.path()).is_empty(), "{:?}", logs(dir.path()));
}

#[test]
fn a_log_left_by_a_switch_that_never_committed_is_removed_and_the_old_progress_kept() {
    let (cp, _) = two_checkpoints();
    let dir = tempfile::tempdir().unwrap();
    stored_progress(dir.path(), &cp, 0..2);
    let (log, _) = only_log(dir.path());
    // What a crash between writing a new generation and committing its records leaves.
    let orphan = dir.path().join("chunks-9.log");
    std::fs::write(&orphan, b"carried bytes never recorded").unwrap();
    let store = RestoreStore::open(dir.path()).unwrap();
    assert!(!orphan.exists());
    assert_eq!(only_log(dir.path()).0, log);
    assert_eq!(indices(&store.chunks().unwrap()), vec![0, 1]);
}

#[test]
fn clearing_the_progress_removes_the_log() {
    let (cp, _) = two_checkpoints();
    let dir = tempfile::tempdir().unwrap();
    let store = RestoreStore::open(dir.path()).unwrap();
    store.begin(&cp.manifest).unwrap();
    put(&store, &cp, 0..3);
    store.flush().unwrap();
    assert_eq!(logs(dir.path()).len(), 1);
    store.clear().unwrap();
    assert!(logs(dir.path()).is_empty());
    drop(store);
    let store = RestoreStore::open(dir.path()).unwrap();
    assert!(store.manifest().unwrap().is_none());
    assert!(store.chunks().unwrap().is_empty());
}

/// Bytes of every file under `dir`.
fn disk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            if p.is_dir() {
                disk_bytes(&p)
            } else {
                std::fs::metadata(&p).unwrap().len()
            }
        })
        .sum()
}

/// `cp`'s manifest grown to `chunks` entries, as large as a checkpoint-v3 manifest of about
/// `chunks` × 256 validators (only stored here, never verified).
fn large_manifest(cp: &Checkpoint, chunks: u64) -> modnode::checkpoint::Manifest {
    let mut manifest = cp.manifest.clone();
    let entry = manifest.chunks[0];
    manifest.chunks = (0..chunks)
        .map(|i| modnode::checkpoint::ChunkEntry {
            hash: sha(&i.to_le_bytes()),
            start: i,
            end: i + 1,
            ..entry
        })
        .collect();
    manifest
}

#[test]
fn recording_chunks_flush_after_flush_does_not_write_a_large_manifest_again() {
    // A checkpoint-v3 manifest at 2M validators is ~650 KB. Beside the records in one sled
    // tree, each flush rewrote the node holding it as a blob: 100 flushes left ~40 MB of
    // blobs behind (and wrote more) for 100 small chunks.
    let (cp, _) = two_checkpoints();
    let manifest = large_manifest(&cp, 10_000);
    let manifest_bytes = manifest.encode().len() as u64;
    assert!(manifest_bytes > 400_000, "{manifest_bytes}");
    let dir = tempfile::tempdir().unwrap();
    let store = RestoreStore::open(dir.path()).unwrap();
    store.begin(&manifest).unwrap();
    for i in 0..100usize {
        let bytes = vec![i as u8; 1000];
        store.put_chunk(i, &bytes, &sha(&bytes)).unwrap();
        store.flush().unwrap();
    }
    drop(store);
    let progress = disk_bytes(&dir.path().join("progress"));
    assert!(
        progress < 3 * manifest_bytes,
        "the progress database holds {progress} bytes for a {manifest_bytes}-byte manifest and 100 records"
    );
    let store = RestoreStore::open(dir.path()).unwrap();
    assert_eq!(store.chunks().unwrap().len(), 100);
}

#[test]
fn progress_written_with_the_manifest_beside_the_records_opens_with_both() {
    let (cp, _) = two_checkpoints();
    let dir = tempfile::tempdir().unwrap();
    stored_progress(dir.path(), &cp, 0..3);
    // The layout before the manifest had a tree of its own.
    {
        let db = sled::open(dir.path().join("progress")).unwrap();
        let records = db.open_tree("checkpoint-restore").unwrap();
        let manifests = db.open_tree("checkpoint-restore-manifest").unwrap();
        let manifest = manifests.remove(b"manifest").unwrap().unwrap();
        records.insert(b"manifest", manifest).unwrap();
        db.flush().unwrap();
    }
    let store = RestoreStore::open(dir.path()).unwrap();
    assert_eq!(store.manifest().unwrap(), Some(cp.manifest.clone()));
    assert_eq!(indices(&store.chunks().unwrap()), vec![0, 1, 2]);
    // Beginning the same checkpoint again keeps its progress.
    store.begin(&cp.manifest).unwrap();
    assert_eq!(indices(&store.chunks().unwrap()), vec![0, 1, 2]);
    drop(store);
    let db = sled::open(dir.path().join("progress")).unwrap();
    let records = db.open_tree("checkpoint-restore").unwrap();
    assert!(
        records.get(b"manifest").unwrap().is_none(),
        "moved, not copied"
    );
}
