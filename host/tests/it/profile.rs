//! The engine profile is consensus: a genesis with another profile is refused, and host calls
//! cost fuel in proportion to their work.

use modnode::chain::genesis::Genesis;
use modnode::node::NodeError;
use modnode::runtime::deposits::{BlockContext, Deposit};
use modnode::runtime::{CallError, EngineProfile, ModuleFault};
use modnode::state::Registry;

use super::{deposits_module, runtime, shared, view};

fn genesis_with_profile(profile: &EngineProfile) -> Genesis {
    let json = format!(
        r#"{{"chain_id": "profile-test", "generated_validators": {{"count": 4, "seed": 1}}, "engine_profile": {}}}"#,
        profile.canonical_json()
    );
    Genesis::from_json(&json, "profile-test.json").unwrap()
}

#[test]
fn a_genesis_with_another_fuel_table_is_refused_naming_both_profiles() {
    let build = EngineProfile::build();
    // The build's own profile, written out in the file, is accepted and is what a file without
    // one gets.
    let same = genesis_with_profile(build);
    assert_eq!(&same.engine_profile, build);
    assert_eq!(Genesis::dev().engine_profile, *build);
    assert_eq!(same.config_hash(), {
        let mut g = Genesis::dev();
        g.chain_id = "profile-test".into();
        g.validators = same.validators.clone();
        g.config_hash()
    });

    let mut other = build.clone();
    other.fuel.operators.insert("I32Add".into(), 2);
    let genesis = genesis_with_profile(&other);
    // The profile is part of the genesis identity.
    assert_ne!(genesis.config_hash(), same.config_hash());

    let dir = tempfile::tempdir().unwrap();
    let Err(err) = modnode::node::open_chain(dir.path(), genesis) else {
        panic!("a node accepted a genesis with another fuel table");
    };
    assert!(matches!(err, NodeError::EngineProfile(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&other.summary()), "{msg}");
    assert!(msg.contains(&build.summary()), "{msg}");
    assert!(msg.contains("fuel.operators.I32Add"), "{msg}");
    // Nothing was created for the refused chain.
    assert!(!dir.path().join("chain").exists());

    let ok_dir = tempfile::tempdir().unwrap();
    assert!(modnode::node::open_chain(ok_dir.path(), same).is_ok());
}

#[test]
fn host_call_fuel_makes_a_bls_verify_loop_run_out_of_fuel() {
    // 2,000 verifications are a few thousand wasm operators: far inside 50M fuel without
    // host-call fuel, yet seconds of pairings on the host.
    let budget = 50_000_000;
    let per_verify = EngineProfile::build().host_calls.bls_verify;
    assert!(2_000 * per_verify > budget);
    let rt = runtime(budget);
    let module = deposits_module(&rt, "fixture-bls-loop");
    let kp = modnode::crypto::Keypair::from_seed([4; 32]);
    // The fixture never looks at proofs; an empty deposit log's root keeps the context honest.
    let deposit = Deposit {
        pubkey: kp.pubkey.to_vec(),
        withdrawal_credentials: vec![0; 32],
        amount: 1,
        signature: kp.sign(b"something else").to_vec(),
        proof: vec![0; 33 * 32],
    };
    let empty = modnode::chain::workload::DevDepositLog::new().eth1_data();
    let ctx = |slot| BlockContext {
        height: 1,
        slot,
        genesis_fork_version: vec![0; 4],
        eth1_data: modnode::runtime::deposits::WitEth1Data {
            deposit_root: empty.deposit_root.to_vec(),
            deposit_count: empty.deposit_count,
            block_hash: empty.block_hash.to_vec(),
        },
        eth1_deposit_index: 0,
    };
    let registry = shared(&Registry::new());
    let started = std::time::Instant::now();
    let err = module
        .process(view(&registry), ctx(2_000), vec![deposit.clone()])
        .unwrap_err();
    assert_eq!(
        err,
        CallError::Module(ModuleFault::OutOfFuel {
            module: module.meta().name(),
            budget
        })
    );
    eprintln!("out of fuel after {:?}", started.elapsed());
    // A few verifications fit, and are charged: fuel grows with each one.
    let one = module
        .process(view(&registry), ctx(1), vec![deposit.clone()])
        .unwrap()
        .unwrap();
    let ten = module
        .process(view(&registry), ctx(10), vec![deposit])
        .unwrap()
        .unwrap();
    assert!(
        ten.fuel_used - one.fuel_used >= 9 * per_verify,
        "{} vs {}",
        ten.fuel_used,
        one.fuel_used
    );
}
