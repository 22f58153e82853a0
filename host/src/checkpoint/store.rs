//! Durable restore progress: the manifest being restored and every chunk that passed
//! verification, so a restart resumes without fetching a verified chunk again (the stored
//! chunks are read back, checked against their recorded hash and re-verified locally, which
//! costs CPU, not the network).
//!
//! Layout of the progress directory:
//! - `progress/` (sled): in tree `checkpoint-restore`, `log` → the chunk log's current
//!   generation and `chunk/<index>` → where the chunk's bytes are ([`Location`]: generation,
//!   offset, length, sha256); in tree `checkpoint-restore-manifest`, `manifest` → the encoded
//!   manifest. The manifest has a tree of its own because sled rewrites a node whole when a
//!   record in it changes: beside the records, a checkpoint-v3 manifest (~650 KB at 2M
//!   validators) was written again as a sled blob at every flush. Progress written before
//!   the split (the manifest beside the records) is moved over on open.
//! - `chunks-<generation>.log`: the verified chunks' bytes, appended. sled would write each
//!   chunk about three times over; an append-only file writes it once — where the file system
//!   allows, directly (`O_DIRECT`: staged in block-aligned memory and written in whole blocks,
//!   see `staging`), since a restore does not read its chunks again unless it resumes.
//!
//! Crash safety: a chunk's record is written only after its bytes are `fdatasync`ed, so a
//! record never points at bytes that were not durable. On open, records that point past the
//! end of the file (or at another generation) are dropped and the file is cut after the last
//! recorded byte (a torn tail); on read, bytes that no longer hash to their record drop that
//! record. A dropped record means the chunk is fetched again, never a failed restore.
//!
//! Switching checkpoints re-keys the carried chunks' records and replaces the manifest in one
//! atomic sled transaction over both trees; their bytes stay where they are, unless most of
//! the file would be abandoned bytes: then they are copied to a new generation first, the
//! transaction points at it, and the old file is removed (a crash leaves a file of the other
//! generation, removed on open).

mod chunk_log;
mod staging;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use sha2::{Digest, Sha256};
use sled::Transactional as _;

pub use self::chunk_log::LogError;
use self::chunk_log::{ChunkLog, Location, remove_other_generations};
use self::staging::Staging;
use super::manifest::{Manifest, ManifestError, ManifestLimits};
use crate::state::merkle::Hash32;

const TREE: &str = "checkpoint-restore";
const MANIFEST_TREE: &str = "checkpoint-restore-manifest";
const PROGRESS_DB: &str = "progress";
const MANIFEST_KEY: &[u8] = b"manifest";
const GENERATION_KEY: &[u8] = b"log";
const CHUNK_PREFIX: &[u8] = b"chunk/";

