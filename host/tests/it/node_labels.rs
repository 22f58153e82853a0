//! Several nodes in one process (`modnode devnet`) label every log line with the node that
//! emitted it: its tokio tasks and its own OS threads (chain worker, pruner, …) alike.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::cli::{KillOnDrop, stderr_lines};

/// Whether `line` is a tracing line in the text format (`<time> <LEVEL> …`), not one of the
/// devnet command's own messages.
fn is_log_line(line: &str) -> bool {
    let mut words = line.split_whitespace();
    let time = words.next().unwrap_or_default();
    let level = words.next().unwrap_or_default();
    time.starts_with("20") && ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level)
}

/// The node label a log line carries (`node{label=n1}`), if any.
fn label_of(line: &str) -> Option<&str> {
    let rest = line.split("node{label=").nth(1)?;
    rest.split(['}', ' ']).next()
}

#[test]
fn devnet_labels_every_log_line_with_its_node() {
    let dir = tempfile::tempdir().unwrap();
    let net = dir.path().join("devnet");
    let child = Command::new(env!("CARGO_BIN_EXE_modnode"))
        .args([
            "devnet",
            "--nodes",
            "2",
            "--authorities",
            "2",
            "--slot-ms",
            "500",
            "--dir",
            net.to_str().unwrap(),
        ])
        // The chain worker says at debug level what it imported.
        .env("RUST_LOG", "info,modnode::node::chain_worker=debug")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    let stderr = child.0.stderr.take().unwrap();
    let (lines, reader) = stderr_lines(stderr);

    // Until both nodes spoke and each one's chain worker imported a block and its pruner
    // thread started.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut log = Vec::new();
    let seen = |log: &[String], label: &str, text: &str| {
        log.iter()
            .any(|l| label_of(l) == Some(label) && l.contains(text))
    };
    let done = |log: &[String]| {
        ["n0", "n1"].iter().all(|label| {
            seen(log, label, "modnode::node::chain_worker")
                && seen(log, label, "pruning below finality")
        })
    };
    while !done(&log) {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| {
                panic!(
                    "no labelled chain-worker and pruner lines of both nodes:\n{}",
                    log.join("\n")
                )
            });
        log.push(line);
    }
    unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    let status = child.0.wait().unwrap();
    reader.join().unwrap();
    log.extend(lines.try_iter());
    let text = log.join("\n");
    assert!(status.success(), "devnet exited with {status}:\n{text}");

    let unlabelled: Vec<&String> = log
        .iter()
        .filter(|l| is_log_line(l) && !matches!(label_of(l), Some("n0" | "n1")))
        .collect();
    assert!(
        unlabelled.is_empty(),
        "log lines without a node label:\n{}",
        unlabelled
            .iter()
            .map(|l| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(log.iter().filter(|l| is_log_line(l)).count() > 10, "{text}");
}
