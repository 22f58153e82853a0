//! Persistent ed25519 node identity.
//!
//! A node's identity is an ed25519 key pair stored as an unencrypted PKCS#8 v2
//! DER document in `<data_dir>/node.key` (file mode `0600` on Unix). The
//! [`NodeId`] is the raw 32-byte ed25519 public key; it is what peers see in
//! the TLS certificate (see [`super::tls`]) and what dialers pin.
//!
//! The key file is created on first start (written to a temporary file in the
//! same directory, fsynced, then renamed into place) and is never rewritten
//! afterwards. A file that exists but cannot be parsed is reported as
//! [`IdentityError::Corrupt`]; it is never silently replaced, because that
//! would change the node's identity.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rcgen::{KeyPair, PKCS_ED25519};
use rustls::pki_types::PrivatePkcs8KeyDer;

pub use crate::crypto::identity::{NODE_ID_LEN, NodeId, ParseNodeIdError};

/// File name of the identity key inside the data directory.
pub const KEY_FILE_NAME: &str = "node.key";

/// Key files larger than this are rejected without being parsed (a PKCS#8 v2
/// ed25519 document is 83–85 bytes).
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// Error loading or creating a [`NodeIdentity`].
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// A filesystem operation on the key file or data directory failed.
    #[error("failed to {action} {}: {source}", path.display())]
    Io {
        /// What was being attempted ("read", "create directory", ...).
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying I/O error.
        source: io::Error,
    },
    /// The key file exists but does not hold a valid ed25519 PKCS#8 key.
    #[error(
        "node identity key file {} is corrupt ({reason}). It was NOT modified. \
         Restore it from a backup, or move it aside to generate a fresh identity on the \
         next start (this changes the node id peers know this node by)",
        path.display()
    )]
    Corrupt {
        /// The corrupt key file.
        path: PathBuf,
        /// Why it was rejected.
        reason: String,
    },
    /// Generating a new ed25519 key failed (system RNG failure).
    #[error("failed to generate a new ed25519 node key: {reason}")]
    Generate {
        /// What went wrong.
        reason: String,
    },
}

/// A node's ed25519 key pair together with its [`NodeId`].
///
/// `Debug` never prints the private key.
#[derive(Clone)]
pub struct NodeIdentity {
    /// Unencrypted PKCS#8 (v2) document holding the private key.
    pkcs8: Vec<u8>,
    node_id: NodeId,
    key_path: Option<PathBuf>,
}

impl fmt::Debug for NodeIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeIdentity")
            .field("node_id", &self.node_id)
            .field("key_path", &self.key_path)
            .finish_non_exhaustive()
    }
}

impl NodeIdentity {
    /// Loads `<data_dir>/node.key`, or creates it (and `data_dir`) if it does
    /// not exist yet.
    ///
    /// A new key is written to a temporary file in `data_dir` with mode `0600`,
    /// fsynced, and renamed into place, so a crash never leaves a half-written
    /// key file. An existing file that does not parse is an
    /// [`IdentityError::Corrupt`] error and is left untouched. Two processes
    /// must not share one data directory.
    pub fn load_or_create(data_dir: &Path) -> Result<Self, IdentityError> {
        let path = data_dir.join(KEY_FILE_NAME);
        match fs::metadata(&path) {
            Ok(_) => Self::load(&path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Self::create(data_dir, &path),
            Err(source) => Err(IdentityError::Io {
                action: "inspect node key file",
                path,
                source,
            }),
        }
    }

    /// Generates a fresh identity that is kept only in memory (for tests and
    /// tools).
    pub fn generate() -> Result<Self, IdentityError> {
        let key = KeyPair::generate_for(&PKCS_ED25519).map_err(|e| IdentityError::Generate {
            reason: e.to_string(),
        })?;
        Self::from_pkcs8(key.serialize_der(), None)
            .map_err(|reason| IdentityError::Generate { reason })
    }

    /// This node's public identity.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// Signs `message` with the node key (ed25519), e.g. a block hash as its proposer.
    pub fn sign(&self, message: &[u8]) -> Result<[u8; 64], IdentityError> {
        let key = ring::signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(&self.pkcs8)
            .map_err(|e| IdentityError::Generate {
                reason: format!("node key unusable for signing: {e}"),
            })?;
        let signature = key.sign(message);
        signature
            .as_ref()
            .try_into()
            .map_err(|_| IdentityError::Generate {
                reason: "ed25519 signature is not 64 bytes".into(),
            })
    }

    /// The key file this identity was loaded from or written to, if any.
    pub fn key_path(&self) -> Option<&Path> {
        self.key_path.as_deref()
    }

    /// The private key as an unencrypted PKCS#8 DER document (for building
    /// the TLS certificate).
    pub(super) fn pkcs8_der(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The key pair in `rcgen` form (for signing the TLS certificate).
    pub(super) fn key_pair(&self) -> Result<KeyPair, rcgen::Error> {
        KeyPair::from_pkcs8_der_and_sign_algo(
            &PrivatePkcs8KeyDer::from(self.pkcs8.as_slice()),
            &PKCS_ED25519,
        )
    }

    fn from_pkcs8(pkcs8: Vec<u8>, key_path: Option<PathBuf>) -> Result<Self, String> {
        let key = KeyPair::from_pkcs8_der_and_sign_algo(
            &PrivatePkcs8KeyDer::from(pkcs8.as_slice()),
            &PKCS_ED25519,
        )
        .map_err(|e| format!("not an ed25519 PKCS#8 DER private key: {e}"))?;
        let node_id = NodeId::try_from(key.public_key_raw()).map_err(|e| e.to_string())?;
        Ok(Self {
            pkcs8,
            node_id,
            key_path,
        })
    }

    fn load(path: &Path) -> Result<Self, IdentityError> {
        let io_err = |action: &'static str| {
            let path = path.to_path_buf();
            move |source| IdentityError::Io {
                action,
                path,
                source,
            }
        };
        let meta = fs::metadata(path).map_err(io_err("inspect node key file"))?;
        if !meta.is_file() {
            return Err(IdentityError::Corrupt {
                path: path.to_path_buf(),
                reason: "not a regular file".into(),
            });
        }
        if meta.len() > MAX_KEY_FILE_BYTES {
            return Err(IdentityError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("{} bytes is far too large for an ed25519 key", meta.len()),
            });
        }
        warn_if_permissive(path, &meta);
        let bytes = fs::read(path).map_err(io_err("read node key file"))?;
        let identity = Self::from_pkcs8(bytes, Some(path.to_path_buf())).map_err(|reason| {
            IdentityError::Corrupt {
                path: path.to_path_buf(),
                reason,
            }
        })?;
        tracing::info!(node_id = %identity.node_id, path = %path.display(), "loaded node identity");
        Ok(identity)
    }

