//! Restoring a node without local state from a checkpoint its peers serve, before the node
//! starts (`modnode run --sync checkpoint`, or `auto` when the peers are more than
//! `checkpoint.interval` blocks ahead):
//!
//! 1. dial the bootstrap peers from a separate client endpoint and ask each for its checkpoint
//!    list; a malformed manifest is the sender's protocol violation;
//! 2. pick the checkpoint to restore, among the offers final on their peer (at or below the
//!    head the peer's hello claims minus `finality_depth`: no reorganisation this node will
//!    follow may revert block `H`, for which it holds no undo record; `checkpoint::final_offers`):
//!    the one whose progress is stored, if a peer still offers
//!    it (a restart resumes), else the newest offered by at least two peers — or by one when
//!    exactly one bootstrap peer is configured, the operator's explicit trust — then validate
//!    its manifest and check that its module version is installed. When no peer offers the
//!    stored one any more (every chunk answer was "not here" and the lists no longer hold it:
//!    its peers pruned it), the restore switches to the newest offered by enough peers and
//!    carries over the stored chunks whose bytes the new manifest lists and that verify
//!    against it (`checkpoint::carry_over`; what that keeps is spelled out in `checkpoint::carry`), in one
//!    atomic write of the progress store, so a crash at any point of the switch leaves either
//!    the old progress or the new one;
//! 3. fetch block `H` from a peer offering it: its hash and state root must be the manifest's,
//!    and its seal its slot's authority's (checked when the chain starts from it);
//! 4. re-verify the chunks stored by an earlier run (local work, no network), then fetch the
//!    rest across every offering peer with [`Fetcher`] (adaptive timeouts, slow peers losing
//!    their share); each chunk goes on arrival into the restore [`Pipeline`], which verifies
//!    it on a worker thread, appends it to the progress's chunk log and records it under its
//!    index once durable (one flush per batch), and only then reports it, so it counts only
//!    once durable; the fetcher asks for no more while `max_unverified` chunks are requested
//!    or in the pipeline, so a slow disk backs up the fetching; a chunk with bad bytes bans its sender only and is
//!    fetched elsewhere; a chunk whose listed bytes do not prove bans every peer that offered
//!    the manifest (peers offer only checkpoints they made), and the checkpoint is dropped;
//! 5. rebuild the state, check its root (a mismatch bans the manifest's offerers too), and
//!    initialise the chain store with it ([`init_from_checkpoint`]), then clear the progress
//!    (a start that finds the chain initialised removes progress a kill between the two left);
//!    the node then range-syncs from `H + 1`.
//!
//! Progress goes to `/metrics` ([`RestoreCounters`]) and to the log, or to a progress bar
//! when `modnode run` has a terminal ([`ProgressDisplay`](super::checkpoint_progress::ProgressDisplay)).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use modnode_peers::PeerAddr;
use tokio::task::JoinSet;

use super::sync_driver::{request, request_until};
use super::{NodeId, short};
use crate::chain::block::Block;
use crate::chain::genesis::Genesis;
use crate::chain::{CheckpointStart, init_from_checkpoint};
use crate::checkpoint::{
    ChunkOpener, ChunkRequest, Fault, FetchConfig, FetchError, Fetcher, Manifest, ManifestLimits,
    Outcome, Pipeline, PipelineConfig, RestoreStore, Restorer, SubmitError, choose, final_offers,
};
use crate::clock::unix_ms;
use crate::net::endpoint::{self, CLOSE_PROTOCOL_VIOLATION, TransportLimits};
use crate::net::handshake::{self, Hello, PROTOCOL_VERSION, Role};
use crate::net::identity::{self, NodeIdentity};
use crate::net::rpc::{Request, Response};
use crate::node::metrics::{Metrics, RestoreCounters, bump};
use crate::node::verdict::RequestError;
use crate::runtime::Modules;
use crate::runtime::checkpoint::CheckpointModule;
use crate::store::{BanList, KvStore, SledStore, keys};

mod fetch;
mod peers;
mod stored;

/// Where a node without local state gets its state from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Replay every block from genesis (range sync only).
    #[default]
    Full,
    /// Restore the newest checkpoint the peers agree on, then range-sync the rest; waits for
    /// one when none is offered yet.
    Checkpoint,
    /// `Checkpoint` when the best peer is more than `checkpoint.interval` blocks ahead and a
    /// checkpoint is offered, else `Full`.
    Auto,
}

