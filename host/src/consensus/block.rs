//! Blocks: header, body, canonical versioned encoding, hashing, the seal's signed message.
//!
//! Encoding version 3, integers little-endian:
//! - header (117 bytes): `version u8 | parent_hash 32 | height u64 | slot u64 | proposer u32 |
//!   state_root 32 | body_root 32`
//! - body: `version u8 | eth1 vote (deposit_root 32 | deposit_count u64 | block_hash 32) |
//!   count u16 | count × proven deposit`, proven deposit (1240 bytes): deposit (184 bytes:
//!   `pubkey 48 | withdrawal_credentials 32 | amount u64 | signature 96`) ‖ proof (33 × 32,
//!   leaf level first, then the count chunk); then `votes u8 | votes × upgrade op` (the
//!   proposer's upgrade votes, at most [`MAX_UPGRADE_VOTES`]; op: `kind u8 | module sha256 32 |
//!   activation height u64`). Version 2 (no votes) is refused by name.
//! - seal: `0` (unsigned; dev chains without authorities) or `1 | ed25519 signature 64` by the
//!   proposing authority over [`seal_message`] — a domain-separated digest of the genesis and
//!   block hashes, never the raw block hash (the node key signs other things too).
//! - block: header ‖ body ‖ seal.
//!
//! The block hash is `sha256(header)`, the body root `sha256(body)`.

use sha2::{Digest, Sha256};

pub use crate::hashes::{BlockHash, StateRoot};

use super::eth1::{DEPOSIT_PROOF_LEN, Eth1Data, ProvenDeposit};
/// One deposit with its fixed-size fields (defined in [`crate::deposit`], below the runtime).
pub use crate::deposit::DepositData;
use crate::state::schedule::{
    MAX_READY_ATTESTATIONS, MAX_UPGRADE_VOTES, ScheduleError, UPGRADE_OP_BYTES, UpgradeOp,
};

/// Current encoding version of headers and bodies (2: eth1 vote and deposit proofs; 3: upgrade
/// votes; 4: cancel votes and readiness attestations).
pub const BLOCK_VERSION: u8 = 4;
/// Encoded header size.
pub const HEADER_BYTES: usize = 1 + 32 + 8 + 8 + 4 + 32 + 32;
/// Encoded deposit size.
pub const DEPOSIT_BYTES: usize = 48 + 32 + 8 + 96;
/// Encoded size of a deposit with its proof.
pub const PROVEN_DEPOSIT_BYTES: usize = DEPOSIT_BYTES + DEPOSIT_PROOF_LEN * 32;
/// Domain of the message a block seal signs.
pub const SEAL_DOMAIN: &[u8] = b"modnode-block-seal-v1";

/// What the proposer signs to seal a block: `sha256("modnode-block-seal-v1" ‖ genesis hash ‖
/// block hash)`. Bound to the chain, and separated from anything else the node key signs (the
/// TLS handshake signs raw 32-byte values too).
pub fn seal_message(genesis_hash: &BlockHash, block_hash: &BlockHash) -> Digest32 {
    let mut h = Sha256::new();
    h.update(SEAL_DOMAIN);
    h.update(genesis_hash.as_bytes());
    h.update(block_hash.as_bytes());
    h.finalize().into()
}
/// Default `max_deposits_per_block` (phase0 `MAX_DEPOSITS`).
pub const DEFAULT_MAX_DEPOSITS: u16 = 16;

/// A SHA-256 digest that names neither a block nor a state: a body root, a deposit's id, a seal
/// message (blocks are [`BlockHash`], state roots [`StateRoot`]).
pub type Digest32 = [u8; 32];

