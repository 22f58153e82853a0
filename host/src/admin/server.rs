//! The admin HTTP server: [`bind`] to set it up, [`serve`] to run it.
//!
//! hyper speaks HTTP/1.1 and axum routes ([`super::routes`]); this file owns the connections.
//! Each connection carries one request and is bounded in time (the head within
//! [`ServerConfig::io_timeout`], the body within the same again, the whole connection within
//! [`ServerConfig::connection_lifetime`]) and in size (16 KiB of head; bodies of at most
//! [`ServerConfig::max_body`], uploads of at most [`ServerConfig::max_module_bytes`]). At most
//! [`ServerConfig::max_connections`] are served at once (further clients wait in the listen
//! backlog), and one client address may hold at most [`ServerConfig::max_idle_per_client`]
//! connections that have not yet sent a complete request head: opening one more closes its
//! oldest idle one, so a client that opens connections and sends nothing cannot lock the
//! others out. The token is checked before a body is read.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};
use tower::ServiceExt as _;

use super::routes::{self, AppState, ClientAddr};
use super::token::{AdminToken, write_admin_addr};
use super::{AdminBackend, AdminError};
use crate::modules_store::upload::DEFAULT_MAX_MODULE_BYTES;

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
    /// Connections served at once.
    pub max_connections: usize,
    /// Connections one client address may hold open without having sent a request head.
    pub max_idle_per_client: usize,
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
            max_idle_per_client: 8,
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

/// A connection that has not completed its request head yet.
struct Idle {
    started: Arc<AtomicBool>,
    handle: AbortHandle,
}

impl Idle {
    fn still_idle(&self) -> bool {
        !self.started.load(Ordering::Acquire) && !self.handle.is_finished()
    }
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
    let router = routes::router(AppState {
        token: Arc::new(token),
        backend,
        config: config.clone(),
    });
    serve_router(listener, router, config, shutdown).await;
}

