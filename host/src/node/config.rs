//! What a node is started with: [`NodeConfig`] and its parts, and the defaults.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use modnode_peers::{PeerAddr, SyncConfig};

use super::{ProgressDisplay, SyncMode};
use crate::admin;
use crate::chain::genesis::Genesis;
use crate::checkpoint::CheckpointConfig;
use crate::deposit_source::dev_contract;
use crate::deposit_source::follower::FollowerConfig;
use crate::modules_store::upload::UploadConfig;
use crate::net::endpoint::TransportLimits;

/// The deposits module a node activates.
pub const DEFAULT_DEPOSITS: &str = "deposits-v2";
/// The gossip policy a node activates.
pub const DEFAULT_GOSSIP_POLICY: &str = "gossip-policy-v2";

/// How often a node logs its status line by default ([`NodeConfig::status_every`]).
pub const DEFAULT_STATUS_EVERY: Duration = Duration::from_secs(30);
/// The checkpoint module a node activates.
pub const DEFAULT_CHECKPOINT: &str = "checkpoint-v1";

/// Everything a node is configured with.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Data directory: node key, chain database, module cache, admin token.
    pub data_dir: PathBuf,
    /// The chain.
    pub genesis: Genesis,
    /// UDP address for peer connections.
    pub listen: SocketAddr,
    /// Peers to connect to at start (and keep reconnecting to).
    pub bootstrap: Vec<PeerAddr>,
    /// TCP address of the admin API; `None` disables it.
    pub admin_listen: Option<SocketAddr>,
    /// Allow a non-loopback admin address (`--admin-public`; the token then travels in clear).
    pub admin_public: bool,
    /// Limits of the admin server.
    pub admin: admin::server::ServerConfig,
    /// Limits of module uploads.
    pub upload: UploadConfig,
    /// Transport limits.
    pub transport: TransportLimits,
    /// Outbound connections to keep.
    pub target_outbound: usize,
    /// Inbound connections to accept.
    pub max_inbound: usize,
    /// IPs exempt from the per-IP and per-subnet inbound limits (loopback and bootstrap
    /// addresses are exempt anyway).
    pub trusted_ips: Vec<IpAddr>,
    /// Range sync tunables.
    pub sync: SyncConfig,
    /// Embedded gossip-policy module active at start (the slot can switch it live).
    pub gossip_policy: String,
    /// Produce blocks in this node's slots (when it is an authority, or on a chain without
    /// authorities).
    pub produce: bool,
    /// Checkpoint creation (`[checkpoint]`: interval, keep, create_version).
    pub checkpoint: CheckpointConfig,
    /// Where deposits come from (authorities only).
    pub deposits: DepositSourceConfig,
    /// Bounds of the state cache (`state_cache.max_bytes`, anchors, window).
    pub state_cache: crate::state_cache::StateCacheConfig,
    /// Where a node without local state gets its state (`--sync`): range sync from genesis,
    /// or a checkpoint its bootstrap peers serve first.
    pub sync_mode: SyncMode,
    /// A checkpoint file to start an empty data directory from (`--restore-from`), verified
    /// as a restore from peers is; `sync_mode` then has nothing left to restore.
    pub restore_from: Option<PathBuf>,
    /// How long work shows its progress — a checkpoint restore, a range sync that starts far
    /// behind, the registry's format migration when the chain opens: log lines (the default) or a progress bar on stderr (`modnode run` on a
    /// terminal).
    pub restore_progress: ProgressDisplay,
    /// Exchange peer addresses with peers (on by default). A testnet harness whose nodes reach
    /// each other only through its relay turns it off, so no node dials another's real address.
    pub peer_exchange: bool,
    /// Log a status line (height, peers, lag, syncing) this often; `None`: never.
    pub status_every: Option<Duration>,
    /// Blocks kept below the head (`--history`); `None`: a day of slots at the genesis slot
    /// time. Undo, eth1 and schedule records are folded at finality either way
    /// (`chain::prune`); `Some(History::Full)` keeps every block.
    pub history: Option<crate::chain::prune::History>,
    /// A name for the node in its log lines (`node{label=n1}`: a span around everything the
    /// node runs, its threads included), for processes running several nodes (`modnode
    /// devnet`) or logs gathered from several; `None`: no span.
    pub label: Option<String>,
}

/// The built-in dev deposit contract a node hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevContractConfig {
    /// TCP address of its JSON-RPC endpoint.
    pub listen: SocketAddr,
    /// Time between its execution blocks (a new contract's; an existing one keeps its own).
    pub block_ms: u64,
}

impl Default for DevContractConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9402)),
            block_ms: dev_contract::DEFAULT_BLOCK_MS,
        }
    }
}

/// Where an authority's deposits come from. Non-authorities need no source: they verify
/// blocks against the agreed deposit root (a non-authority given a `follow` ignores it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DepositSourceConfig {
    /// Host the built-in dev deposit contract (persisted under `<data dir>/deposit-contract`).
    pub host_dev_contract: Option<DevContractConfig>,
    /// Follow a deposit contract. An empty `endpoint` means the dev contract this node hosts.
    pub follow: Option<FollowerConfig>,
}

impl DepositSourceConfig {
    /// Host the dev contract on `listen` and follow it (what `modnode run` and a devnet's
    /// node 0 do).
    pub fn dev(listen: SocketAddr) -> Self {
        Self {
            host_dev_contract: Some(DevContractConfig {
                listen,
                ..DevContractConfig::default()
            }),
            follow: Some(FollowerConfig::new(
                String::new(),
                dev_contract::DEV_CONTRACT_ADDRESS,
            )),
        }
    }

    /// Follow the dev contract another node hosts at `endpoint` (`http://ip:port`).
    pub fn follow_dev(endpoint: String) -> Self {
        Self {
            host_dev_contract: None,
            follow: Some(FollowerConfig::new(
                endpoint,
                dev_contract::DEV_CONTRACT_ADDRESS,
            )),
        }
    }
}

impl NodeConfig {
    /// Defaults for a node in `data_dir` on `genesis`: listens on `127.0.0.1:9400`, admin API
    /// on `127.0.0.1:9401`, produces when it may.
    pub fn new(data_dir: PathBuf, genesis: Genesis) -> Self {
        Self {
            data_dir,
            genesis,
            listen: SocketAddr::from(([127, 0, 0, 1], 9400)),
            bootstrap: Vec::new(),
            admin_listen: Some(SocketAddr::from(([127, 0, 0, 1], 9401))),
            admin_public: false,
            admin: admin::server::ServerConfig::default(),
            upload: UploadConfig::default(),
            transport: TransportLimits::default(),
            target_outbound: 8,
            max_inbound: 32,
            trusted_ips: Vec::new(),
            sync: SyncConfig::default(),
            gossip_policy: DEFAULT_GOSSIP_POLICY.into(),
            produce: true,
            checkpoint: CheckpointConfig::default(),
            deposits: DepositSourceConfig::default(),
            state_cache: crate::state_cache::StateCacheConfig::default(),
            sync_mode: SyncMode::Full,
            restore_from: None,
            restore_progress: ProgressDisplay::Log,
            peer_exchange: true,
            status_every: Some(DEFAULT_STATUS_EVERY),
            history: None,
            label: None,
        }
    }
}
