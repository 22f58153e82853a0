//! The admin HTTP server: [`bind`] to set it up, [`serve`] to run it.
//!
//! axum routes ([`super::routes`]); the connections are [`crate::http_server`]'s, with the
//! limits of a [`ServerConfig`] and the token check marking each connection refused or
//! authenticated. Each connection carries one request and is bounded in time (the head within
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

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::routes::{self, AppState};
use super::token::{AdminToken, write_admin_addr};
use super::{AdminBackend, AdminError};
use crate::http_server::{self, ConnectionLimits, DEFAULT_HEAD_GRACE, DEFAULT_MAX_AUTHENTICATED};
use crate::modules_store::upload::DEFAULT_MAX_MODULE_BYTES;

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
            max_authenticated: DEFAULT_MAX_AUTHENTICATED,
            head_grace: DEFAULT_HEAD_GRACE,
            max_body: 64 * 1024,
            max_module_bytes: DEFAULT_MAX_MODULE_BYTES,
        }
    }
}

impl ServerConfig {
    /// The longest a connection may live: receiving the request, the slowest handler, and
    /// the same again to send the answer. A backstop; the steps have their own timeouts.
    pub fn connection_lifetime(&self) -> Duration {
        self.connection_limits().lifetime()
    }

    /// The connection limits [`http_server::serve`] holds the admin API's connections to.
    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            io_timeout: self.io_timeout,
            handler_timeout: self.backend_timeout.max(self.upload_timeout),
            max_connections: self.max_connections,
            max_authenticated: self.max_authenticated,
            head_grace: self.head_grace,
        }
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
    http_server::serve(
        listener,
        router,
        config.connection_limits(),
        evicted,
        shutdown,
    )
    .await;
}

#[cfg(test)]
mod tests;
