//! A deposits module's migration (`modnode:deposits/migration@3.0.0`): run exactly once, in the
//! transition of the block at the module's activation height, on its parent's state, before
//! its deposits — not on the heights around it, not on a replay of the parent, not again after
//! a restart, again on a branch that re-imports the height. A migration that never finishes is
//! refused at `propose` and, scheduled anyway, stops import at its height naming the module.
//! The downgrade path: back to deposits@2 with deposits queued only with a down-migration that
//! drains the queue into the registry.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use modnode::chain::block::{Block, BlockHash, StateRoot};
use modnode::chain::genesis::Genesis;
use modnode::chain::workload::{self, DevDepositLog};
use modnode::chain::{
    Chain, DepositEngine, DepositModules, FailureClass, ImportError, ProposeError,
};
use modnode::hashes::ModuleHash;
use modnode::runtime::Kind;
use modnode::runtime::inspect::validate;
use modnode::state::{PendingQueue, State, UpgradeOp};
use modnode::state_cache::StateCacheConfig;
use modnode::store::SledStore;

use super::{artifact, deposits_module, runtime};

const ETH: u64 = 1_000_000_000;
/// The activation height of the first switch.
const H: u64 = 6;
/// Validators in the genesis.
const GENESIS_VALIDATORS: u32 = 8;

/// Deposits modules by hash (the node's prepared modules).
struct Engines(HashMap<ModuleHash, DepositEngine>);

impl DepositModules for Engines {
    fn deposits(&self, hash: &ModuleHash) -> Option<DepositEngine> {
        self.0.get(hash).cloned()
    }
}

struct Setup {
    genesis: Genesis,
    v2: DepositEngine,
    engines: HashMap<&'static str, DepositEngine>,
}

impl Setup {
    fn hash(&self, name: &str) -> ModuleHash {
        self.engines[name].hash().unwrap()
    }

    fn modules(&self) -> Arc<Engines> {
        Arc::new(Engines(
            self.engines
                .values()
                .map(|e| (e.hash().unwrap(), e.clone()))
                .collect(),
        ))
    }
}

fn setup() -> Setup {
    let rt = runtime(10_000_000_000);
    let v2 = deposits_module(&rt, "deposits-v2");
    let mut genesis = Genesis::generated("deposits-migration", GENESIS_VALIDATORS, 20);
    genesis.slots_per_epoch = Some(4);
    genesis.finality_depth = 2;
    genesis.upgrade_lead_blocks = 2;
    genesis.deposits_module = Some(v2.hash().0);
    let engines = [
        "deposits-v3",
        "fixture-deposits-v3-migrate",
        "fixture-deposits-v3-migrate-loop",
        "fixture-deposits-v2-drain",
    ]
    .into_iter()
    .map(|name| {
        (
            name,
            DepositEngine::Module(Box::new(deposits_module(&rt, name))),
        )
    })
    .collect();
    Setup {
        genesis,
        v2: DepositEngine::Module(Box::new(v2)),
        engines,
    }
}

fn open(setup: &Setup, path: &Path) -> Chain {
    let store = Arc::new(SledStore::open(path).unwrap());
    let mut chain = Chain::open(store, setup.genesis.clone(), setup.v2.clone()).unwrap();
    chain.set_deposit_modules(setup.modules());
    chain
}

fn upgrade(module: ModuleHash, height: u64) -> UpgradeOp {
    UpgradeOp {
        kind: Kind::Deposits,
        module,
        height,
    }
}

/// Adds `deposits` new validators to the log.
fn deposit(log: &mut DevDepositLog, seed: &mut u64, deposits: u64) {
    for _ in 0..deposits {
        *seed += 1;
        log.push(workload::new_validator(1000 + *seed, 32 * ETH, [0; 4]));
    }
}

/// Builds the next block (slot = head slot + 1) carrying every due deposit of `log`.
fn build(chain: &Chain, log: &DevDepositLog) -> Block {
    let slot = chain.head().slot + 1;
    chain
        .build_block_from(slot, 0, log.eth1_data(), log)
        .unwrap()
}

/// Builds and imports the next block with `deposits` new validators.
fn next(chain: &mut Chain, log: &mut DevDepositLog, seed: &mut u64, deposits: u64) -> Block {
    deposit(log, seed, deposits);
    let block = build(chain, log);
    chain.import(&block).unwrap();
    block
}

fn queued(state: &State) -> Option<u64> {
    state.pending().map(PendingQueue::len)
}

