//! Peer bans across restarts: the glue between the peer manager's ban reports and the node's
//! [`BanList`]. The manager counts time from the network task's start, the list in unix
//! milliseconds; bans are converted at both ends.

use modnode_peers::PeerManager;

use super::metrics::BanView;
use crate::store::BanList;

/// Re-imposes the bans recorded before a restart on a manager whose clock starts now.
/// Each restored ban is listed in `view`.
pub(super) fn restore(peers: &mut PeerManager, bans: &BanList, view: &BanView, now_ms: u64) {
    match bans.load(now_ms) {
        Ok(live) => {
            let restored = live.len();
            for (node, until_ms) in live {
                let left_us = until_ms.saturating_sub(now_ms).saturating_mul(1_000);
                peers.restore_ban(node, left_us);
                view.record(node, until_ms, now_ms);
            }
            if restored > 0 {
                tracing::info!(restored, "peer bans restored");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not load peer bans; starting without them"),
    }
}

/// Records every ban the manager imposed since the last call; `now` is the manager's clock,
/// `now_ms` the same instant in unix milliseconds. Each is listed in `view` too.
pub(super) fn persist(
    peers: &mut PeerManager,
    bans: &BanList,
    view: &BanView,
    now: u64,
    now_ms: u64,
) {
    while let Some((node, until)) = peers.poll_ban() {
        let until_ms = now_ms.saturating_add(until.saturating_sub(now) / 1_000);
        view.record(node, until_ms, now_ms);
        if let Err(e) = bans.record(node, until_ms) {
            tracing::warn!(error = %e, "could not record a peer ban; it ends with this run");
        }
    }
}
