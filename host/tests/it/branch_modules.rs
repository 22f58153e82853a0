//! A side branch that needs a scheduled module this node does not
//! have ready. Not having it is our condition, never the block's: the branch is not judged
//! (nothing remembered as invalid, no peer blamed), the module goes on the fetch list even
//! though the head's schedule does not name it, and the branch imports once it is ready.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use modnode::chain::block::Block;
use modnode::chain::genesis::Genesis;
use modnode::chain::native_deposits::Verification;
use modnode::chain::{Added, Chain, DepositEngine, DepositModules, ForkChoiceError, ImportError};
use modnode::hashes::ModuleHash;
use modnode::node::chain_worker::WorkerError;
use modnode::node::verdict::{self, Fault};
use modnode::runtime::Kind;
use modnode::state::UpgradeOp;
use modnode::store::MemoryStore;

const V1: ModuleHash = ModuleHash([1; 32]);
const V2: ModuleHash = ModuleHash([2; 32]);
/// The activation height the side branch schedules its module at.
const H: u64 = 5;

/// Deposits engines by hash (native engines standing in for module versions).
#[derive(Default)]
struct Engines(Mutex<HashMap<ModuleHash, DepositEngine>>);

impl Engines {
    fn with(engines: &[(ModuleHash, DepositEngine)]) -> Arc<Self> {
        let this = Self::default();
        for (hash, engine) in engines {
            this.add(*hash, engine.clone());
        }
        Arc::new(this)
    }
    fn add(&self, hash: ModuleHash, engine: DepositEngine) {
        self.0.lock().unwrap().insert(hash, engine);
    }
}

impl DepositModules for Engines {
    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine> {
        self.0.lock().unwrap().get(hash).cloned()
    }
}

fn native(v: Verification) -> DepositEngine {
    DepositEngine::Native(v)
}

fn genesis(deposits_module: Option<ModuleHash>) -> Genesis {
    let mut g = Genesis::generated("branch-modules", 8, 5);
    g.deposits_module = deposits_module.map(ModuleHash::to_bytes);
    g.upgrade_lead_blocks = 2;
    g
}

