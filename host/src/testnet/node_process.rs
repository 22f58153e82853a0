//! One testnet node as a `modnode run` process: its command line, start, `kill -9`, pause and
//! continue, a wiped data directory, its logs (appended per node across restarts and fed line
//! by line to the runner) and its RSS.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use crate::net::identity::KEY_FILE_NAME;

/// Where a node's deposits come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DepositRole {
    /// It hosts the dev deposit contract on this address (node 0).
    Host(SocketAddr),
    /// It follows the dev contract at this JSON-RPC URL.
    Follow(String),
}

/// Everything fixed about one node across its restarts.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    /// Its index in the testnet.
    pub index: usize,
    /// The `modnode` binary.
    pub binary: PathBuf,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// The shared genesis file.
    pub genesis_file: PathBuf,
    /// Its fixed QUIC address (the relay forwards to it).
    pub listen: SocketAddr,
    /// `--bootstrap` entries: every other node as `<id>@<relay address>`.
    pub bootstrap: Vec<String>,
    /// Deposit source.
    pub deposits: DepositRole,
    /// `--checkpoint-interval`.
    pub checkpoint_interval: u64,
    /// Where its logs go (`node-<i>.log`, appended across restarts).
    pub log_file: PathBuf,
}

/// One log line of node `node`.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// The node.
    pub node: usize,
    /// The line (stdout or stderr).
    pub line: String,
}

/// A node process the runner controls.
#[derive(Debug)]
pub struct NodeProcess {
    spec: NodeSpec,
    child: Option<Child>,
    paused: bool,
    starts: u32,
    logs: SyncSender<LogLine>,
}

/// Why a node process could not be controlled (ours: the harness or the machine).
#[derive(Debug, thiserror::Error)]
pub enum NodeProcessError {
    /// Spawning `modnode run` failed.
    #[error("cannot start node {node} ({binary}): {source}")]
    Spawn {
        /// The node.
        node: usize,
        /// The binary.
        binary: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file operation on its data directory or log failed.
    #[error("node {node}: cannot {what} {path}: {source}")]
    Files {
        /// The node.
        node: usize,
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl NodeProcess {
    /// A node not started yet; its log lines will go to `logs`.
    pub fn new(spec: NodeSpec, logs: SyncSender<LogLine>) -> Self {
        Self {
            spec,
            child: None,
            paused: false,
            starts: 0,
            logs,
        }
    }

    /// Its fixed description.
    pub fn spec(&self) -> &NodeSpec {
        &self.spec
    }

    /// Whether a process is running (or paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether it is stopped by `SIGSTOP`.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// How many times it was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// Its process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its data directory.
    pub fn data_dir(&self) -> &Path {
        &self.spec.data_dir
    }

    /// Starts `modnode run` with `--sync <sync>` and, unless 0, `--clock-skew-ms`.
    pub fn start(&mut self, sync: &str, skew_ms: i64) -> Result<(), NodeProcessError> {
        let spec = &self.spec;
        let files = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| NodeProcessError::Files {
                node: spec.index,
                what,
                path,
                source,
            }
        };
        // A previous run's address would point the poller at a dead port until the new one
        // is written.
        let addr_file = spec.data_dir.join(crate::admin::token::ADDR_FILE);
        match std::fs::remove_file(&addr_file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(files("remove", &addr_file)(e)),
        }
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log_file)
            .map_err(files("open", &spec.log_file))?;
        let mut command = Command::new(&spec.binary);
        command
            .arg("run")
            .arg("--data-dir")
            .arg(&spec.data_dir)
            .arg("--genesis")
            .arg(&spec.genesis_file)
            .arg("--listen")
            .arg(spec.listen.to_string())
            .args(["--admin", "127.0.0.1:0", "--no-peer-exchange"])
            .arg("--checkpoint-interval")
            .arg(spec.checkpoint_interval.to_string())
            .arg("--sync")
            .arg(sync)
            .args(["--follow-distance", "1", "--dev-block-ms", "250"]);
        for peer in &spec.bootstrap {
            command.arg("--bootstrap").arg(peer);
        }
        match &spec.deposits {
            DepositRole::Host(addr) => {
                command.arg("--dev-contract-listen").arg(addr.to_string());
            }
            DepositRole::Follow(url) => {
                command.arg("--eth1-endpoint").arg(url);
            }
        }
        if skew_ms != 0 {
            command.arg(format!("--clock-skew-ms={skew_ms}"));
        }
        let _ = writeln!(
            log,
            "=== testnet: start {} of node {}: {command:?}",
            self.starts.saturating_add(1),
            spec.index
        );
        let mut child = command
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| NodeProcessError::Spawn {
                node: spec.index,
                binary: spec.binary.clone(),
                source,
            })?;
        let node = spec.index;
        for pipe in [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let log = log
                .try_clone()
                .map_err(files("reopen", &self.spec.log_file))?;
            let sink = self.logs.clone();
            std::thread::Builder::new()
                .name(format!("testnet-log-{node}"))
                .spawn(move || forward_lines(node, pipe, log, &sink))
                .map_err(files("start a log reader for", &self.spec.log_file))?;
        }
        self.child = Some(child);
        self.paused = false;
        self.starts = self.starts.saturating_add(1);
        Ok(())
    }

