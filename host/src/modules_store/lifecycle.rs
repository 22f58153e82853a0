//! A module's life from bytes to ready, in one pipeline every module goes through:
//!
//! ```text
//! bytes ─ validate once ─▶ Validated ─ compile ─▶ Compiled ─ warm ─▶ Warmed ─ store ─▶ Stored ─ admit ─▶ ready
//! ```
//!
//! - **validate once** ([`Validated`]): size, then one pass over the bytes
//!   ([`inspect::validate_once`]) that counts the code's bounds ([`CodeCounter`]: functions,
//!   locals, body size, types, data, tables — each payload before the validator spends time on
//!   it), validates with only the [`allowed_features`], and reads the component's world,
//!   contract and imports; then the kind the chain scheduled, if any. Nothing parses the bytes
//!   again before the engine compiles them.
//! - **compile** ([`Compiled`], holding the engine's [`LinkedModule`]): in the admission's
//!   lane, under its deadline, into a private staging directory, then loaded from there by the
//!   node's own runtime (its one engine: no second runtime), linked and described. A stored
//!   module compiles (or loads from the node's artifact cache) on the runtime directly.
//! - **warm** ([`Warmed`], holding a [`ReadyModule`] not admitted yet): the kind's built-in dry
//!   run plus the node's recent real inputs ([`ReadyVersions::warm_loaded`]); a module the
//!   chain scheduled is never refused here.
//! - **store** ([`Stored`], with its [`ModuleRecord`], the store's metadata): the artifact
//!   moves from staging into the node's artifact cache, then bytes and metadata go into the
//!   [`ModuleStore`] in one batch (not for a built-in module: it is not stored). Until here nothing of
//!   the module is in the node's cache or store, so a module refused at any stage leaves
//!   nothing behind (the staging directory goes with the [`Staging`] guard). A module read
//!   from the store skips this stage: it is stored already.
//! - **admit**: the [`ReadyModule`] into the one ready-map ([`ReadyVersions`]): activatable by
//!   hash, runnable by the chain at the heights its schedule names it for; reported as a
//!   [`ReadyInfo`].
//!
//! Four paths enter it ([`LifePath`]): the operator's upload (`POST /modules`), a module the
//! chain scheduled fetched from a peer (`node/network/module_fetch.rs`; admitted on the
//! chain's word — [`Admission::Scheduled`]), the stored modules prepared at start
//! (`node/module_ops.rs`; also a stored module activated or scheduled later), and the modules
//! built into the binary prepared at start (`node/start.rs`; compiled in process, never
//! stored).

use std::path::PathBuf;
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::ModuleRecord;
use super::upload::code_limits::CodeCounter;
use super::upload::{
    Admission, ModuleService, UploadError, UploadOutcome, allowed_features, local_limit,
    staging_error,
};
use crate::hashes::ModuleHash;
use crate::runtime::inspect::{self, OnePassError};
use crate::runtime::modules::{ReadyInfo, ReadyModule, check_scheduled_kind};
use crate::runtime::{ComponentInfo, LinkedModule, WarmupReport};

/// Which way a module came into the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LifePath {
    /// The operator's upload.
    Upload,
    /// A module the chain scheduled, fetched from a peer.
    PeerFetch,
    /// A module read back from the store (at start, or when activated or scheduled later).
    StartUp,
    /// A module built into the binary, prepared at start.
    BuiltIn,
}

/// A stage of the pipeline, as the stage observer of the tests sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Validated once.
    Validated,
    /// Compiled (or loaded from the artifact cache), linked and described.
    Compiled,
    /// Warmed.
    Warmed,
    /// Stored.
    Stored,
    /// Admitted into the ready-map.
    Admitted,
}

/// Bytes validated in one pass: what the later stages need to know about them.
#[derive(Debug)]
pub struct Validated<'b> {
    bytes: &'b [u8],
    info: ComponentInfo,
    /// `<kind>@<hash prefix>`, how messages name the module until it has described itself.
    name: String,
}

/// A module compiled, linked and described, with its artifact still in staging (upload and
/// fetch) or already in the node's cache (a stored module).
pub struct Compiled<'b> {
    validated: Validated<'b>,
    linked: LinkedModule,
    staged: Option<StagedArtifact>,
    compile_ms: u64,
}

