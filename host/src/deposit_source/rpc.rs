//! The Ethereum JSON-RPC subset a deposit follower needs, answered by the dev contract:
//! `eth_chainId`, `eth_getCode` (a placeholder at the contract's address, so a follower's
//! check that code exists there passes), `eth_blockNumber`, `eth_getBlockByNumber`,
//! `eth_getLogs` (the `DepositEvent`s, ABI-encoded as the real contract emits them; a range
//! longer than the contract's [`log_block_range`](DevContract::log_block_range) is refused with
//! `-32005` like providers do) and the dev-only `modnode_submitDeposit`. This is the transport-free dispatcher: [`server`](super::server)
//! puts it behind HTTP, and tests call it directly.
//!
//! Requests and answers follow JSON-RPC 2.0; every error has the standard shape
//! `{"code", "message"}` and names what is wrong. Quantities are `0x`-prefixed hex without
//! leading zeros, data is `0x`-prefixed hex, as Ethereum clients write them.

use std::sync::Mutex;

use alloy_primitives::{Address, B256, Bytes, U64};
use serde::Serialize;
use serde_json::{Value, json};

use super::abi::{deposit_event_topic, encode_deposit_event};
use super::deposit_json;
use super::dev_contract::{
    DEFAULT_LOG_BLOCK_RANGE, DEV_CONTRACT_ADDRESS, DEV_CONTRACT_CODE, DevContract, Eth1Block,
    LoggedDeposit,
};

/// The dev chain id answered by `eth_chainId` (1337, the usual dev-chain id).
pub const DEV_CHAIN_ID: u64 = 1337;
/// Most blocks one `eth_getLogs` may span, unless the contract is set otherwise.
pub const MAX_LOG_BLOCK_RANGE: u64 = DEFAULT_LOG_BLOCK_RANGE;
/// Most logs one `eth_getLogs` may return.
pub const MAX_LOGS: usize = 10_000;

/// JSON-RPC 2.0 error codes used here.
pub mod codes {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// Unknown method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Bad parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The server failed (ours).
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The contract refused the transaction (EIP-1474 "transaction rejected").
    pub const TRANSACTION_REJECTED: i64 = -32003;
    /// The query is too large (EIP-1474 "limit exceeded").
    pub const LIMIT_EXCEEDED: i64 = -32005;
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("JSON-RPC error {code}: {message}")]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// What is wrong.
    pub message: String,
}

impl RpcError {
    /// An error with `code` and `message`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn params(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_PARAMS, message)
    }

    /// The error object.
    pub fn to_json(&self) -> Value {
        json!({ "code": self.code, "message": self.message })
    }
}

/// `0x`-prefixed hex without leading zeros.
pub fn quantity(value: u64) -> String {
    format!("{value:#x}")
}

/// `0x`-prefixed hex bytes.
pub fn data(bytes: &[u8]) -> String {
    format!("0x{}", hex::encode(bytes))
}

/// Parses a quantity (`0x` + 1 to 16 hex digits).
pub fn parse_quantity(text: &str, what: &str) -> Result<u64, RpcError> {
    let digits = text
        .strip_prefix("0x")
        .filter(|d| !d.is_empty() && d.len() <= 16)
        .ok_or_else(|| {
            RpcError::params(format!(
                "{what}: expected a 0x-prefixed hex quantity, got {:?}",
                truncate(text)
            ))
        })?;
    u64::from_str_radix(digits, 16).map_err(|e| RpcError::params(format!("{what}: {e}")))
}

/// Parses `0x`-prefixed hex bytes of exactly `N` bytes.
pub fn parse_data<const N: usize>(text: &str, what: &str) -> Result<[u8; N], RpcError> {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    let bytes = hex::decode(digits).map_err(|e| RpcError::params(format!("{what}: {e}")))?;
    <[u8; N]>::try_from(bytes.as_slice())
        .map_err(|_| RpcError::params(format!("{what}: {} bytes, expected {N}", bytes.len())))
}

fn truncate(text: &str) -> String {
    text.chars().take(80).collect()
}

