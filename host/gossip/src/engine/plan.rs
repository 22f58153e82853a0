//! Asking the policy for a message's plan, with the peers as it sees them, and queueing the
//! plan's sends.

use std::collections::BTreeSet;

use super::{GossipEngine, MS};
use crate::peer::Item;
use crate::policy::{MessageMeta, PeerStats, Policy, RouteRole, SendMode};
use crate::wire::MessageId;
use crate::{PeerId, Time};

impl<P: Policy> GossipEngine<P> {
    pub(super) fn network_size(&self) -> u32 {
        self.cfg.network_size.unwrap_or_else(|| {
            u32::try_from(self.peers.len())
                .unwrap_or(u32::MAX)
                .saturating_add(1)
        })
    }

    pub(super) fn stats_for(
        &self,
        have: Option<&BTreeSet<PeerId>>,
        origin: Option<PeerId>,
        now: Time,
    ) -> Vec<PeerStats> {
        self.peers
            .iter()
            .map(|(&peer, state)| PeerStats {
                peer,
                rtt_us: state.srtt_us.unwrap_or(self.cfg.initial_rtt_us),
                queue_depth: u32::try_from(state.depth()).unwrap_or(u32::MAX),
                recent_failures: state.recent_failures(now, self.cfg.failure_window),
                has_message: have.is_some_and(|h| h.contains(&peer)),
                is_origin: origin == Some(peer),
            })
            .collect()
    }

    /// Asks the policy for a plan for a stored message and queues its sends.
    pub(super) fn disseminate(&mut self, id: MessageId, origin: Option<PeerId>, now: Time) {
        let Some(msg) = self.store.get(&id) else {
            return;
        };
        let meta = MessageMeta {
            kind: msg.kind,
            size: u32::try_from(msg.payload.len()).unwrap_or(u32::MAX),
            local_origin: origin.is_none(),
            hops: msg.hops,
            network_size: self.network_size(),
        };
        let peer_stats = self.stats_for(Some(&msg.have), origin, now);
        let message_origin = msg.origin;
        let mut plan = match (&self.routes, message_origin) {
            (Some(routes), Some(from)) => {
                let roles: Vec<RouteRole> = peer_stats
                    .iter()
                    .map(|p| routes.role(from, p.peer))
                    .collect();
                self.policy.plan_routed(&meta, &peer_stats, &roles)
            }
            _ => self.policy.plan(&meta, &peer_stats),
        };
        // A plan may name each peer it was offered once, so its length is bounded by the peer
        // set: a longer one is the policy's fault, its targets are not walked, and the message
        // is flooded instead (delivery never depends on the policy).
        if plan.targets.len() > peer_stats.len() {
            self.stats.plans_over_peers = self.stats.plans_over_peers.saturating_add(1);
            plan = crate::policy::Flood.plan(&meta, &peer_stats);
        }
        let (kind, hops, payload) = (msg.kind, msg.hops, msg.payload.clone());
        let timeout = Time::from(plan.timeout_ms.max(1)) * MS;
        let mut chosen = BTreeSet::new();
        for target in &plan.targets {
            let Some(state) = self.peers.get_mut(&target.peer) else {
                continue;
            };
            if !chosen.insert(target.peer) {
                continue;
            }
            let item = match target.mode {
                SendMode::Push => Item::Push {
                    id,
                    kind,
                    hops,
                    origin: message_origin,
                    payload: payload.clone(),
                    planned: true,
                },
                SendMode::Announce => Item::Announce {
                    id,
                    kind,
                    size: meta.size,
                },
            };
            self.queued_seq = self.queued_seq.saturating_add(1);
            state.enqueue(plan.priority, item, timeout, self.queued_seq);
        }
        if let Some(msg) = self.store.get_mut(&id) {
            msg.quorum = plan.quorum;
            msg.priority = plan.priority;
            msg.timeout = timeout;
        }
    }
}
