//! The one place `upgrade-check` touches the runtime: load a module from bytes, call it, read
//! the fuel it used. Everything else in the checker works on the types here, so a change of the
//! runtime's shape is a change to this file.

use std::sync::Arc;

use crate::chunk::{ChunkContents, ChunkError, LeafRange, PlanParams};
use crate::deposit::{
    ChainContext, DepositContext, DepositOutcome, DepositRejection, EpochDeposits, ProvenDeposit,
    QueuedDeposits,
};
use crate::runtime::checkpoint::StateReader;
use crate::runtime::deposits::v3::{V3Applied, V3Output};
use crate::runtime::{CallError, LinkedModule, Runtime, RuntimeConfig, inspect};
use crate::state::{PendingDelta, PendingQueue, RegistryDelta, SharedRegistry};
use modnode_gossip::policy::{MessageMeta, PeerStats, PolicyEvent, SendPlan};

use super::{CheckError, Kind, ModuleFile};

/// A loaded module version of one kind.
#[derive(Clone)]
pub(crate) struct Version {
    /// `<kind>-v<version>@<hash prefix>`.
    pub(crate) name: String,
    /// Version number the module reports.
    pub(crate) version: u32,
    /// sha256 of the component.
    pub(crate) sha256: [u8; 32],
    module: LinkedModule,
}

/// A runtime with the node's default settings (fuel budget and limits).
pub(crate) fn runtime() -> Result<Runtime, CheckError> {
    Runtime::new(RuntimeConfig::default()).map_err(|source| CheckError::Runtime {
        reason: source.to_string(),
    })
}

/// Validates and loads `file`, which must be a module of `kind`.
pub(crate) fn load(
    runtime: &Runtime,
    file: &ModuleFile,
    kind: Kind,
) -> Result<Version, CheckError> {
    let invalid = |reason: String| CheckError::BadModule {
        path: file.label.clone(),
        reason,
    };
    let info = inspect::validate(&file.bytes).map_err(|e| invalid(e.to_string()))?;
    let found = match info.kind {
        inspect::Kind::Deposits => Kind::Deposits,
        inspect::Kind::GossipPolicy => Kind::GossipPolicy,
        inspect::Kind::Checkpoint => Kind::Checkpoint,
    };
    if found != kind {
        return Err(CheckError::WrongKind {
            path: file.label.clone(),
            expected: kind,
            found,
        });
    }
    let module = runtime
        .load(&file.bytes)
        .map_err(|e| invalid(e.to_string()))?;
    let meta = module.meta();
    Ok(Version {
        name: meta.name(),
        version: meta.info.version,
        sha256: meta.component.sha256.0,
        module,
    })
}

/// What a deposits version made of one block.
pub(crate) enum BlockRun {
    /// Processed: outcomes, the registry changes and the fuel used (`fuel`: the module's own
    /// computation; `total_fuel`: host calls included, what the budget bounds).
    Applied {
        outcomes: Vec<DepositOutcome>,
        delta: RegistryDelta,
        eth1_deposit_index: u64,
        fuel: u64,
        total_fuel: u64,
    },
    /// The module rejected the block (it is invalid). The runtime does not report fuel here.
    Rejected(DepositRejection),
    /// The call failed: trap, out of fuel, limit (deterministic) or a host failure.
    Failed(CallError),
}

impl Version {
    /// Applies deposits over `registry` (which is not changed).
    pub(crate) fn process_deposits(
        &self,
        registry: SharedRegistry,
        ctx: &DepositContext,
        deposits: &[ProvenDeposit],
    ) -> BlockRun {
        let LinkedModule::Deposits(module) = &self.module else {
            return BlockRun::Failed(self.not_kind("deposits"));
        };
        match module.apply(registry, ctx, deposits) {
            Ok(Ok(out)) => BlockRun::Applied {
                outcomes: out.outcomes,
                delta: out.delta,
                eth1_deposit_index: out.eth1_deposit_index,
                // The module's own computation: host-call fuel (BLS verifications above all)
                // bounds a call but would hide a registry scan behind the signature checks.
                fuel: out.fuel_used.saturating_sub(out.host_fuel),
                total_fuel: out.fuel_used,
            },
            Ok(Err(e)) => BlockRun::Rejected(e),
            Err(e) => BlockRun::Failed(e),
        }
    }

    /// The deposits contract major the module implements (`None` for another kind).
    pub(crate) fn deposits_contract(&self) -> Option<u64> {
        match &self.module {
            LinkedModule::Deposits(module) => Some(module.contract().major),
            _ => None,
        }
    }

    /// The fuel budget of one deposits call over `items` deposits (or, for an epoch
    /// transition, its most entries applied); `None` for another kind or on overflow.
    pub(crate) fn deposits_budget(&self, items: u64) -> Option<u64> {
        match &self.module {
            LinkedModule::Deposits(module) => module.budget_for(items),
            _ => None,
        }
    }

    /// Queues a block's deposits (`process` of `modnode:deposits@3.0.0`) over `registry` and
    /// `pending` (neither is changed).
    pub(crate) fn queue_deposits(
        &self,
        registry: SharedRegistry,
        pending: PendingQueue,
        ctx: &DepositContext,
        deposits: &[ProvenDeposit],
    ) -> V3Run<QueuedDeposits> {
        let LinkedModule::Deposits(module) = &self.module else {
            return V3Run::Failed(self.not_kind("deposits"));
        };
        V3Run::from(module.queue_deposits(registry, pending, ctx, deposits))
    }