fn to_consume(state: &State) -> Option<u64> {
    state.pending().map(PendingQueue::balance_to_consume)
}

/// The marker `fixture-deposits-v3-migrate` writes into `deposit_balance_to_consume`, from the
/// state it runs on.
fn marker(validators: u32, queued: u64) -> u64 {
    u64::from(validators) * 1_000 + queued * 10 + 7
}

fn fingerprint(state: &State) -> (BlockHash, StateRoot, u32, Option<u64>, Option<u64>) {
    (
        state.block_hash(),
        state.root(),
        state.validator_count(),
        queued(state),
        to_consume(state),
    )
}

#[test]
fn the_migration_flag_shows_on_modules_that_export_one_and_old_modules_keep_their_exports() {
    for (name, major, migrates) in [
        ("deposits-v2", 2, false),
        ("deposits-v3", 3, false),
        ("fixture-deposits-v3-migrate", 3, true),
        ("fixture-deposits-v3-migrate-loop", 3, true),
        ("fixture-deposits-v2-drain", 2, true),
        ("fixture-deposits-v3-migrate-add", 3, true),
    ] {
        let info = validate(&artifact(name)).unwrap();
        assert_eq!(info.contract.major, major, "{name}");
        assert_eq!(info.has_migration(), migrates, "{name}");
        let rt = runtime(1_000_000_000);
        let module = deposits_module(&rt, name);
        assert_eq!(module.has_migration(), migrates, "{name}");
        // The propose-time cost check runs the migrations that finish and passes them.
        if !name.ends_with("-loop") && !name.ends_with("-add") {
            modnode::node::upgrades::deposit_cost::check(&module, 1, 16)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    // A module without the export has none of the migration's names in its component.
    let v3 = validate(&artifact("deposits-v3")).unwrap();
    assert!(
        !v3.exports.iter().any(|e| e.contains("migration")),
        "{:?}",
        v3.exports
    );
}

/// upgrade-check's idempotency rule: the migration run again on its own result must change
/// nothing; the propose-time check refuses one that does.
#[test]
fn a_migration_that_changes_the_state_again_when_run_twice_is_refused_by_the_check() {
    use modnode::deposit::ChainContext;
    use modnode::upgrade_check::migration::{TwiceError, run_twice};

    let rt = runtime(1_000_000_000);
    let ctx = ChainContext {
        height: 2,
        finality_depth: 0,
        genesis_fork_version: [0; 4],
    };
    let registry = modnode::state::Registry::new();
    let queue = PendingQueue::new();
    let adding = deposits_module(&rt, "fixture-deposits-v3-migrate-add");
    let err = run_twice(&adding, &registry, &queue, &ctx).unwrap_err();
    assert!(matches!(err, TwiceError::NotIdempotent { .. }), "{err}");
    let cost = modnode::node::upgrades::deposit_cost::check(&adding, 1, 16).unwrap_err();
    assert!(cost.contains("not idempotent"), "{cost}");
    // The marker migration sets, so its second run is a no-op: same roots, and it ran.
    let marking = deposits_module(&rt, "fixture-deposits-v3-migrate");
    let twice = run_twice(&marking, &registry, &queue, &ctx).unwrap();
    assert_eq!(twice.roots_once, twice.roots_twice);
    assert_ne!(twice.roots_once.1, queue.root());
    assert!(twice.fuel_once > 0 && twice.fuel_twice > 0);
}

#[test]
fn a_migration_runs_exactly_once_at_its_activation_height_and_again_on_a_branch_that_reimports_it()
{
    let setup = setup();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut chain = open(&setup, &path);
    let module = setup.hash("fixture-deposits-v3-migrate");
    chain.propose_upgrade(upgrade(module, H)).unwrap();
    let mut log = DevDepositLog::new();
    let mut seed = 0u64;
    let mut blocks: Vec<Block> = Vec::new();
    for _ in 1..H {
        blocks.push(next(&mut chain, &mut log, &mut seed, 1));
    }
    assert_eq!(chain.schedule().module_at(Kind::Deposits, H), Some(module));
    let before = chain.snapshot();
    assert_eq!(queued(&before), None, "nothing migrated before H");
    let validators = GENESIS_VALIDATORS + (H - 1) as u32;
    assert_eq!(before.validator_count(), validators);

    // H: the migration ran on H − 1's state (13 validators, no queue), before the block's two
    // deposits were queued.
    blocks.push(next(&mut chain, &mut log, &mut seed, 2));
    let at_h = chain.snapshot();
    assert_eq!(queued(&at_h), Some(2));
    assert_eq!(to_consume(&at_h), Some(marker(validators, 0)));

    // A restart at H; then H + 1 (slot 7, no epoch): not run again — on H's state it would
    // write the marker of a queue of 2.
    drop(chain);
    let mut chain = open(&setup, &path);
    assert_eq!(fingerprint(&chain.snapshot()), fingerprint(&at_h));
    blocks.push(next(&mut chain, &mut log, &mut seed, 2));
    let at_h1 = chain.snapshot();
    assert_eq!(queued(&at_h1), Some(4));
    assert_eq!(to_consume(&at_h1), Some(marker(validators, 0)));
    assert_ne!(marker(validators, 0), marker(validators, 2));

    // Replays of H − 1 and H by the state cache (a fresh cache holds only the head): H − 1 has
    // no queue, H is the imported state.
    chain.configure_state_cache(StateCacheConfig::default());
    let states = chain.states();
    let replayed = states.state(&blocks[H as usize - 2].hash()).unwrap();
    assert_eq!(fingerprint(&replayed), fingerprint(&before));
    let replayed = states.state(&blocks[H as usize - 1].hash()).unwrap();
    assert_eq!(fingerprint(&replayed), fingerprint(&at_h));
    drop(states);

    // A reorg: H + 1 and H reverted, the parent's state is back (no queue, no marker)...
    chain.revert_head().unwrap();
    chain.revert_head().unwrap();
    assert_eq!(fingerprint(&chain.snapshot()), fingerprint(&before));
    // ...and another block at H (three deposits, a slot later) runs the migration again on
    // the new branch.
    deposit(&mut log, &mut seed, 1);
    let slot = chain.head().slot + 2;
    let other = chain
        .build_block_from(slot, 0, log.eth1_data(), &log)
        .unwrap();
    assert_ne!(other.hash(), blocks[H as usize - 1].hash());
    chain.import(&other).unwrap();
    let branch = chain.snapshot();
    assert_eq!(queued(&branch), Some(5));
    assert_eq!(to_consume(&branch), Some(marker(validators, 0)));

    // Another node importing the branch reaches the same root at every height (import checks
    // each header's root), so the migration is deterministic.
    let other_dir = tempfile::tempdir().unwrap();
    let mut follower = open(&setup, &other_dir.path().join("db"));
    for block in blocks.iter().take(H as usize - 1).chain([&other]) {
        follower.import(block).unwrap();
    }
    assert_eq!(fingerprint(&follower.snapshot()), fingerprint(&branch));
}

#[test]
fn a_migration_that_runs_out_of_fuel_is_refused_at_propose_and_stops_import_at_its_height() {
    let mut setup = setup();
    // A small budget, so running out of it is quick.
    let small = runtime(50_000_000);
    setup.engines.insert(
        "fixture-deposits-v3-migrate-loop",
        DepositEngine::Module(Box::new(deposits_module(
            &small,
            "fixture-deposits-v3-migrate-loop",
        ))),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut chain = open(&setup, &dir.path().join("db"));
    let looping = setup.hash("fixture-deposits-v3-migrate-loop");
    let err = chain.propose_upgrade(upgrade(looping, H)).unwrap_err();
    assert!(matches!(err, ProposeError::MigrationFails { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&hex::encode(looping)) && message.contains("fuel"),
        "{message}"
    );
    assert!(chain.proposals().is_empty());
    // The admin's cost check before it refuses it too, on a generated queue.
    let DepositEngine::Module(module) = &setup.engines["fixture-deposits-v3-migrate-loop"] else {
        panic!("not a module");
    };
    let cost = modnode::node::upgrades::deposit_cost::check(module, 1, 16).unwrap_err();
    assert!(
        cost.contains("migration") && cost.contains("budget"),
        "{cost}"
    );

    // Scheduled anyway (voted by nodes that never ran it: here, a node that holds the real
    // v3's code under the looping module's hash), the chain reaches H − 1.
    let mut lying = setup.modules();
    Arc::get_mut(&mut lying)
        .unwrap()
        .0
        .insert(looping, setup.engines["deposits-v3"].clone());
    chain.set_deposit_modules(lying);
    chain.propose_upgrade(upgrade(looping, H)).unwrap();
    let mut log = DevDepositLog::new();
    let mut seed = 0u64;
    for _ in 1..H {
        next(&mut chain, &mut log, &mut seed, 1);
    }
    assert_eq!(chain.schedule().module_at(Kind::Deposits, H), Some(looping));
    // A block at H from such a peer...
    deposit(&mut log, &mut seed, 1);
    let block = build(&chain, &log);
    let parent = chain.snapshot();
    // ...is refused by a node that holds the real module: import stops at H − 1, naming the
    // module, blaming no one.
    chain.set_deposit_modules(setup.modules());
    let err = chain.import(&block).unwrap_err();
    assert!(
        matches!(err, ImportError::Migration { height: H, .. }),
        "{err}"
    );
    assert_eq!(err.class(), FailureClass::Ours);
    let message = err.to_string();
    assert!(message.contains(&hex::encode(looping)), "{message}");
    assert_eq!(chain.head().height, H - 1);
    assert_eq!(fingerprint(&chain.snapshot()), fingerprint(&parent));
    // The same again: the block is not remembered as invalid, and fails the same way.
    let again = chain.import(&block).unwrap_err();
    assert!(matches!(again, ImportError::Migration { .. }), "{again}");
}

#[test]
fn a_switch_back_to_deposits_v2_with_deposits_queued_needs_a_down_migration_that_drains_them() {
    let setup = setup();
    let dir = tempfile::tempdir().unwrap();
    let mut chain = open(&setup, &dir.path().join("db"));
    // The reference: deposits-v2 all along, on the same deposits.
    let reference_dir = tempfile::tempdir().unwrap();
    let mut reference = open(&setup, &reference_dir.path().join("db"));
    chain
        .propose_upgrade(upgrade(setup.hash("deposits-v3"), H))
        .unwrap();
    let mut log = DevDepositLog::new();
    let mut seed = 0u64;
    // The next block of each chain, on the same deposits.
    let both = |chain: &mut Chain,
                reference: &mut Chain,
                log: &mut DevDepositLog,
                seed: &mut u64,
                deposits: u64| {
        deposit(log, seed, deposits);
        let block = build(chain, log);
        chain.import(&block).unwrap();
        let block = build(reference, log);
        reference.import(&block).unwrap();
    };
    while chain.head().height < H + 1 {
        both(&mut chain, &mut reference, &mut log, &mut seed, 2);
    }
    assert_eq!(queued(&chain.snapshot()), Some(4));

    // Back to deposits-v2 at H2: refused while deposits are queued, the reason given.
    const H2: u64 = 14;
    let err = chain
        .propose_upgrade(upgrade(setup.v2.hash().unwrap(), H2))
        .unwrap_err();
    assert!(
        matches!(err, ProposeError::CannotHoldQueue { queued: 4, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("down-migration"), "{err}");
    // A deposits@2 module whose down-migration drains the queue is taken.
    let drain = setup.hash("fixture-deposits-v2-drain");
    chain.propose_upgrade(upgrade(drain, H2)).unwrap();
    assert_eq!(chain.proposals().len(), 1);

    while chain.head().height < H2 - 1 {
        both(&mut chain, &mut reference, &mut log, &mut seed, 2);
    }
    assert_eq!(chain.schedule().module_at(Kind::Deposits, H2), Some(drain));
    let before = chain.snapshot();
    let waiting = queued(&before).unwrap();
    assert!(waiting > 4, "{waiting} queued before H2");
    assert!(before.validator_count() < reference.snapshot().validator_count());

    // H2: the queue is drained into the registry, then the block's own deposits are applied
    // at once: every deposit applied exactly once, in deposit order, as deposits-v2 all along
    // applied them — the same registry, leaf for leaf.
    both(&mut chain, &mut reference, &mut log, &mut seed, 2);
    let after = chain.snapshot();
    let expected = reference.snapshot();
    assert_eq!(queued(&after), Some(0));
    assert_eq!(to_consume(&after), Some(0));
    assert_eq!(after.validator_count(), GENESIS_VALIDATORS + seed as u32);
    assert_eq!(after.validator_count(), expected.validator_count());
    assert_eq!(after.registry_root(), expected.registry_root());
    // And deposits-v2 goes on applying at once.
    both(&mut chain, &mut reference, &mut log, &mut seed, 1);
    let after = chain.snapshot();
    assert_eq!(queued(&after), Some(0));
    assert_eq!(after.registry_root(), reference.snapshot().registry_root());
}
