//! Host side of the `modnode:gossip-policy` world, every contract of it side by side: typed
//! calls into a policy's `plan`. A policy imports nothing; it decides, the host sends.
//!
//! - `@1.0.0`: `plan(msg, peers) -> send-plan`, a pure function.
//! - `@2.0.0`: the same plan types, plus state the host keeps between calls and events the
//!   host reports (`take-over`, `plan(msg, peers, state) -> (plan, state)`,
//!   `on-event(event, state) -> state`). The module stays a pure function of its inputs; the
//!   state it hands back is bounded ([`OutputBounds::state_bytes`](super::kinds::OutputBounds))
//!   and an oversized one is a module fault like any other.
//!
//! Being output-pure, plans and events run on warm instances reused across calls, fuel and
//! limits fresh each call, with the guarantees [`instances`] states; `plan_metered` (fuel
//! compared across versions) keeps a fresh instance per call.
//!
//! The host's types are those of `@1.0.0` (the gossip engine's plan), so slots, shadows and
//! canaries compare plans of versions of either contract; a `@2.0.0` plan is converted.

use wasmtime::component::Linker;

use super::error::HostFailure;
use super::module::{CallBase, Module, StoreData, World, unimplemented_contract};
use super::{CallError, Kind, ModuleInfo, Version};

mod bindings {
    wasmtime::component::bindgen!({
        path: ["../wit/types", "../wit/gossip-policy"],
        world: "modnode:gossip-policy/gossip-policy",
        additional_derives: [PartialEq, Eq],
    });
}

/// Bindings of `modnode:gossip-policy@2.0.0` (`wit/gossip-policy-2`).
mod bindings_v2 {
    wasmtime::component::bindgen!({
        path: ["../wit/types", "../wit/gossip-policy-2"],
        world: "modnode:gossip-policy/gossip-policy",
        additional_derives: [PartialEq, Eq],
    });
}

use bindings_v2::modnode::gossip_policy::types as v2;

pub use bindings::modnode::gossip_policy::types::{
    MessageKind, MessageMeta, PeerStats, Priority, SendMode, SendPlan, Target,
};

/// Something the host saw happen, reported to a stateful (`@2.0.0`) policy between plans: the
/// gossip engine's event, converted to the contract's at the call.
pub use modnode_gossip::PolicyEvent;

mod convert;
pub mod instances;
mod kept;

pub use convert::{PlanShown, from_wit_plan, to_wit_kind, to_wit_meta, to_wit_peers};
use convert::{event_to_v2, kind_from_wit, meta_to_v2, peer_to_v2, plan_from_v2};
pub use kept::KeptPolicy;

/// Store data of one policy call (every contract).
pub struct PolicyCtx {
    base: CallBase,
    /// A linear memory grew since the data was set (see [`instances`]).
    grew: bool,
}

impl PolicyCtx {
    fn new(base: CallBase) -> Self {
        Self { base, grew: false }
    }
}

/// The pinned limiter, noting growth: what decides whether a warm instance is kept.
impl wasmtime::ResourceLimiter for PolicyCtx {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grew = true;
        self.base.limiter.memory_growing(current, desired, maximum)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.base.limiter.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.base.limiter.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.base.limiter.instances()
    }

    fn tables(&self) -> usize {
        self.base.limiter.tables()
    }

    fn memories(&self) -> usize {
        self.base.limiter.memories()
    }
}

impl StoreData for PolicyCtx {
    fn base(&mut self) -> &mut CallBase {
        &mut self.base
    }
}

impl bindings::modnode::gossip_policy::types::Host for PolicyCtx {}
impl bindings::modnode::types::types::Host for PolicyCtx {}
impl v2::Host for PolicyCtx {}
impl bindings_v2::modnode::types::types::Host for PolicyCtx {}

/// The `modnode:gossip-policy` world.
pub struct GossipPolicy;

/// A loaded gossip-policy module.
pub type GossipPolicyModule = Module<GossipPolicy>;

/// A linked policy, with the bindings of its contract.
#[derive(Clone)]
pub enum PolicyPre {
    /// `@1.0.0`.
    V1(bindings::GossipPolicyPre<PolicyCtx>),
    /// `@2.0.0`.
    V2(bindings_v2::GossipPolicyPre<PolicyCtx>),
}

