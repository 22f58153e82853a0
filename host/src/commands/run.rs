//! `modnode run`: one node (the embedded single-node dev chain unless a genesis file is given),
//! and the hidden `modnode debug import-loop` the crash tests drive.

use std::io::{IsTerminal as _, Write as _};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use modnode::chain::genesis::Genesis;
use modnode::chain::prune::History;
use modnode::chain::workload;
use modnode::deposit_source::dev_contract::DEV_CONTRACT_ADDRESS;
use modnode::deposit_source::follower::FollowerConfig;
use modnode::deposit_source::rpc::DEV_CHAIN_ID;
use modnode::node::{self, DepositSourceConfig, DevContractConfig, Node, NodeConfig};
use modnode::store::DataDirLock;
use modnode_peers::PeerAddr;
use sha2::Digest as _;

/// Options of `modnode run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Read settings from this TOML file (`modnode config init` writes one): every key is one
    /// of these flags without the dashes, and a flag given here overrides the file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log lines as text or as one JSON object per line (`RUST_LOG` sets what is logged).
    #[arg(long, value_enum, default_value_t = super::LogFormat::Text)]
    pub log_format: super::LogFormat,
    /// Data directory (created if missing): node key, chain, module cache, admin token.
    #[arg(long, default_value = "modnode-data")]
    pub data_dir: PathBuf,
    /// Genesis file (JSON); the embedded dev genesis if omitted.
    #[arg(long)]
    pub genesis: Option<PathBuf>,
    /// UDP address for peer connections.
    #[arg(long, default_value = "127.0.0.1:9400")]
    pub listen: SocketAddr,
    /// A peer to connect to, as `<node id hex>@<ip:port>`; repeat for more.
    #[arg(long = "bootstrap", value_name = "ID@ADDR")]
    pub bootstrap: Vec<PeerAddr>,
    /// An IP exempt from the per-IP and per-subnet inbound connection limits (e.g. your own
    /// nodes behind one NAT); repeat for more. Loopback and bootstrap addresses are exempt.
    #[arg(long = "trusted-addr", value_name = "IP")]
    pub trusted_addr: Vec<IpAddr>,
    /// TCP address of the admin API (status, metrics, `modnode deposit submit`).
    #[arg(long, default_value = "127.0.0.1:9401")]
    pub admin: SocketAddr,
    /// Do not start the admin API.
    #[arg(long)]
    pub no_admin: bool,
    /// Allow `--admin` on a non-loopback address. The bearer token and every request then
    /// travel in clear: put a TLS proxy in front or firewall the port.
    #[arg(long)]
    pub admin_public: bool,
    /// Largest module `modnode module upload` may send, in bytes.
    #[arg(long, default_value_t = modnode::modules_store::upload::DEFAULT_MAX_MODULE_BYTES)]
    pub max_module_bytes: usize,
    /// Embedded gossip policy module to run.
    #[arg(long, default_value = node::DEFAULT_GOSSIP_POLICY)]
    pub gossip_policy: String,
    /// Never produce blocks, even in this node's slots.
    #[arg(long)]
    pub no_produce: bool,
    /// Bytes the state cache may hold beyond the head state (`state_cache.max_bytes`),
    /// regenerations in flight included.
    #[arg(long, default_value_t = modnode::state_cache::StateCacheConfig::default().max_bytes)]
    pub state_cache_max_bytes: u64,
    /// Blocks kept below the head for serving range sync: a number, `full` (every block), or
    /// `day` (a day of slots at the chain's slot time: 43,200 blocks at 2 s). Older blocks are
    /// pruned in the background; undo, eth1 and schedule records are folded at finality either
    /// way.
    #[arg(long, value_name = "BLOCKS|full|day", default_value = "day", value_parser = parse_history)]
    pub history: HistoryArg,
    /// Create a checkpoint every this many blocks (0: only on demand, `modnode checkpoint
    /// create`).
    #[arg(long, default_value_t = 100)]
    pub checkpoint_interval: u64,
    /// Checkpoints kept (the newest).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    pub checkpoint_keep: u16,
    /// Checkpoint module version that creates checkpoints (`checkpoint-v<N>`; can be switched
    /// live through the module slot).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=3))]
    pub checkpoint_create_version: u32,
    /// Where a node without local state gets its state: `full` replays from genesis,
    /// `checkpoint` restores the newest checkpoint its --bootstrap peers agree on (waiting for
    /// one) then syncs the blocks after it, `auto` restores only when the peers are more than
    /// --checkpoint-interval blocks ahead. A node with local state always goes on from it.
    #[arg(long, value_enum, default_value_t = SyncArg::Auto)]
    pub sync: SyncArg,
    /// Start an empty data directory from this checkpoint file (`modnode checkpoint export`),
    /// verified as a restore from peers is (every chunk's proof, the rebuilt state root, block
    /// H's seal), then sync the blocks after it from the --bootstrap peers. A data directory
    /// already started from it goes on from its local chain.
    #[arg(long, value_name = "FILE")]
    pub restore_from: Option<PathBuf>,
    /// Dial only the --bootstrap addresses: neither ask peers for addresses nor give any
    /// (a testnet whose nodes reach each other only through its fault-injecting relay).
    #[arg(long, hide = true)]
    pub no_peer_exchange: bool,
    /// Run this node's clock this many ms ahead of the system clock (behind if negative), for
    /// testnets that exercise skewed clocks.
    #[arg(long, hide = true, default_value_t = 0, allow_hyphen_values = true)]
    pub clock_skew_ms: i64,
    /// Log a status line (height, finalized, peers, lag behind the slot clock, syncing) every
    /// this many seconds; 0: never.
    #[arg(long, value_name = "SECONDS", default_value_t = node::DEFAULT_STATUS_EVERY.as_secs())]
    pub status_every: u64,
    /// A name for this node in every log line it writes (`node{label=NAME}`, a span field in
    /// `--log-format json`), for logs gathered from several nodes.
    #[arg(long, value_name = "NAME")]
    pub node_label: Option<String>,
    #[command(flatten)]
    pub deposits: DepositArgs,
}

