//! On-chain module upgrades at the chain level: the schedule decides which deposits module runs
//! each height on every path — import, reorganisation across the activation height, restart —
//! and a node without the scheduled module stops there (its own condition) until it has it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use modnode::chain::block::Block;
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Added, Chain, DepositEngine, DepositModules, ImportError};
use modnode::hashes::ModuleHash;
use modnode::node::verdict::Fault;
use modnode::runtime::Kind;
use modnode::state::UpgradeOp;
use modnode::store::{MemoryStore, SledStore};

const V1: ModuleHash = ModuleHash([1; 32]);
const V2: ModuleHash = ModuleHash([2; 32]);
/// The activation height the tests schedule V2 at.
const H: u64 = 5;

/// Deposits engines by hash (two native engines standing in for two module versions), recording
/// which hash every transition asked for.
#[derive(Default)]
struct Recorder {
    engines: Mutex<HashMap<ModuleHash, DepositEngine>>,
    asked: Mutex<Vec<ModuleHash>>,
}

impl Recorder {
    fn with_both() -> Arc<Self> {
        let r = Self::default();
        r.add(V1, Verification::OneByOne);
        r.add(V2, Verification::Batched);
        Arc::new(r)
    }
    fn add(&self, hash: ModuleHash, v: Verification) {
        self.add_engine(hash, DepositEngine::Native(v));
    }
    fn add_engine(&self, hash: ModuleHash, engine: DepositEngine) {
        self.engines.lock().unwrap().insert(hash, engine);
    }
    fn take(&self) -> Vec<ModuleHash> {
        std::mem::take(&mut *self.asked.lock().unwrap())
    }
}

impl DepositModules for Recorder {
    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine> {
        self.asked.lock().unwrap().push(*hash);
        self.engines.lock().unwrap().get(hash).cloned()
    }
    // The producer's readiness attestations ask too; only the engines used are recorded.
    fn is_ready(&self, hash: &ModuleHash) -> bool {
        self.engines.lock().unwrap().contains_key(hash)
    }
}

fn genesis() -> Genesis {
    let mut g = Genesis::generated("upgrades", 8, 5);
    g.deposits_module = Some(V1.0);
    g.upgrade_lead_blocks = 2;
    g
}

