//! Per-peer state of the engine: send queues by priority class, sends in flight, RTT and
//! failure statistics.

use std::collections::VecDeque;

use crate::Time;
use crate::policy::{MessageKind, Priority};
use crate::wire::{AnnounceItem, Frame, MessageId, Payload};

/// One unit of work queued to a peer.
#[derive(Clone, Debug)]
pub(crate) enum Item {
    /// Send the full message.
    Push {
        id: MessageId,
        kind: MessageKind,
        /// Hops to write in the frame (the sender's own hop count).
        hops: u32,
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
}

impl Item {
    /// The message the item is about.
    pub(crate) fn id(&self) -> MessageId {
        match self {
            Item::Push { id, .. } | Item::Announce { id, .. } | Item::Request { id } => *id,
        }
    }

    /// Bytes the item adds to a frame (an estimate that is exact for pushes).
    pub(crate) fn wire_len(&self) -> usize {
        match self {
            Item::Push { payload, .. } => 45 + payload.len(),
            Item::Announce { .. } => 38,
            Item::Request { .. } => 32,
        }
    }

    /// True if the item may share a batch frame with others.
    pub(crate) fn batchable(&self, threshold: usize) -> bool {
        match self {
            Item::Push { payload, .. } => payload.len() < threshold,
            Item::Announce { .. } | Item::Request { .. } => true,
        }
    }

    fn same_as(&self, other: &Item) -> bool {
        matches!(
            (self, other),
            (Item::Push { .. }, Item::Push { .. })
                | (Item::Announce { .. }, Item::Announce { .. })
                | (Item::Request { .. }, Item::Request { .. })
        ) && self.id() == other.id()
    }
}

/// An item waiting in a queue, with the timeout its send will get.
#[derive(Clone, Debug)]
pub(crate) struct Queued {
    pub(crate) item: Item,
    pub(crate) timeout: Time,
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
    pub(crate) queues: [VecDeque<Queued>; 3],
    pub(crate) inflight: Vec<Inflight>,
    pub(crate) srtt_us: Option<u32>,
    failures: VecDeque<Time>,
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

    /// Queues `item` unless the same kind of item for the same message is already queued.
    pub(crate) fn enqueue(&mut self, priority: Priority, item: Item, timeout: Time) -> bool {
        if self.queues.iter().flatten().any(|q| q.item.same_as(&item)) {
            return false;
        }
        self.queues[priority.index()].push_back(Queued { item, timeout });
        true
    }

    /// True if a push of `id` is queued or in flight.
    pub(crate) fn has_push(&self, id: &MessageId) -> bool {
        let is_push = |item: &Item| matches!(item, Item::Push { id: i, .. } if i == id);
        self.queues.iter().flatten().any(|q| is_push(&q.item))
            || self.inflight.iter().flat_map(|f| &f.items).any(is_push)
    }

    /// Removes queued items matching `pred`; returns how many.
    pub(crate) fn remove_queued(&mut self, mut pred: impl FnMut(&Item) -> bool) -> usize {
        let mut removed = 0;
        for queue in &mut self.queues {
            queue.retain(|q| {
                let hit = pred(&q.item);
                removed += usize::from(hit);
                !hit
            });
        }
        removed
    }

    /// Replaces queued items: `f` returns `Some(new)` to swap an item in place.
    pub(crate) fn replace_queued(&mut self, mut f: impl FnMut(&Item) -> Option<Item>) -> usize {
        let mut replaced = 0;
        for queue in &mut self.queues {
            for q in queue.iter_mut() {
                if let Some(new) = f(&q.item) {
                    q.item = new;
                    replaced += 1;
                }
            }
        }
        replaced
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
    let mut frames = Vec::new();
    for item in items {
        match item {
            Item::Push {
                id,
                kind,
                hops,
                payload,
                ..
            } => frames.push(Frame::Push {
                id: *id,
                kind: *kind,
                hops: *hops,
                payload: payload.clone(),
            }),
            Item::Announce { id, kind, size } => announces.push(AnnounceItem {
                id: *id,
                kind: *kind,
                size: *size,
            }),
            Item::Request { id } => requests.push(*id),
        }
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