/// Why bytes are not a block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockError {
    /// The bytes end early.
    #[error("block truncated in {0}")]
    Truncated(&'static str),
    /// Unknown encoding version.
    #[error("block {part} has encoding version {found}, this node reads version {BLOCK_VERSION}")]
    Version {
        /// Header or body.
        part: &'static str,
        /// The version found.
        found: u8,
    },
    /// More deposits than allowed.
    #[error("block has {count} deposits, the limit is {max}")]
    TooManyDeposits {
        /// Deposits in the body.
        count: usize,
        /// The chain's limit.
        max: u16,
    },
    /// Bytes after the seal.
    #[error("{0} trailing bytes after the block seal")]
    Trailing(usize),
    /// Unknown seal kind.
    #[error("unknown block seal kind {0}")]
    Seal(u8),
    /// More upgrade votes, cancel votes or readiness attestations than allowed.
    #[error("block has {count} {list}, the limit is {max}")]
    TooManyVotes {
        /// Which list.
        list: &'static str,
        /// Entries in the body.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An upgrade vote, cancel vote or attestation is malformed.
    #[error("block {list} {index}: {source}")]
    Vote {
        /// Which list.
        list: &'static str,
        /// Its position in the list.
        index: usize,
        /// What is wrong.
        source: ScheduleError,
    },
}

impl DepositData {
    /// Canonical encoding: pubkey ‖ withdrawal credentials ‖ amount (LE) ‖ signature,
    /// [`DEPOSIT_BYTES`] long (the form deposits take in a block body and in gossip).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DEPOSIT_BYTES);
        out.extend_from_slice(&self.pubkey);
        out.extend_from_slice(&self.withdrawal_credentials);
        out.extend_from_slice(&self.amount.to_le_bytes());
        out.extend_from_slice(&self.signature);
        out
    }

    /// Decodes [`DepositData::encode`]'s output; anything but exactly [`DEPOSIT_BYTES`] bytes
    /// is an error.
    pub fn decode(bytes: &[u8]) -> Result<Self, BlockError> {
        let mut r = Reader { bytes };
        let deposit = Self::decode_from(&mut r)?;
        if !r.bytes.is_empty() {
            return Err(BlockError::Trailing(r.bytes.len()));
        }
        Ok(deposit)
    }

    fn decode_from(r: &mut Reader<'_>) -> Result<Self, BlockError> {
        Ok(Self {
            pubkey: *r.take("deposit pubkey")?,
            withdrawal_credentials: *r.take("deposit withdrawal credentials")?,
            amount: r.u64("deposit amount")?,
            signature: *r.take("deposit signature")?,
        })
    }

    /// Identifies the deposit: `sha256(encode())`.
    pub fn id(&self) -> Digest32 {
        Sha256::digest(self.encode()).into()
    }
}

/// A block header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// Hash of the parent block (for genesis: the hash of the chain configuration).
    pub parent_hash: BlockHash,
    /// Height (genesis is 0).
    pub height: u64,
    /// Slot.
    pub slot: u64,
    /// Index of the proposing authority.
    pub proposer: u32,
    /// State root after this block.
    pub state_root: StateRoot,
    /// `sha256` of the encoded body.
    pub body_root: Digest32,
}

/// A block body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockBody {
    /// The proposer's view of the deposit contract.
    pub eth1_vote: Eth1Data,
    /// The due deposits, in index order, each with its proof.
    pub deposits: Vec<ProvenDeposit>,
    /// The proposer's votes for upgrade operations (at most [`MAX_UPGRADE_VOTES`]).
    pub upgrade_votes: Vec<UpgradeOp>,
    /// The proposer's votes to cancel scheduled upgrades (at most [`MAX_UPGRADE_VOTES`]).
    pub cancel_votes: Vec<UpgradeOp>,
    /// Open upgrades whose module the proposer holds compiled and warmed (at most
    /// [`MAX_READY_ATTESTATIONS`]): its signed readiness attestations.
    pub ready: Vec<UpgradeOp>,
}

/// The lists of upgrade operations a body carries, in encoding order, with their limits.
const OP_LISTS: [(&str, usize); 3] = [
    ("upgrade votes", MAX_UPGRADE_VOTES),
    ("cancel votes", MAX_UPGRADE_VOTES),
    ("readiness attestations", MAX_READY_ATTESTATIONS),
];

fn encode_ops(out: &mut Vec<u8>, ops: &[UpgradeOp]) {
    let count = u8::try_from(ops.len()).unwrap_or(u8::MAX);
    out.push(count);
    for op in ops.iter().take(usize::from(count)) {
        out.extend_from_slice(&op.encode());
    }
}

