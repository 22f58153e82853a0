//! `PolicyV3`: a self-repairing spreading tree (PlumTree, Leitão et al. 2007), for the stateful
//! contract `modnode:gossip-policy@2.0.0`.
//!
//! A small message (at most [`V3Params::announce_first_above`] bytes) is pushed along the
//! links of the tree and announced on every other link. A link joins the tree by a graft
//! (`missing`: this node pulled a message from that peer, or the peer told us GRAFT because it
//! pulled one from us). The engine grafts the announcer it pulls from: at once while this node
//! is on no tree link yet — so the first message builds the tree, every node pulling it from
//! its first announcer, the fastest path, and grafting that link — and once it is, when the
//! graft timer (tuned from the measured gaps within [`V3Params::graft_min_ms`] ..
//! [`V3Params::graft_max_ms`]) runs out again with no tree copy in between, or a tree peer
//! left (a single miss is only pulled: the tree's copy may be late, not lost): the tree
//! repairs itself through the announcer the engine found fastest and most reliable. A link
//! that delivers a redundant copy (`duplicate`: the peer pushed us a copy we had — over a tree
//! link, one of several in a row — or told us PRUNE because ours was one for it) leaves the
//! tree (lazy). A stable tree carries every small message once per node, without the round
//! trip of a pull.
//!
//! Larger messages are announced before they are sent, to every peer: each receiver pulls one
//! copy from its first announcer — the fastest path for that message's origin — so no large
//! duplicate crosses a link whatever the tree. Only their origin pushes them, to its
//! [`V3Params::large_origin_pushes`] fastest peers under a quorum: its neighbours cannot have
//! them yet, so the first hop saves its announce round trip at no duplicate, and the origin
//! announces it to nobody else — its other neighbours hear of it from the pushed peers — so
//! no request has to reach an origin whose receive link is busy. (Pushing them down the tree instead was slower
//! and costlier in the simulator, at 200 nodes with 100 KiB blocks: a shared tree is not every
//! origin's fastest path, its hubs serialise a copy per child, and a tree copy that lags its
//! announces past the graft timer is pulled too — t99 526 ms and 0.42 redundant copies per
//! delivery, against 426 ms and 0.13 announced.)
//!
//! While churn is detected (a peer left within [`V3Params::churn_ms`]; by default never) one
//! tree link per node is spared its first prune: a second parent, given up when the churn
//! ends. (At 1,000 simulated nodes with 10 % churn the second parent cost more than it saved:
//! 0.18 redundant copies per delivery and t99 488 ms with it, 0.07 and 460 ms without, nothing
//! missed either way — the announces and the graft timer already repair a lost parent.) High-priority
//! messages are never pushed to slow peers (deep queue or recent failures): those get
//! announces and pull, so a slow peer delays nobody. A node that publishes a small message
//! while on no tree link pushes it over its best link.
//!
//! The state ([`TreeState`]) is the only memory: the tree, lazy and spared links and two
//! clocks, in its own versioned encoding within [`MAX_STATE_BYTES`]; bytes that are not such
//! a state read as empty, so the policy is a total function of its inputs.

// Named through the crate's name, not `crate::`: the `gossip-policy-v3` module compiles this
// file into itself (see the crate docs).
use gossip_policy_common::PeerId;
use gossip_policy_common::policy::{
    LinkControl, MessageMeta, PeerStats, Policy, PolicyEvent, Priority, SendMode, SendPlan, Target,
};

/// Links remembered at most (beyond it the lowest handle is forgotten: it gets announces, and
/// is grafted again if the tree needs it).
pub const MAX_LINKS: usize = 2_048;

const MAGIC: &[u8; 3] = b"PT2";
const HEADER_BYTES: usize = 3 + 8 + 8 + 2;
const ENTRY_BYTES: usize = 5;

/// Largest encoded state: far under the host's 64 KiB bound.
pub const MAX_STATE_BYTES: usize = HEADER_BYTES + MAX_LINKS * ENTRY_BYTES;

