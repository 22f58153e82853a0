//! One bad deposit must not halt the chain. A block must carry every due
//! deposit, up to the genesis `max_deposits_per_block`; with a fixed fuel budget a large enough
//! block — 2,000 deposits with one bad signature under deposits-v2 (its batch fails and every
//! signature is checked again alone), or 2,000 valid ones under deposits-v1 — could not be
//! processed by any node, so no valid block could exist. The deposits call's budget now grows
//! with the block (`EngineProfile::deposits_budget_per_deposit`), and the genesis bounds
//! `max_deposits_per_block`.

use std::sync::Arc;

use modnode::chain::block::{Block, DepositData};
use modnode::chain::eth1::DepositProofs as _;
use modnode::chain::genesis::{Genesis, MAX_DEPOSITS_PER_BLOCK};
use modnode::chain::workload::{self, DevDepositLog};
use modnode::chain::{Chain, DepositEngine};
use modnode::consensus::DepositOutcome as Outcome;
use modnode::runtime::deposits::convert::deposit as to_wit;
use modnode::runtime::deposits::{BlockContext, WitEth1Data};
use modnode::runtime::{EngineProfile, Runtime, RuntimeConfig};
use modnode::state::Registry;
use modnode::store::MemoryStore;

use super::{deposits_module, runtime};

const ETH: u64 = 1_000_000_000;
const FORK: [u8; 4] = [0; 4];

/// A deposits engine with the budget the chain runs with (no fixed `fuel_per_call`).
fn consensus_engine(name: &str) -> DepositEngine {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    DepositEngine::Module(Box::new(deposits_module(&rt, name)))
}

/// `n` new-validator deposits; the one at `bad` (if any) carries another deposit's signature.
fn deposits(n: u64, bad: Option<u64>) -> Vec<DepositData> {
    (0..n)
        .map(|i| {
            let mut d = workload::new_validator(10_000 + i, 32 * ETH, FORK);
            if Some(i) == bad {
                d.signature = workload::new_validator(1, 32 * ETH, FORK).signature;
            }
            d
        })
        .collect()
}

/// A chain allowing `n` deposits per block, with a block carrying `deposits` (all due) built
/// on it.
fn chain_and_block(engine: DepositEngine, deposits: Vec<DepositData>) -> (Chain, Block) {
    let mut genesis = Genesis::generated("deposit-budget", 8, 11);
    genesis.max_deposits_per_block = u16::try_from(deposits.len()).unwrap();
    let chain = Chain::open(Arc::new(MemoryStore::new()), genesis, engine).unwrap();
    let mut log = DevDepositLog::new();
    for d in deposits {
        log.push(d);
    }
    let block = chain.build_block_from(1, 0, log.eth1_data(), &log).unwrap();
    (chain, block)
}

/// Imports a block of `n` due deposits (one bad signature at `bad`) under `module`: it must
/// be valid, the bad deposit skipped as phase0 says.
fn a_full_block_imports(module: &str, n: u64, bad: Option<u64>) {
    let (mut chain, block) = chain_and_block(consensus_engine(module), deposits(n, bad));
    assert_eq!(block.body.deposits.len() as u64, n);
    let imported = chain
        .import(&block)
        .unwrap_or_else(|e| panic!("{module}: a block of {n} due deposits is refused: {e}"));
    assert_eq!(imported.outcomes.len() as u64, n);
    for (i, outcome) in imported.outcomes.iter().enumerate() {
        if Some(i as u64) == bad {
            assert_eq!(*outcome, Outcome::InvalidSignature, "deposit {i}");
        } else {
            assert!(
                matches!(outcome, Outcome::Created(_)),
                "deposit {i}: {outcome:?}"
            );
        }
    }
    let expected = 8 + n - u64::from(bad.is_some());
    assert_eq!(u64::from(chain.snapshot().validator_count()), expected);
}

#[test]
fn two_thousand_due_deposits_with_one_bad_signature_make_a_valid_deposits_v2_block() {
    a_full_block_imports("deposits-v2", 2_000, Some(1_234));
}

