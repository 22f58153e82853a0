//! The JSON-RPC answers the client reads, as typed structures (serde derive), and how many
//! bytes each may take. An answer is read only up to the bound of what was asked for and then
//! decoded straight into these types: nothing is parsed into an untyped JSON tree first, so an
//! answer of the wrong shape (`[0,0,…]` for logs) fails at its first wrong element, and its
//! size never exceeds the bound however the source pads it.

use alloy_primitives::{Address, B256, Bytes, U64};
use serde::{Deserialize, Serialize};

use super::super::dev_contract::Eth1Block;
use super::super::follower::RawLog;

/// Bytes of the JSON-RPC envelope around a result (`{"jsonrpc":"2.0","id":1,"result":…}`),
/// with room for whitespace.
pub const ENVELOPE_BYTES: usize = 1 << 10;
/// Most bytes one `DepositEvent` log takes as JSON: its 576 data bytes are 1,154 hex
/// characters, its address, topic and hashes 240 more, its numbers and field names about 250
/// (a dev contract log is about 1,700 bytes); the rest is room for the fields clients add.
pub const MAX_LOG_JSON_BYTES: usize = 2 << 10;
/// Most logs one `eth_getLogs` answer may hold (the result cap providers apply: a wider query is
/// refused, and so is an answer over it, which shrinks the follower's page).
pub const MAX_LOGS_PER_ANSWER: usize = 10_000;
/// Bound on an `eth_getLogs` answer: `MAX_LOGS_PER_ANSWER` logs of `MAX_LOG_JSON_BYTES` and the
/// envelope (about 20 MiB).
pub const MAX_LOGS_ANSWER_BYTES: usize = MAX_LOGS_PER_ANSWER * MAX_LOG_JSON_BYTES + ENVELOPE_BYTES;
/// Bound on an `eth_getBlockByNumber(_, false)` answer: the header fields, about 3,000
/// transaction hashes (a 60M gas block of plain transfers) and withdrawals fit in it.
pub const MAX_BLOCK_ANSWER_BYTES: usize = 1 << 20;
/// Bound on an `eth_getCode` answer: 24,576 bytes of code (EIP-170) as hex and the envelope.
pub const MAX_CODE_ANSWER_BYTES: usize = 2 * 24_576 + ENVELOPE_BYTES + 16;
/// Bound on an answer holding one quantity or a small object (`eth_blockNumber`,
/// `eth_chainId`, `modnode_submitDeposit`).
pub const MAX_SMALL_ANSWER_BYTES: usize = 4 << 10;

/// The `eth_getLogs` filter the follower sends: one contract, one block range, `topics[0]`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogFilter {
    /// The contract.
    pub address: Address,
    /// First block.
    pub from_block: U64,
    /// Last block (inclusive).
    pub to_block: U64,
    /// `topics[0]`: the event's signature hash.
    pub topics: [B256; 1],
}

/// A log as `eth_getLogs` returns it (only the fields the follower reads).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogJson {
    address: Address,
    topics: Vec<B256>,
    data: Bytes,
    block_number: U64,
    block_hash: B256,
    #[serde(default)]
    removed: bool,
    #[serde(default)]
    log_index: Option<U64>,
    #[serde(default)]
    transaction_hash: Option<B256>,
}

impl LogJson {
    /// The log as the follower reads it; refuses more topics than a log can have.
    pub fn parse(self) -> Result<RawLog, String> {
        if self.topics.len() > 4 {
            return Err(format!("{} topics, at most 4 exist", self.topics.len()));
        }
        Ok(RawLog {
            address: self.address.into_array(),
            topics: self.topics.iter().map(|t| t.0).collect(),
            data: self.data.to_vec(),
            block_number: self.block_number.to(),
            block_hash: self.block_hash.0,
            removed: self.removed,
            log_index: self.log_index.map(|i| i.to()),
            transaction_hash: self.transaction_hash.map(|t| t.0),
        })
    }
}

/// A block as `eth_getBlockByNumber(_, false)` returns it (only the fields read).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockJson {
    number: U64,
    hash: B256,
    parent_hash: B256,
    timestamp: U64,
}

impl BlockJson {
    /// The block.
    pub fn parse(&self) -> Eth1Block {
        Eth1Block {
            number: self.number.to(),
            hash: self.hash.0,
            parent_hash: self.parent_hash.0,
            timestamp: self.timestamp.to(),
        }
    }
}

/// The dev contract's answer to `modnode_submitDeposit`.
#[derive(Debug, Deserialize)]
pub struct SubmittedJson {
    /// The deposit's index.
    pub index: U64,
}
