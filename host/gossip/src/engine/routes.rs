//! Distance-vector routes to every origin, so a message can follow its origin's shortest-path
//! tree ([`EngineConfig::routing`]): reverse-path forwarding, as DVMRP and PIM-DM do for IP
//! multicast, over the gossip links.
//!
//! Each routing node advertises to each neighbour, per origin (a node's routing id), its
//! distance to that origin (one-way link latencies, half the measured RTT, summed), or
//! "through you" to the neighbour its route runs through (poisoned reverse), or "no route".
//! A node therefore knows, for every origin, its parent (the next hop of its route) and its
//! children (the neighbours whose route runs through it): a message from that origin is
//! pushed to the children and announced to the rest — one copy per node on a stable network,
//! each along the fastest path. Routes are loop-free by the feasibility condition of EIGRP and
//! Babel: a neighbour's route is taken only if the distance it advertises is smaller than the
//! smallest this node has had since it last lost the route, so no node can pick a route that
//! runs through itself. A route with no feasible successor is lost: "no route" is advertised,
//! and after a hold-down (long enough for that news to reach the nodes downstream) any route is
//! feasible again. Without sequence numbers (Babel's answer) the condition can also keep a
//! node on a longer route after a loss: a shorter one that appears later, through a node that
//! lost its route meanwhile, is not feasible until this node loses its own (the simulator
//! measures what that costs; sequence numbers are the next step). What a peer makes us hold
//! and hear is bounded: origins in the table
//! ([`RoutingConfig::max_origins`]) and route items per peer within a token bucket.
//!
//! [`EngineConfig::routing`]: super::EngineConfig::routing

use std::collections::{BTreeMap, BTreeSet};

use crate::links::LinkBudget;
use crate::policy::RouteRole;
use crate::wire::{MAX_ROUTE_US, MAX_SUBTREE_CLASS, RouteAdvert, RouteItem};
use crate::{PeerId, Time};

const MS: Time = 1_000;

/// What routing needs to know and how it is paced ([`super::EngineConfig::routing`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingConfig {
    /// This node's routing id: unique in the network (a node's public key hashed, say) and the
    /// same across restarts; messages this node publishes name it as their origin.
    pub node_id: u64,
    /// Shortest time between two route frames to one peer.
    pub advert_interval: Time,
    /// How long a lost route is held down before any route to its origin is taken again.
    pub hold_down: Time,
    /// How often the links' RTTs are looked at again; when one moved (by more than
    /// [`RoutingConfig::min_change_us`] and a twentieth), every route is computed again.
    pub refresh_interval: Time,
    /// Origins held at most; routes to further origins are ignored (counted).
    pub max_origins: usize,
    /// Route items sent in one frame at most.
    pub max_items_per_frame: usize,
    /// Route items one peer may make this node hear at once; beyond it,
    /// [`RoutingConfig::items_per_sec`]. Items over it are ignored (counted), never a fault.
    pub items_burst: u32,
    /// Route items per second per peer after the burst.
    pub items_per_sec: u32,
    /// A route whose distance changed by less than this (and by less than a twentieth) is not
    /// advertised again, microseconds.
    pub min_change_us: u32,
    /// Added to every link's cost, microseconds: what a hop costs beyond its latency (a
    /// large message is taken in and sent out again at every hop), so that of two paths of
    /// nearly the same latency the one with fewer hops wins.
    pub hop_cost_us: u32,
}

impl RoutingConfig {
    /// Defaults for a node whose routing id is `node_id`.
    pub fn new(node_id: u64) -> RoutingConfig {
        RoutingConfig {
            node_id,
            advert_interval: 100 * MS,
            hold_down: 300 * MS,
            refresh_interval: 2_000 * MS,
            max_origins: 16_384,
            max_items_per_frame: 1_024,
            items_burst: 32_768,
            items_per_sec: 4_096,
            min_change_us: 2_000,
            hop_cost_us: 0,
        }
    }
}

/// The route to one origin.
#[derive(Debug, Default)]
struct Route {
    /// Each neighbour's latest advertisement.
    heard: BTreeMap<PeerId, RouteAdvert>,
    /// The next hop and the distance through it; `None` = no route.
    best: Option<(PeerId, u32)>,
    /// The distance last advertised (to the peers other than the next hop).
    advertised: Option<u32>,
    /// The size class of this node's subtree on the origin's tree (`log2` of 1 + the
    /// children's sizes), as told to the next hop.
    class: u8,
    /// The feasibility distance: the smallest distance this node has had since it last lost
    /// the route (`u32::MAX` = none, every route is feasible).
    feasible: u32,
}

