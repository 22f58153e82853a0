//! `modnode devnet --nodes N`: N nodes on loopback in one process, the first K of them
//! authorities, with a live status table; Ctrl-C stops every node cleanly.
//!
//! The directory keeps one data directory per node and the shared `genesis.json`, so running
//! the same command again restarts the same network where it stopped.

use std::io::{IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use modnode::chain::genesis::Genesis;
use modnode::net::identity::NodeIdentity;
use modnode::node::{DepositSourceConfig, Node, NodeConfig, NodeStatus};

/// Options of `modnode devnet`.
#[derive(Debug, clap::Args)]
pub struct DevnetArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub nodes: u16,
    /// How many of them (the first ones) produce blocks.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub authorities: u16,
    /// Directory for the nodes' data and the genesis file (reused if it exists).
    #[arg(long, default_value = "modnode-devnet")]
    pub dir: PathBuf,
    /// Slot length in milliseconds (new networks only).
    #[arg(long, default_value_t = 2_000)]
    pub slot_ms: u64,
    /// Time between the dev deposit contract's blocks, in ms (new networks only).
    #[arg(long, default_value_t = 1_000)]
    pub dev_block_ms: u64,
    /// Slots per epoch (new networks only): a deposits@3 module drains its pending-deposit
    /// queue on the first block of each epoch. Without it the chain has no epoch transitions.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub slots_per_epoch: Option<u64>,
    /// Blocks below the head that are final (new networks only); deposits@3 applies a queued
    /// deposit only once the block that carried it is final. Default: the genesis default (32).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub finality_depth: Option<u64>,
}

/// What a new devnet's genesis says beyond its authorities.
#[derive(Debug, Clone, Copy)]
pub struct GenesisOptions {
    /// Slot length in milliseconds.
    pub slot_ms: u64,
    /// Slots per epoch, if the chain has epochs.
    pub slots_per_epoch: Option<u64>,
    /// Finality depth in blocks, if not the default.
    pub finality_depth: Option<u64>,
}

