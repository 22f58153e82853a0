//! Request/response messages exchanged on bidirectional streams after the hello: one request
//! and one response per stream.
//!
//! Every message is one [`codec`](super::codec) frame; the frame's message type says which.
//! Encodings (integers little-endian):
//! - [`STATUS_REQUEST`]: empty. [`STATUS`]: `head height u64 | head hash 32 | finalized u64 |
//!   n u8 | n × module sha256 32` (the scheduled modules the sender has ready, at most
//!   [`MAX_READY_MODULES`]).
//! - [`BLOCKS_REQUEST`]: `start u64 | count u16` (1..=[`MAX_BLOCKS_PER_REQUEST`]).
//!   [`BLOCKS`]: `n u16 | n × (len u32 | encoded block)`: consecutive canonical blocks from
//!   `start`, possibly fewer than asked (the server stops at its head or at the size budget).
//!   Or [`BLOCKS_PRUNED`]: `lowest height served u64`, when `start` lies below it (pruned, or
//!   below the checkpoint the server started from): not a lie but "ask someone else". It must
//!   be above `start`. A frame type of its own, so the blocks answer and the protocol version
//!   stay as they were: a node that never prunes never sends it.
//! - [`PEERS_REQUEST`]: empty. [`PEERS`]: `n u8 | n × (node id 32 | 4 or 6 | ip | port u16)`.
//! - [`MODULE_REQUEST`]: `sha256 32`. [`MODULE`]: `0` (not here) or `1 | len u32 | component` (the
//!   requester checks the hash, then validates it like an upload).
//! - [`CHECKPOINTS_REQUEST`]: empty. [`CHECKPOINTS`]: `n u8 | n × (len u32 | manifest)`: the
//!   sender's stored checkpoint manifests, newest first, at most [`MAX_CHECKPOINTS_PER_ANSWER`]
//!   (the requester decodes and validates each with its own
//!   [`ManifestLimits`](crate::checkpoint::ManifestLimits)).
//! - [`CHUNK_REQUEST`]: `checkpoint id 32 | chunk index u32`. [`CHUNK`]: `0` (not here: an
//!   unknown checkpoint or index is an answer, not a violation) or `1 | len u32 | chunk bytes`
//!   (the requester checks them against its manifest).
//!
//! Decoding checks every length and refuses trailing bytes; a malformed message is a protocol
//! violation by the peer that sent it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use modnode_peers::PeerAddr;

use crate::hashes::{BlockHash, ModuleHash};

/// Most manifests a checkpoint list answer carries: the checkpoint server's bound, which
/// decoding enforces on a peer's answer.
pub use crate::checkpoint::MAX_CHECKPOINTS_PER_ANSWER;

/// Frame type of a status request.
pub const STATUS_REQUEST: u8 = 3;
/// Frame type of a status answer.
pub const STATUS: u8 = 4;
/// Frame type of a block range request.
pub const BLOCKS_REQUEST: u8 = 5;
/// Frame type of a block range answer.
pub const BLOCKS: u8 = 6;
/// Frame type of a peer list request.
pub const PEERS_REQUEST: u8 = 7;
/// Frame type of a peer list answer.
pub const PEERS: u8 = 8;
/// Frame type of a module-by-hash request.
pub const MODULE_REQUEST: u8 = 9;
/// Frame type of a module answer.
pub const MODULE: u8 = 10;
/// Frame type of a checkpoint list request.
pub const CHECKPOINTS_REQUEST: u8 = 11;
/// Frame type of a checkpoint list answer.
pub const CHECKPOINTS: u8 = 12;
/// Frame type of a checkpoint chunk request.
pub const CHUNK_REQUEST: u8 = 13;
/// Frame type of a checkpoint chunk answer.
pub const CHUNK: u8 = 14;
/// Frame type of the answer to a block range the sender pruned.
pub const BLOCKS_PRUNED: u8 = 15;
/// Most ready modules a status answer lists.
pub const MAX_READY_MODULES: usize = 16;

/// Most blocks one request may ask for.
pub const MAX_BLOCKS_PER_REQUEST: u16 = 64;
/// Most entries in a peer list.
pub const MAX_PEERS_PER_ANSWER: usize = 64;
/// Largest request frame (requests are tiny; anything bigger is garbage).
pub const MAX_REQUEST_BYTES: usize = 64;

