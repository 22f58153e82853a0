//! [`DataDirLock`]: one modnode process per data directory.
//!
//! A node's data directory holds several sled databases, each with its own file lock; a second
//! process on the same directory would meet the first of those locks only after loading its
//! modules, wait out [`LOCK_WAIT`](super::sled_open::LOCK_WAIT) and then fail with sled's raw
//! "could not acquire lock … WouldBlock". So `modnode run` takes this lock first, before any
//! database is opened, and a second process fails at once naming the pid that holds it.
//!
//! The lock is an exclusive `flock` on [`LOCK_FILE`], which also holds the holder's pid (for the
//! message only). The kernel releases a `flock` when its process ends, however it ends, so a
//! lock file left behind by a process that is gone (killed, crashed, or stopped cleanly: the
//! file is never deleted, see [`DataDirLock`]) is simply taken over and its pid rewritten. The
//! lock is per open file, so a second lock in the same process is refused too.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

/// Name of the lock file in the data directory.
pub const LOCK_FILE: &str = "modnode.lock";

/// Why the data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum DataDirLockError {
    /// Another live process (or another handle in this one) holds the lock: the operator's to
    /// resolve, two nodes must not share a directory.
    #[error(
        "another modnode (pid {}) holds {}; stop it, or give this node another --data-dir",
        pid.map_or_else(|| "unknown".to_string(), |p| p.to_string()),
        dir.display()
    )]
    Held {
        /// The holder's pid as its lock file says (none while it is still writing it).
        pid: Option<u32>,
        /// The data directory.
        dir: PathBuf,
    },
    /// The directory or its lock file could not be created, locked, read or written (ours: a
    /// permission or file-system problem at `path`).
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The directory or lock file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// The held lock on a data directory; released when dropped (or when the process ends).
///
/// The lock file stays behind on release: deleting it would let a process that opened it just
/// before the delete lock the unlinked file while a third creates and locks a new one — two
/// holders. A leftover file whose lock nobody holds is taken over by the next process.
#[derive(Debug)]
pub struct DataDirLock {
    // Held for its `flock`; closing the file releases it.
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Locks `dir` (created if missing) for this process, writing our pid to its
    /// [`LOCK_FILE`]. Never waits: a lock held elsewhere is [`DataDirLockError::Held`] at once.
    pub fn acquire(dir: &Path) -> Result<Self, DataDirLockError> {
        let io_err = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| DataDirLockError::Io {
                action,
                path,
                source,
            }
        };
        std::fs::create_dir_all(dir).map_err(io_err("create the data directory", dir))?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err("open the lock file", &path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(DataDirLockError::Held {
                    pid: read_pid(&mut file),
                    dir: dir.to_path_buf(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io_err("lock", &path)(e)),
        }
        if let Some(previous) = read_pid(&mut file) {
            tracing::debug!(
                previous,
                "took over the lock file of a process that no longer holds it"
            );
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(pid.as_bytes()))
            .and_then(|()| file.sync_data())
            .map_err(io_err("write our pid to", &path))?;
        Ok(Self { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The pid in a lock file, if it holds one.
fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    // A pid is a few digits; anything longer is not ours to believe.
    file.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_a_held_directory_fails_at_once_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("node");
        let held = DataDirLock::acquire(&data).unwrap();
        assert_eq!(held.path(), data.join(LOCK_FILE));
        let started = std::time::Instant::now();
        let err = DataDirLock::acquire(&data).unwrap_err();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        match &err {
            DataDirLockError::Held { pid, dir } => {
                assert_eq!(*pid, Some(std::process::id()));
                assert_eq!(*dir, data);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            err.to_string(),
            format!(
                "another modnode (pid {}) holds {}; stop it, or give this node another --data-dir",
                std::process::id(),
                data.display()
            )
        );
        // Released on drop: the next one takes it.
        drop(held);
        let again = DataDirLock::acquire(&data).unwrap();
        assert_eq!(
            std::fs::read_to_string(again.path()).unwrap(),
            format!("{}\n", std::process::id())
        );
    }

    #[test]
    fn a_lock_file_left_by_a_process_that_is_gone_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        // Above Linux's largest pid (2^22): no process has it. Longer than our pid, so a
        // rewrite that did not truncate would leave digits behind.
        std::fs::write(dir.path().join(LOCK_FILE), "999999999\n").unwrap();
        let lock = DataDirLock::acquire(dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(lock.path()).unwrap(),
            format!("{}\n", std::process::id())
        );
        // Garbage in a leftover file is no obstacle either.
        drop(lock);
        std::fs::write(dir.path().join(LOCK_FILE), "not a pid").unwrap();
        let lock = DataDirLock::acquire(dir.path()).unwrap();
        assert!(matches!(
            DataDirLock::acquire(dir.path()),
            Err(DataDirLockError::Held { pid: Some(p), .. }) if p == std::process::id()
        ));
        drop(lock);
    }
}