/// The genesis of the devnet in `dir`: read back if it exists, otherwise written with the
/// first `authorities` node ids, `options` and slot 0 starting shortly.
pub fn genesis(
    dir: &Path,
    ids: &[String],
    authorities: usize,
    options: GenesisOptions,
) -> anyhow::Result<Genesis> {
    let path = dir.join("genesis.json");
    if path.exists() {
        let genesis = Genesis::from_file(&path)?;
        let expected: Vec<String> = ids.iter().take(authorities).cloned().collect();
        let found: Vec<String> = genesis.authorities.iter().map(hex::encode).collect();
        anyhow::ensure!(
            found == expected,
            "{} names other authorities than the first {authorities} nodes in {}; use another --dir",
            path.display(),
            dir.display()
        );
        return Ok(genesis);
    }
    let start = modnode::clock::unix_ms().saturating_add(1_000);
    let mut json = serde_json::Map::new();
    json.insert("chain_id".into(), "modnode-devnet".into());
    json.insert("genesis_time_ms".into(), start.into());
    json.insert("slot_ms".into(), options.slot_ms.into());
    let ids: Vec<&String> = ids.iter().take(authorities).collect();
    json.insert("authorities".into(), serde_json::json!(ids));
    json.insert(
        "generated_validators".into(),
        serde_json::json!({ "count": 64, "seed": 1 }),
    );
    if let Some(slots) = options.slots_per_epoch {
        json.insert("slots_per_epoch".into(), slots.into());
    }
    if let Some(depth) = options.finality_depth {
        json.insert("finality_depth".into(), depth.into());
    }
    let text = serde_json::to_string_pretty(&json)?;
    let genesis = Genesis::from_json(&text, &path.display().to_string())?;
    let tmp = dir.join("genesis.json.tmp");
    std::fs::write(&tmp, &text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(genesis)
}

/// Starts the nodes, shows the table until Ctrl-C, stops them.
pub fn devnet(args: DevnetArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.authorities <= args.nodes,
        "--authorities {} is more than --nodes {}",
        args.authorities,
        args.nodes
    );
    let dirs: Vec<PathBuf> = (0..args.nodes)
        .map(|i| args.dir.join(format!("node-{i}")))
        .collect();
    let mut ids = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        // The node's label (`NodeConfig::label`) already on the key it creates.
        let _node = tracing::info_span!("node", label = %format!("n{i}")).entered();
        ids.push(NodeIdentity::load_or_create(dir)?.node_id().to_string());
    }
    let options = GenesisOptions {
        slot_ms: args.slot_ms,
        slots_per_epoch: args.slots_per_epoch,
        finality_depth: args.finality_depth,
    };
    let genesis = genesis(&args.dir, &ids, usize::from(args.authorities), options)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        // Before the first node starts: a stop request during startup is honoured afterwards.
        let mut signals =
            super::ShutdownSignals::install().context("cannot listen for SIGINT/SIGTERM")?;
        let mut nodes: Vec<Node> = Vec::new();
        let mut contract_url = String::new();
        for (i, dir) in dirs.iter().enumerate() {
            let mut config = NodeConfig::new(dir.clone(), genesis.clone());
            // Node 0 hosts the dev deposit contract; the other authorities follow it over
            // JSON-RPC on loopback; the rest need no deposit source.
            config.deposits = if i == 0 {
                let mut deposits = DepositSourceConfig::dev(SocketAddr::from(([127, 0, 0, 1], 0)));
                if let Some(dev) = deposits.host_dev_contract.as_mut() {
                    dev.block_ms = args.dev_block_ms;
                }
                deposits
            } else {
                DepositSourceConfig::follow_dev(contract_url.clone())
            };
            // Every log line names its node as the status table does: `n0` is row 0.
            config.label = Some(format!("n{i}"));
            config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
            config.admin_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
            // Each node knows the one started before it; peer exchange finds the rest.
            config.bootstrap = nodes
                .last()
                .map(Node::peer_addr)
                .transpose()?
                .into_iter()
                .collect();
            let node = Node::start(config)
                .await
                .with_context(|| format!("cannot start the node in {}", dir.display()))?;
            if let Some(url) = node.deposit_contract_url() {
                contract_url = url.to_string();
            }
            nodes.push(node);
        }
        eprintln!(
            "devnet: {} nodes, {} authorities, slot {} ms, data in {}; dev deposit contract at {} \
             (modnode deposit submit --data-dir {}); Ctrl-C stops it",
            args.nodes,
            args.authorities,
            genesis.slot_ms,
            args.dir.display(),
            contract_url,
            dirs.first()
                .map(|d| d.display().to_string())
                .unwrap_or_default()
        );
        let live = std::io::stdout().is_terminal();
        let mut ticker = tokio::time::interval(Duration::from_secs(if live { 1 } else { 5 }));
        loop {
            tokio::select! {
                signal = signals.wait() => {
                    eprintln!("{signal}: stopping");
                    break;
                }
                _ = ticker.tick() => {
                    let statuses: Vec<NodeStatus> = nodes.iter().map(Node::status).collect();
                    let mut out = std::io::stdout().lock();
                    if live {
                        let _ = write!(out, "\x1b[H\x1b[2J");
                    }
                    let _ = write!(out, "{}", table(&statuses, usize::from(args.authorities)));
                    let _ = out.flush();
                }
            }
        }
        eprintln!("stopping {} nodes …", nodes.len());
        // Concurrently: each node spends up to two seconds letting its peers learn it closed.
        let stopping: Vec<_> = nodes
            .into_iter()
            .map(|n| tokio::spawn(n.shutdown()))
            .collect();
        for node in stopping {
            node.await.context("a node's shutdown task failed")?;
        }
        anyhow::Ok(())
    })?;
    eprintln!("devnet stopped cleanly");
    Ok(())
}

/// The status table: node, role, height, peers, validators, last block age.
pub fn table(statuses: &[NodeStatus], authorities: usize) -> String {
    let now = modnode::clock::unix_ms();
    let mut out = format!(
        "{:<5} {:<10} {:<9} {:>7} {:>6} {:>10} {:>16} {:>8}\n",
        "node", "id", "role", "height", "peers", "validators", "last block", "deposits"
    );
    for (i, s) in statuses.iter().enumerate() {
        let age = match s.last_block_unix_ms {
            0 => "-".to_string(),
            t => format!(
                "{:.1} s ago",
                Duration::from_millis(now.saturating_sub(t)).as_secs_f64()
            ),
        };
        let role = if i < authorities {
            "authority"
        } else if s.syncing {
            "syncing"
        } else {
            "follower"
        };
        out.push_str(&format!(
            "{:<5} {:<10} {:<9} {:>7} {:>6} {:>10} {:>16} {:>8}\n",
            i,
            s.node_id.get(..8).unwrap_or_default(),
            role,
            s.height,
            s.peers,
            s.validators,
            age,
            s.deposit_index
        ));
    }
    out
}