/// A peer's view of its chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainStatus {
    /// Height of its head.
    pub head_height: u64,
    /// Hash of its head.
    pub head_hash: BlockHash,
    /// Its finalized height.
    pub finalized_height: u64,
    /// The modules its chain schedules that it has ready (fetched, compiled and warmed).
    pub ready_modules: Vec<ModuleHash>,
}

/// A request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// What is your head?
    Status,
    /// Send the canonical blocks `start .. start + count`.
    Blocks {
        /// First height.
        start: u64,
        /// How many (1..=[`MAX_BLOCKS_PER_REQUEST`]).
        count: u16,
    },
    /// Which peers do you know?
    Peers,
    /// Send the module component with this sha256.
    Module {
        /// Its sha256.
        hash: ModuleHash,
    },
    /// Which checkpoints do you serve?
    Checkpoints,
    /// Send chunk `index` of checkpoint `id`.
    Chunk {
        /// The checkpoint id (the hash of its manifest).
        id: [u8; 32],
        /// The chunk's position in the manifest.
        index: u32,
    },
}

/// A response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// The sender's head.
    Status(ChainStatus),
    /// Encoded blocks, consecutive from the requested start.
    Blocks(Vec<Vec<u8>>),
    /// The requested start is pruned: the sender serves heights from this one (above the
    /// start) up.
    Pruned(u64),
    /// Known-good peer addresses.
    Peers(Vec<PeerAddr>),
    /// The module's bytes, or `None` if the sender does not have it.
    Module(Option<Vec<u8>>),
    /// Encoded checkpoint manifests, newest first (at most [`MAX_CHECKPOINTS_PER_ANSWER`]).
    Checkpoints(Vec<Vec<u8>>),
    /// The chunk's bytes, or `None` if the sender does not have that checkpoint or chunk.
    Chunk(Option<Vec<u8>>),
}

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// The frame type is not the one expected here.
    #[error("unexpected message type {found}, expected {expected}")]
    UnexpectedType {
        /// What arrived.
        found: u8,
        /// What was expected (a description).
        expected: &'static str,
    },
    /// The payload ended early.
    #[error("{what}: message truncated")]
    Truncated {
        /// Which field.
        what: &'static str,
    },
    /// Bytes after the end of the message.
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    /// A field has an invalid value.
    #[error("{field}: {reason}")]
    Invalid {
        /// Which field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RpcError> {
        if self.0.len() < n {
            return Err(RpcError::Truncated { what });
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], RpcError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(RpcError::Truncated { what })?;
        self.0 = rest;
        Ok(*head)
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, RpcError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, RpcError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, RpcError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    /// `len u32 | bytes`.
    fn bytes(&mut self, what: &'static str) -> Result<Vec<u8>, RpcError> {
        let len = self.u32(what)?;
        let len = usize::try_from(len).map_err(|_| RpcError::Invalid {
            field: what,
            reason: format!("{len} does not fit in memory"),
        })?;
        Ok(self.take(len, what)?.to_vec())
    }
    /// `0` or `1 | len u32 | bytes`.
    fn optional_bytes(
        &mut self,
        flag: &'static str,
        what: &'static str,
    ) -> Result<Option<Vec<u8>>, RpcError> {
        match self.array::<1>(flag)? {
            [0] => Ok(None),
            [1] => Ok(Some(self.bytes(what)?)),
            [other] => Err(RpcError::Invalid {
                field: flag,
                reason: format!("{other} is neither 0 nor 1"),
            }),
        }
    }
    fn finish(self) -> Result<(), RpcError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(RpcError::Trailing(n)),
        }
    }
}

impl Request {
    /// Frame type and payload.
    pub fn encode(&self) -> (u8, Vec<u8>) {
        match self {
            Self::Status => (STATUS_REQUEST, Vec::new()),
            Self::Blocks { start, count } => {
                let mut out = start.to_le_bytes().to_vec();
                out.extend_from_slice(&count.to_le_bytes());
                (BLOCKS_REQUEST, out)
            }
            Self::Peers => (PEERS_REQUEST, Vec::new()),
            Self::Module { hash } => (MODULE_REQUEST, hash.as_bytes().to_vec()),
            Self::Checkpoints => (CHECKPOINTS_REQUEST, Vec::new()),
            Self::Chunk { id, index } => {
                let mut out = id.to_vec();
                out.extend_from_slice(&index.to_le_bytes());
                (CHUNK_REQUEST, out)
            }
        }
    }