/// Why restore progress could not be read or written. Always this node's fault.
#[derive(Debug, thiserror::Error)]
pub enum RestoreStoreError {
    /// sled failed.
    #[error("checkpoint restore store: {0}")]
    Sled(#[from] sled::Error),
    /// The chunk log file failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The stored manifest no longer decodes (written by another version, or damaged).
    #[error("the stored checkpoint manifest is unreadable ({0}); delete the restore progress")]
    Manifest(#[from] ManifestError),
    /// A chunk is larger than a chunk can be, or the log would outgrow a file.
    #[error("checkpoint restore store: chunk {index} of {len} bytes does not fit the chunk log")]
    TooLarge {
        /// The chunk.
        index: usize,
        /// Its length.
        len: usize,
    },
    /// A thread panicked while holding the store's lock.
    #[error("checkpoint restore store: a thread panicked while writing a chunk")]
    Poisoned,
}

/// Where appends go, and the records waiting for the next [`RestoreStore::flush`].
#[derive(Debug)]
struct Appender {
    /// The current generation's file; created on the first append.
    log: Option<ChunkLog>,
    generation: u64,
    /// Next free offset.
    end: u64,
    /// Written, not yet durable nor recorded.
    pending: Vec<(usize, Location)>,
    pending_bytes: u64,
    /// Appends not yet written, when the log writes directly (see `staging`); `None` until
    /// the first append after an open, a switch or a failed write.
    staging: Option<Staging>,
}

impl Appender {
    /// Notes chunk `index`, written at `offset` of `log`, for the next flush to record.
    fn record_pending(
        &mut self,
        index: usize,
        log: &ChunkLog,
        offset: u64,
        len: u32,
        hash: &Hash32,
    ) {
        let at = Location {
            generation: log.generation(),
            offset,
            len,
            hash: *hash,
        };
        self.pending.push((index, at));
        self.pending_bytes = self.pending_bytes.saturating_add(u64::from(len));
    }

    /// Forgets the appends not yet durable (their records and staged bytes).
    fn abandon_pending(&mut self) {
        self.pending.clear();
        self.pending_bytes = 0;
        self.staging = None;
    }

    /// Writes out what is staged for `log` (`padded`: all of it, the last block padded, before
    /// a sync; else its whole blocks, once a stage is full). A failed write abandons every
    /// pending append: none of them is recorded, so each is fetched again.
    fn write_staged(&mut self, log: &ChunkLog, padded: bool) -> Result<(), RestoreStoreError> {
        let Some(staging) = self.staging.as_mut() else {
            return Ok(());
        };
        let written = match padded {
            true => staging.write_padded(log),
            false if staging.is_full() => staging.write_blocks(log),
            false => Ok(()),
        };
        if written.is_err() {
            self.abandon_pending();
        }
        Ok(written?)
    }
}

/// The restore progress of a node: a sled database and the chunk log, in one directory.
#[derive(Debug, Clone)]
pub struct RestoreStore {
    dir: PathBuf,
    /// The generation and the chunk records.
    tree: sled::Tree,
    /// The manifest, alone.
    manifests: sled::Tree,
    appender: Arc<Mutex<Appender>>,
    /// Held by whoever makes records durable (flush, switch, clear), so records reach sled in
    /// the order their bytes were written.
    recording: Arc<Mutex<()>>,
}

impl RestoreStore {
    /// Opens (creating) the progress in directory `dir`: drops records whose bytes are not
    /// in the file, cuts a torn tail, removes log files of other generations.
    pub fn open(dir: &Path) -> Result<Self, RestoreStoreError> {
        std::fs::create_dir_all(dir).map_err(|source| LogError {
            action: "create",
            path: dir.to_path_buf(),
            source,
        })?;
        let db = crate::store::open_sled(&sled::Config::new().path(dir.join(PROGRESS_DB)))?;
        let tree = db.open_tree(TREE)?;
        let manifests = db.open_tree(MANIFEST_TREE)?;
        move_manifest_out(&tree, &manifests)?;
        let generation = match tree.get(GENERATION_KEY)? {
            None => 0,
            Some(bytes) => <[u8; 8]>::try_from(bytes.as_ref())
                .map(u64::from_be_bytes)
                .unwrap_or_else(|_| {
                    tracing::warn!(dir = %dir.display(), "unreadable chunk log generation; stored chunks are fetched again");
                    u64::MAX
                }),
        };
        let removed = remove_other_generations(dir, generation)?;
        if removed > 0 {
            tracing::info!(removed, dir = %dir.display(), "removed chunk logs left by an interrupted switch");
        }
        let log = ChunkLog::open(dir, generation)?;
        let len = match &log {
            Some(log) => log.len()?,
            None => 0,
        };
        let mut end = 0u64;
        let mut dropped = Vec::new();
        for entry in tree.scan_prefix(CHUNK_PREFIX) {
            let (key, value) = entry?;
            match Location::decode(&value) {
                Some(at) if at.generation == generation && log.is_some() && at.end() <= len => {
                    end = end.max(at.end());
                }
                _ => dropped.push(key),
            }
        }
        let store = Self {
            dir: dir.to_path_buf(),
            tree,
            manifests,
            appender: Arc::new(Mutex::new(Appender {
                log: None,
                generation,
                end,
                pending: Vec::new(),
                pending_bytes: 0,
                staging: None,
            })),
            recording: Arc::new(Mutex::new(())),
        };
        store.drop_records(dropped, "they point past the end of the chunk log")?;
        if let Some(log) = log {
            if len > end {
                tracing::info!(file = %log.path().display(), cut = len.saturating_sub(end), "cutting unrecorded bytes off the chunk log");
                log.truncate(end)?;
            }
            store.lock()?.log = Some(log);
        }
        Ok(store)
    }

    fn lock(&self) -> Result<MutexGuard<'_, Appender>, RestoreStoreError> {
        self.appender
            .lock()
            .map_err(|_| RestoreStoreError::Poisoned)
    }

    fn recording(&self) -> Result<MutexGuard<'_, ()>, RestoreStoreError> {
        self.recording
            .lock()
            .map_err(|_| RestoreStoreError::Poisoned)
    }

