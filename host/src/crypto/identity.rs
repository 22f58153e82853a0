//! A node's public identity: its ed25519 public key, [`NodeId`], and the check of a signature
//! made with it.
//!
//! It lives below the chain because block seals and equivocation evidence are checked against
//! the authorities' node ids; the key file and the TLS certificate built from the key stay in
//! `net::identity`, which re-exports these types.

use std::fmt;
use std::str::FromStr;

/// Length in bytes of a [`NodeId`] (an ed25519 public key).
pub const NODE_ID_LEN: usize = 32;

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
}
