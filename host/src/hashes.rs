//! The 32-byte hashes the node names things by, one type per meaning: a block's hash, a state's
//! root, a module's hash. Each is a `[u8; 32]` underneath, shown as lowercase hex (`Display`,
//! logs, errors, the admin API) and parsed back from exactly 64 hex digits (`FromStr`), so a
//! block hash cannot be passed where a module hash is meant and nothing travels as a hex
//! `String` to be parsed back later.

use std::fmt;
use std::str::FromStr;

/// A string that is not 64 hex digits, where a hash was expected (the caller's input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} must be 64 hex digits (32 bytes), got {got:?}")]
pub struct ParseHashError {
    /// Which hash was expected (`"block hash"`, `"module hash"`, …).
    pub what: &'static str,
    /// The input, cut to 80 characters.
    pub got: String,
}

/// Parses exactly 64 hex digits (either case) into 32 bytes.
fn parse_hex32(what: &'static str, s: &str) -> Result<[u8; 32], ParseHashError> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).map_err(|_| ParseHashError {
        what,
        got: s.chars().take(80).collect(),
    })?;
    Ok(out)
}

macro_rules! hash_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub [u8; 32]);

        impl $name {
            /// The hash of these 32 bytes.
            pub const fn new(bytes: [u8; 32]) -> Self {
                Self(bytes)
            }

            /// The 32 bytes.
            pub const fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }

            /// The 32 bytes, by value.
            pub const fn to_bytes(self) -> [u8; 32] {
                self.0
            }

            /// Lowercase hex, 64 digits.
            pub fn to_hex(&self) -> String {
                hex::encode(self.0)
            }

            /// The first 8 hex digits, as logs abbreviate it.
            pub fn short(&self) -> String {
                let [a, b, c, d, ..] = self.0;
                hex::encode([a, b, c, d])
            }
        }

        impl From<[u8; 32]> for $name {
            fn from(bytes: [u8; 32]) -> Self {
                Self(bytes)
            }
        }

        impl From<$name> for [u8; 32] {
            fn from(hash: $name) -> Self {
                hash.0
            }
        }

        impl AsRef<[u8]> for $name {
            fn as_ref(&self) -> &[u8] {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.to_hex())
            }
        }

        impl FromStr for $name {
            type Err = ParseHashError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                parse_hex32($what, s).map(Self)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_hex())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

hash_type!(
    /// A block's hash: SHA-256 of its encoded header (`BlockHeader::hash`).
    BlockHash,
    "block hash"
);

hash_type!(
    /// A state's root: the hash the header commits to after the block's transition.
    StateRoot,
    "state root"
);

hash_type!(
    /// A module's hash: SHA-256 of its component bytes, how the schedule, the module store and
    /// the admin API name a module.
    ModuleHash,
    "module hash"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_round_trips_through_hex_and_json() {
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::try_from(i * 7 % 256).unwrap();
        }
        let hash = ModuleHash::new(bytes);
        assert_eq!(hash.to_hex().len(), 64);
        assert_eq!(hash.to_hex().parse::<ModuleHash>().unwrap(), hash);
        assert_eq!(
            hash.to_hex().to_uppercase().parse::<ModuleHash>().unwrap(),
            hash
        );
        let json = serde_json::to_string(&hash).unwrap();
        assert_eq!(json, format!("\"{}\"", hash.to_hex()));
        assert_eq!(serde_json::from_str::<ModuleHash>(&json).unwrap(), hash);
        assert_eq!(hash.short(), &hash.to_hex()[..8]);
    }

    #[test]
    fn a_string_that_is_not_64_hex_digits_is_refused_and_named() {
        for bad in ["", "ab", &"0".repeat(63), &"0".repeat(65), &"g".repeat(64)] {
            let err = bad.parse::<BlockHash>().unwrap_err();
            assert_eq!(err.what, "block hash");
            assert!(err.to_string().contains("64 hex digits"), "{err}");
        }
        let err = serde_json::from_str::<StateRoot>("\"00\"").unwrap_err();
        assert!(err.to_string().contains("state root"), "{err}");
    }
}
