//! Restore as a pipeline: chunks verified on worker threads and written in
//! batches are reported only once durable and rebuild the state whatever order they finish
//! in; a bad chunk in the middle of the stream is refused, its peer dropped and the chunk
//! fetched again from another; a restore interrupted mid-pipeline resumes from (at least)
//! every chunk it reported; a slow writer backs up the fetcher rather than letting chunks
//! pile up in memory.

use std::collections::BTreeSet;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use modnode::checkpoint::{
    BlockRef, Checkpoint, ChunkOpener, ChunkSink, CreateOptions, Fault, FetchConfig, Fetcher,
    ManifestLimits, NoSink, Outcome, Pipeline, PipelineConfig, RestoreError, RestoreStore,
    RestoreStoreError, Restorer, SubmitError, create, synthetic_state, verify_all,
};
use modnode::state::merkle::Hash32;

use super::checkpoint::{module, v3_leaves_per_chunk};

/// A checkpoint-v3 checkpoint of a state of 10 chunks.
fn checkpoint() -> Checkpoint {
    checkpoint_of(10, 11)
}

/// A checkpoint-v3 checkpoint of a synthetic state (`seed`) of `chunks` chunks.
fn checkpoint_of(chunks: u32, seed: u64) -> Checkpoint {
    let m = module("checkpoint-v3");
    let state = synthetic_state(chunks * v3_leaves_per_chunk(), seed).unwrap();
    let options = CreateOptions {
        target_chunk_bytes: 1 << 20,
        threads: 2,
        background: false,
    };
    let at = BlockRef {
        height: 5,
        hash: modnode::hashes::BlockHash([5; 32]),
    };
    let cp = create(&m, Arc::new(state), at, options).unwrap();
    assert_eq!(cp.chunks.len(), chunks as usize);
    cp
}

fn opener() -> Arc<dyn ChunkOpener> {
    Arc::new(module("checkpoint-v3"))
}

fn config(capacity: usize) -> PipelineConfig {
    PipelineConfig::new(2, capacity)
}

#[test]
fn each_chunk_is_reported_once_after_it_is_durable_and_the_state_rebuilds_in_any_order() {
    let cp = checkpoint();
    let dir = tempfile::tempdir().unwrap();
    let store = RestoreStore::open(dir.path()).unwrap();
    let mut restorer = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
    store.begin(restorer.manifest()).unwrap();
    let mut pipeline = Pipeline::start(restorer.verifier(), opener(), store.clone(), config(4))
        .expect("pipeline starts");
    // Submitted out of order (7, 4, 1, 8, 5, 2, 9, 6, 3, 0), as answers arrive.
    let mut to_submit: Vec<usize> = (0..10).map(|i| (i * 7 + 7) % 10).collect();
    let mut reported = Vec::new();
    while reported.len() < 10 {
        while pipeline.has_room()
            && let Some(index) = to_submit.pop()
        {
            pipeline
                .submit(index, cp.chunks[index].clone(), ())
                .unwrap();
        }
        match pipeline
            .next_blocking()
            .expect("a chunk is in the pipeline")
        {
            Outcome::Stored { chunk, .. } => {
                let index = chunk.index;
                // Durable before it counts: the store lists it at the moment it is reported.
                let stored: BTreeSet<usize> = store
                    .chunks()
                    .unwrap()
                    .into_iter()
                    .map(|(i, _)| i)
                    .collect();
                assert!(
                    stored.contains(&index),
                    "chunk {index} reported before stored"
                );
                restorer.insert(chunk).unwrap();
                reported.push(index);
            }
            other => panic!("chunk {} not stored: {other:?}", other.index()),
        }
    }
    assert!(pipeline.next_blocking().is_none());
    let mut sorted = reported.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..10).collect::<Vec<_>>(),
        "each reported exactly once"
    );
    drop(pipeline);
    assert_eq!(
        restorer.finish().unwrap().state_root,
        cp.manifest.state_root
    );
}

