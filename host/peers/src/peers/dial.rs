//! Dialing: the next address worth a connection attempt, pending dials that expired, and what
//! a failed connection costs the peer.

use super::*;

impl PeerManager {
    /// Records a failed dial, handshake or connection and schedules the next attempt, or
    /// forgets the peer.
    pub(super) fn fail(&mut self, node: NodeId, now: Time) {
        let over_capacity = self.book.len() > self.config.max_known;
        let Some(peer) = self.book.get_mut(&node) else {
            return;
        };
        let (previous, dialed) = match peer.state {
            PeerState::Disconnected { .. } => return,
            PeerState::Connecting { addr, failures, .. } => (failures, Some(addr)),
            PeerState::Handshaking { failures, .. } => (failures, None),
            PeerState::Connected {
                since, failures, ..
            } => {
                let stayed = now.saturating_sub(since) >= self.config.reset_backoff_after;
                (if stayed { 0 } else { failures }, None)
            }
        };
        let failures = previous.saturating_add(1);
        if let Some(addr) = dialed {
            for known in peer.addrs.iter_mut().filter(|a| a.addr == addr) {
                known.confirmed = false;
            }
        }
        let forget = !peer.has_dial_candidate()
            || (!peer.is_bootstrap()
                && (failures >= self.config.forget_after_failures || over_capacity));
        if forget {
            self.book.remove(&node);
            return;
        }
        let delay = self.config.backoff.delay(failures, &mut self.rng);
        let ban = self.bans.get(&node).copied().unwrap_or(0);
        peer.exchange_pending = false;
        peer.state = PeerState::Disconnected {
            next_attempt_at: now.saturating_add(delay).max(ban),
            failures,
        };
    }

    pub(super) fn expire_pending(&mut self, now: Time) -> Option<Action> {
        let (node, reason) = self.book.iter().find_map(|(node, peer)| match peer.state {
            PeerState::Connecting { deadline, .. } if deadline <= now => {
                Some((*node, DisconnectReason::ConnectTimeout))
            }
            PeerState::Handshaking { deadline, .. } if deadline <= now => {
                Some((*node, DisconnectReason::HandshakeTimeout))
            }
            _ => None,
        })?;
        self.fail(node, now);
        Some(Action::Disconnect { node, reason })
    }

    /// Dials the due peer with the fewest failures (random among equals) while below target.
    pub(super) fn next_dial(&mut self, now: Time) -> Option<Action> {
        let counts = self.counts();
        if counts.outbound() >= self.config.target_outbound {
            return None;
        }
        let due: Vec<(NodeId, u32)> = self
            .book
            .iter()
            .filter(|(node, peer)| peer.has_dial_candidate() && self.ban_end(node, now).is_none())
            .filter_map(|(node, peer)| match peer.state {
                PeerState::Disconnected {
                    next_attempt_at,
                    failures,
                } if next_attempt_at <= now => Some((*node, failures)),
                _ => None,
            })
            .collect();
        let fewest = due.iter().map(|(_, failures)| *failures).min()?;
        let best: Vec<NodeId> = due
            .iter()
            .filter(|(_, failures)| *failures == fewest)
            .map(|(node, _)| *node)
            .collect();
        let node = *best.choose(&mut self.rng)?;
        let deadline = now.saturating_add(self.config.connect_timeout);
        let peer = self.book.get_mut(&node)?;
        let addr = peer.dial_addr(fewest)?;
        peer.state = PeerState::Connecting {
            addr,
            deadline,
            failures: fewest,
        };
        Some(Action::Dial { node, addr })
    }
}
