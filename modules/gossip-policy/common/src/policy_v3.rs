//! `PolicyV3`: a self-repairing spreading tree (PlumTree, Leitão et al. 2007), for the stateful
//! contract `modnode:gossip-policy@2.0.0`.
//!
//! Every link starts eager. A small message (at most [`V3Params::announce_first_above`] bytes)
//! is pushed along the eager links — lowest RTT first, at most [`V3Params::eager_max`] — and
//! announced on the lazy ones. A link that delivers a redundant copy (`duplicate`: the peer
//! pushed us a copy we had, or told us PRUNE because ours was one for it) becomes lazy: the
//! eager links converge to a tree, first arrivals winning, so the parents are the fastest
//! paths. A lazy link whose announce is not followed by the message within the engine's graft
//! timer (tuned from the measured gaps, within [`V3Params::graft_min_ms`] ..
//! [`V3Params::graft_max_ms`]) is grafted back (`missing`, or the peer told us GRAFT): the tree
//! repairs itself, through the announcer the engine found fastest and most reliable.
//!
//! Larger messages are announced before they are sent, to every peer: each receiver pulls one
//! copy from the first announcer, so no large duplicate crosses a link whatever the tree.
//!
//! While churn is detected (a peer left or a message went missing within
//! [`V3Params::churn_ms`]) one link per node is spared its first prune: a second eager parent,
//! given up when the churn ends. High-priority messages are never pushed to slow peers (deep
//! queue or recent failures): those get announces and pull, so a slow peer delays nobody.
//!
//! The state ([`TreeState`]) is the only memory: the lazy and spared links and two clocks, in
//! its own versioned encoding within [`MAX_STATE_BYTES`]; bytes that are not such a state read
//! as empty, so the policy is a total function of its inputs.

// Named through the crate's name, not `crate::`: the `gossip-policy-v3` module compiles this
// file into itself (see the crate docs).
use gossip_policy_common::PeerId;
use gossip_policy_common::policy::{
    LinkControl, MessageMeta, PeerStats, Policy, PolicyEvent, Priority, SendMode, SendPlan, Target,
};

/// Links remembered at most (beyond it the lowest handle is forgotten: it becomes eager again,
/// and is pruned again if redundant).
pub const MAX_LINKS: usize = 2_048;

const MAGIC: &[u8; 3] = b"PT1";
const HEADER_BYTES: usize = 3 + 8 + 8 + 2;
const ENTRY_BYTES: usize = 5;

/// Largest encoded state: far under the host's 64 KiB bound.
pub const MAX_STATE_BYTES: usize = HEADER_BYTES + MAX_LINKS * ENTRY_BYTES;

/// The `state-format` parameter of the modules that keep a [`TreeState`].
pub const STATE_FORMAT: &str = "plumtree/1";

/// Tunable parameters; [`V3Params::default`] holds the chosen values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V3Params {
    /// Eager pushes per message at most (lowest RTT first; the rest of the eager links get
    /// announces).
    pub eager_max: u32,
    /// Messages larger than this are announced to every peer before they are sent.
    pub announce_first_above: u32,
    /// Shortest graft timer, milliseconds.
    pub graft_min_ms: u32,
    /// Longest graft timer (and the timer before any gap is measured), milliseconds.
    pub graft_max_ms: u32,
    /// How long churn is assumed after a peer left or a message went missing, milliseconds.
    pub churn_ms: u64,
    /// Peers with at least this queue depth are slow.
    pub slow_queue: u32,
    /// Peers with at least this many recent failures are slow.
    pub slow_failures: u32,
    /// Send timeout base, milliseconds.
    pub base_timeout_ms: u32,
    /// The timeout grows by 1 ms per this many payload bytes.
    pub timeout_bytes_per_ms: u32,
}

impl Default for V3Params {
    fn default() -> Self {
        V3Params {
            eager_max: 8,
            announce_first_above: 1024,
            graft_min_ms: 30,
            graft_max_ms: 250,
            churn_ms: 10_000,
            slow_queue: 8,
            slow_failures: 2,
            base_timeout_ms: 100,
            timeout_bytes_per_ms: 1_000,
        }
    }
}

impl V3Params {
    /// What the policy asks of the engine.
    pub fn link_control(&self) -> LinkControl {
        LinkControl {
            graft_min_ms: self.graft_min_ms,
            graft_max_ms: self.graft_max_ms,
            announce_first_above: self.announce_first_above,
        }
    }
}

/// One remembered link (a link not remembered is eager).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// The peer's handle.
    pub peer: PeerId,
    /// Pruned: the peer gets announces, not pushes.
    pub lazy: bool,
    /// Spared one prune while churn is detected (the second eager parent).
    pub spared: bool,
}

