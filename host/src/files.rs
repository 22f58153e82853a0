//! Small files in the data directory written so that a crash never leaves a partial one.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// What failed while writing a file atomically.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}: {source}", path.display())]
pub struct AtomicWriteError {
    /// The step that failed, e.g. "write temporary file".
    pub action: &'static str,
    /// The file it failed on.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: io::Error,
}

/// Writes `contents` to `path`: first to a mode-`0600` temporary file next to it, fsynced, then
/// renamed into place, then the directory fsynced. A reader sees the old file or the whole new
/// one, never a partial write, and a failed attempt leaves no temporary file behind (it may
/// hold a secret).
pub fn write_private_atomically(path: &Path, contents: &[u8]) -> Result<(), AtomicWriteError> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{:016x}.tmp", rand::random::<u64>()));
    let result = write_then_rename(&tmp, path, contents);
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result?;
    // The file is in place either way; only the rename's durability is in doubt.
    if let Err(e) = File::open(dir).and_then(|d| d.sync_all()) {
        tracing::warn!(dir = %dir.display(), error = %e, "could not fsync directory after writing {name}");
    }
    Ok(())
}

fn write_then_rename(tmp: &Path, path: &Path, contents: &[u8]) -> Result<(), AtomicWriteError> {
    let err = |action: &'static str, p: &Path| {
        let path = p.to_path_buf();
        move |source| AtomicWriteError {
            action,
            path,
            source,
        }
    };
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(tmp)
        .map_err(err("create temporary file", tmp))?;
    file.write_all(contents)
        .map_err(err("write temporary file", tmp))?;
    file.sync_all().map_err(err("fsync temporary file", tmp))?;
    drop(file);
    fs::rename(tmp, path).map_err(err("move into place", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_whole_files_privately_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        write_private_atomically(&path, b"one").unwrap();
        write_private_atomically(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let missing = dir.path().join("no-such-dir").join("x");
        let err = write_private_atomically(&missing, b"x").unwrap_err();
        assert!(err.to_string().contains("no-such-dir"), "{err}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
