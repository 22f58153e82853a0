//! Misbehaving modules are contained: typed errors, bounded memory, no partial state.

use modnode::crypto::Keypair;
use modnode::runtime::deposits::{BlockContext, Deposit, WitEth1Data};
use modnode::runtime::{CallError, HostFailureKind, ModuleFault, Resource};
use modnode::state::{NewValidator, Registry, RegistryDelta, RegistryRead};

use super::{deposits_module, runtime, shared, view};

fn ctx() -> BlockContext {
    BlockContext {
        height: 1,
        slot: 1,
        genesis_fork_version: vec![0; 4],
        eth1_data: WitEth1Data {
            deposit_root: vec![0; 32],
            deposit_count: 0,
            block_hash: vec![0; 32],
        },
        eth1_deposit_index: 0,
    }
}

fn deposit(pubkey: [u8; 48], amount: u64) -> Deposit {
    Deposit {
        pubkey: pubkey.to_vec(),
        withdrawal_credentials: vec![1; 32],
        amount,
        signature: vec![0; 96],
        proof: Vec::new(),
    }
}

/// Puts `block` in a fresh deposit contract, fills in the proofs and returns the context that
/// agrees on the contract's root.
fn proven(block: &mut [Deposit]) -> BlockContext {
    use modnode::chain::eth1::DepositProofs;
    let mut log = modnode::chain::workload::DevDepositLog::new();
    for d in block.iter() {
        log.push(modnode::chain::block::DepositData {
            pubkey: d.pubkey.as_slice().try_into().unwrap(),
            withdrawal_credentials: d.withdrawal_credentials.as_slice().try_into().unwrap(),
            amount: d.amount,
            signature: d.signature.as_slice().try_into().unwrap(),
        });
    }
    let proofs = log.proven_deposits(0, log.len(), log.len()).unwrap();
    for (d, p) in block.iter_mut().zip(proofs) {
        d.proof = p.proof.concat();
    }
    let eth1 = log.eth1_data();
    BlockContext {
        eth1_data: WitEth1Data {
            deposit_root: eth1.deposit_root.to_vec(),
            deposit_count: eth1.deposit_count,
            block_hash: eth1.block_hash.to_vec(),
        },
        ..ctx()
    }
}

fn registry_with(n: u8) -> Registry {
    let mut registry = Registry::new();
    registry
        .apply(&RegistryDelta {
            added: (0..n)
                .map(|i| NewValidator {
                    pubkey: [i; 48],
                    withdrawal_credentials: [0; 32],
                    effective_balance: 32,
                    balance: 32,
                })
                .collect(),
            balances: Vec::new(),
        })
        .unwrap();
    registry
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn infinite_loop_runs_out_of_fuel_deterministically() {
    let rt = runtime(20_000_000);
    let module = deposits_module(&rt, "fixture-loop");
    let registry = shared(&Registry::new());
    let first = module.process(view(&registry), ctx(), vec![]).unwrap_err();
    let second = module.process(view(&registry), ctx(), vec![]).unwrap_err();
    assert_eq!(
        first,
        CallError::Module(ModuleFault::OutOfFuel {
            module: module.meta().name(),
            budget: 20_000_000
        })
    );
    assert_eq!(first, second);
}

#[test]
fn successful_calls_use_identical_fuel() {
    let rt = runtime(1_000_000_000);
    let module = deposits_module(&rt, "deposits-v1");
    let kp = Keypair::from_seed([3; 32]);
    let mut block = vec![deposit(kp.pubkey, 32_000_000_000), deposit([0; 48], 5)];
    let ctx = proven(&mut block);
    let registry = shared(&registry_with(4));
    let a = module
        .process(view(&registry), ctx.clone(), block.clone())
        .unwrap()
        .unwrap();
    let b = module
        .process(view(&registry), ctx, block)
        .unwrap()
        .unwrap();
    assert!(a.fuel_used > 0);
    assert_eq!(a.fuel_used, b.fuel_used);
    assert_eq!(a.outcomes, b.outcomes);
}

#[test]
fn memory_bomb_hits_the_limit_and_host_memory_stays_bounded() {
    let rt = runtime(u64::MAX / 2);
    let module = deposits_module(&rt, "fixture-grow");
    let registry = shared(&Registry::new());
    let before = rss_bytes();
    for _ in 0..4 {
        match module.process(view(&registry), ctx(), vec![]).unwrap_err() {
            CallError::Module(ModuleFault::LimitExceeded {
                resource,
                limit,
                requested,
                ..
            }) => {
                assert_eq!(resource, Resource::Memory);
                assert_eq!(limit, 64 << 20);
                assert!(requested > limit);
            }
            other => panic!("expected a memory limit error, got {other:?}"),
        }
    }
    let grown = rss_bytes().saturating_sub(before);
    assert!(
        grown < 128 << 20,
        "RSS grew by {} MiB over four 64 MiB bombs",
        grown >> 20
    );
}

#[test]
fn unbounded_recursion_overflows_and_the_process_keeps_serving() {
    let rt = runtime(u64::MAX / 2);
    let bomb = deposits_module(&rt, "fixture-recursion");
    let good = deposits_module(&rt, "deposits-v1");
    let registry = shared(&registry_with(1));
    for _ in 0..3 {
        // Where the stack runs out depends on this build's native code: a host failure.
        let err = bomb.process(view(&registry), ctx(), vec![]).unwrap_err();
        assert!(
            matches!(err, CallError::Host(ref f) if f.kind == HostFailureKind::StackExhausted),
            "{err:?}"
        );
        let mut block = vec![deposit([0; 48], 1)];
        let ctx = proven(&mut block);
        let ok = good.process(view(&registry), ctx, block).unwrap().unwrap();
        assert_eq!(ok.delta.balances, vec![(0, 33)]);
    }
}

#[test]
fn writes_then_trap_leave_host_state_identical() {
    let rt = runtime(1_000_000_000);
    let module = deposits_module(&rt, "fixture-write-trap");
    let before = registry_with(8);
    let shared_registry = shared(&before);
    // Top-ups of existing validators and brand-new validators, then a trap.
    let mut block: Vec<_> = (0..16u8).map(|i| deposit([i; 48], 1_000)).collect();
    let ctx = proven(&mut block);
    let err = module
        .process(view(&shared_registry), ctx.clone(), block.clone())
        .unwrap_err();
    assert!(
        matches!(err, CallError::Module(ModuleFault::Trap { ref message, .. }) if message.contains("unreachable")),
        "{err:?}"
    );
    let after = &*shared_registry;
    assert_eq!(after.validator_count(), 8);
    assert_eq!(after.balance(0), Some(32));
    // Nothing was applied: every validator and balance equals the original.
    assert_eq!(*after, before);
    // The same writes without the trap do change the state, so the check above can fail.
    let v1 = deposits_module(&rt, "deposits-v1");
    let out = v1
        .process(view(&shared_registry), ctx, block)
        .unwrap()
        .unwrap();
    let mut changed = before.clone();
    changed.apply(&out.delta).unwrap();
    assert_ne!(changed, before);
}