    /// `process-epoch` of `modnode:deposits@3.0.0` over `registry` and `pending` (neither is
    /// changed).
    pub(crate) fn process_epoch(
        &self,
        registry: SharedRegistry,
        pending: PendingQueue,
        ctx: &ChainContext,
    ) -> V3Run<EpochDeposits> {
        let LinkedModule::Deposits(module) = &self.module else {
            return V3Run::Failed(self.not_kind("deposits"));
        };
        V3Run::from(module.apply_epoch(registry, pending, ctx))
    }

    /// The deposits version as a chain's deposit engine (for replaying recorded blocks).
    pub(crate) fn deposit_engine(&self) -> Option<crate::chain::DepositEngine> {
        match &self.module {
            LinkedModule::Deposits(module) => Some(crate::chain::DepositEngine::Module(Box::new(
                module.clone(),
            ))),
            _ => None,
        }
    }

    /// Asks a gossip policy for a plan; returns it with the fuel used.
    pub(crate) fn plan_gossip(
        &self,
        msg: &MessageMeta,
        peers: &[PeerStats],
    ) -> Result<(SendPlan, u64), CallError> {
        let LinkedModule::GossipPolicy(module) = &self.module else {
            return Err(self.not_kind("gossip-policy"));
        };
        module.engine_plan_metered(msg, peers)
    }

    /// A stateful (`@2.0.0`) gossip policy's plan on the state it reaches from its initial one
    /// by hearing `events`, made twice on that same state (the two must be equal); `None` for
    /// a stateless policy. Every state the policy hands back is checked against the kind's
    /// bound: over it is a module fault.
    pub(crate) fn plan_gossip_on_state(
        &self,
        events: &[PolicyEvent],
        msg: &MessageMeta,
        peers: &[PeerStats],
    ) -> Result<Option<(SendPlan, SendPlan)>, CallError> {
        let LinkedModule::GossipPolicy(module) = &self.module else {
            return Err(self.not_kind("gossip-policy"));
        };
        if module.contract().major < 2 {
            return Ok(None);
        }
        let mut state = module.take_over(None, Vec::new())?;
        for event in events {
            if let Some(next) = module.on_event(*event, state.clone())? {
                state = next;
            }
        }
        let first = module.engine_plan_with_state(msg, peers, state.clone())?;
        let second = module.engine_plan_with_state(msg, peers, state)?;
        Ok(Some((first.plan, second.plan)))
    }

    /// The gossip policy as the gossip engine's [`Policy`](modnode_gossip::policy::Policy),
    /// for the network simulator.
    pub(crate) fn gossip_policy(
        &self,
    ) -> Option<crate::runtime::gossip_policy::GossipPolicyModule> {
        match &self.module {
            LinkedModule::GossipPolicy(module) => Some(module.clone()),
            _ => None,
        }
    }

    /// Plans checkpoint chunks; returns them with the fuel used.
    pub(crate) fn plan_checkpoint(
        &self,
        reader: Arc<dyn StateReader>,
        params: PlanParams,
    ) -> Result<(Vec<LeafRange>, u64), CallError> {
        let LinkedModule::Checkpoint(module) = &self.module else {
            return Err(self.not_kind("checkpoint"));
        };
        module.plan_metered(reader, params)
    }

    /// Builds one checkpoint chunk; returns it with the fuel used.
    pub(crate) fn build_chunk(
        &self,
        reader: Arc<dyn StateReader>,
        range: LeafRange,
    ) -> Result<(Result<Vec<u8>, ChunkError>, u64), CallError> {
        let LinkedModule::Checkpoint(module) = &self.module else {
            return Err(self.not_kind("checkpoint"));
        };
        module.build_chunk_metered(reader, range)
    }

    /// Opens one checkpoint chunk; returns its contents with the fuel used.
    pub(crate) fn open_chunk(
        &self,
        chunk: Vec<u8>,
    ) -> Result<(Result<ChunkContents, ChunkError>, u64), CallError> {
        let LinkedModule::Checkpoint(module) = &self.module else {
            return Err(self.not_kind("checkpoint"));
        };
        module.open_chunk_metered(chunk)
    }

    fn not_kind(&self, kind: &str) -> CallError {
        crate::runtime::HostFailure::new(
            &self.name,
            crate::runtime::HostFailureKind::Runtime,
            format!("upgrade-check called it as a {kind} module"),
        )
        .into()
    }
}

/// What a `modnode:deposits@3.0.0` call made of its input.
pub(crate) enum V3Run<T> {
    /// Processed: the answer, the registry and queue changes, the fuel (`fuel`: the module's
    /// own computation; `total_fuel`: host calls included, what the budget bounds).
    Applied {
        result: T,
        delta: RegistryDelta,
        pending: PendingDelta,
        fuel: u64,
        total_fuel: u64,
    },
    /// The module rejected the block (it is invalid).
    Rejected(DepositRejection),
    /// The call failed: trap, out of fuel, limit (deterministic) or a host failure.
    Failed(CallError),
}

impl<T> From<V3Applied<T>> for V3Run<T> {
    fn from(r: Result<Result<V3Output<T>, DepositRejection>, CallError>) -> Self {
        match r {
            Ok(Ok(out)) => V3Run::Applied {
                result: out.result,
                delta: out.delta,
                pending: out.pending,
                fuel: out.fuel_used.saturating_sub(out.host_fuel),
                total_fuel: out.fuel_used,
            },
            Ok(Err(e)) => V3Run::Rejected(e),
            Err(e) => V3Run::Failed(e),
        }
    }
}

/// Whether a failed call is the module's deterministic fault (trap, fuel, limit) rather than
/// ours (a host failure, which must abort the check instead of counting as a divergence).
pub(crate) fn is_host_failure(e: &CallError) -> bool {
    matches!(e, CallError::Host(_))
}
