//! `PolicyV2`: push to a few well-chosen peers, announce to the rest.
//!
//! Everything below the `use` line is a pure function over the WIT types (no clock, no
//! randomness, no hash-map iteration, no floating point), so it can be copied verbatim into a
//! wasm guest crate whose `use` line imports the `wit-bindgen` types instead.
//!
//! Decision for a message of `size` bytes in a network of `n` nodes:
//! - candidates = peers that neither have the message nor sent it to us, ranked by
//!   `cost = rtt_us + queue_depth * queue_cost_us + recent_failures * failure_cost_us`
//!   (ties broken by a deterministic hash of the peer handle and the message facts);
//! - push fan-out, with `f(x) = ceil(x * ln n)`:
//!   - small messages (`size < large_threshold`): `f(small)` pushes;
//!   - large messages at their creator: `f(large_origin)` pushes (its neighbours cannot
//!     have the message yet, so these pushes are never duplicates);
//!   - large messages one hop from the creator: `f(large_relay)` pushes;
//!   - large messages further out: no pushes, only announces (pull);
//! - pushes skip "unhealthy" peers (recent failures, deep queue or high RTT);
//! - every other candidate gets an announce and pulls the message only if it still lacks it;
//! - large messages use quorum-and-cancel: once `large_quorum` pushes are delivered, pushes
//!   still queued behind busy peers become announces;
//! - timeout = `base_timeout_ms + size / timeout_bytes_per_ms`; priority by kind.

use crate::policy::{
    MessageKind, MessageMeta, PeerStats, Policy, Priority, SendMode, SendPlan, Target,
};

/// Tunable parameters of [`plan_v2`]; [`V2Params::default`] holds the tuned values.
///
/// The simulator (N = 32, degree 8) favoured a first-hop relay fan-out of `ceil(0.75 ln N)`
/// (rmr 0.36); over real QUIC on loopback (`modnode bench gossip`) that gave rmr 0.48–0.59,
/// above the 0.5 target, because load-induced delays let more pushes race. `ceil(0.5 ln N)`
/// measured rmr 0.40–0.44 there with t99 still far below flood's, so it is the default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V2Params {
    /// Messages at least this large (bytes) are "large".
    pub large_threshold: u32,
    /// Large-message push fan-out at the creator, in thousandths of `ln(network_size)`
    /// (rounded up).
    pub large_origin_fanout_permille: u32,
    /// Large-message push fan-out at relays, in thousandths of `ln(network_size)` (rounded
    /// up; 0 = relays only announce).
    pub large_relay_fanout_permille: u32,
    /// Relays push large messages only while `hops` is at most this.
    pub large_relay_max_hops: u32,
    /// Small-message push fan-out, in thousandths of `ln(network_size)` (rounded up).
    pub small_fanout_permille: u32,
    /// Quorum for large messages (0 = wait for all pushes); small messages always use 0.
    pub large_quorum: u32,
    /// Cost of one queued/in-flight send to a peer, in RTT microseconds.
    pub queue_cost_us: u32,
    /// Cost of one recent failure, in RTT microseconds.
    pub failure_cost_us: u32,
    /// Peers with at least this many recent failures only get announces.
    pub max_failures_for_push: u32,
    /// Peers with at least this queue depth only get announces.
    pub max_queue_for_push: u32,
    /// Peers with a smoothed RTT above this (microseconds) only get announces.
    pub max_rtt_for_push_us: u32,
    /// Timeout base, milliseconds.
    pub base_timeout_ms: u32,
    /// Timeout grows by 1 ms per this many payload bytes.
    pub timeout_bytes_per_ms: u32,
}

impl Default for V2Params {
    fn default() -> Self {
        V2Params {
            large_threshold: 16 * 1024,
            large_origin_fanout_permille: 2000,
            large_relay_fanout_permille: 500,
            large_relay_max_hops: 1,
            small_fanout_permille: 1000,
            large_quorum: 2,
            queue_cost_us: 5_000,
            failure_cost_us: 50_000,
            max_failures_for_push: 2,
            max_queue_for_push: 8,
            max_rtt_for_push_us: 250_000,
            base_timeout_ms: 100,
            timeout_bytes_per_ms: 1_000,
        }
    }
}

