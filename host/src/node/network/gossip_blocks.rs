//! Gossiped blocks for [`Network`]: the driver of the sans-IO [`BlockIntake`], which decides
//! (decode, shell check, holding early blocks, import requests, relay or penalise); this file
//! only carries its actions out.
//!
//! [`BlockIntake`]: crate::node::intake::BlockIntake

use modnode_gossip::MessageId;
use modnode_gossip::policy::MessageKind;
use modnode_peers::NodeId;

use super::{Event, Network, short};
use crate::chain::Added;
use crate::chain::block::Block;
use crate::clock::unix_ms;
use crate::net::gossip::GossipEvent;
use crate::node::chain_worker::WorkerError;
use crate::node::intake::{IntakeAction, IntakeCount};
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
        self.intake.handle_block(id, from, payload, unix_ms());
        self.run_intake();
    }

    /// The chain worker's answer for a gossiped block.
    pub(super) fn on_gossip_block_added(
        &mut self,
        id: MessageId,
        from: NodeId,
        block: &Block,
        result: &Result<Added, WorkerError>,
    ) {
        if let Err(e) = result {
            tracing::info!(peer = %short(&from), height = block.header.height, error = %e, "gossiped block not taken");
        }
        self.intake.handle_added(id, from, block, result);
        self.run_intake();
    }

    /// Carries out what the block intake wants done: imports on the chain worker, verdicts to
    /// the gossip engine, penalties, range sync from a sender ahead of us, metrics.
    pub(super) fn run_intake(&mut self) {
        while let Some(action) = self.intake.poll_action() {
            match action {
                IntakeAction::Import { id, from, block } => {
                    let chain = self.chain.clone();
                    let events = self.events.clone();
                    tokio::spawn(tracing::Instrument::in_current_span(async move {
                        let result = chain.add_block((*block).clone()).await;
                        let _ = events
                            .send(Event::GossipBlock {
                                id,
                                from,
                                block,
                                result,
                            })
                            .await;
                    }));
                }
                IntakeAction::Verdict { id, relay } => self.verdict(id, relay),
                IntakeAction::Penalise { peer, reason } => self.violation(peer, reason),
                IntakeAction::SyncFrom { peer, height, hash } => {
                    // Seal and body checked: the sender holds a real block at this height, so
                    // range sync can fetch the gap from it.
                    let now = self.now();
                    self.sync
                        .handle_peer_status(peer, height, hash.to_bytes(), now);
                }
                IntakeAction::Count(count) => bump(match count {
                    IntakeCount::Rejected => &self.metrics.blocks_rejected,
                    IntakeCount::Imported => &self.metrics.blocks_gossip_imported,
                    IntakeCount::PeerFutureBlock => &self.metrics.peer_future_blocks,
                }),
            }
        }
    }
}