fn decode_ops(
    r: &mut Reader<'_>,
    (list, max): (&'static str, usize),
) -> Result<Vec<UpgradeOp>, BlockError> {
    let count = usize::from(r.u8(list)?);
    if count > max {
        return Err(BlockError::TooManyVotes { list, count, max });
    }
    let mut ops = Vec::with_capacity(count);
    for index in 0..count {
        let op = UpgradeOp::decode(r.take::<UPGRADE_OP_BYTES>(list)?).map_err(|source| {
            BlockError::Vote {
                list,
                index,
                source,
            }
        })?;
        ops.push(op);
    }
    Ok(ops)
}

/// The proposer's signature over [`seal_message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seal {
    /// No signature (dev chains without an authority set).
    Unsigned,
    /// An ed25519 signature by the authority at `header.proposer` over [`seal_message`].
    Ed25519([u8; 64]),
}

/// A block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Header.
    pub header: BlockHeader,
    /// Body.
    pub body: BlockBody,
    /// Proposer signature.
    pub seal: Seal,
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self, what: &'static str) -> Result<&'a [u8; N], BlockError> {
        let (head, rest) = self
            .bytes
            .split_first_chunk::<N>()
            .ok_or(BlockError::Truncated(what))?;
        self.bytes = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, BlockError> {
        Ok(self.take::<1>(what)?[0])
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, BlockError> {
        Ok(u64::from_le_bytes(*self.take::<8>(what)?))
    }
}

impl BlockHeader {
    /// Canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_BYTES);
        out.push(BLOCK_VERSION);
        out.extend_from_slice(self.parent_hash.as_bytes());
        out.extend_from_slice(&self.height.to_le_bytes());
        out.extend_from_slice(&self.slot.to_le_bytes());
        out.extend_from_slice(&self.proposer.to_le_bytes());
        out.extend_from_slice(self.state_root.as_bytes());
        out.extend_from_slice(&self.body_root);
        out
    }

    /// The block hash: `sha256(encode())`.
    pub fn hash(&self) -> BlockHash {
        BlockHash::new(Sha256::digest(self.encode()).into())
    }

    /// Decodes a header encoded alone ([`BlockHeader::encode`]), refusing trailing bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, BlockError> {
        let mut r = Reader { bytes };
        let header = Self::decode_from(&mut r)?;
        if !r.bytes.is_empty() {
            return Err(BlockError::Trailing(r.bytes.len()));
        }
        Ok(header)
    }

    fn decode_from(r: &mut Reader<'_>) -> Result<Self, BlockError> {
        let version = r.u8("header version")?;
        if version != BLOCK_VERSION {
            return Err(BlockError::Version {
                part: "header",
                found: version,
            });
        }
        Ok(Self {
            parent_hash: BlockHash::new(*r.take("parent hash")?),
            height: r.u64("height")?,
            slot: r.u64("slot")?,
            proposer: u32::from_le_bytes(*r.take("proposer")?),
            state_root: StateRoot::new(*r.take("state root")?),
            body_root: *r.take("body root")?,
        })
    }
}

impl BlockBody {
    /// What the body says about the module schedule.
    pub fn schedule_votes(&self) -> crate::state::schedule::BlockVotes<'_> {
        crate::state::schedule::BlockVotes {
            upgrades: &self.upgrade_votes,
            cancels: &self.cancel_votes,
            ready: &self.ready,
        }
    }

    /// Canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(
            self.deposits
                .len()
                .saturating_mul(PROVEN_DEPOSIT_BYTES)
                .saturating_add(3 + super::eth1::ETH1_DATA_BYTES),
        );
        out.push(BLOCK_VERSION);
        out.extend_from_slice(&self.eth1_vote.encode());
        let count = u16::try_from(self.deposits.len()).unwrap_or(u16::MAX);
        out.extend_from_slice(&count.to_le_bytes());
        for d in self.deposits.iter().take(usize::from(count)) {
            out.extend_from_slice(&d.data.encode());
            for hash in &d.proof {
                out.extend_from_slice(hash);
            }
        }
        encode_ops(&mut out, &self.upgrade_votes);
        encode_ops(&mut out, &self.cancel_votes);
        encode_ops(&mut out, &self.ready);
        out
    }

    /// `sha256(encode())`.
    pub fn root(&self) -> Digest32 {
        Sha256::digest(self.encode()).into()
    }

    fn decode_from(r: &mut Reader<'_>, max_deposits: u16) -> Result<Self, BlockError> {
        let version = r.u8("body version")?;
        if version != BLOCK_VERSION {
            return Err(BlockError::Version {
                part: "body",
                found: version,
            });
        }
        let eth1_vote = Eth1Data::decode(r.take("eth1 vote")?);
        let count = u16::from_le_bytes(*r.take("deposit count")?);
        if count > max_deposits {
            return Err(BlockError::TooManyDeposits {
                count: usize::from(count),
                max: max_deposits,
            });
        }
        let mut deposits = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let data = DepositData::decode_from(r)?;
            let mut proof = [[0u8; 32]; DEPOSIT_PROOF_LEN];
            for hash in &mut proof {
                *hash = *r.take("deposit proof")?;
            }
            deposits.push(ProvenDeposit { data, proof });
        }
        let [upgrades, cancels, ready] = OP_LISTS;
        Ok(Self {
            eth1_vote,
            deposits,
            upgrade_votes: decode_ops(r, upgrades)?,
            cancel_votes: decode_ops(r, cancels)?,
            ready: decode_ops(r, ready)?,
        })
    }
}