    /// The manifest being restored, if any.
    pub fn manifest(&self) -> Result<Option<Manifest>, RestoreStoreError> {
        match self.manifests.get(MANIFEST_KEY)? {
            None => Ok(None),
            Some(bytes) => Ok(Some(Manifest::decode(&bytes, &ManifestLimits::default())?)),
        }
    }

    /// Starts (or continues) restoring `manifest`: progress of any other checkpoint is dropped.
    pub fn begin(&self, manifest: &Manifest) -> Result<(), RestoreStoreError> {
        let encoded = manifest.encode();
        if self.manifests.get(MANIFEST_KEY)?.as_deref() == Some(encoded.as_slice()) {
            return Ok(());
        }
        self.switch(manifest, &[])
    }

    /// Replaces the progress with `manifest` and the chunks carried over to it (`(index in
    /// `manifest`, bytes)`, already verified against it), as one atomic sled transaction over
    /// both trees, flushed: a crash at any point leaves either the old progress whole or the
    /// new one whole, never the new manifest with an old checkpoint's chunk under one of its
    /// indices. Carried bytes already in the log stay where they are; when the abandoned bytes
    /// would outweigh the kept ones, the carried chunks move to a new log file and the old one
    /// is removed.
    pub fn switch(
        &self,
        manifest: &Manifest,
        carried: &[(usize, Vec<u8>)],
    ) -> Result<(), RestoreStoreError> {
        let _recording = self.recording()?;
        let mut appender = self.lock()?;
        appender.abandon_pending();
        let mut in_place: HashMap<Hash32, Location> = HashMap::new();
        for entry in self.tree.scan_prefix(CHUNK_PREFIX).values() {
            if let Some(at) = Location::decode(&entry?)
                && at.generation == appender.generation
            {
                in_place.insert(at.hash, at);
            }
        }
        let hashed: Vec<(usize, &[u8], Hash32)> = carried
            .iter()
            .map(|(index, bytes)| (*index, bytes.as_slice(), Sha256::digest(bytes).into()))
            .collect();
        let mut placed = Vec::with_capacity(carried.len());
        let mut kept = 0u64;
        let mut to_write = Vec::new();
        for &(index, bytes, hash) in &hashed {
            match in_place.get(&hash) {
                Some(at) if usize::try_from(at.len).ok() == Some(bytes.len()) => {
                    kept = kept.saturating_add(u64::from(at.len));
                    placed.push((index, *at));
                }
                _ => to_write.push((index, bytes, hash)),
            }
        }
        let abandoned = appender.end.saturating_sub(kept);
        let compact = abandoned > kept;
        let (mut log, generation, mut end) = if compact {
            placed.clear();
            to_write = hashed;
            let generation = appender.generation.checked_add(1).unwrap_or(0);
            (None, generation, 0)
        } else {
            (appender.log.clone(), appender.generation, appender.end)
        };
        if !to_write.is_empty() {
            let file = match log.take() {
                Some(file) => file,
                None => ChunkLog::create(&self.dir, generation)?,
            };
            for (index, bytes, hash) in to_write {
                let at = Location {
                    generation,
                    offset: end,
                    len: u32::try_from(bytes.len()).map_err(|_| RestoreStoreError::TooLarge {
                        index,
                        len: bytes.len(),
                    })?,
                    hash,
                };
                file.write_at(end, bytes)?;
                end = at.end();
                placed.push((index, at));
            }
            file.sync()?;
            log = Some(file);
        }
        let mut batch = self.removing_every_record()?;
        // A key both removed and inserted ends inserted: the batch keeps the last write.
        batch.insert(GENERATION_KEY, &generation.to_be_bytes());
        for (index, at) in &placed {
            batch.insert(chunk_key(*index), at.encode());
        }
        commit(
            &self.tree,
            &self.manifests,
            &batch,
            Some(&manifest.encode()),
        )?;
        if compact {
            if let Some(old) = appender.log.take()
                && let Err(e) = old.remove(&self.dir)
            {
                // Removed on the next open: it is not the recorded generation any more.
                tracing::warn!(error = %e, "could not remove the abandoned chunk log");
            }
            if log.is_some() || !placed.is_empty() {
                tracing::info!(
                    kept,
                    abandoned,
                    generation,
                    "restore switch: carried chunks moved to a new chunk log"
                );
            }
        }
        appender.log = log;
        appender.generation = generation;
        appender.end = end;
        Ok(())
    }

