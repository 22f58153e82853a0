//! The application handshake that follows the TLS handshake: both sides exchange a [`Hello`]
//! on the connection's first bidirectional stream and check that they are on the same chain.
//!
//! A peer counts as connected only after this succeeds. On a chain-id or genesis mismatch the
//! connection is closed with [`CLOSE_WRONG_CHAIN`] and the error names the peer and both values.

use std::time::Duration;

use super::codec;
use super::identity::NodeId;
use crate::hashes::BlockHash;

/// Codec message type of a hello.
pub const HELLO_MESSAGE: u8 = 2;
/// Version of the hello encoding and of the protocol it announces (2: status answers list ready
/// scheduled modules; module-by-hash requests; block encoding 3).
pub const PROTOCOL_VERSION: u16 = 2;
/// QUIC close code: the peer is on another chain.
pub const CLOSE_WRONG_CHAIN: u32 = 2;
/// Longest chain id accepted.
pub const MAX_CHAIN_ID: usize = 64;

/// What a node says about itself when a connection opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Protocol version.
    pub protocol_version: u16,
    /// Chain identifier from the genesis file.
    pub chain_id: String,
    /// Hash of the genesis block.
    pub genesis_hash: BlockHash,
    /// Height of the sender's head.
    pub head_height: u64,
    /// Hash of the sender's head.
    pub head_hash: BlockHash,
    /// UDP port the sender listens on (for peer exchange; 0 = does not accept connections).
    pub listen_port: u16,
}

/// The two sides of a chain mismatch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "peer {peer} is on another chain: its chain id is {their_chain:?} with genesis {their_genesis}, \
     ours is {our_chain:?} with genesis {our_genesis}; disconnected"
)]
pub struct ChainMismatch {
    /// The peer.
    pub peer: NodeId,
    /// Its chain id.
    pub their_chain: String,
    /// Its genesis hash.
    pub their_genesis: BlockHash,
    /// Our chain id.
    pub our_chain: String,
    /// Our genesis hash.
    pub our_genesis: BlockHash,
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The peer is on another chain.
    #[error("{0}")]
    WrongChain(Box<ChainMismatch>),
    /// The peer speaks another protocol version.
    #[error(
        "peer {peer} speaks protocol version {theirs}, this node speaks {PROTOCOL_VERSION}; disconnected"
    )]
    Version {
        /// The peer.
        peer: NodeId,
        /// Its version.
        theirs: u16,
    },
    /// The peer sent something that is not a hello.
    #[error("peer {peer} sent a malformed hello: {reason}; disconnected")]
    Malformed {
        /// The peer.
        peer: NodeId,
        /// What is wrong.
        reason: String,
    },
    /// The peer did not complete the exchange in time.
    #[error("peer {peer} did not complete the hello exchange within {timeout:?}")]
    Timeout {
        /// The peer.
        peer: NodeId,
        /// The limit.
        timeout: Duration,
    },
    /// The connection failed during the exchange.
    #[error("connection to peer {peer} failed during the hello exchange: {reason}")]
    Connection {
        /// The peer.
        peer: NodeId,
        /// What failed.
        reason: String,
    },
}

impl Hello {
    /// Canonical encoding: `version u16 | chain-id len u8 | chain id | genesis 32 | head height
    /// u64 | head hash 32 | listen port u16`, integers little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let chain = self.chain_id.as_bytes();
        let chain = chain
            .get(..MAX_CHAIN_ID.min(chain.len()))
            .unwrap_or_default();
        // The longest hello: a few bytes more than a short chain id needs.
        let mut out = Vec::with_capacity(2 + 1 + MAX_CHAIN_ID + 32 + 8 + 32 + 2);
        out.extend_from_slice(&self.protocol_version.to_le_bytes());
        out.push(u8::try_from(chain.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(chain);
        out.extend_from_slice(self.genesis_hash.as_bytes());
        out.extend_from_slice(&self.head_height.to_le_bytes());
        out.extend_from_slice(self.head_hash.as_bytes());
        out.extend_from_slice(&self.listen_port.to_le_bytes());
        out
    }

    /// Decodes [`Hello::encode`]'s output, checking every length.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let (version, rest) = bytes
            .split_first_chunk::<2>()
            .ok_or("truncated in protocol version")?;
        let (&len, rest) = rest.split_first().ok_or("truncated in chain id length")?;
        let len = usize::from(len);
        if len == 0 || len > MAX_CHAIN_ID {
            return Err(format!(
                "chain id length {len} is outside 1..={MAX_CHAIN_ID}"
            ));
        }
        let (chain, rest) = rest.split_at_checked(len).ok_or("truncated in chain id")?;
        let chain_id = std::str::from_utf8(chain)
            .map_err(|_| "chain id is not UTF-8")?
            .to_string();
        let (genesis_hash, rest) = rest
            .split_first_chunk::<32>()
            .ok_or("truncated in genesis hash")?;
        let (height, rest) = rest
            .split_first_chunk::<8>()
            .ok_or("truncated in head height")?;
        let (head_hash, rest) = rest
            .split_first_chunk::<32>()
            .ok_or("truncated in head hash")?;
        let (port, rest) = rest
            .split_first_chunk::<2>()
            .ok_or("truncated in listen port")?;
        if !rest.is_empty() {
            return Err(format!("{} trailing bytes", rest.len()));
        }
        Ok(Self {
            protocol_version: u16::from_le_bytes(*version),
            chain_id,
            genesis_hash: BlockHash::new(*genesis_hash),
            head_height: u64::from_le_bytes(*height),
            head_hash: BlockHash::new(*head_hash),
            listen_port: u16::from_le_bytes(*port),
        })
    }

