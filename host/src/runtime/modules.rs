//! The node-facing module API: prepare (load + warm) versions, put them into service in their
//! kind's [`Slot`], roll back, and report status. The admin API and `modnode module …` sit on
//! top of this.
//!
//! ```text
//! let prepared = modules.prepare(&bytes)?;                       // compile + warm, by sha256
//! modules.activate(Kind::GossipPolicy, prepared.hash, Mode::Shadow)?;
//! modules.activate(Kind::GossipPolicy, prepared.hash, Mode::Canary(10))?;
//! modules.activate(Kind::GossipPolicy, prepared.hash, Mode::Live)?;
//! modules.rollback(Kind::GossipPolicy)?;
//! let list = modules.status();
//! ```
//!
//! Local kinds (gossip policy, checkpoint creation) switch live here. Consensus kinds (deposits)
//! only switch at a height agreed on chain: this API records a schedule ([`Modules::schedule`])
//! but refuses to activate, shadow or canary them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::call_stats::CallCounts;
use super::checkpoint::{Checkpoint, CheckpointModule};
use super::deposits::{DepositCall, Deposits, DepositsModule};
use super::gossip_policy::{
    GossipPolicy, GossipPolicyModule, MessageMeta, PeerStats, PolicyEvent, SendPlan, from_wit_plan,
    to_wit_meta, to_wit_peers,
};
use super::module::{Module, World};
use super::slot::{
    Invocation, KeptState, Mode, Ready, Scheduled, ShadowWorker, Slot, SlotConfig, SlotStatus,
    SwapError,
};
use super::{CallError, Kind, LoadError, LoadedModule, Runtime, Scope, WarmupReport};

mod scheduled;

pub use scheduled::check_scheduled_kind;

/// Why a module operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// No prepared module has this hash.
    #[error("no prepared module has hash {hash}; upload (prepare) it first")]
    UnknownModule {
        /// The hash (hex).
        hash: String,
    },
    /// The module is of another kind than asked.
    #[error("module {module} is a {found} module, not a {expected} module")]
    WrongKind {
        /// The module.
        module: String,
        /// The kind asked for.
        expected: Kind,
        /// Its kind.
        found: Kind,
    },
    /// Consensus kinds switch only at a height agreed on chain.
    #[error(
        "{kind} is a consensus kind: versions switch only at a height agreed on chain, never \
         live, shadow or canary on one node; propose an on-chain upgrade instead \
         (`modnode module propose <hash> --kind {kind} --activate-at <height>`)"
    )]
    ConsensusKind {
        /// The kind.
        kind: Kind,
    },
    /// Only consensus kinds are scheduled at a height.
    #[error("{kind} is a local kind: activate it live instead of scheduling it")]
    LocalKind {
        /// The kind.
        kind: Kind,
    },
    /// The slot refused the change.
    #[error(transparent)]
    Swap(#[from] SwapError),
    /// The module could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The module failed its warm-up dry run; it cannot serve.
    #[error("module {module} failed its warm-up dry run: {source}")]
    Warmup {
        /// The module.
        module: String,
        /// What went wrong.
        source: CallError,
    },
    /// The module failed on one of the node's recent real inputs during warm-up.
    #[error("module {module} failed its warm-up on a recent real input {input}: {source}")]
    WarmupInput {
        /// The module.
        module: String,
        /// The input (debug form).
        input: String,
        /// What went wrong.
        source: CallError,
    },
    /// The shadow worker thread could not be started.
    #[error("cannot start the shadow worker thread: {0}")]
    Thread(String),
}

/// A prepared version, ready to be activated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Prepared {
    /// Its kind.
    pub kind: Kind,
    /// `<kind>-v<version>@<hash prefix>`.
    pub name: String,
    /// The module's own version number.
    pub version: u32,
    /// The contract it declares (`modnode:<kind>@<version>`).
    pub contract: String,
    /// sha256 of the component.
    #[serde(with = "hex_bytes")]
    pub hash: [u8; 32],
    /// Whether it exports a migration the chain runs once at its activation height.
    pub migration: bool,
    /// What warm-up measured.
    pub warmup: WarmupReport,
    /// `false` when the same bytes were prepared before (nothing was done again).
    pub new: bool,
}

mod hex_bytes {
    pub fn serialize<S: serde::Serializer>(bytes: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(bytes))
    }
}

