//! Upload of a module: validate, precompile on a worker thread under a deadline, warm, and only
//! then store. A rejected upload leaves nothing behind: no store entry, no cached artifact.
//!
//! The order is cheapest check first: size, hash (a second upload of the same bytes is a no-op),
//! the code's bounds read off the bytes ([`code_limits`]: functions, locals, body size, types,
//! data, tables — before even validating, which is itself linear in them), static validation
//! (component, known world, compatible contract, only modnode's imports), wasm features, then
//! compilation (bounded in time and output size) and warm-up.
//! Compilation ([`compiler`]) holds no lock the node's import path needs and uses one core; the
//! node compiles in a child process killed at the deadline, so a hostile module costs at most
//! one core for the length of the deadline and leaves no memory behind. Operator uploads and
//! modules the chain scheduled compile in separate lanes: an upload never delays a scheduled
//! module.
//!
//! Those bounds are the operator's policy for what *they* upload ([`Admission::Operator`]).
//! A module the chain scheduled ([`Admission::Scheduled`]: fetched from peers by hash) is
//! admitted on the chain's word: a slow machine, a small `--max-module-bytes` or a warm-up
//! that fails on this node's own recent blocks must not stop this node at the activation height
//! while the others go on. Only what is the same on every node refuses it — the bytes as a
//! component, its kind and contract, the wasm features the engine enables, compiling, linking
//! and its own `describe`; the local limits (size, code size, compile time, compiled size,
//! warm-up) only warn.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmparser::{Validator, WasmFeatures};

use super::{ModuleStore, ModuleStoreError, StoredModule};

mod admission;
pub mod code_limits;
pub mod compiler;

use crate::runtime::{
    self, LoadError, LoadedModule, Modules, Runtime, RuntimeConfig, ValidationError,
};
pub use admission::Admission;
use admission::local_limit;
pub use code_limits::check_code_limits;
use compiler::{Compiler, Deadline, InProcessCompiler, Lane, SubprocessCompiler};

/// Default largest module accepted, in bytes.
pub const DEFAULT_MAX_MODULE_BYTES: usize = 8 << 20;

/// Limits of an upload.
#[derive(Debug, Clone)]
pub struct UploadConfig {
    /// Largest component accepted, in bytes.
    pub max_module_bytes: usize,
    /// Largest single function body, in bytes of wasm code: huge bodies are what make
    /// optimising compilers slow.
    pub max_function_body_bytes: usize,
    /// Largest compiled artifact, in bytes.
    pub max_compiled_bytes: usize,
    /// Longest a compile may take before the module is rejected.
    pub compile_timeout: Duration,
    /// The `modnode` binary to compile in, as a child process killed at the deadline; `None`
    /// compiles in this process (library use and tests: an overrun compile is abandoned but
    /// runs on). `modnode run` sets it.
    pub compile_program: Option<PathBuf>,
}

impl Default for UploadConfig {
    fn default() -> Self {
        Self {
            max_module_bytes: DEFAULT_MAX_MODULE_BYTES,
            max_function_body_bytes: 1 << 20,
            max_compiled_bytes: 64 << 20,
            compile_timeout: Duration::from_secs(20),
            compile_program: None,
        }
    }
}

/// The wasm features an uploaded module may use: WebAssembly 2.0 (which includes
/// deterministic SIMD) and the component model. Threads, relaxed SIMD, GC, exceptions,
/// memory64 and other proposals are refused up front with the feature named, before the
/// engine sees the module.
pub fn allowed_features() -> WasmFeatures {
    WasmFeatures::WASM2 | WasmFeatures::COMPONENT_MODEL
}

