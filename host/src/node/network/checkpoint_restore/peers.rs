//! The peers of a checkpoint sync: connecting to them, collecting their offers, choosing the
//! checkpoint to restore, and penalising a peer that misbehaved.

use super::*;
use crate::hashes::BlockHash;

impl Driver<'_> {
    fn hello(&self) -> Hello {
        let genesis_hash = self.genesis_hash();
        Hello {
            protocol_version: PROTOCOL_VERSION,
            chain_id: self.parts.genesis.chain_id.clone(),
            genesis_hash,
            head_height: 0,
            head_hash: genesis_hash,
            listen_port: self.parts.listen_port,
        }
    }

    fn genesis_hash(&self) -> BlockHash {
        match self.parts.genesis.registry() {
            Ok(registry) => self.parts.genesis.block(&registry).hash(),
            Err(_) => BlockHash::default(),
        }
    }

    /// Dials every bootstrap peer not banned, in parallel.
    pub(super) async fn connect_all(&self) -> Vec<Peer> {
        let banned: BTreeSet<NodeId> = self
            .bans
            .load(unix_ms())
            .unwrap_or_default()
            .into_iter()
            .map(|(node, _)| node)
            .collect();
        let hello = self.hello();
        let mut dials = JoinSet::new();
        for peer in self.parts.bootstrap {
            if banned.contains(&peer.node) {
                continue;
            }
            let endpoint = self.endpoint.clone();
            let limits = self.parts.transport.clone();
            let hello = hello.clone();
            let peer = *peer;
            dials.spawn(tracing::Instrument::in_current_span(async move {
                let id = identity::NodeId::from_bytes(peer.node);
                let (conn, _) = endpoint::connect(&endpoint, peer.addr, Some(id), &limits)
                    .await
                    .map_err(|e| e.to_string())?;
                let theirs =
                    handshake::exchange(&conn, id, &hello, Role::Dialer, limits.handshake_timeout)
                        .await
                        .map_err(|e| e.to_string())?;
                Ok::<_, String>(Peer {
                    key: peer.node,
                    conn,
                    head_height: theirs.head_height,
                })
            }));
        }
        let mut peers = Vec::new();
        while let Some(joined) = dials.join_next().await {
            match joined {
                Ok(Ok(peer)) => peers.push(peer),
                Ok(Err(e)) => tracing::info!(error = %e, "checkpoint restore: peer unreachable"),
                Err(e) => tracing::warn!(error = %e, "checkpoint restore: dial task failed"),
            }
        }
        peers.sort_by_key(|p| p.key);
        peers
    }

    /// Every peer's valid offers; a malformed answer bans its sender (a manifest of a format
    /// newer than this node's is skipped: not a fault).
    pub(super) async fn offers(&self, peers: &[Peer]) -> Vec<(NodeId, Manifest)> {
        let max = self.parts.transport.max_message_bytes;
        let mut asks = JoinSet::new();
        for peer in peers {
            let conn = peer.conn.clone();
            let key = peer.key;
            asks.spawn(tracing::Instrument::in_current_span(async move {
                (key, request(&conn, Request::Checkpoints, max).await)
            }));
        }
        let limits = ManifestLimits::default();
        let mut offers = Vec::new();
        while let Some(joined) = asks.join_next().await {
            let Ok((peer, answer)) = joined else { continue };
            match answer {
                Ok(Response::Checkpoints(list)) => {
                    for bytes in list {
                        match Manifest::decode(&bytes, &limits) {
                            Ok(manifest) => offers.push((peer, manifest)),
                            // A newer node's encoding is not a fault: skip that checkpoint.
                            Err(e @ crate::checkpoint::ManifestError::UnsupportedFormat(_)) => {
                                tracing::debug!(peer = %short(&peer), "checkpoint skipped: {e}");
                            }
                            Err(e) => {
                                self.penalise(peers, peer, &format!("offered a bad manifest: {e}"));
                                break;
                            }
                        }
                    }
                }
                Ok(_) => {}
                Err(e @ RequestError::Malformed(_)) => {
                    self.penalise(peers, peer, &format!("checkpoint list: {e}"))
                }
                Err(e) => {
                    tracing::info!(peer = %short(&peer), error = %e, "checkpoint list failed")
                }
            }
        }
        offers
    }

    /// The checkpoint to restore and the peers offering it.
    pub(super) fn pick(
        &self,
        peers: &[Peer],
        offers: Vec<(NodeId, Manifest)>,
    ) -> Option<(Manifest, Vec<NodeId>)> {
        let offered = offers.len();
        // Only checkpoints final on the peer offering them: this node will hold no undo record
        // for block `H`, so `H` must be below any reorganisation it may have to follow.
        let offers = final_offers(
            offers,
            |key| peers.iter().find(|p| p.key == *key).map(|p| p.head_height),
            self.parts.genesis.finality_depth,
        );
        if offers.len() < offered {
            tracing::info!(
                offered,
                kept = offers.len(),
                finality_depth = self.parts.genesis.finality_depth,
                "checkpoint restore: ignoring checkpoints not yet final on the peers offering them"
            );
        }
        let offers: Vec<_> = offers
            .into_iter()
            .filter(|(_, m)| !self.bad.contains(&m.id()) && m.height > 0)
            .collect();
        // A stored restore goes on while any peer still offers it: its manifest was chosen
        // and validated before, and its verified chunks are not fetched again.
        if let Ok(Some(stored)) = self.progress.manifest() {
            let id = stored.id();
            let holders: Vec<NodeId> = offers
                .iter()
                .filter(|(_, m)| m.id() == id)
                .map(|(p, _)| *p)
                .collect();
            if !holders.is_empty() && !self.bad.contains(&id) {
                return Some((stored, holders));
            }
            if holders.is_empty() && !offers.is_empty() {
                // Every peer that answered lists other checkpoints: they pruned this one
                // (`checkpoint.keep`), or it was found bad. The restore switches to the newest
                // offered by enough peers, carrying over the chunks that verify against it.
                tracing::info!(
                    checkpoint = %hex::encode(id),
                    height = stored.height,
                    peers = peers.len(),
                    "no peer offers the checkpoint being restored any more"
                );
            }
        }
        let min_peers = if self.parts.bootstrap.len() == 1 {
            1
        } else {
            2
        };
        let chosen = choose(&offers, min_peers);
        if chosen.is_none() && !offers.is_empty() {
            tracing::info!(
                offers = offers.len(),
                peers = peers.len(),
                min_peers,
                "no checkpoint is offered by enough peers"
            );
        }
        chosen
    }

    pub(super) fn penalise(&self, peers: &[Peer], peer: NodeId, reason: &str) {
        let first = self
            .banned
            .lock()
            .map_or(true, |mut banned| banned.insert(peer));
        if !first {
            return;
        }
        tracing::warn!(peer = %short(&peer), %reason, "checkpoint restore: banning peer");
        bump(&self.counters().peers_penalised);
        let ban_ms = modnode_peers::PeerConfig::new([0; 32]).ban_duration / 1_000;
        let now_ms = unix_ms();
        let until_ms = now_ms.saturating_add(ban_ms);
        self.parts.metrics.bans.record(peer, until_ms, now_ms);
        if let Err(e) = self.bans.record(peer, until_ms) {
            tracing::warn!(error = %e, "could not record a peer ban");
        }
        if let Some(p) = peers.iter().find(|p| p.key == peer) {
            p.conn.close(
                quinn::VarInt::from_u32(CLOSE_PROTOCOL_VIOLATION),
                b"bad checkpoint data",
            );
        }
    }
}
