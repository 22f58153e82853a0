//! The node-facing module API: put versions ready in the ready-map ([`ReadyVersions`]: the
//! module lifecycle, `modules_store::lifecycle`, prepares them) into service in their kind's
//! [`Slot`], roll back, and report status. The admin API and `modnode module …` sit on top of
//! this.
//!
//! ```text
//! let hash = service.upload(&bytes, "admin")?.module().sha256;  // the lifecycle
//! modules.activate(Kind::GossipPolicy, hash, Mode::Shadow)?;
//! modules.activate(Kind::GossipPolicy, hash, Mode::Canary(10))?;
//! modules.activate(Kind::GossipPolicy, hash, Mode::Live)?;
//! modules.rollback(Kind::GossipPolicy)?;
//! let list = modules.status();
//! ```
//!
//! Local kinds (gossip policy, checkpoint creation) switch live here. Consensus kinds (deposits)
//! only switch at a height agreed on chain: this API records a schedule ([`Modules::schedule`])
//! but refuses to activate, shadow or canary them.

use std::sync::Arc;

use super::call_stats::CallCounts;
use super::checkpoint::{Checkpoint, CheckpointModule};
use super::deposits::{DepositCall, Deposits, DepositsModule};
use super::gossip_policy::{
    GossipPolicy, GossipPolicyModule, MessageMeta, PeerStats, PolicyEvent, SendPlan, from_wit_plan,
    to_wit_meta, to_wit_peers,
};
use super::slot::{
    Invocation, KeptState, Mode, Scheduled, ShadowWorker, Slot, SlotConfig, SlotStatus, SwapError,
};
use super::{CallError, Kind, LinkedModule, LoadError, Runtime, Scope};
use crate::hashes::ModuleHash;

mod scheduled;
pub mod versions;

pub use scheduled::check_scheduled_kind;
use versions::RecentInputs;
pub use versions::{ReadyInfo, ReadyModule, ReadyVersions, WARMUP_REAL_INPUTS, WARMUP_REAL_TIME};

/// Why a module operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// No prepared module has this hash.
    #[error("no prepared module has hash {hash}; upload (prepare) it first")]
    UnknownModule {
        /// The hash.
        hash: ModuleHash,
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

/// The versions a node's slots start with, one per kind, by hash: each ready in the ready-map
/// already.
#[derive(Debug, Clone, Copy)]
pub struct InitialVersions {
    /// The deposits module.
    pub deposits: ModuleHash,
    /// The checkpoint module.
    pub checkpoint: ModuleHash,
    /// The gossip policy.
    pub gossip_policy: ModuleHash,
}

/// Every slot of a node, and the versions ready for them ([`ReadyVersions`], the one
/// ready-map). See the module docs.
pub struct Modules {
    versions: Arc<ReadyVersions>,
    deposits: Slot<Deposits>,
    checkpoint: Slot<Checkpoint>,
    gossip_policy: Arc<Slot<GossipPolicy>>,
    recent_plans: Arc<RecentInputs<PlanCall>>,
}

impl std::fmt::Debug for Modules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Modules").finish_non_exhaustive()
    }
}

impl Modules {
    /// The node's slots over the ready-map `versions`, with the versions `initial` names
    /// active (each ready there, of its kind: the node prepares them through the module
    /// lifecycle first, `modules_store::lifecycle`).
    pub fn from_ready(
        versions: Arc<ReadyVersions>,
        initial: InitialVersions,
        config: SlotConfig,
    ) -> Result<Self, SlotError> {
        let shadow = ShadowWorker::start(config.shadow_queue)
            .map_err(|e| SlotError::Thread(e.to_string()))?;
        let (
            ReadyModule::Deposits(deposits),
            ReadyModule::Checkpoint(checkpoint),
            ReadyModule::GossipPolicy(policy),
        ) = (
            versions.get(Kind::Deposits, &initial.deposits)?,
            versions.get(Kind::Checkpoint, &initial.checkpoint)?,
            versions.get(Kind::GossipPolicy, &initial.gossip_policy)?,
        )
        else {
            // `get` checked each kind.
            return Err(SlotError::Thread("initial module of the wrong kind".into()));
        };
        Ok(Self {
            recent_plans: versions.recent_plans(),
            versions,
            deposits: Slot::new(deposits, config, shadow.clone()),
            checkpoint: Slot::new(checkpoint, config, shadow.clone()),
            gossip_policy: Arc::new(Slot::new(policy, config, shadow)),
        })
    }

