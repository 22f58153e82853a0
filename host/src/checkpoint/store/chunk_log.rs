//! The append-only file holding a restore's verified chunks (`chunks-<generation>.log` in the
//! progress directory), and where a chunk sits in it ([`Location`]).
//!
//! The file knows nothing of indices or manifests: the sled records of
//! [`RestoreStore`](super::RestoreStore) say which bytes are which chunk. Bytes are appended at
//! reserved offsets (several verification threads may write at once, each its own range) and
//! become durable with [`ChunkLog::sync`]; a record may point at them only after that. A new
//! generation replaces the file when most of it is abandoned (a switch to another checkpoint).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};

use crate::state::merkle::Hash32;

/// What direct writes are aligned to: file offsets, lengths and buffer addresses (the largest
/// logical block size of common disks; a file system that wants more refuses the write, and
/// the log falls back to the page cache).
pub const DIRECT_ALIGN: usize = 4096;

/// Bytes of an encoded [`Location`].
const LOCATION_BYTES: usize = 8 + 8 + 4 + 32;

/// Where a verified chunk's bytes are: file generation, offset, length, and their sha256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location {
    /// The log file's generation.
    pub generation: u64,
    /// First byte in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
    /// sha256 of the bytes (checked when they are read back).
    pub hash: Hash32,
}

impl Location {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.len))
    }

    /// The record's value: generation, offset, length (big-endian) and hash.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(LOCATION_BYTES);
        out.extend_from_slice(&self.generation.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&self.len.to_be_bytes());
        out.extend_from_slice(&self.hash);
        out
    }

    /// Decodes a record's value; `None` when it is not one.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != LOCATION_BYTES {
            return None;
        }
        let (generation, rest) = bytes.split_first_chunk::<8>()?;
        let (offset, rest) = rest.split_first_chunk::<8>()?;
        let (len, hash) = rest.split_first_chunk::<4>()?;
        Some(Self {
            generation: u64::from_be_bytes(*generation),
            offset: u64::from_be_bytes(*offset),
            len: u32::from_be_bytes(*len),
            hash: hash.try_into().ok()?,
        })
    }
}

/// Why the chunk log failed: always this node's disk.
#[derive(Debug, thiserror::Error)]
#[error("checkpoint restore chunk log {}: cannot {action}: {source}", path.display())]
pub struct LogError {
    /// What was being done.
    pub action: &'static str,
    /// The file or directory.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: io::Error,
}

fn fail(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> LogError {
    let path = path.to_path_buf();
    move |source| LogError {
        action,
        path,
        source,
    }
}

/// Makes `dir`'s entries (a file created or removed in it) durable; `path` names the file.
fn sync_dir(dir: &Path, path: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(fail("fsync the directory of", path))
}

/// The path of generation `generation`'s file in `dir`.
pub fn log_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("chunks-{generation}.log"))
}

/// The generation of a log file's name, if it is one.
fn generation_of(name: &str) -> Option<u64> {
    name.strip_prefix("chunks-")?
        .strip_suffix(".log")?
        .parse()
        .ok()
}

/// Removes every log file in `dir` but generation `keep`'s (left by a crash before or after
/// the switch that replaced it). Returns how many were removed.
pub fn remove_other_generations(dir: &Path, keep: u64) -> Result<usize, LogError> {
    let mut removed = 0usize;
    for entry in fs::read_dir(dir).map_err(fail("list", dir))? {
        let entry = entry.map_err(fail("list", dir))?;
        let name = entry.file_name();
        let Some(generation) = name.to_str().and_then(generation_of) else {
            continue;
        };
        if generation != keep {
            let path = entry.path();
            fs::remove_file(&path).map_err(fail("remove", &path))?;
            removed = removed.saturating_add(1);
        }
    }
    Ok(removed)
}

/// One generation's file, opened for appending at reserved offsets.
///
/// Beside the ordinary handle it holds, where the file system allows it, a second one opened
/// for direct I/O (`O_DIRECT`, Linux): [`write_direct`](Self::write_direct) writes whole
/// aligned blocks through it, from the caller's memory to the disk, without the page cache —
/// a restore's chunks are written once and not read again unless it is resumed, and the page
/// cache's copy and bookkeeping were most of the writer's CPU (140 MB at 2M validators:
/// ~140 ms buffered against ~35 ms direct, the copy into the aligned buffer included).
#[derive(Debug, Clone)]
pub struct ChunkLog {
    file: Arc<File>,
    direct: Option<Arc<DirectFile>>,
    /// Shared, so that the store's clone of its log for each append allocates nothing.
    path: Arc<Path>,
    generation: u64,
}

