//! Starting a node: the data directory, the store, the modules, the dev deposit contract,
//! and [`Node::start`], which starts every task around one chain.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use modnode_peers::{PeerConfig, PeerManager, RangeSync};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::admin_backend::Backend;
use super::producer::produce;
use super::upgrades::UpgradeAgent;
use super::{
    DEFAULT_CHECKPOINT, DEFAULT_DEPOSITS, DEFAULT_GOSSIP_POLICY, Metrics, bans, chain_worker,
    checkpoint_file, metrics,
};
use super::{
    DevContractConfig, Node, NodeConfig, NodeError, module_ops, network, slot_record, status_line,
};
use crate::admin;
use crate::chain::genesis::Genesis;
use crate::chain::{Chain, DepositEngine};
use crate::checkpoint::{CheckpointStore, Checkpointer};
use crate::clock::unix_ms;
use crate::deposit_source::dev_contract::{self, DevContract};
use crate::deposit_source::follower;
use crate::deposit_source::log::FollowedLog;
use crate::deposit_source::{self, DepositSource};
use crate::modules_store::upload::{ModuleService, UploadConfig};
use crate::net::endpoint;
use crate::net::gossip::{self, GossipConfig};
use crate::net::identity::NodeIdentity;
use crate::runtime::modules::{InitialVersions, ReadyVersions};
use crate::runtime::slot::SlotConfig;
use crate::runtime::{Modules, Runtime, RuntimeConfig};
use crate::store::{BanList, SledStore};

fn create_data_dir(data_dir: &Path) -> Result<(), NodeError> {
    std::fs::create_dir_all(data_dir).map_err(|source| NodeError::DataDir {
        path: data_dir.display().to_string(),
        source,
    })
}

mod hosted_contract;

pub use hosted_contract::{DEPOSIT_CONTRACT_URL_FILE, DEPOSIT_LOG_DIR};
use hosted_contract::{forget_dev_contract_url, start_dev_contract};

/// Directory of the created checkpoints inside the data directory (its own sled database).
pub const CHECKPOINT_DIR: &str = "checkpoints";

/// Directory of compiled module artifacts inside the data directory.
const MODULE_CACHE_DIR: &str = "module-cache";

/// Prepares every module built into the binary through the module lifecycle (validate once →
/// compile → warm → admit, `modules_store::lifecycle`; warming the compiled-artifact cache in
/// `data_dir`) and returns the node's module slots, with the default deposits module, the
/// checkpoint module `checkpoint` and the gossip policy `policy` active, beside the module
/// service (store and lifecycle, limits `upload`) admitting into the slots' ready-map. Refuses
/// a genesis whose engine profile is not this build's.
fn load_modules(
    data_dir: &Path,
    genesis: &Genesis,
    policy: &str,
    checkpoint: &str,
    upload: UploadConfig,
) -> Result<(Modules, ModuleService), NodeError> {
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
    let deposits = embedded(DEFAULT_DEPOSITS, "")?;
    let checkpoint_bytes = embedded(checkpoint, " (checkpoint.create_version: try 1, 2 or 3)")?;
    let policy_bytes = embedded(policy, " (try gossip-policy-v1 or gossip-policy-v2)")?;
    let config = SlotConfig::default();
    let versions = Arc::new(ReadyVersions::new(runtime, config.warmup_real_time));
    let service = ModuleService::open(data_dir, data_dir.join(MODULE_CACHE_DIR), upload)?;
    service.admit_into(versions.clone());
    let built_in = |name: &str, bytes: &[u8]| {
        service
            .prepare_built_in(bytes)
            .map(|ready| ready.hash)
            .map_err(|e| module_err(name, e.to_string()))
    };
    let initial = InitialVersions {
        deposits: built_in(DEFAULT_DEPOSITS, deposits)?,
        checkpoint: built_in(checkpoint, checkpoint_bytes)?,
        gossip_policy: built_in(policy, policy_bytes)?,
    };
    // Every embedded version is prepared, so an operator can activate any of them by hash.
    module_ops::prepare_built_in(&service)?;
    let modules = Modules::from_ready(versions, initial, config)
        .map_err(|e| module_err("initial modules", e.to_string()))?;
    let stats = modules.runtime().cache().stats();
    tracing::info!(
        compiled = stats.compiles(),
        from_cache = stats.hits(),
        "modules warmed"
    );
    Ok((modules, service))
}

