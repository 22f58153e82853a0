//! The admin bearer token and the address file, both kept in the node's data directory.
//!
//! The token is 32 random bytes stored as 64 hex characters and a newline in `admin.token`,
//! created on first start and reused afterwards so scripts keep working across restarts. A file
//! that is not a token is an error, never replaced: the operator decides what happened to it.

use std::fs;
use std::net::SocketAddr;
use std::path::Path;

use super::AdminError;

/// File name of the token inside the data directory.
pub const TOKEN_FILE: &str = "admin.token";
/// File name of the bound admin address inside the data directory.
pub const ADDR_FILE: &str = "admin.addr";

/// The secret a client presents as `Authorization: Bearer <hex>`.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken([u8; 32]);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

impl AdminToken {
    /// Loads `<data_dir>/admin.token`, creating the directory and a fresh token if absent.
    pub fn load_or_create(data_dir: &Path) -> Result<Self, AdminError> {
        let path = data_dir.join(TOKEN_FILE);
        let exists = path.try_exists().map_err(|source| AdminError::Io {
            action: "inspect admin token file",
            path: path.clone(),
            source,
        })?;
        if exists {
            return Self::load(data_dir);
        }
        fs::create_dir_all(data_dir).map_err(|source| AdminError::Io {
            action: "create data directory",
            path: data_dir.to_path_buf(),
            source,
        })?;
        let token = Self(rand::random());
        write_atomically(&path, format!("{}\n", token.to_hex()).as_bytes())?;
        tracing::info!(path = %path.display(), "created admin token");
        Ok(token)
    }

    /// Loads an existing `<data_dir>/admin.token`.
    pub fn load(data_dir: &Path) -> Result<Self, AdminError> {
        Self::load_file(&data_dir.join(TOKEN_FILE))
    }

    /// Loads a token file (64 hex characters and a newline). Warns when other users can
    /// read it: anyone who can read the token administers the node.
    pub fn load_file(path: &Path) -> Result<Self, AdminError> {
        let path = path.to_path_buf();
        warn_if_readable_by_others(&path);
        let text = fs::read(&path).map_err(|source| AdminError::Io {
            action: "read admin token file",
            path: path.clone(),
            source,
        })?;
        let corrupt = |reason: String| AdminError::CorruptToken {
            path: path.clone(),
            reason,
        };
        let hex_part = text.strip_suffix(b"\n").unwrap_or(&text);
        if hex_part.len() != 64 {
            return Err(corrupt(format!(
                "expected 64 hex characters and a newline, found {} bytes",
                text.len()
            )));
        }
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut bytes).map_err(|e| corrupt(e.to_string()))?;
        Ok(Self(bytes))
    }

    /// The token as the client sends it: 64 lowercase hex characters.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Whether `presented` (hex) is this token. Comparison time does not depend on where the
    /// bytes differ, so the token cannot be guessed byte by byte from response times.
    pub fn matches(&self, presented: &str) -> bool {
        let mut other = [0u8; 32];
        if hex::decode_to_slice(presented, &mut other).is_err() {
            return false;
        }
        let diff = self
            .0
            .iter()
            .zip(&other)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

/// Logs a warning when `path` is readable or writable by users other than its owner.
#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = fs::metadata(path) {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format_args!("{mode:o}"),
                "admin token file is accessible to other users, who can administer the node with it; run `chmod 600` on it"
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_path: &Path) {}

/// Records the admin API's bound address in `<data_dir>/admin.addr` for clients.
pub fn write_admin_addr(data_dir: &Path, addr: SocketAddr) -> Result<(), AdminError> {
    write_atomically(&data_dir.join(ADDR_FILE), format!("{addr}\n").as_bytes())
}

/// Reads the address a running node's admin API is bound to from `<data_dir>/admin.addr`.
pub fn read_admin_addr(data_dir: &Path) -> Result<SocketAddr, AdminError> {
    let path = data_dir.join(ADDR_FILE);
    let text = fs::read_to_string(&path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => AdminError::NoAddrFile { path: path.clone() },
        _ => AdminError::Io {
            action: "read admin address file",
            path: path.clone(),
            source,
        },
    })?;
    text.trim().parse().map_err(|e| AdminError::BadAddrFile {
        path,
        reason: format!("{e}: {:?}", text.chars().take(64).collect::<String>()),
    })
}

fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), AdminError> {
    crate::files::write_private_atomically(path, contents).map_err(|e| AdminError::Io {
        action: e.action,
        path: e.path,
        source: e.source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_is_created_private_and_reloaded_identical() {
        let dir = tempfile::tempdir().unwrap();
        let created = AdminToken::load_or_create(dir.path()).unwrap();
        let path = dir.path().join(TOKEN_FILE);
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{}\n", created.to_hex()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(AdminToken::load_or_create(dir.path()).unwrap(), created);
        assert!(created.matches(&created.to_hex()));
        assert!(!created.matches(&AdminToken([0; 32]).to_hex()));
        assert!(!created.matches("not hex"));
        // No temporary files left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// Captures what `tracing` logs while `f` runs.
    fn logs_of(f: impl FnOnce()) -> String {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    #[cfg(unix)]
    #[test]
    fn a_token_readable_by_others_is_warned_about() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let token = AdminToken::load_or_create(dir.path()).unwrap();
        let path = dir.path().join(TOKEN_FILE);
        let quiet = logs_of(|| assert_eq!(AdminToken::load(dir.path()).unwrap(), token));
        assert!(!quiet.contains("WARN"), "{quiet}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let logs = logs_of(|| assert_eq!(AdminToken::load(dir.path()).unwrap(), token));
        assert!(
            logs.contains("WARN") && logs.contains("chmod 600") && logs.contains("644"),
            "{logs}"
        );
    }

    #[test]
    fn corrupt_token_is_an_error_naming_the_file_and_left_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TOKEN_FILE);
        for bad in ["short\n", &format!("{}\n", "zz".repeat(32))] {
            fs::write(&path, bad).unwrap();
            let err = AdminToken::load_or_create(dir.path()).unwrap_err();
            assert!(matches!(err, AdminError::CorruptToken { .. }), "{err:?}");
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{err}"
            );
            assert_eq!(fs::read_to_string(&path).unwrap(), bad);
        }
    }

    #[test]
    fn addr_file_round_trips_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ADDR_FILE);
        let err = read_admin_addr(dir.path()).unwrap_err();
        assert!(matches!(err, AdminError::NoAddrFile { .. }));
        assert!(err.to_string().contains(&path.display().to_string()));
        let addr: SocketAddr = "127.0.0.1:4242".parse().unwrap();
        write_admin_addr(dir.path(), addr).unwrap();
        assert_eq!(read_admin_addr(dir.path()).unwrap(), addr);
        fs::write(&path, "nonsense").unwrap();
        let err = read_admin_addr(dir.path()).unwrap_err();
        assert!(matches!(err, AdminError::BadAddrFile { .. }));
        assert!(err.to_string().contains(&path.display().to_string()));
    }
}