/// Counters of routing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteStats {
    /// Route items heard from peers.
    pub items_heard: u64,
    /// Route items over a peer's budget, ignored.
    pub items_ignored: u64,
    /// Route items naming a new origin while the table was full, ignored.
    pub origins_refused: u64,
    /// Route frames queued to peers.
    pub frames_sent: u64,
    /// Route items sent.
    pub items_sent: u64,
    /// Routes lost (no feasible successor).
    pub lost: u64,
    /// Changes of next hop.
    pub switches: u64,
}

/// Every route of a routing node, what is due to be advertised to each peer, and the peers'
/// budgets.
#[derive(Debug)]
pub(super) struct RouteTable {
    cfg: RoutingConfig,
    routes: BTreeMap<u64, Route>,
    /// What each neighbour advertises for this node's own id: the children of its own tree.
    own_heard: BTreeMap<PeerId, RouteAdvert>,
    /// Per peer: origins whose advertisement to it is due (this node's own id included).
    due: BTreeMap<PeerId, BTreeSet<u64>>,
    /// When each peer was last sent a route frame.
    sent_at: BTreeMap<PeerId, Time>,
    budgets: BTreeMap<PeerId, LinkBudget>,
    /// Routes lost and held down, with when they were lost (the hold-down runs from then).
    held: BTreeMap<u64, Time>,
    refreshed_at: Time,
    /// Each peer's link cost when the routes were last computed from all of them.
    costs: BTreeMap<PeerId, u32>,
    pub(super) stats: RouteStats,
}

impl RouteTable {
    pub(super) fn new(cfg: RoutingConfig) -> RouteTable {
        RouteTable {
            cfg,
            routes: BTreeMap::new(),
            own_heard: BTreeMap::new(),
            due: BTreeMap::new(),
            sent_at: BTreeMap::new(),
            budgets: BTreeMap::new(),
            held: BTreeMap::new(),
            refreshed_at: 0,
            costs: BTreeMap::new(),
            stats: RouteStats::default(),
        }
    }

    /// This node's routing id.
    pub(super) fn own(&self) -> u64 {
        self.cfg.node_id
    }

    /// Origins with a route entry (reachable or held down).
    pub(super) fn len(&self) -> usize {
        self.routes.len()
    }

    /// The next hop towards `origin` and the distance, if there is a route.
    pub(super) fn route(&self, origin: u64) -> Option<(PeerId, u32)> {
        self.routes.get(&origin).and_then(|r| r.best)
    }

    /// Whether this node takes part in routing yet: it knows an origin, or a peer told it its
    /// route to this node (constant time: asked for every announce).
    pub(super) fn has_routes(&self) -> bool {
        !self.routes.is_empty() || !self.own_heard.is_empty()
    }

    /// Where `peer` stands on `origin`'s tree as seen from this node.
    pub(super) fn role(&self, origin: u64, peer: PeerId) -> RouteRole {
        let (heard, best) = if origin == self.cfg.node_id {
            (self.own_heard.get(&peer), None)
        } else {
            match self.routes.get(&origin) {
                Some(route) => (route.heard.get(&peer), route.best),
                None => return RouteRole::Unknown,
            }
        };
        if let Some(&RouteAdvert::ViaYou(class)) = heard {
            RouteRole::Child(class)
        } else if best.is_some_and(|(via, _)| via == peer) {
            RouteRole::Parent
        } else {
            RouteRole::Other
        }
    }

    /// What this node advertises to `peer` about `origin`.
    fn advert(&self, origin: u64, peer: PeerId) -> RouteAdvert {
        if origin == self.cfg.node_id {
            return RouteAdvert::Distance(0);
        }
        match self.routes.get(&origin).and_then(|r| r.best) {
            Some((via, _)) if via == peer => {
                RouteAdvert::ViaYou(self.routes.get(&origin).map_or(0, |r| r.class))
            }
            Some((_, distance)) => RouteAdvert::Distance(distance),
            None => RouteAdvert::Unreachable,
        }
    }

    /// A peer connected: everything is due to it.
    pub(super) fn peer_added(&mut self, peer: PeerId) {
        let mut all: BTreeSet<u64> = self.routes.keys().copied().collect();
        all.insert(self.cfg.node_id);
        self.due.insert(peer, all);
        self.sent_at.remove(&peer);
        self.budgets.remove(&peer);
    }

    /// A peer left: what it advertised is forgotten and the routes through it are computed
    /// again.
    pub(super) fn peer_removed(&mut self, peer: PeerId, now: Time, cost: &dyn Fn(PeerId) -> u32) {
        self.due.remove(&peer);
        self.sent_at.remove(&peer);
        self.budgets.remove(&peer);
        self.own_heard.remove(&peer);
        let affected: Vec<u64> = self
            .routes
            .iter_mut()
            .filter_map(|(&origin, route)| route.heard.remove(&peer).map(|_| origin))
            .collect();
        for origin in affected {
            self.recompute(origin, now, cost);
        }
    }