#[derive(Clone)]
enum AnyReady {
    Deposits(Ready<Deposits>),
    Checkpoint(Ready<Checkpoint>),
    GossipPolicy(Ready<GossipPolicy>),
}

impl AnyReady {
    fn prepared(&self, new: bool) -> Prepared {
        fn p<W: World>(r: &Ready<W>, new: bool) -> Prepared {
            let meta = r.module.meta();
            Prepared {
                kind: W::KIND,
                name: meta.name(),
                version: meta.info.version,
                contract: meta.component.contract_name(),
                hash: meta.component.sha256,
                migration: meta.component.has_migration(),
                warmup: r.warmup,
                new,
            }
        }
        match self {
            AnyReady::Deposits(r) => p(r, new),
            AnyReady::Checkpoint(r) => p(r, new),
            AnyReady::GossipPolicy(r) => p(r, new),
        }
    }

    fn call_counts(&self) -> CallCounts {
        match self {
            AnyReady::Deposits(r) => r.module.call_counts(),
            AnyReady::Checkpoint(r) => r.module.call_counts(),
            AnyReady::GossipPolicy(r) => r.module.call_counts(),
        }
    }
}

fn warm<W: World>(module: Module<W>) -> Result<Ready<W>, SlotError> {
    let name = module.meta().name();
    Ready::warm(module).map_err(|source| SlotError::Warmup {
        module: name,
        source,
    })
}

/// Recent real inputs replayed by a warm-up, at most.
pub const WARMUP_REAL_INPUTS: usize = 32;
/// Longest a warm-up spends replaying recent real inputs; the rest are skipped.
pub const WARMUP_REAL_TIME: Duration = Duration::from_millis(500);

/// The latest real inputs of one kind the node served, newest last, for warm-ups: a bounded
/// ring ([`WARMUP_REAL_INPUTS`]).
pub struct RecentInputs<T> {
    ring: Mutex<VecDeque<T>>,
}

impl<T: Clone> RecentInputs<T> {
    fn new() -> Self {
        Self {
            ring: Mutex::new(VecDeque::with_capacity(WARMUP_REAL_INPUTS)),
        }
    }

    /// Remembers `input`, forgetting the oldest beyond the bound.
    pub fn record(&self, input: T) {
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        if ring.len() >= WARMUP_REAL_INPUTS {
            ring.pop_front();
        }
        ring.push_back(input);
    }

    /// The inputs remembered, oldest first.
    pub fn snapshot(&self) -> Vec<T> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.iter().cloned().collect()
    }
}

/// Warms `module` on the built-in inputs of its kind, then on `recent` real inputs (for
/// `budget` at most: [`SlotConfig::warmup_real_time`]) through `run`, which returns the fuel
/// one used; a fault on a real input names that input.
fn warm_on<W: World, T: std::fmt::Debug>(
    module: Module<W>,
    recent: &[T],
    budget: Duration,
    run: impl Fn(&Module<W>, &T) -> Result<u64, CallError>,
) -> Result<Ready<W>, SlotError> {
    let name = module.meta().name();
    let mut failed_on = None;
    Ready::warm_with(module, |m| {
        let started = Instant::now();
        let (mut fuel, mut ran) = (0u64, 0u32);
        for input in recent {
            if started.elapsed() >= budget {
                break;
            }
            failed_on = Some(input);
            fuel = fuel.saturating_add(run(m, input)?);
            ran = ran.saturating_add(1);
        }
        failed_on = None;
        Ok((fuel, ran))
    })
    .map_err(|source| match failed_on {
        Some(input) => SlotError::WarmupInput {
            module: name,
            input: format!("{input:?}"),
            source,
        },
        None => SlotError::Warmup {
            module: name,
            source,
        },
    })
}

/// The node's recent real inputs warm-ups replay, per kind that has them.
#[derive(Clone, Copy, Default)]
struct RecentReal<'a> {
    plans: &'a [PlanCall],
    deposits: &'a [DepositCall],
    /// How long they may take at most.
    budget: Duration,
}