/// The v2 policy as a [`Policy`] object.
#[derive(Clone, Debug, Default)]
pub struct PolicyV2 {
    /// Its parameters.
    pub params: V2Params,
}

impl Policy for PolicyV2 {
    fn plan(&mut self, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan {
        plan_v2(&self.params, msg, peers)
    }
}

/// `ceil(permille / 1000 * ln(n))`, in integer arithmetic (ln via a Q16 fixed-point log2).
pub fn ln_fanout(n: u32, permille: u32) -> u32 {
    if n < 2 {
        return 0;
    }
    // log2(n) in Q16: integer part from the bit length, 16 fraction bits by repeated squaring.
    let int = 31 - n.leading_zeros();
    let mut log2_q16: u64 = u64::from(int) << 16;
    // Mantissa m in [1, 2) as Q31.
    let mut m: u64 = (u64::from(n) << 31) >> int;
    for bit in (0..16).rev() {
        m = (m * m) >> 31;
        if m >= 1 << 32 {
            m >>= 1;
            log2_q16 |= 1 << bit;
        }
    }
    // ln(n) = log2(n) * ln(2); ln(2) in Q16 = 45426.
    let ln_q16 = (log2_q16 * 45_426) >> 16;
    let scaled = ln_q16 * u64::from(permille);
    let denom = 1000u64 << 16;
    u32::try_from(scaled.div_ceil(denom)).unwrap_or(u32::MAX)
}

fn priority_of(kind: MessageKind) -> Priority {
    match kind {
        MessageKind::Block | MessageKind::Consensus => Priority::High,
        MessageKind::Deposit => Priority::Normal,
        MessageKind::PeerExchange => Priority::Low,
    }
}

fn kind_code(kind: MessageKind) -> u32 {
    match kind {
        MessageKind::Block => 0,
        MessageKind::Consensus => 1,
        MessageKind::Deposit => 2,
        MessageKind::PeerExchange => 3,
    }
}

/// Deterministic 32-bit mix (splitmix-style finaliser) used only to break cost ties.
fn tie_break(peer: u32, msg: &MessageMeta) -> u32 {
    let mut x = u64::from(peer)
        ^ (u64::from(msg.size) << 32)
        ^ (u64::from(msg.hops) << 8)
        ^ u64::from(kind_code(msg.kind));
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)) as u32
}

