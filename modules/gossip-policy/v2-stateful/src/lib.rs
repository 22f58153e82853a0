//! `gossip-policy-v2-stateful`: the first module of `modnode:gossip-policy@2.0.0`, the stateful
//! contract. It plans like `gossip-policy-v2` ([`plan_v2`]) and remembers, in the state the
//! host keeps for it, which peers pushed it duplicates: a peer with [`STRIKES`] duplicates
//! within [`MEMORY_MS`] gets announces instead of pushes (PlumTree's prune, without the tree),
//! until it announces a message that then does not arrive in time (`missing`: the link is
//! needed, graft it back), leaves, or the memory expires. At least one push always remains, so
//! a plan never depends on announces alone.
//!
//! The state is [`state::Memory`]'s own versioned encoding; a state this module cannot read
//! (another policy's, or corrupt) is treated as empty, so the module is a total function of
//! its inputs.

#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]

pub mod state;

use gossip_policy_common::policy as native;
use gossip_policy_common::policy_v2::{V2Params, plan_v2};

use state::Memory;

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

/// Duplicates from one peer, within [`MEMORY_MS`], after which it gets no more pushes.
pub const STRIKES: u32 = 2;
/// How long a duplicate is remembered, in milliseconds of the host's clock.
pub const MEMORY_MS: u64 = 30_000;
/// The `state-format` parameter: a version that takes over reads the state of one that
/// declares the same format.
pub const STATE_FORMAT: &str = "dup-strikes/1";

/// The exported implementation.
pub struct StatefulV2;

impl Guest for StatefulV2 {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            kind: "gossip-policy".into(),
            version: 2,
            description: "v2's plan (push to ~ln N well-placed peers, announce to the rest), \
                          no eager push to peers that keep sending duplicates"
                .into(),
            params: vec![
                ("strikes".into(), STRIKES.to_string()),
                ("memory-ms".into(), MEMORY_MS.to_string()),
                ("max-peers-remembered".into(), state::MAX_PEERS.to_string()),
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
            Memory::decode(&state).encode()
        } else {
            Memory::default().encode()
        }
    }

    fn plan(msg: wit::MessageMeta, peers: Vec<wit::PeerStats>, state: Vec<u8>) -> wit::Planned {
        let memory = Memory::decode(&state);
        let plan = plan(&memory, &to_native_meta(&msg), &to_native_peers(&peers));
        wit::Planned {
            plan: to_wit_plan(&plan),
            // Planning learns nothing: the state is handed back as it was read.
            state: memory.encode(),
        }
    }

    fn on_event(event: wit::Event, state: Vec<u8>) -> Vec<u8> {
        let mut memory = Memory::decode(&state);
        match event {
            wit::Event::Duplicate(m) => memory.duplicate(m.peer),
            wit::Event::Missing(m) => memory.forget(m.peer),
            wit::Event::PeerJoined(p) | wit::Event::PeerLeft(p) => memory.forget(p),
            wit::Event::Tick(now) => memory.tick(now, MEMORY_MS),
        }
        memory.encode()
    }
}

/// v2's plan, with pushes to struck peers turned into announces (one push always kept).
pub fn plan(
    memory: &Memory,
    msg: &native::MessageMeta,
    peers: &[native::PeerStats],
) -> native::SendPlan {
    let mut plan = plan_v2(&V2Params::default(), msg, peers);
    let pushes = |p: &native::SendPlan| {
        p.targets
            .iter()
            .filter(|t| t.mode == native::SendMode::Push)
            .count()
    };
    let before = pushes(&plan);
    let mut kept = before;
    for target in &mut plan.targets {
        if target.mode == native::SendMode::Push
            && kept > 1
            && memory.strikes(target.peer) >= STRIKES
        {
            target.mode = native::SendMode::Announce;
            kept = kept.saturating_sub(1);
        }
    }
    if kept < before {
        // A quorum counts pushes: never more than remain.
        plan.quorum = plan.quorum.min(u32::try_from(kept).unwrap_or(u32::MAX));
    }
    plan
}

fn to_native_kind(k: wit::MessageKind) -> native::MessageKind {
    match k {
        wit::MessageKind::Block => native::MessageKind::Block,
        wit::MessageKind::Consensus => native::MessageKind::Consensus,
        wit::MessageKind::Deposit => native::MessageKind::Deposit,
        wit::MessageKind::PeerExchange => native::MessageKind::PeerExchange,
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
bindings::export!(StatefulV2 with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(n: u32) -> Vec<native::PeerStats> {
        (0..n)
            .map(|peer| native::PeerStats {
                peer,
                rtt_us: 1_000 + peer * 100,
                queue_depth: 0,
                recent_failures: 0,
                has_message: false,
                is_origin: false,
            })
            .collect()
    }

    fn pushed(plan: &native::SendPlan) -> Vec<u32> {
        plan.targets
            .iter()
            .filter(|t| t.mode == native::SendMode::Push)
            .map(|t| t.peer)
            .collect()
    }

    #[test]
    fn peers_that_sent_duplicates_get_announces_not_pushes() {
        let msg = native::MessageMeta {
            kind: native::MessageKind::Block,
            size: 200,
            local_origin: true,
            hops: 0,
            network_size: 64,
        };
        let peers = peers(24);
        let fresh = plan(&Memory::default(), &msg, &peers);
        let before = pushed(&fresh);
        assert!(before.len() >= 2, "{fresh:?}");
        let struck = before[0];
        let mut memory = Memory::default();
        for _ in 0..STRIKES {
            memory.duplicate(struck);
        }
        let after = plan(&memory, &msg, &peers);
        assert!(!pushed(&after).contains(&struck), "{after:?}");
        assert!(
            after
                .targets
                .iter()
                .any(|t| t.peer == struck && t.mode == native::SendMode::Announce)
        );
        assert!(after.quorum as usize <= pushed(&after).len());
        // A missing message grafts the link back.
        memory.forget(struck);
        assert_eq!(plan(&memory, &msg, &peers), fresh);
    }

    #[test]
    fn one_push_always_remains() {
        let msg = native::MessageMeta {
            kind: native::MessageKind::Block,
            size: 200,
            local_origin: true,
            hops: 0,
            network_size: 64,
        };
        let peers = peers(24);
        let mut memory = Memory::default();
        for p in &peers {
            for _ in 0..STRIKES {
                memory.duplicate(p.peer);
            }
        }
        assert_eq!(pushed(&plan(&memory, &msg, &peers)).len(), 1);
    }
}
