//! `gossip-policy-v1`: flood. Push the full message to every peer that does not already have
//! it, wait for all sends ([`gossip_policy_common::policy::Flood`]).

use gossip_policy_common::guest::{
    self, Guest, ModuleInfo, bindings::modnode::gossip_policy::types as wit,
};
use gossip_policy_common::policy::Flood;

/// The exported implementation.
pub struct FloodV1;

impl Guest for FloodV1 {
    fn describe() -> ModuleInfo {
        guest::module_info(
            1,
            "flood: push to every peer that lacks the message",
            vec![("timeout-ms".into(), Flood::TIMEOUT_MS.to_string())],
        )
    }

    fn plan(msg: wit::MessageMeta, peers: Vec<wit::PeerStats>) -> wit::SendPlan {
        guest::plan_with(&mut Flood, msg, peers)
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
gossip_policy_common::guest::export!(FloodV1);
