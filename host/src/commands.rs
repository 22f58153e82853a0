//! One module per `modnode` subcommand group.

pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod deposit;
pub mod devnet;
pub mod module;
pub mod module_namesakes;
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

/// How `modnode run` writes its log lines (stderr).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Dependencies whose `debug`/`trace` lines drown the node's own (cranelift alone writes tens of
/// thousands of lines a second while compiling): kept at `info` unless `RUST_LOG` names them.
const QUIET_DEPENDENCIES: [&str; 9] = [
    "cranelift_codegen",
    "cranelift_frontend",
    "wasmtime_cranelift",
    "regalloc2",
    "wasmtime",
    "quinn_proto",
    "sled",
    "hyper",
    "h2",
];

/// The log filter: `RUST_LOG` if set (default `info`), with [`QUIET_DEPENDENCIES`] held at
/// `info` unless `RUST_LOG` mentions them.
pub fn log_filter(rust_log: Option<&str>) -> tracing_subscriber::EnvFilter {
    let base = rust_log.filter(|s| !s.trim().is_empty()).unwrap_or("info");
    let mut directives = base.to_owned();
    for dependency in QUIET_DEPENDENCIES {
        if !base.contains(dependency) {
            directives.push_str(&format!(",{dependency}=info"));
        }
    }
    tracing_subscriber::EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!("warning: RUST_LOG={base:?} is not a valid filter ({e}); logging at info");
        tracing_subscriber::EnvFilter::new("info")
    })
}

/// Starts logging to stderr in `format`, filtered by [`log_filter`].
pub fn init_logs(format: LogFormat) {
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().with_current_span(false).init(),
    }
}

/// Lets SIGPIPE end the process, as it ends `cat` or `ls`: Rust ignores it by default, so a
/// `println!` into a closed pipe panics instead.
pub fn restore_default_sigpipe() {
    // SAFETY: resetting a signal's disposition to the default touches no Rust state; it runs
    // on the main thread before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
