//! `modnode:deposits@3.0.0` with the real `deposits-v3` component: a block's
//! deposits are queued through the host's queue overlay, `process-epoch` applies them once
//! final, 16 at a time, the registry ends where deposits-v2 leaves it for the same deposits,
//! and an epoch's work does not grow with the queue. The @2.0.0 modules keep their bytes.

use std::sync::Arc;

use modnode::chain::block::DepositData;
use modnode::chain::eth1::DepositProofs as _;
use modnode::chain::workload::{self, DevDepositLog};
use modnode::runtime::deposits::convert::deposit as to_wit;
use modnode::runtime::deposits::v3::EpochContext;
use modnode::runtime::deposits::{BlockContext, Deposit, DepositsModule, WitEth1Data};
use modnode::runtime::inspect::validate;
use modnode::runtime::{CallError, Runtime};
use modnode::state::{PendingDelta, PendingDeposit, PendingQueue, Registry, RegistryRead as _};

use super::{artifact, deposits_module, runtime};

const FORK: [u8; 4] = [0; 4];
const ETH: u64 = 1_000_000_000;

/// `deposits` proven in a fresh deposit log, with the context of the block at `height`.
fn block(height: u64, deposits: &[DepositData]) -> (BlockContext, Vec<Deposit>) {
    let mut log = DevDepositLog::new();
    for d in deposits {
        log.push(*d);
    }
    let eth1 = log.eth1_data();
    let proven = log
        .proven_deposits(0, eth1.deposit_count, eth1.deposit_count)
        .unwrap();
    let ctx = BlockContext {
        height,
        slot: height + 3,
        genesis_fork_version: FORK.to_vec(),
        eth1_data: WitEth1Data {
            deposit_root: eth1.deposit_root.to_vec(),
            deposit_count: eth1.deposit_count,
            block_hash: eth1.block_hash.to_vec(),
        },
        eth1_deposit_index: 0,
    };
    (ctx, proven.iter().map(to_wit).collect())
}

/// 40 deposits: 20 new validators (one of them twice more as top-ups), one bad signature.
fn stream() -> Vec<DepositData> {
    let mut out: Vec<DepositData> = (0..20)
        .map(|i| workload::new_validator(i, 32 * ETH, FORK))
        .collect();
    let first = out[0].pubkey;
    out.push(workload::unsigned(first, 2 * ETH));
    out.push(workload::unsigned([0x99; 48], 32 * ETH));
    for i in 0..18 {
        out.push(workload::unsigned(out[i as usize % 20].pubkey, ETH));
    }
    out
}

fn epoch(height: u64, finality_depth: u64) -> EpochContext {
    EpochContext {
        height,
        finality_depth,
        genesis_fork_version: FORK.to_vec(),
    }
}

struct State {
    registry: Registry,
    pending: PendingQueue,
}

impl State {
    fn shared(&self) -> Arc<Registry> {
        Arc::new(self.registry.clone())
    }
}

fn run_epoch(module: &DepositsModule, state: &mut State, ctx: EpochContext) -> (usize, u64) {
    let out = module
        .process_epoch(state.shared(), state.pending.clone(), ctx)
        .unwrap()
        .unwrap();
    state.registry.apply(&out.delta).unwrap();
    state.pending.apply(&out.pending).unwrap();
    assert_eq!(
        out.result.deposit_balance_to_consume,
        state.pending.balance_to_consume()
    );
    (out.result.outcomes.len(), out.fuel_used)
}

