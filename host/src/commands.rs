//! One module per `modnode` subcommand group.

pub mod bench;
pub mod checkpoint;
pub mod deposit;
pub mod devnet;
pub mod module;
pub mod run;
pub mod testnet;
pub mod upgrade_check;

/// The stop requests a long-running command obeys: SIGINT (Ctrl-C) and SIGTERM (what systemd,
/// Docker and Kubernetes send). Install it before starting anything, so a signal that arrives
/// while the node starts is not lost to the default action (which kills the process).
pub struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Registers the handlers; must run inside a tokio runtime.
    pub fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the first stop request; returns the signal's name for the log.
    pub async fn wait(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
