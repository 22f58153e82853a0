//! The admin API client: finds a running node through its data directory (`admin.addr` and
//! `admin.token`) and sends it one request per connection.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::http;
use super::token::{AdminToken, read_admin_addr};
use super::{AdminError, deposit_json};
use crate::chain::block::DepositData;

/// Time the node has to answer a request, connection included.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest accepted response.
const MAX_RESPONSE: u64 = 4 * 1024 * 1024;

/// The status of the node whose data directory is `data_dir`.
pub async fn status(data_dir: &Path) -> Result<Value, AdminError> {
    let (_, answer) = request(data_dir, "GET", "/status", None).await?;
    Ok(answer)
}

/// Submits `deposit` to the node whose data directory is `data_dir`; returns its id (hex).
pub async fn submit_deposit(data_dir: &Path, deposit: &DepositData) -> Result<String, AdminError> {
    let body = deposit_json::encode(deposit).to_string();
    let (addr, answer) = request(data_dir, "POST", "/deposits", Some(body)).await?;
    answer
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| AdminError::BadResponse {
            addr,
            reason: "no `id` in the answer to a deposit".into(),
        })
}

/// Sends one request; returns the node's address and its JSON answer.
async fn request(
    data_dir: &Path,
    method: &str,
    path: &str,
    body: Option<String>,
) -> Result<(SocketAddr, Value), AdminError> {
    let addr = read_admin_addr(data_dir)?;
    let token = AdminToken::load(data_dir)?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n",
        token.to_hex()
    );
    if let Some(body) = &body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
    } else {
        request.push_str("\r\n");
    }
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.map_err(|source| {
            if source.kind() == std::io::ErrorKind::ConnectionRefused {
                AdminError::NotRunning {
                    addr,
                    data_dir: data_dir.to_path_buf(),
                }
            } else {
                AdminError::Connection { addr, source }
            }
        })?;
        let io = |source| AdminError::Connection { addr, source };
        stream.write_all(request.as_bytes()).await.map_err(io)?;
        let mut response = Vec::new();
        stream
            .take(MAX_RESPONSE)
            .read_to_end(&mut response)
            .await
            .map_err(io)?;
        Ok(response)
    };
    let response = tokio::time::timeout(CLIENT_TIMEOUT, exchange)
        .await
        .map_err(|_| AdminError::Connection {
            addr,
            source: std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {CLIENT_TIMEOUT:?}"),
            ),
        })??;
    let bad = |reason: String| AdminError::BadResponse { addr, reason };
    let (status, body) = http::parse_response(&response).map_err(bad)?;
    let value: Option<Value> = serde_json::from_slice(body).ok();
    if !(200..300).contains(&status) {
        let message = value
            .as_ref()
            .and_then(|v| v.get("error"))
            .and_then(Value::as_str)
            .map_or_else(
                || String::from_utf8_lossy(body).chars().take(256).collect(),
                str::to_string,
            );
        return Err(AdminError::Refused { status, message });
    }
    let value = value.ok_or_else(|| bad("the answer is not JSON".into()))?;
    Ok((addr, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stopped_node_is_reported_as_not_running() {
        let dir = tempfile::tempdir().unwrap();
        let (listener, _) = super::super::server::bind("127.0.0.1:0".parse().unwrap(), dir.path())
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
}
