//! The dev deposit contract's JSON-RPC endpoint over HTTP (axum): `POST /` with one JSON-RPC
//! request per body, answered by [`rpc::handle_body`](super::rpc::handle_body).
//!
//! Limits: bodies over [`MAX_BODY_BYTES`] get HTTP 413 with a JSON-RPC error, each request is
//! answered within [`REQUEST_TIMEOUT`] (or HTTP 503 with a JSON-RPC error), and at most
//! [`MAX_CONCURRENT_REQUESTS`] are handled at once (the rest wait). Connections are handled
//! like the admin API's ([`connection_limits`]): one request per connection, the request head
//! within [`IO_TIMEOUT`] and at most 16 KiB, a bounded lifetime, a cap on connections and on
//! the idle ones a client address may hold.

use std::net::SocketAddr;
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
use crate::admin::server::{ServerConfig, serve_router};
use crate::node::chain_worker::unix_ms;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Longest a request may take, body included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests handled at once.
pub const MAX_CONCURRENT_REQUESTS: usize = 64;
/// Time a client has to send its request head.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// The connection limits of the endpoint (the admin server's connection handling).
pub fn connection_limits() -> ServerConfig {
    ServerConfig {
        io_timeout: IO_TIMEOUT,
        backend_timeout: REQUEST_TIMEOUT,
        upload_timeout: Duration::ZERO,
        max_connections: MAX_CONCURRENT_REQUESTS,
        max_idle_per_client: 8,
        max_body: MAX_BODY_BYTES,
        max_module_bytes: 0,
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
        match tokio::task::spawn_blocking(move || rpc::handle_body(&contract, &body, unix_ms()))
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
    serve_router(listener, router(contract), connection_limits(), shutdown).await;
}
