//! The command line: every subcommand and its arguments (clap).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::commands;

/// modnode: a blockchain node whose algorithms are WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "modnode", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a node (on its embedded defaults: a single-node dev chain, default modules).
    // Boxed: `run` has many more flags than any other command (clippy::large_enum_variant).
    Run(Box<commands::run::RunArgs>),
    /// The config file of `modnode run` (`modnode.toml`).
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Start N nodes on loopback with a live status table; Ctrl-C stops them.
    Devnet(commands::devnet::DevnetArgs),
    /// Deposits.
    #[command(subcommand)]
    Deposit(DepositCommand),
    /// Work with module components.
    #[command(subcommand)]
    Module(ModuleCommand),
    /// Checkpoints of a running node's state.
    #[command(subcommand)]
    Checkpoint(CheckpointCommand),
    /// Run two versions of a module side by side; exit non-zero on divergence or fuel regression.
    UpgradeCheck(commands::upgrade_check::UpgradeCheckArgs),
    /// Measure the node (`--json` for machines).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Networks of separate `modnode run` processes.
    #[command(subcommand)]
    Testnet(commands::testnet::TestnetCommand),
    /// Tools for tests and debugging.
    #[command(subcommand, hide = true)]
    Debug(DebugCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum CheckpointCommand {
    /// Create a checkpoint of the finalized state now (answers once it is stored).
    Create {
        #[command(flatten)]
        node: commands::module::NodeArgs,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// List the node's stored checkpoints, newest first.
    List {
        #[command(flatten)]
        node: commands::module::NodeArgs,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Write a stored checkpoint of a stopped node to one file (with its block), for `modnode
    /// run --restore-from FILE` on another machine or after a failed upgrade.
    Export(commands::checkpoint::ExportArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the effective configuration of `modnode run` with these flags (and `--config
    /// FILE`), each value with where it came from: flag, file:line or default.
    Show(commands::config::ShowArgs),
    /// Write a commented default config file.
    Init(commands::config::InitArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum DepositCommand {
    /// Submit a deposit to a running node through its admin API.
    Submit(commands::deposit::SubmitArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum DebugCommand {
    /// Import generated dev blocks as fast as possible, printing each durable head.
    ImportLoop {
        /// Data directory.
        #[arg(long)]
        data_dir: PathBuf,
        /// Blocks to import before exiting.
        #[arg(long, default_value_t = u64::MAX)]
        blocks: u64,
        /// Schedule the embedded deposits-v1 at this height (the chain starts on deposits-v2),
        /// so crash tests can kill the loop around an activation.
        #[arg(long)]
        upgrade_at: Option<u64>,
        /// Prune keeping this many blocks (or `full`): one small pruning batch after each
        /// import, so crash tests can kill the loop mid-pruning.
        #[arg(long, value_parser = modnode::chain::prune::History::parse)]
        history: Option<modnode::chain::prune::History>,
    },
    /// Compile a component for this build's engine (the node runs this in a child process so a
    /// compile past its deadline can be killed). Exits 3 when the module does not compile.
    CompileModule {
        /// The component.
        #[arg(long)]
        input: PathBuf,
        /// Where to write the compiled artifact.
        #[arg(long)]
        output: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum ModuleCommand {
    /// Print a module's kind, contract version, module version, hash, size, imports and exports.
    Inspect {
        /// The component file.
        file: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Upload a module to a running node, which validates, compiles and warms it and answers
    /// once it is ready (uploading the same bytes again is a no-op).
    Upload {
        /// The component file.
        file: PathBuf,
        /// Which node.
        #[command(flatten)]
        node: commands::module::NodeArgs,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// List a running node's modules: per kind the active one and every stored version.
    List {
        /// Which node.
        #[command(flatten)]
        node: commands::module::NodeArgs,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Make a running authority's blocks vote to switch a consensus kind to a stored, ready
    /// module at a height; it is scheduled once a majority of the authorities voted for the same
    /// (kind, module, height) more than the genesis lead before that height.
    Propose {
        /// The module's sha256 (hex), as `module upload` or `module list` prints it.
        sha256: String,
        /// The consensus kind.
        #[arg(long, default_value = "deposits")]
        kind: String,
        /// The first height that runs the module.
        #[arg(long)]
        activate_at: u64,
        /// Which node.
        #[command(flatten)]
        node: commands::module::NodeArgs,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Make a running authority's blocks vote to cancel a scheduled consensus upgrade. A strict
    /// majority of the authorities, voting more than the genesis lead before the height,
    /// removes it (Solana's RevokePendingActivation, Cosmos' cancel-upgrade).
    Revoke {
        /// The scheduled module's sha256 (hex).
        sha256: String,
        /// The consensus kind.
        #[arg(long, default_value = "deposits")]
        kind: String,
        /// The scheduled activation height.
        #[arg(long)]
        height: u64,
        /// Which node.
        #[command(flatten)]
        node: commands::module::NodeArgs,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Put an uploaded (or built-in) module of a local kind into service on a running node:
    /// live at once (the current version is kept as `previous`), as a shadow (runs on the same
    /// inputs, divergences counted, no effect) or as a canary (a share of calls). Consensus
    /// kinds (deposits) are refused: they switch at a height agreed on chain.
    Activate {
        /// The module's sha256 (64 hex digits, as `module upload` and `module list` print it).
        hash: String,
        /// Run it as a shadow beside the active version.
        #[arg(long, conflicts_with = "canary")]
        shadow: bool,
        /// Let it serve this percentage (1-100) of calls.
        #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(1..=100))]
        canary: Option<u8>,
        /// Which node.
        #[command(flatten)]
        node: commands::module::NodeArgs,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Return a local kind (e.g. `gossip-policy`) to its previous version at once.
    Rollback {
        /// The kind.
        kind: modnode::runtime::Kind,
        /// Which node.
        #[command(flatten)]
        node: commands::module::NodeArgs,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Stop a local kind's shadow or canary; the active version keeps serving.
    Cancel {
        /// The kind.
        kind: modnode::runtime::Kind,
        /// Which node.
        #[command(flatten)]
        node: commands::module::NodeArgs,
        /// Print the node's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Turn a core wasm module built with wit-bindgen into a component.
    Componentize {
        /// The core module (`target/wasm32-unknown-unknown/<profile>/<crate>.wasm`).
        core: PathBuf,
        /// Where to write the component.
        #[arg(short, long)]
        output: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum BenchCommand {
    /// Runtime fixed costs: host call, instantiation, compile vs cached load.
    HostCall {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Host calls per timed run.
        #[arg(long, default_value_t = 200_000)]
        calls: u64,
    },
    /// Gossip over real QUIC on loopback: flood vs v2, then v2 with 25% slow nodes.
    Gossip {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Nodes.
        #[arg(long, default_value_t = 32)]
        nodes: usize,
        /// Neighbours per node (at most).
        #[arg(long, default_value_t = 8)]
        degree: usize,
        /// Topology and traffic seed.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Runs of each scenario; medians are reported.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=20))]
        repeat: u16,
    },
    /// The deterministic gossip simulator at scale: flood (gossip-policy-v1) and
    /// gossip-policy-v2 run as wasm modules, next to a gossipsub v1.2 model; 1 KiB and
    /// 100 KiB messages, with and without 10 % churn.
    GossipSim {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Nodes.
        #[arg(long, default_value_t = 1_000)]
        nodes: usize,
        /// Connections per node (at most).
        #[arg(long, default_value_t = 16)]
        degree: usize,
        /// Seed of topology, latencies, traffic and churn.
        #[arg(long, default_value_t = 7)]
        seed: u64,
        /// Messages published per run.
        #[arg(long, default_value_t = 20)]
        messages: usize,
    },
    /// Deposit processing through deposits-v1, -v2 and native against a large registry.
    Deposits {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Validators in the registry.
        #[arg(long, default_value_t = 2_000_000)]
        validators: u32,
        /// Deposits per scenario (processed in blocks of 16).
        #[arg(long, default_value_t = 4_000)]
        deposits: usize,
        /// Timed runs per block; the fastest counts (the machine is noisy).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
    },
    /// deposits@3 (Electra's pending-deposit queue): epoch transitions with a long and a
    /// short queue (BLS apart), block import under deposits-v2 and -v3, the switch between
    /// them, and a state snapshot holding the long queue.
    DepositsV3 {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Validators in the registry.
        #[arg(long, default_value_t = 2_000_000)]
        validators: u32,
        /// Entries of the long queue (reported as `queue_1m`).
        #[arg(long, default_value_t = 1_000_000)]
        queue_large: u64,
        /// Entries of the short queue (reported as `queue_1k`).
        #[arg(long, default_value_t = 1_000)]
        queue_small: u64,
        /// Epoch transitions timed per queue (16 deposits applied in each).
        #[arg(long, default_value_t = 200)]
        epochs: usize,
        /// Blocks (of 16 deposits) timed before and after the switch each.
        #[arg(long, default_value_t = 400)]
        blocks: usize,
    },
    /// A deposits version switch through the on-chain schedule under block import: prepared
    /// ahead (as the upgrade agent does) vs compiled on first use at the height.
    Swap {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Validators in the registry.
        #[arg(long, default_value_t = 200_000)]
        validators: u32,
        /// Blocks (of 16 deposits) before and after the switch.
        #[arg(long, default_value_t = 50)]
        blocks: usize,
    },
    /// The state cache under deposit-heavy import, state reads and side branches, with a
    /// generous and a tight budget.
    StateCache {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Validators in the registry.
        #[arg(long, default_value_t = 2_000_000)]
        validators: u32,
        /// Blocks (of 16 new-validator deposits) imported per run.
        #[arg(long, default_value_t = 250)]
        blocks: usize,
        /// The generous budget, MiB.
        #[arg(long, default_value_t = 2048)]
        generous_mb: u64,
        /// The tight budget (below the working set), MiB.
        #[arg(long, default_value_t = 32)]
        tight_mb: u64,
        /// Where the chains keep blocks and registry.
        #[arg(long, value_enum, default_value_t = crate::bench::state_cache::StoreKind::Sled)]
        store: crate::bench::state_cache::StoreKind,
    },
    /// Block import on sled with and without the background pruner: import p50/p99 and the
    /// data dir's bytes on disk.
    Prune {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Validators at genesis.
        #[arg(long, default_value_t = 1_000)]
        validators: u32,
        /// Blocks (with deposits) imported per run.
        #[arg(long, default_value_t = 2_000)]
        blocks: u64,
        /// Blocks the pruned run keeps (`--history`).
        #[arg(long, default_value_t = 256)]
        window: u64,
        /// Runs of each kind (without and with pruning, alternating); medians are compared.
        #[arg(long, default_value_t = 5)]
        reps: u32,
        /// Only the pruned runs (for long runs where only the pruned store's disk and reopen
        /// matter: no ratios against unpruned runs are reported).
        #[arg(long)]
        pruned_only: bool,
    },
    /// Checkpoint creation and restore with checkpoint-v1 and -v2 against the read-hash floor.
    Checkpoint {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Validators in the state.
        #[arg(long, default_value_t = 2_000_000)]
        validators: u32,
        /// Target chunk size passed to the modules' planners.
        #[arg(long, default_value_t = 1 << 20)]
        target_chunk_bytes: u64,
        /// Blocks imported idle and again during creation (alternating in rounds of 20); p99
        /// of fewer than ~100 is about the slowest one.
        #[arg(long, default_value_t = 200)]
        import_blocks: usize,
    },
}