/// Opens the chain in `data_dir` with the embedded deposits module, running the versions its
/// schedule names from the embedded and stored modules.
pub fn open_chain(data_dir: &Path, genesis: Genesis) -> Result<Chain, NodeError> {
    create_data_dir(data_dir)?;
    let (modules, service) = load_modules(
        data_dir,
        &genesis,
        DEFAULT_GOSSIP_POLICY,
        DEFAULT_CHECKPOINT,
        UploadConfig::default(),
    )?;
    let modules = Arc::new(modules);
    let (mut chain, _) = open_store(
        data_dir,
        genesis.clone(),
        &modules,
        crate::progress::ProgressDisplay::Log,
    )?;
    let agent = UpgradeAgent::new(modules, Arc::new(service), genesis.authorities, [0; 32]);
    chain.set_deposit_modules(Arc::new(agent));
    Ok(chain)
}

/// Opens the chain store in `data_dir` and its ban list; a format migration the open runs shows
/// its progress as `display` says.
fn open_store(
    data_dir: &Path,
    genesis: Genesis,
    modules: &Modules,
    display: crate::progress::ProgressDisplay,
) -> Result<(Chain, BanList), NodeError> {
    let chain_err = |reason: String| NodeError::Chain {
        path: data_dir.display().to_string(),
        reason,
    };
    let store = SledStore::open(&data_dir.join("chain")).map_err(|e| chain_err(e.to_string()))?;
    let bans = store.ban_list().map_err(|e| chain_err(e.to_string()))?;
    let deposits: crate::runtime::deposits::DepositsModule = (*modules.deposits()).clone();
    let chain = Chain::open_showing_progress(
        Arc::new(store),
        genesis,
        DepositEngine::Module(Box::new(deposits)),
        display,
    )
    .map_err(|e| chain_err(e.to_string()))?;
    // Opening built and dropped transient copies of the registry; give their pages back.
    crate::alloc_stats::release_free_memory();
    Ok((chain, bans))
}

impl Node {
    /// Starts a node; must be called within a multi-threaded tokio runtime. With a
    /// [`NodeConfig::label`], everything the node runs — its tasks, its threads, its shutdown —
    /// logs inside one `node{label=…}` span.
    pub async fn start(config: NodeConfig) -> Result<Self, NodeError> {
        let span = match &config.label {
            Some(label) => tracing::info_span!("node", label = %label),
            None => tracing::Span::none(),
        };
        let mut node =
            tracing::Instrument::instrument(Self::start_in_span(config), span.clone()).await?;
        node.span = span;
        Ok(node)
    }

