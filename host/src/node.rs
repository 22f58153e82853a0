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

mod bans;
pub mod chain_worker;
pub mod checkpoint_file;
pub mod health;
pub mod intake;
pub mod metrics;
mod module_ops;
mod network;
pub mod slot_record;
pub mod status_line;
pub mod upgrades;
pub mod verdict;
pub mod worker_inbox;
pub mod worker_queue;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use modnode_gossip::policy::MessageKind;
use modnode_peers::{PeerAddr, PeerConfig, PeerManager, RangeSync, SyncConfig};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::chain_worker::ChainHandle;
use self::metrics::bump;
pub use self::metrics::{Metrics, NodeStatus};
pub use self::network::checkpoint_progress::ProgressDisplay;
pub use self::network::checkpoint_restore::{CheckpointSyncError, RESTORE_DIR, SyncMode};
use crate::admin::{self, AdminBackend, BoxFuture, ModuleOp, ModuleOpError};
use crate::chain::genesis::Genesis;
use crate::chain::{Chain, DepositEngine};
use crate::checkpoint::{CheckpointConfig, CheckpointStore, Checkpointer};
use crate::clock::unix_ms;
use crate::deposit_source::dev_contract::{self, DevContract};
use crate::deposit_source::follower::{self, FollowerConfig};
use crate::deposit_source::log::FollowedLog;
use crate::deposit_source::{self, DepositSource};
use crate::modules_store::ModuleStoreError;
use crate::modules_store::upload::{ModuleService, UploadConfig, UploadError, UploadOutcome};
use crate::net::endpoint::{self, TransportLimits};
use crate::net::gossip::{self, GossipConfig, GossipHandle};
use crate::net::identity::NodeIdentity;
use crate::runtime::modules::InitialModules;
use crate::runtime::slot::SlotConfig;
use crate::runtime::{Modules, Runtime, RuntimeConfig};
use crate::state::schedule::Action;
use crate::store::{BanList, SledStore};
use upgrades::UpgradeAgent;

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
    /// How a checkpoint restore shows its progress: log lines (the default) or a progress bar
    /// on stderr (`modnode run` on a terminal).
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
        }
    }
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The data directory is unusable.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The node key could not be loaded or created.
    #[error(transparent)]
    Identity(#[from] crate::net::identity::IdentityError),
    /// A module could not be loaded.
    #[error("module {name}: {reason}")]
    Module {
        /// The module.
        name: String,
        /// What failed.
        reason: String,
    },
    /// The chain database could not be opened.
    #[error("cannot open the chain in {path}: {reason}")]
    Chain {
        /// The data directory.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The checkpoint file given to start from was refused or could not be restored.
    #[error(transparent)]
    RestoreFromFile(#[from] checkpoint_file::FileRestoreError),
    /// The QUIC endpoint could not be created.
    #[error(transparent)]
    Net(#[from] crate::net::endpoint::NetError),
    /// A peer or sync setting is invalid.
    #[error("invalid peer configuration: {0}")]
    Config(#[from] modnode_peers::ConfigError),
    /// The admin API could not start.
    #[error("admin API: {0}")]
    Admin(String),
    /// The module store could not be opened.
    #[error(transparent)]
    ModuleStore(#[from] ModuleStoreError),
    /// A thread could not be started.
    #[error("cannot start the chain worker thread: {0}")]
    Thread(std::io::Error),
    /// The genesis engine profile is not the one this build implements.
    #[error(transparent)]
    EngineProfile(#[from] crate::runtime::profile::ProfileError),
    /// The blocking startup task (module loading, opening the chain) panicked or was cancelled.
    #[error("node startup task failed: {0}")]
    Startup(String),
    /// The dev deposit contract could not be opened or its endpoint not started.
    #[error("dev deposit contract: {0}")]
    DepositContract(String),
    /// The deposit source to follow is misconfigured, or the followed log is unusable.
    #[error("deposit source: {0}")]
    DepositSource(String),
    /// Restoring from a checkpoint failed on this node.
    #[error(transparent)]
    CheckpointSync(#[from] CheckpointSyncError),
    /// The bound peer-to-peer address could not be read back.
    #[error("cannot read the address bound for {listen}: {source}")]
    Listen {
        /// The configured listen address.
        listen: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

fn create_data_dir(data_dir: &Path) -> Result<(), NodeError> {
    std::fs::create_dir_all(data_dir).map_err(|source| NodeError::DataDir {
        path: data_dir.display().to_string(),
        source,
    })
}

/// Directory of the created checkpoints inside the data directory (its own sled database).
pub const CHECKPOINT_DIR: &str = "checkpoints";

/// Directory of compiled module artifacts inside the data directory.
const MODULE_CACHE_DIR: &str = "module-cache";

/// Loads and warms every embedded module (warming the compiled-artifact cache in `data_dir`)
/// and returns the node's module slots, with the default deposits module and the gossip policy
/// `policy` active. Refuses a genesis whose engine profile is not this build's.
fn load_modules(
    data_dir: &Path,
    genesis: &Genesis,
    policy: &str,
    checkpoint: &str,
) -> Result<Modules, NodeError> {
    genesis.engine_profile.check_against_build()?;
    let module_err = |name: &str, reason: String| NodeError::Module {
        name: name.to_string(),
        reason,
    };
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(data_dir.join(MODULE_CACHE_DIR)),
        ..RuntimeConfig::default()
    })
    .map_err(|e| module_err("runtime", e.to_string()))?;
    let embedded = |name: &str, hint: &str| {
        crate::artifacts::embedded(name)
            .ok_or_else(|| module_err(name, format!("not embedded in this build{hint}")))
    };
    let initial = InitialModules {
        deposits: embedded(DEFAULT_DEPOSITS, "")?,
        checkpoint: embedded(checkpoint, " (checkpoint.create_version: try 1, 2 or 3)")?,
        gossip_policy: embedded(policy, " (try gossip-policy-v1 or gossip-policy-v2)")?,
    };
    let modules = Modules::new(runtime, initial, SlotConfig::default())
        .map_err(|e| module_err("initial modules", e.to_string()))?;
    // Every embedded version is prepared, so an operator can activate any of them by hash.
    for (name, bytes) in crate::artifacts::EMBEDDED {
        let prepared = modules
            .prepare(bytes)
            .map_err(|e| module_err(name, e.to_string()))?;
        tracing::debug!(module = %prepared.name, "module ready");
    }
    let stats = modules.runtime().cache().stats();
    tracing::info!(
        compiled = stats.compiles(),
        from_cache = stats.hits(),
        "modules warmed"
    );
    Ok(modules)
}

/// Opens the chain in `data_dir` with the embedded deposits module, running the versions its
/// schedule names from the embedded and stored modules.
pub fn open_chain(data_dir: &Path, genesis: Genesis) -> Result<Chain, NodeError> {
    create_data_dir(data_dir)?;
    let modules = Arc::new(load_modules(
        data_dir,
        &genesis,
        DEFAULT_GOSSIP_POLICY,
        DEFAULT_CHECKPOINT,
    )?);
    let (mut chain, _) = open_store(data_dir, genesis.clone(), &modules)?;
    let service = ModuleService::open(
        data_dir,
        data_dir.join(MODULE_CACHE_DIR),
        UploadConfig::default(),
    )?;
    let agent = UpgradeAgent::new(modules, Arc::new(service), genesis.authorities, [0; 32]);
    chain.set_deposit_modules(Arc::new(agent));
    Ok(chain)
}

fn open_store(
    data_dir: &Path,
    genesis: Genesis,
    modules: &Modules,
) -> Result<(Chain, BanList), NodeError> {
    let chain_err = |reason: String| NodeError::Chain {
        path: data_dir.display().to_string(),
        reason,
    };
    let store = SledStore::open(&data_dir.join("chain")).map_err(|e| chain_err(e.to_string()))?;
    let bans = store.ban_list().map_err(|e| chain_err(e.to_string()))?;
    let deposits: crate::runtime::deposits::DepositsModule = (*modules.deposits()).clone();
    let chain = Chain::open(
        Arc::new(store),
        genesis,
        DepositEngine::Module(Box::new(deposits)),
    )
    .map_err(|e| chain_err(e.to_string()))?;
    // Opening built and dropped transient copies of the registry; give their pages back.
    crate::alloc_stats::release_free_memory();
    Ok((chain, bans))
}

/// Directory in the data directory of an authority's persisted followed deposit log.
pub const DEPOSIT_LOG_DIR: &str = "deposit-log";

/// Name of the file in the data directory holding the hosted dev contract's JSON-RPC URL (for
/// `modnode deposit submit`).
pub const DEPOSIT_CONTRACT_URL_FILE: &str = "deposit-contract.url";

/// Opens the dev deposit contract in `<data_dir>/deposit-contract` (a new one starts with the
/// genesis deposits, the contract's first), serves its JSON-RPC endpoint and writes its URL to
/// [`DEPOSIT_CONTRACT_URL_FILE`].
async fn start_dev_contract(
    data_dir: &Path,
    genesis: &Genesis,
    dev: &DevContractConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<(String, JoinHandle<()>), NodeError> {
    let dir = data_dir.join("deposit-contract");
    let block_ms = dev.block_ms;
    let genesis_deposits = genesis.deposits.clone();
    let contract = tokio::task::spawn_blocking(move || {
        let now = unix_ms();
        let mut contract = DevContract::open(&dir, block_ms, now)?;
        if contract.deposit_count() == 0 {
            for deposit in genesis_deposits {
                contract.deposit(deposit, now)?;
            }
        }
        Ok::<_, dev_contract::DevContractError>(contract)
    })
    .await
    .map_err(|e| NodeError::Startup(e.to_string()))?
    .map_err(|e| NodeError::DepositContract(e.to_string()))?;
    if contract.deposit_count() < genesis.deposits.len() as u64 {
        return Err(NodeError::DepositContract(format!(
            "it holds {} deposits, fewer than the genesis's {}: it belongs to another chain",
            contract.deposit_count(),
            genesis.deposits.len()
        )));
    }
    tracing::info!(
        deposits = contract.deposit_count(),
        block_ms = contract.block_ms(),
        "dev deposit contract opened"
    );
    let (listener, bound) = deposit_source::server::bind(dev.listen)
        .await
        .map_err(|e| NodeError::DepositContract(e.to_string()))?;
    let url = format!("http://{bound}");
    crate::files::write_private_atomically(
        &data_dir.join(DEPOSIT_CONTRACT_URL_FILE),
        url.as_bytes(),
    )
    .map_err(|e| NodeError::DepositContract(e.to_string()))?;
    let contract = Arc::new(std::sync::Mutex::new(contract));
    let task = tokio::spawn(deposit_source::server::serve(listener, contract, shutdown));
    Ok((url, task))
}

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
    creator: Option<std::thread::JoinHandle<()>>,
    checkpoints: CheckpointStore,
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
    /// Starts a node; must be called within a multi-threaded tokio runtime.
    pub async fn start(config: NodeConfig) -> Result<Self, NodeError> {
        let data_dir = config.data_dir.clone();
        create_data_dir(&data_dir)?;
        let identity = NodeIdentity::load_or_create(&data_dir)?;
        let node_id = identity.node_id();
        let genesis = config.genesis.clone();
        let policy_name = config.gossip_policy.clone();
        let checkpoint_name = format!("checkpoint-v{}", config.checkpoint.create_version);
        let upload_config = config.upload.clone();
        let (modules, module_store) = {
            let dir = data_dir.clone();
            let genesis = genesis.clone();
            tokio::task::spawn_blocking(move || {
                let modules = Arc::new(load_modules(
                    &dir,
                    &genesis,
                    &policy_name,
                    &checkpoint_name,
                )?);
                let module_store =
                    ModuleService::open(&dir, dir.join(MODULE_CACHE_DIR), upload_config)?
                        .with_slots(modules.clone());
                module_ops::prepare_stored(&modules, &module_store);
                // What an operator activated before a restart, back in service.
                slot_record::restore(&dir, &modules, &module_store);
                Ok::<_, NodeError>((modules, module_store))
            })
            .await
            .map_err(|e| NodeError::Startup(e.to_string()))??
        };
        let metrics = Arc::new(Metrics::default());
        if let Some(file) = &config.restore_from {
            // Before the network restore: once the file has started the chain, that one finds
            // local state and has nothing to do.
            tokio::task::block_in_place(|| {
                checkpoint_file::restore_from_file(&checkpoint_file::FileRestoreParts {
                    file,
                    genesis: &genesis,
                    modules: &modules,
                    data_dir: &data_dir,
                    counters: &metrics.checkpoint_restore,
                    threads: config.checkpoint.threads,
                    progress: config.restore_progress,
                })
            })?;
        }
        network::checkpoint_restore::restore_if_needed(
            network::checkpoint_restore::RestoreParts {
                identity: &identity,
                genesis: &genesis,
                bootstrap: &config.bootstrap,
                transport: &config.transport,
                modules: &modules,
                data_dir: &data_dir,
                metrics: &metrics,
                interval: config.checkpoint.interval,
                listen_port: config.listen.port(),
                threads: config.checkpoint.threads,
                progress: config.restore_progress,
            },
            config.sync_mode,
        )
        .await?;
        let (chain, bans) = {
            let dir = data_dir.clone();
            let genesis = genesis.clone();
            let modules = modules.clone();
            tokio::task::spawn_blocking(move || open_store(&dir, genesis, &modules))
                .await
                .map_err(|e| NodeError::Startup(e.to_string()))??
        };
        let module_store = Arc::new(module_store);
        let upgrades = Arc::new(
            UpgradeAgent::new(
                modules.clone(),
                module_store.clone(),
                genesis.authorities.clone(),
                *node_id.as_bytes(),
            )
            .with_governance(genesis.governance())
            .with_max_deposits(genesis.max_deposits_per_block),
        );
        let mut chain = chain;
        chain.set_deposit_modules(upgrades.clone());
        chain.configure_state_cache(config.state_cache);
        let history = config
            .history
            .unwrap_or_else(|| crate::chain::prune::History::day_of_slots(genesis.slot_ms));
        // Detached: it holds the chain's store only while a batch runs and stops with the chain.
        chain.pruner(history).spawn().map_err(NodeError::Thread)?;
        let states = chain.states();
        let genesis_hash = chain.genesis_hash();
        let head = chain.head();
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut tasks = Vec::new();

        // The dev deposit contract first: this node's own follower may read it.
        let deposit_contract_url = match &config.deposits.host_dev_contract {
            None => None,
            Some(dev) => {
                let (url, task) =
                    start_dev_contract(&data_dir, &genesis, dev, shutdown_rx.clone()).await?;
                tasks.push(task);
                Some(url)
            }
        };
        let my_index = genesis
            .authorities
            .iter()
            .position(|a| a == node_id.as_bytes());
        let may_produce = config.produce && (genesis.authorities.is_empty() || my_index.is_some());
        let mut deposit_endpoint = None;
        let deposit_source = match (&config.deposits.follow, may_produce) {
            (Some(follow), true) => {
                let mut follow = follow.clone();
                if follow.endpoint.is_empty() {
                    follow.endpoint = deposit_contract_url.clone().ok_or_else(|| {
                        NodeError::DepositContract(
                            "told to follow the hosted dev contract, but none is hosted".into(),
                        )
                    })?;
                }
                // Refuse a bad URL now rather than in the follower's log.
                crate::deposit_source::client::RpcClient::new(&follow.endpoint)
                    .map_err(|e| NodeError::DepositSource(e.to_string()))?;
                deposit_endpoint = Some(follow.endpoint.clone());
                tracing::info!(
                    endpoint = %follow.endpoint,
                    contract = %hex::encode(follow.contract),
                    follow_distance = follow.follow_distance,
                    "following the deposit contract"
                );
                let dir = data_dir.join(DEPOSIT_LOG_DIR);
                let contract = follow.contract;
                let (log, restored) =
                    tokio::task::spawn_blocking(move || FollowedLog::open(&dir, contract))
                        .await
                        .map_err(|e| NodeError::Startup(e.to_string()))?
                        .map_err(|e| NodeError::DepositSource(e.to_string()))?;
                let source = Arc::new(DepositSource::with_counters(metrics.eth1_follower.clone()));
                if let Some(restored) = restored {
                    tracing::info!(
                        deposits = restored.deposit_count,
                        block = restored.block.number,
                        "deposit log restored; following on from there"
                    );
                    source.append(restored);
                }
                tasks.push(tokio::spawn(follower::run(
                    follow,
                    source.clone(),
                    Some(log),
                    shutdown_rx.clone(),
                )));
                Some(source)
            }
            _ => None,
        };
        let checkpoints = CheckpointStore::open(&data_dir.join(CHECKPOINT_DIR)).map_err(|e| {
            NodeError::Startup(format!(
                "cannot open the checkpoint store in {}: {e}",
                data_dir.join(CHECKPOINT_DIR).display()
            ))
        })?;
        let source = modules.clone();
        let (checkpointer, creator) = Checkpointer::start(
            Arc::new(move || source.checkpoint()),
            checkpoints.clone(),
            config.checkpoint,
        )
        .map_err(NodeError::Thread)?;
        let (chain, worker) = chain_worker::spawn_with_checkpoints(
            chain,
            identity.clone(),
            deposit_source.clone(),
            Some(checkpointer),
        )
        .map_err(NodeError::Thread)?;

        let endpoint = endpoint::make_endpoint(config.listen, &identity, &config.transport)?;
        let p2p_addr = endpoint.local_addr().map_err(|source| NodeError::Listen {
            listen: config.listen,
            source,
        })?;
        // A stateful (`@2.0.0`) policy hears peers come and go, duplicates and the clock.
        let policy_events = modules.gossip_policy();
        let (gossip, gossip_events) = gossip::spawn_with_policy_events(
            GossipConfig {
                engine: modnode_gossip::EngineConfig {
                    validate_before_relay: true,
                    message_id: gossip::message_id,
                    ..modnode_gossip::EngineConfig::default()
                },
                max_message_bytes: config.transport.max_message_bytes,
                ..GossipConfig::default()
            },
            modules.gossip_policy(),
            Some(Box::new(move |event| policy_events.on_event(event))),
        );
        let mut peer_config = PeerConfig::new(*node_id.as_bytes());
        peer_config.target_outbound = config.target_outbound;
        peer_config.max_inbound = config.max_inbound;
        peer_config.trusted_ips = config.trusted_ips.iter().copied().collect();
        if !config.peer_exchange {
            // Nothing offered, nothing taken: only the bootstrap addresses are ever dialled.
            peer_config.exchange_max = 0;
        }
        peer_config.handshake_timeout =
            u64::try_from(config.transport.handshake_timeout.as_micros())
                .unwrap_or(u64::MAX)
                .saturating_mul(2);
        let seed = u64::from_le_bytes(
            node_id
                .as_bytes()
                .first_chunk::<8>()
                .copied()
                .unwrap_or_default(),
        );
        let mut peers = PeerManager::new(peer_config, config.bootstrap.iter().copied(), seed, 0)?;
        bans::restore(&mut peers, &bans, unix_ms());
        let sync = RangeSync::new(config.sync, head.height, head.hash)?;
        let slot = Duration::from_millis(genesis.slot_ms);

        tasks.push(tokio::spawn(network::Network::run(
            network::NetworkParts {
                endpoint,
                limits: config.transport.clone(),
                genesis: genesis.clone(),
                genesis_hash,
                peers,
                sync,
                gossip: gossip.clone(),
                gossip_events,
                chain: chain.clone(),
                metrics: metrics.clone(),
                status_interval: slot.max(Duration::from_millis(500)),
                bootstrap: config.bootstrap.iter().map(|p| p.node).collect(),
                startup_wait: config
                    .transport
                    .handshake_timeout
                    .saturating_mul(2)
                    .max(slot.saturating_mul(4)),
                bans,
                produces: may_produce,
                upgrades: upgrades.clone(),
                checkpoints: crate::checkpoint::CheckpointServer::new(
                    checkpoints.clone(),
                    config.transport.max_message_bytes,
                ),
            },
            shutdown_rx.clone(),
        )));

        tasks.push(tokio::spawn(metrics::copy_gossip_stats(
            gossip.clone(),
            metrics.clone(),
            shutdown_rx.clone(),
        )));
        if let Some(every) = config.status_every.filter(|d| !d.is_zero()) {
            tasks.push(tokio::spawn(status_line::run(
                every,
                metrics.clone(),
                chain.clone(),
                genesis.clone(),
                shutdown_rx.clone(),
            )));
        }
        if may_produce {
            tasks.push(tokio::spawn(produce(
                genesis.clone(),
                my_index,
                chain.clone(),
                gossip.clone(),
                metrics.clone(),
                shutdown_rx.clone(),
            )));
        }

        let admin_addr = match config.admin_listen {
            None => None,
            Some(addr) => {
                let backend = Arc::new(Backend {
                    node_id: node_id.to_string(),
                    p2p_addr: p2p_addr.to_string(),
                    chain: chain.clone(),
                    metrics: metrics.clone(),
                    module_store,
                    slots: modules.clone(),
                    states: states.clone(),
                    checkpoints: checkpoints.clone(),
                    upgrades: upgrades.clone(),
                    produces: may_produce,
                    slot_clock: (genesis.genesis_time_ms, genesis.slot_ms),
                    data_dir: data_dir.clone(),
                    deposit_endpoint: deposit_endpoint.clone(),
                    deposit_source: deposit_source.clone(),
                });
                let (listener, token) = admin::server::bind(addr, &data_dir, config.admin_public)
                    .await
                    .map_err(|e| NodeError::Admin(e.to_string()))?;
                let bound = listener
                    .local_addr()
                    .map_err(|e| NodeError::Admin(e.to_string()))?;
                tasks.push(tokio::spawn(admin::server::serve(
                    listener,
                    token,
                    backend,
                    config.admin.clone(),
                    shutdown_rx.clone(),
                )));
                Some(bound)
            }
        };
        tracing::info!(
            node_id = %node_id,
            %p2p_addr,
            admin = ?admin_addr,
            genesis = %hex::encode(genesis_hash),
            height = head.height,
            authority = ?my_index,
            producing = may_produce,
            deposit_contract = ?deposit_contract_url,
            "node started"
        );
        Ok(Self {
            node_id: node_id.to_string(),
            p2p_addr,
            admin_addr,
            deposit_contract_url,
            deposit_source,
            chain,
            metrics,
            modules,
            upgrades,
            shutdown,
            tasks,
            worker: Some(worker),
            creator: Some(creator),
            checkpoints,
        })
    }

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
    pub async fn shutdown(mut self) {
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
        // With the worker gone the creator finishes what it is creating and stops.
        if let Some(creator) = creator {
            let _ = tokio::task::spawn_blocking(move || creator.join()).await;
        }
    }
}

/// Builds a block at the start of each of this node's slots and gossips it.
async fn produce(
    genesis: Genesis,
    my_index: Option<usize>,
    chain: ChainHandle,
    gossip: GossipHandle,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let now = unix_ms();
        let slot = genesis.slot_at(now).saturating_add(1);
        let wait = genesis.slot_start_ms(slot).saturating_sub(now);
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
        }
        let ours = match (genesis.proposer_for(slot), my_index) {
            (None, _) => true,
            (Some(proposer), Some(me)) => usize::try_from(proposer).ok() == Some(me),
            (Some(_), None) => false,
        };
        if !ours {
            continue;
        }
        if !metrics.started_up.load(Ordering::Relaxed) {
            // A restarted authority that produced before syncing would fork off on its own.
            tracing::info!(
                slot,
                "skipping our slot until we tried to sync with our peers"
            );
            continue;
        }
        if metrics.syncing.load(Ordering::Relaxed) {
            tracing::info!(slot, "skipping our slot while catching up");
            continue;
        }
        match chain.produce(slot).await {
            Ok(Some(block)) => {
                bump(&metrics.blocks_produced);
                tracing::info!(
                    slot,
                    height = block.header.height,
                    hash = %hex::encode(block.hash().get(..8).unwrap_or_default()),
                    deposits = block.body.deposits.len(),
                    "produced block"
                );
                if let Err(e) = gossip.publish(MessageKind::Block, block.encode()).await {
                    tracing::warn!(error = %e, "cannot gossip our block");
                }
            }
            Ok(None) => {}
            Err(e) => tracing::error!(error = %e, "block production failed"),
        }
    }
}

/// The node as the admin API sees it.
struct Backend {
    node_id: String,
    p2p_addr: String,
    chain: ChainHandle,
    metrics: Arc<Metrics>,
    module_store: Arc<ModuleService>,
    slots: Arc<Modules>,
    states: Arc<crate::state_cache::StateCache>,
    checkpoints: CheckpointStore,
    upgrades: Arc<UpgradeAgent>,
    /// Whether this node's blocks carry votes (it may produce).
    produces: bool,
    /// Start of slot 0 and the slot length, for readiness.
    slot_clock: (u64, u64),
    /// The data directory, whose size `/metrics` reports.
    data_dir: PathBuf,
    /// The deposit contract endpoint this node follows (a producer), for `/readyz`.
    deposit_endpoint: Option<String>,
    /// The deposits it followed (a producer), for the deposit queue on `/metrics`.
    deposit_source: Option<Arc<DepositSource>>,
}

impl Backend {
    /// What `/readyz` (and `modnode_ready`) decide from, read now without blocking.
    fn readiness_inputs(&self) -> health::ReadinessInputs {
        let view = self.chain.view();
        let (genesis_ms, slot_ms) = self.slot_clock;
        let now = unix_ms();
        let restore = self.metrics.checkpoint_restore.status();
        let deposit_source = self.deposit_endpoint.as_ref().map(|endpoint| {
            let (last_answer_unix_ms, last_failure) = self.metrics.eth1_follower.reachability();
            health::DepositSourceHealth {
                endpoint: endpoint.clone(),
                last_answer_unix_ms,
                last_failure,
            }
        });
        health::ReadinessInputs {
            now_unix_ms: now,
            restoring: restore.chunks_total > 0 && !restore.done,
            deposit_source,
            wall_slot: now
                .saturating_sub(genesis_ms)
                .checked_div(slot_ms)
                .unwrap_or(0),
            head_slot: view.head.slot,
            head_height: view.head.height,
            best_peer_height: self.metrics.sync_target_height.load(Ordering::Relaxed),
            started_up: self.metrics.started_up.load(Ordering::Relaxed),
            syncing: self.metrics.syncing.load(Ordering::Relaxed),
        }
    }
}

impl AdminBackend for Backend {
    fn livez(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let head = self.chain.view().head.height;
            let asked = self.chain.blocks(head, 1, 1 << 20);
            match tokio::time::timeout(Duration::from_secs(2), asked).await {
                Err(_) => Err("the chain worker did not answer within 2 s".into()),
                Ok(Err(e @ chain_worker::WorkerError::Stopped)) => Err(e.to_string()),
                Ok(_) => Ok(()),
            }
        })
    }

    fn readyz(&self) -> BoxFuture<'_, Result<(), String>> {
        let inputs = self.readiness_inputs();
        Box::pin(async move { health::readiness(&inputs) })
    }

    fn create_checkpoint(&self) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let summary = self.chain.create_checkpoint().await?;
            serde_json::to_value(summary).map_err(|e| e.to_string())
        })
    }

    fn checkpoints(&self) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        let store = self.checkpoints.clone();
        Box::pin(async move {
            let list =
                tokio::task::spawn_blocking(move || crate::checkpoint::service::summaries(&store))
                    .await
                    .map_err(|e| format!("checkpoint listing task failed: {e}"))?
                    .map_err(|e| e.to_string())?;
            Ok(serde_json::json!({ "checkpoints": list }))
        })
    }

    fn status(&self) -> serde_json::Value {
        let status = self.metrics.status(
            self.node_id.clone(),
            self.p2p_addr.clone(),
            &self.chain.view(),
        );
        serde_json::to_value(status).unwrap_or_default()
    }

    fn metrics(&self) -> String {
        let mut text = self.metrics.render(&self.chain.view());
        // The state cache's figures follow the node's own, before the closing `# EOF`.
        let mut cache = crate::node::metrics::render_state_cache(&self.states.metrics());
        cache.push_str(&crate::node::metrics::render_checkpoints(&self.metrics));
        cache.push_str(&self.upgrades.render_metrics(self.chain.view().head.height));
        cache.push_str(&metrics::render_modules(
            &self.slots.status(),
            &self.slots.call_counts(),
        ));
        cache.push_str(&metrics::render_build_info());
        let inputs = self.readiness_inputs();
        cache.push_str(&metrics::render_sync(metrics::SyncFigures {
            head_slot: inputs.head_slot,
            wall_slot: inputs.wall_slot,
            ready: health::readiness(&inputs).is_ok(),
        }));
        cache.push_str(&metrics::render_import());
        if let Ok(gossip) = self.metrics.gossip.lock() {
            cache.push_str(&metrics::render_gossip(&gossip));
        }
        if let Some(source) = &self.deposit_source {
            cache.push_str(&metrics::render_deposit_queue(
                source.len(),
                self.chain.view().deposit_index,
            ));
        }
        cache.push_str(&metrics::render_disk(metrics::dir_bytes(&self.data_dir)));
        match text.rfind("# EOF") {
            Some(at) => text.insert_str(at, &cache),
            None => text.push_str(&cache),
        }
        text
    }

    fn state(
        &self,
        query: admin::state_query::StateQuery,
    ) -> BoxFuture<'_, Result<serde_json::Value, admin::state_query::StateQueryError>> {
        let states = self.states.clone();
        let syncing = self.metrics.syncing.load(Ordering::Relaxed);
        Box::pin(async move {
            if syncing && query.height.is_some() {
                return Err(admin::state_query::StateQueryError::Unavailable(
                    "the node is catching up; state queries at a height are refused until it has"
                        .into(),
                ));
            }
            // May replay blocks: off the async tasks, on its own thread (never the chain
            // worker's, so import does not wait for it).
            tokio::task::spawn_blocking(move || admin::state_query::answer(&states, &query))
                .await
                .unwrap_or_else(|e| {
                    Err(admin::state_query::StateQueryError::Internal(format!(
                        "state query task failed: {e}"
                    )))
                })
        })
    }

    fn blocks(
        &self,
        query: admin::blocks_query::BlocksQuery,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let encoded = self
                .chain
                .blocks(query.from, query.count, usize::MAX)
                .await
                .map_err(|e| e.to_string())?;
            admin::blocks_query::render(&encoded)
        })
    }

    fn upload_module(
        &self,
        bytes: Vec<u8>,
        source: String,
    ) -> BoxFuture<'_, Result<UploadOutcome, UploadError>> {
        let modules = self.module_store.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || modules.upload(&bytes, &source))
                .await
                .unwrap_or_else(|e| Err(UploadError::Internal(e.to_string())))
        })
    }

    fn modules(&self) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        let (slots, store) = (self.slots.clone(), self.module_store.clone());
        Box::pin(async move {
            let mut listing = tokio::task::spawn_blocking(move || module_ops::list(&slots, &store))
                .await
                .map_err(|e| format!("module listing task failed: {e}"))??;
            // Scheduled on chain: the height, and who reports the module ready.
            let head = self.chain.view().head.height;
            self.upgrades.annotate(&mut listing, head);
            Ok(listing)
        })
    }

    fn module_op(&self, op: ModuleOp) -> BoxFuture<'_, Result<serde_json::Value, ModuleOpError>> {
        let (slots, store) = (self.slots.clone(), self.module_store.clone());
        let data_dir = self.data_dir.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let done = module_ops::run(&slots, &store, op)?;
                // Kept across restarts; a failure to write it does not undo the change.
                if let Err(e) = slot_record::save(&data_dir, &slots) {
                    tracing::warn!(error = %e, "the module slots will not survive a restart");
                }
                Ok(done)
            })
            .await
            .map_err(|e| ModuleOpError::Internal(format!("module operation task failed: {e}")))?
        })
    }

    fn propose_upgrade(
        &self,
        action: Action,
        kind: String,
        sha256: String,
        activate_at: u64,
    ) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move {
            if !self.produces {
                return Err(
                    "this node produces no blocks (a follower, or started with --no-produce), so \
                     its proposals would never be voted: propose on the authorities"
                        .to_string(),
                );
            }
            let kind = crate::runtime::Kind::ALL
                .into_iter()
                .find(|k| k.to_string() == kind)
                .ok_or_else(|| format!("unknown module kind {kind:?}"))?;
            let module: [u8; 32] = hex::decode(sha256.trim_start_matches("0x"))
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| format!("sha256 {sha256:?} is not 32 bytes of hex"))?;
            let op = crate::state::UpgradeOp {
                kind,
                module,
                height: activate_at,
            };
            if action == Action::Upgrade {
                let upgrades = self.upgrades.clone();
                let ready = tokio::task::spawn_blocking(move || upgrades.prepare_as(kind, &module))
                    .await
                    .map_err(|e| format!("module preparation task failed: {e}"))??;
                if !ready {
                    return Err(format!(
                        "module {sha256} is not stored on this node; upload it first"
                    ));
                }
                if kind == crate::runtime::Kind::Deposits {
                    let upgrades = self.upgrades.clone();
                    let slot = self.chain.view().head.slot;
                    tokio::task::spawn_blocking(move || upgrades.check_deposit_cost(&module, slot))
                        .await
                        .map_err(|e| format!("module cost check failed: {e}"))??;
                }
            }
            self.chain
                .propose(action, op)
                .await
                .map_err(|e| e.to_string())?;
            tracing::info!(?action, %kind, module = %sha256, activate_at, "proposed: our blocks vote for it");
            Ok(serde_json::json!({
                "proposed": true,
                "action": action,
                "kind": kind.to_string(),
                "sha256": hex::encode(module),
                "activate_at": activate_at,
            }))
        })
    }
}