/// An instantiated policy, with the bindings of its contract.
pub enum PolicyInstance {
    /// `@1.0.0`.
    V1(bindings::GossipPolicy),
    /// `@2.0.0`.
    V2(bindings_v2::GossipPolicy),
}

impl World for GossipPolicy {
    const KIND: Kind = Kind::GossipPolicy;
    type Data = PolicyCtx;
    type Pre = PolicyPre;
    type Instance = PolicyInstance;

    /// The gossip-policy world imports nothing but types.
    fn linker(engine: &wasmtime::Engine, contract: Version) -> wasmtime::Result<Linker<PolicyCtx>> {
        use wasmtime::component::HasSelf;
        let mut linker = Linker::new(engine);
        match contract.major {
            1 => bindings::GossipPolicy::add_to_linker::<_, HasSelf<PolicyCtx>>(
                &mut linker,
                |ctx| ctx,
            )?,
            2 => bindings_v2::GossipPolicy::add_to_linker::<_, HasSelf<PolicyCtx>>(
                &mut linker,
                |ctx| ctx,
            )?,
            _ => return Err(unimplemented_contract(Self::KIND, contract)),
        }
        Ok(linker)
    }

    fn pre(
        pre: wasmtime::component::InstancePre<PolicyCtx>,
        contract: Version,
    ) -> wasmtime::Result<Self::Pre> {
        match contract.major {
            1 => Ok(PolicyPre::V1(bindings::GossipPolicyPre::new(pre)?)),
            2 => Ok(PolicyPre::V2(bindings_v2::GossipPolicyPre::new(pre)?)),
            _ => Err(unimplemented_contract(Self::KIND, contract)),
        }
    }

    fn instantiate(
        pre: &Self::Pre,
        store: &mut wasmtime::Store<PolicyCtx>,
    ) -> wasmtime::Result<Self::Instance> {
        Ok(match pre {
            PolicyPre::V1(pre) => PolicyInstance::V1(pre.instantiate(store)?),
            PolicyPre::V2(pre) => PolicyInstance::V2(pre.instantiate(store)?),
        })
    }

    fn idle_data(base: CallBase) -> Result<PolicyCtx, HostFailure> {
        Ok(PolicyCtx::new(base))
    }

    fn describe(
        instance: &Self::Instance,
        store: &mut wasmtime::Store<PolicyCtx>,
    ) -> wasmtime::Result<ModuleInfo> {
        let (kind, version, description, params) = match instance {
            PolicyInstance::V1(i) => {
                let info = i.modnode_gossip_policy_policy().call_describe(store)?;
                (info.kind, info.version, info.description, info.params)
            }
            PolicyInstance::V2(i) => {
                let info = i.modnode_gossip_policy_policy().call_describe(store)?;
                (info.kind, info.version, info.description, info.params)
            }
        };
        Ok(ModuleInfo {
            kind,
            version,
            description,
            params,
        })
    }

    /// Plans the messages a node sends most: a block it produced and a deposit relayed one hop,
    /// among peers of mixed speed, some of which already have the message. A stateful policy
    /// also hears a duplicate and a tick between them, and plans on the state they left.
    fn dry_run(module: &GossipPolicyModule) -> Result<u64, CallError> {
        let peers: Vec<PeerStats> = (0..12u32)
            .map(|i| PeerStats {
                peer: i,
                rtt_us: 2_000u32.saturating_mul(i.saturating_add(1)),
                queue_depth: i % 4,
                recent_failures: u32::from(i == 7),
                has_message: i % 5 == 0,
                is_origin: false,
            })
            .collect();
        let messages = [
            MessageMeta {
                kind: MessageKind::Block,
                size: 4_096,
                local_origin: true,
                hops: 0,
                network_size: 13,
            },
            MessageMeta {
                kind: MessageKind::Deposit,
                size: 200,
                local_origin: false,
                hops: 1,
                network_size: 13,
            },
        ];
        let mut fuel = 0u64;
        let mut state = module.take_over(None, Vec::new())?;
        for msg in messages {
            let planned = module.plan_with_state(msg, peers.clone(), state)?;
            fuel = fuel.saturating_add(planned.fuel);
            state = planned.state.unwrap_or_default();
            for event in [
                PolicyEvent::Duplicate {
                    peer: 3,
                    message: 1,
                    kind: kind_from_wit(msg.kind),
                },
                PolicyEvent::Tick(1_000),
            ] {
                if let Some(next) = module.on_event(event, state.clone())? {
                    state = next;
                }
            }
        }
        Ok(fuel)
    }