/// The block object of `eth_getBlockByNumber` (the fields a follower reads), typed: alloy's
/// primitives write quantities and data as Ethereum clients do.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct BlockOut {
    number: U64,
    hash: B256,
    parent_hash: B256,
    timestamp: U64,
    transactions: [B256; 0],
}

/// The log object of a `DepositEvent`, typed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct LogOut {
    address: Address,
    topics: [B256; 1],
    data: Bytes,
    block_number: U64,
    block_hash: B256,
    transaction_hash: B256,
    transaction_index: U64,
    log_index: U64,
    removed: bool,
}

fn to_json(value: &impl Serialize) -> Value {
    // Plain structs of primitives: serialising them cannot fail.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The block object of `eth_getBlockByNumber` (the fields a follower reads).
pub fn block_json(block: &Eth1Block) -> Value {
    to_json(&BlockOut {
        number: U64::from(block.number),
        hash: B256::from(block.hash),
        parent_hash: B256::from(block.parent_hash),
        timestamp: U64::from(block.timestamp),
        transactions: [],
    })
}

/// The log object of a `DepositEvent`.
pub fn log_json(logged: &LoggedDeposit, block_hash: &[u8; 32], log_index: u64) -> Value {
    let mut tx = [0u8; 32];
    let (low, _) = tx.split_at_mut(8);
    low.copy_from_slice(&logged.index.to_be_bytes());
    to_json(&LogOut {
        address: Address::from(DEV_CONTRACT_ADDRESS),
        topics: [B256::from(deposit_event_topic())],
        data: encode_deposit_event(&logged.deposit, logged.index).into(),
        block_number: U64::from(logged.block),
        block_hash: B256::from(*block_hash),
        transaction_hash: B256::from(tx),
        transaction_index: U64::from(log_index),
        log_index: U64::from(log_index),
        removed: false,
    })
}

/// Answers one request body. Always returns a JSON-RPC response object.
pub fn handle_body(contract: &Mutex<DevContract>, body: &[u8], now_ms: u64) -> Value {
    let request: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return response(
                Value::Null,
                Err(RpcError::new(
                    codes::PARSE_ERROR,
                    format!("invalid JSON: {e}"),
                )),
            );
        }
    };
    let Value::Object(request) = request else {
        return response(
            Value::Null,
            Err(RpcError::new(
                codes::INVALID_REQUEST,
                "expected one JSON-RPC 2.0 request object (batches are not supported)",
            )),
        );
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    if !matches!(id, Value::Null | Value::Number(_) | Value::String(_)) {
        return response(
            Value::Null,
            Err(RpcError::new(
                codes::INVALID_REQUEST,
                "`id` must be a number, string or null",
            )),
        );
    }
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return response(
            id,
            Err(RpcError::new(
                codes::INVALID_REQUEST,
                "`jsonrpc` must be \"2.0\"",
            )),
        );
    }
    let Some(method) = request.get("method").and_then(Value::as_str) else {
        return response(
            id,
            Err(RpcError::new(
                codes::INVALID_REQUEST,
                "`method` must be a string",
            )),
        );
    };
    let params = match request.get("params") {
        None => Vec::new(),
        Some(Value::Array(params)) => params.clone(),
        Some(_) => {
            return response(id, Err(RpcError::params("`params` must be an array")));
        }
    };
    response(id, dispatch(contract, method, &params, now_ms))
}

fn response(id: Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(error) => json!({ "jsonrpc": "2.0", "id": id, "error": error.to_json() }),
    }
}

fn lock(contract: &Mutex<DevContract>) -> Result<std::sync::MutexGuard<'_, DevContract>, RpcError> {
    contract
        .lock()
        .map_err(|_| RpcError::new(codes::INTERNAL_ERROR, "the dev contract's lock is poisoned"))
}