/// What v3 remembers between calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeState {
    /// The host clock at the latest tick, milliseconds.
    pub now_ms: u64,
    /// Churn is assumed until this time, milliseconds.
    pub churn_until_ms: u64,
    /// Remembered links, sorted by handle, at most [`MAX_LINKS`].
    pub links: Vec<Link>,
}

impl TreeState {
    fn find(&self, peer: PeerId) -> Result<usize, usize> {
        self.links.binary_search_by_key(&peer, |l| l.peer)
    }

    /// The link to `peer` is lazy.
    pub fn is_lazy(&self, peer: PeerId) -> bool {
        self.find(peer)
            .ok()
            .and_then(|i| self.links.get(i))
            .is_some_and(|l| l.lazy)
    }

    /// Churn is being detected.
    pub fn churning(&self) -> bool {
        self.now_ms < self.churn_until_ms
    }

    fn forget(&mut self, peer: PeerId) {
        if let Ok(i) = self.find(peer) {
            self.links.remove(i);
        }
    }

    fn churn(&mut self, params: &V3Params) {
        self.churn_until_ms = self.now_ms.saturating_add(params.churn_ms);
    }

    /// The link to `peer` delivered a redundant copy: prune it, unless it is spared as the
    /// second eager parent while churn lasts.
    fn prune(&mut self, peer: PeerId) {
        let churning = self.churning();
        let any_spared = self.links.iter().any(|l| l.spared);
        let at = match self.find(peer) {
            Ok(i) => i,
            Err(i) => {
                if self.links.len() >= MAX_LINKS {
                    self.links.remove(0);
                }
                let i = i.min(self.links.len());
                self.links.insert(
                    i,
                    Link {
                        peer,
                        lazy: false,
                        spared: false,
                    },
                );
                // The eviction may have moved the insertion point.
                self.links.sort_unstable_by_key(|l| l.peer);
                match self.find(peer) {
                    Ok(i) => i,
                    Err(_) => return,
                }
            }
        };
        let Some(link) = self.links.get_mut(at) else {
            return;
        };
        if link.lazy {
            return;
        }
        if churning && !link.spared && !any_spared {
            link.spared = true;
        } else {
            link.lazy = true;
            link.spared = false;
        }
    }

    /// Hears an event.
    pub fn hear(&mut self, params: &V3Params, event: &PolicyEvent) {
        match *event {
            PolicyEvent::Duplicate { peer, .. } => self.prune(peer),
            PolicyEvent::Missing { peer, .. } => {
                // Graft: the link is needed, and the tree had a hole.
                self.forget(peer);
                self.churn(params);
            }
            PolicyEvent::PeerJoined(peer) => self.forget(peer),
            PolicyEvent::PeerLeft(peer) => {
                self.forget(peer);
                self.churn(params);
            }
            PolicyEvent::Tick(now) => {
                self.now_ms = self.now_ms.max(now);
                if !self.churning() {
                    // Churn is over: the second parent goes at its next duplicate.
                    for link in &mut self.links {
                        link.spared = false;
                    }
                    self.links.retain(|l| l.lazy);
                }
            }
        }
    }

    /// The encoding: `b"PT1"`, the clock and the end of churn (u64 each), the number of links
    /// (u16), then per link its handle (u32) and flags (u8: 1 lazy, 2 spared), little endian,
    /// sorted by handle.
    pub fn encode(&self) -> Vec<u8> {
        let n = self.links.len().min(MAX_LINKS);
        let mut out = Vec::with_capacity(HEADER_BYTES.saturating_add(n.saturating_mul(5)));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.now_ms.to_le_bytes());
        out.extend_from_slice(&self.churn_until_ms.to_le_bytes());
        out.extend_from_slice(&u16::try_from(n).unwrap_or(u16::MAX).to_le_bytes());
        for link in self.links.iter().take(n) {
            out.extend_from_slice(&link.peer.to_le_bytes());
            out.push(u8::from(link.lazy) | (u8::from(link.spared) << 1));
        }
        out
    }

    /// Reads [`TreeState::encode`]'s bytes; anything else (empty, another format, a wrong
    /// length, unknown flags, unsorted or too many links) is an empty state.
    pub fn decode(bytes: &[u8]) -> TreeState {
        Self::try_decode(bytes).unwrap_or_default()
    }

    fn try_decode(bytes: &[u8]) -> Option<TreeState> {
        let (magic, rest) = bytes.split_at_checked(MAGIC.len())?;
        if magic != MAGIC {
            return None;
        }
        let (now, rest) = rest.split_first_chunk::<8>()?;
        let (churn, rest) = rest.split_first_chunk::<8>()?;
        let (count, mut rest) = rest.split_first_chunk::<2>()?;
        let count = usize::from(u16::from_le_bytes(*count));
        if count > MAX_LINKS || rest.len() != count.checked_mul(ENTRY_BYTES)? {
            return None;
        }
        let mut links = Vec::with_capacity(count);
        while let Some((entry, tail)) = rest.split_first_chunk::<ENTRY_BYTES>() {
            let (peer, flags) = entry.split_first_chunk::<4>()?;
            let flags = *flags.first()?;
            if flags > 3 {
                return None;
            }
            links.push(Link {
                peer: u32::from_le_bytes(*peer),
                lazy: flags & 1 != 0,
                spared: flags & 2 != 0,
            });
            rest = tail;
        }
        if !links
            .windows(2)
            .all(|w| matches!(w, [a, b] if a.peer < b.peer))
        {
            return None;
        }
        Some(TreeState {
            now_ms: u64::from_le_bytes(*now),
            churn_until_ms: u64::from_le_bytes(*churn),
            links,
        })
    }
}