/// Why an upload was refused. Every variant except [`UploadError::Busy`] (transient) and
/// the node's own failures ([`UploadError::is_module_fault`] is false) is the module's fault
/// and permanent.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// Larger than the configured cap.
    #[error("module is {size} bytes; the upload limit is {limit} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The cap.
        limit: usize,
    },
    /// Static validation failed (not a component, unknown world, contract, imports).
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// It uses a wasm feature the engine does not enable for modules.
    #[error("module uses a WebAssembly feature modnode does not enable: {message}")]
    Feature {
        /// The validator's message naming the feature.
        message: String,
    },
    /// Its code is larger than allowed.
    #[error("module code too large: {what} is {size} bytes, the limit is {limit} bytes")]
    CodeTooLarge {
        /// What was measured.
        what: &'static str,
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Its code is over one of the bounds read from the bytes before compiling
    /// ([`code_limits`]).
    #[error(
        "module code over a limit: {what} is {value}, the limit is {max} ({reason}); refused \
         before compiling"
    )]
    CodeLimit {
        /// What was counted.
        what: &'static str,
        /// Its value (the count reached when it went over).
        value: u64,
        /// The limit.
        max: u64,
        /// Why the limit exists.
        reason: &'static str,
    },
    /// Compiling it took longer than the bound.
    #[error(
        "module {name} took longer than {limit:?} to compile; refused so it cannot stall the node"
    )]
    CompileTooSlow {
        /// The module.
        name: String,
        /// The bound.
        limit: Duration,
    },
    /// The engine could not compile it.
    #[error("module {name} does not compile: {message}")]
    Compile {
        /// The module.
        name: String,
        /// wasmtime's message.
        message: String,
    },
    /// It compiled but could not be linked or failed its warm-up call.
    #[error("module {name} failed to warm up: {source}")]
    Warmup {
        /// The module.
        name: String,
        /// What failed.
        #[source]
        source: LoadError,
    },
    /// It loaded but failed its warm-up dry run (a trap or running out of fuel on the kind's
    /// built-in inputs or on one of the node's recent real inputs).
    #[error("module {name} failed its warm-up dry run: {message}")]
    DryRun {
        /// The module.
        name: String,
        /// What failed, on which input.
        message: String,
    },
    /// The chain scheduled it as another kind than it is (or it is of a local kind).
    #[error("module {name} cannot be admitted for the chain: {message}")]
    WrongKind {
        /// The module.
        name: String,
        /// What is wrong with its kind.
        message: String,
    },
    /// A previous compile is still running (transient; retry later).
    #[error("a previous module upload is still compiling; retry when it has finished")]
    Busy,
    /// The upload task itself failed (our fault).
    #[error("the upload task failed: {0}")]
    Internal(String),
    /// The store failed (our fault).
    #[error(transparent)]
    Store(#[from] ModuleStoreError),
    /// The staging directory or the artifact cache could not be written (our fault).
    #[error("cannot {action} {}: {source}", path.display())]
    Staging {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Refusals counted per [`UploadError::code`] since the process started, for `/metrics`
/// (`modnode_module_refused_<code>_total`): uploads and modules fetched for the chain alike.
static REFUSALS: [(&str, AtomicU64); 14] = [
    ("too-large", AtomicU64::new(0)),
    ("not-a-component", AtomicU64::new(0)),
    ("unknown-world", AtomicU64::new(0)),
    ("incompatible-contract", AtomicU64::new(0)),
    ("forbidden-import", AtomicU64::new(0)),
    ("wasm-feature", AtomicU64::new(0)),
    ("code-too-large", AtomicU64::new(0)),
    ("compile-too-slow", AtomicU64::new(0)),
    ("compile-failed", AtomicU64::new(0)),
    ("wrong-signature", AtomicU64::new(0)),
    ("warm-up-failed", AtomicU64::new(0)),
    ("wrong-kind", AtomicU64::new(0)),
    ("busy", AtomicU64::new(0)),
    ("node-error", AtomicU64::new(0)),
];

fn count_refusal(code: &str) {
    if let Some((_, counter)) = REFUSALS.iter().find(|(c, _)| *c == code) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Modules refused with `code` (an [`UploadError::code`]) since the process started.
pub fn refusals(code: &str) -> u64 {
    REFUSALS
        .iter()
        .find(|(c, _)| *c == code)
        .map_or(0, |(_, counter)| counter.load(Ordering::Relaxed))
}

impl UploadError {
    /// A short stable code for the class of refusal, for clients and tests.
    pub fn code(&self) -> &'static str {
        match self {
            UploadError::TooLarge { .. } => "too-large",
            UploadError::Invalid(ValidationError::TooLarge { .. }) => "too-large",
            UploadError::Invalid(
                ValidationError::NotWasm { .. }
                | ValidationError::CoreModule
                | ValidationError::Malformed { .. },
            ) => "not-a-component",
            UploadError::Invalid(
                ValidationError::UnknownWorld { .. } | ValidationError::AmbiguousWorld(_),
            ) => "unknown-world",
            UploadError::Invalid(ValidationError::IncompatibleContract { .. }) => {
                "incompatible-contract"
            }
            UploadError::Invalid(ValidationError::ForbiddenImport { .. }) => "forbidden-import",
            UploadError::Feature { .. } => "wasm-feature",
            UploadError::CodeTooLarge { .. } | UploadError::CodeLimit { .. } => "code-too-large",
            UploadError::CompileTooSlow { .. } => "compile-too-slow",
            UploadError::Compile { .. } => "compile-failed",
            UploadError::Warmup {
                source: LoadError::Signature { .. },
                ..
            } => "wrong-signature",
            UploadError::Warmup { .. } | UploadError::DryRun { .. } => "warm-up-failed",
            UploadError::WrongKind { .. } => "wrong-kind",
            UploadError::Busy => "busy",
            UploadError::Store(_) | UploadError::Staging { .. } | UploadError::Internal(_) => {
                "node-error"
            }
        }
    }

    /// Whether the module is at fault (and a retry with the same bytes will fail again).
    pub fn is_module_fault(&self) -> bool {
        !matches!(
            self,
            UploadError::Busy
                | UploadError::Store(_)
                | UploadError::Staging { .. }
                | UploadError::Internal(_)
        )
    }
}

/// What an accepted upload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadOutcome {
    /// Validated, compiled, warmed and stored.
    Ready(StoredModule),
    /// The same bytes were already stored; nothing was done.
    AlreadyStored(StoredModule),
}

impl UploadOutcome {
    /// The module's metadata.
    pub fn module(&self) -> &StoredModule {
        match self {
            UploadOutcome::Ready(m) | UploadOutcome::AlreadyStored(m) => m,
        }
    }
}

/// The node's module store with the upload pipeline in front of it, and the warmed modules
/// uploaded since start.
pub struct ModuleService {
    store: ModuleStore,
    data_dir: PathBuf,
    cache_dir: PathBuf,
    config: UploadConfig,
    compiler: Arc<dyn Compiler>,
    /// The operator's uploads: one compile; another upload meanwhile is refused as busy.
    operator_lane: Arc<Lane>,
    /// Modules the chain scheduled: one compile; the next waits for it, never for an upload.
    scheduled_lane: Arc<Lane>,
    ready: Mutex<HashMap<[u8; 32], LoadedModule>>,
    slots: Option<Arc<Modules>>,
}

impl std::fmt::Debug for ModuleService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleService")
            .field("store", &self.store)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A staging directory removed when dropped.
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.0.display(), error = %e, "cannot remove module staging directory");
        }
    }
}