fn chain_on(store: Arc<dyn modnode::store::KvStore>, modules: Arc<Recorder>) -> Chain {
    // The engine the chain opens with is neither V1 nor V2: every height resolves by schedule.
    let mut chain = Chain::open(
        store,
        genesis(),
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap();
    chain.set_deposit_modules(modules);
    chain
}

fn chain(modules: Arc<Recorder>) -> Chain {
    chain_on(Arc::new(MemoryStore::new()), modules)
}

/// Builds and imports `n` empty blocks, slots `stride` apart (so branches differ).
fn extend(chain: &mut Chain, n: u64, stride: u64) -> Vec<Block> {
    (0..n)
        .map(|_| {
            let slot = chain.head().slot + stride;
            let block = chain
                .build_block(slot, 0, chain.eth1_data(), Vec::new())
                .unwrap();
            chain.import(&block).unwrap();
            block
        })
        .collect()
}

fn v2_at_h() -> UpgradeOp {
    UpgradeOp {
        kind: Kind::Deposits,
        module: V2,
        height: H,
    }
}

#[test]
fn the_producer_votes_its_proposal_and_the_switch_happens_at_the_height() {
    let modules = Recorder::with_both();
    let mut a = chain(modules.clone());
    let root_before = a.head().state_root;
    // Too close to the head for the lead: refused up front.
    let late = UpgradeOp {
        height: 3,
        ..v2_at_h()
    };
    assert!(a.propose_upgrade(late).is_err());
    a.propose_upgrade(v2_at_h()).unwrap();
    let first = extend(&mut a, 1, 1);
    assert_eq!(first[0].body.upgrade_votes, vec![v2_at_h()]);
    // A chain without authorities: the single producer is the majority.
    assert_eq!(a.schedule().module_at(Kind::Deposits, H), Some(V2));
    assert_eq!(a.schedule().module_at(Kind::Deposits, H - 1), Some(V1));
    // The schedule is committed by the state root.
    assert_ne!(first[0].header.state_root, root_before);
    modules.take();
    extend(&mut a, H + 1, 1);
    let asked = modules.take();
    // Each height asks once while building and once while importing.
    let per_height: Vec<ModuleHash> = asked.chunks(2).map(|c| c[0]).collect();
    assert!(asked.chunks(2).all(|c| c[0] == c[1]), "{asked:?}");
    assert_eq!(per_height, vec![V1, V1, V1, V2, V2, V2]);
    // Scheduled: the producer votes no more.
    assert!(
        a.block_at(3)
            .unwrap()
            .unwrap()
            .body
            .upgrade_votes
            .is_empty()
    );
}

#[test]
fn a_reorg_across_the_activation_height_runs_each_side_with_its_own_version() {
    let modules = Recorder::with_both();
    // Branch a schedules V2 at H in its first block; branch b shares that block and forks
    // after it; branch c forks at genesis and never schedules anything.
    let mut a = chain(modules.clone());
    a.propose_upgrade(v2_at_h()).unwrap();
    let mut a_blocks = extend(&mut a, 1, 1);
    let mut b = chain(modules.clone());
    b.import(&a_blocks[0]).unwrap();
    a_blocks.extend(extend(&mut a, 5, 1));
    let mut b_blocks = vec![a_blocks[0].clone()];
    b_blocks.extend(extend(&mut b, 6, 2));
    let mut c = chain(modules.clone());
    let c_blocks = extend(&mut c, 9, 3);

    let mut node = chain(modules.clone());
    for block in &a_blocks {
        assert!(matches!(node.add_block(block).unwrap(), Added::Extended(_)));
    }
    assert_eq!(node.head(), a.head());
    modules.take();
    let mut reorganised = false;
    for block in &b_blocks[1..] {
        reorganised |= matches!(node.add_block(block).unwrap(), Added::Reorganised { .. });
    }
    assert!(reorganised);
    assert_eq!(node.head(), b.head());
    // Each b block ran exactly once: on arrival (a side-branch block is executed on its
    // parent's state before it is stored), and the reorg adopted those cached states instead
    // of running them again — or, for a b block arriving after the reorg, on import. V1 below
    // H, V2 from H on (b's own copy of the schedule).
    let asked = modules.take();
    assert_eq!(asked, [V1, V1, V1, V2, V2, V2], "{asked:?}");
    assert_eq!(node.schedule(), b.schedule());

    // Back across H to c, which never scheduled V2: the revert restored the genesis schedule
    // and every c block runs V1.
    for block in &c_blocks {
        node.add_block(block).unwrap();
    }
    assert_eq!(node.head(), c.head());
    let asked = modules.take();
    assert!(!asked.is_empty());
    assert!(asked.iter().all(|h| *h == V1), "{asked:?}");
    assert_eq!(node.schedule(), c.schedule());
    assert_eq!(node.schedule().module_at(Kind::Deposits, 100), Some(V1));
}

#[test]
fn states_below_at_and_above_the_activation_height_regenerate_with_their_own_version() {
    let modules = Recorder::with_both();
    let mut a = chain(modules.clone());
    a.propose_upgrade(v2_at_h()).unwrap();
    extend(&mut a, H + 4, 1);
    for height in [H - 1, H, H + 1, H + 3] {
        // A fresh cache holds only the head: the state is replayed from genesis (no other
        // anchor), every block with the version its height is scheduled to run.
        a.configure_state_cache(modnode::state_cache::StateCacheConfig {
            anchor_every: 1000,
            ..Default::default()
        });
        modules.take();
        let block = a.block_at(height).unwrap().unwrap();
        let state = a.states().state(&block.hash()).unwrap();
        assert_eq!(state.root(), block.header.state_root, "height {height}");
        let expected: Vec<ModuleHash> = (1..=height).map(|h| if h < H { V1 } else { V2 }).collect();
        assert_eq!(modules.take(), expected, "height {height}");
        assert_eq!(a.states().metrics().replayed_blocks, height);
    }
}

#[test]
fn a_node_without_the_scheduled_module_stops_at_the_height_and_resumes_once_it_has_it() {
    let mut a = chain(Recorder::with_both());
    a.propose_upgrade(v2_at_h()).unwrap();
    let blocks = extend(&mut a, H + 1, 1);

    let only_v1 = Arc::new(Recorder::default());
    only_v1.add(V1, Verification::OneByOne);
    let dir = tempfile::tempdir().unwrap();
    let sled = || -> Arc<dyn modnode::store::KvStore> {
        Arc::new(SledStore::open(&dir.path().join("chain")).unwrap())
    };
    let mut node = chain_on(sled(), only_v1.clone());
    for block in &blocks[..H as usize - 1] {
        node.import(block).unwrap();
    }
    let err = node.import(&blocks[H as usize - 1]).unwrap_err();
    match &err {
        ImportError::ModuleMissing {
            kind,
            module,
            height,
        } => {
            assert_eq!(
                (*kind, module.to_hex().as_str(), *height),
                (Kind::Deposits, hex::encode(V2).as_str(), H)
            );
        }
        other => panic!("expected ModuleMissing, got {other}"),
    }
    // Named in the message, and never the block's (or the peer's) fault.
    let message = err.to_string();
    assert!(
        message.contains(&hex::encode(V2)) && message.contains("deposits"),
        "{message}"
    );
    assert_eq!(err.fault(), Fault::Ours);
    assert_eq!(node.head().height, H - 1);

    // A restart keeps the schedule (it is state) and still needs V2 at H.
    drop(node);
    let mut node = chain_on(sled(), only_v1.clone());
    assert_eq!(node.head().height, H - 1);
    assert_eq!(node.schedule().module_at(Kind::Deposits, H), Some(V2));
    assert!(matches!(
        node.import(&blocks[H as usize - 1]),
        Err(ImportError::ModuleMissing { .. })
    ));
    // The module arrives: import resumes at H with the same roots as the producer.
    only_v1.add(V2, Verification::Batched);
    for block in &blocks[H as usize - 1..] {
        node.import(block).unwrap();
    }
    assert_eq!(node.head(), a.head());
}

#[test]
fn sigkill_around_the_activation_height_restarts_consistently() {
    use rand::{Rng, SeedableRng};
    // `modnode debug import-loop --upgrade-at 8`: the dev chain (deposits-v2 from genesis) votes
    // deposits-v1 in at height 8, and is killed around it.
    const AT: u64 = 8;
    let rt = super::runtime(1_000_000_000);
    let v1 = super::deposits_module(&rt, "deposits-v1");
    let v2 = super::deposits_module(&rt, "deposits-v2");
    let v1_hash = v1.hash();
    let modules = Arc::new(Recorder::default());
    modules.add_engine(v1_hash, DepositEngine::Module(Box::new(v1)));
    let open = |store: Arc<dyn modnode::store::KvStore>| {
        let mut chain = Chain::open(
            store,
            Genesis::dev(),
            DepositEngine::Module(Box::new(v2.clone())),
        )
        .unwrap();
        chain.set_deposit_modules(modules.clone());
        chain
    };
    let args = ["--upgrade-at", "8"];
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x8a);
    for kill_after in [AT - 1, AT] {
        let dir = tempfile::tempdir().unwrap();
        let delay = std::time::Duration::from_millis(rng.random_range(0..20));
        let reported = super::crash::run_and_kill_after(dir.path(), &args, kill_after, delay);
        let sled = || -> Arc<dyn modnode::store::KvStore> {
            Arc::new(SledStore::open(&dir.path().join("chain")).unwrap())
        };
        let chain = open(sled());
        assert!(chain.head().height >= reported, "lost a reported block");
        assert_eq!(
            chain.schedule().module_at(Kind::Deposits, AT),
            Some(v1_hash)
        );
        drop(chain);
        // The restarted loop carries on past the height.
        let reported =
            super::crash::run_and_kill_after(dir.path(), &args, AT + 3, std::time::Duration::ZERO);
        let stored = open(sled());
        assert!(stored.head().height >= reported);
        // Re-executing every stored block from genesis: deposits-v2 below the height (the
        // chain's own engine), deposits-v1 from it on, and the same head.
        let mut replay = open(Arc::new(MemoryStore::new()));
        modules.take();
        for height in 1..=stored.head().height {
            replay
                .import(&stored.block_at(height).unwrap().unwrap())
                .unwrap_or_else(|e| panic!("re-executing block {height}: {e}"));
        }
        assert_eq!(replay.head(), stored.head());
        let asked = modules.take();
        assert_eq!(asked.len() as u64, stored.head().height - AT + 1);
        assert!(asked.iter().all(|h| *h == v1_hash));
    }
}

