//! The sled-backed [`KvStore`].
//!
//! sled 0.34 writes asynchronously and only guarantees recovery of what was flushed, so every
//! commit is one `apply_batch` (atomic) followed by `flush` (durable) before it returns; an
//! unflushed commit (pruning's) is the `apply_batch` alone.
//!
//! The chain's tree keeps its bulk values (blocks, undo records, per-block eth1 and schedule
//! records, state chunks) in a [`ValueLog`] beside sled, and only their pointers in sled; a
//! background thread at the lowest priority reclaims the log's overwritten space.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use super::value_log::{self, LogTotals, ValueLog};
use super::{KvStore, StoreError, WriteBatch};

/// Live bytes a reclaiming step of the value log moves per lock hold.
const COLLECT_STEP_BYTES: usize = 256 << 10;
/// How often the reclaiming thread looks for a segment under half live.
const COLLECT_POLL: Duration = Duration::from_millis(500);

/// A tree and, for the chain's tree, its value log.
struct Keyspace {
    tree: sled::Tree,
    log: Option<ValueLog>,
}

/// A sled database holding the chain in one tree (or, from [`KvStore::tree`], another tree of
/// the same database).
pub struct SledStore {
    path: PathBuf,
    db: sled::Db,
    /// The keyspace; the reclaiming thread holds it weakly, so dropping the store closes sled.
    space: Arc<Keyspace>,
    /// The tree's name, for messages.
    name: String,
    /// The value log's reclaiming thread (the chain's tree only): stopped and joined when the
    /// store drops, so sled is closed when the drop returns.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "held for its drop, which stops the thread")
    )]
    collector: Option<Collector>,
}

/// What the store and its reclaiming thread share.
#[derive(Default)]
struct CollectorSignal {
    /// Set by the store's drop: the thread returns before its next step.
    stop: AtomicBool,
    /// The thread's Linux thread id (0 until it has started), so a drop can raise it out of
    /// `SCHED_IDLE` to finish a step nothing else would give it CPU time for.
    tid: AtomicI32,
    /// Test hook: hold the keyspace inside a step until the store drops.
    #[cfg(test)]
    hold_in_step: AtomicBool,
    /// Test hook: the thread is holding the keyspace inside a step.
    #[cfg(test)]
    holding: AtomicBool,
}

/// The reclaiming thread of a store's value log.
struct Collector {
    signal: Arc<CollectorSignal>,
    handle: Option<JoinHandle<()>>,
}