#[test]
fn deposits_v3_queues_a_block_and_its_epochs_drain_it_into_v2s_registry() {
    let rt = runtime(u64::MAX / 4);
    let v3 = deposits_module(&rt, "deposits-v3");
    assert_eq!(v3.contract().major, 3);
    let v2 = deposits_module(&rt, "deposits-v2");
    let deposits = stream();
    let (ctx, wit) = block(5, &deposits);

    let mut state = State {
        registry: Registry::new(),
        pending: PendingQueue::new(),
    };
    let queued = v3
        .process_v3(state.shared(), state.pending.clone(), &ctx, &wit)
        .unwrap()
        .unwrap();
    assert_eq!(queued.result.queued, 40);
    assert_eq!(queued.result.eth1_deposit_index, 40);
    assert!(
        queued.delta.is_empty(),
        "a block applies nothing under Electra"
    );
    assert_eq!(queued.pending.pushed.len(), 40);
    assert!(
        queued
            .pending
            .pushed
            .iter()
            .all(|p| p.height == 5 && p.slot == 8)
    );
    state.pending.apply(&queued.pending).unwrap();

    // Not final before height 5 + 4.
    assert_eq!(run_epoch(&v3, &mut state, epoch(8, 4)).0, 0);
    assert_eq!(state.pending.len(), 40);
    let mut epochs = 0;
    while !state.pending.is_empty() {
        let (applied, _) = run_epoch(&v3, &mut state, epoch(9 + epochs, 4));
        assert!((1..=16).contains(&applied));
        epochs += 1;
    }
    // The churn limit on an empty registry is 128 ETH: four 32-ETH validators per epoch for
    // five epochs, then 16 entries (the 2-ETH top-up, the bad one, 14 top-ups), then 4.
    assert_eq!(epochs, 7);

    // deposits-v2 on the same block: the same registry (0x00 credentials, ≤ 32 ETH each).
    let reference = Arc::new(Registry::new());
    let out = v2.process(reference.clone(), ctx, wit).unwrap().unwrap();
    let mut expected = Registry::new();
    expected.apply(&out.delta).unwrap();
    assert_eq!(state.registry.root(), expected.root());
    assert_eq!(state.registry.len(), 20);
    // Conservation: 40 deposits, one with a bad signature for an unknown key is lost.
    let total: u64 = deposits.iter().map(|d| d.amount).sum::<u64>() - 32 * ETH;
    let balances: u64 = (0..20).map(|i| state.registry.balance(i).unwrap()).sum();
    assert_eq!(balances, total);
}

fn entry(i: u64, pubkey: [u8; 48]) -> PendingDeposit {
    PendingDeposit {
        pubkey,
        withdrawal_credentials: [0; 32],
        amount: ETH,
        signature: [0xab; 96],
        slot: i,
        height: 1,
    }
}

/// A registry of one validator and a queue of `len` final top-ups of it.
fn queue_of(v3: &DepositsModule, len: u64) -> State {
    let d = workload::new_validator(7, 32 * ETH, FORK);
    let (ctx, wit) = block(1, &[d]);
    let mut state = State {
        registry: Registry::new(),
        pending: PendingQueue::new(),
    };
    let queued = v3
        .process_v3(state.shared(), state.pending.clone(), &ctx, &wit)
        .unwrap()
        .unwrap();
    state.pending.apply(&queued.pending).unwrap();
    run_epoch(v3, &mut state, epoch(10, 1));
    assert_eq!(state.registry.len(), 1);
    state
        .pending
        .apply(&PendingDelta {
            pushed: (0..len).map(|i| entry(i, d.pubkey)).collect(),
            dropped: 0,
            balance_to_consume: None,
        })
        .unwrap();
    state
}

#[test]
fn an_epochs_fuel_follows_the_deposits_applied_not_the_queue_length() {
    let rt = runtime(u64::MAX / 4);
    let v3 = deposits_module(&rt, "deposits-v3");
    let mut small = queue_of(&v3, 1_000);
    let mut large = queue_of(&v3, 200_000);
    let (applied_small, fuel_small) = run_epoch(&v3, &mut small, epoch(20, 1));
    let (applied_large, fuel_large) = run_epoch(&v3, &mut large, epoch(20, 1));
    assert_eq!((applied_small, applied_large), (16, 16));
    assert_eq!(fuel_small, fuel_large);
    assert_eq!(large.pending.len(), 200_000 - 16);
    assert_eq!(large.registry.balance(0), Some(32 * ETH + 16 * ETH));
}

#[test]
fn each_contract_s_calls_are_refused_on_the_other_s_modules() {
    let rt: Runtime = runtime(u64::MAX / 4);
    let v2 = deposits_module(&rt, "deposits-v2");
    let v3 = deposits_module(&rt, "deposits-v3");
    let (ctx, wit) = block(1, &stream()[..2]);
    let registry = Arc::new(Registry::new());
    assert!(matches!(
        v3.process(registry.clone(), ctx.clone(), wit.clone()),
        Err(CallError::Host(_))
    ));
    assert!(matches!(
        v2.process_v3(registry.clone(), PendingQueue::new(), &ctx, &wit),
        Err(CallError::Host(_))
    ));
    assert!(matches!(
        v2.process_epoch(registry, PendingQueue::new(), epoch(1, 0)),
        Err(CallError::Host(_))
    ));
}

