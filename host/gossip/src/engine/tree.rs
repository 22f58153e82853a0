//! The spreading-tree (PlumTree) mechanics a policy asks for with
//! [`Policy::link_control`]: PRUNE / GRAFT sent and heard within each peer's budget, the graft
//! timers per size class, and the graft itself.

use super::GossipEngine;
use crate::peer::Item;
use crate::policy::{MessageKind, Policy, PolicyEvent};
use crate::wire::{LinkItem, LinkOp, MessageId};
use crate::{PeerId, Time};

use super::id_head;

impl<P: Policy> GossipEngine<P> {
    /// Queues a PRUNE or GRAFT about `id` to `peer`, within the peer's outgoing budget.
    pub(super) fn send_link(
        &mut self,
        peer: PeerId,
        id: MessageId,
        kind: MessageKind,
        op: LinkOp,
        now: Time,
    ) {
        let (burst, rate) = (self.cfg.link_burst, self.cfg.link_per_sec);
        let timeout = self.cfg.serve_timeout;
        let Some(state) = self.peers.get_mut(&peer) else {
            return;
        };
        if !state.link_out.take(now, burst, rate) {
            return;
        }
        // A GRAFT puts the link on the tree (the peer will push to us), a PRUNE takes it off.
        state.tree = op == LinkOp::Graft;
        self.queued_seq = self.queued_seq.saturating_add(1);
        if state.enqueue(
            kind.default_priority(),
            Item::Link { id, kind, op },
            timeout,
            self.queued_seq,
        ) {
            match op {
                LinkOp::Prune => self.stats.prunes_sent = self.stats.prunes_sent.saturating_add(1),
                LinkOp::Graft => self.stats.grafts_sent = self.stats.grafts_sent.saturating_add(1),
            }
        }
    }

    /// A peer's PRUNE / GRAFT: heard by the policy as `duplicate` / `missing` of that link,
    /// within the peer's budget (over it the item is ignored, not a fault).
    pub(super) fn on_link(&mut self, from: PeerId, item: LinkItem, now: Time) {
        let (burst, rate) = (self.cfg.link_burst, self.cfg.link_per_sec);
        let Some(state) = self.peers.get_mut(&from) else {
            return;
        };
        if !state.link_in.take(now, burst, rate) {
            self.stats.link_ignored = self.stats.link_ignored.saturating_add(1);
            return;
        }
        self.stats.link_heard = self.stats.link_heard.saturating_add(1);
        state.tree = item.op == LinkOp::Graft;
        let (message, kind) = (id_head(&item.id), item.kind);
        self.policy.on_event(&match item.op {
            LinkOp::Prune => PolicyEvent::Duplicate {
                peer: from,
                message,
                kind,
            },
            LinkOp::Graft => PolicyEvent::Missing {
                peer: from,
                message,
                kind,
            },
        });
    }

    /// The graft timer of a waited-for announce ran out (or, on no tree link yet, an announce
    /// came): the message is missing. The best announcer is asked for it; unless the tree has
    /// delivered since the last miss ([`EngineConfig::graft_after_misses`]), it is also told
    /// GRAFT and the policy hears `missing` for that link.
    ///
    /// [`EngineConfig::graft_after_misses`]: super::EngineConfig::graft_after_misses
    pub(super) fn graft(&mut self, id: MessageId, now: Time) {
        let Some(fetch) = self.fetches.get_mut(&id) else {
            return;
        };
        let joining = !fetch.waiting;
        fetch.waiting = false;
        let kind = fetch.kind;
        self.next_fetch_attempt(id, now);
        if !joining && self.tree_misses < self.cfg.graft_after_misses {
            // The tree delivered since the last miss: pull this one, keep the tree.
            self.tree_misses = self.tree_misses.saturating_add(1);
            self.stats.timer_pulls = self.stats.timer_pulls.saturating_add(1);
            return;
        }
        let Some(peer) = self.fetches.get(&id).and_then(|f| f.current) else {
            return;
        };
        if joining {
            self.stats.joins = self.stats.joins.saturating_add(1);
        } else {
            self.stats.missing = self.stats.missing.saturating_add(1);
        }
        self.policy.on_event(&PolicyEvent::Missing {
            peer,
            message: id_head(&id),
            kind,
        });
        self.send_link(peer, id, kind, LinkOp::Graft, now);
    }
}
