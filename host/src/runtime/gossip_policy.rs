//! Host side of the `modnode:gossip-policy` world: typed calls into a policy's `plan`. A policy
//! imports nothing; it decides, the host sends.

use wasmtime::component::Linker;

use super::limits::Limiter;
use super::{
    CallError, CallSettings, ComponentInfo, HasLimiter, LoadError, ModuleInfo, ModuleMeta, Runtime,
};

mod bindings {
    wasmtime::component::bindgen!({
        path: ["../wit/types", "../wit/gossip-policy"],
        world: "modnode:gossip-policy/gossip-policy",
        additional_derives: [PartialEq, Eq],
    });
}

pub use bindings::modnode::gossip_policy::types::{
    MessageKind, MessageMeta, PeerStats, Priority, SendMode, SendPlan, Target,
};

/// Store data of one policy call.
pub struct PolicyCtx {
    limiter: Limiter,
}

impl HasLimiter for PolicyCtx {
    fn limiter(&mut self) -> &mut Limiter {
        &mut self.limiter
    }
}

impl bindings::modnode::gossip_policy::types::Host for PolicyCtx {}
impl bindings::modnode::types::types::Host for PolicyCtx {}

/// The gossip-policy world imports nothing but types.
pub(crate) fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<PolicyCtx>> {
    let mut linker = Linker::new(engine);
    bindings::GossipPolicy::add_to_linker::<_, wasmtime::component::HasSelf<PolicyCtx>>(
        &mut linker,
        |ctx| ctx,
    )?;
    Ok(linker)
}

/// A loaded gossip-policy module.
#[derive(Clone)]
pub struct GossipPolicyModule {
    meta: ModuleMeta,
    pre: bindings::GossipPolicyPre<PolicyCtx>,
    settings: CallSettings,
}

impl GossipPolicyModule {
    pub(crate) fn prepare(
        runtime: &Runtime,
        pre: wasmtime::component::InstancePre<PolicyCtx>,
        component: ComponentInfo,
    ) -> Result<Self, LoadError> {
        let name = super::display_name(&component, None);
        let pre = bindings::GossipPolicyPre::new(pre).map_err(|e| LoadError::Link {
            module: name.clone(),
            message: format!("{e:?}"),
        })?;
        let settings = runtime.call_settings();
        let info = run(&settings, &pre, &name, |i, s| {
            i.modnode_gossip_policy_policy().call_describe(s)
        })
        .map_err(|e| LoadError::Warmup {
            module: name.clone(),
            source: Box::new(e),
        })?;
        let info = ModuleInfo {
            kind: info.kind,
            version: info.version,
            description: info.description,
            params: info.params,
        };
        Ok(Self {
            meta: ModuleMeta { component, info },
            pre,
            settings,
        })
    }

    /// The module's identity.
    pub fn meta(&self) -> &ModuleMeta {
        &self.meta
    }

    /// Asks the policy how to spread one message.
    pub fn plan(&self, msg: MessageMeta, peers: Vec<PeerStats>) -> Result<SendPlan, CallError> {
        self.plan_metered(msg, peers).map(|(plan, _)| plan)
    }

    /// [`plan`](Self::plan), also returning the fuel the call used (`upgrade-check`).
    pub fn plan_metered(
        &self,
        msg: MessageMeta,
        peers: Vec<PeerStats>,
    ) -> Result<(SendPlan, u64), CallError> {
        run_metered(&self.settings, &self.pre, &self.meta.name(), move |i, s| {
            i.modnode_gossip_policy_policy().call_plan(s, msg, &peers)
        })
    }
}

fn run<R: Send + 'static>(
    settings: &CallSettings,
    pre: &bindings::GossipPolicyPre<PolicyCtx>,
    name: &str,
    f: impl FnOnce(&bindings::GossipPolicy, &mut wasmtime::Store<PolicyCtx>) -> wasmtime::Result<R>
    + Send
    + 'static,
) -> Result<R, CallError> {
    run_metered(settings, pre, name, f).map(|(r, _)| r)
}

/// [`run`], also returning the fuel the call used.
fn run_metered<R: Send + 'static>(
    settings: &CallSettings,
    pre: &bindings::GossipPolicyPre<PolicyCtx>,
    name: &str,
    f: impl FnOnce(&bindings::GossipPolicy, &mut wasmtime::Store<PolicyCtx>) -> wasmtime::Result<R>
    + Send
    + 'static,
) -> Result<(R, u64), CallError> {
    let data = PolicyCtx {
        limiter: Limiter::new(settings.limits),
    };
    let pre = pre.clone();
    let outcome = super::call(settings.clone(), name.to_string(), data, move |store| {
        let instance = pre.instantiate(&mut *store)?;
        f(&instance, store)
    });
    let fuel = outcome.fuel_used;
    outcome.result.map(|r| (r, fuel))
}

/// The module as the gossip engine's policy. Gossip policy is local, not consensus: if the
/// module fails a call (trap, fuel), the message is flooded instead and the failure logged, so a
/// broken policy degrades efficiency, never delivery.
impl modnode_gossip::policy::Policy for GossipPolicyModule {
    fn plan(
        &mut self,
        msg: &modnode_gossip::policy::MessageMeta,
        peers: &[modnode_gossip::policy::PeerStats],
    ) -> modnode_gossip::policy::SendPlan {
        use modnode_gossip::policy as native;
        let meta = MessageMeta {
            kind: match msg.kind {
                native::MessageKind::Block => MessageKind::Block,
                native::MessageKind::Consensus => MessageKind::Consensus,
                native::MessageKind::Deposit => MessageKind::Deposit,
                native::MessageKind::PeerExchange => MessageKind::PeerExchange,
            },
            size: msg.size,
            local_origin: msg.local_origin,
            hops: msg.hops,
            network_size: msg.network_size,
        };
        let stats = peers
            .iter()
            .map(|p| PeerStats {
                peer: p.peer,
                rtt_us: p.rtt_us,
                queue_depth: p.queue_depth,
                recent_failures: p.recent_failures,
                has_message: p.has_message,
                is_origin: p.is_origin,
            })
            .collect();
        match GossipPolicyModule::plan(self, meta, stats) {
            Ok(plan) => native::SendPlan {
                targets: plan
                    .targets
                    .iter()
                    .map(|t| native::Target {
                        peer: t.peer,
                        mode: match t.mode {
                            SendMode::Push => native::SendMode::Push,
                            SendMode::Announce => native::SendMode::Announce,
                        },
                    })
                    .collect(),
                quorum: plan.quorum,
                timeout_ms: plan.timeout_ms,
                priority: match plan.priority {
                    Priority::High => native::Priority::High,
                    Priority::Normal => native::Priority::Normal,
                    Priority::Low => native::Priority::Low,
                },
            },
            Err(e) => {
                tracing::warn!(module = %self.meta.name(), error = %e, "gossip policy failed; flooding this message");
                native::Flood.plan(msg, peers)
            }
        }
    }
}