impl ModuleService {
    /// Opens the store in `data_dir`; compiled artifacts of accepted modules go to `cache_dir`
    /// (the node's artifact cache, so later loads skip compilation).
    pub fn open(
        data_dir: &Path,
        cache_dir: PathBuf,
        config: UploadConfig,
    ) -> Result<Self, ModuleStoreError> {
        let compiler: Arc<dyn Compiler> = match &config.compile_program {
            Some(program) => Arc::new(SubprocessCompiler::new(
                program.clone(),
                data_dir.join("module-staging"),
            )),
            None => Arc::new(InProcessCompiler),
        };
        Ok(Self {
            store: ModuleStore::open(data_dir)?,
            data_dir: data_dir.to_path_buf(),
            cache_dir,
            config,
            compiler,
            operator_lane: Arc::default(),
            scheduled_lane: Arc::default(),
            ready: Mutex::new(HashMap::new()),
            slots: None,
        })
    }

    /// Warms uploads for the node's module slots (on the node's recent real inputs of their
    /// kind) and makes each accepted one activatable by hash there.
    pub fn with_slots(mut self, slots: Arc<Modules>) -> Self {
        self.slots = Some(slots);
        self
    }

    /// Compiles with `compiler` instead of the one [`UploadConfig::compile_program`] chose.
    pub fn with_compiler(mut self, compiler: Arc<dyn Compiler>) -> Self {
        self.compiler = compiler;
        self
    }

    /// Whether an operator's upload is compiling (another would be refused as busy).
    pub fn upload_compiling(&self) -> bool {
        self.operator_lane.is_busy()
    }