/// Warms `module`: the built-in dry run of its kind, then the node's recent real inputs of the
/// kind — gossip plans, and the deposits of the latest canonical blocks that carried some, on
/// the registry each ran on (none on a fresh chain: then the built-in inputs alone).
/// Checkpoint modules warm on their built-in realistic inputs.
fn warm_any(module: LoadedModule, recent: RecentReal<'_>) -> Result<AnyReady, SlotError> {
    Ok(match module {
        LoadedModule::Deposits(m) => {
            AnyReady::Deposits(warm_on(m, recent.deposits, recent.budget, |m, call| {
                // A rejection is an answer: the module ran (fuel is only reported on success).
                if m.contract().major == 3 {
                    // deposits@3 queues the block's deposits (on an empty queue: the real queue
                    // is the chain's, not the warm-up's).
                    let out = m.process_v3(
                        call.registry.clone(),
                        crate::state::PendingQueue::new(),
                        &call.ctx,
                        &call.deposits,
                    )?;
                    return Ok(out.map_or(0, |o| o.fuel_used));
                }
                let out = m.process(
                    call.registry.clone(),
                    call.ctx.clone(),
                    call.deposits.clone(),
                )?;
                Ok(out.map_or(0, |o| o.fuel_used))
            })?)
        }
        LoadedModule::Checkpoint(m) => AnyReady::Checkpoint(warm(m)?),
        LoadedModule::GossipPolicy(m) => {
            AnyReady::GossipPolicy(warm_on(m, recent.plans, recent.budget, |m, call| {
                Ok(m.plan_metered(call.msg, call.peers.clone())?.1)
            })?)
        }
    })
}

/// A module that passed its warm-up (or that the chain scheduled: see
/// [`Modules::warm_scheduled`]), to be made activatable with [`Modules::admit`].
pub struct Warmed(AnyReady);

impl Warmed {
    /// What the warm-up measured, and the module's identity.
    pub fn prepared(&self) -> Prepared {
        self.0.prepared(true)
    }
}

/// The versions a node starts with, one component per kind.
#[derive(Debug, Clone, Copy)]
pub struct InitialModules<'a> {
    /// The deposits module.
    pub deposits: &'a [u8],
    /// The checkpoint module.
    pub checkpoint: &'a [u8],
    /// The gossip policy.
    pub gossip_policy: &'a [u8],
}

/// Every slot of a node, and the versions prepared for them. See the module docs.
pub struct Modules {
    runtime: Runtime,
    ready: Mutex<HashMap<[u8; 32], AnyReady>>,
    deposits: Slot<Deposits>,
    checkpoint: Slot<Checkpoint>,
    gossip_policy: Arc<Slot<GossipPolicy>>,
    recent_plans: Arc<RecentInputs<PlanCall>>,
    recent_deposits: RecentInputs<DepositCall>,
    /// How long a warm-up replays recent real inputs at most.
    warmup_real_time: Duration,
}

impl std::fmt::Debug for Modules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Modules").finish_non_exhaustive()
    }
}

impl Modules {
    /// Prepares the initial versions and makes them active.
    pub fn new(
        runtime: Runtime,
        initial: InitialModules<'_>,
        config: SlotConfig,
    ) -> Result<Self, SlotError> {
        let shadow = ShadowWorker::start(config.shadow_queue)
            .map_err(|e| SlotError::Thread(e.to_string()))?;
        let load = |bytes: &[u8], kind: Kind| -> Result<AnyReady, SlotError> {
            warm_any(runtime.load_kind(bytes, kind)?, RecentReal::default())
        };
        let (
            AnyReady::Deposits(deposits),
            AnyReady::Checkpoint(checkpoint),
            AnyReady::GossipPolicy(policy),
        ) = (
            load(initial.deposits, Kind::Deposits)?,
            load(initial.checkpoint, Kind::Checkpoint)?,
            load(initial.gossip_policy, Kind::GossipPolicy)?,
        )
        else {
            // `load_kind` checked each kind.
            return Err(SlotError::Thread("initial module of the wrong kind".into()));
        };
        let mut ready = HashMap::new();
        ready.insert(deposits.module.hash(), AnyReady::Deposits(deposits.clone()));
        ready.insert(
            checkpoint.module.hash(),
            AnyReady::Checkpoint(checkpoint.clone()),
        );
        ready.insert(policy.module.hash(), AnyReady::GossipPolicy(policy.clone()));
        Ok(Self {
            runtime,
            ready: Mutex::new(ready),
            deposits: Slot::new(deposits, config, shadow.clone()),
            checkpoint: Slot::new(checkpoint, config, shadow.clone()),
            gossip_policy: Arc::new(Slot::new(policy, config, shadow)),
            recent_plans: Arc::new(RecentInputs::new()),
            recent_deposits: RecentInputs::new(),
            warmup_real_time: config.warmup_real_time,
        })
    }