impl Drop for Collector {
    /// Stops the thread and waits for it. A step in progress (at most
    /// [`COLLECT_STEP_BYTES`] moved and one flush) holds the keyspace, and with it sled's lock
    /// on the directory: without the wait, reopening the store right after dropping it — a
    /// restart, a test — fails with `WouldBlock` until an idle-priority thread on a busy
    /// machine gets to finish.
    fn drop(&mut self) {
        self.signal.stop.store(true, Ordering::Release);
        let Some(handle) = self.handle.take() else {
            return;
        };
        let tid = self.signal.tid.load(Ordering::Acquire);
        if tid != 0 {
            crate::thread_priority::raise_to_normal(tid);
        }
        handle.thread().unpark();
        if handle.join().is_err() {
            tracing::warn!("the value-log thread panicked");
        }
    }
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SledStore {
    /// Opens (or creates) the database in `path`.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let err = |e: sled::Error| StoreError::Backend {
            path: path.display().to_string(),
            message: format!(
                "{e}; if the node was killed mid-write and sled cannot recover, move the directory \
                 aside and resync"
            ),
        };
        let db = crate::store::open_sled(&config(path)).map_err(err)?;
        let chain = db.open_tree("chain").map_err(err)?;
        let log = ValueLog::open(&path.join("values"), &chain)?;
        let space = Arc::new(Keyspace {
            tree: chain,
            log: Some(log),
        });
        let collector = spawn_collector(Arc::downgrade(&space), path)?;
        Ok(Self {
            path: path.to_path_buf(),
            db,
            space,
            name: "chain".into(),
            collector: Some(collector),
        })
    }

    /// Opens and closes the database at `path` once its last handle is gone (waiting up to
    /// `within` for that): sled writes its recovery snapshot only when it opens, and the next
    /// open replays everything logged after that snapshot, so a node that stops cleanly does
    /// this last and its next start opens as fast as a fresh node of the same state (a
    /// shutdown checkpoint). What it costs is that replay, once, at shutdown; a node killed
    /// instead pays it at its next start.
    pub fn write_recovery_snapshot(path: &Path, within: Duration) -> Result<(), StoreError> {
        let err = |message: String| StoreError::Backend {
            path: path.display().to_string(),
            message,
        };
        let released = crate::store::wait_released(path, within)
            .map_err(|e| err(format!("cannot check the database lock: {e}")))?;
        if !released {
            return Err(err(format!(
                "still in use after {} s; its recovery snapshot was not written",
                within.as_secs()
            )));
        }
        let db = crate::store::open_sled(&config(path)).map_err(|e| err(e.to_string()))?;
        db.flush().map_err(|e| err(e.to_string()))?;
        drop(db);
        crate::store::wait_released(path, within)
            .map_err(|e| err(format!("cannot check the database lock: {e}")))?;
        Ok(())
    }

    /// The value log's segments, file bytes and live bytes (zero for a tree without one).
    pub fn value_log_totals(&self) -> LogTotals {
        self.space
            .log
            .as_ref()
            .map(ValueLog::totals)
            .unwrap_or_default()
    }

    /// Reclaims the value log's overwritten space now, every segment under half live, and
    /// removes the emptied segments (what the background thread does in its own time).
    pub fn collect_now(&self) -> Result<(), StoreError> {
        let Some(log) = &self.space.log else {
            return Ok(());
        };
        while log.collect(&self.space.tree, COLLECT_STEP_BYTES)? {}
        log.flush_then_release(|| self.db.flush().map(drop).map_err(|e| self.err(e)), true)?;
        log.unlink_released();
        log.settle();
        Ok(())
    }

    /// Resolves a logged key's pointer (from a scan of pointer keys) to the key and its value.
    fn resolve(
        &self,
        log: &ValueLog,
        pointer_key: &[u8],
        pointer: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>), StoreError> {
        let key = pointer_key.get(1..).unwrap_or_default();
        Ok((key.to_vec(), log.read(key, pointer)?))
    }

    fn scan_raw(
        &self,
        iter: impl Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>,
        visit: &mut super::Visitor<'_>,
    ) -> Result<(), StoreError> {
        let log = self.space.log.as_ref();
        for item in iter {
            let (k, v) = item.map_err(|e| self.err(e))?;
            match log {
                Some(log) if k.first() == Some(&value_log::POINTER_PREFIX) => {
                    let (key, value) = self.resolve(log, &k, &v)?;
                    visit(&key, &value)?;
                }
                Some(_) if value_log::is_internal(&k) => {}
                _ => visit(&k, &v)?,
            }
        }
        Ok(())
    }

    /// Where `key`'s entry lives in sled: its pointer key when its value is logged.
    fn sled_key(&self, key: &[u8]) -> Vec<u8> {
        if self.space.log.is_some() && value_log::is_logged(key) {
            value_log::pointer_key(key)
        } else {
            key.to_vec()
        }
    }

    fn apply(&self, batch: &WriteBatch, durable: bool) -> Result<(), StoreError> {
        let tree = &self.space.tree;
        let log = self.space.log.as_ref();
        let mut sled_batch = sled::Batch::default();
        let mut staged = log.map(ValueLog::stage);
        for (key, value) in batch.ops() {
            match &mut staged {
                Some(staged) if value_log::is_logged(key) => {
                    staged.put_or_delete(tree, key, value.as_deref(), &mut sled_batch)?;
                }
                Some(_) if value_log::is_internal(key) => {
                    return Err(StoreError::Corrupt(format!(
                        "key {} is reserved for the value log's own records",
                        hex::encode(key)
                    )));
                }
                _ => match value {
                    Some(v) => sled_batch.insert(key.as_slice(), v.as_slice()),
                    None => sled_batch.remove(key.as_slice()),
                },
            }
        }
        match staged {
            Some(staged) => staged.apply(tree, sled_batch)?,
            None => tree.apply_batch(sled_batch).map_err(|e| self.err(e))?,
        }
        if durable {
            let flush = || self.db.flush().map(drop).map_err(|e| self.err(e));
            match log {
                // The collector's thread unlinks what this flush released.
                Some(log) => log.flush_then_release(flush, false)?,
                None => flush()?,
            }
        }
        Ok(())
    }

    fn err(&self, e: sled::Error) -> StoreError {
        StoreError::Backend {
            path: self.location(),
            message: e.to_string(),
        }
    }

    /// The node's persistent peer bans, in their own tree of this database.
    pub fn ban_list(&self) -> Result<super::BanList, StoreError> {
        let tree = self.db.open_tree("peer_bans").map_err(|e| self.err(e))?;
        Ok(super::BanList::new(self.path.display().to_string(), tree))
    }

    /// Bytes the database occupies on disk, its value log included.
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        let sled = self.db.size_on_disk().map_err(|e| self.err(e))?;
        Ok(sled.saturating_add(self.value_log_totals().file_bytes))
    }
}

