//! The admin HTTP server: [`bind`] to set it up, [`serve`] to run it.
//!
//! hyper speaks HTTP/1.1 and axum routes ([`super::routes`]); this file owns the connections.
//! Each connection carries one request and is bounded in time (the head within
//! [`ServerConfig::io_timeout`], the body within the same again, the whole connection within
//! [`ServerConfig::connection_lifetime`]) and in size (16 KiB of head; bodies of at most
//! [`ServerConfig::max_body`], uploads of at most [`ServerConfig::max_module_bytes`]).
//!
//! The operator must always get through, whatever unauthenticated clients do.
//! So the server always accepts while some connection can make room, and:
//! - at most [`ServerConfig::max_connections`] connections without the token are held at once;
//!   a new one evicts the slowest of them first — the one that has held its slot longest
//!   without a complete request head, then a refused one, then an unauthenticated request still
//!   being answered — but never one accepted less than [`ServerConfig::head_grace`] ago that
//!   is still waiting for its head or being answered (a client that sends its head at once and
//!   reads its answer is never cut off);
//! - a request with the right token moves to a reserved lane of
//!   [`ServerConfig::max_authenticated`] requests served at once (more wait for their turn,
//!   they are never dropped) and is never evicted;
//! - the token is checked before a body is read, and a refused request is answered at once
//!   and its connection closed, its body never read.
//!
//! Evictions are counted in `modnode_admin_connections_evicted_total` of `/metrics`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt as _;

use super::routes::{self, AppState, ClientAddr};
use super::token::{AdminToken, write_admin_addr};
use super::{AdminBackend, AdminError};
use crate::modules_store::upload::DEFAULT_MAX_MODULE_BYTES;

mod connections;

pub(crate) use connections::{ConnPhase, Phase};
use connections::{Connections, Tracked};

/// Longest accepted request head (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;

/// Limits and timeouts of the admin server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Time a client has to send its request head, and then its body.
    pub io_timeout: Duration,
    /// Time the backend has to answer a request other than an upload.
    pub backend_timeout: Duration,
    /// Time an upload may take to be validated, compiled and warmed.
    pub upload_timeout: Duration,
    /// Connections without the token held at once (those whose head has not arrived yet
    /// included); one more evicts the slowest of them.
    pub max_connections: usize,
    /// Requests with the right token served at once: the operator's reserved lane. More wait
    /// for a place; their connections are never evicted.
    pub max_authenticated: usize,
    /// A connection accepted less than this long ago is not evicted for lacking a request
    /// head: the time a client that sends its head at once has to get it parsed.
    pub head_grace: Duration,
    /// Largest body of routes other than module upload.
    pub max_body: usize,
    /// Largest module upload.
    pub max_module_bytes: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            io_timeout: Duration::from_secs(10),
            backend_timeout: Duration::from_secs(20),
            upload_timeout: Duration::from_secs(120),
            max_connections: 64,
            max_authenticated: 16,
            head_grace: Duration::from_millis(200),
            max_body: 64 * 1024,
            max_module_bytes: DEFAULT_MAX_MODULE_BYTES,
        }
    }
}

impl ServerConfig {
    /// The longest a connection may live: receiving the request, the slowest handler, and
    /// the same again to send the answer. A backstop; the steps have their own timeouts.
    pub fn connection_lifetime(&self) -> Duration {
        self.io_timeout
            .saturating_mul(4)
            .saturating_add(self.backend_timeout.max(self.upload_timeout))
    }
}

/// Binds the admin API on `addr`, creates or loads `<data_dir>/admin.token` and records the
/// bound address in `<data_dir>/admin.addr`. A non-loopback `addr` is refused unless `public`
/// (the operator's `--admin-public`), and then a warning says the token travels in clear.
/// Pass the result to [`serve`].
pub async fn bind(
    addr: SocketAddr,
    data_dir: &Path,
    public: bool,
) -> Result<(TcpListener, AdminToken), AdminError> {
    if !addr.ip().is_loopback() {
        if !public {
            return Err(AdminError::PublicBind { addr });
        }
        tracing::warn!(
            %addr,
            "admin API bound to a non-loopback address (--admin-public): the bearer token and \
             every request travel in clear; put a TLS proxy in front or keep the port firewalled"
        );
    }
    let token = AdminToken::load_or_create(data_dir)?;
    let bind_err = |source| AdminError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    write_admin_addr(data_dir, local)?;
    tracing::info!(addr = %local, "admin API listening");
    Ok((listener, token))
}