    /// The runtime modules are loaded with.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    fn lookup(&self, hash: &[u8; 32]) -> Option<AnyReady> {
        self.ready
            .lock()
            .map(|r| r.get(hash).cloned())
            .unwrap_or_else(|p| p.into_inner().get(hash).cloned())
    }

    /// Validates, compiles, links and warms a module (instantiate + a dry run on realistic
    /// inputs of its kind, recording fuel and latency) so it can be activated by hash. The same
    /// bytes twice is a no-op that says so ([`Prepared::new`] is `false`). No lock is held while
    /// compiling.
    pub fn prepare(&self, bytes: &[u8]) -> Result<Prepared, SlotError> {
        let info = super::inspect::validate(bytes).map_err(LoadError::from)?;
        if let Some(known) = self.lookup(&info.sha256) {
            return Ok(known.prepared(false));
        }
        let warmed = self.warm_loaded(self.runtime.load(bytes)?)?;
        Ok(self.admit(warmed))
    }

    /// Warms a module loaded elsewhere (the upload pipeline's own runtime): the built-in dry
    /// run of its kind plus the node's recent real inputs of that kind. Nothing is kept until
    /// [`admit`](Self::admit), so a module that fails here, or whose upload fails later,
    /// leaves nothing behind.
    pub fn warm_loaded(&self, module: LoadedModule) -> Result<Warmed, SlotError> {
        let plans = self.recent_plans.snapshot();
        let deposits = self.recent_deposits.snapshot();
        warm_any(
            module,
            RecentReal {
                plans: &plans,
                deposits: &deposits,
                budget: self.warmup_real_time,
            },
        )
        .map(Warmed)
    }

    /// Remembers the deposits of a canonical block that carried some, for the warm-up of the
    /// next deposits module (the latest [`WARMUP_REAL_INPUTS`] are kept).
    pub fn record_deposits(&self, call: DepositCall) {
        self.recent_deposits.record(call);
    }

    /// Makes a warmed module activatable by its hash.
    pub fn admit(&self, warmed: Warmed) -> Prepared {
        let prepared = warmed.0.prepared(true);
        let mut map = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(prepared.hash).or_insert(warmed.0);
        tracing::info!(module = %prepared.name, fuel = prepared.warmup.fuel, latency_us = prepared.warmup.latency_us, real_inputs = prepared.warmup.real_inputs, "module prepared");
        prepared
    }

    /// The prepared version with this hash, if any.
    pub fn prepared_version(&self, hash: &[u8; 32]) -> Option<Prepared> {
        self.lookup(hash).map(|r| r.prepared(false))
    }

    /// Every prepared version.
    pub fn prepared(&self) -> Vec<Prepared> {
        let map = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        let mut list: Vec<Prepared> = map.values().map(|r| r.prepared(false)).collect();
        list.sort_by_key(|p| (p.kind, p.version, p.hash));
        list
    }

    /// Every prepared version with what it has done since its warm-up (calls, faults, fuel),
    /// in [`prepared`](Self::prepared)'s order.
    pub fn call_counts(&self) -> Vec<(Prepared, CallCounts)> {
        let map = self.ready.lock().unwrap_or_else(|p| p.into_inner());
        let mut list: Vec<(Prepared, CallCounts)> = map
            .values()
            .map(|r| (r.prepared(false), r.call_counts()))
            .collect();
        list.sort_by_key(|(p, _)| (p.kind, p.version, p.hash));
        list
    }

    fn get(&self, kind: Kind, hash: &[u8; 32]) -> Result<AnyReady, SlotError> {
        let ready = self.lookup(hash).ok_or_else(|| SlotError::UnknownModule {
            hash: hex::encode(hash),
        })?;
        let found = ready.prepared(false);
        if found.kind != kind {
            return Err(SlotError::WrongKind {
                module: found.name,
                expected: kind,
                found: found.kind,
            });
        }
        Ok(ready)
    }

    /// Puts the prepared version `hash` of a local `kind` into service as `mode`.
    pub fn activate(
        &self,
        kind: Kind,
        hash: [u8; 32],
        mode: Mode,
    ) -> Result<SlotStatus, SlotError> {
        if kind.scope() == Scope::Consensus {
            return Err(SlotError::ConsensusKind { kind });
        }
        match self.get(kind, &hash)? {
            AnyReady::Checkpoint(r) => self.checkpoint.activate(r, mode)?,
            AnyReady::GossipPolicy(r) => self.gossip_policy.activate(r, mode)?,
            AnyReady::Deposits(_) => return Err(SlotError::ConsensusKind { kind }),
        }
        Ok(self.kind_status(kind))
    }

    /// Rolls a local `kind` back to its previous version at once.
    pub fn rollback(&self, kind: Kind) -> Result<SlotStatus, SlotError> {
        match kind {
            Kind::Deposits => return Err(SlotError::ConsensusKind { kind }),
            Kind::Checkpoint => self.checkpoint.rollback()?,
            Kind::GossipPolicy => self.gossip_policy.rollback()?,
        }
        Ok(self.kind_status(kind))
    }

    /// Stops a local `kind`'s shadow or canary.
    pub fn cancel_candidate(&self, kind: Kind) -> Result<SlotStatus, SlotError> {
        match kind {
            Kind::Deposits => return Err(SlotError::ConsensusKind { kind }),
            Kind::Checkpoint => self.checkpoint.cancel_candidate()?,
            Kind::GossipPolicy => self.gossip_policy.cancel_candidate()?,
        }
        Ok(self.kind_status(kind))
    }

    /// Records that the prepared version `hash` of a consensus `kind` is scheduled at `height`
    /// (data for the status; the chain's schedule decides the switch).
    pub fn schedule(
        &self,
        kind: Kind,
        hash: [u8; 32],
        height: u64,
    ) -> Result<SlotStatus, SlotError> {
        if kind.scope() == Scope::Local {
            return Err(SlotError::LocalKind { kind });
        }
        self.get(kind, &hash)?;
        self.deposits.set_scheduled(Some(Scheduled {
            hash: hex::encode(hash),
            height,
            peers_ready: None,
            authorities_ready: None,
        }));
        Ok(self.kind_status(kind))
    }

    /// The status of one kind's slot.
    pub fn kind_status(&self, kind: Kind) -> SlotStatus {
        match kind {
            Kind::Deposits => self.deposits.status(),
            Kind::Checkpoint => self.checkpoint.status(),
            Kind::GossipPolicy => self.gossip_policy.status(),
        }
    }

    /// The status of every slot, in [`Kind::ALL`] order.
    pub fn status(&self) -> Vec<SlotStatus> {
        Kind::ALL.into_iter().map(|k| self.kind_status(k)).collect()
    }

    /// Waits until queued shadow comparisons are done.
    pub fn flush_shadow(&self) {
        self.gossip_policy.flush_shadow();
    }

    /// Whether the deposits module `hash` is prepared here and passed its warm-up (what a
    /// readiness attestation claims; a scheduled module whose warm-up failed here is prepared
    /// but not attested).
    pub fn deposits_warmed(&self, hash: &[u8; 32]) -> bool {
        matches!(self.lookup(hash), Some(AnyReady::Deposits(r)) if !r.warmup.failed)
    }

    /// The prepared (warmed) deposits module with component sha256 `hash`, if any: what the
    /// chain runs at the heights its schedule names that module for.
    pub fn prepared_deposits(&self, hash: &[u8; 32]) -> Option<Arc<DepositsModule>> {
        match self.lookup(hash)? {
            AnyReady::Deposits(r) => Some(r.module),
            _ => None,
        }
    }

    /// The prepared checkpoint module with component sha256 `hash`, if any: what opens the
    /// chunks of a checkpoint that module made (every installed version restores).
    pub fn prepared_checkpoint(&self, hash: &[u8; 32]) -> Option<Arc<CheckpointModule>> {
        match self.lookup(hash)? {
            AnyReady::Checkpoint(r) => Some(r.module),
            _ => None,
        }
    }

    /// The active deposits module.
    pub fn deposits(&self) -> Arc<DepositsModule> {
        self.deposits.active()
    }

    /// The active checkpoint module.
    pub fn checkpoint(&self) -> Arc<CheckpointModule> {
        self.checkpoint.active()
    }

    /// The gossip-policy slot.
    pub fn gossip_policy_slot(&self) -> &Arc<Slot<GossipPolicy>> {
        &self.gossip_policy
    }

    /// Tells the gossip policies in service (active, shadow, canary) about `event`: what
    /// stateful (`@2.0.0`) policies learn from between plans.
    pub fn gossip_policy_event(&self, event: PolicyEvent) {
        tell_policies(&self.gossip_policy, event);
    }

    /// The gossip engine's policy: every plan goes through the gossip-policy slot.
    pub fn gossip_policy(&self) -> SlotPolicy {
        SlotPolicy {
            slot: self.gossip_policy.clone(),
            recent: self.recent_plans.clone(),
        }
    }
}

