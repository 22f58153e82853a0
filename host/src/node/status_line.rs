//! The periodic status line an operator reads in the log (`modnode run --status-every`):
//! height, finalized height, peers, how far the head lags the slot clock, and whether the node
//! is syncing — the figures `/status` has, for nodes nobody polls.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;

use super::chain_worker::ChainHandle;
use super::metrics::Metrics;
use crate::chain::genesis::Genesis;
use crate::clock::unix_ms;

/// What one status line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusFigures {
    /// Head height.
    pub height: u64,
    /// Finalized height.
    pub finalized: u64,
    /// Connected peers.
    pub peers: u64,
    /// Slots the head is behind the wall clock (0 when at or ahead of it).
    pub lag_slots: u64,
    /// Whether the node is catching up with a peer.
    pub syncing: bool,
    /// The highest head a peer reported.
    pub sync_target: u64,
}

/// The figures now.
pub fn figures(metrics: &Metrics, chain: &ChainHandle, genesis: &Genesis) -> StatusFigures {
    let view = chain.view();
    let wall_slot = genesis.slot_at(unix_ms());
    StatusFigures {
        height: view.head.height,
        finalized: view.finalized_height,
        peers: metrics.peers_connected.load(Ordering::Relaxed),
        lag_slots: wall_slot.saturating_sub(view.head.slot),
        syncing: metrics.syncing.load(Ordering::Relaxed),
        sync_target: metrics.sync_target_height.load(Ordering::Relaxed),
    }
}

/// Logs one status line.
pub fn log(f: &StatusFigures) {
    tracing::info!(
        height = f.height,
        finalized = f.finalized,
        peers = f.peers,
        lag_slots = f.lag_slots,
        syncing = f.syncing,
        sync_target = f.sync_target,
        "status"
    );
}

/// Logs a status line every `every` until `shutdown` turns true.
pub(super) async fn run(
    every: Duration,
    metrics: Arc<Metrics>,
    chain: ChainHandle,
    genesis: Genesis,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: the node just said it started.
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = ticks.tick() => log(&figures(&metrics, &chain, &genesis)),
        }
        if *shutdown.borrow() {
            return;
        }
    }
}
