//! Module slots: live swaps under load, calls in flight during a swap, shadow, canary, the
//! circuit breaker, and the node-facing `Modules` API.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use modnode::runtime::deposits::{
    BlockContext, Deposit, Deposits, DepositsModule, Outcome, WitEth1Data,
};
use modnode::runtime::gossip_policy::{
    GossipPolicy, GossipPolicyModule, MessageKind, MessageMeta, PeerStats,
};
use modnode::runtime::modules::{InitialModules, PlanCall};
use modnode::runtime::slot::{Invocation, Ready, Served, ShadowWorker, Slot, SlotConfig};
use modnode::runtime::{
    CallError, Kind, LinkedModule, Mode, ModuleFault, Modules, Runtime, SlotError,
};
use modnode::state::{Registry, SharedRegistry};
use modnode_gossip::sim::{self, Scenario, SimConfig};

use super::{artifact, deposits_module, runtime};

fn policy(rt: &Runtime, name: &str) -> GossipPolicyModule {
    match rt.load(&artifact(name)).unwrap() {
        LinkedModule::GossipPolicy(m) => m,
        _ => panic!("{name} is not a gossip policy"),
    }
}

fn ready_policy(rt: &Runtime, name: &str) -> Ready<GossipPolicy> {
    Ready::warm(policy(rt, name)).unwrap()
}

fn policy_slot(rt: &Runtime, active: &str) -> Slot<GossipPolicy> {
    Slot::new(
        ready_policy(rt, active),
        SlotConfig::default(),
        ShadowWorker::start(1024).unwrap(),
    )
}

fn peers(n: u32) -> Vec<PeerStats> {
    (0..n)
        .map(|i| PeerStats {
            peer: i,
            rtt_us: 1_000 * (i + 1),
            queue_depth: i % 3,
            recent_failures: 0,
            has_message: i % 4 == 0,
            is_origin: i == 1,
        })
        .collect()
}

fn plan_call(hops: u32, size: u32) -> PlanCall {
    PlanCall {
        msg: MessageMeta {
            kind: if size > 10_000 {
                MessageKind::Block
            } else {
                MessageKind::Deposit
            },
            size,
            local_origin: hops == 0,
            hops,
            network_size: 24,
        },
        peers: peers(24),
    }
}

/// A swap the test makes at a given policy call.
type Swap = (u64, Box<dyn FnOnce(&Slot<GossipPolicy>) + Send>);

/// The gossip engine's policy for the simulator: every plan goes through the slot, a failed
/// call is counted (never hidden by a fallback), and the test's swaps happen at given calls,
/// from inside the traffic.
struct Swapping {
    slot: Arc<Slot<GossipPolicy>>,
    calls: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    swaps: Arc<Mutex<Vec<Swap>>>,
    served_by: Arc<Mutex<std::collections::BTreeMap<String, u64>>>,
}

impl Clone for Swapping {
    fn clone(&self) -> Self {
        Self {
            slot: self.slot.clone(),
            calls: self.calls.clone(),
            failures: self.failures.clone(),
            swaps: self.swaps.clone(),
            served_by: self.served_by.clone(),
        }
    }
}

impl modnode_gossip::policy::Policy for Swapping {
    fn plan(
        &mut self,
        msg: &modnode_gossip::policy::MessageMeta,
        peers: &[modnode_gossip::policy::PeerStats],
    ) -> modnode_gossip::policy::SendPlan {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let due: Vec<_> = {
            let mut swaps = self.swaps.lock().unwrap();
            let (now, later): (Vec<_>, Vec<_>) = swaps.drain(..).partition(|(at, _)| *at <= n);
            *swaps = later;
            now
        };
        for (_, swap) in due {
            swap(&self.slot);
        }
        let active = self.slot.status().active.name;
        *self.served_by.lock().unwrap().entry(active).or_default() += 1;
        let call = PlanCall {
            msg: modnode::runtime::gossip_policy::to_wit_meta(msg),
            peers: modnode::runtime::gossip_policy::to_wit_peers(peers),
        };
        match self.slot.call(call) {
            Ok((plan, _)) => modnode::runtime::gossip_policy::from_wit_plan(&plan),
            Err(e) => {
                self.failures.fetch_add(1, Ordering::SeqCst);
                panic!("a policy call failed during the swap: {e}");
            }
        }
    }
}