/// The `state-format` parameter of the modules that keep a [`TreeState`].
pub const STATE_FORMAT: &str = "plumtree/2";

/// Tunable parameters; [`V3Params::default`] holds the chosen values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V3Params {
    /// Pushes per message at most (tree links, lowest RTT first; the rest get announces).
    pub eager_max: u32,
    /// Messages larger than this are announced to every peer before they are sent.
    pub announce_first_above: u32,
    /// Shortest graft timer, milliseconds (a shorter one pulls copies the tree was still
    /// bringing: the gaps it is tuned from are only those that arrived in time).
    pub graft_min_ms: u32,
    /// Longest graft timer (and the timer before any gap is measured), milliseconds.
    pub graft_max_ms: u32,
    /// How long churn is assumed after a peer left, milliseconds (0: never, no second parent).
    pub churn_ms: u64,
    /// Peers with at least this queue depth are slow.
    pub slow_queue: u32,
    /// Peers with at least this many recent failures are slow.
    pub slow_failures: u32,
    /// A larger message this node creates is pushed to this many peers (fastest first, never
    /// slow ones), announced to the rest.
    pub large_origin_pushes: u32,
    /// Once this many of those pushes are delivered, the ones still queued become announces
    /// (quorum-and-cancel: a neighbour late in the origin's upload queue pulls from a faster
    /// path instead).
    pub large_origin_quorum: u32,
    /// Send timeout base, milliseconds.
    pub base_timeout_ms: u32,
    /// The timeout grows by 1 ms per this many payload bytes.
    pub timeout_bytes_per_ms: u32,
}

