//! Where an upload is compiled, and the lanes compiles wait in.
//!
//! A compile cannot be interrupted inside wasmtime, so a module that compiles for minutes
//! keeps its thread — and the gigabytes the compiler holds — until it ends. The node therefore
//! compiles uploads in a child process ([`SubprocessCompiler`]: the `modnode` binary re-run with
//! the hidden `debug compile-module` subcommand), killed at its deadline, which returns its
//! memory and its core at once. Library users and tests, which have no binary to run, get the
//! same interface in-process ([`InProcessCompiler`]: an overrun compile is abandoned and keeps
//! its lane until it ends).
//!
//! Both compile with [`compile_engine`](crate::runtime::engine::compile_engine): the node's
//! engine configuration without parallel compilation, so one compile uses one core, and with
//! artifacts the node's engine loads as its own (compilation settings are unchanged; module
//! hashes are of the bytes and never change).
//!
//! Two lanes, one compile each: the operator's uploads and the modules the chain scheduled.
//! An upload finding its lane busy is refused as busy (HTTP 503); a scheduled module waits for
//! the one before it, never for an upload, so a hostile upload cannot delay an activation.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::UploadError;
use crate::runtime;

/// Exit status of `modnode debug compile-module` when the module does not compile (the
/// module's fault; the message is on stderr). Any other failure is the node's.
pub const EXIT_MODULE_DOES_NOT_COMPILE: i32 = 3;

/// What a compile that overruns its deadline does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// Stop it at the deadline and refuse the module (the operator's uploads).
    Refuse(Duration),
    /// Warn at the deadline and wait for it (modules the chain scheduled: local limits warn).
    Warn(Duration),
}

/// Compiles a component into an artifact [`runtime::engine::engine`] loads.
pub trait Compiler: Send + Sync + fmt::Debug {
    /// Compiles `bytes` (module `name`, for messages) within `deadline`. `lane` is held until
    /// the compile has really ended, which for an abandoned in-process compile is after this
    /// returns.
    fn compile(
        &self,
        bytes: &[u8],
        name: &str,
        deadline: Deadline,
        lane: LaneGuard,
    ) -> Result<Vec<u8>, UploadError>;
}

/// One compile at a time; dropping the [`LaneGuard`] frees it.
#[derive(Debug, Default)]
pub struct Lane {
    busy: Mutex<bool>,
    freed: Condvar,
}

impl Lane {
    /// The lane if free now.
    pub fn try_enter(self: &Arc<Self>) -> Option<LaneGuard> {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        if *busy {
            return None;
        }
        *busy = true;
        Some(LaneGuard(self.clone()))
    }