    /// Appends verified chunk `index` (`hash`: its sha256, as its manifest entry lists it) to
    /// the log. Neither durable nor recorded until [`flush`](Self::flush); several threads
    /// may put at once.
    pub fn put_chunk(
        &self,
        index: usize,
        bytes: &[u8],
        hash: &Hash32,
    ) -> Result<(), RestoreStoreError> {
        let too_large = || RestoreStoreError::TooLarge {
            index,
            len: bytes.len(),
        };
        let len = u32::try_from(bytes.len()).map_err(|_| too_large())?;
        let (log, offset) = {
            let mut appender = self.lock()?;
            let log = match &appender.log {
                Some(log) => log.clone(),
                None => {
                    let log = ChunkLog::create(&self.dir, appender.generation)?;
                    appender.end = 0;
                    appender.staging = None;
                    appender.log = Some(log.clone());
                    log
                }
            };
            let offset = appender.end;
            appender.end = offset.checked_add(u64::from(len)).ok_or_else(too_large)?;
            if log.is_direct() {
                // Staged under the lock (a copy), written out in whole blocks when a stage
                // is full, and the rest by the next flush.
                let staging = match appender.staging.take() {
                    Some(staging) if staging.end() == offset => staging,
                    _ => Staging::at(&log, offset)?,
                };
                appender.staging = Some(staging);
                if let Some(staging) = appender.staging.as_mut() {
                    staging.push(bytes);
                }
                appender.write_staged(&log, false)?;
                appender.record_pending(index, &log, offset, len, hash);
                return Ok(());
            }
            if appender.staging.is_some() {
                // The file system began refusing direct writes: what is staged goes out
                // (its padding ends in this chunk's range, written after it) before this
                // chunk is written through the page cache.
                appender.write_staged(&log, true)?;
                appender.staging = None;
            }
            (log, offset)
        };
        // Outside the lock: each writer has its own range.
        log.write_at(offset, bytes)?;
        self.lock()?.record_pending(index, &log, offset, len, hash);
        Ok(())
    }

    /// Makes the chunk log write through the page cache from now on, as a file system that
    /// refuses direct writes does (tests of that path).
    #[cfg(test)]
    fn refuse_direct_writes(&self) -> Result<(), RestoreStoreError> {
        if let Some(log) = &self.lock()?.log {
            log.refuse_direct();
        }
        Ok(())
    }

    /// Makes every chunk put so far durable, then records it: `fdatasync` of the log, then one
    /// flushed sled batch of their records.
    pub fn flush(&self) -> Result<(), RestoreStoreError> {
        let _recording = self.recording()?;
        let (log, generation, pending) = {
            let mut appender = self.lock()?;
            if !appender.pending.is_empty()
                && let Some(log) = appender.log.clone()
            {
                appender.write_staged(&log, true)?;
            }
            appender.pending_bytes = 0;
            let pending = std::mem::take(&mut appender.pending);
            (appender.log.clone(), appender.generation, pending)
        };
        let Some(log) = log.filter(|_| !pending.is_empty()) else {
            return Ok(());
        };
        log.sync()?;
        let mut batch = sled::Batch::default();
        batch.insert(GENERATION_KEY, &generation.to_be_bytes());
        // A chunk put before a switch to another generation is not this progress's.
        for (index, at) in pending.iter().filter(|(_, at)| at.generation == generation) {
            batch.insert(chunk_key(*index), at.encode());
        }
        self.tree.apply_batch(batch)?;
        self.tree.flush()?;
        Ok(())
    }

