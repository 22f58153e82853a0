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