    /// Decodes a request frame.
    pub fn decode(msg_type: u8, payload: &[u8]) -> Result<Self, RpcError> {
        let mut r = Reader(payload);
        let request = match msg_type {
            STATUS_REQUEST => Self::Status,
            PEERS_REQUEST => Self::Peers,
            MODULE_REQUEST => Self::Module {
                hash: ModuleHash(r.array("module request hash")?),
            },
            CHECKPOINTS_REQUEST => Self::Checkpoints,
            CHUNK_REQUEST => Self::Chunk {
                id: r.array("chunk request checkpoint id")?,
                index: r.u32("chunk request index")?,
            },
            BLOCKS_REQUEST => {
                let start = r.u64("blocks request start")?;
                let count = r.u16("blocks request count")?;
                if !(1..=MAX_BLOCKS_PER_REQUEST).contains(&count) {
                    return Err(RpcError::Invalid {
                        field: "blocks request count",
                        reason: format!("{count} is outside 1..={MAX_BLOCKS_PER_REQUEST}"),
                    });
                }
                Self::Blocks { start, count }
            }
            found => {
                return Err(RpcError::UnexpectedType {
                    found,
                    expected: "a request (status, blocks, peers, module, checkpoints or chunk)",
                });
            }
        };
        r.finish()?;
        Ok(request)
    }
}

impl Response {
    /// Frame type and payload.
    pub fn encode(&self) -> (u8, Vec<u8>) {
        match self {
            Self::Status(s) => {
                let mut out = Vec::with_capacity(48);
                out.extend_from_slice(&s.head_height.to_le_bytes());
                out.extend_from_slice(s.head_hash.as_bytes());
                out.extend_from_slice(&s.finalized_height.to_le_bytes());
                let n = s.ready_modules.len().min(MAX_READY_MODULES);
                out.push(u8::try_from(n).unwrap_or(u8::MAX));
                for hash in s.ready_modules.iter().take(n) {
                    out.extend_from_slice(hash.as_bytes());
                }
                (STATUS, out)
            }
            Self::Blocks(blocks) => {
                // Blocks over 4 GiB cannot be framed; the list stops before the first one.
                let fitting: Vec<(u32, &Vec<u8>)> = blocks
                    .iter()
                    .take(usize::from(u16::MAX))
                    .map_while(|b| u32::try_from(b.len()).ok().map(|len| (len, b)))
                    .collect();
                let n = u16::try_from(fitting.len()).unwrap_or(u16::MAX);
                let mut out = n.to_le_bytes().to_vec();
                for (len, block) in fitting {
                    out.extend_from_slice(&len.to_le_bytes());
                    out.extend_from_slice(block);
                }
                (BLOCKS, out)
            }
            Self::Pruned(below) => (BLOCKS_PRUNED, below.to_le_bytes().to_vec()),
            Self::Peers(peers) => {
                let n = peers.len().min(MAX_PEERS_PER_ANSWER);
                let mut out = vec![u8::try_from(n).unwrap_or(u8::MAX)];
                for peer in peers.iter().take(n) {
                    out.extend_from_slice(&peer.node);
                    match peer.addr.ip() {
                        IpAddr::V4(ip) => {
                            out.push(4);
                            out.extend_from_slice(&ip.octets());
                        }
                        IpAddr::V6(ip) => {
                            out.push(6);
                            out.extend_from_slice(&ip.octets());
                        }
                    }
                    out.extend_from_slice(&peer.addr.port().to_le_bytes());
                }
                (PEERS, out)
            }
            Self::Module(bytes) => (MODULE, encode_optional(bytes.as_deref())),
            Self::Chunk(bytes) => (CHUNK, encode_optional(bytes.as_deref())),
            Self::Checkpoints(manifests) => {
                let n = manifests.len().min(MAX_CHECKPOINTS_PER_ANSWER);
                let mut out = vec![u8::try_from(n).unwrap_or(u8::MAX)];
                for manifest in manifests.iter().take(n) {
                    put_bytes(&mut out, manifest);
                }
                (CHECKPOINTS, out)
            }
        }
    }