    /// The lane, once the compile in it has ended.
    pub fn enter(self: &Arc<Self>) -> LaneGuard {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        while *busy {
            busy = self.freed.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        *busy = true;
        LaneGuard(self.clone())
    }

    /// Whether a compile holds the lane.
    pub fn is_busy(&self) -> bool {
        *self.busy.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A compile's place in its [`Lane`].
#[derive(Debug)]
pub struct LaneGuard(Arc<Lane>);

impl Drop for LaneGuard {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(|p| p.into_inner()) = false;
        self.0.freed.notify_all();
    }
}

fn too_slow(name: &str, limit: Duration) -> UploadError {
    UploadError::CompileTooSlow {
        name: name.to_string(),
        limit,
    }
}

fn warn_overrun(name: &str, limit: Duration) {
    tracing::warn!(
        module = %name,
        ?limit,
        "a module the chain scheduled is taking longer than the upload compile limit; \
         waiting for it (the chain's schedule decides, local limits only warn)"
    );
}

/// Compiles on a thread of this process. An overrun compile cannot be stopped: it is
/// abandoned and keeps its lane until it ends (its output is then dropped). For library use and
/// tests; the node runs [`SubprocessCompiler`].
#[derive(Debug, Default, Clone, Copy)]
pub struct InProcessCompiler;

impl Compiler for InProcessCompiler {
    fn compile(
        &self,
        bytes: &[u8],
        name: &str,
        deadline: Deadline,
        lane: LaneGuard,
    ) -> Result<Vec<u8>, UploadError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let owned = bytes.to_vec();
        let spawned = std::thread::Builder::new()
            .name("module-compile".into())
            .spawn(crate::log_span::in_current_span(move || {
                let engine = runtime::engine::compile_engine();
                let compiled = engine.precompile_component(&owned);
                // Freed before the answer is sent, so whoever receives it finds the lane free
                // (it was freed after the send: a caller could see its compile still running).
                drop(lane);
                let _ = tx.send(compiled);
            }));
        if let Err(source) = spawned {
            return Err(UploadError::Staging {
                action: "start a compile thread for",
                path: PathBuf::from(name),
                source,
            });
        }
        let answer = match deadline {
            Deadline::Refuse(limit) => rx.recv_timeout(limit),
            Deadline::Warn(limit) => match rx.recv_timeout(limit) {
                Err(RecvTimeoutError::Timeout) => {
                    warn_overrun(name, limit);
                    rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
                }
                answer => answer,
            },
        };
        match (answer, deadline) {
            (Ok(Ok(artifact)), _) => Ok(artifact),
            (Ok(Err(e)), _) => Err(UploadError::Compile {
                name: name.to_string(),
                message: format!("{e:?}"),
            }),
            (Err(RecvTimeoutError::Timeout), Deadline::Refuse(limit) | Deadline::Warn(limit)) => {
                Err(too_slow(name, limit))
            }
            (Err(RecvTimeoutError::Disconnected), _) => Err(UploadError::Internal(format!(
                "the compile thread for module {name} died"
            ))),
        }
    }
}

/// Compiles in a child process (`<program> debug compile-module`), killed at the deadline so
/// its memory and core come back at once. Input and output travel as files in a private
/// scratch directory under `scratch_root`, removed afterwards.
#[derive(Debug, Clone)]
pub struct SubprocessCompiler {
    program: PathBuf,
    scratch_root: PathBuf,
}

impl SubprocessCompiler {
    /// Runs `program` (the `modnode` binary) with scratch files under `scratch_root`.
    pub fn new(program: PathBuf, scratch_root: PathBuf) -> Self {
        Self {
            program,
            scratch_root,
        }
    }
}

/// How often a compiling child is looked at: first often (most modules compile in
/// milliseconds), then at most every 20 ms.
fn next_poll(waited: Duration) -> Duration {
    waited
        .checked_div(4)
        .unwrap_or_default()
        .clamp(Duration::from_millis(1), Duration::from_millis(20))
}

impl Compiler for SubprocessCompiler {
    fn compile(
        &self,
        bytes: &[u8],
        name: &str,
        deadline: Deadline,
        lane: LaneGuard,
    ) -> Result<Vec<u8>, UploadError> {
        let _lane = lane;
        std::fs::create_dir_all(&self.scratch_root)
            .map_err(super::staging_error("create", &self.scratch_root))?;
        let scratch = tempfile::Builder::new()
            .prefix("compile-")
            .tempdir_in(&self.scratch_root)
            .map_err(super::staging_error(
                "create a compile directory in",
                &self.scratch_root,
            ))?;
        let input = scratch.path().join("module.wasm");
        let output = scratch.path().join("module.cwasm");
        let errors = scratch.path().join("stderr");
        std::fs::write(&input, bytes).map_err(super::staging_error("write", &input))?;
        let stderr =
            std::fs::File::create(&errors).map_err(super::staging_error("create", &errors))?;
        let mut child = Command::new(&self.program)
            .args(["debug", "compile-module", "--input"])
            .arg(&input)
            .arg("--output")
            .arg(&output)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(super::staging_error("run the compiler", &self.program))?;
        let started = Instant::now();
        let (limit, refuse) = match deadline {
            Deadline::Refuse(limit) => (limit, true),
            Deadline::Warn(limit) => (limit, false),
        };
        let mut warned = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(source) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(UploadError::Staging {
                        action: "wait for the compiler of",
                        path: PathBuf::from(name),
                        source,
                    });
                }
            }
            let waited = started.elapsed();
            if waited >= limit {
                if refuse {
                    // Killed and reaped before the lane is freed: nothing of it is left.
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(too_slow(name, limit));
                }
                if !warned {
                    warn_overrun(name, limit);
                    warned = true;
                }
            }
            std::thread::sleep(next_poll(waited));
        };
        if status.success() {
            return std::fs::read(&output)
                .map_err(super::staging_error("read the compiled artifact", &output));
        }
        let message = std::fs::read_to_string(&errors).unwrap_or_default();
        let message = message.trim();
        if status.code() == Some(EXIT_MODULE_DOES_NOT_COMPILE) {
            return Err(UploadError::Compile {
                name: name.to_string(),
                message: message.to_string(),
            });
        }
        Err(UploadError::Internal(format!(
            "the compiler process for module {name} failed ({status}): {message}"
        )))
    }
}