fn priority_of(msg: &MessageMeta) -> Priority {
    msg.kind.default_priority()
}

/// v3's plan for `msg` given its state (planning changes no state).
pub fn plan_v3(
    params: &V3Params,
    state: &TreeState,
    msg: &MessageMeta,
    peers: &[PeerStats],
) -> SendPlan {
    let priority = priority_of(msg);
    let timeout_ms = params.base_timeout_ms.saturating_add(
        msg.size
            .checked_div(params.timeout_bytes_per_ms)
            .unwrap_or(0),
    );
    let mut candidates: Vec<&PeerStats> = peers
        .iter()
        .filter(|p| !p.has_message && !p.is_origin)
        .collect();
    let slow = |p: &PeerStats| {
        p.queue_depth >= params.slow_queue || p.recent_failures >= params.slow_failures
    };
    // Fast and healthy first: the tree's links are the low-RTT ones.
    candidates.sort_by_key(|p| (slow(p), p.rtt_us, p.peer));
    let announce_first = msg.size > params.announce_first_above;
    let mut pushes: u32 = 0;
    let mut targets: Vec<Target> = candidates
        .iter()
        .map(|p| {
            let lazy = announce_first || state.is_lazy(p.peer);
            let slowed = priority == Priority::High && slow(p);
            let eager = !lazy && !slowed && pushes < params.eager_max;
            if eager {
                pushes = pushes.saturating_add(1);
            }
            Target {
                peer: p.peer,
                mode: if eager {
                    SendMode::Push
                } else {
                    SendMode::Announce
                },
            }
        })
        .collect();
    // A small message this node creates goes out pushed at least once, over the best link.
    if msg.local_origin
        && !announce_first
        && pushes == 0
        && let Some(first) = targets.first_mut()
    {
        first.mode = SendMode::Push;
    }
    SendPlan {
        targets,
        quorum: 0,
        timeout_ms,
        priority,
    }
}

/// v3 as a native [`Policy`] keeping its own state (the simulator's and the tests' form; the
/// wasm module keeps the same state in the host).
#[derive(Clone, Debug, Default)]
pub struct PolicyV3 {
    /// Its parameters.
    pub params: V3Params,
    /// Its state.
    pub state: TreeState,
}

impl Policy for PolicyV3 {
    fn plan(&mut self, msg: &MessageMeta, peers: &[PeerStats]) -> SendPlan {
        plan_v3(&self.params, &self.state, msg, peers)
    }

    fn on_event(&mut self, event: &PolicyEvent) {
        self.state.hear(&self.params, event);
    }

    fn link_control(&self) -> Option<LinkControl> {
        Some(self.params.link_control())
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]
mod tests {
    use super::*;
    use gossip_policy_common::policy::MessageKind;

    fn peers(n: u32) -> Vec<PeerStats> {
        (0..n)
            .map(|peer| PeerStats {
                peer,
                rtt_us: 10_000 + (n - peer) * 1_000,
                queue_depth: 0,
                recent_failures: 0,
                has_message: false,
                is_origin: false,
            })
            .collect()
    }

    fn meta(size: u32, kind: MessageKind, local: bool) -> MessageMeta {
        MessageMeta {
            kind,
            size,
            local_origin: local,
            hops: 0,
            network_size: 1000,
        }
    }

    fn pushed(plan: &SendPlan) -> Vec<u32> {
        plan.targets
            .iter()
            .filter(|t| t.mode == SendMode::Push)
            .map(|t| t.peer)
            .collect()
    }

    fn dup(peer: u32) -> PolicyEvent {
        PolicyEvent::Duplicate {
            peer,
            message: 1,
            kind: MessageKind::Deposit,
        }
    }

