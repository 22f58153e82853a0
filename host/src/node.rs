//! The node: everything `modnode run` starts, as a library so `modnode devnet` and the
//! integration tests start the same thing.
//!
//! A [`Node`] is a handful of tasks around one chain:
//! - the [`chain_worker`] thread owns the chain and builds our blocks, with the due deposits
//!   proven by the [`DepositSource`] an authority follows;
//! - the [`network`] task owns the QUIC endpoint, the peer manager and range sync;
//! - the [`gossip`](crate::net::gossip) driver spreads blocks, planned by the gossip-policy
//!   module (deposits are never gossiped: they come from the deposit contract);
//! - on an authority, the deposit [`follower`](crate::deposit_source::follower) reads the deposit
//!   contract into the [`DepositSource`]; a node configured to host it also runs the built-in
//!   [dev deposit contract](crate::deposit_source::dev_contract) and its JSON-RPC endpoint;
//! - the producer task builds, seals and gossips a block in each of this node's slots;
//! - the [`admin`](crate::admin) server answers `/status`, `/metrics` and the module routes on
//!   localhost.
//!
//! [`Node::shutdown`] stops them in order and waits until the chain is closed, so a stopped node
//! leaves nothing half-written.

mod admin_backend;
mod bans;
pub mod chain_worker;
pub mod checkpoint_file;
mod config;
mod error;
pub mod health;
pub mod intake;
pub mod metrics;
mod module_ops;
mod network;
mod producer;
pub mod slot_record;
mod start;
mod starting_backend;
pub mod status_line;
pub mod upgrades;
pub mod verdict;
pub mod worker_inbox;
pub mod worker_queue;

use std::net::SocketAddr;
use std::sync::Arc;

use modnode_peers::PeerAddr;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::chain_worker::ChainHandle;
pub use self::config::{
    DEFAULT_CHECKPOINT, DEFAULT_DEPOSITS, DEFAULT_GOSSIP_POLICY, DEFAULT_STATUS_EVERY,
    DepositSourceConfig, DevContractConfig, NodeConfig,
};
pub use self::error::NodeError;
pub use self::metrics::{Metrics, NodeStatus};
pub use self::network::checkpoint_progress::ProgressDisplay;
pub use self::network::checkpoint_restore::{CheckpointSyncError, RESTORE_DIR, SyncMode};
pub use self::start::{CHECKPOINT_DIR, DEPOSIT_CONTRACT_URL_FILE, DEPOSIT_LOG_DIR, open_chain};
use crate::checkpoint::CheckpointStore;
use crate::deposit_source::DepositSource;
use crate::runtime::Modules;
use upgrades::UpgradeAgent;

/// A running node.
pub struct Node {
    node_id: String,
    p2p_addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    deposit_contract_url: Option<String>,
    deposit_source: Option<Arc<DepositSource>>,
    chain: ChainHandle,
    metrics: Arc<Metrics>,
    modules: Arc<Modules>,
    upgrades: Arc<UpgradeAgent>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    worker: Option<std::thread::JoinHandle<()>>,
    /// The checkpoint creator; it stops after the worker (the holder of its job channel).
    creator: Option<crate::checkpoint::CreatorThread>,
    checkpoints: CheckpointStore,
    /// The span every log line of the node is in (`node{label=…}`; none without a label).
    span: tracing::Span,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node_id", &self.node_id)
            .field("p2p_addr", &self.p2p_addr)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// The node's module slots: prepare, activate (live, shadow, canary), roll back, status.
    pub fn modules(&self) -> &Arc<Modules> {
        &self.modules
    }

    /// The node's side of on-chain upgrades: the schedule after the head, readiness, fetching.
    pub fn upgrades(&self) -> &Arc<UpgradeAgent> {
        &self.upgrades
    }

    /// The node's id (hex).
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Where the node accepts peer connections.
    pub fn p2p_addr(&self) -> SocketAddr {
        self.p2p_addr
    }

    /// The node as a bootstrap entry for other nodes.
    pub fn peer_addr(&self) -> Result<PeerAddr, modnode_peers::PeerAddrParseError> {
        format!("{}@{}", self.node_id, self.p2p_addr).parse()
    }

    /// Where the admin API listens, if enabled.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The JSON-RPC URL of the dev deposit contract this node hosts, if it hosts one.
    pub fn deposit_contract_url(&self) -> Option<&str> {
        self.deposit_contract_url.as_deref()
    }

    /// The deposit log this node follows (authorities following a source only).
    pub fn deposit_source(&self) -> Option<&Arc<DepositSource>> {
        self.deposit_source.as_ref()
    }

    /// A snapshot of the node.
    pub fn status(&self) -> NodeStatus {
        self.metrics.status(
            self.node_id.clone(),
            self.p2p_addr.to_string(),
            &self.chain.view(),
        )
    }

    /// The node's counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The node's created checkpoints.
    pub fn checkpoints(&self) -> &CheckpointStore {
        &self.checkpoints
    }

    /// The chain worker, for reading state.
    pub fn chain(&self) -> &ChainHandle {
        &self.chain
    }

    /// Stops every task, closes connections and waits until the chain is closed.
    pub async fn shutdown(self) {
        let span = self.span.clone();
        tracing::Instrument::instrument(self.shutdown_in_span(), span).await;
    }

    async fn shutdown_in_span(mut self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        let worker = self.worker.take();
        let creator = self.creator.take();
        drop(self);
        if let Some(worker) = worker {
            let _ = tokio::task::spawn_blocking(move || worker.join()).await;
        }
        // With the worker gone the creator finishes what it is creating and stops (joined at
        // normal priority: idle, on a busy machine, it took seconds to wake).
        if let Some(creator) = creator {
            let _ = tokio::task::spawn_blocking(move || creator.join()).await;
        }
    }
}
