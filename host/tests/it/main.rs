//! The host crate's one integration-test binary (it links once).

mod branch_modules;
mod cache;
mod chain;
mod checkpoint;
mod checkpoint_file;
mod checkpoint_finality;
mod checkpoint_pipeline;
mod checkpoint_queue;
mod checkpoint_store;
mod checkpoint_switch;
mod checkpoint_sync;
mod checkpoint_v3;
mod cli;
mod contracts;
mod crash;
mod dashboards;
mod deposit_budget;
mod deposits_e2e;
mod deposits_v3;
mod deposits_v3_chain;
mod deposits_v3_checkpoint_devnet;
mod deposits_v3_devnet;
mod devnet;
mod equivocation;
mod equivocation_devnet;
mod finality;
mod finality_split;
mod gossip;
mod gossip_hostile;
mod gossip_sim;
mod governance;
mod health;
mod hostile;
mod inspect;
mod layers;
mod live_swap;
mod malicious;
mod migration;
mod modules;
mod network;
mod node_labels;
mod operator_logs;
mod peer_faults;
mod policy_reuse;
mod policy_v3;
mod profile;
mod prune;
mod reproducible;
mod scheduled_admission;
mod sig_preverify;
mod slot_restart;
mod slots;
mod state_anchors;
mod state_cache;
mod testnet;
mod testnet_init;
mod transition_roots;
mod upgrade_check;
mod upgrade_check_output;
mod upgrade_devnet;
mod upgrades;
mod upload;

use std::sync::Arc;

use modnode::runtime::{LinkedModule, Runtime, RuntimeConfig};
use modnode::state::{Registry, SharedRegistry};

/// Sends the nodes' logs to the test's captured output when `MODNODE_TEST_LOG` holds a filter
/// (`RUST_LOG` syntax, e.g. `info` or `modnode=debug`): a failed test then shows what its nodes
/// did. Off by default, so a passing run stays quiet; `.ci/stress` turns it on.
pub fn init_test_log() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Ok(filter) = std::env::var("MODNODE_TEST_LOG") else {
            return;
        };
        let filter = tracing_subscriber::EnvFilter::try_new(&filter)
            .unwrap_or_else(|e| panic!("MODNODE_TEST_LOG={filter:?} is not a log filter: {e}"));
        // Another test may have set a global subscriber first; then that one logs.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .with_thread_names(true)
            .try_init();
    });
}

/// Bytes of a built artifact (fixture or not).
pub fn artifact(name: &str) -> Vec<u8> {
    let path = modnode::artifacts::path(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A runtime with default limits and `fuel` per call.
pub fn runtime(fuel: u64) -> Runtime {
    Runtime::new(RuntimeConfig {
        fuel_per_call: Some(fuel),
        ..RuntimeConfig::default()
    })
    .unwrap()
}

/// A node's upgrade agent with the default modules prepared (deposits-v2, checkpoint-v1,
/// gossip-policy-v2; a 1e9 fuel budget), its module store in `dir`, no authorities.
pub fn node_agent(dir: &std::path::Path) -> modnode::node::upgrades::UpgradeAgent {
    node_agent_on(dir, runtime(1_000_000_000))
}

/// [`node_agent`] over `runtime`.
pub fn node_agent_on(
    dir: &std::path::Path,
    runtime: Runtime,
) -> modnode::node::upgrades::UpgradeAgent {
    use modnode::modules_store::upload::{ModuleService, UploadConfig};
    use modnode::runtime::modules::{InitialModules, Modules};
    use modnode::runtime::slot::SlotConfig;
    let modules = Modules::new(
        runtime,
        InitialModules {
            deposits: &artifact("deposits-v2"),
            checkpoint: &artifact("checkpoint-v1"),
            gossip_policy: &artifact("gossip-policy-v2"),
        },
        SlotConfig::default(),
    )
    .unwrap();
    let service =
        ModuleService::open(dir, dir.join("module-cache"), UploadConfig::default()).unwrap();
    modnode::node::upgrades::UpgradeAgent::new(
        Arc::new(modules),
        Arc::new(service),
        Vec::new(),
        [0; 32],
    )
}

/// Loads a deposits module artifact.
pub fn deposits_module(rt: &Runtime, name: &str) -> modnode::runtime::deposits::DepositsModule {
    match rt.load(&artifact(name)).unwrap() {
        LinkedModule::Deposits(m) => m,
        _ => panic!("{name} is not a deposits module"),
    }
}

/// Shares a registry the way the importer does.
pub fn shared(registry: &Registry) -> Arc<Registry> {
    Arc::new(registry.clone())
}

/// The same registry as modules see it.
pub fn view(registry: &Arc<Registry>) -> SharedRegistry {
    registry.clone()
}

/// Counts live heap bytes (the state cache accounting test compares against it).
#[global_allocator]
static ALLOC: modnode::alloc_stats::CountingAlloc = modnode::alloc_stats::CountingAlloc;