/// `--history`: a day of slots (the default) or what [`History::parse`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryArg {
    /// A day of slots at the genesis slot time.
    Day,
    /// As given.
    Given(History),
}

impl std::fmt::Display for HistoryArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Day => f.write_str("day"),
            Self::Given(history) => history.fmt(f),
        }
    }
}

fn parse_history(text: &str) -> Result<HistoryArg, String> {
    match text.trim() {
        "day" => Ok(HistoryArg::Day),
        other => History::parse(other).map(HistoryArg::Given),
    }
}

/// `--sync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SyncArg {
    /// Replay every block from genesis.
    Full,
    /// Restore a checkpoint first.
    Checkpoint,
    /// A checkpoint when the peers are more than a checkpoint interval ahead.
    Auto,
}

impl From<SyncArg> for node::SyncMode {
    fn from(arg: SyncArg) -> Self {
        match arg {
            SyncArg::Full => Self::Full,
            SyncArg::Checkpoint => Self::Checkpoint,
            SyncArg::Auto => Self::Auto,
        }
    }
}

/// Where an authority's deposits come from: by default the built-in dev deposit contract this
/// node hosts; `--eth1-endpoint` follows any Ethereum JSON-RPC endpoint instead.
#[derive(Debug, Clone, clap::Args)]
pub struct DepositArgs {
    /// Follow the deposit contract through this Ethereum JSON-RPC endpoint (`http://host:port`)
    /// instead of hosting the dev deposit contract.
    #[arg(long, value_name = "URL")]
    pub eth1_endpoint: Option<String>,
    /// Address of the deposit contract to follow at `--eth1-endpoint` (default: the dev
    /// contract's).
    #[arg(long, value_name = "0xADDRESS", value_parser = parse_address, requires = "eth1_endpoint")]
    pub deposit_contract: Option<[u8; 20]>,
    /// Chain id the `--eth1-endpoint` must answer to `eth_chainId` (1 for Ethereum mainnet;
    /// default: the dev contract's). The follower follows nothing until it does.
    #[arg(long, value_name = "ID", default_value_t = DEV_CHAIN_ID, requires = "eth1_endpoint")]
    pub eth1_chain_id: u64,
    /// Blocks the follower stays behind the source's head.
    #[arg(long, default_value_t = 2)]
    pub follow_distance: u64,
    /// First source block that may hold deposits (the contract's deployment block).
    #[arg(long, default_value_t = 0, requires = "eth1_endpoint")]
    pub deposit_start_block: u64,
    /// TCP address of the hosted dev deposit contract's JSON-RPC endpoint.
    #[arg(long, default_value = "127.0.0.1:9402")]
    pub dev_contract_listen: SocketAddr,
    /// Time between the dev deposit contract's blocks, in ms (new contracts only).
    #[arg(long, default_value_t = 1_000)]
    pub dev_block_ms: u64,
}