    /// A `@2.0.0` policy decides whether it reads the previous version's state.
    fn take_over(
        module: &GossipPolicyModule,
        previous: Option<(&GossipPolicyModule, Vec<u8>)>,
    ) -> Result<Vec<u8>, CallError> {
        match previous {
            Some((previous, state)) => module.take_over(Some(previous.meta().info.clone()), state),
            None => module.take_over(None, Vec::new()),
        }
    }
}

/// What one plan call made: the plan, the policy's new state (`None`: its contract keeps none)
/// and the fuel the call used. The plan is in the host's (`@1.0.0`) types, or in the gossip
/// engine's (`Planned<modnode_gossip::SendPlan>`, from the engine-typed calls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned<P = SendPlan> {
    /// The plan.
    pub plan: P,
    /// The state to keep for the next call; `None` for a stateless (`@1.0.0`) policy.
    pub state: Option<Vec<u8>>,
    /// Fuel the call used.
    pub fuel: u64,
}

impl Module<GossipPolicy> {
    /// Asks the policy how to spread one message, as a pure function: a stateful policy starts
    /// from empty state and what it would keep is dropped. Runs on a warm instance
    /// ([`instances`]).
    pub fn plan(&self, msg: MessageMeta, peers: Vec<PeerStats>) -> Result<SendPlan, CallError> {
        self.plan_with_state(msg, peers, Vec::new()).map(|p| p.plan)
    }

    /// [`plan`](Self::plan) on a fresh instance, also returning the fuel the call used: the
    /// fuel of a fresh instance, comparable across versions (`upgrade-check`, warm-up).
    pub fn plan_metered(
        &self,
        msg: MessageMeta,
        peers: Vec<PeerStats>,
    ) -> Result<(SendPlan, u64), CallError> {
        let outcome = self.call(
            |base| Ok(PolicyCtx::new(base)),
            move |i, s| plan_on(i, s, msg, &peers, &[]),
        );
        let (plan, state) = outcome.result?;
        self.check_plan(&plan, state.as_deref())?;
        Ok((plan, outcome.fuel_used))
    }

    /// Asks the policy how to spread one message given its kept `state` (ignored by a
    /// stateless policy), on a warm instance ([`instances`]: fuel and limits are per call, and
    /// the answer is a fresh instance's). The plan's targets and the returned state are
    /// checked against the kind's bounds: over either is a module fault.
    pub fn plan_with_state(
        &self,
        msg: MessageMeta,
        peers: Vec<PeerStats>,
        state: Vec<u8>,
    ) -> Result<Planned, CallError> {
        let ((plan, state), fuel) =
            instances::call(self, move |i, s| plan_on(i, s, msg, &peers, &state))?;
        self.check_plan(&plan, state.as_deref())?;
        Ok(Planned { plan, state, fuel })
    }

    /// [`plan_metered`](Self::plan_metered) in the gossip engine's types: what `upgrade-check`
    /// compares across versions.
    pub fn engine_plan_metered(
        &self,
        msg: &modnode_gossip::MessageMeta,
        peers: &[modnode_gossip::PeerStats],
    ) -> Result<(modnode_gossip::SendPlan, u64), CallError> {
        let (plan, fuel) = self.plan_metered(to_wit_meta(msg), to_wit_peers(peers))?;
        Ok((from_wit_plan(&plan), fuel))
    }