    /// Prepares the initial versions on `runtime` alone ([`prepare`](Self::prepare)) and
    /// makes them active: for tests and benches; a node prepares them through the module
    /// lifecycle ([`from_ready`](Self::from_ready)).
    #[cfg(any(test, feature = "test-utils"))]
    pub fn new(
        runtime: Runtime,
        initial: InitialModules<'_>,
        config: SlotConfig,
    ) -> Result<Self, SlotError> {
        let versions = Arc::new(ReadyVersions::new(runtime, config.warmup_real_time));
        let prepare = |bytes: &[u8], kind: Kind| -> Result<ModuleHash, SlotError> {
            let linked = versions.runtime().load_kind(bytes, kind)?;
            let hash = linked.meta().component.sha256;
            versions.admit(versions.warm_loaded(linked)?);
            Ok(hash)
        };
        let initial = InitialVersions {
            deposits: prepare(initial.deposits, Kind::Deposits)?,
            checkpoint: prepare(initial.checkpoint, Kind::Checkpoint)?,
            gossip_policy: prepare(initial.gossip_policy, Kind::GossipPolicy)?,
        };
        Self::from_ready(versions, initial, config)
    }

    /// The one ready-map: every version ready to activate or run, by hash.
    pub fn versions(&self) -> &Arc<ReadyVersions> {
        &self.versions
    }

    /// The runtime modules are loaded with.
    pub fn runtime(&self) -> &Runtime {
        self.versions.runtime()
    }

    /// Validates, compiles, links, warms and admits a module given by a test or a bench, on the
    /// runtime alone (a node prepares every module through the module lifecycle,
    /// `modules_store::lifecycle`): the same bytes twice is a no-op that says so
    /// ([`ReadyInfo::new`] is `false`). No lock is held while compiling.
    #[cfg(any(test, feature = "test-utils"))]
    pub fn prepare(&self, bytes: &[u8]) -> Result<ReadyInfo, SlotError> {
        let info = super::inspect::validate(bytes).map_err(LoadError::from)?;
        if let Some(known) = self.versions.lookup(&info.sha256) {
            return Ok(known.info(false));
        }
        let linked = self.runtime().load_validated(bytes, info)?;
        let ready = self.versions.warm_loaded(linked)?;
        Ok(self.versions.admit(ready))
    }

    /// [`ReadyVersions::warm_loaded`].
    pub fn warm_loaded(&self, module: LinkedModule) -> Result<ReadyModule, SlotError> {
        self.versions.warm_loaded(module)
    }

    /// [`ReadyVersions::record_deposits`].
    pub fn record_deposits(&self, call: DepositCall) {
        self.versions.record_deposits(call);
    }

    /// [`ReadyVersions::admit`].
    pub fn admit(&self, ready: ReadyModule) -> ReadyInfo {
        self.versions.admit(ready)
    }

    /// [`ReadyVersions::prepared_version`].
    pub fn prepared_version(&self, hash: &ModuleHash) -> Option<ReadyInfo> {
        self.versions.prepared_version(hash)
    }

    /// [`ReadyVersions::prepared`].
    pub fn prepared(&self) -> Vec<ReadyInfo> {
        self.versions.prepared()
    }

    /// [`ReadyVersions::call_counts`].
    pub fn call_counts(&self) -> Vec<(ReadyInfo, CallCounts)> {
        self.versions.call_counts()
    }

    /// Puts the prepared version `hash` of a local `kind` into service as `mode`.
    pub fn activate(
        &self,
        kind: Kind,
        hash: ModuleHash,
        mode: Mode,
    ) -> Result<SlotStatus, SlotError> {
        if kind.scope() == Scope::Consensus {
            return Err(SlotError::ConsensusKind { kind });
        }
        match self.versions.get(kind, &hash)? {
            ReadyModule::Checkpoint(r) => self.checkpoint.activate(r, mode)?,
            ReadyModule::GossipPolicy(r) => self.gossip_policy.activate(r, mode)?,
            ReadyModule::Deposits(_) => return Err(SlotError::ConsensusKind { kind }),
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
        hash: ModuleHash,
        height: u64,
    ) -> Result<SlotStatus, SlotError> {
        if kind.scope() == Scope::Local {
            return Err(SlotError::LocalKind { kind });
        }
        self.versions.get(kind, &hash)?;
        self.deposits.set_scheduled(Some(Scheduled {
            hash,
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

    /// [`ReadyVersions::deposits_warmed`].
    pub fn deposits_warmed(&self, hash: &ModuleHash) -> bool {
        self.versions.deposits_warmed(hash)
    }

    /// [`ReadyVersions::prepared_deposits`].
    pub fn prepared_deposits(&self, hash: &ModuleHash) -> Option<Arc<DepositsModule>> {
        self.versions.prepared_deposits(hash)
    }

    /// [`ReadyVersions::prepared_checkpoint`].
    pub fn prepared_checkpoint(&self, hash: &ModuleHash) -> Option<Arc<CheckpointModule>> {
        self.versions.prepared_checkpoint(hash)
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