#[test]
fn the_deposits_modules_keep_their_bytes() {
    for (name, sha256) in [
        (
            "deposits-v1",
            "453c32b274716a43736cc395067a3d561b6a552e36010542ca2b30172b49d4e9",
        ),
        (
            "deposits-v2",
            "1a2373632006efb78634ca6b308d2f75e402510aa074a9fce795a24c6ac3a00e",
        ),
        // Landed (stop 30) and runnable on chains since: its bytes never change either.
        (
            "deposits-v3",
            "46e9815dddcc2a7d3718d2059046ccaac1bc993d54518186d0b9fdd1bfe5c49c",
        ),
    ] {
        assert_eq!(
            hex::encode(validate(&artifact(name)).unwrap().sha256),
            sha256,
            "{name}"
        );
    }
    let info = validate(&artifact("deposits-v3")).unwrap();
    assert_eq!(info.contract.major, 3);
}

/// The transition's deposits@3 step over a dev genesis with 4-slot epochs and finality 2: the
/// epoch runs only on the first block of an epoch, before the block's own deposits; the
/// registry delta is the parent's to the end; a block that crosses no boundary applies
/// nothing.
#[test]
fn the_transition_step_runs_the_epoch_on_boundaries_before_the_blocks_deposits() {
    use modnode::chain::deposits_v3;
    use modnode::chain::genesis::Genesis;

    let rt = runtime(u64::MAX / 4);
    let v3 = deposits_module(&rt, "deposits-v3");
    let mut genesis = Genesis::dev();
    genesis.slots_per_epoch = Some(4);
    genesis.finality_depth = 2;
    let mut registry = genesis.registry().unwrap();
    let base_count = registry.len();
    let mut pending = PendingQueue::new();
    let deposits: Vec<DepositData> = (100..103)
        .map(|i| workload::new_validator(i, 32 * ETH, FORK))
        .collect();
    let mut log = DevDepositLog::new();
    for d in &deposits {
        log.push(*d);
    }
    let eth1 = log.eth1_data();
    let proven = log.proven_deposits(0, 3, 3).unwrap();
    let ctx_at = |height: u64, slot: u64, index: u64| modnode::deposit::DepositContext {
        height,
        slot,
        genesis_fork_version: FORK,
        eth1_data: eth1,
        eth1_deposit_index: index,
    };

    // Height 1, slot 1: queues the three deposits; no boundary (slot 0 → 1).
    let step = deposits_v3::run(
        &v3,
        &genesis,
        &registry,
        &pending,
        0,
        &ctx_at(1, 1, 0),
        &proven,
    )
    .unwrap();
    assert!(step.epoch.is_none());
    assert!(step.delta.is_empty());
    assert_eq!(step.pending.len(), 3);
    assert_eq!(step.eth1_deposit_index, 3);
    pending = step.pending;

    // Height 2, slot 4: a boundary, but the entries of height 1 are not final (1 + 2 > 2).
    let step =
        deposits_v3::run(&v3, &genesis, &registry, &pending, 1, &ctx_at(2, 4, 3), &[]).unwrap();
    assert_eq!(step.epoch.map(|e| e.outcomes.len()), Some(0));
    assert_eq!(step.pending.len(), 3);
    pending = step.pending;

    // Height 3, slot 5: final now, but no boundary (slot 4 → 5): nothing applied.
    let step =
        deposits_v3::run(&v3, &genesis, &registry, &pending, 4, &ctx_at(3, 5, 3), &[]).unwrap();
    assert!(step.epoch.is_none());
    assert_eq!(step.pending.len(), 3);

    // Height 3, slot 9 (slots 5–8 empty): a boundary; the churn (128 ETH over 64 genesis
    // validators' 2048 ETH) takes all three 32-ETH deposits.
    let step =
        deposits_v3::run(&v3, &genesis, &registry, &pending, 4, &ctx_at(3, 9, 3), &[]).unwrap();
    assert_eq!(step.epoch.as_ref().map(|e| e.outcomes.len()), Some(3));
    assert!(step.pending.is_empty());
    assert_eq!(step.delta.added.len(), 3);
    registry.apply(&step.delta).unwrap();
    assert_eq!(registry.len(), base_count + 3);
    assert_eq!(registry.index_of(&deposits[2].pubkey), Some(base_count + 2));

    // A block whose deposits are not the due ones is refused before anything is queued.
    let err = deposits_v3::run(
        &v3,
        &genesis,
        &registry,
        &pending,
        9,
        &ctx_at(4, 10, 1),
        &proven,
    )
    .unwrap_err();
    assert!(
        matches!(err, deposits_v3::V3StepError::Rejected(_)),
        "{err}"
    );
}