    /// Decodes the answer to `request`: the frame type must match it.
    pub fn decode(request: &Request, msg_type: u8, payload: &[u8]) -> Result<Self, RpcError> {
        let (expected_type, expected) = match request {
            Request::Status => (STATUS, "a status answer"),
            Request::Blocks { .. } => (BLOCKS, "a blocks answer"),
            Request::Peers => (PEERS, "a peers answer"),
            Request::Module { .. } => (MODULE, "a module answer"),
            Request::Checkpoints => (CHECKPOINTS, "a checkpoint list"),
            Request::Chunk { .. } => (CHUNK, "a checkpoint chunk answer"),
        };
        if let (Request::Blocks { start, .. }, BLOCKS_PRUNED) = (request, msg_type) {
            let mut r = Reader(payload);
            let below = r.u64("pruned answer height")?;
            r.finish()?;
            if below <= *start {
                return Err(RpcError::Invalid {
                    field: "pruned answer height",
                    reason: format!(
                        "says it keeps heights {below} and up, yet did not serve {start}"
                    ),
                });
            }
            return Ok(Self::Pruned(below));
        }
        if msg_type != expected_type {
            return Err(RpcError::UnexpectedType {
                found: msg_type,
                expected,
            });
        }
        let mut r = Reader(payload);
        let response = match request {
            Request::Status => {
                let head_height = r.u64("status head height")?;
                let head_hash = BlockHash(r.array("status head hash")?);
                let finalized_height = r.u64("status finalized height")?;
                let [n] = r.array::<1>("status ready module count")?;
                if usize::from(n) > MAX_READY_MODULES {
                    return Err(RpcError::Invalid {
                        field: "status ready module count",
                        reason: format!("{n} entries, at most {MAX_READY_MODULES}"),
                    });
                }
                let mut ready_modules = Vec::with_capacity(usize::from(n));
                for _ in 0..n {
                    ready_modules.push(ModuleHash(r.array("status ready module")?));
                }
                Self::Status(ChainStatus {
                    head_height,
                    head_hash,
                    finalized_height,
                    ready_modules,
                })
            }
            Request::Module { .. } => {
                Self::Module(r.optional_bytes("module answer flag", "module bytes")?)
            }
            Request::Chunk { .. } => {
                Self::Chunk(r.optional_bytes("chunk answer flag", "chunk bytes")?)
            }
            Request::Checkpoints => {
                let [n] = r.array::<1>("checkpoint list count")?;
                if usize::from(n) > MAX_CHECKPOINTS_PER_ANSWER {
                    return Err(RpcError::Invalid {
                        field: "checkpoint list count",
                        reason: format!("{n} entries, at most {MAX_CHECKPOINTS_PER_ANSWER}"),
                    });
                }
                let mut manifests = Vec::with_capacity(usize::from(n));
                for _ in 0..n {
                    manifests.push(r.bytes("checkpoint manifest")?);
                }
                Self::Checkpoints(manifests)
            }
            Request::Blocks { count, .. } => {
                let n = r.u16("blocks answer count")?;
                if n > *count {
                    return Err(RpcError::Invalid {
                        field: "blocks answer count",
                        reason: format!("{n} blocks for a request of {count}"),
                    });
                }
                let mut blocks = Vec::with_capacity(usize::from(n));
                for _ in 0..n {
                    let len = u32::from_le_bytes(r.array("block length")?);
                    let len = usize::try_from(len).map_err(|_| RpcError::Invalid {
                        field: "block length",
                        reason: format!("{len} does not fit in memory"),
                    })?;
                    blocks.push(r.take(len, "block bytes")?.to_vec());
                }
                Self::Blocks(blocks)
            }
            Request::Peers => {
                let [n] = r.array::<1>("peers answer count")?;
                if usize::from(n) > MAX_PEERS_PER_ANSWER {
                    return Err(RpcError::Invalid {
                        field: "peers answer count",
                        reason: format!("{n} entries, at most {MAX_PEERS_PER_ANSWER}"),
                    });
                }
                let mut peers = Vec::with_capacity(usize::from(n));
                for _ in 0..n {
                    let node = r.array::<32>("peer node id")?;
                    let ip = match r.array::<1>("peer address family")? {
                        [4] => IpAddr::V4(Ipv4Addr::from(r.array::<4>("peer ipv4 address")?)),
                        [6] => IpAddr::V6(Ipv6Addr::from(r.array::<16>("peer ipv6 address")?)),
                        [other] => {
                            return Err(RpcError::Invalid {
                                field: "peer address family",
                                reason: format!("{other} is neither 4 nor 6"),
                            });
                        }
                    };
                    let port = r.u16("peer port")?;
                    peers.push(PeerAddr {
                        node,
                        addr: SocketAddr::new(ip, port),
                    });
                }
                Self::Peers(peers)
            }
        };
        r.finish()?;
        Ok(response)
    }
}