#[test]
fn live_swaps_under_gossip_load_fail_no_call_and_lose_no_message() {
    let rt = runtime(100_000_000);
    let v1 = ready_policy(&rt, "gossip-policy-v1");
    let v2 = ready_policy(&rt, "gossip-policy-v2");
    let slot = Arc::new(Slot::new(
        v2.clone(),
        SlotConfig::default(),
        ShadowWorker::start(64).unwrap(),
    ));
    let config = SimConfig {
        nodes: 16,
        degree: 6,
        seed: 5,
        ..SimConfig::default()
    };
    let scenario = Scenario {
        deposits: 60,
        blocks: 8,
        ..Scenario::default()
    };
    let (v1_live, v1_canary) = (v1.clone(), v1.clone());
    let swaps: Vec<Swap> = vec![
        (
            100,
            Box::new(move |s| s.activate(v1_canary, Mode::Canary(30)).unwrap()),
        ),
        (
            300,
            Box::new(move |s| s.activate(v1_live, Mode::Live).unwrap()),
        ),
        (600, Box::new(|s| s.rollback().unwrap())),
    ];
    let policy = Swapping {
        slot: slot.clone(),
        calls: Arc::new(AtomicU64::new(0)),
        failures: Arc::new(AtomicU64::new(0)),
        swaps: Arc::new(Mutex::new(swaps)),
        served_by: Arc::new(Mutex::new(Default::default())),
    };
    let report = sim::run(&config, &scenario, |_| policy.clone()).unwrap();
    let calls = policy.calls.load(Ordering::SeqCst);
    assert!(
        calls > 600,
        "only {calls} policy calls; the swaps did not all happen"
    );
    assert_eq!(policy.failures.load(Ordering::SeqCst), 0);
    assert_eq!(report.missed, 0, "{report}");
    assert!(policy.swaps.lock().unwrap().is_empty());
    // Both versions served as the active one, and the rollback brought v2 back.
    let served = policy.served_by.lock().unwrap().clone();
    assert_eq!(served.len(), 2, "{served:?}");
    let status = slot.status();
    assert_eq!(status.active.hash.to_hex(), hex::encode(v2.module.hash()));
    assert_eq!(
        status.previous.map(|p| p.hash.to_hex()),
        Some(hex::encode(v1.module.hash()))
    );
    assert_eq!(status.breaker_trips, 0);
    assert_eq!(status.failed_calls, 0);
}

/// A deposits call that tells the test when it has started running on the version the slot
/// chose, then runs.
#[derive(Clone)]
struct SlowProcess {
    registry: SharedRegistry,
    ctx: BlockContext,
    deposits: Vec<Deposit>,
    started: mpsc::SyncSender<()>,
}

impl std::fmt::Debug for SlowProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlowProcess").finish_non_exhaustive()
    }
}

impl Invocation<Deposits> for SlowProcess {
    type Output = Vec<Outcome>;
    fn invoke(&self, module: &DepositsModule) -> Result<Vec<Outcome>, CallError> {
        let _ = self.started.try_send(());
        let out = module.process(
            self.registry.clone(),
            self.ctx.clone(),
            self.deposits.clone(),
        )?;
        Ok(out.map(|o| o.outcomes).unwrap_or_default())
    }
}

#[test]
fn a_call_in_flight_during_a_swap_finishes_on_the_version_it_started_on() {
    let rt = runtime(u64::MAX / 2);
    // The bls-loop fixture verifies each deposit's signature `slot` times: a slow call whose
    // answer (`ToppedUp(count)`) no real deposits module gives.
    let slow = Ready::warm(deposits_module(&rt, "fixture-bls-loop")).unwrap();
    let v1 = Ready::warm(deposits_module(&rt, "deposits-v1")).unwrap();
    let slot = Arc::new(Slot::new(
        slow,
        SlotConfig::default(),
        ShadowWorker::start(4).unwrap(),
    ));
    let registry: SharedRegistry = Arc::new(Registry::new());
    let kp = modnode::crypto::Keypair::from_seed([9; 32]);
    // A well-formed signature over something else: each check is a full pairing, then false.
    let (eth1_data, deposit) = proven(modnode::chain::block::DepositData {
        pubkey: kp.pubkey,
        withdrawal_credentials: [0; 32],
        amount: 32_000_000_000,
        signature: kp.sign(b"not the deposit message"),
    });
    let ctx = BlockContext {
        height: 1,
        slot: 200,
        genesis_fork_version: vec![0; 4],
        eth1_data,
        eth1_deposit_index: 0,
    };
    let (started, started_rx) = mpsc::sync_channel(1);
    let call = SlowProcess {
        registry: registry.clone(),
        ctx: ctx.clone(),
        deposits: vec![deposit.clone()],
        started,
    };
    let in_flight = {
        let slot = slot.clone();
        std::thread::spawn(move || slot.call(call))
    };
    started_rx.recv().unwrap();
    // The slow call is running on the fixture; swap under it.
    slot.activate(v1, Mode::Live).unwrap();
    let (after, _) = slot
        .call(SlowProcess {
            registry,
            ctx,
            deposits: vec![deposit],
            started: mpsc::sync_channel(1).0,
        })
        .unwrap();
    let (during, served) = in_flight.join().unwrap().unwrap();
    assert_eq!(served, Served::Active);
    // The fixture's answer: 200 verifications of a bad signature, none valid.
    assert_eq!(during, vec![Outcome::ToppedUp(0)]);
    // deposits-v1 on the same input: a new pubkey with a bad signature.
    assert_eq!(after, vec![Outcome::InvalidSignature]);
}