    /// A route frame that could not be delivered: all of it is due again.
    /// (Only what is due: the peer's budget and pacing stay, or a peer that makes our frames
    /// fail would refill its own allowance.)
    pub(super) fn resend_all(&mut self, peer: PeerId) {
        let mut all: BTreeSet<u64> = self.routes.keys().copied().collect();
        all.insert(self.cfg.node_id);
        if let Some(due) = self.due.get_mut(&peer) {
            due.append(&mut all);
        }
    }

    /// A peer's route items, within its budget.
    pub(super) fn heard(
        &mut self,
        peer: PeerId,
        items: &[RouteItem],
        now: Time,
        cost: &dyn Fn(PeerId) -> u32,
    ) {
        let (burst, rate) = (self.cfg.items_burst, self.cfg.items_per_sec);
        for item in items {
            let budget = self.budgets.entry(peer).or_default();
            if !budget.take(now, burst, rate) {
                self.stats.items_ignored = self.stats.items_ignored.saturating_add(1);
                continue;
            }
            self.stats.items_heard = self.stats.items_heard.saturating_add(1);
            if item.origin == self.cfg.node_id {
                self.own_heard.insert(peer, item.route);
                continue;
            }
            if !self.routes.contains_key(&item.origin) {
                // Only a reachable origin makes an entry, and only while there is room.
                if !matches!(item.route, RouteAdvert::Distance(_))
                    || self.routes.len() >= self.cfg.max_origins
                {
                    if matches!(item.route, RouteAdvert::Distance(_)) {
                        self.stats.origins_refused = self.stats.origins_refused.saturating_add(1);
                    }
                    continue;
                }
                self.routes.insert(
                    item.origin,
                    Route {
                        feasible: u32::MAX,
                        ..Route::default()
                    },
                );
            }
            // The same news again (a resend after a failed frame, a reconnect) changes nothing.
            let Some(route) = self.routes.get_mut(&item.origin) else {
                continue;
            };
            let before = route.heard.insert(peer, item.route);
            if before == Some(item.route) {
                continue;
            }
            // A child's subtree changed size: so may ours, which our next hop hears.
            if matches!(before, Some(RouteAdvert::ViaYou(_)))
                || matches!(item.route, RouteAdvert::ViaYou(_))
            {
                let class = subtree_class(&route.heard);
                if class != route.class {
                    route.class = class;
                    if let Some((via, _)) = route.best
                        && let Some(due) = self.due.get_mut(&via)
                    {
                        due.insert(item.origin);
                    }
                }
            }
            if !matches!(
                (before, item.route),
                (Some(RouteAdvert::ViaYou(_)), RouteAdvert::ViaYou(_))
            ) {
                self.recompute(item.origin, now, cost);
            }
        }
    }

    /// Computes the route to `origin` again; a change worth telling is made due to every peer.
    fn recompute(&mut self, origin: u64, now: Time, cost: &dyn Fn(PeerId) -> u32) {
        let Some(route) = self.routes.get_mut(&origin) else {
            return;
        };
        let current = route.best.map(|(via, _)| via);
        let mut best: Option<(PeerId, u32)> = None;
        let mut kept: Option<(PeerId, u32)> = None;
        for (&peer, &advert) in &route.heard {
            let RouteAdvert::Distance(distance) = advert else {
                continue;
            };
            if distance >= route.feasible {
                continue;
            }
            let total = distance
                .saturating_add(cost(peer))
                .saturating_add(self.cfg.hop_cost_us)
                .min(MAX_ROUTE_US);
            if best.is_none_or(|(_, b)| total < b) {
                best = Some((peer, total));
            }
            if Some(peer) == current {
                kept = Some((peer, total));
            }
        }
        // Hysteresis: the current next hop stays while it is nearly as good.
        if let (Some((_, b)), Some((_, k))) = (best, kept)
            && k <= b
                .saturating_add(b / 20)
                .saturating_add(self.cfg.min_change_us)
        {
            best = kept;
        }
        let before = (route.best, route.advertised);
        match best {
            Some((via, distance)) => {
                if current.is_some_and(|c| c != via) {
                    self.stats.switches = self.stats.switches.saturating_add(1);
                }
                route.best = Some((via, distance));
                route.feasible = route.feasible.min(distance);
                self.held.remove(&origin);
            }
            None => {
                if route.best.is_some() {
                    self.stats.lost = self.stats.lost.saturating_add(1);
                    self.held.insert(origin, now);
                }
                route.best = None;
            }
        }
        let changed = match (before.0, route.best) {
            (None, None) => false,
            (Some((a, _)), Some((b, d))) if a == b => before.1.is_none_or(|old| {
                let step = old.abs_diff(d);
                step >= self.cfg.min_change_us && step >= old / 20
            }),
            _ => true,
        };
        if changed {
            route.advertised = route.best.map(|(_, d)| d);
            for due in self.due.values_mut() {
                due.insert(origin);
            }
        }
    }

