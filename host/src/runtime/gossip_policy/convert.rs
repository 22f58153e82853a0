//! Conversions between the gossip engine's types, `@1.0.0`'s bindings (the host's types) and
//! `@2.0.0`'s bindings.

use super::*;

pub(super) fn meta_to_v2(m: MessageMeta) -> v2::MessageMeta {
    v2::MessageMeta {
        kind: kind_to_v2(m.kind),
        size: m.size,
        local_origin: m.local_origin,
        hops: m.hops,
        network_size: m.network_size,
    }
}

pub(super) fn kind_to_v2(k: MessageKind) -> v2::MessageKind {
    match k {
        MessageKind::Block => v2::MessageKind::Block,
        MessageKind::Consensus => v2::MessageKind::Consensus,
        MessageKind::Deposit => v2::MessageKind::Deposit,
        MessageKind::PeerExchange => v2::MessageKind::PeerExchange,
    }
}

pub(super) fn peer_to_v2(p: &PeerStats) -> v2::PeerStats {
    v2::PeerStats {
        peer: p.peer,
        rtt_us: p.rtt_us,
        queue_depth: p.queue_depth,
        recent_failures: p.recent_failures,
        has_message: p.has_message,
        is_origin: p.is_origin,
    }
}

pub(super) fn event_to_v2(e: PolicyEvent) -> v2::Event {
    let message = |peer, message, kind| v2::PeerMessage {
        peer,
        message,
        kind: kind_to_v2(to_wit_kind(kind)),
    };
    match e {
        PolicyEvent::Duplicate {
            peer,
            message: m,
            kind,
        } => v2::Event::Duplicate(message(peer, m, kind)),
        PolicyEvent::Missing {
            peer,
            message: m,
            kind,
        } => v2::Event::Missing(message(peer, m, kind)),
        PolicyEvent::PeerJoined(p) => v2::Event::PeerJoined(p),
        PolicyEvent::PeerLeft(p) => v2::Event::PeerLeft(p),
        PolicyEvent::Tick(now) => v2::Event::Tick(now),
    }
}

/// A `@2.0.0` plan in the host's types.
pub(super) fn plan_from_v2(p: &v2::SendPlan) -> SendPlan {
    SendPlan {
        targets: p
            .targets
            .iter()
            .map(|t| Target {
                peer: t.peer,
                mode: match t.mode {
                    v2::SendMode::Push => SendMode::Push,
                    v2::SendMode::Announce => SendMode::Announce,
                },
            })
            .collect(),
        quorum: p.quorum,
        timeout_ms: p.timeout_ms,
        priority: match p.priority {
            v2::Priority::High => Priority::High,
            v2::Priority::Normal => Priority::Normal,
            v2::Priority::Low => Priority::Low,
        },
    }
}

/// The WIT form of the gossip engine's message kind.
pub fn to_wit_kind(kind: modnode_gossip::policy::MessageKind) -> MessageKind {
    use modnode_gossip::policy as native;
    match kind {
        native::MessageKind::Block => MessageKind::Block,
        native::MessageKind::Consensus => MessageKind::Consensus,
        native::MessageKind::Deposit => MessageKind::Deposit,
        native::MessageKind::PeerExchange => MessageKind::PeerExchange,
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

/// The gossip engine's form of a message kind.
pub(super) fn kind_from_wit(kind: MessageKind) -> modnode_gossip::policy::MessageKind {
    use modnode_gossip::policy as native;
    match kind {
        MessageKind::Block => native::MessageKind::Block,
        MessageKind::Consensus => native::MessageKind::Consensus,
        MessageKind::Deposit => native::MessageKind::Deposit,
        MessageKind::PeerExchange => native::MessageKind::PeerExchange,
    }
}

/// The WIT form of the gossip engine's plan.
fn to_wit_plan(plan: &modnode_gossip::policy::SendPlan) -> SendPlan {
    use modnode_gossip::policy as native;
    SendPlan {
        targets: plan
            .targets
            .iter()
            .map(|t| Target {
                peer: t.peer,
                mode: match t.mode {
                    native::SendMode::Push => SendMode::Push,
                    native::SendMode::Announce => SendMode::Announce,
                },
            })
            .collect(),
        quorum: plan.quorum,
        timeout_ms: plan.timeout_ms,
        priority: match plan.priority {
            native::Priority::High => Priority::High,
            native::Priority::Normal => Priority::Normal,
            native::Priority::Low => Priority::Low,
        },
    }
}

/// A gossip engine's plan shown (`Debug`) as the policy's WIT type shows it
/// (`SendPlan { targets: [Target { peer: 1, mode: SendMode::Push }], … }`): how upgrade-check's
/// report has always printed a plan.
pub struct PlanShown<'a>(pub &'a modnode_gossip::policy::SendPlan);

impl std::fmt::Debug for PlanShown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        to_wit_plan(self.0).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use modnode_gossip::policy as native;

    #[test]
    fn a_plan_shows_as_the_wit_type_did_and_converts_both_ways() {
        let wit = SendPlan {
            targets: vec![
                Target {
                    peer: 1,
                    mode: SendMode::Push,
                },
                Target {
                    peer: 4,
                    mode: SendMode::Announce,
                },
            ],
            quorum: 1,
            timeout_ms: 500,
            priority: Priority::High,
        };
        let ours = from_wit_plan(&wit);
        assert_eq!(to_wit_plan(&ours), wit);
        assert_eq!(format!("{:?}", PlanShown(&ours)), format!("{wit:?}"));
        assert_eq!(format!("{:#?}", PlanShown(&ours)), format!("{wit:#?}"));
        for kind in [
            native::MessageKind::Block,
            native::MessageKind::Consensus,
            native::MessageKind::Deposit,
            native::MessageKind::PeerExchange,
        ] {
            assert_eq!(kind_from_wit(to_wit_kind(kind)), kind);
        }
    }
}
