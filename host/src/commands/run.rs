//! `modnode run`: one node (the embedded single-node dev chain unless a genesis file is given),
//! and the hidden `modnode debug import-loop` the crash tests drive.

use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use modnode::chain::genesis::Genesis;
use modnode::chain::workload;
use modnode::node::{self, Node, NodeConfig};
use modnode_peers::PeerAddr;

/// Options of `modnode run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
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
    /// Create a checkpoint every this many blocks (0: only on demand, `modnode checkpoint
    /// create`).
    #[arg(long, default_value_t = 100)]
    pub checkpoint_interval: u64,
    /// Checkpoints kept (the newest).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    pub checkpoint_keep: u16,
    /// Checkpoint module version that creates checkpoints (`checkpoint-v<N>`; can be switched
    /// live through the module slot).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=2))]
    pub checkpoint_create_version: u32,
}

/// Reads the genesis file, or the embedded dev genesis.
pub fn genesis(path: Option<&PathBuf>) -> anyhow::Result<Genesis> {
    Ok(match path {
        Some(path) => Genesis::from_file(path)?,
        None => Genesis::dev(),
    })
}

/// `modnode run`: runs the node until Ctrl-C or SIGTERM, then stops it cleanly.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut config = NodeConfig::new(args.data_dir.clone(), genesis(args.genesis.as_ref())?);
    config.listen = args.listen;
    config.bootstrap = args.bootstrap;
    config.trusted_ips = args.trusted_addr;
    config.admin_listen = (!args.no_admin).then_some(args.admin);
    config.admin_public = args.admin_public;
    config.upload.max_module_bytes = args.max_module_bytes;
    config.admin.max_module_bytes = args.max_module_bytes;
    config.gossip_policy = args.gossip_policy;
    config.produce = !args.no_produce;
    config.checkpoint.interval = args.checkpoint_interval;
    config.checkpoint.keep = usize::from(args.checkpoint_keep);
    config.checkpoint.create_version = args.checkpoint_create_version;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut signals =
            super::ShutdownSignals::install().context("cannot listen for SIGINT/SIGTERM")?;
        let node = Node::start(config)
            .await
            .with_context(|| format!("cannot start the node in {}", args.data_dir.display()))?;
        tracing::info!(
            peer_addr = %node.peer_addr().map(|a| a.to_string()).unwrap_or_default(),
            "node running; give the peer address to other nodes' --bootstrap; Ctrl-C stops it"
        );
        let signal = signals.wait().await;
        tracing::info!(signal, "stopping");
        node.shutdown().await;
        anyhow::Ok(())
    })?;
    tracing::info!("stopped cleanly");
    Ok(())
}

/// `modnode debug import-loop`: imports generated dev blocks as fast as possible, printing
/// `imported <height> <state root>` after each durable commit (crash tests kill it at random).
pub fn import_loop(data_dir: &Path, blocks: u64) -> anyhow::Result<()> {
    let mut chain = node::open_chain(data_dir, Genesis::dev())?;
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
        out.flush()?;
    }
    Ok(())
}