/// How the chain's database is opened.
fn config(path: &Path) -> sled::Config {
    sled::Config::new()
        .path(path)
        .cache_capacity(64 << 20)
        .mode(sled::Mode::HighThroughput)
}

/// Runs the value log's reclaiming on its own lowest-priority thread until the store is
/// dropped.
fn spawn_collector(space: Weak<Keyspace>, path: &Path) -> Result<Collector, StoreError> {
    // The thread must not keep sled open: it holds the keyspace weakly, upgrading it only for
    // a step, and the store's drop stops it and waits for the step in progress.
    let signal = Arc::new(CollectorSignal::default());
    let shared = Arc::clone(&signal);
    std::thread::Builder::new()
        .name("value-log".into())
        .spawn(crate::log_span::in_current_span(move || {
            shared
                .tid
                .store(crate::thread_priority::this_threads_id(), Ordering::Release);
            crate::thread_priority::lower_this_threads_priority();
            // Segments are collected one after another while any is under half live (at
            // this thread's priority, only on CPU time nothing else wants); then it polls.
            let mut idle = true;
            loop {
                if idle && !shared.stop.load(Ordering::Acquire) {
                    std::thread::park_timeout(COLLECT_POLL);
                }
                if shared.stop.load(Ordering::Acquire) {
                    return;
                }
                let Some(space) = space.upgrade() else {
                    return;
                };
                #[cfg(test)]
                if shared.hold_in_step.load(Ordering::Acquire) {
                    shared.holding.store(true, Ordering::Release);
                    while !shared.stop.load(Ordering::Acquire) {
                        std::thread::park_timeout(Duration::from_millis(1));
                    }
                    return;
                }
                let Some(log) = &space.log else {
                    return;
                };
                let step = || -> Result<bool, StoreError> {
                    log.unlink_released();
                    if !log.collect(&space.tree, COLLECT_STEP_BYTES)? {
                        return Ok(false);
                    }
                    log.flush_then_release(|| {
                        space
                            .tree
                            .flush()
                            .map(drop)
                            .map_err(|e| StoreError::Backend {
                                path: log.dir().display().to_string(),
                                message: e.to_string(),
                            })
                    }, true)?;
                    Ok(true)
                };
                idle = match step() {
                    Ok(collected) => !collected,
                    Err(e) => {
                        tracing::warn!(error = %e, "reclaiming value-log space failed; retrying later");
                        true
                    }
                };
            }
        }))
        .map(|handle| Collector {
            signal,
            handle: Some(handle),
        })
        .map_err(|e| StoreError::Backend {
            path: path.display().to_string(),
            message: format!("cannot start the value-log thread: {e}"),
        })
}

