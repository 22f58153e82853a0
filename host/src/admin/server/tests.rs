//! The admin server over real sockets: limits, refusals, and the operator getting through
//! hostile clients.

use std::sync::Mutex;

use serde_json::{Value, json};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

use super::*;
use crate::admin::{BoxFuture, client};
use crate::http_server::MAX_HEAD;
use crate::modules_store::ModuleRecord;
use crate::modules_store::upload::{UploadError, UploadOutcome};

#[derive(Default)]
struct FakeNode {
    uploads: Mutex<Vec<(Vec<u8>, String)>>,
    refusal: Option<&'static str>,
}

fn stored(bytes: &[u8]) -> ModuleRecord {
    ModuleRecord {
        sha256: crate::hashes::ModuleHash(<sha2::Sha256 as sha2::Digest>::digest(bytes).into()),
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
        "modnode_height 7\n# EOF\n".into()
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
    fn latest_checkpoint(
        &self,
    ) -> BoxFuture<'_, Result<Option<crate::admin::StoredCheckpoint>, String>> {
        Box::pin(async move {
            Ok(Some(crate::admin::StoredCheckpoint {
                height: 12,
                id: [0xab; 32],
                manifest: vec![1, 2, 3],
            }))
        })
    }
    fn checkpoint_chunk(
        &self,
        id: [u8; 32],
        index: u32,
    ) -> BoxFuture<'_, Result<Option<Vec<u8>>, String>> {
        Box::pin(async move {
            Ok(match (id == [0xab; 32], index) {
                (true, 0) => Some(vec![0xca, 0xfe]),
                (true, 1) => Some(vec![
                    0;
                    crate::admin::checkpoint_query::MAX_ANSWER_BYTES + 1
                ]),
                _ => None,
            })
        })
    }
    fn module_op(
        &self,
        op: crate::admin::ModuleOp,
    ) -> BoxFuture<'_, Result<Value, crate::admin::ModuleOpError>> {
        Box::pin(async move {
            // An operation takes a moment on a real node (a swap, a store write).
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok(json!({"done": format!("{op:?}")}))
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
            && text.contains("\r\n\r\nmodnode_height 7\n")
            && text.contains("\nmodnode_admin_connections_evicted_total 0\n")
            && text.ends_with("# EOF\n"),
        "{text}"
    );
}

#[tokio::test]
async fn checkpoints_are_served_with_the_token_bounded_and_named() {
    let node = start(None).await;
    let get = |path: &str, auth: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n");
    let id = "ab".repeat(32);
    let chunk = |index: u32| format!("/checkpoints/chunk?id={id}&index={index}");
    for path in ["/checkpoints/latest".to_string(), chunk(0)] {
        let (status, text) = raw(node.addr, get(&path, "").as_bytes()).await;
        assert_eq!(status, 401, "{path}: {text}");
    }
    let (status, text) = raw(node.addr, get("/checkpoints/latest", &node.auth).as_bytes()).await;
    assert!(
        status == 200
            && text.ends_with(&format!(
                r#"{{"height":12,"id":"{id}","manifest":"010203"}}"#
            )),
        "{text}"
    );
    let (status, text) = raw(node.addr, get(&chunk(0), &node.auth).as_bytes()).await;
    assert!(
        status == 200 && text.ends_with(&format!(r#"{{"bytes":"cafe","id":"{id}","index":0}}"#)),
        "{text}"
    );
    let (status, text) = raw(node.addr, get(&chunk(1), &node.auth).as_bytes()).await;
    assert!(status == 413 && text.contains("chunk 1"), "{text}");
    let (status, text) = raw(node.addr, get(&chunk(2), &node.auth).as_bytes()).await;
    assert!(status == 404 && text.contains("no chunk 2"), "{text}");
    let (status, text) = raw(
        node.addr,
        get("/checkpoints/chunk?index=0", &node.auth).as_bytes(),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    let (status, _) = raw(node.addr, &post("/checkpoints/latest", &node.auth, "")).await;
    assert_eq!(status, 405);
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

/// A hostile client on loopback: until `stop`, connects from `from`, sends `head`, then
/// one byte a second, and connects again whenever the server closes the connection.
/// `connected` counts its connections.
fn slowloris(
    addr: SocketAddr,
    from: IpAddr,
    head: &'static [u8],
    connected: Arc<AtomicU64>,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !*stop.borrow() {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::new(from, 0)).unwrap();
            let Ok(mut stream) = socket.connect(addr).await else {
                continue;
            };
            connected.fetch_add(1, Ordering::Relaxed);
            if stream.write_all(head).await.is_err() {
                continue;
            }
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {
                        if stream.write_all(b"a").await.is_err() {
                            break;
                        }
                    }
                }
            }
        }
    })
}

