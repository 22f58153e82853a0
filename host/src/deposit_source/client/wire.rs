//! The JSON-RPC answers the client reads, as typed structures (serde derive), and how many
//! bytes each may take. An answer is read only up to the bound of what was asked for and then
//! decoded straight into these types: nothing is parsed into an untyped JSON tree first, so an
//! answer of the wrong shape (`[0,0,…]` for logs) fails at its first wrong element, and its
//! size never exceeds the bound however the source pads it.

use serde::Deserialize;

use super::super::dev_contract::Eth1Block;
use super::super::follower::RawLog;
use super::super::rpc::{RpcError, parse_data, parse_quantity};

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

/// A JSON-RPC 2.0 response whose `result` is a `T`.
#[derive(Debug, Deserialize)]
pub struct Envelope<T> {
    /// The result (absent or null on an error, or for a block the source does not have).
    #[serde(default = "none")]
    pub result: Option<T>,
    /// The error, if the call failed.
    #[serde(default)]
    pub error: Option<ErrorObject>,
}

fn none<T>() -> Option<T> {
    None
}

/// A JSON-RPC error object.
#[derive(Debug, Deserialize)]
pub struct ErrorObject {
    /// The error code.
    #[serde(default)]
    pub code: i64,
    /// The message.
    #[serde(default)]
    pub message: String,
}

/// A log as `eth_getLogs` returns it (only the fields the follower reads).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogJson {
    address: String,
    topics: Vec<String>,
    data: String,
    block_number: String,
    block_hash: String,
    #[serde(default)]
    removed: bool,
    #[serde(default)]
    log_index: Option<String>,
    #[serde(default)]
    transaction_hash: Option<String>,
}

impl LogJson {
    /// The log with its fields parsed.
    pub fn parse(self) -> Result<RawLog, RpcError> {
        if self.topics.len() > 4 {
            return Err(RpcError::new(
                0,
                format!("{} topics, at most 4 exist", self.topics.len()),
            ));
        }
        let data = hex::decode(self.data.strip_prefix("0x").unwrap_or(&self.data))
            .map_err(|e| RpcError::new(0, format!("data: {e}")))?;
        Ok(RawLog {
            address: parse_data(&self.address, "address")?,
            topics: self
                .topics
                .iter()
                .map(|t| parse_data(t, "topic"))
                .collect::<Result<_, _>>()?,
            data,
            block_number: parse_quantity(&self.block_number, "blockNumber")?,
            block_hash: parse_data(&self.block_hash, "blockHash")?,
            removed: self.removed,
            log_index: self
                .log_index
                .as_deref()
                .map(|i| parse_quantity(i, "logIndex"))
                .transpose()?,
            transaction_hash: self
                .transaction_hash
                .as_deref()
                .map(|t| parse_data(t, "transactionHash"))
                .transpose()?,
        })
    }
}

/// A block as `eth_getBlockByNumber(_, false)` returns it (only the fields read).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockJson {
    number: String,
    hash: String,
    parent_hash: String,
    timestamp: String,
}

impl BlockJson {
    /// The block with its fields parsed.
    pub fn parse(&self) -> Result<Eth1Block, RpcError> {
        Ok(Eth1Block {
            number: parse_quantity(&self.number, "number")?,
            hash: parse_data(&self.hash, "hash")?,
            parent_hash: parse_data(&self.parent_hash, "parentHash")?,
            timestamp: parse_quantity(&self.timestamp, "timestamp")?,
        })
    }
}

/// The dev contract's answer to `modnode_submitDeposit`.
#[derive(Debug, Deserialize)]
pub struct SubmittedJson {
    /// The deposit's index (a quantity).
    pub index: String,
}