#[test]
fn two_thousand_valid_due_deposits_make_a_valid_deposits_v1_block() {
    a_full_block_imports("deposits-v1", 2_000, None);
}

/// The genesis maximum, under both engines, each at its worst. Minutes in a debug build:
/// run with `--ignored`.
#[test]
#[ignore]
fn a_block_of_the_genesis_maximum_is_valid_under_every_deposits_module_at_its_worst() {
    let n = u64::from(MAX_DEPOSITS_PER_BLOCK);
    a_full_block_imports("deposits-v2", n, Some(n - 1));
    a_full_block_imports("deposits-v1", n, None);
}

#[test]
fn a_genesis_above_the_deposit_limit_is_refused_naming_the_field_and_the_bound() {
    let json = |max: u32| {
        format!(
            r#"{{"chain_id": "limit", "max_deposits_per_block": {max},
                "generated_validators": {{"count": 4, "seed": 1}}}}"#
        )
    };
    let at = Genesis::from_json(&json(u32::from(MAX_DEPOSITS_PER_BLOCK)), "at.json").unwrap();
    assert_eq!(at.max_deposits_per_block, MAX_DEPOSITS_PER_BLOCK);
    let over = u32::from(MAX_DEPOSITS_PER_BLOCK) + 1;
    let err = Genesis::from_json(&json(over), "over.json")
        .unwrap_err()
        .to_string();
    assert!(err.contains("over.json"), "{err}");
    assert!(err.contains("max_deposits_per_block"), "{err}");
    assert!(err.contains(&over.to_string()), "{err}");
    assert!(err.contains(&MAX_DEPOSITS_PER_BLOCK.to_string()), "{err}");
}

/// Fuel of one deposits call over `deposits` (all proven, on an empty registry), with an
/// unbounded budget.
fn fuel(module: &str, deposits: Vec<DepositData>) -> u64 {
    let rt = runtime(u64::MAX / 2);
    let module = deposits_module(&rt, module);
    let mut log = DevDepositLog::new();
    for d in deposits {
        log.push(d);
    }
    let eth1 = log.eth1_data();
    let proven = log
        .proven_deposits(0, eth1.deposit_count, eth1.deposit_count)
        .unwrap();
    let ctx = BlockContext {
        height: 1,
        slot: 1,
        genesis_fork_version: FORK.to_vec(),
        eth1_data: WitEth1Data {
            deposit_root: eth1.deposit_root.to_vec(),
            deposit_count: eth1.deposit_count,
            block_hash: eth1.block_hash.to_vec(),
        },
        eth1_deposit_index: 0,
    };
    let registry = Arc::new(Registry::new());
    let out = module
        .process(registry, ctx, proven.iter().map(to_wit).collect())
        .unwrap()
        .unwrap();
    out.fuel_used
}

#[test]
fn the_per_deposit_budget_covers_every_deposits_module_at_its_worst_with_a_margin() {
    let profile = EngineProfile::build();
    let per_deposit = profile.deposits_budget_per_deposit;
    let (small, large) = (64u64, 192u64);
    // Each module at its worst: v1 checks every signature alone; v2's batch fails on one bad
    // signature and it checks every one alone again.
    for (module, bad) in [("deposits-v1", None), ("deposits-v2", Some(0))] {
        let at_small = fuel(module, deposits(small, bad));
        let at_large = fuel(module, deposits(large, bad));
        let marginal = (at_large - at_small) / (large - small);
        println!("{module}: {at_small} fuel for {small} deposits, {marginal} per deposit more");
        assert!(
            marginal * 3 / 2 <= per_deposit,
            "{module} needs {marginal} fuel per deposit; the profile gives {per_deposit} \
             (less than a 1.5x margin)"
        );
        assert!(at_small <= profile.deposits_budget(small).unwrap());
        // Extrapolated to the genesis maximum, still within that block's budget.
        let max = u64::from(MAX_DEPOSITS_PER_BLOCK);
        let at_max = at_small + marginal * (max - small);
        assert!(at_max <= profile.deposits_budget(max).unwrap(), "{module}");
    }
}
