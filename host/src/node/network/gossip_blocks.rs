//! Gossiped blocks for [`Network`]: decode, refuse future slots, hand to the chain worker, and
//! turn its answer into a relay verdict and, when the sender is to blame, a penalty.

use modnode_gossip::MessageId;
use modnode_gossip::policy::MessageKind;
use modnode_peers::NodeId;

use super::{Event, Network, short};
use crate::chain::Added;
use crate::chain::block::Block;
use crate::net::gossip::GossipEvent;
use crate::node::chain_worker::{WorkerError, unix_ms};
use crate::node::metrics::bump;
use crate::node::verdict;

impl Network {
    pub(super) fn on_gossip(&mut self, event: GossipEvent) {
        match event {
            GossipEvent::Violation { peer, reason } => self.violation(*peer.as_bytes(), reason),
            GossipEvent::Delivered {
                id,
                kind,
                payload,
                from,
            } => {
                let from = *from.as_bytes();
                if let Err(reason) = verdict::gossip_kind(kind) {
                    self.verdict(id, false);
                    self.violation(from, reason);
                    return;
                }
                match kind {
                    MessageKind::Block => self.on_gossip_block(id, from, &payload),
                    // Refused by `gossip_kind` above.
                    MessageKind::Deposit | MessageKind::Consensus | MessageKind::PeerExchange => {}
                }
            }
        }
    }

    fn on_gossip_block(&mut self, id: MessageId, from: NodeId, payload: &[u8]) {
        let block = match Block::decode(payload, self.genesis.max_deposits_per_block) {
            Ok(block) => block,
            Err(e) => {
                bump(&self.metrics.blocks_rejected);
                self.verdict(id, false);
                self.violation(from, format!("relayed an undecodable block: {e}"));
                return;
            }
        };
        let current = self.genesis.slot_at(unix_ms().saturating_add(500));
        if block.header.slot > current {
            // Possibly our clock is behind: not relayed, not punished.
            bump(&self.metrics.blocks_rejected);
            self.verdict(id, false);
            tracing::info!(peer = %short(&from), slot = block.header.slot, current, "block from a future slot dropped");
            return;
        }
        let chain = self.chain.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let result = chain.add_block(block.clone()).await;
            let _ = events
                .send(Event::GossipBlock {
                    id,
                    from,
                    block: Box::new(block),
                    result,
                })
                .await;
        });
    }

    /// The chain worker's answer for a gossiped block.
    pub(super) fn on_gossip_block_added(
        &mut self,
        id: MessageId,
        from: NodeId,
        block: &Block,
        result: &Result<Added, WorkerError>,
    ) {
        let now = self.now();
        let height = block.header.height;
        let verdict = verdict::gossip_block(height, result);
        match result {
            Ok(Added::Extended(_) | Added::Reorganised { .. }) => {
                bump(&self.metrics.blocks_gossip_imported)
            }
            Ok(_) => {}
            Err(e) => {
                if !verdict.behind_sender {
                    bump(&self.metrics.blocks_rejected);
                }
                tracing::info!(peer = %short(&from), height, error = %e, "gossiped block not taken");
            }
        }
        if verdict.behind_sender {
            // Seal and body checked: the sender holds a real block at this height, so
            // range sync can fetch the gap from it.
            self.sync
                .handle_peer_status(from, height, block.hash(), now);
        }
        let penalty = verdict
            .penalty
            .or_else(|| verdict::equivocation_penalty(&from, &self.genesis.authorities, result));
        if let Some(reason) = penalty {
            self.violation(from, reason);
        }
        self.verdict(id, verdict.relay);
    }
}