/// One gossip-policy call: the message and the peers it could go to.
#[derive(Debug, Clone)]
pub struct PlanCall {
    /// The message.
    pub msg: MessageMeta,
    /// The candidate peers.
    pub peers: Vec<PeerStats>,
}

impl Invocation<GossipPolicy> for PlanCall {
    type Output = SendPlan;
    fn invoke(&self, module: &GossipPolicyModule) -> Result<SendPlan, CallError> {
        module.plan(self.msg, self.peers.clone())
    }

    /// A stateful policy plans on the state kept for it and leaves its new state; a failed
    /// call (a fault, an oversized state) leaves the kept state as it was.
    fn invoke_kept(
        &self,
        module: &GossipPolicyModule,
        state: &KeptState,
    ) -> Result<SendPlan, CallError> {
        let mut kept = state.lock();
        let planned = module.plan_with_state(self.msg, self.peers.clone(), kept.clone())?;
        if let Some(next) = planned.state {
            *kept = next;
        }
        Ok(planned.plan)
    }
}

/// Tells every gossip policy in `slot` (active, shadow or canary) about `event`, each on its
/// own kept state; a policy whose contract keeps no state hears nothing.
fn tell_policies(slot: &Slot<GossipPolicy>, event: PolicyEvent) {
    slot.notify(|module, state| {
        let mut kept = state.lock();
        if let Some(next) = module.on_event(event, kept.clone())? {
            *kept = next;
        }
        Ok(())
    });
}

