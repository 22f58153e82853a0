//! Opening a sled database whose previous handle is still shutting down.
//!
//! sled takes an exclusive file lock on `<dir>/db` and releases it only when its last internal
//! reference is gone — which includes the background flusher thread, that notices the drop on its
//! next tick (up to its flush interval later). A node restarted in the same process, or a store
//! reopened right after it was dropped, can therefore meet its own lock for a moment. That is not
//! another process owning the directory, so opening waits for it briefly before giving up.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

/// How long an open keeps retrying while the directory's lock is held.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Opens `config`, retrying for up to [`LOCK_WAIT`] while the database lock is held. Any other
/// error, or a lock still held after the wait (another process uses the directory), is returned.
pub fn open_sled(config: &sled::Config) -> sled::Result<sled::Db> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        match config.open() {
            Err(sled::Error::Io(e)) if is_lock_busy(&e) && started.elapsed() < LOCK_WAIT => {
                thread::sleep(pause);
                // A back-off capped at 100 ms: saturating is the intent.
                pause = pause.saturating_mul(2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

/// Waits up to `within` until no sled handle holds the database in `path` (the directory given
/// to `sled::Config::path`) any more: its lock is free. A database that was dropped keeps its
/// page cache in memory until its flusher lets go, so a process that closes one store and opens
/// another (a restart in process, a benchmark's runs) waits here for the memory to be released.
/// True when released (or there is no database), false when still held at the deadline.
pub fn wait_released(path: &std::path::Path, within: Duration) -> io::Result<bool> {
    let file = match std::fs::File::open(path.join("db")) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(e),
    };
    let started = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        match file.try_lock() {
            Ok(()) => {
                file.unlock()?;
                return Ok(true);
            }
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < within => {
                thread::sleep(pause);
                pause = pause.saturating_mul(2).min(Duration::from_millis(100));
            }
            Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// sled 0.34 reports a busy lock as `ErrorKind::Other` with the `WouldBlock` cause only in the
/// message (`config.rs`: "could not acquire lock on …: Os { … WouldBlock … }").
fn is_lock_busy(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || {
        let text = e.to_string();
        text.contains("could not acquire lock") && text.contains("WouldBlock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reopening_right_after_a_drop_waits_for_the_lock_instead_of_failing() {
        let dir = tempfile::tempdir().unwrap();
        let config = sled::Config::new().path(dir.path().join("db"));
        for round in 0u8..20 {
            let db = open_sled(&config).unwrap();
            db.insert([round], &[round]).unwrap();
            db.flush().unwrap();
            drop(db);
        }
        let db = open_sled(&config).unwrap();
        assert_eq!(db.len(), 20);
    }

    #[test]
    fn a_lock_held_by_a_live_handle_is_reported_after_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let config = sled::Config::new().path(dir.path().join("db"));
        let _held = open_sled(&config).unwrap();
        let started = Instant::now();
        let err = open_sled(&config).unwrap_err();
        assert!(
            started.elapsed() >= LOCK_WAIT,
            "gave up after {:?}",
            started.elapsed()
        );
        assert!(err.to_string().contains("lock"), "{err}");
    }

    #[test]
    fn a_dropped_database_is_released_and_a_live_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        assert!(
            wait_released(&path, Duration::ZERO).unwrap(),
            "no database yet"
        );
        let db = open_sled(&sled::Config::new().path(&path)).unwrap();
        db.insert(b"k", b"v").unwrap();
        assert!(
            !wait_released(&path, Duration::from_millis(50)).unwrap(),
            "held"
        );
        drop(db);
        assert!(
            wait_released(&path, LOCK_WAIT).unwrap(),
            "released after the drop"
        );
        // Released means a new handle opens at once.
        let started = Instant::now();
        drop(sled::Config::new().path(&path).open().unwrap());
        assert!(started.elapsed() < LOCK_WAIT);
    }
}
