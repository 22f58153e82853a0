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
use std::str::FromStr;

use rcgen::{KeyPair, PKCS_ED25519};
use rustls::pki_types::PrivatePkcs8KeyDer;

/// File name of the identity key inside the data directory.
pub const KEY_FILE_NAME: &str = "node.key";

/// Length in bytes of a [`NodeId`] (an ed25519 public key).
pub const NODE_ID_LEN: usize = 32;

/// Key files larger than this are rejected without being parsed (a PKCS#8 v2
/// ed25519 document is 83–85 bytes).
const MAX_KEY_FILE_BYTES: u64 = 4096;

/// A node's public identity: its 32-byte ed25519 public key.
///
/// `Display`/`FromStr` use lowercase hexadecimal (64 characters).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId([u8; NODE_ID_LEN]);

impl NodeId {
    /// Whether `signature` is this node's ed25519 signature over `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, &self.0)
            .verify(message, signature)
            .is_ok()
    }

    /// Wraps raw ed25519 public key bytes.
    pub const fn from_bytes(bytes: [u8; NODE_ID_LEN]) -> Self {
        Self(bytes)
    }

    /// The raw ed25519 public key bytes.
    pub const fn as_bytes(&self) -> &[u8; NODE_ID_LEN] {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeId({self})")
    }
}

impl FromStr for NodeId {
    type Err = ParseNodeIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let input = truncate_for_error(s);
        if s.len() != NODE_ID_LEN * 2 {
            return Err(ParseNodeIdError::WrongLength {
                input,
                len: s.len(),
            });
        }
        let mut bytes = [0u8; NODE_ID_LEN];
        hex::decode_to_slice(s, &mut bytes)
            .map_err(|source| ParseNodeIdError::NotHex { input, source })?;
        Ok(Self(bytes))
    }
}

impl TryFrom<&[u8]> for NodeId {
    type Error = ParseNodeIdError;

    fn try_from(bytes: &[u8]) -> Result<Self, Self::Error> {
        <[u8; NODE_ID_LEN]>::try_from(bytes)
            .map(Self)
            .map_err(|_| ParseNodeIdError::WrongByteLength { len: bytes.len() })
    }
}

fn truncate_for_error(s: &str) -> String {
    const MAX: usize = 80;
    match s.char_indices().nth(MAX) {
        Some((idx, _)) => format!("{}…", &s[..idx]),
        None => s.to_owned(),
    }
}

/// Error parsing a [`NodeId`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseNodeIdError {
    /// The string does not have exactly 64 characters.
    #[error(
        "invalid node id {input:?}: expected 64 hex characters (a 32-byte ed25519 public key), got {len}"
    )]
    WrongLength {
        /// The offending input (truncated to 80 characters).
        input: String,
        /// Its length in bytes.
        len: usize,
    },
    /// The string has the right length but is not hexadecimal.
    #[error("invalid node id {input:?}: not hexadecimal ({source})")]
    NotHex {
        /// The offending input.
        input: String,
        /// The hex decoder's complaint.
        source: hex::FromHexError,
    },
    /// A byte slice did not have exactly 32 bytes.
    #[error("invalid node id: expected 32 bytes, got {len}")]
    WrongByteLength {
        /// Length of the offending slice.
        len: usize,
    },
}

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
    fn node_id_hex_roundtrip_and_errors() {
        let id = NodeId::from_bytes([0xab; 32]);
        let s = id.to_string();
        assert_eq!(s.len(), 64);
        assert_eq!(s.parse::<NodeId>().unwrap(), id);
        assert_eq!(s.to_uppercase().parse::<NodeId>().unwrap(), id);

        let err = "abcd".parse::<NodeId>().unwrap_err();
        assert!(matches!(err, ParseNodeIdError::WrongLength { len: 4, .. }));
        assert!(err.to_string().contains("64 hex characters"), "{err}");

        let bad = "zz".repeat(32);
        let err = bad.parse::<NodeId>().unwrap_err();
        assert!(matches!(err, ParseNodeIdError::NotHex { .. }));
        assert!(err.to_string().contains("not hexadecimal"), "{err}");

        assert!(NodeId::try_from(&[1u8; 31][..]).is_err());
        assert_eq!(format!("{id:?}"), format!("NodeId({s})"));
    }

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