    fn create(data_dir: &Path, path: &Path) -> Result<Self, IdentityError> {
        fs::create_dir_all(data_dir).map_err(|source| IdentityError::Io {
            action: "create data directory",
            path: data_dir.to_path_buf(),
            source,
        })?;
        let mut identity = Self::generate()?;
        write_atomically(path, &identity.pkcs8)?;
        identity.key_path = Some(path.to_path_buf());
        tracing::info!(node_id = %identity.node_id, path = %path.display(), "created new node identity");
        Ok(identity)
    }
}

/// Writes the key through [`crate::files::write_private_atomically`] (0600, temp + rename),
/// so a crash never leaves a half-written key file.
fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), IdentityError> {
    crate::files::write_private_atomically(path, contents).map_err(|e| IdentityError::Io {
        action: e.action,
        path: e.path,
        source: e.source,
    })
}

#[cfg(unix)]
fn warn_if_permissive(path: &Path, meta: &fs::Metadata) {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            mode = format_args!("{mode:o}"),
            "node key file is readable by other users; run `chmod 600` on it"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_permissive(_path: &Path, _meta: &fs::Metadata) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_persists_across_loads() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path().join("nested").join("data");
        let a = NodeIdentity::load_or_create(&data_dir).unwrap();
        let b = NodeIdentity::load_or_create(&data_dir).unwrap();
        assert_eq!(a.node_id(), b.node_id());
        assert_eq!(a.pkcs8_der(), b.pkcs8_der());
        assert_eq!(b.key_path(), Some(data_dir.join(KEY_FILE_NAME).as_path()));
        // No temporary files left behind.
        let names: Vec<_> = fs::read_dir(&data_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(KEY_FILE_NAME)]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(data_dir.join(KEY_FILE_NAME))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // A different data dir gets a different identity.
        let other = NodeIdentity::load_or_create(&dir.path().join("other")).unwrap();
        assert_ne!(other.node_id(), a.node_id());
        // The rcgen key pair matches the node id.
        assert_eq!(
            a.key_pair().unwrap().public_key_raw(),
            a.node_id().as_bytes()
        );
    }

    #[test]
    fn corrupt_key_file_is_an_error_and_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(KEY_FILE_NAME);
        for garbage in [&b""[..], b"not a key", &[0x30, 0x82, 0xff, 0xff][..]] {
            fs::write(&path, garbage).unwrap();
            let err = NodeIdentity::load_or_create(dir.path()).unwrap_err();
            assert!(matches!(err, IdentityError::Corrupt { .. }), "{err:?}");
            let msg = err.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(msg.contains("move it aside"), "{msg}");
            assert_eq!(
                fs::read(&path).unwrap(),
                garbage,
                "file must not be touched"
            );
        }

        // A flipped bit in a real key is detected too (PKCS#8 v2 carries the
        // public key, which must match the seed).
        let good = NodeIdentity::generate().unwrap();
        let mut bytes = good.pkcs8_der().to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let err = NodeIdentity::load_or_create(dir.path()).unwrap_err();
        assert!(matches!(err, IdentityError::Corrupt { .. }), "{err:?}");

        // An ECDSA key is not an ed25519 identity.
        let p256 = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        fs::write(&path, p256.serialize_der()).unwrap();
        let err = NodeIdentity::load_or_create(dir.path()).unwrap_err();
        assert!(matches!(err, IdentityError::Corrupt { .. }), "{err:?}");
    }

    #[test]
    fn debug_does_not_leak_private_key() {
        let id = NodeIdentity::generate().unwrap();
        let dbg = format!("{id:?}");
        assert!(dbg.contains(&id.node_id().to_string()));
        assert!(!dbg.contains(&hex::encode(id.pkcs8_der())));
        assert!(!dbg.contains("pkcs8"));
    }
}
