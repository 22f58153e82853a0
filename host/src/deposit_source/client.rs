//! A small JSON-RPC 2.0 client over HTTP/1.1 (hyper), for a deposit source: the dev contract
//! or a real execution client. One connection per call, each call bounded in time and its answer
//! in size by what was asked for ([`wire`]: an `eth_getLogs` page by the logs it may hold, a
//! quantity by a few KiB); the answer is read up to that bound and decoded into typed
//! structures, never into an untyped JSON tree.
//!
//! The envelopes are alloy's (`alloy-json-rpc`: [`Request`](alloy_json_rpc::Request) and
//! [`Response`](alloy_json_rpc::Response)), the values in them alloy's primitives (`U64`
//! quantities, `Address`, `B256`, `Bytes`, hex on the wire); the transport stays ours because
//! the per-call bound on the answer is (no JSON-RPC client crate bounds an answer by method).
//! A call whose endpoint could not be reached is retried with exponential backoff and jitter
//! (`backon`, [`RETRY`]); any other failure is returned at once.

pub mod wire;

use std::time::Duration;

use alloy_json_rpc::{Id, ResponsePayload, RpcSend};
use alloy_primitives::{Address, U64};
use backon::{ExponentialBuilder, Retryable as _};
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;

use self::wire::{BlockJson, LogFilter, LogJson, SubmittedJson};
use super::abi::deposit_event_topic;
use super::deposit_json;
use super::dev_contract::Eth1Block;
use super::follower::RawLog;
use crate::chain::block::DepositData;

/// Default bound on one call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries of a call whose endpoint could not be reached (connection refused or reset, HTTP
/// handshake failed): two more attempts, 100 ms then about 200 ms later (jittered), so a
/// restarting execution client or a dropped keep-alive costs a poll nothing while a source that
/// is down is reported within half a second.
pub const RETRY: ExponentialBuilder = ExponentialBuilder::new()
    .with_min_delay(Duration::from_millis(100))
    .with_max_delay(Duration::from_secs(1))
    .with_max_times(2)
    .with_jitter();
