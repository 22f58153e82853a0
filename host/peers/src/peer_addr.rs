//! [`PeerAddr`]: a node identity with one of its listen addresses, written `NodeId@addr`
//! (64 hex digits, `@`, a socket address), as in bootstrap configuration.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use crate::NodeId;
use crate::error::PeerAddrParseError;

/// A node and one address it listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PeerAddr {
    /// The node's identity.
    pub node: NodeId,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl FromStr for PeerAddr {
    type Err = PeerAddrParseError;

    /// Parses `NodeId@addr`, e.g. `3b6a…e1@10.0.0.7:9000` or `…@[::1]:9000`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (id, addr) = s
            .split_once('@')
            .ok_or_else(|| PeerAddrParseError::MissingAt(s.to_owned()))?;
        let node = parse_node_id(id)?;
        let addr = addr.parse().map_err(|source| PeerAddrParseError::Addr {
            addr: addr.to_owned(),
            source,
        })?;
        Ok(Self { node, addr })
    }
}

impl fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.node {
            write!(f, "{byte:02x}")?;
        }
        write!(f, "@{}", self.addr)
    }
}

/// Parses a node id written as 64 hex digits (either case).
pub fn parse_node_id(hex: &str) -> Result<NodeId, PeerAddrParseError> {
    let digits = hex.as_bytes();
    if digits.len() != 64 {
        return Err(PeerAddrParseError::IdLength(digits.len()));
    }
    let mut node = [0u8; 32];
    for (byte, pair) in node.iter_mut().zip(digits.chunks_exact(2)) {
        let [hi, lo] = pair else {
            return Err(PeerAddrParseError::IdLength(digits.len()));
        };
        *byte = (hex_value(*hi)? << 4) | hex_value(*lo)?;
    }
    Ok(node)
}

fn hex_value(digit: u8) -> Result<u8, PeerAddrParseError> {
    let digit = char::from(digit);
    digit
        .to_digit(16)
        .and_then(|value| u8::try_from(value).ok())
        .ok_or(PeerAddrParseError::IdDigit(digit))
}

/// Displays the first 4 bytes of a node id in hex, enough to tell peers apart in logs and errors.
#[derive(Debug, Clone, Copy)]
pub struct ShortId<'a>(pub &'a NodeId);

impl fmt::Display for ShortId<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0.iter().take(4) {
            write!(f, "{byte:02x}")?;
        }
        f.write_str("..")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_display() {
        let text = format!("{}@127.0.0.1:9000", "ab".repeat(32));
        let parsed: PeerAddr = text.parse().unwrap();
        assert_eq!(parsed.node, [0xab; 32]);
        assert_eq!(parsed.addr, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(parsed.to_string(), text);
        let v6: PeerAddr = format!("{}@[::1]:1", "0F".repeat(32)).parse().unwrap();
        assert_eq!(v6.node, [0x0f; 32]);
    }

    #[test]
    fn rejects_malformed_input() {
        assert!(matches!(
            "127.0.0.1:9000".parse::<PeerAddr>(),
            Err(PeerAddrParseError::MissingAt(_))
        ));
        assert!(matches!(
            "abcd@127.0.0.1:9000".parse::<PeerAddr>(),
            Err(PeerAddrParseError::IdLength(4))
        ));
        assert!(matches!(
            format!("{}@127.0.0.1:9000", "zz".repeat(32)).parse::<PeerAddr>(),
            Err(PeerAddrParseError::IdDigit('z'))
        ));
        assert!(matches!(
            format!("{}@localhost", "00".repeat(32)).parse::<PeerAddr>(),
            Err(PeerAddrParseError::Addr { .. })
        ));
    }

    #[test]
    fn short_id_shows_four_bytes() {
        let mut id = [0u8; 32];
        id[0] = 0xde;
        id[3] = 0x01;
        assert_eq!(ShortId(&id).to_string(), "de000001..");
    }
}