#[test]
fn shadow_counts_divergences_for_a_different_policy_and_none_for_the_same_one() {
    let rt = runtime(100_000_000);
    let slot = policy_slot(&rt, "gossip-policy-v2");
    let inputs: Vec<PlanCall> = (0..40)
        .map(|i| plan_call(i % 3, if i % 2 == 0 { 128 * 1024 } else { 900 }))
        .collect();

    slot.activate(ready_policy(&rt, "gossip-policy-v1"), Mode::Shadow)
        .unwrap();
    let mut active_plans = Vec::new();
    for call in &inputs {
        let (plan, served) = slot.call(call.clone()).unwrap();
        assert_eq!(served, Served::Active);
        active_plans.push(plan);
    }
    slot.flush_shadow();
    let shadow = slot.status().shadow.unwrap();
    assert_eq!(shadow.compared, 40);
    assert!(shadow.divergences > 0, "{shadow:?}");
    assert_eq!(shadow.faults, 0);
    // The log keeps the input that caused a divergence.
    let d = shadow.recent_divergences.last().unwrap();
    assert!(d.input.contains("MessageMeta"), "{d:?}");
    assert_ne!(d.active, d.shadow);

    // The shadow had no effect: v2 alone produced the plans.
    let v2 = policy(&rt, "gossip-policy-v2");
    for (call, plan) in inputs.iter().zip(&active_plans) {
        assert_eq!(&v2.plan(call.msg, call.peers.clone()).unwrap(), plan);
    }

    // The same version as a shadow never diverges.
    slot.activate(ready_policy(&rt, "gossip-policy-v2"), Mode::Shadow)
        .unwrap();
    for call in &inputs {
        slot.call(call.clone()).unwrap();
    }
    slot.flush_shadow();
    let shadow = slot.status().shadow.unwrap();
    assert_eq!(shadow.compared, 40);
    assert_eq!(shadow.divergences, 0, "{shadow:?}");
}

#[test]
fn a_canary_serves_its_share_of_calls() {
    let rt = runtime(100_000_000);
    let slot = policy_slot(&rt, "gossip-policy-v2");
    slot.activate(ready_policy(&rt, "gossip-policy-v1"), Mode::Canary(10))
        .unwrap();
    let mut canary = 0;
    for i in 0..200 {
        let (_, served) = slot.call(plan_call(i % 2, 700)).unwrap();
        canary += usize::from(served == Served::Canary);
    }
    assert_eq!(canary, 20);
    assert_eq!(slot.status().canary.unwrap().calls, 20);
    assert!(matches!(
        slot.activate(ready_policy(&rt, "gossip-policy-v1"), Mode::Canary(0)),
        Err(modnode::runtime::slot::SwapError::BadShare(0))
    ));
}

