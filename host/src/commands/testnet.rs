//! `modnode testnet …`: networks of separate `modnode run` processes.
//!
//! `modnode testnet init` writes a network's genesis and node keys for N machines and prints
//! each machine's exact command line (the library's [`modnode::testnet::network`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use modnode::testnet::network::{NetworkSpec, init_network};

/// `modnode testnet` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TestnetCommand {
    /// Write a network's genesis and each node's key into DIR/node-i and print each machine's
    /// `modnode run` command line.
    Init(InitArgs),
}

/// Options of `modnode testnet init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// Number of nodes.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub nodes: u16,
    /// How many of them (the first ones) produce blocks.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub authorities: u16,
    /// Directory for the genesis and one directory per node (must not hold a network yet).
    #[arg(long)]
    pub dir: PathBuf,
    /// The IP of node i's machine, as `i=IP` (default 127.0.0.1: every node on this machine);
    /// repeat for more.
    #[arg(long = "host-of", value_name = "i=IP", value_parser = parse_host_of)]
    pub host_of: Vec<(usize, IpAddr)>,
    /// Node 0's peer port; node i takes `base + 10 i` (peers, UDP), the next one (admin API,
    /// loopback) and node 0 also the one after (dev deposit contract).
    #[arg(long, default_value_t = 9400)]
    pub base_port: u16,
    /// Slot length in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    pub slot_ms: u64,
    /// Chain id written into the genesis.
    #[arg(long, default_value = "modnode-testnet")]
    pub chain_id: String,
    /// Seconds from now until slot 0 (time to copy the directories and start the nodes; a
    /// node started later simply begins at the current slot).
    #[arg(long, default_value_t = 10)]
    pub start_in_secs: u64,
    /// Print the plans as one JSON array instead of command lines.
    #[arg(long)]
    pub json: bool,
}

fn parse_host_of(text: &str) -> Result<(usize, IpAddr), String> {
    let (node, ip) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not i=IP (e.g. 1=10.0.0.2)"))?;
    let node = node
        .parse()
        .map_err(|e| format!("`{node}` is not a node index: {e}"))?;
    let ip = ip
        .parse()
        .map_err(|e| format!("`{ip}` is not an IP: {e}"))?;
    Ok((node, ip))
}

/// Runs a `modnode testnet` subcommand.
pub fn testnet(command: TestnetCommand) -> anyhow::Result<()> {
    match command {
        TestnetCommand::Init(args) => init(args),
    }
}

fn init(args: InitArgs) -> anyhow::Result<()> {
    let start = modnode::node::chain_worker::unix_ms()
        .saturating_add(args.start_in_secs.saturating_mul(1_000));
    let spec = NetworkSpec {
        nodes: usize::from(args.nodes),
        authorities: usize::from(args.authorities),
        dir: args.dir.clone(),
        hosts: args.host_of.iter().copied().collect::<BTreeMap<_, _>>(),
        base_port: args.base_port,
        slot_ms: args.slot_ms,
        chain_id: args.chain_id,
        genesis_time_ms: start,
    };
    let plans = init_network(&spec)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plans)?);
        return Ok(());
    }
    println!(
        "# {} nodes, {} authorities, genesis {}. Copy DIR/node-i to node i's machine and run its \
         line there (any order; every node dials all the others).",
        spec.nodes,
        spec.authorities,
        spec.dir.join("genesis.json").display()
    );
    for plan in &plans {
        let role = match (plan.authority, plan.dev_contract.is_some()) {
            (true, true) => "authority, hosts the dev deposit contract",
            (true, false) => "authority, follows node 0's deposit contract",
            (false, _) => "follower",
        };
        println!("# node {} ({role}) on {}", plan.index, plan.listen.ip());
        println!("{}", plan.command_line("modnode"));
    }
    if let Some(first) = plans.first() {
        println!(
            "# deposits: modnode deposit submit --data-dir {} --genesis {} --dev-seed 1 (on node 0's machine)",
            first.data_dir.display(),
            first.genesis.display()
        );
    }
    Ok(())
}