/// Verifiers take every chunk waiting (up to sixteen) and hash them together: a chunk of the
/// wrong size and two tampered ones among forty submitted at once are each refused for what
/// is wrong with them, and every other chunk is verified with its own hash.
#[test]
fn chunks_hashed_together_are_each_judged_by_their_own_bytes() {
    let m = module("checkpoint-v3");
    let cp = checkpoint_of(40, 12);
    let mut restorer = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
    let mut pipeline = Pipeline::start(restorer.verifier(), opener(), NoSink, config(40)).unwrap();
    for (index, chunk) in cp.chunks.iter().enumerate() {
        let mut bytes = chunk.clone();
        match index {
            3 => {
                bytes.pop();
            }
            7 | 20 => bytes[100] ^= 1,
            _ => {}
        }
        pipeline.submit(index, bytes, ()).unwrap();
    }
    let mut refused = Vec::new();
    while let Some(outcome) = pipeline.next_blocking() {
        match outcome {
            Outcome::Stored { chunk, .. } => {
                restorer.insert(chunk).unwrap();
            }
            Outcome::Refused { index, error, .. } => refused.push((index, error)),
            Outcome::NotStored { reason, .. } => panic!("{reason}"),
        }
    }
    refused.sort_by_key(|(index, _)| *index);
    let indices: Vec<usize> = refused.iter().map(|(index, _)| *index).collect();
    assert_eq!(indices, vec![3, 7, 20]);
    assert!(
        matches!(refused[0].1, RestoreError::WrongSize { index: 3, .. }),
        "{}",
        refused[0].1
    );
    for (index, error) in &refused[1..] {
        assert!(
            matches!(error, RestoreError::Tampered { index: i, .. } if i == index),
            "{error}"
        );
    }
    assert_eq!(restorer.missing(), vec![3, 7, 20]);
    for index in [3, 7, 20] {
        let chunk = restorer.verify(&m, index, &cp.chunks[index]).unwrap();
        restorer.insert(chunk).unwrap();
    }
    drop(pipeline);
    assert_eq!(
        restorer.finish().unwrap().state_root,
        cp.manifest.state_root
    );
}

#[test]
fn a_bad_chunk_mid_pipeline_is_refused_its_peer_dropped_and_it_is_fetched_again() {
    let cp = checkpoint();
    let bad = 5;
    let mut restorer = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
    let fetch = FetchConfig {
        max_unverified: 8,
        ..FetchConfig::default()
    };
    let mut fetcher = Fetcher::new(restorer.missing(), [0usize, 1], fetch);
    let mut pipeline = Pipeline::start(restorer.verifier(), opener(), NoSink, config(8)).unwrap();
    // Whoever is asked for the bad chunk first serves it corrupted.
    let mut corrupted_by = None;
    let mut refused = Vec::new();
    let mut served_by = [None; 10];
    let now = Instant::now();
    for _ in 0..1_000 {
        if restorer.is_complete() {
            break;
        }
        while let Some(request) = fetcher.poll_request(now).unwrap() {
            let mut bytes = cp.chunks[request.index].clone();
            if request.index == bad && corrupted_by.is_none() {
                corrupted_by = Some(request.peer);
                let last = bytes.len() - 1;
                bytes[last] ^= 0x55;
            }
            fetcher.handle_received(&request.peer, request.index, now);
            pipeline.submit(request.index, bytes, request.peer).unwrap();
        }
        match pipeline
            .next_blocking()
            .expect("a chunk is in the pipeline")
        {
            Outcome::Stored { chunk, from } => {
                let index = chunk.index;
                restorer.insert(chunk).unwrap();
                fetcher.handle_verified(&from, index, now);
                served_by[index] = Some(from);
            }
            Outcome::Refused { index, from, error } => {
                assert!(
                    matches!(error, RestoreError::Tampered { index: 5, .. }),
                    "{error}"
                );
                assert_eq!(error.fault(), Fault::ChunkPeer);
                refused.push((index, from));
                fetcher
                    .handle_refused(&from, index, error.fault(), error.to_string())
                    .unwrap();
            }
            Outcome::NotStored { reason, .. } => panic!("{reason}"),
        }
    }
    // The peer that served chunk 5 corrupted was dropped; the other served it again, and
    // every other chunk verified.
    let liar = corrupted_by.expect("chunk 5 was asked for");
    assert_eq!(refused, vec![(bad, liar)]);
    assert_eq!(fetcher.penalised().len(), 1);
    assert_eq!(fetcher.penalised()[0].peer, liar);
    assert_eq!(served_by[bad], Some(1 - liar));
    assert!(fetcher.is_done());
    drop(pipeline);
    assert_eq!(
        restorer.finish().unwrap().state_root,
        cp.manifest.state_root
    );
}

