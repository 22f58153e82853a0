//! Template module: a gossip policy that pushes each message to the `FANOUT` connected peers
//! with the lowest round-trip time and announces it to the others.
//!
//! Build and check it (from the repository root):
//!
//! ```sh
//! cargo build
//! cargo run -- module inspect target/modules/example-nearest-peers.wasm
//! ```
//!
//! Everything a module needs is here: bindings generated from the world's WIT, the exported
//! `Guest` implementation with `describe` (every output-changing parameter listed), pure logic
//! tested natively below, and the export macro (wasm only).

#[allow(missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        path: ["../../wit/types", "../../wit/gossip-policy"],
        world: "modnode:gossip-policy/gossip-policy",
        generate_all,
    });
}

use bindings::exports::modnode::gossip_policy::policy::Guest;
use bindings::modnode::gossip_policy::types::{
    MessageKind, MessageMeta, PeerStats, Priority, SendMode, SendPlan, Target,
};
use bindings::modnode::types::types::ModuleInfo;

/// Pushes per message.
pub const FANOUT: usize = 3;

/// Picks the `FANOUT` eligible peers with the lowest RTT (ties to the lower handle) for pushes.
pub fn nearest(peers: &[(u32, u32)]) -> Vec<u32> {
    let mut sorted = peers.to_vec();
    sorted.sort_by_key(|&(peer, rtt)| (rtt, peer));
    sorted
        .into_iter()
        .take(FANOUT)
        .map(|(peer, _)| peer)
        .collect()
}

/// The exported implementation.
pub struct NearestPeers;

impl Guest for NearestPeers {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            kind: "gossip-policy".into(),
            version: 1,
            description: "example: push to the lowest-RTT peers, announce to the rest".into(),
            params: vec![("fanout".into(), FANOUT.to_string())],
        }
    }

    fn plan(msg: MessageMeta, peers: Vec<PeerStats>) -> SendPlan {
        let eligible: Vec<&PeerStats> = peers
            .iter()
            .filter(|p| !p.has_message && !p.is_origin)
            .collect();
        let push = nearest(
            &eligible
                .iter()
                .map(|p| (p.peer, p.rtt_us))
                .collect::<Vec<_>>(),
        );
        SendPlan {
            targets: eligible
                .iter()
                .map(|p| Target {
                    peer: p.peer,
                    mode: if push.contains(&p.peer) {
                        SendMode::Push
                    } else {
                        SendMode::Announce
                    },
                })
                .collect(),
            quorum: 0,
            timeout_ms: 1_000,
            priority: match msg.kind {
                MessageKind::Block | MessageKind::Consensus => Priority::High,
                MessageKind::Deposit => Priority::Normal,
                MessageKind::PeerExchange => Priority::Low,
            },
        }
    }
}

// Exported only on wasm: the export names are not valid native symbol names.
#[cfg(target_arch = "wasm32")]
bindings::export!(NearestPeers with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_lowest_rtt_with_stable_ties() {
        assert_eq!(
            nearest(&[(1, 50), (2, 10), (3, 10), (4, 90), (5, 20)]),
            vec![2, 3, 5]
        );
        assert_eq!(nearest(&[(9, 1)]), vec![9]);
    }
}
