//! What the devnet tests over real QUIC share beyond [`super::network`]'s node starters: nodes
//! started in a line, an upgrade proposed through the admin API, block comparison between
//! nodes, and `modnode run` processes that can be SIGKILLed and polled through their admin API.

use std::path::Path;

use modnode::admin::client::{self, Target};
use modnode::chain::genesis::Genesis;
use modnode::hashes::ModuleHash;
use modnode::node::Node;
use sha2::{Digest, Sha256};

use super::network::{LIVENESS, start};

pub(super) fn sha(bytes: &[u8]) -> ModuleHash {
    ModuleHash(Sha256::digest(bytes).into())
}

/// Starts one node per dir, each bootstrapping from the one before.
pub(super) async fn start_all(paths: &[&Path], genesis: &Genesis) -> Vec<Node> {
    let mut nodes: Vec<Node> = Vec::new();
    for dir in paths {
        let bootstrap = nodes
            .last()
            .map(|n| vec![n.peer_addr().unwrap()])
            .unwrap_or_default();
        nodes.push(start(dir, genesis, bootstrap).await);
    }
    nodes
}

/// Makes the node on `dir` vote the deposits module `module` in at `height`.
pub(super) async fn propose(dir: &Path, module: &ModuleHash, height: u64) {
    let target = Target::data_dir(dir).unwrap();
    client::propose_upgrade(&target, "upgrade", "deposits", &hex::encode(module), height)
        .await
        .unwrap();
}

pub(super) fn height(node: &Node) -> u64 {
    node.status().height
}

/// Every node holds the same canonical block at `h`.
pub(super) async fn same_block_at(nodes: &[&Node], h: u64) {
    let first = nodes[0].chain().blocks(h, 1, usize::MAX).await.unwrap();
    assert_eq!(first.len(), 1, "no block at height {h}");
    for node in &nodes[1..] {
        assert_eq!(node.chain().blocks(h, 1, usize::MAX).await.unwrap(), first);
    }
}

/// A `modnode run` process on `dir` (a follower of the devnet), SIGKILLed when dropped.
pub(super) struct RunProcess(std::process::Child);

impl RunProcess {
    pub(super) fn start(dir: &Path, genesis_file: &Path, bootstrap: &str) -> Self {
        // A killed process leaves its admin address behind: wait for the new one.
        let _ = std::fs::remove_file(dir.join("admin.addr"));
        let log = std::fs::File::create(dir.join("run.log")).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_modnode"))
            .arg("run")
            .arg("--data-dir")
            .arg(dir)
            .arg("--genesis")
            .arg(genesis_file)
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .args(["--dev-contract-listen", "127.0.0.1:0", "--no-produce"])
            .args(["--bootstrap", bootstrap])
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Self(child)
    }

    pub(super) fn kill(mut self) {
        // SIGKILL: no destructors, no flush.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGKILL) };
        self.0.wait().unwrap();
    }

    /// Ctrl-C, and its exit status.
    pub(super) fn interrupt(mut self) -> std::process::ExitStatus {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        self.0.wait().unwrap()
    }
}

impl Drop for RunProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `/status` of the process on `dir`, once its admin API answers.
pub(super) async fn process_status(dir: &Path) -> Option<serde_json::Value> {
    client::status(dir).await.ok()
}

/// The height of the process on `dir`, once its admin API answers.
pub(super) async fn process_height(dir: &Path) -> Option<u64> {
    process_status(dir).await?["height"].as_u64()
}

/// Polls the process on `dir` until its height reaches `goal`.
pub(super) async fn process_reaches(dir: &Path, goal: u64, what: &str) {
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        if process_height(dir).await.is_some_and(|h| h >= goal) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}; its log:\n{}",
            std::fs::read_to_string(dir.join("run.log")).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Copies the compiled modules in the artifact cache of the node on `from` (started, so it
/// compiled every embedded module) into the caches of `to`, so nodes started there load this
/// build's machine code instead of compiling every module again — seconds of CPU per node on
/// a loaded machine. Only this build's own compiler output is copied; an artifact of another
/// engine configuration would be ignored by its name.
pub(super) fn share_module_cache(from: &Path, to: &[&Path]) {
    let cache = |dir: &Path| dir.join("module-cache");
    for dir in to {
        std::fs::create_dir_all(cache(dir)).unwrap();
    }
    for entry in std::fs::read_dir(cache(from)).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cwasm") {
            for dir in to {
                std::fs::copy(&path, cache(dir).join(path.file_name().unwrap())).unwrap();
            }
        }
    }
}