/// Largest answer read for any call (the largest per-method bound, [`wire::MAX_LOGS_ANSWER_BYTES`],
/// is below it).
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
    /// The answer is larger than anything the call asked for can need (the source's fault;
    /// for `eth_getLogs`, a smaller page may fit).
    // `read` stays out of the message: it varies from poll to poll, and the follower reports
    // an error once per distinct text.
    #[error(
        "deposit source {url}: the answer to {method} is over its bound of {limit} bytes \
         ({size}); refused"
    )]
    TooLarge {
        /// The URL.
        url: String,
        /// The method called.
        method: String,
        /// The bound for this call.
        limit: usize,
        /// What the source announced (`Content-Length`), or that it sent more than the bound.
        size: String,
        /// Bytes read before refusing (at most the bound and one read more).
        read: usize,
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
            Self::TooLarge { method, .. } => method == "eth_getLogs",
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

    /// Calls `method` with `params` (serialized as the JSON-RPC `params` array; `()` for
    /// none); reads an answer of at most `limit` bytes and returns its `result` decoded as a
    /// `T` (`None`: the result is null). Each attempt is bounded by the client's timeout; an
    /// unreachable endpoint is retried as [`RETRY`] says.
    pub async fn call<P: RpcSend, T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: P,
        limit: usize,
    ) -> Result<Option<T>, ClientError> {
        let attempt = || async {
            match tokio::time::timeout(
                self.timeout,
                self.call_unbounded(method, params.clone(), limit),
            )
            .await
            {
                Ok(result) => result,
                Err(_) => Err(ClientError::Timeout {
                    url: self.url.clone(),
                    method: method.to_string(),
                    seconds: self.timeout.as_secs(),
                }),
            }
        };
        attempt
            .retry(RETRY)
            .sleep(tokio::time::sleep)
            .when(|e| matches!(e, ClientError::Unreachable { .. }))
            .notify(|e, after| {
                tracing::debug!(error = %e, retry_in = ?after, "deposit source call retried");
            })
            .await
    }

    /// [`call`](Self::call) for a result that must not be null.
    async fn call_some<P: RpcSend, T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: P,
        limit: usize,
    ) -> Result<T, ClientError> {
        self.call(method, params, limit)
            .await?
            .ok_or_else(|| self.bad(method, "no `result` or `error`, or a null result".into()))
    }

    async fn call_unbounded<P: RpcSend, T: DeserializeOwned>(
        &self,
        method: &'static str,
        params: P,
        limit: usize,
    ) -> Result<Option<T>, ClientError> {
        let limit = limit.min(MAX_RESPONSE_BYTES);
        let unreachable = |reason: String| ClientError::Unreachable {
            url: self.url.clone(),
            reason,
        };
        let bad = |reason: String| self.bad(method, reason);
        let request = alloy_json_rpc::Request::new(method, Id::Number(1), params);
        let body = serde_json::to_vec(&request).map_err(|e| bad(e.to_string()))?;
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
        let read = read_bounded(response.into_body(), limit).await;
        // Dropping the connection stops the source sending the rest of a refused answer.
        driver.abort();
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(Bounded::Over { announced, read }) => {
                return Err(ClientError::TooLarge {
                    url: self.url.clone(),
                    method: method.to_string(),
                    limit,
                    size: announced.map_or_else(
                        || format!("no length announced, more than {limit} bytes sent"),
                        |n| format!("{n} bytes announced"),
                    ),
                    read,
                });
            }
            Err(Bounded::Body(e)) => {
                return Err(unreachable(format!("reading the answer: {e}")));
            }
        };
        let answer: alloy_json_rpc::Response<Option<T>> =
            serde_json::from_slice(&bytes).map_err(|e| {
                bad(format!(
                    "HTTP {status}, not a JSON-RPC answer of the expected shape ({e}): {}",
                    String::from_utf8_lossy(bytes.get(..200).unwrap_or(&bytes))
                ))
            })?;
        match answer.payload {
            ResponsePayload::Success(result) => Ok(result),
            ResponsePayload::Failure(error) => Err(ClientError::Rpc {
                url: self.url.clone(),
                method: method.to_string(),
                code: error.code,
                message: error.message.chars().take(500).collect(),
            }),
        }
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
        let number: U64 = self
            .call_some("eth_blockNumber", (), wire::MAX_SMALL_ANSWER_BYTES)
            .await?;
        Ok(number.to())
    }

    /// `eth_chainId`.
    pub async fn chain_id(&self) -> Result<u64, ClientError> {
        let id: U64 = self
            .call_some("eth_chainId", (), wire::MAX_SMALL_ANSWER_BYTES)
            .await?;
        Ok(id.to())
    }

    /// `eth_getCode(address, "latest")`: the code at `address` (empty: no contract there).
    pub async fn code(&self, address: &[u8; 20]) -> Result<Vec<u8>, ClientError> {
        let code: alloy_primitives::Bytes = self
            .call_some(
                "eth_getCode",
                (Address::from(*address), "latest"),
                wire::MAX_CODE_ANSWER_BYTES,
            )
            .await?;
        Ok(code.to_vec())
    }

    /// `eth_getBlockByNumber(number, false)`; `None` if the source has no such block.
    pub async fn block(&self, number: u64) -> Result<Option<Eth1Block>, ClientError> {
        const METHOD: &str = "eth_getBlockByNumber";
        let Some(json) = self
            .call::<_, BlockJson>(
                METHOD,
                (U64::from(number), false),
                wire::MAX_BLOCK_ANSWER_BYTES,
            )
            .await?
        else {
            return Ok(None);
        };
        let block = json.parse();
        if block.number != number {
            return Err(self.bad(
                METHOD,
                format!("asked for block {number}, got block {}", block.number),
            ));
        }
        Ok(Some(block))
    }

    /// `eth_getLogs` of `DepositEvent`s of the contract at `address` in blocks `from..=to`. The
    /// answer is bounded by [`wire::MAX_LOGS_ANSWER_BYTES`]; one over it is
    /// [`ClientError::TooLarge`], a range limit (the follower asks for fewer blocks).
    pub async fn deposit_logs(
        &self,
        address: &[u8; 20],
        from: u64,
        to: u64,
    ) -> Result<Vec<RawLog>, ClientError> {
        const METHOD: &str = "eth_getLogs";
        let filter = (LogFilter {
            address: Address::from(*address),
            from_block: U64::from(from),
            to_block: U64::from(to),
            topics: [deposit_event_topic().into()],
        },);
        let logs: Vec<LogJson> = self
            .call_some(METHOD, filter, wire::MAX_LOGS_ANSWER_BYTES)
            .await?;
        if logs.len() > wire::MAX_LOGS_PER_ANSWER {
            return Err(self.bad(
                METHOD,
                format!(
                    "{} logs, more than the {} one answer may hold",
                    logs.len(),
                    wire::MAX_LOGS_PER_ANSWER
                ),
            ));
        }
        logs.into_iter()
            .enumerate()
            .map(|(i, log)| {
                log.parse()
                    .map_err(|reason| self.bad(METHOD, format!("log {i}: {reason}")))
            })
            .collect()
    }

    /// The dev contract's `modnode_submitDeposit`; returns the deposit's index.
    pub async fn submit_deposit(&self, deposit: &DepositData) -> Result<u64, ClientError> {
        const METHOD: &str = "modnode_submitDeposit";
        let submitted: SubmittedJson = self
            .call_some(
                METHOD,
                (deposit_json::encode(deposit),),
                wire::MAX_SMALL_ANSWER_BYTES,
            )
            .await?;
        Ok(submitted.index.to())
    }
}

/// Why [`read_bounded`] stopped.
#[derive(Debug)]
enum Bounded {
    /// The answer is over the bound: announced that long (`Content-Length`), or `read` bytes
    /// were read without it ending.
    Over {
        /// The `Content-Length`, if any.
        announced: Option<u64>,
        /// Bytes read before stopping.
        read: usize,
    },
    /// The body failed.
    Body(hyper::Error),
}

/// Reads `body` up to `limit` bytes: an announced length over it is refused before reading,
/// and reading stops at the first frame that passes it (so at most `limit` and one frame are
/// ever held).
async fn read_bounded(mut body: hyper::body::Incoming, limit: usize) -> Result<Vec<u8>, Bounded> {
    use hyper::body::Body as _;
    let announced = body.size_hint().exact();
    if announced.is_some_and(|n| u64::try_from(limit).is_ok_and(|limit| n > limit)) {
        return Err(Bounded::Over { announced, read: 0 });
    }
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(Bounded::Body)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let read = out.len().saturating_add(data.len());
        if read > limit {
            return Err(Bounded::Over { announced, read });
        }
        out.extend_from_slice(&data);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
