//! Peer exchange: answering a peer's request for addresses, merging the addresses it sends
//! back, and choosing when and whom to ask next.

use super::*;

impl PeerManager {
    /// `from` asks for addresses: up to [`PeerConfig::exchange_max`] random known-good
    /// (confirmed) addresses, one per node, never `from` itself, never a banned peer.
    pub fn handle_peers_request(
        &mut self,
        from: NodeId,
        now: Time,
    ) -> Result<Vec<PeerAddr>, PeerError> {
        self.require_connected(from)?;
        let mut good: Vec<PeerAddr> = self
            .book
            .iter()
            .filter(|(node, _)| **node != from && self.ban_end(node, now).is_none())
            .filter_map(|(node, peer)| {
                let known = peer.addrs.iter().find(|a| a.confirmed)?;
                Some(PeerAddr {
                    node: *node,
                    addr: known.addr,
                })
            })
            .collect();
        good.shuffle(&mut self.rng);
        good.truncate(self.config.exchange_max);
        Ok(good)
    }

    /// `from` answered our [`Action::RequestPeers`]. Merges at most
    /// [`PeerConfig::exchange_max`] entries, skipping ourselves, banned peers and undialable
    /// addresses, within [`PeerConfig::max_addrs_per_node`], [`PeerConfig::max_known`] and
    /// [`PeerConfig::max_per_source`], so no peer can flood the book. New nodes are dialable
    /// at once; their addresses stay unconfirmed until a handshake over them completes.
    pub fn handle_peers_response(
        &mut self,
        from: NodeId,
        peers: Vec<PeerAddr>,
        now: Time,
    ) -> Result<MergeReport, PeerError> {
        self.require_connected(from)?;
        match self.book.get_mut(&from) {
            Some(peer) if peer.exchange_pending => peer.exchange_pending = false,
            _ => return Err(PeerError::UnsolicitedPeers { node: from }),
        }
        let source = AddrSource::Exchange { from };
        let mut from_source = self
            .book
            .values()
            .flat_map(|p| &p.addrs)
            .filter(|a| a.source == source)
            .count();
        let mut report = MergeReport {
            ignored: peers.len().saturating_sub(self.config.exchange_max),
            ..MergeReport::default()
        };
        for entry in peers.into_iter().take(self.config.exchange_max) {
            let acceptable = entry.node != self.config.local_id
                && is_dialable(entry.addr)
                && self.ban_end(&entry.node, now).is_none()
                && from_source < self.config.max_per_source;
            let book_full = self.book.len() >= self.config.max_known;
            let added = match self.book.get_mut(&entry.node) {
                _ if !acceptable => None,
                // Another peer vouches for an address that only an inbound connection gave
                // us: now it may be dialed.
                Some(peer)
                    if peer.addrs.iter().any(|a| {
                        a.addr == entry.addr && a.source == AddrSource::Inbound && !a.confirmed
                    }) =>
                {
                    for known in peer.addrs.iter_mut().filter(|a| a.addr == entry.addr) {
                        known.source = AddrSource::Exchange { from };
                    }
                    Some(&mut report.added_addrs)
                }
                Some(peer) => (!peer.has_addr(entry.addr)
                    && peer.addrs.len() < self.config.max_addrs_per_node)
                    .then(|| {
                        peer.addrs.push(exchanged(entry.addr, from));
                        &mut report.added_addrs
                    }),
                None if book_full => None,
                None => {
                    let mut peer = Peer::new(now);
                    peer.addrs.push(exchanged(entry.addr, from));
                    self.book.insert(entry.node, peer);
                    Some(&mut report.added_nodes)
                }
            };
            match added {
                Some(counter) => {
                    *counter = counter.saturating_add(1);
                    from_source = from_source.saturating_add(1);
                }
                None => report.ignored = report.ignored.saturating_add(1),
            }
        }
        Ok(report)
    }

    /// Every [`PeerConfig::exchange_interval`], while below the outbound target, asks one
    /// random connected peer for addresses.
    pub(super) fn next_exchange(&mut self, now: Time) -> Option<Action> {
        if now < self.next_exchange_at {
            return None;
        }
        self.next_exchange_at = now.saturating_add(self.config.exchange_interval);
        if self.counts().connected_outbound >= self.config.target_outbound {
            return None;
        }
        let idle: Vec<NodeId> = self
            .book
            .iter()
            .filter(|(_, p)| matches!(p.state, PeerState::Connected { .. }) && !p.exchange_pending)
            .map(|(node, _)| *node)
            .collect();
        let node = *idle.choose(&mut self.rng)?;
        let peer = self.book.get_mut(&node)?;
        peer.exchange_pending = true;
        Some(Action::RequestPeers { node })
    }

    pub(super) fn exchange_candidate(&self) -> bool {
        self.book
            .values()
            .any(|p| matches!(p.state, PeerState::Connected { .. }) && !p.exchange_pending)
    }
}
