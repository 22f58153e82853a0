//! Showing a long range sync's progress, as a checkpoint restore does: a progress bar (blocks
//! imported of the sync's target, rate, ETA) when the operator watches a terminal, else a log
//! line at most every [`EVERY`] — and a last line when the node has caught up.
//!
//! Only a sync that starts at least [`MIN_GAP`] blocks behind is shown: following the chain a
//! few blocks behind is normal running, not something to watch. Time is passed in (`now`), so
//! the reporter is tested without waiting.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget};

use super::checkpoint_progress::ProgressDisplay;

/// Blocks behind the sync's target from which a sync is shown.
pub(in crate::node) const MIN_GAP: u64 = 64;
/// Time between two progress lines.
const EVERY: Duration = Duration::from_secs(5);
/// Redraws of the bar per second at most.
const BAR_HZ: u8 = 4;
const BAR_TEMPLATE: &str = "range sync {spinner} [{elapsed_precise}] {wide_bar} \
     {pos}/{len} blocks ({per_sec}, ETA {eta})";

/// One shown sync: where it started and what it aims at.
struct Shown {
    started_at: Instant,
    from_height: u64,
    target: u64,
    bar: Option<ProgressBar>,
}

/// What the reporter said about one imported block (returned for tests; also logged).
#[derive(Debug, Clone, PartialEq)]
pub(in crate::node) enum Said {
    /// Nothing (not shown, or a line was logged less than [`EVERY`] ago, or the bar moved).
    Nothing,
    /// A progress line: height, target, blocks per second since the sync started.
    Progress {
        /// Height just imported.
        height: u64,
        /// The sync's target height.
        target: u64,
        /// Blocks imported per second since the shown sync started.
        blocks_per_second: f64,
    },
    /// The last line: caught up at `height` after `blocks` blocks.
    CaughtUp {
        /// Height reached.
        height: u64,
        /// Blocks imported while shown.
        blocks: u64,
    },
}

/// Reports a range sync's progress (see the module docs).
pub(in crate::node) struct SyncProgress {
    display: ProgressDisplay,
    shown: Option<Shown>,
    last_line: Option<Instant>,
}

impl SyncProgress {
    /// A reporter drawing a bar (`Bar`) or logging lines (`Log`).
    pub(in crate::node) fn new(display: ProgressDisplay) -> Self {
        Self {
            display,
            shown: None,
            last_line: None,
        }
    }

    /// Range sync imported the block at `height`; its target is now `target` (the best height
    /// peers proved). Starts showing a sync that is [`MIN_GAP`] or more behind, moves the bar or
    /// logs a line when one is due, and ends with a last line once `height` reaches the target.
    pub(in crate::node) fn on_imported(&mut self, height: u64, target: u64, now: Instant) -> Said {
        let shown = match &mut self.shown {
            Some(shown) => shown,
            None if target.saturating_sub(height) >= MIN_GAP => {
                let bar = (self.display == ProgressDisplay::Bar).then(|| {
                    crate::progress::bar(
                        target.saturating_sub(height),
                        ProgressDrawTarget::stderr_with_hz(BAR_HZ),
                        BAR_TEMPLATE,
                    )
                });
                tracing::info!(
                    height,
                    target,
                    behind = target.saturating_sub(height),
                    "range sync: catching up"
                );
                self.last_line = Some(now);
                self.shown.insert(Shown {
                    started_at: now,
                    from_height: height,
                    target,
                    bar,
                })
            }
            None => return Said::Nothing,
        };
        // Peers keep producing while we sync: the target moves up.
        shown.target = shown.target.max(target);
        let done = height.saturating_sub(shown.from_height);
        if height >= shown.target {
            let blocks = done;
            if let Some(bar) = &shown.bar {
                bar.set_length(shown.target.saturating_sub(shown.from_height));
                bar.set_position(done);
                bar.finish();
                crate::progress::end_line(bar);
            }
            let seconds = now
                .saturating_duration_since(shown.started_at)
                .as_secs_f64();
            tracing::info!(height, blocks, seconds, "range sync: caught up");
            self.shown = None;
            return Said::CaughtUp { height, blocks };
        }
        if let Some(bar) = &shown.bar {
            bar.set_length(shown.target.saturating_sub(shown.from_height));
            bar.set_position(done);
            return Said::Nothing;
        }
        if self
            .last_line
            .is_some_and(|last| now.saturating_duration_since(last) < EVERY)
        {
            return Said::Nothing;
        }
        self.last_line = Some(now);
        let elapsed = now
            .saturating_duration_since(shown.started_at)
            .as_secs_f64();
        let blocks_per_second = if elapsed > 0.0 {
            done as f64 / elapsed
        } else {
            0.0
        };
        let remaining = shown.target.saturating_sub(height);
        let eta_seconds = if blocks_per_second > 0.0 {
            (remaining as f64 / blocks_per_second).round()
        } else {
            f64::INFINITY
        };
        tracing::info!(
            height,
            target = shown.target,
            blocks_per_second = format!("{blocks_per_second:.1}"),
            eta_seconds,
            "range sync progress"
        );
        Said::Progress {
            height,
            target: shown.target,
            blocks_per_second,
        }
    }
}

