//! deposits@3 on the chain (the queue carried by every path): a chain scheduled to switch from deposits-v2 to the
//! real deposits-v3 component at height H runs each height on its own module and contract.
//! Before H a deposit is applied at once; from H on it is queued and applied by the epoch
//! transition once final, within the churn limit. The queue is state: committed by the root,
//! written with each block (real sled), restored by revert across an epoch boundary, loaded
//! on reopen, rebuilt by the state cache's regeneration (from genesis and from a persisted
//! anchor).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use modnode::chain::block::{Block, BlockHash, StateRoot};
use modnode::chain::genesis::Genesis;
use modnode::chain::workload::{self, DevDepositLog};
use modnode::chain::{Chain, DepositEngine, DepositModules, ProposeError};
use modnode::hashes::ModuleHash;
use modnode::runtime::Kind;
use modnode::state::{PendingQueue, State, UpgradeOp};
use modnode::state_cache::StateCacheConfig;
use modnode::store::SledStore;

use super::{deposits_module, runtime};

const ETH: u64 = 1_000_000_000;
/// The height the schedule switches deposits to v3 at.
pub(super) const H: u64 = 6;
/// Validators in the genesis.
pub(super) const GENESIS_VALIDATORS: u32 = 8;

/// Deposits modules by hash (the node's prepared modules).
struct Engines(HashMap<ModuleHash, DepositEngine>);

impl DepositModules for Engines {
    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine> {
        self.0.get(hash).cloned()
    }
}

pub(super) struct Setup {
    pub(super) genesis: Genesis,
    v2: DepositEngine,
    v3: DepositEngine,
    pub(super) v3_hash: ModuleHash,
}

pub(super) fn setup() -> Setup {
    let rt = runtime(10_000_000_000);
    let v2 = deposits_module(&rt, "deposits-v2");
    let v3 = deposits_module(&rt, "deposits-v3");
    let v3_hash = v3.hash();
    let mut genesis = Genesis::generated("deposits-v3-chain", GENESIS_VALIDATORS, 20);
    genesis.slots_per_epoch = Some(4);
    genesis.finality_depth = 2;
    genesis.upgrade_lead_blocks = 2;
    genesis.deposits_module = Some(v2.hash().0);
    Setup {
        genesis,
        v2: DepositEngine::Module(Box::new(v2)),
        v3: DepositEngine::Module(Box::new(v3)),
        v3_hash,
    }
}

impl Setup {
    /// The signature cache of the runtime the setup's modules run on.
    pub(super) fn sig_cache(&self) -> Arc<modnode::crypto::SigCache> {
        match &self.v3 {
            DepositEngine::Module(m) => m.sig_cache(),
            _ => unreachable!("the setup's v3 is a module"),
        }
    }
}

/// [`open`], with this node's vote for deposits-v3 at [`H`] proposed.
pub(super) fn open_switching_at_h(setup: &Setup, path: &Path) -> Chain {
    let mut chain = open(setup, path);
    chain
        .propose_upgrade(UpgradeOp {
            kind: Kind::Deposits,
            module: setup.v3_hash,
            height: H,
        })
        .unwrap();
    chain
}

pub(super) fn open(setup: &Setup, path: &Path) -> Chain {
    let store = Arc::new(SledStore::open(path).unwrap());
    let mut chain = Chain::open(store, setup.genesis.clone(), setup.v2.clone()).unwrap();
    let engines = Engines(HashMap::from([(setup.v3_hash, setup.v3.clone())]));
    chain.set_deposit_modules(Arc::new(engines));
    chain
}

/// Builds and imports the next block (slot = height) with `deposits` new validators.
pub(super) fn next(
    chain: &mut Chain,
    log: &mut DevDepositLog,
    seed: &mut u64,
    deposits: u64,
) -> Block {
    for _ in 0..deposits {
        *seed += 1;
        log.push(workload::new_validator(1000 + *seed, 32 * ETH, [0; 4]));
    }
    let slot = chain.head().slot + 1;
    let block = chain
        .build_block_from(slot, 0, log.eth1_data(), log)
        .unwrap();
    chain.import(&block).unwrap();
    block
}

pub(super) fn queued(state: &State) -> Option<u64> {
    state.pending().map(PendingQueue::len)
}

/// What must be equal between two views of one state.
pub(super) fn fingerprint(
    state: &State,
) -> (BlockHash, StateRoot, u32, Option<u64>, Option<[u8; 32]>) {
    (
        state.block_hash(),
        state.root(),
        state.validator_count(),
        queued(state),
        state.pending().map(PendingQueue::root),
    )
}