impl Block {
    /// Canonical encoding: header ‖ body ‖ seal.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.header.encode();
        out.extend_from_slice(&self.body.encode());
        match &self.seal {
            Seal::Unsigned => out.push(0),
            Seal::Ed25519(signature) => {
                out.push(1);
                out.extend_from_slice(signature);
            }
        }
        out
    }

    /// Decodes a block, refusing bodies with more than `max_deposits` deposits.
    pub fn decode(bytes: &[u8], max_deposits: u16) -> Result<Self, BlockError> {
        let mut r = Reader { bytes };
        let header = BlockHeader::decode_from(&mut r)?;
        let body = BlockBody::decode_from(&mut r, max_deposits)?;
        let seal = match r.u8("seal")? {
            0 => Seal::Unsigned,
            1 => Seal::Ed25519(*r.take("seal signature")?),
            other => return Err(BlockError::Seal(other)),
        };
        if !r.bytes.is_empty() {
            return Err(BlockError::Trailing(r.bytes.len()));
        }
        Ok(Self { header, body, seal })
    }

    /// The block hash.
    pub fn hash(&self) -> BlockHash {
        self.header.hash()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn deposit(seed: u8, amount: u64) -> ProvenDeposit {
        let mut proof = [[seed ^ 3; 32]; DEPOSIT_PROOF_LEN];
        proof[32] = [seed ^ 4; 32];
        ProvenDeposit {
            data: DepositData {
                pubkey: [seed; 48],
                withdrawal_credentials: [seed ^ 1; 32],
                amount,
                signature: [seed ^ 2; 96],
            },
            proof,
        }
    }

    fn vote(count: u64) -> Eth1Data {
        Eth1Data {
            deposit_root: [5; 32],
            deposit_count: count,
            block_hash: [6; 32],
        }
    }

    proptest! {
        // Failing cases are printed, not written next to the sources.
        #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn roundtrip(height: u64, slot: u64, proposer: u32, seeds in proptest::collection::vec((any::<u8>(), any::<u64>()), 0..16)) {
            let upgrade_votes = (0..(height % 5)).map(|i| UpgradeOp { kind: crate::runtime::Kind::Deposits, module: crate::hashes::ModuleHash([i as u8; 32]), height: slot }).collect();
            let op = |i: u64| UpgradeOp { kind: crate::runtime::Kind::Deposits, module: crate::hashes::ModuleHash([i as u8; 32]), height: slot };
            let cancel_votes = (0..(slot % 5)).map(op).collect();
            let ready = (0..(height % 17)).map(op).collect();
            let body = BlockBody { eth1_vote: vote(height), deposits: seeds.iter().map(|(s, a)| deposit(*s, *a)).collect(), upgrade_votes, cancel_votes, ready };
            let header = BlockHeader { parent_hash: BlockHash::new([1; 32]), height, slot, proposer, state_root: StateRoot::new([2; 32]), body_root: body.root() };
            let block = Block { header, body, seal: if height % 2 == 0 { Seal::Unsigned } else { Seal::Ed25519([7; 64]) } };
            let bytes = block.encode();
            prop_assert_eq!(Block::decode(&bytes, 16), Ok(block.clone()));
            for cut in [0, 1, HEADER_BYTES, HEADER_BYTES + 40, bytes.len() - 1] {
                prop_assert!(Block::decode(&bytes[..cut], 16).is_err());
            }
        }
    }

    #[test]
    fn limits_versions_and_trailing_bytes() {
        let body = BlockBody {
            eth1_vote: vote(3),
            deposits: (0..3).map(|i| deposit(i, 1)).collect(),
            ..BlockBody::default()
        };
        let header = BlockHeader {
            parent_hash: BlockHash::new([0; 32]),
            height: 1,
            slot: 1,
            proposer: 0,
            state_root: StateRoot::new([0; 32]),
            body_root: body.root(),
        };
        let bytes = Block {
            header,
            body,
            seal: Seal::Unsigned,
        }
        .encode();
        assert_eq!(
            Block::decode(&bytes, 2),
            Err(BlockError::TooManyDeposits { count: 3, max: 2 })
        );
        let mut bad = bytes.clone();
        bad[0] = 9;
        assert_eq!(
            Block::decode(&bad, 16),
            Err(BlockError::Version {
                part: "header",
                found: 9
            })
        );
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(Block::decode(&long, 16), Err(BlockError::Trailing(1)));
        let mut bad_seal = bytes.clone();
        *bad_seal.last_mut().unwrap() = 5;
        assert_eq!(Block::decode(&bad_seal, 16), Err(BlockError::Seal(5)));
        assert_eq!(
            Block::decode(&bytes[..50], 16),
            Err(BlockError::Truncated("proposer"))
        );
        assert_eq!(
            Block::decode(&bytes[..40], 16),
            Err(BlockError::Truncated("height"))
        );
        assert_eq!(
            Block::decode(&bytes[..HEADER_BYTES + 10], 16),
            Err(BlockError::Truncated("eth1 vote"))
        );
        let first_proof = HEADER_BYTES + 1 + 72 + 2 + DEPOSIT_BYTES;
        assert_eq!(
            Block::decode(&bytes[..first_proof + 100], 16),
            Err(BlockError::Truncated("deposit proof"))
        );
        // Older bodies (1: no vote, no proofs; 2: no upgrade votes) are refused by name.
        for old in [1, 2] {
            let mut v = bytes.clone();
            v[HEADER_BYTES] = old;
            assert_eq!(
                Block::decode(&v, 16),
                Err(BlockError::Version {
                    part: "body",
                    found: old
                })
            );
        }
        // Each list's count is bounded and every operation's kind must be known. The body ends
        // with the three counts (upgrade votes, cancel votes, attestations), all 0 here.
        let seal_at = bytes.len() - 1;
        let lists_at = seal_at - 3;
        for (list, (name, max)) in OP_LISTS.into_iter().enumerate() {
            let mut many = bytes[..lists_at].to_vec();
            many.extend(&[0, 0, 0][..list]);
            many.push(max as u8 + 1);
            many.extend(std::iter::repeat_n(0, (max + 1) * UPGRADE_OP_BYTES + 3));
            assert_eq!(
                Block::decode(&many, 16),
                Err(BlockError::TooManyVotes {
                    list: name,
                    count: max + 1,
                    max
                })
            );
            let mut unknown = bytes[..lists_at].to_vec();
            unknown.extend(&[0, 0, 0][..list]);
            unknown.push(1);
            unknown.extend(std::iter::repeat_n(7, UPGRADE_OP_BYTES));
            unknown.extend(&[0, 0, 0][list + 1..]);
            unknown.push(0);
            assert_eq!(
                Block::decode(&unknown, 16),
                Err(BlockError::Vote {
                    list: name,
                    index: 0,
                    source: ScheduleError::UnknownKind(7)
                })
            );
        }
    }

    #[test]
    fn the_seal_message_is_domain_separated_and_bound_to_the_chain() {
        let block = BlockHash::new([1u8; 32]);
        let genesis = BlockHash::new([0; 32]);
        let m = seal_message(&genesis, &block);
        assert_ne!(m, block.to_bytes());
        assert_ne!(m, seal_message(&BlockHash::new([9; 32]), &block));
        assert_ne!(m, seal_message(&genesis, &BlockHash::new([2; 32])));
        let expected: Digest32 = Sha256::digest(
            [
                b"modnode-block-seal-v1".as_slice(),
                &[0; 32],
                block.as_bytes(),
            ]
            .concat(),
        )
        .into();
        assert_eq!(m, expected);
    }
}