fn chain(genesis: Genesis, modules: Arc<dyn DepositModules>) -> Chain {
    let mut chain = Chain::open(
        Arc::new(MemoryStore::new()),
        genesis,
        native(Verification::Batched),
    )
    .unwrap();
    chain.set_deposit_modules(modules);
    chain
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

fn at_h(module: ModuleHash) -> UpgradeOp {
    UpgradeOp {
        kind: Kind::Deposits,
        module,
        height: H,
    }
}

/// The gossip verdict a node reaches on a block fork choice answered `result` for.
fn verdict_on(block: &Block, result: Result<Added, ForkChoiceError>) -> verdict::BlockVerdict {
    verdict::gossip_block(block.header.height, &result.map_err(WorkerError::Block))
}

/// The node follows branch `a` (V1 throughout); branch `b` schedules V2 at H and is
/// longer. Without V2 the block at H cannot be checked: that is ours, so neither it nor its
/// children are invalid and no sender is penalised; once V2 is here the same blocks import
/// and the node moves to `b`.
#[test]
fn a_side_branch_needing_a_module_we_lack_is_not_judged_and_imports_once_the_module_is_ready() {
    let both = Engines::with(&[
        (V1, native(Verification::OneByOne)),
        (V2, native(Verification::Batched)),
    ]);
    let mut a = chain(genesis(Some(V1)), both.clone());
    let a_blocks = extend(&mut a, H + 1, 1);
    let mut b = chain(genesis(Some(V1)), both.clone());
    b.propose_upgrade(at_h(V2)).unwrap();
    let b_blocks = extend(&mut b, H + 3, 2);
    assert_eq!(b.schedule().module_at(Kind::Deposits, H), Some(V2));

    let only_v1 = Engines::with(&[(V1, native(Verification::OneByOne))]);
    let mut node = chain(genesis(Some(V1)), only_v1.clone());
    for block in &a_blocks {
        assert!(matches!(node.add_block(block), Ok(Added::Extended(_))));
    }
    let below = (H - 1) as usize;
    for block in &b_blocks[..below] {
        assert_eq!(node.add_block(block).unwrap(), Added::Stored);
    }
    // The block at H and every child of it: refused for now, nobody's fault.
    for block in &b_blocks[below..] {
        let result = node.add_block(block);
        let height = block.header.height;
        let error = result.as_ref().expect_err("V2 is not ready");
        assert_ne!(error.fault(), Fault::Peer, "height {height}: {error}");
        if height == H {
            // Not checked, and not remembered as invalid: the module is what is missing.
            assert!(
                matches!(
                    error,
                    ForkChoiceError::NotChecked(ImportError::ModuleMissing { .. })
                ),
                "{error}"
            );
            assert_eq!(error.missing_module(), Some((Kind::Deposits, V2)));
        } else {
            // Its parent was neither stored nor judged: to be synced, not an invalid branch.
            assert!(
                matches!(error, ForkChoiceError::UnknownParent { .. }),
                "height {height}: {error}"
            );
        }
        let verdict = verdict_on(block, result);
        assert_eq!(
            verdict.penalty, None,
            "height {height} penalised its sender"
        );
        assert!(!verdict.relay, "height {height} relayed unchecked");
    }
    assert_eq!(node.head(), a.head());

    // The module arrives; sync offers the branch again: it imports and wins.
    only_v1.add(V2, native(Verification::Batched));
    let mut reorganised = false;
    for block in &b_blocks[below..] {
        let result = node.add_block(block);
        reorganised |= matches!(result, Ok(Added::Reorganised { .. }));
        let verdict = verdict_on(block, result);
        assert!(verdict.relay && verdict.penalty.is_none(), "{verdict:?}");
    }
    assert!(reorganised);
    assert_eq!(node.head(), b.head());
}

/// The node's head schedules nothing; a competing branch schedules module X (a real
/// deposits component) at H. Meeting that branch's block at H puts X on the upgrade agent's
/// fetch list although the head's schedule does not name it; once X is fetched the branch
/// imports and wins.
#[test]
fn a_module_only_a_competing_branch_schedules_is_fetched_and_the_branch_imports() {
    use sha2::{Digest, Sha256};

    use super::artifact;
    let x_bytes = artifact("deposits-v1");
    let x = ModuleHash(Sha256::digest(&x_bytes).into());
    let rt = super::runtime(1_000_000_000);
    let x_engine = DepositEngine::Module(Box::new(super::deposits_module(&rt, "deposits-v1")));

    let producer = Engines::with(&[(x, x_engine)]);
    let mut a = chain(genesis(None), producer.clone());
    let a_blocks = extend(&mut a, H + 1, 1);
    let mut b = chain(genesis(None), producer.clone());
    b.propose_upgrade(at_h(x)).unwrap();
    let b_blocks = extend(&mut b, H + 3, 2);

    let dir = tempfile::tempdir().unwrap();
    let agent = Arc::new(super::node_agent(dir.path()));
    let mut node = chain(genesis(None), agent.clone());
    for block in &a_blocks {
        assert!(matches!(node.add_block(block), Ok(Added::Extended(_))));
    }
    assert!(!agent.is_ready(&x));
    assert_eq!(
        agent.missing(),
        Vec::<ModuleHash>::new(),
        "the head schedules nothing"
    );

    let below = (H - 1) as usize;
    for block in &b_blocks[..below] {
        assert_eq!(node.add_block(block).unwrap(), Added::Stored);
    }
    let at = &b_blocks[below];
    let error = node.add_block(at).expect_err("X is not ready");
    assert_ne!(error.fault(), Fault::Peer, "{error}");
    // X is wanted although the head's schedule does not name it, and it is what the next
    // fetch asks peers for.
    assert_eq!(agent.missing(), vec![x]);
    let peer = [7; 32];
    let (asked, peers) = agent.next_fetch(&[peer]).expect("a fetch to start");
    assert_eq!((asked, peers), (x, vec![peer]));
    agent.fetch_answered(peer, &x, true);
    agent.accept_fetched(&x, &x_bytes, "peer").unwrap();
    agent.fetch_done();
    assert!(agent.is_ready(&x));
    assert_eq!(agent.missing(), Vec::<ModuleHash>::new());

    // Sync offers the branch again: it imports and wins.
    let mut reorganised = false;
    for block in &b_blocks[below..] {
        reorganised |= matches!(node.add_block(block), Ok(Added::Reorganised { .. }));
    }
    assert!(reorganised);
    assert_eq!(node.head(), b.head());
    assert_eq!(node.schedule().module_at(Kind::Deposits, H), Some(x));
}