fn dispatch(
    contract: &Mutex<DevContract>,
    method: &str,
    params: &[Value],
    now_ms: u64,
) -> Result<Value, RpcError> {
    match method {
        "eth_chainId" => Ok(json!(quantity(DEV_CHAIN_ID))),
        "eth_blockNumber" => Ok(json!(quantity(lock(contract)?.head(now_ms)))),
        "eth_getCode" => {
            let address = params
                .first()
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::params("params[0] must be an address"))?;
            let address: [u8; 20] = parse_data(address, "params[0]")?;
            if let Some(tag) = params.get(1) {
                let tag = tag
                    .as_str()
                    .ok_or_else(|| RpcError::params("params[1] must be a block number or tag"))?;
                block_tag(tag, 0, "params[1]")?;
            }
            let code: &[u8] = if address == DEV_CONTRACT_ADDRESS {
                DEV_CONTRACT_CODE
            } else {
                &[]
            };
            Ok(json!(data(code)))
        }
        "eth_getBlockByNumber" => {
            let tag = params
                .first()
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::params("params[0] must be a block number or tag"))?;
            let contract = lock(contract)?;
            let number = block_tag(tag, contract.head(now_ms), "params[0]")?;
            Ok(contract
                .block(number, now_ms)
                .map_or(Value::Null, |b| block_json(&b)))
        }
        "eth_getLogs" => {
            let filter = params
                .first()
                .and_then(Value::as_object)
                .ok_or_else(|| RpcError::params("params[0] must be a filter object"))?;
            let contract = lock(contract)?;
            get_logs(&contract, filter, now_ms)
        }
        "modnode_submitDeposit" => {
            let object = params
                .first()
                .ok_or_else(|| RpcError::params("params[0] must be a deposit object"))?;
            let body = serde_json::to_vec(object)
                .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))?;
            let deposit = deposit_json::decode(&body)
                .map_err(|e| RpcError::params(format!("params[0]: {e}")))?;
            let logged = lock(contract)?
                .deposit(deposit, now_ms)
                .map_err(|e| match e {
                    super::dev_contract::DevContractError::AmountTooLow { .. }
                    | super::dev_contract::DevContractError::Cache(_) => {
                        RpcError::new(codes::TRANSACTION_REJECTED, e.to_string())
                    }
                    _ => RpcError::new(codes::INTERNAL_ERROR, e.to_string()),
                })?;
            Ok(json!({
                "index": quantity(logged.index),
                "blockNumber": quantity(logged.block),
            }))
        }
        other => Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!(
                "method {:?} is not served; this dev deposit contract answers eth_chainId, \
                 eth_getCode, eth_blockNumber, eth_getBlockByNumber, eth_getLogs and \
                 modnode_submitDeposit",
                truncate(other)
            ),
        )),
    }
}

fn block_tag(tag: &str, head: u64, what: &str) -> Result<u64, RpcError> {
    match tag {
        "latest" | "safe" | "finalized" | "pending" => Ok(head),
        "earliest" => Ok(0),
        _ => parse_quantity(tag, what),
    }
}

