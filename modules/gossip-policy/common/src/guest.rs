//! Glue for guest modules: the WIT bindings of the `gossip-policy` world and conversions between
//! the generated types and this crate's, so that a module is its [`Policy`] plus `describe`.

use crate::policy::{self as native, Policy};

/// Bindings generated from `wit/gossip-policy`.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: ["../../../wit/types", "../../../wit/gossip-policy"],
        world: "modnode:gossip-policy/gossip-policy",
        pub_export_macro: true,
        default_bindings_module: "gossip_policy_common::guest::bindings",
        generate_all,
    });
}

pub use bindings::export;
pub use bindings::exports::modnode::gossip_policy::policy::Guest;
use bindings::modnode::gossip_policy::types as wit;
pub use bindings::modnode::types::types::ModuleInfo;

/// The `module-info` of a gossip policy.
pub fn module_info(version: u32, description: &str, params: Vec<(String, String)>) -> ModuleInfo {
    ModuleInfo {
        kind: "gossip-policy".into(),
        version,
        description: description.into(),
        params,
    }
}

/// Runs `policy` on WIT inputs and returns the WIT plan.
pub fn plan_with(
    policy: &mut impl Policy,
    msg: wit::MessageMeta,
    peers: Vec<wit::PeerStats>,
) -> wit::SendPlan {
    let meta = native::MessageMeta {
        kind: match msg.kind {
            wit::MessageKind::Block => native::MessageKind::Block,
            wit::MessageKind::Consensus => native::MessageKind::Consensus,
            wit::MessageKind::Deposit => native::MessageKind::Deposit,
            wit::MessageKind::PeerExchange => native::MessageKind::PeerExchange,
        },
        size: msg.size,
        local_origin: msg.local_origin,
        hops: msg.hops,
        network_size: msg.network_size,
    };
    let peers: Vec<native::PeerStats> = peers
        .iter()
        .map(|p| native::PeerStats {
            peer: p.peer,
            rtt_us: p.rtt_us,
            queue_depth: p.queue_depth,
            recent_failures: p.recent_failures,
            has_message: p.has_message,
            is_origin: p.is_origin,
        })
        .collect();
    let plan = policy.plan(&meta, &peers);
    wit::SendPlan {
        targets: plan
            .targets
            .iter()
            .map(|t| wit::Target {
                peer: t.peer,
                mode: match t.mode {
                    native::SendMode::Push => wit::SendMode::Push,
                    native::SendMode::Announce => wit::SendMode::Announce,
                },
            })
            .collect(),
        quorum: plan.quorum,
        timeout_ms: plan.timeout_ms,
        priority: match plan.priority {
            native::Priority::High => wit::Priority::High,
            native::Priority::Normal => wit::Priority::Normal,
            native::Priority::Low => wit::Priority::Low,
        },
    }
}