#[test]
fn fetched_module_bytes_must_hash_to_what_was_asked_and_pass_the_upload_checks() {
    use modnode::node::upgrades::FetchError;
    use sha2::{Digest, Sha256};

    use super::artifact;
    let dir = tempfile::tempdir().unwrap();
    let agent = super::node_agent(dir.path());
    let fixture = artifact("fixture-deposits-linear-scan");
    let hash = ModuleHash(Sha256::digest(&fixture).into());
    assert!(agent.deposits(&hash).is_none());

    // Other bytes than asked for: the peer lied.
    let v1 = artifact("deposits-v1");
    assert!(matches!(
        agent.accept_fetched(&hash, &v1, "liar"),
        Err(FetchError::WrongHash { .. })
    ));
    // Bytes that hash right but are no module: refused by the upload checks, nothing ready.
    let junk = b"not a component".to_vec();
    let junk_hash = ModuleHash(Sha256::digest(&junk).into());
    assert!(matches!(
        agent.accept_fetched(&junk_hash, &junk, "peer"),
        Err(FetchError::Rejected { .. })
    ));
    assert!(!agent.is_ready(&junk_hash));
    // What peer `n` is served (each peer well within its request limits).
    let serve = |n: u8, hash: &ModuleHash| agent.serve([n; 32], hash).unwrap().bytes;
    assert!(serve(1, &junk_hash).is_none());

    // The real bytes: validated, compiled, warmed, stored, served on, and the chain can run
    // them. Modules of local kinds are never served.
    agent.accept_fetched(&hash, &fixture, "peer").unwrap();
    assert!(agent.is_ready(&hash));
    assert!(agent.deposits(&hash).is_some());
    let policy = ModuleHash(Sha256::digest(artifact("gossip-policy-v2")).into());
    assert_eq!(serve(2, &policy), None);
    let scheduled = modnode::state::Schedule::genesis(&[(Kind::Deposits, hash)]);
    agent.scheduled(&scheduled);
    assert_eq!(agent.missing(), Vec::<ModuleHash>::new());
    assert_eq!(agent.ready_scheduled(), vec![hash]);
    assert_eq!(serve(3, &hash), Some(fixture));
    agent.set_serving(false);
    assert_eq!(serve(4, &hash), None);
}

