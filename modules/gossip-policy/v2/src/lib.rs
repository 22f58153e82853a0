//! `gossip-policy-v2`: cut duplicate payload bytes without slowing coverage. Large messages are
//! pushed by their creator to about `2·ln N` peers and by first-hop relays to about
//! `0.75·ln N`, then only announced (receivers pull what they lack); small messages are pushed
//! to about `ln N` peers and announced to the rest; pushes prefer short queues, low RTT and no
//! recent failures, and large messages use quorum-and-cancel. The algorithm is
//! [`gossip_policy_common::policy_v2::plan_v2`], shared with the host's simulator that tuned it.

#[allow(missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        path: ["../../../wit/types", "../../../wit/gossip-policy"],
        world: "modnode:gossip-policy/gossip-policy",
        generate_all,
    });
}

use bindings::exports::modnode::gossip_policy::policy::Guest;
use bindings::modnode::gossip_policy::types as wit;
use bindings::modnode::types::types::ModuleInfo;
use gossip_policy_common::policy as common;
use gossip_policy_common::policy_v2::{V2Params, plan_v2};

/// The exported implementation.
pub struct PolicyV2;

fn kind(k: wit::MessageKind) -> common::MessageKind {
    match k {
        wit::MessageKind::Block => common::MessageKind::Block,
        wit::MessageKind::Consensus => common::MessageKind::Consensus,
        wit::MessageKind::Deposit => common::MessageKind::Deposit,
        wit::MessageKind::PeerExchange => common::MessageKind::PeerExchange,
    }
}

fn priority(p: common::Priority) -> wit::Priority {
    match p {
        common::Priority::High => wit::Priority::High,
        common::Priority::Normal => wit::Priority::Normal,
        common::Priority::Low => wit::Priority::Low,
    }
}

impl Guest for PolicyV2 {
    fn describe() -> ModuleInfo {
        let p = V2Params::default();
        ModuleInfo {
            kind: "gossip-policy".into(),
            version: 2,
            description:
                "push to a few well-placed peers (log of network size), announce to the rest".into(),
            params: vec![
                ("large-threshold".into(), p.large_threshold.to_string()),
                (
                    "large-origin-fanout-permille-ln-n".into(),
                    p.large_origin_fanout_permille.to_string(),
                ),
                (
                    "large-relay-fanout-permille-ln-n".into(),
                    p.large_relay_fanout_permille.to_string(),
                ),
                (
                    "large-relay-max-hops".into(),
                    p.large_relay_max_hops.to_string(),
                ),
                (
                    "small-fanout-permille-ln-n".into(),
                    p.small_fanout_permille.to_string(),
                ),
                ("large-quorum".into(), p.large_quorum.to_string()),
                ("queue-cost-us".into(), p.queue_cost_us.to_string()),
                ("failure-cost-us".into(), p.failure_cost_us.to_string()),
                (
                    "max-failures-for-push".into(),
                    p.max_failures_for_push.to_string(),
                ),
                (
                    "max-queue-for-push".into(),
                    p.max_queue_for_push.to_string(),
                ),
                (
                    "max-rtt-for-push-us".into(),
                    p.max_rtt_for_push_us.to_string(),
                ),
                ("base-timeout-ms".into(), p.base_timeout_ms.to_string()),
                (
                    "timeout-bytes-per-ms".into(),
                    p.timeout_bytes_per_ms.to_string(),
                ),
            ],
        }
    }

    fn plan(msg: wit::MessageMeta, peers: Vec<wit::PeerStats>) -> wit::SendPlan {
        let meta = common::MessageMeta {
            kind: kind(msg.kind),
            size: msg.size,
            local_origin: msg.local_origin,
            hops: msg.hops,
            network_size: msg.network_size,
        };
        let peers: Vec<common::PeerStats> = peers
            .iter()
            .map(|p| common::PeerStats {
                peer: p.peer,
                rtt_us: p.rtt_us,
                queue_depth: p.queue_depth,
                recent_failures: p.recent_failures,
                has_message: p.has_message,
                is_origin: p.is_origin,
            })
            .collect();
        let plan = plan_v2(&V2Params::default(), &meta, &peers);
        wit::SendPlan {
            targets: plan
                .targets
                .iter()
                .map(|t| wit::Target {
                    peer: t.peer,
                    mode: match t.mode {
                        common::SendMode::Push => wit::SendMode::Push,
                        common::SendMode::Announce => wit::SendMode::Announce,
                    },
                })
                .collect(),
            quorum: plan.quorum,
            timeout_ms: plan.timeout_ms,
            priority: priority(plan.priority),
        }
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
bindings::export!(PolicyV2 with_types_in bindings);
