//! A small JSON-RPC 2.0 client over HTTP/1.1 (hyper), for a deposit source: the dev contract
//! or a real execution client. One connection per call, each call bounded in time and in the
//! size of the answer.

use std::time::Duration;

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::Request;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use super::abi::deposit_event_topic;
use super::dev_contract::Eth1Block;
use super::follower::RawLog;
use super::rpc::{data, parse_data, parse_quantity, quantity};
use crate::admin::deposit_json;
use crate::chain::block::DepositData;

/// Default bound on one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest answer read (a full `eth_getLogs` page of 10,000 deposit logs is about 14 MB).
pub const MAX_RESPONSE_BYTES: usize = 32 << 20;

/// Why a call failed, and whose fault it is.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint URL is not `http://host:port[/path]`.
    #[error("deposit source URL {url:?}: {reason}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The endpoint could not be reached or the connection broke (transient).
    #[error("deposit source {url}: {reason} (will retry)")]
    Unreachable {
        /// The URL.
        url: String,
        /// What failed.
        reason: String,
    },
    /// No answer in time (transient).
    #[error("deposit source {url}: no answer to {method} within {seconds} s (will retry)")]
    Timeout {
        /// The URL.
        url: String,
        /// The method called.
        method: String,
        /// The bound.
        seconds: u64,
    },
    /// The answer is not a JSON-RPC response or not the expected shape (the source's fault).
    #[error("deposit source {url}: bad answer to {method}: {reason}")]
    BadResponse {
        /// The URL.
        url: String,
        /// The method called.
        method: String,
        /// What is wrong.
        reason: String,
    },
    /// The source answered with a JSON-RPC error.
    #[error("deposit source {url}: {method} failed with JSON-RPC error {code}: {message}")]
    Rpc {
        /// The URL.
        url: String,
        /// The method called.
        method: String,
        /// The error code.
        code: i64,
        /// The error message.
        message: String,
    },
}

/// Lower-cased fragments of the errors providers answer an `eth_getLogs` with when its block
/// range or result set is over their limit (geth, Infura, Alchemy, QuickNode, Ankr, Erigon,
/// Besu, the dev contract), beside the EIP-1474 code `-32005`.
const RANGE_LIMIT_MESSAGES: [&str; 9] = [
    "query returned more than",
    "block range",
    "exceed maximum block range",
    "range limit",
    "exceeds maximum range",
    "range is too",
    "response size exceeded",
    "too many blocks",
    "limited to a",
];

impl ClientError {
    /// Whether this is a provider refusing a query as too large (a block range or result set
    /// over its limit): a smaller range may succeed where the same one never will.
    pub fn is_range_limit(&self) -> bool {
        match self {
            Self::Rpc { code, message, .. } => {
                let message = message.to_lowercase();
                *code == super::rpc::codes::LIMIT_EXCEEDED
                    || RANGE_LIMIT_MESSAGES.iter().any(|m| message.contains(m))
            }
            _ => false,
        }
    }
}

/// A JSON-RPC endpoint.
#[derive(Debug, Clone)]
pub struct RpcClient {
    url: String,
    authority: String,
    path: String,
    timeout: Duration,
}

