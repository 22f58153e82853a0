//! Showing a checkpoint restore's progress: a log line at most once a second (and at the end).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::checkpoint::Progress;
use crate::node::metrics::RestoreCounters;

/// Time between two progress lines.
const EVERY: Duration = Duration::from_secs(1);

/// Reports a restore's progress.
pub(super) struct Reporter {
    last: Instant,
    progress: Progress,
}

impl Reporter {
    /// Starts reporting from `progress` (resumed chunks included).
    pub(super) fn new(progress: Progress) -> Self {
        Self {
            last: Instant::now(),
            progress,
        }
    }

    /// Records `progress`; logs a line when a second has passed since the last.
    pub(super) fn update(&mut self, progress: Progress, counters: &RestoreCounters) {
        self.progress = progress;
        if self.last.elapsed() < EVERY {
            return;
        }
        self.last = Instant::now();
        tracing::info!(
            chunks = progress.chunks,
            total = progress.total_chunks,
            leaves = progress.leaves,
            total_leaves = progress.total_leaves,
            bytes = counters.bytes_fetched.load(Ordering::Relaxed),
            bytes_per_second = counters.bytes_per_second.load(Ordering::Relaxed),
            peers = counters.peers.load(Ordering::Relaxed),
            "checkpoint restore progress"
        );
    }

    /// The last line.
    pub(super) fn finish(self) {
        tracing::info!(
            chunks = self.progress.chunks,
            total = self.progress.total_chunks,
            "every checkpoint chunk verified"
        );
    }
}
