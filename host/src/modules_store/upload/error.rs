//! Why a module was refused, and how many were, per class of refusal.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::modules_store::ModuleStoreError;
use crate::runtime::{LoadError, ValidationError};

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

pub(crate) fn count_refusal(code: &str) {
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