/// A compiled module that passed its warm-up (or that the chain scheduled): ready, not
/// admitted yet.
pub struct Warmed<'b> {
    compiled: Compiled<'b>,
    ready: ReadyModule,
    warmup: WarmupReport,
    warm_us: u64,
}

/// A warmed module whose artifact is in the node's cache and whose bytes and metadata are in
/// the store.
pub struct Stored {
    record: ModuleRecord,
    ready: ReadyModule,
}

/// A compiled artifact in its private staging directory, removed with it.
struct StagedArtifact {
    path: PathBuf,
    size: u64,
    _dir: Staging,
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

/// What the tests observe of the pipeline: every stage passed on this thread, with its path
/// and module.
#[cfg(any(test, feature = "test-utils"))]
pub mod observed {
    use super::{LifePath, ModuleHash, Stage};

    thread_local! {
        static STAGES: std::cell::RefCell<Vec<(LifePath, Stage, ModuleHash)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    pub(super) fn record(path: LifePath, stage: Stage, hash: ModuleHash) {
        STAGES.with(|s| s.borrow_mut().push((path, stage, hash)));
    }

    /// The stages passed on this thread since the last call, oldest first.
    pub fn take() -> Vec<(LifePath, Stage, ModuleHash)> {
        STAGES.with(|s| std::mem::take(&mut *s.borrow_mut()))
    }
}

fn passed(path: LifePath, stage: Stage, hash: ModuleHash) {
    #[cfg(any(test, feature = "test-utils"))]
    observed::record(path, stage, hash);
    #[cfg(not(any(test, feature = "test-utils")))]
    let _ = (path, stage, hash);
}

fn elapsed_ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl ModuleService {
    /// The pipeline for bytes not stored yet (an upload, a fetched module): validate once →
    /// compile → warm → store → admit. Bytes already stored are not taken again
    /// ([`UploadOutcome::AlreadyStored`]).
    pub(super) fn run_new(
        &self,
        bytes: &[u8],
        source: &str,
        admission: Admission,
        path: LifePath,
    ) -> Result<UploadOutcome, UploadError> {
        let sha256 = ModuleHash(Sha256::digest(bytes).into());
        if bytes.len() > self.config.max_module_bytes {
            let refusal = UploadError::TooLarge {
                size: bytes.len(),
                limit: self.config.max_module_bytes,
            };
            local_limit(admission, &sha256.to_hex(), refusal)?;
        }
        if let Some(existing) = self.store.meta(&sha256)? {
            return Ok(UploadOutcome::AlreadyStored(existing));
        }
        let validated = self.validate(bytes, admission, true, path)?;
        let compiled = self.compile_staged(validated, admission, path)?;
        let warmed = self.warm(compiled, admission, path)?;
        let stored = self.store_module(warmed, source, path)?;
        tracing::info!(
            module = %stored.record.name(),
            compile_ms = stored.record.compile_ms,
            warm_us = stored.record.warm_us,
            warm_fuel = stored.record.warm_fuel,
            warm_real_inputs = stored.record.warm_real_inputs,
            source,
            "module uploaded, compiled and warmed: ready"
        );
        let record = stored.record.clone();
        self.admit_stored(stored, path)?;
        Ok(UploadOutcome::Ready(record))
    }

    /// The pipeline for bytes read back from the store: validate once → compile (or load
    /// from the artifact cache) → warm → admit; the store stage is already done. The features
    /// and the kind the chain scheduled refuse it as they would a new module; the local limits
    /// were the upload's business. A module already ready is not prepared again
    /// ([`ReadyInfo::new`] is `false`).
    pub fn prepare_stored(
        &self,
        bytes: &[u8],
        admission: Admission,
    ) -> Result<ReadyInfo, UploadError> {
        self.prepare_known(bytes, admission, LifePath::StartUp)
    }

    /// The pipeline for a module built into the binary: validate once → compile → warm →
    /// admit, as [`prepare_stored`](Self::prepare_stored) but without a store stage (built-in
    /// modules are not stored). It compiles in this process, on the node's runtime (from the
    /// node's artifact cache when compiled before): the bytes are the binary's own, so there
    /// is no hostile compile to bound with a child process and a deadline. Every check
    /// refuses ([`Admission::Operator`]); a module already ready is not prepared again.
    pub fn prepare_built_in(&self, bytes: &[u8]) -> Result<ReadyInfo, UploadError> {
        self.prepare_known(bytes, Admission::Operator, LifePath::BuiltIn)
    }

    /// Validate once → compile in process (or load from the artifact cache) → warm → admit:
    /// the pipeline of bytes that need no store stage (stored or built in).
    fn prepare_known(
        &self,
        bytes: &[u8],
        admission: Admission,
        path: LifePath,
    ) -> Result<ReadyInfo, UploadError> {
        let versions = self.versions()?;
        let validated = self.validate(bytes, admission, false, path)?;
        if let Some(known) = versions.prepared_version(&validated.info.sha256) {
            return Ok(known);
        }
        let started = Instant::now();
        let name = validated.name.clone();
        let linked = versions
            .runtime()
            .load_validated(bytes, validated.info.clone())
            .map_err(|source| UploadError::Warmup { name, source })?;
        passed(path, Stage::Compiled, validated.info.sha256);
        let compiled = Compiled {
            validated,
            linked,
            staged: None,
            compile_ms: elapsed_ms(started),
        };
        let warmed = self.warm(compiled, admission, path)?;
        let hash = warmed.compiled.validated.info.sha256;
        let prepared = versions.admit(warmed.ready);
        passed(path, Stage::Admitted, hash);
        Ok(prepared)
    }

    /// Validate once: one pass over the bytes reads the code's bounds (when `code_limits`),
    /// validates with only the allowed features and says what the component is; then the kind
    /// the chain scheduled it as, if any, and last the features, in the order refusals have
    /// always been named.
    fn validate<'b>(
        &self,
        bytes: &'b [u8],
        admission: Admission,
        code_limits: bool,
        path: LifePath,
    ) -> Result<Validated<'b>, UploadError> {
        let mut counter = CodeCounter::new(self.config.max_function_body_bytes);
        let mut over_limit = None;
        let pass = inspect::validate_once(bytes, allowed_features(), |payload| {
            if !code_limits {
                return Ok(());
            }
            match counter.visit(payload) {
                Err(refusal) if admission != Admission::Operator => {
                    // Scheduled: noted and warned about below; the pass reads on.
                    counter.stop();
                    over_limit = Some(refusal);
                    Ok(())
                }
                other => other,
            }
        });
        let (info, feature) = match pass {
            Ok(info) => (info, None),
            Err(OnePassError::Visit(refusal)) => return Err(refusal),
            Err(OnePassError::Invalid(invalid)) => return Err(invalid.into()),
            Err(OnePassError::Feature { info, message }) => {
                (*info, Some(UploadError::Feature { message }))
            }
        };
        let hex = info.sha256.to_hex();
        let name = format!("{}@{}", info.kind, hex.get(..12).unwrap_or(&hex));
        if let Some(refusal) = over_limit {
            local_limit(admission, &hex, refusal)?;
        }
        if let Admission::Scheduled { kind } = admission {
            check_scheduled_kind(&info, kind).map_err(|e| UploadError::WrongKind {
                name: name.clone(),
                message: e.to_string(),
            })?;
        }
        if let Some(feature) = feature {
            return Err(feature);
        }
        passed(path, Stage::Validated, info.sha256);
        Ok(Validated { bytes, info, name })
    }