impl RpcClient {
    /// A client for `url` (`http://host:port[/path]`; TLS endpoints are not supported — put a
    /// local proxy in front of a remote execution client).
    pub fn new(url: &str) -> Result<Self, ClientError> {
        let bad = |reason: &str| ClientError::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
        if uri.scheme_str() != Some("http") {
            return Err(bad("only http:// endpoints are supported"));
        }
        let authority = uri.authority().ok_or_else(|| bad("no host"))?.to_string();
        let authority = if uri.port_u16().is_some() {
            authority
        } else {
            format!("{authority}:80")
        };
        let path = uri
            .path_and_query()
            .map_or_else(|| "/".to_string(), |p| p.to_string());
        Ok(Self {
            url: url.to_string(),
            authority,
            path,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// Bounds each call by `timeout`.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Calls `method` with `params`; returns the `result`.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        match tokio::time::timeout(self.timeout, self.call_unbounded(method, params)).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Timeout {
                url: self.url.clone(),
                method: method.to_string(),
                seconds: self.timeout.as_secs(),
            }),
        }
    }

    async fn call_unbounded(&self, method: &str, params: Value) -> Result<Value, ClientError> {
        let unreachable = |reason: String| ClientError::Unreachable {
            url: self.url.clone(),
            reason,
        };
        let bad = |reason: String| ClientError::BadResponse {
            url: self.url.clone(),
            method: method.to_string(),
            reason,
        };
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let body = serde_json::to_vec(&body).map_err(|e| bad(e.to_string()))?;
        let stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .map_err(|e| unreachable(format!("cannot connect: {e}")))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(format!("HTTP handshake: {e}")))?;
        let driver = tokio::spawn(connection);
        let request = Request::post(self.path.as_str())
            .header(hyper::header::HOST, self.authority.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| bad(e.to_string()))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| unreachable(format!("request failed: {e}")))?;
        let status = response.status();
        let bytes = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|e| {
                bad(format!(
                    "reading the answer (limit {MAX_RESPONSE_BYTES} bytes): {e}"
                ))
            })?
            .to_bytes();
        driver.abort();
        let answer: Value = serde_json::from_slice(&bytes).map_err(|e| {
            bad(format!(
                "HTTP {status}, not JSON ({e}): {}",
                String::from_utf8_lossy(bytes.get(..200).unwrap_or(&bytes))
            ))
        })?;
        if let Some(error) = answer.get("error") {
            return Err(ClientError::Rpc {
                url: self.url.clone(),
                method: method.to_string(),
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("(no message)")
                    .chars()
                    .take(500)
                    .collect(),
            });
        }
        answer
            .get("result")
            .cloned()
            .ok_or_else(|| bad(format!("HTTP {status}, no `result` or `error`")))
    }

    fn bad(&self, method: &str, reason: String) -> ClientError {
        ClientError::BadResponse {
            url: self.url.clone(),
            method: method.to_string(),
            reason,
        }
    }

    /// `eth_blockNumber`.
    pub async fn block_number(&self) -> Result<u64, ClientError> {
        let result = self.call("eth_blockNumber", json!([])).await?;
        let text = result
            .as_str()
            .ok_or_else(|| self.bad("eth_blockNumber", format!("{result} is not a quantity")))?;
        parse_quantity(text, "result").map_err(|e| self.bad("eth_blockNumber", e.message))
    }

    /// `eth_chainId`.
    pub async fn chain_id(&self) -> Result<u64, ClientError> {
        const METHOD: &str = "eth_chainId";
        let result = self.call(METHOD, json!([])).await?;
        let text = result
            .as_str()
            .ok_or_else(|| self.bad(METHOD, format!("{result} is not a quantity")))?;
        parse_quantity(text, "result").map_err(|e| self.bad(METHOD, e.message))
    }

    /// `eth_getCode(address, "latest")`: the code at `address` (empty: no contract there).
    pub async fn code(&self, address: &[u8; 20]) -> Result<Vec<u8>, ClientError> {
        const METHOD: &str = "eth_getCode";
        let result = self.call(METHOD, json!([data(address), "latest"])).await?;
        let text = result
            .as_str()
            .ok_or_else(|| self.bad(METHOD, format!("{result} is not data")))?;
        hex::decode(text.strip_prefix("0x").unwrap_or(text))
            .map_err(|e| self.bad(METHOD, format!("code is not hex: {e}")))
    }

    /// `eth_getBlockByNumber(number, false)`; `None` if the source has no such block.
    pub async fn block(&self, number: u64) -> Result<Option<Eth1Block>, ClientError> {
        const METHOD: &str = "eth_getBlockByNumber";
        let result = self.call(METHOD, json!([quantity(number), false])).await?;
        if result.is_null() {
            return Ok(None);
        }
        let field = |name: &str| {
            result
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| self.bad(METHOD, format!("block has no string field `{name}`")))
        };
        let block = Eth1Block {
            number: parse_quantity(field("number")?, "number")
                .map_err(|e| self.bad(METHOD, e.message))?,
            hash: parse_data(field("hash")?, "hash").map_err(|e| self.bad(METHOD, e.message))?,
            parent_hash: parse_data(field("parentHash")?, "parentHash")
                .map_err(|e| self.bad(METHOD, e.message))?,
            timestamp: parse_quantity(field("timestamp")?, "timestamp")
                .map_err(|e| self.bad(METHOD, e.message))?,
        };
        if block.number != number {
            return Err(self.bad(
                METHOD,
                format!("asked for block {number}, got block {}", block.number),
            ));
        }
        Ok(Some(block))
    }

    /// `eth_getLogs` of `DepositEvent`s of the contract at `address` in blocks `from..=to`.
    pub async fn deposit_logs(
        &self,
        address: &[u8; 20],
        from: u64,
        to: u64,
    ) -> Result<Vec<RawLog>, ClientError> {
        const METHOD: &str = "eth_getLogs";
        let filter = json!([{
            "address": data(address),
            "fromBlock": quantity(from),
            "toBlock": quantity(to),
            "topics": [data(&deposit_event_topic())],
        }]);
        let result = self.call(METHOD, filter).await?;
        let logs = result
            .as_array()
            .ok_or_else(|| self.bad(METHOD, "result is not an array".into()))?;
        logs.iter()
            .enumerate()
            .map(|(i, log)| {
                RawLog::from_json(log)
                    .map_err(|e| self.bad(METHOD, format!("log {i}: {}", e.message)))
            })
            .collect()
    }

    /// The dev contract's `modnode_submitDeposit`; returns the deposit's index.
    pub async fn submit_deposit(&self, deposit: &DepositData) -> Result<u64, ClientError> {
        const METHOD: &str = "modnode_submitDeposit";
        let result = self
            .call(METHOD, json!([deposit_json::encode(deposit)]))
            .await?;
        let index = result
            .get("index")
            .and_then(Value::as_str)
            .ok_or_else(|| self.bad(METHOD, format!("{result} has no `index`")))?;
        parse_quantity(index, "index").map_err(|e| self.bad(METHOD, e.message))
    }
}