impl KvStore for SledStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let stored = self
            .space
            .tree
            .get(self.sled_key(key))
            .map_err(|e| self.err(e))?;
        match (&self.space.log, stored) {
            (Some(log), Some(pointer)) if value_log::is_logged(key) => {
                match log.read(key, &pointer) {
                    Ok(value) => Ok(Some(value)),
                    // Deleted (pruned) or moved by the collector between reading the pointer
                    // and reading the value, its segment then removed: read it again.
                    Err(first) => {
                        let now = self
                            .space
                            .tree
                            .get(self.sled_key(key))
                            .map_err(|e| self.err(e))?;
                        match now {
                            None => Ok(None),
                            Some(moved) if moved != pointer => log.read(key, &moved).map(Some),
                            Some(_) => Err(first),
                        }
                    }
                }
            }
            (_, stored) => Ok(stored.map(|v| v.to_vec())),
        }
    }

    fn scan_prefix(&self, prefix: &[u8], visit: &mut super::Visitor<'_>) -> Result<(), StoreError> {
        let tree = &self.space.tree;
        if self.space.log.is_none() || !prefix.is_empty() {
            return self.scan_raw(tree.scan_prefix(self.sled_key(prefix)), visit);
        }
        // Every key, in key order: each first byte's keys from where they live.
        for first in 0..=u8::MAX {
            if matches!(first, value_log::POINTER_PREFIX | value_log::USE_PREFIX) {
                continue;
            }
            self.scan_raw(tree.scan_prefix(self.sled_key(&[first])), visit)?;
        }
        Ok(())
    }

    fn scan_range(
        &self,
        start: &[u8],
        end: &[u8],
        limit: usize,
        visit: &mut super::Visitor<'_>,
    ) -> Result<(), StoreError> {
        if start >= end {
            return Ok(());
        }
        let one_space =
            self.space.log.is_none() || (!start.is_empty() && start.first() == end.first());
        if !one_space {
            return super::scan_range_by_prefix(self, start, end, limit, visit);
        }
        let range = self.sled_key(start)..self.sled_key(end);
        self.scan_raw(self.space.tree.range(range).take(limit), visit)
    }

    fn commit(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        crate::thread_priority::at_normal_priority(|| self.apply(batch, true))
    }

    /// sled logs a batch as one unit and recovers a prefix of its log, so an unflushed batch
    /// is recovered whole or not at all, and only with everything logged before it; its
    /// flusher writes it out within `flush_every_ms` (500 ms) or the next `commit` does. Values
    /// it appends to the value log are synced before the batch is applied.
    ///
    /// Background threads (the pruner) commit at normal priority: the value log's lock and
    /// sled's are taken by import too.
    fn commit_unflushed(&self, batch: &WriteBatch) -> Result<(), StoreError> {
        crate::thread_priority::at_normal_priority(|| self.apply(batch, false))
    }

    fn tree(&self, name: &str) -> Result<std::sync::Arc<dyn KvStore>, StoreError> {
        let tree = self.db.open_tree(name).map_err(|e| self.err(e))?;
        Ok(std::sync::Arc::new(Self {
            path: self.path.clone(),
            db: self.db.clone(),
            space: Arc::new(Keyspace { tree, log: None }),
            name: name.into(),
            collector: None,
        }))
    }

    fn location(&self) -> String {
        format!("tree {} of {}", self.name, self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashes::BlockHash;

    fn batch(ops: &[(&[u8], Option<&[u8]>)]) -> WriteBatch {
        let mut batch = WriteBatch::new();
        for (key, value) in ops {
            match value {
                Some(v) => batch.put(key.to_vec(), v.to_vec()),
                None => batch.delete(key.to_vec()),
            }
        }
        batch
    }

    /// The reclaiming thread holds the keyspace (and so sled's lock on the directory) during a
    /// step; dropping the store must wait for it, or a reopen right after the drop fails with
    /// `WouldBlock` — what a loaded machine made of `prune`'s reopen.
    #[test]
    fn a_store_reopens_at_once_after_a_drop_while_its_collector_is_inside_a_step() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = SledStore::open(&path).unwrap();
        store.commit(&batch(&[(b"a", Some(b"1"))])).unwrap();
        let collector = store.collector.as_ref().unwrap();
        let signal = Arc::clone(&collector.signal);
        signal.hold_in_step.store(true, Ordering::Release);
        collector.handle.as_ref().unwrap().thread().unpark();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !signal.holding.load(Ordering::Acquire) {
            assert!(
                std::time::Instant::now() < deadline,
                "the collector never entered a step"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(store);
        let reopened = SledStore::open(&path).unwrap();
        assert_eq!(reopened.get(b"a").unwrap(), Some(b"1".to_vec()));
    }

    #[test]
    fn an_unflushed_commit_is_read_at_once_and_kept_with_the_next_flushed_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        {
            let store = SledStore::open(&path).unwrap();
            store
                .commit(&batch(&[(b"a", Some(b"1")), (b"b", Some(b"2"))]))
                .unwrap();
            store
                .commit_unflushed(&batch(&[(b"a", None), (b"cursor", Some(b"1"))]))
                .unwrap();
            assert_eq!(store.get(b"a").unwrap(), None);
            assert_eq!(store.get(b"cursor").unwrap(), Some(b"1".to_vec()));
            store.commit(&batch(&[(b"c", Some(b"3"))])).unwrap();
        }
        assert!(crate::store::wait_released(&path, std::time::Duration::from_secs(30)).unwrap());
        let store = SledStore::open(&path).unwrap();
        assert_eq!(store.get(b"a").unwrap(), None);
        assert_eq!(store.get(b"b").unwrap(), Some(b"2".to_vec()));
        assert_eq!(store.get(b"cursor").unwrap(), Some(b"1".to_vec()));
        assert_eq!(store.get(b"c").unwrap(), Some(b"3".to_vec()));
    }

    fn segments(path: &Path) -> usize {
        std::fs::read_dir(path.join("values")).unwrap().count()
    }

    fn all(store: &SledStore) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        store
            .scan_prefix(&[], &mut |k, v| {
                out.push((k.to_vec(), v.to_vec()));
                Ok(())
            })
            .unwrap();
        out
    }

    #[test]
    fn logged_values_read_back_after_a_reopen_and_deleting_them_removes_their_segments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let value = |i: u32| vec![u8::try_from(i % 251).unwrap(); 100_000];
        {
            let store = SledStore::open(&path).unwrap();
            for i in 0..100u32 {
                let mut b = WriteBatch::new();
                b.put(
                    crate::store::keys::block(&BlockHash::new([u8::try_from(i).unwrap(); 32])),
                    value(i),
                );
                b.put(crate::store::keys::height(u64::from(i)), vec![1]);
                store.commit(&b).unwrap();
            }
            // 10 MB of blocks: three segments and the one being written.
            assert!(segments(&path) >= 3, "{} segments", segments(&path));
            // sled holds pointers, not the blocks.
            assert!(store.db.size_on_disk().unwrap() < 5 << 20);
        }
        assert!(crate::store::wait_released(&path, std::time::Duration::from_secs(30)).unwrap());
        let store = SledStore::open(&path).unwrap();
        for i in 0..100u32 {
            let key = crate::store::keys::block(&BlockHash::new([u8::try_from(i).unwrap(); 32]));
            assert_eq!(store.get(&key).unwrap(), Some(value(i)), "block {i}");
        }
        let listed = all(&store);
        assert_eq!(
            listed.len(),
            200,
            "every key once, no pointer or use record"
        );
        assert!(listed.windows(2).all(|w| w[0].0 < w[1].0), "in key order");
        let mut b = WriteBatch::new();
        for i in 0..100u32 {
            b.delete(crate::store::keys::block(&BlockHash::new(
                [u8::try_from(i).unwrap(); 32],
            )));
        }
        store.commit(&b).unwrap();
        // The collector's thread removes the emptied segments (not the committing thread).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while segments(&path) > 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(segments(&path), 1, "only the segment being written is left");
        assert_eq!(store.value_log_totals().live_bytes, 0);
        assert_eq!(
            store
                .get(&crate::store::keys::block(&BlockHash::new([3; 32])))
                .unwrap(),
            None
        );
    }

    #[test]
    fn overwritten_values_are_reclaimed_and_the_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = SledStore::open(&path).unwrap();
        let chunk = crate::store::keys::balance_chunk(0);
        let kept = crate::store::keys::validator_chunk(0);
        let mut b = WriteBatch::new();
        b.put(kept.clone(), vec![7u8; 1000]);
        store.commit(&b).unwrap();
        for i in 0..400u32 {
            let mut b = WriteBatch::new();
            b.put(chunk.clone(), i.to_le_bytes().repeat(16_384));
            store.commit_unflushed(&b).unwrap();
        }
        // 26 MB written, 65 kB live (the background collector may already have reclaimed
        // some of it).
        store.collect_now().unwrap();
        assert!(
            segments(&path) <= 3,
            "{} segments after reclaiming: {:?} {}",
            segments(&path),
            store.value_log_totals(),
            store.space.log.as_ref().unwrap().debug_uses()
        );
        let totals = store.value_log_totals();
        // What is left: the segment being written (never collected) and closed segments at
        // least half live.
        assert!(
            totals.file_bytes <= value_log::SEGMENT_BYTES + 2 * totals.live_bytes,
            "{totals:?}"
        );
        assert_eq!(store.get(&kept).unwrap(), Some(vec![7u8; 1000]));
        assert_eq!(
            store.get(&chunk).unwrap(),
            Some(399u32.to_le_bytes().repeat(16_384))
        );
        drop(store);
        assert!(crate::store::wait_released(&path, std::time::Duration::from_secs(30)).unwrap());
        let store = SledStore::open(&path).unwrap();
        assert_eq!(store.get(&kept).unwrap(), Some(vec![7u8; 1000]));
        assert_eq!(
            store.get(&chunk).unwrap(),
            Some(399u32.to_le_bytes().repeat(16_384))
        );
    }

    #[test]
    fn a_damaged_record_or_a_missing_segment_is_named_not_read_as_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let key = crate::store::keys::undo(&BlockHash::new([9; 32]));
        {
            let store = SledStore::open(&path).unwrap();
            let mut b = WriteBatch::new();
            b.put(key.clone(), vec![5u8; 5000]);
            store.commit(&b).unwrap();
        }
        assert!(crate::store::wait_released(&path, std::time::Duration::from_secs(30)).unwrap());
        let segment = path.join("values").join("00000000.seg");
        let mut bytes = std::fs::read(&segment).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&segment, &bytes).unwrap();
        {
            let store = SledStore::open(&path).unwrap();
            let err = store.get(&key).unwrap_err().to_string();
            assert!(
                err.contains("damaged") && err.contains("00000000.seg"),
                "{err}"
            );
        }
        assert!(crate::store::wait_released(&path, std::time::Duration::from_secs(30)).unwrap());
        std::fs::remove_file(&segment).unwrap();
        let err = SledStore::open(&path).unwrap_err().to_string();
        assert!(
            err.contains("00000000.seg") && err.contains("missing"),
            "{err}"
        );
    }

    #[test]
    fn a_store_from_before_the_value_log_has_its_values_moved_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let key = crate::store::keys::validator_chunk(2);
        {
            let db = sled::open(&path).unwrap();
            let tree = db.open_tree("chain").unwrap();
            tree.insert(&key, vec![3u8; 2000]).unwrap();
            tree.insert(crate::store::keys::height(1), vec![1u8])
                .unwrap();
            db.flush().unwrap();
        }
        assert!(crate::store::wait_released(&path, std::time::Duration::from_secs(30)).unwrap());
        let store = SledStore::open(&path).unwrap();
        assert_eq!(store.get(&key).unwrap(), Some(vec![3u8; 2000]));
        assert_eq!(
            store.space.tree.get(&key).unwrap(),
            None,
            "no longer inline"
        );
        // The record: a 10-byte header, the key and the value.
        assert_eq!(
            store.value_log_totals().live_bytes,
            u64::try_from(10 + key.len() + 2000).unwrap()
        );
        assert_eq!(all(&store).len(), 2);
    }

    #[test]
    fn commits_from_two_threads_beside_reclaiming_keep_every_last_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = Arc::new(SledStore::open(&path).unwrap());
        let chunk_value =
            |chunk: u32, round: u32| [chunk, round].map(u32::to_le_bytes).concat().repeat(2048);
        let block_value = |i: u32| i.to_be_bytes().repeat(1000);
        let writer = {
            let store = store.clone();
            std::thread::spawn(move || {
                for round in 0..300u32 {
                    let mut b = WriteBatch::new();
                    for chunk in 0..4u32 {
                        b.put(
                            crate::store::keys::balance_chunk(chunk),
                            chunk_value(chunk, round),
                        );
                    }
                    store.commit(&b).unwrap();
                }
            })
        };
        let pruner = {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..300u32 {
                    let mut b = WriteBatch::new();
                    b.put(
                        crate::store::keys::block(&BlockHash::new(
                            [0; 28]
                                .iter()
                                .copied()
                                .chain(i.to_be_bytes())
                                .collect::<Vec<_>>()
                                .try_into()
                                .unwrap(),
                        )),
                        block_value(i),
                    );
                    if let Some(old) = i.checked_sub(10) {
                        b.delete(crate::store::keys::block(&BlockHash::new(
                            [0; 28]
                                .iter()
                                .copied()
                                .chain(old.to_be_bytes())
                                .collect::<Vec<_>>()
                                .try_into()
                                .unwrap(),
                        )));
                    }
                    store.commit_unflushed(&b).unwrap();
                }
            })
        };
        while !(writer.is_finished() && pruner.is_finished()) {
            store.collect_now().unwrap();
        }
        writer.join().unwrap();
        pruner.join().unwrap();
        store.collect_now().unwrap();
        let check = |store: &SledStore| {
            for chunk in 0..4u32 {
                let key = crate::store::keys::balance_chunk(chunk);
                assert_eq!(
                    store.get(&key).unwrap(),
                    Some(chunk_value(chunk, 299)),
                    "chunk {chunk}"
                );
            }
            let blocks = all(store)
                .into_iter()
                .filter(|(k, _)| k.first() == Some(&b'b'))
                .map(|(k, v)| (u32::from_be_bytes(k[29..].try_into().unwrap()), v))
                .collect::<Vec<_>>();
            assert_eq!(
                blocks.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
                (290..300).collect::<Vec<_>>()
            );
            assert!(blocks.iter().all(|(i, v)| *v == block_value(*i)));
            let totals = store.value_log_totals();
            assert!(
                totals.file_bytes <= value_log::SEGMENT_BYTES + 2 * totals.live_bytes,
                "{totals:?}"
            );
        };
        check(&store);
        let mut b = WriteBatch::new();
        b.put(crate::store::keys::height(1), vec![1]);
        store.commit(&b).unwrap();
        drop(store);
        assert!(crate::store::wait_released(&path, std::time::Duration::from_secs(30)).unwrap());
        check(&SledStore::open(&path).unwrap());
    }

    #[test]
    fn a_segment_no_commit_reached_is_removed_at_open_and_never_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let key = crate::store::keys::eth1(&BlockHash::new([4; 32]));
        {
            let store = SledStore::open(&path).unwrap();
            let mut b = WriteBatch::new();
            b.put(key.clone(), vec![1u8; 300]);
            store.commit(&b).unwrap();
        }
        assert!(crate::store::wait_released(&path, std::time::Duration::from_secs(30)).unwrap());
        // A crash after appending to a new segment, before the batch pointing into it.
        std::fs::write(path.join("values").join("00000007.seg"), vec![0xAB; 5000]).unwrap();
        let store = SledStore::open(&path).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(path.join("values"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        // The live segment kept, the stray one gone, writing starts in a new segment after it.
        assert_eq!(names, ["00000000.seg", "00000008.seg"]);
        assert_eq!(store.get(&key).unwrap(), Some(vec![1u8; 300]));
    }

    #[test]
    fn the_value_logs_own_keys_cannot_be_written_through_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(&dir.path().join("db")).unwrap();
        let mut b = WriteBatch::new();
        b.put(value_log::pointer_key(b"bx"), vec![0; 16]);
        let err = store.commit(&b).unwrap_err().to_string();
        assert!(err.contains("reserved"), "{err}");
    }

    #[test]
    fn a_damaged_record_keeps_its_segment_from_being_collected_and_the_rest_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = SledStore::open(&path).unwrap();
        let keys: Vec<_> = (0..3u8)
            .map(|i| crate::store::keys::eth1(&BlockHash::new([i; 32])))
            .collect();
        for key in &keys {
            let mut b = WriteBatch::new();
            b.put(key.clone(), vec![key[1]; 500]);
            store.commit(&b).unwrap();
        }
        // Filler that closes the segment, then deleted: the segment is under half live.
        let filler = |i: u32| {
            crate::store::keys::block(&BlockHash::new(
                [[0u8; 28].as_slice(), &i.to_be_bytes()]
                    .concat()
                    .try_into()
                    .unwrap(),
            ))
        };
        for i in 0..50u32 {
            let mut b = WriteBatch::new();
            b.put(filler(i), vec![1u8; 100_000]);
            store.commit(&b).unwrap();
        }
        let mut b = WriteBatch::new();
        for i in 0..50u32 {
            b.delete(filler(i));
        }
        store.commit(&b).unwrap();
        // The first record's value damaged on disk.
        let segment = path.join("values").join("00000000.seg");
        let mut bytes = std::fs::read(&segment).unwrap();
        bytes[60] ^= 1;
        std::fs::write(&segment, &bytes).unwrap();
        // Collection ends (the segment is left as it is) instead of trying it again and again.
        store.collect_now().unwrap();
        assert!(segment.exists());
        assert!(
            store
                .get(&keys[0])
                .unwrap_err()
                .to_string()
                .contains("damaged")
        );
        assert_eq!(store.get(&keys[1]).unwrap(), Some(vec![1u8; 500]));
        assert_eq!(store.get(&keys[2]).unwrap(), Some(vec![2u8; 500]));
    }

    #[test]
    fn the_recovery_snapshot_waits_for_the_store_to_close_and_keeps_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = SledStore::open(&path).unwrap();
        let mut b = WriteBatch::new();
        b.put(
            crate::store::keys::block(&BlockHash::new([1; 32])),
            vec![9u8; 3000],
        );
        b.put(crate::store::keys::height(1), vec![1]);
        store.commit(&b).unwrap();
        let err = SledStore::write_recovery_snapshot(&path, Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(err.contains("still in use"), "{err}");
        drop(store);
        SledStore::write_recovery_snapshot(&path, Duration::from_secs(30)).unwrap();
        let store = SledStore::open(&path).unwrap();
        assert_eq!(
            store
                .get(&crate::store::keys::block(&BlockHash::new([1; 32])))
                .unwrap(),
            Some(vec![9u8; 3000])
        );
        assert_eq!(
            store.get(&crate::store::keys::height(1)).unwrap(),
            Some(vec![1])
        );
    }
}