#[test]
fn a_chain_switching_to_deposits_v3_queues_applies_at_epochs_reverts_restarts_and_regenerates() {
    let setup = setup();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut chain = open_switching_at_h(&setup, &path);
    let mut log = DevDepositLog::new();
    let mut seed = 0u64;
    let mut blocks: Vec<Block> = Vec::new();

    // Before H: deposits-v2, each deposit applied at once, no queue, a v3 state root.
    for height in 1..H {
        blocks.push(next(&mut chain, &mut log, &mut seed, 1));
        let state = chain.snapshot();
        assert_eq!(state.validator_count(), GENESIS_VALIDATORS + height as u32);
        assert_eq!(queued(&state), None, "height {height}");
    }
    assert_eq!(
        chain.schedule().module_at(Kind::Deposits, H),
        Some(setup.v3_hash)
    );
    let before_h = GENESIS_VALIDATORS + (H - 1) as u32;

    // H and H+1 (slots 6, 7): queued at once, nothing applied.
    blocks.push(next(&mut chain, &mut log, &mut seed, 2));
    let at_h = chain.snapshot();
    assert_eq!(at_h.validator_count(), before_h);
    assert_eq!(queued(&at_h), Some(2));
    blocks.push(next(&mut chain, &mut log, &mut seed, 2));
    let at_7 = chain.snapshot();
    assert_eq!(at_7.validator_count(), before_h);
    assert_eq!(queued(&at_7), Some(4));

    // Slot 8 starts an epoch: the entries final at height 8 − 2 (H's two) are applied, H+1's
    // are not yet final; the block's own two are queued after the epoch.
    blocks.push(next(&mut chain, &mut log, &mut seed, 2));
    let at_8 = chain.snapshot();
    assert_eq!(at_8.validator_count(), before_h + 2);
    assert_eq!(queued(&at_8), Some(4));
    for _ in 9..=11 {
        blocks.push(next(&mut chain, &mut log, &mut seed, 2));
    }
    let at_11 = chain.snapshot();
    assert_eq!(at_11.validator_count(), before_h + 2);
    assert_eq!(queued(&at_11), Some(10));
    // Slot 12: at most the churn limit (128 ETH with this few validators: 4 deposits).
    blocks.push(next(&mut chain, &mut log, &mut seed, 0));
    let at_12 = chain.snapshot();
    assert_eq!(at_12.validator_count(), before_h + 6);
    assert_eq!(queued(&at_12), Some(6));

    // Revert across the epoch boundaries at 12 and 8: the earlier root, registry and queue.
    while chain.head().height > 7 {
        chain.revert_head().unwrap();
    }
    assert_eq!(fingerprint(&chain.snapshot()), fingerprint(&at_7));
    assert_eq!(chain.head().state_root, at_7.root());
    // The same blocks import again onto it, to the same states.
    for block in &blocks[7..] {
        chain.import(block).unwrap();
    }
    assert_eq!(fingerprint(&chain.snapshot()), fingerprint(&at_12));

    // One more block, mid-drain; then a restart on the same directory.
    blocks.push(next(&mut chain, &mut log, &mut seed, 1));
    let at_13 = chain.snapshot();
    assert_eq!(queued(&at_13), Some(7));
    drop(chain);
    let mut chain = open(&setup, &path);
    assert_eq!(chain.head().hash, at_13.block_hash());
    assert_eq!(fingerprint(&chain.snapshot()), fingerprint(&at_13));

    // Empty blocks until the queue drains: every deposit applied exactly once.
    while chain.head().height < 40 {
        blocks.push(next(&mut chain, &mut log, &mut seed, 0));
    }
    let head = chain.snapshot();
    let deposited = u32::try_from(seed).unwrap();
    assert_eq!(head.validator_count(), GENESIS_VALIDATORS + deposited);
    assert_eq!(queued(&head), Some(0));
    let mut pubkeys: Vec<_> = (0..head.validator_count())
        .map(|i| head.validator(i).unwrap().0.pubkey)
        .collect();
    pubkeys.sort();
    pubkeys.dedup();
    assert_eq!(pubkeys.len(), head.validator_count() as usize);

    // Regeneration of evicted states (a fresh cache holds only the head), before and after H.
    chain.configure_state_cache(StateCacheConfig::default());
    let states = chain.states();
    for (height, expected) in [(12, &at_12), (7, &at_7), (8, &at_8)] {
        let state = states.state(&blocks[height - 1].hash()).unwrap();
        assert_eq!(
            fingerprint(&state),
            fingerprint(expected),
            "height {height}"
        );
    }
    let pre_h = states.state(&blocks[2].hash()).unwrap();
    assert_eq!(pre_h.root(), blocks[2].header.state_root);
    assert_eq!(queued(&pre_h), None);

    // After a restart, a state above the persisted anchor at 32 (finalized) is rebuilt from
    // it with its queue, and matches the stored root.
    let head_fp = fingerprint(&head);
    drop(states);
    drop(chain);
    let chain = open(&setup, &path);
    assert_eq!(fingerprint(&chain.snapshot()), head_fp);
    let states = chain.states();
    for height in [33usize, 36] {
        let state = states.state(&blocks[height - 1].hash()).unwrap();
        assert_eq!(state.root(), blocks[height - 1].header.state_root);
        assert_eq!(queued(&state), Some(0), "height {height}");
    }
}

