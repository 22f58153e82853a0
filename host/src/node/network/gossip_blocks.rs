//! Gossiped blocks for [`Network`]: decode, refuse future slots, hand to the chain worker, and
//! turn its answer into a relay verdict and, when the sender is to blame, a penalty.

use modnode_gossip::MessageId;
use modnode_gossip::policy::MessageKind;
use modnode_peers::NodeId;

use super::{Event, Network, short};
use crate::chain::Added;
use crate::chain::block::Block;
use crate::clock::{self, unix_ms};
use crate::net::gossip::GossipEvent;
use crate::node::chain_worker::WorkerError;
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
        // The chain worker checks this too; checked here first, it costs the sender's block
        // no trip through the worker's queue. The same rule as every path (`verdict`).
        if let Some(ahead_ms) =
            clock::early_by_ms(self.genesis.slot_start_ms(block.header.slot), unix_ms())
        {
            bump(&self.metrics.blocks_rejected);
            self.verdict(id, false);
            if clock::is_far_future(ahead_ms) {
                // An honest relayer imported it first, which its clock allowed only once the
                // slot had started: a block this far ahead was made up in advance.
                bump(&self.metrics.peer_future_blocks);
                self.violation(
                    from,
                    format!(
                        "relayed block {} for slot {}, which starts {ahead_ms} ms from now",
                        block.header.height, block.header.slot
                    ),
                );
            } else {
                tracing::debug!(
                    peer = %short(&from),
                    height = block.header.height,
                    ahead_ms,
                    "gossiped block is early by our clock; dropped"
                );
            }
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
                if matches!(e, WorkerError::FutureSlot { ahead_ms, .. } if clock::is_far_future(*ahead_ms))
                {
                    bump(&self.metrics.peer_future_blocks);
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
