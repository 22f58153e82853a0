//! Example gossip policy for the walkthrough in `examples/README.md`: a policy that really
//! differs from `gossip-policy-v1` (which pushes every message to every peer lacking it).
//!
//! - Peers that have the message, and the one it came from, are skipped.
//! - The others are ranked by cost: round-trip time, plus a penalty per queued message and per
//!   recent failure (ties to the lower peer handle, so the plan never depends on peer order).
//! - A message this node created is pushed to the [`ORIGIN_PUSHES`] cheapest peers; a relayed
//!   one to [`RELAY_PUSHES`]; every other candidate gets an announcement and pulls it if it
//!   still lacks it, so coverage never depends on the pushes alone.
//! - The send timeout grows with the message size.
//!
//! The decision is plain Rust ([`plan`]) tested natively below; the `Guest` implementation only
//! converts the WIT types.

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

/// Pushes of a message this node created.
pub const ORIGIN_PUSHES: usize = 3;
/// Pushes of a relayed message.
pub const RELAY_PUSHES: usize = 2;
/// Cost of one queued message at a peer, in microseconds of RTT.
pub const QUEUE_COST_US: u64 = 2_000;
/// Cost of one recent failure at a peer, in microseconds of RTT.
pub const FAILURE_COST_US: u64 = 50_000;
/// Send timeout: this much plus one millisecond per `TIMEOUT_BYTES_PER_MS` bytes.
pub const BASE_TIMEOUT_MS: u32 = 500;
/// Bytes per millisecond of extra timeout.
pub const TIMEOUT_BYTES_PER_MS: u32 = 500;

/// One candidate peer: handle, RTT (µs), queue depth, recent failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Peer handle.
    pub peer: u32,
    /// Round-trip time in microseconds.
    pub rtt_us: u32,
    /// Messages queued to it.
    pub queue_depth: u32,
    /// Recent failed sends.
    pub recent_failures: u32,
}

/// The decision: `(peer, pushed)` for every candidate, cheapest first.
pub fn plan(candidates: &[Candidate], local_origin: bool) -> Vec<(u32, bool)> {
    let mut ranked: Vec<(u64, u32)> = candidates
        .iter()
        .map(|c| {
            let cost = u64::from(c.rtt_us)
                + u64::from(c.queue_depth) * QUEUE_COST_US
                + u64::from(c.recent_failures) * FAILURE_COST_US;
            (cost, c.peer)
        })
        .collect();
    ranked.sort_unstable();
    let pushes = if local_origin {
        ORIGIN_PUSHES
    } else {
        RELAY_PUSHES
    };
    ranked
        .into_iter()
        .enumerate()
        .map(|(rank, (_, peer))| (peer, rank < pushes))
        .collect()
}

/// The exported implementation.
pub struct CheapestPeers;

impl Guest for CheapestPeers {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            kind: "gossip-policy".into(),
            // The next version after modnode's own gossip-policy-v2.
            version: 3,
            description: "example: push to the cheapest peers, announce to the rest".into(),
            params: vec![
                ("origin_pushes".into(), ORIGIN_PUSHES.to_string()),
                ("relay_pushes".into(), RELAY_PUSHES.to_string()),
                ("queue_cost_us".into(), QUEUE_COST_US.to_string()),
                ("failure_cost_us".into(), FAILURE_COST_US.to_string()),
                ("base_timeout_ms".into(), BASE_TIMEOUT_MS.to_string()),
                (
                    "timeout_bytes_per_ms".into(),
                    TIMEOUT_BYTES_PER_MS.to_string(),
                ),
            ],
        }
    }

    fn plan(msg: MessageMeta, peers: Vec<PeerStats>) -> SendPlan {
        let candidates: Vec<Candidate> = peers
            .iter()
            .filter(|p| !p.has_message && !p.is_origin)
            .map(|p| Candidate {
                peer: p.peer,
                rtt_us: p.rtt_us,
                queue_depth: p.queue_depth,
                recent_failures: p.recent_failures,
            })
            .collect();
        let targets: Vec<Target> = plan(&candidates, msg.local_origin)
            .into_iter()
            .map(|(peer, pushed)| Target {
                peer,
                mode: if pushed {
                    SendMode::Push
                } else {
                    SendMode::Announce
                },
            })
            .collect();
        SendPlan {
            targets,
            // Wait for every push (no early cancel).
            quorum: 0,
            timeout_ms: BASE_TIMEOUT_MS.saturating_add(msg.size / TIMEOUT_BYTES_PER_MS),
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
bindings::export!(CheapestPeers with_types_in bindings);

#[cfg(test)]
mod tests {
    use super::*;

    fn c(peer: u32, rtt_us: u32, queue_depth: u32, recent_failures: u32) -> Candidate {
        Candidate {
            peer,
            rtt_us,
            queue_depth,
            recent_failures,
        }
    }

    #[test]
    fn pushes_to_the_cheapest_and_announces_to_the_rest() {
        let peers = [
            c(1, 900, 0, 0),
            c(2, 100, 0, 0),
            c(3, 100, 1, 0),
            c(4, 50, 0, 1),
        ];
        // Costs: 1 → 900, 2 → 100, 3 → 2,100, 4 → 50,050.
        assert_eq!(
            plan(&peers, true),
            vec![(2, true), (1, true), (3, true), (4, false)]
        );
        assert_eq!(
            plan(&peers, false),
            vec![(2, true), (1, true), (3, false), (4, false)]
        );
    }

    #[test]
    fn ties_go_to_the_lower_handle_whatever_the_order() {
        let a = [c(7, 10, 0, 0), c(3, 10, 0, 0), c(5, 10, 0, 0)];
        let b = [c(5, 10, 0, 0), c(7, 10, 0, 0), c(3, 10, 0, 0)];
        assert_eq!(plan(&a, false), plan(&b, false));
        assert_eq!(plan(&a, false), vec![(3, true), (5, true), (7, false)]);
        assert!(plan(&[], true).is_empty());
    }
}
