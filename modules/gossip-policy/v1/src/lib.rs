//! `gossip-policy-v1`: flood. Push the full message to every peer that does not already have
//! it, wait for all sends.

#[allow(missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        path: ["../../../wit/types", "../../../wit/gossip-policy"],
        world: "modnode:gossip-policy/gossip-policy",
        generate_all,
    });
}

use bindings::exports::modnode::gossip_policy::policy::Guest;
use bindings::modnode::gossip_policy::types::{
    MessageKind, MessageMeta, PeerStats, Priority, SendMode, SendPlan, Target,
};
use bindings::modnode::types::types::ModuleInfo;

/// Per-send timeout.
pub const TIMEOUT_MS: u32 = 2_000;

/// The exported implementation.
pub struct Flood;

fn priority(kind: MessageKind) -> Priority {
    match kind {
        MessageKind::Block | MessageKind::Consensus => Priority::High,
        MessageKind::Deposit => Priority::Normal,
        MessageKind::PeerExchange => Priority::Low,
    }
}

impl Guest for Flood {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            kind: "gossip-policy".into(),
            version: 1,
            description: "flood: push to every peer that lacks the message".into(),
            params: vec![("timeout-ms".into(), TIMEOUT_MS.to_string())],
        }
    }

    fn plan(msg: MessageMeta, peers: Vec<PeerStats>) -> SendPlan {
        SendPlan {
            targets: peers
                .iter()
                .filter(|p| !p.has_message && !p.is_origin)
                .map(|p| Target {
                    peer: p.peer,
                    mode: SendMode::Push,
                })
                .collect(),
            quorum: 0,
            timeout_ms: TIMEOUT_MS,
            priority: priority(msg.kind),
        }
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
bindings::export!(Flood with_types_in bindings);