/// Serves `router` on `listener` with the admin server's connection discipline (one request
/// per connection, head and lifetime timeouts, head size limit, connection cap, idle
/// connections per client bounded) until `shutdown` becomes `true`. The dev deposit contract's
/// JSON-RPC endpoint is served the same way.
pub(crate) async fn serve_router(
    listener: TcpListener,
    router: axum::Router,
    config: ServerConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    let mut idle: HashMap<IpAddr, VecDeque<Idle>> = HashMap::new();
    while !*shutdown.borrow_and_update() {
        tokio::select! {
            changed = shutdown.changed() => if changed.is_err() { break },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept(), if connections.len() < config.max_connections => match accepted {
                Ok((stream, client)) => {
                    let waiting = idle.entry(client.ip()).or_default();
                    waiting.retain(Idle::still_idle);
                    while waiting.len() >= config.max_idle_per_client.max(1) {
                        if let Some(oldest) = waiting.pop_front() {
                            tracing::debug!(%client, "closing the oldest idle admin connection of this client");
                            oldest.handle.abort();
                        }
                    }
                    let started = Arc::new(AtomicBool::new(false));
                    let handle = connections.spawn(connection(
                        stream,
                        client,
                        started.clone(),
                        router.clone(),
                        config.clone(),
                    ));
                    waiting.push_back(Idle { started, handle });
                    if idle.len() > config.max_connections {
                        idle.retain(|_, w| {
                            w.retain(Idle::still_idle);
                            !w.is_empty()
                        });
                    }
                }
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "admin API cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    connections.shutdown().await;
}

/// Serves one request on `stream`.
async fn connection(
    stream: TcpStream,
    client: SocketAddr,
    started: Arc<AtomicBool>,
    router: axum::Router,
    config: ServerConfig,
) {
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        started.store(true, Ordering::Release);
        request.extensions_mut().insert(ClientAddr(client));
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
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::timeout;

    use super::*;
    use crate::admin::{BoxFuture, client};
    use crate::modules_store::StoredModule;
    use crate::modules_store::upload::{UploadError, UploadOutcome};

    #[derive(Default)]
    struct FakeNode {
        uploads: Mutex<Vec<(Vec<u8>, String)>>,
        refusal: Option<&'static str>,
    }

    fn stored(bytes: &[u8]) -> StoredModule {
        StoredModule {
            sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes)),
            kind: "gossip-policy".into(),
            contract: "1.0.0".into(),
            module_version: 3,
            description: "fake".into(),
            size: bytes.len() as u64,
            first_seen_unix_ms: 1,
            source: "test".into(),
            compile_ms: 1,
            warm_us: 1,
            warm_fuel: 0,
            warm_real_inputs: 0,
            compiled_size: 1,
        }
    }

    impl AdminBackend for FakeNode {
        fn status(&self) -> Value {
            json!({"height": 7})
        }
        fn metrics(&self) -> String {
            "modnode_height 7\n".into()
        }
        fn upload_module(
            &self,
            bytes: Vec<u8>,
            source: String,
        ) -> BoxFuture<'_, Result<UploadOutcome, UploadError>> {
            Box::pin(async move {
                if self.refusal.is_some() {
                    return Err(UploadError::Invalid(
                        crate::runtime::ValidationError::CoreModule,
                    ));
                }
                let module = stored(&bytes);
                self.uploads.lock().unwrap().push((bytes, source));
                Ok(UploadOutcome::Ready(module))
            })
        }
        fn modules(&self) -> BoxFuture<'_, Result<Value, String>> {
            Box::pin(async move { Ok(json!({"kinds": []})) })
        }
        fn readyz(&self) -> BoxFuture<'_, Result<(), String>> {
            let refusal = self.refusal;
            Box::pin(async move { refusal.map_or(Ok(()), |r| Err(r.to_string())) })
        }
    }

    struct Node {
        dir: tempfile::TempDir,
        addr: SocketAddr,
        auth: String,
        backend: Arc<FakeNode>,
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    async fn start_with(refusal: Option<&'static str>, config: ServerConfig) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let (listener, token) = bind("127.0.0.1:0".parse().unwrap(), dir.path(), false)
            .await
            .unwrap();
        let backend = Arc::new(FakeNode {
            refusal,
            ..FakeNode::default()
        });
        let (stop, stopped) = watch::channel(false);
        let addr = listener.local_addr().unwrap();
        let auth = format!("Authorization: Bearer {}\r\n", token.to_hex());
        let task = tokio::spawn(serve(listener, token, backend.clone(), config, stopped));
        Node {
            dir,
            addr,
            auth,
            backend,
            stop,
            task,
        }
    }

    async fn start(refusal: Option<&'static str>) -> Node {
        let config = ServerConfig {
            max_module_bytes: 100_000,
            ..ServerConfig::default()
        };
        start_with(refusal, config).await
    }

    /// Sends `request` verbatim; returns the status and the whole response as text.
    async fn raw(addr: SocketAddr, request: &[u8]) -> (u16, String) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        stream.shutdown().await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        let text = String::from_utf8(response).unwrap();
        let status = text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|t| t.get(..3))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
        (status, text)
    }

    fn post(path: &str, auth: &str, body: &str) -> Vec<u8> {
        let len = body.len();
        format!("POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {len}\r\n\r\n{body}")
            .into_bytes()
    }

    #[tokio::test]
    async fn health_needs_no_token_and_says_why_it_fails() {
        let node = start(None).await;
        for path in ["/livez", "/readyz"] {
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
            let (status, text) = raw(node.addr, request.as_bytes()).await;
            assert!(
                status == 200 && text.ends_with(r#"{"status":"ok"}"#),
                "{text}"
            );
        }
        let failing = start(Some("syncing: head at height 3, a peer reports 90")).await;
        let (status, text) = raw(failing.addr, b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(status, 503, "{text}");
        assert!(
            text.ends_with(
                r#"{"reason":"syncing: head at height 3, a peer reports 90","status":"failing"}"#
            ),
            "{text}"
        );
        let (status, _) = raw(failing.addr, b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(status, 200);
    }

    #[tokio::test]
    async fn status_needs_the_token_and_metrics_do_not() {
        let node = start(None).await;
        assert_eq!(
            client::status(node.dir.path()).await.unwrap(),
            json!({"height": 7})
        );
        let (status, text) = raw(node.addr, b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(status == 401 && text.contains("admin.token"), "{text}");
        let wrong = format!(
            "GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
            "0".repeat(64)
        );
        let (status, text) = raw(node.addr, wrong.as_bytes()).await;
        assert!(
            status == 401 && text.contains("wrong admin token"),
            "{text}"
        );
        let (status, text) = raw(node.addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(status, 200);
        assert!(
            text.contains("application/openmetrics-text")
                && text.ends_with("\r\n\r\nmodnode_height 7\n"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn malformed_and_oversized_requests_are_refused() {
        let node = start(None).await;
        let auth = &node.auth;
        let cases = [
            (b"\x00\xffgarbage\r\n\r\n".to_vec(), 400, ""),
            (b"GET /status\r\nHost: x\r\n\r\n".to_vec(), 400, ""),
            (
                b"GET /status HTTP/1.1\r\n\r\n".to_vec(),
                400,
                "missing Host header",
            ),
            (
                b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
                404,
                "/nowhere",
            ),
            (
                format!("PUT /status HTTP/1.1\r\nHost: x\r\n{auth}\r\n").into_bytes(),
                405,
                "allow: GET\r\n",
            ),
            (
                format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD)).into_bytes(),
                431,
                "",
            ),
            (
                format!("POST /modules HTTP/1.1\r\nHost: x\r\n{auth}\r\n").into_bytes(),
                411,
                "Content-Length",
            ),
            (
                format!(
                    "POST /modules HTTP/1.1\r\nHost: x\r\n{auth}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                )
                .into_bytes(),
                411,
                "Transfer-Encoding",
            ),
            // Deposits come only from the deposit contract: the admin API has no such route.
            (
                post("/deposits", auth, "{}"),
                404,
                r#"no such path \"/deposits\""#,
            ),
            (post("/modules", auth, &"x".repeat(100_001)), 413, "100001"),
        ];
        for (request, expected_status, expected_text) in cases {
            let (status, text) = raw(node.addr, &request).await;
            assert!(
                status == expected_status && text.contains(expected_text),
                "expected {expected_status} {expected_text:?}: {text}"
            );
        }
        assert!(node.backend.uploads.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn uploads_need_the_token_and_reach_the_backend_only_with_it() {
        let node = start(None).await;
        let module = "m".repeat(50_000);
        let (status, text) = raw(node.addr, &post("/modules", "", &module)).await;
        assert!(status == 401 && text.contains("admin.token"), "{text}");
        let wrong = format!("Authorization: Bearer {}\r\n", "1".repeat(64));
        let (status, _) = raw(node.addr, &post("/modules", &wrong, &module)).await;
        assert_eq!(status, 401);
        assert!(node.backend.uploads.lock().unwrap().is_empty());

        let target = client::Target::data_dir(node.dir.path()).unwrap();
        let answer = client::upload_module(&target, module.clone().into_bytes())
            .await
            .unwrap();
        assert_eq!(answer["status"], "ready");
        assert_eq!(answer["module"]["module_version"], 3);
        let uploads = node.backend.uploads.lock().unwrap();
        assert_eq!(uploads.len(), 1);
        assert_eq!(uploads[0].0, module.as_bytes());
        assert!(
            uploads[0].1.starts_with("admin upload from 127.0.0.1:"),
            "{}",
            uploads[0].1
        );
    }

    #[tokio::test]
    async fn refused_uploads_carry_the_reason_code() {
        let node = start(Some("refuse")).await;
        let target = client::Target::data_dir(node.dir.path()).unwrap();
        let err = client::upload_module(&target, b"\0asm\x01\0\0\0".to_vec())
            .await
            .unwrap_err();
        match &err {
            AdminError::Refused {
                status: 422,
                reason: Some(reason),
                message,
            } => {
                assert_eq!(reason, "not-a-component");
                assert!(message.contains("componentize"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_non_loopback_bind_needs_admin_public() {
        let dir = tempfile::tempdir().unwrap();
        let err = bind("0.0.0.0:0".parse().unwrap(), dir.path(), false)
            .await
            .unwrap_err();
        assert!(matches!(err, AdminError::PublicBind { .. }), "{err:?}");
        assert!(err.to_string().contains("--admin-public"), "{err}");
        assert!(!dir.path().join(super::super::token::TOKEN_FILE).exists());
        let (listener, _) = bind("0.0.0.0:0".parse().unwrap(), dir.path(), true)
            .await
            .unwrap();
        assert!(listener.local_addr().unwrap().ip().is_unspecified());
    }

    /// A client that opens connections and sends nothing must not lock others out, even with
    /// timeouts far longer than the test.
    #[tokio::test]
    async fn idle_connections_of_one_client_cannot_lock_the_api() {
        let config = ServerConfig {
            io_timeout: Duration::from_secs(3600),
            max_connections: 4,
            max_idle_per_client: 2,
            ..ServerConfig::default()
        };
        let node = start_with(None, config).await;
        let mut idle = Vec::new();
        for _ in 0..8 {
            idle.push(TcpStream::connect(node.addr).await.unwrap());
        }
        let status = timeout(Duration::from_secs(60), client::status(node.dir.path()))
            .await
            .expect("the API stayed locked by idle connections")
            .unwrap();
        assert_eq!(status, json!({"height": 7}));
        // The oldest idle connection was closed by the server.
        let mut byte = [0u8; 1];
        let read = timeout(Duration::from_secs(60), idle[0].read(&mut byte))
            .await
            .expect("the oldest idle connection was left open");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    }

    #[tokio::test]
    async fn shutdown_makes_serve_return() {
        let node = start(None).await;
        node.stop.send(true).unwrap();
        timeout(Duration::from_secs(5), node.task)
            .await
            .unwrap()
            .unwrap();
        assert!(TcpStream::connect(node.addr).await.is_err());
    }
}