#[test]
fn the_circuit_breaker_rolls_back_a_trapping_canary_and_a_trapping_live_version() {
    let rt = runtime(100_000_000);
    let slot = policy_slot(&rt, "gossip-policy-v2");
    let v2_hash = hex::encode(policy(&rt, "gossip-policy-v2").hash());
    // Warm-up runs fresh, local messages: the fixture passes it.
    let trap = ready_policy(&rt, "fixture-policy-trap");

    slot.activate(trap.clone(), Mode::Canary(50)).unwrap();
    // Far-relayed messages make the fixture trap; every call still succeeds (the active
    // version serves a canary call that failed).
    for _ in 0..20 {
        slot.call(plan_call(5, 700)).unwrap();
    }
    let status = slot.status();
    assert!(
        status.canary.is_none(),
        "the breaker left the canary in place"
    );
    assert_eq!(status.breaker_trips, 1);
    let trip = status.recent_trips.last().unwrap();
    assert_eq!(trip.faults, 3);
    assert_eq!(trip.mode, "canary 50%");
    assert!(trip.last_fault.contains("unreachable"), "{trip:?}");

    // Activated live, it is on probation while v2 is kept: its faults are served by v2 and
    // roll it back.
    slot.activate(trap, Mode::Live).unwrap();
    for _ in 0..3 {
        let (_, served) = slot.call(plan_call(4, 700)).unwrap();
        assert_eq!(served, Served::Previous);
    }
    let status = slot.status();
    assert_eq!(status.active.hash.to_hex(), v2_hash);
    assert_eq!(status.breaker_trips, 2);
    assert_eq!(status.recent_trips.last().unwrap().mode, "live");
    let (_, served) = slot.call(plan_call(4, 700)).unwrap();
    assert_eq!(served, Served::Active);
    assert_eq!(slot.status().failed_calls, 0, "every call was served");

    // Only a version with nothing behind it fails a caller, and that is counted.
    let bare = policy_slot(&rt, "fixture-policy-trap");
    assert!(bare.call(plan_call(4, 700)).is_err());
    assert_eq!(bare.status().failed_calls, 1);
}

#[test]
fn the_modules_api_prepares_once_activates_local_kinds_and_refuses_consensus_ones() {
    let rt = runtime(1_000_000_000);
    let v1 = artifact("gossip-policy-v1");
    let modules = Modules::new(
        rt,
        InitialModules {
            deposits: &artifact("deposits-v2"),
            checkpoint: &artifact("checkpoint-v1"),
            gossip_policy: &artifact("gossip-policy-v2"),
        },
        SlotConfig::default(),
    )
    .unwrap();
    let first = modules.prepare(&v1).unwrap();
    assert!(first.new);
    assert!(first.warmup.fuel > 0);
    let again = modules.prepare(&v1).unwrap();
    assert!(!again.new);
    assert_eq!(again.hash, first.hash);

    let status = modules
        .activate(Kind::GossipPolicy, first.hash, Mode::Live)
        .unwrap();
    assert_eq!(status.active.hash.to_hex(), hex::encode(first.hash));
    let status = modules.rollback(Kind::GossipPolicy).unwrap();
    assert_eq!(
        status.previous.unwrap().hash.to_hex(),
        hex::encode(first.hash)
    );

    assert!(matches!(
        modules.activate(Kind::Deposits, first.hash, Mode::Live),
        Err(SlotError::ConsensusKind { .. })
    ));
    assert!(matches!(
        modules.activate(Kind::Checkpoint, first.hash, Mode::Live),
        Err(SlotError::WrongKind { .. })
    ));
    assert!(matches!(
        modules.activate(
            Kind::GossipPolicy,
            modnode::hashes::ModuleHash([7; 32]),
            Mode::Shadow
        ),
        Err(SlotError::UnknownModule { .. })
    ));
    let deposits_v1 = modules.prepare(&artifact("deposits-v1")).unwrap();
    let status = modules
        .schedule(Kind::Deposits, deposits_v1.hash, 100)
        .unwrap();
    assert_eq!(status.scheduled.unwrap().height, 100);
    let list = modules.status();
    assert_eq!(list.len(), 3);
    // `module list` is JSON over HTTP.
    let json = serde_json::to_value(&list).unwrap();
    assert_eq!(json[2]["kind"], "gossip-policy");
}

#[test]
fn warm_up_replays_the_nodes_recent_real_plans_and_refuses_a_policy_that_fails_on_them() {
    use modnode_gossip::policy::Policy as _;
    let modules = Modules::new(
        runtime(1_000_000_000),
        InitialModules {
            deposits: &artifact("deposits-v2"),
            checkpoint: &artifact("checkpoint-v1"),
            gossip_policy: &artifact("gossip-policy-v2"),
        },
        SlotConfig::default(),
    )
    .unwrap();
    // Before the node has gossiped anything, warm-up runs the built-in messages only.
    let policy = artifact("fixture-policy-trap");
    let v1 = modules.prepare(&artifact("gossip-policy-v1")).unwrap();
    assert_eq!(v1.warmup.real_inputs, 0);

    // The node plans far-relayed messages, as the gossip engine does through the slot.
    let mut engine_policy = modules.gossip_policy();
    let peers: Vec<modnode_gossip::policy::PeerStats> = (0..6)
        .map(|peer| modnode_gossip::policy::PeerStats {
            peer,
            rtt_us: 1_000 * (peer + 1),
            queue_depth: 0,
            recent_failures: 0,
            has_message: false,
            is_origin: peer == 0,
        })
        .collect();
    for hops in [1, 4, 2] {
        let meta = modnode_gossip::policy::MessageMeta {
            kind: modnode_gossip::policy::MessageKind::Deposit,
            size: 900,
            local_origin: false,
            hops,
            network_size: 8,
        };
        assert!(!engine_policy.plan(&meta, &peers).targets.is_empty());
    }
    // Now the fixture fails its warm-up on the real far-relayed input, which the error names;
    // nothing is kept.
    let err = modules.prepare(&policy).unwrap_err();
    assert!(
        matches!(&err, SlotError::WarmupInput { input, .. } if input.contains("hops: 4")),
        "{err}"
    );
    assert!(err.to_string().contains("unreachable"), "{err}");
    let hash = modnode::runtime::inspect::validate(&policy).unwrap().sha256;
    assert!(modules.prepared_version(&hash).is_none());
    // A sound policy warms on the three real plans too, and its fuel covers them.
    let other = modules.prepare(&artifact("example-nearest-peers")).unwrap();
    assert_eq!(other.warmup.real_inputs, 3);
    assert!(other.warmup.fuel > 0);
}