/// The downgrade rule: while deposits are queued under deposits@3, a
/// proposal back to a deposits@2 module is refused with the reason; once the queue has
/// drained the same proposal is taken.
#[test]
fn a_proposal_back_to_deposits_v2_is_refused_while_the_queue_holds_deposits() {
    let setup = setup();
    let dir = tempfile::tempdir().unwrap();
    let mut chain = open_switching_at_h(&setup, &dir.path().join("db"));
    let mut log = DevDepositLog::new();
    let mut seed = 0u64;
    while chain.head().height < H {
        let deposits = if chain.head().height + 1 == H { 2 } else { 0 };
        next(&mut chain, &mut log, &mut seed, deposits);
    }
    assert_eq!(queued(&chain.snapshot()), Some(2));
    let back = UpgradeOp {
        kind: Kind::Deposits,
        module: setup.v2.hash().unwrap(),
        height: 20,
    };
    let err = chain.propose_upgrade(back).unwrap_err();
    assert!(
        matches!(err, ProposeError::CannotHoldQueue { queued: 2, .. }),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("modnode:deposits@2") && message.contains("2 deposits queued"),
        "{message}"
    );
    assert!(chain.proposals().is_empty());
    // The epoch at slot 8 applies both (final at 8 − 2): the queue is empty, v2 may come back.
    while chain.head().height < 8 {
        next(&mut chain, &mut log, &mut seed, 0);
    }
    assert_eq!(queued(&chain.snapshot()), Some(0));
    chain.propose_upgrade(back).unwrap();
    assert_eq!(chain.proposals().len(), 1);
}

/// A node warms a new deposits module on the deposits of its latest real blocks before it
/// attests readiness: a @3.0.0 module is warmed with its own calls (the block queued on an
/// empty queue), not refused for not answering @2.0.0's `process`, so a node with recent
/// deposits can attest it and the upgrade is not dropped at the readiness gate.
#[test]
fn a_deposits_v3_module_warms_up_on_a_nodes_recent_real_deposits() {
    use modnode::runtime::Modules;
    use modnode::runtime::deposits::DepositCall;
    use modnode::runtime::modules::InitialModules;
    use modnode::runtime::slot::SlotConfig;

    let modules = Modules::new(
        runtime(1_000_000_000),
        InitialModules {
            deposits: &super::artifact("deposits-v2"),
            checkpoint: &super::artifact("checkpoint-v1"),
            gossip_policy: &super::artifact("gossip-policy-v2"),
        },
        SlotConfig::default(),
    )
    .unwrap();
    let mut log = DevDepositLog::new();
    for seed in 0..3 {
        log.push(workload::new_validator(500 + seed, 32 * ETH, [0; 4]));
    }
    let eth1 = log.eth1_data();
    let proven = modnode::chain::eth1::DepositProofs::proven_deposits(
        &log,
        0,
        eth1.deposit_count,
        eth1.deposit_count,
    )
    .unwrap();
    let ctx = modnode::deposit::DepositContext {
        height: 1,
        slot: 1,
        genesis_fork_version: [0; 4],
        eth1_data: eth1,
        eth1_deposit_index: 0,
    };
    modules.record_deposits(DepositCall::new(
        super::shared(&modnode::state::Registry::new()),
        &ctx,
        &proven,
    ));
    let prepared = modules.prepare(&super::artifact("deposits-v3"));
    assert!(prepared.is_ok(), "{:?}", prepared.err());
}

/// Pruning folds deposits@3's per-block queue extents exactly like the eth1 and schedule
/// records (below finality, anchor heights as they are), and a pruned chain reopens with its
/// queue.
#[test]
fn pruning_drops_old_queue_extents_where_it_drops_eth1_records_and_the_chain_reopens() {
    use modnode::chain::prune::History;
    use modnode::store::KvStore;

    let setup = setup();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut chain = open_switching_at_h(&setup, &path);
    let mut log = DevDepositLog::new();
    let mut seed = 0u64;
    let mut blocks = Vec::new();
    while chain.head().height < 40 {
        let deposits = u64::from(chain.head().height < 12);
        blocks.push(next(&mut chain, &mut log, &mut seed, deposits));
    }
    chain
        .pruner(History::Blocks(4))
        .run_until_done(256)
        .unwrap();
    let head = chain.snapshot();
    drop(chain);
    let store = SledStore::open(&path).unwrap();
    let has = |prefix: &[u8], hash: &BlockHash| -> bool {
        store
            .get(&[prefix, hash.as_bytes()].concat())
            .unwrap()
            .is_some()
    };
    // Exactly where the eth1 state of a block is kept, its queue extent is (from H on).
    for (i, block) in blocks.iter().enumerate() {
        let height = i + 1;
        let hash = block.hash();
        let expected = height as u64 >= H && has(b"e", &hash);
        assert_eq!(has(b"p", &hash), expected, "height {height}");
    }
    assert!(!has(b"p", &blocks[9].hash()), "height 10's extent is kept");
    assert!(has(b"p", &head.block_hash()), "the head's extent is gone");
    drop(store);
    let chain = open(&setup, &path);
    assert_eq!(fingerprint(&chain.snapshot()), fingerprint(&head));
    assert!(chain.snapshot().pending().is_some());
}