#[test]
fn a_restore_interrupted_mid_pipeline_resumes_from_every_chunk_it_reported() {
    let cp = checkpoint();
    let dir = tempfile::tempdir().unwrap();
    let reported: BTreeSet<usize> = {
        let store = RestoreStore::open(dir.path()).unwrap();
        let mut restorer = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
        store.begin(restorer.manifest()).unwrap();
        let mut pipeline =
            Pipeline::start(restorer.verifier(), opener(), store.clone(), config(10)).unwrap();
        for (index, bytes) in cp.chunks.iter().enumerate() {
            pipeline.submit(index, bytes.clone(), ()).unwrap();
        }
        let mut reported = BTreeSet::new();
        for _ in 0..4 {
            match pipeline.next_blocking().unwrap() {
                Outcome::Stored { chunk, .. } => {
                    reported.insert(chunk.index);
                    restorer.insert(chunk).unwrap();
                }
                other => panic!("chunk {} not stored: {other:?}", other.index()),
            }
        }
        // Interrupted: six chunks still somewhere in the pipeline, the process state gone.
        drop(pipeline);
        drop(restorer);
        reported
    };
    assert_eq!(reported.len(), 4);

    let store = RestoreStore::open(dir.path()).unwrap();
    assert_eq!(store.manifest().unwrap().unwrap().id(), cp.manifest.id());
    let stored = store.chunks().unwrap();
    let stored_indices: BTreeSet<usize> = stored.iter().map(|(i, _)| *i).collect();
    assert!(
        stored_indices.is_superset(&reported),
        "reported {reported:?}, stored {stored_indices:?}"
    );
    let mut restorer = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
    let m = module("checkpoint-v3");
    verify_all(&mut restorer, &m, &stored, 2, None).unwrap();
    let missing = restorer.missing();
    assert_eq!(missing.len(), 10 - stored.len());
    let mut pipeline =
        Pipeline::start(restorer.verifier(), opener(), store.clone(), config(10)).unwrap();
    for &index in &missing {
        pipeline
            .submit(index, cp.chunks[index].clone(), ())
            .unwrap();
    }
    while let Some(outcome) = pipeline.next_blocking() {
        match outcome {
            Outcome::Stored { chunk, .. } => {
                restorer.insert(chunk).unwrap();
            }
            other => panic!("chunk {} not stored: {other:?}", other.index()),
        }
    }
    drop(pipeline);
    assert_eq!(
        restorer.finish().unwrap().state_root,
        cp.manifest.state_root
    );
    assert_eq!(store.chunks().unwrap().len(), 10);
}

/// A sink whose every flush waits for a permit: a disk as slow as the test wants.
struct GatedSink {
    permits: Receiver<()>,
    /// Chunks put so far.
    put: Arc<Mutex<usize>>,
}

impl ChunkSink for GatedSink {
    fn put(&mut self, _: usize, _: &[u8], _: &Hash32) -> Result<(), RestoreStoreError> {
        *self.put.lock().unwrap() += 1;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), RestoreStoreError> {
        // A closed gate (the test is over) lets everything through.
        let _ = self.permits.recv();
        Ok(())
    }
}