/// Why `modnode debug compile-module` failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileFileError {
    /// The input could not be read or the output written (the node's fault).
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The module does not compile (the module's fault).
    #[error("module does not compile: {0:?}")]
    Compile(wasmtime::Error),
}

/// The child's side: compiles the component in `input` with
/// [`compile_engine`](runtime::engine::compile_engine) and writes the artifact to `output`.
pub fn compile_file(input: &Path, output: &Path) -> Result<(), CompileFileError> {
    let io = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| CompileFileError::Io {
            action,
            path,
            source,
        }
    };
    let bytes = std::fs::read(input).map_err(io("read", input))?;
    let artifact = runtime::engine::compile_engine()
        .precompile_component(&bytes)
        .map_err(CompileFileError::Compile)?;
    std::fs::write(output, artifact).map_err(io("write", output))
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::modules_store::upload::{Admission, ModuleService, UploadConfig, UploadOutcome};

    /// The in-process compiler, except that its first compile waits for the test's word.
    #[derive(Debug)]
    struct Gated {
        entered: Mutex<Option<mpsc::Sender<()>>>,
        release: Mutex<Option<mpsc::Receiver<()>>>,
    }

    impl Compiler for Gated {
        fn compile(
            &self,
            bytes: &[u8],
            name: &str,
            deadline: Deadline,
            lane: LaneGuard,
        ) -> Result<Vec<u8>, UploadError> {
            let gate = self.release.lock().unwrap().take();
            if let Some(release) = gate {
                let entered = self.entered.lock().unwrap().take().unwrap();
                entered.send(()).unwrap();
                release.recv().unwrap();
            }
            InProcessCompiler.compile(bytes, name, deadline, lane)
        }
    }

    #[test]
    fn a_scheduled_module_compiles_while_an_upload_is_compiling() {
        let dir = tempfile::tempdir().unwrap();
        let (entered_tx, entered) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let service = ModuleService::open(
            dir.path(),
            dir.path().join("cache"),
            UploadConfig::default(),
        )
        .unwrap()
        .with_compiler(Arc::new(Gated {
            entered: Mutex::new(Some(entered_tx)),
            release: Mutex::new(Some(release_rx)),
        }));
        let policy = crate::artifacts::embedded("gossip-policy-v1").unwrap();
        let deposits = crate::artifacts::embedded("deposits-v1").unwrap();
        std::thread::scope(|s| {
            // Owned here so that a failed assertion drops it and frees the gated upload.
            let release = release;
            let upload = s.spawn(|| service.upload(policy, "operator"));
            entered.recv_timeout(Duration::from_secs(60)).unwrap();
            assert!(service.upload_compiling());
            // Another upload still finds its lane busy...
            let busy = service.upload(deposits, "operator").unwrap_err();
            assert!(matches!(busy, UploadError::Busy), "{busy}");
            // ...but the chain's module does not wait for the upload.
            let scheduled = service
                .admit(deposits, "peer p", Admission::Scheduled { kind: None })
                .unwrap();
            assert!(
                matches!(scheduled, UploadOutcome::Ready(_)),
                "{scheduled:?}"
            );
            assert!(service.upload_compiling());
            release.send(()).unwrap();
            let uploaded = upload.join().unwrap().unwrap();
            assert!(matches!(uploaded, UploadOutcome::Ready(_)), "{uploaded:?}");
        });
        assert!(!service.upload_compiling());
        assert_eq!(service.store().list().unwrap().len(), 2);
    }

    #[test]
    fn a_lane_admits_one_and_frees_on_drop() {
        let lane = Arc::new(Lane::default());
        let first = lane.try_enter().unwrap();
        assert!(lane.try_enter().is_none());
        std::thread::scope(|s| {
            let waiter = s.spawn(|| drop(lane.enter()));
            drop(first);
            waiter.join().unwrap();
        });
        assert!(!lane.is_busy());
    }
}