/// One deposit proven as the first of a fresh deposit log: the eth1 data to put in the block
/// context and the deposit with its proof.
fn proven(data: modnode::chain::block::DepositData) -> (WitEth1Data, Deposit) {
    use modnode::chain::eth1::DepositProofs as _;
    let mut log = modnode::chain::workload::DevDepositLog::new();
    log.push(data);
    let eth1 = log.eth1_data();
    let deposit = log.proven_deposits(0, 1, 1).unwrap();
    (
        WitEth1Data {
            deposit_root: eth1.deposit_root.to_vec(),
            deposit_count: eth1.deposit_count,
            block_hash: eth1.block_hash.to_vec(),
        },
        modnode::runtime::deposits::convert::deposit(&deposit[0]),
    )
}

/// A policy whose plan names 3M targets is refused cheaply as a module fault
/// (its memory is the kind's bound, far below what 3M targets take) and a plan just over the
/// kind's bound on targets is refused by the host's check; on probation, the previous version
/// serves both. (Before: the 3M-target plan was accepted, 96M fuel and 67 MB later.)
#[test]
fn a_plan_over_the_kinds_bounds_is_a_module_fault_and_the_previous_version_serves() {
    let rt = runtime(100_000_000);
    let long = policy(&rt, "fixture-policy-long-plan");
    let bound = Kind::GossipPolicy.bounds().list_items;
    let call = |size: usize| {
        let call = plan_call(5, u32::try_from(size).unwrap());
        long.plan_metered(call.msg, call.peers)
    };
    let (plan, _) = call(24).expect("a plan of one target per peer is fine");
    assert_eq!(plan.targets.len(), 24);
    match call(bound + 1) {
        Err(CallError::Module(ModuleFault::OutputOverBound(over))) => {
            assert_eq!((over.len, over.bound), (bound as u64 + 1, bound as u64));
            assert_eq!(over.output, "plan().targets");
            assert_eq!(over.kind, Kind::GossipPolicy);
        }
        other => panic!("expected the targets over the bound, got {other:?}"),
    }
    let started = std::time::Instant::now();
    match call(3_000_000) {
        Err(CallError::Module(
            ModuleFault::OutputOverBound(_) | ModuleFault::LimitExceeded { .. },
        )) => {}
        other => panic!("expected a module fault for 3M targets, got {other:?}"),
    }
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(5),
        "refusing took {took:?}"
    );

    let slot = policy_slot(&rt, "gossip-policy-v2");
    let v2_hash = hex::encode(policy(&rt, "gossip-policy-v2").hash());
    // Warm-up runs fresh, local messages: the fixture passes it.
    slot.activate(ready_policy(&rt, "fixture-policy-long-plan"), Mode::Live)
        .unwrap();
    for size in [3_000_000, u32::try_from(bound).unwrap() + 1] {
        let (plan, served) = slot.call(plan_call(5, size)).unwrap();
        assert_eq!(served, Served::Previous, "size {size}");
        assert!(plan.targets.len() <= 24, "{}", plan.targets.len());
    }
    assert_eq!(slot.status().failed_calls, 0);
    let before = modnode::runtime::bounds::over_bound(Kind::GossipPolicy);
    let _ = slot.call(plan_call(5, u32::try_from(bound).unwrap() + 1));
    assert!(modnode::runtime::bounds::over_bound(Kind::GossipPolicy) > before);
    // Three faults on probation: the breaker rolled it back to v2.
    assert_eq!(slot.status().active.hash.to_hex(), v2_hash);
}