    /// [`plan_with_state`](Self::plan_with_state) in the gossip engine's types.
    pub fn engine_plan_with_state(
        &self,
        msg: &modnode_gossip::MessageMeta,
        peers: &[modnode_gossip::PeerStats],
        state: Vec<u8>,
    ) -> Result<Planned<modnode_gossip::SendPlan>, CallError> {
        let planned = self.plan_with_state(to_wit_meta(msg), to_wit_peers(peers), state)?;
        Ok(Planned {
            plan: from_wit_plan(&planned.plan),
            state: planned.state,
            fuel: planned.fuel,
        })
    }

    /// Checks a plan and the state that came with it against the kind's bounds.
    fn check_plan(&self, plan: &SendPlan, state: Option<&[u8]>) -> Result<(), CallError> {
        let name = self.meta().name();
        let output = super::bounds::Output {
            module: &name,
            kind: Kind::GossipPolicy,
        };
        output.list("plan().targets", plan.targets.len())?;
        if let Some(state) = state {
            self.check_state("plan().state", state)?;
        }
        Ok(())
    }

    /// Tells a stateful policy about `event` (on a warm instance, as
    /// [`plan_with_state`](Self::plan_with_state)); returns its new state (checked against the
    /// kind's bound). A stateless policy hears nothing: `None`, and no call is made.
    pub fn on_event(
        &self,
        event: PolicyEvent,
        state: Vec<u8>,
    ) -> Result<Option<Vec<u8>>, CallError> {
        if self.contract().major < 2 {
            return Ok(None);
        }
        let (state, _) = instances::call(self, move |i, s| match i {
            PolicyInstance::V1(_) => Ok(None),
            PolicyInstance::V2(i) => i
                .modnode_gossip_policy_policy()
                .call_on_event(s, event_to_v2(event), &state)
                .map(Some),
        })?;
        if let Some(state) = &state {
            self.check_state("on-event()", state)?;
        }
        Ok(state)
    }

    /// The state this version starts with when it takes over a slot from `previous` (its
    /// description and kept state; `None` at the node's start). A stateless policy keeps none:
    /// empty, and no call is made. The state is checked against the kind's bound.
    pub fn take_over(
        &self,
        previous: Option<ModuleInfo>,
        state: Vec<u8>,
    ) -> Result<Vec<u8>, CallError> {
        if self.contract().major < 2 {
            return Ok(Vec::new());
        }
        let outcome = self.call(
            |base| Ok(PolicyCtx::new(base)),
            move |i, s| match i {
                PolicyInstance::V1(_) => Ok(Vec::new()),
                PolicyInstance::V2(i) => {
                    let previous =
                        previous.map(|p| bindings_v2::modnode::types::types::ModuleInfo {
                            kind: p.kind,
                            version: p.version,
                            description: p.description,
                            params: p.params,
                        });
                    i.modnode_gossip_policy_policy()
                        .call_take_over(s, previous.as_ref(), &state)
                }
            },
        );
        let state = outcome.result?;
        self.check_state("take-over()", &state)?;
        Ok(state)
    }

    /// Checks a state the module handed back (`what` names the call) against the kind's bound.
    fn check_state(&self, what: &str, state: &[u8]) -> Result<(), CallError> {
        let name = self.meta().name();
        let output = super::bounds::Output {
            module: &name,
            kind: Kind::GossipPolicy,
        };
        Ok(output.state(what, state.len())?)
    }
}

/// One `plan` call on `instance`, with either contract's bindings: the plan in the host's types
/// and, for a stateful policy, its new state.
fn plan_on(
    instance: &PolicyInstance,
    store: &mut wasmtime::Store<PolicyCtx>,
    msg: MessageMeta,
    peers: &[PeerStats],
    state: &[u8],
) -> wasmtime::Result<(SendPlan, Option<Vec<u8>>)> {
    match instance {
        PolicyInstance::V1(i) => i
            .modnode_gossip_policy_policy()
            .call_plan(store, msg, peers)
            .map(|plan| (plan, None)),
        PolicyInstance::V2(i) => {
            let peers: Vec<v2::PeerStats> = peers.iter().map(peer_to_v2).collect();
            i.modnode_gossip_policy_policy()
                .call_plan(store, meta_to_v2(msg), &peers, state)
                .map(|p| (plan_from_v2(&p.plan), Some(p.state)))
        }
    }
}