/// Serves the admin API on `listener` until `shutdown` becomes `true` (or its sender is
/// dropped); connections still open then are cut off.
pub async fn serve(
    listener: TcpListener,
    token: AdminToken,
    backend: Arc<dyn AdminBackend>,
    config: ServerConfig,
    shutdown: watch::Receiver<bool>,
) {
    let evicted = Arc::new(AtomicU64::new(0));
    let router = routes::router(AppState {
        token: Arc::new(token),
        backend,
        lane: Arc::new(Semaphore::new(config.max_authenticated.max(1))),
        evicted: evicted.clone(),
        config: config.clone(),
    });
    serve_counted(listener, router, config, evicted, shutdown).await;
}

/// Serves `router` on `listener` with the admin server's connection discipline (one request
/// per connection, head and lifetime timeouts, head size limit, the slowest connection evicted
/// to make room) until `shutdown` becomes `true`. The dev deposit contract's JSON-RPC endpoint
/// is served the same way (no token there: every request is evictable, oldest first).
pub(crate) async fn serve_router(
    listener: TcpListener,
    router: axum::Router,
    config: ServerConfig,
    shutdown: watch::Receiver<bool>,
) {
    serve_counted(
        listener,
        router,
        config,
        Arc::new(AtomicU64::new(0)),
        shutdown,
    )
    .await;
}

/// [`serve_router`], counting evictions in `evicted`.
async fn serve_counted(
    listener: TcpListener,
    router: axum::Router,
    config: ServerConfig,
    evicted: Arc<AtomicU64>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = Connections {
        tasks: JoinSet::new(),
        live: HashMap::new(),
        config: config.clone(),
        evicted,
    };
    while !*shutdown.borrow_and_update() {
        let now = Instant::now();
        let can_take = connections.can_take(now);
        // A connection finishing wakes the loop too; without any, this is 1 s from now.
        let soon = |d| now.checked_add(d).unwrap_or(now);
        let retry = connections
            .next_evictable()
            .unwrap_or_else(|| soon(Duration::from_secs(1)))
            .max(soon(Duration::from_millis(1)));
        tokio::select! {
            changed = shutdown.changed() => if changed.is_err() { break },
            Some(done) = connections.tasks.join_next_with_id(), if !connections.tasks.is_empty() => {
                match done {
                    Ok((id, ())) => connections.finished(id),
                    Err(e) => connections.finished(e.id()),
                }
            }
            // Full of connections too young to evict: look again once they are old enough.
            () = tokio::time::sleep_until(retry), if !can_take => {}
            accepted = listener.accept(), if can_take => match accepted {
                Ok((stream, client)) => {
                    if !connections.make_room(Instant::now()) {
                        // Taken between the check and now (cannot happen: phases only move
                        // on and connections only age); the bound wins over this client.
                        tracing::debug!(%client, "admin connection refused: no room");
                        continue;
                    }
                    let phase = ConnPhase::new();
                    let handle = connections.tasks.spawn(tracing::Instrument::in_current_span(connection(
                        stream,
                        client,
                        phase.clone(),
                        router.clone(),
                        config.clone(),
                    )));
                    connections.live.insert(handle.id(), Tracked {
                        accepted: Instant::now(),
                        phase,
                        handle,
                    });
                }
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "admin API cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    connections.tasks.shutdown().await;
}

/// Serves one request on `stream`.
async fn connection(
    stream: TcpStream,
    client: SocketAddr,
    phase: ConnPhase,
    router: axum::Router,
    config: ServerConfig,
) {
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        // The head arrived; the token check (routes) moves it on to refused or authenticated.
        if phase.get() == Phase::Head {
            phase.set(Phase::Public);
        }
        request.extensions_mut().insert(ClientAddr(client));
        request.extensions_mut().insert(phase.clone());
        let router = router.clone();
        async move {
            if request.version() == hyper::Version::HTTP_11
                && !request.headers().contains_key(hyper::header::HOST)
            {
                return Ok(routes::error(
                    hyper::StatusCode::BAD_REQUEST,
                    "missing Host header",
                ));
            }
            router.oneshot(request.map(Body::new)).await
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(config.io_timeout)
        .max_header_size(MAX_HEAD)
        .max_buf_size(MAX_HEAD.max(64 * 1024))
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(config.connection_lifetime(), served).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(%client, error = %e, "admin connection failed"),
        Err(_) => tracing::debug!(%client, "admin connection outlived its lifetime; closed"),
    }
}

#[cfg(test)]
mod tests;
