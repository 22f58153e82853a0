//! Announce → request → push: the fetch of each message announced to this node (which
//! announcer is asked, when again, and for how long an answer is waited on), and the answers
//! to other nodes' requests.

use super::GossipEngine;
use crate::error::PeerFault;
use crate::peer::{Item, Tag};
use crate::policy::{MessageKind, Policy};
use crate::wire::{AnnounceItem, MessageId};
use crate::{PeerId, Time};

#[derive(Debug)]
pub(super) struct Fetch {
    pub(super) kind: MessageKind,
    pub(super) size: u32,
    /// Peers that announced the id, in order of arrival.
    pub(super) announcers: Vec<PeerId>,
    /// Announcers asked in the current round.
    pub(super) tried: Vec<PeerId>,
    pub(super) attempts: u32,
    pub(super) current: Option<PeerId>,
    /// The current request was acknowledged.
    pub(super) acked: bool,
    /// When the current request was queued.
    pub(super) asked_at: Time,
    pub(super) deadline: Time,
    /// Waiting for the eager copy (the graft timer runs until `deadline`); nothing asked yet.
    pub(super) waiting: bool,
    /// When the first announce arrived.
    pub(super) announced_at: Time,
}

impl<P: Policy> GossipEngine<P> {
    pub(super) fn on_announce(
        &mut self,
        from: PeerId,
        item: AnnounceItem,
        now: Time,
    ) -> Result<(), PeerFault> {
        let id = item.id;
        if item.size > self.cfg.max_announced_size {
            return Err(PeerFault::AnnouncedSizeTooLarge {
                id,
                size: item.size,
                limit: self.cfg.max_announced_size,
            });
        }
        if self.seen.contains(&id, now) || self.store.contains_key(&id) {
            self.note_has(id, from);
            return Ok(());
        }
        let per_peer = self.cfg.max_fetches_per_peer;
        let Some(announcer) = self.peers.get_mut(&from) else {
            return Ok(());
        };
        let at_peer_cap = announcer.fetches >= per_peer;
        if let Some(fetch) = self.fetches.get_mut(&id) {
            // Joining a fetch costs one slot too, but an honest peer can announce what many
            // others announce: over its cap it is just not asked.
            if at_peer_cap || fetch.announcers.contains(&from) {
                return Ok(());
            }
            fetch.announcers.push(from);
            announcer.fetches += 1;
            if fetch.waiting {
                // Nothing asked yet: the graft timer decides when, and whom.
                return Ok(());
            }
            // Hedge: if the unacknowledged request is expected to be acknowledged clearly later
            // (by `request_hedge_margin`) than a request to the new announcer would be, ask the
            // new announcer too.
            let rtt = |p: Option<PeerId>| {
                p.and_then(|p| self.peers.get(&p))
                    .and_then(|s| s.srtt_us)
                    .map_or(Time::from(self.cfg.initial_rtt_us), Time::from)
            };
            let (current, new) = (rtt(fetch.current), rtt(Some(from)));
            let margin = self.cfg.request_hedge_margin;
            if !fetch.acked
                && fetch.asked_at.saturating_add(current)
                    > now.saturating_add(2 * new).saturating_add(margin)
            {
                fetch.tried.retain(|&p| p != from);
                self.next_fetch_attempt(id, now);
            }
            return Ok(());
        }
        if at_peer_cap {
            return Err(PeerFault::TooManyFetches { limit: per_peer });
        }
        if self.fetches.len() >= self.cfg.max_fetches {
            self.stats.announces_dropped += 1;
            return Ok(());
        }
        announcer.fetches += 1;
        // A tree-building policy pushes small messages along its tree and announces them on
        // the other links: on the tree, wait for the tree's copy before pulling (the graft
        // timer); on no tree link yet, pull at once and graft the announcer (join the tree).
        // Larger messages it announces to every peer before sending: pulled at once. A routing
        // node waits for every announced message: its parent on the origin's tree pushes it.
        let routing = self.routes.as_ref().is_some_and(|r| r.has_routes());
        let control = self
            .policy
            .link_control()
            .filter(|c| routing || item.size <= c.announce_first_above);
        let on_tree = control.is_some() && (routing || self.peers.values().any(|s| s.tree));
        let wait = control.filter(|_| on_tree).map(|c| self.gaps.timer(&c));
        self.fetches.insert(
            id,
            Fetch {
                kind: item.kind,
                size: item.size,
                announcers: vec![from],
                tried: Vec::new(),
                attempts: 0,
                current: None,
                acked: false,
                asked_at: now,
                deadline: now.saturating_add(wait.unwrap_or(0)),
                waiting: wait.is_some(),
                announced_at: now,
            },
        );
        match (control, wait) {
            (Some(_), None) => self.graft(id, now),
            (None, _) => self.next_fetch_attempt(id, now),
            (Some(_), Some(_)) => {}
        }
        Ok(())
    }

    pub(super) fn on_request(&mut self, from: PeerId, id: MessageId) {
        if self.awaiting.contains_key(&id) {
            return;
        }
        let Some(msg) = self.store.get(&id) else {
            return;
        };
        let Some(peer) = self.peers.get_mut(&from) else {
            return;
        };
        if peer.has_push(&id) {
            return;
        }
        let item = Item::Push {
            id,
            kind: msg.kind,
            hops: msg.hops,
            origin: msg.origin,
            payload: msg.payload.clone(),
            planned: false,
        };
        self.queued_seq = self.queued_seq.saturating_add(1);
        if peer.enqueue(
            msg.kind.default_priority(),
            item,
            self.cfg.serve_timeout,
            self.queued_seq,
        ) {
            self.stats.requests_served += 1;
        }
    }