/// `len u32 | bytes` (frames are at most `u32::MAX` bytes, so the length fits).
fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(bytes);
}

/// `0` (absent) or `1 | len u32 | bytes`.
fn encode_optional(bytes: Option<&[u8]>) -> Vec<u8> {
    match bytes {
        None => vec![0],
        Some(bytes) => {
            let mut out = Vec::with_capacity(bytes.len().saturating_add(5));
            out.push(1);
            put_bytes(&mut out, bytes);
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(request: Request, response: Response) {
        let (t, p) = request.encode();
        assert_eq!(Request::decode(t, &p), Ok(request));
        let (t, p) = response.encode();
        assert_eq!(Response::decode(&request, t, &p), Ok(response.clone()));
        for cut in 0..p.len() {
            assert!(
                Response::decode(&request, t, &p[..cut]).is_err(),
                "{response:?} decoded when cut at {cut}"
            );
        }
        let mut long = p.clone();
        long.push(0);
        assert_eq!(
            Response::decode(&request, t, &long),
            Err(RpcError::Trailing(1))
        );
    }

    #[test]
    fn a_pruned_range_answer_roundtrips_only_for_blocks_and_above_the_start() {
        let request = Request::Blocks {
            start: 10,
            count: 64,
        };
        roundtrip(request, Response::Pruned(500));
        let (t, p) = Response::Pruned(10).encode();
        assert!(matches!(
            Response::decode(&request, t, &p),
            Err(RpcError::Invalid {
                field: "pruned answer height",
                ..
            })
        ));
        // Only an answer to a block range may say "pruned".
        let (t, p) = Response::Pruned(500).encode();
        assert!(matches!(
            Response::decode(&Request::Status, t, &p),
            Err(RpcError::UnexpectedType {
                found: BLOCKS_PRUNED,
                ..
            })
        ));
    }

    #[test]
    fn every_message_roundtrips_and_every_truncation_fails() {
        roundtrip(
            Request::Status,
            Response::Status(ChainStatus {
                head_height: 9,
                head_hash: BlockHash([3; 32]),
                finalized_height: 2,
                ready_modules: vec![ModuleHash([4; 32]), ModuleHash([5; 32])],
            }),
        );
        roundtrip(
            Request::Module {
                hash: ModuleHash([6; 32]),
            },
            Response::Module(Some(vec![0, 97, 115, 109])),
        );
        roundtrip(
            Request::Module {
                hash: ModuleHash([6; 32]),
            },
            Response::Module(None),
        );
        roundtrip(
            Request::Checkpoints,
            Response::Checkpoints(vec![vec![1; 40], Vec::new(), vec![2; 3]]),
        );
        roundtrip(Request::Checkpoints, Response::Checkpoints(Vec::new()));
        let chunk = Request::Chunk {
            id: [9; 32],
            index: 70_000,
        };
        roundtrip(chunk, Response::Chunk(Some(vec![5; 1000])));
        roundtrip(chunk, Response::Chunk(None));
        roundtrip(
            Request::Blocks { start: 5, count: 3 },
            Response::Blocks(vec![vec![1, 2, 3], vec![], vec![9; 300]]),
        );
        roundtrip(
            Request::Peers,
            Response::Peers(vec![
                PeerAddr {
                    node: [7; 32],
                    addr: "127.0.0.1:9000".parse().unwrap(),
                },
                PeerAddr {
                    node: [8; 32],
                    addr: "[::1]:9001".parse().unwrap(),
                },
            ]),
        );
    }

    #[test]
    fn malformed_requests_and_answers_are_refused_with_the_field_named() {
        let (t, mut p) = Request::Blocks { start: 1, count: 0 }.encode();
        let err = Request::decode(t, &p).unwrap_err().to_string();
        assert!(err.contains("blocks request count"), "{err}");
        p.push(1);
        assert!(Request::decode(t, &p).is_err());
        assert!(matches!(
            Request::decode(STATUS, &[]),
            Err(RpcError::UnexpectedType { found: STATUS, .. })
        ));
        // More blocks than asked for.
        let (t, p) = Response::Blocks(vec![vec![1], vec![2]]).encode();
        let request = Request::Blocks { start: 1, count: 1 };
        let err = Response::decode(&request, t, &p).unwrap_err().to_string();
        assert!(err.contains("2 blocks for a request of 1"), "{err}");
        // A status answer to a peers request.
        let (t, p) = Response::Status(ChainStatus {
            head_height: 0,
            head_hash: BlockHash([0; 32]),
            finalized_height: 0,
            ready_modules: Vec::new(),
        })
        .encode();
        // A status answer listing more ready modules than allowed.
        let mut many = p.clone();
        *many.last_mut().unwrap() = 17;
        many.extend(std::iter::repeat_n(0, 17 * 32));
        let err = Response::decode(&Request::Status, t, &many)
            .unwrap_err()
            .to_string();
        assert!(err.contains("ready module count"), "{err}");
        assert!(Response::decode(&Request::Peers, t, &p).is_err());
        // A bad address family.
        let mut p = vec![1];
        p.extend_from_slice(&[0; 32]);
        p.push(5);
        let err = Response::decode(&Request::Peers, PEERS, &p)
            .unwrap_err()
            .to_string();
        assert!(err.contains("address family"), "{err}");
    }

    #[test]
    fn malformed_checkpoint_requests_and_answers_are_refused() {
        // A chunk request without its index, and one with a byte too many.
        let (t, p) = Request::Chunk {
            id: [1; 32],
            index: 3,
        }
        .encode();
        let err = Request::decode(t, &p[..33]).unwrap_err().to_string();
        assert!(err.contains("chunk request index"), "{err}");
        let mut long = p.clone();
        long.push(0);
        assert_eq!(Request::decode(t, &long), Err(RpcError::Trailing(1)));
        assert!(Request::decode(CHECKPOINTS_REQUEST, &[0]).is_err());
        // More manifests than allowed.
        let mut many = vec![u8::try_from(MAX_CHECKPOINTS_PER_ANSWER + 1).unwrap()];
        for _ in 0..=MAX_CHECKPOINTS_PER_ANSWER {
            many.extend_from_slice(&0u32.to_le_bytes());
        }
        let err = Response::decode(&Request::Checkpoints, CHECKPOINTS, &many)
            .unwrap_err()
            .to_string();
        assert!(err.contains("checkpoint list count"), "{err}");
        // Encoding never lists more than the bound.
        let (t, p) = Response::Checkpoints(vec![vec![1]; 20]).encode();
        assert!(matches!(
            Response::decode(&Request::Checkpoints, t, &p),
            Ok(Response::Checkpoints(list)) if list.len() == MAX_CHECKPOINTS_PER_ANSWER
        ));
        // A manifest length beyond the payload, a bad chunk flag, a module answer to a chunk
        // request.
        let mut p = vec![1];
        p.extend_from_slice(&1000u32.to_le_bytes());
        p.extend_from_slice(&[0; 10]);
        let err = Response::decode(&Request::Checkpoints, CHECKPOINTS, &p)
            .unwrap_err()
            .to_string();
        assert!(err.contains("checkpoint manifest"), "{err}");
        let chunk = Request::Chunk {
            id: [1; 32],
            index: 0,
        };
        let err = Response::decode(&chunk, CHUNK, &[2])
            .unwrap_err()
            .to_string();
        assert!(err.contains("chunk answer flag"), "{err}");
        assert!(matches!(
            Response::decode(&chunk, MODULE, &[0]),
            Err(RpcError::UnexpectedType { found: MODULE, .. })
        ));
    }
}
