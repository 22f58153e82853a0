//! How long work shows its progress to the operator: a progress bar on a terminal, a periodic
//! log line otherwise. Below every layer, so work deep in the node (the registry's format
//! migration when the chain opens) is told the choice the command made.

/// How long work shows its progress (`modnode run` picks the bar when stderr is a terminal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressDisplay {
    /// A log line every few seconds (logs, CI, tests that read them).
    #[default]
    Log,
    /// A progress bar on stderr.
    Bar,
}

/// A bar of `len` steps drawn to `target` in `template`'s style (indicatif's default style if
/// the template does not parse).
pub fn bar(
    len: u64,
    target: indicatif::ProgressDrawTarget,
    template: &str,
) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(Some(len), target);
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// Ends a finished bar's line: indicatif leaves the cursor after the last drawn bar, where the
/// next log line would start.
pub fn end_line(bar: &indicatif::ProgressBar) {
    use std::io::Write as _;
    if !bar.is_hidden() {
        let _ = writeln!(std::io::stderr());
    }
}
