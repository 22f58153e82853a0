//! The chain's word beats local policy: a module the chain scheduled is admitted whatever this
//! node's upload limits (size flag, compile deadline, code and compiled size) and whatever its
//! warm-up on this node's own recent blocks says, so the node imports past the activation
//! height with the others; the operator's own upload of the same bytes keeps every check.

use std::sync::Arc;
use std::time::Duration;

use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Chain, DepositEngine, DepositModules, ImportError};
use modnode::hashes::ModuleHash;
use modnode::modules_store::upload::{ModuleService, UploadConfig};
use modnode::node::upgrades::UpgradeAgent;
use modnode::runtime::Kind;
use modnode::runtime::deposits::{BlockContext, Deposit, DepositCall, WitEth1Data};
use modnode::runtime::modules::InitialModules;
use modnode::runtime::slot::SlotConfig;
use modnode::runtime::{EngineProfile, Modules};
use modnode::state::{Registry, UpgradeOp};
use modnode::store::MemoryStore;
use sha2::{Digest, Sha256};

use super::artifact;

/// The activation height.
const H: u64 = 4;

/// Upload limits no real module passes: a 1 KiB size flag, 16-byte function bodies, a 1-byte
/// compiled artifact, a 1 ms compile deadline.
fn tiny_limits() -> UploadConfig {
    UploadConfig {
        max_module_bytes: 1_024,
        max_function_body_bytes: 16,
        max_compiled_bytes: 1,
        compile_timeout: Duration::from_millis(1),
        compile_program: None,
    }
}

/// A node's modules. Their own runtime (what `Modules::prepare` loads with) has a small budget
/// so a warm-up that fails on the bls-loop fixture fails fast; modules admitted through the
/// upload path run with the profile's budgets.
fn modules() -> Arc<Modules> {
    Arc::new(
        Modules::new(
            super::runtime(50_000_000),
            InitialModules {
                deposits: &artifact("deposits-v2"),
                checkpoint: &artifact("checkpoint-v1"),
                gossip_policy: &artifact("gossip-policy-v2"),
            },
            SlotConfig::default(),
        )
        .unwrap(),
    )
}

fn hash(bytes: &[u8]) -> ModuleHash {
    ModuleHash(Sha256::digest(bytes).into())
}

/// A node's upgrade agent over `modules`, its module service in `dir` with `limits` warming on
/// the node's slots.
fn agent(dir: &std::path::Path, modules: &Arc<Modules>, limits: UploadConfig) -> UpgradeAgent {
    let service = ModuleService::open(dir, dir.join("module-cache"), limits)
        .unwrap()
        .with_slots(modules.clone());
    UpgradeAgent::new(modules.clone(), Arc::new(service), Vec::new(), [0; 32])
}

/// The modules of the producer: the scheduled hash runs a native engine (the blocks carry no
/// deposits, so every engine computes the same state).
struct Producer(ModuleHash);

impl DepositModules for Producer {
    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine> {
        (*hash == self.0).then_some(DepositEngine::Native(Verification::OneByOne))
    }
}

fn genesis() -> Genesis {
    let mut g = Genesis::generated("scheduled-admission", 8, 11);
    g.upgrade_lead_blocks = 2;
    g
}

