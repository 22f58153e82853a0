//! Host side of the `modnode:gossip-policy` world: typed calls into a policy's `plan`. A policy
//! imports nothing; it decides, the host sends.

use wasmtime::component::Linker;

use super::error::HostFailure;
use super::module::{CallBase, Module, StoreData, World};
use super::{CallError, Kind, ModuleInfo};

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
    base: CallBase,
}

impl StoreData for PolicyCtx {
    fn base(&mut self) -> &mut CallBase {
        &mut self.base
    }
}

impl bindings::modnode::gossip_policy::types::Host for PolicyCtx {}
impl bindings::modnode::types::types::Host for PolicyCtx {}

/// The `modnode:gossip-policy` world.
pub struct GossipPolicy;

/// A loaded gossip-policy module.
pub type GossipPolicyModule = Module<GossipPolicy>;

impl World for GossipPolicy {
    const KIND: Kind = Kind::GossipPolicy;
    type Data = PolicyCtx;
    type Pre = bindings::GossipPolicyPre<PolicyCtx>;
    type Instance = bindings::GossipPolicy;

    /// The gossip-policy world imports nothing but types.
    fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<PolicyCtx>> {
        let mut linker = Linker::new(engine);
        bindings::GossipPolicy::add_to_linker::<_, wasmtime::component::HasSelf<PolicyCtx>>(
            &mut linker,
            |ctx| ctx,
        )?;
        Ok(linker)
    }

    fn pre(pre: wasmtime::component::InstancePre<PolicyCtx>) -> wasmtime::Result<Self::Pre> {
        bindings::GossipPolicyPre::new(pre)
    }

    fn instantiate(
        pre: &Self::Pre,
        store: &mut wasmtime::Store<PolicyCtx>,
    ) -> wasmtime::Result<Self::Instance> {
        pre.instantiate(store)
    }

    fn idle_data(base: CallBase) -> Result<PolicyCtx, HostFailure> {
        Ok(PolicyCtx { base })
    }

    fn describe(
        instance: &Self::Instance,
        store: &mut wasmtime::Store<PolicyCtx>,
    ) -> wasmtime::Result<ModuleInfo> {
        let info = instance
            .modnode_gossip_policy_policy()
            .call_describe(store)?;
        Ok(ModuleInfo {
            kind: info.kind,
            version: info.version,
            description: info.description,
            params: info.params,
        })
    }

    /// Plans the messages a node sends most: a block it produced and a deposit relayed one hop,
    /// among peers of mixed speed, some of which already have the message.
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
        for msg in messages {
            let (_, used) = module.plan_metered(msg, peers.clone())?;
            fuel = fuel.saturating_add(used);
        }
        Ok(fuel)
    }
}

impl Module<GossipPolicy> {
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
        let outcome = self.call(
            |base| Ok(PolicyCtx { base }),
            move |i, s| i.modnode_gossip_policy_policy().call_plan(s, msg, &peers),
        );
        let plan = outcome.result?;
        let output = super::bounds::Output {
            module: &self.meta().name(),
            kind: Kind::GossipPolicy,
        };
        output.list("plan().targets", plan.targets.len())?;
        Ok((plan, outcome.fuel_used))
    }
}

/// The WIT form of the gossip engine's message metadata.
pub fn to_wit_meta(msg: &modnode_gossip::policy::MessageMeta) -> MessageMeta {
    use modnode_gossip::policy as native;
    MessageMeta {
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
    }
}

/// The WIT form of the gossip engine's peer statistics.
pub fn to_wit_peers(peers: &[modnode_gossip::policy::PeerStats]) -> Vec<PeerStats> {
    peers
        .iter()
        .map(|p| PeerStats {
            peer: p.peer,
            rtt_us: p.rtt_us,
            queue_depth: p.queue_depth,
            recent_failures: p.recent_failures,
            has_message: p.has_message,
            is_origin: p.is_origin,
        })
        .collect()
}

/// The gossip engine's form of a policy's plan.
pub fn from_wit_plan(plan: &SendPlan) -> modnode_gossip::policy::SendPlan {
    use modnode_gossip::policy as native;
    native::SendPlan {
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
    }
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
        match GossipPolicyModule::plan(self, to_wit_meta(msg), to_wit_peers(peers)) {
            Ok(plan) => from_wit_plan(&plan),
            Err(e) => {
                tracing::warn!(module = %self.meta().name(), error = %e, "gossip policy failed; flooding this message");
                modnode_gossip::policy::Flood.plan(msg, peers)
            }
        }
    }
}
