//! The value log: large values kept out of sled, in append-only segment files.
//!
//! sled 0.34 reclaims the space of overwritten and deleted values only when its segment cleaner
//! gets to them, and at a small state it does not keep up: a node pruning to a 256-block window
//! at 1,000 validators held 1.1 MB of live keys and values in a 160 MB file after 20,000 blocks,
//! and sled's recovery reads that file at every open (120 ms against 5 ms for a fresh node).
//! What churns is the chain's bulk — block bodies and undo records (written once, deleted by
//! height), per-block eth1 and schedule records, and the state's chunk records (rewritten as
//! balances change). Those values go here instead (WiscKey's separation of keys from values,
//! as reth keeps history in static files): sled keeps, for each such key, a 16-byte pointer
//! under [`POINTER_PREFIX`] ‖ key, and per segment its live values' count and bytes under
//! [`USE_PREFIX`] ‖ segment, both written in the same sled batch as the rest of a commit.
//!
//! ## Segments and records
//! `values/NNNNNNNN.seg` in the sled directory, appended to and never rewritten; a new segment
//! is started when the current one passes [`SEGMENT_BYTES`] and at every open (so a torn tail
//! from a crash is never appended after). A record is `crc32 ‖ key length (u16) ‖ value length
//! (u32) ‖ key ‖ value`, little-endian; the CRC covers everything after it. A read checks the
//! CRC and that the record holds the key asked for.
//!
//! ## Crash safety
//! - A commit appends its values and `fdatasync`s the segment **before** sled applies the batch
//!   holding their pointers, so a pointer that survives a crash points at bytes on disk.
//! - A segment whose live count reaches zero is unlinked only after a sled flush that made that
//!   count durable; at open, a segment with no recorded live value (never committed, or emptied
//!   before a crash) is unlinked, and a segment a live pointer needs but that is missing is
//!   refused as corruption.
//! - Space of overwritten values is reclaimed by [`ValueLog::collect`]: a segment under half
//!   live has its live records copied into the collector's own segment and synced outside the
//!   commit lock, then its pointers moved under that lock (each only if it still points at the
//!   old record), after which it empties.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::StoreError;

mod collect;
mod record;
mod staged;

use record::{encode_record, parse_record};
pub use staged::Staged;

/// First byte of the sled key holding a logged key's pointer: `V` ‖ key.
pub const POINTER_PREFIX: u8 = b'V';
/// First byte of the sled key holding a segment's live count and bytes: `G` ‖ segment (BE).
pub const USE_PREFIX: u8 = b'G';
/// The sled key saying every logged key of this store is in the log (written once, when a store
/// is created or its inline values have been moved to the log).
pub const MARKER: &[u8] = b"Mvalue-log";
/// A segment is closed and a new one started once it holds this many bytes.
pub const SEGMENT_BYTES: u64 = 4 << 20;
/// Handles kept open for reading; beyond it, an arbitrary one is closed.
const OPEN_HANDLES: usize = 64;
/// Bytes of the record header: CRC, key length, value length.
const HEADER: usize = 4 + 2 + 4;

/// Whether values of `key` live in the log: the chain's bulk, by the key's first byte (block
/// bodies `b`, undo records `u`, eth1 `e`, schedule `s`, pending-deposit sets `p`, state chunk
/// records `r`; see [`super::keys`]).
pub fn is_logged(key: &[u8]) -> bool {
    matches!(key.first(), Some(b'b' | b'u' | b'e' | b's' | b'p' | b'r'))
}

/// Whether `key` is one of the log's own bookkeeping keys in sled.
pub fn is_internal(key: &[u8]) -> bool {
    matches!(key.first(), Some(&POINTER_PREFIX | &USE_PREFIX)) || key == MARKER
}

/// The sled key of `key`'s pointer.
pub fn pointer_key(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len().saturating_add(1));
    out.push(POINTER_PREFIX);
    out.extend_from_slice(key);
    out
}

fn use_key(segment: u32) -> Vec<u8> {
    let mut out = vec![USE_PREFIX];
    out.extend_from_slice(&segment.to_be_bytes());
    out
}

/// Where a value is: segment, offset of its record, the record's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pointer {
    segment: u32,
    offset: u64,
    len: u32,
}

