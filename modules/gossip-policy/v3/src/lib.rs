//! `gossip-policy-v3`: a self-repairing spreading tree (PlumTree) on
//! `modnode:gossip-policy@2.0.0`. Pushes, payload and all, along the tree's links (grafted
//! ones: the first announcer a node pulled from, fastest first), announces on the others,
//! prune on duplicate, graft on missing (the host's graft timer, tuned from measured gaps
//! within the bounds this module declares), redundant copies announced before they are sent,
//! messages above 1 KiB announced (their origin pushes them to its 4 fastest peers under a
//! quorum of 2: `large_origin_pushes`), high priority never pushed to slow peers. The algorithm and its state are
//! [`gossip_policy_common::policy_v3`], which the host's simulator and tests also run natively.
//!
//! The parameters `graft-min-ms`, `graft-max-ms` and `announce-first-above` are what the host
//! reads to give this policy the engine's tree mechanics; `state-format` lets a later version
//! read this one's state.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]

use gossip_policy_common::policy as native;
/// The algorithm of `gossip-policy-common`'s `policy_v3`, compiled here from the same file
/// (the common crate's wasm build leaves it out so that v1's and v2's bytes stay as they are).
#[allow(dead_code)]
#[path = "../../common/src/policy_v3.rs"]
pub mod policy_v3;

use policy_v3::{STATE_FORMAT, TreeState, V3Params, plan_v3};

/// Bindings generated from `wit/gossip-policy-2`.
#[allow(missing_docs, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: ["../../../wit/types", "../../../wit/gossip-policy-2"],
        world: "modnode:gossip-policy/gossip-policy",
        generate_all,
    });
}

use bindings::exports::modnode::gossip_policy::policy::Guest;
use bindings::modnode::gossip_policy::types as wit;
use bindings::modnode::types::types::ModuleInfo;

/// The exported implementation.
pub struct PolicyV3;

impl Guest for PolicyV3 {
    fn describe() -> ModuleInfo {
        let p = V3Params::default();
        ModuleInfo {
            kind: "gossip-policy".into(),
            version: 3,
            description: "a self-repairing spreading tree (PlumTree): pushes along the tree \
                          (the fastest links), announces on the rest, prune on duplicate, \
                          graft on missing, redundant copies announced before they are sent"
                .into(),
            params: vec![
                ("eager-max".into(), p.eager_max.to_string()),
                (
                    "announce-first-above".into(),
                    p.announce_first_above.to_string(),
                ),
                ("graft-min-ms".into(), p.graft_min_ms.to_string()),
                ("graft-max-ms".into(), p.graft_max_ms.to_string()),
                ("churn-ms".into(), p.churn_ms.to_string()),
                ("slow-queue".into(), p.slow_queue.to_string()),
                ("slow-failures".into(), p.slow_failures.to_string()),
                ("state-format".into(), STATE_FORMAT.into()),
            ],
        }
    }

    fn take_over(previous: Option<ModuleInfo>, state: Vec<u8>) -> Vec<u8> {
        let same_format = previous.is_some_and(|p| {
            p.kind == "gossip-policy"
                && p.params
                    .iter()
                    .any(|(k, v)| k == "state-format" && v == STATE_FORMAT)
        });
        if same_format {
            TreeState::decode(&state).encode()
        } else {
            TreeState::default().encode()
        }
    }

    fn plan(msg: wit::MessageMeta, peers: Vec<wit::PeerStats>, state: Vec<u8>) -> wit::Planned {
        let tree = TreeState::decode(&state);
        let plan = plan_v3(
            &V3Params::default(),
            &tree,
            &to_native_meta(&msg),
            &to_native_peers(&peers),
        );
        wit::Planned {
            plan: to_wit_plan(&plan),
            // Planning learns nothing: the state is handed back as it was read.
            state: tree.encode(),
        }
    }

    fn on_event(event: wit::Event, state: Vec<u8>) -> Vec<u8> {
        let mut tree = TreeState::decode(&state);
        tree.hear(&V3Params::default(), &to_native_event(event));
        tree.encode()
    }
}

fn to_native_kind(k: wit::MessageKind) -> native::MessageKind {
    match k {
        wit::MessageKind::Block => native::MessageKind::Block,
        wit::MessageKind::Consensus => native::MessageKind::Consensus,
        wit::MessageKind::Deposit => native::MessageKind::Deposit,
        wit::MessageKind::PeerExchange => native::MessageKind::PeerExchange,
    }
}

fn to_native_event(e: wit::Event) -> native::PolicyEvent {
    match e {
        wit::Event::Duplicate(m) => native::PolicyEvent::Duplicate {
            peer: m.peer,
            message: m.message,
            kind: to_native_kind(m.kind),
        },
        wit::Event::Missing(m) => native::PolicyEvent::Missing {
            peer: m.peer,
            message: m.message,
            kind: to_native_kind(m.kind),
        },
        wit::Event::PeerJoined(p) => native::PolicyEvent::PeerJoined(p),
        wit::Event::PeerLeft(p) => native::PolicyEvent::PeerLeft(p),
        wit::Event::Tick(now) => native::PolicyEvent::Tick(now),
    }
}

fn to_native_meta(m: &wit::MessageMeta) -> native::MessageMeta {
    native::MessageMeta {
        kind: to_native_kind(m.kind),
        size: m.size,
        local_origin: m.local_origin,
        hops: m.hops,
        network_size: m.network_size,
    }
}

fn to_native_peers(peers: &[wit::PeerStats]) -> Vec<native::PeerStats> {
    peers
        .iter()
        .map(|p| native::PeerStats {
            peer: p.peer,
            rtt_us: p.rtt_us,
            queue_depth: p.queue_depth,
            recent_failures: p.recent_failures,
            has_message: p.has_message,
            is_origin: p.is_origin,
        })
        .collect()
}

fn to_wit_plan(plan: &native::SendPlan) -> wit::SendPlan {
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

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
bindings::export!(PolicyV3 with_types_in bindings);