/// The gossip engine's policy backed by the gossip-policy slot. A failed call (after the slot's
/// own fallbacks) floods the message instead, so a broken policy degrades efficiency, never
/// delivery.
#[derive(Clone)]
pub struct SlotPolicy {
    slot: Arc<Slot<GossipPolicy>>,
    recent: Arc<RecentInputs<PlanCall>>,
}

impl SlotPolicy {
    /// Tells the policies in the slot about `event` (see [`Modules::gossip_policy_event`]).
    pub fn on_event(&self, event: PolicyEvent) {
        tell_policies(&self.slot, event);
    }
}

impl modnode_gossip::policy::Policy for SlotPolicy {
    fn plan(
        &mut self,
        msg: &modnode_gossip::policy::MessageMeta,
        peers: &[modnode_gossip::policy::PeerStats],
    ) -> modnode_gossip::policy::SendPlan {
        let call = PlanCall {
            msg: to_wit_meta(msg),
            peers: to_wit_peers(peers),
        };
        // Kept for the warm-up of the next uploaded policy.
        self.recent.record(call.clone());
        match self.slot.call(call) {
            Ok((plan, _)) => from_wit_plan(&plan),
            Err(e) => {
                tracing::warn!(error = %e, "gossip policy failed; flooding this message");
                modnode_gossip::policy::Flood.plan(msg, peers)
            }
        }
    }

    /// The tree mechanics (`gossip-policy-v3`'s graft timer and its size classes) of the
    /// active version, or else of a canary: a canary's plans are sent, so the tree it builds
    /// needs PRUNE, GRAFT and `missing` while it serves its share (they cost the active
    /// version's messages little: an announce is waited on only once the node is on a tree,
    /// and the control frames are budgeted). Never a shadow's: its plans are never sent, so
    /// nothing of it may reach the network, control frames included; it hears the node's
    /// events all the same.
    fn link_control(&self) -> Option<modnode_gossip::LinkControl> {
        self.slot
            .active()
            .link_control()
            .or_else(|| self.slot.canary().and_then(|c| c.link_control()))
    }
}
