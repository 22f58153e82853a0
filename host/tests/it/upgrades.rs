//! On-chain module upgrades at the chain level: the schedule decides which deposits module runs
//! each height on every path — import, reorganisation across the activation height, restart —
//! and a node without the scheduled module stops there (its own condition) until it has it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use modnode::chain::block::{Block, Hash};
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Added, Chain, DepositEngine, DepositModules, ImportError};
use modnode::node::verdict::Fault;
use modnode::runtime::Kind;
use modnode::state::UpgradeOp;
use modnode::store::{MemoryStore, SledStore};

const V1: Hash = [1; 32];
const V2: Hash = [2; 32];
/// The activation height the tests schedule V2 at.
const H: u64 = 5;

/// Deposits engines by hash (two native engines standing in for two module versions), recording
/// which hash every transition asked for.
#[derive(Default)]
struct Recorder {
    engines: Mutex<HashMap<Hash, DepositEngine>>,
    asked: Mutex<Vec<Hash>>,
}

impl Recorder {
    fn with_both() -> Arc<Self> {
        let r = Self::default();
        r.add(V1, Verification::OneByOne);
        r.add(V2, Verification::Batched);
        Arc::new(r)
    }
    fn add(&self, hash: Hash, v: Verification) {
        self.add_engine(hash, DepositEngine::Native(v));
    }
    fn add_engine(&self, hash: Hash, engine: DepositEngine) {
        self.engines.lock().unwrap().insert(hash, engine);
    }
    fn take(&self) -> Vec<Hash> {
        std::mem::take(&mut *self.asked.lock().unwrap())
    }
}

impl DepositModules for Recorder {
    fn deposits(&self, hash: &[u8; 32]) -> Option<DepositEngine> {
        self.asked.lock().unwrap().push(*hash);
        self.engines.lock().unwrap().get(hash).cloned()
    }
}

fn genesis() -> Genesis {
    let mut g = Genesis::generated("upgrades", 8, 5);
    g.deposits_module = Some(V1);
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
    let per_height: Vec<Hash> = asked.chunks(2).map(|c| c[0]).collect();
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
        let expected: Vec<Hash> = (1..=height).map(|h| if h < H { V1 } else { V2 }).collect();
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
                (*kind, module.as_str(), *height),
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
    use modnode::modules_store::upload::{ModuleService, UploadConfig};
    use modnode::node::upgrades::{FetchError, UpgradeAgent};
    use modnode::runtime::Modules;
    use modnode::runtime::modules::InitialModules;
    use modnode::runtime::slot::SlotConfig;
    use sha2::{Digest, Sha256};

    use super::artifact;
    let dir = tempfile::tempdir().unwrap();
    let modules = Modules::new(
        super::runtime(1_000_000_000),
        InitialModules {
            deposits: &artifact("deposits-v2"),
            checkpoint: &artifact("checkpoint-v1"),
            gossip_policy: &artifact("gossip-policy-v2"),
        },
        SlotConfig::default(),
    )
    .unwrap();
    let service = ModuleService::open(
        dir.path(),
        dir.path().join("module-cache"),
        UploadConfig::default(),
    )
    .unwrap();
    let agent = UpgradeAgent::new(Arc::new(modules), Arc::new(service), Vec::new(), [0; 32]);
    let fixture = artifact("fixture-deposits-linear-scan");
    let hash: Hash = Sha256::digest(&fixture).into();
    assert!(agent.deposits(&hash).is_none());

    // Other bytes than asked for: the peer lied.
    let v1 = artifact("deposits-v1");
    assert!(matches!(
        agent.accept_fetched(&hash, &v1, "liar"),
        Err(FetchError::WrongHash { .. })
    ));
    // Bytes that hash right but are no module: refused by the upload checks, nothing ready.
    let junk = b"not a component".to_vec();
    let junk_hash: Hash = Sha256::digest(&junk).into();
    assert!(matches!(
        agent.accept_fetched(&junk_hash, &junk, "peer"),
        Err(FetchError::Rejected { .. })
    ));
    assert!(!agent.is_ready(&junk_hash));
    assert!(agent.serve(&junk_hash).is_none());

    // The real bytes: validated, compiled, warmed, stored, served on, and the chain can run
    // them. Modules of local kinds are never served.
    agent.accept_fetched(&hash, &fixture, "peer").unwrap();
    assert!(agent.is_ready(&hash));
    assert!(agent.deposits(&hash).is_some());
    let policy: Hash = Sha256::digest(artifact("gossip-policy-v2")).into();
    assert_eq!(agent.serve(&policy), None);
    let scheduled = modnode::state::Schedule::genesis(&[(Kind::Deposits, hash)]);
    agent.scheduled(&scheduled);
    assert_eq!(agent.missing(), Vec::<Hash>::new());
    assert_eq!(agent.ready_scheduled(), vec![hash]);
    assert_eq!(agent.serve(&hash), Some(fixture));
    agent.set_serving(false);
    assert_eq!(agent.serve(&hash), None);
}