    /// Compile: in the admission's lane and under its deadline, into a private staging
    /// directory; then the node's runtime loads the artifact from there, links it and has it
    /// describe itself. The node's cache is not touched.
    fn compile_staged<'b>(
        &self,
        validated: Validated<'b>,
        admission: Admission,
        path: LifePath,
    ) -> Result<Compiled<'b>, UploadError> {
        let started = Instant::now();
        let artifact = self.compile(validated.bytes, &validated.name, admission)?;
        let compile_ms = elapsed_ms(started);
        let size = u64::try_from(artifact.len()).unwrap_or(u64::MAX);
        if artifact.len() > self.config.max_compiled_bytes {
            let refusal = UploadError::CodeTooLarge {
                what: "the compiled artifact",
                size: artifact.len(),
                limit: self.config.max_compiled_bytes,
            };
            local_limit(admission, &validated.name, refusal)?;
        }
        let hash = validated.info.sha256;
        let dir = Staging(
            self.data_dir
                .join("module-staging")
                .join(format!("{hash}-{}", std::process::id())),
        );
        std::fs::create_dir_all(&dir.0).map_err(staging_error("create", &dir.0))?;
        let versions = self.versions()?;
        let file_name = versions
            .runtime()
            .cache()
            .artifact_file_name(hash.as_bytes());
        let staged = dir.0.join(file_name);
        std::fs::write(&staged, &artifact).map_err(staging_error("write", &staged))?;
        let linked = versions
            .runtime()
            .load_staged(&staged, validated.info.clone())
            .map_err(|source| UploadError::Warmup {
                name: validated.name.clone(),
                source,
            })?;
        passed(path, Stage::Compiled, hash);
        Ok(Compiled {
            validated,
            linked,
            staged: Some(StagedArtifact {
                path: staged,
                size,
                _dir: dir,
            }),
            compile_ms,
        })
    }

    /// Warm: on the node's recent real inputs of the kind when the ready-map is the slots',
    /// else on the kind's built-in inputs. The operator's module is refused on a failure; one
    /// the chain scheduled is admitted with the failure in its report (and a warning), and a
    /// stored one read back is refused (left out, to be prepared again when needed) unless
    /// the chain scheduled it.
    fn warm<'b>(
        &self,
        compiled: Compiled<'b>,
        admission: Admission,
        path: LifePath,
    ) -> Result<Warmed<'b>, UploadError> {
        let versions = self.versions()?;
        let started = Instant::now();
        // A stored or built-in module is named as it describes itself, as the slots name it.
        let name = match path {
            LifePath::StartUp | LifePath::BuiltIn => compiled.linked.meta().name(),
            LifePath::Upload | LifePath::PeerFetch => compiled.validated.name.clone(),
        };
        let ready = match admission {
            Admission::Operator => {
                versions
                    .warm_loaded(compiled.linked.clone())
                    .map_err(|e| UploadError::DryRun {
                        name,
                        message: e.to_string(),
                    })?
            }
            Admission::Scheduled { .. } => versions.warm_scheduled(compiled.linked.clone()).0,
        };
        let warm_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let warmup = ready.info(true).warmup;
        passed(path, Stage::Warmed, compiled.validated.info.sha256);
        Ok(Warmed {
            compiled,
            ready,
            warmup,
            warm_us,
        })
    }

    /// Store: the staged artifact into the node's cache first (harmless alone: keyed by hash),
    /// then bytes and metadata in one batch; if the store fails, the artifact goes again.
    fn store_module(
        &self,
        warmed: Warmed<'_>,
        source: &str,
        path: LifePath,
    ) -> Result<Stored, UploadError> {
        let Warmed {
            compiled,
            ready,
            warmup,
            warm_us,
        } = warmed;
        let info = &compiled.validated.info;
        let meta = compiled.linked.meta();
        let staged = compiled.staged.as_ref().ok_or_else(|| {
            UploadError::Internal(format!("module {} has no staged artifact", info.sha256))
        })?;
        let record = ModuleRecord {
            sha256: info.sha256,
            kind: info.kind.to_string(),
            contract: info.contract.to_string(),
            module_version: meta.info.version,
            description: meta.info.description.clone(),
            size: u64::try_from(compiled.validated.bytes.len()).unwrap_or(u64::MAX),
            first_seen_unix_ms: crate::clock::unix_ms(),
            source: source.to_string(),
            compile_ms: compiled.compile_ms,
            warm_us,
            warm_fuel: warmup.fuel,
            warm_real_inputs: warmup.real_inputs,
            compiled_size: staged.size,
        };
        std::fs::create_dir_all(&self.cache_dir)
            .map_err(staging_error("create", &self.cache_dir))?;
        let cached = self
            .cache_dir
            .join(staged.path.file_name().unwrap_or_default());
        std::fs::rename(&staged.path, &cached)
            .map_err(staging_error("move the artifact to", &cached))?;
        if let Err(e) = self
            .store
            .insert(&info.sha256, compiled.validated.bytes, &record)
        {
            let _ = std::fs::remove_file(&cached);
            return Err(e.into());
        }
        passed(path, Stage::Stored, info.sha256);
        Ok(Stored { record, ready })
    }

    /// Admit: into the one ready-map.
    fn admit_stored(&self, stored: Stored, path: LifePath) -> Result<ReadyInfo, UploadError> {
        let hash = stored.ready.info(true).hash;
        let prepared = self.versions()?.admit(stored.ready);
        passed(path, Stage::Admitted, hash);
        Ok(prepared)
    }
}

#[cfg(test)]
mod tests;
