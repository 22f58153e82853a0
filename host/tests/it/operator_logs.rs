//! What an operator meets running `modnode run`: a periodic status line, no claim that production
//! may start on a node told not to produce, and SIGTERM honoured while a checkpoint restore waits.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::cli::{KillOnDrop, stderr_lines};

#[test]
fn run_logs_a_status_line_and_a_non_producer_never_says_production_may_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    let child = Command::new(env!("CARGO_BIN_EXE_modnode"))
        .args([
            "run",
            "--data-dir",
            data.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--dev-contract-listen",
            "127.0.0.1:0",
            "--no-produce",
            "--status-every",
            "1",
        ])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let stderr = child.0.stderr.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut log = String::new();
    let mut started_up = false;
    let mut status_lines = Vec::new();
    // Two status lines after start-up: periodic, not a one-off.
    while !(started_up && status_lines.len() >= 2) {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no start-up and status lines in time:\n{log}"));
        started_up |= line.contains("tried the known peers and synced from them");
        if started_up && line.contains(" status ") {
            status_lines.push(line.clone());
        }
        log.push_str(&line);
        log.push('\n');
    }
    assert!(!log.contains("production may start"), "{log}");
    assert!(log.contains("this node does not produce"), "{log}");
    for field in ["height=", "finalized=", "peers=", "lag_slots=", "syncing="] {
        assert!(
            status_lines.iter().all(|l| l.contains(field)),
            "{field} missing from {status_lines:?}"
        );
    }
}

#[test]
fn sigterm_stops_run_while_a_checkpoint_restore_waits_for_peers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    // A bootstrap peer nobody answers for: the restore waits for it, retrying.
    let nobody = format!("{}@127.0.0.1:1", "ab".repeat(32));
    let child = Command::new(env!("CARGO_BIN_EXE_modnode"))
        .args([
            "run",
            "--data-dir",
            data.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--dev-contract-listen",
            "127.0.0.1:0",
            "--sync",
            "checkpoint",
            "--bootstrap",
            &nobody,
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let stderr = child.0.stderr.take().unwrap();
    let (lines, reader) = stderr_lines(stderr);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut log = String::new();
    while !log.contains("checkpoint restore waits") {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("the restore never waited:\n{log}"));
        log.push_str(&line);
        log.push('\n');
    }
    // The operator can watch the restore: health, status and metrics answer while it runs,
    // every chain or module operation says why not yet and when to retry.
    admin_answers_while_starting(&data);
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    // Stopped within a bound, not after systemd's escalation to SIGKILL.
    let stop_by = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < stop_by,
            "still running 20 s after SIGTERM during the restore:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    reader.join().unwrap();
    log.extend(lines.try_iter().map(|l| l + "\n"));
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        log.contains("stopping before the node finished starting"),
        "{log}"
    );
    assert!(log.contains("stopped cleanly"), "{log}");
}

/// `GET path` with the node's token: status code, head (lower case) and body.
async fn authorized_get(data: &std::path::Path, path: &str) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr = modnode::admin::read_admin_addr(data).unwrap();
    let token = modnode::admin::AdminToken::load(data).unwrap().to_hex();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: modnode\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    (code, head.to_ascii_lowercase(), body.to_string())
}

/// What the admin API answers on a node still restoring (checked on the running process).
fn admin_answers_while_starting(data: &std::path::Path) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let addr = modnode::admin::read_admin_addr(data).unwrap();
        let (code, body) = super::health::http_get(addr, "/livez").await;
        assert_eq!(code, 200, "alive while restoring: {body}");
        let (code, body) = super::health::http_get(addr, "/readyz").await;
        assert_eq!(code, 503, "not ready while restoring: {body}");
        assert!(
            body.contains("starting") || body.contains("restoring"),
            "{body}"
        );
        let (code, body) = super::health::http_get(addr, "/metrics").await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("restore_chunks_total"), "{body}");
        assert!(body.trim_end().ends_with("# EOF"), "{body}");
        let (code, _, body) = authorized_get(data, "/status").await;
        assert_eq!(code, 200, "{body}");
        let status: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(status["starting"].is_string(), "{status}");
        assert!(status["checkpoint_restore"]["done"] == false, "{status}");
        // No chain yet: no height rather than height 0.
        assert!(status.get("height").is_none(), "{status}");
        for path in [
            "/modules",
            "/blocks?from=1&count=1",
            "/state",
            "/checkpoints",
        ] {
            let (code, head, body) = authorized_get(data, path).await;
            assert_eq!(code, 503, "{path} while restoring: {body}");
            assert!(head.contains("retry-after: 5"), "{path}: {head}");
            assert!(body.contains("starting"), "{path}: {body}");
        }
        // The token is still checked first.
        let (code, _) = super::health::http_get(addr, "/modules").await;
        assert_eq!(code, 401);
    });
}
