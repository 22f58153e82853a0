//! The admin HTTP server: [`bind`] to set it up, [`serve`] to run it.
//!
//! Each connection carries one request and is bounded in time ([`IO_TIMEOUT`] to receive the
//! request, the same to send the answer) and in size (16 KiB of head, 64 KiB of body);
//! at most [`MAX_CONNECTIONS`] are served at once, further clients wait in the listen backlog.
//! The token is checked before a body is read, so an unauthenticated client cannot make the
//! server buffer anything beyond the head.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout, timeout_at};

use super::http::{self, Head, Response};
use super::token::{AdminToken, write_admin_addr};
use super::{AdminBackend, AdminError, deposit_json};

/// Time a client has to send its whole request, and then to take the whole answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Time the backend has to accept or refuse a deposit.
pub const BACKEND_TIMEOUT: Duration = Duration::from_secs(20);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// Content type of `/metrics` (Prometheus text exposition format).
const METRICS_TYPE: &str = "text/plain; version=0.0.4";

/// Binds the admin API on `addr`, creates or loads `<data_dir>/admin.token` and records the
/// bound address in `<data_dir>/admin.addr`. Pass the result to [`serve`].
pub async fn bind(
    addr: SocketAddr,
    data_dir: &Path,
) -> Result<(TcpListener, AdminToken), AdminError> {
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
    mut shutdown: watch::Receiver<bool>,
) {
    let token = Arc::new(token);
    let mut connections = JoinSet::new();
    while !*shutdown.borrow_and_update() {
        tokio::select! {
            changed = shutdown.changed() => if changed.is_err() { break },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept(), if connections.len() < MAX_CONNECTIONS => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection(stream, token.clone(), backend.clone()));
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

async fn connection(mut stream: TcpStream, token: Arc<AdminToken>, backend: Arc<dyn AdminBackend>) {
    let (Ok(response) | Err(response)) = respond(&mut stream, &token, &*backend).await;
    let _ = timeout(IO_TIMEOUT, async {
        stream.write_all(&response.to_bytes()).await?;
        stream.shutdown().await?;
        // Drain what the client still sends (e.g. a refused body): closing a socket with
        // unread data resets it, and the client might lose the answer.
        let mut sink = [0u8; 4096];
        let mut left = 2 * http::MAX_BODY;
        while left > 0 {
            let n = stream.read(&mut sink).await?;
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
        std::io::Result::Ok(())
    })
    .await;
}

enum Route {
    Status,
    Metrics,
    Deposits,
}

/// Reads one request and produces the answer; `Err` is an early refusal.
async fn respond(
    stream: &mut TcpStream,
    token: &AdminToken,
    backend: &dyn AdminBackend,
) -> Result<Response, Response> {
    let deadline = Instant::now() + IO_TIMEOUT;
    let too_slow = |_| Response::error(408, format!("request not received within {IO_TIMEOUT:?}"));
    let mut head = Vec::with_capacity(1024);
    let end = timeout_at(deadline, read_head(stream, &mut head))
        .await
        .map_err(too_slow)??;
    let rest = head.get(end..).map(<[u8]>::to_vec).unwrap_or_default();
    head.truncate(end);
    let head = Head::parse(&head).map_err(bad)?;
    let route = match head.request_line().map_err(bad)? {
        ("GET", "/status") => Route::Status,
        ("GET", "/metrics") => Route::Metrics,
        ("POST", "/deposits") => Route::Deposits,
        (_, "/status" | "/metrics") => return Err(not_allowed("GET")),
        (_, "/deposits") => return Err(not_allowed("POST")),
        (_, path) => {
            return Err(Response::error(
                404,
                format!("no such path {:?}", http::truncate(path)),
            ));
        }
    };
    if !matches!(route, Route::Metrics) {
        authorize(&head, token)?;
    }
    let deposit = match route {
        Route::Status => return Ok(Response::json(200, &backend.status())),
        Route::Metrics => {
            let metrics = backend.metrics().into_bytes();
            return Ok(Response::new(200, METRICS_TYPE, metrics));
        }
        Route::Deposits => {
            let body = timeout_at(deadline, read_body(stream, &head, rest)).await;
            deposit_json::decode(&body.map_err(too_slow)??).map_err(|e| bad(e.to_string()))?
        }
    };
    match timeout(BACKEND_TIMEOUT, backend.submit_deposit(deposit)).await {
        Ok(Ok(id)) => Ok(Response::json(
            200,
            &serde_json::json!({"accepted": true, "id": id}),
        )),
        Ok(Err(reason)) => Err(bad(reason)),
        Err(_) => Err(Response::error(
            503,
            "the node did not take the deposit in time",
        )),
    }
}

fn bad(message: impl Into<String>) -> Response {
    Response::error(400, message)
}

fn not_allowed(allow: &'static str) -> Response {
    Response::error(405, format!("method not allowed; use {allow}")).with_header("Allow", allow)
}

fn authorize(head: &Head, token: &AdminToken) -> Result<(), Response> {
    let presented = head
        .get("authorization")
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim());
    let message = match presented {
        Some(t) if token.matches(t) => return Ok(()),
        Some(_) => "wrong admin token",
        None => {
            "missing `Authorization: Bearer <token>`; the token is in the node's data directory, file admin.token"
        }
    };
    Err(Response::error(401, message).with_header("WWW-Authenticate", "Bearer"))
}

/// Reads until the head is complete; returns the offset just past it.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<usize, Response> {
    let mut chunk = [0u8; 4096];
    loop {
        match http::head_end(buf) {
            Some(end) if end <= http::MAX_HEAD => return Ok(end),
            _ if buf.len() >= http::MAX_HEAD => {
                let message = format!("request head exceeds {} bytes", http::MAX_HEAD);
                return Err(Response::error(431, message));
            }
            _ => {}
        }
        match stream.read(&mut chunk).await {
            Ok(0) => return Err(bad("connection closed before the request head ended")),
            Ok(n) => buf.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            Err(e) => return Err(bad(e.to_string())),
        }
    }
}

/// Reads the body announced by `Content-Length`, `body` holding the bytes read past the head.
async fn read_body(
    stream: &mut TcpStream,
    head: &Head,
    mut body: Vec<u8>,
) -> Result<Vec<u8>, Response> {
    let length_required = |m: &str| Response::error(411, m);
    if head.get("transfer-encoding").is_some() {
        return Err(length_required(
            "Transfer-Encoding is not supported; send Content-Length",
        ));
    }
    let len = head.content_length().map_err(bad)?;
    let len = len.ok_or_else(|| length_required("POST needs a Content-Length header"))?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= http::MAX_BODY)
        .ok_or_else(|| {
            Response::error(
                413,
                format!("body of {len} bytes exceeds {} bytes", http::MAX_BODY),
            )
        })?;
    let missing = len
        .checked_sub(body.len())
        .ok_or_else(|| bad("body longer than Content-Length"))?;
    let read = stream.take(missing as u64).read_to_end(&mut body).await;
    read.map_err(|e| bad(e.to_string()))?;
    if body.len() != len {
        return Err(bad(format!(
            "body ended after {} of {len} bytes",
            body.len()
        )));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};

    use super::*;
    use crate::admin::{BoxFuture, client};
    use crate::chain::block::DepositData;

    #[derive(Default)]
    struct FakeNode {
        deposits: Mutex<Vec<DepositData>>,
        refusal: Option<&'static str>,
    }

    impl AdminBackend for FakeNode {
        fn status(&self) -> Value {
            json!({"height": 7})
        }
        fn metrics(&self) -> String {
            "modnode_height 7\n".into()
        }
        fn submit_deposit(&self, deposit: DepositData) -> BoxFuture<'_, Result<String, String>> {
            Box::pin(async move {
                if let Some(reason) = self.refusal {
                    return Err(reason.into());
                }
                self.deposits.lock().unwrap().push(deposit);
                Ok("ab".repeat(16))
            })
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

    async fn start(refusal: Option<&'static str>) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let (listener, token) = bind("127.0.0.1:0".parse().unwrap(), dir.path())
            .await
            .unwrap();
        let backend = Arc::new(FakeNode {
            refusal,
            ..FakeNode::default()
        });
        let (stop, stopped) = watch::channel(false);
        let addr = listener.local_addr().unwrap();
        let auth = format!("Authorization: Bearer {}\r\n", token.to_hex());
        let task = tokio::spawn(serve(listener, token, backend.clone(), stopped));
        Node {
            dir,
            addr,
            auth,
            backend,
            stop,
            task,
        }
    }

    /// Sends `request` verbatim; returns the status and the whole response as text.
    async fn raw(addr: SocketAddr, request: &[u8]) -> (u16, String) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        stream.shutdown().await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        let (status, _) = http::parse_response(&response).unwrap();
        let text = String::from_utf8(response).unwrap();
        assert!(text.contains("\r\nConnection: close\r\n"), "{text}");
        (status, text)
    }

    fn post(auth: &str, body: &str) -> Vec<u8> {
        let len = body.len();
        format!("POST /deposits HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {len}\r\n\r\n{body}")
            .into_bytes()
    }

    fn deposit() -> DepositData {
        DepositData {
            pubkey: std::array::from_fn(|i| i as u8),
            withdrawal_credentials: [0xaa; 32],
            amount: 32_000_000_000,
            signature: std::array::from_fn(|i| (i * 7) as u8),
        }
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
        assert_eq!(raw(node.addr, wrong.as_bytes()).await.0, 401);
        let (status, text) = raw(node.addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(status, 200);
        assert!(
            text.contains("text/plain; version=0.0.4")
                && text.ends_with("\r\n\r\nmodnode_height 7\n")
        );
    }

    #[tokio::test]
    async fn deposit_reaches_the_backend_byte_for_byte() {
        let node = start(None).await;
        let id = client::submit_deposit(node.dir.path(), &deposit())
            .await
            .unwrap();
        assert_eq!(id, "ab".repeat(16));
        assert_eq!(*node.backend.deposits.lock().unwrap(), vec![deposit()]);
    }

    #[tokio::test]
    async fn bad_fields_are_400_naming_the_field() {
        let node = start(None).await;
        let good = deposit_json::encode(&deposit()).to_string();
        for (body, expected) in [
            (
                good.replacen("0x00", "0xg0", 1),
                "field `pubkey`: invalid hex",
            ),
            (
                good.replacen("0xaaaa", "0xaa", 1),
                "field `withdrawal_credentials`: expected 32 bytes",
            ),
        ] {
            let (status, text) = raw(node.addr, &post(&node.auth, &body)).await;
            assert!(
                status == 400 && text.contains(expected),
                "{expected}: {text}"
            );
        }
        assert!(node.backend.deposits.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn backend_refusal_reaches_the_client() {
        let node = start(Some("pubkey already deposited")).await;
        let err = client::submit_deposit(node.dir.path(), &deposit())
            .await
            .unwrap_err();
        assert!(
            matches!(err, AdminError::Refused { status: 400, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("pubkey already deposited"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn malformed_and_oversized_requests_are_refused() {
        let node = start(None).await;
        let auth = &node.auth;
        let cases = [
            (b"\x00\xffgarbage\r\n\r\n".to_vec(), 400, "not allowed"),
            (
                b"GET /status\r\nHost: x\r\n\r\n".to_vec(),
                400,
                "malformed request line",
            ),
            (
                b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
                404,
                "/nowhere",
            ),
            (
                b"PUT /status HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
                405,
                "\r\nAllow: GET\r\n",
            ),
            (
                format!(
                    "GET / HTTP/1.1\r\nX: {}\r\n\r\n",
                    "a".repeat(http::MAX_HEAD)
                )
                .into_bytes(),
                431,
                "16384",
            ),
            (
                format!("POST /deposits HTTP/1.1\r\nHost: x\r\n{auth}\r\n").into_bytes(),
                411,
                "Content-Length",
            ),
            (post(auth, &"x".repeat(70_000)), 413, "70000"),
        ];
        for (request, expected_status, expected_text) in cases {
            let (status, text) = raw(node.addr, &request).await;
            assert!(
                status == expected_status && text.contains(expected_text),
                "{text}"
            );
        }
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
