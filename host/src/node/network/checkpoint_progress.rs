//! Showing a checkpoint restore's progress: a progress bar (indicatif: bytes and chunks
//! verified, rate, ETA) when the operator watches a terminal, else a log line at most once a
//! second (logs, CI, tests that read it) — and a last line at the end either way.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget};

use crate::checkpoint::Progress;
use crate::node::metrics::RestoreCounters;

/// Time between two progress lines.
const EVERY: Duration = Duration::from_secs(1);
/// Redraws of the bar per second at most.
const BAR_HZ: u8 = 4;
const BAR_TEMPLATE: &str = "restoring checkpoint {spinner} [{elapsed_precise}] {wide_bar} \
     {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, ETA {eta}) {msg}";

pub use crate::progress::ProgressDisplay;

/// Reports a restore's progress.
pub(in crate::node) struct Reporter {
    last: Instant,
    progress: Progress,
    bar: Option<ProgressBar>,
}

impl Reporter {
    /// Starts reporting from `progress` (resumed and carried-over chunks included; the bar's
    /// rate and ETA count only what is fetched from here on).
    pub(in crate::node) fn new(progress: Progress, display: ProgressDisplay) -> Self {
        let target =
            (display == ProgressDisplay::Bar).then(|| ProgressDrawTarget::stderr_with_hz(BAR_HZ));
        Self::drawing_to(progress, target)
    }

    /// [`new`](Self::new) with the bar drawn to `target` (`None`: log lines).
    fn drawing_to(progress: Progress, target: Option<ProgressDrawTarget>) -> Self {
        let bar = target.map(|target| {
            let bar = crate::progress::bar(progress.total_bytes, target, BAR_TEMPLATE);
            bar.set_position(progress.bytes);
            bar.reset_eta();
            bar.set_message(chunks_message(&progress));
            bar
        });
        Self {
            last: Instant::now(),
            progress,
            bar,
        }
    }

    /// Records `progress`: moves the bar, or logs a line when a second has passed since the
    /// last.
    pub(in crate::node) fn update(&mut self, progress: Progress, counters: &RestoreCounters) {
        self.progress = progress;
        if let Some(bar) = &self.bar {
            bar.set_position(progress.bytes);
            bar.set_message(chunks_message(&progress));
            return;
        }
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

    /// The last line (the bar stays on screen, full).
    pub(in crate::node) fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.finish_with_message(chunks_message(&self.progress));
            crate::progress::end_line(bar);
        }
        tracing::info!(
            chunks = self.progress.chunks,
            total = self.progress.total_chunks,
            "every checkpoint chunk verified"
        );
    }
}

impl Drop for Reporter {
    /// A restore that stops early (no peer left, a bad checkpoint) leaves its bar where it was
    /// instead of a half-drawn line under the log that follows.
    fn drop(&mut self) {
        if let Some(bar) = &self.bar
            && !bar.is_finished()
        {
            bar.abandon();
            crate::progress::end_line(bar);
        }
    }
}

fn chunks_message(progress: &Progress) -> String {
    format!("{}/{} chunks", progress.chunks, progress.total_chunks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(chunks: usize, bytes: u64) -> Progress {
        Progress {
            chunks,
            total_chunks: 8,
            leaves: 0,
            total_leaves: 0,
            bytes,
            total_bytes: 8_000,
        }
    }

    #[test]
    fn the_template_parses_and_the_bar_follows_verified_bytes_and_chunks() {
        assert!(indicatif::ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
        let counters = RestoreCounters::default();
        let mut reporter = Reporter::drawing_to(at(2, 2_000), Some(ProgressDrawTarget::hidden()));
        let bar = reporter.bar.clone().unwrap();
        assert_eq!((bar.position(), bar.length()), (2_000, Some(8_000)));
        reporter.update(at(5, 5_100), &counters);
        assert_eq!(bar.position(), 5_100);
        assert_eq!(bar.message(), "5/8 chunks");
        reporter.finish();
        assert!(bar.is_finished());
        // Without a terminal there is no bar, only log lines.
        assert!(Reporter::new(at(0, 0), ProgressDisplay::Log).bar.is_none());
    }

    #[test]
    fn a_restore_that_stops_early_abandons_its_bar() {
        let reporter = Reporter::drawing_to(at(1, 1_000), Some(ProgressDrawTarget::hidden()));
        let bar = reporter.bar.clone().unwrap();
        drop(reporter);
        assert!(bar.is_finished());
    }
}