/// Directory in the data directory of the restore progress (manifest and chunk records in
/// sled, verified chunks in an append-only log; see `checkpoint::store`).
pub const RESTORE_DIR: &str = "checkpoint-restore";
/// How long to wait before asking the peers again when no checkpoint could be restored.
const RETRY_AFTER: Duration = Duration::from_secs(2);
/// Attempts `auto` makes before falling back to a full sync.
const AUTO_ATTEMPTS: u32 = 3;

/// Why a node could not restore. Ours unless it says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointSyncError {
    /// The chain store or the restore progress failed.
    #[error("checkpoint restore storage in {path}: {reason}")]
    Storage {
        /// The database.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The client endpoint could not be made.
    #[error("checkpoint restore endpoint: {0}")]
    Net(#[from] crate::net::endpoint::NetError),
    /// `--sync checkpoint` without a peer to restore from.
    #[error("--sync checkpoint needs at least one --bootstrap peer to restore from")]
    NoBootstrap,
}

/// What the restore needs from the node.
pub struct RestoreParts<'a> {
    /// The node's key (peers see the same node id before and after the restore).
    pub identity: &'a NodeIdentity,
    /// The chain.
    pub genesis: &'a Genesis,
    /// The peers to restore from.
    pub bootstrap: &'a [PeerAddr],
    /// Transport limits.
    pub transport: &'a TransportLimits,
    /// Every installed checkpoint module version opens its own checkpoints.
    pub modules: &'a Modules,
    /// The node's data directory.
    pub data_dir: &'a Path,
    /// Where the progress is published.
    pub metrics: &'a Arc<Metrics>,
    /// `checkpoint.interval` (the `auto` threshold).
    pub interval: u64,
    /// The node's listen port (told to peers in the hello).
    pub listen_port: u16,
    /// Verification threads for resumed chunks.
    pub threads: usize,
    /// Log lines or a progress bar.
    pub progress: super::checkpoint_progress::ProgressDisplay,
}

/// One connected peer.
struct Peer {
    key: NodeId,
    conn: quinn::Connection,
    head_height: u64,
}

/// Why one restore attempt stopped.
enum Stop {
    /// Try again later (no peer left, block `H` unavailable).
    Retry(String),
    /// The checkpoint itself is bad or unusable here: never try it again in this run.
    Bad(String),
    /// The manifest lists chunks that do not prove (or a state that does not rebuild to its
    /// root): bad, and the fault of every peer that offered it (peers offer only checkpoints
    /// they made, so no offerer merely relayed it).
    Offerers(String),
    /// Local failure.
    Fatal(CheckpointSyncError),
}

/// Restores the chain in `parts.data_dir` from a checkpoint if `mode` asks for it and the node
/// has no local state; returns the height restored, or `None` when the node should sync from
/// genesis (or from its local state). A node with local state has any restore progress left in
/// its data directory removed, in every mode: no restore can use it any more.
pub async fn restore_if_needed(
    parts: RestoreParts<'_>,
    mode: SyncMode,
) -> Result<Option<u64>, CheckpointSyncError> {
    let progress_path = parts.data_dir.join(RESTORE_DIR);
    // Full sync restores nothing; it only looks at the chain when a restore left progress.
    if mode == SyncMode::Full && !progress_path.exists() {
        return Ok(None);
    }
    if mode != SyncMode::Full && parts.bootstrap.is_empty() {
        return match mode {
            SyncMode::Checkpoint => Err(CheckpointSyncError::NoBootstrap),
            _ => Ok(None),
        };
    }
    let chain_path = parts.data_dir.join("chain");
    let storage = |path: &Path, reason: String| CheckpointSyncError::Storage {
        path: path.display().to_string(),
        reason,
    };
    let store = SledStore::open(&chain_path).map_err(|e| storage(&chain_path, e.to_string()))?;
    if store
        .get(keys::FORMAT)
        .map_err(|e| storage(&chain_path, e.to_string()))?
        .is_some()
    {
        remove_finished_progress(&progress_path);
        return Ok(None);
    }
    if mode == SyncMode::Full {
        // The chain starts from genesis now; the progress goes at the next start.
        return Ok(None);
    }
    let bans = store
        .ban_list()
        .map_err(|e| storage(&chain_path, e.to_string()))?;
    let progress =
        RestoreStore::open(&progress_path).map_err(|e| storage(&progress_path, e.to_string()))?;
    let bind = match parts.bootstrap.first().map(|p| p.addr.ip()) {
        Some(std::net::IpAddr::V6(_)) => std::net::SocketAddr::from(([0u16; 8], 0)),
        _ => std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
    };
    let endpoint = endpoint::make_endpoint(bind, parts.identity, parts.transport)?;
    let mut driver = Driver {
        parts,
        store,
        bans,
        progress,
        endpoint,
        bad: BTreeSet::new(),
        banned: Default::default(),
    };
    let outcome = driver.run(mode).await;
    driver
        .endpoint
        .close(quinn::VarInt::from_u32(0), b"restore finished");
    let _ = tokio::time::timeout(Duration::from_secs(2), driver.endpoint.wait_idle()).await;
    outcome
}