    /// [`Node::start`] inside the node's span.
    async fn start_in_span(config: NodeConfig) -> Result<Self, NodeError> {
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
            tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                let (modules, module_store) = load_modules(
                    &dir,
                    &genesis,
                    &policy_name,
                    &checkpoint_name,
                    upload_config,
                )?;
                let modules = Arc::new(modules);
                module_ops::prepare_stored(&module_store);
                // What an operator activated before a restart, back in service.
                slot_record::restore(&dir, &modules, &module_store);
                Ok::<_, NodeError>((modules, module_store))
            }))
            .await
            .map_err(|e| NodeError::Startup(e.to_string()))??
        };
        let metrics = Arc::new(Metrics::default());
        // Dropped (so every task below stops) if the start fails.
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        // The admin API answers from now on: status, metrics and health while the node
        // restores; chain and module operations once the chain is open.
        let admin = match config.admin_listen {
            None => None,
            Some(addr) => {
                let backend = Arc::new(super::starting_backend::StartingBackend::new(
                    node_id.to_string(),
                    metrics.clone(),
                ));
                let (listener, token) = admin::server::bind(addr, &data_dir, config.admin_public)
                    .await
                    .map_err(|e| NodeError::Admin(e.to_string()))?;
                let bound = listener
                    .local_addr()
                    .map_err(|e| NodeError::Admin(e.to_string()))?;
                tasks.push(tokio::spawn(tracing::Instrument::in_current_span(
                    admin::server::serve(
                        listener,
                        token,
                        backend.clone(),
                        config.admin.clone(),
                        shutdown_rx.clone(),
                    ),
                )));
                Some((bound, backend))
            }
        };
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
            // A store of an older format migrates here: a bar on a terminal.
            let display = config.restore_progress;
            tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                open_store(&dir, genesis, &modules, display)
            }))
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
        // Deposit signatures the next epochs of deposits@3 check, verified between blocks
        // into the runtime's cache (only warms it; best effort if no thread can start).
        match crate::chain::preverify::Preverifier::spawn(modules.runtime().sig_cache()) {
            Ok(preverifier) => chain.set_preverifier(preverifier),
            Err(e) => tracing::warn!(error = %e, "deposit signature pre-verifier not started"),
        }
        let history = config
            .history
            .unwrap_or_else(|| crate::chain::prune::History::day_of_slots(genesis.slot_ms));
        // Detached: it holds the chain's store only while a batch runs and stops with the chain.
        chain.pruner(history).spawn().map_err(NodeError::Thread)?;
        let states = chain.states();
        let genesis_hash = chain.genesis_hash();
        let head = chain.head();

        let my_index = genesis
            .authorities
            .iter()
            .position(|a| a == node_id.as_bytes());
        let may_produce = config.produce && (genesis.authorities.is_empty() || my_index.is_some());
        // The dev deposit contract first: this node's own follower may read it. Only a node
        // that produces blocks hosts it: deposits sent to a follower's contract would never
        // reach the chain (authorities follow their own source, not a follower's).
        let deposit_contract_url = match &config.deposits.host_dev_contract {
            Some(dev) if may_produce => {
                let (url, task) =
                    start_dev_contract(&data_dir, &genesis, dev, shutdown_rx.clone()).await?;
                tasks.push(task);
                Some(url)
            }
            Some(_) => {
                forget_dev_contract_url(&data_dir)?;
                tracing::info!(
                    "not hosting the dev deposit contract: this node does not produce blocks \
                     (not an authority of this chain, or --no-produce); deposits go to the \
                     contract the authorities follow"
                );
                None
            }
            None => None,
        };
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
                    tokio::task::spawn_blocking(crate::log_span::in_current_span(move || {
                        FollowedLog::open(&dir, contract)
                    }))
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
                tasks.push(tokio::spawn(tracing::Instrument::in_current_span(
                    follower::run(follow, source.clone(), Some(log), shutdown_rx.clone()),
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
        bans::restore(&mut peers, &bans, &metrics.bans, unix_ms());
        let sync = RangeSync::new(config.sync, head.height, head.hash.to_bytes())?;
        let slot = Duration::from_millis(genesis.slot_ms);

        tasks.push(tokio::spawn(tracing::Instrument::in_current_span(
            network::Network::run(
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
                    progress: config.restore_progress,
                    upgrades: upgrades.clone(),
                    checkpoints: crate::checkpoint::CheckpointServer::new(
                        checkpoints.clone(),
                        config.transport.max_message_bytes,
                    ),
                },
                shutdown_rx.clone(),
            ),
        )));

        tasks.push(tokio::spawn(tracing::Instrument::in_current_span(
            metrics::copy_gossip_stats(gossip.clone(), metrics.clone(), shutdown_rx.clone()),
        )));
        if let Some(every) = config.status_every.filter(|d| !d.is_zero()) {
            tasks.push(tokio::spawn(tracing::Instrument::in_current_span(
                status_line::run(
                    every,
                    metrics.clone(),
                    chain.clone(),
                    genesis.clone(),
                    shutdown_rx.clone(),
                ),
            )));
        }
        if may_produce {
            tasks.push(tokio::spawn(tracing::Instrument::in_current_span(produce(
                genesis.clone(),
                my_index,
                chain.clone(),
                gossip.clone(),
                metrics.clone(),
                shutdown_rx.clone(),
            ))));
        }

        let admin_addr = admin.map(|(bound, starting)| {
            starting.install(Arc::new(Backend {
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
            }));
            bound
        });
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
            span: tracing::Span::none(),
        })
    }
}
