//! Showing the registry format migration's progress, as range sync and a checkpoint restore
//! do: a progress bar (validators written of all, rate, ETA) when the operator watches a
//! terminal, else a log line at most every [`EVERY`] — so a long open is not taken for a hang.
//! Time is passed in (`now`), so the reporter is tested without waiting.

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget};

use crate::progress::ProgressDisplay;

/// Time between two progress lines.
pub(crate) const EVERY: Duration = Duration::from_secs(5);
/// Redraws of the bar per second at most.
const BAR_HZ: u8 = 4;
const BAR_TEMPLATE: &str = "migrating the registry {spinner} [{elapsed_precise}] {wide_bar} \
     {pos}/{len} validators ({per_sec}, ETA {eta})";

/// What the reporter said about the validators written so far (returned for tests; also
/// logged).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Said {
    /// Nothing (a line was logged less than [`EVERY`] ago, or the bar moved).
    Nothing,
    /// A progress line.
    Progress {
        /// Validators written.
        written: u64,
        /// Validators to write.
        total: u64,
        /// Validators written per second since the migration started.
        per_second: f64,
    },
}

/// Reports a registry migration's progress (see the module docs).
pub(crate) struct MigrationProgress {
    total: u64,
    started: Instant,
    last_line: Instant,
    bar: Option<ProgressBar>,
}

impl MigrationProgress {
    /// Starts reporting a migration of `total` validators at `now`, drawing a bar (`Bar`) or
    /// logging lines (`Log`).
    pub(crate) fn new(display: ProgressDisplay, total: u64, now: Instant) -> Self {
        let target =
            (display == ProgressDisplay::Bar).then(|| ProgressDrawTarget::stderr_with_hz(BAR_HZ));
        let bar = target.map(|target| crate::progress::bar(total, target, BAR_TEMPLATE));
        Self {
            total,
            started: now,
            last_line: now,
            bar,
        }
    }

    /// `written` validators are written: moves the bar, or logs a line when one is due.
    pub(crate) fn on_written(&mut self, written: u64, now: Instant) -> Said {
        if let Some(bar) = &self.bar {
            bar.set_position(written);
            return Said::Nothing;
        }
        if now.saturating_duration_since(self.last_line) < EVERY {
            return Said::Nothing;
        }
        self.last_line = now;
        let elapsed = now.saturating_duration_since(self.started).as_secs_f64();
        let per_second = if elapsed > 0.0 {
            written as f64 / elapsed
        } else {
            0.0
        };
        let total = self.total;
        tracing::info!(
            written,
            total,
            per_second = format!("{per_second:.0}"),
            "registry migration progress"
        );
        Said::Progress {
            written,
            total,
            per_second,
        }
    }

    /// The validators are all written: the bar ends at the total.
    pub(crate) fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.set_position(self.total);
            bar.finish();
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
    fn without_a_terminal_a_line_every_few_seconds_with_the_rate() {
        let start = Instant::now();
        let mut progress = MigrationProgress::new(ProgressDisplay::Log, 1_000_000, start);
        assert!(progress.bar.is_none());
        assert_eq!(
            progress.on_written(1_024, after(start, 1_000)),
            Said::Nothing
        );
        assert_eq!(
            progress.on_written(200_000, after(start, 4_999)),
            Said::Nothing
        );
        let Said::Progress {
            written,
            total,
            per_second,
        } = progress.on_written(250_000, after(start, 5_000))
        else {
            panic!("a progress line is due after {EVERY:?}");
        };
        assert_eq!((written, total), (250_000, 1_000_000));
        assert!((per_second - 50_000.0).abs() < 1e-6, "{per_second}");
        // The next one only EVERY after that line.
        assert_eq!(
            progress.on_written(300_000, after(start, 9_000)),
            Said::Nothing
        );
        assert!(matches!(
            progress.on_written(500_000, after(start, 10_000)),
            Said::Progress {
                written: 500_000,
                ..
            }
        ));
        progress.finish();
    }

    #[test]
    fn on_a_terminal_the_bar_moves_and_no_line_is_logged() {
        assert!(indicatif::ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
        let start = Instant::now();
        let mut progress = MigrationProgress::new(ProgressDisplay::Bar, 4_096, start);
        let bar = progress.bar.clone().expect("a bar on a terminal");
        assert_eq!(bar.length(), Some(4_096));
        // Hidden in tests (stderr is not a terminal here); the bar still counts.
        assert_eq!(
            progress.on_written(1_024, after(start, 1_000)),
            Said::Nothing
        );
        assert_eq!(bar.position(), 1_024);
        assert_eq!(
            progress.on_written(2_048, after(start, 60_000)),
            Said::Nothing
        );
        assert_eq!(bar.position(), 2_048);
        progress.finish();
        assert!(bar.is_finished());
        assert_eq!(bar.position(), 4_096);
    }
}
