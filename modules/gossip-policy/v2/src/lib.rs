//! `gossip-policy-v2`: cut duplicate payload bytes without slowing coverage. Large messages are
//! pushed by their creator to about `2·ln N` peers and by first-hop relays to about
//! `0.5·ln N`, then only announced (receivers pull what they lack); small messages are pushed
//! to about `ln N` peers and announced to the rest; pushes prefer short queues, low RTT and no
//! recent failures, and large messages use quorum-and-cancel. The algorithm is
//! [`gossip_policy_common::policy_v2::plan_v2`], shared with the host's simulator that tuned it.

use gossip_policy_common::guest::{
    self, Guest, ModuleInfo, bindings::modnode::gossip_policy::types as wit,
};
use gossip_policy_common::policy_v2::{PolicyV2 as Algorithm, V2Params};

/// The exported implementation.
pub struct PolicyV2;

impl Guest for PolicyV2 {
    fn describe() -> ModuleInfo {
        let p = V2Params::default();
        guest::module_info(
            2,
            "push to a few well-placed peers (log of network size), announce to the rest",
            vec![
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
        )
    }

    fn plan(msg: wit::MessageMeta, peers: Vec<wit::PeerStats>) -> wit::SendPlan {
        guest::plan_with(&mut Algorithm::default(), msg, peers)
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
gossip_policy_common::guest::export!(PolicyV2);