    /// Checks `theirs` against `self` (our hello).
    pub fn check(&self, peer: NodeId, theirs: &Hello) -> Result<(), HandshakeError> {
        if theirs.protocol_version != PROTOCOL_VERSION {
            return Err(HandshakeError::Version {
                peer,
                theirs: theirs.protocol_version,
            });
        }
        if theirs.chain_id != self.chain_id || theirs.genesis_hash != self.genesis_hash {
            return Err(HandshakeError::WrongChain(Box::new(ChainMismatch {
                peer,
                their_chain: theirs.chain_id.clone(),
                their_genesis: theirs.genesis_hash,
                our_chain: self.chain_id.clone(),
                our_genesis: self.genesis_hash,
            })));
        }
        Ok(())
    }
}

/// Which side of the connection this node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// We dialed: we open the stream and speak first.
    Dialer,
    /// We accepted: we wait for the peer's hello, then answer.
    Acceptor,
}

/// Exchanges hellos on `conn` with `peer` and checks them; on any failure the connection is
/// closed (with [`CLOSE_WRONG_CHAIN`] for a chain mismatch) and the error logged.
pub async fn exchange(
    conn: &quinn::Connection,
    peer: NodeId,
    ours: &Hello,
    role: Role,
    timeout: Duration,
) -> Result<Hello, HandshakeError> {
    let result = match tokio::time::timeout(timeout, exchange_inner(conn, peer, ours, role)).await {
        Ok(result) => result,
        Err(_) => Err(HandshakeError::Timeout { peer, timeout }),
    };
    if let Err(e) = &result {
        let code = match e {
            HandshakeError::WrongChain(_) => CLOSE_WRONG_CHAIN,
            _ => super::endpoint::CLOSE_PROTOCOL_VIOLATION,
        };
        tracing::warn!(%peer, error = %e, "handshake failed");
        conn.close(quinn::VarInt::from_u32(code), b"handshake failed");
    }
    result
}

async fn exchange_inner(
    conn: &quinn::Connection,
    peer: NodeId,
    ours: &Hello,
    role: Role,
) -> Result<Hello, HandshakeError> {
    let broken = |e: String| HandshakeError::Connection { peer, reason: e };
    let (mut send, mut recv) = match role {
        Role::Dialer => conn.open_bi().await.map_err(|e| broken(e.to_string()))?,
        Role::Acceptor => conn.accept_bi().await.map_err(|e| broken(e.to_string()))?,
    };
    let max = 256;
    if role == Role::Dialer {
        codec::write_frame(&mut send, HELLO_MESSAGE, &ours.encode(), max)
            .await
            .map_err(|e| broken(e.to_string()))?;
    }
    let frame = match codec::read_frame(&mut recv, max).await {
        Ok(Some(frame)) => frame,
        Ok(None) => {
            return Err(HandshakeError::Malformed {
                peer,
                reason: "stream ended before a hello".into(),
            });
        }
        Err(e) if e.is_protocol_violation() => {
            return Err(HandshakeError::Malformed {
                peer,
                reason: e.to_string(),
            });
        }
        Err(e) => return Err(broken(e.to_string())),
    };
    if frame.msg_type != HELLO_MESSAGE {
        return Err(HandshakeError::Malformed {
            peer,
            reason: format!("message type {} instead of hello", frame.msg_type),
        });
    }
    let theirs = Hello::decode(&frame.payload)
        .map_err(|reason| HandshakeError::Malformed { peer, reason })?;
    // The acceptor answers even on a mismatch, so the dialer learns why it is refused.
    if role == Role::Acceptor {
        codec::write_frame(&mut send, HELLO_MESSAGE, &ours.encode(), max)
            .await
            .map_err(|e| broken(e.to_string()))?;
    }
    let _ = send.finish();
    if let Err(e) = ours.check(peer, &theirs) {
        if role == Role::Acceptor {
            // Let our hello reach the dialer before the caller closes the connection, so it
            // can say which chain it was refused for.
            let _ = tokio::time::timeout(Duration::from_secs(1), send.stopped()).await;
        }
        return Err(e);
    }
    Ok(theirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(chain: &str, genesis: u8) -> Hello {
        Hello {
            protocol_version: PROTOCOL_VERSION,
            chain_id: chain.into(),
            genesis_hash: BlockHash([genesis; 32]),
            head_height: 7,
            head_hash: BlockHash([9; 32]),
            listen_port: 4000,
        }
    }

    #[test]
    fn roundtrip_and_every_truncation_fails() {
        let h = hello("modnode-dev", 1);
        let bytes = h.encode();
        assert_eq!(Hello::decode(&bytes), Ok(h));
        for cut in 0..bytes.len() {
            assert!(Hello::decode(&bytes[..cut]).is_err(), "decoded at {cut}");
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(Hello::decode(&long).unwrap_err().contains("trailing"));
    }

    #[test]
    fn mismatches_name_both_sides() {
        let peer = NodeId::from_bytes([5; 32]);
        let ours = hello("a", 1);
        assert!(ours.check(peer, &hello("a", 1)).is_ok());
        let err = ours.check(peer, &hello("a", 2)).unwrap_err().to_string();
        assert!(
            err.contains(&hex::encode([1u8; 32])) && err.contains(&hex::encode([2u8; 32])),
            "{err}"
        );
        assert!(err.contains(&peer.to_string()), "{err}");
        let mut old = hello("a", 1);
        old.protocol_version = 0;
        assert!(matches!(
            ours.check(peer, &old),
            Err(HandshakeError::Version { theirs: 0, .. })
        ));
    }
}
