//! The admin API client (hyper): finds a running node through its data directory
//! (`admin.addr` and `admin.token`) or a `--node` URL and a token file, and sends it one
//! request per connection.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

use super::AdminError;
use super::token::{AdminToken, read_admin_addr};
use crate::runtime::{Kind, Mode};

/// Time the node has to answer a request, connection included. Uploads wait for the node to
/// compile and warm the module, so they get [`UPLOAD_TIMEOUT`].
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Time the node has to validate, compile and warm an uploaded module.
pub const UPLOAD_TIMEOUT: Duration = Duration::from_secs(180);
/// Longest accepted response.
const MAX_RESPONSE: usize = 4 * 1024 * 1024;

/// Which node to talk to, and with which token.
#[derive(Debug, Clone)]
pub struct Target {
    addr: SocketAddr,
    token: Option<AdminToken>,
    origin: String,
}

impl Target {
    /// The node running on `data_dir`: its address and token are read from there.
    pub fn data_dir(data_dir: &Path) -> Result<Self, AdminError> {
        Ok(Self {
            addr: read_admin_addr(data_dir)?,
            token: Some(AdminToken::load(data_dir)?),
            origin: format!("data directory {}", data_dir.display()),
        })
    }

    /// The node at `url` (`http://<ip>:<port>`, path ignored), with `token` (none: requests
    /// that need one are refused by the node).
    pub fn url(url: &str, token: Option<AdminToken>) -> Result<Self, AdminError> {
        let bad = |reason: &str| AdminError::BadUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("expected http://<ip>:<port> (the admin API speaks plain HTTP)"))?;
        let authority = rest.split('/').next().unwrap_or_default();
        let addr = authority
            .parse()
            .map_err(|_| bad("expected an IP address and a port, e.g. http://127.0.0.1:9401"))?;
        Ok(Self {
            addr,
            token,
            origin: format!("--node {url}"),
        })
    }

    /// The node's admin address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The status of the node whose data directory is `data_dir`.
pub async fn status(data_dir: &Path) -> Result<Value, AdminError> {
    let target = Target::data_dir(data_dir)?;
    request(&target, "GET", "/status", None, CLIENT_TIMEOUT).await
}

/// The status of the node `target` names (`GET /status`).
pub async fn node_status(target: &Target) -> Result<Value, AdminError> {
    request(target, "GET", "/status", None, CLIENT_TIMEOUT).await
}

/// Height, hash, slot and state root of the canonical blocks from `from`, at most `count`
/// (`GET /blocks`; see [`super::blocks_query`]).
pub async fn blocks(target: &Target, from: u64, count: u64) -> Result<Value, AdminError> {
    let path = format!("/blocks?from={from}&count={count}");
    request(target, "GET", &path, None, CLIENT_TIMEOUT).await
}

/// The canonical blocks from `from`, at most `count` (at most
/// [`MAX_RAW_BLOCKS`](super::blocks_query::MAX_RAW_BLOCKS)), each with its canonical
/// encoding (`GET /blocks?raw=1`).
pub async fn raw_blocks(target: &Target, from: u64, count: u64) -> Result<Value, AdminError> {
    let path = format!("/blocks?from={from}&count={count}&raw=1");
    request(target, "GET", &path, None, CLIENT_TIMEOUT).await
}

/// Uploads a module; returns the node's answer (`{"status": "ready" | "already-stored",
/// "module": {…}}`) once the module is compiled and warmed.
pub async fn upload_module(target: &Target, bytes: Vec<u8>) -> Result<Value, AdminError> {
    request(
        target,
        "POST",
        "/modules",
        Some((bytes, "application/wasm")),
        UPLOAD_TIMEOUT,
    )
    .await
}

/// The node's modules (`GET /modules`).
pub async fn modules(target: &Target) -> Result<Value, AdminError> {
    request(target, "GET", "/modules", None, CLIENT_TIMEOUT).await
}

/// The state at a height (`GET /state?<query>`, e.g. `height=5&index=3`; see
/// [`super::state_query`]).
pub async fn state(target: &Target, query: &str) -> Result<Value, AdminError> {
    let path = if query.is_empty() {
        "/state".to_string()
    } else {
        format!("/state?{query}")
    };
    request(target, "GET", &path, None, CLIENT_TIMEOUT).await
}

/// Creates a checkpoint now (`POST /checkpoints`); returns its summary once stored.
pub async fn create_checkpoint(target: &Target) -> Result<Value, AdminError> {
    request(target, "POST", "/checkpoints", None, UPLOAD_TIMEOUT).await
}

/// The node's stored checkpoints (`GET /checkpoints`).
pub async fn checkpoints(target: &Target) -> Result<Value, AdminError> {
    request(target, "GET", "/checkpoints", None, CLIENT_TIMEOUT).await
}

/// The node's newest stored checkpoint (`GET /checkpoints/latest`: `{"height", "id",
/// "manifest"}`, hex); refused with 404 when it has none.
pub async fn latest_checkpoint(target: &Target) -> Result<Value, AdminError> {
    request(target, "GET", "/checkpoints/latest", None, CLIENT_TIMEOUT).await
}

/// Chunk `index` of the node's stored checkpoint `id` (hex) (`GET /checkpoints/chunk`:
/// `{"bytes", "id", "index"}`, hex).
pub async fn checkpoint_chunk(
    target: &Target,
    id: &str,
    index: usize,
) -> Result<Value, AdminError> {
    let path = format!("/checkpoints/chunk?id={id}&index={index}");
    request(target, "GET", &path, None, CLIENT_TIMEOUT).await
}