#[test]
fn a_slow_writer_backs_up_the_fetcher_instead_of_buffering_chunks() {
    const BOUND: usize = 3;
    let cp = checkpoint();
    let mut restorer = Restorer::new(cp.manifest.clone(), &ManifestLimits::default()).unwrap();
    // Three peers with room for four requests each: twelve, were it not for the bound.
    let mut fetcher = Fetcher::new(
        restorer.missing(),
        [0usize, 1, 2],
        FetchConfig {
            max_unverified: BOUND,
            ..FetchConfig::default()
        },
    );
    let (gate, permits): (Sender<()>, Receiver<()>) = channel();
    let put = Arc::new(Mutex::new(0));
    let sink = GatedSink {
        permits,
        put: put.clone(),
    };
    let mut pipeline = Pipeline::start(restorer.verifier(), opener(), sink, config(BOUND)).unwrap();
    let now = Instant::now();

    // The disk is stuck: the fetcher asks for BOUND chunks and no more.
    let mut asked = Vec::new();
    while let Some(request) = fetcher.poll_request(now).unwrap() {
        asked.push(request);
    }
    assert_eq!(asked.len(), BOUND);
    for request in &asked {
        fetcher.handle_received(&request.peer, request.index, now);
        pipeline
            .submit(
                request.index,
                cp.chunks[request.index].clone(),
                request.peer,
            )
            .unwrap();
    }
    // Answers arrived and their peers are idle, yet nothing more is asked while the chunks
    // wait for the disk, and the pipeline takes no more.
    assert_eq!((fetcher.in_flight(), fetcher.verifying()), (0, BOUND));
    assert!(fetcher.poll_request(now).unwrap().is_none());
    assert_eq!(
        pipeline.submit(9, cp.chunks[9].clone(), 0),
        Err(SubmitError::Full { capacity: BOUND })
    );
    // The writer reaches its first flush (its put counted) and waits there, with every
    // other chunk verified and waiting: still no more than BOUND anywhere.
    let deadline = Instant::now() + Duration::from_secs(60);
    while *put.lock().unwrap() == 0 {
        assert!(Instant::now() < deadline, "the writer never started");
        std::thread::yield_now();
    }
    assert!(fetcher.poll_request(now).unwrap().is_none());

    // The disk moves one flush at a time: each durable chunk frees exactly its room.
    let mut peak = 0;
    for _ in 0..1_000 {
        if restorer.is_complete() {
            break;
        }
        gate.send(()).unwrap();
        let Some(outcome) = pipeline.next_blocking() else {
            panic!("nothing in the pipeline before the restore is complete")
        };
        let Outcome::Stored { chunk, from } = outcome else {
            panic!("chunk {} not stored", outcome.index())
        };
        let index = chunk.index;
        restorer.insert(chunk).unwrap();
        fetcher.handle_verified(&from, index, now);
        while let Some(request) = fetcher.poll_request(now).unwrap() {
            fetcher.handle_received(&request.peer, request.index, now);
            pipeline
                .submit(
                    request.index,
                    cp.chunks[request.index].clone(),
                    request.peer,
                )
                .unwrap();
        }
        peak = peak.max(pipeline.held());
        assert!(fetcher.in_flight() + fetcher.verifying() <= BOUND);
    }
    assert_eq!(peak, BOUND);
    assert!(fetcher.is_done());
    drop(gate);
    drop(pipeline);
    assert_eq!(
        restorer.finish().unwrap().state_root,
        cp.manifest.state_root
    );
}

#[test]
fn a_chunk_being_verified_is_neither_asked_again_nor_timed_out_and_a_refusal_re_asks_it() {
    let mut fetcher = Fetcher::new([0usize], ["a", "b"], FetchConfig::default());
    let start = Instant::now();
    let request = fetcher.poll_request(start).unwrap().expect("a request");
    fetcher.handle_received(&request.peer, 0, start);
    assert!(fetcher.is_verifying(0));
    assert!(!fetcher.is_done());
    // Long past the request's deadline: nothing expires, nobody takes it over, no deadline
    // to wait for — the pipeline's outcome decides.
    let later = request.deadline + Duration::from_secs(3_600);
    assert!(fetcher.handle_timeouts(later).is_empty());
    assert!(fetcher.poll_request(later).unwrap().is_none());
    assert_eq!(fetcher.next_deadline(), None);
    // A second answer (another peer's, after a reassignment) changes nothing.
    fetcher.handle_received(&"b", 0, later);
    assert_eq!(fetcher.verifying(), 1);
    // Refused (our side failed, say): asked again.
    fetcher
        .handle_refused(&request.peer, 0, Fault::Ours, "disk".into())
        .unwrap();
    assert!(!fetcher.is_verifying(0));
    let again = fetcher.poll_request(later).unwrap().expect("asked again");
    assert_eq!(again.index, 0);
    fetcher.handle_received(&again.peer, 0, later);
    fetcher.handle_verified(&again.peer, 0, later);
    assert!(fetcher.is_done());
}
