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

/// `profile`'s canonical JSON with the field at `path` set to `value`.
fn with_field(profile: &EngineProfile, path: &[&str], value: serde_json::Value) -> String {
    let mut json: serde_json::Value = serde_json::from_str(&profile.canonical_json()).unwrap();
    let (last, parents) = path.split_last().unwrap();
    let mut at = &mut json;
    for p in parents {
        at = at
            .as_object_mut()
            .unwrap()
            .entry(p.to_string())
            .or_insert_with(|| serde_json::json!({}));
    }
    at.as_object_mut().unwrap().insert(last.to_string(), value);
    json.to_string()
}

#[test]
fn a_genesis_pinned_to_another_architecture_or_other_limits_is_refused_naming_the_field() {
    let build = EngineProfile::build();
    let arch = std::env::consts::ARCH;
    let other_arch = if arch == "aarch64" {
        "x86_64"
    } else {
        "aarch64"
    };
    for (path, value, named) in [
        (
            &["target", "arch"][..],
            serde_json::json!(other_arch),
            format!("target.arch: \"{other_arch}\" vs \"{arch}\""),
        ),
        (
            &["limits", "memory_bytes"][..],
            serde_json::json!(32 << 20),
            format!("limits.memory_bytes: {} vs {}", 32 << 20, 64 << 20),
        ),
        (
            &["limits", "instances"][..],
            serde_json::json!(4),
            "limits.instances: 4 vs 8".to_string(),
        ),
        (
            &["determinism", "max_wasm_stack"][..],
            serde_json::json!(2 << 20),
            format!("determinism.max_wasm_stack: {} vs {}", 2 << 20, 1 << 20),
        ),
    ] {
        let json = format!(
            r#"{{"chain_id": "profile-test", "generated_validators": {{"count": 4, "seed": 1}}, "engine_profile": {}}}"#,
            with_field(build, path, value)
        );
        let genesis = Genesis::from_json(&json, "profile-test.json").unwrap();
        assert_ne!(genesis.engine_profile.hash(), build.hash());
        let dir = tempfile::tempdir().unwrap();
        let Err(err) = modnode::node::open_chain(dir.path(), genesis) else {
            panic!("a node accepted a genesis whose engine profile differs at {path:?}");
        };
        assert!(matches!(err, NodeError::EngineProfile(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(&named), "{named} not in: {msg}");
    }
    // What the build pins is what its runtime enforces.
    assert_eq!(build.target.arch, arch);
    assert_eq!(build.limits, modnode::runtime::Limits::default());
}

#[test]
fn a_recursion_bomb_exhausts_the_stack_within_the_fuel_budget_and_that_is_a_host_failure() {
    // With the deposits budget the profile pins, fuel does not stop the recursion first: its
    // frames are a few operators each, while the stack is spent at a depth this build's native
    // code decides. So the outcome is this node's, never the block's.
    let budget = EngineProfile::build().budget(modnode::runtime::Kind::Deposits);
    let rt = runtime(budget);
    let bomb = deposits_module(&rt, "fixture-recursion");
    let registry = shared(&Registry::new());
    let ctx = BlockContext {
        height: 1,
        slot: 1,
        genesis_fork_version: vec![0; 4],
        eth1_data: modnode::runtime::deposits::WitEth1Data {
            deposit_root: vec![0; 32],
            deposit_count: 0,
            block_hash: vec![0; 32],
        },
        eth1_deposit_index: 0,
    };
    let err = bomb.process(view(&registry), ctx, vec![]).unwrap_err();
    assert!(!err.is_deterministic(), "{err:?}");
    let CallError::Host(failure) = err else {
        panic!("stack exhaustion was counted against the module: {err:?}");
    };
    assert_eq!(
        failure.kind,
        modnode::runtime::HostFailureKind::StackExhausted
    );
    assert_eq!(failure.module, bomb.meta().name());
}

#[test]
fn a_module_this_node_cannot_instantiate_is_a_host_failure_not_a_module_fault() {
    // A node whose runtime allows fewer core instances than the component needs (its own
    // configuration, not the module's doing): the instantiation fails, and the failure is ours.
    let rt = modnode::runtime::Runtime::new(modnode::runtime::RuntimeConfig {
        limits: modnode::runtime::Limits {
            instances: 1,
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let Err(modnode::runtime::LoadError::Warmup { source, .. }) =
        rt.load(&super::artifact("deposits-v1"))
    else {
        panic!("deposits-v1 was instantiated with one core instance");
    };
    assert!(!source.is_deterministic(), "{source:?}");
    assert!(
        matches!(
            *source,
            CallError::Host(ref f) if f.kind == modnode::runtime::HostFailureKind::Instantiation
        ),
        "{source:?}"
    );
}