/// The v2 decision (see the module docs).
pub fn plan_v2(p: &V2Params, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan {
    let large = msg.size >= p.large_threshold;
    let n = msg.network_size.max(2);
    let fanout = match (large, msg.local_origin) {
        (true, true) => ln_fanout(n, p.large_origin_fanout_permille).max(1),
        (true, false) if msg.hops <= p.large_relay_max_hops => {
            ln_fanout(n, p.large_relay_fanout_permille)
        }
        (true, false) => 0,
        (false, _) => ln_fanout(n, p.small_fanout_permille).max(1),
    };

    // (cost, tie, index) for every candidate; sorted, so the result is order-independent.
    let mut ranked: Vec<(u64, u32, usize)> = Vec::with_capacity(peers.len());
    for (i, s) in peers.iter().enumerate() {
        if s.has_message || s.is_origin {
            continue;
        }
        let cost = u64::from(s.rtt_us)
            + u64::from(s.queue_depth) * u64::from(p.queue_cost_us)
            + u64::from(s.recent_failures) * u64::from(p.failure_cost_us);
        ranked.push((cost, tie_break(s.peer, msg), i));
    }
    ranked.sort_unstable();

    let mut targets = Vec::with_capacity(ranked.len());
    let mut pushes: u32 = 0;
    for &(_, _, i) in &ranked {
        let s = &peers[i];
        let healthy = s.recent_failures < p.max_failures_for_push
            && s.queue_depth < p.max_queue_for_push
            && s.rtt_us <= p.max_rtt_for_push_us;
        let mode = if pushes < fanout && healthy {
            pushes += 1;
            SendMode::Push
        } else {
            SendMode::Announce
        };
        targets.push(Target { peer: s.peer, mode });
    }
    // Nobody healthy: push to the best candidate anyway so the message keeps moving.
    if pushes == 0
        && fanout > 0
        && let Some(first) = targets.first_mut()
    {
        first.mode = SendMode::Push;
        pushes = 1;
    }

    let quorum = if large { p.large_quorum.min(pushes) } else { 0 };
    let timeout_ms = p
        .base_timeout_ms
        .saturating_add(msg.size / p.timeout_bytes_per_ms.max(1));
    SendPlan {
        targets,
        quorum,
        timeout_ms,
        priority: priority_of(msg.kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(peer: u32, rtt_us: u32) -> PeerStats {
        PeerStats {
            peer,
            rtt_us,
            queue_depth: 0,
            recent_failures: 0,
            has_message: false,
            is_origin: false,
        }
    }

    fn meta(size: u32, local_origin: bool) -> MessageMeta {
        MessageMeta {
            kind: MessageKind::Block,
            size,
            local_origin,
            hops: 1,
            network_size: 32,
        }
    }

    #[test]
    fn ln_fanout_matches_float() {
        for n in [2u32, 3, 10, 32, 100, 1000, 1 << 20, u32::MAX] {
            for permille in [500u32, 1000, 2000] {
                let want = (f64::from(n).ln() * f64::from(permille) / 1000.0).ceil() as u32;
                assert_eq!(ln_fanout(n, permille), want, "n={n} permille={permille}");
            }
        }
        assert_eq!(ln_fanout(1, 1000), 0);
    }

    #[test]
    fn large_pushes_to_cheapest_and_announces_rest() {
        let peers: Vec<_> = (0..8).map(|i| peer(i, 10_000 - i * 1000)).collect();
        let plan = plan_v2(&V2Params::default(), &meta(128 * 1024, false), &peers);
        let pushed: Vec<u32> = plan
            .targets
            .iter()
            .filter(|t| t.mode == SendMode::Push)
            .map(|t| t.peer)
            .collect();
        // One hop from the creator: ceil(0.5 * ln 32) = 2 cheapest peers (lowest RTT).
        assert_eq!(pushed, vec![7, 6]);
        assert_eq!(plan.targets.len(), 8);
        assert_eq!(plan.quorum, 2);
        assert_eq!(plan.priority, Priority::High);
        assert_eq!(plan.timeout_ms, 100 + 131);
    }

    #[test]
    fn large_fanout_depends_on_hops() {
        let peers: Vec<_> = (0..10).map(|i| peer(i, 5_000)).collect();
        let pushes = |m: &MessageMeta| {
            plan_v2(&V2Params::default(), m, &peers)
                .targets
                .iter()
                .filter(|t| t.mode == SendMode::Push)
                .count()
        };
        let mut m = meta(128 * 1024, true);
        m.hops = 0;
        // Creator: ceil(2 * ln 32) = 7.
        assert_eq!(pushes(&m), 7);
        m.local_origin = false;
        m.hops = 2;
        // Two hops out: announce only.
        assert_eq!(pushes(&m), 0);
        // Small messages: ceil(ln 32) = 4 wherever they are.
        let mut small = meta(1024, false);
        small.hops = 5;
        assert_eq!(pushes(&small), 4);
    }

    #[test]
    fn never_targets_holders_or_origin_and_avoids_unhealthy() {
        let mut peers: Vec<_> = (0..6).map(|i| peer(i, 1_000)).collect();
        peers[0].has_message = true;
        peers[1].is_origin = true;
        peers[2].recent_failures = 5;
        peers[3].queue_depth = 100;
        let plan = plan_v2(&V2Params::default(), &meta(100, false), &peers);
        let mut got: Vec<(u32, SendMode)> = plan.targets.iter().map(|t| (t.peer, t.mode)).collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (2, SendMode::Announce),
                (3, SendMode::Announce),
                (4, SendMode::Push),
                (5, SendMode::Push)
            ]
        );
        assert_eq!(plan.quorum, 0);
    }

    #[test]
    fn plan_is_independent_of_peer_order() {
        let peers: Vec<_> = (0..10).map(|i| peer(i * 7 % 10, 5_000)).collect();
        let mut reversed = peers.clone();
        reversed.reverse();
        let m = meta(64 * 1024, true);
        let mut a = plan_v2(&V2Params::default(), &m, &peers).targets;
        let mut b = plan_v2(&V2Params::default(), &m, &reversed).targets;
        a.sort_by_key(|t| t.peer);
        b.sort_by_key(|t| t.peer);
        assert_eq!(a, b);
    }
}
