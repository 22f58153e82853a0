//! Contract versions side by side: the host implements
//! `modnode:gossip-policy@1.0.0` and `@2.0.0` at once, binds each module to the contract it
//! declares, keeps a stateful policy's state per slot version within a bound, and shadows or
//! canaries a candidate of either contract beside an active one of the other.

use modnode::runtime::gossip_policy::{
    GossipPolicy, GossipPolicyModule, MessageKind, MessageMeta, PeerStats, PolicyEvent, SendMode,
    SendPlan,
};
use modnode::runtime::inspect::{ValidationError, Version, validate};
use modnode::runtime::modules::{InitialModules, PlanCall};
use modnode::runtime::slot::{Ready, Served, ShadowWorker, Slot, SlotConfig};
use modnode::runtime::{
    CallError, Kind, LinkedModule, LoadError, Mode, ModuleFault, Modules, Runtime, SlotError,
};

use super::{artifact, runtime};

fn policy(rt: &Runtime, name: &str) -> GossipPolicyModule {
    match rt.load(&artifact(name)).unwrap() {
        LinkedModule::GossipPolicy(m) => m,
        _ => panic!("{name} is not a gossip policy"),
    }
}

fn ready(rt: &Runtime, name: &str) -> Ready<GossipPolicy> {
    Ready::warm(policy(rt, name)).unwrap()
}

fn slot(rt: &Runtime, active: &str) -> Slot<GossipPolicy> {
    Slot::new(
        ready(rt, active),
        SlotConfig::default(),
        ShadowWorker::start(1024).unwrap(),
    )
}

fn v(major: u64) -> Version {
    Version {
        major,
        minor: 0,
        patch: 0,
    }
}

fn call(hops: u32) -> PlanCall {
    PlanCall {
        msg: MessageMeta {
            kind: MessageKind::Block,
            size: 300,
            local_origin: hops == 0,
            hops,
            network_size: 64,
        },
        peers: (0..24u32)
            .map(|i| PeerStats {
                peer: i,
                rtt_us: 1_000 + 100 * i,
                queue_depth: 0,
                recent_failures: 0,
                has_message: false,
                is_origin: false,
            })
            .collect(),
    }
}

fn pushed(plan: &SendPlan) -> Vec<u32> {
    plan.targets
        .iter()
        .filter(|t| t.mode == SendMode::Push)
        .map(|t| t.peer)
        .collect()
}

fn duplicate(peer: u32) -> PolicyEvent {
    PolicyEvent::Duplicate {
        peer,
        message: u64::from(peer),
        kind: modnode_gossip::MessageKind::Block,
    }
}

#[test]
fn policies_of_both_contracts_load_on_their_own_contract_and_plan() {
    let rt = runtime(100_000_000);
    for (name, contract) in [
        ("gossip-policy-v1", v(1)),
        ("gossip-policy-v2", v(1)),
        ("gossip-policy-v2-stateful", v(2)),
        ("gossip-policy-v3", v(2)),
    ] {
        let info = validate(&artifact(name)).unwrap();
        assert_eq!(info.contract, contract, "{name}");
        assert_eq!(
            info.contract_name(),
            format!("modnode:gossip-policy@{contract}")
        );
        let module = policy(&rt, name);
        assert_eq!(module.contract(), contract, "{name}");
        module.warm().unwrap();
        let plan = module.plan(call(0).msg, call(0).peers).unwrap();
        assert!(!pushed(&plan).is_empty(), "{name}: {plan:?}");
    }
    // With nothing remembered, the stateful policy plans exactly like v2, whose algorithm it
    // extends: only the contract differs.
    let c = call(1);
    assert_eq!(
        policy(&rt, "gossip-policy-v2-stateful")
            .plan(c.msg, c.peers.clone())
            .unwrap(),
        policy(&rt, "gossip-policy-v2")
            .plan(c.msg, c.peers)
            .unwrap()
    );
}

#[test]
fn the_modules_of_the_first_contract_keep_their_bytes() {
    // Adding a contract beside @1.0.0 changed nothing in what @1.0.0 modules are built from:
    // the hashes the walkthrough (examples/README.md) and any operator's activations name.
    for (name, sha256) in [
        (
            "gossip-policy-v1",
            "929afb92636a9825a84a37e9e6e428bfb1907ceabec63a066ed9dc7463d217fb",
        ),
        (
            "gossip-policy-v2",
            "18d8a6215baf4c7d42cf0552db00b1a48d13194463b8b36e3a3f49cc20168cc0",
        ),
        // The first @2.0.0 policy too: v3's algorithm joined `gossip-policy-common` without
        // changing what v1, v2 and v2-stateful are built from.
        (
            "gossip-policy-v2-stateful",
            "c7a008ccba66aa9792d52ae6e0de223f5b528855c2f9418c2c1172c958fadadf",
        ),
    ] {
        assert_eq!(
            hex::encode(validate(&artifact(name)).unwrap().sha256),
            sha256,
            "{name}"
        );
    }
}

