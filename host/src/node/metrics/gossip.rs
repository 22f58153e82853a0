//! The gossip engine and driver on `/metrics` (`modnode_gossip_*`): duplicates, deliveries,
//! invalid pushes, transmissions and their failures, bytes and streams received.
//!
//! The engine's counters live on the gossip driver's task; a small task of the node copies
//! them here every [`GOSSIP_STATS_EVERY`], so a scrape reads them without waiting on the
//! driver.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{Metrics, Snapshot};
use crate::net::gossip::{GossipHandle, TrafficStats};

/// How often the node copies the gossip counters for `/metrics`.
pub const GOSSIP_STATS_EVERY: Duration = Duration::from_secs(2);

/// The latest copy of the gossip counters.
pub type GossipSnapshot = (modnode_gossip::EngineStats, TrafficStats);

/// `modnode_gossip_*` counters from `snapshot` as OpenMetrics lines, without the closing
/// `# EOF`.
pub fn render_gossip(snapshot: &GossipSnapshot) -> String {
    let (engine, traffic) = snapshot;
    let snapshot = Snapshot {
        counters: [
            (
                "duplicate_pushes",
                "Pushes received for messages already seen",
                engine.duplicate_pushes,
            ),
            (
                "invalid_pushes",
                "Pushes whose payload did not hash to their id",
                engine.invalid_pushes,
            ),
            (
                "delivered",
                "Messages delivered to the node for the first time",
                engine.delivered,
            ),
            ("transmits", "Transmissions sent", engine.transmits),
            (
                "send_failures",
                "Transmissions that failed",
                engine.send_failures,
            ),
            (
                "send_timeouts",
                "Transmissions that timed out",
                engine.send_timeouts,
            ),
            (
                "bytes_received",
                "Framed gossip bytes received",
                traffic.bytes_received,
            ),
            (
                "streams_timed_out",
                "Incoming streams stopped at their read deadline",
                traffic.streams_timed_out,
            ),
            (
                "events_dropped",
                "Gossip events the node was too far behind to take",
                traffic.events_dropped,
            ),
        ],
        gauges: [],
    };
    super::without_eof(snapshot.encode_with_prefix("modnode_gossip"))
}

/// Copies the gossip driver's counters into `metrics` every [`GOSSIP_STATS_EVERY`] until
/// `shutdown` turns true or the driver stops.
pub async fn copy_gossip_stats(
    gossip: GossipHandle,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(GOSSIP_STATS_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            _ = ticks.tick() => {}
        }
        if *shutdown.borrow() {
            return;
        }
        let Ok(stats) = gossip.stats().await else {
            return;
        };
        if let Ok(mut latest) = metrics.gossip.lock() {
            *latest = stats;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_and_deliveries_are_counters() {
        let engine = modnode_gossip::EngineStats {
            duplicate_pushes: 12,
            delivered: 30,
            ..Default::default()
        };
        let text = render_gossip(&(engine, TrafficStats::default()));
        for line in [
            "# TYPE modnode_gossip_duplicate_pushes counter",
            "modnode_gossip_duplicate_pushes_total 12",
            "modnode_gossip_delivered_total 30",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} in\n{text}");
        }
    }
}
