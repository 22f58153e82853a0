//! Per-peer state of the engine: send queues by priority class (indexed, so dedup and removal
//! never scan a queue that does not hold the message), sends in flight, RTT and failure
//! statistics, and what the peer costs us in fetches.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::Time;
use crate::links::LinkBudget;
use crate::policy::{MessageKind, Priority};
use crate::wire::{AnnounceItem, Frame, LinkItem, LinkOp, MessageId, Payload, RouteItem};

/// One unit of work queued to a peer.
#[derive(Clone, Debug)]
pub(crate) enum Item {
    /// Send the full message.
    Push {
        id: MessageId,
        kind: MessageKind,
        /// Hops to write in the frame (the sender's own hop count).
        hops: u32,
        /// Routing id of the message's creator, when this engine routes.
        origin: Option<u64>,
        payload: Payload,
        /// Part of a plan: its delivery counts towards the plan's quorum and it may be cancelled.
        planned: bool,
    },
    /// Tell the peer we have the message.
    Announce {
        id: MessageId,
        kind: MessageKind,
        size: u32,
    },
    /// Ask the peer for the message.
    Request { id: MessageId },
    /// Spreading-tree control about the link, prompted by the message.
    Link {
        id: MessageId,
        kind: MessageKind,
        op: LinkOp,
    },
    /// Distance-vector routes (at most one such item is queued per peer: it is keyed by the
    /// zero id, which names no message).
    Routes { items: Vec<RouteItem> },
}

/// The id a [`Item::Routes`] is keyed by.
pub(crate) const ROUTES_KEY: MessageId = MessageId([0; 32]);

impl Item {
    /// The message the item is about.
    pub(crate) fn id(&self) -> MessageId {
        match self {
            Item::Push { id, .. }
            | Item::Announce { id, .. }
            | Item::Request { id }
            | Item::Link { id, .. } => *id,
            Item::Routes { .. } => ROUTES_KEY,
        }
    }

    /// Bytes the item adds to a frame (an estimate that is exact for pushes).
    pub(crate) fn wire_len(&self) -> usize {
        match self {
            Item::Push {
                payload, origin, ..
            } => 45 + if origin.is_some() { 8 } else { 0 } + payload.len(),
            Item::Announce { .. } => 38,
            Item::Request { .. } => 32,
            Item::Link { .. } => 34,
            Item::Routes { items } => 3 + items.len().saturating_mul(12),
        }
    }

    /// True if the item may share a batch frame with others.
    pub(crate) fn batchable(&self, threshold: usize) -> bool {
        match self {
            Item::Push { payload, .. } => payload.len() < threshold,
            Item::Announce { .. }
            | Item::Request { .. }
            | Item::Link { .. }
            | Item::Routes { .. } => true,
        }
    }

    /// What the queue index knows the item by: at most one item per key is queued.
    pub(crate) fn key(&self) -> (Tag, MessageId) {
        let tag = match self {
            Item::Push { .. } => Tag::Push,
            Item::Announce { .. } => Tag::Announce,
            Item::Request { .. } => Tag::Request,
            Item::Link {
                op: LinkOp::Prune, ..
            } => Tag::Prune,
            Item::Link {
                op: LinkOp::Graft, ..
            } => Tag::Graft,
            Item::Routes { .. } => Tag::Routes,
        };
        (tag, self.id())
    }
}

/// The kind of a queued [`Item`], without its contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Tag {
    Push,
    Announce,
    Request,
    Prune,
    Graft,
    Routes,
}

/// An item waiting in a queue, with the timeout its send will get.
#[derive(Clone, Debug)]
pub(crate) struct Queued {
    pub(crate) item: Item,
    pub(crate) timeout: Time,
    /// When it was queued, in the engine's order of queueing (across all peers).
    pub(crate) seq: u64,
}

/// A transmission handed to the driver and not yet completed.
#[derive(Debug)]
pub(crate) struct Inflight {
    pub(crate) send_id: u64,
    pub(crate) started: Time,
    pub(crate) deadline: Time,
    pub(crate) items: Vec<Item>,
    /// Small enough that its completion time is a round-trip sample.
    pub(crate) rtt_sample: bool,
}