/// The chain's modules as a node wires them for warm-ups: every imported block's deposits call
/// goes to the node's prepared modules (no scheduled module: the chain's own engine runs).
struct Warmups(Arc<modnode::runtime::Modules>);

impl DepositModules for Warmups {
    fn deposits(&self, _hash: &ModuleHash) -> Option<DepositEngine> {
        None
    }

    fn imported(&self, call: modnode::runtime::deposits::DepositCall) {
        self.0.record_deposits(call);
    }
}

#[test]
fn a_new_deposits_module_warms_up_on_the_deposits_of_the_latest_real_blocks() {
    use modnode::chain::workload::{self, DevDepositLog};
    use modnode::runtime::Modules;
    use modnode::runtime::modules::InitialModules;
    use modnode::runtime::slot::SlotConfig;

    use super::artifact;
    let modules = Arc::new(
        Modules::new(
            super::runtime(1_000_000_000),
            InitialModules {
                deposits: &artifact("deposits-v2"),
                checkpoint: &artifact("checkpoint-v1"),
                gossip_policy: &artifact("gossip-policy-v2"),
            },
            // Every recent input, however slow the machine: the node's default budget
            // (`WARMUP_REAL_TIME`) is wall time, and under load a debug build fits fewer.
            SlotConfig {
                warmup_real_time: std::time::Duration::from_secs(3_600),
                ..SlotConfig::default()
            },
        )
        .unwrap(),
    );
    let warm_v1 = || {
        let loaded = modules.runtime().load(&artifact("deposits-v1")).unwrap();
        modules.warm_loaded(loaded).unwrap().info(true).warmup
    };
    // A fresh chain has no real blocks: the built-in inputs alone.
    let fresh = warm_v1();
    assert_eq!(fresh.real_inputs, 0);

    let mut chain = Chain::open(
        Arc::new(MemoryStore::new()),
        Genesis::generated("warm-up", 8, 7),
        DepositEngine::Native(Verification::Batched),
    )
    .unwrap();
    chain.set_deposit_modules(Arc::new(Warmups(modules.clone())));
    let mut log = DevDepositLog::new();
    let mut seed = 100;
    for with_deposits in [true, false, true, true, false] {
        if with_deposits {
            for _ in 0..2 {
                seed += 1;
                log.push(workload::new_validator(seed, 32_000_000_000, [0; 4]));
            }
        }
        let slot = chain.head().slot + 1;
        let block = chain
            .build_block_from(slot, 0, log.eth1_data(), &log)
            .unwrap();
        assert_eq!(block.body.deposits.len(), if with_deposits { 2 } else { 0 });
        chain.import(&block).unwrap();
    }
    // The three blocks that carried deposits, each on the registry it ran on: a new validator
    // per deposit, so the warm-up paid for signature checks and registry writes beyond the
    // built-in block.
    let warmed = warm_v1();
    assert_eq!(warmed.real_inputs, 3);
    assert!(warmed.fuel > fresh.fuel, "{warmed:?} vs {fresh:?}");
}