fn parse_address(text: &str) -> Result<[u8; 20], String> {
    let digits = text.strip_prefix("0x").unwrap_or(text);
    let bytes = hex::decode(digits).map_err(|e| format!("not hex: {e}"))?;
    <[u8; 20]>::try_from(bytes.as_slice())
        .map_err(|_| format!("{} bytes, an address has 20", bytes.len()))
}

impl DepositArgs {
    /// The node's deposit source configuration.
    pub fn config(&self) -> DepositSourceConfig {
        let (host, endpoint) = match &self.eth1_endpoint {
            Some(url) => (None, url.clone()),
            None => (
                Some(DevContractConfig {
                    listen: self.dev_contract_listen,
                    block_ms: self.dev_block_ms,
                }),
                String::new(),
            ),
        };
        let mut follow = FollowerConfig::new(
            endpoint,
            self.deposit_contract.unwrap_or(DEV_CONTRACT_ADDRESS),
        );
        follow.chain_id = self.eth1_chain_id;
        follow.follow_distance = self.follow_distance;
        follow.start_block = self.deposit_start_block;
        DepositSourceConfig {
            host_dev_contract: host,
            follow: Some(follow),
        }
    }
}

/// Reads the genesis file, or the embedded dev genesis.
pub fn genesis(path: Option<&PathBuf>) -> anyhow::Result<Genesis> {
    Ok(match path {
        Some(path) => Genesis::from_file(path)?,
        None => Genesis::dev(),
    })
}

/// A fixed address this node binds, with the flag that moves it.
struct Port {
    addr: SocketAddr,
    flag: &'static str,
    what: &'static str,
    udp: bool,
}

/// Refuses at once, in one line naming the flag to give, when an address this node would bind
/// is taken — typically by another `modnode run` on the machine with the same defaults. Node
/// startup binds these only after opening its stores and modules, and its bind errors name no
/// flag. A port of 0 (any free one) is never taken. The probe sockets are closed again before
/// the node binds; a port taken in between still fails there, with the address.
fn refuse_taken_ports(args: &RunArgs) -> anyhow::Result<()> {
    let mut ports = vec![Port {
        addr: args.listen,
        flag: "--listen",
        what: "peer connections, UDP",
        udp: true,
    }];
    if !args.no_admin {
        ports.push(Port {
            addr: args.admin,
            flag: "--admin",
            what: "admin API",
            udp: false,
        });
    }
    if args.deposits.eth1_endpoint.is_none() {
        ports.push(Port {
            addr: args.deposits.dev_contract_listen,
            flag: "--dev-contract-listen",
            what: "the hosted dev deposit contract",
            udp: false,
        });
    }
    let mut taken = Vec::new();
    for port in ports.iter().filter(|p| p.addr.port() != 0) {
        let bound = if port.udp {
            std::net::UdpSocket::bind(port.addr).map(drop)
        } else {
            std::net::TcpListener::bind(port.addr).map(drop)
        };
        match bound {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => taken.push(port),
            // Anything else (an address not on this machine, no permission) is reported by
            // the bind that matters, with its own reason.
            Err(_) => {}
        }
    }
    if taken.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = taken
        .iter()
        .map(|p| format!("{} ({}, {})", p.addr, p.what, p.flag))
        .collect();
    let mut advice: Vec<String> = taken
        .iter()
        .map(|p| format!("{} {}", p.flag, SocketAddr::new(p.addr.ip(), 0)))
        .collect();
    advice.sort();
    let follow = taken
        .iter()
        .find(|p| p.flag == "--dev-contract-listen")
        .map(|p| {
            format!(
                ", or instead of hosting a dev contract follow that node's with \
                 --eth1-endpoint http://{}",
                p.addr
            )
        })
        .unwrap_or_default();
    anyhow::bail!(
        "already in use, probably by another modnode on this machine: {}; give this node free \
         ones, e.g. {} (0: any free port){follow}",
        list.join(", "),
        advice.join(" "),
    )
}