fn get_logs(
    contract: &DevContract,
    filter: &serde_json::Map<String, Value>,
    now_ms: u64,
) -> Result<Value, RpcError> {
    const KNOWN: [&str; 5] = ["fromBlock", "toBlock", "address", "topics", "blockHash"];
    if let Some(unknown) = filter.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(RpcError::params(format!(
            "filter field {:?} is not supported",
            truncate(unknown)
        )));
    }
    if filter.contains_key("blockHash") {
        return Err(RpcError::params(
            "filter field \"blockHash\" is not supported; use fromBlock/toBlock",
        ));
    }
    let head = contract.head(now_ms);
    let bound = |key: &str| -> Result<u64, RpcError> {
        match filter.get(key) {
            None | Some(Value::Null) => Ok(head),
            Some(Value::String(tag)) => block_tag(tag, head, key),
            Some(_) => Err(RpcError::params(format!("{key} must be a string"))),
        }
    };
    let (from, to) = (bound("fromBlock")?, bound("toBlock")?);
    if from > to {
        return Err(RpcError::params(format!(
            "fromBlock {from} is after toBlock {to}"
        )));
    }
    let limit = contract.log_block_range();
    if to.abs_diff(from) >= limit {
        return Err(RpcError::new(
            codes::LIMIT_EXCEEDED,
            format!("block range {from}..={to} is longer than {limit} blocks"),
        ));
    }
    let ours = data(&DEV_CONTRACT_ADDRESS);
    let address_matches = match filter.get("address") {
        None | Some(Value::Null) => true,
        Some(Value::String(a)) => a.eq_ignore_ascii_case(&ours),
        Some(Value::Array(list)) => list
            .iter()
            .any(|a| a.as_str().is_some_and(|a| a.eq_ignore_ascii_case(&ours))),
        Some(_) => return Err(RpcError::params("address must be a string or an array")),
    };
    let topic = data(&deposit_event_topic());
    let topics_match = match filter.get("topics") {
        None | Some(Value::Null) => true,
        Some(Value::Array(topics)) => topics.iter().enumerate().all(|(i, t)| match t {
            Value::Null => true,
            Value::String(s) => i == 0 && s.eq_ignore_ascii_case(&topic),
            Value::Array(any) => {
                i == 0
                    && any
                        .iter()
                        .any(|s| s.as_str().is_some_and(|s| s.eq_ignore_ascii_case(&topic)))
            }
            _ => false,
        }),
        Some(_) => return Err(RpcError::params("topics must be an array")),
    };
    if !address_matches || !topics_match {
        return Ok(json!([]));
    }
    let logs = contract.logs(from, to, MAX_LOGS, now_ms).ok_or_else(|| {
        RpcError::new(
            codes::LIMIT_EXCEEDED,
            format!("query returned more than {MAX_LOGS} results; ask for a smaller block range"),
        )
    })?;
    let mut out = Vec::with_capacity(logs.len());
    let mut current: Option<(u64, [u8; 32], u64)> = None;
    for logged in &logs {
        let (hash, position) = match current {
            Some((block, hash, position)) if block == logged.block => {
                (hash, position.saturating_add(1))
            }
            _ => {
                let hash = contract
                    .block(logged.block, now_ms)
                    .map(|b| b.hash)
                    .ok_or_else(|| RpcError::new(codes::INTERNAL_ERROR, "log in a future block"))?;
                (hash, 0)
            }
        };
        current = Some((logged.block, hash, position));
        out.push(log_json(logged, &hash, position));
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::block::DepositData;
    use crate::deposit_source::abi::decode_deposit_event;

    fn contract() -> (tempfile::TempDir, Mutex<DevContract>) {
        let dir = tempfile::tempdir().unwrap();
        let c = DevContract::open(dir.path(), 100, 0).unwrap();
        (dir, Mutex::new(c))
    }

    fn call(c: &Mutex<DevContract>, method: &str, params: Value, now: u64) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        handle_body(c, body.to_string().as_bytes(), now)
    }

    fn deposit() -> DepositData {
        DepositData {
            pubkey: [5; 48],
            withdrawal_credentials: [6; 32],
            amount: 2_000_000_000,
            signature: [7; 96],
        }
    }

    #[test]
    fn serves_blocks_and_deposit_logs_in_the_real_contracts_shape() {
        let (_dir, c) = contract();
        let submitted = call(
            &c,
            "modnode_submitDeposit",
            json!([deposit_json::encode(&deposit())]),
            150,
        );
        assert_eq!(submitted["id"], 7);
        assert_eq!(submitted["result"]["index"], "0x0");
        assert_eq!(submitted["result"]["blockNumber"], "0x2");
        assert_eq!(call(&c, "eth_blockNumber", json!([]), 250)["result"], "0x2");
        let block = &call(&c, "eth_getBlockByNumber", json!(["0x2", false]), 250)["result"];
        assert_eq!(block["number"], "0x2");
        assert!(block["hash"].as_str().unwrap().len() == 66);
        assert!(call(&c, "eth_getBlockByNumber", json!(["0x3", false]), 250)["result"].is_null());
        let logs = call(
            &c,
            "eth_getLogs",
            json!([{"fromBlock": "0x0", "toBlock": "latest",
                    "address": data(&DEV_CONTRACT_ADDRESS),
                    "topics": [data(&deposit_event_topic())]}]),
            250,
        );
        let logs = logs["result"].as_array().unwrap();
        assert_eq!(logs.len(), 1);
        assert_eq!(logs[0]["blockHash"], block["hash"]);
        let bytes =
            hex::decode(logs[0]["data"].as_str().unwrap().trim_start_matches("0x")).unwrap();
        assert_eq!(decode_deposit_event(&bytes).unwrap(), (deposit(), 0));
        // Another address or topic: nothing.
        let other = call(
            &c,
            "eth_getLogs",
            json!([{"fromBlock": "0x0", "address": data(&[1; 20])}]),
            250,
        );
        assert_eq!(other["result"], json!([]));
    }

    #[test]
    fn answers_code_at_the_contract_only_and_enforces_its_log_range() {
        let (_dir, c) = contract();
        assert_eq!(
            call(&c, "eth_chainId", json!([]), 0)["result"],
            quantity(DEV_CHAIN_ID)
        );
        let ours = call(
            &c,
            "eth_getCode",
            json!([data(&DEV_CONTRACT_ADDRESS), "latest"]),
            0,
        );
        assert_eq!(ours["result"], data(DEV_CONTRACT_CODE));
        let other = call(&c, "eth_getCode", json!([data(&[1; 20]), "latest"]), 0);
        assert_eq!(other["result"], "0x");
        let bad = call(&c, "eth_getCode", json!(["0x12"]), 0);
        assert_eq!(bad["error"]["code"], codes::INVALID_PARAMS);

        c.lock().unwrap().set_log_block_range(3);
        let logs = |to: &str| {
            call(
                &c,
                "eth_getLogs",
                json!([{"fromBlock": "0x1", "toBlock": to}]),
                10_000,
            )
        };
        assert_eq!(logs("0x3")["result"], json!([]));
        let refused = logs("0x4");
        assert_eq!(refused["error"]["code"], codes::LIMIT_EXCEEDED);
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("longer than 3 blocks")
        );
    }

    #[test]
    fn bad_requests_get_named_json_rpc_errors() {
        let (_dir, c) = contract();
        let code = |v: &Value| v["error"]["code"].as_i64().unwrap();
        assert_eq!(code(&handle_body(&c, b"{nope", 0)), codes::PARSE_ERROR);
        assert_eq!(code(&handle_body(&c, b"[]", 0)), codes::INVALID_REQUEST);
        assert_eq!(
            code(&handle_body(
                &c,
                br#"{"jsonrpc":"1.0","id":1,"method":"eth_blockNumber"}"#,
                0
            )),
            codes::INVALID_REQUEST
        );
        let unknown = call(&c, "eth_sendTransaction", json!([]), 0);
        assert_eq!(code(&unknown), codes::METHOD_NOT_FOUND);
        assert!(
            unknown["error"]["message"]
                .as_str()
                .unwrap()
                .contains("eth_sendTransaction")
        );
        let bad = call(&c, "eth_getBlockByNumber", json!(["12", false]), 0);
        assert_eq!(code(&bad), codes::INVALID_PARAMS);
        let wide = call(
            &c,
            "eth_getLogs",
            json!([{"fromBlock": "0x0", "toBlock": "0x2710"}]),
            10_000_000,
        );
        assert_eq!(code(&wide), codes::LIMIT_EXCEEDED);
        let mut small = deposit_json::encode(&deposit());
        small["amount"] = json!(999_999_999u64);
        let refused = call(&c, "modnode_submitDeposit", json!([small]), 0);
        assert_eq!(code(&refused), codes::TRANSACTION_REJECTED);
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("minimum")
        );
        let mut short = deposit_json::encode(&deposit());
        short["pubkey"] = json!("0x1234");
        let refused = call(&c, "modnode_submitDeposit", json!([short]), 0);
        assert_eq!(code(&refused), codes::INVALID_PARAMS);
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("pubkey")
        );
        assert_eq!(c.lock().unwrap().deposit_count(), 0);
    }
}
