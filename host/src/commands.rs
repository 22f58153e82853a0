//! One module per `modnode` subcommand group.

pub mod bench;
pub mod deposit;
pub mod devnet;
pub mod module;
pub mod run;
pub mod upgrade_check;

/// Waits for the first stop request: SIGINT (Ctrl-C) or SIGTERM (what systemd, Docker and
/// Kubernetes send). Returns the signal's name for the log.
pub async fn shutdown_signal() -> std::io::Result<&'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => Ok("SIGTERM"),
        _ = int.recv() => Ok("SIGINT"),
    }
}