struct Driver<'a> {
    parts: RestoreParts<'a>,
    store: SledStore,
    bans: BanList,
    progress: RestoreStore,
    endpoint: quinn::Endpoint,
    /// Checkpoints found bad in this run.
    bad: BTreeSet<[u8; 32]>,
    /// Peers banned in this run (each is banned and counted once, however many of its answers
    /// were in flight).
    banned: std::sync::Mutex<BTreeSet<NodeId>>,
}

impl Driver<'_> {
    fn counters(&self) -> &RestoreCounters {
        &self.parts.metrics.checkpoint_restore
    }

    async fn run(&mut self, mode: SyncMode) -> Result<Option<u64>, CheckpointSyncError> {
        let mut attempts = 0u32;
        loop {
            attempts = attempts.saturating_add(1);
            let peers = self.connect_all().await;
            let best = peers.iter().map(|p| p.head_height).max().unwrap_or(0);
            if mode == SyncMode::Auto && best <= self.parts.interval {
                tracing::info!(
                    best_peer_height = best,
                    interval = self.parts.interval,
                    "peers are not a checkpoint interval ahead; syncing from genesis"
                );
                close_all(&peers, b"not restoring");
                return Ok(None);
            }
            let offers = self.offers(&peers).await;
            let outcome = match self.pick(&peers, offers) {
                Some((manifest, holders)) => self.restore(manifest, &peers, holders).await,
                None => Err(Stop::Retry(format!(
                    "no checkpoint is offered by enough of the {} peers reached",
                    peers.len()
                ))),
            };
            close_all(&peers, b"restore attempt over");
            match outcome {
                Ok(height) => return Ok(Some(height)),
                Err(Stop::Fatal(e)) => return Err(e),
                Err(Stop::Retry(reason) | Stop::Bad(reason) | Stop::Offerers(reason)) => {
                    if mode == SyncMode::Auto && attempts >= AUTO_ATTEMPTS {
                        tracing::warn!(%reason, "no checkpoint restored; syncing from genesis");
                        return Ok(None);
                    }
                    tracing::info!(%reason, retry_in = ?RETRY_AFTER, "checkpoint restore waits");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
    }

    fn storage(&self, reason: String) -> Stop {
        Stop::Fatal(CheckpointSyncError::Storage {
            path: self.parts.data_dir.display().to_string(),
            reason,
        })
    }

    /// One attempt at restoring `manifest` from `holders`.
    async fn restore(
        &mut self,
        manifest: Manifest,
        peers: &[Peer],
        holders: Vec<NodeId>,
    ) -> Result<u64, Stop> {
        let id = manifest.id();
        let name = hex::encode(id);
        let Some(opener) = self
            .parts
            .modules
            .prepared_checkpoint(&manifest.module_hash)
        else {
            self.bad.insert(id);
            return Err(Stop::Bad(format!(
                "checkpoint {name} was made by checkpoint module {} (version {}), which is not installed",
                hex::encode(manifest.module_hash),
                manifest.module_version
            )));
        };
        let mut restorer = match Restorer::new(manifest.clone(), &ManifestLimits::default()) {
            Ok(r) => r,
            Err(e) => {
                self.bad.insert(id);
                return Err(Stop::Bad(format!("checkpoint {name}: {e}")));
            }
        };
        let height = manifest.height;
        let counters = self.counters();
        counters.height.store(height, Ordering::Relaxed);
        counters
            .chunks_total
            .store(as_u64(manifest.chunks.len()), Ordering::Relaxed);
        counters
            .peers
            .store(as_u64(holders.len()), Ordering::Relaxed);
        tracing::info!(
            checkpoint = %name,
            height,
            version = manifest.module_version,
            chunks = manifest.chunks.len(),
            bytes = manifest.total_bytes(),
            peers = holders.len(),
            "restoring checkpoint"
        );
        let block = self.fetch_block(&manifest, peers, &holders).await?;
        let taken = self.take_over_progress(&mut restorer, &opener);
        if let Err(Stop::Offerers(reason)) = taken {
            return Err(self.blame_offerers(peers, &holders, id, reason));
        }
        taken?;
        let fetched = self
            .fetch_chunks(&mut restorer, &opener, peers, holders.clone())
            .await;
        match fetched {
            Err(Stop::Offerers(reason)) => {
                return Err(self.blame_offerers(peers, &holders, id, reason));
            }
            Err(Stop::Bad(reason)) => {
                self.bad.insert(id);
                return Err(Stop::Bad(reason));
            }
            other => other?,
        }
        let state = match tokio::task::block_in_place(|| restorer.finish()) {
            Ok(state) => state,
            Err(e) if e.fault() == Fault::Manifest => {
                let reason = format!("checkpoint {name} does not rebuild: {e}");
                return Err(self.blame_offerers(peers, &holders, id, reason));
            }
            Err(e) => {
                self.bad.insert(id);
                return Err(Stop::Bad(format!(
                    "checkpoint {name} does not rebuild: {e}"
                )));
            }
        };
        let start = CheckpointStart {
            block: &block,
            registry: &state.registry,
            eth1: &state.eth1,
            schedule: &state.schedule,
            pending: state.pending.as_ref(),
        };
        if let Err(e) = init_from_checkpoint(&self.store, self.parts.genesis, &start) {
            self.bad.insert(id);
            return Err(Stop::Bad(format!("checkpoint {name}: {e}")));
        }
        self.progress
            .clear()
            .map_err(|e| self.storage(e.to_string()))?;
        self.counters().done.store(true, Ordering::Relaxed);
        tracing::info!(checkpoint = %name, height, "checkpoint restored; syncing the blocks after it");
        Ok(height)
    }

    /// Block `H` from the first holder whose copy is the manifest's.
    async fn fetch_block(
        &self,
        manifest: &Manifest,
        peers: &[Peer],
        holders: &[NodeId],
    ) -> Result<Block, Stop> {
        let max = self.parts.transport.max_message_bytes;
        let ask = Request::Blocks {
            start: manifest.height,
            count: 1,
        };
        for peer in peers.iter().filter(|p| holders.contains(&p.key)) {
            let Ok(Response::Blocks(blocks)) = request(&peer.conn, ask, max).await else {
                continue;
            };
            let Some(bytes) = blocks.first() else {
                continue;
            };
            let Ok(block) = Block::decode(bytes, self.parts.genesis.max_deposits_per_block) else {
                continue;
            };
            if block.hash() == manifest.block_hash && block.header.state_root == manifest.state_root
            {
                return Ok(block);
            }
        }
        Err(Stop::Retry(format!(
            "no peer serves block {} at height {} of the checkpoint",
            hex::encode(manifest.block_hash),
            manifest.height
        )))
    }

    /// Marks checkpoint `id` bad and bans every peer that offered it (`holders`): its manifest
    /// lists chunks that do not prove, or a state that does not rebuild to its root.
    fn blame_offerers(
        &mut self,
        peers: &[Peer],
        holders: &[NodeId],
        id: [u8; 32],
        reason: String,
    ) -> Stop {
        self.bad.insert(id);
        let blame = format!(
            "offered checkpoint {}, which is bad: {reason}",
            hex::encode(id)
        );
        for holder in holders {
            self.penalise(peers, *holder, &blame);
        }
        Stop::Bad(reason)
    }
}

/// Removes the restore progress in `path` of a node whose chain is already initialised, which
/// no restore can use any more: a restore killed after it initialised the chain and before it
/// cleared its progress left it (up to the whole state's chunks, in the chunk log), or a full
/// sync started over an unfinished restore. Failing to remove it costs only disk space, so a
/// failure is a warning, not a failed start.
fn remove_finished_progress(path: &Path) {
    if !path.exists() {
        return;
    }
    match std::fs::remove_dir_all(path) {
        Ok(()) => tracing::info!(
            dir = %path.display(),
            "removed checkpoint restore progress: the chain is already initialised"
        ),
        Err(e) => tracing::warn!(
            dir = %path.display(),
            error = %e,
            "could not remove checkpoint restore progress the initialised chain has no use for; it only takes disk space"
        ),
    }
}

fn close_all(peers: &[Peer], reason: &[u8]) {
    for peer in peers {
        peer.conn.close(quinn::VarInt::from_u32(0), reason);
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

fn as_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}