/// The chain carries deposits@3's queue (import, revert, store, state cache: see
/// `deposits_v3_chain`), so `module propose`'s cost check measures a @3.0.0 module like any
/// other — its block call queues a full block within budget and its epoch transition finishes
/// a queue of final deposits — and accepts it (it refused every @3.0.0 module before).
#[test]
fn a_deposits_v3_module_passes_the_propose_cost_check_now_that_the_chain_carries_its_queue() {
    let rt = runtime(u64::MAX / 4);
    let v3 = deposits_module(&rt, "deposits-v3");
    let cost = modnode::node::upgrades::deposit_cost::check(&v3, 1, 16).unwrap();
    assert!(cost.per_deposit > 0, "{cost:?}");
    assert!(cost.full_block <= cost.full_budget, "{cost:?}");
}

/// The real deposits-v3 component with real BLS: an epoch's new validators are checked in one
/// host batch (its host fuel is below what 16 single checks alone would charge), and a bad
/// signature among them gives the one-by-one outcomes — that entry dropped, the others created
/// in queue order — through one single check per entry after the failed batch.
#[test]
fn an_epochs_new_validators_are_checked_in_one_batch_with_the_one_by_one_outcomes() {
    use modnode::runtime::deposits::v3::EpochOutcome;
    use modnode::runtime::profile::EngineProfile;

    let rt = runtime(u64::MAX / 4);
    let v3 = deposits_module(&rt, "deposits-v3");
    let bls_verify = EngineProfile::build().host_calls.bls_verify;
    let signed: Vec<DepositData> = (0..16)
        .map(|i| workload::new_validator(300 + i, 8 * ETH, FORK))
        .collect();
    let run = |deposits: &[DepositData]| {
        let mut pending = PendingQueue::new();
        pending
            .apply(&PendingDelta {
                pushed: deposits
                    .iter()
                    .map(|d| PendingDeposit {
                        pubkey: d.pubkey,
                        withdrawal_credentials: d.withdrawal_credentials,
                        amount: d.amount,
                        signature: d.signature,
                        slot: 1,
                        height: 1,
                    })
                    .collect(),
                dropped: 0,
                balance_to_consume: None,
            })
            .unwrap();
        let registry = Arc::new(Registry::new());
        v3.process_epoch(registry, pending, epoch(10, 1))
            .unwrap()
            .unwrap()
    };

    let valid = run(&signed);
    assert_eq!(
        valid.result.outcomes,
        (0..16).map(EpochOutcome::Created).collect::<Vec<_>>()
    );
    assert!(
        valid.host_fuel < 16 * bls_verify,
        "host fuel {} is that of 16 single checks or more",
        valid.host_fuel
    );

    let mut tampered = signed.clone();
    tampered[5].signature = signed[6].signature;
    let invalid = run(&tampered);
    let expected: Vec<EpochOutcome> = (0..16u32)
        .map(|i| match i {
            5 => EpochOutcome::InvalidSignature,
            i if i < 5 => EpochOutcome::Created(i),
            i => EpochOutcome::Created(i - 1),
        })
        .collect();
    assert_eq!(invalid.result.outcomes, expected);
    assert!(
        invalid.host_fuel >= valid.host_fuel + 16 * bls_verify,
        "a failed batch falls back to 16 single checks: {} vs {}",
        invalid.host_fuel,
        valid.host_fuel
    );
}