impl Drop for SyncProgress {
    /// A sync that stops early (the node shuts down) leaves its bar where it was.
    fn drop(&mut self) {
        if let Some(bar) = self.shown.as_ref().and_then(|s| s.bar.as_ref())
            && !bar.is_finished()
        {
            bar.abandon();
            crate::progress::end_line(bar);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn a_short_catch_up_is_not_shown() {
        let mut progress = SyncProgress::new(ProgressDisplay::Log);
        let start = Instant::now();
        assert_eq!(
            progress.on_imported(100, 100 + MIN_GAP - 1, start),
            Said::Nothing
        );
        assert!(progress.shown.is_none());
    }

    #[test]
    fn a_long_sync_logs_a_line_every_few_seconds_and_a_last_one_when_caught_up() {
        let mut progress = SyncProgress::new(ProgressDisplay::Log);
        let start = Instant::now();
        // Starts: the first line is the "catching up" one, then nothing until EVERY passed.
        assert_eq!(progress.on_imported(1, 1_000, start), Said::Nothing);
        assert_eq!(
            progress.on_imported(200, 1_000, after(start, 1_000)),
            Said::Nothing
        );
        let Said::Progress {
            height,
            target,
            blocks_per_second,
        } = progress.on_imported(501, 1_010, after(start, 5_000))
        else {
            panic!("a progress line is due after {EVERY:?}");
        };
        // The target moved up while syncing; the rate counts from where the sync started.
        assert_eq!((height, target), (501, 1_010));
        assert!(
            (blocks_per_second - 100.0).abs() < 1e-9,
            "{blocks_per_second}"
        );
        assert_eq!(
            progress.on_imported(600, 1_010, after(start, 6_000)),
            Said::Nothing
        );
        assert_eq!(
            progress.on_imported(1_010, 1_010, after(start, 9_000)),
            Said::CaughtUp {
                height: 1_010,
                blocks: 1_009
            }
        );
        // Caught up: following the chain from here is not shown.
        assert_eq!(
            progress.on_imported(1_011, 1_012, after(start, 9_500)),
            Said::Nothing
        );
    }

    #[test]
    fn the_bar_follows_the_blocks_and_finishes_when_caught_up() {
        assert!(indicatif::ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
        let mut progress = SyncProgress::new(ProgressDisplay::Bar);
        let start = Instant::now();
        progress.on_imported(10, 510, start);
        let bar = progress
            .shown
            .as_ref()
            .and_then(|s| s.bar.clone())
            .expect("a bar on a terminal");
        // Hidden in tests: stderr is not a terminal here, the bar still counts.
        assert_eq!(
            progress.on_imported(260, 510, after(start, 100)),
            Said::Nothing
        );
        assert_eq!((bar.position(), bar.length()), (250, Some(500)));
        progress.on_imported(510, 510, after(start, 200));
        assert!(bar.is_finished());
    }
}
