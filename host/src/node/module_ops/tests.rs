//! The four ways a module comes to be ready — the operator's upload, a scheduled module
//! fetched from a peer, a stored module prepared at start, a module built into the binary
//! prepared at start — each through the module lifecycle's stages, in order.

use std::sync::Arc;

use crate::chain::DepositModules;
use crate::hashes::ModuleHash;
use crate::modules_store::lifecycle::{LifePath, Stage, observed};
use crate::modules_store::upload::{ModuleService, UploadConfig};
use crate::node::upgrades::UpgradeAgent;
use crate::runtime::modules::InitialModules;
use crate::runtime::slot::SlotConfig;
use crate::runtime::{Kind, Modules, Runtime, RuntimeConfig, inspect};

fn artifact(name: &str) -> Vec<u8> {
    std::fs::read(crate::artifacts::path(name)).unwrap()
}

/// `name` under bytes (and so a hash) no other test uses.
fn unique(name: &str, tag: &str) -> Vec<u8> {
    inspect::with_custom_section(&artifact(name), "modnode-test-tag", tag.as_bytes())
}

fn modules() -> Arc<Modules> {
    let runtime = Runtime::new(RuntimeConfig {
        fuel_per_call: Some(1_000_000_000),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let initial = InitialModules {
        deposits: &artifact("deposits-v2"),
        checkpoint: &artifact("checkpoint-v1"),
        gossip_policy: &artifact("gossip-policy-v2"),
    };
    Arc::new(Modules::new(runtime, initial, SlotConfig::default()).unwrap())
}

fn service(dir: &std::path::Path, modules: &Arc<Modules>) -> Arc<ModuleService> {
    Arc::new(
        ModuleService::open(dir, dir.join("module-cache"), UploadConfig::default())
            .unwrap()
            .with_slots(modules.clone()),
    )
}

/// The stages in `seen` (what the lifecycle reported on this thread) for `hash`.
fn stages_in(seen: &[(LifePath, Stage, ModuleHash)], hash: ModuleHash) -> Vec<(LifePath, Stage)> {
    seen.iter()
        .filter(|(_, _, h)| *h == hash)
        .map(|(path, stage, _)| (*path, *stage))
        .collect()
}

/// The stages the lifecycle reported on this thread for `hash` since the last look.
fn stages_of(hash: ModuleHash) -> Vec<(LifePath, Stage)> {
    stages_in(&observed::take(), hash)
}

const NEW: [Stage; 5] = [
    Stage::Validated,
    Stage::Compiled,
    Stage::Warmed,
    Stage::Stored,
    Stage::Admitted,
];

#[test]
fn upload_peer_fetch_and_start_up_each_pass_the_lifecycle_stages_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let modules = modules();
    let service = service(dir.path(), &modules);

    // The operator's upload (`POST /modules` runs `ModuleService::upload`).
    let policy = unique("gossip-policy-v1", "three-paths-upload");
    let policy_hash = inspect::validate(&policy).unwrap().sha256;
    observed::take();
    service.upload(&policy, "admin upload").unwrap();
    assert_eq!(stages_of(policy_hash), NEW.map(|s| (LifePath::Upload, s)));
    assert!(modules.prepared_version(&policy_hash).is_some());

    // A deposits module the chain scheduled, fetched from a peer.
    let agent = UpgradeAgent::new(modules.clone(), service.clone(), Vec::new(), [0; 32]);
    let fetched = unique("deposits-v1", "three-paths-fetch");
    let fetched_hash = inspect::validate(&fetched).unwrap().sha256;
    agent.scheduled(&crate::state::Schedule::genesis(&[(
        Kind::Deposits,
        fetched_hash,
    )]));
    agent
        .accept_fetched(&fetched_hash, &fetched, "peer")
        .unwrap();
    assert_eq!(
        stages_of(fetched_hash),
        NEW.map(|s| (LifePath::PeerFetch, s))
    );
    assert!(agent.is_ready(&fetched_hash));
    drop((agent, service));

    // A restart: the stored modules are prepared again — every stage but the store, which
    // they passed already.
    let restarted = self::modules();
    let service = self::service(dir.path(), &restarted);
    super::prepare_stored(&service);
    let start_up = [
        Stage::Validated,
        Stage::Compiled,
        Stage::Warmed,
        Stage::Admitted,
    ]
    .map(|s| (LifePath::StartUp, s));
    let seen = observed::take();
    assert_eq!(stages_in(&seen, policy_hash), start_up);
    assert_eq!(stages_in(&seen, fetched_hash), start_up);
    assert!(restarted.prepared_version(&policy_hash).is_some());
    assert!(restarted.prepared_deposits(&fetched_hash).is_some());
}

#[test]
fn built_in_modules_pass_the_lifecycle_stages_in_order_and_are_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    // The service's own ready-map, empty: as at a node's start, before its slots exist.
    let service = ModuleService::open(
        dir.path(),
        dir.path().join("module-cache"),
        UploadConfig::default(),
    )
    .unwrap();
    observed::take();
    super::prepare_built_in(&service).unwrap();
    let seen = observed::take();
    let built_in = [
        Stage::Validated,
        Stage::Compiled,
        Stage::Warmed,
        Stage::Admitted,
    ]
    .map(|s| (LifePath::BuiltIn, s));
    assert!(!crate::artifacts::EMBEDDED.is_empty());
    for (name, bytes) in crate::artifacts::EMBEDDED {
        let hash = inspect::validate(bytes).unwrap().sha256;
        assert_eq!(stages_in(&seen, hash), built_in, "{name}");
        assert!(service.ready(&hash).is_some(), "{name}");
    }
    assert!(service.store().list().unwrap().is_empty());
}
