//! The dev deposit contract's JSON-RPC endpoint over HTTP (axum): `POST /` with one JSON-RPC
//! request per body, answered by [`rpc::handle_body`](super::rpc::handle_body).
//!
//! Limits: bodies over [`MAX_BODY_BYTES`] get HTTP 413 with a JSON-RPC error, each request is
//! answered within [`REQUEST_TIMEOUT`] (or HTTP 503 with a JSON-RPC error), and at most
//! [`MAX_CONCURRENT_REQUESTS`] are handled at once (the rest wait). Connections are handled
//! like the admin API's, by [`crate::http_server`] ([`connection_limits`]): one request per
//! connection, the request head within [`IO_TIMEOUT`] and at most 16 KiB, a bounded lifetime,
//! a cap on connections, the slowest evicted to make room.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;
use tokio::sync::watch;

use super::dev_contract::DevContract;
use super::rpc::{self, RpcError, codes};
use crate::clock::unix_ms;
use crate::http_server::{self, ConnectionLimits, DEFAULT_HEAD_GRACE, DEFAULT_MAX_AUTHENTICATED};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Longest a request may take, body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests handled at once.
pub const MAX_CONCURRENT_REQUESTS: usize = 64;
/// Time a client has to send its request head.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection limits of the endpoint (no credentials here: every connection may be
/// evicted, the slowest first).
pub fn connection_limits() -> ConnectionLimits {
    ConnectionLimits {
        io_timeout: IO_TIMEOUT,
        handler_timeout: REQUEST_TIMEOUT,
        max_connections: MAX_CONCURRENT_REQUESTS,
        max_authenticated: DEFAULT_MAX_AUTHENTICATED,
        head_grace: DEFAULT_HEAD_GRACE,
    }
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen for deposit-contract JSON-RPC on {addr}: {source}")]
pub struct ServeError {
    /// The address asked for.
    pub addr: SocketAddr,
    /// The I/O error.
    pub source: std::io::Error,
}

fn error(status: StatusCode, error: RpcError) -> Response {
    (
        status,
        axum::Json(json!({ "jsonrpc": "2.0", "id": null, "error": error.to_json() })),
    )
        .into_response()
}

async fn handle(State(contract): State<Arc<Mutex<DevContract>>>, body: Body) -> Response {
    let work = async {
        let body = match to_bytes(body, MAX_BODY_BYTES).await {
            Ok(body) => body,
            Err(e) => {
                return error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    RpcError::new(
                        codes::INVALID_REQUEST,
                        format!("request body unreadable or over {MAX_BODY_BYTES} bytes: {e}"),
                    ),
                );
            }
        };
        // The contract flushes sled on a deposit: keep that off the async workers.
        match tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
            rpc::handle_body(&contract, &body, unix_ms())
        }))
        .await
        {
            Ok(answer) => axum::Json(answer).into_response(),
            Err(e) => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                RpcError::new(
                    codes::INTERNAL_ERROR,
                    format!("request handler failed: {e}"),
                ),
            ),
        }
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, work).await {
        Ok(response) => response,
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            RpcError::new(
                codes::INTERNAL_ERROR,
                format!(
                    "request not answered within {} s",
                    REQUEST_TIMEOUT.as_secs()
                ),
            ),
        ),
    }
}

/// The router: `POST /` only.
pub fn router(contract: Arc<Mutex<DevContract>>) -> Router {
    Router::new()
        .route("/", post(handle))
        .layer(tower::limit::ConcurrencyLimitLayer::new(
            MAX_CONCURRENT_REQUESTS,
        ))
        .with_state(contract)
}

/// Binds `addr` and returns the listener with its bound address.
pub async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), ServeError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| ServeError { addr, source })?;
    Ok((listener, bound))
}

/// Serves `contract` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    contract: Arc<Mutex<DevContract>>,
    shutdown: watch::Receiver<bool>,
) {
    http_server::serve(
        listener,
        router(contract),
        connection_limits(),
        Arc::new(AtomicU64::new(0)),
        shutdown,
    )
    .await;
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::chain::block::DepositData;
    use crate::deposit_source::client::RpcClient;

    async fn start(dir: &std::path::Path) -> (SocketAddr, watch::Sender<bool>) {
        let contract = DevContract::open(dir, 100, unix_ms()).unwrap();
        let (listener, addr) = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(serve(listener, Arc::new(Mutex::new(contract)), stopped));
        (addr, stop)
    }

    fn deposit() -> DepositData {
        DepositData {
            pubkey: [5; 48],
            withdrawal_credentials: [0; 32],
            amount: 32_000_000_000,
            signature: [0; 96],
        }
    }

    #[tokio::test]
    async fn serves_json_rpc_and_refuses_oversized_bodies() {
        let dir = tempfile::tempdir().unwrap();
        let (addr, _stop) = start(dir.path()).await;
        let client = RpcClient::new(&format!("http://{addr}")).unwrap();
        assert_eq!(client.submit_deposit(&deposit()).await.unwrap(), 0);
        assert_eq!(client.submit_deposit(&deposit()).await.unwrap(), 1);
        client.block_number().await.unwrap();

        let body = "x".repeat(MAX_BODY_BYTES + 1);
        let request = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }

    /// A client that opens connections and sends nothing cannot lock the endpoint: its oldest
    /// idle connection is closed when it opens more than its share.
    #[tokio::test]
    async fn idle_connections_cannot_lock_the_endpoint() {
        let dir = tempfile::tempdir().unwrap();
        let (addr, _stop) = start(dir.path()).await;
        let mut idle = Vec::new();
        for _ in 0..MAX_CONCURRENT_REQUESTS + 8 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        let client = RpcClient::new(&format!("http://{addr}"))
            .unwrap()
            .with_timeout(Duration::from_secs(60));
        assert_eq!(client.submit_deposit(&deposit()).await.unwrap(), 0);
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(60), idle[0].read(&mut byte))
            .await
            .expect("the oldest idle connection was left open");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }
}
