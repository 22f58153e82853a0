//! `/livez` and `/readyz` on real nodes over loopback: readiness follows the node falling
//! behind the slot clock and catching up again, with the reason in the body while it fails;
//! `/metrics` says the same (`modnode_ready`, `modnode_head_lag_slots`).

use std::net::SocketAddr;
use std::path::Path;

use tempfile::TempDir;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::network::{LIVENESS, dirs, genesis, hosting, start, start_with};

/// Polls the async `check` until it holds; panics with `what` after [`LIVENESS`].
pub(super) async fn eventually_async<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + LIVENESS;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `GET path` on `addr` without a token: the status code and the body.
pub(super) async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: modnode\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

/// The payload of a chunked HTTP/1.1 body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// The value of the unlabelled sample `name` in a `/metrics` text.
pub(super) fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse().ok())?
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_while_a_node_falls_behind_and_recovers_when_it_catches_up() {
    let tmp: Vec<TempDir> = dirs(2);
    let paths: Vec<&Path> = tmp.iter().map(TempDir::path).collect();
    // Node 0 is the only authority; node 1 only follows it.
    let genesis = genesis("modnode-it-readyz", &paths, 1);
    let authority = start_with(paths[0], &genesis, vec![], hosting()).await;
    let follower = start(paths[1], &genesis, vec![authority.peer_addr().unwrap()]).await;
    let admin = follower.admin_addr().unwrap();

    // Liveness needs no token and holds throughout.
    assert_eq!(http_get(admin, "/livez").await.0, 200);
    eventually_async("the follower ready", || async {
        http_get(admin, "/readyz").await.0 == 200
    })
    .await;
    let (_, body) = http_get(admin, "/readyz").await;
    assert!(body.contains(r#""status":"ok""#), "{body}");
    // The authority follows its hosted dev contract, which answers: ready too.
    let authority_admin = authority.admin_addr().unwrap();
    eventually_async("the authority ready", || async {
        http_get(authority_admin, "/readyz").await.0 == 200
    })
    .await;

    // Nobody produces any more: the follower's head falls behind the slot clock.
    authority.shutdown().await;
    eventually_async("the follower not ready, behind the clock", || async {
        let (status, body) = http_get(admin, "/readyz").await;
        status == 503 && body.contains("behind the clock")
    })
    .await;
    let (_, body) = http_get(admin, "/readyz").await;
    assert!(body.contains(r#""status":"failing""#), "{body}");
    assert_eq!(http_get(admin, "/livez").await.0, 200);
    let (_, metrics) = http_get(admin, "/metrics").await;
    assert_eq!(sample(&metrics, "modnode_ready"), Some(0.0), "{metrics}");
    assert!(
        sample(&metrics, "modnode_head_lag_slots").unwrap() > 8.0,
        "{metrics}"
    );

    // The authority comes back (same key and chain) and finds the follower: blocks flow
    // again and the follower is ready again.
    let authority = start_with(
        paths[0],
        &genesis,
        vec![follower.peer_addr().unwrap()],
        hosting(),
    )
    .await;
    eventually_async("the follower ready again", || async {
        http_get(admin, "/readyz").await.0 == 200
    })
    .await;
    let (_, metrics) = http_get(admin, "/metrics").await;
    assert_eq!(sample(&metrics, "modnode_ready"), Some(1.0), "{metrics}");
    authority.shutdown().await;
    follower.shutdown().await;
}
