//! The producer task: a block at the start of each of this node's slots, gossiped.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use modnode_gossip::policy::MessageKind;
use tokio::sync::watch;

use super::Metrics;
use super::chain_worker::ChainHandle;
use super::metrics::bump;
use crate::chain::genesis::Genesis;
use crate::clock::unix_ms;
use crate::net::gossip::GossipHandle;

/// Builds a block at the start of each of this node's slots and gossips it.
pub(super) async fn produce(
    genesis: Genesis,
    my_index: Option<usize>,
    chain: ChainHandle,
    gossip: GossipHandle,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let now = unix_ms();
        let slot = genesis.slot_at(now).saturating_add(1);
        let wait = genesis.slot_start_ms(slot).saturating_sub(now);
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = tokio::time::sleep(Duration::from_millis(wait)) => {}
        }
        let ours = match (genesis.proposer_for(slot), my_index) {
            (None, _) => true,
            (Some(proposer), Some(me)) => usize::try_from(proposer).ok() == Some(me),
            (Some(_), None) => false,
        };
        if !ours {
            continue;
        }
        if !metrics.started_up.load(Ordering::Relaxed) {
            // A restarted authority that produced before syncing would fork off on its own.
            tracing::info!(
                slot,
                "skipping our slot until we tried to sync with our peers"
            );
            continue;
        }
        if metrics.syncing.load(Ordering::Relaxed) {
            tracing::info!(slot, "skipping our slot while catching up");
            continue;
        }
        match chain.produce(slot).await {
            Ok(Some(block)) => {
                bump(&metrics.blocks_produced);
                tracing::info!(
                    slot,
                    height = block.header.height,
                    hash = %hex::encode(block.hash().as_bytes().get(..8).unwrap_or_default()),
                    deposits = block.body.deposits.len(),
                    "produced block"
                );
                if let Err(e) = gossip.publish(MessageKind::Block, block.encode()).await {
                    tracing::warn!(error = %e, "cannot gossip our block");
                }
            }
            Ok(None) => {}
            Err(e) => tracing::error!(error = %e, "block production failed"),
        }
    }
}