/// Polls `condition` every 20 ms until it holds; panics after `within`.
async fn wait_until(within: Duration, what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The operator's authenticated `GET /status`, three times in a row while `node` is under
/// attack: each must be answered within `bound`.
async fn operator_gets_through(node: &Node, bound: Duration) {
    for attempt in 0..3 {
        let started = Instant::now();
        let answer = timeout(Duration::from_secs(60), client::status(node.dir.path()))
            .await
            .unwrap_or_else(|_| panic!("attempt {attempt}: no answer within 60 s"))
            .unwrap();
        assert_eq!(answer, json!({"height": 7}));
        let took = started.elapsed();
        assert!(
            took <= bound,
            "attempt {attempt}: the operator's GET /status took {took:?} (bound {bound:?})"
        );
    }
}

/// 200 unauthenticated clients trickle a body at 1 byte/s: each is refused at once and
/// cannot hold a connection, so the operator's requests are answered at once. (Before:
/// refused bodies were drained until the 10 s I/O timeout and the operator waited 10 s+.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_clients_trickling_bodies_do_not_lock_the_operator_out() {
    let node = start_with(None, ServerConfig::default()).await;
    let (stop, stopped) = watch::channel(false);
    let connected = Arc::new(AtomicU64::new(0));
    let head: &'static [u8] =
        b"POST /modules HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n";
    let attackers: Vec<_> = (0..200)
        .map(|_| {
            let from = IpAddr::from([127, 0, 0, 1]);
            slowloris(node.addr, from, head, connected.clone(), stopped.clone())
        })
        .collect();
    wait_until(Duration::from_secs(30), "200 clients connected", || {
        connected.load(Ordering::Relaxed) >= 200
    })
    .await;
    operator_gets_through(&node, Duration::from_secs(2)).await;
    // A refused body is not read: the client sees its connection closed at once.
    let mut stream = TcpStream::connect(node.addr).await.unwrap();
    stream.write_all(head).await.unwrap();
    let mut answer = Vec::new();
    timeout(Duration::from_secs(5), stream.read_to_end(&mut answer))
        .await
        .expect("the refused connection was kept open")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    stop.send(true).unwrap();
    for attacker in attackers {
        attacker.await.unwrap();
    }
}

/// Half-sent request heads from 40 loopback addresses (5 connections each, more than the
/// connection cap) are evicted, the slowest first, to let the operator in; the evictions
/// are counted in `/metrics`. (Before: the idle cap was per address and the connection cap
/// global, so the operator waited for the 10 s head timeout.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_heads_from_many_addresses_do_not_lock_the_operator_out() {
    let node = start_with(None, ServerConfig::default()).await;
    let (stop, stopped) = watch::channel(false);
    let connected = Arc::new(AtomicU64::new(0));
    let mut attackers = Vec::new();
    for host in 2..42u8 {
        for _ in 0..5 {
            let from = IpAddr::from([127, 0, 0, host]);
            let head: &'static [u8] = b"GET /status HTTP/1.1\r\nHost: x\r\nX-Slow: ";
            attackers.push(slowloris(
                node.addr,
                from,
                head,
                connected.clone(),
                stopped.clone(),
            ));
        }
    }
    wait_until(Duration::from_secs(30), "200 clients connected", || {
        connected.load(Ordering::Relaxed) >= 200
    })
    .await;
    operator_gets_through(&node, Duration::from_secs(2)).await;
    // Without closing our write half (hyper may take that for the client going away).
    let mut stream = TcpStream::connect(node.addr).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut metrics = String::new();
    timeout(Duration::from_secs(10), stream.read_to_string(&mut metrics))
        .await
        .unwrap()
        .unwrap();
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    let evicted: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("modnode_admin_connections_evicted_total "))
        .unwrap_or_else(|| panic!("no eviction counter: {metrics}"))
        .parse()
        .unwrap();
    assert!(evicted >= 1, "{metrics}");
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
    stop.send(true).unwrap();
    for attacker in attackers {
        attacker.await.unwrap();
    }
}

/// 32 operator clients each sending activate and rollback requests at once: every one of
/// the 416 requests is answered. (Before: connections accepted a moment ago were aborted
/// before their head was parsed, and most requests got no answer.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_authenticated_operations_all_get_answers() {
    let node = start_with(None, ServerConfig::default()).await;
    let target = client::Target::data_dir(node.dir.path()).unwrap();
    let hash = "ab".repeat(32);
    let clients: Vec<_> = (0..32)
        .map(|_| {
            let (target, hash) = (target.clone(), hash.clone());
            tokio::spawn(async move {
                let mut failures = Vec::new();
                for i in 0..13 {
                    let answer = if i % 2 == 0 {
                        client::activate_module(&target, &hash, crate::runtime::Mode::Live).await
                    } else {
                        client::rollback_module(&target, crate::runtime::Kind::GossipPolicy).await
                    };
                    if let Err(e) = answer {
                        failures.push(e.to_string());
                    }
                }
                failures
            })
        })
        .collect();
    let mut failures = Vec::new();
    for c in clients {
        failures.extend(c.await.unwrap());
    }
    assert!(
        failures.is_empty(),
        "{} of 416 requests failed: {:?}",
        failures.len(),
        failures.first()
    );
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