#[test]
fn a_component_retagged_with_a_custom_section_is_a_separate_version_running_the_same_code() {
    use modnode::chain::workload::{self, DevDepositLog};
    use modnode::modules_store::upload::{ModuleService, UploadConfig, UploadOutcome};
    use modnode::runtime::LinkedModule;
    use modnode::runtime::inspect::{validate, with_custom_section};
    use sha2::{Digest, Sha256};

    // Different bytes and hash, the same world, exports and `describe()`.
    let v2 = super::artifact("deposits-v2");
    let retagged = with_custom_section(&v2, "modnode-retag", b"same code");
    let h2 = ModuleHash(Sha256::digest(&v2).into());
    let hr = ModuleHash(Sha256::digest(&retagged).into());
    assert_ne!(h2, hr);
    let info = validate(&retagged).unwrap();
    assert_eq!(info.kind, Kind::Deposits);
    assert_eq!(info.sha256, hr);
    assert_eq!(info.exports, validate(&v2).unwrap().exports);
    let rt = super::runtime(1_000_000_000);
    let original = super::deposits_module(&rt, "deposits-v2");
    let LinkedModule::Deposits(copy) = rt.load(&retagged).unwrap() else {
        panic!("the re-tagged component does not load as a deposits module")
    };
    assert_eq!(copy.hash(), hr);
    assert_eq!(copy.meta().info, original.meta().info);

    // The module store keeps it as a version of its own next to the original.
    let dir = tempfile::tempdir().unwrap();
    let service = ModuleService::open(
        dir.path(),
        dir.path().join("module-cache"),
        UploadConfig::default(),
    )
    .unwrap();
    for bytes in [&v2, &retagged] {
        let outcome = service.upload(bytes, "test").unwrap();
        assert!(matches!(outcome, UploadOutcome::Ready(_)), "{outcome:?}");
    }
    assert_eq!(service.store().len(), 2);

    // The schedule switches to it at H like to any new version: the producer runs the original
    // below H and the copy from H on, over blocks carrying deposits.
    let engine =
        |m: &modnode::runtime::deposits::DepositsModule| DepositEngine::Module(Box::new(m.clone()));
    let mut genesis = genesis();
    genesis.deposits_module = Some(h2.0);
    genesis.max_deposits_per_block = 2;
    let open = |modules: Arc<Recorder>| {
        let mut chain = Chain::open(
            Arc::new(MemoryStore::new()),
            genesis.clone(),
            DepositEngine::Native(Verification::Batched),
        )
        .unwrap();
        chain.set_deposit_modules(modules);
        chain
    };
    let producer = Recorder::default();
    producer.add_engine(h2, engine(&original));
    producer.add_engine(hr, engine(&copy));
    let producer = Arc::new(producer);
    let mut a = open(producer.clone());
    a.propose_upgrade(UpgradeOp {
        kind: Kind::Deposits,
        module: hr,
        height: H,
    })
    .unwrap();
    // Propose looks the module up once (to run its migration, if it has one).
    assert_eq!(producer.take(), vec![hr]);
    let mut log = DevDepositLog::new();
    for seed in 0..2 * (H + 2) {
        log.push(workload::new_validator(100 + seed, 32_000_000_000, [0; 4]));
    }
    let blocks: Vec<Block> = (1..=H + 2)
        .map(|slot| {
            let block = a.build_block_from(slot, 0, log.eth1_data(), &log).unwrap();
            assert_eq!(block.body.deposits.len(), 2);
            a.import(&block).unwrap();
            block
        })
        .collect();
    assert_eq!(a.schedule().module_at(Kind::Deposits, H), Some(hr));
    let mut per_height = vec![h2; usize::try_from(H - 1).unwrap()];
    per_height.extend([hr; 3]);
    // Each height asks once while building and once while importing.
    let asked = producer.take();
    assert_eq!(asked.len(), 2 * per_height.len(), "{asked:?}");
    assert_eq!(
        asked.iter().step_by(2).copied().collect::<Vec<_>>(),
        per_height
    );

    // A follower running the original under both hashes imports every block with the same
    // state roots: the copy computed exactly what the original does.
    let follower = Recorder::default();
    follower.add_engine(h2, engine(&original));
    follower.add_engine(hr, engine(&original));
    let follower = Arc::new(follower);
    let mut b = open(follower.clone());
    for block in &blocks {
        b.import(block).unwrap();
    }
    assert_eq!(b.head(), a.head());
    assert_eq!(follower.take(), per_height);
}