/// `modnode run`: runs the node until Ctrl-C or SIGTERM, then stops it cleanly.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    // Before anything opens a store: a second process on this directory fails here, at once.
    let _lock = DataDirLock::acquire(&args.data_dir)?;
    refuse_taken_ports(&args)?;
    if let Some(file) = &args.config {
        tracing::info!(
            file = %file.display(),
            "configuration read; flags on the command line override it (`modnode config show` \
             lists every value and where it came from)"
        );
    }
    let mut config = NodeConfig::new(args.data_dir.clone(), genesis(args.genesis.as_ref())?);
    config.listen = args.listen;
    config.bootstrap = args.bootstrap;
    config.trusted_ips = args.trusted_addr;
    config.admin_listen = (!args.no_admin).then_some(args.admin);
    config.admin_public = args.admin_public;
    config.upload.max_module_bytes = args.max_module_bytes;
    // Uploads compile in a child process (this binary), killed at the compile deadline.
    config.upload.compile_program = Some(std::env::current_exe()?);
    config.admin.max_module_bytes = args.max_module_bytes;
    config.gossip_policy = args.gossip_policy;
    config.produce = !args.no_produce;
    config.state_cache.max_bytes = args.state_cache_max_bytes;
    config.history = match args.history {
        HistoryArg::Day => None,
        HistoryArg::Given(history) => Some(history),
    };
    config.checkpoint.interval = args.checkpoint_interval;
    config.checkpoint.keep = usize::from(args.checkpoint_keep);
    config.checkpoint.create_version = args.checkpoint_create_version;
    config.deposits = args.deposits.config();
    config.sync_mode = args.sync.into();
    config.restore_from = args.restore_from.clone();
    config.peer_exchange = !args.no_peer_exchange;
    config.label = args.node_label.clone();
    config.status_every =
        (args.status_every > 0).then(|| std::time::Duration::from_secs(args.status_every));
    if args.clock_skew_ms != 0 {
        modnode::clock::set_clock_skew_ms(args.clock_skew_ms);
        tracing::warn!(
            skew_ms = args.clock_skew_ms,
            "this node's clock is skewed on purpose (--clock-skew-ms)"
        );
    }
    // A bar only where someone watches it: logs, CI and tests get the plain progress line.
    if std::io::stderr().is_terminal() {
        config.restore_progress = node::ProgressDisplay::Bar;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let ran = rt.block_on(async {
        let mut signals =
            super::ShutdownSignals::install().context("cannot listen for SIGINT/SIGTERM")?;
        // A signal is honoured at any phase, a checkpoint restore that waits for peers
        // included: dropping the start stops it at its next await, and the restore resumes
        // from its stored, verified chunks on the next run.
        let node = tokio::select! {
            started = Node::start(config) => started
                .with_context(|| format!("cannot start the node in {}", args.data_dir.display()))?,
            signal = signals.wait() => {
                tracing::info!(signal, "stopping before the node finished starting");
                return anyhow::Ok(());
            }
        };
        tracing::info!(
            peer_addr = %node.peer_addr().map(|a| a.to_string()).unwrap_or_default(),
            "node running; give the peer address to other nodes' --bootstrap; Ctrl-C stops it"
        );
        let signal = signals.wait().await;
        tracing::info!(signal, "stopping");
        node.shutdown().await;
        anyhow::Ok(())
    });
    // Work a cancelled start left behind (a dial, a module compile) gets a bounded time to end.
    rt.shutdown_timeout(std::time::Duration::from_secs(10));
    ran?;
    let chain_dir = args.data_dir.join("chain");
    if chain_dir.join("db").exists() {
        let started = std::time::Instant::now();
        match modnode::store::SledStore::write_recovery_snapshot(
            &chain_dir,
            std::time::Duration::from_secs(10),
        ) {
            Ok(()) => tracing::info!(
                ms = started.elapsed().as_millis(),
                "store snapshot written: the next start opens without replaying this run"
            ),
            Err(e) => tracing::warn!(error = %e, "the next start replays this run's store log"),
        }
    }
    tracing::info!("stopped cleanly");
    Ok(())
}