    /// Hold-downs that ended and the periodic refresh of every route from the current RTTs.
    pub(super) fn maintain(&mut self, now: Time, cost: &dyn Fn(PeerId) -> u32) {
        let hold = self.cfg.hold_down;
        let ended: Vec<u64> = self
            .held
            .iter()
            .filter(|&(_, &t)| t.saturating_add(hold) <= now)
            .map(|(&o, _)| o)
            .collect();
        for origin in ended {
            self.held.remove(&origin);
            let Some(route) = self.routes.get_mut(&origin) else {
                continue;
            };
            route.feasible = u32::MAX;
            // Nobody offers a route any more: the entry goes (its loss was advertised).
            if !route
                .heard
                .values()
                .any(|a| matches!(a, RouteAdvert::Distance(_)))
            {
                self.routes.remove(&origin);
                for due in self.due.values_mut() {
                    due.remove(&origin);
                }
                continue;
            }
            self.recompute(origin, now, cost);
        }
        if now.saturating_sub(self.refreshed_at) >= self.cfg.refresh_interval {
            self.refreshed_at = now;
            let min_change = self.cfg.min_change_us;
            let costs: BTreeMap<PeerId, u32> =
                self.due.keys().map(|&peer| (peer, cost(peer))).collect();
            let moved = costs.iter().any(|(peer, &now_cost)| {
                self.costs.get(peer).is_none_or(|&then| {
                    let step = then.abs_diff(now_cost);
                    step >= min_change && step >= then / 20
                })
            });
            self.costs = costs;
            if !moved {
                return;
            }
            let origins: Vec<u64> = self.routes.keys().copied().collect();
            for origin in origins {
                self.recompute(origin, now, cost);
            }
        }
    }

    /// The route items due to `peer` if its interval has passed (at most a frame's worth).
    pub(super) fn take_due(&mut self, peer: PeerId, now: Time) -> Option<Vec<RouteItem>> {
        let interval = self.cfg.advert_interval;
        if self
            .sent_at
            .get(&peer)
            .is_some_and(|&t| t.saturating_add(interval) > now)
        {
            return None;
        }
        let due = self.due.get_mut(&peer)?;
        let mut origins = Vec::new();
        while origins.len() < self.cfg.max_items_per_frame.max(1) {
            let Some(origin) = due.pop_first() else {
                break;
            };
            origins.push(origin);
        }
        if origins.is_empty() {
            return None;
        }
        let items: Vec<RouteItem> = origins
            .into_iter()
            .map(|origin| RouteItem {
                origin,
                route: self.advert(origin, peer),
            })
            .collect();
        self.sent_at.insert(peer, now);
        self.stats.frames_sent = self.stats.frames_sent.saturating_add(1);
        self.stats.items_sent = self
            .stats
            .items_sent
            .saturating_add(u64::try_from(items.len()).unwrap_or(u64::MAX));
        Some(items)
    }

    /// The peer's previous route frame is still queued: what is due waits one more interval
    /// (and goes in one frame then).
    pub(super) fn defer(&mut self, peer: PeerId, now: Time) {
        if self.due.contains_key(&peer) {
            self.sent_at.insert(peer, now);
        }
    }

    /// Peers with route items due.
    pub(super) fn peers_due(&self) -> Vec<PeerId> {
        self.due
            .iter()
            .filter(|(_, d)| !d.is_empty())
            .map(|(&p, _)| p)
            .collect()
    }

    /// When routing next has work: a peer's interval ending with items due, or a hold-down
    /// ending. (The refresh is not a timer — a network at rest stays at rest; it runs with the
    /// next frame, publication or timeout after it is due.)
    pub(super) fn next_timeout(&self) -> Option<Time> {
        let interval = self.cfg.advert_interval;
        let sends = self
            .due
            .iter()
            .filter(|(_, d)| !d.is_empty())
            .map(|(p, _)| {
                self.sent_at
                    .get(p)
                    .map_or(0, |&t| t.saturating_add(interval))
            });
        let holds = self
            .held
            .values()
            .map(|&t| t.saturating_add(self.cfg.hold_down));
        sends.chain(holds).min()
    }
}

/// The size class of a subtree whose children are the peers that told us "through you":
/// `log2` of 1 (this node) + 2^class of each child.
fn subtree_class(heard: &BTreeMap<PeerId, RouteAdvert>) -> u8 {
    let size = heard.values().fold(1u64, |size, advert| match advert {
        RouteAdvert::ViaYou(class) => size.saturating_add(1u64 << (*class).min(MAX_SUBTREE_CLASS)),
        _ => size,
    });
    u8::try_from(size.ilog2())
        .unwrap_or(MAX_SUBTREE_CLASS)
        .min(MAX_SUBTREE_CLASS)
}
