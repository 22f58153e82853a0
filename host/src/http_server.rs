//! Serving HTTP/1.1 with a connection discipline that an unauthenticated client cannot use to
//! lock anyone out: the admin API ([`crate::admin::server`]) and the dev deposit contract's
//! JSON-RPC endpoint ([`crate::deposit_source::server`]) both run on [`serve`].
//!
//! hyper speaks HTTP/1.1 and an axum `Router` answers; this module owns the connections. Each
//! connection carries one request and is bounded in time (the head within
//! [`ConnectionLimits::io_timeout`], the whole connection within
//! [`ConnectionLimits::lifetime`]) and in size ([`MAX_HEAD`] of request head). At most
//! [`ConnectionLimits::max_connections`] connections not marked authenticated are held at
//! once; a new one evicts the slowest of them first — the one that has held its slot longest
//! without a complete request head, then a refused one, then one still being answered — but
//! never one accepted less than [`ConnectionLimits::head_grace`] ago that is still waiting for
//! its head or being answered. A router that checks credentials marks its connection through
//! the `ConnPhase` put on every request (refused, or authenticated: then it is never evicted
//! and counts against the reserved lane, [`ConnectionLimits::max_authenticated`], instead).
//!
//! It imports nothing from the crate, so any layer may serve HTTP with it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use axum::body::Body;
use axum::response::IntoResponse as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt as _;

mod connections;

pub(crate) use connections::{ConnPhase, Phase};
use connections::{Connections, Tracked};

/// Longest accepted request head (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;

/// Requests marked authenticated served at once unless a server says otherwise (the admin
/// API's reserved lane).
pub const DEFAULT_MAX_AUTHENTICATED: usize = 16;

/// How long a new connection still waiting for its head (or being answered without
/// credentials) is safe from eviction, unless a server says otherwise.
pub const DEFAULT_HEAD_GRACE: Duration = Duration::from_millis(200);

/// The client's address, put on every request by the connection handler.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddr(pub(crate) SocketAddr);

/// Timeouts and caps of the connections [`serve`] holds.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Time a client has to send its request head.
    pub io_timeout: Duration,
    /// The longest the slowest handler of the router may take.
    pub handler_timeout: Duration,
    /// Connections not marked authenticated held at once (those whose head has not arrived
    /// yet included); one more evicts the slowest of them.
    pub max_connections: usize,
    /// Connections marked authenticated held at once besides them: the reserved lane. They
    /// are never evicted.
    pub max_authenticated: usize,
    /// A connection accepted less than this long ago is not evicted for lacking a request
    /// head: the time a client that sends its head at once has to get it parsed.
    pub head_grace: Duration,
}

impl ConnectionLimits {
    /// The longest a connection may live: receiving the request, the slowest handler, and
    /// the same again to send the answer. A backstop; the steps have their own timeouts.
    pub fn lifetime(&self) -> Duration {
        self.io_timeout
            .saturating_mul(4)
            .saturating_add(self.handler_timeout)
    }
}

/// Serves `router` on `listener` until `shutdown` becomes `true` (or its sender is dropped),
/// counting evicted connections in `evicted`; connections still open then are cut off.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: ConnectionLimits,
    evicted: Arc<AtomicU64>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = Connections {
        tasks: JoinSet::new(),
        live: HashMap::new(),
        config: limits.clone(),
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
                        tracing::debug!(%client, "HTTP connection refused: no room");
                        continue;
                    }
                    let phase = ConnPhase::new();
                    let handle = connections.tasks.spawn(tracing::Instrument::in_current_span(
                        connection(stream, client, phase.clone(), router.clone(), limits.clone()),
                    ));
                    connections.live.insert(handle.id(), Tracked {
                        accepted: Instant::now(),
                        phase,
                        handle,
                    });
                }
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "HTTP server cannot accept a connection");
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
    limits: ConnectionLimits,
) {
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        // The head arrived; the router's credential check may move it on to refused or
        // authenticated.
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
                return Ok((
                    hyper::StatusCode::BAD_REQUEST,
                    axum::Json(serde_json::json!({ "error": "missing Host header" })),
                )
                    .into_response());
            }
            router.oneshot(request.map(Body::new)).await
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(limits.io_timeout)
        .max_header_size(MAX_HEAD)
        .max_buf_size(MAX_HEAD.max(64 * 1024))
        .serve_connection(TokioIo::new(stream), service);
    match tokio::time::timeout(limits.lifetime(), served).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(%client, error = %e, "HTTP connection failed"),
        Err(_) => tracing::debug!(%client, "HTTP connection outlived its lifetime; closed"),
    }
}
