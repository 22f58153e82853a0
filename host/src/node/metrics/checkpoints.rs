//! Checkpoint serving and this node's own restore on `/metrics` (`modnode_checkpoint_*`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Metrics, Snapshot, as_i64};

/// Checkpoint serving and restore figures as OpenMetrics lines (prefix `modnode_checkpoint_`),
/// without the closing `# EOF`.
pub fn render_checkpoints(m: &Metrics) -> String {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let served = &m.checkpoint_served;
    let restore = &m.checkpoint_restore;
    let snapshot = Snapshot {
        counters: [
            (
                "served_lists",
                "Checkpoint list requests answered",
                load(&served.lists),
            ),
            (
                "served_chunks",
                "Checkpoint chunks sent to peers",
                load(&served.chunks),
            ),
            (
                "served_bytes",
                "Checkpoint chunk bytes sent to peers",
                load(&served.bytes),
            ),
            (
                "served_not_found",
                "Chunk requests answered not here",
                load(&served.not_found),
            ),
            (
                "restore_chunks_fetched",
                "Chunks fetched from peers while restoring",
                load(&restore.chunks_fetched),
            ),
            (
                "restore_chunks_duplicate",
                "Chunk answers not needed while restoring (late, or already had)",
                load(&restore.chunks_duplicate),
            ),
            (
                "restore_bytes_fetched",
                "Chunk bytes fetched from peers while restoring",
                load(&restore.bytes_fetched),
            ),
            (
                "restore_chunks_refused",
                "Fetched chunks refused as bad",
                load(&restore.chunks_refused),
            ),
            (
                "restore_peers_penalised",
                "Peers penalised while restoring",
                load(&restore.peers_penalised),
            ),
            (
                "restore_requests_timed_out",
                "Chunk requests that reached their deadline unanswered while restoring",
                load(&restore.requests_timed_out),
            ),
            (
                "restore_chunks_taken_over",
                "Chunks an idle faster peer took over from a slower one while restoring",
                load(&restore.chunks_taken_over),
            ),
            (
                "restore_chunks_carried_over",
                "Verified chunks kept when the restore switched checkpoints",
                load(&restore.chunks_carried_over),
            ),
            (
                "restore_switches",
                "Switches of the restore to another checkpoint",
                load(&restore.switches),
            ),
        ],
        gauges: [
            (
                "restore_height",
                "Height of the checkpoint restored",
                load(&restore.height),
            ),
            (
                "restore_chunks_total",
                "Chunks in it",
                load(&restore.chunks_total),
            ),
            (
                "restore_chunks_verified",
                "Chunks verified and stored",
                load(&restore.chunks_verified),
            ),
            (
                "restore_chunks_resumed",
                "Chunks found verified in stored progress",
                load(&restore.chunks_resumed),
            ),
            (
                "restore_peers",
                "Peers offering the checkpoint",
                load(&restore.peers),
            ),
            (
                "restore_bytes_per_second",
                "Fetch rate of the restore",
                load(&restore.bytes_per_second),
            ),
            (
                "restore_done",
                "1 once the chain starts from the restored checkpoint",
                u64::from(restore.done.load(Ordering::Relaxed)),
            ),
        ]
        .map(|(name, help, value)| (name, help, as_i64(value))),
    };
    // Appended to the node's scrape, which carries the one closing `# EOF`.
    super::without_eof(snapshot.encode_with_prefix("modnode_checkpoint"))
}