/// Asks the node to vote for upgrading `kind` to module `sha256` (hex) at `activate_at`, or
/// with `action` `"cancel"` for revoking that scheduled upgrade (`POST /modules/propose`).
pub async fn propose_upgrade(
    target: &Target,
    action: &str,
    kind: &str,
    sha256: &str,
    activate_at: u64,
) -> Result<Value, AdminError> {
    let body = serde_json::json!({
        "action": action,
        "kind": kind,
        "sha256": sha256,
        "activate_at": activate_at,
    });
    post_json(target, "/modules/propose", &body).await
}

/// Puts the ready module `hash` (64 hex digits) into service as `mode`; returns the kind's
/// slot status.
pub async fn activate_module(target: &Target, hash: &str, mode: Mode) -> Result<Value, AdminError> {
    let body = match mode {
        Mode::Live => serde_json::json!({"hash": hash, "mode": "live"}),
        Mode::Shadow => serde_json::json!({"hash": hash, "mode": "shadow"}),
        Mode::Canary(percent) => {
            serde_json::json!({"hash": hash, "mode": "canary", "percent": percent})
        }
    };
    post_json(target, "/modules/activate", &body).await
}

/// Rolls `kind` back to its previous version; returns the kind's slot status.
pub async fn rollback_module(target: &Target, kind: Kind) -> Result<Value, AdminError> {
    let body = serde_json::json!({"kind": kind.to_string()});
    post_json(target, "/modules/rollback", &body).await
}

/// Stops `kind`'s shadow or canary; returns the kind's slot status.
pub async fn cancel_candidate(target: &Target, kind: Kind) -> Result<Value, AdminError> {
    let body = serde_json::json!({"kind": kind.to_string()});
    post_json(target, "/modules/cancel", &body).await
}

async fn post_json(target: &Target, path: &str, body: &Value) -> Result<Value, AdminError> {
    let bytes = body.to_string().into_bytes();
    request(
        target,
        "POST",
        path,
        Some((bytes, "application/json")),
        UPLOAD_TIMEOUT,
    )
    .await
}

/// Sends one request; returns the node's JSON answer.
async fn request(
    target: &Target,
    method: &str,
    path: &str,
    body: Option<(Vec<u8>, &'static str)>,
    limit: Duration,
) -> Result<Value, AdminError> {
    let addr = target.addr;
    let io = |e: &dyn std::fmt::Display| AdminError::Connection {
        addr,
        source: std::io::Error::other(e.to_string()),
    };
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, addr.to_string())
        .header(hyper::header::CONNECTION, "close");
    if let Some(token) = &target.token {
        builder = builder.header(
            hyper::header::AUTHORIZATION,
            format!("Bearer {}", token.to_hex()),
        );
    }
    let request = match body {
        Some((bytes, content_type)) => builder
            .header(hyper::header::CONTENT_TYPE, content_type)
            .header(hyper::header::CONTENT_LENGTH, bytes.len())
            .body(Full::new(Bytes::from(bytes))),
        None => builder.body(Full::new(Bytes::new())),
    }
    .map_err(|e| io(&e))?;
    let exchange = async {
        let stream = TcpStream::connect(addr).await.map_err(|source| {
            if source.kind() == std::io::ErrorKind::ConnectionRefused {
                AdminError::NotRunning {
                    addr,
                    origin: target.origin.clone(),
                }
            } else {
                AdminError::Connection { addr, source }
            }
        })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| io(&e))?;
        let driver = tokio::spawn(connection);
        let response = sender.send_request(request).await.map_err(|e| io(&e))?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| io(&e))?
            .to_bytes();
        driver.abort();
        Ok::<_, AdminError>((status, body))
    };
    let (status, body) =
        tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| AdminError::Connection {
                addr,
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {limit:?}"),
                ),
            })??;
    let value: Option<Value> = serde_json::from_slice(&body).ok();
    if !(200..300).contains(&status) {
        let field = |name: &str| {
            value
                .as_ref()
                .and_then(|v| v.get(name))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let message = field("error")
            .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(256).collect());
        return Err(AdminError::Refused {
            status,
            message,
            reason: field("reason"),
        });
    }
    value.ok_or_else(|| AdminError::BadResponse {
        addr,
        reason: "the answer is not JSON".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stopped_node_is_reported_as_not_running() {
        let dir = tempfile::tempdir().unwrap();
        let (listener, _) =
            super::super::server::bind("127.0.0.1:0".parse().unwrap(), dir.path(), false)
                .await
                .unwrap();
        drop(listener);
        let err = status(dir.path()).await.unwrap_err();
        assert!(matches!(err, AdminError::NotRunning { .. }), "{err:?}");
        assert!(
            err.to_string().contains(&dir.path().display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn node_urls_are_parsed_strictly() {
        let target = Target::url("http://127.0.0.1:9401/", None).unwrap();
        assert_eq!(target.addr(), "127.0.0.1:9401".parse().unwrap());
        for bad in [
            "127.0.0.1:9401",
            "https://127.0.0.1:9401",
            "http://localhost:9401",
        ] {
            let err = Target::url(bad, None).unwrap_err();
            assert!(matches!(err, AdminError::BadUrl { .. }), "{bad}: {err:?}");
            assert!(err.to_string().contains(bad), "{err}");
        }
    }
}