/// The log's direct-I/O handle, and whether it still works (a file system may accept the
/// flag and refuse the writes; then the log writes through the page cache from there on).
#[derive(Debug)]
struct DirectFile {
    file: File,
    refused: AtomicBool,
}

/// Opens `path` for direct writes, if this platform and file system allow it.
fn open_direct(path: &Path) -> Option<Arc<DirectFile>> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        match OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(file) => Some(Arc::new(DirectFile {
                file,
                refused: AtomicBool::new(false),
            })),
            Err(e) => {
                tracing::debug!(file = %path.display(), error = %e, "no direct I/O for the chunk log; writing through the page cache");
                None
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        None
    }
}

impl ChunkLog {
    /// Creates generation `generation`'s file in `dir` (empty; an existing one is truncated)
    /// and makes its directory entry durable.
    pub fn create(dir: &Path, generation: u64) -> Result<Self, LogError> {
        let path = log_path(dir, generation);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(fail("create", &path))?;
        sync_dir(dir, &path)?;
        Ok(Self {
            file: Arc::new(file),
            direct: open_direct(&path),
            path: path.into(),
            generation,
        })
    }

    /// Opens generation `generation`'s file in `dir` if it exists.
    pub fn open(dir: &Path, generation: u64) -> Result<Option<Self>, LogError> {
        let path = log_path(dir, generation);
        match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => Ok(Some(Self {
                file: Arc::new(file),
                direct: open_direct(&path),
                path: path.into(),
                generation,
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(fail("open", &path)(e)),
        }
    }

    /// Its generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its length on disk.
    pub fn len(&self) -> Result<u64, LogError> {
        Ok(self
            .file
            .metadata()
            .map_err(fail("stat", &self.path))?
            .len())
    }

    /// Cuts the file to `len` bytes (a torn or unrecorded tail) and makes that durable.
    pub fn truncate(&self, len: u64) -> Result<(), LogError> {
        self.file
            .set_len(len)
            .and_then(|()| self.file.sync_all())
            .map_err(fail("truncate", &self.path))
    }

    /// Sets the file's length to `len` (cutting the padding of a direct write); durable with
    /// the next [`sync`](Self::sync).
    pub fn set_len(&self, len: u64) -> Result<(), LogError> {
        self.file
            .set_len(len)
            .map_err(fail("set the length of", &self.path))
    }

    /// Writes `bytes` at `offset` (a range reserved by the caller); not durable until
    /// [`sync`](Self::sync).
    pub fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), LogError> {
        self.file
            .write_all_at(bytes, offset)
            .map_err(fail("write", &self.path))
    }

    /// Whether [`write_direct`](Self::write_direct) bypasses the page cache (else it is an
    /// ordinary write).
    pub fn is_direct(&self) -> bool {
        self.direct
            .as_ref()
            .is_some_and(|d| !d.refused.load(Ordering::Relaxed))
    }

    /// Writes `bytes` at `offset` like [`write_at`](Self::write_at), directly to the disk when
    /// the log [`is_direct`](Self::is_direct): `offset`, the length and the address of `bytes`
    /// must then be multiples of [`DIRECT_ALIGN`]. A direct write that fails (a file system
    /// that wants another alignment, or none of it, says `EINVAL`) is written through the page
    /// cache instead, and so is every later one; what fails there is the error.
    pub fn write_direct(&self, offset: u64, bytes: &[u8]) -> Result<(), LogError> {
        if let Some(direct) = self
            .direct
            .as_ref()
            .filter(|d| !d.refused.load(Ordering::Relaxed))
        {
            match direct.file.write_all_at(bytes, offset) {
                Ok(()) => return Ok(()),
                // Written again through the page cache: a disk error or a full disk fails
                // there too, and is reported; anything else was the direct path's alone.
                Err(e) => {
                    tracing::info!(file = %self.path.display(), error = %e, "a direct write to the chunk log failed; writing through the page cache from now on");
                    direct.refused.store(true, Ordering::Relaxed);
                }
            }
        }
        self.write_at(offset, bytes)
    }

    /// Makes [`write_direct`](Self::write_direct) write through the page cache from now on,
    /// as a file system that refuses direct writes does (tests of that path).
    #[cfg(test)]
    pub fn refuse_direct(&self) {
        if let Some(direct) = &self.direct {
            direct.refused.store(true, Ordering::Relaxed);
        }
    }

    /// Reads up to `len` bytes at `offset`; fewer where the file ends before.
    pub fn read_up_to(&self, offset: u64, len: usize) -> Result<Vec<u8>, LogError> {
        let mut bytes = vec![0; len];
        let mut got = 0;
        while let Some(rest) = bytes.get_mut(got..).filter(|rest| !rest.is_empty()) {
            let at = offset.saturating_add(u64::try_from(got).unwrap_or(u64::MAX));
            match self.file.read_at(rest, at) {
                Ok(0) => break,
                Ok(n) => got = got.saturating_add(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(fail("read", &self.path)(e)),
            }
        }
        bytes.truncate(got);
        Ok(bytes)
    }

    /// Makes every byte written so far durable (`fdatasync`).
    pub fn sync(&self) -> Result<(), LogError> {
        self.file.sync_data().map_err(fail("fdatasync", &self.path))
    }

    /// The bytes at `location` if they are all there and hash to its hash; `Ok(None)` when
    /// they are not (a truncated or damaged file).
    pub fn read(&self, location: &Location) -> Result<Option<Vec<u8>>, LogError> {
        // A damaged record must not make us allocate up to 4 GiB for bytes that are not there.
        if location.end() > self.len()? {
            return Ok(None);
        }
        let len = usize::try_from(location.len).unwrap_or(usize::MAX);
        let mut bytes = vec![0; len];
        match self.file.read_exact_at(&mut bytes, location.offset) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(fail("read", &self.path)(e)),
        }
        let hash: Hash32 = Sha256::digest(&bytes).into();
        Ok((hash == location.hash).then_some(bytes))
    }

    /// Removes the file (and makes that durable).
    pub fn remove(self, dir: &Path) -> Result<(), LogError> {
        fs::remove_file(&self.path).map_err(fail("remove", &self.path))?;
        sync_dir(dir, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_round_trip_and_odd_values_are_refused() {
        let at = Location {
            generation: 3,
            offset: 1 << 40,
            len: 77,
            hash: [9; 32],
        };
        assert_eq!(Location::decode(&at.encode()), Some(at));
        assert_eq!(Location::decode(&at.encode()[1..]), None);
        assert_eq!(Location::decode(&[]), None);
    }

    #[test]
    fn reads_check_length_and_hash() {
        let dir = tempfile::tempdir().unwrap();
        let log = ChunkLog::create(dir.path(), 0).unwrap();
        log.write_at(0, b"hello").unwrap();
        log.sync().unwrap();
        let at = Location {
            generation: 0,
            offset: 0,
            len: 5,
            hash: Sha256::digest(b"hello").into(),
        };
        assert_eq!(log.read(&at).unwrap().as_deref(), Some(&b"hello"[..]));
        let past = Location { offset: 1, ..at };
        assert_eq!(log.read(&past).unwrap(), None, "past the end");
        let huge = Location {
            len: u32::MAX,
            ..at
        };
        assert_eq!(log.read(&huge).unwrap(), None, "longer than the file");
        let wrong = Location { len: 4, ..at };
        assert_eq!(log.read(&wrong).unwrap(), None, "hash mismatch");
    }

    #[test]
    fn only_the_kept_generation_survives_a_cleanup() {
        let dir = tempfile::tempdir().unwrap();
        for generation in [1, 2, 5] {
            ChunkLog::create(dir.path(), generation).unwrap();
        }
        fs::write(dir.path().join("other"), b"x").unwrap();
        assert_eq!(remove_other_generations(dir.path(), 2).unwrap(), 2);
        assert!(log_path(dir.path(), 2).exists());
        assert!(dir.path().join("other").exists());
        assert_eq!(generation_of("chunks-17.log"), Some(17));
        assert_eq!(generation_of("chunks-x.log"), None);
    }
}