    /// The store.
    pub fn store(&self) -> &ModuleStore {
        &self.store
    }

    /// The limits.
    pub fn config(&self) -> &UploadConfig {
        &self.config
    }

    /// The warmed module uploaded since start with this hash, if any.
    pub fn ready(&self, sha256: &[u8; 32]) -> Option<LoadedModule> {
        self.ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sha256)
            .cloned()
    }

    /// Validates, precompiles, warms and stores `bytes` the operator uploaded (every check
    /// refuses: [`Admission::Operator`]). Blocking (compiles): call it from a blocking task.
    /// `source` says where the module came from, for the metadata.
    pub fn upload(&self, bytes: &[u8], source: &str) -> Result<UploadOutcome, UploadError> {
        self.admit(bytes, source, Admission::Operator)
    }

    /// [`upload`](Self::upload) with the checks of `admission`: for a module the chain
    /// scheduled, local limits warn instead of refusing (see the module docs).
    pub fn admit(
        &self,
        bytes: &[u8],
        source: &str,
        admission: Admission,
    ) -> Result<UploadOutcome, UploadError> {
        let result = self.admit_counted(bytes, source, admission);
        if let Err(refusal) = &result {
            count_refusal(refusal.code());
        }
        result
    }

    fn admit_counted(
        &self,
        bytes: &[u8],
        source: &str,
        admission: Admission,
    ) -> Result<UploadOutcome, UploadError> {
        if bytes.len() > self.config.max_module_bytes {
            let refusal = UploadError::TooLarge {
                size: bytes.len(),
                limit: self.config.max_module_bytes,
            };
            // Hashed only to name it in the warning (an operator's upload is refused first).
            let name = match admission {
                Admission::Operator => String::new(),
                Admission::Scheduled { .. } => hex::encode(Sha256::digest(bytes)),
            };
            local_limit(admission, &name, refusal)?;
        }
        let sha256: [u8; 32] = Sha256::digest(bytes).into();
        if let Some(existing) = self.store.meta(&sha256)? {
            return Ok(UploadOutcome::AlreadyStored(existing));
        }
        // Bounds read off the bytes come first: validating 990k functions costs seconds
        // already, compiling them minutes. Bytes that are no component at all are left to
        // validation, which says so (a core module is not refused for its code).
        if wasmparser::Parser::is_component(bytes)
            && let Err(refusal) = check_code_limits(bytes, self.config.max_function_body_bytes)
        {
            local_limit(admission, &hex::encode(sha256), refusal)?;
        }
        let info = runtime::inspect::validate(bytes)?;
        let name = format!(
            "{}@{}",
            info.kind,
            hex::encode(sha256.get(..6).unwrap_or_default())
        );
        if let Admission::Scheduled { kind } = admission {
            runtime::modules::check_scheduled_kind(&info, kind).map_err(|e| {
                UploadError::WrongKind {
                    name: name.clone(),
                    message: e.to_string(),
                }
            })?;
        }
        check_features(bytes)?;

        let started = Instant::now();
        let artifact = self.compile(bytes, &name, admission)?;
        let compile_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if artifact.len() > self.config.max_compiled_bytes {
            let refusal = UploadError::CodeTooLarge {
                what: "the compiled artifact",
                size: artifact.len(),
                limit: self.config.max_compiled_bytes,
            };
            local_limit(admission, &name, refusal)?;
        }

        // Warm up from a private staging cache holding only this artifact, so a module that
        // fails here leaves nothing in the node's cache.
        let staging = Staging(self.data_dir.join("module-staging").join(format!(
            "{}-{}",
            hex::encode(sha256),
            std::process::id()
        )));
        let staged_runtime = Runtime::new(RuntimeConfig {
            cache_dir: Some(staging.0.clone()),
            ..RuntimeConfig::default()
        })
        .map_err(|source| UploadError::Warmup {
            name: name.clone(),
            source,
        })?;
        let staged = staged_runtime
            .cache()
            .artifact_path(&sha256)
            .ok_or_else(|| UploadError::Staging {
                action: "find the staging artifact path in",
                path: staging.0.clone(),
                source: std::io::ErrorKind::NotFound.into(),
            })?;
        std::fs::write(&staged, &artifact).map_err(staging_error("write", &staged))?;
        let warm_started = Instant::now();
        let loaded = staged_runtime
            .load(bytes)
            .map_err(|source| UploadError::Warmup {
                name: name.clone(),
                source,
            })?;
        // The dry run: on the node's recent real inputs when it runs slots, else on the
        // kind's built-in realistic inputs.
        let dry_run = |message: String| UploadError::DryRun {
            name: name.clone(),
            message,
        };
        let (warmed, warmup) = match (&self.slots, admission) {
            (Some(slots), Admission::Operator) => {
                let warmed = slots
                    .warm_loaded(loaded.clone())
                    .map_err(|e| dry_run(e.to_string()))?;
                let warmup = warmed.prepared().warmup;
                (Some(warmed), warmup)
            }
            // The slots log the failure; the module is admitted with an empty report.
            (Some(slots), Admission::Scheduled { .. }) => {
                let (warmed, _) = slots.warm_scheduled(loaded.clone());
                let warmup = warmed.prepared().warmup;
                (Some(warmed), warmup)
            }
            (None, _) => match loaded.warm() {
                Ok(warmup) => (None, warmup),
                Err(e) => {
                    local_limit(admission, &name, dry_run(e.to_string()))?;
                    (None, runtime::WarmupReport::default())
                }
            },
        };
        let warm_us = u64::try_from(warm_started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let meta = loaded.meta();
        let stored = StoredModule {
            sha256: hex::encode(sha256),
            kind: info.kind.to_string(),
            contract: info.contract.to_string(),
            module_version: meta.info.version,
            description: meta.info.description.clone(),
            size: u64::try_from(bytes.len()).unwrap_or(u64::MAX),
            first_seen_unix_ms: crate::clock::unix_ms(),
            source: source.to_string(),
            compile_ms,
            warm_us,
            warm_fuel: warmup.fuel,
            warm_real_inputs: warmup.real_inputs,
            compiled_size: u64::try_from(artifact.len()).unwrap_or(u64::MAX),
        };

        // Commit: artifact into the node's cache first (harmless alone: keyed by hash), then
        // the store entry; if the store fails, the artifact goes again.
        std::fs::create_dir_all(&self.cache_dir)
            .map_err(staging_error("create", &self.cache_dir))?;
        let cached = self.cache_dir.join(staged.file_name().unwrap_or_default());
        std::fs::rename(&staged, &cached)
            .map_err(staging_error("move the artifact to", &cached))?;
        if let Err(e) = self.store.insert(&sha256, bytes, &stored) {
            let _ = std::fs::remove_file(&cached);
            return Err(e.into());
        }
        if let (Some(slots), Some(warmed)) = (&self.slots, warmed) {
            slots.admit(warmed);
        }
        tracing::info!(
            module = %stored.name(),
            compile_ms,
            warm_us,
            warm_fuel = warmup.fuel,
            warm_real_inputs = warmup.real_inputs,
            source,
            "module uploaded, compiled and warmed: ready"
        );
        self.ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(sha256, loaded);
        Ok(UploadOutcome::Ready(stored))
    }

    /// Compiles in the lane of `admission`: an operator's upload is refused as busy while
    /// another compiles and at the deadline; a module the chain scheduled waits for the
    /// scheduled module before it (never for an upload) and only warns at the deadline.
    fn compile(
        &self,
        bytes: &[u8],
        name: &str,
        admission: Admission,
    ) -> Result<Vec<u8>, UploadError> {
        let limit = self.config.compile_timeout;
        let (lane, deadline) = match admission {
            Admission::Operator => (
                self.operator_lane.try_enter().ok_or(UploadError::Busy)?,
                Deadline::Refuse(limit),
            ),
            Admission::Scheduled { .. } => (self.scheduled_lane.enter(), Deadline::Warn(limit)),
        };
        self.compiler.compile(bytes, name, deadline, lane)
    }
}

/// An I/O failure of `action` on `path`, for `map_err`.
fn staging_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> UploadError {
    let path = path.to_path_buf();
    move |source| UploadError::Staging {
        action,
        path,
        source,
    }
}

/// Validates `bytes` with only [`allowed_features`] enabled.
pub fn check_features(bytes: &[u8]) -> Result<(), UploadError> {
    Validator::new_with_features(allowed_features())
        .validate_all(bytes)
        .map(|_| ())
        .map_err(|e| UploadError::Feature {
            message: e.to_string(),
        })
}