    /// [`flush`](Self::flush)es once at least `bytes` were put since the last one (so the
    /// disk writes back while verification goes on, instead of all at the end).
    pub fn flush_every(&self, bytes: u64) -> Result<(), RestoreStoreError> {
        if self.lock()?.pending_bytes >= bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// The recorded chunks, `(index, bytes)` in index order. A record whose bytes are missing
    /// or no longer hash to it is dropped (with a warning): that chunk is fetched again.
    pub fn chunks(&self) -> Result<Vec<(usize, Vec<u8>)>, RestoreStoreError> {
        let (log, generation) = {
            let appender = self.lock()?;
            (appender.log.clone(), appender.generation)
        };
        let mut out = Vec::new();
        let mut dropped = Vec::new();
        for entry in self.tree.scan_prefix(CHUNK_PREFIX) {
            let (key, value) = entry?;
            let index = key
                .strip_prefix(CHUNK_PREFIX)
                .and_then(|i| <[u8; 8]>::try_from(i).ok())
                .and_then(|i| usize::try_from(u64::from_be_bytes(i)).ok());
            let at = Location::decode(&value).filter(|at| at.generation == generation);
            let bytes = match (&log, at) {
                (Some(log), Some(at)) => log.read(&at)?,
                _ => None,
            };
            match (index, bytes) {
                (Some(index), Some(bytes)) => out.push((index, bytes)),
                _ => dropped.push(key),
            }
        }
        self.drop_records(dropped, "their bytes are missing or damaged")?;
        Ok(out)
    }

    /// Drops all progress and removes the chunk log (after the restored state is written, or
    /// to give up).
    pub fn clear(&self) -> Result<(), RestoreStoreError> {
        let _recording = self.recording()?;
        let mut appender = self.lock()?;
        appender.abandon_pending();
        commit(
            &self.tree,
            &self.manifests,
            &self.removing_every_record()?,
            None,
        )?;
        appender.end = 0;
        if let Some(log) = appender.log.take() {
            log.remove(&self.dir)?;
        }
        Ok(())
    }

    /// A batch removing every record (the generation and the chunks').
    fn removing_every_record(&self) -> Result<sled::Batch, RestoreStoreError> {
        let mut batch = sled::Batch::default();
        for key in self.tree.iter().keys() {
            batch.remove(key?);
        }
        Ok(batch)
    }

    /// Removes the records under `keys`, with a warning saying `why`.
    fn drop_records(&self, keys: Vec<sled::IVec>, why: &str) -> Result<(), RestoreStoreError> {
        if keys.is_empty() {
            return Ok(());
        }
        tracing::warn!(
            dropped = keys.len(),
            dir = %self.dir.display(),
            "dropping stored checkpoint chunks because {why}; they will be fetched again"
        );
        let mut batch = sled::Batch::default();
        for key in keys {
            batch.remove(key);
        }
        self.tree.apply_batch(batch)?;
        self.tree.flush()?;
        Ok(())
    }
}

/// Moves a manifest stored beside the records (progress written before the manifest had a
/// tree of its own) into `manifests`, atomically.
fn move_manifest_out(tree: &sled::Tree, manifests: &sled::Tree) -> Result<(), RestoreStoreError> {
    let Some(old) = tree.get(MANIFEST_KEY)? else {
        return Ok(());
    };
    let mut batch = sled::Batch::default();
    batch.remove(MANIFEST_KEY);
    commit(tree, manifests, &batch, Some(&old))?;
    tracing::info!("restore progress: the manifest moved to a tree of its own");
    Ok(())
}

/// Applies `records` to the records `tree` and puts `manifest` in `manifests` (removes it for
/// `None`) in one sled transaction, then flushes the database.
fn commit(
    tree: &sled::Tree,
    manifests: &sled::Tree,
    records: &sled::Batch,
    manifest: Option<&[u8]>,
) -> Result<(), RestoreStoreError> {
    let result: sled::transaction::TransactionResult<(), ()> =
        (tree, manifests).transaction(|(tree, manifests)| {
            tree.apply_batch(records)?;
            match manifest {
                Some(bytes) => manifests.insert(MANIFEST_KEY, bytes).map(drop)?,
                None => manifests.remove(MANIFEST_KEY).map(drop)?,
            }
            Ok(())
        });
    match result {
        Ok(()) => {}
        Err(sled::transaction::TransactionError::Storage(e)) => return Err(e.into()),
        Err(sled::transaction::TransactionError::Abort(())) => {
            return Err(RestoreStoreError::Sled(sled::Error::ReportableBug(
                "a restore progress transaction aborted".into(),
            )));
        }
    }
    tree.flush()?;
    Ok(())
}

fn chunk_key(index: usize) -> Vec<u8> {
    let index = u64::try_from(index).unwrap_or(u64::MAX);
    [CHUNK_PREFIX, &index.to_be_bytes()].concat()
}
