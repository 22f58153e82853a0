//! `modnode testnet …`: networks of separate `modnode run` processes.
//!
//! `modnode testnet init` writes a network's genesis and node keys for N machines and prints
//! each machine's exact command line (the library's [`modnode::testnet::network`]).
//! `modnode testnet run <manifest.toml> [--out DIR]` runs a multi-process testnet under faults,
//! described by a manifest; prints progress lines, writes `report.json` and
//! `timeline.png` into the output directory and exits non-zero on any violation.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use modnode::testnet::manifest::Manifest;
use modnode::testnet::network::{NetworkSpec, init_network};
use modnode::testnet::runner::{self, RunOptions};

/// `modnode testnet` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum TestnetCommand {
    /// Write a network's genesis and each node's key into DIR/node-i and print each machine's
    /// `modnode run` command line.
    Init(InitArgs),
    /// Run a manifest: N `modnode run` processes behind a fault-injecting relay, perturbed;
    /// prints progress, writes report.json and timeline.png, exits non-zero on a violation.
    Run(RunArgs),
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
        TestnetCommand::Run(args) => run(args),
    }
}

fn init(args: InitArgs) -> anyhow::Result<()> {
    let start = modnode::clock::unix_ms().saturating_add(args.start_in_secs.saturating_mul(1_000));
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

/// Options of `modnode testnet run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The testnet manifest (TOML; see `examples/testnet/`).
    pub manifest: PathBuf,
    /// Output directory: node data, logs, genesis, report (default: a new temporary one).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs the manifest; an error when the run found violations or did not converge.
fn run(args: RunArgs) -> anyhow::Result<()> {
    let manifest = Manifest::load(&args.manifest)?;
    let out = match args.out {
        Some(dir) => dir,
        None => tempfile::Builder::new()
            .prefix("modnode-testnet-")
            .tempdir()
            .context("cannot create an output directory")?
            .keep(),
    };
    let binary = std::env::current_exe().context("cannot find the modnode binary")?;
    eprintln!(
        "testnet {}: {} nodes ({} authorities), {} s, seed {}; output in {}",
        manifest.name,
        manifest.nodes,
        manifest.authorities,
        manifest.duration_s,
        manifest.seed,
        out.display()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = rt.block_on(async {
        let mut signals =
            super::ShutdownSignals::install().context("cannot install the signal handlers")?;
        let options = RunOptions {
            binary,
            out_dir: out.clone(),
            progress: true,
        };
        // Stopped early, the run is dropped: that kills every node it started (none outlives
        // the runner), and no report is written.
        tokio::select! {
            outcome = runner::run(manifest, options) => Ok(outcome?),
            signal = signals.wait() => Err(anyhow::anyhow!(
                "{signal}: the run stopped early and killed its nodes; no report was written \
                 (their logs and data are in {})",
                out.display()
            )),
        }
    })?;
    println!("report: {}", outcome.report_json.display());
    println!("timeline: {}", outcome.report_png.display());
    for v in &outcome.violations {
        println!("violation: {v}");
    }
    let ok = outcome.violations.is_empty() && outcome.converged;
    println!(
        "{}: {} violations, converged {} ({} ms after the last heal), {} deposits accepted",
        if ok { "PASS" } else { "FAIL" },
        outcome.violations.len(),
        outcome.converged,
        outcome.converge_ms.map_or("-".into(), |ms| ms.to_string()),
        outcome.deposits_accepted
    );
    anyhow::ensure!(
        ok,
        "the testnet run failed: {} violations, converged: {} (see {})",
        outcome.violations.len(),
        outcome.converged,
        outcome.report_json.display()
    );
    Ok(())
}