    #[test]
    fn eager_links_are_the_fastest_and_a_prune_makes_a_link_lazy_until_grafted() {
        let mut p = PolicyV3::default();
        let ps = peers(12);
        let plan = p.plan(&meta(200, MessageKind::Deposit, false), &ps);
        // Lowest RTT first: handles 11, 10, … (RTT falls with the handle).
        assert_eq!(pushed(&plan), vec![11, 10, 9, 8, 7, 6, 5, 4]);
        assert_eq!(plan.targets.len(), 12);
        p.on_event(&dup(11));
        let plan = p.plan(&meta(200, MessageKind::Deposit, false), &ps);
        assert!(!pushed(&plan).contains(&11));
        assert!(pushed(&plan).contains(&3));
        p.on_event(&PolicyEvent::Missing {
            peer: 11,
            message: 2,
            kind: MessageKind::Deposit,
        });
        assert!(pushed(&p.plan(&meta(200, MessageKind::Deposit, false), &ps)).contains(&11));
    }

    #[test]
    fn a_relay_whose_links_are_all_lazy_only_announces_but_an_origin_pushes_once() {
        let mut p = PolicyV3::default();
        let ps = peers(4);
        for peer in 0..4 {
            p.on_event(&dup(peer));
        }
        let relay = p.plan(&meta(200, MessageKind::Deposit, false), &ps);
        assert!(pushed(&relay).is_empty());
        assert_eq!(relay.targets.len(), 4);
        let origin = p.plan(&meta(200, MessageKind::Deposit, true), &ps);
        assert_eq!(pushed(&origin), vec![3]);
    }

    #[test]
    fn large_messages_are_announced_before_they_are_sent() {
        let p = PolicyV3::default();
        let plan = plan_v3(
            &p.params,
            &p.state,
            &meta(100 * 1024, MessageKind::Block, true),
            &peers(8),
        );
        assert!(pushed(&plan).is_empty());
        assert_eq!(plan.targets.len(), 8);
        assert_eq!(plan.priority, Priority::High);
    }

    #[test]
    fn high_priority_skips_slow_peers() {
        let p = PolicyV3::default();
        let mut ps = peers(3);
        ps[2].queue_depth = 50;
        let hp = plan_v3(
            &p.params,
            &p.state,
            &meta(200, MessageKind::Consensus, false),
            &ps,
        );
        assert_eq!(pushed(&hp), vec![1, 0]);
        let normal = plan_v3(
            &p.params,
            &p.state,
            &meta(200, MessageKind::Deposit, false),
            &ps,
        );
        assert_eq!(pushed(&normal).len(), 3);
    }

    #[test]
    fn churn_spares_one_second_parent_until_it_ends() {
        let mut p = PolicyV3::default();
        p.on_event(&PolicyEvent::Tick(1_000));
        p.on_event(&PolicyEvent::PeerLeft(40));
        assert!(p.state.churning());
        p.on_event(&dup(1));
        p.on_event(&dup(2));
        assert!(!p.state.is_lazy(1), "spared");
        assert!(p.state.is_lazy(2), "only one link is spared");
        p.on_event(&dup(1));
        assert!(p.state.is_lazy(1), "spared once");
        // Without churn nothing is spared.
        p.on_event(&PolicyEvent::Tick(20_000));
        assert!(!p.state.churning());
        p.on_event(&dup(3));
        assert!(p.state.is_lazy(3));
    }

    #[test]
    fn the_state_round_trips_stays_bounded_and_garbage_reads_as_empty() {
        let mut p = PolicyV3::default();
        p.on_event(&PolicyEvent::Tick(5_000));
        p.on_event(&PolicyEvent::PeerLeft(1));
        for peer in [9, 3, 7] {
            p.on_event(&dup(peer));
        }
        let bytes = p.state.encode();
        assert_eq!(TreeState::decode(&bytes), p.state);
        assert_eq!(TreeState::decode(b""), TreeState::default());
        assert_eq!(
            TreeState::decode(&bytes[..bytes.len() - 1]),
            TreeState::default()
        );
        let mut bad = bytes.clone();
        *bad.last_mut().unwrap() = 9;
        assert_eq!(TreeState::decode(&bad), TreeState::default());
        for peer in 0..(MAX_LINKS as u32 + 100) {
            p.on_event(&dup(peer));
        }
        assert_eq!(p.state.links.len(), MAX_LINKS);
        assert!(p.state.encode().len() <= MAX_STATE_BYTES);
        const { assert!(MAX_STATE_BYTES < 64 * 1024) };
        assert!(p.state.links.windows(2).all(|w| w[0].peer < w[1].peer));
    }
}