impl Default for V3Params {
    fn default() -> Self {
        V3Params {
            eager_max: 32,
            announce_first_above: 1024,
            graft_min_ms: 160,
            graft_max_ms: 250,
            churn_ms: 0,
            slow_queue: 8,
            slow_failures: 2,
            // An origin that waits for its neighbours' requests waits behind whatever its
            // receive link is busy with: with 8 of 32 simulated nodes on a slow link, blocks
            // from them made the fast nodes' high-priority p99 4,977 ms against 76 ms without
            // them; pushing to 4 under a quorum of 2, 78 against 72 ms. It also took 1,000
            // nodes' 100 KiB t99 from 519 to 483 ms at the same RMR (150 nodes: 0.131 → 0.141).
            // Over QUIC (32 nodes, 8 slow) the origin still announcing to the others left a
            // median slow/fast ratio of 2.0 (12 repeats, up to 16.6); announcing through the
            // pushed peers only, 1.13 (up to 2.45).
            large_origin_pushes: 4,
            large_origin_quorum: 2,
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

/// One remembered link (a link not remembered is off the tree: it gets announces).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Link {
    /// The peer's handle.
    pub peer: PeerId,
    /// Pruned: the peer delivered a redundant copy; it gets announces.
    pub lazy: bool,
    /// Spared one prune while churn is detected (the second parent).
    pub spared: bool,
    /// On the tree (grafted): the peer gets pushes.
    pub tree: bool,
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

    fn link(&self, peer: PeerId) -> Option<&Link> {
        self.find(peer).ok().and_then(|i| self.links.get(i))
    }

    /// The link to `peer` is lazy (pruned).
    pub fn is_lazy(&self, peer: PeerId) -> bool {
        self.link(peer).is_some_and(|l| l.lazy)
    }

    /// The link to `peer` is on the tree: it gets pushes.
    pub fn is_tree(&self, peer: PeerId) -> bool {
        self.link(peer).is_some_and(|l| l.tree && !l.lazy)
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

    /// The remembered link to `peer`, remembered now if it was not (the lowest handle is
    /// forgotten beyond [`MAX_LINKS`]).
    fn remember(&mut self, peer: PeerId) -> Option<&mut Link> {
        let at = match self.find(peer) {
            Ok(i) => i,
            Err(_) => {
                if self.links.len() >= MAX_LINKS {
                    self.links.remove(0);
                }
                let i = self.find(peer).err()?;
                self.links.insert(
                    i,
                    Link {
                        peer,
                        ..Link::default()
                    },
                );
                i
            }
        };
        self.links.get_mut(at)
    }

    /// The link to `peer` delivered a redundant copy: prune it, unless it is spared as the
    /// second parent while churn lasts.
    fn prune(&mut self, peer: PeerId) {
        let churning = self.churning();
        let any_spared = self.links.iter().any(|l| l.spared);
        let Some(link) = self.remember(peer) else {
            return;
        };
        if link.lazy {
            return;
        }
        if churning && link.tree && !link.spared && !any_spared {
            link.spared = true;
        } else {
            link.lazy = true;
            link.spared = false;
            link.tree = false;
        }
    }

    /// The link to `peer` is grafted: it joins the tree.
    fn graft(&mut self, peer: PeerId) {
        if let Some(link) = self.remember(peer) {
            link.tree = true;
            link.lazy = false;
        }
    }

    /// Hears an event.
    pub fn hear(&mut self, params: &V3Params, event: &PolicyEvent) {
        match *event {
            PolicyEvent::Duplicate { peer, .. } => self.prune(peer),
            // A graft, ours or the peer's: the link is on the tree. (Not churn by itself: every
            // node grafts while the tree forms.)
            PolicyEvent::Missing { peer, .. } => self.graft(peer),
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
                    self.links.retain(|l| l.lazy || l.tree);
                }
            }
        }
    }

    /// The encoding: `b"PT2"`, the clock and the end of churn (u64 each), the number of links
    /// (u16), then per link its handle (u32) and flags (u8: 1 lazy, 2 spared, 4 tree), little
    /// endian, sorted by handle.
    pub fn encode(&self) -> Vec<u8> {
        let n = self.links.len().min(MAX_LINKS);
        let mut out = Vec::with_capacity(HEADER_BYTES.saturating_add(n.saturating_mul(5)));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.now_ms.to_le_bytes());
        out.extend_from_slice(&self.churn_until_ms.to_le_bytes());
        out.extend_from_slice(&u16::try_from(n).unwrap_or(u16::MAX).to_le_bytes());
        for link in self.links.iter().take(n) {
            out.extend_from_slice(&link.peer.to_le_bytes());
            out.push(
                u8::from(link.lazy) | (u8::from(link.spared) << 1) | (u8::from(link.tree) << 2),
            );
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
            if flags > 7 {
                return None;
            }
            links.push(Link {
                peer: u32::from_le_bytes(*peer),
                lazy: flags & 1 != 0,
                spared: flags & 2 != 0,
                tree: flags & 4 != 0,
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
    let large = msg.size > params.announce_first_above;
    let mut pushes: u32 = 0;
    let mut targets: Vec<Target> = candidates
        .iter()
        .map(|p| {
            // Pushed: a small message over a tree link, unless the message is high priority
            // and the peer slow.
            let tree = !large && state.is_tree(p.peer);
            let slowed = priority == Priority::High && slow(p);
            let eager = tree && !slowed && pushes < params.eager_max;
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
    // A small message this node creates goes out pushed at least once, over the best link,
    // even before the node is on the tree.
    if msg.local_origin
        && !large
        && pushes == 0
        && let Some(first) = targets.first_mut()
    {
        first.mode = SendMode::Push;
    }
    // A larger message this node creates is pushed to its fastest healthy peers (they cannot
    // have it yet), under a quorum; the rest pull it from them.
    let mut quorum = 0;
    if msg.local_origin && large && params.large_origin_pushes > 0 {
        let mut left = params.large_origin_pushes;
        let mut pushed: u32 = 0;
        for (target, peer) in targets.iter_mut().zip(&candidates) {
            if left == 0 || slow(peer) {
                break;
            }
            target.mode = SendMode::Push;
            left = left.saturating_sub(1);
            pushed = pushed.saturating_add(1);
        }
        // Never more than the pushes made (none, with no healthy peer: no quorum).
        quorum = params.large_origin_quorum.min(pushed);
        // Announced by the pushed peers, not by us: a neighbour that pulled it from us would
        // wait behind our receive link, and that is where a busy node is slow.
        if pushed > 0 {
            targets.retain(|t| t.mode == SendMode::Push);
        }
    }
    SendPlan {
        targets,
        quorum,
        timeout_ms,
        priority,
    }
}

/// v3's plan for a message whose origin's routes the engine knows
/// ([`Policy::plan_routed`], [`RouteRole`]): pushed to this node's children on the origin's
/// shortest-path tree — unless the message is high priority and the child slow — and
/// announced to every other peer lacking it, whatever its size. On a settled network each node
/// gets one copy, from its parent, along the fastest path from the origin; the announces
/// repair what a route change or a lost parent breaks (the engine waits for the parent's copy
/// for the graft timer, then pulls). `None` when no route is known (every role
/// [`RouteRole::Unknown`]): [`plan_v3`] decides. Host-side only for now: no WIT contract gives
/// a module the roles yet.
///
/// [`RouteRole`]: gossip_policy_common::policy::RouteRole
/// [`RouteRole::Unknown`]: gossip_policy_common::policy::RouteRole::Unknown
#[cfg(not(target_arch = "wasm32"))]
pub fn plan_v3_routed(
    params: &V3Params,
    msg: &MessageMeta,
    peers: &[PeerStats],
    routes: &[gossip_policy_common::policy::RouteRole],
) -> Option<SendPlan> {
    use gossip_policy_common::policy::RouteRole;
    if routes.len() != peers.len() || routes.iter().all(|r| *r == RouteRole::Unknown) {
        return None;
    }
    let priority = priority_of(msg);
    let timeout_ms = params.base_timeout_ms.saturating_add(
        msg.size
            .checked_div(params.timeout_bytes_per_ms)
            .unwrap_or(0),
    );
    let slow = |p: &PeerStats| {
        p.queue_depth >= params.slow_queue || p.recent_failures >= params.slow_failures
    };
    let mut candidates: Vec<(&PeerStats, RouteRole)> = peers
        .iter()
        .zip(routes.iter().copied())
        .filter(|(p, _)| !p.has_message && !p.is_origin)
        .collect();
    // Children first — the largest subtrees first (the engine sends a plan's pushes in its
    // order: a hub's copies leave one at a time, and the nodes behind a big subtree wait
    // longest), the healthy and fast among equals first.
    let subtree = |role: &RouteRole| match role {
        RouteRole::Child(class) => Some(core::cmp::Reverse(*class)),
        _ => None,
    };
    candidates.sort_by_key(|(p, role)| {
        (
            subtree(role).is_none(),
            subtree(role),
            slow(p),
            p.rtt_us,
            p.peer,
        )
    });
    let targets = candidates
        .iter()
        .map(|(p, role)| {
            let slowed = priority == Priority::High && slow(p);
            Target {
                peer: p.peer,
                mode: if matches!(role, RouteRole::Child(_)) && !slowed {
                    SendMode::Push
                } else {
                    SendMode::Announce
                },
            }
        })
        .collect();
    Some(SendPlan {
        targets,
        quorum: 0,
        timeout_ms,
        priority,
    })
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

    #[cfg(not(target_arch = "wasm32"))]
    fn plan_routed(
        &mut self,
        msg: &MessageMeta,
        peers: &[PeerStats],
        routes: &[gossip_policy_common::policy::RouteRole],
    ) -> SendPlan {
        plan_v3_routed(&self.params, msg, peers, routes)
            .unwrap_or_else(|| plan_v3(&self.params, &self.state, msg, peers))
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

    fn graft(peer: u32) -> PolicyEvent {
        PolicyEvent::Missing {
            peer,
            message: 2,
            kind: MessageKind::Deposit,
        }
    }

    #[test]
    fn only_tree_links_are_pushed_fastest_first_and_a_prune_takes_one_off_until_grafted() {
        let mut p = PolicyV3::default();
        let ps = peers(12);
        // On no tree yet: a relay announces to every peer.
        let plan = p.plan(&meta(200, MessageKind::Deposit, false), &ps);
        assert!(pushed(&plan).is_empty());
        assert_eq!(plan.targets.len(), 12);
        for peer in [3, 7, 11] {
            p.on_event(&graft(peer));
        }
        // Lowest RTT first: RTT falls with the handle.
        let plan = p.plan(&meta(200, MessageKind::Deposit, false), &ps);
        assert_eq!(pushed(&plan), vec![11, 7, 3]);
        assert_eq!(plan.targets.len(), 12);
        p.on_event(&dup(11));
        assert!(p.state.is_lazy(11) && !p.state.is_tree(11));
        let plan = p.plan(&meta(200, MessageKind::Deposit, false), &ps);
        assert_eq!(pushed(&plan), vec![7, 3]);
        p.on_event(&graft(11));
        let plan = p.plan(&meta(200, MessageKind::Deposit, false), &ps);
        assert_eq!(pushed(&plan), vec![11, 7, 3]);
        let capped = PolicyV3 {
            params: V3Params {
                eager_max: 2,
                ..V3Params::default()
            },
            state: p.state.clone(),
        };
        let plan = plan_v3(
            &capped.params,
            &capped.state,
            &meta(200, MessageKind::Deposit, false),
            &ps,
        );
        assert_eq!(pushed(&plan), vec![11, 7]);
    }

    #[test]
    fn a_relay_on_no_tree_only_announces_but_an_origin_pushes_once() {
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
        // Relays announce them; so does an origin told to push none.
        let mut p = PolicyV3 {
            params: V3Params {
                large_origin_pushes: 0,
                ..V3Params::default()
            },
            ..PolicyV3::default()
        };
        for peer in [1, 5] {
            p.on_event(&graft(peer));
        }
        for local in [false, true] {
            let plan = p.plan(&meta(100 * 1024, MessageKind::Block, local), &peers(8));
            assert!(pushed(&plan).is_empty());
            assert_eq!(plan.targets.len(), 8);
            assert_eq!(plan.priority, Priority::High);
        }
        let mut relay = PolicyV3 {
            state: p.state.clone(),
            ..PolicyV3::default()
        };
        let plan = relay.plan(&meta(100 * 1024, MessageKind::Block, false), &peers(8));
        assert!(pushed(&plan).is_empty());
        assert_eq!(plan.quorum, 0);
    }

    #[test]
    fn an_origin_pushes_a_large_message_to_its_fastest_healthy_peers_under_a_quorum() {
        let p = PolicyV3 {
            params: V3Params {
                large_origin_pushes: 3,
                large_origin_quorum: 2,
                ..V3Params::default()
            },
            ..PolicyV3::default()
        };
        let mut ps = peers(6);
        // The fastest is slow: skipped, as are the rest beyond the three.
        ps[5].queue_depth = 50;
        let plan = plan_v3(
            &p.params,
            &p.state,
            &meta(100 * 1024, MessageKind::Block, true),
            &ps,
        );
        assert_eq!(pushed(&plan), vec![4, 3, 2]);
        // Nobody else hears of it from the origin: the pushed peers announce it.
        assert_eq!(plan.targets.len(), 3);
        assert_eq!(plan.quorum, 2);
        // Small messages keep the tree's rule: no quorum.
        let small = plan_v3(
            &p.params,
            &p.state,
            &meta(200, MessageKind::Deposit, true),
            &ps,
        );
        assert_eq!(small.quorum, 0);
    }

    #[test]
    fn an_origins_quorum_never_exceeds_the_pushes_it_made() {
        let p = PolicyV3::default();
        let big = meta(100 * 1024, MessageKind::Block, true);
        // No peer at all, then only slow ones: nothing pushed, no quorum.
        let none = plan_v3(&p.params, &p.state, &big, &[]);
        assert_eq!((none.targets.len(), none.quorum), (0, 0));
        let mut slow = peers(3);
        for peer in &mut slow {
            peer.recent_failures = 5;
        }
        let plan = plan_v3(&p.params, &p.state, &big, &slow);
        assert!(pushed(&plan).is_empty());
        assert_eq!(plan.quorum, 0);
        // Then the origin announces it to them all: they pull.
        assert_eq!(plan.targets.len(), 3);
        // One healthy peer: one push, a quorum of one.
        let plan = plan_v3(&p.params, &p.state, &big, &peers(1));
        assert_eq!((pushed(&plan).len(), plan.quorum), (1, 1));
    }

    #[test]
    fn high_priority_skips_slow_peers() {
        let mut p = PolicyV3::default();
        for peer in 0..3 {
            p.on_event(&graft(peer));
        }
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
        let mut p = PolicyV3 {
            params: V3Params {
                churn_ms: 10_000,
                ..V3Params::default()
            },
            ..PolicyV3::default()
        };
        for peer in 1..=3 {
            p.on_event(&graft(peer));
        }
        p.on_event(&PolicyEvent::Tick(1_000));
        p.on_event(&PolicyEvent::PeerLeft(40));
        assert!(p.state.churning());
        p.on_event(&dup(1));
        p.on_event(&dup(2));
        assert!(p.state.is_tree(1), "spared");
        assert!(p.state.is_lazy(2), "only one link is spared");
        // The second parent still gets pushes.
        let ps = peers(4);
        assert_eq!(
            pushed(&p.plan(&meta(200, MessageKind::Deposit, false), &ps)),
            vec![3, 1]
        );
        p.on_event(&dup(1));
        assert!(p.state.is_lazy(1), "spared once");
        // Without churn nothing is spared; a graft is not churn.
        p.on_event(&PolicyEvent::Tick(20_000));
        assert!(!p.state.churning());
        p.on_event(&graft(9));
        assert!(!p.state.churning());
        p.on_event(&dup(3));
        assert!(p.state.is_lazy(3));
    }

    #[test]
    fn the_state_round_trips_stays_bounded_and_garbage_reads_as_empty() {
        let mut p = PolicyV3 {
            params: V3Params {
                churn_ms: 10_000,
                ..V3Params::default()
            },
            ..PolicyV3::default()
        };
        p.on_event(&PolicyEvent::Tick(5_000));
        p.on_event(&PolicyEvent::PeerLeft(1));
        for peer in [9, 3, 7] {
            p.on_event(&dup(peer));
        }
        for peer in [4, 12] {
            p.on_event(&graft(peer));
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

    #[test]
    fn a_routed_plan_pushes_to_children_largest_subtree_first_and_announces_to_the_rest() {
        use gossip_policy_common::policy::RouteRole;
        let params = V3Params::default();
        let mut peers = peers(6);
        peers[5].has_message = true;
        let routes = [
            RouteRole::Parent,
            RouteRole::Child(1),
            RouteRole::Other,
            RouteRole::Child(4),
            RouteRole::Child(1),
            RouteRole::Child(7),
        ];
        let large = meta(100 * 1024, MessageKind::Block, false);
        let plan = plan_v3_routed(&params, &large, &peers, &routes).unwrap();
        let order: Vec<(u32, SendMode)> = plan.targets.iter().map(|t| (t.peer, t.mode)).collect();
        // The biggest subtree first; equal ones the faster first (4 has the lower RTT); the one
        // that has it skipped; parent and others announced, whatever the size.
        assert_eq!(
            order,
            vec![
                (3, SendMode::Push),
                (4, SendMode::Push),
                (1, SendMode::Push),
                (2, SendMode::Announce),
                (0, SendMode::Announce),
            ]
        );
        assert_eq!(plan.quorum, 0);
        // A slow child gets an announce for high priority.
        peers[3].queue_depth = params.slow_queue;
        let plan = plan_v3_routed(&params, &large, &peers, &routes).unwrap();
        assert!(
            plan.targets
                .iter()
                .any(|t| t.peer == 3 && t.mode == SendMode::Announce)
        );
        // No route known: v3's own plan decides.
        let unknown = [RouteRole::Unknown; 6];
        assert!(plan_v3_routed(&params, &large, &peers, &unknown).is_none());
    }
}