/// `modnode debug import-loop`: imports generated dev blocks as fast as possible, printing
/// `imported <height> <state root>` after each durable commit (crash tests kill it at random).
/// With `upgrade_at`, the loop's blocks vote deposits-v1 in at that height (the dev chain has no
/// authorities, so the vote is the majority) unless the schedule already has it. With
/// `history`, one pruning batch of [`IMPORT_LOOP_PRUNE_HEIGHTS`] runs after each import and
/// `pruned <floor>` is printed after it commits.
pub fn import_loop(
    data_dir: &Path,
    blocks: u64,
    upgrade_at: Option<u64>,
    history: Option<History>,
) -> anyhow::Result<()> {
    let mut chain = node::open_chain(data_dir, Genesis::dev())?;
    if let Some(height) = upgrade_at {
        let bytes = modnode::artifacts::embedded("deposits-v1")
            .ok_or_else(|| anyhow::anyhow!("deposits-v1 is not embedded in this build"))?;
        let op = modnode::state::UpgradeOp {
            kind: modnode::runtime::Kind::Deposits,
            module: modnode::hashes::ModuleHash(sha2::Sha256::digest(bytes).into()),
            height,
        };
        if !chain.schedule().entries.contains(&op) {
            chain
                .propose_upgrade(op)
                .with_context(|| format!("cannot schedule deposits-v1 at height {height}"))?;
        }
    }
    let existing: Vec<[u8; 48]> = chain
        .genesis()
        .validators
        .iter()
        .map(|v| v.pubkey)
        .collect();
    let fork = chain.genesis().genesis_fork_version;
    // The deposits of blocks already imported (a restart after a crash), then one block's
    // worth per block: each block carries the deposits its vote makes due.
    let mut log = workload::DevDepositLog::new();
    for height in 1..=chain.head().height {
        for d in workload::dev_block(height, &existing, fork) {
            log.push(d);
        }
    }
    anyhow::ensure!(
        log.len() == chain.eth1_state().deposit_index,
        "the chain applied {} deposits, the dev workload replays {}",
        chain.eth1_state().deposit_index,
        log.len()
    );
    let mut out = std::io::stdout().lock();
    for _ in 0..blocks {
        let head = chain.head();
        let height = head.height.saturating_add(1);
        for d in workload::dev_block(height, &existing, fork) {
            log.push(d);
        }
        let block =
            chain.build_block_from(head.slot.saturating_add(1), 0, log.eth1_data(), &log)?;
        let imported = chain.import(&block)?;
        writeln!(
            out,
            "imported {} {}",
            imported.head.height,
            hex::encode(imported.head.state_root)
        )?;
        if let Some(history) = history {
            chain.pruner(history).step(IMPORT_LOOP_PRUNE_HEIGHTS)?;
            writeln!(out, "pruned {}", chain.served_from())?;
        }
        out.flush()?;
    }
    Ok(())
}

/// Heights of each kind one pruning batch of the import loop deletes at most: small, so a
/// kill often lands with pruning behind and going on.
const IMPORT_LOOP_PRUNE_HEIGHTS: u64 = 8;
