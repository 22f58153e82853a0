//! The host crate's one integration-test binary (it links once).

mod branch_modules;
mod cache;
mod chain;
mod checkpoint;
mod checkpoint_finality;
mod checkpoint_store;
mod checkpoint_switch;
mod checkpoint_sync;
mod cli;
mod crash;
mod deposit_budget;
mod deposits_e2e;
mod gossip;
mod gossip_hostile;
mod governance;
mod hostile;
mod inspect;
mod live_swap;
mod malicious;
mod modules;
mod network;
mod profile;
mod reproducible;
mod scheduled_admission;
mod slots;
mod state_anchors;
mod state_cache;
mod upgrade_check;
mod upgrade_devnet;
mod upgrades;
mod upload;

use std::sync::{Arc, RwLock};

use modnode::runtime::{LoadedModule, Runtime, RuntimeConfig};
use modnode::state::{Registry, SharedRegistry};

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

/// Loads a deposits module artifact.
pub fn deposits_module(rt: &Runtime, name: &str) -> modnode::runtime::deposits::DepositsModule {
    match rt.load(&artifact(name)).unwrap() {
        LoadedModule::Deposits(m) => m,
        _ => panic!("{name} is not a deposits module"),
    }
}

/// Shares a registry the way the importer does.
pub fn shared(registry: &Registry) -> Arc<RwLock<Registry>> {
    Arc::new(RwLock::new(registry.clone()))
}

/// The same registry as modules see it.
pub fn view(registry: &Arc<RwLock<Registry>>) -> SharedRegistry {
    registry.clone()
}

/// Counts live heap bytes (the state cache accounting test compares against it).
#[global_allocator]
static ALLOC: modnode::alloc_stats::CountingAlloc = modnode::alloc_stats::CountingAlloc;
