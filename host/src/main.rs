//! The `modnode` command: run a node, inspect and build modules, benchmark.
//!
//! `anyhow` lives here, at the edge; the library returns typed errors.

// The same rules as the library (see `lib.rs`), except for the benchmarks below.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]

// Benchmarks measure; they hold no consensus code. Their statistics (percentiles, rates,
// averages over sample vectors) index and divide freely, and a failed setup may panic, as in
// the tests.
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod bench;
mod cli;
mod commands;

use clap::Parser as _;

use cli::{
    BenchCommand, CheckpointCommand, Cli, Command, ConfigCommand, DebugCommand, DepositCommand,
    ModuleCommand,
};

fn main() -> std::process::ExitCode {
    modnode::alloc_stats::limit_arenas_to_cores();
    let cli = Cli::parse();
    // `run` reads its config file (which may set the log format) before logging starts.
    let command = match cli.command {
        Command::Run(args) if args.config.is_some() => {
            match commands::config::run_args_from_env() {
                Ok(args) => Command::Run(Box::new(args)),
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return std::process::ExitCode::from(2);
                }
            }
        }
        other => other,
    };
    let log_format = match &command {
        Command::Run(args) => args.log_format,
        _ => {
            // A command's output piped into `head` ends it quietly, like any Unix tool, instead
            // of panicking on a broken pipe. Not for `run`: a node outlives its log reader.
            commands::restore_default_sigpipe();
            commands::LogFormat::Text
        }
    };
    commands::init_logs(log_format);
    let result = match command {
        Command::Run(args) => commands::run::run(*args),
        Command::Config(ConfigCommand::Show(args)) => commands::config::show(args),
        Command::Config(ConfigCommand::Init(args)) => commands::config::init(args),
        Command::Devnet(args) => commands::devnet::devnet(args),
        Command::Testnet(command) => commands::testnet::testnet(command),
        Command::Deposit(DepositCommand::Submit(args)) => commands::deposit::submit(args),
        Command::Debug(DebugCommand::ImportLoop {
            data_dir,
            blocks,
            upgrade_at,
            history,
        }) => commands::run::import_loop(&data_dir, blocks, upgrade_at, history),
        Command::Debug(DebugCommand::CompileModule { input, output }) => {
            use modnode::modules_store::upload::compiler;
            match compiler::compile_file(&input, &output) {
                Ok(()) => Ok(()),
                Err(e @ compiler::CompileFileError::Compile(_)) => {
                    eprintln!("{e}");
                    std::process::exit(compiler::EXIT_MODULE_DOES_NOT_COMPILE);
                }
                Err(e) => Err(e.into()),
            }
        }
        Command::Module(ModuleCommand::Inspect { file, json }) => {
            commands::module::inspect(&file, json)
        }
        Command::Module(ModuleCommand::Upload { file, node, json }) => {
            commands::module::upload(&file, &node, json)
        }
        Command::Module(ModuleCommand::List { node, json }) => commands::module::list(&node, json),
        Command::Module(ModuleCommand::Propose {
            sha256,
            kind,
            activate_at,
            node,
            json,
        }) => commands::module::propose(&sha256, &kind, activate_at, &node, json),
        Command::Module(ModuleCommand::Revoke {
            sha256,
            kind,
            height,
            node,
            json,
        }) => commands::module::revoke(&sha256, &kind, height, &node, json),
        Command::Module(ModuleCommand::Activate {
            hash,
            shadow,
            canary,
            node,
            json,
        }) => {
            let mode = match (shadow, canary) {
                (true, _) => modnode::runtime::Mode::Shadow,
                (false, Some(percent)) => modnode::runtime::Mode::Canary(percent),
                (false, None) => modnode::runtime::Mode::Live,
            };
            commands::module::activate(&hash, mode, &node, json)
        }
        Command::Module(ModuleCommand::Rollback { kind, node, json }) => {
            commands::module::rollback(kind, &node, json)
        }
        Command::Module(ModuleCommand::Cancel { kind, node, json }) => {
            commands::module::cancel(kind, &node, json)
        }
        Command::Module(ModuleCommand::Componentize { core, output }) => {
            commands::module::componentize(&core, &output)
        }
        Command::Checkpoint(CheckpointCommand::Create { node, json }) => {
            commands::checkpoint::create(&node, json)
        }
        Command::Checkpoint(CheckpointCommand::List { node, json }) => {
            commands::checkpoint::list(&node, json)
        }
        Command::Checkpoint(CheckpointCommand::Export(args)) => commands::checkpoint::export(&args),
        Command::UpgradeCheck(args) => match commands::upgrade_check::upgrade_check(args) {
            Ok(true) => Ok(()),
            Ok(false) => return std::process::ExitCode::FAILURE,
            Err(e) => Err(e),
        },
        Command::Bench(BenchCommand::HostCall { json, calls }) => {
            commands::bench::host_call(json, calls)
        }
        Command::Bench(BenchCommand::Gossip {
            json,
            nodes,
            degree,
            seed,
            repeat,
        }) => commands::bench::gossip(json, nodes, degree, seed, usize::from(repeat)),
        Command::Bench(BenchCommand::GossipSim {
            json,
            nodes,
            degree,
            seed,
            messages,
        }) => commands::bench::gossip_sim(json, nodes, degree, seed, messages),
        Command::Bench(BenchCommand::Deposits {
            json,
            validators,
            deposits,
            repeat,
        }) => commands::bench::deposits(json, validators, deposits, repeat),
        Command::Bench(BenchCommand::DepositsV3 {
            json,
            validators,
            queue_large,
            queue_small,
            epochs,
            blocks,
        }) => commands::bench::deposits_v3(
            json,
            crate::bench::deposits_v3::Params {
                validators,
                queue_large,
                queue_small,
                epochs,
                blocks,
            },
        ),
        Command::Bench(BenchCommand::Swap {
            json,
            validators,
            blocks,
        }) => commands::bench::swap(json, validators, blocks),
        Command::Bench(BenchCommand::StateCache {
            json,
            validators,
            blocks,
            generous_mb,
            tight_mb,
            store,
        }) => commands::bench::state_cache(json, validators, blocks, generous_mb, tight_mb, store),
        Command::Bench(BenchCommand::Prune {
            json,
            validators,
            blocks,
            window,
            reps,
            pruned_only,
        }) => commands::bench::prune(json, validators, blocks, window, reps, pruned_only),
        Command::Bench(BenchCommand::Checkpoint {
            json,
            validators,
            target_chunk_bytes,
            import_blocks,
        }) => commands::bench::checkpoint(json, validators, target_chunk_bytes, import_blocks),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Counts live heap bytes so the state cache can report what the allocator holds.
#[global_allocator]
static ALLOC: modnode::alloc_stats::CountingAlloc = modnode::alloc_stats::CountingAlloc;