impl Pointer {
    /// The 16-byte encoding stored in sled.
    pub fn encode(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..4].copy_from_slice(&self.segment.to_be_bytes());
        out[4..12].copy_from_slice(&self.offset.to_be_bytes());
        out[12..].copy_from_slice(&self.len.to_be_bytes());
        out
    }

    /// Decodes a stored pointer; `None` when it is not 16 bytes.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; 16] = bytes.try_into().ok()?;
        let (segment, rest) = bytes.split_first_chunk::<4>()?;
        let (offset, len) = rest.split_first_chunk::<8>()?;
        let len: &[u8; 4] = len.try_into().ok()?;
        Some(Self {
            segment: u32::from_be_bytes(*segment),
            offset: u64::from_be_bytes(*offset),
            len: u32::from_be_bytes(*len),
        })
    }
}

/// Live values and bytes of one segment, and its size on disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Use {
    count: u64,
    bytes: u64,
    size: u64,
}

impl Use {
    fn encode(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.count.to_le_bytes());
        out[8..].copy_from_slice(&self.bytes.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; 16] = bytes.try_into().ok()?;
        let (count, live) = bytes.split_first_chunk::<8>()?;
        let live: &[u8; 8] = live.try_into().ok()?;
        Some(Self {
            count: u64::from_le_bytes(*count),
            bytes: u64::from_le_bytes(*live),
            size: 0,
        })
    }
}

/// The segment being appended to.
struct Active {
    id: u32,
    file: File,
    len: u64,
}

impl Active {
    /// Appends `record` (not yet synced); where it is.
    fn append(&mut self, dir: &Path, record: &[u8]) -> Result<Pointer, StoreError> {
        if let Err(e) = self.file.write_all(record) {
            // Part of the record may be in the file: go on from its real end, so later
            // pointers stay right (the partial bytes are dead space).
            if let Ok(meta) = self.file.metadata() {
                self.len = meta.len();
            }
            let path = dir.join(segment_name(self.id));
            return Err(io_err(&path, "cannot append to value-log segment", &e));
        }
        let pointer = Pointer {
            segment: self.id,
            offset: self.len,
            len: u32::try_from(record.len()).unwrap_or(u32::MAX),
        };
        self.len = self
            .len
            .saturating_add(u64::try_from(record.len()).unwrap_or(u64::MAX));
        Ok(pointer)
    }
}

struct State {
    active: Active,
    /// The segment the collector is moving live values into, if one is open.
    collecting: Option<u32>,
    /// The number the next new segment takes.
    next_id: u32,
    uses: BTreeMap<u32, Use>,
    /// Emptied segments, unlinked after the next flush makes their emptiness durable.
    doomed: Vec<u32>,
    /// Emptied segments a flush has made durable, for the collector's thread to unlink.
    released: Vec<u32>,
    /// Segments the collector could not empty (a damaged record hides the rest): skipped.
    stuck: std::collections::BTreeSet<u32>,
}

/// The log of one sled tree's large values.
pub struct ValueLog {
    dir: PathBuf,
    state: Mutex<State>,
    handles: Mutex<HashMap<u32, Arc<File>>>,
    /// The collector's own segment: one collection at a time appends to it, outside `state`'s
    /// lock, so commits never wait for its writes.
    collector: Mutex<Option<Active>>,
    /// Emptied segments taken to be unlinked after a flush, not unlinked yet.
    unlinks_in_flight: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for ValueLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueLog")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// A value log's totals, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogTotals {
    /// Segments on disk.
    pub segments: u64,
    /// Bytes of the segments' files.
    pub file_bytes: u64,
    /// Bytes of live records.
    pub live_bytes: u64,
}

fn io_err(path: &Path, what: &str, e: &std::io::Error) -> StoreError {
    StoreError::Backend {
        path: path.display().to_string(),
        message: format!("{what}: {e}"),
    }
}

fn sled_err(dir: &Path, e: &sled::Error) -> StoreError {
    StoreError::Backend {
        path: dir.display().to_string(),
        message: e.to_string(),
    }
}

fn exhausted() -> StoreError {
    StoreError::Corrupt("value-log segment numbers are exhausted".into())
}

fn segment_name(id: u32) -> String {
    format!("{id:08}.seg")
}

fn create_segment(dir: &Path, id: u32) -> Result<Active, StoreError> {
    let path = dir.join(segment_name(id));
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .read(true)
        .open(&path)
        .map_err(|e| io_err(&path, "cannot create value-log segment", &e))?;
    // The new name must survive a crash before any pointer into it does.
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(dir, "cannot sync the value-log directory", &e))?;
    Ok(Active { id, file, len: 0 })
}