fn chain(modules: Arc<dyn DepositModules>) -> Chain {
    let mut chain = Chain::open(
        Arc::new(MemoryStore::new()),
        genesis(),
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap();
    chain.set_deposit_modules(modules);
    chain
}

#[test]
fn a_node_with_tiny_upload_limits_admits_a_scheduled_module_and_imports_past_its_height() {
    let v1 = artifact("deposits-v1");
    let v1_hash = hash(&v1);
    assert!(v1.len() > tiny_limits().max_module_bytes);

    // The producer schedules deposits-v1 at H and builds past it.
    let mut producer = chain(Arc::new(Producer(v1_hash)));
    producer
        .propose_upgrade(UpgradeOp {
            kind: Kind::Deposits,
            module: v1_hash,
            height: H,
        })
        .unwrap();
    let blocks: Vec<_> = (0..H + 2)
        .map(|_| {
            let slot = producer.head().slot + 1;
            let block = producer
                .build_block(slot, 0, producer.eth1_data(), Vec::new())
                .unwrap();
            producer.import(&block).unwrap();
            block
        })
        .collect();
    assert_eq!(
        producer.schedule().module_at(Kind::Deposits, H),
        Some(v1_hash)
    );

    let dir = tempfile::tempdir().unwrap();
    let modules = modules();
    let agent = Arc::new(agent(dir.path(), &modules, tiny_limits()));
    let mut node = chain(agent.clone());
    for block in &blocks[..usize::try_from(H - 1).unwrap()] {
        node.import(block).unwrap();
    }
    assert_eq!(agent.missing(), vec![v1_hash]);
    // Without the module the node waits at H (its own condition).
    let at_h = &blocks[usize::try_from(H - 1).unwrap()];
    assert!(
        matches!(node.import(at_h), Err(ImportError::ModuleMissing { .. })),
        "imported H without the scheduled module"
    );

    // The same bytes uploaded by the operator are refused by the size flag.
    let service = ModuleService::open(
        &dir.path().join("operator"),
        dir.path().join("operator-cache"),
        tiny_limits(),
    )
    .unwrap();
    let refused = service.upload(&v1, "operator").unwrap_err();
    assert_eq!(refused.code(), "too-large", "{refused}");
    assert!(service.store().meta(&v1_hash).unwrap().is_none());

    // Fetched for the chain: admitted (the limits only warn), stored, ready, served on.
    agent.accept_fetched(&v1_hash, &v1, "peer").unwrap();
    assert!(agent.is_ready(&v1_hash));
    assert!(agent.missing().is_empty());
    assert_eq!(
        agent.serve([7; 32], &v1_hash).unwrap().bytes,
        Some(v1.clone())
    );
    for block in &blocks[usize::try_from(H - 1).unwrap()..] {
        node.import(block).unwrap();
    }
    assert_eq!(node.head(), producer.head());
    assert!(node.head().height > H);
}

/// A deposit the bls-loop fixture verifies `ctx.slot` times (it never looks at proofs).
fn bls_loop_call(slot: u64) -> DepositCall {
    let kp = modnode::crypto::Keypair::from_seed([4; 32]);
    let empty = modnode::chain::workload::DevDepositLog::new().eth1_data();
    DepositCall {
        registry: super::shared(&Registry::new()),
        ctx: BlockContext {
            height: 1,
            slot,
            genesis_fork_version: vec![0; 4],
            eth1_data: WitEth1Data {
                deposit_root: empty.deposit_root.to_vec(),
                deposit_count: empty.deposit_count,
                block_hash: empty.block_hash.to_vec(),
            },
            eth1_deposit_index: 0,
        },
        deposits: vec![Deposit {
            pubkey: kp.pubkey.to_vec(),
            withdrawal_credentials: vec![0; 32],
            amount: 1,
            signature: kp.sign(b"something else").to_vec(),
            proof: vec![0; 33 * 32],
        }],
    }
}

#[test]
fn a_scheduled_module_failing_its_warm_up_on_local_history_is_admitted_with_a_warning() {
    // One of this node's recent blocks is one the fixture cannot finish within its budget (it
    // verifies the deposit once per slot); the built-in warm-up block (slot 1) it passes.
    let per_verify = EngineProfile::build().host_calls.bls_verify;
    // The budget of a call with one deposit (it grows with the block's deposits).
    let budget = EngineProfile::build().deposits_budget(1).unwrap();
    let slot = budget / per_verify + 1;
    let modules = modules();
    modules.record_deposits(bls_loop_call(slot));
    let fixture = artifact("fixture-bls-loop");
    let fixture_hash = hash(&fixture);

    // The operator's upload is refused by the warm-up on the node's recent block.
    let dir = tempfile::tempdir().unwrap();
    let operator = ModuleService::open(
        &dir.path().join("operator"),
        dir.path().join("operator-cache"),
        UploadConfig::default(),
    )
    .unwrap()
    .with_slots(modules.clone());
    let refused = operator.upload(&fixture, "operator").unwrap_err();
    assert_eq!(refused.code(), "warm-up-failed", "{refused}");
    assert!(refused.to_string().contains("fuel"), "{refused}");

    // Scheduled by the chain and fetched: admitted, and the chain can run it.
    let agent = agent(&dir.path().join("node"), &modules, UploadConfig::default());
    agent.scheduled(&modnode::state::Schedule::genesis(&[(
        Kind::Deposits,
        fixture_hash,
    )]));
    agent
        .accept_fetched(&fixture_hash, &fixture, "peer")
        .unwrap();
    assert!(agent.is_ready(&fixture_hash));
    assert!(agent.deposits(&fixture_hash).is_some());
    // It runs, but this node does not attest it ready: its warm-up failed here.
    assert!(!DepositModules::is_ready(&agent, &fixture_hash));
    drop(agent);

    // After a restart the module is in the local store, and the same block is among the
    // node's recent ones: prepared for the schedule all the same.
    let modules = self::modules();
    modules.record_deposits(bls_loop_call(slot));
    let agent = self::agent(&dir.path().join("node"), &modules, UploadConfig::default());
    agent.scheduled(&modnode::state::Schedule::genesis(&[(
        Kind::Deposits,
        fixture_hash,
    )]));
    assert_eq!(agent.missing(), vec![fixture_hash]);
    // Prepared with every local check (as stored modules were for the schedule before), its
    // warm-up refuses it.
    let refused = modules.prepare(&fixture).unwrap_err();
    assert!(
        refused.to_string().contains("recent real input"),
        "{refused}"
    );
    assert_eq!(agent.prepare_scheduled(&fixture_hash), Ok(true));
    assert!(agent.deposits(&fixture_hash).is_some());
    assert!(agent.missing().is_empty());
}

#[test]
fn a_fetched_module_of_another_kind_than_scheduled_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let modules = modules();
    let agent = agent(dir.path(), &modules, tiny_limits());
    let policy = artifact("gossip-policy-v1");
    let policy_hash = hash(&policy);
    // Scheduled as deposits, but the bytes are a gossip policy: the kind decides, whatever the
    // local limits say.
    agent.scheduled(&modnode::state::Schedule::genesis(&[(
        Kind::Deposits,
        policy_hash,
    )]));
    let err = agent
        .accept_fetched(&policy_hash, &policy, "peer")
        .unwrap_err();
    assert!(err.to_string().contains("gossip-policy"), "{err}");
    assert!(!agent.is_ready(&policy_hash));
    assert!(modules.prepared_version(&policy_hash).is_none());
}
