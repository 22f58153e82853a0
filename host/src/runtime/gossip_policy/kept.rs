//! A gossip-policy module as one gossip engine's policy, its state kept beside it, and the
//! spreading-tree mechanics a module declares (simulated nodes, benchmarks, `upgrade-check`).

use super::*;

impl Module<GossipPolicy> {
    /// The spreading-tree mechanics the module asks of the gossip engine
    /// ([`modnode_gossip::LinkControl`]): a stateful (`@2.0.0`) module that declares the
    /// parameters `graft-min-ms`, `graft-max-ms` and `announce-first-above` as numbers (as
    /// `gossip-policy-v3` does). `None` for any other module: the engine's usual mechanics.
    pub fn link_control(&self) -> Option<modnode_gossip::LinkControl> {
        if self.contract().major < 2 {
            return None;
        }
        let param = |name: &str| -> Option<u32> {
            self.meta()
                .info
                .params
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.parse().ok())
        };
        Some(modnode_gossip::LinkControl {
            graft_min_ms: param("graft-min-ms")?,
            graft_max_ms: param("graft-max-ms")?,
            announce_first_above: param("announce-first-above")?,
        })
    }
}

/// A gossip-policy module as one gossip engine's policy, the module's state kept here: what a
/// node's slot does for its live version, for one engine alone (simulated nodes, benchmarks,
/// `upgrade-check`). A stateful (`@2.0.0`) module plans on its state and hears the engine's
/// events; a stateless one plans as always; the engine gives it the tree mechanics it declares
/// ([`Module::link_control`]). A failed plan floods the message (as in a node), a failed event
/// leaves the state as it was; both are counted.
pub struct KeptPolicy {
    module: GossipPolicyModule,
    state: Vec<u8>,
    link: Option<modnode_gossip::LinkControl>,
    plans: u64,
    failures: u64,
}

impl KeptPolicy {
    /// `module`, from empty state.
    pub fn new(module: &GossipPolicyModule) -> KeptPolicy {
        KeptPolicy {
            link: module.link_control(),
            module: module.clone(),
            state: Vec::new(),
            plans: 0,
            failures: 0,
        }
    }

    /// The state kept for the module.
    pub fn state(&self) -> &[u8] {
        &self.state
    }

    /// Plans made.
    pub fn plans(&self) -> u64 {
        self.plans
    }

    /// Calls that failed (plans flooded instead, events not heard).
    pub fn failures(&self) -> u64 {
        self.failures
    }
}

impl modnode_gossip::policy::Policy for KeptPolicy {
    fn plan(
        &mut self,
        msg: &modnode_gossip::policy::MessageMeta,
        peers: &[modnode_gossip::policy::PeerStats],
    ) -> modnode_gossip::policy::SendPlan {
        self.plans = self.plans.saturating_add(1);
        match self
            .module
            .plan_with_state(to_wit_meta(msg), to_wit_peers(peers), self.state.clone())
        {
            Ok(planned) => {
                if let Some(state) = planned.state {
                    self.state = state;
                }
                from_wit_plan(&planned.plan)
            }
            Err(_) => {
                self.failures = self.failures.saturating_add(1);
                modnode_gossip::policy::Flood.plan(msg, peers)
            }
        }
    }

    fn on_event(&mut self, event: &modnode_gossip::PolicyEvent) {
        match self.module.on_event(*event, self.state.clone()) {
            Ok(Some(next)) => self.state = next,
            Ok(None) => {}
            Err(_) => self.failures = self.failures.saturating_add(1),
        }
    }

    fn link_control(&self) -> Option<modnode_gossip::LinkControl> {
        self.link
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