    /// `kill -9` (a paused process too) and reap it. No-op when not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGKILL);
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// `SIGSTOP`.
    pub fn pause(&mut self) {
        if let Some(child) = &self.child {
            signal(child, libc::SIGSTOP);
            self.paused = true;
        }
    }

    /// `SIGCONT`.
    pub fn resume(&mut self) {
        if let Some(child) = &self.child {
            signal(child, libc::SIGCONT);
        }
        self.paused = false;
    }

    /// Stops it cleanly (`SIGTERM`, `kill -9` after `grace`); its exit status if it stopped
    /// by itself.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        signal(&child, libc::SIGCONT);
        signal(&child, libc::SIGTERM);
        let deadline = Instant::now()
            .checked_add(grace)
            .unwrap_or_else(Instant::now);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.paused = false;
                return Some(status);
            }
            if Instant::now() >= deadline {
                signal(&child, libc::SIGKILL);
                let _ = child.wait();
                self.paused = false;
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Deletes its data directory except the node key (its identity is in the genesis and in
    /// every peer's bootstrap list); it must come back by sync. Kill it first.
    pub fn wipe(&mut self) -> Result<(), NodeProcessError> {
        self.kill();
        let dir = &self.spec.data_dir;
        let entries = std::fs::read_dir(dir).map_err(|source| NodeProcessError::Files {
            node: self.spec.index,
            what: "list",
            path: dir.clone(),
            source,
        })?;
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_name() == KEY_FILE_NAME {
                continue;
            }
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.map_err(|source| NodeProcessError::Files {
                node: self.spec.index,
                what: "remove",
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// The exit status if the process ended on its own (it is then no longer running).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        self.paused = false;
        Some(status)
    }

    /// Resident set size from `/proc/<pid>/status` (`VmRSS`), while running.
    pub fn rss_bytes(&self) -> Option<u64> {
        rss_of(self.pid()?)
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn signal(child: &Child, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) on our own child's pid; no memory is shared.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// Copies `pipe` line by line into `log` and `sink` until the process closes it.
fn forward_lines(
    node: usize,
    pipe: Box<dyn std::io::Read + Send>,
    mut log: std::fs::File,
    sink: &SyncSender<LogLine>,
) {
    for line in BufReader::new(pipe).lines() {
        let Ok(line) = line else { break };
        let _ = writeln!(log, "{line}");
        // The runner drains every tick; waiting here pushes back on the node's writes.
        if sink.send(LogLine { node, line }).is_err() {
            break;
        }
    }
}

/// `VmRSS` of `pid`, in bytes.
pub fn rss_of(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&text)
}

/// The `VmRSS:  1234 kB` line of a `/proc/<pid>/status`, in bytes.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_read_from_proc_status() {
        assert_eq!(
            parse_vm_rss("Name:\tx\nVmPeak:\t 10 kB\nVmRSS:\t   2048 kB\n"),
            Some(2 * 1024 * 1024)
        );
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        let own = rss_of(std::process::id()).unwrap();
        assert!(own > 1024 * 1024, "{own}");
    }
}