impl ValueLog {
    /// Opens the log in `dir` for `tree`: reads each segment's use, unlinks segments nothing
    /// lives in, refuses a missing segment that holds live values, starts a new segment, and
    /// moves into the log any logged value still stored inline (a store from before the log).
    pub fn open(dir: &Path, tree: &sled::Tree) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| io_err(dir, "cannot create the value-log directory", &e))?;
        let mut uses = BTreeMap::new();
        for item in tree.scan_prefix([USE_PREFIX]) {
            let (key, value) = item.map_err(|e| sled_err(dir, &e))?;
            let id = key
                .get(1..)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_be_bytes);
            let (Some(id), Some(used)) = (id, Use::decode(&value)) else {
                return Err(StoreError::Corrupt(format!(
                    "value-log use record {} of {} bytes is malformed",
                    hex::encode(&key),
                    value.len()
                )));
            };
            uses.insert(id, used);
        }
        let mut on_disk = BTreeMap::new();
        let entries =
            std::fs::read_dir(dir).map_err(|e| io_err(dir, "cannot list the value log", &e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err(dir, "cannot list the value log", &e))?;
            let name = entry.file_name();
            let Some(id) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".seg"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let size = entry
                .metadata()
                .map_err(|e| io_err(&entry.path(), "cannot read a segment's size", &e))?
                .len();
            on_disk.insert(id, size);
        }
        for (id, used) in &mut uses {
            match on_disk.get(id) {
                Some(size) => used.size = *size,
                None if used.count > 0 => {
                    return Err(StoreError::Corrupt(format!(
                        "value-log segment {} is missing from {} but holds {} live values",
                        segment_name(*id),
                        dir.display(),
                        used.count
                    )));
                }
                None => {}
            }
        }
        for id in on_disk.keys() {
            if uses.get(id).is_none_or(|u| u.count == 0) {
                let path = dir.join(segment_name(*id));
                std::fs::remove_file(&path)
                    .map_err(|e| io_err(&path, "cannot remove an empty value-log segment", &e))?;
            }
        }
        uses.retain(|_, u| u.count > 0);
        let next = on_disk
            .keys()
            .chain(uses.keys())
            .max()
            .map_or(Some(0), |m| m.checked_add(1))
            .ok_or_else(exhausted)?;
        let log = Self {
            dir: dir.to_path_buf(),
            state: Mutex::new(State {
                active: create_segment(dir, next)?,
                collecting: None,
                next_id: next.checked_add(1).ok_or_else(exhausted)?,
                uses,
                doomed: Vec::new(),
                released: Vec::new(),
                stuck: Default::default(),
            }),
            handles: Mutex::new(HashMap::new()),
            collector: Mutex::new(None),
            unlinks_in_flight: std::sync::atomic::AtomicUsize::new(0),
        };
        if tree.get(MARKER).map_err(|e| sled_err(dir, &e))?.is_none() {
            log.move_inline_values(tree)?;
        }
        Ok(log)
    }

    /// Moves logged values stored inline (by a node from before the log) into the log, a few
    /// megabytes per batch; a crash part-way leaves the rest inline, to be moved at the next open.
    fn move_inline_values(&self, tree: &sled::Tree) -> Result<(), StoreError> {
        let logged: Vec<u8> = (0..=u8::MAX).filter(|b| is_logged(&[*b])).collect();
        let mut moved = 0u64;
        for first in logged {
            loop {
                let mut batch = Vec::new();
                let mut bytes = 0usize;
                for item in tree.scan_prefix([first]) {
                    let (key, value) = item.map_err(|e| sled_err(&self.dir, &e))?;
                    bytes = bytes.saturating_add(value.len());
                    batch.push((key.to_vec(), value.to_vec()));
                    if bytes >= 4 << 20 {
                        break;
                    }
                }
                if batch.is_empty() {
                    break;
                }
                moved = moved.saturating_add(u64::try_from(batch.len()).unwrap_or(u64::MAX));
                let mut staged = self.stage();
                let mut sled_batch = sled::Batch::default();
                for (key, value) in &batch {
                    sled_batch.remove(key.as_slice());
                    staged.put_or_delete(tree, key, Some(value), &mut sled_batch)?;
                }
                staged.apply(tree, sled_batch)?;
            }
        }
        tree.insert(MARKER, &[1u8][..])
            .map_err(|e| sled_err(&self.dir, &e))?;
        tree.flush().map_err(|e| sled_err(&self.dir, &e))?;
        if moved > 0 {
            tracing::info!(values = moved, dir = %self.dir.display(), "moved large values into the value log");
        }
        Ok(())
    }

    fn handle(&self, segment: u32) -> Result<Arc<File>, StoreError> {
        let mut handles = self
            .handles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(file) = handles.get(&segment) {
            return Ok(file.clone());
        }
        let path = self.dir.join(segment_name(segment));
        let file = Arc::new(
            File::open(&path).map_err(|e| io_err(&path, "cannot open value-log segment", &e))?,
        );
        if handles.len() >= OPEN_HANDLES
            && let Some(evict) = handles.keys().next().copied()
        {
            handles.remove(&evict);
        }
        handles.insert(segment, file.clone());
        Ok(file)
    }

    /// The value of `key` that `pointer` (read from sled) points at.
    pub fn read(&self, key: &[u8], pointer: &[u8]) -> Result<Vec<u8>, StoreError> {
        let pointer = Pointer::decode(pointer).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "value-log pointer of key {} is {} bytes, not 16",
                hex::encode(key),
                pointer.len()
            ))
        })?;
        let file = self.handle(pointer.segment)?;
        let len = usize::try_from(pointer.len).unwrap_or(usize::MAX);
        let mut bytes = vec![0u8; len];
        let path = || self.dir.join(segment_name(pointer.segment));
        file.read_exact_at(&mut bytes, pointer.offset)
            .map_err(|e| {
                io_err(
                    &path(),
                    &format!("cannot read the record at {}", pointer.offset),
                    &e,
                )
            })?;
        match parse_record(&bytes) {
            Some((stored, value, total)) if stored == key && total == len => Ok(value.to_vec()),
            _ => Err(StoreError::Corrupt(format!(
                "value-log record of key {} at {} in {} is damaged (bad checksum or another key)",
                hex::encode(key),
                pointer.offset,
                path().display()
            ))),
        }
    }

    /// Runs `flush` (a sled flush); the segments emptied before it began are then empty for
    /// good and are unlinked here when `unlink` is true, else left for
    /// [`Self::unlink_released`] (block import flushes, and the collector's thread unlinks, so
    /// that freeing a file's blocks never adds to an import). A failed flush keeps them for the
    /// next one.
    pub fn flush_then_release(
        &self,
        flush: impl FnOnce() -> Result<(), StoreError>,
        unlink: bool,
    ) -> Result<(), StoreError> {
        let doomed = {
            let mut state = self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let doomed = std::mem::take(&mut state.doomed);
            self.unlinks_in_flight
                .fetch_add(doomed.len(), std::sync::atomic::Ordering::SeqCst);
            doomed
        };
        if let Err(e) = flush() {
            let count = doomed.len();
            self.state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .doomed
                .extend(doomed);
            self.unlinks_in_flight
                .fetch_sub(count, std::sync::atomic::Ordering::SeqCst);
            return Err(e);
        }
        if unlink {
            self.unlink(doomed);
        } else if !doomed.is_empty() {
            self.state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .released
                .extend(doomed);
        }
        Ok(())
    }

    /// Unlinks the segments a flush has made empty for good.
    pub fn unlink_released(&self) {
        let released = std::mem::take(
            &mut self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .released,
        );
        self.unlink(released);
    }

    fn unlink(&self, segments: Vec<u32>) {
        if segments.is_empty() {
            return;
        }
        let count = segments.len();
        // The file first, then its handle: `handle` opens a file while holding the map, so a
        // reader either opened it before it was removed (and its handle is dropped here) or
        // finds it gone (and reads the pointer again, see `SledStore::get`); no handle to a
        // removed file stays in the map holding its blocks.
        for id in segments {
            let path = self.dir.join(segment_name(id));
            if let Err(e) = std::fs::remove_file(&path) {
                // Left on disk: the next open removes a segment with no live value.
                tracing::warn!(path = %path.display(), error = %e, "cannot remove an empty value-log segment");
            }
            self.handles
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&id);
        }
        self.unlinks_in_flight
            .fetch_sub(count, std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits (up to 10 s) until no other thread is between emptying segments and unlinking
    /// them: after it, every segment emptied before the call and flushed is gone.
    pub fn settle(&self) {
        let started = std::time::Instant::now();
        while self
            .unlinks_in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0
            && started.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// The log's totals.
    pub fn totals(&self) -> LogTotals {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut totals = LogTotals {
            segments: 1,
            file_bytes: state.active.len,
            live_bytes: 0,
        };
        for (id, used) in &state.uses {
            totals.live_bytes = totals.live_bytes.saturating_add(used.bytes);
            if *id != state.active.id {
                totals.segments = totals.segments.saturating_add(1);
                totals.file_bytes = totals.file_bytes.saturating_add(used.size);
            }
        }
        totals
    }

    #[cfg(test)]
    pub(crate) fn debug_uses(&self) -> String {
        let state = self.state.lock().unwrap();
        format!(
            "active {} collecting {:?} stuck {:?} doomed {:?} uses {:?}",
            state.active.id, state.collecting, state.stuck, state.doomed, state.uses
        )
    }

    /// The directory of the segments.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests;