#[test]
fn a_module_for_a_contract_the_host_does_not_implement_is_refused_naming_both() {
    let bytes = wat::parse_str(
        r#"(component (instance $i) (export "modnode:gossip-policy/policy@3.0.0" (instance $i)))"#,
    )
    .unwrap();
    let err = validate(&bytes).unwrap_err();
    assert!(
        matches!(err, ValidationError::IncompatibleContract { .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("modnode:gossip-policy/policy@3.0.0")
            && msg.contains("modnode:gossip-policy/policy@1.0.0")
            && msg.contains("modnode:gossip-policy/policy@2.0.0"),
        "{msg}"
    );
    // Loading (what upload and preparation do) refuses it the same way.
    let rt = runtime(100_000_000);
    match rt.load(&bytes) {
        Err(LoadError::Invalid(e)) => assert_eq!(e.to_string(), msg),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a module for gossip-policy@3.0.0 loaded"),
    }
    // deposits names both contracts it implements (@2.0.0 and, since deposits-v3,
    // @3.0.0).
    let err = validate(
        &wat::parse_str(
            r#"(component (instance $i) (export "modnode:deposits/processor@4.0.0" (instance $i)))"#,
        )
        .unwrap(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("modnode:deposits/processor@2.0.0")
            && msg.contains("modnode:deposits/processor@3.0.0"),
        "{msg}"
    );
}

#[test]
fn the_kept_state_round_trips_and_changes_the_plans() {
    let rt = runtime(100_000_000);
    let slot = slot(&rt, "gossip-policy-v2-stateful");
    let (fresh, served) = slot.call(call(1)).unwrap();
    assert_eq!(served, Served::Active);
    let victim = pushed(&fresh)[0];
    let empty_state = slot.status().active.state_bytes;
    assert!(empty_state > 0, "the stateful policy keeps its header");

    for _ in 0..2 {
        slot.notify(|module, state| {
            let mut kept = state.lock();
            if let Some(next) = module.on_event(duplicate(victim), kept.clone())? {
                *kept = next;
            }
            Ok(())
        });
    }
    // The state grew by the peer it remembers, and the next plans use it.
    assert!(slot.status().active.state_bytes > empty_state);
    let (after, _) = slot.call(call(1)).unwrap();
    assert!(!pushed(&after).contains(&victim), "{after:?}");
    assert!(
        after
            .targets
            .iter()
            .any(|t| t.peer == victim && t.mode == SendMode::Announce)
    );
    // A plan hands the state back unchanged: the next plan is the same.
    assert_eq!(slot.call(call(1)).unwrap().0, after);

    // A rollback is a clean hand-over: v2 (stateless) keeps nothing, and the stateful version
    // coming back starts from what it makes of v2's (empty) state — not its old memory.
    slot.activate(ready(&rt, "gossip-policy-v2"), Mode::Live)
        .unwrap();
    assert_eq!(slot.status().active.state_bytes, 0);
    slot.rollback().unwrap();
    assert_eq!(slot.status().active.state_bytes, empty_state);
    assert_eq!(slot.call(call(1)).unwrap().0, fresh);
}

#[test]
fn a_version_of_the_same_state_format_takes_the_old_state_over() {
    let rt = runtime(100_000_000);
    let slot = slot(&rt, "gossip-policy-v2-stateful");
    let victim = pushed(&slot.call(call(1)).unwrap().0)[0];
    for _ in 0..2 {
        slot.notify(|module, state| {
            let mut kept = state.lock();
            if let Some(next) = module.on_event(duplicate(victim), kept.clone())? {
                *kept = next;
            }
            Ok(())
        });
    }
    let remembered = slot.status().active.state_bytes;
    // The same code under another hash declares the same state format: it reads the state.
    let bytes = modnode::runtime::inspect::with_custom_section(
        &artifact("gossip-policy-v2-stateful"),
        "modnode-test-tag",
        b"retagged",
    );
    let LinkedModule::GossipPolicy(retagged) = rt.load(&bytes).unwrap() else {
        panic!("not a policy")
    };
    slot.activate(Ready::warm(retagged).unwrap(), Mode::Live)
        .unwrap();
    assert_eq!(slot.status().active.state_bytes, remembered);
    assert!(!pushed(&slot.call(call(1)).unwrap().0).contains(&victim));
}

#[test]
fn an_oversized_state_is_a_module_fault_and_the_previous_version_serves_the_call() {
    let rt = runtime(100_000_000);
    let slot = slot(&rt, "gossip-policy-v2");
    // Warm-up (fresh, local messages) does not reveal the bloat.
    slot.activate(ready(&rt, "fixture-policy-big-state"), Mode::Live)
        .unwrap();
    let (_, served) = slot.call(call(0)).unwrap();
    assert_eq!(served, Served::Active);
    let kept = slot.status().active.state_bytes;
    assert_eq!(kept, 8, "the fixture counts its plans in 8 bytes");

    let far = call(5);
    let (plan, served) = slot.call(far.clone()).unwrap();
    assert_eq!(served, Served::Previous);
    let v2 = policy(&rt, "gossip-policy-v2");
    assert_eq!(plan, v2.plan(far.msg, far.peers.clone()).unwrap());
    // The oversized state was not kept, and the fault is the module's, naming the bound.
    assert_eq!(slot.status().active.state_bytes, kept);
    assert_eq!(slot.status().active_faults, Some(1));
    let fixture = policy(&rt, "fixture-policy-big-state");
    match fixture.plan_with_state(far.msg, far.peers, Vec::new()) {
        Err(CallError::Module(ModuleFault::OutputOverBound(o))) => {
            assert_eq!(o.output, "plan().state");
            assert_eq!(o.bound, 64 << 10);
            assert_eq!(o.len, 1 << 20);
        }
        other => panic!("expected an over-bound state, got {other:?}"),
    }
    // The breaker rolls it back after its threshold of faults.
    for _ in 0..2 {
        assert_eq!(slot.call(call(5)).unwrap().1, Served::Previous);
    }
    let status = slot.status();
    assert_eq!(status.breaker_trips, 1);
    assert!(
        status.active.name.starts_with("gossip-policy-v2@"),
        "{status:?}"
    );
}

#[test]
fn shadow_compares_plans_of_a_candidate_of_the_other_contract() {
    let rt = runtime(100_000_000);
    // @1.0.0 active, @2.0.0 shadow.
    let slot = slot(&rt, "gossip-policy-v2");
    slot.activate(ready(&rt, "gossip-policy-v2-stateful"), Mode::Shadow)
        .unwrap();
    let mut victim = None;
    for _ in 0..10 {
        let (plan, _) = slot.call(call(1)).unwrap();
        victim = pushed(&plan).first().copied();
    }
    slot.flush_shadow();
    let shadow = slot.status().shadow.unwrap();
    assert_eq!(shadow.version.contract, "modnode:gossip-policy@2.0.0");
    assert_eq!(
        (shadow.compared, shadow.divergences, shadow.faults),
        (10, 0, 0)
    );
    // The shadow hears events on its own state; the active v2 (stateless) ignores them, so
    // their plans part.
    let victim = victim.unwrap();
    for _ in 0..2 {
        slot.notify(|module, state| {
            let mut kept = state.lock();
            if let Some(next) = module.on_event(duplicate(victim), kept.clone())? {
                *kept = next;
            }
            Ok(())
        });
    }
    slot.call(call(1)).unwrap();
    slot.flush_shadow();
    let shadow = slot.status().shadow.unwrap();
    assert_eq!((shadow.compared, shadow.divergences), (11, 1), "{shadow:?}");

    // @2.0.0 active, @1.0.0 canary: every call is served, by either contract.
    let slot = slot_with(&rt, "gossip-policy-v2-stateful");
    slot.activate(ready(&rt, "gossip-policy-v1"), Mode::Canary(50))
        .unwrap();
    let served: Vec<Served> = (0..10).map(|_| slot.call(call(1)).unwrap().1).collect();
    assert!(served.contains(&Served::Canary) && served.contains(&Served::Active));
}

fn slot_with(rt: &Runtime, active: &str) -> Slot<GossipPolicy> {
    slot(rt, active)
}

#[test]
fn modules_prepare_list_and_tell_events_with_the_contract() {
    let modules = Modules::new(
        runtime(1_000_000_000),
        InitialModules {
            deposits: &artifact("deposits-v2"),
            checkpoint: &artifact("checkpoint-v1"),
            gossip_policy: &artifact("gossip-policy-v1"),
        },
        SlotConfig::default(),
    )
    .unwrap();
    let stateful = modules
        .prepare(&artifact("gossip-policy-v2-stateful"))
        .unwrap();
    assert_eq!(stateful.contract, "modnode:gossip-policy@2.0.0");
    let contracts: Vec<(Kind, String)> = modules
        .prepared()
        .into_iter()
        .map(|p| (p.kind, p.contract))
        .collect();
    assert!(contracts.contains(&(Kind::GossipPolicy, "modnode:gossip-policy@1.0.0".into())));
    assert!(contracts.contains(&(Kind::Deposits, "modnode:deposits@2.0.0".into())));

    modules
        .activate(Kind::GossipPolicy, stateful.hash, Mode::Live)
        .unwrap();
    let status = modules.kind_status(Kind::GossipPolicy);
    assert_eq!(status.active.contract, "modnode:gossip-policy@2.0.0");
    assert_eq!(
        status.previous.unwrap().contract,
        "modnode:gossip-policy@1.0.0"
    );
    let before = status.active.state_bytes;
    modules.gossip_policy_event(PolicyEvent::Tick(1_000));
    modules.gossip_policy_event(duplicate(4));
    assert!(modules.kind_status(Kind::GossipPolicy).active.state_bytes > before);
    // Deposits stay a consensus kind: no live activation, whatever the contract.
    assert!(matches!(
        modules.activate(
            Kind::Deposits,
            modnode::hashes::ModuleHash([0; 32]),
            Mode::Live
        ),
        Err(SlotError::ConsensusKind { .. })
    ));
}
