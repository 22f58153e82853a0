//! The store of recent messages (served to requests, expiring) and who is known to have them.

use std::collections::BTreeSet;

use super::GossipEngine;
use crate::peer::Tag;
use crate::policy::{MessageKind, Policy, Priority};
use crate::wire::{MessageId, Payload};
use crate::{PeerId, Time};

#[derive(Debug)]
pub(super) struct Stored {
    pub(super) kind: MessageKind,
    pub(super) payload: Payload,
    /// Hops the message travelled to reach this node.
    pub(super) hops: u32,
    pub(super) expires: Time,
    /// Peers known to have it.
    pub(super) have: BTreeSet<PeerId>,
    pub(super) quorum: u32,
    pub(super) pushes_done: u32,
    pub(super) priority: Priority,
    pub(super) timeout: Time,
    /// The first copy was asked for, and when its first announce came: a copy a tree link
    /// pushes later is late, not redundant (and its gap is measured).
    pub(super) pulled: Option<Time>,
    /// Routing id of the node that created it, when known ([`super::EngineConfig::routing`]).
    pub(super) origin: Option<u64>,
}

impl<P: Policy> GossipEngine<P> {
    /// Records that `peer` has `id` and drops queued pushes/announces of it to that peer.
    pub(super) fn note_has(&mut self, id: MessageId, peer: PeerId) {
        if let Some(msg) = self.store.get_mut(&id) {
            msg.have.insert(peer);
        }
        if let Some(state) = self.peers.get_mut(&peer) {
            let dropped = state.remove_queued(&id, &[Tag::Push, Tag::Announce]);
            self.stats.redundant_dropped += dropped as u64;
        }
    }

    pub(super) fn store_insert(
        &mut self,
        id: MessageId,
        kind: MessageKind,
        payload: Payload,
        hops: u32,
        now: Time,
    ) {
        let expires = now.saturating_add(self.cfg.store_ttl);
        self.store.insert(
            id,
            Stored {
                kind,
                payload,
                hops,
                expires,
                have: BTreeSet::new(),
                quorum: 0,
                pushes_done: 0,
                priority: kind.default_priority(),
                timeout: self.cfg.serve_timeout,
                pulled: None,
                origin: None,
            },
        );
        self.store_order.push_back((expires, id));
        while self.store.len() > self.cfg.store_capacity.max(1) {
            let Some((_, old)) = self.store_order.pop_front() else {
                break;
            };
            self.store.remove(&old);
            // An evicted message can no longer be relayed: its verdict is not awaited either
            // (or a peer's pushes would grow this map without bound).
            self.awaiting.remove(&old);
        }
    }

    pub(super) fn expire(&mut self, now: Time) {
        self.seen.expire(now);
        while let Some(&(expires, id)) = self.store_order.front() {
            if expires > now {
                break;
            }
            self.store_order.pop_front();
            if self.store.get(&id).is_some_and(|m| m.expires == expires) {
                self.store.remove(&id);
                // A verdict that never came: the message is gone, forget the wait too.
                self.awaiting.remove(&id);
            }
        }
    }
}