/// Everything the engine tracks about one connected peer.
#[derive(Debug, Default)]
pub(crate) struct PeerState {
    /// One FIFO per priority class, indexed by [`Priority::index`].
    queues: [VecDeque<Queued>; 3],
    /// Keys of every queued item: dedup and "is it queued?" in O(1), so a frame of many items
    /// costs linear, not quadratic, time.
    queued_keys: HashSet<(Tag, MessageId)>,
    inflight: Vec<Inflight>,
    /// Pushes in flight per message id.
    inflight_pushes: HashMap<MessageId, u32>,
    pub(crate) srtt_us: Option<u32>,
    failures: VecDeque<Time>,
    /// Fetches this peer is an announcer of.
    pub(crate) fetches: usize,
    /// Announced bytes of the fetches currently asked of this peer.
    pub(crate) fetch_bytes: u64,
    /// PRUNE / GRAFT items this peer may still make us hear.
    pub(crate) link_in: LinkBudget,
    /// PRUNE / GRAFT items we may still send this peer.
    pub(crate) link_out: LinkBudget,
    /// The link is on a spreading tree, as far as the engine saw: a GRAFT crossed it (either
    /// way) or the peer pushed us a first copy unasked, and no PRUNE crossed it since.
    pub(crate) tree: bool,
    /// Duplicates this tree link pushed since it last brought a first copy.
    pub(crate) duplicate_streak: u32,
}

impl PeerState {
    /// Items queued and not yet handed to the driver.
    pub(crate) fn queued(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }

    /// Queued items plus transmissions in flight.
    pub(crate) fn depth(&self) -> usize {
        self.queued() + self.inflight.len()
    }

    /// Items queued plus items of transmissions in flight (what the peer's queues hold).
    pub(crate) fn items_held(&self) -> usize {
        self.queued() + self.inflight.iter().map(|f| f.items.len()).sum::<usize>()
    }

    /// Transmissions in flight.
    pub(crate) fn inflight_len(&self) -> usize {
        self.inflight.len()
    }

    /// Deadlines of the transmissions in flight.
    pub(crate) fn inflight_deadlines(&self) -> impl Iterator<Item = Time> + '_ {
        self.inflight.iter().map(|f| f.deadline)
    }

    /// Queues `item` unless the same kind of item for the same message is already queued.
    pub(crate) fn enqueue(
        &mut self,
        priority: Priority,
        item: Item,
        timeout: Time,
        seq: u64,
    ) -> bool {
        if !self.queued_keys.insert(item.key()) {
            return false;
        }
        self.queues[priority.index()].push_back(Queued { item, timeout, seq });
        true
    }

    /// The class and queueing order of the item [`PeerState::take_next`] would take first.
    pub(crate) fn head_key(&self) -> Option<(usize, u64)> {
        Priority::ALL
            .into_iter()
            .find_map(|p| self.queues[p.index()].front().map(|q| (p.index(), q.seq)))
    }

    /// True if a push of `id` is queued or in flight.
    pub(crate) fn has_routes_queued(&self) -> bool {
        self.queued_keys.contains(&(Tag::Routes, ROUTES_KEY))
    }

    pub(crate) fn has_push(&self, id: &MessageId) -> bool {
        self.queued_keys.contains(&(Tag::Push, *id)) || self.inflight_pushes.contains_key(id)
    }

    /// Removes the queued items about `id` whose tag is in `tags`; returns how many. Queues
    /// that hold none of them are not scanned.
    pub(crate) fn remove_queued(&mut self, id: &MessageId, tags: &[Tag]) -> usize {
        let mut removed = 0;
        for tag in tags {
            if !self.queued_keys.remove(&(*tag, *id)) {
                continue;
            }
            for queue in &mut self.queues {
                if let Some(pos) = queue.iter().position(|q| q.item.key() == (*tag, *id)) {
                    queue.remove(pos);
                    removed += 1;
                    break;
                }
            }
        }
        removed
    }

    /// Cancels the queued *planned* push of `id`, if any: it becomes `replacement` in place
    /// (unless an item with the replacement's key is already queued) or is removed. Returns
    /// whether a push was cancelled.
    pub(crate) fn cancel_planned_push(
        &mut self,
        id: &MessageId,
        replacement: Option<Item>,
    ) -> bool {
        let key = (Tag::Push, *id);
        if !self.queued_keys.contains(&key) {
            return false;
        }
        let replacement = replacement.filter(|r| !self.queued_keys.contains(&r.key()));
        for queue in &mut self.queues {
            let Some(pos) = queue.iter().position(
                |q| matches!(q.item, Item::Push { id: i, planned: true, .. } if i == *id),
            ) else {
                continue;
            };
            self.queued_keys.remove(&key);
            match replacement {
                Some(new) => {
                    self.queued_keys.insert(new.key());
                    if let Some(q) = queue.get_mut(pos) {
                        q.item = new;
                    }
                }
                None => {
                    queue.remove(pos);
                }
            }
            return true;
        }
        false
    }

    /// Hands a transmission to the driver.
    pub(crate) fn start(&mut self, inflight: Inflight) {
        for item in &inflight.items {
            if let Item::Push { id, .. } = item {
                *self.inflight_pushes.entry(*id).or_default() += 1;
            }
        }
        self.inflight.push(inflight);
    }

    /// Takes the transmission `send_id` back (completed or failed).
    pub(crate) fn finish(&mut self, send_id: u64) -> Option<Inflight> {
        let pos = self.inflight.iter().position(|f| f.send_id == send_id)?;
        let done = self.inflight.swap_remove(pos);
        self.forget_inflight(&done);
        Some(done)
    }

    /// Takes back every transmission whose deadline is at or before `now`.
    pub(crate) fn take_expired(&mut self, now: Time) -> Vec<Inflight> {
        let (expired, live): (Vec<Inflight>, Vec<Inflight>) = std::mem::take(&mut self.inflight)
            .into_iter()
            .partition(|f| f.deadline <= now);
        self.inflight = live;
        for done in &expired {
            self.forget_inflight(done);
        }
        expired
    }

    fn forget_inflight(&mut self, done: &Inflight) {
        for item in &done.items {
            if let Item::Push { id, .. } = item
                && let Some(n) = self.inflight_pushes.get_mut(id)
            {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.inflight_pushes.remove(id);
                }
            }
        }
    }

    /// Takes the next transmission's items: the head of the highest non-empty class, plus,
    /// if it is batchable, the following batchable items of that class while the frame stays
    /// within `max_bytes`. Returns the class, the items and the largest timeout among them.
    pub(crate) fn take_next(
        &mut self,
        threshold: usize,
        max_bytes: usize,
    ) -> Option<(Priority, Vec<Item>, Time)> {
        let priority = Priority::ALL
            .into_iter()
            .find(|p| !self.queues[p.index()].is_empty())?;
        let queue = &mut self.queues[priority.index()];
        let first = queue.pop_front()?;
        self.queued_keys.remove(&first.item.key());
        let mut timeout = first.timeout;
        let mut bytes = first.item.wire_len();
        let batch = first.item.batchable(threshold);
        let mut items = vec![first.item];
        if batch {
            while let Some(next) = queue.front() {
                if !next.item.batchable(threshold) || bytes + next.item.wire_len() > max_bytes {
                    break;
                }
                bytes += next.item.wire_len();
                timeout = timeout.max(next.timeout);
                if let Some(next) = queue.pop_front() {
                    self.queued_keys.remove(&next.item.key());
                    items.push(next.item);
                }
            }
        }
        Some((priority, items, timeout))
    }

    /// Feeds a round-trip sample into the smoothed RTT (RFC 6298 gain 1/8).
    pub(crate) fn rtt_sample(&mut self, sample_us: u32) {
        self.srtt_us = Some(match self.srtt_us {
            None => sample_us,
            Some(s) => ((u64::from(s) * 7 + u64::from(sample_us)) / 8) as u32,
        });
    }

    /// Records a failed or timed-out send.
    pub(crate) fn record_failure(&mut self, now: Time, window: Time) {
        self.failures.push_back(now);
        self.prune_failures(now, window);
    }

    /// Failures within `window` before `now`.
    pub(crate) fn recent_failures(&self, now: Time, window: Time) -> u32 {
        let n = self
            .failures
            .iter()
            .filter(|&&t| t.saturating_add(window) > now)
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    fn prune_failures(&mut self, now: Time, window: Time) {
        while self
            .failures
            .front()
            .is_some_and(|&t| t.saturating_add(window) <= now)
        {
            self.failures.pop_front();
        }
    }
}