    /// Asks the best announcer of `id` not yet asked this round (fewest recent failures, then
    /// lowest RTT, then earliest announce), or gives the fetch up.
    pub(super) fn next_fetch_attempt(&mut self, id: MessageId, now: Time) {
        let window = self.cfg.failure_window;
        let initial_rtt = self.cfg.initial_rtt_us;
        let Some(fetch) = self.fetches.get_mut(&id) else {
            return;
        };
        if fetch.announcers.is_empty() || fetch.attempts >= self.cfg.max_request_attempts {
            self.drop_fetch(&id);
            self.stats.fetches_abandoned += 1;
            return;
        }
        if fetch.announcers.iter().all(|p| fetch.tried.contains(p)) {
            fetch.tried.clear();
        }
        let peers = &self.peers;
        let best = fetch
            .announcers
            .iter()
            .enumerate()
            .filter(|(_, p)| !fetch.tried.contains(p))
            .min_by_key(|&(i, p)| {
                let (failures, rtt) = peers.get(p).map_or((u32::MAX, u32::MAX), |s| {
                    (
                        s.recent_failures(now, window),
                        s.srtt_us.unwrap_or(initial_rtt),
                    )
                });
                (failures, rtt, i)
            })
            .map(|(_, p)| *p);
        let Some(peer) = best else {
            self.drop_fetch(&id);
            self.stats.fetches_abandoned += 1;
            return;
        };
        let previous = fetch.current.replace(peer);
        let size = u64::from(fetch.size);
        fetch.tried.push(peer);
        let round = fetch.attempts.min(6);
        fetch.attempts += 1;
        fetch.acked = false;
        fetch.asked_at = now;
        // Never shorter than two round trips to the peer asked: on a loaded host (or a slow
        // link) a fixed timeout fires before an honest answer can arrive, and every early
        // re-request becomes a duplicate payload.
        let srtt = self
            .peers
            .get(&peer)
            .and_then(|s| s.srtt_us)
            .map_or(0, Time::from);
        let ack_timeout = self
            .cfg
            .request_ack_timeout
            .max(srtt.saturating_mul(2))
            .saturating_mul(1 << round);
        let priority = fetch.kind.default_priority();
        // Until the announcer acknowledges the request (which may first wait in our queue to
        // it), only the acknowledgement timeout applies.
        fetch.deadline = now.saturating_add(ack_timeout);
        // A request still queued to the previous announcer is no longer wanted; the bytes
        // asked move with the request.
        if let Some(state) = previous.and_then(|p| self.peers.get_mut(&p)) {
            state.fetch_bytes = state.fetch_bytes.saturating_sub(size);
            if previous != Some(peer) {
                state.remove_queued(&id, &[Tag::Request]);
            }
        }
        if let Some(state) = self.peers.get_mut(&peer) {
            state.fetch_bytes = state.fetch_bytes.saturating_add(size);
            self.queued_seq = self.queued_seq.saturating_add(1);
            if state.enqueue(priority, Item::Request { id }, ack_timeout, self.queued_seq) {
                self.stats.requests_sent += 1;
            }
        }
    }

    /// Time to wait for an acknowledged request's answer from `peer`: grows with the bytes
    /// being fetched from that peer (so no other peer's announces can stretch it), doubled per
    /// attempt round, at most [`EngineConfig::max_response_timeout`].
    pub(super) fn response_timeout(&self, peer: PeerId, round: u32) -> Time {
        let bytes = self.peers.get(&peer).map_or(0, |s| s.fetch_bytes);
        let kib = bytes.div_ceil(1024);
        self.cfg
            .request_timeout
            .saturating_add(kib.saturating_mul(self.cfg.request_timeout_per_kib))
            .saturating_mul(1 << round.min(6))
            .min(self.cfg.max_response_timeout)
    }

    /// Removes a fetch and releases what it counted against its announcers.
    pub(super) fn drop_fetch(&mut self, id: &MessageId) -> Option<Fetch> {
        let fetch = self.fetches.remove(id)?;
        for peer in &fetch.announcers {
            if let Some(state) = self.peers.get_mut(peer) {
                state.fetches = state.fetches.saturating_sub(1);
            }
        }
        if let Some(state) = fetch.current.and_then(|p| self.peers.get_mut(&p)) {
            state.fetch_bytes = state.fetch_bytes.saturating_sub(u64::from(fetch.size));
        }
        Some(fetch)
    }

    /// Ends a fetch because the message arrived; returns the peers that announced it. A
    /// message that arrived while the graft timer ran is a measured gap.
    pub(super) fn finish_fetch(&mut self, id: &MessageId, now: Time) -> Vec<PeerId> {
        let Some(fetch) = self.drop_fetch(id) else {
            return Vec::new();
        };
        if fetch.waiting {
            self.gaps.sample(now.saturating_sub(fetch.announced_at));
        }
        for peer in self.peers.values_mut() {
            peer.remove_queued(id, &[Tag::Request]);
        }
        fetch.announcers
    }

    /// The announcer got our request: now wait for the answer.
    pub(super) fn request_acked(&mut self, id: MessageId, peer: PeerId, now: Time) {
        let Some(fetch) = self.fetches.get(&id) else {
            return;
        };
        if fetch.current != Some(peer) || fetch.acked {
            return;
        }
        let round = fetch.attempts.saturating_sub(1);
        let deadline = now.saturating_add(self.response_timeout(peer, round));
        if let Some(fetch) = self.fetches.get_mut(&id) {
            fetch.acked = true;
            fetch.deadline = deadline;
        }
    }
}
