//! The module service: the store with the module lifecycle in front of it
//! ([`lifecycle`](super::lifecycle): validate once → compile → warm → store → admit), its
//! limits and who may be refused by them. A rejected upload leaves nothing behind: no store
//! entry, no cached artifact.
//!
//! The order is cheapest check first: size, hash (a second upload of the same bytes is a no-op),
//! then one pass over the bytes that reads the code's bounds ([`code_limits`]: functions,
//! locals, body size, types, data, tables — each before the validator reads it), validates
//! (component, known world, compatible contract, only modnode's imports, wasm features), then
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

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmparser::{Validator, WasmFeatures};

use super::lifecycle::LifePath;
use super::{ModuleRecord, ModuleStore, ModuleStoreError};

mod admission;
pub mod code_limits;
pub mod compiler;
mod error;

use crate::hashes::ModuleHash;
use crate::runtime::modules::{ReadyInfo, ReadyVersions};
use crate::runtime::{Modules, Runtime, RuntimeConfig};
pub use admission::Admission;
pub(super) use admission::local_limit;
pub use code_limits::check_code_limits;
use compiler::{Compiler, Deadline, InProcessCompiler, Lane, SubprocessCompiler};
pub(crate) use error::count_refusal;
pub use error::{UploadError, refusals};

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

/// What an accepted upload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UploadOutcome {
    /// Validated, compiled, warmed and stored.
    Ready(ModuleRecord),
    /// The same bytes were already stored; nothing was done.
    AlreadyStored(ModuleRecord),
}

impl UploadOutcome {
    /// The module's metadata.
    pub fn module(&self) -> &ModuleRecord {
        match self {
            UploadOutcome::Ready(m) | UploadOutcome::AlreadyStored(m) => m,
        }
    }
}

/// The node's module store with the module lifecycle in front of it
/// ([`lifecycle`](super::lifecycle): validate once → compile → warm → store → admit), and the
/// ready-map the lifecycle admits into ([`ReadyVersions`]: the node's slots' when it runs
/// slots, else its own).
pub struct ModuleService {
    pub(super) store: ModuleStore,
    pub(super) data_dir: PathBuf,
    pub(super) cache_dir: PathBuf,
    pub(super) config: UploadConfig,
    compiler: Arc<dyn Compiler>,
    /// The operator's uploads: one compile; another upload meanwhile is refused as busy.
    operator_lane: Arc<Lane>,
    /// Modules the chain scheduled: one compile; the next waits for it, never for an upload.
    scheduled_lane: Arc<Lane>,
    /// The one ready-map, set by [`with_slots`](Self::with_slots) or
    /// [`admit_into`](Self::admit_into), or made on first use.
    versions: Mutex<Option<Arc<ReadyVersions>>>,
}

impl std::fmt::Debug for ModuleService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleService")
            .field("store", &self.store)
            .field("config", &self.config)
            .finish_non_exhaustive()
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
            versions: Mutex::new(None),
        })
    }

    /// Admits into the ready-map of the node's module slots, so each accepted module is
    /// activatable by hash there, and warms uploads on the node's recent real inputs of their
    /// kind.
    pub fn with_slots(self, slots: Arc<Modules>) -> Self {
        self.admit_into(slots.versions().clone());
        self
    }

    /// Admits into `versions` from now on (the node's ready-map, held by whoever runs its
    /// modules: the upgrade agent hands its own over), unless this service admitted into
    /// another ready-map already; whether `versions` is the one it admits into.
    pub fn admit_into(&self, versions: Arc<ReadyVersions>) -> bool {
        let mut current = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        match current.as_ref() {
            Some(existing) => Arc::ptr_eq(existing, &versions),
            None => {
                *current = Some(versions);
                true
            }
        }
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

    /// The ready-map admitted into: the slots' ([`with_slots`](Self::with_slots)), else one
    /// of this service's own over a runtime on the node's artifact cache, made on first use.
    pub fn versions(&self) -> Result<Arc<ReadyVersions>, UploadError> {
        let mut versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(versions) = versions.as_ref() {
            return Ok(versions.clone());
        }
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: Some(self.cache_dir.clone()),
            ..RuntimeConfig::default()
        })
        .map_err(|e| UploadError::Internal(format!("cannot start the module runtime: {e}")))?;
        let made = Arc::new(ReadyVersions::new(
            runtime,
            crate::runtime::modules::WARMUP_REAL_TIME,
        ));
        *versions = Some(made.clone());
        Ok(made)
    }

    /// The ready version with this hash (uploaded, fetched or prepared from the store since
    /// start; built in too when the service runs the node's slots), if any.
    pub fn ready(&self, sha256: &ModuleHash) -> Option<ReadyInfo> {
        let versions = self.versions.lock().unwrap_or_else(|p| p.into_inner());
        versions.as_ref()?.prepared_version(sha256)
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
        let path = match admission {
            Admission::Operator => LifePath::Upload,
            Admission::Scheduled { .. } => LifePath::PeerFetch,
        };
        let result = self.run_new(bytes, source, admission, path);
        if let Err(refusal) = &result {
            count_refusal(refusal.code());
        }
        result
    }

    /// Compiles in the lane of `admission`: an operator's upload is refused as busy while
    /// another compiles and at the deadline; a module the chain scheduled waits for the
    /// scheduled module before it (never for an upload) and only warns at the deadline.
    pub(super) fn compile(
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
pub(crate) fn staging_error(
    action: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> UploadError {
    let path = path.to_path_buf();
    move |source| UploadError::Staging {
        action,
        path,
        source,
    }
}

/// Validates `bytes` with only [`allowed_features`] enabled (the module lifecycle checks the
/// features inside its one validating pass instead).
pub fn check_features(bytes: &[u8]) -> Result<(), UploadError> {
    crate::runtime::inspect::passes::count();
    Validator::new_with_features(allowed_features())
        .validate_all(bytes)
        .map(|_| ())
        .map_err(|e| UploadError::Feature {
            message: e.to_string(),
        })
}