/// Builds the frame for a transmission: announces and requests are merged into one frame
/// each, pushes stay separate, and more than one frame becomes a batch.
pub(crate) fn frame_for(items: &[Item]) -> Frame {
    let mut announces = Vec::new();
    let mut requests = Vec::new();
    let mut links = Vec::new();
    let mut frames = Vec::new();
    for item in items {
        match item {
            Item::Push {
                id,
                kind,
                hops,
                origin,
                payload,
                ..
            } => frames.push(Frame::Push {
                id: *id,
                kind: *kind,
                hops: *hops,
                origin: *origin,
                payload: payload.clone(),
            }),
            Item::Announce { id, kind, size } => announces.push(AnnounceItem {
                id: *id,
                kind: *kind,
                size: *size,
            }),
            Item::Request { id } => requests.push(*id),
            Item::Link { id, kind, op } => links.push(LinkItem {
                id: *id,
                kind: *kind,
                op: *op,
            }),
            Item::Routes { items } => frames.push(Frame::Routes {
                items: items.clone(),
            }),
        }
    }
    if !links.is_empty() {
        frames.insert(0, Frame::Link { items: links });
    }
    if !requests.is_empty() {
        frames.insert(0, Frame::Request { ids: requests });
    }
    if !announces.is_empty() {
        frames.insert(0, Frame::Announce { items: announces });
    }
    if frames.len() == 1 {
        frames.pop().unwrap_or(Frame::Batch { frames: Vec::new() })
    } else {
        Frame::Batch { frames }
    }
}
